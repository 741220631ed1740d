"""The command line in client mode: the same subcommands, through the shared service's REST
API (``/gpudev/api/``) as the user of this Jupyter server (JUPYTERHUB_API_TOKEN).

``RemoteContainers`` answers what the container subcommands ask ``DevContainers`` (start,
list, stop, resume, pin, remove, logs, web ports), with ``DevContainerInfo`` built from the
service's JSON, through ``shared.service_api.ServiceAPI``: the service's errors come back as
``GPUDevError`` with their status, code and message, so exit codes are those of single-user
mode. Starts and commits stream the service's progress events.
"""

from __future__ import annotations

import builtins
from collections.abc import Iterator
from typing import Any
from urllib.parse import quote, urlencode

from ..containers import DevContainerInfo, StartRequest
from ..errors import BadRequest
from ..shared.service_api import Progress, ServiceAPI, info_from
from ..untrusted import as_dict


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
        return as_dict(self.api.call("GET", "environments"))

    def commit(self, name: str, options: dict[str, Any], progress: Progress | None) -> Any:
        return self.api.events("POST", f"containers/{_name(name)}/commit", options, progress)

    def diff(self, name: str, exclude: tuple[str, ...]) -> Any:
        query = urlencode([("exclude", change) for change in exclude])
        return self.api.call(
            "GET", f"containers/{_name(name)}/diff" + (f"?{query}" if query else "")
        )
