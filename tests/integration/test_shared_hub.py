"""Shared mode against a real JupyterHub: the gpudev service (started by the Hub from
``examples/jupyterhub_config.py`` as is) and users' servers in client mode, spawned as real
local users who are not in the docker group."""

from __future__ import annotations

import asyncio
import http.client
import json
import os
import pwd
import secrets
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import suppress
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import docker
import pytest
from tornado.httpclient import HTTPClientError, HTTPRequest
from tornado.websocket import websocket_connect

from jupyter_gpudev.containers.model import container_key
from jupyter_gpudev.labels import L_OWNER
from tests.conftest import FAKE_SMI, FIXTURES
from tests.hub import (
    ADMIN,
    USERS_ROOT,
    Hub,
    HubMissing,
    free_port,
    request,
    run_hub,
    user_folder,
)
from tests.sshd import SSHServer

ALICE, BOB = "gpudev-alice", "gpudev-bob"
TWO_A100 = FIXTURES / "smi" / "two-a100"
SERVICE = "http://127.0.0.1:10101/services/gpudev"

SERVICE_CONFIG = """
c.GPUInventory.backend = "nvidia-smi"
c.GPUInventory.nvidia_smi_path = {smi!r}
c.GPUInventory.cache_seconds = 0.0
c.DevContainers.state_dir = {state!r}
c.DevContainers.stop_timeout = 2
# Eight starts of one user's at once race for the GPUs below (the default lets 4 run at once)
c.GPUDevService.operations_per_user = 8
# A second entry for the same engine (through a real sshd): a lease holds whichever asks
c.HostPool.hosts = {hosts!r}
"""


@pytest.fixture(scope="module")
def hub(
    tmp_path_factory: pytest.TempPathFactory,
    docker_client: docker.DockerClient,
    ssh_server: SSHServer,
) -> Iterator[Hub]:
    folder = tmp_path_factory.mktemp("hub")
    smi = folder / "far-nvidia-smi"  # the same two fake GPUs, seen through the far entry
    smi.write_text(f'#!/bin/sh\nFAKE_NVIDIA_SMI_DIR={TWO_A100} exec {FAKE_SMI} "$@"\n')
    smi.chmod(0o755)
    far = {"far": ssh_server.host_entry(nvidia_smi=str(smi))}
    config = SERVICE_CONFIG.format(
        smi=str(FAKE_SMI), state=str(folder / "service-state"), hosts=far
    )
    env = {"FAKE_NVIDIA_SMI_DIR": str(TWO_A100)}
    prepare_bob()
    try:
        with run_hub(folder, config, env) as started:
            for user in (ALICE, BOB, ADMIN):
                started.start_server(user)
            yield started
    except HubMissing as exc:
        pytest.fail(f"shared-mode tests need a JupyterHub: {exc}")
    finally:
        for container in docker_client.containers.list(all=True, filters={"label": L_OWNER}):
            if container.labels.get(L_OWNER) in (ALICE, BOB, ADMIN):
                with suppress(docker.errors.NotFound):  # (gone meanwhile)
                    container.remove(force=True)


def prepare_bob() -> None:
    """bob's server reclaims idle GPU kernels after 6 s (its own configuration, as a user
    would write it), and bob has an environment that asks for a GPU."""
    account = pwd.getpwnam(BOB)
    home = Path(account.pw_dir)
    made = [
        home / ".jupyter",
        user_folder(BOB) / ".devcontainer",
        user_folder(BOB) / ".devcontainer" / "gpu",
    ]
    for folder in made:
        folder.mkdir(exist_ok=True)
    culler = {"GPUCuller": {"idle_timeout": 6.0, "warning_seconds": 4.0, "check_interval": 0.25}}
    config = home / ".jupyter" / "jupyter_server_config.json"
    config.write_text(json.dumps(culler))
    environment = made[-1] / "devcontainer.json"
    environment.write_text(
        json.dumps({"image": "gpudev-python:bookworm", "hostRequirements": {"gpu": True}})
    )
    for path in [*made, config, environment]:
        os.chown(path, account.pw_uid, account.pw_gid)


def api(hub: Hub, user: str, method: str, path: str, body: Any = None) -> tuple[int, Any]:
    """``user``'s own server's gpudev API (client mode: forwarded to the service)."""
    return hub.as_user(user, method, f"/gpudev/api{path}", body)


def start(hub: Hub, user: str, **fields: Any) -> tuple[int, Any]:
    return api(hub, user, "POST", "/containers", {"environment": "default", **fields})


def test_users_cannot_reach_the_docker_socket(hub: Hub) -> None:
    probe = "import socket; s = socket.socket(socket.AF_UNIX); s.connect('/var/run/docker.sock')"
    for user in (ALICE, BOB):
        done = subprocess.run(
            ["/usr/sbin/runuser", "-u", user, "--", sys.executable, "-c", probe],
            capture_output=True,
            text=True,
            check=False,
        )
        assert done.returncode != 0
        assert "PermissionError" in done.stderr, done.stderr
    # ... yet their servers list dev containers: through the service
    assert api(hub, ALICE, "GET", "/containers")[0] == 200


def test_another_users_container_does_not_exist_for_them(
    hub: Hub, docker_client: docker.DockerClient
) -> None:
    name = f"alices-{secrets.token_hex(3)}"
    status, body = start(hub, ALICE, name=name)
    assert status == 201, body
    assert body["owner"] == ALICE
    container = docker_client.containers.get(container_key(name, ALICE))
    assert container.labels[L_OWNER] == ALICE  # set by the service, from the Hub's answer
    # The workspace is alice's own folder
    sources = [m["Source"] for m in container.attrs["Mounts"]]
    assert str(USERS_ROOT / ALICE) in sources

    actions: list[tuple[str, str, Any]] = [
        ("GET", f"/containers/{name}", None),
        ("GET", f"/containers/{name}/logs", None),
        ("GET", f"/containers/{name}/diff", None),
        ("POST", f"/containers/{name}/stop", {}),
        ("POST", f"/containers/{name}/start", {}),
        ("PUT", f"/containers/{name}/pin", {}),
        ("POST", f"/containers/{name}/terminal", {}),
        ("POST", f"/containers/{name}/ports", {"port": 8000}),
        ("DELETE", f"/containers/{name}/ports/8000", None),
        ("POST", f"/containers/{name}/commit", {"write": False}),
        ("DELETE", f"/containers/{name}?force=1", None),
    ]
    for method, path, body in actions:
        status, answer = api(hub, BOB, method, path, body)
        assert status == 404, (method, path, status, answer)
    listed = api(hub, BOB, "GET", "/containers")[1]["containers"]
    assert name not in [c["name"] for c in listed]
    container.reload()
    assert container.status == "running"

    # The administrator (a Hub admin) sees it, named as on the engine (names are per user),
    # and stops it by that name; alice still has it
    listed = api(hub, ADMIN, "GET", "/containers")[1]["containers"]
    theirs = container_key(name, ALICE)
    assert theirs in [c["name"] for c in listed]
    assert api(hub, ADMIN, "GET", f"/containers/{theirs}/logs")[0] == 200
    status, body = api(hub, ADMIN, "POST", f"/containers/{theirs}/stop", {})
    assert status == 200, body
    assert api(hub, ALICE, "GET", f"/containers/{name}")[1]["state"] == "exited"
    assert api(hub, ALICE, "DELETE", f"/containers/{name}?force=1")[0] == 204


def test_sixteen_starts_by_two_users_and_two_host_entries_lease_each_gpu_once(
    hub: Hub, gpu_engine: None, docker_client: docker.DockerClient
) -> None:
    users = [ALICE, BOB] * 8
    # half of them through the engine's second host entry
    hosts = [None, None, "far", "far"] * 4

    def start_one(index: int) -> tuple[int, Any]:
        return start(hub, users[index], gpus=1, **({"host": hosts[index]} if hosts[index] else {}))

    with ThreadPoolExecutor(16) as pool:
        answers = list(pool.map(start_one, range(16)))
    statuses = sorted(status for status, _ in answers)
    assert statuses == [201, 201] + [409] * 14, answers
    refused = [body for status, body in answers if status == 409]
    # no free GPU on the entry asked for; or, with none asked for, on no entry ("no_host")
    assert all(body["error"] in {"no_free_gpu", "no_host"} for body in refused), refused
    assert all("0 free" in body["message"] for body in refused), refused
    winners = [body["name"] for status, body in answers if status == 201]
    assert gpus_of_running(docker_client) == sorted(gpus_of_running(docker_client, unique=True))

    # Both stopped: their GPUs go to two new starts; resuming them then gets 409, even raced
    for name in winners:
        owner = next(b["owner"] for s, b in answers if s == 201 and b["name"] == name)
        assert api(hub, owner, "POST", f"/containers/{name}/stop", {})[0] == 200

    def resume_or_start(index: int) -> tuple[int, Any]:
        if index < 2:
            name = winners[index]
            owner = next(b["owner"] for s, b in answers if s == 201 and b["name"] == name)
            return api(hub, owner, "POST", f"/containers/{name}/start", {})
        return start(hub, users[index], gpus=1)

    with ThreadPoolExecutor(8) as pool:
        raced = list(pool.map(resume_or_start, range(8)))
    ok = [status for status, _ in raced if status in (200, 201)]
    assert len(ok) == 2, raced
    assert sorted(s for s, _ in raced if s not in (200, 201)) == [409] * 6, raced
    assert gpus_of_running(docker_client) == sorted(gpus_of_running(docker_client, unique=True))
    assert len(gpus_of_running(docker_client)) == 2
    # Removed through the service (which frees their leases): the GPUs are free again
    for info in api(hub, ADMIN, "GET", "/containers")[1]["containers"]:
        if info["owner"] in (ALICE, BOB):
            assert api(hub, ADMIN, "DELETE", f"/containers/{info['name']}?force=1")[0] == 204


def gpus_of_running(docker_client: docker.DockerClient, *, unique: bool = False) -> list[str]:
    """The GPU UUIDs that the running containers of the test users were given."""
    found: list[str] = []
    for container in docker_client.containers.list(filters={"label": L_OWNER}):
        if container.labels.get(L_OWNER) not in (ALICE, BOB, ADMIN):
            continue
        for device in container.attrs["HostConfig"].get("DeviceRequests") or []:
            found.extend(device.get("DeviceIDs") or [])
    return sorted(set(found)) if unique else sorted(found)


def test_only_administrators_add_hosts(hub: Hub) -> None:
    host = {"name": "box", "url": "ssh://gpu@127.0.0.1:22", "check": False}
    status, body = api(hub, BOB, "POST", "/hosts", host)
    assert status == 403, body
    assert "administrators" in body["message"]
    status, body = api(hub, ADMIN, "POST", "/hosts", host)
    assert status != 403, body  # past the rule (an SSH host added at run time needs a key)


def test_the_service_offers_nothing_but_gpudev(hub: Hub) -> None:
    token = hub.token_for(ALICE)
    # (the service's folder holds the Hub's config: it must not be served as /files/...)
    assert (hub.folder / "jupyterhub_config.py").exists()
    for path in (
        "/api/kernels",
        "/api/contents",
        "/api/terminals",
        "/api/sessions",
        "/files/jupyterhub_config.py",
        "/api/contents/jupyterhub_config.py",
    ):
        status, _ = request("GET", SERVICE + path, token=token)
        assert status == 404, path
    status, _ = request("GET", SERVICE + "/gpudev/api/containers", token=None)
    assert status == 403
    status, _ = request("GET", SERVICE + "/gpudev/api/containers", token="not-a-token")  # noqa: S106
    assert status == 403
    status, body = request("GET", SERVICE + "/gpudev/api/containers", token=token)
    assert status == 200, body


async def run_code(hub: Hub, user: str, kernel_id: str, code: str) -> str:
    """Run ``code`` in ``user``'s kernel through their server's websocket; its stdout."""
    url = hub.url.replace("http", "ws", 1) + f"/user/{user}/api/kernels/{kernel_id}/channels"
    headers = {"Authorization": f"token {hub.token_for(user)}"}
    socket = await websocket_connect(HTTPRequest(url, headers=headers))
    msg_id = uuid.uuid4().hex
    socket.write_message(
        json.dumps(
            {
                "header": {
                    "msg_id": msg_id,
                    "username": user,
                    "session": uuid.uuid4().hex,
                    "msg_type": "execute_request",
                    "version": "5.3",
                },
                "parent_header": {},
                "metadata": {},
                "content": {"code": code, "silent": False, "store_history": False},
                "channel": "shell",
            }
        )
    )
    out: list[str] = []
    try:
        while True:
            raw = await asyncio.wait_for(socket.read_message(), 60)
            assert raw is not None, "the kernel's websocket closed"
            message = json.loads(raw)
            if message.get("parent_header", {}).get("msg_id") != msg_id:
                continue
            kind = message["header"]["msg_type"]
            if kind == "stream":
                out.append(message["content"]["text"])
            elif kind == "error":
                raise AssertionError(message["content"])
            elif kind == "status" and message["content"]["execution_state"] == "idle":
                return "".join(out)
    finally:
        socket.close()
        while await asyncio.wait_for(socket.read_message(), 10) is not None:
            pass  # until the server's close frame: the socket is closed, not left to the GC


def test_a_kernel_from_the_picker_runs_in_the_users_container(
    hub: Hub, docker_client: docker.DockerClient
) -> None:
    status, specs = hub.as_user(ALICE, "GET", "/api/kernelspecs")
    assert status == 200, specs
    spec = specs["kernelspecs"]["gpudev-default"]["spec"]
    assert spec["metadata"]["kernel_provisioner"]["provisioner_name"] == "gpudev-service"

    status, kernel = hub.as_user(ALICE, "POST", "/api/kernels", {"name": "gpudev-default"})
    assert status == 201, (kernel, hub.tail())
    kernel_id = kernel["id"]
    try:
        hostname = asyncio.run(
            run_code(hub, ALICE, kernel_id, "import socket; print(socket.gethostname())")
        ).strip()
        container = docker_client.containers.get(container_key(hostname, ALICE))  # its own hostname
        assert container.labels[L_OWNER] == ALICE
        assert container.status == "running"
        # bob cannot reach alice's kernel at the service
        url = f"{SERVICE}/gpudev/api/kernel-processes/{kernel_id}"
        assert request("GET", url, token=hub.token_for(BOB))[0] == 404
        assert request("POST", url + "/signal", {"signum": 9}, token=hub.token_for(BOB))[0] == 404
        assert request("GET", url, token=hub.token_for(ALICE))[1] == {"exit_code": None}
        # Interrupt and restart go through the service; a restart keeps the container
        path = f"/api/kernels/{kernel_id}"
        assert hub.as_user(ALICE, "POST", f"{path}/interrupt", {})[0] == 204
        assert hub.as_user(ALICE, "POST", f"{path}/restart", {})[0] == 200
        again = asyncio.run(
            run_code(hub, ALICE, kernel_id, "import socket; print(socket.gethostname())")
        )
        assert container_key(again.strip(), ALICE) == container.name
    finally:
        status, _ = hub.as_user(ALICE, "DELETE", f"/api/kernels/{kernel_id}")
    assert status == 204
    # Its dedicated container is gone with it (nothing changed in it)
    with pytest.raises(docker.errors.NotFound):
        docker_client.containers.get(container_key(hostname, ALICE))


async def terminal_says(hub: Hub, user: str, terminal: str, typed: str, expected: str) -> str:
    """Type ``typed`` in ``user``'s Jupyter terminal; its output once ``expected`` shows."""
    url = hub.url.replace("http", "ws", 1) + f"/user/{user}/terminals/websocket/{terminal}"
    headers = {"Authorization": f"token {hub.token_for(user)}"}
    socket = await websocket_connect(HTTPRequest(url, headers=headers))
    seen = ""
    try:
        socket.write_message(json.dumps(["stdin", typed]))
        while expected not in seen:
            raw = await asyncio.wait_for(socket.read_message(), 30)
            assert raw is not None, f"the terminal closed: {seen!r}"
            kind, *rest = json.loads(raw)
            if kind == "stdout":
                seen += rest[0]
    finally:
        socket.close()
        while await asyncio.wait_for(socket.read_message(), 10) is not None:
            pass
    return seen


async def service_tty_status(hub: Hub, user: str, name: str) -> int:
    """What the service answers ``user`` asking for a shell in ``name`` directly."""
    url = SERVICE.replace("http", "ws", 1) + f"/gpudev/api/containers/{name}/tty"
    headers = {"Authorization": f"token {hub.token_for(user)}"}
    try:
        socket = await websocket_connect(HTTPRequest(url, headers=headers))
    except HTTPClientError as err:
        return err.code
    socket.close()
    while await asyncio.wait_for(socket.read_message(), 10) is not None:
        pass
    return 101


def test_a_terminal_from_the_panel_runs_in_the_users_container(hub: Hub) -> None:
    name = f"alices-term-{secrets.token_hex(3)}"
    assert start(hub, ALICE, name=name)[0] == 201
    try:
        status, model = api(hub, ALICE, "POST", f"/containers/{name}/terminal", {})
        assert status == 201, model
        # The shell is the container's (its hostname is the container's name)
        seen = asyncio.run(terminal_says(hub, ALICE, model["name"], "hostname\r", f"{name}\r\n"))
        assert name in seen
        # bob can open no terminal in it, neither through his server nor at the service
        assert api(hub, BOB, "POST", f"/containers/{name}/terminal", {})[0] == 404
        assert asyncio.run(service_tty_status(hub, BOB, name)) == 404
    finally:
        api(hub, ALICE, "DELETE", f"/containers/{name}?force=1")


def raw_get(url: str, headers: dict[str, str]) -> tuple[int, dict[str, str], str]:
    """One GET, redirects not followed: status, headers (lowercase names), body."""
    parts = urlsplit(url)
    connection = http.client.HTTPConnection(parts.netloc, timeout=30)
    try:
        connection.request(
            "GET", parts.path + (f"?{parts.query}" if parts.query else ""), headers=headers
        )
        answer = connection.getresponse()
        return answer.status, {k.lower(): v for k, v in answer.getheaders()}, answer.read().decode()
    finally:
        connection.close()


def test_a_web_port_is_served_by_the_users_server_in_a_sandbox(
    hub: Hub, docker_client: docker.DockerClient
) -> None:
    name = f"alices-web-{secrets.token_hex(3)}"
    assert start(hub, ALICE, name=name)[0] == 201
    try:
        container = docker_client.containers.get(container_key(name, ALICE))
        page = f"hello from {name}"
        container.exec_run(
            ["sh", "-c", f"mkdir -p /tmp/web && echo '{page}' > /tmp/web/index.html"]
        )
        container.exec_run(
            [
                "python3",
                "-m",
                "http.server",
                "8000",
                "--bind",
                "0.0.0.0",
                "--directory",
                "/tmp/web",
            ],
            detach=True,
        )
        status, body = api(hub, ALICE, "POST", f"/containers/{name}/ports", {"port": 8000})
        assert status in (200, 201), body
        proxied = f"{hub.url}/user/{ALICE}/gpudev/proxy/{name}/8000/"
        token = {"Authorization": f"token {hub.token_for(ALICE)}"}
        script = {**token, "Sec-Fetch-Mode": "cors"}  # a script's fetch, not a page
        deadline = time.monotonic() + 20
        while True:
            status, _, text = raw_get(proxied, script)
            if status == 200 or time.monotonic() > deadline:
                break
            time.sleep(0.3)
        assert (status, text.strip()) == (200, page)
        # A browser opening it is sent to the sandboxed address, which needs no login
        status, headers, _ = raw_get(proxied, {**token, "Sec-Fetch-Mode": "navigate"})
        assert status == 302, headers
        location = headers["location"]
        assert location.startswith(f"/user/{ALICE}/gpudev/app/"), location
        status, headers, text = raw_get(hub.url + location, {})
        assert (status, text.strip()) == (200, page)
        # (a Hub's server adds its own frame-ancestors policy; every policy applies)
        assert "sandbox allow-scripts" in headers["content-security-policy"]
        assert "allow-same-origin" not in headers["content-security-policy"]
        # bob's server serves no port of alice's container
        bobs = f"{hub.url}/user/{BOB}/gpudev/proxy/{name}/8000/"
        assert raw_get(bobs, {"Authorization": f"token {hub.token_for(BOB)}"})[0] == 404
    finally:
        api(hub, ALICE, "DELETE", f"/containers/{name}?force=1")


def gpudev_as(hub: Hub, user: str, *args: str) -> subprocess.CompletedProcess[str]:
    """``jupyter gpudev ARGS`` as ``user`` would run it in a terminal of their server."""
    env = [
        f"HOME=/home/{user}",
        f"PATH={Path(sys.executable).parent}:/usr/bin:/bin",
        f"GPUDEV_SERVICE_URL={SERVICE}/",
        f"JUPYTERHUB_API_TOKEN={hub.token_for(user)}",
    ]
    command = [sys.executable, "-m", "jupyter_gpudev", *args]
    return subprocess.run(
        ["/usr/sbin/runuser", "-u", user, "--", "/usr/bin/env", "-i", *env, *command],
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )


def test_the_command_line_works_through_the_service_as_the_user(
    hub: Hub, docker_client: docker.DockerClient
) -> None:
    name = f"alices-cli-{secrets.token_hex(3)}"
    done = gpudev_as(hub, ALICE, "start", "default", "--name", name, "--gpus", "0")
    assert done.returncode == 0, done.stderr
    assert name in done.stdout
    try:
        listed = gpudev_as(hub, ALICE, "ls", "--json")
        assert name in [c["name"] for c in json.loads(listed.stdout)["containers"]]
        assert name not in gpudev_as(hub, BOB, "ls").stdout
        # bob's commands do not find it (exit 2, as for any missing container)
        refused = gpudev_as(hub, BOB, "stop", name)
        assert refused.returncode == 2, refused.stderr
        assert "No dev container" in refused.stderr
        # a change, seen by alice's diff through the service
        container = docker_client.containers.get(container_key(name, ALICE))
        # (as root in it: alice's own processes run as her account, which cannot write /etc)
        container.exec_run(["sh", "-c", "echo made-by-alice > /etc/gpudev-cli-test"], user="0")
        diff = gpudev_as(hub, ALICE, "diff", name)
        assert diff.returncode == 0, diff.stderr
        assert "/etc/gpudev-cli-test" in diff.stdout + diff.stderr
        # written by the service into her folder, and hers (she can edit it in place)
        committed = gpudev_as(hub, ALICE, "commit", name, "--write", "--json")
        assert committed.returncode == 0, committed.stderr
        written = Path(json.loads(committed.stdout)["written"])
        assert written.is_relative_to(USERS_ROOT / ALICE), written
        assert written.stat().st_uid == pwd.getpwnam(ALICE).pw_uid
        container.exec_run(["sh", "-c", "echo again > /etc/gpudev-cli-test-2"], user="0")
        stopped = gpudev_as(hub, ALICE, "stop", name, "--json")
        assert json.loads(stopped.stdout)["state"] == "exited"
        assert gpudev_as(hub, ALICE, "rm", name).returncode == 6  # changes: needs --force
        assert gpudev_as(hub, ALICE, "rm", name, "--force").returncode == 0
    finally:
        api(hub, ALICE, "DELETE", f"/containers/{name}?force=1")


def test_the_service_runs_standalone_against_the_hub(hub: Hub, tmp_path: Path) -> None:
    """``jupyter gpudev serve`` started by hand (systemd, say), not by the Hub."""
    port = free_port()
    config = tmp_path / "config"
    config.mkdir()
    options = [
        f"--port={port}",
        f"--HubIdentityProvider.api_url={hub.api}",
        f"--DevContainers.state_dir={tmp_path}",
    ]
    process = subprocess.Popen(
        [sys.executable, "-m", "jupyter_gpudev", "serve", *options],
        env={
            "PATH": os.environ.get("PATH", ""),
            "HOME": str(tmp_path),
            "JUPYTER_CONFIG_DIR": str(config),
            # its own Hub token (the tests' service's: it may read users and tokens)
            "JUPYTERHUB_API_TOKEN": hub.token,
        },
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    base = f"http://127.0.0.1:{port}/gpudev/api/containers"
    try:
        deadline = time.monotonic() + 30
        while True:
            try:
                status, body = request("GET", base, token=hub.token_for(ALICE))
                break
            except OSError:
                assert time.monotonic() < deadline, "the service did not start"
                time.sleep(0.3)
        assert status == 200, body
        assert request("GET", base, token="not-a-token")[0] == 403  # noqa: S106
    finally:
        process.terminate()
        process.wait(30)


def test_an_idle_gpu_kernel_of_a_client_is_announced_then_reclaimed(
    hub: Hub, gpu_engine: None, docker_client: docker.DockerClient
) -> None:
    status, kernel = hub.as_user(BOB, "POST", "/api/kernels", {"name": "gpudev-gpu"})
    assert status == 201, (kernel, hub.tail())
    kernel_id = kernel["id"]
    try:
        deadline = time.monotonic() + 30
        while True:  # announced by bob's server, with its GPU
            pending = api(hub, BOB, "GET", "/reclaims")[1]["reclaims"]
            if pending or time.monotonic() > deadline:
                break
            time.sleep(0.25)
        assert [r["kernel_id"] for r in pending] == [kernel_id]
        assert pending[0]["gpu_uuids"]
        name = pending[0]["container"]
        while True:  # then reclaimed: the kernel gone, its container stopped and kept
            kernels = hub.as_user(BOB, "GET", "/api/kernels")[1]
            if kernel_id not in [k["id"] for k in kernels] or time.monotonic() > deadline + 30:
                break
            time.sleep(0.25)
        assert kernel_id not in [k["id"] for k in kernels]
        info = api(hub, BOB, "GET", f"/containers/{name}")[1]
        assert info["state"] == "exited"
        assert info["gpu_uuids"]  # kept, with the GPU it will take back on resume
        hosts = api(hub, BOB, "GET", "/hosts")[1]["hosts"]
        assert all(not h["leases"] for h in hosts)  # the GPU is free
    finally:
        hub.as_user(BOB, "DELETE", f"/api/kernels/{kernel_id}")


def test_a_user_sees_hosts_without_their_addresses_or_accounts(hub: Hub) -> None:
    # Given the service's hosts, one of them reached over SSH as an account of that machine
    admins = {h["name"]: h for h in api(hub, ADMIN, "GET", "/hosts")[1]["hosts"]}
    assert "@" in admins["far"]["url"]  # the administrator sees where and as whom
    # When a user lists them
    status, body = api(hub, BOB, "GET", "/hosts")
    assert status == 200, body
    users = {h["name"]: h for h in body["hosts"]}
    # Then they see each host's name, kind and GPUs, not its address, account or folders
    assert users.keys() == admins.keys()
    assert users["far"]["url"] == "ssh://", users["far"]
    assert users["far"]["gpus"] == admins["far"]["gpus"]
    assert all(h["workspace"] is None for h in users.values())
