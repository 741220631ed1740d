"""environments."""

from .manager import (
    MAX_FILE_BYTES,
    DeclaredMount,
    Environment,
    EnvironmentManager,
    GPURequirement,
    ImageNotAllowed,
    load_jsonc,
    normalize_image_ref,
    parse_docker_size,
    parse_gpu_memory_mib,
    parse_run_args,
    slugify,
)
from .mounts import (
    CA_BUNDLE_ENV_VARS,
    MountNotAllowed,
    MountPolicy,
    RemotePaths,
    ResolvedMount,
    check_target,
)

__all__ = [
    "CA_BUNDLE_ENV_VARS",
    "MAX_FILE_BYTES",
    "DeclaredMount",
    "Environment",
    "EnvironmentManager",
    "GPURequirement",
    "ImageNotAllowed",
    "MountNotAllowed",
    "MountPolicy",
    "RemotePaths",
    "ResolvedMount",
    "check_target",
    "load_jsonc",
    "normalize_image_ref",
    "parse_docker_size",
    "parse_gpu_memory_mib",
    "parse_run_args",
    "slugify",
]
