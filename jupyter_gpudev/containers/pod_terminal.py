"""A terminal in a pod on a Kubernetes host (issue #20): the program a Jupyter terminal runs
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
    code (1 when the pod did not say)."""
    status = bytearray()

    def send_size(*_args: object) -> None:
        columns, rows = window_size(fd_in)
        size = json.dumps({"Width": columns, "Height": rows}).encode()
        with contextlib.suppress(OSError, ValueError):
            sock.send_binary(bytes([RESIZE]) + size)

    saved = termios.tcgetattr(fd_in) if os.isatty(fd_in) else None
    if saved is not None:
        tty.setraw(fd_in)
    previous = signal.signal(signal.SIGWINCH, send_size)
    send_size()
    try:
        while True:
            ready, _, _ = select.select([fd_in, sock.sock], [], [], 5.0)
            if fd_in in ready:
                typed = os.read(fd_in, 1 << 16)
                if not typed:
                    break
                sock.send_binary(bytes([STDIN]) + typed)
            if sock.sock in ready or _pending(sock):
                opcode, frame = sock.recv_data_frame(True)
                if opcode == 0x8:  # close
                    break
                data = bytes(frame.data or b"")
                if data[:1] == bytes([STDOUT]):
                    os.write(fd_out, data[1:])
                elif data[:1] == bytes([ERROR]):
                    status += data[1:4096]
    except (OSError, ValueError):
        pass  # the connection or this terminal went away
    finally:
        signal.signal(signal.SIGWINCH, previous)
        if saved is not None:
            termios.tcsetattr(fd_in, termios.TCSADRAIN, saved)
        sock.shutdown()
    code, _ = exec_status(bytes(status))
    return 1 if code is None else code


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
