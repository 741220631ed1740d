"""The opt-in fallback for engines without the NVIDIA hook: inject the driver by hand.

When a host has the NVIDIA driver but its Docker engine has no NVIDIA container toolkit, a GPU
``DeviceRequest`` cannot start. With ``c.LegacyGPUInjection.enabled = True`` the container gets
instead (the nvidia-docker 1.0 way):

- the device nodes of its leased GPUs only (``/dev/nvidia<minor>``), plus the control nodes
  (``/dev/nvidiactl``, ``/dev/nvidia-uvm``, ``/dev/nvidia-uvm-tools``, ``/dev/nvidia-modeset``);
- the driver's user-space libraries (``libcuda.so*``, ``libnvidia-*.so*``), bind-mounted
  read-only under ``/usr/local/nvidia/lib64`` with ``LD_LIBRARY_PATH`` pointing there, and
  ``nvidia-smi`` read-only at ``/usr/local/nvidia/bin/nvidia-smi``.

A GPU's device minor comes from ``/proc/driver/nvidia/gpus/<PCI bus id>/information`` (what the
NVIDIA container CLI reads), else from NVML. MIG instances need the toolkit and are refused.
Local hosts only: the paths are this machine's.
"""

from __future__ import annotations

import fnmatch
import os
import re
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

from docker.types import Mount
from traitlets import Bool, List, Unicode
from traitlets.config import LoggingConfigurable

from ..errors import GPUDevError
from .gpus import GPU

LIB_TARGET = "/usr/local/nvidia/lib64"
BIN_TARGET = "/usr/local/nvidia/bin"
CONTROL_NODES = ("nvidiactl", "nvidia-uvm", "nvidia-uvm-tools", "nvidia-modeset")
_MINOR_RE = re.compile(r"^Device Minor:\s*(\d+)\s*$", re.MULTILINE)


class DriverInjectionError(GPUDevError):
    """The fallback cannot give these GPUs to a container; the message says why."""

    status = 409
    exit_code = 5
    code = "driver_injection"


@dataclass(frozen=True)
class Injection:
    """What a container needs to use its GPUs without the NVIDIA hook."""

    devices: tuple[str, ...]
    mounts: tuple[Mount, ...] = field(default=())
    environment: tuple[tuple[str, str], ...] = field(default=())


def proc_bus_id(pci_bus_id: str) -> str:
    """nvidia-smi/NVML say ``00000000:07:00.0``; /proc says ``0000:07:00.0``."""
    domain, _, rest = pci_bus_id.strip().lower().partition(":")
    return f"{domain[-4:].rjust(4, '0')}:{rest}"


def _is_program(path: Path) -> bool:
    """Whether ``path`` is a compiled program (an ELF file). A script named nvidia-smi (a
    wrapper that runs the driver's binary from elsewhere, as some machine images have) does
    not run once mounted alone in a container."""
    try:
        with path.open("rb") as file:
            return file.read(4) == b"\x7fELF"
    except OSError:
        return False


class LegacyGPUInjection(LoggingConfigurable):
    """Inject the NVIDIA driver by hand where the engine has no hook. ``c.LegacyGPUInjection``."""

    enabled = Bool(
        False,
        help="""Give GPUs to containers without the NVIDIA container toolkit: pass the leased
        GPUs' /dev/nvidia<minor> nodes (and the control nodes) and bind-mount the driver's
        libraries read-only at /usr/local/nvidia/lib64 (LD_LIBRARY_PATH set), instead of asking
        the engine for the GPUs (the nvidia-docker 1.0 way). MIG instances are refused. Only
        for a local engine that lacks the toolkit; prefer installing it.""",
    ).tag(config=True)

    device_dir = Unicode("/dev", help="Where the NVIDIA device nodes are.").tag(config=True)

    proc_dir = Unicode(
        "/proc/driver/nvidia/gpus",
        help="""The driver's per-GPU information folders (named by PCI bus id): a GPU's
        device minor is read there (else from NVML).""",
    ).tag(config=True)

    library_dirs = List(
        Unicode(),
        default_value=[
            "/usr/lib/x86_64-linux-gnu",
            "/usr/lib64",
            "/usr/lib/aarch64-linux-gnu",
            "/usr/local/nvidia/lib64",
        ],
        help="""Folders searched for the driver's user-space libraries, in this order: they
        are all taken from the first folder that holds a libcuda.so.""",
    ).tag(config=True)

    library_patterns = List(
        Unicode(),
        default_value=[
            "libcuda.so*",
            "libnvidia-ml.so*",
            "libnvidia-ptxjitcompiler.so*",
            "libnvidia-nvvm.so*",
            "libnvidia-gpucomp.so*",
            "libcudadebugger.so*",
        ],
        help="File name patterns of the driver libraries to mount.",
    ).tag(config=True)

    binary_dirs = List(
        Unicode(),
        default_value=["/usr/bin", "/usr/local/nvidia/bin"],
        help="""Folders searched for nvidia-smi, in this order: the first compiled program of
        that name is mounted (a wrapper script is passed over).""",
    ).tag(config=True)

    def _minor(self, gpu: GPU) -> int:
        if gpu.pci_bus_id:
            info = Path(self.proc_dir) / proc_bus_id(gpu.pci_bus_id) / "information"
            try:
                match = _MINOR_RE.search(info.read_text())
            except OSError:
                match = None
            if match:
                return int(match.group(1))
        if gpu.minor_number is not None:
            return gpu.minor_number
        raise DriverInjectionError(
            f"Cannot tell which /dev/nvidia* node is GPU {gpu.index} ({gpu.uuid}): no "
            f"{self.proc_dir}/<bus id>/information and no NVML minor number"
        )

    def _libraries(self) -> list[Path]:
        """The driver's libraries, all from the first folder that holds a ``libcuda.so``:
        two drivers' libraries mixed (one left behind by an upgrade, say) do not load."""
        for folder in self.library_dirs:
            try:
                names = sorted(os.listdir(folder))
            except OSError:
                continue
            if not any(name.startswith("libcuda.so") for name in names):
                continue
            return [
                Path(folder) / name
                for name in names
                if any(fnmatch.fnmatch(name, pattern) for pattern in self.library_patterns)
            ]
        return []

    def plan(self, gpus: Sequence[GPU], leased: Sequence[str]) -> Injection:
        """The devices, mounts and environment that give exactly ``leased`` to a container."""
        by_uuid = {gpu.uuid: gpu for gpu in gpus}
        devices: list[str] = []
        for uuid in leased:
            if uuid.startswith("MIG-"):
                raise DriverInjectionError(
                    "MIG instances cannot be given to containers without the NVIDIA container "
                    "toolkit; install it on the host"
                )
            gpu = by_uuid.get(uuid)
            if gpu is None:
                raise DriverInjectionError(f"The leased GPU {uuid} is not in the inventory")
            node = os.path.join(self.device_dir, f"nvidia{self._minor(gpu)}")
            if not os.path.exists(node):
                raise DriverInjectionError(f"The device node {node} of GPU {uuid} does not exist")
            devices.append(f"{node}:/dev/{os.path.basename(node)}:rwm")
        for control in CONTROL_NODES:
            node = os.path.join(self.device_dir, control)
            if os.path.exists(node):
                devices.append(f"{node}:/dev/{control}:rwm")
        libraries = self._libraries()
        if not any(lib.name.startswith("libcuda.so") for lib in libraries):
            raise DriverInjectionError(
                f"The NVIDIA driver's libcuda.so was not found in {', '.join(self.library_dirs)}"
            )
        mounts = [
            Mount(f"{LIB_TARGET}/{lib.name}", str(lib.resolve()), type="bind", read_only=True)
            for lib in libraries
        ]
        for folder in self.binary_dirs:
            smi = (Path(folder) / "nvidia-smi").resolve()
            if _is_program(smi):
                mounts.append(
                    Mount(f"{BIN_TARGET}/nvidia-smi", str(smi), type="bind", read_only=True)
                )
                break
        return Injection(
            devices=tuple(devices),
            mounts=tuple(mounts),
            environment=(("LD_LIBRARY_PATH", LIB_TARGET),),
        )
