"""A Docker container's ``docker diff`` read from its own layer on the engine's machine.

On Docker 20.10 with overlay2 the engine's diff (``GET /containers/ID/changes``) compares the
container's whole mounted tree with its image's (both walked: most of a second for a 500 MB
image, whatever the change). What changed is all in the container's overlay2 upper directory
(``GraphDriver.Data.UpperDir``): ``upper_changes`` walks that directory alone and looks each
entry up in the layers under it (``LowerDir``: the container's init layer, then the image's,
top first), and gives what the engine's diff gives, entry for entry, and more only where that
diff is naive (it compares size and time; ``docker commit`` takes the upper directory whole):

- an entry the layers below do not have: ``A``, and everything under it ``A``;
- an entry they have: ``C`` when it is not a folder (overlay copies a file up only to
  change it: its content may differ with the same size and time, as ``docker commit``, the
  native diff of this directory, has it; the engine's ``docker diff`` may use the naive rule
  and miss it, so this is the safer superset); a folder when its type, mode, owner or device
  differ; a folder with changes inside is ``C`` too;
- a whiteout (a character device 0/0): ``D`` of the entry it hides; an opaque folder
  (``trusted.overlay.opaque``: removed and made again): ``D`` of each entry it had below.

Only a server running as root on the engine's own machine, with ``CAP_SYS_ADMIN`` in the
initial user namespace (else ``trusted.*`` attributes read as absent), can read these folders;
given the engine's data root (``root=``), the driver home must be ``ROOT/overlay2``, and
every folder from ``/`` down to each layer's ``HOME/NAME`` root's alone to write; anything
else (another storage driver, a remote engine, a folder that is not there, overlay features
this reader does not know: redirected folders, metadata-only copies, names that are not UTF-8,
more entries or depth than the bounds) is ``Unreadable``, and the caller asks the engine
(``docker_changes.DockerChanges.diff`` is the one place that chooses).

Everything in the upper directory is the container's, so hostile: it is walked by folder
handles (``openat`` with ``O_NOFOLLOW``; nothing is opened by a path that a link could
redirect), never a link followed, with bounded entries, depth, path length and open handles.
The image's layers are looked up the same way.
"""

from __future__ import annotations

import contextlib
import errno
import os
import posixpath
import re
import stat
import tarfile
from collections.abc import Generator, Iterator, Mapping
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from .export import ArchiveSource

#: ``docker diff`` kinds (the engine's numbers).
MODIFIED, ADDED, DELETED = 0, 1, 2

#: The most entries read (upper entries and, for opaque folders, the names below them).
MAX_ENTRIES = 200_000
#: The deepest folder walked (``/`` is 0).
MAX_DEPTH = 128
#: The longest path reported, in bytes (Linux's ``PATH_MAX``).
MAX_PATH = 4096
#: The most layers under a container (overlay2 stacks at most 125, plus the init layer).
MAX_LAYERS = 128
#: The most folder handles held at once (the upper folders and the layers' under them).
MAX_OPEN = 768

_OPEN_DIR = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC
_OPAQUE = "trusted.overlay.opaque"
#: Overlay features whose meaning this reader does not follow: the engine is asked instead.
_UNKNOWN_XATTRS = ("trusted.overlay.redirect", "trusted.overlay.metacopy")
_LAYER_DIR = re.compile(r"^[0-9a-zA-Z]{1,128}(-init)?\Z")


class Unreadable(Exception):
    """This reader cannot give the container's changes (why, in words); the engine's diff can."""


#: ``CAP_SYS_ADMIN``'s bit in a capability set.
_CAP_SYS_ADMIN = 21
#: The initial user namespace's ``uid_map``: every id, unmapped.
_INITIAL_UID_MAP = ["0", "0", "4294967295"]


def _proc_self(name: str) -> str:
    try:
        with open(f"/proc/self/{name}", encoding="ascii", errors="replace") as file:
            return file.read(65536)
    except OSError as exc:
        raise Unreadable(f"/proc/self/{name}: {exc.strerror}") from exc


def check_privileges() -> None:
    """``Unreadable`` unless this process is root with ``CAP_SYS_ADMIN`` in the initial user
    namespace: without it ``trusted.overlay.*`` attributes read as absent (an opaque folder
    would look merged, a redirect or a metadata-only copy go unseen)."""
    if os.geteuid() != 0:
        raise Unreadable("the server is not root: the overlay2 attributes cannot be read")
    effective = [
        line.split(":", 1)[1].strip()
        for line in _proc_self("status").splitlines()
        if line.startswith("CapEff:")
    ]
    try:
        admin = len(effective) == 1 and bool(int(effective[0], 16) >> _CAP_SYS_ADMIN & 1)
    except ValueError:
        admin = False
    if not admin:
        raise Unreadable("the server has no CAP_SYS_ADMIN: the overlay2 attributes cannot be read")
    lines = _proc_self("uid_map").splitlines()
    if len(lines) != 1 or lines[0].split() != _INITIAL_UID_MAP:
        raise Unreadable("the server is in a user namespace: the overlay2 attributes are hidden")


@dataclass(frozen=True)
class Layers:
    """A container's overlay2 folders, as its inspect names them: the upper directory and
    the layers under it, top first (the init layer, then the image's)."""

    upper: str
    lower: tuple[str, ...]
    #: Whether the driver home was checked to be the engine's (``of``'s ``root``): each
    #: layer is then opened from ``/`` through folders only root may change.
    trusted: bool = False

    @classmethod
    def of(cls, attrs: Mapping[str, Any], root: str | None = None) -> Layers:
        """The folders of a container's inspect (``attrs``), checked for shape: overlay2, the
        upper directory ``HOME/ID/diff`` with ``HOME/ID-init/diff`` first under it, every
        layer ``HOME/NAME/diff`` in the same driver home, that home ``ROOT/overlay2`` where
        the engine's data root ``root`` is given; else ``Unreadable``."""
        driver = attrs.get("GraphDriver")
        if not isinstance(driver, Mapping) or driver.get("Name") != "overlay2":
            raise Unreadable("the storage driver is not overlay2")
        data = driver.get("Data")
        if not isinstance(data, Mapping):
            raise Unreadable("the engine names no overlay2 folders")
        upper, lower = data.get("UpperDir"), data.get("LowerDir")
        if not isinstance(upper, str) or not isinstance(lower, str) or not lower:
            raise Unreadable("the engine names no upper or lower directory")
        lowers = tuple(lower.split(":"))
        if len(lowers) > MAX_LAYERS:
            raise Unreadable(f"more than {MAX_LAYERS} layers")
        home, name = _layer_dir(upper)
        if name.endswith("-init"):
            raise Unreadable("the upper directory is an init layer")
        for index, path in enumerate(lowers):
            where, layer = _layer_dir(path)
            if where != home:
                raise Unreadable("the layers are not in one driver home")
            if (index == 0) != (layer == f"{name}-init"):
                raise Unreadable("the first layer under the container is not its init layer")
        if root is not None and (
            not root.startswith("/")
            or posixpath.normpath(root) != root
            or home != posixpath.join(root, "overlay2")
        ):
            raise Unreadable("the driver home is not overlay2 in the engine's data root")
        return cls(upper, lowers, root is not None)

    def opened(self, path: str) -> contextlib.AbstractContextManager[int]:
        """One of its layer folders' handle (``_opened``)."""
        return _opened(path, trusted=self.trusted)


def _layer_dir(path: str) -> tuple[str, str]:
    """``(HOME, NAME)`` of ``HOME/NAME/diff``, an absolute normal path."""
    if not path.startswith("/") or posixpath.normpath(path) != path or "\0" in path:
        raise Unreadable("a layer folder is not an absolute normal path")
    folder, last = posixpath.split(path)
    home, name = posixpath.split(folder)
    if last != "diff" or not _LAYER_DIR.match(name) or home in ("", "/"):
        raise Unreadable("a layer folder is not HOME/NAME/diff")
    return home, name


def upper_changes(attrs: Mapping[str, Any], *, root: str | None = None) -> list[dict[str, Any]]:
    """The container's changes as the engine's ``docker diff`` gives them (``Path``,
    ``Kind``; a superset where its diff is naive: see the module's docstring), read from its
    overlay2 upper directory; ``Unreadable`` (why) where this reader cannot. ``root``: the
    engine's data root (``Layers.of``). Sorted by path."""
    layers = Layers.of(attrs, root)
    check_privileges()
    with ExitStack() as stack:
        upper = stack.enter_context(layers.opened(layers.upper))
        lower = [stack.enter_context(layers.opened(path)) for path in layers.lower]
        walk = _Walk()
        walk.handles = 1 + len(lower)
        changes = walk.folder(upper, "/", lower, 0, opaque=False)
    return sorted(({"Path": p, "Kind": k} for p, k in changes), key=lambda c: str(c["Path"]))


@contextmanager
def _opened(path: str, *, trusted: bool = False) -> Iterator[int]:
    """A layer folder's handle: ``_open_layer``, closed at the end."""
    handle = _open_layer(path, trusted=trusted)
    try:
        yield handle
    finally:
        os.close(handle)


def _open_layer(path: str, *, trusted: bool = False) -> int:
    """The layer folder ``HOME/NAME/diff``'s handle, its last part not followed; ``trusted``:
    ``HOME/NAME`` opened from ``/`` by ``_open_trusted``. ``Unreadable`` where it cannot be."""
    try:
        if not trusted:
            return os.open(path, _OPEN_DIR)
        folder = _open_trusted(posixpath.dirname(path))
        try:
            return os.open(posixpath.basename(path), _OPEN_DIR, dir_fd=folder)
        finally:
            os.close(folder)
    except OSError as exc:
        raise Unreadable(f"{path}: {exc.strerror}") from exc


def _open_trusted(path: str) -> int:
    """The folder ``path`` (absolute, normal) opened from ``/`` one part at a time, no link
    followed, each part owned by root and writable by neither its group nor others (else
    someone else could swap what is under it); else ``Unreadable``."""
    handle = os.open("/", _OPEN_DIR)
    try:
        _check_trusted(handle, "/")
        for part in [p for p in path.split("/") if p]:
            try:
                inner = os.open(part, _OPEN_DIR, dir_fd=handle)
            except OSError as exc:
                if exc.errno in (errno.ELOOP, errno.ENOTDIR):
                    raise Unreadable(f"{path}: {part} is a link or not a folder") from exc
                raise
            os.close(handle)
            handle = inner
            _check_trusted(handle, part)
    except BaseException:
        os.close(handle)
        raise
    return handle


def _check_trusted(handle: int, part: str) -> None:
    info = os.fstat(handle)
    if info.st_uid != 0:
        raise Unreadable(f"{part} on the way to the driver home is not owned by root")
    if info.st_mode & 0o022:
        raise Unreadable(f"{part} on the way to the driver home is group or other writable")


def _whiteout(info: os.stat_result) -> bool:
    return stat.S_ISCHR(info.st_mode) and info.st_rdev == 0


def _same_time(old: int, new: int) -> bool:
    """The engine's ``sameFsTimeSpec``: same seconds, and same nanoseconds unless either has
    none (a file system or archive that keeps seconds only)."""
    seconds_old, nanos_old = divmod(old, 1_000_000_000)
    seconds_new, nanos_new = divmod(new, 1_000_000_000)
    return seconds_old == seconds_new and (nanos_old == nanos_new or not nanos_old or not nanos_new)


def _different(old: os.stat_result, new: os.stat_result) -> bool:
    """The engine's ``statDifferent`` (its naive diff), used here for an upper folder only:
    mode (type included), owner, group, device; size and modification time unless the old
    mode has the folder bit (folders, and as the engine's test has it, sockets and block
    devices too)."""
    if (old.st_mode, old.st_uid, old.st_gid, old.st_rdev) != (
        new.st_mode,
        new.st_uid,
        new.st_gid,
        new.st_rdev,
    ):
        return True
    if old.st_mode & stat.S_IFDIR == stat.S_IFDIR:
        return False
    return old.st_size != new.st_size or not _same_time(old.st_mtime_ns, new.st_mtime_ns)


def _xattr(folder: int, name: str, attribute: str) -> bytes | None:
    """An extended attribute of ``name`` in the open ``folder``, its link not followed
    (through ``/proc/self/fd``: the folder by its handle, only the last part named)."""
    try:
        return os.getxattr(f"/proc/self/fd/{folder}/{name}", attribute, follow_symlinks=False)
    except OSError as exc:
        if exc.errno in (errno.ENODATA, errno.ENOTSUP, errno.EOPNOTSUPP):
            return None
        raise Unreadable(f"reading {attribute}: {exc.strerror}") from exc


def _attributes(folder: int, name: str) -> list[str]:
    try:
        return os.listxattr(f"/proc/self/fd/{folder}/{name}", follow_symlinks=False)
    except OSError as exc:
        if exc.errno in (errno.ENOTSUP, errno.EOPNOTSUPP):
            return []
        raise Unreadable(f"listing attributes: {exc.strerror}") from exc


class _Walk:
    """One walk of an upper directory, with its bounds."""

    def __init__(self) -> None:
        self.entries = 0
        self.handles = 0

    def _count(self, more: int = 1) -> None:
        self.entries += more
        if self.entries > MAX_ENTRIES:
            raise Unreadable(f"more than {MAX_ENTRIES} entries")

    def _list(self, folder: int) -> list[tuple[str, os.stat_result]]:
        """The entries of an open folder with their ``lstat``, by name."""
        found: list[tuple[str, os.stat_result]] = []
        try:
            with os.scandir(folder) as entries:
                for entry in entries:
                    self._count()
                    _check_name(entry.name)
                    found.append((entry.name, entry.stat(follow_symlinks=False)))
        except OSError as exc:
            raise Unreadable(f"listing a folder: {exc.strerror}") from exc
        return sorted(found)

    def _open(self, folder: int, name: str) -> int | None:
        """``name`` in ``folder`` opened as a folder, ``None`` where it is not one (missing,
        a file, a link, a whiteout)."""
        if self.handles >= MAX_OPEN:
            raise Unreadable(f"more than {MAX_OPEN} folders open")
        try:
            handle = os.open(name, _OPEN_DIR, dir_fd=folder)
        except OSError as exc:
            if exc.errno in (errno.ENOENT, errno.ENOTDIR, errno.ELOOP):
                return None
            raise Unreadable(f"opening a folder: {exc.strerror}") from exc
        self.handles += 1
        return handle

    def _close(self, handles: list[int]) -> None:
        for handle in handles:
            os.close(handle)
            self.handles -= 1

    @staticmethod
    def _old(lower: list[int], name: str) -> tuple[int, os.stat_result] | None:
        """Where ``name`` is in the layers below (the first that has it) and what it is there;
        ``None`` where they do not have it (none has it, or a whiteout hides it)."""
        for folder in lower:
            try:
                info = os.stat(name, dir_fd=folder, follow_symlinks=False)
            except FileNotFoundError:
                continue
            except OSError as exc:
                raise Unreadable(f"looking a path up in a layer: {exc.strerror}") from exc
            return None if _whiteout(info) else (folder, info)
        return None

    def _below(self, lower: list[int], name: str) -> list[int]:
        """The folder ``name`` in each layer below, top first, down to the first that is not
        a folder (it hides the rest) or is opaque (the last that counts)."""
        found: list[int] = []
        try:
            for folder in lower:
                try:
                    info = os.stat(name, dir_fd=folder, follow_symlinks=False)
                except FileNotFoundError:
                    continue
                if not stat.S_ISDIR(info.st_mode):
                    break
                handle = self._open(folder, name)
                if handle is None:
                    break
                found.append(handle)
                if _xattr(folder, name, _OPAQUE) == b"y":
                    break
        except OSError as exc:
            self._close(found)
            raise Unreadable(f"looking a folder up in a layer: {exc.strerror}") from exc
        except BaseException:
            self._close(found)
            raise
        return found

    def _old_names(self, lower: list[int]) -> set[str]:
        """The names a folder has in the layers below (``lower``: its folder in each)."""
        names: set[str] = set()
        hidden: set[str] = set()
        for folder in lower:
            for name, info in self._list(folder):
                if name in names or name in hidden:
                    continue
                (hidden if _whiteout(info) else names).add(name)
        return names

    def folder(
        self, upper: int, path: str, lower: list[int], depth: int, *, opaque: bool
    ) -> list[tuple[str, int]]:
        """The changes under the upper folder ``upper`` (at ``path``), its folder in each
        layer below being ``lower`` (empty: it is new there, or was not a folder)."""
        if depth > MAX_DEPTH:
            raise Unreadable(f"folders deeper than {MAX_DEPTH}")
        changes: list[tuple[str, int]] = []
        present: set[str] = set()
        for name, info in self._list(upper):
            present.add(name)  # a whiteout too: its deletion is said once, here
            child = f"{path.rstrip('/')}/{name}"
            if len(child.encode()) > MAX_PATH:
                raise Unreadable(f"a path longer than {MAX_PATH} bytes")
            attributes = _attributes(upper, name)
            if any(a in attributes for a in _UNKNOWN_XATTRS):
                raise Unreadable("a redirected folder or a metadata-only copy")
            if _whiteout(info):
                if self._old(lower, name) is not None:
                    changes.append((child, DELETED))
                continue
            old = self._old(lower, name)
            # Not a folder, and below too: overlay copied it up to change it (its content,
            # its metadata or its capabilities), whatever its size and time now.
            changed = old is None or not stat.S_ISDIR(info.st_mode) or _different(old[1], info)
            if changed:
                changes.append((child, ADDED if old is None else MODIFIED))
            if not stat.S_ISDIR(info.st_mode):
                continue
            inner = self._inside(upper, name, child, lower, old=old, depth=depth)
            if inner and not changed:
                changes.append((child, MODIFIED))  # a folder with changes inside
            changes.extend(inner)
        if opaque:
            gone = sorted(self._old_names(lower) - present)
            changes.extend((f"{path.rstrip('/')}/{name}", DELETED) for name in gone)
        return changes

    def _inside(
        self,
        upper: int,
        name: str,
        path: str,
        lower: list[int],
        *,
        old: tuple[int, os.stat_result] | None,
        depth: int,
    ) -> list[tuple[str, int]]:
        handle = self._open(upper, name)
        if handle is None:
            raise Unreadable("a folder of the upper directory changed while it was read")
        below: list[int] = []
        try:
            if old is not None and stat.S_ISDIR(old[1].st_mode):
                below = self._below(lower, name)
            opaque = _xattr(upper, name, _OPAQUE) == b"y"
            return self.folder(handle, path, below, depth + 1, opaque=opaque)
        finally:
            self._close([handle, *below])


def _check_name(name: str) -> None:
    """A name as the engine's diff can report it: UTF-8 (the engine's JSON would replace
    other bytes), not ``.``/``..``, no ``/`` or NUL (the kernel gives none)."""
    if name in ("", ".", "..") or "/" in name or "\0" in name:
        raise Unreadable("a name that is not one folder entry")
    try:
        name.encode("utf-8")
    except UnicodeEncodeError:
        raise Unreadable("a name that is not UTF-8") from None


#: How much of a file one chunk of its archive holds.
_CHUNK = 1 << 20


class LayerFiles:
    """A container's files as archives (``export.ArchiveSource``) read from its upper
    directory where the whole of a path is there: a regular file or a link the container made
    or changed (overlay2 copies a file whole into the upper directory before its first change;
    a metadata-only copy goes to the engine). Everything else (a folder, whose entries the
    layers below may hold; a path the upper directory does not have, or reaches through a
    link) is asked of ``fallback``, the engine's archive API.

    The path is opened one part at a time from the upper directory's handle, no link followed;
    the file by an ``O_PATH`` handle, checked to be a regular file, then reopened through that
    handle, so a file swapped for a device or a FIFO meanwhile is never opened."""

    def __init__(
        self, attrs: Mapping[str, Any], fallback: ArchiveSource, *, root: str | None = None
    ) -> None:
        self.layers = Layers.of(attrs, root)
        check_privileges()
        os.close(_open_layer(self.layers.upper, trusted=self.layers.trusted))
        self.fallback = fallback
        self.name = fallback.name

    def get(self, path: str) -> tuple[Iterator[bytes], dict[str, Any]] | None:
        found = self._archive(path)
        return found if found is not None else self.fallback.get(path)

    def _archive(self, path: str) -> tuple[Iterator[bytes], dict[str, Any]] | None:
        parts = path.split("/")
        if (
            not path.startswith("/")
            or len(path.encode()) > MAX_PATH
            or len(parts) > MAX_DEPTH + 1
            or any(p in ("", ".", "..") for p in parts[1:])
        ):
            return None
        try:
            folder = _open_layer(self.layers.upper, trusted=self.layers.trusted)
        except Unreadable:
            return None
        try:
            for part in parts[1:-1]:
                try:
                    inner = os.open(part, _OPEN_DIR, dir_fd=folder)
                except OSError:
                    return None  # not in the upper directory, or under a link: the engine's
                os.close(folder)
                folder = inner
            return _entry(folder, parts[-1])
        finally:
            os.close(folder)


def _entry(folder: int, name: str) -> tuple[Iterator[bytes], dict[str, Any]] | None:
    """The archive of the regular file or link ``name`` in the open upper ``folder``;
    ``None`` for anything else."""
    try:
        handle = os.open(name, os.O_PATH | os.O_NOFOLLOW | os.O_CLOEXEC, dir_fd=folder)
    except OSError:
        return None
    try:
        info = os.fstat(handle)
        if stat.S_ISLNK(info.st_mode):
            return _link(folder, name, info)
        if not stat.S_ISREG(info.st_mode) or any(
            a in _attributes(folder, name) for a in _UNKNOWN_XATTRS
        ):
            return None
        content = os.open(
            f"/proc/self/fd/{handle}", os.O_RDONLY | os.O_NONBLOCK | os.O_NOCTTY | os.O_CLOEXEC
        )
    except (OSError, Unreadable):
        return None
    finally:
        os.close(handle)
    try:
        now = os.fstat(content)
        same = (now.st_dev, now.st_ino) == (info.st_dev, info.st_ino)
        header = _header(name, now, tarfile.REGTYPE, now.st_size, "") if same else b""
    except BaseException:
        os.close(content)
        raise
    if not same or not stat.S_ISREG(now.st_mode):
        os.close(content)
        return None
    archive = _FileArchive(content, header, now)
    return archive, {"name": name, "size": now.st_size, "mode": now.st_mode & 0o7777}


def _link(
    folder: int, name: str, info: os.stat_result
) -> tuple[Iterator[bytes], dict[str, Any]] | None:
    target = os.readlink(name, dir_fd=folder)
    if os.stat(name, dir_fd=folder, follow_symlinks=False).st_ino != info.st_ino:
        return None  # replaced meanwhile
    header = _header(name, info, tarfile.SYMTYPE, 0, target)
    return iter([header, bytes(2 * tarfile.BLOCKSIZE)]), {"name": name, "size": 0}


def _header(name: str, info: os.stat_result, kind: bytes, size: int, target: str) -> bytes:
    member = tarfile.TarInfo(name)
    member.type, member.size, member.linkname = kind, size, target
    member.mode, member.uid, member.gid = info.st_mode & 0o7777, info.st_uid, info.st_gid
    member.mtime = int(info.st_mtime)
    return member.tobuf(tarfile.PAX_FORMAT, "utf-8", "surrogateescape")


class _FileArchive:
    """The archive of one regular file, streamed from its open handle (closed at the end, on
    ``close`` or when dropped), of the size it had when opened."""

    def __init__(self, handle: int, header: bytes, info: os.stat_result) -> None:
        self._handle: int | None = handle
        self._parts = _chunks(handle, header, info.st_size)

    def __iter__(self) -> Iterator[bytes]:
        return self

    def __next__(self) -> bytes:
        try:
            return next(self._parts)
        except StopIteration:
            self.close()
            raise

    def close(self) -> None:
        self._parts.close()
        if self._handle is not None:
            os.close(self._handle)
            self._handle = None

    def __del__(self) -> None:
        self.close()


def _chunks(handle: int, header: bytes, size: int) -> Generator[bytes, None, None]:
    """The header, then the file's ``size`` bytes: a file that shrank or cannot be read
    meanwhile is a broken archive (``tarfile.ReadError``), as the engine's would be cut."""
    yield header
    left = size
    while left > 0:
        try:
            chunk = os.read(handle, min(_CHUNK, left))
        except OSError as exc:
            raise tarfile.ReadError(f"reading the file: {exc.strerror}") from exc
        if not chunk:
            raise tarfile.ReadError("the file shrank while it was read")
        left -= len(chunk)
        yield chunk
    yield bytes(-size % tarfile.BLOCKSIZE + 2 * tarfile.BLOCKSIZE)


class LayerFolders:
    """What a folder is in a container now (``export.ArchiveSource`` of folders only, as
    ``layers.read_folders`` reads them: an archive of the folder's own entry, mode, owner and
    time), read from its upper directory and the layers under it as overlay merges them: the
    first layer having the path decides, a whiteout or anything but a folder hides the rest,
    an opaque folder the layers under it. ``None`` where it is not a folder (not there, not a
    folder, hidden by a whiteout); ``Unreadable`` where it cannot be read (the caller asks the
    engine instead)."""

    def __init__(self, attrs: Mapping[str, Any], name: str, *, root: str | None = None) -> None:
        self.layers = Layers.of(attrs, root)
        check_privileges()
        self.name = name

    def get(self, path: str) -> tuple[Iterator[bytes], dict[str, Any]] | None:
        parts = path.split("/")[1:]
        if not path.startswith("/") or len(parts) > MAX_DEPTH or "" in parts or ".." in parts:
            return None
        walk = _Walk()
        with ExitStack() as stack:
            roots = [self.layers.upper, *self.layers.lower]
            current = [stack.enter_context(self.layers.opened(p)) for p in roots]
            try:
                for part in parts:
                    below = walk._below(current, part)
                    stack.callback(walk._close, below)
                    if not below:
                        return None
                    if any(a in os.listxattr(below[0]) for a in _UNKNOWN_XATTRS):
                        raise Unreadable("a redirected folder or a metadata-only copy")
                    current = below
                info = os.fstat(current[0])
            except OSError as exc:
                raise Unreadable(f"reading a folder: {exc.strerror}") from exc
        header = _header(parts[-1] if parts else "/", info, tarfile.DIRTYPE, 0, "")
        return iter([header, bytes(2 * tarfile.BLOCKSIZE)]), {"name": parts[-1]}
