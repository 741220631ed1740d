"""``python -m jupyter_gpudev.shared.attach SERVICE_URL NAME``: a terminal of a user's server
(client mode) attached to a shell in their dev container, which the shared service runs
(``shared.terminals``).

It runs as the user, in the pseudo-terminal Jupyter gave the terminal: keys go to the service,
the shell's output comes back, a resize is passed on. The service's address comes from the
server's configuration, the user's identity from JUPYTERHUB_API_TOKEN in the server's
environment; nothing from the container is run here.
"""

from __future__ import annotations

import asyncio
import codecs
import contextlib
import json
import os
import shutil
import signal
import sys
import termios
import tty
from urllib.parse import quote

from tornado.httpclient import HTTPClientError, HTTPRequest
from tornado.websocket import WebSocketClientConnection, websocket_connect

#: Bytes of input read for one message (see ``_relay``).
READ = 8192


def _size() -> tuple[int, int]:
    columns, rows = shutil.get_terminal_size((80, 24))
    return rows, columns


async def attach(base: str, name: str) -> int:
    base = base.rstrip("/")
    token = os.environ.get("JUPYTERHUB_API_TOKEN", "")
    if not base.startswith(("http://", "https://")) or not token:
        print("gpudev: no shared service to attach to (its URL, JUPYTERHUB_API_TOKEN)")
        return 2
    url = base.replace("http", "ws", 1) + f"/gpudev/api/containers/{quote(name, safe='')}/tty"
    try:
        socket = await websocket_connect(
            HTTPRequest(url, headers={"Authorization": f"token {token}"}, connect_timeout=10)
        )
    except HTTPClientError as err:
        reason = {404: "no such dev container of yours", 409: "it is not running"}.get(
            err.code, f"the service answered {err.code}"
        )
        print(f"gpudev: cannot open a terminal in {name!r}: {reason}")
        return 1
    except OSError as err:
        print(f"gpudev: the shared gpudev service cannot be reached ({err})")
        return 1
    return await _relay(socket)


async def _relay(socket: WebSocketClientConnection) -> int:
    loop = asyncio.get_running_loop()
    stdin = sys.stdin.fileno()

    def send_size() -> None:
        rows, columns = _size()
        socket.write_message(json.dumps(["set_size", rows, columns]))

    decoder = codecs.getincrementaldecoder("utf-8")(errors="replace")

    def readable() -> None:
        # At most READ bytes a message: escaped as JSON (6 characters a byte at worst), within
        # the service's 64 KiB a message; a character cut between reads is decoded whole.
        data = os.read(stdin, READ)
        if not data:
            socket.close()
            return
        socket.write_message(json.dumps(["stdin", decoder.decode(data)]))

    saved = termios.tcgetattr(stdin) if os.isatty(stdin) else None
    if saved is not None:
        tty.setraw(stdin)
    loop.add_reader(stdin, readable)
    loop.add_signal_handler(signal.SIGWINCH, send_size)
    send_size()
    try:
        while True:
            message = await socket.read_message()
            if message is None:
                return 0
            with contextlib.suppress(ValueError, TypeError, IndexError):
                kind, text = json.loads(message)[:2]
                if kind == "stdout" and isinstance(text, str):
                    os.write(sys.stdout.fileno(), text.encode())
    finally:
        loop.remove_reader(stdin)
        loop.remove_signal_handler(signal.SIGWINCH)
        if saved is not None:
            termios.tcsetattr(stdin, termios.TCSADRAIN, saved)
        socket.close()


def main() -> None:
    if len(sys.argv) != 3:
        print("usage: python -m jupyter_gpudev.shared.attach SERVICE_URL NAME")
        sys.exit(2)
    sys.exit(asyncio.run(attach(sys.argv[1], sys.argv[2])))


if __name__ == "__main__":
    main()
