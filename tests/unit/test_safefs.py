"""``safefs``: writes that never follow a link, and the extraction of a crafted archive (what a
container could hand over) into a staging folder: nothing lands outside it."""

from __future__ import annotations

import io
import os
import tarfile
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from jupyter_gpudev import safefs
from jupyter_gpudev.changes.export import _Exporter
from jupyter_gpudev.untrusted import link_stays_inside


def test_a_folder_on_the_way_that_is_a_link_is_refused(tmp_path: Path) -> None:
    # Given a workspace where a folder on the way is a link to outside
    outside = tmp_path / "outside"
    outside.mkdir()
    root = tmp_path / "root"
    (root / "a").mkdir(parents=True)
    (root / "a" / "b").symlink_to(outside)
    # When a write goes through it, it is refused naming the link, and nothing is written
    with safefs.Folder.open(root) as top, pytest.raises(safefs.LinkRefused) as refused:
        top.folder("a/b/c", create=True)
    assert f"{root}/a/b is a symbolic link" in refused.value.message
    assert list(outside.iterdir()) == []
    # And names that climb are not names
    with safefs.Folder.open(root) as top, pytest.raises(ValueError, match="not a file name"):
        top.folder("a/../..", create=True)


def test_replace_puts_a_file_where_a_link_was_without_following_it(tmp_path: Path) -> None:
    # Given a link planted at the name of a backup, and one at the old fixed temp name
    victim = tmp_path / "victim"
    victim.write_text("original\n")
    (tmp_path / "Dockerfile.prev").symlink_to(victim)
    (tmp_path / ".Dockerfile.gpudev-tmp").symlink_to(victim)
    # When the backup and the Dockerfile are replaced
    with safefs.Folder.open(tmp_path) as folder:
        folder.replace("Dockerfile.prev", b"old\n")
        folder.replace("Dockerfile", b"new\n")
    # Then they are files, and the victim is untouched; no temporary file is left
    assert not (tmp_path / "Dockerfile.prev").is_symlink()
    assert (tmp_path / "Dockerfile.prev").read_text() == "old\n"
    assert (tmp_path / "Dockerfile").read_text() == "new\n"
    assert victim.read_text() == "original\n"
    assert sorted(p.name for p in tmp_path.iterdir() if "gpudev-tmp" in p.name) == [
        ".Dockerfile.gpudev-tmp"
    ]


def test_create_refuses_a_name_already_there_even_a_link(tmp_path: Path) -> None:
    victim = tmp_path / "victim"
    (tmp_path / "name").symlink_to(victim)
    with safefs.Folder.open(tmp_path) as folder, pytest.raises(FileExistsError):
        folder.write_new("name", [b"x"])
    assert not victim.exists()


def test_read_bytes_refuses_a_link(tmp_path: Path) -> None:
    (tmp_path / "secret").write_text("host file\n")
    (tmp_path / "devcontainer.json").symlink_to(tmp_path / "secret")
    with safefs.Folder.open(tmp_path) as folder:
        assert folder.read_bytes("absent", 10) is None
        with pytest.raises(safefs.LinkRefused):
            folder.read_bytes("devcontainer.json", 100)


@pytest.mark.parametrize(
    "proc", [safefs.PROC_FDS, "/nonexistent/proc/self/fd"], ids=["proc", "no-proc"]
)
def test_open_file_reads_a_regular_file_and_never_opens_a_link_fifo_or_folder(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, proc: str
) -> None:
    # Given a folder with a file, links to it and to a device, a FIFO and a folder (with and
    # without /proc to open the checked handle again through)
    monkeypatch.setattr(safefs, "PROC_FDS", proc)
    (tmp_path / "file").write_text("content\n")
    (tmp_path / "link").symlink_to(tmp_path / "file")
    (tmp_path / "null").symlink_to("/dev/null")
    os.mkfifo(tmp_path / "fifo")  # nothing writes to it: opening it to read would wait
    (tmp_path / "folder").mkdir()
    with safefs.Folder.open(tmp_path) as folder:
        # When the file is opened, then it is read
        with folder.open_file("file") as handle:
            assert handle.read() == b"content\n"
        # When anything else is, then it is refused (the FIFO without waiting on it)
        for name in ("link", "null", "fifo", "folder"):
            with pytest.raises(safefs.LinkRefused, match=f"{tmp_path}/{name} is a symbolic link"):
                folder.open_file(name)
        # And what is absent is absent
        with pytest.raises(FileNotFoundError):
            folder.open_file("absent")


def test_open_checked_opens_a_real_path_and_refuses_one_that_holds_a_link_now(
    tmp_path: Path,
) -> None:
    # Given a real path, checked
    real = tmp_path.resolve() / "ws" / "ctx"
    real.mkdir(parents=True)
    (real / "Dockerfile").write_text("FROM scratch\n")
    # When it is opened from / down, then it is that folder
    with safefs.Folder.open_checked(real) as folder:
        assert folder.read_bytes("Dockerfile", 100) == b"FROM scratch\n"
    # When a folder on it became a link since
    real.parent.rename(tmp_path / "moved")
    real.parent.symlink_to(tmp_path / "moved")
    # Then it is refused, naming the link
    with pytest.raises(safefs.LinkRefused, match=f"{real.parent} is a symbolic link"):
        safefs.Folder.open_checked(real)
    # And a relative path is no checked path
    with pytest.raises(ValueError, match="not an absolute path"):
        safefs.Folder.open_checked("ws/ctx")


def test_copy_tree_adds_files_and_links_but_not_through_a_planted_link(tmp_path: Path) -> None:
    # Given a staged tree with a file and a link inside it
    staged = tmp_path / "staged"
    (staged / "files" / "etc").mkdir(parents=True)
    (staged / "files" / "etc" / "conf").write_text("c\n")
    os.chmod(staged / "files" / "etc" / "conf", 0o640)
    (staged / "files" / "etc" / "near").symlink_to("conf")
    target = tmp_path / "context"
    # When it is copied into an empty folder, files, modes and links come along
    with (
        safefs.Folder.open(staged) as source,
        safefs.Folder.open(target.parent) as top,
        top.folder("context", create=True) as out,
    ):
        safefs.copy_tree(source, out)
    assert (target / "files" / "etc" / "conf").read_text() == "c\n"
    assert (target / "files" / "etc" / "conf").stat().st_mode & 0o777 == 0o640
    assert os.readlink(target / "files" / "etc" / "near") == "conf"
    # When a link to outside was planted where a folder goes, the copy is refused
    outside = tmp_path / "outside"
    outside.mkdir()
    (target / "files" / "etc" / "conf").unlink()
    os.unlink(target / "files" / "etc" / "near")
    (target / "files" / "etc").rmdir()
    (target / "files" / "etc").symlink_to(outside)
    with (
        safefs.Folder.open(staged) as source,
        safefs.Folder.open(target) as out,
        pytest.raises(safefs.LinkRefused, match="files/etc"),
    ):
        safefs.copy_tree(source, out)
    assert list(outside.iterdir()) == []


def test_relative_inside() -> None:
    assert safefs.relative_inside(Path("/r/.devcontainer/x"), Path("/r")) == ".devcontainer/x"
    assert safefs.relative_inside(Path("/r"), Path("/r")) == ""
    assert safefs.relative_inside(Path("/other"), Path("/r")) is None
    assert safefs.relative_inside(Path("/r/../etc"), Path("/r")) is None


# -- extraction of a crafted archive ------------------------------------------------------------


def crafted(*members: tuple[str, bytes, bytes | None, str]) -> tarfile.TarFile:
    """A tar file of (name, type, data, linkname) members, opened for reading as a stream."""
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w") as archive:
        for name, kind, data, linkname in members:
            info = tarfile.TarInfo(name)
            info.type, info.linkname, info.mode = kind, linkname, 0o644
            info.size = len(data) if data is not None else 0
            archive.addfile(info, io.BytesIO(data) if data is not None else None)
    buffer.seek(0)
    return tarfile.open(fileobj=buffer, mode="r|")


def exporter(stage: safefs.Folder, limit: int = 1 << 20) -> _Exporter:
    container: Any = SimpleNamespace(client=SimpleNamespace(api=None), name="c", id="c")
    return _Exporter(container, stage, limit)


def test_a_crafted_archive_writes_nothing_outside_the_staging_folder(tmp_path: Path) -> None:
    # Given a staging folder, and an archive with climbing and absolute names, a device, a
    # FIFO, a hard link, a symlink to a host path followed by a file of the same name, an
    # escaping link, a link inside the tree, a credential and a file over the size limit
    outside = tmp_path / "outside"
    outside.mkdir()
    stage_path = tmp_path / "stage"
    stage_path.mkdir()
    out = str(outside).lstrip("/")
    wanted = {
        "/etc/dup",
        "/etc/dev",
        "/etc/fifo",
        "/etc/hard",
        "/etc/escape",
        "/etc/near",
        "/etc/key",
        "/etc/big",
        "/etc/ok",
        f"/{out}/abs",
    }
    archive = crafted(
        (f"{'../' * 12}{out}/climbed", tarfile.REGTYPE, b"x", ""),
        (f"/{out}/abs", tarfile.REGTYPE, b"x", ""),
        (f"etc/ok/../../../{out}/x", tarfile.REGTYPE, b"x", ""),
        ("etc/dev", tarfile.CHRTYPE, None, ""),
        ("etc/fifo", tarfile.FIFOTYPE, None, ""),
        ("etc/hard", tarfile.LNKTYPE, None, "etc/ok"),
        ("etc/dup", tarfile.SYMTYPE, None, str(outside / "planted")),
        ("etc/dup", tarfile.REGTYPE, b"through the link\n", ""),
        ("etc/escape", tarfile.SYMTYPE, None, "../../../.." + str(outside)),
        ("etc/near", tarfile.SYMTYPE, None, "ok"),
        ("etc/key", tarfile.REGTYPE, b"-----BEGIN OPENSSH PRIVATE KEY-----\n", ""),
        ("etc/big", tarfile.REGTYPE, b"y" * 2048, ""),
        ("etc/ok", tarfile.REGTYPE, b"fine\n", ""),
    )
    # When its members are taken into the staging folder
    with safefs.Folder.open(stage_path) as stage:
        taking = exporter(stage, limit=1024)
        try:
            with archive:
                taking.take_members(archive, "/", wanted)
        finally:
            taking.close()
    result = taking.result
    # Then nothing exists outside it
    assert list(outside.iterdir()) == []
    # And only the plain file and the link inside the tree are staged
    staged = sorted(str(p.relative_to(stage_path)) for p in stage_path.rglob("*") if not p.is_dir())
    assert staged == ["files/etc/near", "files/etc/ok"]
    assert (stage_path / "files" / "etc" / "ok").read_text() == "fine\n"
    # And what was not copied is reported with its reason, the escaping link kept for `ln`
    assert result.skipped["/etc/dev"].startswith("a character device")
    assert result.skipped["/etc/fifo"].startswith("a FIFO")
    assert result.skipped["/etc/dup"] == "listed twice in the container's archive: not copied"
    assert result.skipped["/etc/big"] == (
        "2048 bytes, over the limit of 1024 bytes for a copied file: not copied"
    )
    assert result.links == {"/etc/escape": "../../../.." + str(outside)}
    assert result.secrets == {"/etc/key"}
    # (the hard link is left to be fetched alone, where the engine sends the file itself)
    assert "/etc/hard" not in taking.done


@pytest.mark.parametrize(
    ("path", "target", "inside"),
    [
        ("/usr/local/bin/x", "../lib/x", True),
        ("/etc/x", "y/z", True),
        ("/etc/x", "../../tmp", False),
        ("/etc/x", "/etc/passwd", False),
        ("/a/b/x", "../../c/./d", True),
        ("/a/x", "c/../../..", False),
    ],
)
def test_a_link_stays_inside_only_when_relative_and_never_above_root(
    path: str, target: str, inside: bool
) -> None:
    assert link_stays_inside(path, target) is inside


@pytest.mark.skipif(os.geteuid() != 0, reason="giving files to another uid needs root")
def test_what_a_folder_with_an_owner_makes_is_that_owners(tmp_path: Path) -> None:
    # The shared service writes into a user's folder as root: the user must own the result.
    owner = (4321, 4322)
    (tmp_path / "stage").mkdir()
    (tmp_path / "stage" / "file").write_text("x")
    (tmp_path / "stage" / "link").symlink_to("file")
    (tmp_path / "mine").write_text("root's own, untouched")
    with (
        safefs.Folder.open(tmp_path, owner=owner) as top,
        top.folder("a/b", create=True) as inner,
        safefs.Folder.open(tmp_path / "stage") as stage,
    ):
        inner.replace("Dockerfile", b"FROM x\n")
        with inner.folder("ctx", create=True) as copy:
            safefs.copy_tree(stage, copy)
    made = [
        tmp_path / "a",
        tmp_path / "a" / "b",
        tmp_path / "a" / "b" / "Dockerfile",
        tmp_path / "a" / "b" / "ctx" / "file",
        tmp_path / "a" / "b" / "ctx" / "link",
    ]
    for path in made:
        st = path.lstat()
        assert (st.st_uid, st.st_gid) == owner, path
    assert (tmp_path / "mine").stat().st_uid == 0
    # Without an owner nothing changes hands (single-user mode)
    with safefs.Folder.open(tmp_path) as top:
        top.replace("plain", b"y")
    assert (tmp_path / "plain").stat().st_uid == os.geteuid()
