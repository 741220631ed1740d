"""What a dev container leaves on its engine's disk: nothing once it is removed, and a capped log
while it runs.

An image that declares a ``VOLUME`` gets an anonymous volume in each of its containers; the
engine keeps it after the container is removed unless the removal asks for it too (``v``).
What is written there is no change of the container's (``docker diff`` does not see it), so a
removal needs no force: without ``v`` every removal would leave the volume, with no label and
no owner. The engine's default json-file log has no size limit: a process writing to its
output without end would fill the engine's disk.
"""

from __future__ import annotations

import contextlib
import io
import json
import logging
import secrets
from collections.abc import Callable, Iterator
from pathlib import Path

import docker
import docker.errors
import pytest
from traitlets.config import Config

from jupyter_gpudev.containers import DevContainers, StartRequest
from jupyter_gpudev.errors import GPUDevError
from jupyter_gpudev.leasing import GPUHolding, LeaseLedger
from tests.leaks import Baseline, assert_nothing_leaked

pytestmark = pytest.mark.integration

BASE = "gpudev-base:bookworm"


@pytest.fixture
def volume_image(docker_client: docker.DockerClient) -> Iterator[str]:
    """An image declaring ``VOLUME /data``: its tag."""
    tag = f"gpudev-test-volume:{secrets.token_hex(4)}"
    dockerfile = f"FROM {BASE}\nVOLUME /data\n"
    docker_client.images.build(fileobj=io.BytesIO(dockerfile.encode()), tag=tag, rm=True)
    yield tag
    with contextlib.suppress(docker.errors.APIError):
        docker_client.images.remove(tag, force=True)


def anonymous_volume(docker_client: docker.DockerClient, container_id: str) -> str:
    """The name of the volume the engine made for the container's ``/data``."""
    container = docker_client.containers.get(container_id)
    (name,) = [
        str(m["Name"])
        for m in container.attrs["Mounts"]
        if m["Type"] == "volume" and m["Destination"] == "/data"
    ]
    return name


def volume_exists(docker_client: docker.DockerClient, name: str) -> bool:
    try:
        docker_client.volumes.get(name)
    except docker.errors.NotFound:
        return False
    return True


def manager_of(
    tmp_path: Path, dev_containers: Callable[..., DevContainers], image: str
) -> tuple[DevContainers, str]:
    root = tmp_path / "work"
    env = f"enginedisk{secrets.token_hex(3)}"
    folder = root / ".devcontainer" / env
    folder.mkdir(parents=True)
    (folder / "devcontainer.json").write_text(json.dumps({"image": image}))
    config = Config()
    config.GPUInventory.backend = "none"
    return dev_containers(root, config), env


def test_removing_a_dev_container_removes_its_anonymous_volume(
    tmp_path: Path,
    dev_containers: Callable[..., DevContainers],
    docker_client: docker.DockerClient,
    volume_image: str,
) -> None:
    manager, env = manager_of(tmp_path, dev_containers, volume_image)
    baseline = Baseline.take(docker_client, ignore_removed=True)
    name = f"{env}-dev"
    volume = ""
    try:
        # Given a dev container of an image that declares a volume, a file written there
        info = manager.start(StartRequest(environment=env, name=name))
        container = docker_client.containers.get(info.container_id)
        volume = anonymous_volume(docker_client, info.container_id)
        code, out = container.exec_run(["sh", "-c", "echo big > /data/blob"])
        assert code == 0, out
        # (no change of the container's: its removal needs no force)
        # When it is removed through gpudev
        manager.remove(name)
        # Then its anonymous volume is gone with it
        assert not volume_exists(docker_client, volume)
    finally:
        with contextlib.suppress(GPUDevError):
            manager.remove(name, force=True)
        if volume:
            with contextlib.suppress(docker.errors.NotFound):
                docker_client.volumes.get(volume).remove(force=True)
    assert_nothing_leaked(docker_client, baseline, server_id=manager.server_id)


def test_undoing_a_failed_start_removes_the_containers_anonymous_volume(
    tmp_path: Path, docker_client: docker.DockerClient, volume_image: str
) -> None:
    # Given a container created for a start that then failed (``GPUHolding.undo``)
    container = docker_client.containers.create(
        volume_image, ["sleep", "infinity"], name=f"gpudev-test-undo-{secrets.token_hex(4)}"
    )
    volume = anonymous_volume(docker_client, str(container.id))
    holding = GPUHolding(
        LeaseLedger(tmp_path / "state"),
        ledger_id="test",
        grace=0.0,
        log=logging.getLogger("test"),
    )
    try:
        # When the start is undone
        holding.undo(container, None)
        # Then the container's anonymous volume is gone with it
        assert not volume_exists(docker_client, volume)
    finally:
        with contextlib.suppress(docker.errors.NotFound):
            container.remove(force=True)
        with contextlib.suppress(docker.errors.NotFound):
            docker_client.volumes.get(volume).remove(force=True)


def test_a_removal_with_its_volumes_keeps_named_volumes_and_bind_mounts(
    tmp_path: Path, docker_client: docker.DockerClient, volume_image: str
) -> None:
    """What the engine's ``v`` removes: the anonymous volumes only (what gpudev relies on)."""
    named = docker_client.volumes.create(f"gpudev-test-named-{secrets.token_hex(4)}")
    folder = tmp_path / "bound"
    folder.mkdir()
    (folder / "kept.txt").write_text("kept\n")
    container = docker_client.containers.create(
        volume_image,
        ["sleep", "infinity"],
        volumes={named.name: {"bind": "/named"}, str(folder): {"bind": "/bound"}},
    )
    try:
        anonymous = anonymous_volume(docker_client, str(container.id))
        container.remove(force=True, v=True)
        assert not volume_exists(docker_client, anonymous)
        assert volume_exists(docker_client, str(named.name))
        assert (folder / "kept.txt").read_text() == "kept\n"
    finally:
        with contextlib.suppress(docker.errors.NotFound):
            container.remove(force=True, v=True)
        named.remove(force=True)


def test_a_dev_containers_log_is_capped_on_a_json_file_engine(
    tmp_path: Path,
    dev_containers: Callable[..., DevContainers],
    docker_client: docker.DockerClient,
) -> None:
    driver = docker_client.info().get("LoggingDriver")
    manager, env = manager_of(tmp_path, dev_containers, BASE)
    baseline = Baseline.take(docker_client, ignore_removed=True)
    name = f"{env}-dev"
    try:
        # When a dev container is planned, then started, with the default options
        planned = manager.plan(StartRequest(environment=env, name=name))["create"]
        info = manager.start(StartRequest(environment=env, name=name))
        log = docker_client.containers.get(info.container_id).attrs["HostConfig"]["LogConfig"]
        # Then the log the engine keeps of its output is capped (10 MB, 2 files) where the
        # engine keeps it in files, and the engine's own driver is left alone otherwise
        if driver in ("json-file", "local"):
            assert log["Type"] == driver
            assert log["Config"]["max-size"] == "10m"
            assert log["Config"]["max-file"] == "2"
            assert planned["log_config"] == log  # (the plan says it)
        else:
            assert log["Type"] == driver
            assert "max-size" not in (log.get("Config") or {})
            assert "log_config" not in planned
    finally:
        with contextlib.suppress(GPUDevError):
            manager.remove(name, force=True)
    assert_nothing_leaked(docker_client, baseline, server_id=manager.server_id)
