"""The command line in client mode: the same subcommands, through the shared service's REST
API (``/gpudev/api/``) as the user of this Jupyter server (JUPYTERHUB_API_TOKEN).

``RemoteContainers`` answers what the container subcommands ask ``DevContainers`` (start,
list, stop, resume, pin, remove, logs, web ports), with ``DevContainerInfo`` built from the
service's JSON; the service's errors come back as ``GPUDevError`` with their status, code and
message, so exit codes are those of single-user mode. Starts and commits stream the service's
progress events.
"""

from __future__ import annotations

import builtins
import json
import os
import urllib.error
import urllib.request
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import fields
from typing import Any
from urllib.parse import quote, urlencode

from ..containers import DevContainerInfo, StartRequest
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
    body = body if isinstance(body, dict) else {}
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


def _name(name: str) -> str:
    return quote(name, safe="")


class RemoteContainers:
    """``DevContainers`` as the container subcommands use it, through the service."""

    def __init__(self, api: ServiceAPI) -> None:
        self.api = api

    def start(self, request: StartRequest, progress: Progress | None = None) -> DevContainerInfo:
        body: dict[str, Any] = {"environment": request.environment}
        for key in ("host", "name", "gpus", "image"):
            value = getattr(request, key)
            if value is not None:
                body[key] = value
        if request.gpu_uuids:
            body["gpu_uuids"] = list(request.gpu_uuids)
        return info_from(self.api.events("POST", "containers", body, progress))

    def list(
        self, all_states: bool = False, host: str | None = None
    ) -> builtins.list[DevContainerInfo]:
        answer = self.api.call("GET", "containers?" + urlencode({"all": int(all_states)}))
        infos = [info_from(c) for c in (answer or {}).get("containers", [])]
        return [i for i in infos if host is None or i.host == host]

    def get(self, name: str, host: str | None = None) -> DevContainerInfo:
        del host
        return info_from(self.api.call("GET", f"containers/{_name(name)}"))

    def stop(self, name: str, host: str | None = None) -> DevContainerInfo:
        del host
        return info_from(self.api.call("POST", f"containers/{_name(name)}/stop", {}))

    def resume(self, name: str, host: str | None = None) -> DevContainerInfo:
        del host
        return info_from(self.api.call("POST", f"containers/{_name(name)}/start", {}))

    def pin(self, name: str, host: str | None = None, pinned: bool = True) -> DevContainerInfo:
        del host
        method = "PUT" if pinned else "DELETE"
        return info_from(
            self.api.call(method, f"containers/{_name(name)}/pin", {} if pinned else None)
        )

    def remove(self, name: str, host: str | None = None, force: bool = False) -> None:
        del host
        self.api.call("DELETE", f"containers/{_name(name)}?force={int(force)}")

    def logs(self, name: str, host: str | None = None, follow: bool = False) -> Iterator[str]:
        del host
        if follow:
            raise BadRequest("logs --follow does not work through the shared gpudev service yet")
        answer = self.api.call("GET", f"containers/{_name(name)}/logs")
        yield str((answer or {}).get("logs", ""))

    def set_web_port(
        self, name: str, port: int, host: str | None = None, add: bool = True
    ) -> DevContainerInfo:
        del host
        if add:
            return info_from(
                self.api.call("POST", f"containers/{_name(name)}/ports", {"port": port})
            )
        self.api.call("DELETE", f"containers/{_name(name)}/ports/{port}")
        return self.get(name)

    def environments(self) -> dict[str, Any]:
        answer = self.api.call("GET", "environments")
        return answer if isinstance(answer, dict) else {}

    def commit(self, name: str, options: dict[str, Any], progress: Progress | None) -> Any:
        return self.api.events("POST", f"containers/{_name(name)}/commit", options, progress)

    def diff(self, name: str, exclude: tuple[str, ...]) -> Any:
        query = urlencode([("exclude", change) for change in exclude])
        return self.api.call(
            "GET", f"containers/{_name(name)}/diff" + (f"?{query}" if query else "")
        )
