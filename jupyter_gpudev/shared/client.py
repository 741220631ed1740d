"""Client mode: a user's Jupyter server without a Docker engine of its own forwards gpudev's
REST API to the shared service, as its user.

``/gpudev/api/...`` of the user's server is sent on to ``c.GPUDevApp.service_url`` with the
server's JupyterHub API token (JUPYTERHUB_API_TOKEN), which the service resolves to the user
(``identity.HubIdentityProvider``). The browser's cookies and the server's own token are never
forwarded; answers, progress events included, stream back as they come.
"""

from __future__ import annotations

import asyncio
import http.client
import json
import os
import sys
import threading
from concurrent.futures import ThreadPoolExecutor
from datetime import datetime
from typing import Any, NoReturn
from urllib.parse import quote, urlsplit

from jupyter_server.auth.decorator import authorized
from jupyter_server.base.handlers import APIHandler
from tornado import httputil, web
from tornado.httpclient import AsyncHTTPClient, HTTPClientError, HTTPRequest

from ..errors import GPUDevError
from ..handlers.api import terminal_alive
from ..handlers.base import authorized_to_execute
from ..kernels.remote import ServiceError
from ..untrusted import as_dict
from .service_api import ServiceAPI

#: The headers of the browser's request the service gets (nothing that authenticates).
REQUEST_HEADERS = ("Content-Type", "Accept", "Last-Event-ID")
#: The headers of the service's answer the browser gets.
ANSWER_HEADERS = ("Content-Type", "Cache-Control", "Content-Disposition")

#: What a user is told when the service does not answer.
UNREACHABLE = (
    "The shared gpudev service cannot be reached; ask your administrator (see the server log)"
)

#: Where ``GPUDevApp`` puts the service's address in client mode.
SERVICE_KEY = "gpudev_service_url"
#: Where ``GPUDevApp`` puts the ``ServiceClient`` in client mode.
CLIENT_KEY = "gpudev_service_client"
#: Where ``GPUDevApp`` puts the ``KeptConnections`` to the service in client mode.
POOL_KEY = "gpudev_service_connections"


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
        fail(self, status, code, message)

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
        if any(segment in (".", "..") for segment in path.split("/")):
            # decoded from %2F: such a path, normalised on the way (a front proxy, the
            # client), would leave the service's API with this server's token
            self._fail(404, "not_found", "No such gpudev route")
            return
        url = f"{base}/gpudev/api/{quote(path, safe='/')}"
        if self.request.query:
            url += "?" + self.request.query
        headers = {"Authorization": f"token {token}"}
        for name in REQUEST_HEADERS:
            if name in self.request.headers:
                headers[name] = self.request.headers[name]
        method = self.request.method or "GET"
        pool: KeptConnections = self.settings[POOL_KEY]
        if method in KeptConnections.METHODS and "text/event-stream" not in headers.get(
            "Accept", ""
        ):
            await self._forward_kept(pool, method, url, headers, base)
            return
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
            self.log.warning("gpudev: the service at %s is unreachable: %s", base, response.error)
            self._fail(503, "service_unreachable", UNREACHABLE)
            return
        start()
        self.finish()

    async def _forward_kept(
        self, pool: KeptConnections, method: str, url: str, headers: dict[str, str], base: str
    ) -> None:
        """A short answer (every call but a start's or commit's progress stream), over a
        connection to the service kept open: no connect per call."""
        body = self.request.body if method == "PUT" else None
        try:
            status, answer_headers, data = await pool.request(method, url, headers, body)
        except OSError as err:
            self.log.warning("gpudev: the service at %s is unreachable: %s", base, err)
            self._fail(503, "service_unreachable", UNREACHABLE)
            return
        self.set_status(status)
        for name in ANSWER_HEADERS:
            if name in answer_headers:
                self.set_header(name, answer_headers[name])
        if status in (204, 304):
            self.clear_header("Content-Type")
            self.finish()
        else:
            self.finish(data)


class KeptConnections:
    """Connections to the service kept open between calls, one per worker thread (an HTTP/1.1
    connection carries one request at a time). A call on a kept connection the service has
    closed meanwhile (it restarted) is made again on a new one: only for ``METHODS``, whose
    repetition changes nothing."""

    METHODS = frozenset({"GET", "PUT", "DELETE"})

    def __init__(self, workers: int = 4, timeout: float = 300.0) -> None:
        self._pool = ThreadPoolExecutor(workers, thread_name_prefix="gpudev-service")
        self._local = threading.local()
        self._every: list[http.client.HTTPConnection] = []  # to close them all at the end
        self._lock = threading.Lock()
        self.timeout = timeout

    async def request(
        self, method: str, url: str, headers: dict[str, str], body: bytes | None
    ) -> tuple[int, dict[str, str], bytes]:
        loop = asyncio.get_running_loop()
        return await loop.run_in_executor(self._pool, self._call, method, url, headers, body)

    def _connection(self, netloc: str, fresh: bool) -> http.client.HTTPConnection:
        kept: dict[str, http.client.HTTPConnection] = self._local.__dict__.setdefault("kept", {})
        connection = kept.get(netloc)
        if connection is None or fresh:
            if connection is not None:
                connection.close()
                with self._lock:
                    self._every.remove(connection)
            connection = http.client.HTTPConnection(netloc, timeout=self.timeout)
            kept[netloc] = connection
            with self._lock:
                self._every.append(connection)
        return connection

    def _call(
        self, method: str, url: str, headers: dict[str, str], body: bytes | None
    ) -> tuple[int, dict[str, str], bytes]:
        parts = urlsplit(url)
        if parts.scheme != "http":
            raise OSError(f"kept connections are for http:// only, not {parts.scheme}://")
        target = parts.path + (f"?{parts.query}" if parts.query else "")
        for attempt in (0, 1):
            connection = self._connection(parts.netloc, fresh=attempt == 1)
            try:
                connection.request(method, target, body=body, headers=headers)
                answer = connection.getresponse()
                data = answer.read()
            except (http.client.RemoteDisconnected, ConnectionError, http.client.BadStatusLine):
                connection.close()
                if attempt == 1:
                    raise
                continue
            if answer.will_close:
                connection.close()
            return answer.status, {k.title(): v for k, v in answer.getheaders()}, data
        raise OSError("unreachable")  # pragma: no cover (the loop returns or raises)

    def close(self) -> None:
        self._pool.shutdown(wait=True)
        with self._lock:
            for connection in self._every:
                connection.close()
            self._every.clear()


class ClientTerminalHandler(APIHandler):
    """``POST /gpudev/api/containers/NAME/terminal`` in client mode: a Jupyter terminal of this
    server attached to a shell the service runs in the container (``shared.attach``)."""

    auth_resource = "gpudev"

    #: Seconds the attaching program is given to fail (refused or unreachable).
    TERMINAL_SETTLE = 0.5

    @web.authenticated
    @authorized_to_execute
    async def post(self, name: str) -> None:
        client: ServiceClient = self.settings[CLIENT_KEY]
        try:
            info = await client.container(name)  # 404 for another user's, as the REST API
        except ServiceError as err:
            self._fail(err.status_code, "terminal", err.message)
            return
        if info.get("state") != "running":
            self._fail(409, "conflict", f"{name!r} is not running: start it first")
            return
        manager = self.settings.get("terminal_manager")
        if manager is None:
            self._fail(502, "engine", "Terminals are disabled on this Jupyter server")
            return
        argv = [sys.executable, "-m", "jupyter_gpudev.shared.attach", client.service_url, name]
        model = manager.create(shell_command=argv)
        await asyncio.sleep(self.TERMINAL_SETTLE)
        if not terminal_alive(manager, str(model.get("name", ""))):
            self._fail(
                502,
                "engine",
                f"The terminal in {name!r} ended as soon as it started: is the container still "
                "running, and the gpudev service reachable? See the server log.",
            )
            return
        self.set_status(201)
        self.finish(json.dumps(model))

    def _fail(self, status: int, code: str, message: str) -> None:
        fail(self, status, code, message)


def fail(handler: APIHandler, status: int, code: str, message: str) -> None:
    """Answer an error of client mode as the REST API answers its own (JSON)."""
    handler.set_status(status)
    handler.set_header("Content-Type", "application/json")
    handler.finish(json.dumps({"error": code, "message": message}))


class ServiceClient:
    """The shared service as a client-mode server's kernels see it (``kernels.remote``):
    listings for the kernel picker (blocking: the kernelspec manager's calls are), and kernel
    placement, polling, signals and cleanup (asynchronous), each as this server's Hub user."""

    def __init__(self, base_url: str, log: Any, timeout: float = 10.0) -> None:
        self.service_url = base_url
        self.base = base_url.rstrip("/") + "/gpudev/api/"
        self.log = log
        self.timeout = timeout

    @staticmethod
    def _token() -> str:
        token = os.environ.get("JUPYTERHUB_API_TOKEN", "")
        if not token:
            raise ServiceError(503, "No JupyterHub API token to reach the gpudev service with")
        return token

    def _get(self, path: str) -> Any:
        """A blocking GET (the kernelspec manager's calls are), with ``ServiceAPI``."""
        try:
            return ServiceAPI(self.service_url, self.timeout).call("GET", path) or {}
        except GPUDevError as err:
            self.log.warning("gpudev: the service at %s: %s", self.base, err.message)
            raise ServiceError(err.status, err.message) from None

    def environments(self) -> list[dict[str, Any]]:
        return list(self._get("environments").get("environments") or [])

    def containers(self) -> list[dict[str, Any]]:
        return list(self._get("containers?all=0").get("containers") or [])

    async def _call(self, method: str, path: str, body: Any = None) -> Any:
        request = HTTPRequest(
            self.base + path,
            method=method,
            headers={"Authorization": f"token {self._token()}", "Content-Type": "application/json"},
            body=None if body is None else json.dumps(body),
            allow_nonstandard_methods=True,
            request_timeout=3600.0,  # a launch may build an image
            connect_timeout=self.timeout,
        )
        try:
            response = await AsyncHTTPClient().fetch(request, raise_error=False)
        except (OSError, HTTPClientError) as err:  # refused, reset, timed out (599)
            self._unreachable(err)
        if response.code == 599:
            self._unreachable(response.error)
        if response.code >= 400:
            raise ServiceError(response.code, _message(response.body))
        return json.loads(response.body) if response.body else None

    def _unreachable(self, error: BaseException | None) -> NoReturn:
        """The service is down or restarting: a 503 (a kernel's poll waits for it, see
        ``kernels.remote``)."""
        self.log.warning("gpudev: the service at %s: %s", self.base, error)
        raise ServiceError(503, UNREACHABLE)

    async def container(self, name: str) -> dict[str, Any]:
        """One of the user's dev containers (``ServiceError`` 404 if not theirs)."""
        return as_dict(await self._call("GET", f"containers/{quote(name, safe='')}"))

    async def port_target(self, name: str, port: int) -> dict[str, Any]:
        """Where this machine reaches a web port of the user's running container."""
        answer = await self._call("GET", f"containers/{quote(name, safe='')}/ports/{port}/target")
        if (
            not isinstance(answer, dict)
            or not isinstance(answer.get("address"), str)
            or not isinstance(answer.get("port"), int)
            or not isinstance(answer.get("host"), str)
        ):
            raise ServiceError(502, "The gpudev service gave no address for the port")
        return answer

    async def launch(self, request: dict[str, Any]) -> dict[str, Any]:
        answer = await self._call("POST", "kernel-processes", request)
        if not isinstance(answer, dict) or not isinstance(answer.get("connection"), dict):
            raise ServiceError(502, "The gpudev service gave no connection for the kernel")
        return answer

    async def poll(self, kernel_id: str) -> int | None:
        try:
            answer = await self._call("GET", f"kernel-processes/{kernel_id}")
        except ServiceError as err:
            if err.status_code == 404:  # the service does not know it (it ended, or was lost)
                return -1
            raise
        code = answer.get("exit_code") if isinstance(answer, dict) else -1
        return code if isinstance(code, int) or code is None else -1

    async def signal(self, kernel_id: str, signum: int) -> None:
        await self._call("POST", f"kernel-processes/{kernel_id}/signal", {"signum": signum})

    async def activity(self, kernel_id: str, last_activity: datetime) -> None:
        body = {"last_activity": last_activity.isoformat()}
        await self._call("POST", f"kernel-processes/{kernel_id}/activity", body)

    async def cleanup(self, kernel_id: str, *, restart: bool, keep_container: bool) -> None:
        body = {"restart": restart, "keep_container": keep_container}
        try:
            await self._call("POST", f"kernel-processes/{kernel_id}/cleanup", body)
        except ServiceError as err:
            if err.status_code != 404:
                raise


def _message(raw: bytes) -> str:
    """The service's message (JSON ``message``), else a generic one."""
    try:
        body = json.loads(raw)
    except ValueError:
        body = None
    message = body.get("message") if isinstance(body, dict) else None
    return message if isinstance(message, str) else "The gpudev service refused the request"
