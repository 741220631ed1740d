"""Environments: which image a dev container runs and how, read from devcontainer.json and config.

An environment comes from one of three places, listed in this order:

1. ``.devcontainer/devcontainer.json`` and ``.devcontainer/<sub>/devcontainer.json`` under the
   Jupyter root directory (``c.EnvironmentManager.discover``);
2. the administrator's ``c.EnvironmentManager.environments`` (name -> devcontainer.json form);
3. the built-in ``default`` environment: CPU only, ``c.EnvironmentManager.default_image``.

Only the devcontainer.json keys jupyter-gpudev acts on are read; the many others of the spec are
ignored. ``runArgs`` are default-deny: the few options that make sense for GPU work are turned
into typed ``RunOptions`` and nothing is ever handed to Docker verbatim.

Everything here is parsing and validation: nothing runs, no engine is contacted.
"""

from __future__ import annotations

import builtins
import fnmatch
import hashlib
import json
import math
import os
import posixpath
import re
import unicodedata
from collections.abc import Mapping
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import Any, Literal, TypeAlias

from traitlets import Bool, Dict, List, Unicode
from traitlets.config import LoggingConfigurable

from ..errors import BadRequest, ConfigError, GPUDevError, NotFound

GPUMode = Literal["none", "optional", "required"]
MountType = Literal["bind", "volume"]
#: A lifecycle command as the Dev Containers spec writes it: a shell string, an argv list, or
#: named commands run in parallel.
Command: TypeAlias = str | list[str] | dict[str, str | list[str]] | None

NAME_RE = re.compile(r"^[a-z0-9][a-z0-9_.-]{0,62}\Z")
DEFAULT_NAME = "default"
CONFIG_TRAIT = "c.EnvironmentManager.environments"
#: devcontainer.json files larger than this are refused (they are a few KiB in practice).
MAX_FILE_BYTES = 1 << 20
ULIMIT_NAMES = frozenset({"memlock", "stack", "nofile", "core", "nproc"})
IPC_MODES = ("host", "private", "shareable")
GPUDEV_OPTIONS = ("gpus", "gpuModel", "gpuMemory", "idleTimeout", "shmSize", "memory", "cpus")
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
_IMAGE_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._/:@+-]{0,511}\Z")
_VARIABLE_RE = re.compile(r"\$\{([A-Za-z]+)\}")
_DOCKER_SIZE_RE = re.compile(r"^(\d+(?:\.\d+)?)\s*([kmgtp]?)(i?b)?\Z", re.IGNORECASE)
_GPU_MEMORY_RE = re.compile(r"^(\d+(?:\.\d+)?)\s*([kmgt])(i?)b?\Z", re.IGNORECASE)
_INT_RE = re.compile(r"^-?\d+\Z")

_MOUNTS_INSTEAD = (
    "declare host folders in 'mounts' instead; they are checked against c.MountPolicy.allowed_roots"
)
_NAMESPACE = "it shares or changes a namespace of the host"
_REFUSED_RUN_ARGS: dict[str, str] = {
    "--privileged": "it gives the container every device and capability of the host",
    "--cap-add": "it adds Linux capabilities to the container",
    "--device": (
        "it passes host devices through; request GPUs with hostRequirements.gpu or "
        "customizations.gpudev.gpus"
    ),
    "--security-opt": "it weakens the container's confinement",
    "-v": _MOUNTS_INSTEAD,
    "--volume": _MOUNTS_INSTEAD,
    "--mount": _MOUNTS_INSTEAD,
    "--volumes-from": _MOUNTS_INSTEAD,
    "--userns": _NAMESPACE,
    "--cgroupns": _NAMESPACE,
    "--uts": _NAMESPACE,
    "-u": "use 'remoteUser' instead",
    "--user": "use 'remoteUser' instead",
    "--runtime": "jupyter-gpudev chooses the container runtime",
    "-e": "use 'containerEnv' instead",
    "--env": "use 'containerEnv' instead",
    "--env-file": "use 'containerEnv' instead",
    "-p": "use 'forwardPorts' instead",
    "--publish": "use 'forwardPorts' instead",
    "-P": "use 'forwardPorts' instead",
    "--publish-all": "use 'forwardPorts' instead",
}
_VALUE_RUN_ARGS = frozenset(
    {"--gpus", "--shm-size", "--ipc", "--ulimit", "--network", "--net", "--pid"}
)
_ALLOWED_RUN_ARGS = (
    "--gpus, --shm-size, --ipc, --ulimit and --init; --network=host, --pid=host and --ipc=host "
    "where the administrator enables them"
)


# --------------------------------------------------------------------------------------------
# JSON with comments


def _position(text: str, index: int) -> tuple[int, int]:
    line = text.count("\n", 0, index) + 1
    column = index - (text.rfind("\n", 0, index) + 1) + 1
    return line, column


def strip_jsonc(text: str, where: str = "<text>") -> str:
    """Blank out comments and trailing commas outside strings, keeping every line and column.

    Comments become spaces (line breaks inside block comments are kept), so positions in
    ``json`` errors still point into the original text.
    """
    out = list(text)
    n = len(text)
    i = 0
    in_string = False
    previous = ""  # the last significant character outside strings and comments
    pending_comma: int | None = None  # a comma that only whitespace and comments follow so far
    while i < n:
        ch = text[i]
        if in_string:
            if ch == "\\":
                i += 2
                continue
            if ch == '"':
                in_string = False
            i += 1
            continue
        nxt = text[i + 1] if i + 1 < n else ""
        if ch == "/" and nxt == "/":
            end = text.find("\n", i)
            end = n if end == -1 else end
            out[i:end] = " " * (end - i)
            i = end
            continue
        if ch == "/" and nxt == "*":
            end = text.find("*/", i + 2)
            if end == -1:
                line, column = _position(text, i)
                raise BadRequest(
                    f"{where}: line {line}, column {column}: a /* comment is never closed",
                    details={"file": where, "line": line, "column": column},
                )
            for k in range(i, end + 2):
                if out[k] not in "\r\n":
                    out[k] = " "
            i = end + 2
            continue
        if ch in " \t\r\n":
            i += 1
            continue
        if ch in "}]" and pending_comma is not None:
            out[pending_comma] = " "
        pending_comma = i if ch == "," and previous not in ("", "[", "{", ",") else None
        if ch == '"':
            in_string = True
        previous = ch
        i += 1
    return "".join(out)


def _refuse_constant(name: str) -> Any:
    raise ValueError(f"{name} is not valid JSON")


def load_jsonc(text: str, where: str = "<text>") -> Any:
    """Parse JSON with ``//`` and ``/* */`` comments and trailing commas (devcontainer.json).

    Errors are ``BadRequest`` naming ``where`` with the line and column.
    """
    if text.startswith("\ufeff"):
        text = text[1:]
    try:
        return json.loads(strip_jsonc(text, where), parse_constant=_refuse_constant)
    except json.JSONDecodeError as exc:
        raise BadRequest(
            f"{where}: line {exc.lineno}, column {exc.colno}: {exc.msg}",
            details={"file": where, "line": exc.lineno, "column": exc.colno},
        ) from None
    except ValueError as exc:
        raise BadRequest(f"{where}: {exc}", details={"file": where}) from None
    except RecursionError:
        raise BadRequest(f"{where}: nested too deeply", details={"file": where}) from None


def read_jsonc_file(path: Path, where: str) -> Any:
    """Read and parse one devcontainer.json; every failure is a ``BadRequest`` naming ``where``."""
    try:
        with path.open("rb") as handle:
            raw = handle.read(MAX_FILE_BYTES + 1)
    except OSError as exc:
        raise BadRequest(f"{where}: cannot be read ({exc.strerror or exc})") from None
    if len(raw) > MAX_FILE_BYTES:
        raise BadRequest(f"{where}: larger than {MAX_FILE_BYTES // 1024} KiB")
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError:
        raise BadRequest(f"{where}: not UTF-8 text") from None
    return load_jsonc(text, where)


# --------------------------------------------------------------------------------------------
# small parsers


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


def _substitute(text: str, variables: Mapping[str, str]) -> str:
    """Replace the ``${name}`` variables we know; others are left as written."""
    return _VARIABLE_RE.sub(lambda m: variables.get(m.group(1), m.group(0)), text)


def _default_workspace(root_real: str) -> str:
    """``/workspaces/<root folder name>``, as the Dev Containers tools default to."""
    return "/workspaces/" + (os.path.basename(root_real) or "workspace")


def _inside(path: str, root: str) -> bool:
    return os.path.commonpath([root, path]) == root


def _gpu_count_from_flag(value: str) -> int:
    if value == "all":
        return 1
    if value.startswith("device="):
        return len([part for part in value[len("device=") :].split(",") if part])
    return int(value)


def normalize_image_ref(ref: str) -> str:
    """The spelling used to compare references: ``:latest`` explicit, Docker Hub prefix dropped."""
    name, at, digest = ref.strip().partition("@")
    if not at and ":" not in name.rsplit("/", 1)[-1]:
        name += ":latest"
    for prefix in ("docker.io/", "index.docker.io/", "registry-1.docker.io/"):
        if name.startswith(prefix):
            name = name[len(prefix) :]
            break
    name = name.removeprefix("library/")
    return name + at + digest


# --------------------------------------------------------------------------------------------
# the model


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

    def to_json(self) -> dict[str, Any]:
        body = asdict(self)
        body["ulimits"] = [
            {"name": name, "soft": soft, "hard": hard} for name, soft, hard in self.ulimits
        ]
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
    forward_ports: tuple[int, ...] = ()
    post_create_command: Command = None
    post_start_command: Command = None
    remote_user: str | None = None
    workspace_folder: str = "/workspace"
    idle_timeout: float | None = None

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
            "forward_ports": list(self.forward_ports),
            "post_create_command": self.post_create_command,
            "post_start_command": self.post_start_command,
            "remote_user": self.remote_user,
            "workspace_folder": self.workspace_folder,
            "idle_timeout": self.idle_timeout,
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


# --------------------------------------------------------------------------------------------
# runArgs


def parse_run_args(
    args: Any,
    *,
    where: str,
    allow_host_network: bool = False,
    allow_host_pid: bool = False,
    allow_host_ipc: bool = False,
) -> tuple[RunOptions, list[str]]:
    """Typed options from ``runArgs``; default-deny. Returns the options and warnings."""
    if not isinstance(args, list) or not all(isinstance(arg, str) for arg in args):
        raise BadRequest(f"{where}: 'runArgs' must be a list of strings")
    notes: list[str] = []
    options: dict[str, Any] = {}
    ulimits: list[tuple[str, int, int]] = []
    i = 0
    while i < len(args):
        flag, has_value, inline = _split_run_arg(args[i].strip(), where)
        i += 1
        if flag == "--init":
            if has_value and inline not in ("true", "false"):
                raise BadRequest(f"{where}: runArgs: --init takes no value (or true/false)")
            options["init"] = inline != "false"
            continue
        if has_value:
            value = inline
        elif i < len(args):
            value = args[i].strip()
            i += 1
        else:
            raise BadRequest(f"{where}: runArgs: {flag} needs a value")
        if flag == "--ulimit":
            ulimits.append(_parse_ulimit(value, where))
        else:
            key, parsed = _run_arg_option(
                flag,
                value,
                where,
                notes,
                allow_host_network=allow_host_network,
                allow_host_pid=allow_host_pid,
                allow_host_ipc=allow_host_ipc,
            )
            options[key] = parsed
    return RunOptions(ulimits=tuple(ulimits), **options), notes


def _split_run_arg(token: str, where: str) -> tuple[str, bool, str]:
    """(flag, whether "=value" was attached, that value) for an allowed option; else refused."""
    if not token.startswith("-"):
        raise BadRequest(
            f"{where}: runArgs: unexpected argument {token!r}; allowed options are "
            f"{_ALLOWED_RUN_ARGS}"
        )
    if token.startswith("--"):
        flag, equals, inline = token.partition("=")
    else:  # short options: "-v", "-v=x", "-vx" all start with the two-character flag
        flag, equals, inline = token[:2], "", ""
    if flag in _REFUSED_RUN_ARGS:
        raise BadRequest(
            f"{where}: runArgs: {flag} is not allowed: {_REFUSED_RUN_ARGS[flag]}",
            details={"argument": flag},
        )
    if flag != "--init" and flag not in _VALUE_RUN_ARGS:
        raise BadRequest(
            f"{where}: runArgs: {flag} is not allowed; allowed options are {_ALLOWED_RUN_ARGS}",
            details={"argument": flag},
        )
    return flag, bool(equals), inline


def _run_arg_option(
    flag: str,
    value: str,
    where: str,
    notes: list[str],
    *,
    allow_host_network: bool,
    allow_host_pid: bool,
    allow_host_ipc: bool = False,
) -> tuple[str, Any]:
    """The RunOptions field and value for one option that takes a value (not --ulimit)."""
    if flag == "--gpus":
        return "gpus", _parse_gpus_flag(value, where, notes)
    if flag == "--shm-size":
        try:
            return "shm_size_bytes", parse_docker_size(value)
        except ValueError as exc:
            raise BadRequest(f"{where}: runArgs: --shm-size: {exc}") from None
    if flag == "--ipc":
        if value not in IPC_MODES:
            raise BadRequest(
                f"{where}: runArgs: --ipc={value} is not allowed; use one of {', '.join(IPC_MODES)}"
            )
        if value == "host":
            # the host's IPC namespace: its shared memory (/dev/shm), semaphores, queues
            return "ipc_mode", _host_only(flag, value, where, allow_host_ipc, "allow_host_ipc")
        return "ipc_mode", value
    if flag in ("--network", "--net"):
        return "network_mode", _host_only(
            flag, value, where, allow_host_network, "allow_host_network"
        )
    return "pid_mode", _host_only(flag, value, where, allow_host_pid, "allow_host_pid")


def _parse_gpus_flag(value: str, where: str, notes: list[str]) -> str:
    value = value.strip().strip("\"'")
    if value == "all":
        return value
    if value.isdigit() and int(value) > 0:
        return value
    if value.startswith("device=") and _gpu_count_from_flag(value) > 0:
        notes.append(
            f"{where}: runArgs: --gpus {value} names devices; jupyter-gpudev leases free GPUs "
            f"by UUID, so only the count ({_gpu_count_from_flag(value)}) is used"
        )
        return value
    raise BadRequest(
        f"{where}: runArgs: --gpus {value!r} is not understood; use 'all', a count, or "
        "'device=ID,...'"
    )


def _parse_ulimit(value: str, where: str) -> tuple[str, int, int]:
    name, has_limits, limits = value.partition("=")
    name = name.strip()
    if name not in ULIMIT_NAMES:
        raise BadRequest(
            f"{where}: runArgs: --ulimit {name!r} is not allowed; use one of "
            f"{', '.join(sorted(ULIMIT_NAMES))}"
        )
    soft_text, _, hard_text = limits.partition(":")
    hard_text = hard_text or soft_text
    if not has_limits or not _INT_RE.match(soft_text) or not _INT_RE.match(hard_text):
        raise BadRequest(f"{where}: runArgs: --ulimit {value!r} is not NAME=SOFT[:HARD]")
    soft, hard = int(soft_text), int(hard_text)
    if soft < -1 or hard < -1:
        raise BadRequest(f"{where}: runArgs: --ulimit {value!r}: limits are -1 or more")
    if hard != -1 and (soft == -1 or soft > hard):
        raise BadRequest(f"{where}: runArgs: --ulimit {value!r}: the soft limit exceeds the hard")
    return name, soft, hard


def _host_only(flag: str, value: str, where: str, allowed: bool, trait: str) -> str:
    if value != "host":
        raise BadRequest(f"{where}: runArgs: {flag}={value} is not allowed; only {flag}=host is")
    if not allowed:
        raise BadRequest(
            f"{where}: runArgs: {flag}=host is not allowed here; the administrator can enable "
            f"it with c.EnvironmentManager.{trait} = True",
            details={"argument": flag, "trait": trait},
        )
    return value


# --------------------------------------------------------------------------------------------
# one devcontainer.json (or one config entry) -> Environment


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
    ) -> None:
        self.data = data
        self.where = where
        self.root_real = root_real
        self.base_dir = base_dir
        self.allow_host_network = allow_host_network
        self.allow_host_pid = allow_host_pid
        self.allow_host_ipc = allow_host_ipc
        self.allowed_env = allowed_env
        self.notes: list[str] = []
        self.variables = {
            "localWorkspaceFolder": root_real,
            "localWorkspaceFolderBasename": os.path.basename(root_real),
        }

    def fail(self, message: str) -> BadRequest:
        return BadRequest(f"{self.where}: {message}", details={"file": self.where})

    def read(self, *, name: str, display_name: str, source: str) -> Environment:
        if "dockerComposeFile" in self.data:
            raise self.fail("Docker Compose environments (dockerComposeFile) are not supported")
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
        )
        self.notes.extend(notes)
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
            forward_ports=self._forward_ports(),
            post_create_command=self._command("postCreateCommand"),
            post_start_command=self._command("postStartCommand"),
            remote_user=self._optional_str("remoteUser"),
            workspace_folder=workspace,
            idle_timeout=self._idle_timeout(custom),
        )

    # -- helpers

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


def _number_within(value: Any, low: float, high: float) -> bool:
    """``value`` is a finite JSON number (not a boolean) from ``low`` to ``high``."""
    return (
        not isinstance(value, bool)
        and isinstance(value, (int, float))
        and math.isfinite(value)
        and low <= value <= high
    )


# --------------------------------------------------------------------------------------------
# the manager


def _candidate_files(root_real: str) -> list[tuple[Path, str, bool]]:
    """devcontainer.json files under the root: (path, the name it gives unless it says
    otherwise, whether it is the top-level ``.devcontainer/devcontainer.json``)."""
    folder = Path(root_real) / ".devcontainer"
    found: list[tuple[Path, str, bool]] = []
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


class EnvironmentManager(LoggingConfigurable):
    """Environments offered to start. Configure with ``c.EnvironmentManager.*``."""

    environments = Dict(
        default_value={},
        help="""Environments declared by the administrator, offered in every root directory:
        name -> a dict in devcontainer.json form (image or build, containerEnv, mounts,
        runArgs, hostRequirements, customizations.gpudev, ...). Build paths must be absolute.
        A devcontainer.json with the same name in the root directory takes precedence.""",
    ).tag(config=True)

    default_image = Unicode(
        "gpudev-python:bookworm",
        help="""The image of the built-in 'default' environment (CPU only, Python and
        ipykernel); `jupyter gpudev image bootstrap` builds the default one.""",
    ).tag(config=True)

    include_default = Bool(
        True,
        help="""Offer the built-in 'default' environment (unless an environment found in the
        root directory or declared in configuration is itself named 'default').""",
    ).tag(config=True)

    discover = Bool(
        True,
        help="""Read .devcontainer/devcontainer.json and .devcontainer/*/devcontainer.json
        under the Jupyter root directory.""",
    ).tag(config=True)

    allowed_images = List(
        Unicode(),
        default_value=[],
        help="""More images that may be started, as fnmatch patterns ('*' also matches '/'),
        e.g. 'nvcr.io/nvidia/pytorch:*'. Without a match, only the images of declared
        environments (devcontainer.json, configuration, the default image and images built
        from a Dockerfile under the root) may start.""",
    ).tag(config=True)

    allow_host_network = Bool(
        False,
        help="""Accept --network=host (or --net=host) in runArgs. The container then shares
        the host's network namespace and can reach every service listening on the host.""",
    ).tag(config=True)

    allow_host_pid = Bool(
        False,
        help="""Accept --pid=host in runArgs. The container then sees (and, as the same user,
        can signal) every process of the host.""",
    ).tag(config=True)

    allow_host_ipc = Bool(
        False,
        help="""Accept --ipc=host in runArgs. The container then shares the host's IPC
        namespace: its shared memory (/dev/shm), semaphores and message queues, those of other
        users' processes included. --shm-size (or customizations.gpudev.shmSize) is the usual
        answer to a small /dev/shm.""",
    ).tag(config=True)

    allowed_env_vars = List(
        Unicode(),
        default_value=[],
        help="""Variables a devcontainer.json's containerEnv may set although they decide
        which code every process in the container loads: PATH, LD_* (LD_PRELOAD,
        LD_LIBRARY_PATH, ...), PYTHON* (PYTHONPATH, PYTHONSTARTUP, PYTHONHOME, ...) and
        BASH_ENV; fnmatch patterns, e.g. ['PYTHONPATH', 'LD_LIBRARY_PATH']. Environments
        declared in c.EnvironmentManager.environments may always set them.""",
    ).tag(config=True)

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self._last_root: Path | None = None

    def _reader(
        self, data: dict[str, Any], *, where: str, root_real: str, base_dir: str | None
    ) -> _SpecReader:
        return _SpecReader(
            data,
            where=where,
            root_real=root_real,
            base_dir=base_dir,
            allow_host_network=self.allow_host_network,
            allow_host_pid=self.allow_host_pid,
            allow_host_ipc=self.allow_host_ipc,
            allowed_env=tuple(self.allowed_env_vars),
        )

    def _read_file(
        self, path: Path, root_real: str, where: str, guess: str, *, top_level: bool
    ) -> tuple[Environment, builtins.list[str]]:
        real = os.path.realpath(path)
        if not _inside(real, root_real):
            raise BadRequest(
                f"{where}: links to a file outside the Jupyter root directory",
                details={"name": guess},
            )
        data = read_jsonc_file(path, where)
        if not isinstance(data, dict):
            raise BadRequest(f"{where}: must hold a JSON object", details={"name": guess})
        declared = data.get("name")
        if declared is not None and not isinstance(declared, str):
            raise BadRequest(f"{where}: 'name' must be a string", details={"name": guess})
        name = (slugify(declared or "") or guess) if top_level else guess
        if not NAME_RE.match(name):
            raise BadRequest(
                f"{where}: {name!r} cannot be an environment name; set 'name' (or rename the "
                "folder) to 1-63 lowercase letters, digits, '.', '_' or '-'",
                details={"name": name},
            )
        reader = self._reader(data, where=where, root_real=root_real, base_dir=str(path.parent))
        try:
            env = reader.read(name=name, display_name=declared or name, source=where)
        except BadRequest as exc:
            exc.details.setdefault("name", name)
            raise
        return env, reader.notes

    def _read_config(
        self, name: Any, data: Any, root_real: str
    ) -> tuple[Environment, builtins.list[str]]:
        where = f"{CONFIG_TRAIT}[{name!r}]"
        if not isinstance(name, str) or not NAME_RE.match(name):
            raise ConfigError(
                f"{where}: an environment name is 1-63 lowercase letters, digits, '.', '_' or "
                "'-', starting with a letter or digit"
            )
        if not isinstance(data, dict):
            raise ConfigError(f"{where}: expected a dict in devcontainer.json form")
        declared = data.get("name")
        if declared is not None and not isinstance(declared, str):
            raise ConfigError(f"{where}: 'name' must be a string")
        reader = self._reader(data, where=where, root_real=root_real, base_dir=None)
        try:
            env = reader.read(name=name, display_name=declared or name, source="config")
        except BadRequest as exc:
            raise ConfigError(exc.message) from None
        return env, reader.notes

    def list(self, root_dir: Path) -> EnvironmentList:
        """Every environment for ``root_dir``; unreadable files are reported, not raised.

        Raises ``ConfigError`` when ``c.EnvironmentManager.environments`` is invalid.
        """
        root_real = os.path.realpath(root_dir)
        self._last_root = Path(root_real)
        found: builtins.list[Environment] = []
        problems: builtins.list[dict[str, str]] = []
        taken: dict[str, str] = {}

        def add(env: Environment, notes: builtins.list[str], where: str) -> None:
            if env.name in taken:
                problems.append(
                    {
                        "file": where,
                        "name": env.name,
                        "level": "error",
                        "message": f"{where}: the environment name {env.name!r} is already used "
                        f"by {taken[env.name]}; give this one another name",
                    }
                )
                return
            taken[env.name] = where
            found.append(env)
            problems.extend(
                {"file": where, "name": env.name, "level": "warning", "message": note}
                for note in notes
            )

        if self.discover and os.path.isdir(root_real):
            for path, guess, top_level in _candidate_files(root_real):
                where = path.relative_to(root_real).as_posix()
                try:
                    env, notes = self._read_file(path, root_real, where, guess, top_level=top_level)
                except BadRequest as exc:
                    self.log.debug("Environment file %s: %s", where, exc.message)
                    problems.append(
                        {
                            "file": where,
                            "name": str(exc.details.get("name", guess)),
                            "level": "error",
                            "message": exc.message,
                        }
                    )
                    continue
                add(env, notes, where)
        for name, data in self.environments.items():
            env, notes = self._read_config(name, data, root_real)
            add(env, notes, f"{CONFIG_TRAIT}[{name!r}]")
        if self.include_default and DEFAULT_NAME not in taken:
            found.append(
                Environment(
                    name=DEFAULT_NAME,
                    display_name="Python (default)",
                    source="default",
                    image=self.default_image,
                    workspace_folder=_default_workspace(root_real),
                )
            )
        return EnvironmentList(environments=found, problems=problems)

    def get(self, name: str, root_dir: Path) -> Environment:
        """One environment by name: ``NotFound`` listing the known names, or ``BadRequest``
        with the problem when the file that defines it cannot be used."""
        listing = self.list(root_dir)
        for env in listing.environments:
            if env.name == name:
                return env
        for problem in listing.problems:
            if problem.get("name") == name and problem.get("level") == "error":
                raise BadRequest(
                    f"The environment {name!r} cannot be used: {problem['message']}",
                    details={"environment": name, "file": problem["file"]},
                )
        raise NotFound(
            f"No environment named {name!r}; known environments: "
            f"{', '.join(listing.names()) or 'none'}",
            details={"environment": name},
        )

    def is_image_allowed(self, image: str, root_dir: Path | None) -> bool:
        """Whether ``image`` may start: declared by an environment, or matching allowed_images.

        With ``root_dir=None`` only configuration counts (no devcontainer.json is read).
        """
        if not image:
            return False
        wanted = normalize_image_ref(image)
        if self.include_default and wanted == normalize_image_ref(self.default_image):
            return True
        for pattern in self.allowed_images:
            if fnmatch.fnmatchcase(image, pattern) or fnmatch.fnmatchcase(wanted, pattern):
                return True
        if root_dir is None:
            declared = [
                self._read_config(name, data, "/")[0] for name, data in self.environments.items()
            ]
        else:
            declared = self.list(root_dir).environments
        return any(normalize_image_ref(env.image_ref()) == wanted for env in declared)

    def check_image_allowed(self, env: Environment, root_dir: Path | None = None) -> None:
        """Raise ``ImageNotAllowed`` unless the environment's image may start.

        ``root_dir`` defaults to the root directory of this manager's latest ``list``/``get``
        (a Jupyter server has one); with neither, devcontainer.json files are not consulted.
        """
        image = env.image_ref()
        root = root_dir if root_dir is not None else self._last_root
        if not self.is_image_allowed(image, root):
            raise ImageNotAllowed(
                f"The image {image!r} is not declared by any environment: it must be named by a "
                "devcontainer.json under the Jupyter root directory, by "
                f"{CONFIG_TRAIT}, be the default image, be built from a Dockerfile under the "
                "root, or match c.EnvironmentManager.allowed_images",
                details={"image": image, "environment": env.name},
            )
