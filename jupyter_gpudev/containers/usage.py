"""What the GPUs are doing, by dev container and owner, as one user may see it.

For each GPU of each host: its memory and utilization (the inventory's), and the processes on
it with the memory each holds and, where the driver samples it, its utilization. Each process
is attributed to its container by the host's ``/proc`` (``engine/attribution.py``): one of the
caller's dev containers (named as they name it), another user's ("another user": no name, no
PID), or "other", a process in no dev container (an administrator sees its PID and user id;
others only that it is not gpudev's). An administrator sees every owner.

Each process of a dev container is also told by kernel (``kernel_of``): the live gpudev kernel
whose process tree holds it (the kernel's host PID, which the engine reported when it started
it, is it or one of its ancestors inside the container), or, in a container made for one
kernel, that kernel. A process no live kernel holds that an ended kernel left (under that
kernel's process, or re-parented to the container's init) is ``orphan``: GPU memory leaked.
Kernels are known inside a server and in the shared service (``hooks.KernelProcessTracking``);
the CLI knows the kernel a container was made for, and those the shared service's kernel
table records when it runs as the service's account (``kernels_complete`` off: others may run).

Reading is what the inventory reads plus one read of ``/proc`` (one command on an ``ssh://``
host) and one listing of the dev containers per host; the process list is cached with the
inventory (``c.GPUInventory.cache_seconds``), so viewers polling together share one read. A
host whose commands gpudev cannot run (``tcp://``, a Kubernetes cluster) says so.

In the shared service a user who is not an administrator is told ``HOST_FAILURE`` (the hosts
listing's words, ``reports``) in place of a host's failure (to reach it, to run nvidia-smi or
read ``/proc`` there, to list its containers): its words name the service's SSH account, the
host's address and port and its key files. Reasons that name nothing of the setup (no GPU,
inventory off, a kind of host gpudev runs no command on, this machine's driver) are told as
they are (``reports.probe_reason_seen``, as the hosts listing tells a GPU probe's reason).
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import asdict, dataclass
from datetime import datetime, timezone
from typing import Any, Literal

from ..access import ANOTHER_USER, Caller
from ..engine import Host, HostPool
from ..engine.attribution import AttributedProcess, attribute
from ..engine.gpus import GPU
from ..errors import EngineUnreachable, GPUDevError, NotFound
from .hooks import KernelProcessTracking, LiveKernel
from .lookup import ContainerLookup
from .model import DevContainerInfo
from .reports import HOST_FAILURE, probe_reason_seen

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
    #: The gpudev kernel whose process tree holds it (``kind`` "gpudev" only).
    kernel: str | None = None
    #: Left behind: in a dev container, held by no live kernel, left by one that ended (its
    #: GPU memory leaked until the process ends).
    orphan: bool = False


@dataclass(frozen=True)
class KernelUse:
    """A live gpudev kernel on a host, as the caller may see it (their own; any, for an
    administrator)."""

    kernel: str
    container: str
    owner: str
    #: Seconds since its last activity (``None``: not known).
    idle_seconds: float | None


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
    #: The caller's live kernels on it (known inside a server only).
    kernels: tuple[KernelUse, ...] = ()

    def to_json(self) -> dict[str, Any]:
        """Plain JSON values (lists, not tuples): the same for the API and ``top``'s table."""
        found: dict[str, Any] = json.loads(json.dumps(asdict(self)))
        return found


@dataclass(frozen=True)
class KernelGPU:
    """One GPU as a kernel's badge shows it: what its processes hold, and the whole GPU."""

    uuid: str
    index: int
    name: str
    #: The kernel's processes' memory on it (summed), and their share of its time (``None``:
    #: not sampled).
    memory_used_mib: int | None
    sm_percent: int | None
    memory_percent: int | None
    gpu_memory_used_mib: int | None
    gpu_memory_total_mib: int | None
    gpu_utilization_percent: int | None


@dataclass(frozen=True)
class KernelUsage:
    """What one kernel holds (``GET /gpudev/api/usage?kernel=ID``): the GPUs its processes
    are on, and those its container leased; ``reason``: why its processes are not known."""

    id: str
    host: str
    container: str
    gpus: tuple[KernelGPU, ...] = ()
    reason: str | None = None

    def to_json(self) -> dict[str, Any]:
        found: dict[str, Any] = json.loads(json.dumps(asdict(self)))
        return found


class GPUUse:
    """Reads GPU use on the hosts of ``containers`` for its callers (``usage``); ``kernels``:
    the server's kernels' processes (``None``: outside a server)."""

    def __init__(
        self, containers: ContainerLookup, kernels: KernelProcessTracking | None = None
    ) -> None:
        self.containers = containers
        self.kernels = kernels
        #: ``kernels`` knows every live kernel (a server's, the service's); off (the kernels
        #: another process recorded), a container made for a kernel not in it is still told
        #: by that kernel.
        self.kernels_complete = True

    @property
    def host_pool(self) -> HostPool:
        return self.containers.host_pool

    def hides_failures(self, who: Caller) -> bool:
        """Whether ``who`` is told ``HOST_FAILURE`` in place of a host's failure: a user who is
        not an administrator of the shared service (as the hosts listing)."""
        return not (self.containers.access.single_user or who.admin)

    def usage(self, host: str | None = None, *, caller: Caller | None = None) -> list[HostUsage]:
        """Every host's GPU use (or one host's), as ``caller`` may see it. A host that cannot
        be read is reported with its reason, not raised, unless it is the one asked for."""
        who = self.containers.access.resolve(caller)
        hidden = self.hides_failures(who)
        names = [host] if host else self.host_pool.names()
        found: list[HostUsage] = []
        for name in names:
            target = self.host_pool.get(name)
            try:
                found.append(self._host_usage(target, who, hidden=hidden).usage)
            except GPUDevError as err:
                if host and hidden:
                    raise EngineUnreachable(HOST_FAILURE) from err
                if host:
                    raise
                reason = HOST_FAILURE if hidden else err.message
                found.append(HostUsage(target.name, reason=reason))
        return found

    def kernel_usage(self, kernel_id: str, *, caller: Caller | None = None) -> KernelUsage:
        """What the live kernel ``kernel_id`` of the caller's holds on each GPU. ``NotFound``,
        one message whatever the cause, for a kernel that is unknown, ended, not a gpudev one
        or another user's."""
        who = self.containers.access.resolve(caller)
        missing = NotFound(
            f"No gpudev kernel {kernel_id!r} of yours on this server",
            details={"kernel_id": kernel_id},
        )
        try:
            placement = self.containers.kernel(kernel_id)
        except NotFound as err:
            raise missing from err
        host = self.host_pool.get(placement.host)
        hidden = self.hides_failures(who)
        try:
            found = self._host_usage(host, who, hidden=hidden)
        except GPUDevError as err:
            if hidden:  # its details too may name the host's address
                raise EngineUnreachable(HOST_FAILURE) from err
            raise
        # ``kernel`` found it as the server's user sees it; another caller must see its owner
        # (a host whose GPUs cannot be read lists none: its reason is the answer).
        info = next((c for c in found.containers if c.name == placement.container), None)
        if (info is not None and not who.sees_owner(info.owner)) or (
            info is None and caller is not None
        ):
            raise missing
        return KernelUsage(
            id=kernel_id,
            host=placement.host,
            container=placement.container,
            gpus=kernel_gpus(
                kernel_id, found.usage.gpus, placement.gpu_uuids, known=found.usage.reason is None
            ),
            reason=found.usage.reason,
        )

    def _host_usage(self, host: Host, who: Caller, *, hidden: bool = False) -> _Read:
        """``host``'s use as ``who`` sees it; ``hidden``: a host's failure is ``HOST_FAILURE``."""
        inventory = host.gpus()
        if inventory.reason is not None and not inventory.gpus:
            reason = _read_reason(host, inventory.source, inventory.reason, hidden=hidden)
            return _Read(HostUsage(host.name, reason=reason))
        # Every dev container of the host, to tell another user's from no one's; shown below
        # as the caller may see it.
        everyone = Caller(who.name, admin=True)
        listed = self.containers.list(all_states=False, host=host.name, caller=everyone)
        kernels = self.kernels.processes(host.name) if self.kernels is not None else []
        seen_kernels = _kernels(kernels, listed, who)
        reader = host.proc_reader()
        if reader is None or host.gpu_inventory is None:
            gpus = _gpus(inventory.gpus, {})
            return _Read(HostUsage(host.name, gpus, NO_PROCESSES, seen_kernels), listed)
        attribution = attribute(host.gpu_inventory.processes(), reader)
        containers = {info.container_id: info for info in listed}
        tracked = self.kernels is not None and self.kernels_complete
        by_container: dict[str, list[LiveKernel]] = {}
        for kernel in kernels:
            by_container.setdefault(kernel.container, []).append(kernel)
        seen = {
            gpu.uuid: (
                tuple(_process(p, containers, who, by_container, tracked) for p in use.processes),
                use.listed,
            )
            for gpu in inventory.gpus
            if (use := attribution.gpu(gpu.uuid)) is not None
        }
        reason = _read_reason(host, attribution.source, attribution.reason, hidden=hidden)
        if not reason and attribution.proc_reason is not None:
            # Only reading another host's /proc over its connection fails (``attribute``).
            reason = HOST_FAILURE if hidden else attribution.proc_reason
        usage = HostUsage(host.name, _gpus(inventory.gpus, seen), reason, seen_kernels)
        return _Read(usage, listed)


@dataclass(frozen=True)
class _Read:
    """One host's usage as read, and its dev containers (as an administrator sees them)."""

    usage: HostUsage
    containers: Sequence[DevContainerInfo] = ()


def _read_reason(host: Host, source: str, reason: str | None, *, hidden: bool) -> str | None:
    """Why ``host``'s GPUs (or their processes) were not read, as the caller is told it
    (``reports.probe_reason_seen``, as the hosts listing tells it): the probe ran on another
    machine where ``host``'s inventory runs nvidia-smi through a runner (over SSH)."""
    inventory = host.gpu_inventory
    elsewhere = (
        inventory is not None and inventory.backend != "none" and inventory.runner is not None
    )
    return probe_reason_seen(source, reason, elsewhere=elsewhere, hidden=hidden)


def _idle(stamp: datetime | None, now: datetime) -> float | None:
    if stamp is None:
        return None
    if stamp.tzinfo is None:
        stamp = stamp.replace(tzinfo=timezone.utc)
    return max(0.0, (now - stamp).total_seconds())


def _kernels(
    kernels: Iterable[LiveKernel], containers: Iterable[DevContainerInfo], who: Caller
) -> tuple[KernelUse, ...]:
    """The live kernels ``who`` may see, each with its container as they name it."""
    by_key = {info.key: info for info in containers}
    now = datetime.now(timezone.utc)
    found = []
    for kernel in kernels:
        info = by_key.get(kernel.container)
        if kernel.ended or info is None or not who.sees_owner(info.owner):
            continue
        idle = _idle(kernel.last_activity, now)
        found.append(KernelUse(kernel.kernel_id, info.name, info.owner, idle))
    return tuple(sorted(found, key=lambda k: (k.container, k.kernel)))


def kernel_of(
    process: AttributedProcess,
    info: DevContainerInfo,
    kernels: Iterable[LiveKernel],
    *,
    tracked: bool = True,
) -> tuple[str | None, bool]:
    """Which kernel holds ``process`` of the dev container ``info``, and whether it was left
    behind (pure): the live kernel whose host PID is the process's or an ancestor's inside the
    container; else, in a container made for one kernel, that kernel (while it lives, as far
    as ``kernels`` says: ``tracked`` off, nothing is known of live kernels). Held by none, it
    is left behind when an ended kernel's process holds it, or it was re-parented to the
    container's init (its parent ended) in a container with kernels."""
    mine = [k for k in kernels if k.container == info.key and k.host_pid is not None]
    lineage = {status.pid for status in process.lineage}
    live = [k for k in mine if not k.ended]
    for kernel in live:
        if kernel.host_pid in lineage:
            return kernel.kernel_id, False
    if any(k.ended and k.host_pid in lineage for k in mine):
        return None, True
    outermost = process.lineage[-1] if process.lineage else None
    # Re-parented to the container's init. Where the live kernels' PIDs are not known, only a
    # process whose parent is init counts: a dedicated container's first kernel runs under
    # the container's own command, a child of init too (``kernels.first``).
    reparented = (
        outermost is not None
        and outermost.pid != process.pid
        and outermost.container_pid == 1
        and (tracked or len(process.lineage) == 2)
    )
    if reparented and (mine or info.kernel_id):
        return None, True
    if info.kernel_id and (not tracked or any(k.kernel_id == info.kernel_id for k in live)):
        return info.kernel_id, False
    return None, False


def _sum(values: Sequence[int | None]) -> int | None:
    known = [v for v in values if v is not None]
    return sum(known) if known else None


def kernel_gpus(
    kernel_id: str, gpus: Sequence[GPUUsage], leased: Sequence[str], *, known: bool = True
) -> tuple[KernelGPU, ...]:
    """The GPUs the kernel's processes are on, and those its container leased; ``known`` off
    (the processes could not be told apart), its memory on them is ``None``, not 0."""
    found = []
    for gpu in gpus:
        mine = [p for p in gpu.processes if p.kernel == kernel_id]
        if not mine and gpu.uuid not in leased:
            continue
        if not (known and gpu.processes_listed):
            mine = []
        found.append(
            KernelGPU(
                uuid=gpu.uuid,
                index=gpu.index,
                name=gpu.name,
                memory_used_mib=(
                    _sum([p.memory_used_mib for p in mine])
                    if mine
                    else (0 if known and gpu.processes_listed else None)
                ),
                sm_percent=_sum([p.sm_percent for p in mine]),
                memory_percent=_sum([p.memory_percent for p in mine]),
                gpu_memory_used_mib=gpu.memory_used_mib,
                gpu_memory_total_mib=gpu.memory_total_mib,
                gpu_utilization_percent=gpu.utilization_percent,
            )
        )
    return tuple(found)


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
    process: AttributedProcess,
    containers: dict[str, DevContainerInfo],
    who: Caller,
    kernels: Mapping[str, Sequence[LiveKernel]] | None = None,
    tracked: bool = False,
) -> ProcessUse:
    """``process`` as ``who`` may see it (``kernels``: the live and ended ones by container
    key)."""
    memory, sm, memory_time = process.memory_used_mib, process.sm_percent, process.memory_percent
    info = containers.get(process.container_id or "")
    if info is None:
        if who.admin:
            return ProcessUse("other", memory, sm, memory_time, pid=process.pid, uid=process.uid)
        return ProcessUse("other", memory, sm, memory_time)
    kernel, orphan = kernel_of(process, info, (kernels or {}).get(info.key, ()), tracked=tracked)
    if not who.sees_owner(info.owner):  # (nor whether their kernel left it behind)
        return ProcessUse("another user", memory, sm, memory_time, owner=ANOTHER_USER)
    return ProcessUse(
        "gpudev",
        memory,
        sm,
        memory_time,
        container=info.name,
        owner=info.owner,
        pid=process.pid,
        kernel=kernel,
        orphan=orphan,
    )
