"""Only gpudev's GPU claim containers are taken for claims: a dev container whose image carries
the claim labels, or any other container that has them, is never removed as a stale claim.

A claim is a container gpudev creates from its claim image (``leasing/claims.py``); the sweep at
every start removes a claim whose holder is gone, by force. An image may carry gpudev's labels
and its containers inherit them: a dev container made from one would be "a claim of a holder
that does not exist" and removed, uncommitted changes and all.
"""

from __future__ import annotations

import contextlib
import io
import json
import secrets
from collections.abc import Callable, Iterator
from pathlib import Path

import docker
import docker.errors
import pytest
from docker.models.containers import Container
from traitlets.config import Config

from jupyter_gpudev.containers import DevContainers, StartRequest
from jupyter_gpudev.errors import GPUDevError
from jupyter_gpudev.labels import L_CLAIM, L_CLAIM_AT, L_CLAIM_HOLDER, L_MANAGED, L_PROBE
from jupyter_gpudev.leasing import EngineClaims, GPUTaken, claim_name
from tests.leaks import Baseline, assert_nothing_leaked

pytestmark = pytest.mark.integration

BASE = "gpudev-base:bookworm"


def no_container_id() -> str:
    """An engine id (64 hex) no container has."""
    return secrets.token_hex(32)


@pytest.fixture
def claim_labelled_image(docker_client: docker.DockerClient) -> Iterator[tuple[str, str, str]]:
    """An image carrying gpudev's claim labels (a GPU, a holder that does not exist) and its
    probe label: its tag, the GPU and the holder id."""
    tag = f"gpudev-test-claimlabels:{secrets.token_hex(4)}"
    uuid = f"GPU-claimlabels-{secrets.token_hex(4)}"
    holder = no_container_id()
    dockerfile = (
        f"FROM {BASE}\n"
        f'LABEL {L_CLAIM}="{uuid}" {L_CLAIM_HOLDER}="{holder}" {L_CLAIM_AT}="0" {L_PROBE}="1"\n'
    )
    docker_client.images.build(fileobj=io.BytesIO(dockerfile.encode()), tag=tag, rm=True)
    yield tag, uuid, holder
    with contextlib.suppress(docker.errors.APIError):
        docker_client.images.remove(tag, force=True)


def test_a_dev_container_of_an_image_with_claim_labels_survives_the_sweep_and_a_release(
    tmp_path: Path,
    dev_containers: Callable[..., DevContainers],
    docker_client: docker.DockerClient,
    claim_labelled_image: tuple[str, str, str],
) -> None:
    tag, _uuid, holder = claim_labelled_image
    root = tmp_path / "work"
    env = f"claimlabels{secrets.token_hex(3)}"
    folder = root / ".devcontainer" / env
    folder.mkdir(parents=True)
    (folder / "devcontainer.json").write_text(json.dumps({"image": tag}))
    config = Config()
    config.GPUInventory.backend = "none"
    manager = dev_containers(root, config)
    baseline = Baseline.take(docker_client, ignore_removed=True)
    name = f"{env}-dev"
    try:
        # Given a dev container started from an image that carries gpudev's claim labels
        info = manager.start(StartRequest(environment=env, name=name))
        container = docker_client.containers.get(info.container_id)
        # With a change made in it, not committed
        code, out = container.exec_run(["sh", "-c", "echo precious > /tmp/uncommitted.txt"])
        assert code == 0, out
        # When the server reconciles (every start does: the stale claims are swept) and the
        # claims of the holder the image names are released
        manager.reconcile()
        EngineClaims(docker_client).release(holder)
        # Then the dev container is still there, running, its change in it
        container.reload()
        assert container.status == "running"
        code, out = container.exec_run(["cat", "/tmp/uncommitted.txt"])
        assert (code, out) == (0, b"precious\n")
        # And gpudev's own (empty) values are its labels, not the image's
        for label in (L_CLAIM, L_CLAIM_HOLDER, L_CLAIM_AT, L_PROBE):
            assert container.labels.get(label) == "", label
    finally:
        with contextlib.suppress(GPUDevError):
            manager.remove(name, force=True)
    assert_nothing_leaked(docker_client, baseline, server_id=manager.server_id)


@pytest.fixture
def lookalikes(docker_client: docker.DockerClient) -> Iterator[list[Container]]:
    """Containers made here; removed after the test."""
    made: list[Container] = []
    yield made
    for container in made:
        with contextlib.suppress(docker.errors.NotFound):
            container.remove(force=True)


def test_only_containers_made_as_claims_are_removed_as_stale_claims(
    docker_client: docker.DockerClient,
    lookalikes: list[Container],
) -> None:
    token = secrets.token_hex(4)
    gone = no_container_id()
    claims = EngineClaims(docker_client)
    # Given a running dev container (managed) named like a claim and labelled as one, whose
    # holder does not exist (an older version's container, an image's labels not overridden)
    named_uuid = f"GPU-lookalike-{token}"
    dev = docker_client.containers.run(
        BASE,
        ["sleep", "infinity"],
        detach=True,
        name=claim_name(named_uuid),
        labels={L_MANAGED: "1", L_CLAIM: named_uuid, L_CLAIM_HOLDER: gone, L_CLAIM_AT: "0"},
    )
    lookalikes.append(dev)
    # And a container gpudev does not manage, labelled as a claim, not made from the claim image
    other = docker_client.containers.run(
        BASE,
        ["sleep", "infinity"],
        detach=True,
        name=f"gpudev-test-lookalike-{token}",
        labels={L_CLAIM: f"GPU-other-{token}", L_CLAIM_HOLDER: gone, L_CLAIM_AT: "0"},
    )
    lookalikes.append(other)
    # And a real claim of a GPU whose holder does not exist
    real_uuid = f"GPU-real-{token}"
    (real,) = claims.claim([real_uuid], holder_id=gone, holder_name="n", owner="o")
    try:
        # When the stale claims are swept, and the claims of that holder released
        swept = claims.sweep()
        claims.release(gone)
        # Then only the real claim was removed
        assert real_uuid in {c.uuid for c in swept}
        with pytest.raises(docker.errors.NotFound):
            docker_client.containers.get(real)
        for container in (dev, other):
            container.reload()
            assert container.status == "running", container.name
        # And claiming the GPU whose claim name the dev container has is refused, the dev
        # container left alone (never removed as a stale claim)
        with pytest.raises(GPUTaken):
            claims.claim([named_uuid], holder_id=gone, holder_name="n", owner="o")
        dev.reload()
        assert dev.status == "running"
        # And none of them is a live claim
        live = claims.live()
        assert not {named_uuid, f"GPU-other-{token}", real_uuid} & set(live)
    finally:
        for made in (real, claim_name(named_uuid)):
            with contextlib.suppress(docker.errors.NotFound):
                docker_client.containers.get(made).remove(force=True)
