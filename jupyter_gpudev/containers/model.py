"""What the container side reports and is asked: start requests, container and kernel
descriptions, and the names and times read from the engine."""

from __future__ import annotations

import hashlib
import re
from dataclasses import asdict, dataclass, field, fields
from datetime import datetime, timezone
from typing import Any, Protocol

from ..leasing import iso_utc

PREFIX = "gpudev-"


class FirstProcess(Protocol):
    """A process a new container starts with beside its main one, told what to run on the
    container's standard input as it starts (a kernel whose connection key must never be in
    the container's configuration: ``kernels.first``). Docker hosts only; others ignore it."""

    def command(self, keep_alive: tuple[str, ...]) -> tuple[str, ...]:
        """The container's command: reads its standard input, starts what it is told, then
        runs ``keep_alive``; with nothing to read (an empty line, the input closed), at once."""

    def instructions(self, host: Any, container: Any) -> bytes:
        """What the command reads, for the container just created on ``host`` (its engine
        object); ``b""``: nothing to start (the command then only keeps the container up)."""

    def delivered(self) -> None:
        """The instructions reached the started container."""


@dataclass(frozen=True)
class StartRequest:
    """What a user asks for. GPUs: ``gpus`` (a count) or ``gpu_uuids``; neither = the env's."""

    environment: str
    host: str | None = None
    name: str | None = None
    gpus: int | None = None
    gpu_uuids: tuple[str, ...] = ()
    #: Another image for the environment (e.g. a pushed snapshot); must be allowed.
    image: str | None = None
    #: Set by the kernel provisioner for a container dedicated to that kernel.
    kernel_id: str | None = None
    #: Started with the container on its engine where the start allows it (set by the kernel
    #: provisioner: the dedicated container's kernel, without an exec).
    first_process: FirstProcess | None = field(default=None, compare=False, repr=False)


@dataclass(frozen=True)
class DevContainerInfo:
    """A dev container as the API and the CLI report it."""

    #: The name the caller gives it: their own name for their container; another user's
    #: (seen by an administrator in shared mode) is named by its ``key``, prefixed as on the
    #: engine, which addresses it for them.
    name: str
    container_id: str
    host: str
    environment: str
    owner: str
    image: str
    state: str
    status: str
    created: str
    gpu_uuids: tuple[str, ...]
    lease_id: str | None
    ports: dict[str, int]
    warnings: tuple[str, ...] = field(default=())
    #: Kept running after its last kernel ends (see ``DevContainers.pin``).
    pinned: bool = False
    #: The kernel this container was created for (``None``: a container kernels may share).
    kernel_id: str | None = None
    #: Web ports served through the authenticated proxy (forwardPorts + ports added later).
    web_ports: tuple[int, ...] = ()
    #: The environment's forwardPorts among them (always served; not removable).
    forward_ports: tuple[int, ...] = ()
    #: Running: when it (last) started, ISO 8601 UTC to the second; otherwise ``None``.
    started_at: str | None = None
    #: Stopped: when it last stopped (``None`` if it never ran); otherwise ``None``.
    finished_at: str | None = None
    #: How many live kernels of this server run in it (``None``: not known, e.g. the CLI).
    kernels: int | None = None
    #: The latest activity of those kernels, ISO 8601 UTC; ``None`` when it has no kernel.
    last_activity: str | None = None
    #: How many uncommitted changes it has, counted as the commit dialog lists them (one per
    #: package, file, deletion or variable); ``None``: not computed.
    uncommitted: int | None = None
    #: A pod on a Kubernetes host: never stopped and kept (removing it deletes it), no commits.
    pod: bool = False
    #: gpudev's name of it on its host (``container_key``): what its labels, the lease ledger,
    #: the claims and the kernels' records hold. Not reported: the API speaks of ``name``.
    key: str = ""

    def to_json(self) -> dict[str, Any]:
        # Flat values only: a shallow copy (``asdict`` deep-copies; the panel polls this
        # for every container).
        result = {name: getattr(self, name) for name in _INFO_FIELDS}
        result["ports"] = dict(self.ports)
        return result


_INFO_FIELDS = tuple(f.name for f in fields(DevContainerInfo) if f.name != "key")


@dataclass(frozen=True)
class KernelInfo:
    """Where a kernel of this server runs (``GET /gpudev/api/kernels/ID``)."""

    kernel_id: str
    container: str
    host: str
    environment: str
    #: The GPUs of its container (a kernel sees all of them, shared or not).
    gpu_uuids: tuple[str, ...]
    #: Its container is one that kernels share (not made for this kernel).
    shared: bool
    #: Its container's state (``running``, ``exited``, ...).
    state: str
    #: Its dev container is a pod on a Kubernetes host (deleted, not stopped, at the end).
    pod: bool = False

    def to_json(self) -> dict[str, Any]:
        return asdict(self)


_ENGINE_TIME_RE = re.compile(
    r"^(\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2})(?:\.\d+)?(Z|[+-]\d{2}:\d{2})\Z"
)


def engine_time(text: Any) -> str | None:
    """An engine timestamp (``2026-11-21T16:03:09.123456789Z``) as ISO 8601 UTC to the second,
    like the lease ledger's; ``None`` for the engine's "never" (``0001-01-01T00:00:00Z``) or
    anything unreadable."""
    match = _ENGINE_TIME_RE.match(str(text or "").strip())
    if match is None or match.group(1).startswith("0001-"):
        return None
    zone = "+00:00" if match.group(2) == "Z" else match.group(2)
    try:
        stamp = datetime.fromisoformat(match.group(1) + zone)
    except ValueError:
        return None
    return iso_utc(stamp.timestamp())


def creation_time() -> str:
    """Now, as a new dev container's creation is labelled (ISO 8601 UTC, to the second)."""
    return datetime.now(timezone.utc).isoformat(timespec="seconds")


def docker_name(name: str) -> str:
    """The engine's name of the dev container the user calls ``name``."""
    return name if name.startswith(PREFIX) else PREFIX + name


def user_name(container_name: str) -> str:
    """The engine's name of a container less gpudev's prefix (in single-user mode, the name
    the user gave it)."""
    return container_name.removeprefix(PREFIX)


# Names in shared mode. Every user names their own dev containers: alice's "train" and bob's
# "train" are two containers, and neither can learn from a name that the other has one. On the
# host each is known by its key, "gpudev-OWNER.NAME": labels, lease ledger, claims and kernel
# records hold the key, the engine's name of the container is the key, and a user sees and
# gives only NAME. In single-user mode the key is the name (the engine's name "gpudev-NAME").

#: Joins the owner's part and the name in a key; an owner's part never holds it.
OWNER_SEPARATOR = "."

_PLAIN_OWNER_RE = re.compile(r"[a-z0-9]+(?:-[a-z0-9]+)*\Z")


def owner_part(owner: str) -> str:
    """``owner`` as the first part of their keys: the name itself when it is lower-case
    letters and digits joined by single hyphens (``alice``, ``bob-smith``), else a readable
    form with a hash of the whole name after an underscore (which no plain name holds, so no
    user's part can be another's)."""
    if _PLAIN_OWNER_RE.match(owner):
        return owner
    readable = re.sub(r"[^a-z0-9]+", "-", owner.lower()).strip("-")[:40] or "user"
    return f"{readable}_{hashlib.sha256(owner.encode()).hexdigest()[:16]}"


def container_key(name: str, owner: str | None) -> str:
    """gpudev's key of the dev container ``owner`` calls ``name``: ``name`` in single-user mode
    (``owner`` is ``None``), ``gpudev-OWNER.NAME`` in shared mode."""
    if owner is None:
        return name
    return f"{PREFIX}{owner_part(owner)}{OWNER_SEPARATOR}{name}"


def given_name(key: str) -> str:
    """The name the owner gave the container whose key is ``key`` (see ``container_key``)."""
    if not key.startswith(PREFIX):
        return key
    return key.removeprefix(PREFIX).partition(OWNER_SEPARATOR)[2] or key


def keys_meant(name: str, owner: str | None) -> tuple[str, ...]:
    """The keys a caller may mean by ``name``, in the order they are tried. A name with
    gpudev's prefix is a key already (how an administrator names another user's container);
    in shared mode (``owner`` set) a plain name is the caller's own, or one named the same
    before names were per user."""
    if name.startswith(PREFIX):
        return (name, name.removeprefix(PREFIX))
    if owner is None:
        return (name,)
    return (container_key(name, owner), name)
