"""Reading one devcontainer.json (or an administrator's environment) into an ``Environment``:
every field checked, variables substituted, ``containerEnv`` rules applied, problems reported."""

from __future__ import annotations

import fnmatch
import math
import os
import posixpath
import re
from collections.abc import Mapping
from dataclasses import replace
from pathlib import Path
from typing import Any

from ..errors import BadRequest
from .capabilities import allowed_capabilities
from .features import read_order, read_requests
from .model import (
    _IMAGE_RE,
    BuildSpec,
    Command,
    DeclaredMount,
    Environment,
    GPUMode,
    GPURequirement,
    HostNeeds,
    MountType,
    RunOptions,
    _file_sha256,
    parse_docker_size,
    parse_gpu_memory_mib,
    slugify,
)
from .runargs import _gpu_count_from_flag, parse_run_args
from .support import check_properties

#: A user as ``remoteUser`` and ``containerUser`` name one: ``name`` or ``uid``, optionally
#: ``:group`` or ``:gid``.
USER_RE = re.compile(r"^[A-Za-z0-9_][A-Za-z0-9_.-]{0,31}(?::[A-Za-z0-9_][A-Za-z0-9_.-]{0,31})?\Z")

GPUDEV_OPTIONS = (
    "gpus",
    "gpuModel",
    "gpuMemory",
    "idleTimeout",
    "shmSize",
    "memory",
    "cpus",
    "host",
)
#: A host's name (``engine/spec.py`` checks the configured ones the same way).
_HOST_NAME_RE = re.compile(r"^[a-z0-9][a-z0-9._-]{0,62}\Z")


#: Docker's smallest memory limit.
MIN_MEMORY_BYTES = 6 << 20


ALLOWED_ENV_TRAIT = "c.EnvironmentManager.allowed_env_vars"


#: containerEnv names that decide which programs, libraries or Python code every process of the
#: container loads (gpudev's own commands in it included): only the administrator may set them.
SENSITIVE_ENV_PATTERNS = ("PATH", "LD_*", "PYTHON*", "BASH_ENV")


#: PYTHON* variables that load no code: always accepted.
HARMLESS_PYTHON_ENV = frozenset(
    {
        "PYTHONUNBUFFERED",
        "PYTHONDONTWRITEBYTECODE",
        "PYTHONIOENCODING",
        "PYTHONUTF8",
        "PYTHONHASHSEED",
        "PYTHONFAULTHANDLER",
    }
)


_ENV_NAME_RE = re.compile(r"^[A-Za-z_][A-Za-z0-9_.-]*\Z")


_VARIABLE_RE = re.compile(r"\$\{([A-Za-z]+)\}")


def _substitute(text: str, variables: Mapping[str, str]) -> str:
    """Replace the ``${name}`` variables we know; others are left as written."""
    return _VARIABLE_RE.sub(lambda m: variables.get(m.group(1), m.group(0)), text)


def _default_workspace(root_real: str) -> str:
    """``/workspaces/<root folder name>``, as the Dev Containers tools default to."""
    return "/workspaces/" + (os.path.basename(root_real) or "workspace")


def _inside(path: str, root: str) -> bool:
    return os.path.commonpath([root, path]) == root


class _SpecReader:
    """Reads the keys we act on from one devcontainer.json-shaped dict.

    ``base_dir`` is the folder of the devcontainer.json; ``None`` for admin config, where
    build paths must be absolute and are trusted.
    """

    def __init__(
        self,
        data: dict[str, Any],
        *,
        where: str,
        root_real: str,
        base_dir: str | None,
        allow_host_network: bool,
        allow_host_pid: bool,
        allow_host_ipc: bool = False,
        allowed_env: tuple[str, ...] = (),
        allowed_caps: tuple[str, ...] = (),
    ) -> None:
        self.data = data
        self.where = where
        self.root_real = root_real
        self.base_dir = base_dir
        self.allow_host_network = allow_host_network
        self.allow_host_pid = allow_host_pid
        self.allow_host_ipc = allow_host_ipc
        self.allowed_env = allowed_env
        self.allowed_caps = allowed_caps
        self.notes: list[str] = []
        self.variables = {
            "localWorkspaceFolder": root_real,
            "localWorkspaceFolderBasename": os.path.basename(root_real),
        }

    def fail(self, message: str) -> BadRequest:
        return BadRequest(f"{self.where}: {message}", details={"file": self.where})

    def read(self, *, name: str, display_name: str, source: str) -> Environment:
        # Every property checked against the support table first: a refused one is an error
        # here, an ignored one (or a name not in the specification) a note.
        self.notes.extend(check_properties(self.data, self.where))
        custom = self._gpudev_options()
        build = self._build()
        image = self._image(build is not None)
        if build is None and image is None:
            raise self.fail("needs 'image' or 'build.dockerfile'")
        workspace = self._workspace_folder()
        self.variables["containerWorkspaceFolder"] = workspace
        self.variables["containerWorkspaceFolderBasename"] = posixpath.basename(workspace)
        run_options, notes = parse_run_args(
            self.data.get("runArgs", []),
            where=self.where,
            allow_host_network=self.allow_host_network,
            allow_host_pid=self.allow_host_pid,
            allow_host_ipc=self.allow_host_ipc,
            allowed_caps=self.allowed_caps,
        )
        self.notes.extend(notes)
        if self.data.get("capAdd"):
            added = allowed_capabilities(
                self.data["capAdd"], self.allowed_caps, f"{self.where}: 'capAdd'"
            )
            caps = run_options.cap_add + tuple(c for c in added if c not in run_options.cap_add)
            run_options = replace(run_options, cap_add=caps)
        if "shmSize" in custom:
            try:
                shm = parse_docker_size(custom["shmSize"])
            except ValueError as exc:
                raise self.fail(f"'customizations.gpudev.shmSize': {exc}") from None
            run_options = replace(run_options, shm_size_bytes=shm)
        run_options = replace(
            run_options, memory_bytes=self._memory_limit(custom), nano_cpus=self._cpus(custom)
        )
        return Environment(
            name=name,
            display_name=display_name,
            source=source,
            image=image,
            build=build,
            container_env=self._container_env(),
            mounts=self._mounts(),
            run_options=run_options,
            gpu=self._gpu(run_options, custom),
            needs=self._needs(),
            forward_ports=self._forward_ports(),
            on_create_command=self._command("onCreateCommand"),
            update_content_command=self._command("updateContentCommand"),
            post_create_command=self._command("postCreateCommand"),
            post_start_command=self._command("postStartCommand"),
            post_attach_command=self._command("postAttachCommand"),
            remote_user=self._user("remoteUser"),
            container_user=self._user("containerUser"),
            workspace_folder=workspace,
            idle_timeout=self._idle_timeout(custom),
            host=self._host(custom),
            features=read_requests(
                self.data.get("features"),
                self.where,
                local_path=None if self.base_dir is None else self._local_feature,
            ),
            feature_order=read_order(self.data.get("overrideFeatureInstallOrder"), self.where),
            config_dir=None if self.base_dir is None else os.path.realpath(self.base_dir),
            allowed_caps=self.allowed_caps,
        )

    def _local_feature(self, value: str, key: str) -> str:
        """A local feature's folder: its real path, under the root's ``.devcontainer``."""
        real = os.path.realpath(os.path.join(self.base_dir or self.root_real, value))
        folder = os.path.realpath(os.path.join(self.root_real, ".devcontainer"))
        # .devcontainer a link out of the workspace (to the folder of every user's, in shared
        # mode) would make the root service read another's feature: both inside the root
        if not _inside(folder, self.root_real) or not _inside(real, folder) or real == folder:
            raise self.fail(
                f"{key}: a local feature must be a folder under .devcontainer/ (after following "
                "links)"
            )
        if not os.path.isdir(real):
            raise self.fail(f"{key} is not a folder")
        return real

    # -- helpers

    def _user(self, key: str) -> str | None:
        """``remoteUser`` or ``containerUser``: a user's name or ``uid[:gid]`` (as the engine's
        ``--user`` takes it; nothing else, as it reaches the engine's exec)."""
        value = self._optional_str(key)
        if value is not None and not USER_RE.match(value):
            raise self.fail(
                f"'{key}' must be a user's name or UID (optionally ':GROUP'), not {value[:80]!r}"
            )
        return value

    def _optional_str(
        self, key: str, data: Mapping[str, Any] | None = None, label: str | None = None
    ) -> str | None:
        value = (self.data if data is None else data).get(key)
        if value is None:
            return None
        if not isinstance(value, str) or not value.strip():
            raise self.fail(f"'{label or key}' must be a non-empty string")
        return value

    def _memory_limit(self, custom: Mapping[str, Any]) -> int | None:
        """``customizations.gpudev.memory``: the container's memory limit, in bytes."""
        value = custom.get("memory")
        if value is None:
            return None
        key = "customizations.gpudev.memory"
        try:
            size = parse_docker_size(value)
        except ValueError as exc:
            raise self.fail(f"'{key}': {exc}") from None
        if size < MIN_MEMORY_BYTES:
            raise self.fail(f"'{key}': {value!r} is less than Docker's minimum of 6m")
        return size

    def _cpus(self, custom: Mapping[str, Any]) -> int | None:
        """``customizations.gpudev.cpus``: how many CPUs' worth of time it may use, as Docker's
        nano-CPUs (``4.5`` -> 4,500,000,000)."""
        value = custom.get("cpus")
        if value is None:
            return None
        if not _number_within(value, 0.01, 4096):
            raise self.fail(
                "'customizations.gpudev.cpus' must be a number of CPUs from 0.01 to 4096, "
                f"like 4 or 4.5, not {value!r}"
            )
        return round(float(value) * 1e9)

    def _gpudev_options(self) -> dict[str, Any]:
        customizations = self.data.get("customizations")
        if customizations is None:
            return {}
        if not isinstance(customizations, dict):
            raise self.fail("'customizations' must be an object")
        custom = customizations.get("gpudev")
        if custom is None:
            return {}
        if not isinstance(custom, dict):
            raise self.fail("'customizations.gpudev' must be an object")
        for key in custom:
            if key not in GPUDEV_OPTIONS:
                self.notes.append(
                    f"{self.where}: customizations.gpudev.{key} is not an option and is ignored "
                    f"(options: {', '.join(GPUDEV_OPTIONS)})"
                )
        return custom

    def _image(self, has_build: bool) -> str | None:
        image = self.data.get("image")
        if image is None:
            return None
        if not isinstance(image, str) or not _IMAGE_RE.match(image):
            raise self.fail(f"'image' must be an image reference like 'python:3.12', not {image!r}")
        if has_build:
            self.notes.append(f"{self.where}: 'image' is ignored because a Dockerfile is built")
            return None
        return image

    def _path(self, value: str, key: str, *, want_dir: bool) -> Path:
        if self.base_dir is None:
            if not os.path.isabs(value):
                raise self.fail(f"'{key}' must be an absolute path in configuration")
            real = os.path.realpath(value)
        else:
            real = os.path.realpath(os.path.join(self.base_dir, value))
            if not _inside(real, self.root_real):
                raise self.fail(
                    f"'{key}' ({value!r}) is outside the Jupyter root directory (after following "
                    "links); a build may only use files under it"
                )
        if want_dir and not os.path.isdir(real):
            raise self.fail(f"'{key}' ({value!r}) is not a folder")
        if not want_dir and not os.path.isfile(real):
            raise self.fail(f"'{key}' ({value!r}) was not found")
        return Path(real)

    def _context(self, build: Mapping[str, Any], dockerfile: str) -> tuple[str, str]:
        """The build context as written and the key it came from."""
        if "context" in build:
            context, key = build["context"], "build.context"
        elif "context" in self.data:
            context, key = self.data["context"], "context"
        elif self.base_dir is None:  # in configuration: the Dockerfile's own folder
            context, key = os.path.dirname(dockerfile) or ".", "build.dockerfile"
        else:  # the spec's default: the devcontainer.json's folder
            context, key = ".", "build.context"
        if not isinstance(context, str) or not context:
            raise self.fail(f"'{key}' must be a folder name")
        return context, key

    def _build(self) -> BuildSpec | None:
        build = self.data.get("build")
        if build is None:
            build = {}
        elif not isinstance(build, dict):
            raise self.fail("'build' must be an object")
        if "dockerfile" in build:
            dockerfile, key = build["dockerfile"], "build.dockerfile"
        elif "dockerFile" in self.data:
            dockerfile, key = self.data["dockerFile"], "dockerFile"
        elif build:
            raise self.fail("'build.dockerfile' is required when 'build' is given")
        else:
            return None
        if not isinstance(dockerfile, str) or not dockerfile:
            raise self.fail(f"'{key}' must be a file name")
        context, context_key = self._context(build, dockerfile)
        args = build.get("args", {})
        if not isinstance(args, dict) or not all(
            isinstance(k, str) and isinstance(v, str) for k, v in args.items()
        ):
            raise self.fail("'build.args' must map names to strings")
        target = self._optional_str("target", build, "build.target")
        dockerfile_path = self._path(dockerfile, key, want_dir=False)
        context_path = self._path(context, context_key, want_dir=True)
        try:
            digest = _file_sha256(dockerfile_path)
        except OSError as exc:
            raise self.fail(f"'{key}' cannot be read ({exc.strerror or exc})") from None
        return BuildSpec(
            dockerfile=dockerfile_path,
            context=context_path,
            args=dict(args),
            target=target,
            dockerfile_sha256=digest,
        )

    def _workspace_folder(self) -> str:
        value = self.data.get("workspaceFolder")
        if value is None:
            return _default_workspace(self.root_real)
        if not isinstance(value, str):
            raise self.fail("'workspaceFolder' must be a string")
        value = _substitute(value, self.variables)
        if not value.startswith("/") or "\0" in value:
            raise self.fail(f"'workspaceFolder' must be an absolute path, not {value!r}")
        if ".." in value.split("/"):
            raise self.fail(f"'workspaceFolder' must not contain '..' ({value!r})")
        normal = "/" + posixpath.normpath(value).lstrip("/")
        if normal == "/":
            raise self.fail("'workspaceFolder' cannot be '/'")
        return normal

    def _container_env(self) -> dict[str, str]:
        value = self.data.get("containerEnv", {})
        if not isinstance(value, dict):
            raise self.fail("'containerEnv' must be an object of strings")
        env: dict[str, str] = {}
        for key, item in value.items():
            if not _ENV_NAME_RE.match(key):
                raise self.fail(f"containerEnv: {key!r} is not a variable name")
            if not isinstance(item, str):
                raise self.fail(f"containerEnv.{key} must be a string")
            if key == "NVIDIA_VISIBLE_DEVICES":
                raise self.fail(
                    "containerEnv.NVIDIA_VISIBLE_DEVICES is set by jupyter-gpudev from the GPU "
                    "lease; request GPUs with hostRequirements.gpu or customizations.gpudev.gpus"
                )
            self._check_sensitive(key)
            env[key] = _substitute(item, self.variables)
        return env

    def _check_sensitive(self, key: str) -> None:
        """PATH, LD_*, PYTHON* and BASH_ENV only from configuration or where allowed."""
        # base_dir None: an environment of the administrator's configuration
        if self.base_dir is None or key in HARMLESS_PYTHON_ENV:
            return
        if not any(fnmatch.fnmatchcase(key, p) for p in SENSITIVE_ENV_PATTERNS):
            return
        if any(fnmatch.fnmatchcase(key, p) for p in self.allowed_env):
            return
        raise BadRequest(
            f"{self.where}: containerEnv.{key} is not allowed: it decides which programs, "
            "libraries or Python code every process in the container loads, gpudev's own "
            "commands included; set it in the image (Dockerfile ENV) instead, or the "
            f"administrator can allow it with {ALLOWED_ENV_TRAIT} = [{key!r}]",
            details={"file": self.where, "variable": key, "trait": ALLOWED_ENV_TRAIT},
        )

    def _mounts(self) -> tuple[DeclaredMount, ...]:
        value = self.data.get("mounts", [])
        if not isinstance(value, list):
            raise self.fail("'mounts' must be a list")
        mounts: list[DeclaredMount] = []
        for index, item in enumerate(value):
            key = f"mounts[{index}]"
            if isinstance(item, str):
                mounts.append(self._mount_string(item, key))
            elif isinstance(item, dict):
                mounts.append(self._mount_object(item, key))
            else:
                raise self.fail(f"{key} must be a string or an object")
        return tuple(mounts)

    def _mount_type(self, value: Any, key: str) -> MountType:
        if value == "bind":
            return "bind"
        if value == "volume":
            return "volume"
        raise self.fail(f"{key}: type must be 'bind' or 'volume', not {value!r}")

    def _mount_string(self, text: str, key: str) -> DeclaredMount:
        fields: dict[str, str] = {}
        read_only = False
        for part in filter(None, (p.strip() for p in text.split(","))):
            option, has_value, value = part.partition("=")
            option = option.strip().lower()
            value = value.strip()
            if option in ("source", "src"):
                fields["source"] = value
            elif option in ("target", "destination", "dst"):
                fields["target"] = value
            elif option == "type":
                fields["type"] = value
            elif option in ("readonly", "ro"):
                if not has_value or value.lower() in ("true", "1"):
                    read_only = True
                elif value.lower() in ("false", "0"):
                    read_only = False
                else:
                    raise self.fail(f"{key}: readonly={value!r} is not true or false")
            elif option != "consistency":  # consistency only matters on macOS; harmless
                raise self.fail(f"{key}: the mount option {option!r} is not supported")
        # Docker's --mount syntax defaults to a volume
        return self._declared(
            fields.get("source", ""),
            fields.get("target"),
            read_only,
            self._mount_type(fields.get("type", "volume"), key),
            key,
        )

    def _mount_object(self, item: dict[str, Any], key: str) -> DeclaredMount:
        source = item.get("source", "")
        target = item.get("target")
        read_only = item.get("readonly", False)
        if not isinstance(source, str):
            raise self.fail(f"{key}.source must be a string")
        if not isinstance(read_only, bool):
            raise self.fail(f"{key}.readonly must be true or false")
        return self._declared(
            source, target, read_only, self._mount_type(item.get("type"), key), key
        )

    def _declared(
        self, source: str, target: Any, read_only: bool, kind: MountType, key: str
    ) -> DeclaredMount:
        if not isinstance(target, str) or not target:
            raise self.fail(f"{key} needs a target")
        if kind == "bind" and not source:
            raise self.fail(f"{key}: a bind mount needs a source")
        return DeclaredMount(
            source=_substitute(source, self.variables),
            target=_substitute(target, self.variables),
            read_only=read_only,
            type=kind,
        )

    def _host_gpu(self) -> tuple[GPUMode, int | None, int | None]:
        """(mode, count, min memory in MiB) from ``hostRequirements.gpu``."""
        requirements = self.data.get("hostRequirements")
        if requirements is not None and not isinstance(requirements, dict):
            raise self.fail("'hostRequirements' must be an object")
        gpu = (requirements or {}).get("gpu")
        if gpu is None or gpu is False:
            return "none", None, None
        if gpu is True:
            return "required", None, None
        if gpu == "optional":
            return "optional", None, None
        if not isinstance(gpu, dict):
            raise self.fail("'hostRequirements.gpu' must be true, false, 'optional' or an object")
        count = memory = None
        if "count" in gpu:
            count = self._count(gpu["count"], "hostRequirements.gpu.count", minimum=1)
        if "memory" in gpu:
            memory = self._memory(gpu["memory"], "hostRequirements.gpu.memory")
        return "required", count, memory

    def _gpu(self, run_options: RunOptions, custom: Mapping[str, Any]) -> GPURequirement:
        """hostRequirements.gpu, then runArgs --gpus, then customizations.gpudev (which wins)."""
        mode, count, memory = self._host_gpu()
        if run_options.gpus is not None:
            if mode == "none":
                mode = "required"
            if count is None:
                count = _gpu_count_from_flag(run_options.gpus)
        model = self._optional_str("gpuModel", custom, "customizations.gpudev.gpuModel")
        if "gpuMemory" in custom:
            memory = self._memory(custom["gpuMemory"], "customizations.gpudev.gpuMemory")
        if "gpus" in custom:
            count = self._count(custom["gpus"], "customizations.gpudev.gpus", minimum=0)
            if count == 0:
                if model is not None or memory is not None:
                    raise self.fail(
                        "customizations.gpudev.gpus is 0 but a GPU model or memory is asked for"
                    )
                return GPURequirement()
        if mode == "none" and (count or model or memory):
            mode = "required"
        if mode == "none":
            return GPURequirement()
        return GPURequirement(mode=mode, count=count or 1, min_memory_mib=memory, model=model)

    def _needs(self) -> HostNeeds:
        """``hostRequirements.cpus``, ``memory`` and ``storage`` (sizes as ``gpu.memory``)."""
        requirements = self.data.get("hostRequirements") or {}
        if not isinstance(requirements, dict):
            return HostNeeds()  # said by _host_gpu
        cpus = requirements.get("cpus")
        memory, storage = requirements.get("memory"), requirements.get("storage")
        return HostNeeds(
            cpus=None if cpus is None else self._count(cpus, "hostRequirements.cpus", minimum=1),
            memory_mib=None if memory is None else self._memory(memory, "hostRequirements.memory"),
            storage_mib=(
                None if storage is None else self._memory(storage, "hostRequirements.storage")
            ),
        )

    def _count(self, value: Any, key: str, *, minimum: int) -> int:
        if isinstance(value, bool) or not isinstance(value, int) or value < minimum:
            raise self.fail(f"'{key}' must be a whole number of at least {minimum}")
        return value

    def _memory(self, value: Any, key: str) -> int:
        if not isinstance(value, str):
            raise self.fail(f"'{key}' must be a string like '16gb'")
        try:
            return parse_gpu_memory_mib(value)
        except ValueError as exc:
            raise self.fail(f"'{key}': {exc}") from None

    def _forward_ports(self) -> tuple[int, ...]:
        value = self.data.get("forwardPorts", [])
        if not isinstance(value, list):
            raise self.fail("'forwardPorts' must be a list")
        ports: list[int] = []
        for item in value:
            if isinstance(item, str):
                self.notes.append(
                    f"{self.where}: forwardPorts: {item!r} is ignored; only port numbers of the "
                    "dev container are forwarded"
                )
            elif isinstance(item, bool) or not isinstance(item, int) or not 1 <= item <= 65535:
                raise self.fail(f"forwardPorts: {item!r} is not a port number (1-65535)")
            elif item not in ports:
                ports.append(item)
        return tuple(ports)

    def _command(self, key: str) -> Command:
        value = self.data.get(key)
        if value is None or isinstance(value, str):
            return value
        if isinstance(value, list) and all(isinstance(arg, str) for arg in value):
            return list(value)
        if isinstance(value, dict) and all(
            isinstance(step, str)
            or (isinstance(step, list) and all(isinstance(arg, str) for arg in step))
            for step in value.values()
        ):
            return {str(k): (v if isinstance(v, str) else list(v)) for k, v in value.items()}
        raise self.fail(
            f"'{key}' must be a string, a list of strings, or an object of those (named steps)"
        )

    def _idle_timeout(self, custom: Mapping[str, Any]) -> float | None:
        value = custom.get("idleTimeout")
        if value is None:
            return None
        if not _number_within(value, 0, math.inf):
            raise self.fail("'customizations.gpudev.idleTimeout' must be a number of seconds >= 0")
        return float(value)

    def _host(self, custom: Mapping[str, Any]) -> str | None:
        value = custom.get("host")
        if value is None:
            return None
        if not isinstance(value, str) or not _HOST_NAME_RE.match(value):
            raise self.fail(
                "'customizations.gpudev.host' must be a host's name (lowercase letters, digits, "
                "'.', '_' and '-')"
            )
        return value


def _number_within(value: Any, low: float, high: float) -> bool:
    """``value`` is a finite JSON number (not a boolean) from ``low`` to ``high``."""
    return (
        not isinstance(value, bool)
        and isinstance(value, (int, float))
        and math.isfinite(value)
        and low <= value <= high
    )


def _candidate_files(root_real: str) -> list[tuple[Path, str, bool]]:
    """devcontainer.json files under the root: (path, the name it gives unless it says
    otherwise, whether it is the top-level ``.devcontainer/devcontainer.json``)."""
    folder = Path(root_real) / ".devcontainer"
    found: list[tuple[Path, str, bool]] = []
    if not _inside(os.path.realpath(folder), root_real):  # a link out: none of its files
        return found
    if os.path.lexists(folder / "devcontainer.json"):
        found.append((folder / "devcontainer.json", slugify(os.path.basename(root_real)), True))
    try:
        children = sorted(folder.iterdir()) if folder.is_dir() else []
    except OSError:
        children = []
    for child in children:
        candidate = child / "devcontainer.json"
        if child.is_dir() and os.path.lexists(candidate):
            found.append((candidate, slugify(child.name) or child.name, False))
    return found
