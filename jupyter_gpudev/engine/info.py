"""What a host reports of itself, whatever its kind, as the API and the CLI show it.

``HostInfo`` is one host's report: a Docker engine's says what the engine is
(``EngineInfo``) and its GPU inventory; a Kubernetes host's says what its API server, nodes and
GPU allocations are (``ClusterInfo``, read by ``cluster.Cluster``). Pure data: the backends of
each kind (``backend.HostBackend``) fill them in."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import asdict, dataclass, field, replace
from typing import Any, Protocol

from .gpus import Inventory
from .spec import Transport


@dataclass(frozen=True)
class NodeGPUs:
    """One GPU resource of a node: what it has, what pods may get, what pods have now."""

    resource: str
    capacity: int
    allocatable: int
    allocated: int


@dataclass(frozen=True)
class ClusterNode:
    name: str
    ready: bool
    #: False when cordoned (``spec.unschedulable``).
    schedulable: bool
    product: str | None = None
    memory_mib: int | None = None
    gpus: tuple[NodeGPUs, ...] = ()


@dataclass(frozen=True)
class GPUAllocation:
    """GPUs a pod holds: gpudev's own (``container``, ``owner`` from its annotations) or
    another workload's (only its namespace is said)."""

    node: str
    resource: str
    count: int
    namespace: str
    container: str = ""
    owner: str = ""


@dataclass(frozen=True)
class ClusterInfo:
    version: str
    namespace: str
    context: str
    nodes: tuple[ClusterNode, ...] = ()
    allocations: tuple[GPUAllocation, ...] = ()
    warnings: tuple[str, ...] = field(default=())

    def seen_by(self, sees_owner: Callable[[str], bool], stand_in: str) -> ClusterInfo:
        """As a viewer may see it: another user's dev container is held by ``stand_in``,
        without its name."""
        return replace(
            self,
            allocations=tuple(
                a
                if not a.container or sees_owner(a.owner)
                else replace(a, container="", owner=stand_in)
                for a in self.allocations
            ),
        )


class HeldLease(Protocol):
    """What a host report needs of a lease (``leasing.Lease``; engines know nothing of leases)."""

    def held_json(self) -> dict[str, Any]: ...


@dataclass(frozen=True)
class EngineInfo:
    """What the engine says of itself."""

    version: str
    api_version: str
    os: str
    arch: str
    kernel_version: str | None
    operating_system: str | None
    cgroup_driver: str | None
    cgroup_version: str | None
    runtimes: tuple[str, ...]
    default_runtime: str | None
    nvidia_runtime: bool
    nvidia_hook: bool | None
    cdi: bool
    cdi_spec_dirs: tuple[str, ...]
    #: The machine's CPUs and memory as the engine counts them, and its data root (where
    #: images and containers' files go); ``None`` where it does not say.
    cpus: int | None = None
    memory_mib: int | None = None
    data_root: str | None = None
    #: ``docker info``'s ``SecurityOptions`` (``name=seccomp,profile=default``, ``name=rootless``).
    security_options: tuple[str, ...] = ()
    #: The engine's default logging driver (``json-file``, ``journald``, ...).
    logging_driver: str | None = None

    @property
    def rootless(self) -> bool:
        """The engine says it runs rootless (``name=rootless`` in ``security_options``)."""
        return any("name=rootless" in str(option).split(",") for option in self.security_options)


@dataclass(frozen=True)
class HostInfo:
    """A host as the API and the CLI report it."""

    name: str
    url: str
    transport: Transport
    is_local: bool
    reachable: bool
    reason: str | None = None
    engine: EngineInfo | None = None
    gpus: Inventory = field(default_factory=lambda: Inventory(source="none"))
    #: Where the host comes from: "local", "config" (c.HostPool.hosts) or "added" (at run
    #: time: removable with `hosts remove`).
    origin: str = "config"
    #: Remote hosts: the folder of that host mounted as the workspace.
    workspace: str | None = None
    #: The active GPU leases on this host (set by ``DevContainers.describe_hosts``, which
    #: has the ledger), reported as ``Lease.held_json``.
    leases: tuple[HeldLease, ...] = ()
    #: A Kubernetes host: its version, nodes and GPU allocations (``None`` otherwise, or
    #: when it did not answer).
    cluster: ClusterInfo | None = None

    def to_json(self) -> dict[str, Any]:
        data = asdict(replace(self, leases=()))
        data["leases"] = [lease.held_json() for lease in self.leases]
        return data
