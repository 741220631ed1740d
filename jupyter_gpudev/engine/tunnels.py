"""Port forwards to containers of a remote host, over the host's SSH connection.

A ``Tunnels`` object listens on 127.0.0.1 of this machine, one port per forwarded
``address:port`` of the host's side (a container's address on its bridge network), and
carries each accepted connection through a ``direct-tcpip`` channel of the host's one SSH
connection. Kernels' ZMQ sockets and the web-port proxy connect to these local ports.

When the SSH connection drops, the channels close and so do the local ends: ZMQ (and browsers)
connect again, and the next channel reconnects the SSH connection. While the host cannot be
reached, new local connections are closed at once (after one try per second), so clients see a
closed connection, never a silent hang.
"""

from __future__ import annotations

import contextlib
import socket
import threading
import time
from typing import Any

import paramiko

from ..errors import GPUDevError
from .ssh import SSHConnection

_CHUNK = 65536
# What a copy loop sees when either side goes away: a closed socket (OSError), or an SSH
# transport that dropped under a send (paramiko raises EOFError or SSHException).
_DROPPED = (OSError, EOFError, paramiko.SSHException)


def local_listener() -> tuple[socket.socket, int]:
    """A listening socket on a free port of 127.0.0.1 (a forward's local end) and its port."""
    listener = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    listener.bind(("127.0.0.1", 0))
    listener.listen(16)
    return listener, int(listener.getsockname()[1])


class _Forward:
    """One listening port, forwarding to ``address:port`` on the host."""

    def __init__(self, ssh: SSHConnection, address: str, port: int, log: Any) -> None:
        self.ssh = ssh
        self.address = address
        self.port = port
        self.log = log
        self.listener, self.local_port = local_listener()
        self._closed = threading.Event()
        self._pairs: set[tuple[socket.socket, paramiko.Channel]] = set()
        self._lock = threading.Lock()
        self._failed_at = 0.0
        self._thread = threading.Thread(
            target=self._accept, name=f"gpudev-tunnel-{address}:{port}", daemon=True
        )
        self._thread.start()

    def _accept(self) -> None:
        while not self._closed.is_set():
            try:
                client, _ = self.listener.accept()
            except OSError:
                return  # closed
            threading.Thread(
                target=self._serve, args=(client,), name="gpudev-tunnel-conn", daemon=True
            ).start()

    def _serve(self, client: socket.socket) -> None:
        if time.monotonic() - self._failed_at < 1.0:
            client.close()  # the host was unreachable a moment ago: do not hammer it
            return
        try:
            channel = self.ssh.direct(self.address, self.port)
        except (GPUDevError, paramiko.SSHException, OSError) as exc:
            client.close()
            if self.ssh.connected:
                # The host refused this port (a kernel not listening yet): not an outage.
                self.log.debug("gpudev: %s:%s refused on %s", self.address, self.port, exc)
                return
            self._failed_at = time.monotonic()
            self.log.warning(
                "gpudev: forward to %s:%s on %s failed: %s",
                self.address,
                self.port,
                self.ssh.target.where,
                getattr(exc, "message", exc),
            )
            return
        client.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        pair = (client, channel)
        with self._lock:
            if self._closed.is_set():
                client.close()
                channel.close()
                return
            self._pairs.add(pair)
        try:
            _pump(client, channel)
        finally:
            with self._lock:
                self._pairs.discard(pair)
            with contextlib.suppress(OSError):
                client.close()
            channel.close()

    def close(self) -> None:
        self._closed.set()
        with contextlib.suppress(OSError):
            self.listener.shutdown(socket.SHUT_RDWR)
        self.listener.close()
        with self._lock:
            pairs = list(self._pairs)
        for client, channel in pairs:
            with contextlib.suppress(OSError):
                client.shutdown(socket.SHUT_RDWR)
            channel.close()


def _pump(client: socket.socket, channel: paramiko.Channel) -> None:
    """Copy both ways until either side closes: this thread copies the host's side, another
    this machine's. Blocking reads on both (no select: the channel's reader then waits on the
    transport's condition variable, not on a pipe), which halves the latency of a hop."""
    upstream = threading.Thread(
        target=_copy_up, args=(client, channel), name="gpudev-tunnel-up", daemon=True
    )
    upstream.start()
    try:
        while True:
            data = channel.recv(_CHUNK)
            if not data:
                return
            client.sendall(data)
    except _DROPPED:
        return
    finally:
        with contextlib.suppress(OSError):
            client.shutdown(socket.SHUT_RDWR)
        channel.close()
        upstream.join(timeout=5)


def _copy_up(client: socket.socket, channel: paramiko.Channel) -> None:
    try:
        while True:
            data = client.recv(_CHUNK)
            if not data:
                return
            channel.sendall(data)
    except _DROPPED:
        return
    finally:
        # Half-close: the host's side may still answer (an HTTP client that shut its write side).
        with contextlib.suppress(*_DROPPED):
            channel.shutdown_write()


class ForwardSet:
    """Local ends of forwards, by ``(target, port)`` of the far side: opened on first use,
    reused, kept until closed. Subclasses say how one is opened (``_open``)."""

    def __init__(self, log: Any) -> None:
        self.log = log
        self._forwards: dict[tuple[str, int], Any] = {}
        self._lock = threading.Lock()

    def _open(self, target: str, port: int) -> Any:
        """A listening forward to ``port`` of ``target`` (``local_port``, ``close()``)."""
        raise NotImplementedError

    def forward(self, target: str, port: int) -> int:
        """The local port that reaches ``port`` of ``target`` (opened once, reused)."""
        with self._lock:
            existing = self._forwards.get((target, port))
            if existing is None:
                existing = self._forwards[(target, port)] = self._open(target, port)
            return int(existing.local_port)

    def close_to(self, target: str, ports: tuple[int, ...] | None = None) -> None:
        """Close the forwards to ``target`` (to ``ports`` of it, when given)."""
        with self._lock:
            keys = [
                key
                for key in self._forwards
                if key[0] == target and (ports is None or key[1] in ports)
            ]
            closing = [self._forwards.pop(key) for key in keys]
        for forward in closing:
            forward.close()

    def active(self) -> list[tuple[str, int, int]]:
        """``(target, port, local port)`` of each open forward."""
        with self._lock:
            return [(t, p, f.local_port) for (t, p), f in self._forwards.items()]

    def close(self) -> None:
        with self._lock:
            closing = list(self._forwards.values())
            self._forwards.clear()
        for forward in closing:
            forward.close()


class Tunnels(ForwardSet):
    """The forwards of one host, by ``(address, port)`` on its side."""

    def __init__(self, ssh: SSHConnection, log: Any) -> None:
        super().__init__(log)
        self.ssh = ssh

    def _open(self, target: str, port: int) -> _Forward:
        opened = _Forward(self.ssh, target, port, self.log)
        self.log.debug(
            "gpudev: forwarding 127.0.0.1:%s to %s:%s on %s",
            opened.local_port,
            target,
            port,
            self.ssh.target.where,
        )
        return opened
