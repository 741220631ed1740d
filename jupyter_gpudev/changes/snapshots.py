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
line or a pulled image can say anything). ``SnapshotRecords`` and ``user_repository`` live in
``containers/namespace.py``, beside the records of environment builds, which refuse a user's
image to every other user.
"""

from __future__ import annotations

from dataclasses import dataclass

from ..containers.namespace import LOCAL_ROOT, SnapshotRecords, user_repository
from ..engine import Reference
from ..errors import BadRequest, Conflict

__all__ = ["LOCAL_ROOT", "SnapshotRecords", "SnapshotTags", "snapshot_tags", "user_repository"]

#: The longest reference the engine takes.
_MAX_REFERENCE = 255


@dataclass(frozen=True)
class SnapshotTags:
    """A snapshot's tag on the engine (``local``) and the reference ``--push`` sends it to
    (``push``, ``None`` without ``--push``)."""

    local: str
    push: str | None = None


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
