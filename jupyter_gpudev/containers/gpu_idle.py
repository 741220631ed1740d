"""Dev containers whose GPUs do no work: stopped (kept, with their changes), GPUs freed.

A kernel's GPUs are reclaimed by ``kernels.culler.GPUCuller`` (its idle time, a warning in
Lab, "keep"). A dev container started with GPUs (from the panel, ``jupyter gpudev start
--gpus``) holds its lease for as long as it runs, used or not: forgotten, it keeps a GPU from
everyone else. With ``c.GPUIdleContainers.timeout`` set, a running dev container whose GPUs
did no work at any look for that long is stopped and kept, its lease released; the
administrator's setting where the shared service runs it (users cannot turn it off there).

Work is read from GPU use (``containers.usage``, one read per host and look, as the panel's):
a leased GPU worked if its utilisation, or any of its processes' sampled share, was above 0.
A GPU whose use cannot be read (a Kubernetes host, a host that does not answer) is never
counted idle. Containers made for one kernel are left to the kernel's reclaim.
``warning_seconds`` before the stop, the container's listing says when it will be stopped
(the panel shows it on the container's row; ``jupyter gpudev ls`` through the shared
service); once stopped, it says why until it runs again.
"""

from __future__ import annotations

import asyncio
import contextlib
import datetime
import time
from collections.abc import Callable, Iterable
from typing import TYPE_CHECKING, Any

from traitlets import Float
from traitlets.config import LoggingConfigurable

from ..errors import GPUDevError
from ..leasing import Lease
from ..traits import PositiveFloat
from .idle_notes import IdleNotes
from .model import DevContainerInfo
from .usage import GPUUsage, HostUsage

if TYPE_CHECKING:
    from .lifecycle import DevContainers
    from .usage import GPUUse

SETTING = "c.GPUIdleContainers.timeout"
#: What a look at one container says when it stopped it.
STOPPED = "stopped"


def gpu_working(gpu: GPUUsage) -> bool | None:
    """Whether ``gpu`` did work: its utilisation, or a process's sampled share, above 0;
    ``None``: neither is known."""
    shares = [p.sm_percent for p in gpu.processes if p.sm_percent is not None]
    utilisation = gpu.utilization_percent
    if any(share > 0 for share in shares) or (utilisation or 0) > 0:
        return True
    if utilisation is None and not shares:
        return None
    return False


def lease_working(lease: Lease, host: HostUsage | None) -> bool | None:
    """Whether any GPU of ``lease`` did work on ``host`` (as read); ``None``: none did, but
    not every one could be read."""
    if host is None:
        return None
    by_uuid = {gpu.uuid: gpu for gpu in host.gpus}
    states = [gpu_working(by_uuid[uuid]) if uuid in by_uuid else None for uuid in lease.gpu_uuids]
    if any(states):
        return True
    if not states or None in states:
        return None
    return False


def _minutes(seconds: float) -> str:
    minutes = max(0, int(seconds // 60))
    return f"{minutes} min" if minutes < 120 else f"{minutes // 60} h {minutes % 60:02d} min"


def _at(wall: float) -> str:
    return datetime.datetime.fromtimestamp(wall, datetime.timezone.utc).strftime("%H:%M UTC")


class GPUIdleContainers(LoggingConfigurable):
    """Stops running dev containers whose GPUs did no work for ``timeout``. Configure with
    ``c.GPUIdleContainers.*``."""

    timeout = Float(
        0.0,
        min=0.0,
        help="""Seconds a running dev container may hold GPUs that do no work (0 %
        utilization at every look, every check_interval) before it is stopped, kept with its
        changes, and its GPUs freed. Containers made for one kernel are left to the kernel's
        reclaim (c.GPUCuller). GPU use must be readable (the local engine, ssh:// hosts):
        elsewhere nothing is stopped. In the shared service this is the administrator's
        setting, for every user's containers. 0 or more; 0 (the default) turns it off.""",
    ).tag(config=True)

    warning_seconds = Float(
        600.0,
        min=0.0,
        help="""Seconds before the stop that the container's listing (its row in the panel;
        jupyter gpudev ls through the shared service) says when it will be stopped unless its
        GPUs work (0 or more).""",
    ).tag(config=True)

    check_interval = PositiveFloat(
        60.0,
        help="Seconds between two looks at the dev containers' GPU use (more than 0).",
    ).tag(config=True)

    def __init__(
        self,
        containers: DevContainers,
        usage: GPUUse,
        monotonic: Callable[[], float] = time.monotonic,
        clock: Callable[[], float] = time.time,
        **kwargs: Any,
    ) -> None:
        super().__init__(**kwargs)
        self.containers = containers
        self.usage = usage
        self.notes: IdleNotes = containers.idle_notes
        self._monotonic = monotonic
        self._clock = clock
        #: Per lease id: since when (monotonic) its GPUs did no work at any look.
        self._quiet: dict[str, float] = {}
        self._task: asyncio.Task[None] | None = None

    def read(self, hosts: Iterable[str]) -> dict[str, HostUsage]:
        """GPU use of ``hosts``, once each; a host that cannot be read is left out."""
        found: dict[str, HostUsage] = {}
        for name in sorted(set(hosts)):
            try:
                found.update((read.host, read) for read in self.usage.usage(name))
            except Exception as exc:  # never counted idle: not read
                self.log.debug("gpudev: GPU use of %s not readable for idle GPUs: %r", name, exc)
        return found

    def look(self) -> list[str]:
        """One look (blocking): note the leases whose GPUs did no work, warn of the stops to
        come, stop the containers past ``timeout``. Returns the keys of those stopped."""
        if self.timeout <= 0:
            self._quiet.clear()
            self.notes.set_pending({})
            return []
        leases = self.containers.ledger.active()
        usage = self.read(lease.host for lease in leases)
        now = self._monotonic()
        quiet = {
            lease.lease_id: self._quiet.get(lease.lease_id, now)
            for lease in leases
            if lease_working(lease, usage.get(lease.host)) is False
        }
        self._quiet = quiet
        pending: dict[tuple[str, str], str] = {}
        stopped: list[str] = []
        for lease in leases:
            since = quiet.get(lease.lease_id)
            if since is None or self.timeout - (now - since) > self.warning_seconds:
                continue
            try:
                note = self._look_at(lease, now - since)
            except Exception:  # one container's failure is not every other one's
                self.log.exception("gpudev: the GPU-idle look at %s failed", lease.container)
                continue
            if note == STOPPED:
                stopped.append(lease.container)
            elif note:
                pending[(lease.host, lease.container)] = note
        self.notes.set_pending(pending)
        return stopped

    def _look_at(self, lease: Lease, idle: float) -> str | None:
        """Warn of (the note), or do (``STOPPED``), the stop of the lease's container, idle
        for ``idle`` seconds; ``None``: neither (not a running dev container of that lease)."""
        info = self._running_dev_container(lease)
        if info is None:
            return None
        if idle < self.timeout:
            at = self._clock() + (self.timeout - idle)
            kernels = info.kernels or 0
            return (
                f"Its GPUs have done no work for {_minutes(idle)}: it will be stopped (kept, "
                f"with its changes) and its GPUs freed at {_at(at)} unless they do ({SETTING})"
                + (f"; its {kernels} kernel(s) will end with it" if kernels else "")
            )
        return STOPPED if self._stop(lease, idle) else None

    def _running_dev_container(self, lease: Lease) -> DevContainerInfo | None:
        """The lease's container if it runs and is not made for one kernel."""
        name = self.containers.shown_name(lease.container, lease.owner)
        try:
            info = self.containers.get(name, lease.host)
        except GPUDevError as err:
            self.log.debug("gpudev: %s on %s not read: %s", name, lease.host, err.message)
            return None
        # (the same lease: one stopped and started again since the reading is not idle)
        held = info.state == "running" and info.lease_id == lease.lease_id
        return info if held and info.kernel_id is None else None

    def _stop(self, lease: Lease, idle: float) -> bool:
        name = self.containers.shown_name(lease.container, lease.owner)
        reason = f"its GPUs did no work for {_minutes(idle)} ({SETTING})"
        still = self.containers.ledger.for_container(lease.host, lease.container)
        if still is None or still.lease_id != lease.lease_id:
            return False  # stopped, or stopped and started again, since the reading
        try:
            self.containers.stop(name, lease.host)
        except GPUDevError as err:
            self.log.warning("gpudev: stopping GPU-idle %s failed: %s", name, err.message)
            return False
        self._quiet.pop(lease.lease_id, None)
        self.notes.stopped(
            lease.host,
            lease.container,
            f"Stopped at {_at(self._clock())} and kept, its GPUs freed: {reason}",
        )
        self.log.info(
            "gpudev: stopped dev container %s of %s on %s (kept), its GPUs %s freed: %s",
            name,
            lease.owner,
            lease.host,
            ", ".join(lease.gpu_uuids),
            reason,
        )
        return True

    def start(self) -> None:
        if self._task is None:
            self._task = asyncio.ensure_future(self._run())

    async def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
            self._task = None

    async def _run(self) -> None:
        loop = asyncio.get_running_loop()
        while True:
            await asyncio.sleep(self.check_interval)
            if self.timeout <= 0:
                continue
            try:
                await loop.run_in_executor(None, self.look)
            except Exception:
                self.log.exception("gpudev: the look at GPU-idle dev containers failed")
