"""GPU inventory of the local host: NVML first, ``nvidia-smi`` as the fallback.

GPUs are identified by UUID, never by index. "No GPU" is a normal state: the inventory then
says why (no driver, no NVML library, no ``nvidia-smi``) instead of raising. The processes on the
GPUs are read the same ways, on the same NVML session (``GPUInventory.processes``; parsing and
types in ``gpuprocs.py``).

Nothing here touches NVML at import time. The two seams for tests are the NVML loader
(``NvmlProbe(loader=...)``) and the ``nvidia-smi`` executable (a fake one on ``PATH`` or
``c.GPUInventory.nvidia_smi_path``); both exercise the real parsing code.
"""

from __future__ import annotations

import contextlib
import csv
import functools
import importlib
import re
import shutil
import subprocess
import threading
import time
from collections.abc import Callable, Iterable
from dataclasses import asdict, dataclass, field, replace
from types import ModuleType
from typing import Any, TypeVar

from traitlets import Enum, Float, Unicode
from traitlets.config import LoggingConfigurable

from ..traits import PositiveFloat
from .gpuprocs import APPS_FIELDS, GPUProcesses, Source, read_nvml_processes, smi_processes

#: The fields asked of ``nvidia-smi --query-gpu``, in this order.
SMI_FIELDS = (
    "index",
    "uuid",
    "name",
    "memory.total",
    "memory.used",
    "utilization.gpu",
    "driver_version",
    "pci.bus_id",
    "mig.mode.current",
)

_MISSING = {"", "n/a", "[n/a]", "[not supported]", "not supported", "[unknown error]", "[gpu lost]"}
_UUID_RE = re.compile(r"^(GPU|MIG)-[0-9A-Za-z/-]+\Z")
_CUDA_RE = re.compile(r"CUDA Version\s*:?\s*([0-9]+\.[0-9]+)")
_L_GPU_RE = re.compile(r"^GPU\s+(\d+):\s*(.*?)\s*\(UUID:\s*(GPU-[^)\s]+)\)")
_L_MIG_RE = re.compile(r"^\s+MIG\s+(\S+)\s+Device\s+(\d+):\s*\(UUID:\s*(MIG-[^)\s]+)\)")


@dataclass(frozen=True)
class MigDevice:
    """One MIG instance of a GPU: leasable on its own by its ``MIG-`` UUID."""

    uuid: str
    index: int
    profile: str
    memory_total_mib: int | None = None


@dataclass(frozen=True)
class GPU:
    """One physical GPU of a host."""

    uuid: str
    index: int
    name: str
    memory_total_mib: int | None = None
    memory_used_mib: int | None = None
    utilization_percent: int | None = None
    driver_version: str | None = None
    cuda_version: str | None = None
    pci_bus_id: str | None = None
    mig_enabled: bool = False
    mig_devices: tuple[MigDevice, ...] = ()
    #: The N of /dev/nvidiaN (NVML only; nvidia-smi does not say).
    minor_number: int | None = None


@dataclass(frozen=True)
class Inventory:
    """What a probe found. ``gpus`` empty with ``reason`` set is the normal "no GPU" answer."""

    source: Source
    gpus: tuple[GPU, ...] = ()
    driver_version: str | None = None
    cuda_version: str | None = None
    reason: str | None = None
    warnings: tuple[str, ...] = field(default=())

    def to_json(self) -> dict[str, Any]:
        return asdict(self)


class ProbeUnavailable(Exception):
    """A probe cannot run here (no library, no binary); ``str()`` says why, for people."""


# --------------------------------------------------------------------------------------------
# Parsing helpers shared by both probes
# --------------------------------------------------------------------------------------------


def _opt_str(value: str) -> str | None:
    value = value.strip()
    return None if value.lower() in _MISSING else value


def _opt_int(value: str) -> int | None:
    text = _opt_str(value)
    if text is None:
        return None
    text = text.removesuffix("%").removesuffix("MiB").strip()
    try:
        return int(float(text))
    except ValueError:
        return None


def cuda_version_from_int(value: int) -> str:
    """NVML encodes CUDA 12.4 as 12040."""
    return f"{value // 1000}.{(value % 1000) // 10}"


def parse_smi_csv(text: str) -> tuple[list[GPU], list[str]]:
    """Parse ``nvidia-smi --query-gpu=<SMI_FIELDS> --format=csv,noheader,nounits``.

    Returns the GPUs and one warning per line that could not be read. Lines with the wrong
    number of fields, a non-numeric index or no valid UUID are skipped, never guessed at.
    """
    gpus: list[GPU] = []
    warnings: list[str] = []
    seen: set[str] = set()
    for lineno, row in enumerate(csv.reader(text.splitlines(), skipinitialspace=True), 1):
        if not row or all(not cell.strip() for cell in row):
            continue
        if len(row) != len(SMI_FIELDS):
            warnings.append(f"nvidia-smi line {lineno}: expected {len(SMI_FIELDS)} fields")
            continue
        values = dict(zip(SMI_FIELDS, (cell.strip() for cell in row), strict=True))
        index = _opt_int(values["index"])
        uuid = values["uuid"]
        if index is None or not values["index"].strip().isdigit() or not _UUID_RE.match(uuid):
            warnings.append(f"nvidia-smi line {lineno}: no valid index and UUID")
            continue
        if uuid in seen:
            warnings.append(f"nvidia-smi line {lineno}: duplicate UUID {uuid}")
            continue
        seen.add(uuid)
        mig = (_opt_str(values["mig.mode.current"]) or "").lower() == "enabled"
        gpus.append(
            GPU(
                uuid=uuid,
                index=index,
                name=_opt_str(values["name"]) or "NVIDIA GPU",
                memory_total_mib=_opt_int(values["memory.total"]),
                memory_used_mib=_opt_int(values["memory.used"]),
                utilization_percent=_opt_int(values["utilization.gpu"]),
                driver_version=_opt_str(values["driver_version"]),
                pci_bus_id=_opt_str(values["pci.bus_id"]),
                mig_enabled=mig,
            )
        )
    return gpus, warnings


def parse_smi_list(text: str) -> dict[str, list[MigDevice]]:
    """Parse ``nvidia-smi -L`` into the MIG devices of each GPU, keyed by the GPU's UUID."""
    result: dict[str, list[MigDevice]] = {}
    current: str | None = None
    for line in text.splitlines():
        gpu = _L_GPU_RE.match(line)
        if gpu:
            current = gpu.group(3)
            result.setdefault(current, [])
            continue
        mig = _L_MIG_RE.match(line)
        if mig and current is not None:
            result[current].append(
                MigDevice(uuid=mig.group(3), index=int(mig.group(2)), profile=mig.group(1))
            )
    return result


def parse_cuda_version(text: str) -> str | None:
    """The highest CUDA version the driver supports, from ``nvidia-smi`` or ``nvidia-smi -q``."""
    match = _CUDA_RE.search(text)
    return match.group(1) if match else None


def _with_driver(gpus: Iterable[GPU], driver: str | None, cuda: str | None) -> tuple[GPU, ...]:
    return tuple(
        replace(g, driver_version=g.driver_version or driver, cuda_version=cuda) for g in gpus
    )


# --------------------------------------------------------------------------------------------
# Probes
# --------------------------------------------------------------------------------------------


def _import_pynvml() -> ModuleType:
    return importlib.import_module("pynvml")


def _text(value: Any) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)


class NvmlProbe:
    """Reads the inventory through NVML (``nvidia-ml-py``). ``loader`` is the test seam.

    NVML is initialised on the first probe (never at import) and kept until ``close()``: a
    read costs 0.44 ms then, against 14 ms with a start and a shutdown around it (one H200,
    persistence mode on; ``benchmarks/results/gpu-inventory.md``), and more on hosts with more
    GPUs or without persistence mode. A failure while reading (driver reloaded, GPU lost) shuts
    it down so that the next probe starts afresh.
    """

    def __init__(self, loader: Callable[[], ModuleType] = _import_pynvml) -> None:
        self._loader = loader
        self._nvml: ModuleType | None = None
        self._lock = threading.Lock()
        #: Per GPU, the time stamp of the newest utilisation sample read (for the next read).
        self._last_sample: dict[str, int] = {}

    def _ensure(self) -> ModuleType:
        if self._nvml is not None:
            return self._nvml
        try:
            nvml = self._loader()
        except ImportError as exc:
            raise ProbeUnavailable("the nvidia-ml-py package is not installed") from exc
        try:
            nvml.nvmlInit()
        except nvml.NVMLError as exc:
            raise ProbeUnavailable(self._init_reason(nvml, exc)) from exc
        self._nvml = nvml
        return nvml

    def probe(self) -> Inventory:
        with self._lock:
            nvml = self._ensure()
            try:
                return self._read(nvml)
            except nvml.NVMLError as exc:
                self._shutdown()
                raise ProbeUnavailable(f"NVML failed while reading the GPUs: {exc}") from exc

    def processes(self) -> GPUProcesses:
        """The processes on each GPU (``gpuprocs.read_nvml_processes``), on the same session."""
        with self._lock:
            nvml = self._ensure()
            try:
                return read_nvml_processes(nvml, self._last_sample)
            except nvml.NVMLError as exc:
                self._shutdown()
                raise ProbeUnavailable(f"NVML failed while listing GPU processes: {exc}") from exc

    def _shutdown(self) -> None:
        self._last_sample.clear()
        if self._nvml is not None:
            with contextlib.suppress(self._nvml.NVMLError):
                self._nvml.nvmlShutdown()
            self._nvml = None

    def close(self) -> None:
        with self._lock:
            self._shutdown()

    @staticmethod
    def _init_reason(nvml: ModuleType, exc: Exception) -> str:
        not_found = getattr(nvml, "NVMLError_LibraryNotFound", ())
        not_loaded = getattr(nvml, "NVMLError_DriverNotLoaded", ())
        no_permission = getattr(nvml, "NVMLError_NoPermission", ())
        if not_found and isinstance(exc, not_found):
            return "no NVIDIA driver: the NVML library (libnvidia-ml.so.1) was not found"
        if not_loaded and isinstance(exc, not_loaded):
            return "the NVIDIA kernel driver is not loaded"
        if no_permission and isinstance(exc, no_permission):
            return "no permission to query the NVIDIA driver"
        return f"NVML could not start: {exc}"

    @staticmethod
    def _optional(nvml: ModuleType, call: Callable[[], Any]) -> Any:
        try:
            return call()
        except nvml.NVMLError:
            return None

    @staticmethod
    def _memory(nvml: ModuleType, handle: Any) -> Any:
        """The device's memory; ``used`` without what the driver reserves for itself where the
        driver can say (version 2, as nvidia-smi counts it: 0 MiB on an idle H200, where
        version 1 says 615), else version 1's. None where neither is supported."""
        version = getattr(nvml, "nvmlMemory_v2", None)
        if version is not None:
            try:
                return nvml.nvmlDeviceGetMemoryInfo(handle, version=version)
            except (nvml.NVMLError, TypeError):  # an older driver, or older bindings
                pass
        try:
            return nvml.nvmlDeviceGetMemoryInfo(handle)
        except nvml.NVMLError:
            return None

    def _read(self, nvml: ModuleType) -> Inventory:
        driver = _text(nvml.nvmlSystemGetDriverVersion())
        cuda_int = self._optional(nvml, nvml.nvmlSystemGetCudaDriverVersion)
        cuda = cuda_version_from_int(int(cuda_int)) if cuda_int else None
        gpus: list[GPU] = []
        warnings: list[str] = []
        for index in range(int(nvml.nvmlDeviceGetCount())):
            try:
                gpus.append(self._read_gpu(nvml, index, driver, cuda))
            except nvml.NVMLError as exc:
                warnings.append(f"GPU {index}: {exc}")
        return Inventory(
            source="nvml",
            gpus=tuple(gpus),
            driver_version=driver,
            cuda_version=cuda,
            reason=None if gpus else "the NVIDIA driver reports no GPU",
            warnings=tuple(warnings),
        )

    def _read_gpu(self, nvml: ModuleType, index: int, driver: str, cuda: str | None) -> GPU:
        handle = nvml.nvmlDeviceGetHandleByIndex(index)
        memory = self._memory(nvml, handle)
        util = self._optional(nvml, lambda: nvml.nvmlDeviceGetUtilizationRates(handle))
        pci = self._optional(nvml, lambda: nvml.nvmlDeviceGetPciInfo(handle))
        minor = self._optional(nvml, lambda: nvml.nvmlDeviceGetMinorNumber(handle))
        mig_mode = self._optional(nvml, lambda: nvml.nvmlDeviceGetMigMode(handle))
        mig_enabled = bool(mig_mode and mig_mode[0] == getattr(nvml, "NVML_DEVICE_MIG_ENABLE", 1))
        migs: list[MigDevice] = []
        if mig_enabled:
            count = self._optional(nvml, lambda: nvml.nvmlDeviceGetMaxMigDeviceCount(handle)) or 0
            for slot in range(int(count)):
                mig = self._optional(
                    nvml, functools.partial(nvml.nvmlDeviceGetMigDeviceHandleByIndex, handle, slot)
                )
                if mig is None:
                    continue
                mig_name = _text(nvml.nvmlDeviceGetName(mig))
                mig_mem = self._memory(nvml, mig)
                migs.append(
                    MigDevice(
                        uuid=_text(nvml.nvmlDeviceGetUUID(mig)),
                        index=len(migs),
                        profile=mig_name.rsplit(" MIG ", 1)[-1],
                        memory_total_mib=int(mig_mem.total) // (1 << 20) if mig_mem else None,
                    )
                )
        return GPU(
            uuid=_text(nvml.nvmlDeviceGetUUID(handle)),
            index=index,
            name=_text(nvml.nvmlDeviceGetName(handle)),
            memory_total_mib=int(memory.total) // (1 << 20) if memory else None,
            memory_used_mib=int(memory.used) // (1 << 20) if memory else None,
            utilization_percent=int(util.gpu) if util else None,
            driver_version=driver,
            cuda_version=cuda,
            pci_bus_id=_text(pci.busId) if pci else None,
            mig_enabled=mig_enabled,
            mig_devices=tuple(migs),
            minor_number=int(minor) if minor is not None else None,
        )


#: Runs an argument list (on this machine, or on a remote host) and returns its result.
Runner = Callable[[list[str], float], "subprocess.CompletedProcess[str]"]


def _run_here(argv: list[str], timeout: float) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        argv, capture_output=True, text=True, errors="replace", timeout=timeout, check=False
    )


class NvidiaSmiProbe:
    """Reads the inventory by running ``nvidia-smi`` (argument lists only, never a shell),
    here or, with a ``runner``, on a remote host (``where`` names it in messages)."""

    def __init__(
        self,
        executable: str = "nvidia-smi",
        timeout: float = 10.0,
        runner: Runner | None = None,
        where: str | None = None,
    ) -> None:
        self.executable = executable
        self.timeout = timeout
        self.runner = runner
        self.where = where
        # The CUDA version only changes with the driver: ask for it once per driver version.
        self._cuda_by_driver: dict[str | None, str | None] = {}

    def _run(self, path: str, *args: str) -> subprocess.CompletedProcess[str]:
        return (self.runner or _run_here)([path, *args], self.timeout)

    def _path(self) -> str:
        path = shutil.which(self.executable) if self.runner is None else self.executable
        if path is None:
            raise ProbeUnavailable(f"{self.executable} was not found on PATH")
        return path

    def _query(self, path: str, *args: str) -> subprocess.CompletedProcess[str]:
        """One run that must succeed: any failure is ``ProbeUnavailable``, saying why."""
        try:
            query = self._run(path, *args)
        except subprocess.TimeoutExpired as exc:
            raise ProbeUnavailable(
                f"{self.executable} did not answer in {self.timeout:g} s"
            ) from exc
        except OSError as exc:
            raise ProbeUnavailable(f"{self.executable} could not be run: {exc.strerror}") from exc
        if query.returncode == 127 and self.runner is not None:
            raise ProbeUnavailable(f"{self.executable} was not found on {self.where or 'the host'}")
        if query.returncode != 0:
            first = (query.stdout.strip() or query.stderr.strip() or "no output").splitlines()[0]
            raise ProbeUnavailable(
                f"{self.executable} failed (exit {query.returncode}): {first[:200]}"
            )
        return query

    def processes(self) -> GPUProcesses:
        """The compute processes on every GPU, by one ``--query-compute-apps`` run."""
        query = self._query(
            self._path(),
            f"--query-compute-apps={','.join(APPS_FIELDS)}",
            "--format=csv,noheader,nounits",
        )
        return smi_processes(query.stdout)

    def probe(self) -> Inventory:
        path = self._path()
        query = self._query(
            path, f"--query-gpu={','.join(SMI_FIELDS)}", "--format=csv,noheader,nounits"
        )
        gpus, warnings = parse_smi_csv(query.stdout)
        if not gpus and query.stdout.strip() and not query.stdout.strip().lower().startswith("no"):
            warnings.append("nvidia-smi output could not be read")
        driver = next((g.driver_version for g in gpus if g.driver_version), None)
        if driver not in self._cuda_by_driver or driver is None:
            self._cuda_by_driver[driver] = self._cuda_version(path)
        cuda = self._cuda_by_driver[driver]
        if any(g.mig_enabled for g in gpus):
            try:
                listing = self._run(path, "-L")
            except (subprocess.TimeoutExpired, OSError) as exc:
                raise ProbeUnavailable(f"{self.executable} -L did not answer: {exc}") from exc
            migs = parse_smi_list(listing.stdout) if listing.returncode == 0 else {}
            gpus = [replace(g, mig_devices=tuple(migs.get(g.uuid, ()))) for g in gpus]
        reason = None
        if not gpus:
            reason = (
                "nvidia-smi output could not be read" if warnings else "nvidia-smi reports no GPU"
            )
        return Inventory(
            source="nvidia-smi",
            gpus=_with_driver(gpus, driver, cuda),
            driver_version=driver,
            cuda_version=cuda,
            reason=reason,
            warnings=tuple(warnings),
        )

    def _cuda_version(self, path: str) -> str | None:
        try:
            result = self._run(path, "-q", "-d", "COMPUTE")
        except (subprocess.TimeoutExpired, OSError):
            return None
        return parse_cuda_version(result.stdout) if result.returncode == 0 else None


#: What a probe reads: an inventory or a process list, each with its warnings.
_Read = TypeVar("_Read", Inventory, GPUProcesses)


class GPUInventory(LoggingConfigurable):
    """The local host's GPUs. Configure with ``c.GPUInventory.*``."""

    backend = Enum(
        ["auto", "nvml", "nvidia-smi", "none"],
        default_value="auto",
        help="""How to read the local GPUs: 'auto' tries NVML, then nvidia-smi; 'nvml' or
        'nvidia-smi' use only that one; 'none' reports no GPU (a CPU-only host).""",
    ).tag(config=True)

    nvidia_smi_path = Unicode(
        "nvidia-smi",
        help="The nvidia-smi executable: a name looked up on PATH, or an absolute path.",
    ).tag(config=True)

    timeout = PositiveFloat(
        10.0,
        help="Seconds to wait for nvidia-smi before reporting it as not answering (more than 0).",
    ).tag(config=True)

    cache_seconds = Float(
        1.0,
        min=0.0,
        help="""Reuse an inventory (or a list of the GPUs' processes) read less than this many
        seconds ago, so that many panels polling at once cost one read (0 or more; 0 reads
        every time).""",
    ).tag(config=True)

    def __init__(
        self,
        nvml_loader: Callable[[], ModuleType] = _import_pynvml,
        runner: Runner | None = None,
        where: str | None = None,
        **kwargs: Any,
    ) -> None:
        super().__init__(**kwargs)
        #: A remote host's inventory: nvidia-smi run there (NVML only reads this machine).
        self.runner = runner
        self.where = where
        self._nvml = NvmlProbe(nvml_loader)
        self._smi: NvidiaSmiProbe | None = None
        self._cached: tuple[float, Inventory] | None = None
        self._lock = threading.Lock()
        self._cached_processes: tuple[float, GPUProcesses] | None = None
        self._processes_lock = threading.Lock()

    def close(self) -> None:
        """Release NVML (the server calls this when it stops)."""
        self._nvml.close()

    def probe(self) -> Inventory:
        """The inventory (blocking: call it from a worker thread on the server)."""
        with self._lock:
            now = time.monotonic()
            if self._cached is not None and now - self._cached[0] < self.cache_seconds:
                return self._cached[1]
            inventory = self._probe()
            self._cached = (time.monotonic(), inventory)
            return inventory

    def processes(self) -> GPUProcesses:
        """The processes on the host's GPUs with the memory each holds, read as the inventory
        is (NVML on its open session, else ``nvidia-smi``; cached for ``cache_seconds``).
        Blocking: call it from a worker thread on the server."""
        with self._processes_lock:
            now = time.monotonic()
            cached = self._cached_processes
            if cached is not None and now - cached[0] < self.cache_seconds:
                return cached[1]
            processes = self._processes()
            self._cached_processes = (time.monotonic(), processes)
            return processes

    def _probes(self) -> list[tuple[str, NvmlProbe | NvidiaSmiProbe]]:
        """The probes to try, in order: NVML for this machine, then ``nvidia-smi``."""
        probes: list[tuple[str, NvmlProbe | NvidiaSmiProbe]] = []
        if self.backend in ("auto", "nvml") and self.runner is None:
            probes.append(("NVML", self._nvml))
        if self.backend in ("auto", "nvidia-smi") or self.runner is not None:
            if self._smi is None or (self._smi.executable, self._smi.timeout) != (
                self.nvidia_smi_path,
                self.timeout,
            ):
                self._smi = NvidiaSmiProbe(
                    self.nvidia_smi_path, self.timeout, self.runner, self.where
                )
            probes.append(("nvidia-smi", self._smi))
        return probes

    def _probe(self) -> Inventory:
        if self.backend == "none":
            return Inventory(source="none", reason="GPU inventory is disabled by configuration")
        found, reasons = self._first("GPU inventory", lambda probe: probe.probe())
        return found if found is not None else Inventory(source="none", reason=reasons)

    def _processes(self) -> GPUProcesses:
        if self.backend == "none":
            return GPUProcesses(source="none", reason="GPU inventory is disabled by configuration")
        found, reasons = self._first("GPU processes", lambda probe: probe.processes())
        return found if found is not None else GPUProcesses(source="none", reason=reasons)

    def _first(self, what: str, read: Callable[[Any], _Read]) -> tuple[_Read | None, str]:
        """What the first probe that can answer reads (its warnings logged), or ``None`` and
        why none could."""
        reasons: list[str] = []
        for label, probe in self._probes():
            try:
                found = read(probe)
            except ProbeUnavailable as exc:
                self.log.debug("%s through %s unavailable: %s", what, label, exc)
                reasons.append(f"{label}: {exc}")
                continue
            for warning in found.warnings:
                self.log.warning("%s (%s): %s", what, label, warning)
            return found, ""
        return None, "; ".join(reasons)
