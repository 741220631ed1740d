"""Port forwards to pods of a Kubernetes host, for a server that cannot reach pod IPs (one
outside the cluster): the API server's ``pods/portforward`` over a websocket.

A ``PodForwards`` object listens on 127.0.0.1 of this machine, one port per forwarded
``pod:port``, and carries each accepted connection through a websocket of its own (the
protocol's ``v4.channel.k8s.io``: one port per request, its data on channel 0 and its errors on
channel 1, each channel first announcing the port as two little-endian bytes). Kernels' ZMQ
sockets and the web-port proxy connect to these local ports; a connection that cannot be made
closes at once, so clients see a closed connection, never a silent hang.
"""

from __future__ import annotations

import contextlib
import select
import socket
import threading
from typing import Any

from ..errors import GPUDevError
from .tunnels import ForwardSet, local_listener

_CHUNK = 65536
#: The most bytes of the error channel kept (it says why a connection failed).
_MAX_ERROR = 4096


class _Forward:
    """One listening port, forwarding to ``port`` of ``pod``."""

    def __init__(self, cluster: Any, pod: str, port: int, log: Any) -> None:
        self.cluster = cluster
        self.pod = pod
        self.port = port
        self.log = log
        self.listener, self.local_port = local_listener()
        self._closed = threading.Event()
        self._open: set[socket.socket] = set()
        self._lock = threading.Lock()
        threading.Thread(
            target=self._accept, name=f"gpudev-podforward-{pod}:{port}", daemon=True
        ).start()

    def _accept(self) -> None:
        while not self._closed.is_set():
            try:
                client, _ = self.listener.accept()
            except OSError:
                return  # closed
            threading.Thread(
                target=self._serve, args=(client,), name="gpudev-podforward-conn", daemon=True
            ).start()

    def _serve(self, client: socket.socket) -> None:
        from websocket import WebSocketException  # noqa: PLC0415 - only Kubernetes hosts

        with self._lock:
            self._open.add(client)
        sock = None
        try:
            sock = self.cluster.open_port_forward(self.pod, self.port)
            _pump(client, sock)
        except (GPUDevError, OSError, ValueError, WebSocketException) as exc:
            self.log.info("gpudev: forward to %s:%s ended: %s", self.pod, self.port, exc)
        finally:
            with self._lock:
                self._open.discard(client)
            with contextlib.suppress(OSError):
                client.close()
            if sock is not None:
                with contextlib.suppress(OSError, WebSocketException):
                    sock.shutdown()

    def close(self) -> None:
        self._closed.set()
        with contextlib.suppress(OSError):
            self.listener.shutdown(socket.SHUT_RDWR)  # wakes the accept (a close alone does not)
        self.listener.close()
        with self._lock:
            for client in list(self._open):
                with contextlib.suppress(OSError):
                    client.shutdown(socket.SHUT_RDWR)


def _pump(client: socket.socket, sock: Any) -> None:
    """Carry bytes both ways until either side closes: the client's as frames on channel 0,
    the pod's channel 0 back to the client; the first two bytes of each channel (the port)
    are skipped; anything on channel 1 ends the connection."""
    from websocket import ABNF  # noqa: PLC0415 - only Kubernetes hosts

    announced: set[int] = set()
    error = bytearray()
    while True:
        ready, _, _ = select.select([client, sock.sock], [], [], 30.0)
        if client in ready:
            data = client.recv(_CHUNK)
            if not data:
                return
            sock.send_binary(b"\0" + data)
        if sock.sock in ready or _pending(sock):
            opcode, frame = sock.recv_data_frame(True)
            if opcode == ABNF.OPCODE_CLOSE:
                return
            payload = bytes(frame.data or b"")
            if opcode not in (ABNF.OPCODE_BINARY, ABNF.OPCODE_TEXT) or not payload:
                continue
            channel, data = payload[0], payload[1:]
            if channel not in announced:
                announced.add(channel)
                data = data[2:]  # the port number, little endian
            if channel == 0 and data:
                client.sendall(data)
            elif channel == 1 and data:
                error += data[: max(0, _MAX_ERROR - len(error))]
                raise OSError(error.decode(errors="replace"))


def _pending(sock: Any) -> bool:
    raw = getattr(sock, "sock", None)
    pending = getattr(raw, "pending", None)
    return bool(pending()) if callable(pending) else False


class PodForwards(ForwardSet):
    """The local ends of one cluster's port forwards, by ``(pod, port)``."""

    def __init__(self, cluster: Any, log: Any) -> None:
        super().__init__(log)
        self.cluster = cluster

    def _open(self, target: str, port: int) -> _Forward:
        return _Forward(self.cluster, target, port, self.log)
