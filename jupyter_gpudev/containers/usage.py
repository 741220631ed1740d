"""What the GPUs are doing, by dev container and owner, as one user may see it.

For each GPU of each host: its memory and utilization (the inventory's), and the processes on
it with the memory each holds and, where the driver samples it, its utilization. Each process
is attributed to its container by the host's ``/proc`` (``engine/attribution.py``): one of the
caller's dev containers (named as they name it), another user's ("another user": no name, no
PID), or "other", a process in no dev container (an administrator sees its PID and user id;
others only that it is not gpudev's). An administrator sees every owner.

Reading is what the inventory reads plus one read of ``/proc`` (one command on an ``ssh://``
host) and one listing of the dev containers per host; the process list is cached with the
inventory (``c.GPUInventory.cache_seconds``), so viewers polling together share one read. A
host whose commands gpudev cannot run (``tcp://``, a Kubernetes cluster) says so.
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass
from typing import Any, Literal

from ..access import ANOTHER_USER, Caller
from ..engine import Host, HostPool
from ..engine.attribution import AttributedProcess, attribute
from ..engine.gpus import GPU
from ..errors import GPUDevError
from .lookup import ContainerLookup
from .model import DevContainerInfo

#: Whose a GPU process is: a dev container's (the caller's, or anyone's for an
#: administrator), another user's dev container's, or no dev container's.
Kind = Literal["gpudev", "another user", "other"]

NO_PROCESSES = (
    "GPU use per process needs commands on the host: available for the local engine and "
    "ssh:// hosts"
)


@dataclass(frozen=True)
class ProcessUse:
    """One process on one GPU, as the caller may see it."""

    kind: Kind
    memory_used_mib: int | None
    #: Its share of the GPU's SM and memory time since the last read (``None``: not sampled).
    sm_percent: int | None
    memory_percent: int | None
    #: Its dev container, named as the caller names it (``kind`` "gpudev" only).
    container: str | None = None
    #: The container's owner (``"another user"`` for someone else's, to a non-administrator).
    owner: str | None = None
    #: Its PID on the host: for the caller's own containers' processes, and for administrators.
    pid: int | None = None
    #: Its user id on the host: administrators only, for a process of no dev container.
    uid: int | None = None


@dataclass(frozen=True)
class GPUUsage:
    """One GPU: what the inventory says of it, and its processes."""

    uuid: str
    index: int
    name: str
    memory_total_mib: int | None
    memory_used_mib: int | None
    utilization_percent: int | None
    processes: tuple[ProcessUse, ...] = ()
    #: False: the driver did not list this GPU's processes (unknown, not idle).
    processes_listed: bool = True


@dataclass(frozen=True)
class HostUsage:
    """A host's GPUs and their processes; ``reason``: why processes (or all) are missing."""

    host: str
    gpus: tuple[GPUUsage, ...] = ()
    reason: str | None = None

    def to_json(self) -> dict[str, Any]:
        """Plain JSON values (lists, not tuples): the same for the API and ``top``'s table."""
        found: dict[str, Any] = json.loads(json.dumps(asdict(self)))
        return found


class GPUUse:
    """Reads GPU use on the hosts of ``containers`` for its callers (``usage``)."""

    def __init__(self, containers: ContainerLookup) -> None:
        self.containers = containers

    @property
    def host_pool(self) -> HostPool:
        return self.containers.host_pool

    def usage(self, host: str | None = None, *, caller: Caller | None = None) -> list[HostUsage]:
        """Every host's GPU use (or one host's), as ``caller`` may see it. A host that cannot
        be read is reported with its reason, not raised, unless it is the one asked for."""
        who = self.containers.access.resolve(caller)
        names = [host] if host else self.host_pool.names()
        found: list[HostUsage] = []
        for name in names:
            target = self.host_pool.get(name)
            try:
                found.append(self._host_usage(target, who))
            except GPUDevError as err:
                if host:
                    raise
                found.append(HostUsage(target.name, reason=err.message))
        return found

    def _host_usage(self, host: Host, who: Caller) -> HostUsage:
        inventory = host.gpus()
        if inventory.reason is not None and not inventory.gpus:
            return HostUsage(host.name, reason=inventory.reason)
        reader = host.proc_reader()
        if reader is None or host.gpu_inventory is None:
            return HostUsage(host.name, _gpus(inventory.gpus, {}), reason=NO_PROCESSES)
        attribution = attribute(host.gpu_inventory.processes(), reader)
        # Every dev container of the host, to tell another user's from no one's; shown below
        # as the caller may see it.
        everyone = Caller(who.name, admin=True)
        containers = {
            info.container_id: info
            for info in self.containers.list(all_states=False, host=host.name, caller=everyone)
        }
        seen = {
            use.uuid: (
                tuple(_process(p, containers, who) for p in use.processes),
                use.listed,
            )
            for use in attribution.gpus
        }
        reason = attribution.reason or attribution.proc_reason
        return HostUsage(host.name, _gpus(inventory.gpus, seen), reason=reason)


def _gpus(
    gpus: tuple[GPU, ...], seen: dict[str, tuple[tuple[ProcessUse, ...], bool]]
) -> tuple[GPUUsage, ...]:
    return tuple(
        GPUUsage(
            uuid=gpu.uuid,
            index=gpu.index,
            name=gpu.name,
            memory_total_mib=gpu.memory_total_mib,
            memory_used_mib=gpu.memory_used_mib,
            utilization_percent=gpu.utilization_percent,
            processes=seen.get(gpu.uuid, ((), False))[0],
            processes_listed=seen.get(gpu.uuid, ((), False))[1],
        )
        for gpu in gpus
    )


def _process(
    process: AttributedProcess, containers: dict[str, DevContainerInfo], who: Caller
) -> ProcessUse:
    """``process`` as ``who`` may see it."""
    memory, sm, memory_time = process.memory_used_mib, process.sm_percent, process.memory_percent
    info = containers.get(process.container_id or "")
    if info is None:
        if who.admin:
            return ProcessUse("other", memory, sm, memory_time, pid=process.pid, uid=process.uid)
        return ProcessUse("other", memory, sm, memory_time)
    if not who.sees_owner(info.owner):
        return ProcessUse("another user", memory, sm, memory_time, owner=ANOTHER_USER)
    return ProcessUse(
        "gpudev", memory, sm, memory_time, container=info.name, owner=info.owner, pid=process.pid
    )
