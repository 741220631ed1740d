"""Shared mode as a boundary between users, tried as a hostile user would (issue #30), against
a real JupyterHub, its gpudev service and real local users: a user's folder cannot be pointed
anywhere else, and only tokens the Hub scoped to the service act for their user."""

from __future__ import annotations

import os
import pwd
import secrets
import shutil
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import suppress
from pathlib import Path
from typing import Any

import docker
import pytest

from jupyter_gpudev.containers.model import container_key
from jupyter_gpudev.labels import L_OWNER
from tests.hub import ADMIN, USERS_ROOT, Hub, HubMissing, request, run_hub
from tests.integration.test_port_guard import connect_as, listening

pytestmark = pytest.mark.integration

ALICE, BOB = "gpudev-alice", "gpudev-bob"
SERVICE = "http://127.0.0.1:10101/services/gpudev"
CONTAINERS = SERVICE + "/gpudev/api/containers"
SERVICE_CONFIG = """
c.GPUInventory.backend = "nvidia-smi"
c.GPUInventory.nvidia_smi_path = "/nonexistent/nvidia-smi"
c.DevContainers.state_dir = {state!r}
c.DevContainers.stop_timeout = 2
"""


@pytest.fixture(scope="module")
def hub(
    tmp_path_factory: pytest.TempPathFactory, docker_client: docker.DockerClient
) -> Iterator[Hub]:
    folder = tmp_path_factory.mktemp("hub-boundary")
    config = SERVICE_CONFIG.format(state=str(folder / "service-state"))
    try:
        with run_hub(folder, config, {}) as started:
            yield started
    except HubMissing as exc:
        pytest.fail(f"shared-mode tests need a JupyterHub: {exc}")
    finally:
        for container in docker_client.containers.list(all=True, filters={"label": L_OWNER}):
            if container.labels.get(L_OWNER) in (ALICE, BOB, ADMIN):
                with suppress(docker.errors.NotFound):  # (gone meanwhile)
                    container.remove(force=True)


def as_user(user: str, *command: str, timeout: float = 60) -> subprocess.CompletedProcess[str]:
    """``command`` run as the local account ``user`` (a shell of theirs on the host)."""
    return subprocess.run(
        ["/usr/sbin/runuser", "-u", user, "--", *command],
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
    )


def start(token: str, name: str) -> tuple[int, Any]:
    return request("POST", CONTAINERS, {"environment": "default", "name": name}, token=token)


def workspace_of(client: docker.DockerClient, name: str) -> tuple[str, str]:
    """The bind source of the workspace of alice's ``name`` and what its marker file says
    inside."""
    container = client.containers.get(container_key(name, ALICE))
    mount = next(m for m in container.attrs["Mounts"] if m["Destination"].startswith("/workspace"))
    code, out = container.exec_run(["cat", f"{mount['Destination']}/whose"])
    assert isinstance(out, bytes)
    return mount["Source"], out.decode().strip() if code == 0 else "(no marker)"


def remove(token: str, name: str) -> None:
    request("DELETE", f"{CONTAINERS}/{name}?force=1", token=token)


# -- 1. a user's folder cannot point anywhere else ----------------------------------------------


def test_a_user_cannot_point_their_folder_at_another_users_files(
    hub: Hub, docker_client: docker.DockerClient
) -> None:
    # Given alice's folder, as the service mounts it, with a marker of hers in it
    alice = hub.token_for(ALICE)
    first = f"alice-folder-{secrets.token_hex(3)}"
    status, body = start(alice, first)
    assert status == 201, body
    folder, _ = workspace_of(docker_client, first)
    remove(alice, first)
    Path(folder, "whose").write_text("alice\n")
    # ... and bob's project folder with his files
    bobs = Path(pwd.getpwnam(BOB).pw_dir) / "projects"
    bobs.mkdir(exist_ok=True)
    (bobs / "whose").write_text("bob\n")
    aside = f"{folder}.aside"
    # When alice, in a shell of hers, swaps her folder for a link to bob's, over and over,
    # while she starts dev containers
    swap = (
        "i=0; while [ $i -lt 400 ]; do i=$((i+1)); "
        'mv "$1" "$2" 2>/dev/null && ln -s "$3" "$1" 2>/dev/null; sleep 0.01; '
        'rm -f "$1" 2>/dev/null; mv "$2" "$1" 2>/dev/null; done'
    )
    once = as_user(ALICE, "sh", "-c", 'mv "$1" "$2"', "-", folder, aside)
    swapper = subprocess.Popen(
        ["/usr/sbin/runuser", "-u", ALICE, "--", "sh", "-c", swap, "-", folder, aside, str(bobs)]
    )
    seen, refused = [], []
    try:
        for _ in range(3):
            name = f"alice-swap-{secrets.token_hex(3)}"
            status, body = start(alice, name)
            if status == 201:
                seen.append(workspace_of(docker_client, name))
                remove(alice, name)
            else:
                refused.append((status, body))
    finally:
        swapper.kill()
        swapper.wait()
        if os.path.islink(folder) or not os.path.exists(folder):  # put hers back
            with_link = Path(folder)
            if with_link.is_symlink():
                with_link.unlink()
            if os.path.isdir(aside):
                os.rename(aside, folder)
    # Then she could not rename her folder, and every container got her own files
    assert once.returncode != 0, "alice could rename the folder the service mounts for her"
    assert not refused, refused
    assert all(what == (folder, "alice") for what in seen), seen


def test_a_users_folder_is_checked_at_every_request(
    hub: Hub, docker_client: docker.DockerClient
) -> None:
    # Given alice's folder, used once (her view of the service made)
    alice = hub.token_for(ALICE)
    first = f"alice-again-{secrets.token_hex(3)}"
    assert start(alice, first)[0] == 201
    folder, _ = workspace_of(docker_client, first)
    remove(alice, first)
    # When her folder becomes a link (whoever made it so) to a folder that is not hers
    target = Path(f"/var/tmp/gpudev-not-alices-{secrets.token_hex(3)}")
    target.mkdir()
    (target / "whose").write_text("root\n")
    os.rename(folder, f"{folder}.kept")
    os.symlink(target, folder)
    try:
        name = f"alice-link-{secrets.token_hex(3)}"
        status, body = start(alice, name)
        if status == 201:
            seen = workspace_of(docker_client, name)
            remove(alice, name)
            pytest.fail(f"a container started on the link: {seen}")
        # Then the service refuses it, saying why
        assert status == 403, body
        assert "link" in body["message"], body
    finally:
        os.unlink(folder)
        os.rename(f"{folder}.kept", folder)
        shutil.rmtree(target)


def test_a_layout_that_users_could_redirect_is_refused_at_start(tmp_path: Path) -> None:
    # Given the old default: a folder inside the user's home, which they can write
    command = [
        sys.executable,
        "-m",
        "jupyter_gpudev",
        "serve",
        "--port=0",
        "--GPUDevService.user_root={home}/projects",
        f"--DevContainers.state_dir={tmp_path}",
    ]
    env = {"PATH": os.environ.get("PATH", ""), "HOME": str(tmp_path)}
    # When the service starts with it
    try:
        done = subprocess.run(
            command, check=False, env=env, capture_output=True, text=True, timeout=30
        )
    except subprocess.TimeoutExpired:
        pytest.fail("the service started with a layout users can redirect")
    # Then it does not start, and says why
    assert done.returncode != 0
    assert "users can write their home folder" in done.stderr, done.stderr[-2000:]


# -- 5. only tokens scoped to the service act for their user -----------------------------------


def new_token(hub: Hub, user: str, **fields: Any) -> tuple[str, str]:
    """A new API token of ``user`` (``fields``: scopes, expires_in); (token, its id)."""
    status, body = hub.call("POST", f"/users/{user}/tokens", {"note": "gpudev test", **fields})
    assert status == 201, (status, body)
    return body["token"], body["id"]


def test_a_token_the_hub_scoped_to_something_else_is_refused(hub: Hub) -> None:
    # Given tokens of alice that the Hub scoped to reading her name, or to a server only (as
    # the OAuth token a server gets for its visitors)
    for scopes in (["read:users:name!user"], [f"access:servers!server={ALICE}/"]):
        token, _ = new_token(hub, ALICE, scopes=scopes)
        # When one calls the service
        status, body = request("GET", CONTAINERS, token=token)
        # Then it is refused, and the answer says which scope it lacks
        assert status == 403, (scopes, body)
        assert "access:services" in str(body), body
    # ... while her full token works
    assert request("GET", CONTAINERS, token=hub.token_for(ALICE))[0] == 200


def test_a_revoked_token_stops_working_within_five_seconds(hub: Hub) -> None:
    # Given a token of alice that the service has just accepted
    token, token_id = new_token(hub, ALICE)
    assert request("GET", CONTAINERS, token=token)[0] == 200
    # When the Hub revokes it
    assert hub.call("DELETE", f"/users/{ALICE}/tokens/{token_id}")[0] == 204
    time.sleep(5.5)
    # Then the service refuses it
    assert request("GET", CONTAINERS, token=token)[0] == 403


def test_an_expired_token_is_not_accepted_from_the_cache(hub: Hub) -> None:
    # Given a token of alice that expires in two seconds, accepted now
    token, _ = new_token(hub, ALICE, expires_in=2)
    made = time.monotonic()
    assert request("GET", CONTAINERS, token=token)[0] == 200
    # When it has expired (well within the cache's time)
    time.sleep(max(0.0, made + 3.2 - time.monotonic()))
    # Then the service refuses it
    assert request("GET", CONTAINERS, token=token)[0] == 403


def test_an_administrator_demoted_in_the_hub_loses_the_rights_within_five_seconds(
    hub: Hub,
) -> None:
    # Given the Hub's administrator, whom the service lets add hosts
    token = hub.token_for(ADMIN)
    host = {"name": "box", "url": "ssh://gpu@127.0.0.1:22", "check": False}
    hosts = SERVICE + "/gpudev/api/hosts"
    status, body = request("POST", hosts, host, token=token)
    assert status != 403, body
    # When the Hub makes them an ordinary user
    assert hub.call("PATCH", f"/users/{ADMIN}", {"admin": False})[0] == 200
    try:
        time.sleep(5.5)
        # Then the service no longer treats them as an administrator
        status, body = request("POST", hosts, host, token=token)
        assert status == 403, body
    finally:
        assert hub.call("PATCH", f"/users/{ADMIN}", {"admin": True})[0] == 200


# -- 12. a user's containers run as their account ------------------------------------------------


def test_a_users_container_runs_as_their_account(
    hub: Hub, docker_client: docker.DockerClient
) -> None:
    # Given alice (a local account, not root) and the service (root)
    account = pwd.getpwnam(ALICE)
    alice = hub.token_for(ALICE)
    name = f"alice-uid-{secrets.token_hex(3)}"
    # When she starts a dev container
    status, body = start(alice, name)
    assert status == 201, body
    try:
        container = docker_client.containers.get(container_key(name, ALICE))
        source, _ = workspace_of(docker_client, name)
        target = next(m for m in container.attrs["Mounts"] if m["Source"] == source)
        made = f"{target['Destination']}/made-in-{name}"
        code, out = container.exec_run(["sh", "-c", 'id -u; id -G; touch "$1"', "-", made])
        # Then its processes are hers, with her groups, and so is what they write in her folder
        assert code == 0, out
        assert isinstance(out, bytes)
        uid, groups = out.decode().split("\n")[:2]
        assert int(uid) == account.pw_uid
        expected = set(os.getgrouplist(ALICE, account.pw_gid))
        assert {int(g) for g in groups.split()} == expected
        assert Path(source, f"made-in-{name}").stat().st_uid == account.pw_uid
    finally:
        remove(alice, name)


def test_an_environment_asking_for_root_is_refused_unless_an_administrator_allows_it(
    hub: Hub,
) -> None:
    # Given an environment of alice's that asks to run as root
    account = pwd.getpwnam(ALICE)
    alice = hub.token_for(ALICE)
    first = f"alice-root-{secrets.token_hex(3)}"
    assert start(alice, first)[0] == 201  # (her folder made by the service)
    remove(alice, first)
    folder = USERS_ROOT / ALICE / ".devcontainer" / "rooty"
    folder.mkdir(parents=True, exist_ok=True)
    spec = folder / "devcontainer.json"
    spec.write_text('{"image": "gpudev-python:bookworm", "remoteUser": "root"}')
    for path in (folder.parent, folder, spec):
        os.chown(path, account.pw_uid, account.pw_gid)
    # When she starts it
    name = f"alice-rooty-{secrets.token_hex(3)}"
    body = {"environment": "rooty", "name": name}
    status, answer = request("POST", CONTAINERS, body, token=alice)
    if status == 201:
        remove(alice, name)
    # Then the service refuses, saying who may allow it
    assert status == 403, answer
    assert "root" in answer["message"]
    assert "c.DevContainers.allow_root" in answer["message"]


# -- 6. a container's ports are its owner's --------------------------------------------------------


def test_only_the_owner_reaches_the_ports_of_their_container(
    hub: Hub, docker_client: docker.DockerClient
) -> None:
    # Given alice's dev container with a port listening in it (as her kernels' do)
    alice = hub.token_for(ALICE)
    name = f"alice-ports-{secrets.token_hex(3)}"
    assert start(alice, name)[0] == 201
    try:
        address = listening(docker_client, container_key(name, ALICE), 8124)
        # When bob, on the same machine, connects to it, and alice does
        bobs, alices = connect_as(BOB, address, 8124), connect_as(ALICE, address, 8124)
        # Then bob is refused and alice (her server) connects
        assert bobs.startswith("refused"), bobs
        assert alices == "connected"
    finally:
        remove(alice, name)
    # ... and once it is gone, its address is not hers any more
    assert f"{address}/32" not in firewall_rules()


def firewall_rules() -> str:
    return subprocess.run(
        ["/usr/sbin/iptables", "-w", "-S", "GPUDEV-PORTS"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout
