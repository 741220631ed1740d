"""``containerUser`` and ``remoteUser`` on the real engine: with
``c.DevContainers.run_as_server_user`` off (single-user mode) the container runs as
containerUser and its lifecycle commands, kernels and terminals as remoteUser; with it on (the
default) everything runs as the server's user, whatever the file names."""

from __future__ import annotations

import contextlib
import os
import secrets
import time
from collections.abc import Callable
from pathlib import Path

import docker
import pytest
from traitlets.config import Config

from jupyter_gpudev.containers import DevContainers, StartRequest
from jupyter_gpudev.containers.terminals import terminal_argv
from jupyter_gpudev.errors import GPUDevError
from jupyter_gpudev.kernels.process import ContainerProcesses
from jupyter_gpudev.labels import L_REMOTE_USER
from tests.leaks import Baseline, assert_nothing_leaked

pytestmark = pytest.mark.integration

BASE = "gpudev-base:bookworm"


def manager_with(
    dev_containers: Callable[..., DevContainers], root: Path, *, as_server: bool
) -> DevContainers:
    config = Config()
    config.GPUInventory.backend = "none"
    config.DevContainers.run_as_server_user = as_server
    return dev_containers(root, config)


def kernel_user(manager: DevContainers, name: str) -> str:
    """Who a kernel started the way the provisioner starts one runs as (its ``id -u``)."""
    host, container = manager.find(name)
    processes = ContainerProcesses(host, container, manager.address_of)
    handle = processes.start(
        argv=["/bin/sh", "-c", "id -u > /tmp/kernel-user"],
        runtime_id=f"k{secrets.token_hex(4)}",
        connection={},
        workdir=None,
        environment={},
    )
    deadline = time.monotonic() + 30
    while processes.exit_code(handle, "") is None:
        assert time.monotonic() < deadline, "the kernel did not end"
        time.sleep(0.1)
    # (read as the kernel's own user: its umask is 077)
    code, out = container.exec_run(["cat", "/tmp/kernel-user"], user=processes.user)
    assert code == 0, out
    assert isinstance(out, bytes)
    return out.decode().strip()


def test_remote_user_runs_the_processes_where_the_container_is_not_the_servers(
    tmp_path: Path,
    dev_containers: Callable[..., DevContainers],
    docker_client: docker.DockerClient,
) -> None:
    root = tmp_path / "work"
    env = f"users{secrets.token_hex(4)}"
    # Given an image with two accounts, the container running as one, processes as the other
    folder = root / ".devcontainer" / env
    folder.mkdir(parents=True)
    (folder / "Dockerfile").write_text(
        f"FROM {BASE}\nRUN useradd -m -u 4101 svc && useradd -m -u 4102 dev\n"
    )
    (folder / "devcontainer.json").write_text(
        '{"build": {"dockerfile": "Dockerfile"}, "containerUser": "svc", '
        '"remoteUser": "dev", "postCreateCommand": "id -u > /tmp/lifecycle-user"}'
    )
    own = manager_with(dev_containers, root, as_server=False)
    server = manager_with(dev_containers, root, as_server=True)
    baseline = Baseline.take(docker_client, ignore_removed=True)
    try:
        # When it starts where the container does not run as the server's user
        info = own.start(StartRequest(environment=env, name=f"{env}-own"))
        container = docker_client.containers.get(info.container_id)
        # Then the container runs as containerUser
        assert container.attrs["Config"]["User"] == "svc"
        assert container.labels[L_REMOTE_USER] == "dev"
        # And its lifecycle command, a kernel and a terminal run as remoteUser
        code, out = container.exec_run(["cat", "/tmp/lifecycle-user"])
        assert (code, out) == (0, b"4102\n")
        assert kernel_user(own, f"{env}-own") == "4102"
        host, found = own.find(f"{env}-own")
        argv = terminal_argv(host, found, "docker")
        assert argv[argv.index("-u") + 1] == "dev"

        # When the same environment starts where the container runs as the server's user
        info = server.start(StartRequest(environment=env, name=f"{env}-srv"))
        container = docker_client.containers.get(info.container_id)
        # Then the names in the file are not used: everything runs as the server's user
        assert container.attrs["Config"]["User"] == f"{os.getuid()}:{os.getgid()}"
        assert container.labels[L_REMOTE_USER] == ""
        code, out = container.exec_run(["cat", "/tmp/lifecycle-user"])
        assert (code, out) == (0, f"{os.getuid()}\n".encode())
        assert kernel_user(server, f"{env}-srv") == str(os.getuid())
        host, found = server.find(f"{env}-srv")
        assert "-u" not in terminal_argv(host, found, "docker")
    finally:
        for manager, name in ((own, f"{env}-own"), (server, f"{env}-srv")):
            with contextlib.suppress(GPUDevError):  # (not started: nothing to remove)
                manager.remove(name, force=True)
        for image in docker_client.images.list(name=f"gpudev-env-{env}"):
            docker_client.images.remove(str(image.id), force=True)
    assert_nothing_leaked(docker_client, baseline, server_id=own.server_id, environments=[env])
    assert_nothing_leaked(docker_client, baseline, server_id=server.server_id, environments=[env])
