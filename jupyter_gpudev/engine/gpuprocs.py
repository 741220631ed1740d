"""The processes on a host's GPUs: which host PID holds how much memory on which GPU, and how
busy it keeps it where the driver samples that.

Read through NVML (``read_nvml_processes``, on the session ``NvmlProbe`` keeps open) or from
``nvidia-smi --query-compute-apps`` (``smi_processes``, here or through a host's command
runner). Like the inventory, "cannot tell" is a normal answer: a driver without a call leaves
that GPU ``unknown``, unreadable output gives a ``reason``; nothing here raises on what a driver
or a tool printed. ``GPUInventory.processes`` (``gpus.py``) is the cached entry point;
``attribution.py`` maps the PIDs to containers.
"""

from __future__ import annotations

import csv
import re
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from types import ModuleType
from typing import Any, Literal

Source = Literal["nvml", "nvidia-smi", "none"]
#: As ``nvidia-smi`` shows it: compute, graphics, or both.
ProcessType = Literal["C", "G", "C+G"]

#: The fields asked of ``nvidia-smi --query-compute-apps``, in this order.
APPS_FIELDS = ("gpu_uuid", "pid", "used_memory")

#: Linux's PID_MAX_LIMIT on 64-bit machines: no PID is larger.
PID_MAX = 4_194_304
#: The most lines of ``nvidia-smi`` process output read (a GPU runs at most a few hundred).
MAX_APPS_LINES = 65_536

_UUID_RE = re.compile(r"^(GPU|MIG)-[0-9A-Za-z/-]+\Z")
_DIGITS = re.compile(r"[0-9]{1,10}\Z")
_MISSING = {"", "n/a", "[n/a]", "[not supported]", "not supported", "[unknown error]"}
_NOT_AVAILABLE = (1 << 64) - 1  # NVML_VALUE_NOT_AVAILABLE_ulonglong


@dataclass(frozen=True)
class GPUProcess:
    """One process on one GPU, by its PID on the host."""

    gpu_uuid: str
    pid: int
    #: What it holds on that GPU; ``None`` where the driver does not say.
    memory_used_mib: int | None = None
    type: ProcessType = "C"
    #: Its share of the GPU's SM and memory-controller time over the samples since the last
    #: read, in percent; ``None`` without a sample (see ``GPUProcesses.sampled``).
    sm_percent: int | None = None
    memory_percent: int | None = None


@dataclass(frozen=True)
class GPUProcesses:
    """What a read of a host's GPU processes found. ``reason`` set: nothing could be read."""

    source: Source
    processes: tuple[GPUProcess, ...] = ()
    #: GPUs whose processes were listed: NVML names every GPU, ``nvidia-smi`` only those that
    #: run a process (its answer covers every GPU of the host all the same).
    listed: tuple[str, ...] = ()
    #: GPUs whose processes the driver would not list (a call it lacks or does not support).
    unknown: tuple[str, ...] = ()
    #: GPUs whose driver samples per-process utilisation (NVML only): a process there without
    #: a sample did no work since the last read.
    sampled: tuple[str, ...] = ()
    reason: str | None = None
    warnings: tuple[str, ...] = field(default=())
    #: True: the answer covers every GPU of the host, so a GPU named in neither ``listed`` nor
    #: ``unknown`` runs no process (``nvidia-smi``'s one list); False: such a GPU is unknown.
    every_gpu: bool = False

    def to_json(self) -> dict[str, Any]:
        return asdict(self)


# --------------------------------------------------------------------------------------------
# nvidia-smi
# --------------------------------------------------------------------------------------------


def _pid(text: str) -> int | None:
    text = text.strip()
    if not _DIGITS.match(text):
        return None
    value = int(text)
    return value if 0 < value <= PID_MAX else None


def parse_smi_apps(text: str) -> tuple[list[GPUProcess], list[str]]:
    """Parse ``nvidia-smi --query-compute-apps=<APPS_FIELDS> --format=csv,noheader,nounits``.

    Returns the processes and one warning per line that could not be read. A line without a
    valid GPU UUID and PID is skipped, never guessed at; a memory that is not a number is
    ``None``; at most ``MAX_APPS_LINES`` lines are read."""
    processes: list[GPUProcess] = []
    warnings: list[str] = []
    seen: set[tuple[str, int]] = set()
    lines = text.split("\n")
    if len(lines) > MAX_APPS_LINES:
        warnings.append(f"nvidia-smi printed more than {MAX_APPS_LINES} lines: the rest is unread")
        lines = lines[:MAX_APPS_LINES]
    for lineno, line in enumerate(lines, 1):
        if not line.strip() or line.strip().lower().startswith("no running"):
            continue
        try:
            row = next(csv.reader([line], skipinitialspace=True))
        except (csv.Error, StopIteration):
            row = []
        if len(row) != len(APPS_FIELDS):
            warnings.append(f"nvidia-smi process line {lineno}: expected {len(APPS_FIELDS)} fields")
            continue
        uuid, pid_text, memory_text = (cell.strip() for cell in row)
        pid = _pid(pid_text)
        if not _UUID_RE.match(uuid) or len(uuid) > 128 or pid is None:
            warnings.append(f"nvidia-smi process line {lineno}: no valid GPU UUID and PID")
            continue
        if (uuid, pid) in seen:
            warnings.append(f"nvidia-smi process line {lineno}: PID {pid} twice on {uuid}")
            continue
        seen.add((uuid, pid))
        memory: int | None = None
        if memory_text.lower() not in _MISSING:
            if _DIGITS.match(memory_text):
                memory = int(memory_text)
            else:
                warnings.append(f"nvidia-smi process line {lineno}: memory is not a number")
        processes.append(GPUProcess(gpu_uuid=uuid, pid=pid, memory_used_mib=memory))
    return processes, warnings


def smi_processes(text: str) -> GPUProcesses:
    """The answer of ``nvidia-smi --query-compute-apps`` (``parse_smi_apps``): unavailable when
    it printed something and none of it could be read."""
    processes, warnings = parse_smi_apps(text)
    reason = None
    if not processes and warnings:
        reason = "nvidia-smi's process list could not be read"
    return GPUProcesses(
        source="nvidia-smi",
        processes=() if reason else tuple(processes),
        listed=tuple(dict.fromkeys(p.gpu_uuid for p in processes)),
        reason=reason,
        warnings=tuple(warnings),
        every_gpu=reason is None,
    )


# --------------------------------------------------------------------------------------------
# NVML
# --------------------------------------------------------------------------------------------


def _text(value: Any) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)


def _classes(nvml: ModuleType, *names: str) -> tuple[type[BaseException], ...]:
    found = (getattr(nvml, name, None) for name in names)
    return tuple(c for c in found if isinstance(c, type) and issubclass(c, BaseException))


class _Calls:
    """NVML's optional calls: one the bindings or the driver lack is ``None``, not an error."""

    def __init__(self, nvml: ModuleType) -> None:
        self.nvml = nvml
        #: A call missing from the library or unsupported by this GPU. Other NVML errors (a GPU
        #: lost) are raised: the caller reports that GPU.
        self.lacking: tuple[type[BaseException], ...] = (
            AttributeError,
            *_classes(
                nvml,
                "NVMLError_NotSupported",
                "NVMLError_FunctionNotFound",
                "NVMLLibraryMismatchError",
            ),
        )
        self.no_samples = _classes(nvml, "NVMLError_NotFound")

    def optional(self, name: str, *args: Any) -> Any:
        try:
            call: Callable[..., Any] = getattr(self.nvml, name)
            return call(*args)
        except self.lacking:
            return None

    def samples(self, handle: Any, since: int) -> list[Any] | None:
        """Per-process utilisation samples newer than ``since`` (µs); ``[]`` when there are
        none, ``None`` when the driver does not sample (or would not say)."""
        try:
            return list(self.nvml.nvmlDeviceGetProcessUtilization(handle, since))
        except self.lacking:
            return None
        except self.nvml.NVMLError as exc:
            # NOT_FOUND (or, from some bindings, an error of value 0): no sample since then
            if self.no_samples and isinstance(exc, self.no_samples):
                return []
            return [] if getattr(exc, "value", None) == 0 else None


def _memory_mib(value: Any) -> int | None:
    if value is None:
        return None
    try:
        used = int(value)
    except (TypeError, ValueError):
        return None
    return used >> 20 if 0 <= used < _NOT_AVAILABLE else None


def _percent(values: list[int]) -> int | None:
    kept = [v for v in values if 0 <= v <= 100]
    return round(sum(kept) / len(kept)) if kept else None


def _utilisation(
    samples: list[Any], since: int
) -> tuple[dict[int, tuple[int | None, int | None]], int]:
    """Each PID's mean SM and memory utilisation over ``samples`` newer than ``since``, and the
    newest sample's time stamp (the next read's ``since``)."""
    sm: dict[int, list[int]] = {}
    memory: dict[int, list[int]] = {}
    newest = since
    for sample in samples:
        try:
            stamp, pid = int(sample.timeStamp), int(sample.pid)
            sm_util, mem_util = int(sample.smUtil), int(sample.memUtil)
        except (AttributeError, TypeError, ValueError):
            continue
        if stamp <= since:
            continue
        newest = max(newest, stamp)
        sm.setdefault(pid, []).append(sm_util)
        memory.setdefault(pid, []).append(mem_util)
    return {pid: (_percent(sm[pid]), _percent(memory[pid])) for pid in sm}, newest


def _gpu_processes(calls: _Calls, handle: Any, uuid: str) -> list[GPUProcess] | None:
    """One GPU's compute and graphics processes (a process in both lists once, as "C+G",
    with the larger memory); ``None`` when the driver would not list its compute processes."""
    compute = calls.optional("nvmlDeviceGetComputeRunningProcesses", handle)
    if compute is None:
        return None
    graphics = calls.optional("nvmlDeviceGetGraphicsRunningProcesses", handle) or []
    found: dict[int, GPUProcess] = {}
    for kind, listed in (("C", compute), ("G", graphics)):
        for entry in listed:
            pid = getattr(entry, "pid", None)
            if not isinstance(pid, int) or not 0 < pid <= PID_MAX:
                continue
            memory = _memory_mib(getattr(entry, "usedGpuMemory", None))
            before = found.get(pid)
            if before is None:
                found[pid] = GPUProcess(uuid, pid, memory, "C" if kind == "C" else "G")
            elif before.type == "C" and kind == "G":
                most = max(
                    (m for m in (before.memory_used_mib, memory) if m is not None), default=None
                )
                found[pid] = GPUProcess(uuid, pid, most, "C+G")
    return [found[pid] for pid in sorted(found)]


def read_nvml_processes(nvml: ModuleType, last_seen: dict[str, int]) -> GPUProcesses:
    """Every GPU's running processes through an initialised NVML, with per-process utilisation
    where the driver samples it: the mean of the samples since the last read, whose time stamp
    per GPU ``last_seen`` keeps (and this read updates).

    A GPU the driver cannot list is ``unknown``; a GPU that fails otherwise (lost) is a
    warning. An ``NVMLError`` outside any one GPU (the count) is raised."""
    calls = _Calls(nvml)
    processes: list[GPUProcess] = []
    listed: list[str] = []
    unknown: list[str] = []
    sampled: list[str] = []
    warnings: list[str] = []
    for index in range(int(nvml.nvmlDeviceGetCount())):
        uuid = f"GPU {index}"
        try:
            handle = nvml.nvmlDeviceGetHandleByIndex(index)
            uuid = _text(nvml.nvmlDeviceGetUUID(handle))
            found = _gpu_processes(calls, handle, uuid)
            if found is None:
                unknown.append(uuid)
                continue
            listed.append(uuid)
            samples = calls.samples(handle, last_seen.get(uuid, 0))
        except nvml.NVMLError as exc:
            warnings.append(f"{uuid}: {exc}")
            continue
        if samples is not None:
            sampled.append(uuid)
            shares, last_seen[uuid] = _utilisation(samples, last_seen.get(uuid, 0))
            found = [
                GPUProcess(p.gpu_uuid, p.pid, p.memory_used_mib, p.type, *shares[p.pid])
                if p.pid in shares
                else p
                for p in found
            ]
        processes.extend(found)
    return GPUProcesses(
        source="nvml",
        processes=tuple(processes),
        listed=tuple(listed),
        unknown=tuple(unknown),
        sampled=tuple(sampled),
        warnings=tuple(warnings),
    )
