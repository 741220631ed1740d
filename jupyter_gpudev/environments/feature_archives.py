"""A Dev Container Feature's archive, read as hostile input.

A feature's archive comes from a registry, a URL or the workspace: it is never unpacked on
this machine. Its members are checked (relative names without ``..``, regular files, folders
and links that stay inside it; no member under a file or a link; no devices, FIFOs or hard
links; bounded count and sizes) and kept in memory, to be copied into the generated build
context under a folder of their own (``containers/feature_build.py``).
"""

from __future__ import annotations

import hashlib
import tarfile
import zlib
from dataclasses import dataclass
from typing import IO, Literal

from ..errors import BadRequest
from ..untrusted import link_stays_inside

#: Bounds on one feature's archive.
MAX_MEMBERS = 2000
MAX_MEMBER_BYTES = 32 << 20
MAX_TOTAL_BYTES = 64 << 20


def _printable(text: str) -> bool:
    return not any(ord(c) < 0x20 or ord(c) == 0x7F for c in text)


@dataclass(frozen=True)
class Member:
    """One checked member: a relative name, its kind, mode and bytes (or a link's target)."""

    name: str
    kind: Literal["file", "dir", "symlink"]
    mode: int
    data: bytes = b""
    target: str = ""


@dataclass(frozen=True)
class Archive:
    """A feature's files, checked; ``digest``: sha256 over them (names, kinds, modes,
    contents), which the image's tag depends on."""

    members: tuple[Member, ...]
    digest: str

    def file(self, name: str) -> bytes | None:
        for member in self.members:
            if member.name == name and member.kind == "file":
                return member.data
        return None


def _member_name(name: str) -> str | None:
    if name.startswith("/") or "\\" in name or not _printable(name):
        return None
    parts = [p for p in name.split("/") if p not in ("", ".")]
    if ".." in parts:
        return None
    return "/".join(parts)


def _stays_inside(path: str, target: str) -> bool:
    return bool(target) and _printable(target) and link_stays_inside(path, target)


def read_archive(source: IO[bytes], what: str, *, compressed: bool = False) -> Archive:
    """A feature's tar archive (plain, uncompressed) read as hostile input: ``BadRequest``
    naming ``what`` and the member for an absolute name, a ``..``, a link leaving it or a
    member under a link, a hard link, a device or FIFO, more than ``MAX_MEMBERS`` members, a
    member over ``MAX_MEMBER_BYTES`` or a total over ``MAX_TOTAL_BYTES``. ``compressed``:
    gzip or plain (a tarball URL's ``.tgz``), read as it is decompressed."""
    reader = _ArchiveReader(what)
    try:
        with tarfile.open(fileobj=source, mode="r:*" if compressed else "r:") as tar:
            for count, info in enumerate(tar, start=1):
                if count > MAX_MEMBERS:
                    raise reader.refuse(f"more than {MAX_MEMBERS} members")
                reader.take(tar, info)
    except (tarfile.TarError, OSError, EOFError, zlib.error) as exc:
        raise reader.refuse(f"it is not a tar archive ({exc})") from None
    members = reader.members
    ordered = tuple(members[name] for name in sorted(members))
    hasher = hashlib.sha256()
    for member in ordered:
        head = f"{member.name}\0{member.kind}\0{member.mode:o}\0{member.target}\0"
        hasher.update(f"{head}{len(member.data)}\0".encode())
        hasher.update(member.data)
    return Archive(ordered, hasher.hexdigest())


class _ArchiveReader:
    def __init__(self, what: str) -> None:
        self.what = what
        self.members: dict[str, Member] = {}
        self.total = 0

    def refuse(self, why: str) -> BadRequest:
        return BadRequest(
            f"{self.what}: its archive is refused: {why}",
            details={"feature": self.what, "reason": why},
        )

    def take(self, tar: tarfile.TarFile, info: tarfile.TarInfo) -> None:
        name = _member_name(info.name)
        shown = info.name[:200] if _printable(info.name) else ascii(info.name[:200])
        if name is None:
            raise self.refuse(
                f"{shown!r} is an absolute name, climbs out with '..' or holds control characters"
            )
        if name == "":
            return  # the archive's own folder, ./
        parts = name.split("/")
        for depth in range(1, len(parts)):
            above = self.members.get("/".join(parts[:depth]))
            if above is not None and above.kind != "dir":
                raise self.refuse(f"{shown!r} is under a file or a link")
        before = self.members.get(name)
        if before is not None and not (info.isdir() and before.kind == "dir"):
            raise self.refuse(f"{shown!r} appears twice")
        if info.isdir():
            self.members[name] = Member(name, "dir", 0o755)
        elif info.issym():
            if not _stays_inside(name, info.linkname):
                raise self.refuse(f"the link {shown!r} points out of the feature")
            self.members[name] = Member(name, "symlink", 0o777, target=info.linkname)
        elif info.isreg():
            self.members[name] = Member(name, "file", self._mode(info), self._data(tar, info))
        elif info.islnk():
            raise self.refuse(f"{shown!r} is a hard link")
        else:
            raise self.refuse(f"{shown!r} is a device, FIFO or other special file")

    @staticmethod
    def _mode(info: tarfile.TarInfo) -> int:
        return 0o755 if info.mode & 0o111 else 0o644

    def _data(self, tar: tarfile.TarFile, info: tarfile.TarInfo) -> bytes:
        shown = ascii(info.name[:200])
        if info.size > MAX_MEMBER_BYTES:
            raise self.refuse(f"{shown} is over {MAX_MEMBER_BYTES >> 20} MiB")
        self.total += info.size
        if self.total > MAX_TOTAL_BYTES:
            raise self.refuse(f"its files are over {MAX_TOTAL_BYTES >> 20} MiB in all")
        handle = tar.extractfile(info)
        data = handle.read(info.size + 1) if handle is not None else b""
        if len(data) != info.size:
            raise self.refuse(f"{shown} is cut short")
        return data
