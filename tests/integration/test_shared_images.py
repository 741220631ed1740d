"""Snapshots never replace an image that is not the committing user's own snapshot (issue #30):
in shared mode each user's snapshots are tagged under their own repository, and in either mode
an existing image is re-tagged only when gpudev's state says it is that user's snapshot (never
because of its labels).

Two users' views of one service are built in-process (``Authority.for_user``, with the real
accounts gpudev-alice and gpudev-bob); their dev containers run on the real engine. Every image
name a test makes holds the test's own random part, so that nothing of another test (or of
another engineer's run on the same engine) is touched.
"""

from __future__ import annotations

import io
import json
import os
import pwd
from collections.abc import Callable, Iterator
from pathlib import Path

import docker
import pytest

from jupyter_gpudev.changes.capture import ChangeCapture
from jupyter_gpudev.changes.commit import CommitOptions, Committer
from jupyter_gpudev.containers import DevContainers, StartRequest
from jupyter_gpudev.errors import Conflict, GPUDevError
from jupyter_gpudev.labels import L_OWNER, L_SNAPSHOT_CONTAINER, L_SNAPSHOT_ENV
from jupyter_gpudev.services import Services
from jupyter_gpudev.shared.authority import Authority
from tests.integration.shared_views import Names, close, names, new_service, service_config
from tests.integration.test_diff import sh, write_environment
from tests.registry import Registry

pytestmark = pytest.mark.integration

__all__ = ["names"]  # the fixture, shared with the other shared-mode tests

ALICE, BOB = "gpudev-alice", "gpudev-bob"
PYTHON = "gpudev-python:bookworm"


@pytest.fixture
def base(names: Names, docker_client: docker.DockerClient) -> str:
    """The image every user's environment names (this test's own tag of gpudev-python: the
    same as the default image everyone's containers use, without touching that tag)."""
    ref = names("gpudev-test-shared/python:bookworm")
    repository, tag = ref.rsplit(":", 1)
    docker_client.api.tag(PYTHON, repository, tag)
    return ref


def environment(root: Path, image: str) -> None:
    folder = root / ".devcontainer" / "py"
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "devcontainer.json").write_text(json.dumps({"image": image}))


def hand_over(view: Services) -> None:
    """Make everything in the folder of ``view``'s user theirs (as if they had written it)."""
    account = pwd.getpwnam(view.containers.access.user)
    for folder, subfolders, files in os.walk(view.containers.root_dir):
        for name in [*subfolders, *files]:
            os.chown(os.path.join(folder, name), account.pw_uid, account.pw_gid)


@pytest.fixture
def authority(
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    docker_client: docker.DockerClient,
    base: str,
) -> Iterator[Authority]:
    """The shared service's views (its state in the test's folder); each user's folder (made
    by the service) has an environment "py" of ``base``; their containers are removed
    afterwards."""
    held = new_service(tmp_path, service_config(tmp_path, monkeypatch))
    for user in (ALICE, BOB):
        view = held.for_user(user)
        environment(view.containers.root_dir, base)
        hand_over(view)
    yield held
    close(held, docker_client)


@pytest.fixture
def pushing(registry: Registry, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Registry:
    """The registry, with the service's credentials for it (as `docker login` writes them)."""
    monkeypatch.setenv("DOCKER_CONFIG", str(registry.docker_config(tmp_path / "docker")))
    return registry


def container_of(view: Services, names: Names, docker_client: docker.DockerClient) -> str:
    """A running dev container of ``view``'s user, with a change: its name."""
    name = f"box-{names.part}-{view.containers.access.user.removeprefix('gpudev-')}"
    view.containers.start(StartRequest(environment="py", name=name))
    user = view.containers.access.user
    sh(docker_client, name, f"echo {user} > /etc/who-made-me", owner=user)
    return name


def attempt(action: Callable[[], object]) -> GPUDevError | None:
    """The error ``action`` raised (``None`` when it did what it was asked)."""
    try:
        action()
    except GPUDevError as err:
        return err
    return None


def made_by(docker_client: docker.DockerClient, image: str) -> str:
    """Who wrote /etc/who-made-me in ``image`` ("" when no one did)."""
    out = docker_client.containers.run(
        image, ["sh", "-c", "cat /etc/who-made-me 2>/dev/null; true"], remove=True
    )
    assert isinstance(out, bytes)
    return out.decode().strip()


# -- shared mode ----------------------------------------------------------------------------


def test_a_user_cannot_replace_the_image_everyones_containers_start_from(
    authority: Authority, names: Names, base: str, docker_client: docker.DockerClient
) -> None:
    # Given the image every user's environment names, and alice's container with her change
    alice = authority.for_user(ALICE)
    before = names.image_id(base)
    box = container_of(alice, names, docker_client)
    # When alice snapshots her container to that image's tag
    result = alice.committer.commit(box, CommitOptions(snapshot=base))
    # Then the tag still names the image it named
    assert names.image_id(base) == before
    # And bob's next container from it does not run what alice made
    assert made_by(docker_client, base) == ""
    # And alice's snapshot is under her own repository, made from her container
    assert result.snapshot is not None
    mine = f"localhost/gpudev/{ALICE}/{base}"
    assert result.snapshot.reference == mine
    assert result.snapshot.to_json()["local"] == mine
    assert result.snapshot.to_json()["pushed_to"] is None
    assert names.image_id(mine) == result.snapshot.image_id
    assert made_by(docker_client, mine) == ALICE


def test_a_user_cannot_replace_another_users_snapshot(
    authority: Authority, names: Names, docker_client: docker.DockerClient
) -> None:
    # Given bob's snapshot of his container
    alice, bob = authority.for_user(ALICE), authority.for_user(BOB)
    bobs = bob.committer.commit(
        container_of(bob, names, docker_client), CommitOptions(snapshot=names("team/env:v1"))
    ).snapshot
    assert bobs is not None
    bobs_tag = bobs.reference
    # When alice snapshots her container to the tag bob's snapshot has
    box = container_of(alice, names, docker_client)
    refused = attempt(lambda: alice.committer.commit(box, CommitOptions(snapshot=bobs_tag)))
    # Then the tag still names bob's snapshot
    assert names.image_id(bobs_tag) == bobs.image_id
    assert made_by(docker_client, bobs_tag) == BOB
    # And alice was told why (a conflict: the tag is another user's)
    assert isinstance(refused, Conflict), refused
    assert f"localhost/gpudev/{ALICE}/" in refused.message
    # When alice snapshots to the name bob gave his
    result = alice.committer.commit(box, CommitOptions(snapshot=names("team/env:v1")))
    # Then hers is her own image under her repository, and bob's is untouched
    assert result.snapshot is not None
    assert result.snapshot.reference == f"localhost/gpudev/{ALICE}/{names('team/env:v1')}"
    assert made_by(docker_client, result.snapshot.reference) == ALICE
    assert names.image_id(bobs_tag) == bobs.image_id


def test_a_user_replaces_only_their_own_snapshot_never_an_image_put_under_their_name(
    authority: Authority, names: Names, base: str, docker_client: docker.DockerClient
) -> None:
    # Given alice's snapshot
    alice = authority.for_user(ALICE)
    box = container_of(alice, names, docker_client)
    first = alice.committer.commit(box, CommitOptions(snapshot=names("mine:v1"))).snapshot
    assert first is not None
    # When she snapshots to the same tag again
    sh(docker_client, box, "echo again > /etc/again", owner=ALICE)
    second = alice.committer.commit(box, CommitOptions(snapshot=names("mine:v1"))).snapshot
    # Then her new snapshot replaced her previous one
    assert second is not None
    assert second.reference == first.reference
    assert second.image_id != first.image_id
    assert names.image_id(second.reference) == second.image_id
    # Given an image that is no snapshot of hers under her repository, labelled as if it were
    # (anyone can write labels: a LABEL line, a pulled image)
    forged = f"localhost/gpudev/{ALICE}/{names('forged:v1')}"
    labels = {L_SNAPSHOT_ENV: "py", L_SNAPSHOT_CONTAINER: box, L_OWNER: ALICE}
    image, _ = docker_client.images.build(
        fileobj=io.BytesIO(f"FROM {base}\n".encode()), labels=labels, tag=forged, rm=True
    )
    # When she snapshots to that tag, it is refused, and the image keeps its tag
    with pytest.raises(Conflict, match="not a snapshot you made"):
        alice.committer.commit(box, CommitOptions(snapshot=names("forged:v1")))
    assert names.image_id(forged) == image.id


def test_a_push_never_replaces_the_engines_copy_of_another_image(
    authority: Authority,
    names: Names,
    base: str,
    pushing: Registry,
    docker_client: docker.DockerClient,
) -> None:
    # Given the service's credentials for a registry, and the engine's copy of an image of
    # that registry, under alice's own prefix there, that another user's environment pulled
    pulled = names(f"{pushing.address}/{ALICE}/python:v1")
    repository, tag = pulled.rsplit(":", 1)
    docker_client.api.tag(base, repository, tag)
    before = names.image_id(pulled)
    alice = authority.for_user(ALICE)
    box = container_of(alice, names, docker_client)
    # When alice snapshots her container and pushes it to that reference
    options = CommitOptions(snapshot=pulled, push=True)
    refused = attempt(lambda: alice.committer.commit(box, options))
    # Then the engine's copy is the image it was
    assert names.image_id(pulled) == before
    assert made_by(docker_client, pulled) == ""
    # And alice was told why
    assert isinstance(refused, Conflict), refused
    assert pulled in refused.message


def test_a_push_sends_the_users_own_snapshot_and_leaves_no_registry_tag(
    authority: Authority, names: Names, pushing: Registry, docker_client: docker.DockerClient
) -> None:
    # Given the service's credentials for a registry, and alice's container
    alice = authority.for_user(ALICE)
    box = container_of(alice, names, docker_client)
    target = names(f"{pushing.address}/{ALICE}/env:v1")
    # When she snapshots it and pushes it to the registry
    result = alice.committer.commit(box, CommitOptions(snapshot=target, push=True))
    # Then the answer names her local tag and the pushed reference
    assert result.snapshot is not None
    local = f"localhost/gpudev/{ALICE}/{names(f'{ALICE}/env:v1')}"
    answer = result.snapshot.to_json()
    assert (answer["reference"], answer["local"], answer["pushed_to"]) == (local, local, target)
    assert str(answer["digest"]).startswith("sha256:")
    # And the engine keeps only her local tag: the registry's name is not left pointing at it
    assert names.image_id(local) == result.snapshot.image_id
    assert names.image_id(target) is None
    # And what the registry has is her snapshot (pulled back: the administrator lets the
    # service's credentials fetch what users push under their own prefix)
    alice.containers.registries.shared_pull_images = [f"{pushing.address}/{{user}}/*"]
    alice.containers.registries.pull(docker_client, target, lambda _event: None)
    assert names.image_id(target) == result.snapshot.image_id


def test_a_verified_image_never_replaces_another_users_environment_image(
    authority: Authority, names: Names, base: str, docker_client: docker.DockerClient
) -> None:
    # Given alice's container of an environment she builds, with her change
    alice, bob = authority.for_user(ALICE), authority.for_user(BOB)
    env = f"verify-{names.part}"
    write_environment(alice.containers.root_dir, env)
    hand_over(alice)
    box = f"vbox-{names.part}"
    alice.containers.start(StartRequest(environment=env, name=box))
    sh(docker_client, box, f"echo {ALICE} > /etc/who-made-me", owner=ALICE)
    # and bob's environment of the same name, whose Dockerfile is the one her commit writes
    # (its files his own): his image is built under the name hers will have
    write_environment(bob.containers.root_dir, env)
    _, rendered = alice.capture.diff(box)
    (bob.containers.root_dir / ".devcontainer" / env / "Dockerfile").write_text(rendered.new_text)
    hand_over(bob)
    bobs = bob.containers.environments.get(env, bob.containers.root_dir).image_ref()
    # (an image of its own under that name: the base itself named so would be refused to
    # everyone, every name of an image counting)
    his = f"FROM {base}\nLABEL test.part={names.part}\n"
    docker_client.images.build(fileobj=io.BytesIO(his.encode()), tag=bobs, rm=True)
    before = names.image_id(bobs)
    # When alice commits with --verify --write
    alice.committer.commit(box, CommitOptions(verify=True, write=True))
    # Then bob's image keeps its name: her verified image did not take it
    assert names.image_id(bobs) == before
    assert made_by(docker_client, bobs) == ""


# -- single-user mode -----------------------------------------------------------------------


@pytest.fixture
def single(
    tmp_path: Path, dev_containers: Callable[..., DevContainers], base: str
) -> DevContainers:
    """A single-user server whose environment "py" is ``base``."""
    root = tmp_path / "work"
    environment(root, base)
    return dev_containers(root)


def test_in_single_user_mode_a_snapshot_never_replaces_an_image_it_did_not_make(
    single: DevContainers, names: Names, base: str, docker_client: docker.DockerClient
) -> None:
    # Given a container of the base image, with a change
    single.start(StartRequest(environment="py", name=f"sbox-{names.part}"))
    sh(docker_client, f"sbox-{names.part}", "echo me > /etc/who-made-me")
    committer = Committer(ChangeCapture(single), single.registries)
    before = names.image_id(base)
    # When it is snapshotted to the base image's tag
    refused = attempt(lambda: committer.commit(f"sbox-{names.part}", CommitOptions(snapshot=base)))
    # Then the tag still names the base image, and the refusal says why
    assert names.image_id(base) == before
    assert isinstance(refused, Conflict), refused
    assert base in refused.message
    assert "not a snapshot you made" in refused.message
    assert f"docker rmi {base}" in refused.message
    # When it is snapshotted to a new tag, then to that tag again
    tag = names("gpudev-test/again:v1")
    first = committer.commit(f"sbox-{names.part}", CommitOptions(snapshot=tag)).snapshot
    sh(docker_client, f"sbox-{names.part}", "echo again > /etc/again")
    second = committer.commit(f"sbox-{names.part}", CommitOptions(snapshot=tag)).snapshot
    # Then the tag is its own (nothing per-user in single-user mode), and the second snapshot
    # replaced the first
    assert first is not None
    assert second is not None
    assert first.reference == second.reference == tag
    assert names.image_id(tag) == second.image_id != first.image_id
