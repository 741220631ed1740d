"""The engine side: one Docker engine or Kubernetes cluster per host (``spec`` its
configuration, ``hosts`` the connection, ``backend`` what kind of host it is, ``info`` what it
reports, ``pool`` the hosts of a server), reached locally, over SSH (``ssh``, ``tunnels``) or
TCP with TLS, a cluster through its API server (``cluster``); its GPUs (``gpus``, ``driver``),
the processes on them and their containers (``gpuprocs``, ``attribution``); images and
registries (``images``, ``registries``)."""

from .attribution import (
    AttributedProcess,
    Attribution,
    CommandProcReader,
    GPUUse,
    LocalProcReader,
    ProcReader,
    ProcSnapshot,
    ProcStatus,
    assign,
    attribute,
    container_id,
    host_pid,
    parse_proc_output,
    parse_status,
)
from .backend import HostBackend
from .buildkit import BuildTrust, Progress
from .driver import DriverInjectionError, LegacyGPUInjection, proc_bus_id
from .gpuprocs import APPS_FIELDS, GPUProcess, GPUProcesses, parse_smi_apps, read_nvml_processes
from .gpus import (
    GPU,
    SMI_FIELDS,
    GPUInventory,
    Inventory,
    MigDevice,
    NvidiaSmiProbe,
    NvmlProbe,
    ProbeUnavailable,
    cuda_version_from_int,
    parse_smi_csv,
    parse_smi_list,
)
from .hosts import DockerEngine, Host, address_for_containers, bridge_address
from .images import ImageBootstrapper, detect_mirror, mirror_from_sources, stream_build
from .info import EngineInfo, HeldLease, HostInfo
from .pool import HostPool, unreachable_summary
from .registries import Reference, Registries, RegistryError
from .spec import DEFAULT_LOCAL_URL, HostSpec, Transport
from .ssh import (
    RevokedHostKey,
    SSHConnection,
    SSHTarget,
    UnknownHostKey,
    describe_ssh_error,
    fingerprint,
)

__all__ = [
    "APPS_FIELDS",
    "DEFAULT_LOCAL_URL",
    "GPU",
    "SMI_FIELDS",
    "AttributedProcess",
    "Attribution",
    "BuildTrust",
    "CommandProcReader",
    "DockerEngine",
    "DriverInjectionError",
    "EngineInfo",
    "GPUInventory",
    "GPUProcess",
    "GPUProcesses",
    "GPUUse",
    "HeldLease",
    "Host",
    "HostBackend",
    "HostInfo",
    "HostPool",
    "HostSpec",
    "ImageBootstrapper",
    "Inventory",
    "LegacyGPUInjection",
    "LocalProcReader",
    "MigDevice",
    "NvidiaSmiProbe",
    "NvmlProbe",
    "ProbeUnavailable",
    "ProcReader",
    "ProcSnapshot",
    "ProcStatus",
    "Progress",
    "Reference",
    "Registries",
    "RegistryError",
    "RevokedHostKey",
    "SSHConnection",
    "SSHTarget",
    "Transport",
    "UnknownHostKey",
    "address_for_containers",
    "assign",
    "attribute",
    "bridge_address",
    "container_id",
    "cuda_version_from_int",
    "describe_ssh_error",
    "detect_mirror",
    "fingerprint",
    "host_pid",
    "mirror_from_sources",
    "parse_proc_output",
    "parse_smi_apps",
    "parse_smi_csv",
    "parse_smi_list",
    "parse_status",
    "proc_bus_id",
    "read_nvml_processes",
    "stream_build",
    "unreachable_summary",
]
