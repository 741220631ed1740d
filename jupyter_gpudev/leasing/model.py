"""Leases and GPU requests as values, and the pure decisions on them: which of a host's GPUs can
be leased, whether a request fits, which GPUs it takes. No database here (``ledger``)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from datetime import datetime, timezone
from typing import Any

from ..access import ANOTHER_USER
from ..engine import Inventory
from ..errors import BadRequest, GPUDevError


def _utc(ts: float) -> datetime:
    return datetime.fromtimestamp(ts, tz=timezone.utc)


def iso_utc(ts: float) -> str:
    """A timestamp as ISO 8601 in UTC, to the second: ``2026-11-21T16:03:09Z``."""
    return _utc(ts).isoformat(timespec="seconds").replace("+00:00", "Z")


def _short_uuid(uuid: str) -> str:
    return f"{uuid[:8]}..." if len(uuid) > 12 else uuid


@dataclass(frozen=True)
class Lease:
    """GPUs held by one container. ``released_at`` is ``None`` while the lease is active."""

    lease_id: str
    host: str
    container: str
    owner: str
    gpu_uuids: tuple[str, ...]
    created_at: float
    released_at: float | None = None

    def to_json(self) -> dict[str, Any]:
        return {
            "lease_id": self.lease_id,
            "host": self.host,
            "container": self.container,
            "owner": self.owner,
            "gpu_uuids": list(self.gpu_uuids),
            "created_at": self.created_at,
            "released_at": self.released_at,
        }

    def held_json(self) -> dict[str, Any]:
        """What anyone who may list the hosts sees of an active lease: which container (and
        user) holds which GPUs, since when (ISO 8601 UTC)."""
        return {
            "lease_id": self.lease_id,
            "container": self.container,
            "owner": self.owner,
            "gpu_uuids": list(self.gpu_uuids),
            "since": iso_utc(self.created_at),
        }


def seen_by(lease: Lease, viewer: str | None) -> Lease:
    """``lease`` as ``viewer`` may see it: another user's lease without its container or id
    (``viewer=None``: an administrator, who sees everything)."""
    if viewer is None or lease.owner == viewer:
        return lease
    return replace(lease, lease_id="", container="", owner=ANOTHER_USER)


@dataclass(frozen=True)
class LeasableGPU:
    """One unit that can be leased: a whole GPU, or one MIG instance (``parent_uuid`` set).

    ``index`` is the physical GPU's index (the parent's for a MIG instance): for display and
    ordering only, never for identity.
    """

    uuid: str
    name: str
    index: int
    memory_total_mib: int | None = None
    memory_used_mib: int | None = None
    parent_uuid: str | None = None

    @property
    def free_memory_mib(self) -> int:
        """Total minus used; an unknown total or used counts as 0."""
        return max(0, (self.memory_total_mib or 0) - (self.memory_used_mib or 0))

    def label(self) -> str:
        """How a person reads it: ``GPU 0 NVIDIA A100 (GPU-5d5b...)``."""
        return f"GPU {self.index} {self.name} ({_short_uuid(self.uuid)})"


@dataclass(frozen=True)
class GPURequest:
    """Which GPUs a container asks for: either explicit ``uuids`` or a ``count``.

    ``model`` (a case-insensitive substring of the GPU name) and ``min_memory_mib`` (of total
    memory) filter the candidates; explicit UUIDs must satisfy them too. ``GPURequest()`` asks
    for no GPU at all, which ``LeaseLedger.acquire`` refuses: CPU-only containers hold no lease.
    """

    count: int = 0
    uuids: tuple[str, ...] = ()
    min_memory_mib: int | None = None
    model: str | None = None

    def __post_init__(self) -> None:
        object.__setattr__(self, "uuids", tuple(self.uuids))
        if isinstance(self.count, bool) or not isinstance(self.count, int) or self.count < 0:
            raise BadRequest(f"The GPU count must be a whole number >= 0, not {self.count!r}")
        if self.uuids and self.count:
            raise BadRequest("Ask for GPUs either by count or by UUIDs, not both")
        if any(not isinstance(u, str) or not u.strip() for u in self.uuids):
            raise BadRequest("A GPU UUID must be a non-empty string")
        duplicates = sorted({u for u in self.uuids if self.uuids.count(u) > 1})
        if duplicates:
            raise BadRequest(f"GPU UUID {duplicates[0]} is requested more than once")
        if self.min_memory_mib is not None and (
            isinstance(self.min_memory_mib, bool)
            or not isinstance(self.min_memory_mib, int)
            or self.min_memory_mib < 0
        ):
            raise BadRequest(
                f"The minimum GPU memory must be a whole number of MiB >= 0, "
                f"not {self.min_memory_mib!r}"
            )
        if self.model is not None and (not isinstance(self.model, str) or not self.model.strip()):
            raise BadRequest("The GPU model filter must be a non-empty string")

    @property
    def wanted(self) -> int:
        """How many GPUs this request is for."""
        return len(self.uuids) or self.count

    def matches(self, unit: LeasableGPU) -> bool:
        """Whether ``unit`` passes the model and memory filters."""
        if self.model is not None and self.model.strip().lower() not in unit.name.lower():
            return False
        return self.min_memory_mib is None or (
            unit.memory_total_mib is not None and unit.memory_total_mib >= self.min_memory_mib
        )

    def describe_filter(self) -> str:
        """The filters in words (empty when there are none)."""
        parts: list[str] = []
        if self.model is not None:
            parts.append(f"model containing {self.model.strip()!r}")
        if self.min_memory_mib is not None:
            parts.append(f"at least {self.min_memory_mib} MiB")
        return " and ".join(parts)


@dataclass(frozen=True)
class GPUHolder:
    """Who holds one GPU, as told to someone who asked for it."""

    uuid: str
    lease_id: str
    container: str
    owner: str
    since: float

    def to_json(self) -> dict[str, Any]:
        return {
            "uuid": self.uuid,
            "lease_id": self.lease_id,
            "container": self.container,
            "owner": self.owner,
            "since": iso_utc(self.since),
        }


def _holder(uuid: str, lease: Lease) -> GPUHolder:
    return GPUHolder(uuid, lease.lease_id, lease.container, lease.owner, lease.created_at)


@dataclass(frozen=True)
class ReconcileConflict:
    """A container whose label claims GPUs that another active lease holds."""

    container: str
    gpu_uuids: tuple[str, ...]
    held_by: tuple[GPUHolder, ...]

    def to_json(self) -> dict[str, Any]:
        return {
            "container": self.container,
            "gpu_uuids": list(self.gpu_uuids),
            "held_by": [holder.to_json() for holder in self.held_by],
        }


@dataclass(frozen=True)
class LeaseMismatch:
    """An active lease whose GPUs differ from its container's label (left as it is)."""

    container: str
    lease_id: str
    leased: tuple[str, ...]
    labelled: tuple[str, ...]

    def to_json(self) -> dict[str, Any]:
        return {
            "container": self.container,
            "lease_id": self.lease_id,
            "leased": list(self.leased),
            "labelled": list(self.labelled),
        }


@dataclass(frozen=True)
class ReconcileReport:
    """What ``reconcile`` did on one host.

    ``freed``: leases released because their container is gone. ``releases``: leases created
    again from the labels of containers that had none. ``conflicts`` and ``mismatched``: what
    needs a person.
    """

    host: str
    freed: tuple[Lease, ...] = ()
    releases: tuple[Lease, ...] = ()
    conflicts: tuple[ReconcileConflict, ...] = ()
    mismatched: tuple[LeaseMismatch, ...] = field(default=())

    def to_json(self) -> dict[str, Any]:
        return {
            "host": self.host,
            "freed": [lease.to_json() for lease in self.freed],
            "releases": [lease.to_json() for lease in self.releases],
            "conflicts": [conflict.to_json() for conflict in self.conflicts],
            "mismatched": [mismatch.to_json() for mismatch in self.mismatched],
        }


class NoFreeGPU(GPUDevError):
    """Not enough free GPUs for a request; the message says who holds the others, since when."""

    status = 409
    exit_code = 5
    code = "no_free_gpu"


class LedgerUnavailable(GPUDevError):
    """The lease database could not be read or written (locked too long, unreadable, too new)."""

    status = 503
    exit_code = 1
    code = "lease_ledger"


def leasable_units(inventory: Inventory) -> list[LeasableGPU]:
    """What can be leased on a host: each GPU, except that a MIG GPU is its MIG instances.

    A GPU in MIG mode contributes each MIG instance (never itself); one in MIG mode without
    instances contributes nothing, since CUDA cannot use it.
    """
    units: list[LeasableGPU] = []
    for gpu in inventory.gpus:
        if not gpu.mig_enabled:
            units.append(
                LeasableGPU(
                    uuid=gpu.uuid,
                    name=gpu.name,
                    index=gpu.index,
                    memory_total_mib=gpu.memory_total_mib,
                    memory_used_mib=gpu.memory_used_mib,
                )
            )
            continue
        units.extend(
            LeasableGPU(
                uuid=mig.uuid,
                name=f"{gpu.name} MIG {mig.profile}",
                index=gpu.index,
                memory_total_mib=mig.memory_total_mib,
                parent_uuid=gpu.uuid,
            )
            for mig in gpu.mig_devices
        )
    return units


def _no_free_gpu(
    host: str,
    request: GPURequest,
    matching: Sequence[LeasableGPU],
    free: Sequence[LeasableGPU],
    held: Mapping[str, Lease],
) -> NoFreeGPU:
    wanted = request.wanted
    what = f"{wanted} GPU{'' if wanted == 1 else 's'} requested on host {host!r}"
    if request.uuids:
        what += " by UUID"
    filters = request.describe_filter()
    if filters:
        text = f"{what} with {filters}: {len(matching)} match, {len(free)} free."
    elif not matching:
        text = f"{what}, 0 free: the host has no leasable GPU."
    else:
        text = f"{what}, {len(free)} free."
    holders = [
        (unit, _holder(unit.uuid, held[unit.uuid])) for unit in matching if unit.uuid in held
    ]
    if holders:
        text += " Held: " + "; ".join(
            f"{unit.label()} by {_who(holder)} since {_utc(holder.since):%Y-%m-%d %H:%M} UTC"
            for unit, holder in holders
        )
        text += "."
    return NoFreeGPU(
        text,
        details={
            "host": host,
            "requested": wanted,
            "matching": len(matching),
            "free": len(free),
            "holders": [holder.to_json() for _, holder in holders],
        },
    )


def _who(holder: GPUHolder) -> str:
    if holder.container:
        return f"container {holder.container} for {holder.owner}"
    return holder.owner


def _check_explicit(host: str, request: GPURequest, by_uuid: Mapping[str, LeasableGPU]) -> None:
    """Explicit UUIDs must name units of this host that pass the request's filters."""
    for uuid in request.uuids:
        unit = by_uuid.get(uuid)
        if unit is None:
            raise BadRequest(
                f"There is no GPU with UUID {uuid} on host {host!r}",
                details={"host": host, "uuid": uuid},
            )
        if not request.matches(unit):
            raise BadRequest(
                f"{unit.label()} on host {host!r} does not have {request.describe_filter()}",
                details={"host": host, "uuid": uuid},
            )


def _choose(
    host: str,
    request: GPURequest,
    units: Sequence[LeasableGPU],
    held: Mapping[str, Lease],
) -> list[LeasableGPU]:
    """The units to lease, or ``NoFreeGPU``. Count requests take the most free memory first."""
    if request.uuids:
        by_uuid = {unit.uuid: unit for unit in units}
        wanted = [by_uuid[uuid] for uuid in request.uuids]
        free = [unit for unit in wanted if unit.uuid not in held]
        if len(free) < len(wanted):
            raise _no_free_gpu(host, request, wanted, free, held)
        return wanted
    matching = [unit for unit in units if request.matches(unit)]
    free = [unit for unit in matching if unit.uuid not in held]
    if len(free) < request.count:
        raise _no_free_gpu(host, request, matching, free, held)
    free.sort(key=lambda unit: (-unit.free_memory_mib, unit.index))
    return free[: request.count]


def check_fit(
    host: str, request: GPURequest, units: Sequence[LeasableGPU], held: Mapping[str, Lease]
) -> None:
    """Whether ``host`` could lease ``request`` now (for placement; ``acquire`` decides):
    ``BadRequest`` or ``NoFreeGPU`` saying why not."""
    by_uuid = {unit.uuid: unit for unit in units}
    _check_explicit(host, request, by_uuid)
    _choose(host, request, list(by_uuid.values()), held)


def would_lease(
    host: str, request: GPURequest, units: Sequence[LeasableGPU], held: Mapping[str, Lease]
) -> tuple[str, ...]:
    """The UUIDs a lease of ``request`` would take now (a dry run; ``acquire`` decides):
    ``BadRequest`` or ``NoFreeGPU`` saying why none would."""
    by_uuid = {unit.uuid: unit for unit in units}
    _check_explicit(host, request, by_uuid)
    return tuple(unit.uuid for unit in _choose(host, request, list(by_uuid.values()), held))


def _require(**names: str) -> None:
    for what, value in names.items():
        if not isinstance(value, str) or not value.strip():
            raise BadRequest(f"A lease needs a non-empty {what} name")
