"""The shared service refuses a request body larger than its bound before reading it.

No handler of the service streams its body: tornado reads a request's whole body before the
handler's ``prepare`` (and ``@web.authenticated``) runs. With jupyter_server's defaults (512 MiB
for ``max_body_size`` and ``max_buffer_size``), anyone who reaches the service's port, with
no token, could make it hold 512 MiB per connection. ``jupyter gpudev serve`` runs here as its
own process (``ServiceProcess``, with the stand-in Hub of ``test_shared_restart``).
"""

from __future__ import annotations

import contextlib
import socket
import threading
import time
from pathlib import Path

import pytest

from jupyter_gpudev.shared.server import MAX_BODY_SIZE
from tests.hub import request
from tests.integration.test_shared_restart import ALICE_TOKEN, ServiceProcess, service_process

pytestmark = pytest.mark.integration

__all__ = ["service_process"]  # the fixture, shared with test_shared_restart

BIG = 64 << 20


def rss(pid: int) -> int:
    """The resident memory of process ``pid``, in bytes."""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) * 1024
    raise AssertionError(f"no VmRSS for {pid}")


def head(service: ServiceProcess, length: int) -> bytes:
    """The head of an unauthenticated ``POST /gpudev/api/containers`` of ``length`` bytes."""
    return (
        f"POST /gpudev/api/containers HTTP/1.1\r\nHost: 127.0.0.1:{service.port}\r\n"
        f"Content-Type: application/json\r\nContent-Length: {length}\r\n\r\n"
    ).encode()


def answer_line(sock: socket.socket) -> bytes:
    """The status line the service answered, or ``b""`` if it closed the connection."""
    try:
        return sock.recv(4096).split(b"\r\n", 1)[0]
    except ConnectionResetError:
        return b""
    except TimeoutError:
        raise AssertionError("the service waited for the body instead of refusing it") from None


def test_a_large_body_is_refused_before_it_is_sent(service_process: ServiceProcess) -> None:
    service_process.start()
    # When a client without a token announces a 64 MiB body and sends none of it
    with socket.create_connection(("127.0.0.1", service_process.port), timeout=10) as sock:
        sock.sendall(head(service_process, BIG))
        # Then the service answers (refuses) and closes at once, without waiting for the body
        line = answer_line(sock)
    assert line in (b"", b"HTTP/1.1 400 Bad Request", b"HTTP/1.1 413 Payload Too Large"), line


def test_a_large_body_sent_anyway_is_not_held(service_process: ServiceProcess) -> None:
    service_process.start()
    assert service_process.process is not None
    pid = service_process.process.pid
    before = rss(pid)
    sent = [0]

    def send() -> None:
        with (
            socket.create_connection(("127.0.0.1", service_process.port), timeout=30) as sock,
            contextlib.suppress(OSError),  # the service closed the connection: what we want
        ):
            sock.sendall(head(service_process, BIG))
            chunk = b" " * (1 << 20)
            for _ in range(BIG >> 20):
                sock.sendall(chunk)
                sent[0] += len(chunk)
            sock.recv(4096)

    # When a client without a token sends a 64 MiB body regardless
    client = threading.Thread(target=send, daemon=True)
    client.start()
    peak = before
    while client.is_alive():
        peak = max(peak, rss(pid))
        time.sleep(0.01)
    time.sleep(0.5)  # (what it read would be joined and parsed by now)
    peak = max(peak, rss(pid))
    # Then the service never held it: its memory grew by far less than the body
    assert peak - before < 16 << 20, (before >> 20, peak >> 20, sent[0] >> 20)
    # And it still answers
    assert request("GET", f"{service_process.url}/gpudev/api/environments")[0] == 403


def test_a_body_within_the_bound_reaches_the_handler(service_process: ServiceProcess) -> None:
    service_process.start()
    # Given a caller's start request padded to just under the bound (a commit of 10,000
    # excluded changes with long paths is of this order)
    body = {"environment": "default", "padding": "x" * (MAX_BODY_SIZE - 1024)}
    # Then the handler reads it and answers about its content
    status, answer = request(
        "POST", f"{service_process.url}/gpudev/api/containers", body, token=ALICE_TOKEN
    )
    assert status == 400, answer
    assert "padding" in answer["message"], answer
