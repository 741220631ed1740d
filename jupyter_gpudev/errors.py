"""Typed errors. Each one knows the HTTP status it maps to and a message a person can act on.

Domain code raises these; ``routes.py`` is the one place that turns them into HTTP responses and
``cli.py`` the one place that turns them into exit codes. Raw engine errors are logged where
they are caught and never copied into ``message``.
"""

from __future__ import annotations

from typing import Any


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


class EngineError(GPUDevError):
    """The engine failed an operation; the message says what to do, the log has its words."""

    status = 502
    exit_code = 4
    code = "engine"
