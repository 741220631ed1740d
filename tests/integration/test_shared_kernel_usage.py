"""GPU use per kernel in shared mode (issue #33): the kernels the service runs for clients are
its usage's, by the id the client's server gave them, owner-scoped as everything else.

``jupyter gpudev serve`` runs as its own process (as in ``test_shared_restart``: a stand-in
JupyterHub API identifies the callers; the fake GPUs' driver lists the kernel's real host
process), and alice's server runs in client mode in this test's process, forwarding
``/gpudev/api/...`` to it. Her kernel's process, holding (fake) GPU memory, is her kernel's in
the service's usage and in her notebook badge's ``?kernel=ID`` through her server, also after
the service was SIGKILLed and started again; bob gets the unknown kernel's 404.
"""

from __future__ import annotations

import asyncio
import contextlib
import getpass
import json
import secrets
import time
import urllib.parse
import uuid
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import docker
import pytest
from tornado.httpclient import HTTPClientError, HTTPResponse

from jupyter_gpudev.containers import StartRequest
from jupyter_gpudev.errors import NotFound
from jupyter_gpudev.labels import L_KERNEL
from tests.conftest import FIXTURES
from tests.hub import request
from tests.integration.conftest import A100_0
from tests.integration.test_cli import gpudev
from tests.integration.test_gpu_usage import processes_on
from tests.integration.test_kernel_gpu_usage import wait_for_pid
from tests.integration.test_shared_restart import (
    ALICE,
    ALICE_TOKEN,
    BOB,
    BOB_TOKEN,
    Service,
    ServiceProcess,
    launch_body,
    service_process,
    services,
)

Fetch = Callable[..., Awaitable[HTTPResponse]]

pytestmark = pytest.mark.integration

__all__ = ["service_process", "services"]  # the fixtures, shared with test_shared_restart


@pytest.fixture
def apps(tmp_path: Path) -> Path:
    """The fake driver's process list (``FAKE_NVIDIA_SMI_APPS``): none until a test writes it."""
    listed = tmp_path / "compute-apps.csv"
    listed.write_text("")
    return listed


@pytest.fixture
def service(service_process: ServiceProcess, apps: Path) -> ServiceProcess:
    """The service, reading the GPUs' processes afresh at each request from ``apps``."""
    service_process.options.append("--GPUInventory.cache_seconds=0")
    service_process.extra_env = {"FAKE_NVIDIA_SMI_APPS": str(apps)}
    service_process.start()
    return service_process


@pytest.fixture
def gpudev_config(
    gpudev_config: dict[str, Any], service: ServiceProcess, monkeypatch: pytest.MonkeyPatch
) -> dict[str, Any]:
    # alice's server: client mode, its gpudev API the service's, as alice
    monkeypatch.setenv("JUPYTERHUB_API_TOKEN", ALICE_TOKEN)
    return {**gpudev_config, "GPUDevApp": {"service_url": service.url}}


def usage_of(service: ServiceProcess, token: str, kernel_id: str | None = None) -> Any:
    query = f"?{urllib.parse.urlencode({'kernel': kernel_id})}" if kernel_id else ""
    return request("GET", f"{service.url}/gpudev/api/usage{query}", token=token)


async def told_activity(service: ServiceProcess, kernel_id: str, timeout: float = 30) -> Any:
    """alice's usage from the service once it has the kernel's idle time (her server's poll
    tells it, every few seconds)."""
    deadline = time.monotonic() + timeout
    while True:
        status, usage = usage_of(service, ALICE_TOKEN)
        assert status == 200, usage
        kernels = [
            k for host in usage["hosts"] for k in host["kernels"] if k["kernel"] == kernel_id
        ]
        if kernels and kernels[0]["idle_seconds"] is not None:
            return usage
        assert time.monotonic() < deadline, usage
        await asyncio.sleep(0.5)


async def test_a_clients_kernel_is_its_own_in_the_services_usage_and_through_its_server(
    service: ServiceProcess,
    apps: Path,
    jp_fetch: Fetch,
    docker_client: docker.DockerClient,
) -> None:
    # Given alice's kernel, started from her server in client mode (the service runs it),
    # whose process the driver lists as holding 3 GiB of a GPU
    response = await jp_fetch(
        "api", "kernels", method="POST", body=json.dumps({"name": "gpudev-default"})
    )
    kernel_id = json.loads(response.body)["id"]
    made: dict[str, str | list[str] | bool] = {"label": f"{L_KERNEL}={kernel_id}"}
    try:
        pid = await wait_for_pid(f"/tmp/.gpudev/kernel-{kernel_id}.json", timeout=60)
        apps.write_text(f"{A100_0}, {pid}, 3072\n")

        # When alice asks the service what the GPUs are doing (as `top` does), once her
        # server's poll of the kernel has told the service its activity
        usage = await told_activity(service, kernel_id)
        # Then the process is her kernel's, by the id her server gave it, and the kernel is
        # listed with its idle time
        (process,) = processes_on(usage["hosts"], A100_0)
        assert (process["kind"], process["kernel"], process["pid"], process["owner"]) == (
            "gpudev",
            kernel_id,
            pid,
            ALICE,
        )
        (kernel,) = [k for host in usage["hosts"] for k in host["kernels"]]
        assert (kernel["kernel"], kernel["owner"]) == (kernel_id, ALICE)
        assert 0 <= kernel["idle_seconds"] < 120

        # When her notebook's badge asks her server for the kernel (forwarded to the service)
        badge = json.loads(
            (await jp_fetch("gpudev", "api", "usage", params={"kernel": kernel_id})).body
        )["kernel"]
        # Then it has the kernel's memory on the GPU
        assert (badge["id"], badge["container"], badge["reason"]) == (
            kernel_id,
            process["container"],
            None,
        )
        assert [(g["uuid"], g["memory_used_mib"]) for g in badge["gpus"]] == [(A100_0, 3072)]
        # And where it runs is told by her server too
        where = json.loads((await jp_fetch("gpudev", "api", "kernels", kernel_id)).body)
        assert where["container"] == process["container"]

        # And bob gets the unknown kernel's 404, word for word, and sees the process as
        # another user's
        status, refused = usage_of(service, BOB_TOKEN, kernel_id)
        unknown = usage_of(service, BOB_TOKEN, "0123abcd-0000")
        assert (status, unknown[0]) == (404, 404)
        assert refused["message"] == unknown[1]["message"].replace("0123abcd-0000", kernel_id)
        _, theirs = usage_of(service, BOB_TOKEN)
        (seen,) = processes_on(theirs["hosts"], A100_0)
        assert (seen["kind"], seen["kernel"], seen["pid"]) == ("another user", None, None)
        assert [k for host in theirs["hosts"] for k in host["kernels"]] == []

        # When the service is SIGKILLed and started again
        service.kill()
        service.start()
        # Then the kernel reached again is still hers by its id, through her server
        again = json.loads((await jp_fetch("gpudev", "api", "kernels", kernel_id, "usage")).body)[
            "kernel"
        ]
        assert [(g["uuid"], g["memory_used_mib"]) for g in again["gpus"]] == [(A100_0, 3072)]
        assert usage_of(service, BOB_TOKEN, kernel_id)[0] == 404

        # When alice shuts it down, it is no longer known
        await jp_fetch("api", "kernels", kernel_id, method="DELETE")
        assert usage_of(service, ALICE_TOKEN, kernel_id)[0] == 404
    finally:
        with contextlib.suppress(HTTPClientError):
            await jp_fetch("api", "kernels", kernel_id, method="DELETE")
        for left in docker_client.containers.list(all=True, filters=made):
            left.remove(force=True)


async def test_top_as_the_services_account_tells_a_kernel_in_a_shared_container(
    services: Callable[[], Service], tmp_path: Path, apps: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Given alice's running dev container "box" with her kernel in it (no container of its
    # own), launched through the service, whose process the driver lists on a GPU
    held, processes = services()
    held.for_user(ALICE).containers.start(StartRequest(environment="default", name="box"))
    kernel_id, key = str(uuid.uuid4()), secrets.token_hex(32)
    body = {**launch_body(kernel_id, key), "container": "box"}
    answer = await processes.launch(held.for_user(ALICE), ALICE, body)
    assert not answer["dedicated"]
    pid = await wait_for_pid(f"/tmp/.gpudev/kernel-{kernel_id}.json", timeout=60)
    apps.write_text(f"{A100_0}, {pid}, 1024\n")
    monkeypatch.setenv("FAKE_NVIDIA_SMI_APPS", str(apps))
    # Then its badge's answer, in alice's view, has it; bob's view has the unknown kernel's 404
    loop = asyncio.get_running_loop()
    badge = await loop.run_in_executor(None, held.for_user(ALICE).usage.kernel_usage, kernel_id)
    assert [(g.uuid, g.memory_used_mib) for g in badge.gpus] == [(A100_0, 1024)]
    bobs = held.for_user(BOB).usage
    with pytest.raises(NotFound) as refused:
        await loop.run_in_executor(None, bobs.kernel_usage, kernel_id)
    with pytest.raises(NotFound) as unknown:
        await loop.run_in_executor(None, bobs.kernel_usage, "0123abcd-0000")
    assert refused.value.message == unknown.value.message.replace("0123abcd-0000", kernel_id)

    # When `jupyter gpudev top --json` runs on this machine, as the service's account with its
    # state folder, an administrator (a process of its own: no registry of the service's
    # kernels)
    state = held.service.containers.state_dir
    admin = f"--Access.admin_users={json.dumps([getpass.getuser()])}"
    env = {
        "FAKE_NVIDIA_SMI_DIR": str(FIXTURES / "smi" / "two-a100"),
        "FAKE_NVIDIA_SMI_APPS": str(apps),
        "JUPYTER_CONFIG_DIR": str(tmp_path / "cli-config"),
        "JUPYTER_CONFIG_PATH": "",
    }
    top = await loop.run_in_executor(
        None, lambda: gpudev("top", "--json", f"--DevContainers.state_dir={state}", admin, env=env)
    )
    # Then the kernel table tells the process as alice's kernel's
    assert top.returncode == 0, top.stderr
    (listed,) = processes_on(json.loads(top.stdout)["hosts"], A100_0)
    assert (listed["kernel"], listed["memory_used_mib"]) == (kernel_id, 1024)
    await processes.cleanup(ALICE, kernel_id, {})
