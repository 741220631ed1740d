"""What the container lifecycle needs from the parts above it, as protocols.

The lifecycle keeps its invariants (nothing lost on remove, kernel counts in the listing) but
does not import change capture or the kernel registry: the services builder hands it objects
that fit these protocols (``changes.tracker.ChangeTracker``, ``kernels.live.KernelRegistry``).
GPU use (``usage.GPUUse``) is told the same way which kernel's process is which
(``KernelProcessTracking``).
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Any, Protocol

from docker.models.containers import Container

from ..engine import Host


class ChangeTracking(Protocol):
    """A container's uncommitted changes, as the commit side sees them."""

    def record_baseline(self, container: Container) -> None:
        """Take the container's own baseline (after its lifecycle commands ran)."""

    def uncommitted(self, name: str, host: Host, container: Container) -> list[str]:
        """What removing the (stopped) container would lose; empty: nothing."""
        ...

    def count(
        self, host: Host, container: Container, *, compute: bool, wait: bool = True
    ) -> int | None:
        """How many change items a commit would list (``None``: not counted; with ``wait``
        off, a container with no kept count is not counted now)."""
        ...

    def forget(self, container_id: str) -> None:
        """Drop what is kept for a removed container."""

    def record_pod_baseline(self, host: Host, pod: dict[str, Any]) -> None:
        """Probe a pod's packages after its lifecycle commands (what its changes are
        counted against)."""

    def uncommitted_pod(self, host: Host, pod: dict[str, Any]) -> list[str]:
        """What deleting the pod would lose; empty: nothing."""
        ...

    def forget_pod(self, uid: str) -> None:
        """Drop what is kept for a deleted pod."""


class KernelPlacementView(Protocol):
    """Where one kernel runs."""

    @property
    def host(self) -> str: ...
    @property
    def container(self) -> str: ...
    @property
    def dedicated(self) -> bool: ...


class KernelUsageView(Protocol):
    """The live kernels of one container."""

    @property
    def count(self) -> int: ...
    @property
    def last_activity(self) -> datetime | None: ...


class KernelTracking(Protocol):
    """The server's gpudev kernels (absent outside a server)."""

    def get(self, kernel_id: str) -> KernelPlacementView | None: ...
    def exists(self, kernel_id: str) -> bool: ...
    def usage(self, host: str, container: str) -> KernelUsageView: ...


@dataclass(frozen=True)
class LiveKernel:
    """A kernel's process as the server started it: what tells its GPU processes."""

    kernel_id: str
    host: str
    #: Its dev container's key (``DevContainerInfo.key``).
    container: str
    #: Its process's PID on the host, as the engine reported it when the exec started (the
    #: container cannot forge it); ``None``: not known (a pod, or not read yet).
    host_pid: int | None
    last_activity: datetime | None = None
    #: It ended (recently): a GPU process still under its PID was left behind.
    ended: bool = False


class KernelProcessTracking(Protocol):
    """The host PIDs of the server's gpudev kernels (absent outside a server)."""

    def processes(self, host: str) -> list[LiveKernel]:
        """The live kernels on ``host``, and those that ended lately (``ended``)."""
        ...
