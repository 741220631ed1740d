"""Terminals in dev containers for client-mode servers.

The service runs the container's shell (``DevContainers.terminal_command``: ``docker exec -it``
by the container's id, found for the caller only) in a pseudo-terminal of its own and relays it
over a websocket, ``/gpudev/api/containers/NAME/tty``, in terminado's message format
(``["stdin", TEXT]``, ``["set_size", ROWS, COLS]`` in; ``["stdout", TEXT]`` out). A user's
server attaches to it from an ordinary Jupyter terminal (``python -m
jupyter_gpudev.shared.attach NAME``), so Lab's terminal works unchanged and the user's server
needs no Docker command line or socket.
"""

from __future__ import annotations

import asyncio
import codecs
import contextlib
import json
import os
import signal
from typing import Any

from jupyter_server.base.handlers import JupyterHandler
from jupyter_server.base.websocket import WebSocketMixin
from ptyprocess import PtyProcess
from tornado import web
from tornado.websocket import WebSocketClosedError, WebSocketHandler

from ..errors import GPUDevError
from ..handlers.base import GPUDevHandler

#: The most a client may ask a terminal to be (rows, columns).
MAX_SIZE = (1000, 1000)


class ContainerTTYHandler(WebSocketMixin, WebSocketHandler, GPUDevHandler):
    """``/gpudev/api/containers/NAME/tty``: a shell in the caller's container, as a websocket."""

    _process: PtyProcess | None = None

    async def prepare(self) -> None:  # type: ignore[override]
        await JupyterHandler.prepare(self, _redirect_to_login=False)

    def check_xsrf_cookie(self) -> None:
        """Token-authenticated (a Hub API token), never cookie-authenticated: nothing to check."""

    @web.authenticated
    async def get(self, name: str) -> None:  # type: ignore[override]
        if self.request.headers.get("Upgrade", "").lower() != "websocket":
            raise web.HTTPError(400, "A websocket is expected here")
        containers = self.gpudev.containers
        try:
            argv = await self.blocking(containers.terminal_command, name)
        except GPUDevError as err:  # 404 for another user's, 409 for a stopped one
            raise web.HTTPError(err.status, err.message.replace("%", "%%")) from None
        self._argv = argv
        await WebSocketHandler.get(self, name)

    def open(self, name: str) -> None:
        env = {"TERM": "xterm-256color", "PATH": os.environ.get("PATH", "/usr/bin:/bin")}
        # A pod's terminal reaches its cluster as the service does (its kubeconfig, or the
        # service account inside a cluster); nothing else of the service's environment.
        for variable in (
            "KUBECONFIG",
            "HOME",
            "KUBERNETES_SERVICE_HOST",
            "KUBERNETES_SERVICE_PORT",
        ):
            if variable in os.environ:
                env[variable] = os.environ[variable]
        self._process = PtyProcess.spawn(self._argv, env=env, dimensions=(24, 80))
        self._decoder = codecs.getincrementaldecoder("utf-8")(errors="replace")
        fd = self._process.fd
        asyncio.get_running_loop().add_reader(fd, self._readable)
        self.log.info("gpudev: terminal in %s opened for %s", name, self.current_user.username)

    def _readable(self) -> None:
        process = self._process
        if process is None:
            return
        try:
            data = os.read(process.fd, 65536)
        except OSError:
            data = b""
        if not data:
            self._end()
            return
        text = self._decoder.decode(data)
        if text:
            with contextlib.suppress(WebSocketClosedError):
                self.write_message(json.dumps(["stdout", text]))

    def on_message(self, message: str | bytes) -> None:
        process = self._process
        if process is None:
            return
        try:
            command = json.loads(message)
        except ValueError:
            return
        if not isinstance(command, list) or not command:
            return
        if command[0] == "stdin" and len(command) == 2 and isinstance(command[1], str):
            with contextlib.suppress(OSError):
                process.write(command[1].encode())
        elif command[0] == "set_size" and len(command) >= 3:
            rows, cols = command[1], command[2]
            whole = all(isinstance(v, int) and not isinstance(v, bool) for v in (rows, cols))
            if whole and 0 < rows <= MAX_SIZE[0] and 0 < cols <= MAX_SIZE[1]:
                with contextlib.suppress(OSError):
                    process.setwinsize(rows, cols)

    def _end(self) -> None:
        process, self._process = self._process, None
        if process is None:
            return
        with contextlib.suppress(ValueError, OSError):
            asyncio.get_running_loop().remove_reader(process.fd)
        if process.isalive():
            with contextlib.suppress(OSError):
                process.kill(signal.SIGHUP)
        with contextlib.suppress(Exception):
            process.close(force=True)
        with contextlib.suppress(WebSocketClosedError):
            self.close()

    def on_close(self) -> None:
        self._end()

    def on_finish(self) -> None:
        self._end()

    def check_origin(self, origin: str | None = None) -> bool:
        # Called by servers, not browsers: a request with an Origin is a browser's, refused.
        return origin is None

    def get_origin(self) -> str | None:
        return self.request.headers.get("Origin")


def terminal_routes(api: str, name: str) -> list[tuple[str, Any]]:
    """The service's terminal URL (``api``: the REST prefix, ``name``: a container's pattern)."""
    return [(rf"{api}/containers/{name}/tty", ContainerTTYHandler)]
