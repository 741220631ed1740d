"""Declared mounts through a shared service's view, on the real engine (issue #30): each user
mounts their own folder of a per-user root ({user}), and a folder of another user's that they
may not read is refused before anything is created or held.

Two users' views of one service are built in-process (``Authority.for_user``, with the real
accounts gpudev-alice and gpudev-bob); the folders are given to them, so this needs root.
"""

from __future__ import annotations

import json
import secrets
import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import docker
import pytest

from jupyter_gpudev.containers import StartRequest, docker_name
from jupyter_gpudev.environments import MountNotAllowed
from jupyter_gpudev.labels import L_SERVER
from jupyter_gpudev.services import Services
from jupyter_gpudev.shared.authority import Authority
from tests.integration.shared_views import close, new_service, service_config
from tests.leaks import Baseline, assert_nothing_leaked
from tests.unit.test_shared_mounts import ALICE, BOB, make, needs_accounts

pytestmark = [pytest.mark.integration, needs_accounts]

IMAGE = "gpudev-python:bookworm"


@pytest.fixture
def data() -> Iterator[Path]:
    """/tmp/gpudev-mounts-*/data (root's, 0755: every user may search the way to it) with
    each user's folder (theirs, 0700) holding a note of theirs."""
    site = Path(tempfile.mkdtemp(prefix="gpudev-mounts-", dir="/tmp"))
    site.chmod(0o755)
    folder = make(site / "data", "root", 0o755)
    for user in (ALICE, BOB):
        make(folder / user, user, 0o700)
        (folder / user / "note.txt").write_text(f"{user}'s note\n")
    yield folder
    shutil.rmtree(site)


def mounting(tmp_path: Path, roots: list[Any], monkeypatch: pytest.MonkeyPatch) -> Authority:
    """The service with ``c.MountPolicy.allowed_roots = roots``."""
    config = service_config(tmp_path, monkeypatch)
    config.MountPolicy.allowed_roots = roots
    return new_service(tmp_path, config)


@pytest.fixture
def held(docker_client: docker.DockerClient) -> Iterator[list[Authority]]:
    """The services a test makes; their containers are removed afterwards."""
    made: list[Authority] = []
    yield made
    for authority in made:
        close(authority, docker_client)


def run(docker_client: docker.DockerClient, name: str, script: str) -> str:
    """Run ``script`` in the dev container ``name`` as its own user; its output (exit 0)."""
    code, output = docker_client.containers.get(docker_name(name)).exec_run(
        ["/bin/sh", "-c", script]
    )
    assert isinstance(output, bytes)
    text = output.decode(errors="replace")
    assert code == 0, text
    return text


def declare(view: Services, name: str, source: Path) -> None:
    """An environment ``name`` in the user's folder that mounts ``source`` at /mnt/data."""
    folder = view.containers.root_dir / ".devcontainer" / name
    folder.mkdir(parents=True)
    mount = f"source={source},target=/mnt/data,type=bind"
    (folder / "devcontainer.json").write_text(json.dumps({"image": IMAGE, "mounts": [mount]}))


def test_each_user_mounts_their_own_folder_of_a_per_user_root(
    tmp_path: Path,
    data: Path,
    held: list[Authority],
    monkeypatch: pytest.MonkeyPatch,
    docker_client: docker.DockerClient,
) -> None:
    # Given a writable per-user root, and an environment of alice's mounting her folder
    held.append(mounting(tmp_path, [{"path": str(data / "{user}"), "writable": True}], monkeypatch))
    alice = held[0].for_user(ALICE)
    declare(alice, "mine", data / ALICE)
    # When she starts it
    name = alice.containers.start(
        StartRequest(environment="mine", name=f"mounts-{secrets.token_hex(3)}")
    ).key
    # Then her container (running as her) has her folder, read-write
    assert run(docker_client, name, "cat /mnt/data/note.txt") == f"{ALICE}'s note\n"
    run(docker_client, name, "touch /mnt/data/from-the-container")
    assert (data / ALICE / "from-the-container").exists()
    # And the engine was given the path that was checked
    mounts = docker_client.containers.get(docker_name(name)).attrs["Mounts"]
    assert {(m["Source"], m["RW"]) for m in mounts if m["Destination"] == "/mnt/data"} == {
        (str(data / ALICE), True)
    }


def test_a_folder_of_another_user_is_refused_and_nothing_is_left(
    tmp_path: Path,
    data: Path,
    held: list[Authority],
    monkeypatch: pytest.MonkeyPatch,
    docker_client: docker.DockerClient,
) -> None:
    # Given a root shared by everyone, and an environment of alice's mounting bob's folder
    held.append(mounting(tmp_path, [str(data)], monkeypatch))
    alice = held[0].for_user(ALICE)
    declare(alice, "steal", data / BOB)
    # When she starts it, with a GPU
    with pytest.raises(MountNotAllowed) as caught:
        alice.containers.start(StartRequest(environment="steal", name="steal", gpus=1))
    # Then it is refused, saying she may not read it
    assert caught.value.status == 403
    assert f"{ALICE} may not read {data / BOB}" in caught.value.message
    # And no container was made and no GPU is held
    server = held[0].service.containers.server_id
    assert docker_client.containers.list(all=True, filters={"label": f"{L_SERVER}={server}"}) == []
    assert alice.containers.ledger.active("local") == []


def test_a_mount_swapped_for_a_link_while_stopped_is_refused_at_resume(
    tmp_path: Path,
    data: Path,
    held: list[Authority],
    monkeypatch: pytest.MonkeyPatch,
    docker_client: docker.DockerClient,
) -> None:
    # Given alice's container mounting her folder of a per-user root, started and stopped
    baseline = Baseline.take(docker_client, ignore_removed=True)
    held.append(mounting(tmp_path, [{"path": str(data / "{user}"), "writable": True}], monkeypatch))
    server = held[0].service.containers.server_id
    alice = held[0].for_user(ALICE)
    declare(alice, "mine", data / ALICE)
    name = alice.containers.start(
        StartRequest(environment="mine", name=f"resume-{secrets.token_hex(3)}", gpus=1)
    ).key
    alice.containers.stop(name)
    # And, nothing changed, it starts again with her folder
    assert alice.containers.resume(name).status == "running"
    assert run(docker_client, name, "cat /mnt/data/note.txt") == f"{ALICE}'s note\n"
    alice.containers.stop(name)
    # When her folder is a link to bob's by the time it starts again (the engine finds a bind
    # mount's source by its path again at each start, as root, following links)
    mine = data / ALICE
    mine.rename(data / "moved")
    mine.symlink_to(data / BOB)
    # Then resuming it is refused, naming the mount and why
    with pytest.raises(MountNotAllowed) as caught:
        alice.containers.resume(name)
    assert caught.value.status == 403
    assert f"mount of {mine} at /mnt/data" in caught.value.message
    assert f"{mine} is a link now" in caught.value.message
    # And nothing started, and no GPU is held
    assert docker_client.containers.get(docker_name(name)).status == "exited"
    assert alice.containers.ledger.active("local") == []
    alice.containers.remove(name, force=True)
    assert_nothing_leaked(docker_client, baseline, server_id=server)
