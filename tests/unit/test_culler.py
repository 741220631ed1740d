"""The GPU idle-reclaim policy, with a fake clock and kernel manager (no server, no engine)."""

from __future__ import annotations

import datetime
from dataclasses import dataclass, field
from typing import Any

import pytest

from jupyter_gpudev.errors import NotFound
from jupyter_gpudev.kernels.culler import GPUCuller
from jupyter_gpudev.kernels.provisioner import GPUDevProvisioner

T0 = 1_800_000_000.0


class Provisioner(GPUDevProvisioner):
    """A gpudev provisioner whose GPUs and timeout are given, not read from a ledger."""

    def __init__(
        self, gpus: tuple[str, ...], timeout: float | None = None, pod_gpus: int = 0
    ) -> None:
        super().__init__(kernel_id="k", kernel_spec=None)
        self._gpus = gpus
        self._timeout = timeout
        self._dedicated = True  # a kernel in a container (or pod) of its own
        self._pod_gpus = pod_gpus

    def gpu_uuids(self) -> tuple[str, ...]:
        return self._gpus

    def idle_timeout(self) -> float | None:
        return self._timeout


@dataclass
class Kernel:
    provisioner: Any
    last_activity: datetime.datetime
    execution_state: str = "idle"


@dataclass
class KernelManager:
    kernels: dict[str, Kernel] = field(default_factory=dict)
    shut_down: list[str] = field(default_factory=list)

    def list_kernel_ids(self) -> list[str]:
        return list(self.kernels)

    def get_kernel(self, kernel_id: str) -> Kernel:
        return self.kernels[kernel_id]

    async def shutdown_kernel(self, kernel_id: str) -> None:
        self.shut_down.append(kernel_id)
        del self.kernels[kernel_id]


def at(seconds: float) -> datetime.datetime:
    return datetime.datetime.fromtimestamp(T0 + seconds, tz=datetime.timezone.utc)


@pytest.fixture
def clock() -> list[float]:
    return [T0]


def culler(km: KernelManager, clock: list[float], **traits: Any) -> GPUCuller:
    return GPUCuller(km, clock=lambda: clock[0], idle_timeout=600, warning_seconds=60, **traits)


async def test_an_idle_gpu_kernel_is_warned_then_reclaimed(clock: list[float]) -> None:
    # Given a GPU kernel last active at T0
    km = KernelManager({"gpu": Kernel(Provisioner(("GPU-a",)), at(0))})
    gpus = culler(km, clock)
    # Before the warning window: nothing
    clock[0] = T0 + 500
    assert gpus.pending() == []
    # In the warning window: announced, with when
    clock[0] = T0 + 560
    (reclaim,) = gpus.pending()
    assert (reclaim.kernel_id, reclaim.reclaim_at, reclaim.idle_seconds) == ("gpu", T0 + 600, 560)
    assert await gpus.check() == []
    # Past the timeout: reclaimed, its container kept
    clock[0] = T0 + 600
    assert await gpus.check() == ["gpu"]
    assert km.shut_down == ["gpu"]


async def test_a_kernel_in_a_pod_of_its_own_is_reclaimed_by_its_gpu_count(
    clock: list[float],
) -> None:
    # Given a kernel whose own pod the scheduler gave 2 GPUs (a cluster names no UUIDs)
    km = KernelManager({"pod": Kernel(Provisioner((), pod_gpus=2), at(0))})
    gpus = culler(km, clock)
    clock[0] = T0 + 560
    (reclaim,) = gpus.pending()
    assert (reclaim.gpus, reclaim.gpu_uuids) == (2, ())
    clock[0] = T0 + 600
    assert await gpus.check() == ["pod"]


async def test_busy_kernels_cpu_kernels_and_other_kernels_are_left_alone(
    clock: list[float],
) -> None:
    km = KernelManager(
        {
            "busy": Kernel(Provisioner(("GPU-a",)), at(0), execution_state="busy"),
            "cpu": Kernel(Provisioner(()), at(0)),
            "local": Kernel(object(), at(0)),
        }
    )
    gpus = culler(km, clock)
    clock[0] = T0 + 10_000
    assert gpus.pending() == []
    assert await gpus.check() == []


async def test_keep_restarts_the_idle_clock(clock: list[float]) -> None:
    km = KernelManager({"gpu": Kernel(Provisioner(("GPU-a",)), at(0))})
    gpus = culler(km, clock)
    clock[0] = T0 + 590
    assert len(gpus.pending()) == 1
    gpus.keep("gpu")
    assert gpus.pending() == []
    clock[0] = T0 + 590 + 600
    assert await gpus.check() == ["gpu"]


async def test_the_environment_timeout_wins_and_zero_turns_reclaim_off(
    clock: list[float],
) -> None:
    km = KernelManager(
        {
            "short": Kernel(Provisioner(("GPU-a",), timeout=120), at(0)),
            "never": Kernel(Provisioner(("GPU-b",), timeout=0), at(0)),
        }
    )
    gpus = culler(km, clock)
    clock[0] = T0 + 120
    assert await gpus.check() == ["short"]
    clock[0] = T0 + 100_000
    assert await gpus.check() == []


def test_keep_of_an_unknown_kernel_is_not_found(clock: list[float]) -> None:
    with pytest.raises(NotFound):
        culler(KernelManager(), clock).keep("nope")
