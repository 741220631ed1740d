"""Where a snapshot is tagged and pushed, and which images gpudev made as whose snapshot.

``commit --snapshot TAG [--push]`` names a tag; ``snapshot_tags`` says which tag the engine gets
and which reference is pushed:

- **single-user mode**: the engine's tag is TAG itself, and ``--push`` pushes it (the engine is
  the user's own);
- **shared mode**: the engine is everyone's, so a user's snapshot is tagged under their own
  repository, ``localhost/gpudev/USER/`` followed by TAG without its registry: ``myenv:v1`` is
  ``localhost/gpudev/alice/myenv:v1``, ``127.0.0.1:5000/team/x:1`` is
  ``localhost/gpudev/alice/team/x:1``. TAG itself is only where ``--push`` sends that image;
  the engine keeps no tag of that name. A TAG already under ``localhost/gpudev/`` is taken as
  it is when it is under the user's own repository (it cannot be pushed: it names no registry
  of theirs), and refused under another user's. USER is the user's name when it is a valid
  repository component (lower case, ``alice``, ``gpudev-bob``), else its lower-case letters and
  digits with a short hash of the whole name (``Alice@example.com`` is
  ``alice-example-com-`` and 8 hexadecimal characters).

In either mode an image the engine already has under the snapshot's tag (or, in shared mode,
under the push target's) is replaced only when ``SnapshotRecords`` says gpudev made it as a
snapshot of this user (in single-user mode: as a snapshot, the state folder being the user's):
never the base image, an environment's image, a pulled image or another user's snapshot. What
an image is comes from gpudev's own state, keyed by image id, never from its labels (a LABEL
line or a pulled image can say anything).
"""

from __future__ import annotations

import hashlib
import json
import re
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path
from typing import TYPE_CHECKING

from ..engine import Reference
from ..errors import BadRequest, ConfigError, Conflict
from .baselines import atomic_write

if TYPE_CHECKING:
    import os

#: Every user's snapshots are tagged under ``LOCAL_ROOT/USER/`` in shared mode.
LOCAL_ROOT = "localhost/gpudev"
#: A repository path component as the distribution spec has it.
_COMPONENT_RE = re.compile(r"[a-z0-9]+(?:(?:[._]|__|-+)[a-z0-9]+)*\Z")
_IMAGE_ID_RE = re.compile(r"sha256:([0-9a-f]{64})\Z")
#: The longest reference the engine takes.
_MAX_REFERENCE = 255


@dataclass(frozen=True)
class SnapshotTags:
    """A snapshot's tag on the engine (``local``) and the reference ``--push`` sends it to
    (``push``, ``None`` without ``--push``)."""

    local: str
    push: str | None = None


def user_repository(user: str) -> str:
    """``localhost/gpudev/USER``: the repository of ``user``'s snapshots in shared mode."""
    if _COMPONENT_RE.match(user):
        return f"{LOCAL_ROOT}/{user}"
    readable = re.sub(r"[^a-z0-9]+", "-", user.lower()).strip("-") or "user"
    return f"{LOCAL_ROOT}/{readable}-{hashlib.sha256(user.encode()).hexdigest()[:8]}"


def snapshot_tags(tag: str, user: str | None, *, push: bool) -> SnapshotTags:
    """Where the snapshot ``tag`` goes (see the module's docstring): ``user`` ``None`` in
    single-user mode, else the user in shared mode. ``BadRequest`` for a tag that is no image
    reference, ``Conflict`` for one under another user's repository."""
    reference = Reference.parse(tag)
    if user is None:
        return SnapshotTags(tag, tag if push else None)
    own = user_repository(user)
    path = reference.repository
    if path.startswith(f"{reference.registry}/"):
        path = path[len(reference.registry) + 1 :]
    if reference.registry == "localhost" and (path == "gpudev" or path.startswith("gpudev/")):
        if not reference.repository.startswith(f"{own}/"):
            raise Conflict(
                f"{tag} is not yours: {LOCAL_ROOT}/ holds each user's snapshots, and yours are "
                f"tagged under {own}/ (give NAME:TAG, e.g. myenv:v1)",
                details={"reference": tag},
            )
        if push:
            raise BadRequest(
                f"{tag} is your snapshot's tag on the GPU host, not a registry's: push to "
                "REGISTRY/NAME:TAG (e.g. 127.0.0.1:5000/team/env:v1)",
                details={"reference": tag},
            )
        return SnapshotTags(reference.name)
    local = f"{own}/{path}:{reference.tag}"
    if len(local) > _MAX_REFERENCE:
        raise BadRequest(
            f"{tag!r} is too long for a snapshot: under {own}/ its tag would be longer than "
            f"{_MAX_REFERENCE} characters",
            details={"reference": tag},
        )
    return SnapshotTags(local, tag if push else None)


class SnapshotRecords:
    """The images gpudev made as snapshots, and for whom: one file per image id in
    ``<state_dir>/snapshots``, each written atomically (the server and the CLI share the
    folder). Image ids are digests of the image's configuration, so no other image has the id
    of one recorded here."""

    def __init__(self, state_dir: str | os.PathLike[str]) -> None:
        self.folder = Path(state_dir) / "snapshots"

    def _path(self, image_id: str) -> Path | None:
        found = _IMAGE_ID_RE.match(image_id)
        return self.folder / f"{found.group(1)}.json" if found else None

    def record(self, image_id: str, user: str, tag: str) -> None:
        """Keep that gpudev made ``image_id`` as ``user``'s snapshot, tagged ``tag``."""
        path = self._path(image_id)
        if path is None:
            raise ValueError(f"Not an image id: {image_id!r}")
        made = datetime.now(timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")
        try:
            self.folder.mkdir(mode=0o700, parents=True, exist_ok=True)
            atomic_write(path, json.dumps({"user": user, "tag": tag, "made": made}))
        except OSError as exc:
            raise ConfigError(
                f"Recording the snapshot {tag} in c.DevContainers.state_dir ({self.folder}) "
                f"failed: {exc.strerror}"
            ) from exc

    def owner(self, image_id: str) -> str | None:
        """The user gpudev made ``image_id`` for as a snapshot; ``None`` if it did not."""
        path = self._path(image_id)
        if path is None:
            return None
        try:
            data = json.loads(path.read_text())
        except (OSError, ValueError):
            return None
        user = data.get("user") if isinstance(data, dict) else None
        return user if isinstance(user, str) else None
