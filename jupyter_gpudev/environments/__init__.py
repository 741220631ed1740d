"""Environments: what to run. ``.devcontainer/**/devcontainer.json`` files and administrator
environments (``manager``), read field by field (``reader``, ``jsonc``, ``runargs``) into an
``Environment`` (``model``); ``mounts`` is the policy for the host folders they may mount."""

from ..engine.registries import normalize_image_ref
from .jsonc import MAX_FILE_BYTES, load_jsonc
from .manager import EnvironmentManager
from .model import (
    DeclaredMount,
    Environment,
    GPURequirement,
    HostNeeds,
    ImageNotAllowed,
    parse_docker_size,
    parse_gpu_memory_mib,
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
from .runargs import parse_run_args

__all__ = [
    "CA_BUNDLE_ENV_VARS",
    "MAX_FILE_BYTES",
    "DeclaredMount",
    "Environment",
    "EnvironmentManager",
    "GPURequirement",
    "HostNeeds",
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
