"""Which live kernels of this Jupyter server run in which dev container.

``GPUDevProvisioner`` adds a kernel here once it has started in a container and removes it at
its final cleanup (a restart keeps it). The server's kernel manager, when one is attached, is
the authority on which kernels still live (a kernel it dropped without a cleanup, e.g. one that
died for good, is no longer counted) and on their ``last_activity``. ``DevContainers`` reads it
to report each container's kernels; the CLI, a separate process, has none.

Each kernel's host PID (``KernelProcesses.host_pid``, the engine's word) tells GPU use which
GPU processes are its (``processes``); a kernel that ended is remembered a while
(``ENDED_KEPT``, ``ENDED_SECONDS``), so that a process it left holding GPU memory is reported
as left behind.

In the shared service, one registry holds the kernels it runs for every client, each under
its owner (``scoped``): a user's view adds, finds and ends its owner's kernels only, by the id
the client's server gave them, while a container's kernels and a host's processes are every
owner's. There is no kernel manager there: the service does not see its clients' kernels'
messages, so each client tells it its kernel's activity (``record_activity``).

Plain data and a lock: nothing here talks to an engine, and every method is safe from any
thread.
"""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from ..containers.hooks import LiveKernel

#: How many ended kernels are remembered, and for how long (seconds).
ENDED_KEPT = 256
ENDED_SECONDS = 24 * 3600.0


@dataclass(frozen=True)
class KernelPlacement:
    """Where one kernel runs: ``container`` (its gpudev name) on ``host``."""

    kernel_id: str
    host: str
    container: str
    #: The container was made for this kernel (and ends with it); else kernels share it.
    dedicated: bool
    #: Its process's PID on the host (``KernelProcesses.host_pid``); ``None``: not known.
    host_pid: int | None = None


@dataclass(frozen=True)
class KernelUsage:
    """The live kernels of one container: how many, and the latest activity among them."""

    count: int
    last_activity: datetime | None


#: A kernel in the registry's store: its owner (``""`` in a server of one user) and id.
_Key = tuple[str, str]


@dataclass
class _Store:
    """What every scoped view of one registry shares."""

    placements: dict[_Key, KernelPlacement] = field(default_factory=dict)
    #: Kernels that ended with a known host PID, oldest first, with when they ended.
    ended: dict[_Key, tuple[KernelPlacement, float]] = field(default_factory=dict)
    #: Live kernels' last activity as told (``record_activity``), without a kernel manager.
    activity: dict[_Key, datetime] = field(default_factory=dict)
    lock: threading.Lock = field(default_factory=threading.Lock)


class KernelRegistry:
    """The gpudev kernels of one server, by id. ``kernel_manager``: the server's
    ``MultiKernelManager`` (``None``: every registered kernel counts, its activity as told)."""

    def __init__(
        self, kernel_manager: Any = None, *, owner: str = "", store: _Store | None = None
    ) -> None:
        self.kernel_manager = kernel_manager
        #: Whose kernels this view adds, finds and ends (``scoped``).
        self.owner = owner
        self._store = store if store is not None else _Store()
        self._placements = self._store.placements
        self._ended = self._store.ended
        self._lock = self._store.lock

    def scoped(self, owner: str) -> KernelRegistry:
        """The same kernels as ``owner``'s view (the shared service's users): it adds, ends
        and finds (``get``, ``exists``) their kernels only; ``usage`` and ``processes`` count
        every owner's."""
        return KernelRegistry(self.kernel_manager, owner=owner, store=self._store)

    def add(self, placement: KernelPlacement) -> None:
        """Record (or move) a kernel: it runs in ``placement.container`` now."""
        key = (self.owner, placement.kernel_id)
        with self._lock:
            before = self._placements.get(key)
            self._placements[key] = placement
            self._ended.pop(key, None)
            if before is not None and before.host_pid not in (None, placement.host_pid):
                self._end(key, before)  # restarted: its former process ended

    def remove(self, kernel_id: str) -> None:
        """The kernel ended (removing an unknown one does nothing)."""
        key = (self.owner, kernel_id)
        with self._lock:
            placement = self._placements.pop(key, None)
            self._store.activity.pop(key, None)
            if placement is not None:
                self._end(key, placement)

    def record_activity(self, kernel_id: str, stamp: datetime) -> None:
        """A live kernel's last activity, as its client saw it (the shared service); a kernel
        not registered is left unknown."""
        key = (self.owner, kernel_id)
        with self._lock:
            if key in self._placements:
                self._store.activity[key] = stamp

    def _end(self, key: _Key, placement: KernelPlacement) -> None:
        """Remember an ended kernel's process (the lock held)."""
        if placement.host_pid is None:
            return
        self._ended.pop(key, None)
        self._ended[key] = (placement, time.monotonic())
        while len(self._ended) > ENDED_KEPT:
            del self._ended[next(iter(self._ended))]

    def processes(self, host: str) -> list[LiveKernel]:
        """The live kernels on ``host`` with their host PIDs and activity, and those that
        ended within ``ENDED_SECONDS`` (``ended``) (``containers.hooks.KernelProcessTracking``)."""
        now = time.monotonic()
        with self._lock:
            for key, (_, when) in list(self._ended.items()):
                if now - when > ENDED_SECONDS:
                    del self._ended[key]
            live = [(k, p) for k, p in self._placements.items() if p.host == host]
            ended = [p for p, _ in self._ended.values() if p.host == host]
        found = [
            LiveKernel(p.kernel_id, p.host, p.container, p.host_pid, self._activity(key))
            for key, p in live
            if self._alive(p.kernel_id)
        ]
        found += [
            LiveKernel(p.kernel_id, p.host, p.container, p.host_pid, ended=True) for p in ended
        ]
        return found

    def exists(self, kernel_id: str) -> bool:
        """Whether the server has this kernel at all (a gpudev one or not)."""
        if self.kernel_manager is None:
            return self.get(kernel_id) is not None
        return kernel_id in self.kernel_manager or kernel_id in self._starting()

    def get(self, kernel_id: str) -> KernelPlacement | None:
        """Where a live kernel runs, or ``None`` (unknown, ended, or not a gpudev kernel)."""
        with self._lock:
            placement = self._placements.get((self.owner, kernel_id))
        if placement is None or not self._alive(kernel_id):
            return None
        return placement

    def usage(self, host: str, container: str) -> KernelUsage:
        """The live kernels in ``container`` of ``host``."""
        with self._lock:
            keys = [
                key
                for key, p in self._placements.items()
                if p.host == host and p.container == container
            ]
        live = [key for key in keys if self._alive(key[1])]
        stamps = [s for s in map(self._activity, live) if s is not None]
        return KernelUsage(len(live), max(stamps) if stamps else None)

    def _starting(self) -> Any:
        # A kernel is in the manager's pending map while it starts (our provisioner registers
        # it then), in its map of kernels once started; a restart keeps it in the latter.
        return getattr(self.kernel_manager, "_pending_kernels", None) or {}

    def _alive(self, kernel_id: str) -> bool:
        if self.kernel_manager is None:
            return True
        if kernel_id in self.kernel_manager or kernel_id in self._starting():
            return True
        # Dropped by the server without a cleanup (it died for good): forget it.
        self.remove(kernel_id)
        return False

    def _activity(self, key: _Key) -> datetime | None:
        if self.kernel_manager is None:
            with self._lock:
                return self._store.activity.get(key)
        try:
            kernel = self.kernel_manager.get_kernel(key[1])
        except KeyError:
            return None
        stamp = getattr(kernel, "last_activity", None)
        return stamp if isinstance(stamp, datetime) else None
