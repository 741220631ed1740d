"""Remote hosts over SSH, with a real sshd on loopback in front of the local engine.

The "remote" host ``far`` is ``ssh://root@127.0.0.1:PORT``: the same engine reached through SSH
(its containers are told apart by their host label). Its GPUs come from the fake nvidia-smi run
*over SSH* through a wrapper script, so the remote inventory path is the real one.
"""

from __future__ import annotations

import asyncio
import json
import os
import secrets
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import docker
import pytest
from jupyter_client.manager import AsyncKernelManager
from tornado.httpclient import HTTPClientError
from traitlets.config import Config

from jupyter_gpudev.changes.tracker import track_changes
from jupyter_gpudev.containers import DevContainers, NoHostFits, StartRequest, docker_name
from jupyter_gpudev.engine import HostPool
from jupyter_gpudev.environments import MountNotAllowed
from jupyter_gpudev.errors import BadRequest
from jupyter_gpudev.kernels import provisioner
from jupyter_gpudev.kernels.kernelspecs import GPUDevKernelSpecManager
from jupyter_gpudev.labels import L_HOST
from tests.integration.conftest import remove_containers
from tests.integration.test_cli import gpudev
from tests.integration.test_containers import IMAGE, write_devcontainer
from tests.integration.test_kernels import run
from tests.sshd import SSHServer

pytestmark = pytest.mark.integration

A100_1 = "GPU-8f2a9c41-7b3e-4c55-9d0a-2e6f1b7c3d90"


def make_manager(
    tmp_path: Path, ssh_server: SSHServer, remote_smi: Path, *, local: bool = True
) -> DevContainers:
    """A manager whose pool has the local engine (no GPU) and ``far`` over SSH (two GPUs),
    with a workspace and a mount root of ``far``."""
    (tmp_path / "remote-ws").mkdir(exist_ok=True)
    (tmp_path / "remote-data" / "set").mkdir(parents=True, exist_ok=True)
    (tmp_path / "remote-data" / "set" / "a.txt").write_text("remote data\n")
    (tmp_path / "work").mkdir(exist_ok=True)
    config = Config()
    config.GPUInventory.backend = "none"
    config.GPUInventory.cache_seconds = 0.0
    config.DevContainers.state_dir = str(tmp_path / "state")
    config.DevContainers.stop_timeout = 2
    config.HostPool.include_local = local
    config.HostPool.hosts_file = str(tmp_path / "hosts.json")
    config.HostPool.hosts = {
        "far": ssh_server.host_entry(
            nvidia_smi=str(remote_smi),
            workspace=str(tmp_path / "remote-ws"),
            mount_roots=[str(tmp_path / "remote-data")],
        )
    }
    manager = DevContainers(
        root_dir=tmp_path / "work", host_pool=HostPool(config=config), config=config
    )
    track_changes(manager)
    return manager


@pytest.fixture
def far_manager(
    tmp_path: Path, ssh_server: SSHServer, remote_smi: Path, docker_client: docker.DockerClient
) -> Iterator[DevContainers]:
    """``make_manager``'s: the local engine without GPUs and ``far`` over SSH with two."""
    containers = make_manager(tmp_path, ssh_server, remote_smi)
    yield containers
    remove_containers(docker_client, containers)


def cli_env(tmp_path: Path, **config: object) -> dict[str, str]:
    """A Jupyter config folder of the test's own; ``config``: its ``c.<key> = value`` lines
    (``Access__user`` for ``c.Access.user``)."""
    folder = tmp_path / "config"
    folder.mkdir(exist_ok=True)
    lines = [f"c.{key.replace('__', '.')} = {value!r}" for key, value in config.items()]
    (folder / "jupyter_gpudev_config.py").write_text("\n".join(lines) + "\n")
    return {"JUPYTER_CONFIG_DIR": str(folder), "JUPYTER_CONFIG_PATH": ""}


def admin_env(tmp_path: Path, **config: object) -> dict[str, str]:
    """``cli_env`` as an administrator (told why a host could not be added)."""
    return cli_env(tmp_path, Access__user="ops", Access__admin_users={"ops"}, **config)


def test_cli_adds_lists_and_removes_an_ssh_host(
    tmp_path: Path, ssh_server: SSHServer, remote_smi: Path, docker_client: docker.DockerClient
) -> None:
    # (a name of its own: containers of other runs may carry the label of a host "far")
    name = f"far-{secrets.token_hex(3)}"
    hosts_file = tmp_path / "hosts.json"
    where = f"--HostPool.hosts_file={hosts_file}"
    # (the administrator's nvidia-smi for hosts added at run time: the fake one)
    env = cli_env(tmp_path, HostPool__runtime_host_settings={"nvidia_smi": str(remote_smi)})
    # When a host is added over ssh:// with its key and known_hosts
    added = gpudev(
        "hosts",
        "add",
        name,
        ssh_server.url,
        f"--identity-file={ssh_server.identity_file}",
        f"--known-hosts={ssh_server.known_hosts}",
        where,
        "--json",
        env=env,
    )
    # Then it answered with its engine version and its GPUs, read by nvidia-smi over SSH
    assert added.returncode == 0, added.stderr
    info = json.loads(added.stdout)
    assert info["reachable"] is True
    assert info["transport"] == "ssh"
    assert info["engine"]["version"] == docker_client.version()["Version"]
    assert [gpu["uuid"] for gpu in info["gpus"]["gpus"]][1] == A100_1
    assert info["origin"] == "added"
    # And it is kept, with paths only (no key material)
    saved = json.loads(hosts_file.read_text())["hosts"][name]
    assert saved["url"] == ssh_server.url
    assert saved["identity_file"] == str(ssh_server.identity_file)
    assert "PRIVATE KEY" not in hosts_file.read_text()
    # When the hosts are listed by a new process, far is there next to the local engine
    listed = gpudev("hosts", where, "--json", env=cli_env(tmp_path))
    assert listed.returncode == 0, listed.stderr
    by_name = {host["name"]: host for host in json.loads(listed.stdout)["hosts"]}
    assert by_name[name]["reachable"] is True
    assert by_name[name]["engine"]["api_version"] == by_name["local"]["engine"]["api_version"]
    assert "Docker" in gpudev("hosts", where, env=cli_env(tmp_path)).stdout
    # When it is added again, that is a conflict
    again = gpudev(
        "hosts",
        "add",
        name,
        ssh_server.url,
        f"--identity-file={ssh_server.identity_file}",
        where,
        env=cli_env(tmp_path),
    )
    assert again.returncode == 6
    assert "exists already" in again.stderr
    # When it is removed, it is gone; a configured host cannot be removed this way
    removed = gpudev("hosts", "remove", name, where, env=cli_env(tmp_path))
    assert removed.returncode == 0, removed.stderr
    listed = gpudev("hosts", where, "--json", env=cli_env(tmp_path))
    assert [h["name"] for h in json.loads(listed.stdout)["hosts"]] == ["local"]
    local = gpudev("hosts", "remove", "local", where, env=cli_env(tmp_path))
    assert local.returncode == 2
    assert "configuration" in local.stderr


def test_an_unknown_host_key_is_refused_never_accepted(
    tmp_path: Path, ssh_server: SSHServer
) -> None:
    # Given a known_hosts file that does not hold the server's key
    known_hosts = tmp_path / "known_hosts"
    known_hosts.write_text("")
    hosts_file = tmp_path / "hosts.json"
    # When the host is added
    result = gpudev(
        "hosts",
        "add",
        "far",
        ssh_server.url,
        f"--identity-file={ssh_server.identity_file}",
        f"--known-hosts={known_hosts}",
        f"--HostPool.hosts_file={hosts_file}",
        env=admin_env(tmp_path),
    )
    # Then an administrator is told why, with the key's fingerprint and what to do; nothing
    # was added or trusted
    assert result.returncode == 3
    assert "is not in" in result.stderr
    assert "never accepted" in result.stderr
    assert "SHA256:" in result.stderr
    assert "ssh-keyscan" in result.stderr
    assert not hosts_file.exists()
    assert known_hosts.read_text() == ""


def test_a_key_the_server_does_not_accept_is_refused_clearly(
    tmp_path: Path, ssh_server: SSHServer
) -> None:
    # Given a key that is not in the server's authorized_keys
    other = ssh_server.new_key(f"other-{os.getpid()}-{time.monotonic_ns()}")
    hosts_file = tmp_path / "hosts.json"
    # When the host is added with it
    result = gpudev(
        "hosts",
        "add",
        "far",
        ssh_server.url,
        f"--identity-file={other}",
        f"--known-hosts={ssh_server.known_hosts}",
        f"--HostPool.hosts_file={hosts_file}",
        env=admin_env(tmp_path),
    )
    # Then an administrator is told authentication failed, with which key, and what to do
    assert result.returncode == 3
    assert "SSH authentication as" in result.stderr
    assert str(other) in result.stderr
    assert "authorized_keys" in result.stderr
    assert not hosts_file.exists()


@pytest.mark.usefixtures("gpu_engine")
def test_a_gpu_container_is_placed_on_the_ssh_host_with_its_workspace_and_mounts(
    tmp_path: Path, far_manager: DevContainers, docker_client: docker.DockerClient
) -> None:
    # Given an environment that needs a GPU and mounts a folder of the remote host, and a
    # local engine without GPUs
    write_devcontainer(
        far_manager.root_dir,
        "gpu",
        {
            "image": IMAGE,
            "hostRequirements": {"gpu": True},
            "mounts": [f"source={tmp_path / 'remote-data' / 'set'},target=/data,type=bind"],
        },
    )
    events: list[dict[str, Any]] = []
    # When it starts without naming a host
    info = far_manager.start(StartRequest(environment="gpu", name="far-one"), events.append)
    # Then it was placed on far, over SSH, with a GPU of far leased by UUID
    assert info.host == "far"
    assert {"stage": "place", "message": "placed on host 'far'"} in events
    container = docker_client.containers.get(docker_name("far-one"))
    assert container.labels[L_HOST] == "far"
    (request,) = container.attrs["HostConfig"]["DeviceRequests"]
    assert request["DeviceIDs"] == list(info.gpu_uuids)
    assert far_manager.ledger.for_container("far", "far-one") is not None
    assert far_manager.ledger.active("local") == []
    # And it sees far's workspace folder and far's data, read-only
    mounts = {m["Destination"]: m for m in container.attrs["Mounts"]}
    workspace = mounts[f"/workspaces/{far_manager.root_dir.name}"]
    assert workspace["Source"] == str((tmp_path / "remote-ws").resolve())
    assert mounts["/data"]["RW"] is False
    assert container.exec_run(["cat", "/data/a.txt"]).output == b"remote data\n"
    # And it is listed under far only, though the local engine is the same engine
    listed = [(c.host, c.name) for c in far_manager.list()]
    assert ("far", "far-one") in listed
    assert ("local", "far-one") not in listed
    # When it stops, far's lease is released
    far_manager.stop("far-one")
    assert far_manager.ledger.active("far") == []


def test_remote_mounts_are_checked_on_the_remote_side(
    tmp_path: Path, far_manager: DevContainers
) -> None:
    # Given a link inside far's mount root that points outside it
    (tmp_path / "remote-data" / "escape").symlink_to(tmp_path / "work")
    write_devcontainer(
        far_manager.root_dir,
        "escape",
        {
            "image": IMAGE,
            "mounts": [f"source={tmp_path / 'remote-data' / 'escape'},target=/data,type=bind"],
        },
    )
    # When a container of it starts on far
    with pytest.raises(MountNotAllowed) as caught:
        far_manager.start(StartRequest(environment="escape", host="far", name="far-escape"))
    # Then the path was resolved on far and refused, naming far's roots
    assert "resolves to" in caught.value.message
    assert "host 'far'" in caught.value.message
    assert str(tmp_path / "work") in caught.value.message
    assert far_manager.ledger.active("far") == []


@pytest.mark.usefixtures("gpu_engine")
def test_when_no_host_can_take_a_start_409_says_why_for_each(far_manager: DevContainers) -> None:
    # When a container asks for more GPUs than any host has free
    with pytest.raises(NoHostFits) as caught:
        far_manager.start(StartRequest(environment="default", name="too-big", gpus=3))
    # Then the 409 says, for each host, why not
    err = caught.value
    assert err.status == 409
    reasons = err.details["hosts"]
    assert set(reasons) == {"local", "far"}
    assert "no GPU" in reasons["local"]
    assert "3 GPUs requested on host 'far'" in reasons["far"]
    assert "2 free" in reasons["far"]
    assert "local: no GPU" in err.message


async def test_a_kernel_on_the_ssh_host_runs_through_the_tunnel_and_survives_a_drop(
    tmp_path: Path, ssh_server: SSHServer, remote_smi: Path, docker_client: docker.DockerClient
) -> None:
    # Given only the ssh:// host
    manager = make_manager(tmp_path, ssh_server, remote_smi, local=False)
    provisioner.set_manager(manager)
    ksm = GPUDevKernelSpecManager(root_dir=str(manager.root_dir))
    km = AsyncKernelManager(kernel_name="gpudev-default", kernel_spec_manager=ksm)
    far = manager.host_pool.get("far")
    assert far.tunnels is not None
    try:
        # When a kernel starts
        await km.start_kernel()
        client = km.client()
        client.start_channels()
        try:
            await client.wait_for_ready(timeout=60)
            out, reply = await run(client, "import socket; print(socket.gethostname())")
            # Then it runs in its container on far, reached through local SSH forwards
            assert reply["status"] == "ok"
            name = f"kernel-{km.kernel_id}"
            container = docker_client.containers.get(docker_name(name))
            assert container.labels[L_HOST] == "far"
            assert out.strip() == container.attrs["Config"]["Hostname"]
            info = km.get_connection_info()
            assert info["ip"] == "127.0.0.1"
            forwarded = {local for _, _, local in far.tunnels.active()}
            assert {info["shell_port"], info["iopub_port"], info["hb_port"]} <= forwarded
            # When every SSH connection to far drops
            assert far.ssh is not None
            generation = far.ssh.generation
            assert ssh_server.drop_connections() >= 1
            # Then the kernel answers again, output included, once ZMQ has reconnected through
            # a new connection (iopub is publish/subscribe: what the kernel prints before the
            # subscription is back is dropped, so a first reply may come without its output)
            deadline = time.monotonic() + 30
            while True:
                try:
                    out, reply = await run(client, "print(6 * 7)", timeout=5)
                    if out.strip() == "42":
                        break
                except (TimeoutError, asyncio.TimeoutError):
                    pass
                assert time.monotonic() < deadline, "the kernel did not come back"
                await asyncio.sleep(0.5)
            assert reply["status"] == "ok"
            assert far.ssh.generation > generation
        finally:
            client.stop_channels()
            # When the kernel shuts down
            await km.shutdown_kernel()
        # Then its container and its forwards are gone
        assert far.tunnels.active() == []
        with pytest.raises(docker.errors.NotFound):
            docker_client.containers.get(docker_name(f"kernel-{km.kernel_id}"))
    finally:
        provisioner.set_manager(None)
        remove_containers(docker_client, manager)


@pytest.fixture
def gpudev_config(gpudev_config: dict[str, Any], tmp_path: Path) -> dict[str, Any]:
    """The server's config for the REST tests: its own hosts file."""
    return {**gpudev_config, "HostPool": {"hosts_file": str(tmp_path / "hosts.json")}}


async def test_hosts_are_added_and_removed_through_the_api(
    jp_fetch: Any, tmp_path: Path, ssh_server: SSHServer, docker_client: docker.DockerClient
) -> None:
    name = f"api-{secrets.token_hex(3)}"
    entry = ssh_server.host_entry()
    # When a host with a key that known_hosts does not hold is posted
    (tmp_path / "empty").write_text("")
    with pytest.raises(HTTPClientError) as refused:
        await jp_fetch(
            "gpudev",
            "api",
            "hosts",
            method="POST",
            body=json.dumps({"name": name, **entry, "known_hosts": str(tmp_path / "empty")}),
        )
    # Then it is a 503 that does not tell a user why (no port or DNS oracle: the server log
    # and an administrator are told), and nothing was added
    assert refused.value.code == 503
    assert refused.value.response is not None
    body = json.loads(refused.value.response.body)
    assert "never accepted" not in body["message"]
    assert "The server log says which" in body["message"]
    assert not (tmp_path / "hosts.json").exists()
    # When it is posted with the right known_hosts
    response = await jp_fetch(
        "gpudev", "api", "hosts", method="POST", body=json.dumps({"name": name, **entry})
    )
    # Then it is added, with its engine
    assert response.code == 201
    info = json.loads(response.body)
    assert info["engine"]["version"] == docker_client.version()["Version"]
    listed = json.loads((await jp_fetch("gpudev", "api", "hosts")).body)["hosts"]
    assert [h["origin"] for h in listed if h["name"] == name] == ["added"]
    # When a dev container runs on it, the host cannot be removed
    started = await jp_fetch(
        "gpudev",
        "api",
        "containers",
        method="POST",
        body=json.dumps({"environment": "default", "host": name, "name": f"{name}-c"}),
    )
    assert json.loads(started.body)["host"] == name
    with pytest.raises(HTTPClientError) as kept:
        await jp_fetch("gpudev", "api", "hosts", name, method="DELETE")
    assert kept.value.code == 409
    assert kept.value.response is not None
    assert f"{name}-c" in json.loads(kept.value.response.body)["message"]
    # When the container is gone, the host is removed
    await jp_fetch(
        "gpudev", "api", "containers", f"{name}-c", method="DELETE", params={"force": "1"}
    )
    removed = await jp_fetch("gpudev", "api", "hosts", name, method="DELETE")
    assert removed.code == 204
    listed = json.loads((await jp_fetch("gpudev", "api", "hosts")).body)["hosts"]
    assert name not in [h["name"] for h in listed]


def test_a_web_port_of_a_container_on_the_ssh_host_is_reached_through_a_forward(
    far_manager: DevContainers, docker_client: docker.DockerClient
) -> None:
    # Given a container on far whose environment forwards port 8000, with a web server there
    write_devcontainer(far_manager.root_dir, "web", {"image": IMAGE, "forwardPorts": [8000]})
    info = far_manager.start(StartRequest(environment="web", host="far", name="far-web"))
    assert info.web_ports == info.forward_ports == (8000,)
    with pytest.raises(BadRequest, match="always served"):
        far_manager.set_web_port("far-web", 8000, add=False)
    container = docker_client.containers.get(docker_name("far-web"))
    container.exec_run(["python3", "-m", "http.server", "8000", "-d", "/etc"], detach=True)
    # When the proxy asks where to connect
    address, port = far_manager.proxy_target("far-web", 8000)
    # Then it is a local forward over far's SSH connection, and the page comes through it
    assert address == "127.0.0.1"
    far = far_manager.host_pool.get("far")
    assert far.tunnels is not None
    assert port in {local for _, _, local in far.tunnels.active()}
    deadline = time.monotonic() + 20
    while True:
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{port}/hostname", timeout=5) as page:
                body = page.read().decode()
            break
        except OSError:
            assert time.monotonic() < deadline, "the web server did not answer"
            time.sleep(0.2)
    assert body.strip() == container.attrs["Config"]["Hostname"]
    # When the container stops, its forwards close
    far_manager.stop("far-web")
    assert far.tunnels.active() == []


def test_an_ssh_host_says_its_free_storage_by_df_over_its_connection(
    far_manager: DevContainers,
) -> None:
    # Given the ssh:// host (this machine, reached over SSH) and its engine's data root
    far = far_manager.host_pool.get("far")
    info = far.engine_info()
    assert info.data_root
    assert info.cpus is not None
    assert info.memory_mib is not None
    # Then df over the connection answers what this machine's file system has free
    free = far.free_storage_mib(info.data_root)
    stats = os.statvfs(info.data_root)
    here = stats.f_bavail * stats.f_frsize // (1 << 20)
    assert free is not None
    assert abs(free - here) < max(64, here // 100)  # other tests write meanwhile
    # And a path that does not exist is no answer, not an error
    assert far.free_storage_mib("/no/such/folder") is None
