"""The layer a snapshot removes paths with (``changes/layers.py``): whiteouts written by gpudev
under the image's own folders, from paths a container's root chose (no engine)."""

from __future__ import annotations

import hashlib
import io
import tarfile
from collections.abc import Iterator
from typing import Any

import pytest

from jupyter_gpudev.changes import layers
from jupyter_gpudev.changes.layers import Folder, folders_of, read_folders, targets, write_layer
from jupyter_gpudev.errors import BadRequest


def test_targets_are_normal_absolute_paths_none_inside_another() -> None:
    # Given paths as a container's diff could name them, some odd, some nested
    paths = [
        "/var/log/gpudev/commands.log",
        "/var/log/gpudev",
        "/a/b",
        "/a-b",
        "/a",
        "/",
        "relative/libcuda.so",
        "/x/../etc/passwd",
        "//double",
        "/opt/./libcuda.so.1",
        "/opt/.wh..wh..opq/libcuda.so.1",
        "/opt/.wh.libcuda.so.1",
    ]
    # Then only absolute, normal paths are removed, once, a folder's content with it, and
    # never the root or a name the layer format reads as a whiteout
    assert targets(paths) == ["/a", "/a-b", "/var/log/gpudev"]


def test_too_many_targets_are_refused(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(layers, "MAX_REMOVED", 3)
    assert len(targets([f"/d/libcuda.so.{i}" for i in range(3)])) == 3
    with pytest.raises(BadRequest, match="4 files and folders would be left out"):
        targets([f"/d/libcuda.so.{i}" for i in range(4)])


def test_folders_are_every_parent_but_the_root_parents_first() -> None:
    assert folders_of(["/usr/lib/x86_64-linux-gnu/libcuda.so.1", "/usr/bin/nvidia-smi", "/a"]) == [
        "/usr",
        "/usr/bin",
        "/usr/lib",
        "/usr/lib/x86_64-linux-gnu",
    ]


def entry(name: str, kind: bytes = tarfile.DIRTYPE, **fields: Any) -> bytes:
    """An archive as the engine answers for ``name``: its entry first, then more."""
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w", format=tarfile.PAX_FORMAT) as archive:
        info = tarfile.TarInfo(name)
        info.type = kind
        for key, value in fields.items():
            setattr(info, key, value)
        archive.addfile(info)
        archive.addfile(tarfile.TarInfo(f"{name}/inside"), io.BytesIO(b""))
    return buffer.getvalue()


class FakeSource:
    """An ``ArchiveSource`` of the given archives; records what was asked."""

    name = "c"

    def __init__(self, archives: dict[str, bytes]) -> None:
        self.archives = archives
        self.asked: list[str] = []

    def get(self, path: str) -> tuple[Iterator[bytes], dict[str, Any]] | None:
        self.asked.append(path)
        data = self.archives.get(path)
        return None if data is None else (iter([data]), {})


def test_folders_are_read_as_the_image_has_them_and_nothing_below_a_non_folder() -> None:
    # Given an image where /tmp is a sticky folder, /opt/link a link and /opt/gone is missing
    source = FakeSource(
        {
            "/tmp": entry("tmp", mode=0o41777, uid=0, gid=0, mtime=1700000000),
            "/tmp/work": entry("work", mode=0o2750, uid=1000, gid=50, mtime=1700000001),
            "/opt": entry("opt", mode=0o755, mtime=5),
            "/opt/link": entry("link", tarfile.SYMTYPE, linkname="/etc"),
        }
    )
    folders = ["/opt", "/tmp", "/opt/gone", "/opt/link", "/tmp/work", "/opt/link/sub"]
    # When they are read
    found = read_folders(source, folders)
    # Then each folder's owner, mode (without its type) and time are kept
    assert found["/tmp"] == Folder(0o1777, 0, 0, 1700000000.0)
    assert found["/tmp/work"] == Folder(0o2750, 1000, 50, 1700000001.0)
    # And a link or a missing path is no folder, and nothing below it is asked for
    assert found["/opt/link"] is None
    assert found["/opt/gone"] is None
    assert found["/opt/link/sub"] is None
    assert "/opt/link/sub" not in source.asked


def test_an_archive_that_is_not_the_folder_asked_for_is_no_folder() -> None:
    source = FakeSource({"/etc": entry("passwd"), "/var": b"not a tar archive" * 40})
    assert read_folders(source, ["/etc", "/var"]) == {"/etc": None, "/var": None}


def test_too_many_folders_are_refused(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(layers, "MAX_FOLDERS", 2)
    with pytest.raises(BadRequest, match="in 3 folders"):
        read_folders(FakeSource({}), ["/a", "/b", "/c"])


def test_the_layer_repeats_the_folders_then_whiteouts_each_path() -> None:
    # Given paths to remove, one of them under a folder that is not one in the image
    tmp = Folder(0o1777, 0, 0, 1700000000.0)
    log = Folder(0o755, 0, 4, 1700000002.0)
    folders: dict[str, Folder | None] = {"/tmp": tmp, "/var": log, "/var/log": log, "/x": None}
    paths = ["/tmp/libcuda.so.1", "/var/log/gpudev", "/x/libcuda.so.1"]
    # When the layer is written
    layer = write_layer(paths, folders)
    # Then it has each folder once, as the image has it, before the whiteouts in it
    assert layer is not None
    with tarfile.open(fileobj=io.BytesIO(layer.data)) as archive:
        members = archive.getmembers()
    shown = [(m.name, m.type, m.mode, m.uid, m.gid, m.mtime, m.size) for m in members]
    assert shown == [
        ("tmp", tarfile.DIRTYPE, 0o1777, 0, 0, 1700000000, 0),
        ("tmp/.wh.libcuda.so.1", tarfile.REGTYPE, 0o644, 0, 0, 0, 0),
        ("var", tarfile.DIRTYPE, 0o755, 0, 4, 1700000002, 0),
        ("var/log", tarfile.DIRTYPE, 0o755, 0, 4, 1700000002, 0),
        ("var/log/.wh.gpudev", tarfile.REGTYPE, 0o644, 0, 0, 0, 0),
    ]
    # And the path not at its place in the image is not removed; the id is the tar's digest
    assert layer.removed == ("/tmp/libcuda.so.1", "/var/log/gpudev")
    assert layer.diff_id == "sha256:" + hashlib.sha256(layer.data).hexdigest()


def test_no_layer_when_nothing_is_at_its_place() -> None:
    assert write_layer(["/x/libcuda.so.1"], {"/x": None}) is None
    assert write_layer([], {}) is None
