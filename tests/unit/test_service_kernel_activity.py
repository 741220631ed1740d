"""A client-mode kernel's activity, which only its client's server sees: the client tells the
shared service (``kernels.remote``), which keeps it per owner in its kernel registry, its idle
time in GPU use (``shared.kernels``, ``kernels.live``). No engine: the kernels are registered
as their launch would."""

from __future__ import annotations

import asyncio
import logging
from datetime import datetime, timedelta, timezone
from types import SimpleNamespace
from typing import Any

import pytest
from traitlets import Any as AnyTrait
from traitlets.config import LoggingConfigurable

from jupyter_gpudev.errors import BadRequest, NotFound
from jupyter_gpudev.kernels import remote
from jupyter_gpudev.kernels.live import KernelPlacement, KernelRegistry
from jupyter_gpudev.kernels.placements import PLACEMENTS
from jupyter_gpudev.kernels.remote import ServiceError, ServiceKernelProvisioner
from jupyter_gpudev.shared.kernels import KernelProcesses, _service_kernel

LOG = logging.getLogger("gpudev-test")
KEY = "5e3c1a0f9b7d4e2a8c6b1d3f5a7e9c0b"


def service_with(kernels: KernelRegistry, *owned: tuple[str, str]) -> KernelProcesses:
    """The service's kernel processes, with a running kernel of each (owner, id)."""
    processes = KernelProcesses(LOG)
    for owner, kernel_id in owned:
        view: Any = SimpleNamespace(kernels=kernels.scoped(owner))
        kernel = _service_kernel(
            view, kernel_id, kernel_name="gpudev-default", key=KEY, scheme="hmac-sha256", log=LOG
        )
        processes._kernels[(owner, kernel_id)] = kernel
        view.kernels.add(KernelPlacement(kernel_id, "local", f"box-{owner}", False, 100))
    return processes


def test_a_clients_report_is_its_kernels_activity_for_its_owner_only() -> None:
    # Given the service running alice's kernel k1
    kernels = KernelRegistry()
    processes = service_with(kernels, ("alice", "k1"))
    (before,) = kernels.processes("local")
    assert before.last_activity is None
    # When her server tells its activity
    stamp = datetime.now(timezone.utc) - timedelta(minutes=5)
    asyncio.run(processes.activity("alice", "k1", {"last_activity": stamp.isoformat()}))
    # Then the kernel has it (its idle time in GPU use)
    (after,) = kernels.processes("local")
    assert after.last_activity == stamp
    # And bob cannot set it: the unknown kernel's 404
    with pytest.raises(NotFound, match="No kernel 'k1' of yours"):
        asyncio.run(processes.activity("bob", "k1", {"last_activity": stamp.isoformat()}))
    # And a time to come is taken for now, a naive one for UTC
    ahead = datetime.now(timezone.utc) + timedelta(days=1)
    asyncio.run(processes.activity("alice", "k1", {"last_activity": ahead.isoformat()}))
    (now,) = kernels.processes("local")
    assert now.last_activity is not None
    assert now.last_activity <= datetime.now(timezone.utc)
    naive = datetime(2026, 1, 2, 3, 4, 5)
    asyncio.run(processes.activity("alice", "k1", {"last_activity": naive.isoformat()}))
    assert kernels.processes("local")[0].last_activity == naive.replace(tzinfo=timezone.utc)


@pytest.mark.parametrize("body", [{}, {"last_activity": 5}, {"last_activity": "yesterday"}, []])
def test_a_report_that_is_no_time_is_refused(body: Any) -> None:
    processes = service_with(KernelRegistry(), ("alice", "k1"))
    with pytest.raises(BadRequest, match="last_activity"):
        asyncio.run(processes.activity("alice", "k1", body))


def test_an_ended_kernels_activity_is_forgotten() -> None:
    # Given alice's kernel with its activity told, then ended
    kernels = KernelRegistry()
    processes = service_with(kernels, ("alice", "k1"))
    stamp = datetime.now(timezone.utc)
    asyncio.run(processes.activity("alice", "k1", {"last_activity": stamp.isoformat()}))
    kernels.scoped("alice").remove("k1")
    # Then a report for it is not kept (only a registered kernel has an activity)
    kernels.scoped("alice").record_activity("k1", stamp)
    assert kernels._store.activity == {}


class Manager(LoggingConfigurable):
    """The client's kernel manager, as far as its provisioner reads it."""

    last_activity = AnyTrait()


class Told:
    """The service as a client's provisioner reaches it: what it was told."""

    def __init__(self, fail: bool = False) -> None:
        self.told: list[tuple[str, datetime]] = []
        self.fail = fail

    async def poll(self, kernel_id: str) -> int | None:
        del kernel_id
        return None

    async def activity(self, kernel_id: str, last_activity: datetime) -> None:
        if self.fail:
            raise ServiceError(404, "Not Found")
        self.told.append((kernel_id, last_activity))


def test_a_clients_polls_tell_the_service_its_kernels_activity_when_it_changed(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # Given a client-mode kernel whose server saw activity
    service = Told()
    monkeypatch.setattr(PLACEMENTS, "service", service)
    manager = Manager(last_activity=datetime(2026, 1, 1, tzinfo=timezone.utc))
    kernel = ServiceKernelProvisioner(kernel_id="k1", parent=manager)
    kernel._launched = True
    # When it is polled, it tells the service once
    for _ in range(3):
        assert asyncio.run(kernel.poll()) is None
    assert service.told == [("k1", manager.last_activity)]
    # When there is new activity, it is told once ACTIVITY_EVERY has passed, not before
    manager.last_activity = datetime(2026, 1, 1, 0, 1, tzinfo=timezone.utc)
    asyncio.run(kernel.poll())
    assert len(service.told) == 1
    kernel._activity_told_at -= remote.ACTIVITY_EVERY  # as if that much time had passed
    asyncio.run(kernel.poll())
    assert service.told[-1] == ("k1", manager.last_activity)
    # And a service that cannot take it (an older one) does not fail the poll
    monkeypatch.setattr(PLACEMENTS, "service", Told(fail=True))
    manager.last_activity = datetime(2026, 1, 1, 0, 2, tzinfo=timezone.utc)
    kernel._activity_told_at -= remote.ACTIVITY_EVERY  # as if that much time had passed
    assert asyncio.run(kernel.poll()) is None


class Asked(Told):
    """The service, counting the polls it is asked and the cleanups."""

    def __init__(self) -> None:
        super().__init__()
        self.polls = 0

    async def poll(self, kernel_id: str) -> int | None:
        del kernel_id
        self.polls += 1
        return None

    async def cleanup(self, kernel_id: str, **_: Any) -> None:
        del kernel_id


def test_a_launched_kernel_is_asked_after_without_a_restarter(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # Given a client-mode kernel in a server that never polls it (autorestart off: no
    # restarter), ASK_EVERY short
    service = Asked()
    monkeypatch.setattr(PLACEMENTS, "service", service)
    monkeypatch.setattr(remote, "ASK_EVERY", 0.05)
    manager = Manager()
    manager.session = SimpleNamespace(key=b"k")  # type: ignore[attr-defined]
    kernel = ServiceKernelProvisioner(kernel_id="k1", parent=manager)
    kernel._connection = {"ip": "127.0.0.1"}
    kernel._container_name = "box"

    async def scenario() -> tuple[int, int]:
        await kernel.launch_kernel(["x"])
        # When it runs for a while, Then the service is asked after it all the same
        await asyncio.sleep(0.4)
        asked = service.polls
        # And once it is shut down, no more
        await kernel.cleanup()
        await asyncio.sleep(0.2)
        return asked, service.polls

    asked, after = asyncio.run(scenario())
    assert asked >= 3
    assert after == asked
