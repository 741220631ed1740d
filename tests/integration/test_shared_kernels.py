"""Kernels that share a running dev container: picker entries, stop after the last kernel,
linger and pin, on the real engine (GPU leases through the stand-in NVIDIA hook)."""

from __future__ import annotations

import asyncio
import json
import time
from pathlib import Path
from typing import Any

import docker
import pytest
from jupyter_client.manager import AsyncKernelManager

from jupyter_gpudev.containers import DevContainers, StartRequest, docker_name
from jupyter_gpudev.errors import BadRequest
from jupyter_gpudev.kernels import process, provisioner
from jupyter_gpudev.kernels.kernelspecs import SHARED_PREFIX, GPUDevKernelSpecManager
from jupyter_gpudev.kernels.placements import PLACEMENTS
from jupyter_gpudev.labels import L_SERVER
from tests.integration.test_kernels import A100_1, kernel_manager, manager, run

pytestmark = pytest.mark.integration

__all__ = ["manager"]  # the fixture, shared with test_kernels


def gpu_environment(root: Path) -> None:
    folder = root / ".devcontainer" / "gpu"
    folder.mkdir(parents=True)
    (folder / "devcontainer.json").write_text(
        json.dumps({"image": "gpudev-python:bookworm", "hostRequirements": {"gpu": True}})
    )


def kernel_containers(client: docker.DockerClient, manager: DevContainers) -> list[str]:
    """The containers made for one kernel by this test's manager (another test's leftovers do
    not count)."""
    return [
        str(c.name)
        for c in client.containers.list(
            all=True, filters={"name": "gpudev-kernel-", "label": f"{L_SERVER}={manager.server_id}"}
        )
    ]


async def started(km: AsyncKernelManager) -> Any:
    await km.start_kernel()
    client = km.client()
    client.start_channels()
    await client.wait_for_ready(timeout=60)
    return client


async def hostname(client: Any) -> str:
    out, reply = await run(client, "import socket; print(socket.gethostname())")
    assert reply["status"] == "ok", reply
    return out.strip()


def state(docker_client: docker.DockerClient, name: str) -> str:
    return str(docker_client.containers.get(docker_name(name)).status)


async def test_kernels_share_a_container_that_stops_with_its_last_kernel(
    manager: DevContainers, docker_client: docker.DockerClient, gpu_engine: None
) -> None:
    # Given a running dev container with a GPU, started by the user
    gpu_environment(manager.root_dir)
    info = manager.start(StartRequest(environment="gpu", name="box"))
    ksm = GPUDevKernelSpecManager(root_dir=str(manager.root_dir))
    # Then the picker offers a kernel in it, saying it is shared and has one GPU
    spec = (await ksm.get_all_specs())[SHARED_PREFIX + "box"]["spec"]
    assert spec["display_name"] == "gpu in box (1 GPU, shared) · gpudev"
    # When two kernels start in it
    first = kernel_manager(manager, SHARED_PREFIX + "box")
    second = kernel_manager(manager, SHARED_PREFIX + "box")
    c1, c2 = await started(first), await started(second)
    try:
        # Then both run in that container, and no container was made for either
        assert await hostname(c1) == await hostname(c2) == "box"
        assert kernel_containers(docker_client, manager) == []
        # And a container made for one kernel is not offered for sharing
        assert [n for n in ksm.find_kernel_specs() if n.startswith(SHARED_PREFIX)] == [
            SHARED_PREFIX + "box"
        ]
    finally:
        c1.stop_channels()
        c2.stop_channels()
    # When the first kernel ends, the container keeps running with its lease
    await first.shutdown_kernel()
    assert state(docker_client, "box") == "running"
    assert manager.ledger.for_container("local", "box") is not None
    # When the last one ends, it is stopped (kept) and its GPU is free
    await second.shutdown_kernel()
    assert state(docker_client, "box") == "exited"
    assert manager.ledger.active("local") == []
    # When a kernel is started in it again, it starts again with the same GPU
    again = kernel_manager(manager, SHARED_PREFIX + "box")
    client = await started(again)
    try:
        out, _ = await run(client, "import os; print(os.environ['NVIDIA_VISIBLE_DEVICES'])")
        assert out.strip() == A100_1
        lease = manager.ledger.for_container("local", "box")
        assert lease is not None
        assert lease.gpu_uuids == info.gpu_uuids == (A100_1,)
    finally:
        client.stop_channels()
    # When it is pinned, its last kernel's end leaves it running, GPU held
    assert manager.pin("box").pinned is True
    await again.shutdown_kernel()
    assert state(docker_client, "box") == "running"
    assert manager.ledger.for_container("local", "box") is not None
    assert manager.get("box").pinned is True
    # And unpinned, it is an ordinary shared container again; removed, its pin is gone
    assert manager.pin("box", pinned=False).pinned is False
    manager.pin("box")
    manager.remove("box", force=True)
    assert "box" not in manager.ledger.pinned("local")


async def test_linger_keeps_a_shared_container_for_a_while_and_a_new_kernel_cancels_it(
    manager: DevContainers, docker_client: docker.DockerClient
) -> None:
    # Given shared containers linger 1.5 s after their last kernel
    manager.linger = 1.5
    manager.start(StartRequest(environment="default", name="lingering"))
    km = kernel_manager(manager, SHARED_PREFIX + "lingering")
    (await started(km)).stop_channels()
    # When its kernel ends, it is still running during the linger
    await km.shutdown_kernel()
    assert state(docker_client, "lingering") == "running"
    # When a kernel comes back within the linger, the pending stop is cancelled
    back = kernel_manager(manager, SHARED_PREFIX + "lingering")
    client = await started(back)
    await asyncio.sleep(2.0)
    assert state(docker_client, "lingering") == "running"
    assert await hostname(client) == "lingering"
    client.stop_channels()
    # When that one ends too, the container is stopped once the linger is over
    await back.shutdown_kernel()
    ended = time.monotonic()
    assert state(docker_client, "lingering") == "running"
    while state(docker_client, "lingering") != "exited":
        assert time.monotonic() - ended < 30, "not stopped after the linger"
        await asyncio.sleep(0.1)
    assert time.monotonic() - ended >= 1.4


async def test_a_kernel_container_cannot_be_pinned_or_shared(
    manager: DevContainers,
) -> None:
    # Given a container made for one kernel
    km = kernel_manager(manager)
    client = await started(km)
    client.stop_channels()
    name = f"kernel-{km.kernel_id}"
    try:
        # Then pinning it is refused with a reason
        with pytest.raises(BadRequest, match="belongs to one kernel"):
            manager.pin(name)
        # And it is not offered in the picker for sharing
        ksm = GPUDevKernelSpecManager(root_dir=str(manager.root_dir))
        assert SHARED_PREFIX + name not in ksm.find_kernel_specs()
    finally:
        await km.shutdown_kernel()


async def test_an_engine_error_while_launching_leaves_no_container_lease_or_member(
    manager: DevContainers,
    docker_client: docker.DockerClient,
    gpu_engine: None,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # Given the engine fails the kernel's exec, after the GPU container was made and leased
    gpu_environment(manager.root_dir)
    failing = docker.errors.APIError("exec refused by the engine")

    def refuse(*_args: object, **_kwargs: object) -> None:
        raise failing

    monkeypatch.setattr(docker.api.client.APIClient, "exec_create", refuse)
    monkeypatch.setattr(PLACEMENTS, "_argv_by_image", {})  # looked up without an exec below
    monkeypatch.setattr(process, "image_argv", lambda _container: list(process.DEFAULT_ARGV))
    km = kernel_manager(manager, "gpudev-gpu")
    # When its kernel is started
    with pytest.raises(provisioner.KernelLaunchError) as caught:
        await km.start_kernel()
    # Then the user is told what failed, not what the engine said (that is only logged), and
    # no container or lease is left
    message = caught.value.error.message
    assert message.startswith("Starting the kernel in ")
    assert "failed: the Docker engine refused it (APIError)" in message
    assert "exec refused by the engine" not in message
    assert manager.ledger.active("local") == []
    assert kernel_containers(docker_client, manager) == []
    # And a kernel that fails in a shared container leaves its count (the container stops
    # with its last kernel, as after a shutdown)
    manager.start(StartRequest(environment="default", name="shared-fail"))
    shared = kernel_manager(manager, SHARED_PREFIX + "shared-fail")
    with pytest.raises(provisioner.KernelLaunchError):
        await shared.start_kernel()
    assert PLACEMENTS.kernels_in(("local", "shared-fail")) == frozenset()
    assert state(docker_client, "shared-fail") == "exited"


def test_a_pin_is_not_inherited_by_a_new_container_of_the_same_name(
    manager: DevContainers, docker_client: docker.DockerClient
) -> None:
    # Given a pinned shared container removed behind gpudev's back
    manager.start(StartRequest(environment="default", name="pinbox", gpus=0))
    assert manager.pin("pinbox").pinned is True
    docker_client.containers.get(docker_name("pinbox")).remove(force=True)
    # When a new one of that name starts, then it is not pinned (it would never stop)
    assert manager.start(StartRequest(environment="default", name="pinbox", gpus=0)).pinned is False
    assert "pinbox" not in manager.ledger.pinned("local")
