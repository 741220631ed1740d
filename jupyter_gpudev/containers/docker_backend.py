"""Dev containers on a Docker engine (``backend.DevContainerBackend``): found by name and
label, listed in one request, reported from their inspect data, stopped and kept (their lease
released once they have really stopped), removed with their changes checked first.

A Docker engine's start and plan are the lifecycle's own (``DevContainers.start_on_engine``):
placement, the GPUs leased by UUID and claimed on the engine. Every method blocks (Docker SDK
calls).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import replace
from typing import Any, Protocol

import docker.errors
from docker.models.containers import Container

from ..access import Caller
from ..engine import Host
from ..engine.hosts import ENGINE_INFO_AGE
from ..errors import BadRequest, Conflict, EngineError, EngineUnreachable, engine_errors
from ..labels import L_HOST, L_KERNEL, L_MANAGED, L_NAME, L_OWNER, STOPPED
from .backend import Located, Release, Skipped, Starting
from .create import Confinement
from .logs import container_output
from .lookup import ContainerLookup
from .model import DevContainerInfo, docker_name, user_name
from .ports import close_forwards, declared_ports
from .reconcile import on_host, stop_orphan_kernel_containers
from .reports import Known, container_info
from .terminals import terminal_argv


class EngineStarts(Protocol):
    """The lifecycle's start and plan on a Docker engine (``DevContainers``), and the cap on
    the log an engine keeps of a container's output (``c.DevContainers.log_max_size``,
    ``log_max_files``)."""

    log_max_size: str
    log_max_files: int

    def start_on_engine(self, starting: Starting) -> DevContainerInfo: ...
    def plan_on_engine(self, starting: Starting) -> dict[str, Any]: ...


def log_capped(lifecycle: EngineStarts, starting: Starting) -> Starting:
    """``starting`` with the lifecycle's log cap in its confinement, and the default logging
    driver of the engine it goes to (``create_args`` sets the cap only on a driver that keeps
    the log in files)."""
    size, files = lifecycle.log_max_size, lifecycle.log_max_files
    if not size:
        return starting
    confine = starting.confinement

    def capped(host: Host) -> Confinement:
        driver = host.engine_info(max_age=ENGINE_INFO_AGE).logging_driver or ""
        return replace(confine(host), log_max_size=size, log_max_files=files, log_driver=driver)

    return replace(starting, confinement=capped)


class DockerBackend:
    """The dev containers of one Docker engine host (``backend.DevContainerBackend``)."""

    def __init__(self, lookup: ContainerLookup, host: Host) -> None:
        self.lookup = lookup
        self.host = host

    @classmethod
    def start(
        cls,
        lifecycle: EngineStarts,
        host: Host | None,  # noqa: ARG003 - placement chooses, or keeps the one asked for
        starting: Starting,
    ) -> DevContainerInfo:
        """A start on an engine: the lifecycle places it, leases and claims its GPUs."""
        return lifecycle.start_on_engine(log_capped(lifecycle, starting))

    @classmethod
    def plan(
        cls,
        lifecycle: EngineStarts,
        host: Host | None,  # noqa: ARG003 - placement chooses, or keeps the one asked for
        starting: Starting,
    ) -> dict[str, Any]:
        """What a start on an engine would create (``DevContainers.plan_on_engine``)."""
        return lifecycle.plan_on_engine(log_capped(lifecycle, starting))

    # -- finding and reading -------------------------------------------------------------------

    def find(self, name: str, keys: tuple[str, ...], who: Caller) -> Container | None:
        lookup, host = self.lookup, self.host
        try:
            with engine_errors(f"Looking up {user_name(name)!r}", lookup.log):
                for engine_name in dict.fromkeys(docker_name(key) for key in keys):
                    try:
                        container = host.client().containers.get(engine_name)
                    except docker.errors.NotFound:
                        continue
                    if (
                        container.labels.get(L_MANAGED) == "1"
                        and on_host(container, host)
                        and lookup.access.may_see(who, container.labels, lookup.ledger_id)
                    ):
                        return container
        except EngineUnreachable as err:
            raise Skipped(err) from None
        return None

    def listed(
        self, who: Caller, *, all_states: bool, added: dict[str, list[int]]
    ) -> list[Located]:
        lookup, host = self.lookup, self.host
        ledger_id = lookup.ledger_id
        try:
            client = host.client()
        except EngineUnreachable as err:
            raise Skipped(err) from None
        with engine_errors(f"Listing dev containers on {host.name!r}", lookup.log):
            # One list request; inspect data reused while the engine's events allow.
            listed = host.containers.list(
                client,
                all_states=all_states,
                filters={"label": [f"{L_MANAGED}=1", f"{L_HOST}={host.name}"]},
            )
        known = Known(
            leases={lease.container: lease for lease in lookup.ledger.active(host.name)},
            pinned=frozenset(lookup.ledger.pinned(host.name)),
            added_ports=added,
        )
        found = []
        for attrs in listed:
            container = client.containers.prepare_model(attrs)
            if lookup.access.may_see(who, container.labels, ledger_id):
                found.append(Located(host, self, container, known))
        return found

    def report(
        self,
        native: Container,
        *,
        count_changes: bool = False,
        known: Known | None = None,
        wait: bool = True,
        warnings: tuple[str, ...] = (),
    ) -> DevContainerInfo:
        """The container as reported. Its uncommitted changes are counted (``docker diff``,
        kept a while, see ``ChangeCounts``) only with ``count_changes``; otherwise a kept count
        that still holds is reported, or ``None``. ``known``: the ledger and port reads of a
        listing, made once for all its containers; ``wait`` off: a count that would have to be
        waited for is ``None``."""
        lookup, host, container = self.lookup, self.host, native
        labels = container.labels
        name = labels.get(L_NAME, user_name(container.name or ""))  # its key
        if known is None:
            lease = lookup.ledger.for_container(host.name, labels.get(L_NAME, ""))
            pinned = labels.get(L_NAME, "") in lookup.ledger.pinned(host.name)
            added = lookup.added_ports.read()
        else:
            lease = known.leases.get(labels.get(L_NAME, ""))
            pinned = labels.get(L_NAME, "") in known.pinned
            added = known.added_ports
        usage = lookup.kernels.usage(host.name, name) if lookup.kernels is not None else None
        return container_info(
            container,
            host.name,
            key=name,
            shown_name=lookup.shown_name(name, labels.get(L_OWNER, "")),
            lease=lease,
            pinned=pinned,
            added=added,
            usage=usage,
            uncommitted=(
                lookup.changes.count(host, container, compute=count_changes, wait=wait)
                if lookup.changes is not None
                else None
            ),
            warnings=(
                *warnings,
                *lookup.idle_notes.for_container(
                    host.name, name, running=container.status == "running"
                ),
            ),
        )

    def container(self, native: Container, name: str) -> Container:  # noqa: ARG002
        return native

    def key(self, native: Container, name: str) -> str:
        return str(native.labels.get(L_NAME, user_name(name)))

    def owner(self, native: Container) -> str:
        return str(native.labels.get(L_OWNER, ""))

    def kernel_id(self, native: Container) -> str | None:
        return native.labels.get(L_KERNEL) or None

    def running(self, native: Container) -> bool:
        return bool(native.status == "running")

    def web_ports(self, native: Container) -> tuple[int, ...]:
        return self.lookup.added_ports.web_ports(native)

    def set_web_port(
        self, native: Container, name: str, port: int, *, add: bool
    ) -> DevContainerInfo:
        if not add and port in declared_ports(native):
            raise BadRequest(
                f"Port {port} is one of the forwardPorts of {user_name(name)!r}'s environment: "
                "it is always served (only ports added at run time can be removed)"
            )
        self.lookup.added_ports.set(str(native.id), port, add=add)
        return self.report(native)

    def reach(self, native: Container, port: int) -> tuple[str, int]:
        """The container's address on the host's bridge network (a local host), or a local
        end of an SSH forward (a remote host)."""
        return self.host.reach(self.lookup.address_of(native), port)

    def terminal_argv(self, native: Container, name: str) -> list[str]:
        if native.status != "running":
            raise Conflict(f"{user_name(name)!r} is not running: start it first")
        return terminal_argv(self.host, native, self.lookup.docker_cli)

    def logs(
        self, native: Container, *, follow: bool, tail: int | None, limit: int
    ) -> Iterator[str]:
        return container_output(native, follow=follow, tail=tail, limit=limit)

    # -- stop and remove -----------------------------------------------------------------------

    def stop(
        self,
        native: Container,
        name: str,  # noqa: ARG002 - named by its label
        *,
        timeout: float,
        release: Release,
    ) -> None:
        container = native
        key = container.labels.get(L_NAME, user_name(container.name or ""))
        close_forwards(self.host, container)  # while it still has its address
        with engine_errors(f"Stopping {user_name(key)!r}", self.lookup.log):
            container.stop(timeout=timeout)
            container.wait(condition="not-running", timeout=timeout + 30)
            container.reload()
        if container.status == "running":
            raise EngineError(f"{user_name(key)!r} is still running after stop; lease kept")
        release(self.host, container)

    def remove(
        self,
        native: Container,
        name: str,
        *,
        force: bool,
        keep: Callable[[], str | None] | None,  # noqa: ARG002 - nothing to wait for here
        timeout: float,
        release: Release,
    ) -> None:
        """A running container is stopped first (its lease freed) and only then checked for
        changes, so nothing written while it stops is lost without ``force``."""
        lookup, host, container = self.lookup, self.host, native
        if container.status not in STOPPED:
            self.stop(container, name, timeout=timeout, release=release)
        # Changes a commit left out (``held``) are uncommitted too, files or not.
        with engine_errors(f"Reading the changes of {user_name(name)!r}", lookup.log):
            changed = self.uncommitted(container, name)
        if changed and not force:
            raise Conflict(
                f"{user_name(name)!r} has {len(changed)} uncommitted change(s) (e.g. "
                f"{', '.join(changed[:3])}): commit them first (changes a commit left out "
                "count too), or remove it with force",
                details={"changes": changed[:50]},
            )
        with engine_errors(f"Removing {user_name(name)!r}", lookup.log):
            container.remove(force=True, v=True)  # and its anonymous volumes
        release(host, container)
        if lookup.changes is not None:
            lookup.changes.forget(str(container.id))
        lookup.ledger.set_pinned(host.name, container.labels.get(L_NAME, user_name(name)), False)

    def uncommitted(self, native: Container, name: str) -> list[str]:  # noqa: ARG002
        """See ``ContainerLookup.changes``; without change tracking, its ``docker diff``."""
        if self.lookup.changes is not None:
            key = native.labels.get(L_NAME, user_name(native.name or ""))
            return self.lookup.changes.uncommitted(key, self.host, native)
        return sorted(str(d["Path"]) for d in native.diff() or [])

    # -- what the lifecycle's other parts ask of a host ----------------------------------------

    def owned(self, owner: str) -> dict[str, str]:
        labels = [f"{L_MANAGED}=1", f"{L_HOST}={self.host.name}", f"{L_OWNER}={owner}"]
        with engine_errors(f"Counting the dev containers of {owner!r}", self.lookup.log):
            listed = self.host.client().api.containers(all=True, filters={"label": labels})
        return {_name_of(summary): str(summary.get("State", "")) for summary in listed}

    def stop_orphan_kernels(
        self, *, machine: str, ledger_id: str, remove: Callable[[str, str], None]
    ) -> list[str]:
        return stop_orphan_kernel_containers(
            self.host, machine=machine, ledger_id=ledger_id, remove=remove, log=self.lookup.log
        )

    def passed_over(self) -> str | None:
        return None

    def host_cpus(self) -> Callable[[], int] | None:
        return lambda: _host_cpus(self.host, self.lookup.log)


def _name_of(summary: dict[str, Any]) -> str:
    """gpudev's name of a container the engine listed (its label, else its own name)."""
    name = (summary.get("Labels") or {}).get(L_NAME)
    return str(name) if name else user_name(str((summary.get("Names") or ["?"])[0]).lstrip("/"))


def _host_cpus(host: Host, log: Any) -> int:
    """How many CPUs ``host``'s engine has (0: it does not say)."""
    with engine_errors(f"Asking host {host.name!r} for its CPUs", log):
        return int(host.client().info().get("NCPU") or 0)
