"""``changes/layer_diff.py`` on overlay2 folders laid out here as the engine lays them out (upper
directory, init layer, image layers; whiteouts as character devices 0/0, opaque folders by
their ``trusted.overlay.opaque`` attribute), and on hostile ones: links out, devices, names
that are not UTF-8, too many entries, too deep, inspect data that points elsewhere."""

from __future__ import annotations

import io
import logging
import os
import shutil
import stat
import tarfile
import tempfile
from collections.abc import Iterator
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from jupyter_gpudev.changes import commit, docker_changes, layer_diff
from jupyter_gpudev.changes.docker_changes import DockerChanges
from jupyter_gpudev.changes.layer_diff import (
    LayerFiles,
    LayerFolders,
    Layers,
    Unreadable,
    upper_changes,
)

pytestmark = pytest.mark.skipif(
    os.geteuid() != 0, reason="whiteouts and trusted.* attributes need root"
)

ID = "a" * 64


class Overlay:
    """``HOME/ID/diff`` (the container's upper directory), ``HOME/ID-init/diff`` and image
    layers ``HOME/lN/diff`` (top first), with the inspect data naming them."""

    def __init__(self, home: Path, image_layers: int = 2) -> None:
        self.home = home
        self.upper = self._layer(ID)
        self.lower = [self._layer(f"{ID}-init")] + [
            self._layer(f"l{n}") for n in range(image_layers)
        ]

    def _layer(self, name: str) -> Path:
        path = self.home / name / "diff"
        path.mkdir(parents=True)
        return path

    @property
    def attrs(self) -> dict[str, Any]:
        return {
            "GraphDriver": {
                "Name": "overlay2",
                "Data": {
                    "UpperDir": str(self.upper),
                    "LowerDir": ":".join(str(p) for p in self.lower),
                },
            }
        }

    @staticmethod
    def file(root: Path, path: str, data: bytes = b"x", mtime: int = 1_700_000_000) -> Path:
        target = root / path.lstrip("/")
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_bytes(data)
        os.utime(target, ns=(mtime * 10**9, mtime * 10**9))
        return target

    @staticmethod
    def whiteout(root: Path, path: str) -> None:
        target = root / path.lstrip("/")
        target.parent.mkdir(parents=True, exist_ok=True)
        os.mknod(target, stat.S_IFCHR | 0o000, os.makedev(0, 0))

    @staticmethod
    def opaque(root: Path, path: str) -> None:
        target = root / path.lstrip("/")
        target.mkdir(parents=True, exist_ok=True)
        os.setxattr(target, "trusted.overlay.opaque", b"y")

    def changes(self) -> dict[str, str]:
        letters = {0: "C", 1: "A", 2: "D"}
        found = upper_changes(self.attrs)
        assert len({c["Path"] for c in found}) == len(found)  # each path once
        return {str(c["Path"]): letters[int(c["Kind"])] for c in found}


@pytest.fixture
def overlay(tmp_path: Path) -> Iterator[Overlay]:
    before = len(os.listdir("/proc/self/fd"))
    yield Overlay(tmp_path / "overlay2")
    assert len(os.listdir("/proc/self/fd")) == before  # no folder handle left open


def test_added_changed_and_deleted_entries_are_the_engines_kinds(overlay: Overlay) -> None:
    # Given an image with files, and a container that edited, added and removed some
    image, upper = overlay.lower[1], overlay.upper
    overlay.file(image, "/etc/motd", b"old")
    overlay.file(image, "/etc/issue")
    overlay.file(image, "/etc/same", b"same")
    overlay.file(upper, "/etc/motd", b"new!", mtime=1_800_000_000)
    overlay.file(upper, "/etc/same", b"same")  # copied up: a change, whatever it holds
    overlay.file(upper, "/opt/new/a/b")
    overlay.whiteout(upper, "/etc/issue")
    overlay.whiteout(upper, "/etc/never-there")  # hides nothing: not a deletion
    # Then the edits are C, the new tree A, the removal D, the folders holding them C
    assert overlay.changes() == {
        "/etc": "C",
        "/etc/issue": "D",
        "/etc/motd": "C",
        "/etc/same": "C",
        "/opt": "A",
        "/opt/new": "A",
        "/opt/new/a": "A",
        "/opt/new/a/b": "A",
    }


def test_metadata_changes_count_as_the_engine_counts_them(overlay: Overlay) -> None:
    image, upper = overlay.lower[1], overlay.upper
    for name in ("mode", "owner", "size", "time", "folder-time"):
        overlay.file(image, f"/f/{name}")
    (image / "d").mkdir()
    overlay.file(upper, "/f/mode").chmod(0o600)
    os.chown(overlay.file(upper, "/f/owner"), 1000, 1000)
    overlay.file(upper, "/f/size", b"xx")
    overlay.file(upper, "/f/time", mtime=1_700_000_001)
    (upper / "d").mkdir()
    os.utime(upper / "d", (1, 1))  # a folder's time alone is no change
    os.utime(upper / "f", (1, 1))
    for name in ("mode", "owner", "size", "time"):
        assert overlay.changes()[f"/f/{name}"] == "C"
    assert "/d" not in overlay.changes()
    assert "/f/folder-time" not in overlay.changes()


def test_a_capability_set_on_an_unchanged_file_is_a_change(overlay: Overlay) -> None:
    image, upper = overlay.lower[1], overlay.upper
    overlay.file(image, "/bin/tool")
    (upper / "bin").mkdir()
    assert overlay.changes() == {}  # a folder copied up, nothing changed: no change
    copied = overlay.file(upper, "/bin/tool")
    # struct vfs_cap_data, revision 2: effective, CAP_NET_BIND_SERVICE permitted
    blob = (0x02000001).to_bytes(4, "little") + (1 << 10).to_bytes(4, "little") + bytes(12)
    os.setxattr(copied, "security.capability", blob)
    assert overlay.changes() == {"/bin": "C", "/bin/tool": "C"}


def test_an_opaque_folder_deletes_what_the_layers_below_had_in_it(overlay: Overlay) -> None:
    # Given a folder spread over two image layers, one file hidden by the upper one
    top, bottom, upper = overlay.lower[1], overlay.lower[2], overlay.upper
    overlay.file(top, "/doc/bash/NEWS")
    overlay.file(bottom, "/doc/bash/README")
    overlay.file(bottom, "/doc/bash/gone-already")
    overlay.whiteout(top, "/doc/bash/gone-already")
    overlay.file(bottom, "/doc/bash/kept", b"old")
    # When the container removed it and made it again with one new file and one of the same name
    overlay.opaque(upper, "/doc/bash")
    overlay.file(upper, "/doc/bash/new")
    overlay.file(upper, "/doc/bash/kept", b"new", mtime=1_800_000_000)
    # Then each file it had is deleted (not the one already hidden), the same name changed
    assert overlay.changes() == {
        "/doc": "C",
        "/doc/bash": "C",
        "/doc/bash/NEWS": "D",
        "/doc/bash/README": "D",
        "/doc/bash/kept": "C",
        "/doc/bash/new": "A",
    }


def test_an_opaque_folder_in_an_image_layer_hides_the_layers_under_it(overlay: Overlay) -> None:
    top, bottom, upper = overlay.lower[1], overlay.lower[2], overlay.upper
    overlay.opaque(top, "/srv")
    overlay.file(top, "/srv/new-in-top")
    overlay.file(bottom, "/srv/old-in-bottom")
    overlay.whiteout(upper, "/srv/old-in-bottom")  # hides nothing the image shows
    overlay.file(upper, "/srv/old-in-bottom2")
    overlay.whiteout(upper, "/srv/new-in-top")
    (bottom / "srv" / "x").mkdir()
    assert overlay.changes() == {"/srv": "C", "/srv/new-in-top": "D", "/srv/old-in-bottom2": "A"}


def test_type_changes_and_new_folders_over_files(overlay: Overlay) -> None:
    image, upper = overlay.lower[1], overlay.upper
    overlay.file(image, "/was-file")
    overlay.file(image, "/was-folder/inside")
    overlay.opaque(upper, "/was-file")
    overlay.file(upper, "/was-file/now-inside")
    overlay.file(upper, "/was-folder")
    changes = overlay.changes()
    assert changes == {"/was-file": "C", "/was-file/now-inside": "A", "/was-folder": "C"}


def test_links_in_the_upper_directory_are_entries_never_followed(
    overlay: Overlay, tmp_path: Path
) -> None:
    # Given links out of the tree, to the host's root and to a folder full of files
    outside = tmp_path / "outside"
    overlay.file(outside, "/secret/a")
    overlay.file(outside, "/secret/b")
    upper = overlay.upper
    (upper / "rootlink").symlink_to("/")
    (upper / "escape").symlink_to(outside / "secret")
    (upper / "relative").symlink_to("../../../../outside/secret")
    # Then each is one added entry, nothing read through it
    assert overlay.changes() == {"/escape": "A", "/relative": "A", "/rootlink": "A"}


def test_a_link_in_an_image_layer_is_not_followed_to_look_paths_up(
    overlay: Overlay, tmp_path: Path
) -> None:
    # Given an image whose /lib is a link to a host folder that has the upper's paths
    outside = tmp_path / "host-lib"
    overlay.file(outside, "/libc.so", b"host")
    image, upper = overlay.lower[1], overlay.upper
    (image / "lib").symlink_to(outside)
    # When the container made /lib a folder holding a file of the same name
    overlay.opaque(upper, "/lib")
    overlay.file(upper, "/lib/libc.so", b"host")
    # Then the file is new (the host's was not looked at) and /lib changed type
    assert overlay.changes() == {"/lib": "C", "/lib/libc.so": "A"}


def test_devices_and_fifos_are_entries(overlay: Overlay) -> None:
    upper, image = overlay.upper, overlay.lower[1]
    os.mknod(upper / "null", stat.S_IFCHR | 0o666, os.makedev(1, 3))
    os.mknod(upper / "disk", stat.S_IFBLK | 0o600, os.makedev(8, 0))
    os.mkfifo(upper / "fifo")
    os.mknod(image / "tty", stat.S_IFCHR | 0o666, os.makedev(5, 0))
    os.mknod(upper / "tty", stat.S_IFCHR | 0o666, os.makedev(5, 1))
    assert overlay.changes() == {"/disk": "A", "/fifo": "A", "/null": "A", "/tty": "C"}


def test_a_name_that_is_not_utf8_is_left_to_the_engine(overlay: Overlay) -> None:
    os.close(os.open(os.fsencode(overlay.upper) + b"/bad\xff", os.O_CREAT | os.O_WRONLY))
    with pytest.raises(Unreadable, match="UTF-8"):
        upper_changes(overlay.attrs)


def test_too_many_entries_too_deep_or_too_long_is_left_to_the_engine(
    overlay: Overlay, monkeypatch: pytest.MonkeyPatch
) -> None:
    for n in range(20):
        overlay.file(overlay.upper, f"/many/{n}")
    deep = overlay.upper / "deep" / "/".join("d" * 10)
    deep.mkdir(parents=True)
    assert len(overlay.changes()) == 20 + 1 + 11
    monkeypatch.setattr(layer_diff, "MAX_ENTRIES", 15)
    with pytest.raises(Unreadable, match="entries"):
        upper_changes(overlay.attrs)
    monkeypatch.setattr(layer_diff, "MAX_ENTRIES", 1000)
    monkeypatch.setattr(layer_diff, "MAX_DEPTH", 5)
    with pytest.raises(Unreadable, match="deeper"):
        upper_changes(overlay.attrs)
    monkeypatch.setattr(layer_diff, "MAX_DEPTH", 100)
    monkeypatch.setattr(layer_diff, "MAX_PATH", 16)
    with pytest.raises(Unreadable, match="longer"):
        upper_changes(overlay.attrs)
    monkeypatch.setattr(layer_diff, "MAX_PATH", 4096)
    monkeypatch.setattr(layer_diff, "MAX_OPEN", 8)
    with pytest.raises(Unreadable, match="open"):
        upper_changes(overlay.attrs)


def test_overlay_features_it_does_not_follow_are_left_to_the_engine(overlay: Overlay) -> None:
    (overlay.upper / "moved").mkdir()
    os.setxattr(overlay.upper / "moved", "trusted.overlay.redirect", b"/old")
    with pytest.raises(Unreadable, match="redirected"):
        upper_changes(overlay.attrs)


def test_the_server_must_be_root(overlay: Overlay, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(os, "geteuid", lambda: 1000)
    with pytest.raises(Unreadable, match="root"):
        upper_changes(overlay.attrs)


@pytest.mark.parametrize(
    ("driver", "upper", "lower", "why"),
    [
        ("devicemapper", "/h/x/diff", "/h/x-init/diff", "overlay2"),
        ("overlay2", "h/x/diff", "/h/x-init/diff", "absolute"),
        ("overlay2", "/h/../etc/x/diff", "/h/x-init/diff", "absolute normal"),
        ("overlay2", "/h/x/merged", "/h/x-init/diff", "HOME/NAME/diff"),
        ("overlay2", "/h/x/diff", "/h/y-init/diff", "init layer"),
        ("overlay2", "/h/x/diff", "/h/x-init/diff:/elsewhere/l/diff", "one driver home"),
        ("overlay2", "/h/x/diff", "/h/l/diff:/h/x-init/diff", "init layer"),
        ("overlay2", "/h/x-init/diff", "/h/x-init-init/diff", "init layer"),
        ("overlay2", "/h/x/diff", "", "no upper or lower"),
        ("overlay2", "/h/x/diff", ":".join(["/h/x-init/diff"] + ["/h/l/diff"] * 130), "layers"),
    ],
)
def test_inspect_data_that_is_not_a_containers_overlay_is_refused(
    driver: str, upper: str, lower: str, why: str
) -> None:
    attrs = {"GraphDriver": {"Name": driver, "Data": {"UpperDir": upper, "LowerDir": lower}}}
    with pytest.raises(Unreadable, match=why):
        Layers.of(attrs)


def test_folders_that_are_not_there_are_left_to_the_engine(overlay: Overlay) -> None:
    attrs = overlay.attrs
    attrs["GraphDriver"]["Data"]["UpperDir"] = str(overlay.home / ("b" * 64) / "diff")
    attrs["GraphDriver"]["Data"]["LowerDir"] = str(overlay.home / ("b" * 64 + "-init") / "diff")
    with pytest.raises(Unreadable):
        upper_changes(attrs)


def test_an_upper_directory_that_is_a_link_is_not_followed(
    overlay: Overlay, tmp_path: Path
) -> None:
    elsewhere = tmp_path / "elsewhere"
    overlay.file(elsewhere, "/file")
    os.rmdir(overlay.upper)
    overlay.upper.symlink_to(elsewhere)
    with pytest.raises(Unreadable):
        upper_changes(overlay.attrs)


class Engine:
    """The engine's archives as a fake: records what it was asked."""

    name = "box"

    def __init__(self) -> None:
        self.asked: list[str] = []

    def get(self, path: str) -> tuple[Iterator[bytes], dict[str, Any]] | None:
        self.asked.append(path)
        return None


def members(got: tuple[Iterator[bytes], dict[str, Any]] | None) -> list[tuple[str, str, bytes]]:
    assert got is not None
    chunks, _ = got
    with tarfile.open(fileobj=io.BytesIO(b"".join(chunks)), mode="r:") as archive:
        out = []
        for member in archive:
            data = archive.extractfile(member) if member.isfile() else None
            out.append((member.name, member.linkname, data.read() if data else b""))
        return out


def test_changed_files_and_links_are_read_from_the_upper_directory(overlay: Overlay) -> None:
    upper = overlay.upper
    overlay.file(upper, "/etc/motd", b"tuned\n" * 300_000).chmod(0o640)
    (upper / "etc" / "link").symlink_to("../usr/bin/true")
    engine = Engine()
    files = LayerFiles(overlay.attrs, engine)
    got = files.get("/etc/motd")
    assert got is not None
    assert got[1]["size"] == 1_800_000
    assert members(got) == [("motd", "", b"tuned\n" * 300_000)]
    assert members(files.get("/etc/link")) == [("link", "../usr/bin/true", b"")]
    assert engine.asked == []


def test_what_is_not_wholly_in_the_upper_directory_is_the_engines(
    overlay: Overlay, tmp_path: Path
) -> None:
    upper, image = overlay.upper, overlay.lower[1]
    overlay.file(image, "/etc/passwd")
    overlay.file(upper, "/etc/motd")
    overlay.file(tmp_path, "/host/secret", b"host's")
    (upper / "via").symlink_to(tmp_path / "host")
    os.mkfifo(upper / "fifo")
    os.mknod(upper / "tty", stat.S_IFCHR | 0o666, os.makedev(5, 0))
    overlay.whiteout(upper, "/gone")
    meta = overlay.file(upper, "/meta")
    os.setxattr(meta, "trusted.overlay.metacopy", b"")
    engine = Engine()
    files = LayerFiles(overlay.attrs, engine)
    asked = [
        "/etc",
        "/etc/passwd",
        "/via/secret",
        "/fifo",
        "/tty",
        "/gone",
        "/meta",
        "/etc/../etc/motd",
    ]
    for path in asked:
        assert files.get(path) is None
    assert engine.asked == asked


def test_a_files_archive_closes_its_handle_however_it_ends(overlay: Overlay) -> None:
    overlay.file(overlay.upper, "/big", bytes(3 << 20))
    files = LayerFiles(overlay.attrs, Engine())
    before = len(os.listdir("/proc/self/fd"))
    got = files.get("/big")
    assert got is not None
    next(got[0])
    got[0].close()  # type: ignore[attr-defined]
    dropped = files.get("/big")
    assert len(os.listdir("/proc/self/fd")) == before + 1
    del dropped
    assert len(os.listdir("/proc/self/fd")) == before


def test_a_file_that_shrinks_while_it_is_read_is_a_broken_archive(overlay: Overlay) -> None:
    big = overlay.file(overlay.upper, "/big", bytes(3 << 20))
    got = LayerFiles(overlay.attrs, Engine()).get("/big")
    assert got is not None
    next(got[0])
    os.truncate(big, 10)
    with pytest.raises(tarfile.ReadError, match="shrank"):
        list(got[0])


def folder(got: tuple[Iterator[bytes], dict[str, Any]] | None) -> tuple[int, int, float] | None:
    if got is None:
        return None
    with tarfile.open(fileobj=io.BytesIO(b"".join(got[0])), mode="r:") as archive:
        first = archive.next()
    assert first is not None
    assert first.isdir()
    return first.mode, first.uid, first.mtime


def test_a_folder_is_what_overlay_merges_from_the_layers(overlay: Overlay) -> None:
    # Given /var/log in the image, changed by the container; /usr/local in the image only
    upper, top, bottom = overlay.upper, overlay.lower[1], overlay.lower[2]
    for root in (bottom, upper):
        (root / "var" / "log").mkdir(parents=True)
    (upper / "var" / "log").chmod(0o700)
    os.utime(upper / "var" / "log", (5, 5))
    (bottom / "usr" / "local").mkdir(parents=True)
    overlay.file(top, "/usr/local/was-a-folder")
    (top / "usr" / "local").chmod(0o751)  # the top layer's folder is the one seen
    (bottom / "usr" / "local" / "hidden").mkdir()
    overlay.whiteout(top, "/usr/local/hidden")
    overlay.file(bottom, "/file")
    (bottom / "link").symlink_to("/usr")
    overlay.opaque(top, "/opt")
    (bottom / "opt" / "below").mkdir(parents=True)
    folders = LayerFolders(overlay.attrs, "box")
    # Then the upper directory's folder decides, else the image's; a whiteout, a file, a
    # link, an opaque folder above it: not a folder
    assert folder(folders.get("/var/log")) == (0o700, 0, 5)
    assert folder(folders.get("/usr/local")) == (
        0o751,
        0,
        (bottom / "usr/local").stat().st_mtime // 1,
    )
    assert folders.get("/usr/local/hidden") is None
    assert folders.get("/usr/local/was-a-folder") is None
    assert folders.get("/file") is None
    assert folders.get("/link") is None
    assert folders.get("/link/local") is None
    assert folders.get("/opt/below") is None
    assert folders.get("/nothing") is None
    assert folders.get("/var/../usr") is None


# --- The review's findings (each test failed before its fix) -------------------------------


def test_a_same_size_write_with_its_time_reset_is_a_change(overlay: Overlay) -> None:
    # Given an image file, and the container's copy of it rewritten with the same size, mode,
    # owner and time (``touch -r``): the naive rule's metadata is all the same
    image, upper = overlay.lower[1], overlay.upper
    overlay.file(image, "/etc/debian_version", b"12.4")
    overlay.file(upper, "/etc/debian_version", b"SECR")
    (upper / "etc" / "new-folder").mkdir()
    # Then it is a change, as ``docker commit`` (the native diff) has it; a file with no
    # counterpart below is still an addition
    assert overlay.changes() == {
        "/etc": "C",
        "/etc/debian_version": "C",
        "/etc/new-folder": "A",
    }


@pytest.mark.parametrize(
    ("status", "uid_map", "why"),
    [
        # CAP_SYS_ADMIN (bit 21) missing from the effective set
        ("CapEff:\t000001fffedfffff\n", "0 0 4294967295\n", "CAP_SYS_ADMIN"),
        ("Name:\tx\n", "0 0 4294967295\n", "CAP_SYS_ADMIN"),
        # root in a user namespace (rootless, userns-remap, a container)
        ("CapEff:\t000001ffffffffff\n", "0 100000 65536\n", "user namespace"),
        ("CapEff:\t000001ffffffffff\n", "", "user namespace"),
    ],
)
def test_root_without_the_initial_namespaces_admin_capability_is_refused(
    overlay: Overlay, monkeypatch: pytest.MonkeyPatch, status: str, uid_map: str, why: str
) -> None:
    # trusted.* attributes read as absent without CAP_SYS_ADMIN in the initial user namespace:
    # an opaque folder would look merged, a redirect unseen
    overlay.file(overlay.upper, "/etc/motd")
    proc = {"status": status, "uid_map": uid_map}
    monkeypatch.setattr(layer_diff, "_proc_self", lambda name: proc[name])
    with pytest.raises(Unreadable, match=why):
        upper_changes(overlay.attrs)
    with pytest.raises(Unreadable, match=why):
        LayerFiles(overlay.attrs, Engine())
    with pytest.raises(Unreadable, match=why):
        LayerFolders(overlay.attrs, "box")


def test_this_process_has_the_initial_namespaces_admin_capability() -> None:
    # The real /proc/self read as the reader reads it: the suite runs as the engine's root
    layer_diff.check_privileges()


@pytest.fixture
def root_owned() -> Iterator[Path]:
    """A folder only root can write, on a path from ``/`` that only root can write (``/run``)."""
    info = os.stat("/run")
    if info.st_uid != 0 or info.st_mode & 0o022:
        pytest.skip("/run is not root's alone here")
    path = Path(tempfile.mkdtemp(prefix="gpudev-layer-", dir="/run"))
    try:
        yield path
    finally:
        shutil.rmtree(path)


def test_a_driver_home_under_the_engines_data_root_is_read(root_owned: Path) -> None:
    overlay = Overlay(root_owned / "docker" / "overlay2")
    overlay.file(overlay.lower[1], "/etc/motd", b"old")
    overlay.file(overlay.upper, "/etc/motd", b"new")
    root = str(root_owned / "docker")
    assert {c["Path"] for c in upper_changes(overlay.attrs, root=root)} == {"/etc", "/etc/motd"}
    assert members(LayerFiles(overlay.attrs, Engine(), root=root).get("/etc/motd")) == [
        ("motd", "", b"new")
    ]
    assert LayerFolders(overlay.attrs, "box", root=root).get("/etc") is not None


def test_a_driver_home_elsewhere_than_the_data_root_is_refused(root_owned: Path) -> None:
    overlay = Overlay(root_owned / "docker" / "overlay2")
    for root in (str(root_owned / "other"), str(root_owned), "/var/lib/docker", "relative"):
        with pytest.raises(Unreadable, match="data root"):
            upper_changes(overlay.attrs, root=root)
        with pytest.raises(Unreadable, match="data root"):
            LayerFiles(overlay.attrs, Engine(), root=root)
        with pytest.raises(Unreadable, match="data root"):
            LayerFolders(overlay.attrs, "box", root=root)


@pytest.mark.parametrize("how", ["link", "owner", "group-writable", "other-writable"])
def test_a_driver_home_others_could_change_is_refused(root_owned: Path, how: str) -> None:
    docker = root_owned / "docker"
    overlay = Overlay(docker / "overlay2")
    overlay.file(overlay.upper, "/etc/motd")
    if how == "link":  # the data root a link to a folder elsewhere
        docker.rename(root_owned / "real")
        docker.symlink_to(root_owned / "real")
    elif how == "owner":
        os.chown(overlay.home, 1000, 0)
    elif how == "group-writable":
        (overlay.home / ID).chmod(0o775)
    else:
        docker.chmod(0o757)
    why = {"link": "a link", "owner": "not owned by root"}.get(how, "group or other writable")
    with pytest.raises(Unreadable, match=why):
        upper_changes(overlay.attrs, root=str(docker))
    with pytest.raises(Unreadable, match=why):
        LayerFiles(overlay.attrs, Engine(), root=str(docker))
    with pytest.raises(Unreadable, match=why):
        LayerFolders(overlay.attrs, "box", root=str(docker)).get("/etc")


def test_the_tests_temporary_folders_are_not_trusted(overlay: Overlay) -> None:
    # /tmp is anyone's to write: a driver home under it could be swapped
    with pytest.raises(Unreadable, match="writable"):
        upper_changes(overlay.attrs, root=str(overlay.home.parent))


def test_a_folder_that_cannot_be_read_is_an_error_not_a_missing_folder(overlay: Overlay) -> None:
    (overlay.upper / "var" / "log").mkdir(parents=True)
    (overlay.upper / "moved").mkdir()
    os.setxattr(overlay.upper / "moved", "trusted.overlay.redirect", b"/old")
    folders = LayerFolders(overlay.attrs, "box")
    assert folders.get("/var/log") is not None
    assert folders.get("/var/nothing") is None  # ENOENT: not a folder
    # A folder overlay redirects: the reader does not follow it
    with pytest.raises(Unreadable, match="redirected"):
        folders.get("/moved")
    # The layers gone (the container removed meanwhile): not "not a folder"
    shutil.rmtree(overlay.upper)
    with pytest.raises(Unreadable):
        folders.get("/var/log")


def test_a_whiteout_in_an_opaque_folder_is_one_deletion(overlay: Overlay) -> None:
    # Given a folder the container removed and made again, and in it a whiteout of a file
    # the layers below had (overlay may keep both markers)
    overlay.file(overlay.lower[1], "/doc/README")
    overlay.file(overlay.lower[1], "/doc/NEWS")
    overlay.opaque(overlay.upper, "/doc")
    overlay.whiteout(overlay.upper, "/doc/README")
    # Then each file is deleted once (``changes`` checks each path is there once)
    assert overlay.changes() == {"/doc": "C", "/doc/NEWS": "D", "/doc/README": "D"}


def test_a_files_handle_is_closed_when_its_header_cannot_be_made(
    overlay: Overlay, monkeypatch: pytest.MonkeyPatch
) -> None:
    overlay.file(overlay.upper, "/etc/motd")
    files = LayerFiles(overlay.attrs, Engine())

    def broken(*_args: Any) -> bytes:
        raise ValueError("no header")

    monkeypatch.setattr(layer_diff, "_header", broken)
    before = len(os.listdir("/proc/self/fd"))
    with pytest.raises(ValueError, match="no header"):
        files.get("/etc/motd")
    assert len(os.listdir("/proc/self/fd")) == before


class Container:
    """A container as ``DockerChanges`` reads it: its inspect, and the engine's diff."""

    name = "box"
    client = SimpleNamespace(api=None)
    id = "c" * 64

    def __init__(self, attrs: dict[str, Any]) -> None:
        self.attrs = attrs
        self.diffs = 0

    def diff(self) -> list[dict[str, Any]]:
        self.diffs += 1
        return [{"Path": "/from-the-engine", "Kind": 1}]


def source(data_root: str | None, options: tuple[str, ...] = ()) -> DockerChanges:
    info = SimpleNamespace(data_root=data_root, security_options=options)

    def engine_info(max_age: float = 0.0) -> SimpleNamespace:
        assert max_age > 0  # a count may use an answer some seconds old
        return info

    host = SimpleNamespace(
        spec=SimpleNamespace(url="unix:///var/run/docker.sock"), engine_info=engine_info
    )
    return DockerChanges(None, host)  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("data_root", "options"),
    [
        (None, ()),
        ("docker", ("name=seccomp,profile=default", "name=rootless")),
        ("docker", ("name=userns",)),
    ],
)
def test_a_rootless_or_remapped_engine_or_one_without_a_data_root_is_asked(
    root_owned: Path, data_root: str | None, options: tuple[str, ...]
) -> None:
    # Given folders the reader could read, under the data root the engine names
    overlay = Overlay(root_owned / "docker" / "overlay2")
    overlay.file(overlay.upper, "/etc/motd")
    container = Container(overlay.attrs)
    root = str(root_owned / data_root) if data_root else None
    # When the engine is rootless or remaps users, or names no data root: the engine is asked
    changes, files = source(root, options)._changes(container)  # type: ignore[arg-type]
    assert (changes, files, container.diffs) == ([{"Path": "/from-the-engine", "Kind": 1}], None, 1)
    assert source(root, options)._folders(container) is None  # type: ignore[arg-type]


def test_the_engines_data_root_bounds_what_is_read(
    monkeypatch: pytest.MonkeyPatch, root_owned: Path
) -> None:
    overlay = Overlay(root_owned / "docker" / "overlay2")
    overlay.file(overlay.upper, "/etc/motd")
    container = Container(overlay.attrs)
    changes, files = source(str(root_owned / "docker"))._changes(container)  # type: ignore[arg-type]
    assert [c["Path"] for c in changes] == ["/etc", "/etc/motd"]
    assert files is not None
    assert container.diffs == 0
    # The same folders, the engine saying its data root is elsewhere: the engine is asked
    changes, files = source("/var/lib/docker")._changes(container)  # type: ignore[arg-type]
    assert (changes, files, container.diffs) == ([{"Path": "/from-the-engine", "Kind": 1}], None, 1)


def test_any_failure_of_the_reader_falls_back_to_the_engine_and_is_said_once(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    def broken(attrs: Any, *, root: str | None = None) -> list[dict[str, Any]]:
        raise RuntimeError("a reader bug")

    monkeypatch.setattr(layer_diff, "LayerFiles", lambda *_a, **_k: None)
    monkeypatch.setattr(layer_diff, "upper_changes", broken)
    monkeypatch.setattr(docker_changes, "EngineArchives", lambda _c: None)
    container = Container({})
    with caplog.at_level(logging.INFO, logger=docker_changes.__name__):
        for _ in range(3):
            changes, files = source("/var/lib/docker")._changes(container)  # type: ignore[arg-type]
            assert (changes, files) == ([{"Path": "/from-the-engine", "Kind": 1}], None)
    said = [r for r in caplog.records if "a reader bug" in r.getMessage()]
    assert len(said) == 1
    assert said[0].levelno == logging.INFO


def test_folders_that_cannot_be_read_make_the_commit_read_them_from_its_image(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # Given an early commit whose folders come from the container's layers, unreadable now
    class Gone:
        name = "box"

        def get(self, path: str) -> tuple[Iterator[bytes], dict[str, Any]] | None:
            raise Unreadable(f"{path}: the layers are gone")

    removal = object()
    monkeypatch.setattr(commit, "_commit", lambda _client, _container: "sha256:committed")
    monkeypatch.setattr(commit, "_removal", lambda *_args: removal)
    early = commit._EarlyCommit(
        None,  # type: ignore[arg-type]
        None,
        ["/var/log/gpudev"],
        None,  # type: ignore[arg-type]
        Gone(),
    )
    # Then the layer is written from a container of the committed image instead
    assert early.result() == ("sha256:committed", removal)
