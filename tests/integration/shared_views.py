"""The shared service's object graph built in-process for the shared-mode integration tests:
each user's view (``Authority.for_user``) on the real engine, with the fake GPUs, the state and
users' folders in the test's folder; and the clean-up of what its views made."""

from __future__ import annotations

import contextlib
import logging
import secrets
from collections.abc import Iterator
from pathlib import Path

import docker
import docker.errors
import pytest
from traitlets.config import Config, LoggingConfigurable

from jupyter_gpudev.labels import L_SERVER, L_SNAPSHOT_CONTAINER
from jupyter_gpudev.shared.authority import Authority
from tests.conftest import FAKE_SMI, FIXTURES


def service_config(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Config:
    """The service's configuration: two fake A100s, its state and users' folders in
    ``tmp_path``, a 2 s stop timeout. A test adds its own settings."""
    monkeypatch.setenv("FAKE_NVIDIA_SMI_DIR", str(FIXTURES / "smi" / "two-a100"))
    config = Config()
    config.GPUInventory.backend = "nvidia-smi"
    config.GPUInventory.nvidia_smi_path = str(FAKE_SMI)
    config.DevContainers.state_dir = str(tmp_path / "state")
    config.DevContainers.stop_timeout = 2
    config.GPUDevService.user_root = str(tmp_path / "users" / "{user}")
    return config


def new_service(tmp_path: Path, config: Config) -> Authority:
    """The service with ``config`` (its users' views come from ``for_user``)."""
    parent = LoggingConfigurable(config=config)
    return Authority(tmp_path, parent=parent, log=logging.getLogger("gpudev-test"))


def close(held: Authority, client: docker.DockerClient) -> None:
    """Remove every container the service's views made, and close it."""
    server = held.service.containers.server_id
    for container in client.containers.list(all=True, filters={"label": f"{L_SERVER}={server}"}):
        with contextlib.suppress(docker.errors.NotFound):
            container.remove(force=True)
    held.close()


class Names:
    """This test's image names (each holds ``part``), and their removal afterwards."""

    def __init__(self, client: docker.DockerClient) -> None:
        self.client = client
        self.part = secrets.token_hex(4)

    def __call__(self, name: str) -> str:
        """``name`` with this test's random part in its repository: ``x/y:1`` -> ``x/y-PART:1``."""
        repository, tag = name.rsplit(":", 1)
        return f"{repository}-{self.part}:{tag}"

    def image_id(self, ref: str) -> str | None:
        try:
            return str(self.client.images.get(ref).id)
        except docker.errors.ImageNotFound:
            return None

    def remove(self) -> None:
        """Every tag holding ``part``, and the snapshots of this test's containers that a
        later one replaced."""
        for image in self.client.images.list(all=True):
            for tag in image.tags:
                if self.part in tag:
                    with contextlib.suppress(docker.errors.APIError):
                        self.client.images.remove(tag)
        for image in self.client.images.list(all=True, filters={"label": L_SNAPSHOT_CONTAINER}):
            if self.part in image.labels.get(L_SNAPSHOT_CONTAINER, ""):
                with contextlib.suppress(docker.errors.APIError):
                    self.client.images.remove(str(image.id))


@pytest.fixture
def names(docker_client: docker.DockerClient) -> Iterator[Names]:
    """This test's image names; every image tagged with one is removed afterwards (after the
    containers of a service fixture that depends on this one)."""
    made = Names(docker_client)
    yield made
    made.remove()
