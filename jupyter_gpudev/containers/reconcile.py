"""The lease ledger made to agree with the containers that exist, and the orphan sweep: the
kernel containers a dead server left behind (and the containers it created but never started),
stopped through the lifecycle's ``remove``
(``DevContainers.stop_orphan_kernels``; a Kubernetes host's kernel pods are deleted by
``pod_lifecycle.delete_orphan_kernel_pods``)."""

from __future__ import annotations

import os
import socket
import time
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import TYPE_CHECKING, Any

import docker.errors
from docker.models.containers import Container

from ..engine import Host
from ..errors import Conflict, GPUDevError, engine_errors
from ..labels import (
    L_HOST,
    L_KERNEL,
    L_LEDGER,
    L_MANAGED,
    L_NAME,
    L_OWNER,
    L_PROCESS,
    STOPPED,
    labelled_gpus,
)
from ..leasing import EngineClaims, LeaseLedger
from .model import user_name

if TYPE_CHECKING:
    from .backend import DevContainerBackend


def on_host(container: Container, host: Host) -> bool:
    """Whether ``container`` was made through ``host`` (two host entries may reach one engine:
    each sees its own containers only)."""
    return container.labels.get(L_HOST, host.name) == host.name


#: Where the kernel tells a process's start time (``PID/stat``) and the boot
#: (``sys/kernel/random/boot_id``); absent off Linux, where a PID alone tells a process.
PROC = Path("/proc")


def process_start(pid: int) -> int | None:
    """When process ``pid`` started, in clock ticks since the boot (field 22 of its stat file);
    ``None`` where it cannot be read (gone, or no ``/proc``). The name (field 2) is in
    parentheses and may hold spaces and ")": the fields are counted after the last ")"."""
    try:
        stat = (PROC / str(pid) / "stat").read_bytes()
    except OSError:
        return None
    fields = stat[stat.rfind(b")") + 1 :].split()
    # fields[0] is field 3 (the state): field 22 is fields[19]
    if len(fields) < 20 or not fields[19].isdigit():
        return None
    return int(fields[19])


def boot_id() -> str | None:
    """The first part of this boot's id (it changes at each boot); ``None`` without ``/proc``."""
    try:
        text = (PROC / "sys" / "kernel" / "random" / "boot_id").read_text()
    except OSError:
        return None
    first = text.strip().split("-")[0]
    return first if first.isalnum() else None


def process_identity(pid: int | None = None) -> str:
    """The ``L_PROCESS`` (and ``A_PROCESS``) value of a process of this machine, this one by
    default: ``MACHINE:PID:START:BOOT``, its start time in clock ticks since the boot and the
    first part of the boot id, so that another process that gets its PID later (PIDs are
    reused: a process in any user's container may get it) is not taken for it. Where neither
    can be read (no ``/proc``): ``MACHINE:PID``, as earlier versions wrote it."""
    pid = os.getpid() if pid is None else pid
    start, boot = process_start(pid), boot_id()
    if start is None or boot is None:
        return f"{socket.gethostname()}:{pid}"
    return f"{socket.gethostname()}:{pid}:{start}:{boot}"


def process_alive(pid: int, start: int | None = None, boot: str | None = None) -> bool:
    """Whether process ``pid`` runs; with ``start`` and ``boot`` (``process_identity``'s), only
    if it is that process: started at that time in that boot. Without ``/proc`` (not Linux)
    the PID alone decides."""
    try:
        os.kill(pid, 0)
    except (ProcessLookupError, OverflowError):  # (a PID no process can have)
        return False
    except PermissionError:
        pass  # someone else's process: its start time decides
    if start is None or boot is None:
        return True
    now = boot_id()
    if now is None:
        return True  # no /proc: the PID alone decides
    if now != boot:
        return False  # the process was of an earlier boot
    started = process_start(pid)
    # (unreadable while it runs: a /proc that hides other users' processes; the PID decides)
    return started is None or started == start


def process_gone(value: str, machine: str) -> bool:
    """Whether ``value`` (an ``L_PROCESS`` or ``A_PROCESS`` value, ``process_identity``'s) names
    a process of ``machine`` that no longer runs: its PID ended, or is another process's now
    (another start time, another boot). An earlier version's ``MACHINE:PID`` is judged by its
    PID alone. Another machine's process, or a value that is not one, is not judged: False."""
    where, _, rest = value.partition(":")
    pid, _, identity = rest.partition(":")
    if where != machine or not pid.isdecimal():
        return False
    if not identity:
        return not process_alive(int(pid))
    start, _, boot = identity.partition(":")
    if not start.isdecimal() or not boot.isalnum():
        return False
    return not process_alive(int(pid), int(start), boot)


def reconcile_host(
    host: Host, *, ledger: LeaseLedger, ledger_id: str, claims: EngineClaims, grace: float, log: Any
) -> tuple[dict[str, Any], set[str]]:
    """Reconcile one host's leases and the engine's GPU claims; also returns the GPUs its live
    containers hold by label.

    A container holds its GPUs in every state but stopped ones (exited, dead): a created or
    paused container still has its DeviceRequest. Leases younger than ``grace`` seconds are
    left alone (a start in flight: its lease is taken before its container exists), so this is
    safe to run while containers start. The ledger takes back only containers made through it
    (another server's ledger keeps its own); the engine's claims cover every container: stale
    ones are removed, missing ones (pruned, or an older version's container) made again.
    """
    listed_at = time.time()
    with engine_errors("Listing dev containers", log):
        # Every managed container of the engine: another host entry (or another server) that
        # reaches the same engine holds its GPUs too. One removed between the listing and its
        # inspection (a start that lost a race and cleaned up) is simply not there.
        containers = host.client().containers.list(
            all=True, filters={"label": f"{L_MANAGED}=1"}, ignore_removed=True
        )
    holding: dict[str, tuple[str, ...]] = {}
    owners: dict[str, str] = {}
    labelled: set[str] = set()
    running: dict[str, tuple[str, str, tuple[str, ...]]] = {}
    adoptable: set[str] = set()  # leased again from their label when they have no lease
    for container in containers:
        if container.status in STOPPED:
            continue
        labels = container.labels
        uuids = labelled_gpus(labels)
        labelled.update(uuids)
        name = labels.get(L_NAME, "")
        if uuids and container.status == "running":
            running[str(container.id)] = (name, labels.get(L_OWNER, "unknown"), uuids)
        if not on_host(container, host) or labels.get(L_LEDGER, ledger_id) != ledger_id:
            continue  # the ledger of this host name only reconciles its own containers
        holding[name] = uuids
        owners[name] = labels.get(L_OWNER, "unknown")
        if container.status == "running":
            adoptable.add(name)
    report = ledger.reconcile(
        host.name,
        holding,
        owners=owners,
        created_before=listed_at - grace,
        adoptable=adoptable,
    )
    try:
        claims.sweep()
        for problem in claims.repair(running):
            log.warning("gpudev: GPU claims on %s: %s", host.name, problem)
    except GPUDevError as err:  # tidying only: a claim made meanwhile still decides
        log.warning("gpudev: GPU claims on %s not tidied: %s", host.name, err.message)
    return report.to_json(), labelled


def orphan_kernel_containers(host: Host, ledger_id: str, machine: str) -> list[Container]:
    """The containers made through this ledger by a server process of ``machine`` that no
    longer runs and left behind: those dedicated to a kernel, running (its kernels cannot be
    reached again), and any it created but never started (killed in the middle of a start:
    nothing ran in it, only its lease is held)."""
    containers = host.client().containers.list(
        all=True,
        filters={"label": [f"{L_MANAGED}=1", f"{L_LEDGER}={ledger_id}", f"{L_HOST}={host.name}"]},
        ignore_removed=True,
    )
    orphans = []
    for container in containers:
        # (a dev container kernels share has the kernel label set, empty)
        kernel = bool(container.labels.get(L_KERNEL)) and container.status == "running"
        if not kernel and container.status != "created":
            continue
        if process_gone(container.labels.get(L_PROCESS, ""), machine):
            orphans.append(container)
    return orphans


def stop_orphan_kernels(
    hosts: Iterable[Host],
    *,
    backend: Callable[[Host], DevContainerBackend],
    ledger_id: str,
    remove: Callable[[str, str], None],
) -> list[str]:
    """Stop the kernel containers a dead server left running, so they free their GPUs.

    A container dedicated to a kernel is an orphan when it was made through this same
    ledger by a server process of this machine that no longer runs (after a crash or a
    SIGKILL its kernels cannot be reached again). Each host's ``backend`` finds them and has
    them removed (``remove``, the lifecycle's): unchanged ones go; ones with changes are kept
    (stopped, or a pod running) until committed or removed. Returns the names of those
    stopped or deleted.
    """
    machine = socket.gethostname()
    stopped: list[str] = []
    for host in hosts:
        stopped += backend(host).stop_orphan_kernels(
            machine=machine, ledger_id=ledger_id, remove=remove
        )
    return stopped


def stop_orphan_kernel_containers(
    host: Host, *, machine: str, ledger_id: str, remove: Callable[[str, str], None], log: Any
) -> list[str]:
    """``stop_orphan_kernels`` on a Docker engine: the orphans (``orphan_kernel_containers``:
    a dead server's kernel containers, and containers it never started) removed, or stopped
    (their lease freed) and kept when they have changes."""
    try:
        orphans = orphan_kernel_containers(host, ledger_id, machine)
    except (GPUDevError, docker.errors.DockerException) as exc:
        log.warning("gpudev: orphan kernels on %s not checked: %r", host.name, exc)
        return []
    stopped: list[str] = []
    for container in orphans:
        name = container.labels.get(L_NAME, user_name(container.name or ""))
        try:
            remove(name, host.name)
        except Conflict:
            pass  # stopped (lease freed) and kept: it has changes
        except GPUDevError as err:
            log.warning("gpudev: orphan kernel container %s: %s", name, err.message)
            continue
        log.info("gpudev: stopped %s, left by a server that is gone", name)
        stopped.append(name)
    return stopped
