"""Warm kernels: started ahead in running shared dev containers, handed out once, on the real
engine through jupyter_client and a real Jupyter server."""

from __future__ import annotations

import asyncio
import json
import socket
import subprocess
import sys
import time
from collections.abc import Awaitable, Callable, Iterator
from pathlib import Path
from typing import Any

import docker
import pytest
from tornado.httpclient import HTTPResponse

from jupyter_gpudev.containers import DevContainers, StartRequest, docker_name, reconcile
from jupyter_gpudev.kernels import provisioner
from jupyter_gpudev.kernels.kernelspecs import SHARED_PREFIX
from jupyter_gpudev.kernels.placements import PLACEMENTS
from jupyter_gpudev.kernels.warm import WarmKernels
from tests.integration.conftest import remove_containers
from tests.integration.test_kernels import kernel_manager, manager, run
from tests.integration.test_remote_hosts import make_manager
from tests.integration.test_shared_kernels import gpu_environment, started, state
from tests.sshd import SSHServer

pytestmark = pytest.mark.integration

__all__ = ["manager"]  # the fixture

Fetch = Callable[..., Awaitable[HTTPResponse]]


@pytest.fixture
def warm() -> Iterator[WarmKernels]:
    pool = WarmKernels()
    PLACEMENTS.warm = pool
    yield pool
    PLACEMENTS.warm = None
    pool.close()


def wait_ready(pool: WarmKernels, key: tuple[str, str], count: int = 1) -> None:
    deadline = time.monotonic() + 90
    while pool.ready(key) < count:
        assert time.monotonic() < deadline, "no warm kernel became ready"
        time.sleep(0.1)


def kernel_pids(docker_client: docker.DockerClient, name: str) -> set[str]:
    """The pids of the ipykernel processes in a container."""
    top = docker_client.containers.get(docker_name(name)).top(ps_args="-eo pid,args")
    return {row[0] for row in top["Processes"] if "ipykernel" in row[-1]}


async def test_a_kernel_in_a_pinned_container_is_a_warm_one_in_the_notebook_folder(
    manager: DevContainers, docker_client: docker.DockerClient, warm: WarmKernels
) -> None:
    # Given a pinned shared container with one warm kernel ready in it
    manager.start(StartRequest(environment="default", name="warmbox"))
    manager.pin("warmbox")
    key = ("local", "warmbox")
    warm.fill_pinned(manager)
    wait_ready(warm, key)
    ready_pids = kernel_pids(docker_client, "warmbox")
    assert len(ready_pids) == 1
    # When a kernel is started in it from a notebook in notebooks/
    km = kernel_manager(manager, SHARED_PREFIX + "warmbox")
    await km.start_kernel(
        cwd=str(manager.root_dir / "notebooks"), env={"JPY_SESSION_NAME": "notebooks/a.ipynb"}
    )
    client = km.client()
    client.start_channels()
    try:
        await client.wait_for_ready(timeout=30)
        # Then it is the warm kernel (the process that was ready), in the notebook's folder,
        # with the notebook's session name, and it runs code like any kernel
        out, reply = await run(
            client, "import os; print(os.getpid(), os.getcwd(), os.environ['JPY_SESSION_NAME'])"
        )
        assert reply["status"] == "ok", reply
        pid, cwd, session = out.split()
        runtime_id = km.provisioner.runtime_id  # type: ignore[union-attr]
        assert runtime_id.startswith("warm-")
        container = docker_client.containers.get(docker_name("warmbox"))
        _, pid_file = container.exec_run(["cat", f"/tmp/.gpudev/{runtime_id}.pid"])
        assert isinstance(pid_file, bytes)
        assert pid_file.decode().strip() == pid
        assert ready_pids <= kernel_pids(docker_client, "warmbox")
        assert cwd == f"/workspaces/{manager.root_dir.name}/notebooks"
        assert session == "notebooks/a.ipynb"
        assert reply["execution_count"] == 1  # the preparation left no trace in its history
        # And a fresh warm kernel is prepared for the next start
        wait_ready(warm, key)
        assert len(kernel_pids(docker_client, "warmbox")) == 2
        # And the taken kernel is interrupted and restarted like any kernel
        await km.interrupt_kernel()
        await km.restart_kernel()
        await client.wait_for_ready(timeout=60)
        out, _ = await run(client, "print(6 * 7)")
        assert out.strip() == "42"
    finally:
        client.stop_channels()
        await km.shutdown_kernel()
    # When its kernel ends, the pinned container keeps only its warm kernel
    assert state(docker_client, "warmbox") == "running"
    assert len(kernel_pids(docker_client, "warmbox")) == 1


async def test_a_warm_kernel_never_keeps_a_shared_gpu_container_running(
    manager: DevContainers,
    docker_client: docker.DockerClient,
    warm: WarmKernels,
    gpu_engine: None,
) -> None:
    # Given a shared GPU container (not pinned) whose kernel made a warm one start beside it
    gpu_environment(manager.root_dir)
    manager.start(StartRequest(environment="gpu", name="warmgpu"))
    km = kernel_manager(manager, SHARED_PREFIX + "warmgpu")
    (await started(km)).stop_channels()
    wait_ready(warm, ("local", "warmgpu"))
    # When its last kernel ends
    await km.shutdown_kernel()
    # Then the container stops and its GPU is free: the warm kernel is not one of its kernels
    assert state(docker_client, "warmgpu") == "exited"
    assert manager.ledger.for_container("local", "warmgpu") is None
    # And a kernel started in it again starts it again, without a dead warm kernel
    again = kernel_manager(manager, SHARED_PREFIX + "warmgpu")
    client = await started(again)
    try:
        out, _ = await run(client, "print('back')")
        assert out.strip() == "back"
    finally:
        client.stop_channels()
        await again.shutdown_kernel()


async def test_a_dead_warm_kernel_is_not_handed_out(
    manager: DevContainers, docker_client: docker.DockerClient, warm: WarmKernels
) -> None:
    # Given a warm kernel that died (killed inside its container)
    manager.start(StartRequest(environment="default", name="warmdead"))
    manager.pin("warmdead")
    warm.fill_pinned(manager)
    wait_ready(warm, ("local", "warmdead"))
    container = docker_client.containers.get(docker_name("warmdead"))
    code, _ = container.exec_run(["/bin/sh", "-c", 'kill -KILL "$(cat /tmp/.gpudev/warm-*.pid)"'])
    assert code == 0
    # When a kernel is started in its container
    km = kernel_manager(manager, SHARED_PREFIX + "warmdead")
    client = await started(km)
    try:
        # Then a kernel is started as usual, and runs code
        assert km.provisioner.runtime_id == f"kernel-{km.kernel_id}"  # type: ignore[union-attr]
        out, reply = await run(client, "print('fresh')")
        assert reply["status"] == "ok"
        assert out.strip() == "fresh"
    finally:
        client.stop_channels()
        await km.shutdown_kernel()


def test_warm_kernels_a_crashed_server_left_are_stopped_by_the_next(
    manager: DevContainers, docker_client: docker.DockerClient, warm: WarmKernels
) -> None:
    # Given a warm kernel ready in a pinned container, recorded for a server process
    manager.start(StartRequest(environment="default", name="warmorphan"))
    manager.pin("warmorphan")
    warm.fill_pinned(manager)
    wait_ready(warm, ("local", "warmorphan"))
    assert len(kernel_pids(docker_client, "warmorphan")) == 1
    # When that server is gone (its process died without stopping it)
    dead = subprocess.Popen([sys.executable, "-c", "pass"])
    dead.wait()
    record = Path(manager.state_dir) / "warm-kernels.json"
    entries = json.loads(record.read_text())
    assert len(entries) == 1
    gone = f"{socket.gethostname()}:{dead.pid}:0:{reconcile.boot_id()}"
    record.write_text(
        json.dumps({k: {**v, "pid": dead.pid, "process": gone} for k, v in entries.items()})
    )
    # Then the next server stops it when it starts, and forgets it
    assert WarmKernels().stop_orphans(manager) == list(entries)
    deadline = time.monotonic() + 10
    while kernel_pids(docker_client, "warmorphan"):
        assert time.monotonic() < deadline
        time.sleep(0.1)
    assert json.loads(record.read_text()) == {}


async def test_no_warm_kernels_when_the_count_is_zero(
    manager: DevContainers, docker_client: docker.DockerClient, warm: WarmKernels
) -> None:
    warm.count = 0
    manager.start(StartRequest(environment="default", name="warmoff"))
    manager.pin("warmoff")
    warm.fill_pinned(manager)
    km = kernel_manager(manager, SHARED_PREFIX + "warmoff")
    (await started(km)).stop_channels()
    await asyncio.sleep(1.0)
    assert warm.ready(("local", "warmoff")) == 0
    assert len(kernel_pids(docker_client, "warmoff")) == 1
    await km.shutdown_kernel()


@pytest.fixture
def gpudev_config(gpudev_config: dict[str, Any]) -> dict[str, Any]:
    return {**gpudev_config, "WarmKernels": {"count": 1}}


async def test_pinning_through_the_api_warms_a_kernel_the_picker_start_takes(
    jp_fetch: Fetch,
    jp_serverapp: Any,
    docker_client: docker.DockerClient,
) -> None:
    # Given a shared dev container started and pinned through the REST API
    body = json.dumps({"environment": "default", "name": "warmapi"})
    await jp_fetch("gpudev", "api", "containers", method="POST", body=body)
    try:
        await jp_fetch("gpudev", "api", "containers", "warmapi", "pin", method="PUT", body="")
        pool = PLACEMENTS.warm
        assert isinstance(pool, WarmKernels)
        deadline = time.monotonic() + 90
        while pool.ready(("local", "warmapi")) < 1:
            assert time.monotonic() < deadline
            await asyncio.sleep(0.1)
        # When a kernel is started in it through the REST API
        name = SHARED_PREFIX + "warmapi"
        kernel = json.loads(
            (await jp_fetch("api", "kernels", method="POST", body=json.dumps({"name": name}))).body
        )
        # Then it was the warm one
        provisioner = jp_serverapp.kernel_manager.get_kernel(kernel["id"]).provisioner
        assert provisioner.runtime_id.startswith("warm-")
        await jp_fetch("api", "kernels", kernel["id"], method="DELETE")
    finally:
        for container in docker_client.containers.list(
            all=True, filters={"name": docker_name("warmapi")}
        ):
            container.remove(force=True)


async def test_warm_kernels_on_an_ssh_host_are_reached_and_closed_through_forwards(
    tmp_path: Path,
    ssh_server: SSHServer,
    remote_smi: Path,
    docker_client: docker.DockerClient,
) -> None:
    # Given only an ssh:// host, with a pinned shared container on it and a warm kernel ready
    manager = make_manager(tmp_path, ssh_server, remote_smi, local=False)
    provisioner.set_manager(manager)
    pool = WarmKernels()
    PLACEMENTS.warm = pool
    far = manager.host_pool.get("far")
    assert far.tunnels is not None
    try:
        manager.start(StartRequest(environment="default", name="farwarm", host="far"))
        manager.pin("farwarm")
        pool.fill_pinned(manager)
        wait_ready(pool, ("far", "farwarm"))
        assert len(far.tunnels.active()) == 5  # its ports, forwarded
        # When a kernel is started in it
        km = kernel_manager(manager, SHARED_PREFIX + "farwarm")
        client = await started(km)
        try:
            # Then it is the warm one, reached through the forwards, and runs code
            assert km.provisioner.runtime_id.startswith("warm-")  # type: ignore[union-attr]
            assert km.get_connection_info()["ip"] == "127.0.0.1"
            out, _ = await run(client, "print(6 * 7)")
            assert out.strip() == "42"
        finally:
            client.stop_channels()
            await km.shutdown_kernel()
        # When the pool is closed (the server stops), after its next warm kernel was ready
        wait_ready(pool, ("far", "farwarm"))
        pool.close(manager)
        # Then no forward is left
        assert far.tunnels.active() == []
    finally:
        PLACEMENTS.warm = None
        provisioner.set_manager(None)
        remove_containers(docker_client, manager)
