"""The shared gpudev service's REST API (``/gpudev/api/``) as blocking calls, made as the user
of this Jupyter server (JUPYTERHUB_API_TOKEN), and its answers read back as single-user mode
has them.

``ServiceAPI`` makes one call (``call``) or follows one progress stream (``events``: a start's,
a commit's); the service's errors come back as the ``GPUDevError`` single-user mode would raise
(``error_from``), with their status, code and message, so callers keep one error mapping. The
command line in client mode (``cli.remote``) and a client-mode server's kernel picker
(``shared.client``) use it.
"""

from __future__ import annotations

import json
import os
import urllib.error
import urllib.request
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import fields
from typing import Any

from ..containers import DevContainerInfo
from ..errors import (
    BadRequest,
    Conflict,
    EngineError,
    EngineUnreachable,
    Forbidden,
    GPUDevError,
    LimitReached,
    NotFound,
)
from ..leasing import NoFreeGPU
from ..untrusted import as_dict

#: The service's error codes that have a class of their own here (the others: by status).
_BY_CODE: dict[str, type[GPUDevError]] = {
    "no_free_gpu": NoFreeGPU,
    "limit_reached": LimitReached,
}
_BY_STATUS: dict[int, type[GPUDevError]] = {
    400: BadRequest,
    403: Forbidden,
    404: NotFound,
    409: Conflict,
    503: EngineUnreachable,
}

Progress = Callable[[dict[str, Any]], None]


def error_from(status: int, body: Any) -> GPUDevError:
    """The service's JSON error as the ``GPUDevError`` single-user mode would raise."""
    body = as_dict(body)
    message = body.get("message") if isinstance(body.get("message"), str) else None
    code = str(body.get("error") or "")
    cls = _BY_CODE.get(code) or _BY_STATUS.get(status, EngineError)
    err = cls.__new__(cls)
    GPUDevError.__init__(err, message or f"The gpudev service answered {status}")
    err.status = status
    if code:
        err.code = code
    details = body.get("details")
    if isinstance(details, dict):
        err.details = details
    return err


def info_from(data: Any) -> DevContainerInfo:
    """A ``DevContainerInfo`` from the service's JSON (lists back to tuples)."""
    if not isinstance(data, dict):
        raise EngineError("The gpudev service answered something that is not a dev container")
    known = {f.name for f in fields(DevContainerInfo)}
    values: dict[str, Any] = {
        k: tuple(v) if isinstance(v, list) else v for k, v in data.items() if k in known
    }
    try:
        return DevContainerInfo(**values)
    except TypeError as exc:
        raise EngineError("The gpudev service answered an incomplete dev container") from exc


class ServiceAPI:
    """Blocking calls to the service's REST API, as this server's JupyterHub user."""

    def __init__(self, service_url: str, timeout: float = 3600.0) -> None:
        self.base = service_url.rstrip("/") + "/gpudev/api/"
        self.timeout = timeout

    def _request(self, method: str, path: str, body: Any, accept: str) -> urllib.request.Request:
        token = os.environ.get("JUPYTERHUB_API_TOKEN", "")
        if not token:
            raise Forbidden(
                "The command line reaches the shared gpudev service as your JupyterHub user: "
                "run it in a terminal of your Jupyter server (JUPYTERHUB_API_TOKEN is not set)"
            )
        data = None if body is None else json.dumps(body).encode()
        request = urllib.request.Request(self.base + path, data=data, method=method)  # noqa: S310
        request.add_header("Authorization", f"token {token}")
        request.add_header("Accept", accept)
        if data is not None:
            request.add_header("Content-Type", "application/json")
        return request

    @contextmanager
    def _open(self, request: urllib.request.Request) -> Iterator[Any]:
        """The answer to ``request``; the service's errors raised as ``GPUDevError``."""
        try:
            with urllib.request.urlopen(request, timeout=self.timeout) as answer:  # noqa: S310
                yield answer
        except urllib.error.HTTPError as err:
            raise error_from(err.code, _json(err.read())) from None
        except OSError as err:
            raise EngineUnreachable(
                f"The shared gpudev service ({self.base}) cannot be reached: {err}"
            ) from None

    def call(self, method: str, path: str, body: Any = None) -> Any:
        """One request; its JSON answer, or the service's error raised."""
        with self._open(self._request(method, path, body, "application/json")) as answer:
            raw = answer.read()
        return _json(raw) if raw else None

    def events(self, method: str, path: str, body: Any, progress: Progress | None) -> Any:
        """A request answered with progress events: each ``progress`` event passed on, then
        the ``result`` returned (or the ``error`` raised)."""
        request = self._request(method, path, body, "text/event-stream")
        with self._open(request) as answer:
            kind, data = "", ""
            for raw in answer:
                line = raw.decode(errors="replace").rstrip("\r\n")
                if line.startswith("event:"):
                    kind = line[6:].strip()
                elif line.startswith("data:"):
                    data += line[5:].strip()
                elif not line and kind:
                    payload = _json(data.encode())
                    if kind == "result":
                        return payload
                    if kind == "error":
                        status = payload.get("status", 500) if isinstance(payload, dict) else 500
                        raise error_from(int(status), payload)
                    if kind == "progress" and progress is not None and isinstance(payload, dict):
                        progress(payload)
                    kind, data = "", ""
        raise EngineError("The gpudev service ended its answer without a result")


def _json(raw: bytes) -> Any:
    try:
        return json.loads(raw)
    except ValueError:
        return None
