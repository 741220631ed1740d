"""A dev container's changes read from its own overlay2 layer (``changes/layer_diff.py``) are the
engine's ``docker diff``, entry for entry, for every kind of change a capture meets, and more
only where the engine's diff is naive: a file overlay copied up with its size and time kept
(``docker commit``'s layer has it); a capture and a commit through that route write what the
engine's diff makes them write."""

from __future__ import annotations

import io
import os
import stat
import tarfile
from collections import Counter
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import docker
import pytest
from docker.models.containers import Container

from jupyter_gpudev.changes.capture import ChangeCapture
from jupyter_gpudev.changes.docker_changes import DockerChanges
from jupyter_gpudev.changes.export import EngineArchives
from jupyter_gpudev.changes.helpers import inert
from jupyter_gpudev.changes.layer_diff import LayerFolders, Unreadable, upper_changes
from jupyter_gpudev.changes.layers import (
    RemovalLayer,
    folders_of,
    read_folders,
    removal_layer,
    targets,
    write_layer,
)
from jupyter_gpudev.containers import DevContainers, StartRequest, commandlog, docker_name
from tests.integration.test_diff import sh
from tests.leaks import Baseline, assert_nothing_leaked

pytestmark = [
    pytest.mark.integration,
    pytest.mark.skipif(os.geteuid() != 0, reason="the engine's folders are root's"),
]

NAME = "layers"

#: Each step's changes, made as root in the container one after the other; the two routes are
#: compared after each.
STEPS: list[tuple[str, str]] = [
    ("started", "true"),
    (
        "files added, changed, deleted",
        "echo tuned >> /etc/motd; mkdir -p /opt/new/a/b; echo x > /opt/new/a/b/c; "
        "rm /etc/issue; : > /etc/shells; chmod 600 /etc/debian_version; "
        "chown 1000:1000 /etc/issue.net; chmod 644 /etc/host.conf",  # the last: same mode
    ),
    (
        "folders replaced, removed, turned into files and back",
        "rm -rf /usr/share/doc/bash && mkdir /usr/share/doc/bash && echo n > "
        "/usr/share/doc/bash/n; rm -rf /usr/share/doc/apt; "
        "rm -rf /usr/share/doc/gzip && echo now-a-file > /usr/share/doc/gzip; "
        "rm /etc/host.conf && mkdir /etc/host.conf && touch /etc/host.conf/inside",
    ),
    (
        "links, hard links, special files",
        "ln -s / /rootlink; ln -s ../etc/passwd /opt/relative; ln -s /nowhere /opt/dangling; "
        "ln /etc/passwd /opt/passwd-hard; ln /opt/new/a/b/c /opt/new/hard; mkfifo /opt/fifo; "
        "ln -sfn /usr/bin/true /usr/bin/gpudev-true",
    ),
    (
        "renames",
        "mv /etc/profile /etc/profile.old; mv /usr/share/doc/dpkg /usr/share/doc/dpkg-moved; "
        "mv /opt/new/a /opt/new/moved",
    ),
    (
        "made then removed, deep, odd names",
        "mkdir -p /opt/gone && touch /opt/gone/x && rm /opt/gone/x; "
        "echo x > /srv/brief && rm /srv/brief; "
        "mkdir -p /opt/deep/1/2/3/4/5/6/7/8/9/10/11/12/13/14/15/16/17/18/19/20 "
        "&& touch /opt/deep/1/2/3/4/5/6/7/8/9/10/11/12/13/14/15/16/17/18/19/20/leaf; "
        "touch '/opt/with space' '/opt/café' '/opt/-dash' \"$(printf '/opt/new\\nline')\"",
    ),
    (
        "an apt install",
        "apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "
        "--no-install-recommends cowsay >/dev/null && rm -rf /var/lib/apt/lists/*",
    ),
    ("a package purged", "dpkg --purge --force-depends cowsay >/dev/null"),
    (
        "a file rewritten with its size and time kept",
        "cp -p /etc/debian_version /tmp/ref; tr 0-9 a-j < /tmp/ref > /tmp/new; "
        "cat /tmp/new > /etc/debian_version; touch -r /tmp/ref /etc/debian_version",
    ),
]


def pairs(changes: list[dict[str, Any]]) -> Counter[tuple[str, int]]:
    return Counter((str(c["Path"]), int(c["Kind"])) for c in changes)


def assert_same(container: Container, step: str) -> Counter[tuple[str, int]]:
    """The layer's changes are the engine's; more only where the engine's diff is naive (it
    compares size and time): ``C`` of a file in the upper directory (overlay copied it up),
    and of the folders holding one."""
    container.reload()
    root = str(container.client.info()["DockerRootDir"])  # type: ignore[union-attr]
    ours = pairs(upper_changes(container.attrs, root=root))
    engine = pairs(list(container.diff() or []))
    assert not engine - ours, f"{step}: only from the engine {sorted(engine - ours)[:20]}"
    upper = Path(container.attrs["GraphDriver"]["Data"]["UpperDir"])
    extra = sorted(ours - engine)
    files = [p for p, _ in extra if not (upper / p.lstrip("/")).is_dir()]
    for path, kind in extra:
        info = os.lstat(upper / path.lstrip("/"))  # it is in the upper directory
        assert kind == 0, f"{step}: {path} only from the layer, kind {kind}"
        assert not (stat.S_ISCHR(info.st_mode) and info.st_rdev == 0), f"{step}: {path}"
        if stat.S_ISDIR(info.st_mode):  # a folder only for a file changed inside it
            assert any(f.startswith(f"{path}/") for f in files), f"{step}: {path} only ours"
    return ours


@pytest.fixture
def started(
    tmp_path: Path,
    dev_containers: Callable[..., DevContainers],
    docker_client: docker.DockerClient,
) -> Iterator[tuple[DevContainers, Container]]:
    """A running dev container of the default environment; at the end it is removed and
    nothing of its server is left."""
    manager = dev_containers(tmp_path / "work")
    state = tmp_path / "state"
    baseline = Baseline.take(docker_client, state)
    manager.start(StartRequest(environment="default", name=NAME))
    try:
        yield manager, docker_client.containers.get(docker_name(NAME))
    finally:
        manager.remove(NAME, force=True)
    assert_nothing_leaked(
        docker_client,
        baseline,
        state=state,
        server_id=manager.server_id,
        ledger_id=manager.ledger_id,
    )


def test_the_layer_gives_the_engines_diff_for_every_kind_of_change(
    started: tuple[DevContainers, Container], docker_client: docker.DockerClient
) -> None:
    manager, container = started
    seen: Counter[tuple[str, int]] = Counter()
    for step, script in STEPS:
        # When the container's root changes its files this way
        sh(docker_client, NAME, script)
        # Then its layer gives the engine's diff, entry for entry
        seen |= assert_same(container, step)
    # And the steps made every kind of entry, deletions and changes of the image's files too
    paths = dict(seen.keys())
    assert paths["/etc/motd"] == 0
    assert paths["/etc/issue"] == 2
    assert paths["/usr/share/doc/bash/copyright"] == 2  # a replaced folder's old files
    assert paths["/usr/share/doc/bash/n"] == 1
    assert paths["/opt/deep/1/2/3/4/5/6/7/8/9/10/11/12/13/14/15/16/17/18/19/20/leaf"] == 1
    assert "/etc/host.conf/inside" in paths
    assert any(p.startswith("/usr/games/") for p in paths)  # the apt install, then purged
    assert paths["/etc/debian_version"] == 0  # the same size and time: still a change
    # When the container is stopped (the engine mounts its layer to diff it), the same
    manager.stop(NAME)
    assert_same(container, "stopped")


def test_a_capture_through_the_layer_is_the_capture_through_the_engine(
    started: tuple[DevContainers, Container],
    docker_client: docker.DockerClient,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    manager, _ = started
    capture = ChangeCapture(manager)
    # (Not a hard link to an image's file: overlay copies the file up unchanged, which the
    # layer reports and this engine's naive diff does not; the first test has it.)
    links = STEPS[3][1].replace("ln /etc/passwd /opt/passwd-hard; ", "")
    assert links != STEPS[3][1]
    sh(docker_client, NAME, STEPS[1][1] + "; " + STEPS[2][1] + "; " + links)
    # Given the capture through the engine's diff
    monkeypatch.setattr(DockerChanges, "read_layer", False)
    engine_captured, engine_rendered = capture.diff(NAME)
    # When the same capture reads the container's layer, and the engine is never asked
    monkeypatch.setattr(DockerChanges, "read_layer", True)

    def refused(self: Container) -> None:
        raise AssertionError("the engine's diff was asked")

    monkeypatch.setattr(Container, "diff", refused)
    captured, rendered = capture.diff(NAME)
    # Then it is the same change set and the same Dockerfile diff
    assert pairs(captured.diff) == pairs(engine_captured.diff)
    assert captured.changes.to_json() == engine_captured.changes.to_json()
    assert rendered.diff == engine_rendered.diff
    assert rendered.diff  # there is something to compare
    # And the panel's rule (what a removal would lose) reads the same
    source = capture.source(manager.host_pool.get(captured.info.host))
    uncommitted = source.uncommitted(
        captured.container, NAME, lambda _n, _h, _k, baseline: baseline
    )
    assert "/etc/motd" in uncommitted
    # When the changes are written (the baseline moves on, with what the kept files were),
    # then a file the baseline has is edited again
    capture.write(NAME)
    sh(docker_client, NAME, "echo again >> /etc/motd")
    # Then both routes see the edit (and the FIFO the commit could not copy)
    captured = capture.capture(NAME)
    monkeypatch.undo()
    monkeypatch.setattr(DockerChanges, "read_layer", False)
    kept = capture.capture(NAME).changes.files.kept
    assert captured.changes.files.kept == kept == ["/etc/motd", "/opt/fifo"]


def test_a_container_whose_layer_cannot_be_read_is_diffed_by_the_engine(
    started: tuple[DevContainers, Container], docker_client: docker.DockerClient
) -> None:
    manager, container = started
    sh(docker_client, NAME, "echo tuned >> /etc/motd")
    capture = ChangeCapture(manager)
    source = capture.source(manager.host_pool.get(capture.capture(NAME).info.host))
    assert isinstance(source, DockerChanges)
    # Given a container whose inspect names folders this server does not have (as for an
    # engine on another machine behind a forwarded socket)
    container.reload()
    attrs = container.attrs
    data = attrs["GraphDriver"]["Data"]
    moved = {k: v.replace("/overlay2/", "/overlay2-elsewhere/") for k, v in data.items()}
    container.attrs = {**attrs, "GraphDriver": {"Name": "overlay2", "Data": moved}}
    with pytest.raises(Unreadable):
        upper_changes(container.attrs)
    # Then the source asks the engine, and gets the same changes
    assert pairs(source.diff(container)) == pairs(list(container.diff() or []))
    assert ("/etc/motd", 0) in pairs(source.diff(container))


def staged(folder: Path | None) -> dict[str, tuple[int, str]]:
    """What a staging folder holds: each path's mode and content (or link target)."""
    if folder is None:
        return {}
    out = {}
    for path in sorted(folder.rglob("*")):
        info = path.lstat()
        what = (
            os.readlink(path)
            if path.is_symlink()
            else "folder"
            if path.is_dir()
            else path.read_bytes().hex()
        )
        out[str(path.relative_to(folder))] = (info.st_mode, what)
    return out


FILES = (
    "echo tuned >> /etc/motd; mkdir -p /root/.config/tool /root/.ssh /opt/data; "
    "echo 'colour = true' > /root/.config/tool/config.toml; "
    "echo '-----BEGIN OPENSSH PRIVATE KEY-----' > /root/.ssh/id_ed25519; "
    "head -c 2000000 /dev/urandom > /opt/data/blob; chmod 750 /opt/data/blob; "
    "ln -s ../etc/passwd /opt/relative; ln -s /etc/passwd /opt/absolute; mkfifo /opt/fifo"
)


def test_a_commit_stages_and_checks_the_same_files_read_from_the_layer(
    started: tuple[DevContainers, Container],
    docker_client: docker.DockerClient,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    manager, _ = started
    capture = ChangeCapture(manager)
    sh(docker_client, NAME, FILES)
    # Given a commit's files staged and checked through the engine
    monkeypatch.setattr(DockerChanges, "read_layer", False)
    through_engine = capture.prepare(NAME)
    # When the same commit reads them from the container's layer
    monkeypatch.setattr(DockerChanges, "read_layer", True)
    asked: list[str] = []
    engine_get = EngineArchives.get

    def counted(self: EngineArchives, path: str) -> Any:
        asked.append(path)
        return engine_get(self, path)

    monkeypatch.setattr(EngineArchives, "get", counted)
    through_layer = capture.prepare(NAME)
    try:
        # Then the same files are staged, the same credential found, the same left out
        engine_files, layer_files = (
            p.captured.changes.files for p in (through_engine, through_layer)
        )
        assert layer_files.kept == engine_files.kept
        assert "/opt/data/blob" in layer_files.kept
        assert layer_files.secrets == engine_files.secrets == ["/root/.ssh/id_ed25519"]
        assert layer_files.links == engine_files.links
        assert layer_files.skipped == engine_files.skipped
        assert "/opt/fifo" in layer_files.skipped
        assert through_layer.digests == through_engine.digests
        assert staged(through_layer.staging) == staged(through_engine.staging)
        assert through_layer.rendered.diff == through_engine.rendered.diff
        # And only what is not wholly in the layer was asked of the engine (the FIFO)
        assert asked == ["/opt/fifo"]
    finally:
        through_engine.discard()
        through_layer.discard()


def layer_entries(layer: RemovalLayer | None) -> list[tuple[str, bytes, int, int, int, float]]:
    assert layer is not None
    with tarfile.open(fileobj=io.BytesIO(layer.data), mode="r:") as archive:
        return [(m.name, m.type, m.mode, m.uid, m.gid, m.mtime) for m in archive]


def test_the_layer_leaving_gpudevs_files_out_is_the_same_from_the_containers_folders(
    started: tuple[DevContainers, Container], docker_client: docker.DockerClient
) -> None:
    manager, container = started
    # Given a dev container whose gpudev files are in the image's folders, one of them changed
    sh(docker_client, NAME, "chmod 700 /var/log && touch /var/log/new")
    committed = container.commit()
    try:
        # When the layer removing them is written from a container of the committed image,
        # and from the dev container's own layers
        with inert(docker_client, str(committed.id), manager.confinement()) as helper:
            from_image = removal_layer(helper, commandlog.OWN_PATHS)
        chosen = targets(commandlog.OWN_PATHS)
        folders = LayerFolders(container.attrs, NAME)
        from_layers = write_layer(chosen, read_folders(folders, folders_of(chosen)))
    finally:
        docker_client.images.remove(str(committed.id))
    # Then both are the same layer: the same whiteouts under the same folders
    assert layer_entries(from_layers) == layer_entries(from_image)
    assert ("var/log", tarfile.DIRTYPE, 0o700, 0, 0) in [e[:5] for e in layer_entries(from_layers)]
