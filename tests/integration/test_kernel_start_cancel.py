"""A kernel's start cancelled while its dedicated container is being started, on the real
engine: the container the start goes on to make is removed, and its GPU lease freed, once
the start's thread ends (``GPUDevProvisioner._outlast``)."""

from __future__ import annotations

import asyncio
import json
import threading
from collections.abc import Iterator
from typing import Any

import docker
import pytest

from jupyter_gpudev.containers import DevContainers, docker_name
from jupyter_gpudev.kernels import provisioner
from jupyter_gpudev.kernels.provisioner import GPUDevProvisioner
from tests.integration.test_kernels import A100_1, kernel_manager
from tests.leaks import Baseline, assert_nothing_leaked

pytestmark = pytest.mark.integration


@pytest.fixture
def manager(manager: DevContainers) -> Iterator[DevContainers]:
    (manager.root_dir / "notebooks").mkdir()
    provisioner.set_manager(manager)
    yield manager
    provisioner.set_manager(None)


async def test_a_kernel_start_cancelled_while_its_container_starts_leaves_no_container(
    manager: DevContainers,
    docker_client: docker.DockerClient,
    gpu_engine: None,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # Given an environment that asks for one GPU, whose start's last step is slow: the
    # container runs, its GPU leased, and the start has not returned yet
    folder = manager.root_dir / ".devcontainer" / "gpu"
    folder.mkdir(parents=True)
    (folder / "devcontainer.json").write_text(
        json.dumps({"image": "gpudev-python:bookworm", "hostRequirements": {"gpu": True}})
    )
    baseline = Baseline.take(docker_client, ignore_removed=True)
    ready, release = threading.Event(), threading.Event()
    said = GPUDevProvisioner._log_progress

    def slow_ready(self: GPUDevProvisioner, event: dict[str, Any]) -> None:
        said(self, event)
        if event.get("stage") == "ready":
            ready.set()
            release.wait(30)

    monkeypatch.setattr(GPUDevProvisioner, "_log_progress", slow_ready)
    km = kernel_manager(manager, "gpudev-gpu")
    # When the kernel's start is cancelled then
    start = asyncio.ensure_future(km.start_kernel())
    try:
        assert await asyncio.to_thread(ready.wait, 60), "the container never got ready"
        name = f"kernel-{km.kernel_id}"
        lease = manager.ledger.for_container("local", name)
        assert lease is not None
        assert lease.gpu_uuids == (A100_1,)
        start.cancel()
        await asyncio.sleep(0.1)
        # And the container's start ends after
        release.set()
        with pytest.raises(asyncio.CancelledError):
            await start
    finally:
        release.set()
    # Then the container it made is gone, and its GPU free
    with pytest.raises(docker.errors.NotFound):
        docker_client.containers.get(docker_name(name))
    assert manager.ledger.for_container("local", name) is None
    assert manager.ledger.active("local") == []
    assert_nothing_leaked(docker_client, baseline, server_id=manager.server_id)
