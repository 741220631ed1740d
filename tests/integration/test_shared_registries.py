"""The shared service's registry credentials act for no user beyond what the administrator
allows (issue #30, item 4): a user pushes with them only under their own prefix of each
registry (``c.Registries.push_prefix``), and they fetch only the images that
``c.Registries.shared_pull_images`` allows, for an environment's image and a build's base
alike; every other pull is made without credentials and says so.

The service holds credentials for a real registry (htpasswd authentication: nothing can be
pulled from it without them) both ways it can: ``c.Registries.credentials`` and its Docker
configuration (what ``docker login`` writes; the engine's classic builder was sent all of it).
Two users' views of one service are built in-process (``Authority.for_user``, with the real
accounts gpudev-alice and gpudev-bob); every image and environment name holds the test's own
random part.
"""

from __future__ import annotations

import base64
from collections.abc import Iterator
from pathlib import Path

import docker
import pytest
import requests

from jupyter_gpudev.changes.commit import CommitOptions
from jupyter_gpudev.containers import StartRequest
from jupyter_gpudev.engine import Reference, Registries
from jupyter_gpudev.errors import Forbidden, ImageError
from jupyter_gpudev.services import Services
from jupyter_gpudev.shared.authority import Authority
from tests.integration.shared_views import Names, close, names, new_service, service_config
from tests.integration.test_diff import sh
from tests.integration.test_shared_builds import built, environment
from tests.integration.test_shared_images import ALICE, BOB, PYTHON, attempt
from tests.registry import Registry

pytestmark = pytest.mark.integration

__all__ = ["names"]  # the fixture, shared with the other shared-mode tests

#: Where the administrator lets the service's credentials fetch images (in this registry).
SHARED = "shared"


@pytest.fixture
def authority(
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    docker_client: docker.DockerClient,
    registry: Registry,
    names: Names,
) -> Iterator[Authority]:
    """The shared service's views, holding the registry's credentials in
    ``c.Registries.credentials`` and in the service's Docker configuration; the
    administrator's pull allow-list names ``REGISTRY/shared/*``."""
    monkeypatch.setenv("DOCKER_CONFIG", str(registry.docker_config(tmp_path / "docker")))
    password = tmp_path / "registry-password"
    password.write_text(registry.password)
    config = service_config(tmp_path, monkeypatch)
    config.Registries.credentials = {
        registry.address: {"username": registry.username, "password_file": str(password)}
    }
    config.Registries.shared_pull_images = [f"{registry.address}/{SHARED}/*"]
    held = new_service(tmp_path, config)
    yield held
    close(held, docker_client)


def in_registry(registry: Registry, ref: str) -> bool:
    """Whether the registry has ``ref`` (asked with its credentials)."""
    reference = Reference.parse(ref)
    path = reference.repository.removeprefix(f"{registry.address}/")
    answer = requests.head(
        f"http://{registry.address}/v2/{path}/manifests/{reference.tag}",
        auth=(registry.username, registry.password),
        headers={"Accept": "application/vnd.docker.distribution.manifest.v2+json"},
        timeout=10,
    )
    return answer.status_code == 200


def put_in_registry(registry: Registry, docker_client: docker.DockerClient, ref: str) -> str:
    """Push the kernel image to the registry as ``ref`` (with its credentials), and leave the
    engine without that name: a start needs to pull it."""
    repository, tag = ref.rsplit(":", 1)
    docker_client.api.tag(PYTHON, repository, tag)
    auth = {"username": registry.username, "password": registry.password}
    for event in docker_client.api.push(
        repository, tag=tag, stream=True, decode=True, auth_config=auth
    ):
        assert "error" not in event, event
    docker_client.images.remove(ref)
    assert in_registry(registry, ref)
    return ref


def said(err: BaseException | None, registry: Registry, logged: pytest.LogCaptureFixture) -> str:
    """What a refusal told the user: its message and details, checked (with what was logged)
    to hold no credential."""
    assert err is not None
    text = f"{err} {getattr(err, 'details', '')}"
    login = base64.b64encode(f"{registry.username}:{registry.password}".encode()).decode()
    for words in (text, logged.text):
        assert registry.password not in words
        assert login not in words
    return text


def box_of(view: Services, names: Names, docker_client: docker.DockerClient) -> str:
    """A running dev container of ``view``'s user with a change: its name."""
    environment(view, "py", {"image": PYTHON})
    name = f"box-{names.part}"
    view.containers.start(StartRequest(environment="py", name=name))
    user = view.containers.access.user
    sh(docker_client, name, f"echo {user} > /etc/who-made-me", owner=user)
    return name


def test_a_user_pushes_with_the_services_credentials_only_under_their_own_prefix(
    authority: Authority,
    names: Names,
    registry: Registry,
    docker_client: docker.DockerClient,
    caplog: pytest.LogCaptureFixture,
) -> None:
    # Given the service's credentials for the registry, and alice's container with a change
    alice = authority.for_user(ALICE)
    box = box_of(alice, names, docker_client)
    for target in (
        names(f"{registry.address}/{BOB}/x:1"),
        names(f"{registry.address}/library/base:1"),
    ):
        # When she snapshots it and pushes it to bob's repository, or to everyone's
        options = CommitOptions(snapshot=target, push=True)
        refused = attempt(lambda: alice.committer.commit(box, options))  # noqa: B023
        # Then it is refused, naming the prefix she may push under, and nothing was pushed
        assert isinstance(refused, Forbidden), (target, refused)
        assert f"{registry.address}/{ALICE}/" in said(refused, registry, caplog)
        assert "c.Registries.push_prefix" in refused.message
        assert not in_registry(registry, target)
    # When she pushes it under her own prefix
    own = names(f"{registry.address}/{ALICE}/x:1")
    result = alice.committer.commit(box, CommitOptions(snapshot=own, push=True))
    # Then the registry has it
    assert result.snapshot is not None
    assert result.snapshot.pushed_to == own
    assert in_registry(registry, own)


def test_an_environments_image_is_fetched_with_the_services_credentials_only_if_allowed(
    authority: Authority,
    names: Names,
    registry: Registry,
    docker_client: docker.DockerClient,
    caplog: pytest.LogCaptureFixture,
) -> None:
    # Given a private image in the registry (nothing gets it without credentials), and
    # alice's environment naming it
    private = put_in_registry(registry, docker_client, names(f"{registry.address}/private/thing:1"))
    alice = authority.for_user(ALICE)
    environment(alice, "priv", {"image": private})
    # When she starts it
    refused = attempt(
        lambda: alice.containers.start(StartRequest(environment="priv", name=f"p-{names.part}"))
    )
    # Then the service's credentials did not fetch it: the pull, made without them, failed
    # saying so, and no container was made
    assert isinstance(refused, ImageError), refused
    text = said(refused, registry, caplog)
    assert "c.Registries.shared_pull_images" in text
    assert "without the gpudev service's credentials" in text
    assert names.image_id(private) is None
    assert not docker_client.containers.list(all=True, filters={"name": f"p-{names.part}"})
    # Given an image the administrator's allow-list names, and bob's environment naming it
    allowed = put_in_registry(registry, docker_client, names(f"{registry.address}/{SHARED}/base:1"))
    bob = authority.for_user(BOB)
    environment(bob, "base", {"image": allowed})
    # When he starts it
    bob.containers.start(StartRequest(environment="base", name=f"b-{names.part}"))
    # Then it was pulled with the service's credentials, and runs
    assert names.image_id(allowed) is not None
    assert sh(docker_client, f"b-{names.part}", "echo runs", owner=BOB) == "runs\n"


@pytest.mark.parametrize("buildkit", [False, True], ids=["classic", "buildkit"])
def test_a_build_gets_the_services_credentials_only_for_the_bases_allowed(  # noqa: PLR0917
    authority: Authority,
    names: Names,
    registry: Registry,
    docker_client: docker.DockerClient,
    caplog: pytest.LogCaptureFixture,
    buildkit: bool,
) -> None:
    # Given a private image in the registry, and alice's environment built FROM it (by the
    # engine's classic builder, or by BuildKit: its RUN steps trusting the CA bundle)
    private = put_in_registry(registry, docker_client, names(f"{registry.address}/private/thing:1"))
    alice = authority.for_user(ALICE)
    alice.containers.mount_policy.mount_ca_bundle = buildkit
    built(alice, f"steal-{names.part}", f"FROM {private}\nRUN echo built > /built\n")
    # When she starts it
    refused = attempt(
        lambda: alice.containers.start(
            StartRequest(environment=f"steal-{names.part}", name=f"a-{names.part}")
        )
    )
    # Then the build did not get the service's credentials: the base was not fetched, and
    # she is told why
    assert isinstance(refused, ImageError), refused
    text = said(refused, registry, caplog)
    assert private in text
    assert "c.Registries.shared_pull_images" in text
    assert names.image_id(private) is None
    assert not docker_client.containers.list(all=True, filters={"name": f"a-{names.part}"})
    # Given her environment built FROM an image the administrator's allow-list names
    allowed = put_in_registry(registry, docker_client, names(f"{registry.address}/{SHARED}/base:1"))
    built(alice, f"ok-{names.part}", f"FROM {allowed}\nRUN echo built > /built\n")
    # When she starts it
    alice.containers.start(StartRequest(environment=f"ok-{names.part}", name=f"o-{names.part}"))
    # Then its base was fetched with the service's credentials and the image built on it
    assert names.image_id(allowed) is not None
    assert sh(docker_client, f"o-{names.part}", "cat /built", owner=ALICE) == "built\n"


def test_in_single_user_mode_the_users_own_credentials_pull_and_push_anything(
    registry: Registry,
    names: Names,
    docker_client: docker.DockerClient,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # Given the user's own credentials for the registry (docker login), no allow-list
    monkeypatch.setenv("DOCKER_CONFIG", str(registry.docker_config(tmp_path / "docker")))
    registries = Registries()
    private = put_in_registry(registry, docker_client, names(f"{registry.address}/private/thing:1"))
    # When an image is pulled, and pushed to any repository
    registries.pull(docker_client, private, lambda _event: None)
    anywhere = names(f"{registry.address}/library/base:1")
    repository, tag = anywhere.rsplit(":", 1)
    docker_client.api.tag(private, repository, tag)
    registries.push(docker_client, anywhere, lambda _event: None)
    # Then both were done with those credentials
    assert names.image_id(private) is not None
    assert in_registry(registry, anywhere)
