"""Which live kernels of this Jupyter server run in which dev container.

``GPUDevProvisioner`` adds a kernel here once it has started in a container and removes it at
its final cleanup (a restart keeps it). The server's kernel manager, when one is attached, is
the authority on which kernels still live (a kernel it dropped without a cleanup, e.g. one that
died for good, is no longer counted) and on their ``last_activity``. ``DevContainers`` reads it
to report each container's kernels; the CLI, a separate process, has none.

Plain data and a lock: nothing here talks to an engine, and every method is safe from any
thread.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass
from datetime import datetime
from typing import Any


@dataclass(frozen=True)
class KernelPlacement:
    """Where one kernel runs: ``container`` (its gpudev name) on ``host``."""

    kernel_id: str
    host: str
    container: str
    #: The container was made for this kernel (and ends with it); else kernels share it.
    dedicated: bool


@dataclass(frozen=True)
class KernelUsage:
    """The live kernels of one container: how many, and the latest activity among them."""

    count: int
    last_activity: datetime | None


class KernelRegistry:
    """The gpudev kernels of one server, by id. ``kernel_manager``: the server's
    ``MultiKernelManager`` (``None``: every registered kernel counts, activity unknown)."""

    def __init__(self, kernel_manager: Any = None) -> None:
        self.kernel_manager = kernel_manager
        self._placements: dict[str, KernelPlacement] = {}
        self._lock = threading.Lock()

    def add(self, placement: KernelPlacement) -> None:
        """Record (or move) a kernel: it runs in ``placement.container`` now."""
        with self._lock:
            self._placements[placement.kernel_id] = placement

    def remove(self, kernel_id: str) -> None:
        """The kernel ended (removing an unknown one does nothing)."""
        with self._lock:
            self._placements.pop(kernel_id, None)

    def exists(self, kernel_id: str) -> bool:
        """Whether the server has this kernel at all (a gpudev one or not)."""
        if self.kernel_manager is None:
            return self.get(kernel_id) is not None
        return kernel_id in self.kernel_manager or kernel_id in self._starting()

    def get(self, kernel_id: str) -> KernelPlacement | None:
        """Where a live kernel runs, or ``None`` (unknown, ended, or not a gpudev kernel)."""
        with self._lock:
            placement = self._placements.get(kernel_id)
        if placement is None or not self._alive(kernel_id):
            return None
        return placement

    def usage(self, host: str, container: str) -> KernelUsage:
        """The live kernels in ``container`` of ``host``."""
        with self._lock:
            ids = [
                p.kernel_id
                for p in self._placements.values()
                if p.host == host and p.container == container
            ]
        live = [kernel_id for kernel_id in ids if self._alive(kernel_id)]
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

    def _activity(self, kernel_id: str) -> datetime | None:
        if self.kernel_manager is None:
            return None
        try:
            kernel = self.kernel_manager.get_kernel(kernel_id)
        except KeyError:
            return None
        stamp = getattr(kernel, "last_activity", None)
        return stamp if isinstance(stamp, datetime) else None
