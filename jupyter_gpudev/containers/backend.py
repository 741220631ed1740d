"""What differs between a Docker engine and a Kubernetes cluster for dev containers.

``DevContainerBackend`` is what the lifecycle and the lookup do to the dev containers of one host
whatever its kind: find and list them, report them, their terminals, web ports and output,
stop and remove them (and what removing would lose), count an owner's, sweep the kernels' own
ones a dead server left. ``docker_backend.DockerBackend`` does it for a Docker engine's
containers, ``pod_lifecycle.PodBackend`` for pods on a Kubernetes host; ``lifecycle.backend_type``
is the one place that says which a host has, and which start and plan a request gets.

``Located`` is one dev container found: its host, its backend and what the backend found (the
engine's container object, or the pod as the API server sent it), read and acted on through
the backend only.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Protocol

from ..access import Caller
from ..engine import Host, Progress
from ..environments import Environment
from ..errors import GPUDevError
from .model import DevContainerInfo, StartRequest
from .reports import Known

if TYPE_CHECKING:
    from docker.models.containers import Container

    from .create import Confinement


#: Frees the lease and claims of a dev container that stopped or is gone (the lifecycle's).
Release = Callable[[Host, Any], None]


class Skipped(Exception):
    """A host that cannot be asked now: finding and listing go on with the next host, and
    ``error`` is raised only when no host could be asked."""

    def __init__(self, error: GPUDevError) -> None:
        super().__init__(error.message)
        self.error = error


@dataclass(frozen=True)
class Starting:
    """A start (or a plan) as the lifecycle hands it to a backend: what was asked, and the
    lifecycle's parts any start needs."""

    env: Environment
    request: StartRequest
    who: Caller
    say: Progress
    #: The new container's key (``targets.new_name``), made when the start asks for it.
    name: Callable[[], str]
    #: Its main process (``c.DevContainers.keep_alive_command``).
    command: tuple[str, ...]
    #: The administrator's confinement within the owner's limits, on the host it goes to.
    confinement: Callable[[Host], Confinement]
    #: Room for one more running container of the owner's, held while it is made.
    room: Callable[[], AbstractContextManager[None]]
    #: Seconds each lifecycle command may take.
    timeout: float


class DevContainerBackend(Protocol):
    """The dev containers of one host. What a method is given as ``native`` is what ``find``
    or ``listed`` found on this backend (``Located.native``); ``name`` is the name the caller
    used, for messages."""

    @property
    def host(self) -> Host:
        """Its host."""

    def find(self, name: str, keys: tuple[str, ...], who: Caller) -> Any | None:
        """The dev container of one of ``keys`` (``model.container_key``), in order, that
        ``who`` may see, or ``None``; ``Skipped`` when the host cannot be asked."""

    def listed(
        self, who: Caller, *, all_states: bool, added: dict[str, list[int]]
    ) -> list[Located]:
        """Every dev container of the host ``who`` may see (running only unless
        ``all_states``), each with what was read once for all (``Known``; ``added``: the web
        ports added at run time); ``Skipped`` when the host cannot be asked."""

    def report(
        self,
        native: Any,
        *,
        count_changes: bool = False,
        known: Known | None = None,
        wait: bool = True,
        warnings: tuple[str, ...] = (),
    ) -> DevContainerInfo:
        """Its report, named as its viewer names it (``ContainerLookup.describe``)."""

    def container(self, native: Any, name: str) -> Container:
        """The engine's container object, for what only a Docker container can do (resume, a
        kernel's exec, a warm kernel); a ``BadRequest`` saying so where it is not one."""

    def key(self, native: Any, name: str) -> str:
        """Its key as gpudev recorded it, else ``name``'s."""

    def owner(self, native: Any) -> str:
        """Its owner (``""``: not recorded)."""

    def kernel_id(self, native: Any) -> str | None:
        """The kernel it was made for, or ``None``: kernels share it."""

    def running(self, native: Any) -> bool:
        """Whether it runs now."""

    def web_ports(self, native: Any) -> tuple[int, ...]:
        """The ports the proxy serves: its environment's forwardPorts and those added."""

    def set_web_port(self, native: Any, name: str, port: int, *, add: bool) -> DevContainerInfo:
        """Serve ``port`` (``add=False``: stop serving one added at run time); its report."""

    def reach(self, native: Any, port: int) -> tuple[str, int]:
        """Where this server connects to reach ``port`` of it, a forward made where needed."""

    def terminal_argv(self, native: Any, name: str) -> list[str]:
        """The argv of a shell inside it; a ``Conflict`` when it is not running."""

    def logs(self, native: Any, *, follow: bool, tail: int | None, limit: int) -> Iterator[str]:
        """Its output (``logs.py``): at most ``limit`` bytes without ``follow``."""

    def stop(self, native: Any, name: str, *, timeout: float, release: Release) -> None:
        """Stop it and ``release`` its lease once it has really stopped; a ``Conflict`` where
        a dev container is not stopped and kept (a pod)."""

    def remove(
        self,
        native: Any,
        name: str,
        *,
        force: bool,
        keep: Callable[[], str | None] | None,
        timeout: float,
        release: Release,
    ) -> None:
        """Remove it (``DevContainers.remove``): without ``force`` only when ``uncommitted``
        is empty."""

    def uncommitted(self, native: Any, name: str) -> list[str]:
        """What removing it would lose (the paths); empty: nothing."""

    def owned(self, owner: str) -> dict[str, str]:
        """``owner``'s dev containers on the host, by key, with their state (Docker's
        words: ``limits.holdings``)."""

    def stop_orphan_kernels(
        self, *, machine: str, ledger_id: str, remove: Callable[[str, str], None]
    ) -> list[str]:
        """Stop or delete (``remove``, the lifecycle's) the kernels' own dev containers a dead
        server process of ``machine`` left running; the names of those stopped or deleted."""

    def passed_over(self) -> str | None:
        """Why a start that names no host is not placed here (``None``: it may be)."""

    def host_cpus(self) -> Callable[[], int] | None:
        """How to ask the host for its CPUs (what a share of them is counted from); ``None``:
        no such default here."""


@dataclass(frozen=True)
class Located:
    """One dev container found (``ContainerLookup.locate``): its host, its backend and what the
    backend found (``native``), with what a listing read once (``known``)."""

    host: Host
    backend: DevContainerBackend
    native: Any
    known: Known | None = None

    def report(
        self, *, count_changes: bool = False, wait: bool = True, warnings: tuple[str, ...] = ()
    ) -> DevContainerInfo:
        return self.backend.report(
            self.native,
            count_changes=count_changes,
            known=self.known,
            wait=wait,
            warnings=warnings,
        )

    def container(self, name: str) -> Container:
        return self.backend.container(self.native, name)

    def key(self, name: str) -> str:
        return self.backend.key(self.native, name)

    def owner(self) -> str:
        return self.backend.owner(self.native)

    def kernel_id(self) -> str | None:
        return self.backend.kernel_id(self.native)

    def running(self) -> bool:
        return self.backend.running(self.native)

    def web_ports(self) -> tuple[int, ...]:
        return self.backend.web_ports(self.native)

    def set_web_port(self, name: str, port: int, *, add: bool) -> DevContainerInfo:
        return self.backend.set_web_port(self.native, name, port, add=add)

    def reach(self, port: int) -> tuple[str, int]:
        return self.backend.reach(self.native, port)

    def terminal_argv(self, name: str) -> list[str]:
        return self.backend.terminal_argv(self.native, name)

    def logs(self, *, follow: bool, tail: int | None, limit: int) -> Iterator[str]:
        return self.backend.logs(self.native, follow=follow, tail=tail, limit=limit)

    def stop(self, name: str, *, timeout: float, release: Release) -> None:
        self.backend.stop(self.native, name, timeout=timeout, release=release)

    def remove(
        self,
        name: str,
        *,
        force: bool,
        keep: Callable[[], str | None] | None,
        timeout: float,
        release: Release,
    ) -> None:
        self.backend.remove(
            self.native, name, force=force, keep=keep, timeout=timeout, release=release
        )
