"""The copy loops of an SSH port forward end quietly when the SSH connection drops."""

from __future__ import annotations

import socket
import threading
from typing import Any

import paramiko
import pytest

from jupyter_gpudev.engine import tunnels


class _DroppedChannel:
    """A channel whose transport is gone: paramiko raises EOFError (or SSHException) on send."""

    def __init__(self, error: BaseException) -> None:
        self.error = error
        self.closed = threading.Event()

    def sendall(self, _data: bytes) -> None:
        raise self.error

    def shutdown_write(self) -> None:
        self.closed.set()  # the far side then ends the read too
        raise EOFError

    def recv(self, _size: int) -> bytes:
        self.closed.wait(5)
        raise self.error

    def close(self) -> None:
        self.closed.set()


@pytest.mark.parametrize("error", [EOFError(), paramiko.SSHException("dropped")])
def test_copying_up_ends_quietly_when_the_transport_drops(error: BaseException) -> None:
    ours, theirs = socket.socketpair()
    try:
        theirs.sendall(b"a message for the host")
        tunnels._copy_up(ours, _DroppedChannel(error))  # type: ignore[arg-type]
    finally:
        ours.close()
        theirs.close()


@pytest.mark.parametrize("error", [EOFError(), paramiko.SSHException("dropped")])
def test_a_pump_ends_quietly_and_closes_both_sides_when_the_transport_drops(
    error: BaseException,
) -> None:
    ours, theirs = socket.socketpair()
    channel: Any = _DroppedChannel(error)
    try:
        theirs.sendall(b"a message for the host")
        tunnels._pump(ours, channel)
        assert channel.closed.is_set()
        theirs.settimeout(5)
        assert theirs.recv(10) == b""  # this machine's side was shut
    finally:
        ours.close()
        theirs.close()
