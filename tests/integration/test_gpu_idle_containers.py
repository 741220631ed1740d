"""Dev containers whose GPUs do no work are stopped, kept, their GPUs freed
(``containers.gpu_idle``, ``c.GPUIdleContainers``): real dev containers on the real engine
holding the fake nvidia-smi's A100s, whose utilisation each test sets; the looks are made by
hand, on a clock the test moves (the reclaim's own clock, its only seam)."""

from __future__ import annotations

import asyncio
import json
import shutil
from collections.abc import Awaitable, Callable, Iterator
from pathlib import Path
from typing import Any

import docker
import pytest
from tornado.httpclient import HTTPResponse

from jupyter_gpudev.containers import DevContainerInfo, DevContainers, StartRequest
from jupyter_gpudev.containers.gpu_idle import GPUIdleContainers
from jupyter_gpudev.containers.usage import GPUUse
from jupyter_gpudev.shared.authority import Authority
from tests.conftest import FIXTURES
from tests.integration.shared_views import close, new_service, service_config

pytestmark = pytest.mark.integration

SETTING = "c.GPUIdleContainers.timeout"


class Clock:
    """The reclaim's monotonic clock, moved by the test."""

    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


@pytest.fixture
def utilisation(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Callable[..., None]:
    """Sets what the fake nvidia-smi says of each GPU's utilisation (by UUID; every other
    GPU 0 %): a copy of its two A100s in the test's folder."""
    folder = tmp_path / "smi"
    shutil.copytree(FIXTURES / "smi" / "two-a100", folder)
    rows = (folder / "query.csv").read_text().splitlines()

    def set_to(busy: dict[str, int] | None = None, *, readable: bool = True) -> None:
        monkeypatch.setenv("FAKE_NVIDIA_SMI_DIR", str(folder))
        lines = []
        for row in rows:
            fields = row.split(", ")
            fields[5] = str((busy or {}).get(fields[1], 0))
            lines.append(", ".join(fields))
        (folder / "query.csv").write_text("\n".join(lines) + "\n")
        if readable:
            (folder / "exit").unlink(missing_ok=True)
        else:  # the driver does not answer
            (folder / "exit").write_text("9")

    set_to()
    return set_to


def idle_reclaim(manager: DevContainers, clock: Clock, **settings: Any) -> GPUIdleContainers:
    return GPUIdleContainers(manager, GPUUse(manager), monotonic=clock, **settings)


def listed(manager: DevContainers, name: str) -> DevContainerInfo:
    (info,) = [info for info in manager.list(all_states=True) if info.name == name]
    return info


def test_a_dev_container_whose_gpu_does_no_work_is_warned_of_then_stopped_and_kept(
    manager: DevContainers,
    gpu_engine: None,
    utilisation: Callable[..., None],
    docker_client: docker.DockerClient,
) -> None:
    # Given two dev containers holding a GPU each, one of whose GPUs works
    clock = Clock()
    reclaim = idle_reclaim(manager, clock, timeout=600.0, warning_seconds=120.0)
    idle = manager.start(StartRequest(environment="default", name="idle-box", gpus=1))
    busy = manager.start(StartRequest(environment="default", name="busy-box", gpus=1))
    utilisation({busy.gpu_uuids[0]: 40})
    # When the reclaim looks, then again 500 s later (100 s before the timeout)
    assert reclaim.look() == []
    assert listed(manager, "idle-box").warnings == ()
    clock.now += 500
    assert reclaim.look() == []
    # Then the idle one's listing says when it will be stopped and by which setting
    (warning,) = listed(manager, "idle-box").warnings
    assert "no work for 8 min" in warning
    assert "will be stopped" in warning
    assert SETTING in warning
    assert listed(manager, "busy-box").warnings == ()
    # When its GPU has done nothing for the whole timeout
    clock.now += 101
    assert reclaim.look() == ["idle-box"]
    # Then it is stopped and kept, its lease released, its listing says why
    after = listed(manager, "idle-box")
    assert after.state == "exited"
    assert after.lease_id is None
    assert manager.ledger.for_container("local", "idle-box") is None
    (why,) = after.warnings
    assert "Stopped at" in why
    assert "did no work for 10 min" in why
    assert SETTING in why
    assert docker_client.containers.get(idle.container_id).status == "exited"
    # And the busy one runs on, holding its GPU
    running = listed(manager, "busy-box")
    assert running.state == "running"
    assert running.lease_id == busy.lease_id
    # And resumed, the stopped one says nothing more of it
    manager.resume("idle-box")
    assert listed(manager, "idle-box").warnings == ()


def test_work_at_one_look_starts_the_idle_time_again(
    manager: DevContainers, gpu_engine: None, utilisation: Callable[..., None]
) -> None:
    # Given a dev container whose GPU did no work for most of the timeout
    clock = Clock()
    reclaim = idle_reclaim(manager, clock, timeout=600.0, warning_seconds=0.0)
    info = manager.start(StartRequest(environment="default", name="bursty", gpus=1))
    reclaim.look()
    clock.now += 590
    reclaim.look()
    # When its GPU works at one look
    utilisation({info.gpu_uuids[0]: 3})
    clock.now += 5
    reclaim.look()
    # Then it is not stopped a timeout after it first did nothing, only a timeout after
    utilisation()
    clock.now += 10
    assert reclaim.look() == []
    clock.now += 599
    assert reclaim.look() == []
    clock.now += 2
    assert reclaim.look() == ["bursty"]


def test_a_gpu_whose_use_cannot_be_read_is_never_counted_idle(
    manager: DevContainers, gpu_engine: None, utilisation: Callable[..., None]
) -> None:
    # Given a dev container holding a GPU, and a driver that no longer answers
    clock = Clock()
    reclaim = idle_reclaim(manager, clock, timeout=60.0, warning_seconds=0.0)
    manager.start(StartRequest(environment="default", name="unread", gpus=1))
    utilisation(readable=False)
    # When the reclaim looks, long past the timeout
    for _ in range(3):
        assert reclaim.look() == []
        clock.now += 120
    # Then the container runs on, its GPU held
    info = listed(manager, "unread")
    assert info.state == "running"
    assert info.lease_id is not None


def test_a_container_made_for_one_kernel_is_left_to_the_kernels_reclaim(
    manager: DevContainers, gpu_engine: None, utilisation: Callable[..., None]
) -> None:
    # Given a container made for one kernel, holding a GPU that does nothing
    clock = Clock()
    reclaim = idle_reclaim(manager, clock, timeout=60.0, warning_seconds=30.0)
    request = StartRequest(environment="default", name="kernel-k1", gpus=1, kernel_id="k1")
    manager.start(request)
    # When the reclaim looks, past the timeout
    reclaim.look()
    clock.now += 120
    # Then it neither warns nor stops it (c.GPUCuller reclaims kernels, warning in Lab)
    assert reclaim.look() == []
    info = listed(manager, "kernel-k1")
    assert (info.state, info.warnings) == ("running", ())


def test_off_by_default(
    manager: DevContainers, gpu_engine: None, utilisation: Callable[..., None]
) -> None:
    clock = Clock()
    reclaim = idle_reclaim(manager, clock)
    manager.start(StartRequest(environment="default", name="kept-on", gpus=1))
    assert reclaim.timeout == 0
    for _ in range(3):
        assert reclaim.look() == []
        clock.now += 10**6
    assert listed(manager, "kept-on").state == "running"


@pytest.fixture
def service(
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    docker_client: docker.DockerClient,
    utilisation: Callable[..., None],  # the GPUs it reads
) -> Iterator[Authority]:
    config = service_config(tmp_path, monkeypatch)
    config.GPUInventory.cache_seconds = 0.0
    config.GPUIdleContainers.timeout = 600.0
    config.GPUIdleContainers.warning_seconds = 120.0
    held = new_service(tmp_path, config)
    monkeypatch.setenv("FAKE_NVIDIA_SMI_DIR", str(tmp_path / "smi"))
    yield held
    close(held, docker_client)


def test_the_shared_service_stops_a_users_gpu_idle_container_and_tells_them(
    service: Authority, gpu_engine: None
) -> None:
    # Given alice's dev container holding a GPU that does nothing, in the shared service
    alice = service.for_user("gpudev-alice").containers
    alice.start(StartRequest(environment="default", name="forgotten", gpus=1))
    clock = Clock()
    reclaim = service.service.gpu_idle
    reclaim._monotonic = clock  # its clock, the one seam
    # When the service's reclaim (the administrator's setting) looks over the timeout
    reclaim.look()
    clock.now += 500
    reclaim.look()
    # Then alice's own listing warns her, and bob's container of the same name says nothing
    (warning,) = listed(alice, "forgotten").warnings
    assert "will be stopped" in warning
    bob = service.for_user("gpudev-bob").containers
    bob.start(StartRequest(environment="default", name="forgotten"))
    assert listed(bob, "forgotten").warnings == ()
    clock.now += 101
    assert len(reclaim.look()) == 1
    # And then says it was stopped; her container is kept, its GPU free for others
    info = listed(alice, "forgotten")
    assert info.state == "exited"
    assert info.lease_id is None
    assert "Stopped at" in info.warnings[0]
    assert listed(bob, "forgotten").warnings == ()
    assert len(bob.start(StartRequest(environment="default", name="his", gpus=2)).gpu_uuids) == 2


@pytest.fixture
def gpudev_config(gpudev_config: dict[str, Any]) -> dict[str, Any]:
    """The test server's: the reclaim on, looking every half second (the server's own)."""
    return {
        **gpudev_config,
        "GPUIdleContainers": {"timeout": 3.0, "warning_seconds": 2.0, "check_interval": 0.5},
        "GPUInventory": {"cache_seconds": 0.0},
    }


async def test_the_server_runs_the_reclaim_it_is_configured_with(
    jp_fetch: Callable[..., Awaitable[HTTPResponse]],
    gpu_engine: None,
    utilisation: Callable[..., None],
    docker_client: docker.DockerClient,
) -> None:
    # Given a real Jupyter server with gpudev whose reclaim is on, and a dev container started
    # through its API holding a GPU that does nothing
    body = json.dumps({"environment": "default", "name": "served-idle", "gpus": 1})
    started = json.loads(
        (await jp_fetch("gpudev", "api", "containers", method="POST", body=body)).body
    )
    try:
        # When the server's own looks have seen it idle past the timeout
        # (its lease is released once it has really stopped: a listing between shows it
        # stopped with its lease)
        async def reclaimed() -> bool:
            answer = await jp_fetch("gpudev", "api", "containers", "served-idle")
            info = json.loads(answer.body)
            return info["state"] != "running" and info["lease_id"] is None

        for _ in range(120):
            if await reclaimed():
                break
            await asyncio.sleep(0.25)
        # Then it was stopped and kept, its lease released, its listing saying why
        info = json.loads((await jp_fetch("gpudev", "api", "containers", "served-idle")).body)
        assert info["state"] == "exited"
        assert info["lease_id"] is None
        assert any("c.GPUIdleContainers.timeout" in w for w in info["warnings"])
    finally:
        docker_client.containers.get(started["container_id"]).remove(force=True)
