"""What the container side reports and is asked: start requests, container and kernel
descriptions, and the names and times read from the engine."""

from __future__ import annotations

import re
from dataclasses import asdict, dataclass, field, fields
from datetime import datetime
from typing import Any

from ..leasing import iso_utc

PREFIX = "gpudev-"


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


@dataclass(frozen=True)
class DevContainerInfo:
    """A dev container as the API and the CLI report it."""

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

    def to_json(self) -> dict[str, Any]:
        # Flat values only: a shallow copy (``asdict`` deep-copies; the panel polls this
        # for every container).
        result = {name: getattr(self, name) for name in _INFO_FIELDS}
        result["ports"] = dict(self.ports)
        return result


_INFO_FIELDS = tuple(f.name for f in fields(DevContainerInfo))


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


def docker_name(name: str) -> str:
    """The engine's name of the dev container the user calls ``name``."""
    return name if name.startswith(PREFIX) else PREFIX + name


def user_name(container_name: str) -> str:
    """The name the user gave, from the engine's name of the container."""
    return container_name.removeprefix(PREFIX)
