"""Files out of a dev container, through the engine's archive API only: archives read as hostile
input (duplicate members, ``../`` and absolute names, devices, FIFOs, links leaving the tree and
oversized files refused and reported), extracted relative to a folder handle without following
links, one archive per parent folder where that reads less."""

from __future__ import annotations

import contextlib
import hashlib
import itertools
import posixpath
import tarfile
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Protocol, runtime_checkable

import docker.errors

from .. import safefs
from ..errors import EngineError, engine_errors
from ..untrusted import link_stays_inside
from . import classify, packages
from .dockerfile import is_source_path

if TYPE_CHECKING:
    from docker.models.containers import Container


@runtime_checkable
class ArchiveSource(Protocol):
    """Where a container's files are read from, as tar archives (a Docker container: the
    engine's archive API; a pod: ``changes/podfiles.py``)."""

    #: The container's name, for messages.
    name: str

    def get(self, path: str) -> tuple[Iterator[bytes], dict[str, Any]] | None:
        """An archive of ``path`` (its top entry named as the path's last part) and what is
        known of the path (``size``, may be empty); ``None`` when it does not exist."""
        ...


class EngineArchives:
    """A Docker container's files through the engine's archive API (running or stopped):
    the engine reads them, no program of the container runs."""

    def __init__(self, container: Container) -> None:
        if container.client is None:
            raise EngineError(f"No engine client for {container.name}")
        self.container = container
        self.name = str(container.name)
        self.api = container.client.api

    def get(self, path: str) -> tuple[Iterator[bytes], dict[str, Any]] | None:
        with engine_errors(f"Copying {path} out of {self.name}"):
            try:
                chunks, stat = self.api.get_archive(str(self.container.id), path, chunk_size=_CHUNK)
            except docker.errors.NotFound:
                return None
        return chunks, stat if isinstance(stat, dict) else {}


def archives_of(source: Container | ArchiveSource) -> ArchiveSource:
    """``source`` as an ``ArchiveSource`` (a Docker container through its engine)."""
    return source if isinstance(source, ArchiveSource) else EngineArchives(source)


@dataclass
class Exported:
    """What copying kept files out of a container found: the paths whose content looks like
    a credential (not copied), the ones not copied and why, and the symbolic links not made
    in the build context (path -> target: the target is absolute or leaves the tree; the
    Dockerfile makes them with ``ln``)."""

    secrets: set[str] = field(default_factory=set)
    skipped: dict[str, str] = field(default_factory=dict)
    links: dict[str, str] = field(default_factory=dict)
    #: What each path read is (``digests`` on): ``sha256:HEX`` of a file's content,
    #: ``link TARGET``, ``folder``; what ``verify`` compares a rebuilt image's with.
    digests: dict[str, str] = field(default_factory=dict)


class _Exporter:
    """Reads kept files of a container as archives (``ArchiveSource``) and puts them into
    a staging ``safefs.Folder`` (``None``: only checks their content for credentials).

    The archives come from the engine, but their content is the container's, so none of it
    is trusted: a member counts only when its (normalised) name is a path asked for, once (a
    path listed twice is dropped, and what was staged for it removed); only regular files,
    folders and symbolic links are taken (others are reported); a file over the size limit is
    reported, not read; files are streamed, never held whole; a symbolic link is made in the
    staging folder only when its target is relative and stays inside the container's tree
    (resolved lexically from the link's folder), otherwise it is returned for an ``ln`` line.
    Every write is relative to the staging folder's handle and follows no link."""

    def __init__(
        self,
        container: Container | ArchiveSource,
        stage: safefs.Folder | None,
        limit: int,
        *,
        digests: bool = False,
    ) -> None:
        self.digests = digests
        self.source = archives_of(container)
        self.stage = stage
        self.limit = limit
        self.done: set[str] = set()
        self.result = Exported()
        self._folders: dict[str, safefs.Folder] = {}

    def close(self) -> None:
        for folder in self._folders.values():
            folder.close()
        self._folders.clear()

    def run(self, paths: list[str], diff: list[dict[str, Any]]) -> None:
        groups, alone = _batches(paths, diff)
        for top, members in groups.items():
            alone.extend(self._batch(top, members))
        for path in sorted(set(alone)):
            if path not in self.done:
                self._single(path)

    def _get(self, path: str) -> tuple[Iterator[bytes], dict[str, Any]] | None:
        return self.source.get(path)

    def _batch(self, top: str, members: set[str]) -> list[str]:
        """The kept paths under the added folder ``top`` from its one archive; returns the
        ones still to fetch alone (hard links, a stream cut short past the waste limit)."""
        got = self._get(top)
        if got is None:
            return sorted(members)
        chunks, _ = got
        try:
            with tarfile.open(fileobj=packages.ChunkStream(chunks), mode="r|") as archive:
                self.take_members(archive, posixpath.dirname(top), members)
        except tarfile.TarError:
            pass  # what was not taken is fetched alone
        finally:
            _finish(chunks)
        return sorted(p for p in members if p not in self.done)

    def take_members(self, archive: tarfile.TarFile, parent: str, members: set[str]) -> None:
        """Take the members of ``archive`` (of a folder in ``parent``) whose names are paths
        in ``members``; the rest is read past, up to ``BATCH_WASTE_LIMIT`` bytes. Reading ends
        once every one was taken (a credential check reads only the head of a large file: the
        rest of it is never read)."""
        waste = 0
        for member in archive:
            if members <= self.done:
                break
            name = _member_name(member.name)
            path = posixpath.join(parent, name) if name else None
            if path is None or path not in members or member.islnk():
                waste += max(member.size, 0) if member.isfile() else 0
                if waste > BATCH_WASTE_LIMIT:
                    break
                continue
            self._take(path, member, archive)

    def _single(self, path: str) -> None:
        got = self._get(path)
        if got is None:
            self._skip(path, "gone from the container since its changes were read")
            return
        chunks, stat = got
        try:
            size = int(stat.get("size", 0))
            if size > self.limit:
                self.done.add(path)
                self._skip(path, _over_limit(size, self.limit))
                return
            with tarfile.open(fileobj=packages.ChunkStream(chunks), mode="r|") as archive:
                first = archive.next()
                if first is None or _member_name(first.name) != posixpath.basename(path):
                    self._skip(path, "the engine's archive of it is not the file asked for")
                else:
                    self._take(path, first, archive)
        except (tarfile.TarError, ValueError) as exc:
            self._skip(path, f"its archive cannot be read ({exc})")
        finally:
            _finish(chunks)

    def _skip(self, path: str, why: str) -> None:
        self.result.skipped[path] = f"{why}: not copied"

    def _take(self, path: str, member: tarfile.TarInfo, archive: tarfile.TarFile) -> None:
        if path in self.done:
            self._undo(path)
            self._skip(path, "listed twice in the container's archive")
            return
        self.done.add(path)
        try:
            if member.isfile():
                self._file(path, member, archive)
            elif member.issym():
                self._link(path, member.linkname)
            elif member.isdir():
                if self.digests:
                    self.result.digests[path] = "folder"
                if self.stage is not None:
                    folder, name = self._place(path)
                    folder.folder(name, create=True).close()
            else:
                kind = _KINDS.get(member.type, "of an unsupported type")
                self._skip(path, f"{kind} (a commit copies regular files, folders and links)")
        except (safefs.LinkRefused, ValueError, FileExistsError) as exc:
            self._skip(path, f"it cannot be put into the build context ({exc})")

    def _file(self, path: str, member: tarfile.TarInfo, archive: tarfile.TarFile) -> None:
        if member.size > self.limit:
            self._skip(path, _over_limit(member.size, self.limit))
            return
        extracted = archive.extractfile(member)
        if extracted is None:
            self._skip(path, "its content is missing from the archive")
            return
        head = extracted.read(SCAN_BYTES)
        if classify.looks_secret_content(head):
            self.result.secrets.add(path)
            return
        if self.stage is None and not self.digests:
            return
        digest = hashlib.sha256()

        def chunks() -> Iterator[bytes]:
            for chunk in itertools.chain([head], iter(lambda: extracted.read(_CHUNK), b"")):
                digest.update(chunk)
                yield chunk

        if self.stage is None:
            for _ in chunks():
                pass
        else:
            folder, name = self._place(path)
            folder.write_new(name, chunks(), member.mode & 0o777)
        if self.digests:
            self.result.digests[path] = f"sha256:{digest.hexdigest()}"

    def _link(self, path: str, target: str) -> None:
        if not target or not _printable(target) or not _printable(path):
            self._skip(path, "a symbolic link with control characters in its name or target")
            return
        if self.digests:
            self.result.digests[path] = f"link {target}"
        if link_stays_inside(path, target):
            if self.stage is not None:
                folder, name = self._place(path)
                folder.symlink(target, name)
        else:
            self.result.links[path] = target

    def _place(self, path: str) -> tuple[safefs.Folder, str]:
        """The staging folder (opened once, no link followed) and name of a kept path."""
        if self.stage is None:
            raise ValueError("nothing is staged")
        relative = ("sources" if is_source_path(path) else "files") + path
        parent, _, name = relative.rpartition("/")
        folder = self._folders.get(parent)
        if folder is None:
            folder = self._folders[parent] = self.stage.folder(parent, create=True)
        return folder, safefs.check_name(name)

    def _undo(self, path: str) -> None:
        self.result.secrets.discard(path)
        self.result.links.pop(path, None)
        if self.stage is not None:
            with contextlib.suppress(OSError, ValueError, safefs.LinkRefused):
                folder, name = self._place(path)
                folder.unlink(name)


#: The largest file a commit copies out of a container: a larger one is reported, not copied
#: (``ChangeCapture.file_size_limit``).
FILE_SIZE_LIMIT = 512 << 20


#: How much a folder's archive may hold besides the kept files before gpudev stops reading
#: it and fetches the rest of them one by one.
BATCH_WASTE_LIMIT = 32 << 20


#: How much of a file is checked for credentials (``changes.looks_secret_content`` reads that).
SCAN_BYTES = 1_000_000


_CHUNK = 1 << 20


_KINDS = {
    tarfile.FIFOTYPE: "a FIFO (named pipe)",
    tarfile.CHRTYPE: "a character device",
    tarfile.BLKTYPE: "a block device",
    tarfile.LNKTYPE: "a hard link",
}


def read_digests(
    container: Container | ArchiveSource, paths: list[str], diff: list[dict[str, Any]], limit: int
) -> Exported:
    """What ``paths`` are in ``container`` (``Exported.digests``), read through the engine's
    archive API, nothing written; ``diff`` guides the batching (see ``_batches``)."""
    exporter = _Exporter(container, None, limit, digests=True)
    exporter.run(paths, diff)
    return exporter.result


def digest_differences(container: Mapping[str, str], rebuilt: Mapping[str, str]) -> list[str]:
    """Each kept path whose content (or link target, or kind) differs between the container
    and the rebuilt image, one sentence each."""
    out = []
    for path, was in sorted(container.items()):
        now = rebuilt.get(path)
        if now is None:
            out.append(f"file {path}: in the container, missing from the rebuild")
        elif now != was:
            what = "its content" if was.startswith("sha256:") else "what it is"
            out.append(f"file {path}: {what} differs between the container and the rebuild")
    return out


def _over_limit(size: int, limit: int) -> str:
    return f"{size} bytes, over the limit of {limit} bytes for a copied file"


def _member_name(name: str) -> str | None:
    """An archive member's name, relative and normalised, or ``None`` when it is absolute or
    climbs with ``..`` (nothing from the engine looks like that; a crafted archive may)."""
    if name.startswith("/"):
        return None
    parts = [p for p in name.split("/") if p not in ("", ".")]
    if not parts or ".." in parts:
        return None
    return "/".join(parts)


def _printable(text: str) -> bool:
    return not any(ord(c) < 0x20 or ord(c) == 0x7F for c in text)


def _ancestors(path: str) -> list[str]:
    """``/a/b/c`` -> ``["/a", "/a/b"]`` (outermost first)."""
    parts = path.strip("/").split("/")[:-1]
    return ["/" + "/".join(parts[: i + 1]) for i in range(len(parts))]


def _batches(paths: list[str], diff: list[dict[str, Any]]) -> tuple[dict[str, set[str]], list[str]]:
    """Kept paths grouped by the outermost folder ``docker diff`` reports as added (kind 1)
    that holds at least two of them and whose entries are mostly kept ones (its one archive
    is then mostly wanted); the others, alone."""
    added = {str(d["Path"]) for d in diff if int(d["Kind"]) == 1}
    entries: dict[str, int] = {}
    kept: dict[str, int] = {}
    for item in diff:
        for folder in _ancestors(str(item["Path"])):
            if folder in added:
                entries[folder] = entries.get(folder, 0) + 1
    for path in paths:
        for folder in _ancestors(path):
            if folder in added:
                kept[folder] = kept.get(folder, 0) + 1
    groups: dict[str, set[str]] = {}
    alone: list[str] = []
    for path in paths:
        top = next(
            (
                f
                for f in _ancestors(path)
                if kept.get(f, 0) >= 2 and 2 * kept[f] >= entries.get(f, 0)
            ),
            None,
        )
        if top is None:
            alone.append(path)
        else:
            groups.setdefault(top, set()).add(path)
    return groups, alone


def _finish(chunks: Iterator[bytes], budget: int = 1 << 20) -> None:
    """Read what is left of an archive stream (its end blocks) so the engine connection is
    reused; past ``budget`` bytes it is dropped instead."""
    for chunk in chunks:
        budget -= len(chunk)
        if budget < 0:
            break
    close = getattr(chunks, "close", None)
    if close is not None:
        close()
