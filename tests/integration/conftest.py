"""Integration fixtures: the real Docker engine and a real Jupyter server (pytest-jupyter)."""

from __future__ import annotations

import os
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import docker
import pytest
from traitlets.config import Config

from jupyter_gpudev.changes.tracker import track_changes
from jupyter_gpudev.containers import DevContainers
from jupyter_gpudev.engine import HostPool
from jupyter_gpudev.labels import L_CLAIM_HOLDER, L_MANAGED, L_SERVER, L_WORKSPACE
from tests.conftest import FAKE_SMI, FIXTURES
from tests.registry import Registry, RegistryMissing, run_registry
from tests.sshd import SSHDMissing, SSHServer, run_sshd

BASE = "gpudev-base:bookworm"
A100_0 = "GPU-5d5ba0d6-d33d-2b2c-524d-9e3d8d2b8a77"


@pytest.fixture(scope="session")
def docker_client() -> Iterator[docker.DockerClient]:
    """The local engine. Its absence is a failure, not a skip: scripts/test.sh starts one."""
    try:
        client = docker.from_env()
        client.ping()
    except docker.errors.DockerException as exc:
        pytest.fail(f"integration tests need a running Docker engine (scripts/setup.sh): {exc}")
    yield client
    client.close()


def remove_containers(docker_client: docker.DockerClient, manager: DevContainers) -> None:
    """Remove every container ``manager`` made, with the GPU claims they held (removed
    behind gpudev's back, their claims would be left to the next claim of those GPUs), and
    close its hosts' connections."""
    for container in docker_client.containers.list(
        all=True, filters={"label": f"{L_SERVER}={manager.server_id}"}
    ):
        container.remove(force=True)
        for claim in docker_client.containers.list(
            all=True, filters={"label": f"{L_CLAIM_HOLDER}={container.id}"}
        ):
            claim.remove(force=True)
    manager.host_pool.close()


@pytest.fixture
def dev_containers(
    tmp_path: Path, docker_client: docker.DockerClient
) -> Iterator[Callable[..., DevContainers]]:
    """Makes a ``DevContainers`` on the real engine for a workspace ``root``, with ``config``
    (its state in the test's folder, a 2 s stop timeout unless set); the containers of every
    manager made are removed after the test."""
    made: list[DevContainers] = []

    def make(root: Path, config: Config | None = None) -> DevContainers:
        config = config if config is not None else Config()
        config.DevContainers.setdefault("state_dir", str(tmp_path / "state"))
        config.DevContainers.setdefault("stop_timeout", 2)
        root.mkdir(parents=True, exist_ok=True)
        manager = DevContainers(root_dir=root, host_pool=HostPool(config=config), config=config)
        track_changes(manager)
        made.append(manager)
        return manager

    yield make
    for manager in made:
        remove_containers(docker_client, manager)


def two_a100(monkeypatch: pytest.MonkeyPatch) -> Config:
    """A config whose GPUs are the fake nvidia-smi's two A100s, read afresh at each look (the
    scenario set for the test: ``FAKE_NVIDIA_SMI_DIR``)."""
    monkeypatch.setenv("FAKE_NVIDIA_SMI_DIR", str(FIXTURES / "smi" / "two-a100"))
    config = Config()
    config.GPUInventory.backend = "nvidia-smi"
    config.GPUInventory.nvidia_smi_path = str(FAKE_SMI)
    config.GPUInventory.cache_seconds = 0.0
    return config


@pytest.fixture
def remote_smi(tmp_path: Path) -> Path:
    """nvidia-smi as a remote host (the local engine through the real sshd) runs it: the fake
    one, with its recorded two A100s."""
    script = tmp_path / "remote-nvidia-smi"
    script.write_text(
        f'#!/bin/sh\nFAKE_NVIDIA_SMI_DIR={FIXTURES / "smi" / "two-a100"} exec {FAKE_SMI} "$@"\n'
    )
    script.chmod(0o755)
    return script


@pytest.fixture
def manager(
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    dev_containers: Callable[..., DevContainers],
) -> DevContainers:
    """A ``DevContainers`` on the real engine for the workspace ``tmp_path / "work"``, its GPUs
    the fake nvidia-smi's two A100s (``two_a100``), its containers removed after the test. A
    module that needs files in the workspace first extends it: a fixture ``manager`` of its own
    asking for ``manager`` gets this one. One that needs another configuration makes its own
    with ``dev_containers``, under a name that says how it differs."""
    return dev_containers(tmp_path / "work", two_a100(monkeypatch))


@pytest.fixture
def user_server(
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    dev_containers: Callable[..., DevContainers],
) -> Callable[..., DevContainers]:
    """Makes one user's server (``c.Access.user``) on the local engine: its own state folder,
    hence its own lease ledger, GPUs from the fake nvidia-smi (two A100s), one workspace shared
    by all; ``admins``: ``c.Access.admin_users``; ``hosts``: ``c.HostPool.hosts``."""
    monkeypatch.setenv("FAKE_NVIDIA_SMI_DIR", str(FIXTURES / "smi" / "two-a100"))

    def make(
        user: str, *, admins: tuple[str, ...] = (), hosts: dict[str, Any] | None = None
    ) -> DevContainers:
        config = two_a100(monkeypatch)
        config.DevContainers.state_dir = str(tmp_path / f"state-{user}")
        config.Access.user = user
        config.Access.admin_users = set(admins)
        if hosts:
            config.HostPool.hosts = hosts
        return dev_containers(tmp_path / "work", config)

    return make


@pytest.fixture
def gpudev_config(tmp_path: Path) -> dict[str, Any]:
    """The sections merged into the test server's config (``jp_server_config``): its state in
    the test's folder, a 2 s stop timeout. A module that needs more extends it: a fixture
    ``gpudev_config`` of its own asking for ``gpudev_config`` gets this one."""
    return {"DevContainers": {"state_dir": str(tmp_path / "state"), "stop_timeout": 2}}


@pytest.fixture
def jp_server_config(gpudev_config: dict[str, Any], monkeypatch: pytest.MonkeyPatch) -> Config:
    """The extension enabled, unauthenticated access disabled, GPUs from the fake nvidia-smi."""
    monkeypatch.setenv("FAKE_NVIDIA_SMI_DIR", str(FIXTURES / "smi" / "two-a100"))
    config: dict[str, Any] = {
        "ServerApp": {
            "jpserver_extensions": {"jupyter_gpudev": True},
            "allow_unauthenticated_access": False,
        },
        "GPUInventory": {"backend": "nvidia-smi", "nvidia_smi_path": str(FAKE_SMI)},
    }
    for section, values in gpudev_config.items():
        config.setdefault(section, {}).update(values)
    return Config(config)


@pytest.fixture(scope="session")
def gpu_engine(docker_client: docker.DockerClient) -> None:
    """The engine can start containers with a GPU DeviceRequest (real or stand-in hook)."""
    try:
        docker_client.containers.run(
            BASE,
            ["true"],
            remove=True,
            device_requests=[
                docker.types.DeviceRequest(
                    driver="nvidia", device_ids=[A100_0], capabilities=[["gpu"]]
                )
            ],
        )
    except docker.errors.APIError as exc:
        message = (
            "the Docker engine has no NVIDIA hook, so GPU containers cannot start; "
            f"scripts/test.sh starts an engine with a stand-in hook ({exc.explanation})"
        )
        if os.environ.get("CI"):
            pytest.fail(message)
        pytest.skip(message)


@pytest.fixture(scope="session")
def registry(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Registry]:
    """Started for the session; its absence is a failure (scripts/setup.sh --test installs it)."""
    try:
        with run_registry(tmp_path_factory.mktemp("registry")) as started:
            yield started
    except RegistryMissing as exc:
        pytest.fail(str(exc))


@pytest.fixture(scope="session")
def ssh_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[SSHServer]:
    """A real sshd on loopback in front of the local engine, for the session; its absence is a
    failure (scripts/setup.sh --test installs it)."""
    try:
        with run_sshd(tmp_path_factory.mktemp("sshd")) as started:
            yield started
    except SSHDMissing as exc:
        pytest.fail(str(exc))


@pytest.fixture
def server_containers_removed(
    jp_root_dir: Path, docker_client: docker.DockerClient
) -> Iterator[None]:
    """After the test, the dev containers of the test server's workspace are removed."""
    yield
    for container in docker_client.containers.list(
        all=True, filters={"label": [f"{L_MANAGED}=1", f"{L_WORKSPACE}={jp_root_dir.resolve()}"]}
    ):
        container.remove(force=True)
