"""A Dev Container Feature's archive, read as hostile input.

A feature's archive comes from a registry, a URL or the workspace: it is never unpacked on
this machine. Its members are checked (relative names without ``..``, regular files, folders
and links that stay inside it; no member under a file or a link; no devices, FIFOs or hard
links; bounded count and sizes) and kept in memory, to be copied into the generated build
context under a folder of their own (``containers/feature_build.py``).
"""

from __future__ import annotations

import hashlib
import io
import tarfile
import zlib
from collections import deque
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


#: How many links one resolution may pass through (as the kernel's limit).
MAX_LINK_HOPS = 40


def _resolves_inside(members: dict[str, Member], name: str, target: str) -> bool:
    """Whether the link ``name`` -> ``target``, resolved through the archive's own links
    (a chain of links each inside when read alone may lead out: ``c -> .`` then
    ``z -> c/c/../..``), stays inside the feature."""
    stack = [p for p in name.split("/")[:-1] if p]
    queue = deque(target.split("/"))
    hops = 0
    while queue:
        part = queue.popleft()
        if part in ("", "."):
            continue
        if part == "..":
            if not stack:
                return False
            stack.pop()
            continue
        stack.append(part)
        member = members.get("/".join(stack))
        if member is not None and member.kind == "symlink":
            hops += 1
            if hops > MAX_LINK_HOPS or member.target.startswith("/"):
                return False
            stack.pop()
            queue.extendleft(reversed(member.target.split("/")))
    return True


#: What a compressed archive (a tarball URL's) may grow to as it is decompressed: its files'
#: bound and room for the tar headers.
MAX_DECOMPRESSED_BYTES = MAX_TOTAL_BYTES + (8 << 20)


def _decompressed(source: IO[bytes], what: str) -> IO[bytes]:
    """A gzip archive decompressed here, bounded (tarfile would read a header of any size it
    declares); a plain one as it is. Other compressions are refused."""
    data = source.read(MAX_DECOMPRESSED_BYTES + 1)
    if not data.startswith(b"\x1f\x8b"):
        if data.startswith((b"BZh", b"\xfd7zXZ")):
            raise _ArchiveReader(what).refuse("only gzip compression is read")
        return io.BytesIO(data)
    inflate = zlib.decompressobj(16 + zlib.MAX_WBITS)
    plain = inflate.decompress(data, MAX_DECOMPRESSED_BYTES + 1)
    if len(plain) > MAX_DECOMPRESSED_BYTES or inflate.unconsumed_tail:
        raise _ArchiveReader(what).refuse(
            f"it decompresses to over {MAX_DECOMPRESSED_BYTES >> 20} MiB"
        )
    return io.BytesIO(plain)


def read_archive(source: IO[bytes], what: str, *, compressed: bool = False) -> Archive:
    """A feature's tar archive (plain, uncompressed) read as hostile input: ``BadRequest``
    naming ``what`` and the member for an absolute name, a ``..``, a link leaving it or a
    member under a link, a hard link, a device or FIFO, more than ``MAX_MEMBERS`` members, a
    member over ``MAX_MEMBER_BYTES`` or a total over ``MAX_TOTAL_BYTES``. ``compressed``:
    gzip or plain (a tarball URL's ``.tgz``), read as it is decompressed."""
    reader = _ArchiveReader(what)
    try:
        if compressed:
            source = _decompressed(source, what)
        with tarfile.open(fileobj=source, mode="r:") as tar:
            for count, info in enumerate(tar, start=1):
                if count > MAX_MEMBERS:
                    raise reader.refuse(f"more than {MAX_MEMBERS} members")
                reader.take(tar, info)
    except (tarfile.TarError, OSError, EOFError, zlib.error) as exc:
        raise reader.refuse(f"it is not a tar archive ({exc})") from None
    members = reader.members
    # No member under a file or a link, whatever order the archive lists them in (a member
    # listed before the link above it would be written through that link).
    for name in members:
        parts = name.split("/")
        for depth in range(1, len(parts)):
            above = members.get("/".join(parts[:depth]))
            if above is not None and above.kind != "dir":
                raise reader.refuse(f"{name[:200]!a} is under a file or a link")
        member = members[name]
        if member.kind == "symlink" and not _resolves_inside(members, name, member.target):
            raise reader.refuse(f"the link {name[:200]!a} leads out of the feature")
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
