"""GPU use per kernel, on the real engine with the fake GPUs: a real gpudev kernel's real host
process, listed by the fake nvidia-smi as holding GPU memory, is that kernel's in
``GET /gpudev/api/usage``, in its badge's ``?kernel=ID``, in ``jupyter gpudev top --json`` and
in the server's ``/metrics``; another user sees it as "another user's", without its kernel. In
a shared dev container, a process its kernel left (re-parented to the container's init) is
"left behind", and a process of the kernel's tree is the kernel's, its host PID the engine's."""

from __future__ import annotations

import asyncio
import json
import os
import time
from collections.abc import Awaitable, Callable, Iterator
from pathlib import Path
from typing import Any

import docker
import pytest
from prometheus_client.parser import text_string_to_metric_families
from tornado.httpclient import HTTPClientError, HTTPResponse

from jupyter_gpudev.access import Caller
from jupyter_gpudev.containers import DevContainers, StartRequest
from jupyter_gpudev.containers.usage import GPUUse
from jupyter_gpudev.errors import NotFound
from jupyter_gpudev.handlers.base import SETTINGS_KEY
from jupyter_gpudev.kernels.kernelspecs import SHARED_PREFIX
from jupyter_gpudev.kernels.live import KernelPlacement, KernelRegistry
from jupyter_gpudev.kernels.process import ContainerProcesses
from jupyter_gpudev.labels import L_MANAGED, L_WORKSPACE
from jupyter_gpudev.services import Services
from tests.conftest import FIXTURES
from tests.integration.test_cli import gpudev
from tests.integration.test_gpu_usage import listed_by_the_driver, processes_on

Fetch = Callable[..., Awaitable[HTTPResponse]]

pytestmark = [pytest.mark.integration, pytest.mark.usefixtures("gpu_engine")]


@pytest.fixture
def gpudev_config(gpudev_config: dict[str, Any]) -> dict[str, Any]:
    # Each read of the GPUs' processes is fresh: the test lists them after the kernel starts.
    return {**gpudev_config, "GPUInventory": {"cache_seconds": 0.0}}


@pytest.fixture
def gpu_environment(jp_root_dir: Path, docker_client: docker.DockerClient) -> Iterator[None]:
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


def process_with_argument(argument: str) -> int:
    """The host PID of the one process of this machine with ``argument`` in its command line
    (read from /proc by the test itself, not by gpudev)."""
    found = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            argv = Path(f"/proc/{entry}/cmdline").read_bytes().split(b"\0")
        except OSError:
            continue
        if argument.encode() in argv:
            found.append(int(entry))
    assert len(found) == 1, found
    return found[0]


async def wait_for_pid(argument: str, timeout: float = 30) -> int:
    deadline = time.monotonic() + timeout
    while True:
        try:
            return process_with_argument(argument)
        except AssertionError:
            if time.monotonic() > deadline:
                raise
            await asyncio.sleep(0.2)


@pytest.mark.usefixtures("gpu_environment")
async def test_a_kernels_gpu_memory_is_its_own_in_usage_its_badge_top_and_metrics(
    jp_fetch: Fetch,
    jp_serverapp: Any,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # Given a gpudev kernel with a GPU of its own, whose process (found here by its connection
    # file in its command line) the driver lists as holding 3 GiB of that GPU
    response = await jp_fetch(
        "api", "kernels", method="POST", body=json.dumps({"name": "gpudev-gpu"})
    )
    kernel_id = json.loads(response.body)["id"]
    pid = await wait_for_pid(f"/tmp/.gpudev/kernel-{kernel_id}.json")
    info = json.loads((await jp_fetch("gpudev", "api", "kernels", kernel_id)).body)
    (gpu,) = info["gpu_uuids"]
    apps = listed_by_the_driver(tmp_path, monkeypatch, (gpu, pid, 3072))

    # When its user asks what the GPUs are doing
    usage = json.loads((await jp_fetch("gpudev", "api", "usage")).body)
    # Then that process is the kernel's, in its container, and the kernel is listed
    (process,) = processes_on(usage["hosts"], gpu)
    assert (process["kernel"], process["container"], process["pid"], process["orphan"]) == (
        kernel_id,
        info["container"],
        pid,
        False,
    )
    (local,) = [host for host in usage["hosts"] if host["host"] == "local"]
    assert [k["kernel"] for k in local["kernels"]] == [kernel_id]

    # When the notebook's badge asks for the kernel
    badge = json.loads(
        (await jp_fetch("gpudev", "api", "usage", params={"kernel": kernel_id})).body
    )
    # Then it has the kernel's memory on its GPU, and the whole GPU's
    kernel = badge["kernel"]
    assert (kernel["id"], kernel["host"], kernel["container"], kernel["reason"]) == (
        kernel_id,
        "local",
        info["container"],
        None,
    )
    (on_gpu,) = kernel["gpus"]
    assert set(on_gpu) == {
        "uuid",
        "index",
        "name",
        "memory_used_mib",
        "sm_percent",
        "memory_percent",
        "gpu_memory_used_mib",
        "gpu_memory_total_mib",
        "gpu_utilization_percent",
    }
    assert (on_gpu["uuid"], on_gpu["memory_used_mib"], on_gpu["sm_percent"]) == (gpu, 3072, None)
    assert on_gpu["gpu_memory_total_mib"] > 0
    # And the kernel routes' form answers the same
    again = await jp_fetch("gpudev", "api", "kernels", kernel_id, "usage")
    assert json.loads(again.body)["kernel"]["gpus"][0]["memory_used_mib"] == 3072

    # And an unknown kernel is a 404
    with pytest.raises(HTTPClientError) as caught:
        await jp_fetch("gpudev", "api", "usage", params={"kernel": "0123abcd-0000"})
    assert caught.value.code == 404
    assert caught.value.response is not None
    assert "of yours" in json.loads(caught.value.response.body)["message"]

    # And another user sees the process as another user's: no container, PID or kernel
    services = jp_serverapp.web_app.settings[SETTINGS_KEY]
    assert isinstance(services, Services)
    theirs = await asyncio.get_running_loop().run_in_executor(
        None, lambda: services.usage.usage(caller=Caller("somebody-else"))
    )
    (seen,) = processes_on(theirs, gpu)
    assert (seen["kind"], seen["kernel"], seen["container"], seen["pid"]) == (
        "another user",
        None,
        None,
        None,
    )
    assert all(not host.kernels for host in theirs)
    # And asking for the kernel as them is the unknown kernel's 404, word for word
    with pytest.raises(NotFound) as refused:
        await asyncio.get_running_loop().run_in_executor(
            None, lambda: services.usage.kernel_usage(kernel_id, caller=Caller("somebody-else"))
        )
    unknown = json.loads(caught.value.response.body)["message"]
    assert refused.value.message == unknown.replace("0123abcd-0000", kernel_id)

    # When Prometheus scrapes the server's /metrics
    scraped = (await jp_fetch("metrics")).body.decode()
    # Then the container's memory on the GPU is a gauge, by host, GPU, container and owner
    families = {f.name: f for f in text_string_to_metric_families(scraped)}
    memory = [
        (sample.labels, sample.value) for sample in families["gpudev_gpu_memory_used_mib"].samples
    ]
    owner = services.containers.access.local().name
    assert memory == [
        ({"host": "local", "gpu": gpu, "container": info["container"], "owner": owner}, 3072.0)
    ]
    assert [s.labels for s in families["gpudev_gpu_leases"].samples] == [{"user": owner}]
    assert [s.labels["kernel"] for s in families["gpudev_kernel_idle_seconds"].samples] == [
        kernel_id
    ]

    # And `jupyter gpudev top --json`, a process of its own without the server's kernels,
    # tells the kernel by the container made for it
    env = {
        "FAKE_NVIDIA_SMI_DIR": str(FIXTURES / "smi" / "two-a100"),
        "FAKE_NVIDIA_SMI_APPS": str(apps),
    }
    top = await asyncio.get_running_loop().run_in_executor(
        None, lambda: gpudev("top", "--json", env=env)
    )
    assert top.returncode == 0, top.stderr
    (listed,) = processes_on(json.loads(top.stdout)["hosts"], gpu)
    assert (listed["kernel"], listed["memory_used_mib"]) == (kernel_id, 3072)
    await jp_fetch("api", "kernels", kernel_id, method="DELETE")


@pytest.mark.usefixtures("gpu_environment")
async def test_a_kernel_in_a_shared_container_is_told_by_its_host_pid(
    jp_fetch: Fetch, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Given a shared dev container with a GPU and two kernels in it, the first one's process
    # listed by the driver as holding 2 GiB, a process of the container's own 1 GiB
    created = await jp_fetch(
        "gpudev",
        "api",
        "containers",
        method="POST",
        body=json.dumps({"environment": "gpu", "name": "shared-gpu"}),
    )
    container = json.loads(created.body)
    (gpu,) = container["gpu_uuids"]
    kernel_ids = []
    for _ in range(2):
        response = await jp_fetch(
            "api", "kernels", method="POST", body=json.dumps({"name": SHARED_PREFIX + "shared-gpu"})
        )
        kernel_ids.append(json.loads(response.body)["id"])
    first, second = kernel_ids
    pid = await wait_for_pid(f"/tmp/.gpudev/kernel-{first}.json")
    listed_by_the_driver(
        tmp_path, monkeypatch, (gpu, pid, 2048), (gpu, container_init(container), 1024)
    )
    # When the kernels' user asks
    usage = json.loads((await jp_fetch("gpudev", "api", "usage")).body)
    # Then the first kernel's process is its, the container's own process no kernel's
    seen = {p["pid"]: p["kernel"] for p in processes_on(usage["hosts"], gpu)}
    assert seen == {pid: first, container_init(container): None}
    # And each kernel's badge has its own share of the GPU
    for kernel_id, mib in ((first, 2048), (second, 0)):
        answer = await jp_fetch("gpudev", "api", "usage", params={"kernel": kernel_id})
        (on_gpu,) = json.loads(answer.body)["kernel"]["gpus"]
        assert (on_gpu["uuid"], on_gpu["memory_used_mib"]) == (gpu, mib)
    for kernel_id in kernel_ids:
        await jp_fetch("api", "kernels", kernel_id, method="DELETE")


def container_init(container: dict[str, Any]) -> int:
    """The host PID of a dev container's init, as the engine reports it."""
    client = docker.from_env()
    try:
        return int(client.containers.get(container["container_id"]).attrs["State"]["Pid"])
    finally:
        client.close()


def exec_detached(container: Any, argv: list[str]) -> str:
    """Start ``argv`` in ``container`` as the kernel provisioner does: one detached exec."""
    exec_id = str(container.client.api.exec_create(container.id, argv)["Id"])
    container.client.api.exec_start(exec_id, detach=True)
    return exec_id


def host_pids_of(container: Any, command: str, timeout: float = 10) -> list[int]:
    """The host PIDs of ``container``'s processes running ``command`` (``docker top``)."""
    deadline = time.monotonic() + timeout
    while True:
        top = container.top(ps_args="-eo pid,args")
        found = [int(row[0]) for row in top["Processes"] if row[1] == command]
        if found or time.monotonic() > deadline:
            return found
        time.sleep(0.1)


def test_in_a_shared_container_a_kernels_child_is_its_and_a_process_it_left_is_left_behind(
    manager: DevContainers,
    docker_client: docker.DockerClient,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # Given a shared dev container with a GPU, a "kernel" started in it as the provisioner
    # starts one (a detached exec: a shell whose child holds GPU memory), and a process a
    # former kernel left (its shell ended: re-parented to the container's init)
    info = manager.start(StartRequest(environment="default", name="shared-box", gpus=1))
    (gpu,) = info.gpu_uuids
    container = docker_client.containers.get(info.container_id)
    kernel_exec = exec_detached(container, ["/bin/sh", "-c", "sleep 601; true"])
    exec_detached(container, ["/bin/sh", "-c", "sleep 602 & exit 0"])
    (child,) = host_pids_of(container, "sleep 601")
    (left,) = host_pids_of(container, "sleep 602")
    # And the server knows the kernel by the host PID the engine reports for its exec
    kernel_pid = ContainerProcesses(manager.host_pool.get("local"), container).host_pid(kernel_exec)
    assert kernel_pid is not None
    assert kernel_pid not in (child, left)
    registry = KernelRegistry()
    registry.add(KernelPlacement("k-shared", "local", info.key, False, host_pid=kernel_pid))
    listed_by_the_driver(tmp_path, monkeypatch, (gpu, child, 1024), (gpu, left, 512))
    # When its owner asks what the GPU is doing
    seen = processes_on(GPUUse(manager, kernels=registry).usage(), gpu)
    # Then the kernel's child is the kernel's, and the other process is left behind
    by_pid = {p["pid"]: (p["kernel"], p["orphan"], p["memory_used_mib"]) for p in seen}
    assert by_pid == {child: ("k-shared", False, 1024), left: (None, True, 512)}
    # And once the kernel has ended, its child is left behind too
    registry.remove("k-shared")
    after = processes_on(GPUUse(manager, kernels=registry).usage(), gpu)
    assert {p["pid"]: (p["kernel"], p["orphan"]) for p in after} == {
        child: (None, True),
        left: (None, True),
    }
