"""Typed errors. Each one knows the HTTP status it maps to and a message a person can act on.

Domain code raises these; ``handlers/base.py`` is the one place that turns them into HTTP
responses and ``cli.py`` the one place that turns them into exit codes. ``engine_errors`` is the
one place that turns a failure of the Docker engine into one of them: the engine's own words are
logged there and never copied into ``message``.
"""

from __future__ import annotations

import errno
import logging
import socket
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import docker.errors
import requests.exceptions
import urllib3.exceptions

#: What the Docker SDK raises when the engine fails a call or cannot be reached (a stream it
#: reads, such as a build's log, raises urllib3's own errors when its connection breaks).
ENGINE_FAILURES: tuple[type[Exception], ...] = (
    docker.errors.DockerException,
    requests.exceptions.RequestException,
    urllib3.exceptions.HTTPError,
)

_log = logging.getLogger(__name__)


class GPUDevError(Exception):
    """Base class: ``message`` is shown to people; ``details`` is structured and safe to return."""

    status: int = 500
    #: The CLI exit code for this kind of failure.
    exit_code: int = 1
    #: A stable machine-readable name, returned in JSON bodies as ``error``.
    code: str = "internal"

    def __init__(self, message: str, *, details: dict[str, Any] | None = None) -> None:
        super().__init__(message)
        self.message = message
        self.details: dict[str, Any] = details or {}

    def to_json(self) -> dict[str, Any]:
        body: dict[str, Any] = {"error": self.code, "message": self.message}
        if self.details:
            body["details"] = self.details
        return body


class BadRequest(GPUDevError):
    """The request itself is wrong (a malformed argument, an unknown option)."""

    status = 400
    exit_code = 2
    code = "bad_request"


class NotFound(GPUDevError):
    """A named thing (host, environment, container) does not exist."""

    status = 404
    exit_code = 2
    code = "not_found"


class Forbidden(GPUDevError):
    """The caller may not do this at all (in the shared service: what only administrators
    do). Another user's container is ``NotFound`` instead, so that names do not leak."""

    status = 403
    exit_code = 2
    code = "forbidden"


class ConfigError(GPUDevError):
    """The administrator's configuration is invalid; the message names the trait."""

    status = 500
    exit_code = 2
    code = "config"


class EngineUnreachable(GPUDevError):
    """No Docker engine answered at the address tried."""

    status = 503
    exit_code = 3
    code = "engine_unreachable"


class ImageError(GPUDevError):
    """An image could not be pulled, built, imported or bootstrapped."""

    status = 502
    exit_code = 4
    code = "image"


class Conflict(GPUDevError):
    """The request clashes with the current state (a name in use, a thing already held)."""

    status = 409
    exit_code = 6
    code = "conflict"


class LimitReached(GPUDevError):
    """A per-user limit (``c.UserLimits``) refuses the request: the message names the limit,
    the setting it comes from and what the user holds now."""

    status = 409
    exit_code = 6
    code = "limit_reached"


class EngineError(GPUDevError):
    """The engine failed an operation; the message says what to do, the log has its words."""

    status = 502
    exit_code = 4
    code = "engine"


#: An engine failure or one of ours (an unreachable host, a refused request): what a caller that
#: can go on without the result (a best-effort check, an optional step) catches.
FAILURES: tuple[type[Exception], ...] = (*ENGINE_FAILURES, GPUDevError)


def describe_connection_error(url: str, exc: BaseException) -> str:
    """Turn a failed connection into a sentence that names the address and what to do."""
    cause: BaseException | None = exc
    seen: set[int] = set()
    while cause is not None and id(cause) not in seen:
        seen.add(id(cause))
        if isinstance(cause, FileNotFoundError) or (
            isinstance(cause, OSError) and cause.errno == errno.ENOENT
        ):
            what = "the socket does not exist"
            break
        if isinstance(cause, PermissionError) or (
            isinstance(cause, OSError) and cause.errno == errno.EACCES
        ):
            what = "permission denied on the socket (is the server user in the 'docker' group?)"
            break
        if isinstance(cause, ConnectionRefusedError):
            what = "the connection was refused"
            break
        if isinstance(cause, (socket.timeout, TimeoutError, requests.exceptions.Timeout)):
            what = "it did not answer in time"
            break
        if isinstance(cause, socket.gaierror):
            what = "the host name could not be resolved"
            break
        nxt = cause.__cause__ or cause.__context__
        if nxt is None and cause.args and isinstance(cause.args[-1], BaseException):
            nxt = cause.args[-1]
        cause = nxt
    else:
        what = "the engine did not answer (the server log has the details)"
    return (
        f"No Docker engine answered at {url}: {what}. Start the Docker engine there "
        "(`dockerd`, or `systemctl start docker`), or point jupyter-gpudev at a running one "
        "with DOCKER_HOST or c.HostPool.local_url / c.HostPool.hosts."
    )


def engine_error(
    what: str,
    exc: BaseException,
    log: logging.Logger | logging.LoggerAdapter[Any] | None = None,
    *,
    unreachable_at: str | None = None,
    details: dict[str, Any] | None = None,
) -> GPUDevError:
    """The typed error for the engine failure ``exc`` while doing ``what`` (``"Stopping
    'x'"``). The engine's words go to ``log`` (a warning), never into the message.

    ``unreachable_at``: the engine's address, for a call that only checks it answers: any
    failure then means no engine answered there (``EngineUnreachable``). Otherwise a missing
    object is ``NotFound``, a clash (409) ``Conflict``, anything else ``EngineError``."""
    (log or _log).warning("%s: engine error %r", what, exc)
    if unreachable_at is not None:
        return EngineUnreachable(describe_connection_error(unreachable_at, exc), details=details)
    if "could not select device driver" in str(exc):
        return EngineError(
            f"{what}: the engine cannot give containers GPUs (no NVIDIA container toolkit). "
            "Install nvidia-container-toolkit on the host and restart the Docker engine.",
            details=details,
        )
    if isinstance(exc, docker.errors.NotFound):
        return NotFound(f"{what}: not found", details=details)
    if isinstance(exc, docker.errors.APIError) and exc.status_code == 409:
        return Conflict(
            f"{what}: the engine reports a conflict (the name may be in use)", details=details
        )
    if isinstance(exc, (requests.exceptions.Timeout, urllib3.exceptions.TimeoutError)):
        why = "the Docker engine did not answer in time"
    elif isinstance(exc, (requests.exceptions.ConnectionError, urllib3.exceptions.ProtocolError)):
        why = "the connection to the Docker engine failed"
    else:
        why = f"the Docker engine refused it ({type(exc).__name__})"
    return EngineError(f"{what} failed: {why}; the log has the details", details=details)


@contextmanager
def engine_errors(
    what: str,
    log: logging.Logger | logging.LoggerAdapter[Any] | None = None,
    *,
    unreachable_at: str | None = None,
    details: dict[str, Any] | None = None,
) -> Iterator[None]:
    """Run engine calls; a failure of the engine becomes ``engine_error(what, ...)``, raised
    from it. With ``unreachable_at``, an ``OSError`` (a socket, an SSH tunnel) counts too."""
    failures: tuple[type[Exception], ...] = ENGINE_FAILURES
    if unreachable_at is not None:
        failures = (*ENGINE_FAILURES, OSError)
    try:
        yield
    except failures as exc:
        raise engine_error(what, exc, log, unreachable_at=unreachable_at, details=details) from exc
