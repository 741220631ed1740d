"""The features build installs on the very image whose id its digest and labels name
(``containers/features.py``): a base tag moved between that read and the build does not
change what is built on. On the real engine, by the classic builder and by BuildKit."""

from __future__ import annotations

import contextlib
import io
import json
import logging
import secrets
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import docker
import docker.errors
import pytest
import requests

from jupyter_gpudev.containers import features as features_module
from jupyter_gpudev.containers.features import BASE_REPOSITORY, Features, install_features
from jupyter_gpudev.engine import Registries
from jupyter_gpudev.environments import EnvironmentManager
from jupyter_gpudev.environments.mounts import MountPolicy
from jupyter_gpudev.labels import L_BUILD_BASES
from tests.leaks import Baseline, assert_nothing_leaked

pytestmark = pytest.mark.integration

BASE = "gpudev-base:bookworm"
TEMPORARY = BASE_REPOSITORY


class _Images:
    """``client.images`` whose first ``get`` of ``name`` re-points ``name`` to ``other`` right
    after reading it (as a push or a pull by someone else would between the read and the build)."""

    def __init__(self, images: Any, api: Any, name: str, other: str) -> None:
        self._images, self._api, self._name, self._other = images, api, name, other
        self.moved = False

    def get(self, name: str) -> Any:
        image = self._images.get(name)
        if name == self._name and not self.moved:
            repository, tag = name.rsplit(":", 1)
            self._api.tag(self._other, repository, tag, force=True)
            self.moved = True
        return image

    def __getattr__(self, attr: str) -> Any:
        return getattr(self._images, attr)


class _Client:
    def __init__(self, client: docker.DockerClient, images: _Images) -> None:
        self._client, self.images = client, images

    def __getattr__(self, attr: str) -> Any:
        return getattr(self._client, attr)


def _base(client: docker.DockerClient, which: str) -> str:
    dockerfile = f"FROM {BASE}\nRUN echo {which} > /which-base\n"
    image, _ = client.images.build(fileobj=io.BytesIO(dockerfile.encode()), rm=True, forcerm=True)
    return str(image.id)


def _layers(client: docker.DockerClient, ref: str) -> list[str]:
    return list(client.images.get(ref).attrs["RootFS"]["Layers"])


@pytest.fixture
def bases(docker_client: docker.DockerClient) -> Iterator[tuple[str, str, str]]:
    """(the base's name, the image it names first, another image): removed after the test."""
    nonce = secrets.token_hex(6)
    original, other = (
        _base(docker_client, f"original-{nonce}"),
        _base(docker_client, f"other-{nonce}"),
    )
    name = f"gpudev-pinned-{nonce}:base"
    docker_client.api.tag(original, name.split(":", maxsplit=1)[0], "base")
    yield name, original, other
    for image in (name, original, other):
        with contextlib.suppress(docker.errors.ImageNotFound):
            docker_client.images.remove(image, force=True)


@pytest.mark.parametrize("builder", ["classic", "buildkit"])
def test_the_features_are_installed_on_the_base_read_even_when_its_tag_moves(
    tmp_path: Path,
    docker_client: docker.DockerClient,
    bases: tuple[str, str, str],
    builder: str,
) -> None:
    name, original, other = bases
    baseline = Baseline.take(docker_client, ignore_removed=True)
    trust = MountPolicy(mount_ca_bundle=True).build_trust() if builder == "buildkit" else None
    if builder == "buildkit" and trust is None:
        pytest.skip("no CA bundle on this machine to make a BuildKit build")
    # Given an environment on that base with a local feature
    env_name = f"pin{secrets.token_hex(4)}"
    folder = tmp_path / ".devcontainer"
    (folder / "feat").mkdir(parents=True)
    (folder / "feat" / "devcontainer-feature.json").write_text(
        json.dumps({"id": "feat", "version": "1.0.0"})
    )
    (folder / "feat" / "install.sh").write_text(f"#!/bin/sh\necho {env_name} > /opt/feat\n")
    (folder / "devcontainer.json").write_text(
        json.dumps({"name": env_name, "image": name, "features": {"./feat": {}}})
    )
    env = EnvironmentManager().get(env_name, tmp_path)
    images = _Images(docker_client.images, docker_client.api, name, other)
    said: list[str] = []
    made: list[str] = []

    def install(client: Any) -> str:
        ref = install_features(
            client,
            env,
            name,
            registries=Registries(),
            say=lambda event: said.append(str(event.get("message", ""))),
            log=logging.getLogger("test"),
            trust=trust,
            settings=Features(),
        )
        made.append(ref)
        return ref

    originals, others = _layers(docker_client, original), _layers(docker_client, other)
    try:
        # When the features are installed while the base's tag moves right after it is read
        first = install(_Client(docker_client, images))
        assert images.moved
        # Then they are installed on the image read, which the labels name
        assert _layers(docker_client, first)[: len(originals)] == originals
        assert others[-1] not in _layers(docker_client, first)
        assert docker_client.images.get(first).labels[L_BUILD_BASES] == f"{name}@{original}"
        # And on the next start, on the image the name is now, then reused unchanged
        second = install(docker_client)
        assert second != first
        assert _layers(docker_client, second)[: len(others)] == others
        said.clear()
        assert install(docker_client) == second
        assert any(m.startswith("features unchanged") for m in said)
    finally:
        for ref in made:
            with contextlib.suppress(docker.errors.ImageNotFound):
                docker_client.images.remove(ref, force=True)
    # And no temporary name is left on the bases (the original, named no more, may be gone)
    for image in (original, other):
        with contextlib.suppress(docker.errors.ImageNotFound):
            tags = docker_client.images.get(image).tags
            assert not [tag for tag in tags if tag.startswith(TEMPORARY)], tags
    assert docker_client.images.get(other).tags == [name]
    assert_nothing_leaked(docker_client, baseline, environments=[env_name])


def test_temporary_base_names_a_killed_server_left_are_removed_by_a_later_build(
    docker_client: docker.DockerClient,
) -> None:
    # Given temporary base names left by builds a killed server ran, one over a day ago
    old = f"{int(time.time()) - 2 * 86400}-{secrets.token_hex(4)}"
    young = f"{int(time.time()) - 60}-{secrets.token_hex(4)}"
    for tag in (old, young):
        docker_client.api.tag(BASE, BASE_REPOSITORY, tag)
    try:
        # When a later build sweeps them
        features_module._remove_stale_names(docker_client, logging.getLogger("test"))
        # Then the old one is gone, the young one (a build running now) and the base kept
        tags = docker_client.images.get(BASE).tags
        assert f"{BASE_REPOSITORY}:{old}" not in tags
        assert f"{BASE_REPOSITORY}:{young}" in tags
        assert BASE in tags
    finally:
        for tag in (old, young):
            with contextlib.suppress(docker.errors.NotFound):
                docker_client.api.remove_image(f"{BASE_REPOSITORY}:{tag}", noprune=True)


def test_a_temporary_name_that_cannot_be_removed_does_not_hide_the_builds_error(
    caplog: pytest.LogCaptureFixture,
) -> None:
    # Given an engine that goes away at the end of a build
    class Api:
        def tag(self, *_: Any) -> None:
            pass

        def images(self, **_: Any) -> list[Any]:
            return []

        def remove_image(self, *_: Any, **__: Any) -> None:
            raise requests.ConnectionError("the engine went away")

    client: Any = type("Client", (), {"api": Api()})()
    # When the build fails, then its own error reaches the caller, the untag is logged
    with (
        pytest.raises(RuntimeError, match="the build's"),
        features_module._named(client, "sha256:x", f"{BASE_REPOSITORY}:1-a", logging.getLogger()),
    ):
        raise RuntimeError("the build's own error")
    assert "the engine went away" in caplog.text
