"""A terminal in a pod on a Kubernetes host: the program a Jupyter terminal runs
(``python -m jupyter_gpudev.containers.pod_terminal``) to join its own terminal to a shell in
the pod, over the exec websocket with a tty. Keys go to the pod as they are typed (this end
is put in raw mode; the pod's terminal does the editing), the pod's output comes back, and
window sizes follow the browser's.

Its arguments come from ``DevContainers.terminal_command``: the host's configured URL and
the pod's name, never from a request. The cluster's credentials are the kubeconfig's, read
here as the server reads them.
"""

from __future__ import annotations

import argparse
import contextlib
import fcntl
import json
import logging
import os
import select
import signal
import struct
import sys
import termios
import tty
from typing import Any

from ..engine.cluster import ERROR, RESIZE, STDIN, STDOUT, Cluster, exec_status
from ..engine.spec import HostSpec
from ..errors import GPUDevError
from .terminals import SHELL


def window_size(fd: int) -> tuple[int, int]:
    """The (columns, rows) of the terminal on ``fd`` (80x24 when it is none)."""
    try:
        rows, columns = struct.unpack("hhhh", fcntl.ioctl(fd, termios.TIOCGWINSZ, b"\0" * 8))[:2]
    except OSError:
        return 80, 24
    return (columns or 80), (rows or 24)


def bridge(sock: Any, fd_in: int, fd_out: int) -> int:
    """Move bytes between this terminal and the pod's until either ends; the shell's exit
    code (1 when the pod did not say). Window sizes are sent from this loop (a signal handler
    only wakes it: the websocket's sends are not reentrant)."""
    from websocket import WebSocketException  # noqa: PLC0415 - only Kubernetes hosts

    status = bytearray()
    wake_read, wake_write = os.pipe()
    os.set_blocking(wake_write, False)

    def send_size() -> None:
        columns, rows = window_size(fd_in)
        sock.send_binary(bytes([RESIZE]) + json.dumps({"Width": columns, "Height": rows}).encode())

    def resized(*_args: object) -> None:
        with contextlib.suppress(OSError):
            os.write(wake_write, b"w")

    saved = termios.tcgetattr(fd_in) if os.isatty(fd_in) else None
    if saved is not None:
        tty.setraw(fd_in)
    previous = signal.signal(signal.SIGWINCH, resized)
    sock.settimeout(60.0)  # a frame begun and not finished within a minute: the end
    try:
        send_size()
        while True:
            ready, _, _ = select.select([fd_in, sock.sock, wake_read], [], [], 5.0)
            if wake_read in ready:
                os.read(wake_read, 64)
                send_size()
            if fd_in in ready:
                typed = os.read(fd_in, 1 << 16)
                if not typed:
                    break
                sock.send_binary(bytes([STDIN]) + typed)
            if (sock.sock in ready or _pending(sock)) and not _relay(sock, fd_out, status):
                break
    except (OSError, ValueError, WebSocketException):
        pass  # the connection or this terminal went away
    finally:
        signal.signal(signal.SIGWINCH, previous)
        if saved is not None:
            termios.tcsetattr(fd_in, termios.TCSADRAIN, saved)
        for fd in (wake_read, wake_write):
            os.close(fd)
        sock.shutdown()
    code, _ = exec_status(bytes(status))
    return 1 if code is None else code


def _relay(sock: Any, fd_out: int, status: bytearray) -> bool:
    """One frame from the pod: output written to this terminal, the exit status kept (at most
    4 KiB); ``False`` when the pod closed the connection."""
    from websocket import ABNF  # noqa: PLC0415 - only Kubernetes hosts

    opcode, frame = sock.recv_data_frame(True)
    if opcode == ABNF.OPCODE_CLOSE:
        return False
    if opcode not in (ABNF.OPCODE_BINARY, ABNF.OPCODE_TEXT):
        return True  # a ping, answered by the client
    data = bytes(frame.data or b"")
    if data[:1] == bytes([STDOUT]):
        os.write(fd_out, data[1:])
    elif data[:1] == bytes([ERROR]):
        status += data[1 : 1 + max(0, 4096 - len(status))]
    return True


def _pending(sock: Any) -> bool:
    """TLS records already decrypted (select does not see them)."""
    raw = getattr(sock, "sock", None)
    pending = getattr(raw, "pending", None)
    return bool(pending()) if callable(pending) else False


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m jupyter_gpudev.containers.pod_terminal")
    parser.add_argument("--host", required=True, help="the host's name")
    parser.add_argument("--url", required=True, help="its k8s://CONTEXT/NAMESPACE URL")
    parser.add_argument("--pod", required=True, help="the pod's name")
    args = parser.parse_args(argv)
    log = logging.getLogger("gpudev.pod_terminal")
    try:
        spec = HostSpec.parse(args.host, args.url)
        cluster = Cluster(spec, timeout=30.0, log=log)
        shell = ["env", "TERM=xterm-256color", "/bin/sh", "-c", SHELL]
        sock = cluster.open_terminal(args.pod, shell)
    except GPUDevError as err:
        print(f"gpudev: {err.message}", file=sys.stderr)
        return 1
    return bridge(sock, sys.stdin.fileno(), sys.stdout.fileno())


if __name__ == "__main__":
    sys.exit(main())
