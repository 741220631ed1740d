"""Client mode: a user's Jupyter server without a Docker engine of its own forwards gpudev's
REST API to the shared service, as its user.

``/gpudev/api/...`` of the user's server is sent on to ``c.GPUDevApp.service_url`` with the
server's JupyterHub API token (JUPYTERHUB_API_TOKEN), which the service resolves to the user
(``identity.HubIdentityProvider``). The browser's cookies and the server's own token are never
forwarded; answers, progress events included, stream back as they come.
"""

from __future__ import annotations

import json
import os
from typing import Any
from urllib.parse import quote

from jupyter_server.auth.decorator import authorized
from jupyter_server.base.handlers import APIHandler
from tornado import httputil, web
from tornado.httpclient import AsyncHTTPClient, HTTPRequest

from ..handlers.base import authorized_to_execute

#: The headers of the browser's request the service gets (nothing that authenticates).
REQUEST_HEADERS = ("Content-Type", "Accept", "Last-Event-ID")
#: The headers of the service's answer the browser gets.
ANSWER_HEADERS = ("Content-Type", "Cache-Control", "Content-Disposition")

#: Where ``GPUDevApp`` puts the service's address in client mode.
SERVICE_KEY = "gpudev_service_url"


class ForwardHandler(APIHandler):
    """``/gpudev/api/PATH`` of a user's server in client mode, answered by the service."""

    auth_resource = "gpudev"

    @web.authenticated
    @authorized
    async def get(self, path: str) -> None:
        await self._forward(path)

    @web.authenticated
    @authorized_to_execute
    async def post(self, path: str) -> None:
        await self._forward(path)

    @web.authenticated
    @authorized_to_execute
    async def put(self, path: str) -> None:
        await self._forward(path)

    @web.authenticated
    @authorized_to_execute
    async def delete(self, path: str) -> None:
        await self._forward(path)

    def _fail(self, status: int, code: str, message: str) -> None:
        self.set_status(status)
        self.set_header("Content-Type", "application/json")
        self.finish(json.dumps({"error": code, "message": message}))

    async def _forward(self, path: str) -> None:
        base = str(self.settings[SERVICE_KEY]).rstrip("/")
        token = os.environ.get("JUPYTERHUB_API_TOKEN", "")
        if not token:
            self._fail(
                503,
                "service_unreachable",
                "This server forwards gpudev to a shared service (c.GPUDevApp.service_url) "
                "but has no JupyterHub API token to identify its user (JUPYTERHUB_API_TOKEN): "
                "start it from JupyterHub",
            )
            return
        url = f"{base}/gpudev/api/{quote(path, safe='/')}"
        if self.request.query:
            url += "?" + self.request.query
        headers = {"Authorization": f"token {token}"}
        for name in REQUEST_HEADERS:
            if name in self.request.headers:
                headers[name] = self.request.headers[name]
        method = self.request.method or "GET"
        state: dict[str, Any] = {"started": False, "status": 502, "headers": {}}

        def header_line(line: str) -> None:
            if line.startswith("HTTP/"):
                state["status"] = httputil.parse_response_start_line(line.strip()).code
                state["headers"] = {}
            elif line.strip():
                name, _, value = line.partition(":")
                state["headers"][name.strip().title()] = value.strip()

        def start() -> None:
            if state["started"]:
                return
            state["started"] = True
            self.set_status(int(state["status"]))
            for name in ANSWER_HEADERS:
                if name in state["headers"]:
                    self.set_header(name, state["headers"][name])

        def quiet(future: Any) -> None:
            if future.exception() is not None:  # the browser went away; the work goes on
                self.log.info("gpudev: a forwarded answer's reader went away")

        def chunk(data: bytes) -> None:
            start()
            self.write(data)
            self.flush().add_done_callback(quiet)

        request = HTTPRequest(
            url,
            method=method,
            headers=headers,
            body=self.request.body if method in ("POST", "PUT") else None,
            allow_nonstandard_methods=True,
            follow_redirects=False,
            header_callback=header_line,
            streaming_callback=chunk,
            request_timeout=24 * 3600.0,
            connect_timeout=10.0,
        )
        response = await AsyncHTTPClient().fetch(request, raise_error=False)
        if response.code == 599 and not state["started"]:
            self.log.warning(
                "gpudev: the service at %s cannot be reached: %s", base, response.error
            )
            self._fail(
                503,
                "service_unreachable",
                "The shared gpudev service cannot be reached; ask your administrator "
                "(see the server log)",
            )
            return
        start()
        self.finish()
