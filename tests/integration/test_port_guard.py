"""Kernel and web-app ports of dev containers are reachable by the server only (issue #30,
item 6): no other account on the host connects to them, in single-user mode too."""

from __future__ import annotations

import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

import docker
import pytest

from jupyter_gpudev.containers import DevContainers, StartRequest, docker_name

pytestmark = pytest.mark.integration

OTHER = "gpudev-bob"  # a local account that is not the server's (scripts/setup.sh --test)
PORT = 8123
CONNECT = (
    "import socket, sys; s = socket.socket(); s.settimeout(3)\n"
    "try:\n    s.connect((sys.argv[1], int(sys.argv[2]))); print('connected')\n"
    "except OSError as e:\n    print('refused', e)\n"
)


def connect_as(user: str | None, address: str, port: int) -> str:
    """Try a TCP connection to ``address:port`` as the local account ``user`` (``None``: as
    the test, the server's account); 'connected' or 'refused ...'."""
    prefix = ["/usr/sbin/runuser", "-u", user, "--"] if user else []
    done = subprocess.run(
        [*prefix, sys.executable, "-c", CONNECT, address, str(port)],
        capture_output=True,
        text=True,
        timeout=30,
        check=False,
    )
    return (done.stdout + done.stderr).strip()


def listening(client: docker.DockerClient, name: str, port: int) -> str:
    """Start a TCP listener in container ``name`` (as a kernel or a web app would); its
    address on the host."""
    container = client.containers.get(docker_name(name))
    container.exec_run(
        ["python3", "-m", "http.server", str(port), "--bind", "0.0.0.0", "--directory", "/tmp"],
        detach=True,
    )
    container.reload()
    address = str(container.attrs["NetworkSettings"]["Networks"]["gpudev"]["IPAddress"])
    deadline = time.monotonic() + 20
    while connect_as(None, address, port) != "connected":
        assert time.monotonic() < deadline, "the listener did not start"
        time.sleep(0.2)
    return address


def test_another_account_on_the_host_cannot_reach_a_containers_ports(
    dev_containers: Callable[..., DevContainers],
    tmp_path: Path,
    docker_client: docker.DockerClient,
) -> None:
    # Given a dev container of this server, with a port listening in it (a kernel's, an app's)
    manager = dev_containers(tmp_path / "work")
    name = "guarded-one"
    manager.start(StartRequest(environment="default", name=name))
    address = listening(docker_client, name, PORT)
    # When another account of the host connects to it
    seen = connect_as(OTHER, address, PORT)
    # Then it is refused, while the server's account still connects
    assert seen.startswith("refused"), seen
    assert connect_as(None, address, PORT) == "connected"
    # ... and once the container is gone, its address is no one's way in
    manager.remove(name, force=True)
