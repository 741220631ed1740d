"""The registry going away in the middle of a snapshot push (tests/registry.py's real registry,
with htpasswd authentication, stopped with SIGKILL once it holds a blob upload): a clear error
naming the registry and never the credentials, the local snapshot and commit state as before
the push, and the same push working once the registry is back."""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from pathlib import Path

import docker
import pytest
import requests
from traitlets.config import Config

from jupyter_gpudev.changes.capture import ChangeCapture
from jupyter_gpudev.changes.commit import CommitOptions, Committer
from jupyter_gpudev.containers import DevContainers, StartRequest, docker_name
from jupyter_gpudev.engine import RegistryError
from jupyter_gpudev.labels import L_SNAPSHOT_CONTAINER
from tests.integration.test_fault_kill import InFlightCall, poll, sh, uploading
from tests.leaks import Baseline, assert_nothing_leaked
from tests.registry import Registry, run_registry

pytestmark = pytest.mark.integration


@pytest.fixture
def own_registry(tmp_path: Path) -> Iterator[Registry]:
    """A registry of the test's own (the session's is shared: it must not go away)."""
    folder = tmp_path / "registry"
    folder.mkdir()
    with run_registry(folder) as registry:
        yield registry


def test_the_registry_gone_mid_push_fails_clearly_and_the_push_works_once_it_is_back(
    tmp_path: Path,
    docker_client: docker.DockerClient,
    own_registry: Registry,
    dev_containers: Callable[..., DevContainers],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    registry = own_registry
    monkeypatch.setenv("DOCKER_CONFIG", str(registry.docker_config(tmp_path / "docker")))
    root = tmp_path / "work"
    (root / ".devcontainer" / "base").mkdir(parents=True)
    (root / ".devcontainer" / "base" / "devcontainer.json").write_text(
        json.dumps({"image": "gpudev-base:bookworm"})
    )
    config = Config()
    config.GPUInventory.backend = "none"
    manager = dev_containers(root, config)
    baseline = Baseline.take(docker_client, Path(manager.state_dir))
    manager.start(StartRequest(environment="base", name="fault-gone"))
    container = docker_client.containers.get(docker_name("fault-gone"))
    sh(container, "echo tuned > /etc/gpudev-tuning && head -c 8000000 /dev/urandom > /opt/blob")
    tag = f"{registry.address}/team/gone:v1"
    committer = Committer(ChangeCapture(manager), manager.registries)
    options = CommitOptions(snapshot=tag, push=True)
    # When the snapshot is pushed, and the registry goes away (SIGKILL) once it holds a
    # blob upload
    pushing = InFlightCall(committer.commit, "fault-gone", options)
    poll(lambda: uploading(registry, "team/gone"), "a blob upload", every=0.005, during=(pushing,))
    registry.stop()
    # (the engine tries each layer's upload five times, 5, 10, 15 and 20 s apart: ~50 s)
    failed = pushing.failed(timeout=120)
    # Then the push fails, saying which registry, never the credentials
    assert isinstance(failed, RegistryError), repr(failed)
    assert failed.message.startswith(f"The push of {tag} to {registry.address} failed"), (
        failed.message
    )
    words = json.dumps([failed.message, failed.details])
    assert registry.password not in words
    # And nothing of the snapshot is left: no local tag, no image made on the way, and
    # the change still to commit
    with pytest.raises(docker.errors.ImageNotFound):
        docker_client.images.get(tag)
    snapshots = {"label": f"{L_SNAPSHOT_CONTAINER}=fault-gone"}
    assert docker_client.images.list(all=True, filters=snapshots) == []
    _, rendered = ChangeCapture(manager).diff("fault-gone")
    assert "/etc/gpudev-tuning" in rendered.new_text
    # When the registry is back, the same push works
    registry.start()
    result = committer.commit("fault-gone", options)
    assert result.snapshot is not None
    digest = str(result.snapshot.pushed_digest)
    assert digest.startswith("sha256:")
    answer = requests.head(
        f"http://{registry.address}/v2/team/gone/manifests/v1",
        auth=(registry.username, registry.password),
        headers={"Accept": "application/vnd.docker.distribution.manifest.v2+json"},
        timeout=10,
    )
    assert answer.status_code == 200
    assert answer.headers["Docker-Content-Digest"] == digest
    docker_client.images.remove(tag)
    manager.remove("fault-gone", None, True)
    assert_nothing_leaked(
        docker_client, baseline, state=Path(manager.state_dir), server_id=manager.server_id
    )
