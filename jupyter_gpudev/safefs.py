"""File writes (and reads) that never follow a symbolic link.

A dev container can write into the workspace (it is mounted read-write) and decides what an
archive of its files holds; neither may steer a write of gpudev's outside the folder it meant,
nor a read of gpudev's (a build context it packs, a file it reads back) to a file outside it.
So every write goes through a ``Folder``: an open directory handle, with each operation relative
to it (``dir_fd``) and refusing links: a folder on the way is opened ``O_NOFOLLOW |
O_DIRECTORY`` (a link there is a ``LinkRefused`` error naming it), a new file is created
``O_CREAT | O_EXCL | O_NOFOLLOW``, and a file that may exist is replaced by writing a fresh,
uniquely named temporary file next to it and renaming it over the name (a link there is
replaced, never written through). Names are single path components: no ``/``, ``.`` or ``..``.

Only the folder a ``Folder`` is first opened at (``Folder.open``) is trusted as given: the
Jupyter root directory, the state folder, a staging folder gpudev made. A path that was checked
to hold no link (a real path, as the environment reader hands a build context over) is opened
from ``/`` down without following one (``Folder.open_checked``): a link on it now is refused.

A file is read (``Folder.open_file``) from a handle that opens nothing but the name itself
(``O_PATH | O_NOFOLLOW``: no link followed, no FIFO waited on, no device opened), checked with
``fstat`` to be a regular file, and only then opened for reading, through that very handle.

A ``Folder`` opened with an ``owner`` (uid, gid) gives what it makes (files, folders, links)
to that owner: the shared service writes into a user's folder as root, and the user must own
what it wrote there, as if they had written it themselves.
"""

from __future__ import annotations

import errno
import functools
import os
import secrets
import stat
from collections.abc import Iterable
from pathlib import Path
from types import TracebackType
from typing import BinaryIO

from .errors import GPUDevError

_DIR_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC
_NEW_FLAGS = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC
_PATH_FLAGS = os.O_PATH | os.O_NOFOLLOW | os.O_CLOEXEC
_READ_FLAGS = os.O_RDONLY | os.O_NOCTTY | os.O_CLOEXEC
#: Where an ``O_PATH`` handle is opened again for reading (``/proc/self/fd/N``).
PROC_FDS = "/proc/self/fd"
_CHUNK = 1 << 20


class LinkRefused(GPUDevError):
    """A folder on the way to a write, or a file to read, is a symbolic link (or not what it
    should be): gpudev does not follow it."""

    status = 409
    exit_code = 6
    code = "link_refused"


def check_name(name: str) -> str:
    """``name`` when it is one path component (not empty, ``.``, ``..``, no ``/`` or NUL)."""
    if not name or name in (".", "..") or "/" in name or "\0" in name:
        raise ValueError(f"not a file name: {name!r}")
    return name


def relative_inside(path: Path, root: Path) -> str | None:
    """``path`` relative to ``root`` (both absolute, compared as written, no link followed),
    or ``None`` when it is not under ``root``. ``""`` is ``root`` itself."""
    if ".." in path.parts or ".." in root.parts:
        return None
    try:
        relative = path.relative_to(root).as_posix()
    except ValueError:
        return None
    return "" if relative == "." else relative


class Folder:
    """An open folder; every operation is relative to it and never follows a link."""

    def __init__(self, fd: int, shown: str, owner: tuple[int, int] | None = None) -> None:
        self.fd = fd
        #: The folder's path, for messages.
        self.shown = shown
        #: Who gets what is made here (uid, gid); ``None``: whoever runs gpudev.
        self.owner = owner

    @classmethod
    def open(cls, path: str | os.PathLike[str], owner: tuple[int, int] | None = None) -> Folder:
        """The trusted starting folder (opened as given: its own path may hold links)."""
        fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
        return cls(fd, os.fspath(path), owner)

    @classmethod
    def open_checked(
        cls, path: str | os.PathLike[str], owner: tuple[int, int] | None = None
    ) -> Folder:
        """The folder at the absolute ``path``, checked earlier to hold no link (a real path),
        opened from ``/`` down without following one: a link on it now (the path changed
        since) is ``LinkRefused``. What it makes goes to ``owner``."""
        shown = os.fspath(path)
        if not os.path.isabs(shown):
            raise ValueError(f"not an absolute path: {shown!r}")
        with cls.open("/", owner) as top:
            return top.folder(shown)

    def _give(self, name: str) -> None:
        """Give ``name`` (just made here, not followed if a link) to ``owner``."""
        if self.owner is not None:
            os.chown(name, *self.owner, dir_fd=self.fd, follow_symlinks=False)

    def close(self) -> None:
        if self.fd >= 0:
            os.close(self.fd)
            self.fd = -1

    def __enter__(self) -> Folder:
        return self

    def __exit__(
        self,
        kind: type[BaseException] | None,
        value: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        self.close()

    def _shown(self, name: str) -> str:
        return f"{self.shown.rstrip('/')}/{name}"

    def _refused(self, name: str) -> LinkRefused:
        return LinkRefused(
            f"{self._shown(name)} is a symbolic link or not what gpudev expects there: it does "
            "not follow links there (a dev container can plant them in the workspace). "
            "Remove it and try again.",
            details={"path": self._shown(name)},
        )

    def folder(self, relative: str, *, create: bool = False, mode: int = 0o755) -> Folder:
        """The folder at ``relative`` (``a/b/c``; ``""`` is this one, opened again), each
        component opened without following a link; missing ones made when ``create``."""
        fd = os.dup(self.fd)
        shown = self.shown
        try:
            for name in (p for p in relative.split("/") if p):
                check_name(name)
                here = Folder(fd, shown, self.owner)
                try:
                    child = os.open(name, _DIR_FLAGS, dir_fd=fd)
                except FileNotFoundError:
                    if not create:
                        raise
                    try:
                        os.mkdir(name, mode, dir_fd=fd)
                        here._give(name)
                    except FileExistsError:  # made meanwhile
                        pass
                    try:
                        child = os.open(name, _DIR_FLAGS, dir_fd=fd)
                    except OSError as exc:
                        if exc.errno in (errno.ELOOP, errno.ENOTDIR):
                            raise here._refused(name) from None
                        raise
                except OSError as exc:
                    if exc.errno in (errno.ELOOP, errno.ENOTDIR):
                        raise here._refused(name) from None
                    raise
                os.close(fd)
                fd, shown = child, here._shown(name)
        except BaseException:
            os.close(fd)
            raise
        return Folder(fd, shown, self.owner)

    def lstat(self, name: str) -> os.stat_result | None:
        """What is at ``name`` (a link itself, not followed), ``None`` when absent."""
        try:
            return os.stat(check_name(name), dir_fd=self.fd, follow_symlinks=False)
        except FileNotFoundError:
            return None

    def readlink(self, name: str) -> str:
        """The target of the link ``name``, as written (``OSError`` when it is no link)."""
        return os.readlink(check_name(name), dir_fd=self.fd)

    def open_file(self, name: str) -> BinaryIO:
        """The regular file ``name`` open for reading. A link there, or anything but a regular
        file, is ``LinkRefused``, and is never opened: the name is first opened as a bare
        handle (``O_PATH | O_NOFOLLOW``: no link followed, no FIFO waited on, no device
        opened), checked with ``fstat``, and only a regular file is opened for reading,
        through that handle (the file checked, whatever is at the name by then).
        ``FileNotFoundError`` when absent."""
        handle = os.open(check_name(name), _PATH_FLAGS, dir_fd=self.fd)
        try:
            checked = os.fstat(handle)
            if not stat.S_ISREG(checked.st_mode):
                raise self._refused(name)
            try:
                fd = os.open(f"{PROC_FDS}/{handle}", _READ_FLAGS)
            except FileNotFoundError:  # no /proc: by name, then checked to be the same file
                fd = self._reopen(name, checked)
        finally:
            os.close(handle)
        return os.fdopen(fd, "rb")

    def _reopen(self, name: str, checked: os.stat_result) -> int:
        """``name`` opened for reading, not following a link nor waiting on a FIFO, and the
        file ``checked`` was (a FIFO, a device or another file there now is refused)."""
        try:
            fd = os.open(name, _READ_FLAGS | os.O_NOFOLLOW | os.O_NONBLOCK, dir_fd=self.fd)
        except OSError as exc:
            if exc.errno == errno.ELOOP:
                raise self._refused(name) from None
            raise
        now = os.fstat(fd)
        if (now.st_dev, now.st_ino) != (checked.st_dev, checked.st_ino):
            os.close(fd)
            raise self._refused(name)
        return fd

    def kind(self, name: str) -> str | None:
        """``"file"``, ``"folder"``, ``"link"``, ``"other"``, or ``None`` when absent."""
        try:
            st = os.stat(check_name(name), dir_fd=self.fd, follow_symlinks=False)
        except FileNotFoundError:
            return None
        if stat.S_ISLNK(st.st_mode):
            return "link"
        if stat.S_ISDIR(st.st_mode):
            return "folder"
        return "file" if stat.S_ISREG(st.st_mode) else "other"

    def create(self, name: str, mode: int = 0o644) -> BinaryIO:
        """A new file ``name`` open for writing: refused when anything is there already (a
        link included). ``mode`` is set exactly (not masked)."""
        fd = os.open(check_name(name), _NEW_FLAGS, 0o600, dir_fd=self.fd)
        try:
            if self.owner is not None:
                os.fchown(fd, *self.owner)
            os.fchmod(fd, mode & 0o777)
            return os.fdopen(fd, "wb")
        except BaseException:
            os.close(fd)
            raise

    def write_new(self, name: str, chunks: Iterable[bytes], mode: int = 0o644) -> None:
        """Write a new file ``name`` (see ``create``) from ``chunks``."""
        with self.create(name, mode) as handle:
            for chunk in chunks:
                handle.write(chunk)

    def replace(self, name: str, data: bytes | Iterable[bytes], mode: int = 0o644) -> None:
        """Put a file at ``name`` atomically: written into a new, uniquely named temporary
        file in this folder, then renamed over ``name`` (a link there is replaced, not
        followed; a folder there is an error)."""
        check_name(name)
        chunks = [data] if isinstance(data, bytes) else data
        temp = self._temp_name(name)
        try:
            self.write_new(temp, chunks, mode)
            os.replace(temp, name, src_dir_fd=self.fd, dst_dir_fd=self.fd)
        except BaseException:
            self.unlink(temp)
            raise

    def symlink(self, target: str, name: str) -> None:
        """A symbolic link ``name`` -> ``target``, replacing what is at ``name`` (a file or a
        link; renamed over it, so nothing is followed)."""
        check_name(name)
        temp = self._temp_name(name)
        os.symlink(target, temp, dir_fd=self.fd)
        try:
            self._give(temp)
            os.replace(temp, name, src_dir_fd=self.fd, dst_dir_fd=self.fd)
        except BaseException:
            self.unlink(temp)
            raise

    def read_bytes(self, name: str, limit: int) -> bytes | None:
        """The content of the regular file ``name`` (at most ``limit`` bytes, more is an
        error), ``None`` when absent; a link or anything else there is ``LinkRefused``."""
        try:
            handle = self.open_file(name)
        except FileNotFoundError:
            return None
        with handle:
            data = handle.read(limit + 1)
        if len(data) > limit:
            raise ValueError(f"{self._shown(name)} is larger than {limit} bytes")
        return data

    def unlink(self, name: str) -> None:
        """Remove the file or link ``name`` if it is there (an empty folder too)."""
        try:
            os.unlink(check_name(name), dir_fd=self.fd)
        except FileNotFoundError:
            pass
        except IsADirectoryError:
            os.rmdir(name, dir_fd=self.fd)

    @staticmethod
    def _temp_name(name: str) -> str:
        return f".{name[:200]}.{secrets.token_hex(8)}.gpudev-tmp"


def copy_tree(source: Folder, target: Folder) -> None:
    """Copy the tree under ``source`` (gpudev's own staging folder) into ``target``, added to
    what is there: folders opened or made without following links (a link where a folder
    goes is ``LinkRefused``), files and links put in place with ``Folder.replace`` /
    ``Folder.symlink`` (what was at their name is replaced, never written through). Anything
    but folders, regular files and links in ``source`` is left out."""
    with os.scandir(source.fd) as entries:
        listed = sorted(entries, key=lambda e: e.name)
    for entry in listed:
        name = entry.name
        if entry.is_symlink():
            target.symlink(os.readlink(name, dir_fd=source.fd), name)
        elif entry.is_dir(follow_symlinks=False):
            with source.folder(name) as inner, target.folder(name, create=True) as out:
                copy_tree(inner, out)
        elif entry.is_file(follow_symlinks=False):
            fd = os.open(name, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC, dir_fd=source.fd)
            with os.fdopen(fd, "rb") as handle:
                mode = os.fstat(handle.fileno()).st_mode & 0o777
                target.replace(name, iter(functools.partial(handle.read, _CHUNK), b""), mode)
