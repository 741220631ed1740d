"""The engine side: one Docker engine per host (``spec`` its configuration, ``hosts`` the
connection, ``pool`` the hosts of a server), reached locally, over SSH (``ssh``, ``tunnels``) or
TCP with TLS; its GPUs (``gpus``, ``driver``); images and registries (``images``,
``registry``)."""

from .buildkit import BuildTrust, Progress
from .driver import DriverInjectionError, LegacyGPUInjection, proc_bus_id
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
from .hosts import EngineInfo, HeldLease, Host, HostInfo, address_for_containers, bridge_address
from .images import ImageBootstrapper, detect_mirror, mirror_from_sources, stream_build
from .pool import HostPool, unreachable_summary
from .registry import Reference, Registries, RegistryError
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
    "DEFAULT_LOCAL_URL",
    "GPU",
    "SMI_FIELDS",
    "BuildTrust",
    "DriverInjectionError",
    "EngineInfo",
    "GPUInventory",
    "HeldLease",
    "Host",
    "HostInfo",
    "HostPool",
    "HostSpec",
    "ImageBootstrapper",
    "Inventory",
    "LegacyGPUInjection",
    "MigDevice",
    "NvidiaSmiProbe",
    "NvmlProbe",
    "ProbeUnavailable",
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
    "bridge_address",
    "cuda_version_from_int",
    "describe_ssh_error",
    "detect_mirror",
    "fingerprint",
    "mirror_from_sources",
    "parse_smi_csv",
    "parse_smi_list",
    "proc_bus_id",
    "stream_build",
    "unreachable_summary",
]
