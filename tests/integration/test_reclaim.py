"""Idle GPU kernels are reclaimed through a real Jupyter server: warning, keep, busy, reclaim."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Awaitable, Callable, Iterator
from pathlib import Path
from typing import Any

import docker
import pytest
from tornado.httpclient import HTTPClientError, HTTPResponse

from jupyter_gpudev.containers import docker_name
from jupyter_gpudev.labels import L_MANAGED, L_WORKSPACE
from tests.integration.test_gpu_usage import listed_by_the_driver
from tests.integration.test_kernel_gpu_usage import wait_for_pid

Fetch = Callable[..., Awaitable[HTTPResponse]]

pytestmark = [pytest.mark.integration, pytest.mark.usefixtures("gpu_engine")]


@pytest.fixture
def gpudev_config(gpudev_config: dict[str, Any]) -> dict[str, Any]:
    return {
        **gpudev_config,
        "GPUCuller": {"idle_timeout": 6.0, "warning_seconds": 4.0, "check_interval": 0.25},
        # Each look reads the GPUs' processes afresh (the test lists them once started).
        "GPUInventory": {"cache_seconds": 0.0},
    }


@pytest.fixture(autouse=True)
def _gpu_env(jp_root_dir: Path, docker_client: docker.DockerClient) -> Iterator[None]:
    folder = jp_root_dir / ".devcontainer" / "gpu"
    folder.mkdir(parents=True)
    (folder / "devcontainer.json").write_text(
        json.dumps({"image": "gpudev-python:bookworm", "hostRequirements": {"gpu": True}})
    )
    yield
    for container in docker_client.containers.list(
        all=True, filters={"label": [f"{L_MANAGED}=1", f"{L_WORKSPACE}={jp_root_dir.resolve()}"]}
    ):
        container.remove(force=True)


async def reclaims(jp_fetch: Fetch) -> list[dict[str, Any]]:
    body = json.loads((await jp_fetch("gpudev", "api", "reclaims")).body)
    result: list[dict[str, Any]] = body["reclaims"]
    return result


async def start_gpu_kernel(jp_fetch: Fetch) -> str:
    response = await jp_fetch(
        "api", "kernels", method="POST", body=json.dumps({"name": "gpudev-gpu"})
    )
    kernel_id: str = json.loads(response.body)["id"]
    return kernel_id


async def wait_for(condition: Callable[[], Awaitable[bool]], timeout: float = 30) -> None:
    deadline = asyncio.get_running_loop().time() + timeout
    while not await condition():
        assert asyncio.get_running_loop().time() < deadline, "condition not met in time"
        await asyncio.sleep(0.2)


async def test_an_idle_gpu_kernel_is_announced_kept_then_reclaimed(
    jp_fetch: Fetch, docker_client: docker.DockerClient
) -> None:
    # Given a GPU kernel that stays idle
    kernel_id = await start_gpu_kernel(jp_fetch)
    container = docker_name(f"kernel-{kernel_id}")
    assert await reclaims(jp_fetch) == []

    # When it has been idle for (timeout - warning), it is announced, with its GPU
    async def announced() -> bool:
        return [r["kernel_id"] for r in await reclaims(jp_fetch)] == [kernel_id]

    await wait_for(announced)
    (pending,) = await reclaims(jp_fetch)
    assert pending["gpu_uuids"]
    assert pending["container"] == f"kernel-{kernel_id}"
    # When the user keeps it, it is no longer announced (its idle time starts again)
    kept = await jp_fetch("gpudev", "api", "kernels", kernel_id, "keep", method="POST", body=b"")
    assert kept.code == 204
    assert await reclaims(jp_fetch) == []

    # When nobody keeps it again, it is reclaimed: the kernel is gone, the container stopped
    # but kept, and the GPU free
    async def reclaimed() -> bool:
        kernels = json.loads((await jp_fetch("api", "kernels")).body)
        return kernel_id not in [k["id"] for k in kernels]

    await wait_for(reclaimed)
    assert docker_client.containers.get(container).status == "exited"
    assert await reclaims(jp_fetch) == []


async def test_release_now_and_unknown_kernels(
    jp_fetch: Fetch, docker_client: docker.DockerClient
) -> None:
    kernel_id = await start_gpu_kernel(jp_fetch)
    released = await jp_fetch(
        "gpudev", "api", "kernels", kernel_id, "release", method="POST", body=b""
    )
    assert released.code == 204
    kernels = json.loads((await jp_fetch("api", "kernels")).body)
    assert kernel_id not in [k["id"] for k in kernels]
    assert docker_client.containers.get(docker_name(f"kernel-{kernel_id}")).status == "exited"
    with pytest.raises(HTTPClientError) as caught:
        await jp_fetch("gpudev", "api", "kernels", kernel_id, "keep", method="POST", body=b"")
    assert caught.value.code == 404


async def test_the_warning_says_what_the_kernel_holds_on_its_gpu(
    jp_fetch: Fetch, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Given an idle GPU kernel whose process the driver lists as holding 4.2 GiB of its GPU
    kernel_id = await start_gpu_kernel(jp_fetch)
    pid = await wait_for_pid(f"/tmp/.gpudev/kernel-{kernel_id}.json")
    (pending_gpu,) = json.loads((await jp_fetch("gpudev", "api", "kernels", kernel_id)).body)[
        "gpu_uuids"
    ]
    listed_by_the_driver(tmp_path, monkeypatch, (pending_gpu, pid, 4300))

    # When its reclaim is announced
    async def announced() -> bool:
        return [r["kernel_id"] for r in await reclaims(jp_fetch)] == [kernel_id]

    await wait_for(announced)
    # Then the warning says what it holds, on which GPU
    (pending,) = await reclaims(jp_fetch)
    assert pending["holds"].startswith("4.2 GiB on NVIDIA A100")
    assert "(GPU " in pending["holds"]
    await jp_fetch("api", "kernels", kernel_id, method="DELETE")
