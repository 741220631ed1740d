"""Dev Container Features in shared mode (issue #34): each user's features are installed on an
image of their own, fetched with the service's credentials only where the administrator lets
them fetch for that user, and what one user fetched is never served to another.

The service's views of two real accounts (gpudev-alice, gpudev-bob) on the real engine; the
features are published to the real registry (authentication on) in the spec's OCI layout.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import docker
import docker.errors
import pytest

from jupyter_gpudev.changes.commit import CommitOptions
from jupyter_gpudev.containers import StartRequest
from jupyter_gpudev.containers.namespace import user_repository
from jupyter_gpudev.environments import features as spec
from jupyter_gpudev.shared.authority import Authority
from tests.integration.shared_views import Names, close, names, new_service, service_config
from tests.integration.test_diff import sh
from tests.integration.test_features import feature_json, publish
from tests.integration.test_shared_builds import environment, image_of
from tests.integration.test_shared_images import ALICE, BOB, PYTHON, attempt
from tests.registry import Registry

pytestmark = pytest.mark.integration

__all__ = ["names"]  # the fixture, shared with the other shared-mode tests


@pytest.fixture
def authority(
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    docker_client: docker.DockerClient,
    registry: Registry,
    names: Names,
) -> Iterator[Authority]:
    """The service's views, holding the registry's credentials; the administrator lets them
    fetch the features under ``features/shared/`` for everyone, and under ``features/USER/``
    for that user."""
    password = tmp_path / "registry-password"
    password.write_text(registry.password)
    config = service_config(tmp_path, monkeypatch)
    config.Registries.credentials = {
        registry.address: {"username": registry.username, "password_file": str(password)}
    }
    config.Registries.shared_pull_images = [
        f"{registry.address}/features/shared/*",
        f"{registry.address}/features/{{user}}/*",
    ]
    held = new_service(tmp_path, config)
    yield held
    close(held, docker_client)


def hello(registry: Registry, namespace: str, names: Names) -> tuple[str, str]:
    """A feature writing /opt/hello, published as ``namespace/hello-PART:1``: its reference
    and its manifest digest."""
    name = f"hello-{names.part}"
    digest, _ = publish(
        registry,
        name,
        "1",
        {
            "devcontainer-feature.json": feature_json(name),
            "install.sh": f"#!/bin/sh\necho {namespace}-{names.part} > /opt/hello\n",
        },
        namespace=namespace,
    )
    return f"{registry.address}/{namespace}/{name}:1", digest


def test_each_user_gets_the_features_on_an_image_of_their_own(
    authority: Authority, names: Names, registry: Registry, docker_client: docker.DockerClient
) -> None:
    # Given alice's and bob's environments of the same name naming the same shared feature
    ref, _ = hello(registry, "features/shared", names)
    env = f"feat-{names.part}"
    alice, bob = authority.for_user(ALICE), authority.for_user(BOB)
    for view in (alice, bob):
        environment(view, env, {"image": PYTHON, "features": {ref: {}}})
    # When each starts it
    alice.containers.start(StartRequest(environment=env, name=f"a-{names.part}"))
    bob.containers.start(StartRequest(environment=env, name=f"b-{names.part}"))
    # Then each container has the feature, on an image in its user's own repository
    for box, user in ((f"a-{names.part}", ALICE), (f"b-{names.part}", BOB)):
        assert sh(docker_client, box, "cat /opt/hello", owner=user).strip() == (
            f"features/shared-{names.part}"
        )
    alices, bobs = (
        image_of(docker_client, f"a-{names.part}", ALICE),
        image_of(docker_client, f"b-{names.part}", BOB),
    )
    assert alices[0].startswith(f"{user_repository(ALICE)}/env-features-{env}:")
    assert bobs[0].startswith(f"{user_repository(BOB)}/env-features-{env}:")
    # And the lockfile gpudev wrote in each workspace is its user's
    for view in (alice, bob):
        lockfile = view.containers.root_dir / ".devcontainer" / env / spec.LOCKFILE
        assert lockfile.stat().st_uid == view.containers.workspace_owner[0]  # type: ignore[index]
    # When alice starts it again, nothing changed: her image is reused, not built again
    alice.containers.start(StartRequest(environment=env, name=f"a2-{names.part}"))
    assert image_of(docker_client, f"a2-{names.part}", ALICE) == alices


def test_a_feature_fetched_for_one_user_is_not_served_to_another(
    authority: Authority, names: Names, registry: Registry, docker_client: docker.DockerClient
) -> None:
    # Given alice's private feature, which the service's credentials fetch for her only
    ref, digest = hello(registry, f"features/{ALICE}", names)
    alice, bob = authority.for_user(ALICE), authority.for_user(BOB)
    env = f"priv-{names.part}"
    environment(alice, env, {"image": PYTHON, "features": {ref: {}}})
    alice.containers.start(StartRequest(environment=env, name=f"a-{names.part}"))
    assert sh(docker_client, f"a-{names.part}", "cat /opt/hello", owner=ALICE).strip() == (
        f"features/{ALICE}-{names.part}"
    )
    # When bob names the same feature by its digest (as alice's lockfile pins it)
    pinned = f"{ref.rsplit(':', 1)[0]}@{digest}"
    environment(bob, env, {"image": PYTHON, "features": {pinned: {}}})
    error = attempt(
        lambda: bob.containers.start(StartRequest(environment=env, name=f"b-{names.part}"))
    )
    # Then it is fetched for him, without the service's credentials, and the registry refuses
    assert error is not None
    assert "credentials fetch only what c.Registries.shared_pull_images" in error.message
    assert registry.password not in error.message
    assert not [
        c for c in docker_client.containers.list(all=True) if f"b-{names.part}" in (c.name or "")
    ]
    assert os.path.exists(alice.containers.root_dir / ".devcontainer" / env / spec.LOCKFILE)


def test_a_users_verify_installs_their_features_on_their_rebuilt_image(
    authority: Authority, names: Names, registry: Registry, docker_client: docker.DockerClient
) -> None:
    # Given bob's environment built from a Dockerfile, with a local feature adding an account
    env = f"ver-{names.part}"
    bob = authority.for_user(BOB)
    folder = bob.containers.root_dir / ".devcontainer" / env
    (folder / "svc").mkdir(parents=True)
    (folder / "svc" / "devcontainer-feature.json").write_text(feature_json("svc"))
    (folder / "svc" / "install.sh").write_text(
        "#!/bin/sh\nset -e\nuseradd --system --no-create-home featsvc\n"
    )
    environment(
        bob,
        env,
        {"build": {"dockerfile": "Dockerfile"}, "features": {"./svc": {}}},
        Dockerfile=f"FROM {PYTHON}\n",
    )
    box = f"v-{names.part}"
    bob.containers.start(StartRequest(environment=env, name=box))
    assert "featsvc" in sh(docker_client, box, "getent passwd featsvc", owner=BOB)
    # And a change in his container
    sh(docker_client, box, "echo 'a shared feature box' >> /etc/motd", owner=BOB)
    # When he commits it with --verify
    result = bob.committer.commit(box, CommitOptions(verify=True))
    # Then the rebuild has the feature's account, as the container has: no difference
    assert result.verify is not None
    assert result.verify.differences == []
    # And the features image the verify built (his, in his repository) is removed
    assert result.verify.features_image_id
    with pytest.raises(docker.errors.ImageNotFound):
        docker_client.images.get(result.verify.features_image_id)
