"""Build contexts packed from the workspace, never following a link out of them.

An environment's build context and Dockerfile were checked when it was read
(``environments/reader.py``: their real paths are under the Jupyter root directory), but the
workspace is its user's (in shared mode the service runs as root, and the user owns their
folder) and a dev container writes into it: a folder of the context swapped for a link while
the context is packed would put whatever the link names (the service's SSH keys, registry
credentials, ``/etc/shadow``) into the image. So gpudev packs every context from the workspace
itself, the way docker-py's ``utils.tar`` does, but from open folder handles
(``safefs.Folder``):

- the context folder is opened from ``/`` down without following a link (its checked path is
  a real one, as is the Jupyter root directory gpudev keeps: a link on it now is
  ``safefs.LinkRefused``); each folder inside from its parent's handle, ``O_NOFOLLOW``;
- a link inside is stored as a link, its target as written, never followed (as ``docker build``
  does: the builder resolves it inside the context);
- a file is opened without following a link or opening anything but a regular file
  (``Folder.open_file``), and stored with the size ``fstat`` gave it then;
- FIFOs, sockets and devices are left out, never opened;
- something that changes what it is while it is packed (a folder or file swapped for a link, a
  file that shrinks) fails the build (``Conflict``): it is never read through a link;
- ``.dockerignore`` applies as docker-py applies it (the Dockerfile and ``.dockerignore`` are
  always kept); a Dockerfile added to the context (one outside it, or a patched one) comes with
  a ``.dockerignore`` naming it, so that the engine leaves it out of what ``COPY`` sees.
"""

from __future__ import annotations

import functools
import grp
import io
import os
import pwd
import secrets
import stat
import tarfile
import tempfile
from pathlib import Path
from typing import IO

from docker.utils.build import PatternMatcher

from .. import safefs
from ..errors import BadRequest, Conflict, ImageError

#: The most a Dockerfile read outside its context, or a ``.dockerignore``, may weigh.
TEXT_LIMIT = 8 << 20


def read_checked(path: str | os.PathLike[str], limit: int = TEXT_LIMIT) -> bytes:
    """The regular file at the absolute ``path`` (checked earlier to hold no link: a real
    path), read without following a link: ``safefs.LinkRefused`` for one on the way or at it,
    ``ImageError`` when it is missing or larger than ``limit`` bytes."""
    folder, name = os.path.split(os.fspath(path))
    with safefs.Folder.open_checked(folder or "/") as where:
        try:
            data = where.read_bytes(name, limit)
        except ValueError:
            data = None
    if data is None:
        raise ImageError(f"{os.fspath(path)} is missing, or larger than {limit >> 20} MiB")
    return data


def read_checked_text(path: str | os.PathLike[str], limit: int = TEXT_LIMIT) -> str:
    """``read_checked`` as ``Path.read_text`` reads: UTF-8, universal newlines."""
    return read_checked(path, limit).decode().replace("\r\n", "\n").replace("\r", "\n")


def folder_context(
    path: str | os.PathLike[str], dockerfile: str | None = None
) -> tuple[IO[bytes], str]:
    """A build from the context folder ``path`` and ``dockerfile`` (relative to it, or an
    absolute path), as docker-py's ``build(path=...)`` sends it: the context tar and the
    Dockerfile's name in it. A Dockerfile outside the context is read (``read_checked``) and
    added under a name of its own."""
    name = dockerfile or "Dockerfile"
    full = os.path.normpath(os.path.join(os.fspath(path), name))
    inside = safefs.relative_inside(Path(full), Path(path))
    if inside:  # in the context: sent with it
        return pack_context(path, inside), inside
    added = f".dockerfile.{secrets.token_hex(20)}"
    text = read_checked(full).decode("utf-8", "replace")
    return pack_context(path, added, added=text), added


def pack_context(
    path: str | os.PathLike[str],
    dockerfile: str = "Dockerfile",
    *,
    added: str | None = None,
    limits: tuple[int, int] | None = None,
) -> IO[bytes]:
    """The build context folder ``path`` as a tar file, at its start (a temporary file the
    caller closes), its ``.dockerignore`` applied, ``dockerfile`` (its name in the context)
    kept; ``added``: that Dockerfile's text, put in the context over what is there (see the
    module). ``path`` is a real path (as the environment reader checked it): it is opened
    from ``/`` down, and nothing is followed from there. ``limits``: the most bytes of file
    content and entries packed (``BadRequest`` past either, before a file over it is read)."""
    with safefs.Folder.open_checked(path) as folder:
        patterns = _patterns(folder)
        extra: dict[str, bytes] = {}
        if added is not None:
            ignored = [*(patterns or [".dockerignore"]), dockerfile]
            extra = {".dockerignore": "\n".join(ignored).encode(), dockerfile: added.encode()}
        matcher = PatternMatcher([*patterns, f"!{dockerfile}"])
        archive = tempfile.TemporaryFile()  # noqa: SIM115 - the caller closes it
        try:
            with tarfile.open(fileobj=archive, mode="w") as tar:
                _Packer(tar, matcher, set(extra), limits, str(path)).pack(folder, "")
                for name, data in extra.items():
                    info = tarfile.TarInfo(name)
                    info.size, info.mode = len(data), 0o644
                    tar.addfile(info, io.BytesIO(data))
        except BaseException:
            archive.close()
            raise
    archive.seek(0)
    return archive


def _patterns(folder: safefs.Folder) -> list[str]:
    """The patterns of the context's ``.dockerignore`` (none when it has none)."""
    try:
        data = folder.read_bytes(".dockerignore", TEXT_LIMIT)
    except ValueError:
        raise BadRequest(
            f"{folder.shown}/.dockerignore is larger than {TEXT_LIMIT >> 20} MiB"
        ) from None
    if data is None:
        return []
    lines = (line.strip() for line in data.decode("utf-8", "replace").splitlines())
    return [line for line in lines if line and not line.startswith("#")]


class _Packer:
    """Walks an open context folder into ``tar`` (see the module)."""

    def __init__(
        self,
        tar: tarfile.TarFile,
        matcher: PatternMatcher,
        replaced: set[str],
        limits: tuple[int, int] | None = None,
        shown: str = "",
    ):
        self.tar = tar
        self.matcher = matcher
        #: Names the added files take (what the context has there is left out).
        self.replaced = replaced
        self.limits = limits
        self.shown = shown
        self.bytes = self.entries = 0

    def _count(self, size: int) -> None:
        """Count one entry of ``size`` bytes against ``limits`` before it is added."""
        self.bytes += size
        self.entries += 1
        if self.limits is None:
            return
        most_bytes, most_entries = self.limits
        if self.bytes > most_bytes or self.entries > most_entries:
            raise BadRequest(
                f"{self.shown} is over {most_bytes >> 20} MiB or {most_entries} entries: "
                "not packed",
                details={"path": self.shown},
            )

    def pack(self, folder: safefs.Folder, prefix: str) -> None:
        for name in sorted(os.listdir(folder.fd)):
            path = prefix + name
            # docker's stubs say a path-like; docker-py matches a ``str`` (and no ``Path``)
            excluded = self.matcher.matches(path) or path in self.replaced  # type: ignore[arg-type]
            st = folder.lstat(name)
            if st is None:  # removed meanwhile
                continue
            if stat.S_ISDIR(st.st_mode):
                if not excluded or self._reopened(path):
                    self._folder(folder, name, path, excluded)
            elif excluded:
                continue
            elif stat.S_ISLNK(st.st_mode):
                self._link(folder, name, path, st)
            elif stat.S_ISREG(st.st_mode):
                self._file(folder, name, path)
            # FIFOs, sockets and devices are left out: never opened.

    def _reopened(self, path: str) -> bool:
        """Whether an exception pattern (``!dir/file``) may bring back something under the
        excluded folder ``path`` (docker-py's rule)."""
        return any(
            pattern.exclusion and pattern.cleaned_pattern.startswith(path)
            for pattern in self.matcher.patterns
        )

    def _folder(self, folder: safefs.Folder, name: str, path: str, excluded: bool) -> None:
        try:
            inner = folder.folder(name)
        except (safefs.LinkRefused, FileNotFoundError):
            raise _changed(folder, name, "a folder") from None
        with inner:
            if not excluded:
                self._count(0)
                self.tar.addfile(_info(path, os.fstat(inner.fd)))
            self.pack(inner, f"{path}/")

    def _link(self, folder: safefs.Folder, name: str, path: str, st: os.stat_result) -> None:
        try:
            target = folder.readlink(name)
        except OSError:
            raise _changed(folder, name, "a link") from None
        self._count(0)
        self.tar.addfile(_info(path, st, target))

    def _file(self, folder: safefs.Folder, name: str, path: str) -> None:
        try:
            handle = folder.open_file(name)
        except (safefs.LinkRefused, FileNotFoundError):
            raise _changed(folder, name, "a file") from None
        with handle:
            info = _info(path, os.fstat(handle.fileno()))
            self._count(info.size)
            try:
                self.tar.addfile(info, _Exact(handle))
            except _Shrunk:
                raise _changed(folder, name, "a file") from None


class _Shrunk(Exception):
    """A file ended before the size it had when it was opened."""


class _Exact:
    """A file read in the pieces ``TarFile.addfile`` asks for (its ``fstat`` size in all):
    one that ends before is ``_Shrunk``."""

    def __init__(self, handle: IO[bytes]) -> None:
        self.handle = handle

    def read(self, size: int = -1, /) -> bytes:
        data = self.handle.read(size)
        if len(data) < size:
            raise _Shrunk
        return data


def _changed(folder: safefs.Folder, name: str, was: str) -> Conflict:
    shown = f"{folder.shown.rstrip('/')}/{name}"
    return Conflict(
        f"{shown} changed while the build context was packed (it was {was}): gpudev never "
        "follows a link out of a build context. Leave the context as it is while it builds, "
        "and try again.",
        details={"path": shown},
    )


def _info(path: str, st: os.stat_result, link: str | None = None) -> tarfile.TarInfo:
    """The header of ``path`` from its ``stat``, as ``TarFile.gettarinfo`` makes it; a link
    when ``link`` (its target) is given."""
    info = tarfile.TarInfo(path)
    info.mode = stat.S_IMODE(st.st_mode)
    info.uid, info.gid = st.st_uid, st.st_gid
    info.uname, info.gname = _user(st.st_uid), _group(st.st_gid)
    info.mtime = int(st.st_mtime)
    if link is not None:
        info.type, info.linkname = tarfile.SYMTYPE, link
    elif stat.S_ISDIR(st.st_mode):
        info.type = tarfile.DIRTYPE
    else:
        info.size = st.st_size
    return info


@functools.lru_cache(maxsize=64)
def _user(uid: int) -> str:
    try:
        return pwd.getpwuid(uid).pw_name
    except KeyError:
        return ""


@functools.lru_cache(maxsize=64)
def _group(gid: int) -> str:
    try:
        return grp.getgrgid(gid).gr_name
    except KeyError:
        return ""
