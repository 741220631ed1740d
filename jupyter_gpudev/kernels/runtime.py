"""Where a kernel's process runs, whatever the host: ``KernelProcesses`` is what
the provisioner and the warm pool do to the kernel processes of one dev container (the image's
kernel argv, a start, its exit, signals, its output, its runtime files, and where this server
reaches its ports). ``process.ContainerProcesses`` does it in a Docker container through the
engine's exec, ``pods.PodProcesses`` in a pod on a Kubernetes host through the cluster's;
``processes_type`` is the one place that says which a dev container gets.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, ClassVar, Protocol

from ..containers import DevContainers
from ..engine import Host
from .pods import PodProcesses
from .process import ContainerProcesses


class KernelProcesses(Protocol):
    """The kernel processes of one dev container. A kernel is named by its runtime id (the
    stem of its runtime files: connection, pid and log, ``process.runtime_files``) and by the
    handle ``start`` returned, which its provisioner keeps across a server's restart."""

    #: Whether warm kernels (``kernels.warm``) are kept ready in it.
    keeps_warm: ClassVar[bool]
    #: Whether a kernel's exit code is known (else only that it ended: 1).
    exit_codes: ClassVar[bool]
    #: Whether the dev container is stopped and kept when its kernels end (and resumed for the
    #: next); if not (a pod) it is deleted, unless files outside its workspace changed.
    stopped_and_kept: ClassVar[bool]

    @property
    def host(self) -> Host:
        """Its host."""

    @property
    def instance(self) -> str:
        """The dev container as it runs now (a kernel started before it restarted is gone)."""

    @property
    def working_dir(self) -> str | None:
        """Its working folder, ``None`` where a kernel starts in the exec's own."""

    def kernel_argv(self) -> list[str]:
        """The image's own python3 kernelspec argv if it has one, else the ipykernel default;
        ``{connection_file}`` not filled in."""

    def reach(self, ports: tuple[int, ...]) -> list[tuple[str, int]]:
        """Where this server connects to each of a kernel's ``ports`` (in ``PORT_NAMES``'
        order), a forward made where one is needed."""

    def close_forwards(self, ports: tuple[int, ...]) -> None:
        """Close the forwards ``reach`` made to ``ports`` (none: nothing)."""

    def start(
        self,
        *,
        argv: list[str],
        runtime_id: str,
        connection: dict[str, Any],
        workdir: str | None,
        environment: dict[str, str],
    ) -> str:
        """Start a kernel with ``argv`` (its ``{connection_file}`` is the file ``connection``
        is written to, privately) in ``workdir`` with ``environment`` only; its handle."""

    def exit_code(self, handle: str, runtime_id: str) -> int | None:
        """The kernel's exit code, ``None`` while it runs."""

    def watch_start(self, poll: Callable[[], int | None], seconds: float) -> int | None:
        """Watch a kernel just started for about ``seconds`` with ``poll`` (the caller's
        ``exit_code``): its code if it exited, else ``None``."""

    def host_pid(self, handle: str) -> int | None:
        """The running kernel's PID on its host, from the engine (never from the container);
        ``None`` where it is not known (a pod) or the kernel ended."""

    def send_signal(self, runtime_id: str, signum: int) -> None: ...

    def log_tail(self, runtime_id: str) -> list[str]:
        """The kernel's last lines of output."""

    def remove_files(self, runtime_id: str) -> None:
        """Remove the kernel's runtime files."""


#: Each kind of host's ``KernelProcesses``, by its backend's kind (``Host.backend.kind``): a
#: Docker container's, a pod's on a Kubernetes host.
PROCESSES: dict[str, type[ContainerProcesses] | type[PodProcesses]] = {
    "docker": ContainerProcesses,
    "kubernetes": PodProcesses,
}


def processes_type(host: Host) -> type[ContainerProcesses] | type[PodProcesses]:
    """Which ``KernelProcesses`` the dev containers of ``host`` have (``PROCESSES``)."""
    return PROCESSES[host.backend.kind]


def kernel_processes(
    manager: DevContainers, host: Host, name: str, handle: str = ""
) -> KernelProcesses:
    """The kernel processes of the dev container ``name`` on ``host``: a Docker container is
    looked up (inspected) now, a pod is not (``handle``, a kernel's, names it)."""
    return processes_type(host).of(manager, host, name, handle)
