"""The web-port proxy of a client-mode server: the same proxy and sandbox as in single-user
mode (``handlers.proxy``: the Jupyter login or a capability, cookies and tokens stripped,
pages in an opaque origin), run by the user's server, which asks the shared service where
the port is (``GET /gpudev/api/containers/NAME/ports/PORT/target``: the container's owner
only, one of its web ports only) and connects there itself.

The service's side is ``PortTargetHandler``.
"""

from __future__ import annotations

import json
import os
from typing import Any

from tornado import web

from ..errors import GPUDevError
from ..handlers.base import GPUDevHandler, authorized_to_execute, maps_errors
from ..handlers.capabilities import PATTERN, AppCapability
from ..handlers.proxy import AppProxyHandler, PortProxyHandler
from ..kernels.remote import ServiceError
from .client import CLIENT_KEY, ServiceClient

#: Where ``GPUDevApp`` puts whether client-mode pages are sandboxed.
ISOLATE_KEY = "gpudev_isolate_web_apps"


class ServiceRefused(GPUDevError):
    """The service's answer about a port (404, 409, 503), passed on as it came."""

    def __init__(self, err: ServiceError) -> None:
        super().__init__(err.message)
        self.status = err.status_code
        self.code = {404: "not_found", 409: "conflict"}.get(err.status_code, "service")


class _FromService:
    """Where a port is, asked of the service (``_target``), for the proxy handlers below."""

    settings: dict[str, Any]

    async def _ask(self, name: str, port: str) -> dict[str, Any]:
        client: ServiceClient = self.settings[CLIENT_KEY]
        try:
            return await client.port_target(name, int(port))
        except ServiceError as err:
            raise ServiceRefused(err) from None


class ClientPortProxyHandler(_FromService, PortProxyHandler):
    """``/gpudev/proxy/NAME/PORT/PATH`` of a client-mode server."""

    _found: dict[str, Any] | None = None

    def _isolating(self) -> bool:
        return bool(self.settings.get(ISOLATE_KEY, True))

    async def _target(self, name: str, port: str) -> tuple[str, int]:
        self._found = await self._ask(name, port)
        return str(self._found["address"]), int(self._found["port"])

    async def _capability_for(self, name: str, port: str) -> AppCapability:
        found = self._found or await self._ask(name, port)
        user = os.environ.get("JUPYTERHUB_USER", "")
        return AppCapability.grant(name, str(found["host"]), int(port), user, admin=False)


class ClientAppProxyHandler(_FromService, AppProxyHandler):
    """``/gpudev/app/CAPABILITY/PATH`` of a client-mode server (this server's capability)."""

    async def _target(self, name: str, port: str) -> tuple[str, int]:
        del name, port  # the capability's own
        found = await self._ask(self.grant.name, str(self.grant.port))
        return str(found["address"]), int(found["port"])


class PortTargetHandler(GPUDevHandler):
    """``GET /gpudev/api/containers/NAME/ports/PORT/target`` (the service): where a client's
    server reaches a web port of the caller's running container: ``{"address", "port",
    "host"}``. 404 for another user's container or a port that is not a web port."""

    @web.authenticated
    @authorized_to_execute
    @maps_errors
    async def get(self, name: str, port: str) -> None:
        containers = self.gpudev.containers
        address, reached = await self.blocking(containers.proxy_target, name, int(port))
        found = await self.blocking(containers.locate, name)  # a pod's too
        self.finish(json.dumps({"address": address, "port": reached, "host": found.host.name}))


def proxy_routes(name: str) -> list[tuple[str, Any]]:
    """A client-mode server's proxy URLs (``name``: a container name's pattern)."""
    return [
        (rf"/gpudev/proxy/{name}/(?P<port>[0-9]{{1,5}})(?P<path>/.*)?", ClientPortProxyHandler),
        (rf"/gpudev/app/(?P<capability>{PATTERN})(?P<path>/.*)?", ClientAppProxyHandler),
    ]


def target_routes(api: str, name: str) -> list[tuple[str, Any]]:
    """The service's port-target URL."""
    return [(rf"{api}/containers/{name}/ports/(?P<port>[0-9]{{1,5}})/target", PortTargetHandler)]
