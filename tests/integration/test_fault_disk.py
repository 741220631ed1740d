"""The disk full under gpudev: a small tmpfs as the workspace or the state folder, filled up.

On the session's dedicated engine (``tests/engines.py``): other tests' containers and GPU
leases on the machine's engine do not come and go beside these.

Whatever fails, it fails with a clear error (the device named full, not a traceback), the files
that were there are whole (the workspace's Dockerfile and devcontainer.json, the state folder's
records, the SQLite lease ledger), nothing is half-made (no container without a lease, no lease
without a container, no temporary file), and the same action succeeds once there is room.
"""

from __future__ import annotations

import contextlib
import errno
import json
import os
import shutil
import sqlite3
import subprocess
from collections.abc import Callable, Iterator
from pathlib import Path

import docker
import docker.errors
import pytest

from jupyter_gpudev.changes.capture import ChangeCapture
from jupyter_gpudev.changes.commit import CommitOptions, Committer
from jupyter_gpudev.changes.tracker import track_changes
from jupyter_gpudev.containers import DevContainers, StartRequest, docker_name
from jupyter_gpudev.engine import HostPool
from jupyter_gpudev.errors import GPUDevError
from jupyter_gpudev.labels import L_SERVER
from tests.engines import Engine, session_engine
from tests.integration.conftest import two_a100
from tests.integration.test_diff import sh
from tests.leaks import Baseline, assert_nothing_leaked

pytestmark = pytest.mark.integration

DEVCONTAINER = {"build": {"dockerfile": "Dockerfile"}}
DOCKERFILE = "FROM gpudev-python:bookworm\n"


@contextlib.contextmanager
def tmpfs(where: Path, size: str) -> Iterator[Path]:
    """A tmpfs of ``size`` mounted at ``where``, unmounted on exit whatever happened."""
    if os.geteuid() != 0:
        pytest.skip("mounting a tmpfs needs root")
    where.mkdir(parents=True, exist_ok=True)
    mount, umount = shutil.which("mount") or "mount", shutil.which("umount") or "umount"
    subprocess.run([mount, "-t", "tmpfs", "-o", f"size={size}", "tmpfs", str(where)], check=True)
    try:
        yield where
    finally:
        subprocess.run([umount, "-l", str(where)], check=False)


def fill(folder: Path, leave: int = 0) -> Path:
    """Fill ``folder``'s file system, leaving about ``leave`` bytes free; returns the filler
    (remove it to make room again)."""
    filler = folder / ".filler"
    free = os.statvfs(folder).f_bavail * os.statvfs(folder).f_frsize
    chunk = b"\0" * 65536
    with filler.open("wb") as out:
        written = 0
        while written < free - leave:
            try:
                written += out.write(chunk[: max(1, min(len(chunk), free - leave - written))])
                out.flush()
            except OSError as exc:
                if exc.errno != errno.ENOSPC:
                    raise
                break
    return filler


def full(folder: Path) -> None:
    """Check the file system is full: a write of one more block fails."""

    def write_block() -> None:
        with (folder / ".probe").open("wb") as out:
            out.write(b"\0" * 65536)
            out.flush()
            os.fsync(out.fileno())

    with pytest.raises(OSError, match="No space left"):
        write_block()


def snapshot_of(folder: Path) -> dict[str, bytes]:
    """Every file under ``folder`` (but the filler) and its bytes."""
    return {
        str(p.relative_to(folder)): p.read_bytes()
        for p in sorted(folder.rglob("*"))
        if p.is_file() and p.name not in {".filler", ".probe"}
    }


@pytest.fixture
def engine(request: pytest.FixtureRequest) -> Engine:
    """The session's dedicated engine (``tests/engines.py``): no other test's containers or
    GPU leases beside these."""
    return session_engine(request.config)


@pytest.fixture
def docker_client(engine: Engine) -> docker.DockerClient:
    return engine.client()


@pytest.fixture
def make(
    engine: Engine, monkeypatch: pytest.MonkeyPatch
) -> Iterator[Callable[[Path, Path], DevContainers]]:
    """A manager on the dedicated engine of the workspace ``root`` (an environment ``env``: a
    Dockerfile on the Python image) with its state in ``state``; GPUs: the fake nvidia-smi's
    two A100s; its containers removed after the test."""
    made: list[DevContainers] = []

    def build(root: Path, state: Path) -> DevContainers:
        folder = root / ".devcontainer" / "env"
        folder.mkdir(parents=True, exist_ok=True)
        (folder / "devcontainer.json").write_text(json.dumps(DEVCONTAINER))
        (folder / "Dockerfile").write_text(DOCKERFILE)
        config = two_a100(monkeypatch)
        config.HostPool.local_url = engine.url
        config.DevContainers.state_dir = str(state)
        config.DevContainers.stop_timeout = 2
        manager = DevContainers(root_dir=root, host_pool=HostPool(config=config), config=config)
        track_changes(manager)
        made.append(manager)
        return manager

    yield build
    for manager in made:
        for container in engine.client().containers.list(
            all=True, filters={"label": f"{L_SERVER}={manager.server_id}"}
        ):
            container.remove(force=True)
        manager.host_pool.close()


def test_commit_write_on_a_full_workspace_keeps_the_old_files_whole(
    tmp_path: Path, make: Callable[[Path, Path], DevContainers], docker_client: docker.DockerClient
) -> None:
    with tmpfs(tmp_path / "ws", "4m") as ws:
        manager = make(ws / "work", tmp_path / "state")
        folder = manager.root_dir / ".devcontainer" / "env"
        baseline = Baseline.take(docker_client, tmp_path / "state")
        # Given a container with changes: a file of 600 KiB to keep, a small edit
        manager.start(StartRequest(environment="env", name="wbox"))
        sh(
            docker_client,
            "wbox",
            "head -c 450000 /dev/urandom | base64 > /etc/gpudev-big.conf; echo edited >> /etc/motd",
        )
        before = snapshot_of(manager.root_dir)
        # When the workspace's disk is full (a few KiB left: writes begin, then fail)
        filler = fill(ws, leave=8192)
        committer = Committer(ChangeCapture(manager), manager.registries)
        with pytest.raises(GPUDevError) as caught:
            committer.commit("wbox", CommitOptions(write=True))
        # Then it says the disk is full
        assert "No space left on device" in caught.value.message
        # And the workspace's files are as they were: none truncated, none half-written,
        # nothing new beside them
        assert snapshot_of(manager.root_dir) == before
        # When there is room again, the same commit writes its files
        filler.unlink()
        result = committer.commit("wbox", CommitOptions(write=True))
        assert result.written is not None
        assert "gpudev-big.conf" in (folder / "Dockerfile").read_text() or any(
            p.name == "gpudev-big.conf" for p in (manager.root_dir).rglob("*")
        )
        json.loads((folder / "devcontainer.json").read_text())
        manager.remove("wbox", force=True)
        assert_nothing_leaked(
            docker_client,
            baseline,
            state=tmp_path / "state",
            server_id=manager.server_id,
            ledger_id=manager.ledger_id,
        )


def test_a_snapshot_whose_record_cannot_be_written_fails_clearly_and_leaves_no_image(
    tmp_path: Path, make: Callable[[Path, Path], DevContainers], docker_client: docker.DockerClient
) -> None:
    state = tmp_path / "state"
    # The state folder's snapshot records on a disk of their own (the ledger beside them is
    # the next test's)
    with tmpfs(state / "snapshots", "1m") as records_folder:
        manager = make(tmp_path / "work", state)
        baseline = Baseline.take(docker_client, state)
        manager.start(StartRequest(environment="env", name="sbox"))
        sh(docker_client, "sbox", "echo snap > /etc/gpudev-snap.conf")
        committer = Committer(ChangeCapture(manager), manager.registries)
        tag = "gpudev-test/full-state:v1"
        first = committer.commit("sbox", CommitOptions(snapshot=tag))
        assert first.snapshot is not None
        records = snapshot_of(records_folder)
        assert len(records) == 1
        images = {i.id for i in docker_client.images.list(all=True)}
        # When the records' disk is full and a second snapshot is taken
        sh(docker_client, "sbox", "echo again >> /etc/gpudev-snap.conf")
        filler = fill(records_folder)
        full(records_folder)
        tag2 = "gpudev-test/full-state:v2"
        with pytest.raises(GPUDevError) as caught:
            committer.commit("sbox", CommitOptions(snapshot=tag2))
        # Then it says the disk is full, and the image it made is gone with its name
        assert "No space left on device" in caught.value.message
        with pytest.raises(docker.errors.ImageNotFound):
            docker_client.images.get(tag2)
        assert {i.id for i in docker_client.images.list(all=True)} == images
        # And the records are whole: the first snapshot's as it was, nothing half-written
        assert snapshot_of(records_folder) == records
        # When there is room again, the snapshot is taken
        filler.unlink()
        (records_folder / ".probe").unlink(missing_ok=True)
        second = committer.commit("sbox", CommitOptions(snapshot=tag2))
        assert second.snapshot is not None
        assert len(snapshot_of(records_folder)) == 2
        for name in (tag, tag2):
            docker_client.images.remove(name)
        manager.remove("sbox", force=True)
        assert_nothing_leaked(
            docker_client,
            baseline,
            state=state,
            server_id=manager.server_id,
            ledger_id=manager.ledger_id,
        )


def test_a_full_disk_under_the_lease_ledger_leaves_it_whole_and_consistent(
    tmp_path: Path, make: Callable[[Path, Path], DevContainers], docker_client: docker.DockerClient
) -> None:
    with tmpfs(tmp_path / "st", "2m") as state:
        manager = make(tmp_path / "work", state)
        baseline = Baseline.take(docker_client, state)
        # Given a running GPU container with its lease
        manager.start(StartRequest(environment="env", name="held", gpus=1))
        assert manager.ledger.for_container("local", "held") is not None
        # When the state folder's disk is full
        filler = fill(state)
        full(state)
        # Then a start that needs a new lease fails clearly and leaves no container or lease
        with pytest.raises(GPUDevError) as caught:
            manager.start(StartRequest(environment="env", name="more", gpus=1))
        assert "disk it is on is full" in caught.value.message
        with pytest.raises(docker.errors.NotFound):
            docker_client.containers.get(docker_name("more"))
        # And a stop stops the container but cannot write the release: it says so (the lease
        # stays recorded until there is room, and the next stop or reconcile frees it)
        with pytest.raises(GPUDevError, match="disk it is on is full"):
            manager.stop("held")
        assert docker_client.containers.get(docker_name("held")).status == "exited"
        # When there is room again
        filler.unlink()
        (state / ".probe").unlink(missing_ok=True)
        # Then the ledger is not corrupted
        with contextlib.closing(sqlite3.connect(state / "leases.sqlite")) as conn:
            assert conn.execute("PRAGMA integrity_check").fetchone() == ("ok",)
        # And the stop, done again, frees the lease
        manager.stop("held")
        assert manager.ledger.for_container("local", "held") is None
        assert manager.start(StartRequest(environment="env", name="more", gpus=1)).state == (
            "running"
        )
        manager.remove("more", force=True)
        manager.remove("held", force=True)
        assert manager.ledger.active("local") == []
        assert_nothing_leaked(
            docker_client,
            baseline,
            state=state,
            server_id=manager.server_id,
            ledger_id=manager.ledger_id,
        )
