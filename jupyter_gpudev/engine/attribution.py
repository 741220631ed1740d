"""Which container each process on a host's GPUs belongs to, read from the host's ``/proc``.

A host PID's container is in ``/proc/PID/cgroup`` (``container_id``): cgroup v1 and v2, the
engine's cgroupfs driver (``/docker/<id>``) and systemd driver
(``/system.slice/docker-<id>.scope``), and a kubelet's pods (``/kubepods/[<qos>/]pod<uid>/<id>``,
``/kubepods.slice/...`` with containerd's, CRI-O's or cri-dockerd's scope), each only at the
root of the cgroup tree. A path under ``/user.slice`` is a local account's (systemd delegates
``user@UID.service`` to it: it names its cgroups there as it likes), so it is no container,
with one exception: a rootless engine's containers, in its owner's slice
(``/user.slice/user-UID.slice/user@UID.service/user.slice/docker-<id>.scope``, cgroup v2 and
the systemd driver), for the owner the host reports only (``rootless_uid``: the owner of the
engine's socket here, the SSH user on an ``ssh://`` host; ``hosts.DockerEngine.proc_reader``).
That account owns every container of its engine, so it can name none of another account's; an
engine that is not rootless reports none, and then no path there is read. Anything else is no
container. A PID inside a container's namespace (what a kernel's PID file holds) maps to the
host's through ``NSpid`` in ``/proc/PID/status`` (``host_pid``).

Which of a container's processes are looked at for that: each GPU process and its ancestors
inside its container (``AttributedProcess.lineage``), read by the same pass that reads its
cgroup. A kernel holds GPU memory when it, or a process it started, holds it, so the kernel's
process is in that lineage; nothing else is needed, and no per-container call to the engine
(``docker top``: one request per container per poll) nor a cgroup folder to find
(``cgroup.procs``: where it lives depends on the cgroup version, the driver and namespaces). A
process a kernel started and left (a daemon, re-parented to the container's init) counts for the
container, not the kernel.

``/proc`` is read here (``LocalProcReader``) or on an ``ssh://`` host by one command per read
(``CommandProcReader``: a fixed awk program, the PIDs its arguments). Both treat what they read
as hostile: bounded, matched against strict patterns, never raising on odd content; a PID gone
meanwhile is simply absent. The server must see the host's PIDs (run on the host, or with the
host's PID namespace), as NVML and ``nvidia-smi`` report them.
"""

from __future__ import annotations

import functools
import re
import subprocess
from collections.abc import Callable, Iterable, Mapping
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Protocol

from .gpuprocs import PID_MAX, GPUProcess, GPUProcesses, ProcessType, Source
from .gpus import ProbeUnavailable

#: The most lines of a cgroup file, and characters of one line, taken for real: a host has
#: about 15 cgroup hierarchies and the kernel prints a path of at most PATH_MAX.
MAX_CGROUP_LINES = 64
MAX_LINE = 4096
#: The most ancestors of a process walked inside its container.
MAX_DEPTH = 32
#: The most PIDs one read asks about (a host runs a few hundred GPU processes at most).
MAX_PIDS = 4096

_ID = re.compile(r"[0-9a-f]{64}\Z")
#: The engine's systemd driver: ``docker-<id>.scope`` in ``/system.slice``.
_ENGINE_SCOPE = re.compile(r"docker-([0-9a-f]{64})\.scope\Z")
#: A pod's container with the kubelet's systemd driver: its runtime's scope (containerd's CRI,
#: CRI-O, cri-dockerd) in the pod's slice.
_POD_SCOPE = re.compile(r"(?:docker|cri-containerd|crio)-([0-9a-f]{64})\.scope\Z")
#: A pod's cgroup (cgroupfs driver; systemd driver): ``pod`` and its UID (a UUID, or a static
#: pod's hash), its dashes written as ``_`` in a slice's name.
_POD_FOLDER = re.compile(r"pod[0-9a-f][0-9a-f-]{0,63}\Z")
_POD_SLICE = re.compile(r"pod[0-9a-f][0-9a-f_]{0,63}\.slice\Z")
#: The kubelet's QoS classes with a cgroup of their own (a Guaranteed pod has none).
_QOS = ("burstable", "besteffort")
_QOS_SLICES = tuple(f"kubepods-{qos}.slice" for qos in _QOS)
_HIERARCHY = re.compile(r"[0-9]{1,4}\Z")
_NUMBER = re.compile(r"[0-9]{1,10}\Z")
_CONTROL = re.compile(r"[\x00-\x1f\x7f]")
_STATUS_KEYS = ("PPid", "Uid", "NSpid")


# --------------------------------------------------------------------------------------------
# Pure readings of /proc files
# --------------------------------------------------------------------------------------------


def _path_container(path: str, rootless_uid: int | None = None) -> str | None:
    """The container a cgroup path names; ``None`` for anything else, a path with ``.``,
    ``..``, an empty part or a control character included.

    Only the paths an engine or a kubelet makes, from the root of the cgroup namespace the
    file was read in: ``/docker/<id>`` (cgroupfs driver), ``/system.slice/docker-<id>.scope``
    (systemd driver), ``/kubepods[/<qos>]/pod<uid>/<id>`` and
    ``/kubepods.slice[/kubepods-<qos>.slice]/kubepods[-<qos>]-pod<uid>.slice/<runtime>-<id>.scope``
    (a kubelet's two drivers), each with anything below it (a container's own cgroups; an
    engine or kubelet inside a container is that outer container). The same name elsewhere
    is no container: under ``/user.slice`` a local account makes what it likes (systemd
    delegates ``user@UID.service`` to it). Only there, and only for ``rootless_uid`` (the
    account that owns the host's rootless engine; ``None``: none), that engine's systemd
    driver: ``/user.slice/user-UID.slice/user@UID.service/user.slice/docker-<id>.scope`` and
    anything below it."""
    if not path.startswith("/") or _CONTROL.search(path):
        return None
    parts = path[1:].split("/")
    if any(part in ("", ".", "..") for part in parts):
        return None
    if parts[0] == "user.slice":
        return _rootless(parts[1:], rootless_uid) if len(parts) > 1 else None
    below = _BELOW.get(parts[0])
    return below(parts[1:]) if below is not None and len(parts) > 1 else None


def _rootless(rest: list[str], uid: int | None) -> str | None:
    """Below ``/user.slice``: ``user-UID.slice/user@UID.service/user.slice/docker-<id>.scope``,
    ``UID`` the rootless engine's owner (``None``: no path here is a container)."""
    if uid is None or uid < 0 or len(rest) < 4:
        return None
    if rest[:3] != [f"user-{uid}.slice", f"user@{uid}.service", "user.slice"]:
        return None
    scope = _ENGINE_SCOPE.match(rest[3])
    return scope.group(1) if scope else None


def _engine_cgroupfs(rest: list[str]) -> str | None:
    """Below ``/docker``: ``<id>``."""
    return rest[0] if _ID.match(rest[0]) else None


def _engine_systemd(rest: list[str]) -> str | None:
    """Below ``/system.slice``: ``docker-<id>.scope``."""
    scope = _ENGINE_SCOPE.match(rest[0])
    return scope.group(1) if scope else None


def _kubepods_cgroupfs(rest: list[str]) -> str | None:
    """Below ``/kubepods``: ``[<qos>/]pod<uid>/<id>``."""
    if rest[0] in _QOS:
        rest = rest[1:]
    if len(rest) >= 2 and _POD_FOLDER.match(rest[0]) and _ID.match(rest[1]):
        return rest[1]
    return None


def _kubepods_systemd(rest: list[str]) -> str | None:
    """Below ``/kubepods.slice``: ``[kubepods-<qos>.slice/]kubepods[-<qos>]-pod<uid>.slice/``
    and a runtime's scope."""
    prefix = "kubepods-"
    if rest[0] in _QOS_SLICES:
        prefix = rest[0].removesuffix(".slice") + "-"
        rest = rest[1:]
    if len(rest) < 2 or not rest[0].startswith(prefix):
        return None
    if not _POD_SLICE.match(rest[0], len(prefix)):
        return None
    scope = _POD_SCOPE.match(rest[1])
    return scope.group(1) if scope else None


#: The top cgroup of each layout, and what reads the rest of its path (never empty).
_BELOW: dict[str, Callable[[list[str]], str | None]] = {
    "docker": _engine_cgroupfs,
    "system.slice": _engine_systemd,
    "kubepods": _kubepods_cgroupfs,
    "kubepods.slice": _kubepods_systemd,
}


def container_id(cgroup: str, rootless_uid: int | None = None) -> str | None:
    """The full id of the container a ``/proc/PID/cgroup`` names, or ``None``: no container,
    an unknown layout, lines that disagree, or a file too large to be the kernel's.
    ``rootless_uid``: the account that owns the host's rootless engine (``_path_container``)."""
    # The processes of one container have the same file: a poll reads a few distinct ones.
    if len(cgroup) <= 8192:
        return _container_id_cached(cgroup, rootless_uid)
    return _container_id(cgroup, rootless_uid)


def _container_id(cgroup: str, rootless_uid: int | None = None) -> str | None:
    lines = cgroup.split("\n")
    if lines[-1] == "":
        lines.pop()
    if len(lines) > MAX_CGROUP_LINES:
        return None
    found: set[str] = set()
    for line in lines:
        if not line:
            continue
        if len(line) > MAX_LINE:
            return None
        hierarchy, _, rest = line.partition(":")
        _controllers, colon, path = rest.partition(":")
        if not colon or not _HIERARCHY.match(hierarchy):
            continue
        found_id = _path_container(path, rootless_uid)
        if found_id is not None:
            found.add(found_id)
    return found.pop() if len(found) == 1 else None


_container_id_cached = functools.lru_cache(maxsize=512)(_container_id)


@dataclass(frozen=True)
class ProcStatus:
    """What ``/proc/PID/status`` says of a process that attribution needs."""

    #: Its PID where ``/proc`` was read (the host's).
    pid: int
    ppid: int | None
    #: Its real user id.
    uid: int | None
    #: ``NSpid``: its PID in each PID namespace it is in, the host's first, the innermost last
    #: (a container's process: host, container); ``()`` where the kernel does not say.
    ns_pids: tuple[int, ...] = ()

    @property
    def in_container(self) -> bool:
        """In a PID namespace below the host's."""
        return len(self.ns_pids) > 1

    @property
    def container_pid(self) -> int | None:
        """Its PID in its container's namespace (the one below the host's)."""
        return self.ns_pids[1] if len(self.ns_pids) > 1 else None


def _number(text: str, *, low: int = 0, high: int = PID_MAX) -> int | None:
    if not _NUMBER.match(text):
        return None
    value = int(text)
    return value if low <= value <= high else None


def parse_status(pid: int, text: str) -> ProcStatus | None:
    """The parent, user and ``NSpid`` of ``/proc/PID/status``; ``None`` without a valid
    ``PPid`` (not a status file). A ``NSpid`` that is not a list of PIDs is ``()``."""
    values: dict[str, list[str]] = {}
    for line in text.split("\n", 128)[:128]:
        key, colon, rest = line.partition(":")
        if colon and key in _STATUS_KEYS and key not in values and len(rest) <= 512:
            values[key] = rest.split()
            if len(values) == len(_STATUS_KEYS):
                break
    ppid_field = values.get("PPid", [])
    ppid = _number(ppid_field[0]) if len(ppid_field) == 1 else None
    if ppid is None:
        return None
    uid_field = values.get("Uid", [])
    uid = _number(uid_field[0], high=(1 << 32) - 1) if uid_field else None
    ns_field = values.get("NSpid", [])
    ns = [_number(value, low=1) for value in ns_field]
    ns_pids = tuple(v for v in ns if v is not None)
    if len(ns_pids) != len(ns_field) or len(ns_pids) > MAX_DEPTH + 1:
        ns_pids = ()
    return ProcStatus(pid=pid, ppid=ppid, uid=uid, ns_pids=ns_pids)


def host_pid(container_pid: int, statuses: Iterable[ProcStatus]) -> int | None:
    """The host PID of the process whose PID in its container's namespace is
    ``container_pid``, among ``statuses`` (processes of one container: a GPU process's
    ``lineage``, or any the caller read); ``None`` when none, or more than one, is."""
    found = {s.pid for s in statuses if s.container_pid == container_pid}
    return found.pop() if len(found) == 1 else None


@dataclass(frozen=True)
class ProcSnapshot:
    """One read of ``/proc``: each asked PID found, its container (``None``: none), and the
    status of each, and of its ancestors inside its container. A PID gone is in neither."""

    containers: Mapping[int, str | None] = field(default_factory=dict)
    statuses: Mapping[int, ProcStatus] = field(default_factory=dict)

    def lineage(self, pid: int) -> tuple[ProcStatus, ...]:
        """``pid``'s status and its ancestors' inside its container, nearest first."""
        chain: list[ProcStatus] = []
        current = self.statuses.get(pid)
        while current is not None and len(chain) <= MAX_DEPTH:
            chain.append(current)
            if not current.in_container or current.ppid is None:
                break
            parent = self.statuses.get(current.ppid)
            if parent is None or not parent.in_container or parent.pid in {s.pid for s in chain}:
                break
            current = parent
        return tuple(chain)


def valid_pids(pids: Iterable[object]) -> list[int]:
    """``pids`` that are PIDs (integers in range), each once, in order, at most ``MAX_PIDS``."""
    kept = [p for p in pids if type(p) is int and 0 < p <= PID_MAX]
    return list(dict.fromkeys(kept))[:MAX_PIDS]


# --------------------------------------------------------------------------------------------
# Readers: /proc here, or on a host through one command
# --------------------------------------------------------------------------------------------


class ProcReader(Protocol):
    """Reads what attribution needs of ``pids`` from a host's ``/proc`` (blocking); raises
    ``ProbeUnavailable`` when it cannot be read at all."""

    def read(self, pids: Iterable[int]) -> ProcSnapshot: ...


class LocalProcReader:
    """This machine's ``/proc`` (``root``: another folder shaped like it, for tests);
    ``rootless_uid``: the account that owns the engine where it is rootless (``container_id``)."""

    #: Bytes read of a cgroup file: more than ``container_id`` takes, so that a larger file is
    #: seen to be one.
    READ_LIMIT = (MAX_CGROUP_LINES + 2) * (MAX_LINE + 1)

    def __init__(self, root: str | Path = "/proc", *, rootless_uid: int | None = None) -> None:
        self.root = str(root)
        self.rootless_uid = rootless_uid

    def _file(self, pid: int, name: str, limit: int) -> str | None:
        try:
            with open(f"{self.root}/{pid}/{name}", "rb", buffering=0) as file:
                return file.read(limit).decode(errors="replace")
        except OSError:
            return None

    def _status(self, pid: int) -> ProcStatus | None:
        text = self._file(pid, "status", 1 << 16)
        return None if text is None else parse_status(pid, text)

    def read(self, pids: Iterable[int]) -> ProcSnapshot:
        containers: dict[int, str | None] = {}
        statuses: dict[int, ProcStatus] = {}
        for pid in valid_pids(pids):
            status = self._status(pid)
            if status is None:
                continue
            cgroup = self._file(pid, "cgroup", self.READ_LIMIT)
            containers[pid] = None if cgroup is None else container_id(cgroup, self.rootless_uid)
            statuses[pid] = status
        for pid in list(containers):
            current = statuses[pid]
            for _ in range(MAX_DEPTH):
                if not current.in_container or current.ppid is None or current.ppid in statuses:
                    break
                parent = self._status(current.ppid)
                if parent is None:
                    break
                statuses[parent.pid] = parent
                current = parent
        return ProcSnapshot(containers, statuses)


#: The program ``CommandProcReader`` runs on a host: ``awk PROGRAM ROOT PID...``. For each PID
#: found it prints ``=p PID``, its cgroup file's lines as ``c LINE`` (at most one line and
#: character past the limits, so that a larger file is seen to be one) and its status's
#: ``PPid``, ``Uid`` and ``NSpid`` lines as ``s LINE``; then ``=a PID`` and ``s`` lines for
#: each ancestor inside its container. Every line read is printed after a prefix, so none can
#: pass for a record's start.
PROC_PROGRAM = r"""
function status(pid,    f, line, n, got, parts) {
    f = root "/" pid "/status"; st = ""; ppid = ""; nsn = 0; got = 0
    while ((getline line < f) > 0) {
        got = 1
        if (++n > 128) break
        if (line ~ /^(PPid|Uid|NSpid):/) st = st "s " substr(line, 1, 512) "\n"
        if (line ~ /^PPid:/) { ppid = line; sub(/^PPid:[ \t]*/, "", ppid) }
        if (line ~ /^NSpid:/) { nsn = split(line, parts); break }
    }
    close(f)
    return got
}
function cgroup(pid,    f, line, n) {
    f = root "/" pid "/cgroup"
    while ((getline line < f) > 0) {
        if (++n > MAXLINES + 1) break
        print "c " substr(line, 1, MAXLINE + 1)
    }
    close(f)
}
BEGIN {
    root = ARGV[1]
    for (i = 2; i < ARGC; i++) {
        pid = ARGV[i]
        if (pid !~ /^[1-9][0-9]*$/ || length(pid) > 7 || (pid in asked)) continue
        asked[pid] = 1
        if (!status(pid)) continue
        seen[pid] = 1
        print "=p " pid
        cgroup(pid)
        printf "%s", st
        for (depth = 0; nsn > 2 && depth < MAXDEPTH; depth++) {
            p = ppid
            if (p !~ /^[1-9][0-9]*$/ || length(p) > 7 || (p in seen)) break
            seen[p] = 1
            if (!status(p)) break
            print "=a " p
            printf "%s", st
        }
    }
    exit 0
}
"""


_PROGRAM = (
    PROC_PROGRAM.replace("MAXLINES", str(MAX_CGROUP_LINES))
    .replace("MAXLINE", str(MAX_LINE))
    .replace("MAXDEPTH", str(MAX_DEPTH))
)


def parse_proc_output(text: str, rootless_uid: int | None = None) -> ProcSnapshot:
    """What ``PROC_PROGRAM`` printed, read as hostile: anything but its records is ignored,
    at most ``MAX_CGROUP_LINES + 1`` cgroup lines a PID are kept. ``rootless_uid``: as
    ``container_id``'s."""
    records: list[tuple[str, int, list[str], list[str]]] = []
    current: tuple[str, int, list[str], list[str]] | None = None
    for line in text.split("\n"):
        if line.startswith("="):
            kind, _, pid_text = line[1:].partition(" ")
            pid = _number(pid_text, low=1)
            current = (kind, pid, [], []) if kind in ("p", "a") and pid is not None else None
            if current is not None:
                records.append(current)
        elif current is not None and line.startswith("c ") and current[0] == "p":
            if len(current[2]) <= MAX_CGROUP_LINES + 1:
                current[2].append(line[2:])
        elif current is not None and line.startswith("s ") and len(current[3]) < 8:
            current[3].append(line[2:])
    containers: dict[int, str | None] = {}
    statuses: dict[int, ProcStatus] = {}
    for kind, pid, cgroup, status_lines in records:
        status = parse_status(pid, "\n".join(status_lines))
        if status is None:
            continue
        statuses[pid] = status
        if kind == "p":
            containers[pid] = container_id("\n".join(cgroup), rootless_uid)
    return ProcSnapshot(containers, statuses)


#: Runs an argument list on a host and returns its result (``Host.smi_runner``).
Runner = Callable[[list[str], float], "subprocess.CompletedProcess[str]"]


class CommandProcReader:
    """A host's ``/proc`` read by one command per read: ``awk`` with a fixed program
    (``PROC_PROGRAM``), the PIDs (checked integers) its arguments, never a shell string
    built from data; bounded by ``timeout`` and by the runner's output limit.
    ``rootless_uid``: the account that owns the engine where it is rootless (``container_id``)."""

    def __init__(
        self,
        runner: Runner,
        timeout: float = 10.0,
        root: str = "/proc",
        where: str | None = None,
        *,
        rootless_uid: int | None = None,
    ) -> None:
        if not root.startswith("/") or _CONTROL.search(root) or "=" in root:
            raise ValueError(f"not a /proc folder: {root!r}")
        self.runner = runner
        self.timeout = timeout
        self.root = root
        self.where = where or "the host"
        self.rootless_uid = rootless_uid

    def argv(self, pids: Iterable[int]) -> list[str]:
        return ["awk", _PROGRAM, self.root, *(str(pid) for pid in valid_pids(pids))]

    def read(self, pids: Iterable[int]) -> ProcSnapshot:
        argv = self.argv(pids)
        if len(argv) == 3:
            return ProcSnapshot()
        try:
            result = self.runner(argv, self.timeout)
        except subprocess.TimeoutExpired as exc:
            raise ProbeUnavailable(
                f"reading /proc on {self.where} took more than {self.timeout:g} s"
            ) from exc
        except OSError as exc:
            raise ProbeUnavailable(f"awk could not be run on {self.where}: {exc.strerror}") from exc
        if result.returncode == 127:
            raise ProbeUnavailable(f"awk was not found on {self.where}")
        if result.returncode != 0:
            raise ProbeUnavailable(
                f"reading /proc on {self.where} failed (exit {result.returncode})"
            )
        return parse_proc_output(result.stdout, self.rootless_uid)


# --------------------------------------------------------------------------------------------
# Attribution
# --------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class AttributedProcess:
    """A process on a GPU and whose it is."""

    pid: int
    memory_used_mib: int | None
    sm_percent: int | None
    memory_percent: int | None
    type: ProcessType
    #: The full id of its container; ``None``: "other" (no container, or gone when read).
    container_id: str | None
    #: Its real user id where it was read.
    uid: int | None = None
    #: It and its ancestors inside its container, nearest first (``ProcSnapshot.lineage``).
    lineage: tuple[ProcStatus, ...] = ()

    def held_by(self, container_pid: int) -> bool:
        """Whether the process whose PID in the container's namespace is ``container_pid``
        (a kernel's, from its PID file) is this one or one of its ancestors."""
        return host_pid(container_pid, self.lineage) is not None


@dataclass(frozen=True)
class GPUUse:
    """One GPU's processes, attributed."""

    uuid: str
    processes: tuple[AttributedProcess, ...] = ()
    #: False: the driver would not list this GPU's processes (unknown, not idle).
    listed: bool = True
    #: The driver samples per-process utilisation here (``GPUProcesses.sampled``).
    sampled: bool = False


@dataclass(frozen=True)
class Attribution:
    """A host's GPU processes by GPU, each with its container. ``reason``: the processes could
    not be read; ``proc_reason``: they could, ``/proc`` could not (no process is attributed)."""

    source: Source
    gpus: tuple[GPUUse, ...] = ()
    reason: str | None = None
    proc_reason: str | None = None
    warnings: tuple[str, ...] = ()
    #: A GPU not in ``gpus`` runs no process (True) or was not read (False): ``GPUProcesses``'.
    every_gpu: bool = False

    def gpu(self, uuid: str) -> GPUUse | None:
        """``uuid``'s processes: as read, or none (listed) where the read covered every GPU."""
        found = next((g for g in self.gpus if g.uuid == uuid), None)
        if found is None and self.every_gpu and self.reason is None:
            return GPUUse(uuid)
        return found

    def to_json(self) -> dict[str, Any]:
        return asdict(self)


def _attributed(process: GPUProcess, snapshot: ProcSnapshot) -> AttributedProcess:
    status = snapshot.statuses.get(process.pid)
    return AttributedProcess(
        pid=process.pid,
        memory_used_mib=process.memory_used_mib,
        sm_percent=process.sm_percent,
        memory_percent=process.memory_percent,
        type=process.type,
        container_id=snapshot.containers.get(process.pid),
        uid=status.uid if status else None,
        lineage=snapshot.lineage(process.pid),
    )


def assign(
    processes: GPUProcesses, snapshot: ProcSnapshot, *, proc_reason: str | None = None
) -> Attribution:
    """``processes`` by GPU (in the order the driver listed them), each process with its
    container from ``snapshot`` (pure)."""
    by_gpu: dict[str, list[AttributedProcess]] = {
        uuid: [] for uuid in (*processes.listed, *processes.unknown)
    }
    for process in processes.processes:
        by_gpu.setdefault(process.gpu_uuid, []).append(_attributed(process, snapshot))
    unknown, sampled = set(processes.unknown), set(processes.sampled)
    return Attribution(
        source=processes.source,
        gpus=tuple(
            GPUUse(uuid, tuple(found), listed=uuid not in unknown, sampled=uuid in sampled)
            for uuid, found in by_gpu.items()
        ),
        reason=processes.reason,
        proc_reason=proc_reason,
        warnings=processes.warnings,
        every_gpu=processes.every_gpu,
    )


def attribute(processes: GPUProcesses, reader: ProcReader) -> Attribution:
    """``processes`` by GPU with their containers, ``/proc`` read once through ``reader``
    (one command on an ``ssh://`` host); a ``/proc`` that cannot be read is ``proc_reason``."""
    pids = [p.pid for p in processes.processes]
    if not pids:
        return assign(processes, ProcSnapshot())
    try:
        snapshot = reader.read(pids)
    except ProbeUnavailable as exc:
        return assign(processes, ProcSnapshot(), proc_reason=str(exc))
    return assign(processes, snapshot)
