"""What an environment is: its image or build, mounts, run options, GPU requirement and
commands, and the size, memory and image-reference parsers they use."""

from __future__ import annotations

import hashlib
import json
import re
import unicodedata
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Literal, TypeAlias

from ..errors import BadRequest, GPUDevError
from .features import FeatureRequest

GPUMode = Literal["none", "optional", "required"]


MountType = Literal["bind", "volume"]


#: A lifecycle command as the Dev Containers spec writes it: a shell string, an argv list, or
#: named commands run in parallel.
Command: TypeAlias = str | list[str] | dict[str, str | list[str]] | None


NAME_RE = re.compile(r"^[a-z0-9][a-z0-9_.-]{0,62}\Z")


DEFAULT_NAME = "default"


_IMAGE_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._/:@+-]{0,511}\Z")


_DOCKER_SIZE_RE = re.compile(r"^(\d+(?:\.\d+)?)\s*([kmgtp]?)(i?b)?\Z", re.IGNORECASE)


_GPU_MEMORY_RE = re.compile(r"^(\d+(?:\.\d+)?)\s*([kmgt])(i?)b?\Z", re.IGNORECASE)


def slugify(text: str) -> str:
    """A name usable as an environment name (and in an image tag): lowercase, ``[a-z0-9_.-]``.

    Runs of other characters and of separators become one ``-``; the result starts and ends
    with a letter or digit and has at most 63 characters. It may be empty.
    """
    ascii_text = unicodedata.normalize("NFKD", text).encode("ascii", "ignore").decode()
    slug = re.sub(r"[^a-z0-9_.-]+", "-", ascii_text.lower())
    slug = re.sub(r"[_.-]{2,}", "-", slug).strip("_.-")
    return slug[:63].rstrip("_.-")


def parse_docker_size(value: str | int) -> int:
    """Bytes from a Docker-style size (``64m``, ``2g``, ``1gb``, ``512``): units are binary."""
    if isinstance(value, bool) or not isinstance(value, (int, str)):
        raise ValueError(f"{value!r} is not a size like '64m', '2g' or '1gb'")  # noqa: TRY004
    if isinstance(value, int):
        number = float(value)
        unit = ""
    else:
        match = _DOCKER_SIZE_RE.match(value.strip())
        if not match:
            raise ValueError(f"{value!r} is not a size like '64m', '2g' or '1gb'")
        number = float(match.group(1))
        unit = match.group(2).lower()
    size = int(number * 1024 ** ("kmgtp".index(unit) + 1)) if unit else int(number)
    if size <= 0:
        raise ValueError(f"{value!r} is not a positive size")
    return size


def parse_gpu_memory_mib(value: str) -> int:
    """MiB from a memory size like ``16gb``, ``8000mb`` or ``24GiB``.

    ``kb``/``mb``/``gb``/``tb`` are decimal, as GPU makers count: a "24 GB" card reports about
    23,000 MiB, so ``24gb`` (22,888 MiB) matches it where 24 GiB would not. ``kib`` .. ``tib``
    are binary.
    """
    match = _GPU_MEMORY_RE.match(value.strip())
    if not match:
        raise ValueError(f"{value!r} is not a memory size like '16gb' or '8000mb'")
    number = float(match.group(1))
    base = 1024 if match.group(3) else 1000
    size = number * base ** ("kmgt".index(match.group(2).lower()) + 1)
    mib = int(size // (1 << 20))
    if mib <= 0:
        raise ValueError(f"{value!r} is less than 1 MiB")
    return mib


@dataclass(frozen=True)
class HostNeeds:
    """What an environment needs of its host besides GPUs (``hostRequirements.cpus``,
    ``memory``, ``storage``), checked before a start where the host can tell
    (``containers.placement.host_short``). ``None``: not asked."""

    cpus: int | None = None
    memory_mib: int | None = None
    storage_mib: int | None = None

    def __bool__(self) -> bool:
        return any(v is not None for v in (self.cpus, self.memory_mib, self.storage_mib))

    def to_json(self) -> dict[str, Any]:
        return {"cpus": self.cpus, "memory_mib": self.memory_mib, "storage_mib": self.storage_mib}


@dataclass(frozen=True)
class GPURequirement:
    """How many GPUs an environment needs. ``count`` is the number of GPUs to lease."""

    mode: GPUMode = "none"
    count: int = 0
    min_memory_mib: int | None = None
    model: str | None = None

    def to_json(self) -> dict[str, Any]:
        return asdict(self)


@dataclass(frozen=True)
class BuildSpec:
    """A Dockerfile build. Paths are absolute and resolved (symbolic links followed).

    ``dockerfile_sha256`` is the digest of the Dockerfile when it was read; it makes the image
    tag change whenever the Dockerfile does. ``args`` is a dict: a BuildSpec is not hashable.
    """

    dockerfile: Path
    context: Path
    args: dict[str, str] = field(default_factory=dict)
    target: str | None = None
    dockerfile_sha256: str = ""

    def digest(self) -> str:
        """sha256 over the Dockerfile's content, the build args and the target."""
        content = self.dockerfile_sha256 or _file_sha256(self.dockerfile)
        hasher = hashlib.sha256()
        hasher.update(content.encode())
        hasher.update(b"\0")
        hasher.update(json.dumps(self.args, sort_keys=True).encode())
        hasher.update(b"\0")
        hasher.update((self.target or "").encode())
        return hasher.hexdigest()

    def to_json(self) -> dict[str, Any]:
        return {
            "dockerfile": str(self.dockerfile),
            "context": str(self.context),
            "args": dict(self.args),
            "target": self.target,
            "dockerfile_sha256": self.dockerfile_sha256,
        }


@dataclass(frozen=True)
class DeclaredMount:
    """A mount as an environment declares it; ``jupyter_gpudev.mounts`` decides if it may be."""

    source: str
    target: str
    read_only: bool = False
    type: MountType = "bind"

    def to_json(self) -> dict[str, Any]:
        return asdict(self)


@dataclass(frozen=True)
class RunOptions:
    """The ``runArgs`` jupyter-gpudev accepts, typed. ``gpus`` is recorded, never passed on."""

    shm_size_bytes: int | None = None
    ipc_mode: str | None = None
    #: (name, soft, hard); -1 is unlimited.
    ulimits: tuple[tuple[str, int, int], ...] = ()
    gpus: str | None = None
    network_mode: str | None = None
    pid_mode: str | None = None
    init: bool = False
    #: From customizations.gpudev: memory and CPU limits (None: none asked for).
    memory_bytes: int | None = None
    nano_cpus: int | None = None
    #: Capabilities added (capAdd, --cap-add): each one c.EnvironmentManager.allowed_capabilities
    #: names.
    cap_add: tuple[str, ...] = ()

    def to_json(self) -> dict[str, Any]:
        body = asdict(self)
        body["ulimits"] = [
            {"name": name, "soft": soft, "hard": hard} for name, soft, hard in self.ulimits
        ]
        body["cap_add"] = list(self.cap_add)
        return body


@dataclass(frozen=True)
class Environment:
    """One environment. ``source`` is the devcontainer.json's path relative to the Jupyter root
    directory (``.devcontainer/gpu/devcontainer.json``), ``"config"`` or ``"default"``.

    ``container_env`` and the commands may be dicts or lists: an Environment is not hashable.
    """

    name: str
    display_name: str
    source: str
    image: str | None = None
    build: BuildSpec | None = None
    container_env: dict[str, str] = field(default_factory=dict)
    mounts: tuple[DeclaredMount, ...] = ()
    run_options: RunOptions = field(default_factory=RunOptions)
    gpu: GPURequirement = field(default_factory=GPURequirement)
    needs: HostNeeds = field(default_factory=HostNeeds)
    forward_ports: tuple[int, ...] = ()
    #: The lifecycle commands, in the order a first start runs them (``containers.commands``).
    on_create_command: Command = None
    update_content_command: Command = None
    post_create_command: Command = None
    post_start_command: Command = None
    post_attach_command: Command = None
    #: ``remoteUser`` and ``containerUser``: a user name or ``uid[:gid]`` (checked by the
    #: reader); used where the container does not run as the server's user
    #: (``containers.targets.Targets.run_as``).
    remote_user: str | None = None
    container_user: str | None = None
    workspace_folder: str = "/workspace"
    idle_timeout: float | None = None
    #: The host its dev containers and kernels start on when none is named
    #: (``customizations.gpudev.host``; ``None``: placed automatically).
    host: str | None = None
    #: Dev Container Features installed on its image (``containers.features``), as written,
    #: ``overrideFeatureInstallOrder``, and the folder of its devcontainer.json (local features
    #: and ``devcontainer-lock.json``; ``None`` for an environment of the configuration).
    features: tuple[FeatureRequest, ...] = ()
    feature_order: tuple[str, ...] = ()
    config_dir: str | None = None
    #: Set by ``containers.commands.at_restart`` only: a start of a container made before,
    #: which runs only the commands of each start (postStartCommand, postAttachCommand).
    restarting: bool = False
    #: The capabilities the administrator allows (c.EnvironmentManager.allowed_capabilities)
    #: when it was read: its features' capAdd may name only these.
    allowed_caps: tuple[str, ...] = ()
    #: What of its file gpudev does not do (``support.check_properties``, ``runArgs``...):
    #: shown in the listing, a dry run, the panel's row and a start's progress.
    notes: tuple[str, ...] = ()

    def image_ref(self) -> str:
        """The image to run: ``image``, or for a build ``gpudev-env-<name>:<12 hex>``."""
        if self.build is not None:
            repository = re.sub(r"[_.-]{2,}", "-", self.name).strip("_.-") or "unnamed"
            return f"gpudev-env-{repository}:{self.build.digest()[:12]}"
        if self.image:
            return self.image
        raise BadRequest(f"The environment {self.name!r} has neither an image nor a build")

    def to_json(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "display_name": self.display_name,
            "source": self.source,
            "image": self.image,
            "image_ref": self.image_ref(),
            "build": self.build.to_json() if self.build else None,
            "container_env": dict(self.container_env),
            "mounts": [mount.to_json() for mount in self.mounts],
            "run_options": self.run_options.to_json(),
            "gpu": self.gpu.to_json(),
            "needs": self.needs.to_json(),
            "forward_ports": list(self.forward_ports),
            "on_create_command": self.on_create_command,
            "update_content_command": self.update_content_command,
            "post_create_command": self.post_create_command,
            "post_start_command": self.post_start_command,
            "post_attach_command": self.post_attach_command,
            "remote_user": self.remote_user,
            "container_user": self.container_user,
            "workspace_folder": self.workspace_folder,
            "idle_timeout": self.idle_timeout,
            "host": self.host,
            "features": [feature.to_json() for feature in self.features],
            "notes": list(self.notes),
        }


@dataclass
class EnvironmentList:
    """What ``EnvironmentManager.list`` found.

    ``problems`` holds one dict per file that could not be used (``level: "error"``) or per
    setting that was ignored (``level: "warning"``), with ``file``, ``message`` and, where
    known, ``name`` (the environment the file would have defined).
    """

    environments: list[Environment]
    problems: list[dict[str, str]]

    def names(self) -> list[str]:
        return [env.name for env in self.environments]

    def to_json(self) -> dict[str, Any]:
        return {
            "environments": [env.to_json() for env in self.environments],
            "problems": [dict(problem) for problem in self.problems],
        }


class ImageNotAllowed(GPUDevError):
    """An image that no environment declares and no ``allowed_images`` pattern matches."""

    status = 403
    exit_code = 2
    code = "image_not_allowed"


def _file_sha256(path: Path) -> str:
    hasher = hashlib.sha256()
    with path.open("rb") as handle:
        for chunk in iter(lambda: handle.read(1 << 16), b""):
            hasher.update(chunk)
    return hasher.hexdigest()
