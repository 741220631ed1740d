"""Ports of this machine for the servers the tests start (registry, sshd, Hub, Jupyter)."""

from __future__ import annotations

import socket


def free_port() -> int:
    """A port of 127.0.0.1 where nothing listens now (bound, read, released): the server
    started next binds it, racing only other processes that pick ports the same way."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
        probe.bind(("127.0.0.1", 0))
        port: int = probe.getsockname()[1]
    return port
