"""The GPU idle-reclaim policy, with a fake clock and kernel manager (no server, no engine)."""

from __future__ import annotations

import datetime
from dataclasses import dataclass, field
from typing import Any, cast

import pytest
from traitlets import TraitError

from jupyter_gpudev.containers.usage import GPUUsage, GPUUse, HostUsage, ProcessUse
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


class GPUUseOf:
    """What the culler reads of ``GPUUse``: the hosts' GPUs, the kernel's processes on them
    (``sm``: their share of the GPU, ``None``: not sampled), the local host's name."""

    def __init__(
        self,
        kernel_id: str,
        mib: int,
        sm: int | None,
        gpu_busy: int = 0,
        left: tuple[ProcessUse, ...] = (),
    ) -> None:
        self.set(kernel_id, mib, sm, gpu_busy, left)
        self.host_pool = type("Pool", (), {"local_name": "local"})()
        self.broken = False

    def set(
        self,
        kernel_id: str,
        mib: int,
        sm: int | None,
        gpu_busy: int = 0,
        left: tuple[ProcessUse, ...] = (),
    ) -> None:
        """``left``: other processes on the GPU (a job the kernel left running, another's)."""
        process = ProcessUse("gpudev", mib, sm, None, container="c", owner="u", kernel=kernel_id)
        gpu = GPUUsage("GPU-a", 0, "NVIDIA H100", 81559, mib, gpu_busy, (process, *left))
        self.hosts = [HostUsage("local", (gpu,))]

    def usage(self, host: str | None = None) -> list[HostUsage]:
        assert host == "local"  # the kernels' host only
        if self.broken:
            raise RuntimeError("no NVML")
        return self.hosts


async def test_the_warning_says_what_the_kernel_holds_and_for_how_long_its_gpu_did_nothing(
    clock: list[float],
) -> None:
    # Given an idle GPU kernel holding 4.2 GiB of its GPU, which does no work
    km = KernelManager({"gpu": Kernel(Provisioner(("GPU-a",)), at(0))})
    gpus = culler(km, clock)
    gpus.usage = cast(GPUUse, GPUUseOf("gpu", 4300, 0))
    assert await gpus.check() == []
    # When its reclaim is announced 25 minutes of looks later
    clock[0] = T0 + 1500
    gpus.idle_timeout = 1550
    assert await gpus.check() == []
    (reclaim,) = gpus.pending()
    # Then it says what it holds, on which GPU, and since when the GPU is idle
    assert reclaim.holds == "4.2 GiB on NVIDIA H100 (GPU 0), 0% for 25 min"
    assert reclaim.gpu_idle_seconds == 1500
    assert reclaim.to_json()["holds"] == reclaim.holds


async def test_without_gpu_use_the_warning_is_as_before(clock: list[float]) -> None:
    km = KernelManager({"gpu": Kernel(Provisioner(("GPU-a",)), at(0))})
    gpus = culler(km, clock)
    use = GPUUseOf("gpu", 4300, 0)
    use.broken = True
    gpus.usage = cast(GPUUse, use)
    clock[0] = T0 + 590
    assert await gpus.check() == []
    (reclaim,) = gpus.pending()
    assert (reclaim.holds, reclaim.gpu_idle_seconds) == (None, None)


async def test_gpu_idle_reclaim_takes_a_busy_kernel_whose_gpu_does_nothing(
    clock: list[float],
) -> None:
    # Given a kernel busy in a cell (blocked on input()) whose GPU does no work
    km = KernelManager({"gpu": Kernel(Provisioner(("GPU-a",)), at(0), execution_state="busy")})
    use = GPUUseOf("gpu", 1024, None, gpu_busy=0)
    off = culler(km, clock)
    off.usage = cast(GPUUse, use)
    on = culler(km, clock, gpu_idle_timeout=300)
    on.usage = cast(GPUUse, use)
    assert await on.check() == []
    assert await off.check() == []
    # When its GPU stayed idle for 250 s: it is announced (off by default: not)
    clock[0] = T0 + 250
    assert await off.check() == []
    assert off.pending() == []
    assert await on.check() == []
    assert [r.kernel_id for r in on.pending()] == ["gpu"]
    # And keep starts its GPU idle time again
    on.keep("gpu")
    clock[0] = T0 + 400
    assert await on.check() == []
    # But work on its GPU does too, and once it is idle again for long enough, it is reclaimed
    use.set("gpu", 1024, None, gpu_busy=40)
    assert await on.check() == []
    use.set("gpu", 1024, None, gpu_busy=0)
    clock[0] = T0 + 500
    assert await on.check() == []
    clock[0] = T0 + 800
    assert await on.check() == ["gpu"]


def test_0_turns_a_reclaim_off_and_a_look_needs_an_interval() -> None:
    km = KernelManager({})
    # Given 0 for the timeouts and the warning: reclaim off, GPU idleness off, no warning
    off = GPUCuller(km, idle_timeout=0, gpu_idle_timeout=0, warning_seconds=0)
    assert (off.idle_timeout, off.gpu_idle_timeout, off.warning_seconds) == (0, 0, 0)
    # Then a negative one means nothing and is refused, as is an interval of 0 (a loop that
    # never rests)
    for name in ("idle_timeout", "gpu_idle_timeout", "warning_seconds"):
        with pytest.raises(TraitError, match=rf"'{name}' trait .* not be less than 0"):
            GPUCuller(km, **dict[str, Any]({name: -1}))
    with pytest.raises(TraitError, match=r"'check_interval' trait .* should be more than 0"):
        GPUCuller(km, check_interval=0)


async def test_gpu_idle_reclaim_counts_a_job_the_kernel_left_running_in_its_container(
    clock: list[float],
) -> None:
    # Given a kernel whose own process does nothing on its GPU while a job it started
    # (`!nohup python train.py &`: re-parented to the container's init, so left behind)
    # works on it, in the kernel's container: stopping that container would kill the job
    km = KernelManager({"gpu": Kernel(Provisioner(("GPU-a",)), at(0), execution_state="busy")})
    job = ProcessUse("gpudev", 30000, 95, 40, container="c", owner="u", orphan=True)
    use = GPUUseOf("gpu", 1024, 0, gpu_busy=95, left=(job,))
    on = culler(km, clock, gpu_idle_timeout=300)
    on.usage = cast(GPUUse, use)
    assert await on.check() == []
    # When it has worked so for longer than the GPU idle timeout
    clock[0] = T0 + 1000
    # Then the kernel is neither announced nor reclaimed
    assert await on.check() == []
    assert on.pending() == []
    # But a busy process of another container on the same GPU is not the kernel's work
    other = ProcessUse("gpudev", 30000, 95, 40, container="d", owner="u", orphan=True)
    use.set("gpu", 1024, 0, gpu_busy=95, left=(other,))
    assert await on.check() == []
    clock[0] = T0 + 1400
    assert await on.check() == ["gpu"]
