"""The panel's change count and the baseline taken at a container's start are read through its
host's ``ChangeSource`` (``changes/tracker.py``): on this root server with a local overlay2
engine, from the container's own layer (``layer_diff``), never asking the engine's ``docker
diff``; with ``DockerChanges.read_layer`` off (as a remote engine is), from the engine's diff,
with the same results (#36)."""

from __future__ import annotations

import json
import os
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import docker
import pytest
from docker.models.containers import Container

from jupyter_gpudev.changes import layer_diff
from jupyter_gpudev.changes.docker_changes import DockerChanges
from jupyter_gpudev.changes.tracker import ChangeTracker
from jupyter_gpudev.containers import DevContainers, StartRequest, docker_name
from jupyter_gpudev.labels import L_HOST
from tests.integration.test_diff import sh
from tests.leaks import Baseline, assert_nothing_leaked

pytestmark = [
    pytest.mark.integration,
    pytest.mark.skipif(os.geteuid() != 0, reason="the engine's folders are root's"),
]

NAME = "trackerlayer"
#: What a user does after the start: a file changed, one added, one deleted, a folder made.
CHANGES = "echo tuned >> /etc/motd; mkdir -p /opt/work && echo x > /opt/work/x; rm /etc/issue"


def refused(self: Container) -> None:
    raise AssertionError(f"the engine's diff of {self.name} was asked")


def refused_layer(attrs: Any) -> None:
    raise AssertionError("the container's layer was read")


@pytest.fixture
def started(
    tmp_path: Path,
    dev_containers: Callable[..., DevContainers],
    docker_client: docker.DockerClient,
    monkeypatch: pytest.MonkeyPatch,
) -> Iterator[tuple[DevContainers, Container]]:
    """A running dev container whose environment has a lifecycle command (so its start takes
    its own baseline), started while the engine's diff fails; removed at the end, and nothing
    of its server left."""
    manager = dev_containers(tmp_path / "work")
    folder = manager.root_dir / ".devcontainer" / "lifecycle"
    folder.mkdir(parents=True)
    (folder / "devcontainer.json").write_text(
        json.dumps({"image": "gpudev-base:bookworm", "postCreateCommand": "touch /etc/lifecycle"})
    )
    state = tmp_path / "state"
    baseline = Baseline.take(docker_client, state)
    with monkeypatch.context() as patch:
        patch.setattr(Container, "diff", refused)
        info = manager.start(StartRequest(environment="lifecycle", name=NAME))
    try:
        assert not any("baseline" in warning for warning in info.warnings), info.warnings
        yield manager, docker_client.containers.get(docker_name(NAME))
    finally:
        manager.remove(NAME, force=True)
    assert_nothing_leaked(docker_client, baseline, state=state, server_id=manager.server_id)


def tracker_of(manager: DevContainers) -> ChangeTracker:
    """A tracker with nothing counted yet, over the manager's capture and baselines."""
    assert isinstance(manager.changes, ChangeTracker)
    return ChangeTracker(manager.changes.capture)


def panel_count(manager: DevContainers) -> int | None:
    """The count the panel shows for the container (its listing entry, counted now)."""
    located = manager.locate(NAME)
    return located.report(count_changes=True).uncommitted


def test_the_count_and_the_baseline_are_read_from_the_layer(
    started: tuple[DevContainers, Container],
    docker_client: docker.DockerClient,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    manager, container = started
    tracker = tracker_of(manager)
    # Given the baseline the start took while the engine's diff failed: it has what the
    # lifecycle command made, as the engine's diff sees it
    recorded = tracker.baselines.container(str(container.id))
    assert recorded is not None
    assert recorded.files.get("/etc/lifecycle") == layer_diff.ADDED
    engine_files = {str(d["Path"]): int(d["Kind"]) for d in container.diff() or []}
    assert recorded.files == engine_files
    # And nothing changed since: nothing to count
    host = manager.host_pool.get(str(container.labels[L_HOST]))
    assert tracker.count(host, container, compute=True) == 0
    # When the user changes files
    sh(docker_client, NAME, CHANGES)
    # Then the count through the engine's diff (the layer never read) ...
    monkeypatch.setattr(DockerChanges, "read_layer", False)
    with monkeypatch.context() as patch:
        patch.setattr(layer_diff, "upper_changes", refused_layer)
        manager.changes = tracker_of(manager)
        by_engine = panel_count(manager)
    # ... is the count with the engine's diff failing: read from the layer
    monkeypatch.setattr(DockerChanges, "read_layer", True)
    monkeypatch.setattr(Container, "diff", refused)
    manager.changes = tracker_of(manager)
    by_layer = panel_count(manager)
    assert by_engine is not None
    assert by_engine >= 3  # /etc/motd, /opt/work/x (or its folder), /etc/issue
    assert by_layer == by_engine
    # And a removal without force still sees what it would lose, from the layer
    manager.stop(NAME)
    container.reload()
    lost = manager.changes.uncommitted(NAME, host, container)
    assert {"/etc/motd", "/etc/issue"} <= set(lost), lost


def test_a_source_that_does_not_read_layers_uses_the_engines_diff(
    started: tuple[DevContainers, Container],
    docker_client: docker.DockerClient,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    manager, container = started
    sh(docker_client, NAME, CHANGES)
    asked: list[str] = []
    engine_diff = Container.diff

    def counted(self: Container) -> Any:
        asked.append(str(self.id))
        return engine_diff(self)

    # Given a source that may not read the container's layer (as an engine on another
    # machine), and a layer reader that fails the test if used
    monkeypatch.setattr(DockerChanges, "read_layer", False)
    monkeypatch.setattr(layer_diff, "upper_changes", refused_layer)
    monkeypatch.setattr(Container, "diff", counted)
    tracker = tracker_of(manager)
    host = manager.locate(NAME).host
    # When the tracker counts the changes, then the engine's diff was asked, and the count
    # is there
    count = tracker.count(host, container, compute=True)
    assert count is not None
    assert count >= 3
    assert str(container.id) in asked
    # And a baseline taken again is the engine's diff (the changes are now in it)
    asked.clear()
    tracker.record_baseline(container)
    assert str(container.id) in asked
    recorded = tracker.baselines.container(str(container.id))
    assert recorded is not None
    assert recorded.files.get("/etc/motd") == layer_diff.MODIFIED
    assert tracker_of(manager).count(host, container, compute=True) == 0
    # And a container whose host is not configured here (its label names another) has its
    # baseline from the engine's diff, whatever the source would do
    monkeypatch.setattr(DockerChanges, "read_layer", True)
    container.reload()
    container.attrs["Config"]["Labels"] = {**container.labels, L_HOST: "elsewhere"}
    asked.clear()
    tracker.record_baseline(container)
    assert str(container.id) in asked
    monkeypatch.undo()  # the removal at the end reads the container as usual
