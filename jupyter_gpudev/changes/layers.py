"""A layer that removes paths from an image, written by gpudev itself: nothing of the image
runs. A snapshot leaves gpudev's own files and the injected driver files out with it.

The layer holds a whiteout (``.wh.NAME``, the image format's deletion, which the engine's
layer store honours when it loads an image) for each path, under the image's own folders,
repeated as the image has them (owner, mode, time: a folder in a layer hides the one below).
The folders are read by the engine from a container of the image that never starts
(``helpers.inert``). A path under something that is not a folder in the image (a link, a
file, nothing) is not at that place in it: it gets no whiteout, and that folder no entry.
Paths are the engine's diff's, written by a container's root: one naming a whiteout
(``.wh.``) is never written into the layer.
"""

from __future__ import annotations

import hashlib
import io
import posixpath
import tarfile
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING

from ..errors import BadRequest
from .export import ArchiveSource, EngineArchives, _finish
from .packages import ChunkStream

if TYPE_CHECKING:
    from docker.models.containers import Container

#: The most paths one layer removes, and the most folders read for it.
MAX_REMOVED = 10_000
MAX_FOLDERS = 2_000
_WHITEOUT = ".wh."


@dataclass(frozen=True)
class Folder:
    """What a layer repeats of a folder of the image."""

    mode: int
    uid: int
    gid: int
    mtime: float


@dataclass(frozen=True)
class RemovalLayer:
    """An uncompressed layer (a tar) and its diff id (``sha256:`` of it), removing ``removed``
    (what the image has there, whatever it is)."""

    data: bytes
    diff_id: str
    removed: tuple[str, ...]


def targets(paths: Iterable[str]) -> list[str]:
    """The paths to remove: absolute, normal (no ``.``, ``..`` or doubled slash), not the
    root, no part naming a whiteout, and none inside another one; sorted. ``BadRequest``
    past ``MAX_REMOVED``."""
    chosen: set[str] = set()
    for path in sorted(set(paths), key=lambda p: (p.count("/"), p)):  # folders first
        if (
            not path.startswith("/")
            or path == "/"
            or path.startswith("//")
            or posixpath.normpath(path) != path
            or any(part.startswith(_WHITEOUT) for part in path.split("/"))
        ):
            continue
        if chosen.intersection(folders_of([path])):
            continue  # removed with its folder
        chosen.add(path)
    if len(chosen) > MAX_REMOVED:
        raise BadRequest(
            f"{len(chosen)} files and folders would be left out of the snapshot (more than "
            f"{MAX_REMOVED}): NVIDIA driver files (libcuda.so*, libnvidia-*.so*, ...) that the "
            "container made itself count too; remove them and commit again"
        )
    return sorted(chosen)


def folders_of(paths: Iterable[str]) -> list[str]:
    """Every folder above ``paths`` but the root, parents first."""
    found: set[str] = set()
    for path in paths:
        parent = posixpath.dirname(path)
        while parent != "/" and parent not in found:
            found.add(parent)
            parent = posixpath.dirname(parent)
    return sorted(found, key=lambda p: (p.count("/"), p))


def read_folders(source: ArchiveSource, folders: list[str]) -> dict[str, Folder | None]:
    """What ``folders`` (parents first) are in ``source``: the first entry of each one's
    archive (the folder itself; the rest is never read); ``None`` for one that is not a
    folder there, and for every one below it (not read). ``BadRequest`` past
    ``MAX_FOLDERS``."""
    if len(folders) > MAX_FOLDERS:
        raise BadRequest(
            f"The files left out of the snapshot are in {len(folders)} folders (more than "
            f"{MAX_FOLDERS}): NVIDIA driver files (libcuda.so*, libnvidia-*.so*, ...) that the "
            "container made itself count too; remove them and commit again"
        )
    found: dict[str, Folder | None] = {}
    for folder in folders:
        if found.get(posixpath.dirname(folder), True) is None:
            found[folder] = None
            continue
        found[folder] = _folder(source, folder)
    return found


def _folder(source: ArchiveSource, path: str) -> Folder | None:
    got = source.get(path)
    if got is None:
        return None
    chunks, _ = got
    try:
        with tarfile.open(fileobj=ChunkStream(chunks), mode="r|") as archive:
            first = archive.next()
    except (tarfile.TarError, ValueError):
        return None
    finally:
        _finish(chunks, 0)
    if first is None or not first.isdir() or first.name.rstrip("/") != posixpath.basename(path):
        return None
    return Folder(first.mode & 0o7777, first.uid, first.gid, float(first.mtime))


def write_layer(paths: list[str], folders: Mapping[str, Folder | None]) -> RemovalLayer | None:
    """The layer removing ``paths`` (``targets``') whose folders are all in ``folders``
    (``read_folders``'); ``None`` when none is."""
    buffer = io.BytesIO()
    written: set[str] = set()
    removed: list[str] = []
    with tarfile.open(fileobj=buffer, mode="w", format=tarfile.PAX_FORMAT) as archive:
        for path in paths:
            above = folders_of([path])
            if any(folders.get(f) is None for f in above):
                continue  # not at this place in the image
            for folder in above:
                if folder not in written:
                    written.add(folder)
                    archive.addfile(_folder_entry(folder, folders[folder]))
            name = posixpath.join(posixpath.dirname(path), _WHITEOUT + posixpath.basename(path))
            archive.addfile(tarfile.TarInfo(name.lstrip("/")))
            removed.append(path)
    if not removed:
        return None
    data = buffer.getvalue()
    return RemovalLayer(data, "sha256:" + hashlib.sha256(data).hexdigest(), tuple(removed))


def _folder_entry(path: str, folder: Folder | None) -> tarfile.TarInfo:
    assert folder is not None  # noqa: S101 - checked by the caller
    info = tarfile.TarInfo(path.lstrip("/"))
    info.type = tarfile.DIRTYPE
    info.mode, info.uid, info.gid, info.mtime = folder.mode, folder.uid, folder.gid, folder.mtime
    return info


def removal_layer(container: Container, paths: Iterable[str]) -> RemovalLayer | None:
    """The layer removing ``paths`` from the image of ``container`` (one that never starts:
    its folders are read through the engine's archive API); ``None`` when none is there."""
    chosen = targets(paths)
    if not chosen:
        return None
    source = EngineArchives(container)
    return write_layer(chosen, read_folders(source, folders_of(chosen)))
