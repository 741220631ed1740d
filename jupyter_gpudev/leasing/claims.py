"""GPU claims on the engine: where exclusive use of a GPU is decided, whatever server, user,
ledger or host entry asks.

The ledger (``ledger.py``) is one file per Jupyter data folder: two servers, or two host entries
that reach one engine, each have their own. The engine is what they share, so the engine
decides. A claim is a container that is created and never started, named after the GPU
(``gpudev-gpu-<uuid>``). The engine creates at most one container of a name and refuses the
next one (409) atomically: of any number of processes claiming a GPU at once, exactly one wins.

A claim names the dev container that holds the GPU by its engine id. The dev container is
created before its claims (with the GPUs in its DeviceRequest, not started) and started only
once every claim is made, so:

- a claim whose holder no longer exists is stale at once (the holder was removed);
- a claim whose holder does not name the GPU in its label is stale (not a claim of that one);
- a claim whose holder is stopped is stale after ``grace`` seconds (``resume`` claims for a
  stopped container just before it starts it; a normal stop releases the claims itself).

A stale claim is removed by its id (never by name, so a fresh claim made meanwhile by someone
else is never removed) and the GPU claimed again. Claims are made from a tiny image of their own
(``gpudev-claim:1``, one text file, imported on first use) so that they inherit no labels from
a user's image and can run nothing.

A container is taken for a claim only when it is one that ``EngineClaims`` made (``is_claim``):
its labels alone never make it one, since a container inherits its image's labels and an image
may carry the claim labels; only a claim is ever removed as stale.

``docker container prune`` removes claims (they are never started): reconciliation makes them
again for the running dev containers that hold GPUs.
"""

from __future__ import annotations

import hashlib
import io
import logging
import re
import tarfile
import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any

import docker
import docker.errors

from ..errors import engine_errors
from ..labels import (
    L_CLAIM,
    L_CLAIM_AT,
    L_CLAIM_HOLDER,
    L_LEDGER,
    L_MANAGED,
    L_NAME,
    L_OWNER,
    STOPPED,
    labelled_gpus,
)
from .model import NoFreeGPU

#: The image claims are created from (never pulled: imported from a one-file archive).
CLAIM_IMAGE = "gpudev-claim:1"
#: Claim containers are named this plus the GPU UUID.
CLAIM_PREFIX = "gpudev-gpu-"
#: The command claims are created with: the claim image's one file (never run).
CLAIM_COMMAND = "/GPUDEV-CLAIM"

_NAME_UNSAFE = re.compile(r"[^A-Za-z0-9_.-]")
_README = b"A GPU claim of jupyter-gpudev: created, never started. See leasing/claims.py.\n"


def claim_name(uuid: str) -> str:
    """The engine name of the claim for ``uuid``: the UUID itself when the engine allows it as a
    name (GPU UUIDs are), otherwise made safe and made unique again with a hash (MIG ids)."""
    safe = _NAME_UNSAFE.sub("_", uuid)
    if safe != uuid or not uuid:
        safe = f"{safe}-{hashlib.sha256(uuid.encode()).hexdigest()[:16]}"
    return CLAIM_PREFIX + safe


@dataclass(frozen=True)
class Claim:
    """One GPU claimed by one dev container (read from a claim container's labels)."""

    uuid: str
    claim_id: str
    holder_id: str
    holder_name: str
    owner: str
    at: float

    @classmethod
    def from_labels(cls, claim_id: str, labels: Mapping[str, str]) -> Claim | None:
        """The claim these labels describe; ``None`` for a container that is not one."""
        uuid = labels.get(L_CLAIM, "")
        holder = labels.get(L_CLAIM_HOLDER, "")
        try:
            at = float(labels.get(L_CLAIM_AT, ""))
        except ValueError:
            at = 0.0
        if not uuid or not holder:
            return None
        return cls(
            uuid=uuid,
            claim_id=claim_id,
            holder_id=holder,
            holder_name=labels.get(L_NAME, ""),
            owner=labels.get(L_OWNER, ""),
            at=at,
        )


def is_claim(names: Iterable[str], command: str, labels: Mapping[str, str]) -> bool:
    """Whether a container is a claim ``EngineClaims`` made, from what the engine reports of
    it: its name (``gpudev-gpu-...``), its command (exactly the claim image's one file) and
    not a dev container (every dev container is labelled managed, ``L_MANAGED`` ``"1"``,
    whatever its image says: ``containers.create.labels``). ``names`` as the engine lists them
    (a leading ``/``)."""
    return (
        any(str(name).lstrip("/").startswith(CLAIM_PREFIX) for name in names)
        and command == CLAIM_COMMAND
        and labels.get(L_MANAGED) != "1"
    )


def _listed_claim(summary: Mapping[str, Any]) -> Claim | None:
    """The claim a container of the engine's list is (``None``: not a claim container)."""
    labels = summary.get("Labels") or {}
    if not is_claim(summary.get("Names") or (), str(summary.get("Command", "")), labels):
        return None
    return Claim.from_labels(str(summary.get("Id", "")), labels)


def _inspected_claim(attrs: Mapping[str, Any]) -> Claim | None:
    """The claim an inspected container is (``None``: not a claim container)."""
    labels = (attrs.get("Config") or {}).get("Labels") or {}
    command = " ".join(str(part) for part in (attrs.get("Path", ""), *(attrs.get("Args") or ())))
    if not is_claim((str(attrs.get("Name", "")),), command, labels):
        return None
    return Claim.from_labels(str(attrs.get("Id", "")), labels)


@dataclass(frozen=True)
class Holder:
    """What a claim's holder is now: its engine state and the GPUs its label names."""

    status: str
    gpu_uuids: tuple[str, ...]


def is_live(claim: Claim, holder: Holder | None, now: float, grace: float) -> bool:
    """Whether ``claim`` still holds its GPU (see the module's rules); ``holder`` is ``None``
    when no container has the claim's holder id."""
    if holder is None or claim.uuid not in holder.gpu_uuids:
        return False
    if holder.status in STOPPED:
        # Its time is stored wall time: one dated more than ``grace`` ahead is as stale as
        # one that old (the clock went back), not live for as long as the clock jumped.
        return abs(now - claim.at) < grace
    return True


class GPUTaken(NoFreeGPU):
    """A GPU is claimed by another dev container (a race lost, or a holder elsewhere)."""

    def __init__(self, taken: Claim) -> None:
        super().__init__(
            f"GPU {taken.uuid} is held by another dev container",
            details={"uuid": taken.uuid},
        )
        self.taken = taken


def _claim_archive() -> bytes:
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w") as archive:
        info = tarfile.TarInfo("GPUDEV-CLAIM")
        info.size = len(_README)
        info.mode = 0o444
        archive.addfile(info, io.BytesIO(_README))
    return buffer.getvalue()


class EngineClaims:
    """The GPU claims of one engine (``client``). Every call talks to the engine; calls block
    (the server runs them in worker threads). ``clock`` is the seam for time in tests."""

    def __init__(
        self,
        client: docker.DockerClient,
        *,
        grace: float = 120.0,
        ledger_id: str = "",
        log: logging.Logger | None = None,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self.client = client
        self.grace = grace
        self.ledger_id = ledger_id
        self.log = log or logging.getLogger(__name__)
        self._clock = clock
        self._image_ready = False

    # -- reading ----------------------------------------------------------------------------

    def _claims(self) -> list[Claim]:
        with engine_errors("Listing GPU claims", self.log):
            # (every dev container has the label too, empty: ``containers.create.labels``)
            summaries = self.client.api.containers(
                all=True, filters={"label": L_CLAIM, "name": CLAIM_PREFIX}
            )
        claims = []
        for summary in summaries:
            claim = _listed_claim(summary)
            if claim is not None:
                claims.append(claim)
        return claims

    def _holders(self) -> dict[str, Holder]:
        """Every dev container of the engine by id (one list call)."""
        with engine_errors("Listing dev containers", self.log):
            summaries = self.client.api.containers(all=True, filters={"label": f"{L_MANAGED}=1"})
        return {
            str(s.get("Id", "")): Holder(
                str(s.get("State", "")), labelled_gpus(dict(s.get("Labels") or {}))
            )
            for s in summaries
        }

    def _holder(self, holder_id: str) -> Holder | None:
        try:
            attrs = self.client.api.inspect_container(holder_id)
        except docker.errors.NotFound:
            return None
        labels = dict((attrs.get("Config") or {}).get("Labels") or {})
        if labels.get(L_MANAGED) != "1":
            return None
        return Holder(str((attrs.get("State") or {}).get("Status", "")), labelled_gpus(labels))

    def live(self) -> dict[str, Claim]:
        """The live claims by GPU UUID. Claims are listed before holders: a claim is made after
        its holder exists, so a holder missing from the second list is really gone."""
        claims = self._claims()
        holders = self._holders()
        now = self._clock()
        return {c.uuid: c for c in claims if is_live(c, holders.get(c.holder_id), now, self.grace)}

    # -- writing ----------------------------------------------------------------------------

    def _ensure_image(self) -> None:
        if self._image_ready:
            return
        with engine_errors("Preparing the GPU claim image", self.log):
            try:
                self.client.images.get(CLAIM_IMAGE)
            except docker.errors.ImageNotFound:
                repository, _, tag = CLAIM_IMAGE.partition(":")
                self.client.api.import_image_from_data(
                    _claim_archive(), repository=repository, tag=tag
                )
                self.client.images.get(CLAIM_IMAGE)
        self._image_ready = True

    def _create(self, uuid: str, labels: dict[str, str]) -> str:
        """Create the claim container; its id. ``APIError`` 409 when the name is taken."""
        created = self.client.api.create_container(
            CLAIM_IMAGE,
            command=[CLAIM_COMMAND],
            name=claim_name(uuid),
            labels=labels,
            network_disabled=True,
            # Never started, and its image's one file is no program: confined all the same,
            # as every container gpudev makes is.
            host_config=self.client.api.create_host_config(
                network_mode="none",
                cap_drop=["ALL"],
                security_opt=["no-new-privileges"],
                read_only=True,
            ),
        )
        return str(created["Id"])

    def _remove(self, claim_id: str) -> None:
        try:
            self.client.api.remove_container(claim_id, force=True)
        except docker.errors.NotFound:
            pass  # removed already
        except docker.errors.APIError as exc:
            if exc.status_code != 409:  # 409: being removed by someone else right now
                raise

    def _existing(self, uuid: str) -> Claim | None:
        try:
            attrs = self.client.api.inspect_container(claim_name(uuid))
        except docker.errors.NotFound:
            return None
        claim = _inspected_claim(attrs)
        if claim is None:  # a container of that name that is not a claim: never touched
            return Claim(uuid, str(attrs.get("Id", "")), "", "", "", float("inf"))
        return claim

    def _claim_one(self, uuid: str, labels: dict[str, str], holder_id: str) -> str:
        for _ in range(5):
            try:
                return self._create(uuid, labels)
            except docker.errors.APIError as exc:
                if exc.status_code != 409:
                    raise
            existing = self._existing(uuid)
            if existing is None:
                continue  # released meanwhile: try again
            if existing.holder_id == holder_id:
                return existing.claim_id  # ours already (made again after a retry)
            if not existing.holder_id or is_live(
                existing, self._holder(existing.holder_id), self._clock(), self.grace
            ):
                raise GPUTaken(existing)
            self.log.info(
                "Removing the stale claim of GPU %s (holder %s is gone or stopped)",
                uuid,
                existing.holder_id[:12],
            )
            self._remove(existing.claim_id)
        raise GPUTaken(Claim(uuid, "", "", "", "", self._clock()))

    def claim(
        self, uuids: Iterable[str], *, holder_id: str, holder_name: str, owner: str
    ) -> tuple[str, ...]:
        """Claim every GPU in ``uuids`` for the dev container ``holder_id`` (which must exist),
        all or none: ``GPUTaken`` names the first one held by another dev container, and the
        claims made before it are removed again. Returns the claim ids."""
        wanted = tuple(dict.fromkeys(uuids))
        made: list[str] = []
        labels = {
            L_CLAIM_HOLDER: holder_id,
            L_NAME: holder_name,
            L_OWNER: owner,
            L_LEDGER: self.ledger_id,
            L_CLAIM_AT: repr(self._clock()),
        }
        with engine_errors(f"Claiming GPUs for {holder_name!r}", self.log):
            self._ensure_image()
            try:
                for uuid in wanted:
                    made.append(self._claim_one(uuid, {**labels, L_CLAIM: uuid}, holder_id))
            except BaseException:
                for claim_id in made:
                    self._remove(claim_id)
                raise
        return tuple(made)

    def release(self, holder_id: str) -> tuple[str, ...]:
        """Remove every claim of the dev container ``holder_id``; the GPU UUIDs freed."""
        with engine_errors("Releasing GPU claims", self.log):
            summaries = self.client.api.containers(
                all=True, filters={"label": f"{L_CLAIM_HOLDER}={holder_id}"}
            )
            freed = []
            for summary in summaries:
                claim = _listed_claim(summary)
                if claim is None or claim.holder_id != holder_id:
                    continue
                self._remove(claim.claim_id)
                freed.append(claim.uuid)
        return tuple(freed)

    def sweep(self) -> tuple[Claim, ...]:
        """Remove the stale claims (their holder gone, or stopped for longer than ``grace``)."""
        claims = self._claims()
        holders = self._holders()
        now = self._clock()
        stale = tuple(
            c for c in claims if not is_live(c, holders.get(c.holder_id), now, self.grace)
        )
        with engine_errors("Removing stale GPU claims", self.log):
            for claim in stale:
                self._remove(claim.claim_id)
        for claim in stale:
            self.log.info("Removed the stale claim of GPU %s", claim.uuid)
        return stale

    def repair(self, running: Mapping[str, tuple[str, str, tuple[str, ...]]]) -> list[str]:
        """Make the missing claims of dev containers that hold GPUs (made by an older version,
        or pruned): ``running`` maps a holder id to (its name, owner, GPU UUIDs). Returns
        a line for each GPU that another holder claims (needs a person)."""
        if not running:
            return []
        live = self.live()
        problems: list[str] = []
        for holder_id, (name, owner, uuids) in sorted(running.items()):
            missing = [u for u in uuids if u not in live]
            for uuid in uuids:
                other = live.get(uuid)
                if other is not None and other.holder_id != holder_id:
                    problems.append(
                        f"{name} is labelled with GPU {uuid}, which {other.holder_name} claims"
                    )
            if not missing:
                continue
            try:
                self.claim(missing, holder_id=holder_id, holder_name=name, owner=owner)
            except GPUTaken as taken:
                problems.append(
                    f"{name} is labelled with GPU {taken.taken.uuid}, claimed meanwhile"
                )
            else:
                self.log.info("Claimed %s again for %s", ", ".join(missing), name)
        return problems
