"""Terminals in dev containers for client-mode servers.

The service runs the container's shell (``DevContainers.terminal_command``: ``docker exec -it``
by the container's id, found for the caller only) in a pseudo-terminal of its own and relays it
over a websocket, ``/gpudev/api/containers/NAME/tty``, in terminado's message format
(``["stdin", TEXT]``, ``["set_size", ROWS, COLS]`` in; ``["stdout", TEXT]`` out). A user's
server attaches to it from an ordinary Jupyter terminal (``python -m
jupyter_gpudev.shared.attach NAME``), so Lab's terminal works unchanged and the user's server
needs no Docker command line or socket.

Each terminal holds a process and a pty of the service's machine until it ends, so the service
counts them (``TerminalCount``): at most ``c.GPUDevService.terminals_per_user`` per user and
``terminals_total`` in all; one more is refused (429) before the websocket opens.

No terminal may stop the service's event loop or grow its memory without bound: the pty is
non-blocking; a terminal's input waits in a buffer, written as its process reads it, and the
terminal is closed once more than ``c.GPUDevService.terminal_input_buffer`` waits (a websocket
message is at most ``MAX_MESSAGE`` bytes); its output is read no faster than the websocket sends
it (reading stops while more than ``c.GPUDevService.terminal_output_buffer`` is unsent).
"""

from __future__ import annotations

import asyncio
import codecs
import contextlib
import functools
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
from ..handlers.base import SETTINGS_KEY, GPUDevHandler, authorized_to_execute, kept_in
from .authority import Authority

#: The most a client may ask a terminal to be (rows, columns).
MAX_SIZE = (1000, 1000)

#: The largest websocket message a terminal's client may send, in bytes (tornado's default: 10
#: MiB). Larger: the websocket is closed (1009).
MAX_MESSAGE = 64 * 1024

#: The most a terminal writes to, or reads from, its pty at once, in bytes.
CHUNK = 65536

#: Where the service keeps its ``TerminalCount`` (its web application's settings).
COUNT_KEY = "gpudev_terminals"


class TerminalCount:
    """The terminals the service has open, by user. A terminal is counted before its process
    is spawned and given back once, when it ends. Only the service's event loop uses it (its
    handlers' methods): no lock."""

    def __init__(self) -> None:
        self.by_user: dict[str, int] = {}
        self.total = 0

    @classmethod
    def of(cls, settings: dict[str, Any]) -> TerminalCount:
        """The count of the web application whose ``settings`` these are."""
        return kept_in(settings, COUNT_KEY, cls)

    def take(self, user: str, *, per_user: int, total: int) -> None:
        """Count one more terminal of ``user``; a 429 naming the setting when it would be
        more than ``per_user`` of theirs or ``total`` in all (0: no limit)."""
        held = self.by_user.get(user, 0)
        if per_user and held >= per_user:
            raise web.HTTPError(
                429,
                f"You have {held} terminals open in the gpudev service, the most one user may "
                "(c.GPUDevService.terminals_per_user): close one first",
            )
        if total and self.total >= total:
            raise web.HTTPError(
                429,
                f"The gpudev service has {self.total} terminals open, the most it allows "
                "(c.GPUDevService.terminals_total): try again once one is closed",
            )
        self.by_user[user] = held + 1
        self.total += 1

    def give_back(self, user: str) -> None:
        """One terminal of ``user`` has ended."""
        left = self.by_user.get(user, 0) - 1
        if left > 0:
            self.by_user[user] = left
        else:
            self.by_user.pop(user, None)
        self.total = max(self.total - 1, 0)


class ContainerTTYHandler(WebSocketMixin, WebSocketHandler, GPUDevHandler):
    """``/gpudev/api/containers/NAME/tty``: a shell in the caller's container, as a websocket."""

    _process: PtyProcess | None = None
    #: The user whose count this terminal holds, until ``_end`` gives it back.
    _counted: str | None = None
    #: Input not yet written to the pty (at most ``_input_limit`` bytes).
    _input: bytearray
    _input_limit = 1024 * 1024
    #: Bytes of output handed to ``write_message`` whose writes have not completed; the pty
    #: is not read while it is over ``_output_limit``.
    _unsent = 0
    _output_limit = 4 * 1024 * 1024
    #: Whether the event loop watches the pty for output (``_reading``) or for room for
    #: input (``_writing``).
    _reading = False
    _writing = False

    @property
    def max_message_size(self) -> int:
        return MAX_MESSAGE

    async def prepare(self) -> None:  # type: ignore[override]
        await JupyterHandler.prepare(self, _redirect_to_login=False)

    def check_xsrf_cookie(self) -> None:
        """Token-authenticated (a Hub API token), never cookie-authenticated: nothing to check."""

    @web.authenticated
    @authorized_to_execute
    async def get(self, name: str) -> None:  # type: ignore[override]
        if self.request.headers.get("Upgrade", "").lower() != "websocket":
            raise web.HTTPError(400, "A websocket is expected here")
        held = self.settings.get(SETTINGS_KEY)
        if not isinstance(held, Authority):  # routed in the shared service only
            raise web.HTTPError(404)
        user = self.current_user.username
        limits = held.settings
        TerminalCount.of(self.settings).take(
            user, per_user=limits.terminals_per_user, total=limits.terminals_total
        )
        self._counted = user
        self._input_limit = limits.terminal_input_buffer
        self._output_limit = limits.terminal_output_buffer
        self._name = name
        try:
            containers = self.gpudev.containers
            try:
                argv = await self.blocking(containers.terminal_command, name)
            except GPUDevError as err:  # 404 for another user's, 409 for a stopped one
                raise web.HTTPError(err.status, err.message.replace("%", "%%")) from None
            self._argv = argv
            # Returns once the websocket is closed (or was never opened: a refusal).
            await WebSocketHandler.get(self, name)
        finally:
            self._end()

    def open(self, name: str) -> None:
        if self._counted is None:  # closed (``on_close``) before it opened: nothing to run
            self.close()
            return
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
        try:
            self._process = PtyProcess.spawn(self._argv, env=env, dimensions=(24, 80))
        except BaseException:
            self._end()  # tornado logs it and closes the websocket
            raise
        self._decoder = codecs.getincrementaldecoder("utf-8")(errors="replace")
        self._input = bytearray()
        # Neither a full pty (its process reads no input) nor a spurious wake-up blocks the
        # service's event loop.
        os.set_blocking(self._process.fd, False)
        self._read(True)
        self.log.info("gpudev: terminal in %s opened for %s", name, self.current_user.username)

    def _readable(self) -> None:
        process = self._process
        if process is None:
            return
        try:
            data = os.read(process.fd, CHUNK)
        except BlockingIOError:
            return
        except OSError:  # EIO: the terminal's process has ended
            data = b""
        if not data:
            self._end()
            return
        text = self._decoder.decode(data)
        if not text:
            return
        message = json.dumps(["stdout", text])  # ASCII: its length is its size
        try:
            written = self.write_message(message)
        except WebSocketClosedError:
            return
        self._unsent += len(message)
        written.add_done_callback(functools.partial(self._sent, len(message)))
        if self._unsent > self._output_limit:
            self._read(False)  # until the client has taken some of it

    def _sent(self, size: int, written: asyncio.Future[None]) -> None:
        """One output message's write has completed (or failed: the websocket closed)."""
        self._unsent -= size
        if not written.cancelled():
            written.exception()  # retrieved: a closed websocket's is expected
        if self._unsent <= self._output_limit // 2:
            self._read(True)

    def _read(self, on: bool) -> None:
        """Watch the pty for output, or stop watching it."""
        process = self._process
        if process is None or on == self._reading:
            return
        loop = asyncio.get_running_loop()
        if on:
            loop.add_reader(process.fd, self._readable)
        else:
            loop.remove_reader(process.fd)
        self._reading = on

    def _writable(self) -> None:
        """Write what input the pty takes now; watch it for room while some is left."""
        process = self._process
        if process is None:
            return
        while self._input:
            try:
                written = os.write(process.fd, self._input[:CHUNK])
            except BlockingIOError:
                break
            except OSError:  # EIO: the terminal's process has ended (``_readable`` ends it)
                self._input.clear()
                break
            del self._input[:written]
        waiting = bool(self._input)
        if waiting != self._writing:
            loop = asyncio.get_running_loop()
            if waiting:
                loop.add_writer(process.fd, self._writable)
            else:
                loop.remove_writer(process.fd)
            self._writing = waiting

    def _input_overflows(self) -> None:
        """Close the terminal: more input waits than ``terminal_input_buffer``."""
        limit = self._input_limit
        self.log.warning(
            "gpudev: terminal in %s of %s closed: its process did not read its input, more than "
            "c.GPUDevService.terminal_input_buffer (%d bytes) waited",
            self._name,
            self._counted,
            limit,
        )
        reason = f"Input not read: over c.GPUDevService.terminal_input_buffer ({limit} bytes)"
        with contextlib.suppress(WebSocketClosedError):
            self.close(1009, reason)
        self._end()

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
            data = command[1].encode()
            if len(self._input) + len(data) > self._input_limit:
                self._input_overflows()
                return
            self._input += data
            self._writable()
        elif command[0] == "set_size" and len(command) >= 3:
            rows, cols = command[1], command[2]
            whole = all(isinstance(v, int) and not isinstance(v, bool) for v in (rows, cols))
            if whole and 0 < rows <= MAX_SIZE[0] and 0 < cols <= MAX_SIZE[1]:
                with contextlib.suppress(OSError):
                    process.setwinsize(rows, cols)

    def _end(self) -> None:
        """End the terminal: its process killed, its count given back. Called by whichever
        comes first (the shell's end, the websocket's close, a failed spawn, ``get``
        returning); the others find nothing left to do."""
        process, self._process = self._process, None
        counted, self._counted = self._counted, None
        if counted is not None:
            TerminalCount.of(self.settings).give_back(counted)
        if process is None:
            return
        loop = asyncio.get_running_loop()
        with contextlib.suppress(ValueError, OSError):
            loop.remove_reader(process.fd)
        with contextlib.suppress(ValueError, OSError):
            loop.remove_writer(process.fd)
        self._reading = self._writing = False
        self._input.clear()
        if process.isalive():
            with contextlib.suppress(OSError):
                process.kill(signal.SIGHUP)
        with contextlib.suppress(Exception):
            process.close(force=True)
        with contextlib.suppress(WebSocketClosedError):
            self.close()

    def on_close(self) -> None:
        self._end()

    # No ``on_finish``: tornado calls it at the upgrade (101), before ``open``; a terminal that
    # never opened ends in ``get``'s ``finally``.

    def check_origin(self, origin: str | None = None) -> bool:
        # Called by servers, not browsers: a request with an Origin is a browser's, refused.
        return origin is None

    def get_origin(self) -> str | None:
        return self.request.headers.get("Origin")


def terminal_routes(api: str, name: str) -> list[tuple[str, Any]]:
    """The service's terminal URL (``api``: the REST prefix, ``name``: a container's pattern)."""
    return [(rf"{api}/containers/{name}/tty", ContainerTTYHandler)]
