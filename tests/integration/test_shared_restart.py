"""The shared service restarts (issue #35, "Restarts"): a client's kernel is reached again,
with its state, and still by its owner only.

Most tests build the service's object graph in-process twice over the same state folder
(``Authority`` and ``KernelProcesses``, the layer below its HTTP server: the routes only
parse and call these), as a restarted service process builds it. The last runs
``jupyter gpudev serve`` itself on a free port, SIGKILLs it and starts it again, with a
stand-in JupyterHub API identifying the callers and a client-mode kernel manager
(``kernels.remote``) on the other side. The kernels run in dev containers on the real
engine, as the real accounts gpudev-alice and gpudev-bob.
"""

from __future__ import annotations

import asyncio
import contextlib
import http.server
import json
import logging
import os
import secrets
import signal
import socket
import stat
import subprocess
import sys
import threading
import time
import uuid
from collections.abc import AsyncIterator, Callable, Iterator
from pathlib import Path
from typing import Any, cast

import docker
import docker.errors
import pytest
from jupyter_client.asynchronous.client import AsyncKernelClient
from jupyter_client.connect import KernelConnectionInfo
from jupyter_client.kernelspec import KernelSpec, KernelSpecManager
from jupyter_client.manager import AsyncKernelManager

from jupyter_gpudev.containers import StartRequest, docker_name, reconcile
from jupyter_gpudev.containers.model import container_key
from jupyter_gpudev.errors import NotFound
from jupyter_gpudev.kernels.placements import PLACEMENTS
from jupyter_gpudev.kernels.remote import SERVICE_PROVISIONER
from jupyter_gpudev.labels import L_KERNEL
from jupyter_gpudev.shared.authority import Authority
from jupyter_gpudev.shared.client import ServiceClient
from jupyter_gpudev.shared.kernel_table import FILE, KernelTable
from jupyter_gpudev.shared.kernels import KernelProcesses
from tests.conftest import FAKE_SMI, FIXTURES
from tests.hub import request
from tests.integration.shared_views import close, new_service, service_config
from tests.integration.test_kernels import run
from tests.ports import free_port

pytestmark = pytest.mark.integration

ALICE, BOB = "gpudev-alice", "gpudev-bob"
LOG = logging.getLogger("gpudev-test")
Service = tuple[Authority, KernelProcesses]


@pytest.fixture
def services(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, docker_client: docker.DockerClient
) -> Iterator[Callable[[], Service]]:
    """Builds the service (its views and its kernel processes) over one state folder, as
    each start of the service process does; every container they made is removed after."""
    made: list[Authority] = []

    def make() -> Service:
        # A new process: no kernel counted in any shared container, no port given out
        monkeypatch.setattr(PLACEMENTS, "_kernels_in", {})
        monkeypatch.setattr(PLACEMENTS, "_ports_in_use", {})
        config = service_config(tmp_path, monkeypatch)
        held = new_service(tmp_path, config)
        made.append(held)
        table = KernelTable(held.service.containers.state_dir, log=LOG)
        return held, KernelProcesses(LOG, table=table, views=held)

    yield make
    for held in made:
        close(held, docker_client)


def launch_body(kernel_id: str, key: str) -> dict[str, Any]:
    """What a client's provisioner sends to launch (``kernels.remote``)."""
    return {
        "kernel_id": kernel_id,
        "environment": "default",
        "container": "",
        "gpus": None,
        "host": None,
        "key": key,
        "signature_scheme": "hmac-sha256",
        "kernel_name": "gpudev-default",
        "cwd": None,
        "env": {},
        "restart": False,
    }


@contextlib.asynccontextmanager
async def connected(connection: dict[str, Any], key: str) -> AsyncIterator[AsyncKernelClient]:
    """A client of the kernel at ``connection`` (the service's answer) with the key only the
    client holds."""
    client = AsyncKernelClient()
    client.load_connection_info(cast(KernelConnectionInfo, {**connection, "key": key.encode()}))
    client.start_channels(hb=False)  # ready is its kernel_info reply (a heartbeat takes >1 s)
    try:
        await client.wait_for_ready(timeout=60)
        yield client
    finally:
        client.stop_channels()


async def test_a_clients_kernel_survives_a_service_restart_with_its_state(
    services: Callable[[], Service],
    docker_client: docker.DockerClient,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # Given alice's kernel, launched through the service, holding a variable
    first, processes = services()
    kernel_id, key = str(uuid.uuid4()), secrets.token_hex(32)
    answer = await processes.launch(first.for_user(ALICE), ALICE, launch_body(kernel_id, key))
    container = answer["container"]
    async with connected(answer["connection"], key) as client:
        _, reply = await run(client, "kept = 6 * 7")
        assert reply["status"] == "ok", reply
    # When the service restarts: a new service over the same state folder
    first.close()
    started = time.monotonic()
    second, again = services()
    await again.restore()
    reattached = time.monotonic() - started
    LOG.info("re-attached in %.3f s", reattached)
    # Then alice's kernel is still running there, and hers
    assert await again.poll(ALICE, kernel_id) is None
    # And the orphan sweep of the restarted service, for which the process that made its
    # container is gone, leaves it alone: it is among the containers kept
    monkeypatch.setattr(reconcile, "process_alive", lambda *_process: False)
    local = second.service.containers.host_pool.get("local")
    ledger_id = second.service.containers.ledger_id
    orphans = reconcile.orphan_kernel_containers(local, ledger_id, socket.gethostname())
    assert docker_name(container) in [c.name for c in orphans]
    kept = again.kept_containers()
    assert kept == {("local", container)}
    await asyncio.get_running_loop().run_in_executor(
        None, second.service.containers.stop_orphan_kernels, kept
    )
    assert docker_client.containers.get(docker_name(container)).status == "running"
    # And bob can neither poll, signal nor clean it up
    with pytest.raises(NotFound):
        await again.poll(BOB, kernel_id)
    with pytest.raises(NotFound):
        await again.signal(BOB, kernel_id, signal.SIGKILL)
    with pytest.raises(NotFound):
        await again.cleanup(BOB, kernel_id, {})
    async with connected(answer["connection"], key) as client:
        # And an interrupt reaches the same kernel: a busy cell stops
        busy = asyncio.ensure_future(run(client, "import time; time.sleep(60)", timeout=60))
        await asyncio.sleep(1.0)
        await again.signal(ALICE, kernel_id, signal.SIGINT)
        _, reply = await asyncio.wait_for(busy, 30)
        assert reply["status"] == "error"
        assert reply["ename"] == "KeyboardInterrupt"
        # And its state is there: the variable set before the restart
        out, reply = await run(client, "print(kept)")
        assert reply["status"] == "ok", reply
        assert out.strip() == "42"
    # When alice's server shuts the kernel down, the restarted service cleans it up
    await again.cleanup(ALICE, kernel_id, {})
    # Then its dedicated container is gone (nothing changed in it), and so is its record
    with pytest.raises(docker.errors.NotFound):
        docker_client.containers.get(docker_name(container))
    with pytest.raises(NotFound):
        await again.poll(ALICE, kernel_id)
    assert KernelTable(second.service.containers.state_dir, log=LOG).load() == []


async def test_a_kernel_that_ended_while_the_service_was_down_is_forgotten_and_released(
    services: Callable[[], Service], docker_client: docker.DockerClient
) -> None:
    # Given alice's kernel, launched through the service
    first, processes = services()
    kernel_id, key = str(uuid.uuid4()), secrets.token_hex(32)
    answer = await processes.launch(first.for_user(ALICE), ALICE, launch_body(kernel_id, key))
    container = answer["container"]
    # When its process ends (killed) and the service goes down before any cleanup
    await processes.signal(ALICE, kernel_id, signal.SIGKILL)
    deadline = time.monotonic() + 30
    while await processes.poll(ALICE, kernel_id) is None:
        assert time.monotonic() < deadline, "the kernel did not end"
        await asyncio.sleep(0.1)
    first.close()
    # Then the restarted service forgets it, as a cleanup would: no record, no container,
    # no lease
    second, again = services()
    assert await again.restore() == (0, 1)
    with pytest.raises(NotFound):
        await again.poll(ALICE, kernel_id)
    with pytest.raises(docker.errors.NotFound):
        docker_client.containers.get(docker_name(container))
    assert second.service.containers.ledger.for_container("local", container) is None
    assert KernelTable(second.service.containers.state_dir, log=LOG).load() == []


async def test_kernels_sharing_a_container_keep_it_running_across_a_restart(
    services: Callable[[], Service], docker_client: docker.DockerClient
) -> None:
    # Given alice's running dev container "box" with two of her kernels in it, one busy
    first, processes = services()
    first.for_user(ALICE).containers.start(StartRequest(environment="default", name="box"))
    keys = {str(uuid.uuid4()): secrets.token_hex(32) for _ in range(2)}
    (live, live_key), (ending, _) = keys.items()
    answers = {
        kernel_id: await processes.launch(
            first.for_user(ALICE), ALICE, {**launch_body(kernel_id, key), "container": "box"}
        )
        for kernel_id, key in keys.items()
    }
    assert {a["container"] for a in answers.values()} == {container_key("box", ALICE)}
    assert not any(a["dedicated"] for a in answers.values())
    async with connected(answers[live]["connection"], live_key) as client:
        _, reply = await run(client, "kept = 'still here'")
        assert reply["status"] == "ok", reply
    # When one of them ends while the service is down
    await processes.signal(ALICE, ending, signal.SIGKILL)
    deadline = time.monotonic() + 30
    while await processes.poll(ALICE, ending) is None:
        assert time.monotonic() < deadline, "the kernel did not end"
        await asyncio.sleep(0.1)
    first.close()
    # Then the restarted service forgets that one, and the container keeps running for the
    # other, which is reached again with its state
    second, again = services()
    second.for_user(ALICE).containers.linger = 0.0  # a stop would come at once
    assert await again.restore() == (1, 1)
    await asyncio.sleep(0.5)
    box = docker_client.containers.get(docker_name(container_key("box", ALICE)))
    assert box.status == "running"
    assert PLACEMENTS.kernels_in(("local", container_key("box", ALICE))) == {live}
    async with connected(answers[live]["connection"], live_key) as client:
        out, reply = await run(client, "print(kept)")
        assert (out.strip(), reply["status"]) == ("still here", "ok")
    # When its last kernel ends, the shared container stops, as after any last kernel
    await again.cleanup(ALICE, live, {})
    deadline = time.monotonic() + 30
    while docker_client.containers.get(box.name or "").status == "running":
        assert time.monotonic() < deadline, "the shared container was not stopped"
        await asyncio.sleep(0.2)
    assert KernelTable(second.service.containers.state_dir, log=LOG).load() == []


#: The stand-in Hub's tokens: each user's, and the service's own.
ALICE_TOKEN, BOB_TOKEN, SERVICE_TOKEN = (secrets.token_hex(16) for _ in range(3))
USER_TOKENS = {ALICE_TOKEN: ALICE, BOB_TOKEN: BOB}


class StandInHub(http.server.BaseHTTPRequestHandler):
    """The JupyterHub API as the service asks it who a token is (``shared.identity``): each
    user's token is scoped to the service; no one is an administrator."""

    def do_GET(self) -> None:
        token = self.headers.get("Authorization", "").removeprefix("token ")
        name = USER_TOKENS.get(token)
        body: dict[str, Any] | None = None
        if self.path == "/hub/api/user" and name:
            body = {"kind": "user", "name": name, "scopes": ["access:services"]}
        elif token == SERVICE_TOKEN and self.path.removeprefix("/hub/api/users/") in (ALICE, BOB):
            body = {"kind": "user", "name": self.path.rsplit("/", 1)[1], "admin": False}
        data = json.dumps(body).encode()
        self.send_response(200 if body else 403)
        self.send_header("Content-Length", str(len(data) if body else 0))
        self.end_headers()
        if body:
            self.wfile.write(data)

    def log_message(self, *args: Any) -> None:
        pass


class ServiceProcess:
    """``jupyter gpudev serve`` as its own process (SIGKILLed and started again by the test),
    identifying callers with the stand-in Hub, its state in the test's folder."""

    def __init__(self, tmp_path: Path, hub_api: str) -> None:
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.tmp_path = tmp_path
        self.options = [
            f"--port={self.port}",
            f"--HubIdentityProvider.api_url={hub_api}",
            f"--DevContainers.state_dir={tmp_path / 'state'}",
            f"--GPUDevService.user_root={tmp_path / 'users' / '{user}'}",
            "--GPUInventory.backend=nvidia-smi",
            f"--GPUInventory.nvidia_smi_path={FAKE_SMI}",
            "--DevContainers.stop_timeout=2",
        ]
        (tmp_path / "config").mkdir(exist_ok=True)
        self.process: subprocess.Popen[bytes] | None = None
        self.starts = 0
        #: More of its environment (a test's own).
        self.extra_env: dict[str, str] = {}

    def start(self) -> float:
        """Start it; the seconds until it answered."""
        self.starts += 1
        log = (self.tmp_path / f"service-{self.starts}.log").open("wb")
        started = time.monotonic()
        self.process = subprocess.Popen(
            [sys.executable, "-m", "jupyter_gpudev", "serve", *self.options],
            env={
                "PATH": os.environ.get("PATH", ""),
                "HOME": str(self.tmp_path),
                "JUPYTER_CONFIG_DIR": str(self.tmp_path / "config"),
                "JUPYTER_CONFIG_PATH": "",
                "JUPYTERHUB_API_TOKEN": SERVICE_TOKEN,
                "FAKE_NVIDIA_SMI_DIR": str(FIXTURES / "smi" / "two-a100"),
                **self.extra_env,
            },
            stdout=log,
            stderr=subprocess.STDOUT,
        )
        log.close()
        deadline = time.monotonic() + 60
        while True:
            try:
                request("GET", f"{self.url}/gpudev/api/environments", token=ALICE_TOKEN)
                return time.monotonic() - started
            except OSError:
                assert self.process.poll() is None, self.log()
                assert time.monotonic() < deadline, "the service did not start"
                time.sleep(0.1)

    def kill(self) -> None:
        """SIGKILL: nothing of it runs on (no clean-up, no shutdown of anything)."""
        if self.process is not None and self.process.poll() is None:
            self.process.kill()
            self.process.wait(30)

    def log(self) -> str:
        return (self.tmp_path / f"service-{self.starts}.log").read_text(errors="replace")[-4000:]


class ServiceSpecs(KernelSpecManager):
    """The picker's entry of the default environment in client mode (``gpudev-service``)."""

    def get_kernel_spec(self, kernel_name: str) -> KernelSpec:
        return KernelSpec(
            name=kernel_name,
            argv=["gpudev-service-kernel"],
            display_name="default · gpudev",
            language="python",
            metadata={
                "kernel_provisioner": {
                    "provisioner_name": SERVICE_PROVISIONER,
                    "config": {"environment": "default"},
                }
            },
        )


@pytest.fixture
def service_process(tmp_path: Path, docker_client: docker.DockerClient) -> Iterator[ServiceProcess]:
    hub = http.server.ThreadingHTTPServer(("127.0.0.1", 0), StandInHub)
    threading.Thread(target=hub.serve_forever, daemon=True).start()
    service = ServiceProcess(tmp_path, f"http://127.0.0.1:{hub.server_address[1]}/hub/api")
    try:
        yield service
    finally:
        service.kill()
        hub.shutdown()
        hub.server_close()


async def test_a_clients_kernel_survives_the_service_killed_and_started_again(
    service_process: ServiceProcess,
    docker_client: docker.DockerClient,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # Given alice's server in client mode, with a kernel the service runs, holding a variable
    service_process.start()
    monkeypatch.setenv("JUPYTERHUB_API_TOKEN", ALICE_TOKEN)
    monkeypatch.setattr(PLACEMENTS, "service", ServiceClient(service_process.url, LOG))
    km = AsyncKernelManager(kernel_name="gpudev-default", kernel_spec_manager=ServiceSpecs())
    await km.start_kernel()
    kernel_id = str(km.kernel_id)
    made: dict[str, str | list[str] | bool] = {"label": f"{L_KERNEL}={kernel_id}"}
    client = km.client()
    client.start_channels()
    try:
        await client.wait_for_ready(timeout=60)
        _, reply = await run(client, "kept = 6 * 7")
        assert reply["status"] == "ok", reply
        # When the service is SIGKILLed
        service_process.kill()
        # Then alice's server takes the kernel for running while the service is down
        assert await km.is_alive()
        # When it is started again
        answered = service_process.start()
        LOG.info("the service answered %.2f s after its start", answered)
        # Then the kernel is reached again: alive, interrupted, with its variable
        assert await km.is_alive()
        (container,) = docker_client.containers.list(filters=made)
        assert container.status == "running"
        busy = asyncio.ensure_future(run(client, "import time; time.sleep(60)", timeout=60))
        await asyncio.sleep(1.0)
        await km.interrupt_kernel()
        _, reply = await asyncio.wait_for(busy, 30)
        assert reply["ename"] == "KeyboardInterrupt", reply
        out, reply = await run(client, "print(kept)")
        assert (out.strip(), reply["status"]) == ("42", "ok")
        # And its record holds no key, in a file of the service's alone
        table = service_process.tmp_path / "state" / FILE
        assert km.session.key not in table.read_bytes()
        assert stat.S_IMODE(table.stat().st_mode) == 0o600
        # And bob cannot reach it at the service
        url = f"{service_process.url}/gpudev/api/kernel-processes/{kernel_id}"
        assert request("GET", url, token=BOB_TOKEN)[0] == 404
        assert request("POST", f"{url}/signal", {"signum": 9}, token=BOB_TOKEN)[0] == 404
        assert request("POST", f"{url}/cleanup", {}, token=BOB_TOKEN)[0] == 404
        assert request("GET", url, token=ALICE_TOKEN) == (200, {"exit_code": None})
        # When alice restarts the kernel, the new process has her server's key again (the
        # service kept none) and runs in the same container
        await km.restart_kernel(now=True)
        await client.wait_for_ready(timeout=60)
        out, reply = await run(client, "print('kept' in dir(), 6 * 7)")
        assert (out.strip(), reply["status"]) == ("False 42", "ok")
        assert [c.id for c in docker_client.containers.list(filters=made)] == [container.id]
        # When alice shuts it down, the service cleans it up: its container is gone
        client.stop_channels()
        await km.shutdown_kernel()
        assert docker_client.containers.list(all=True, filters=made) == []
    finally:
        client.stop_channels()
        for left in docker_client.containers.list(all=True, filters=made):
            left.remove(force=True)
    # And the restarted service said so: the kernel reached again, its container spared by
    # the orphan sweep (the process that made it is gone)
    log = service_process.log()
    assert "1 kernels of clients reached again, 0 that had ended forgotten" in log
    assert "kept: its kernel was reached again after a restart" in log


async def test_a_kernel_no_server_asks_after_is_ended_and_its_gpu_freed(
    services: Callable[[], Service], docker_client: docker.DockerClient
) -> None:
    # Given alice's GPU kernel, launched through the service, whose server then dies without
    # shutting it down (it asks nothing more), and another of hers whose server lives on
    held, processes = services()
    processes.abandoned_timeout = 2.0
    gone, gone_key = str(uuid.uuid4()), secrets.token_hex(32)
    answer = await processes.launch(
        held.for_user(ALICE), ALICE, {**launch_body(gone, gone_key), "gpus": 1}
    )
    container = answer["container"]
    assert answer["gpu_uuids"]
    assert held.service.containers.ledger.for_container("local", container) is not None
    live = str(uuid.uuid4())
    await processes.launch(held.for_user(ALICE), ALICE, launch_body(live, secrets.token_hex(32)))
    # When the timeout passes, the live one's server polling it meanwhile
    assert await processes.end_abandoned() == []
    for _ in range(6):
        await asyncio.sleep(0.5)
        assert await processes.poll(ALICE, live) is None
    # (a kernel whose relaunch is under way, its image pulled or built, is never abandoned)
    processes._launching.add((ALICE, gone))
    assert await processes.end_abandoned() == []
    processes._launching.discard((ALICE, gone))
    ended = await processes.end_abandoned()
    # Then the abandoned kernel is ended as its shutdown would end it: its dedicated
    # container removed (nothing changed in it), its GPU lease freed, its record forgotten
    assert ended == [(ALICE, gone)]
    with pytest.raises(NotFound):
        await processes.poll(ALICE, gone)
    with pytest.raises(docker.errors.NotFound):
        docker_client.containers.get(docker_name(container))
    assert held.service.containers.ledger.for_container("local", container) is None
    records = KernelTable(held.service.containers.state_dir, log=LOG).load()
    assert [r.kernel_id for r in records] == [live]
    # And the kernel whose server asks after it runs on
    assert await processes.poll(ALICE, live) is None
    await processes.cleanup(ALICE, live, {})
