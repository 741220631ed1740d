"""A pod's changes without ``docker diff``: two file listings compared.

A cluster has no ``docker diff`` of a pod. The change set is made by listing the files of the
pod and of a throwaway pod of its image the same way, and comparing them here into the
``docker diff`` shape the rest of ``jupyter_gpudev.changes`` reads (``{"Path", "Kind"}``; kind
0 changed, 1 added, 2 deleted): the package probe, the classification and the Dockerfile
renderer stay the same.

The listing is ``find`` run by exec as the pod's (non-root) user, one record per entry, every
field ended by a NUL (``LISTING_ARGV``): NUL is the one byte no path can hold, so names with
spaces, newlines or invalid UTF-8 are read exactly. What comes out of the pod is hostile input:
records are bounded, checked field by field, and a record that does not parse is reported and
skipped, never trusted.
"""

from __future__ import annotations

import posixpath
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

#: ``find`` from the root without crossing file systems (mounts are not the pod's changes):
#: type, size, modification time, mode, path and link target, each ended by a NUL.
LISTING_ARGV = ("find", "/", "-xdev", "-printf", r"%y\0%s\0%T@\0%m\0%p\0%l\0")
FIELDS = 6
#: Entries a listing may have (a bigger one is cut, and the comparison says so).
MAX_ENTRIES = 2_000_000
MAX_PATH = 4096
#: Paths the kubelet or the runtime writes, never the user's change.
RUNTIME_PATHS = (
    "/proc",
    "/sys",
    "/dev",
    "/run/secrets",
    "/etc/hostname",
    "/etc/hosts",
    "/etc/resolv.conf",
)
_KINDS = {"f": "file", "d": "folder", "l": "link"}
_NUMBER_RE = re.compile(r"^[0-9]{1,20}(\.[0-9]{1,10})?\Z")
_MODE_RE = re.compile(r"^[0-7]{1,4}\Z")

CHANGED, ADDED, DELETED = 0, 1, 2


@dataclass(frozen=True)
class Entry:
    """One entry of a listing: ``kind`` is ``file``, ``folder``, ``link`` or ``other``."""

    kind: str
    size: int
    mtime: float
    mode: int
    target: str = ""


@dataclass
class Listing:
    entries: dict[str, Entry] = field(default_factory=dict)
    problems: list[str] = field(default_factory=list)


def parse_listing(data: bytes) -> Listing:
    """The entries of ``LISTING_ARGV``'s output. A record with a bad field is skipped and
    reported (at most 20 reports); a path that is not UTF-8 is reported, not guessed."""
    listing = Listing()
    fields = data.split(b"\0")
    if fields and fields[-1] == b"":
        fields.pop()
    if len(fields) % FIELDS:
        listing.problems.append("the listing ends in the middle of a record: its end is left out")
    skipped = 0
    for start in range(0, len(fields) - FIELDS + 1, FIELDS):
        if len(listing.entries) >= MAX_ENTRIES:
            listing.problems.append(f"only the first {MAX_ENTRIES} entries were compared")
            break
        record = fields[start : start + FIELDS]
        entry = _entry(record)
        if entry is None:
            skipped += 1
            if skipped <= 20:
                listing.problems.append(f"a listing record could not be read: {record[4][:80]!r}")
            continue
        path, item = entry
        listing.entries[path] = item
    return listing


def _entry(record: list[bytes]) -> tuple[str, Entry] | None:
    try:
        kind, size, mtime, mode, raw_path, target = (f.decode("utf-8") for f in record)
    except UnicodeDecodeError:
        return None
    if (
        len(kind) != 1
        or not _NUMBER_RE.match(size)
        or "." in size
        or not _NUMBER_RE.match(mtime)
        or not _MODE_RE.match(mode)
        or not raw_path.startswith("/")
        or len(raw_path) > MAX_PATH
        or len(target) > MAX_PATH
    ):
        return None
    parts = raw_path.split("/")[1:]
    if raw_path != "/" and any(p in ("", ".", "..") for p in parts):
        return None  # "/a/../b", "//a", "/a/": no listing of find makes them
    return raw_path, Entry(
        kind=_KINDS.get(kind, "other"),
        size=int(size),
        mtime=float(mtime),
        mode=int(mode, 8),
        target=target if kind == "l" else "",
    )


def _under(path: str, roots: Iterable[str]) -> bool:
    return any(path == root or path.startswith(root.rstrip("/") + "/") for root in roots)


def _differs(before: Entry, now: Entry) -> bool:
    if before.kind != now.kind or before.mode != now.mode:
        return True
    if now.kind == "link":
        return before.target != now.target
    if now.kind == "folder":
        return before.mtime != now.mtime  # an entry was added, removed or renamed in it
    return before.size != now.size or before.mtime != now.mtime


def compare_listings(
    image: Mapping[str, Entry], pod: Mapping[str, Entry], skip: Iterable[str] = ()
) -> list[dict[str, Any]]:
    """The pod's changes against its image, as ``docker diff`` reports them: each added or
    changed path, and each deleted path whose folder was not deleted too (``docker diff``
    reports a deleted folder, not what was in it). ``skip``: mount points and other paths
    that are not the pod's (``RUNTIME_PATHS`` always are)."""
    skipped = (*RUNTIME_PATHS, *skip)
    changes: list[dict[str, Any]] = []
    for path in sorted(pod):
        if path == "/" or _under(path, skipped):
            continue
        before = image.get(path)
        if before is None:
            changes.append({"Path": path, "Kind": ADDED})
        elif _differs(before, pod[path]):
            changes.append({"Path": path, "Kind": CHANGED})
    deleted = sorted(p for p in image if p not in pod and p != "/" and not _under(p, skipped))
    gone: set[str] = set()
    for path in deleted:
        if posixpath.dirname(path) in gone:
            gone.add(path)
            continue
        gone.add(path)
        changes.append({"Path": path, "Kind": DELETED})
    return sorted(changes, key=lambda change: str(change["Path"]))
