"""GPU leases: exclusive, persistent claims of GPUs (by UUID) on a host, one dev container each.

The ledger is one SQLite file shared by the server and the CLI, possibly in several processes at
once. Every operation opens its own short-lived connection; every write is one ``BEGIN
IMMEDIATE`` transaction, so reading who holds what, choosing GPUs and recording the lease happen
under one write lock and two requests can never be given the same GPU. Partial unique indexes
back that up: a GPU UUID, and a container name, appear in at most one active lease per host.

A lease is released exactly once. Released leases stay in the file (with ``released_at``) as
history; only active leases hold GPUs. ``reconcile`` repairs the ledger from what the engine
says (the gpudev labels of the containers that still exist) after a crash or a restart.

Nothing here touches the file at import time or in the constructor: the schema is created on
first use.
"""

from __future__ import annotations

import contextlib
import logging
import sqlite3
import threading
import time
import uuid as uuidlib
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field, replace
from datetime import datetime, timezone
from pathlib import Path
from typing import Any, Literal

from ..engine import Inventory
from ..errors import BadRequest, Conflict, GPUDevError

#: The schema this module writes (``PRAGMA user_version``).
SCHEMA_VERSION = 2

_SCHEMA = (
    """
    CREATE TABLE IF NOT EXISTS leases (
        lease_id    TEXT PRIMARY KEY,
        host        TEXT NOT NULL,
        container   TEXT NOT NULL,
        owner       TEXT NOT NULL,
        created_at  REAL NOT NULL,
        released_at REAL
    )
    """,
    """
    CREATE UNIQUE INDEX IF NOT EXISTS leases_active_container
        ON leases (host, container) WHERE released_at IS NULL
    """,
    """
    CREATE TABLE IF NOT EXISTS lease_gpus (
        lease_id TEXT NOT NULL REFERENCES leases (lease_id),
        host     TEXT NOT NULL,
        uuid     TEXT NOT NULL,
        position INTEGER NOT NULL,
        active   INTEGER NOT NULL DEFAULT 1,
        PRIMARY KEY (lease_id, uuid)
    )
    """,
    """
    CREATE UNIQUE INDEX IF NOT EXISTS lease_gpus_active_uuid
        ON lease_gpus (host, uuid) WHERE active = 1
    """,
    # Schema 2: shared dev containers the user pinned (kept running after their last kernel).
    """
    CREATE TABLE IF NOT EXISTS pins (
        host      TEXT NOT NULL,
        container TEXT NOT NULL,
        pinned_at REAL NOT NULL,
        PRIMARY KEY (host, container)
    )
    """,
)


def _utc(ts: float) -> datetime:
    return datetime.fromtimestamp(ts, tz=timezone.utc)


def iso_utc(ts: float) -> str:
    """A timestamp as ISO 8601 in UTC, to the second: ``2026-11-21T16:03:09Z``."""
    return _utc(ts).isoformat(timespec="seconds").replace("+00:00", "Z")


def _short_uuid(uuid: str) -> str:
    return f"{uuid[:8]}..." if len(uuid) > 12 else uuid


# --------------------------------------------------------------------------------------------
# Values
# --------------------------------------------------------------------------------------------


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


# --------------------------------------------------------------------------------------------
# Errors
# --------------------------------------------------------------------------------------------


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


# --------------------------------------------------------------------------------------------
# Policy
# --------------------------------------------------------------------------------------------


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
            f"{unit.label()} by container {holder.container} for {holder.owner} "
            f"since {_utc(holder.since):%Y-%m-%d %H:%M} UTC"
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


def _require(**names: str) -> None:
    for what, value in names.items():
        if not isinstance(value, str) or not value.strip():
            raise BadRequest(f"A lease needs a non-empty {what} name")


# --------------------------------------------------------------------------------------------
# The ledger
# --------------------------------------------------------------------------------------------

_Row = tuple[str, str, str, str, float, float | None]


def _from_row(row: _Row, gpu_uuids: tuple[str, ...]) -> Lease:
    lease_id, host, container, owner, created_at, released_at = row
    return Lease(lease_id, host, container, owner, gpu_uuids, created_at, released_at)


class LeaseLedger:
    """The leases of every host, persisted in one SQLite file (WAL mode).

    Safe to use from many threads and processes at once: each call opens its own connection.
    Calls block (on disk, and on another writer for up to ``busy_timeout`` seconds): the server
    runs them in worker threads. ``clock`` is the seam for timestamps in tests.

    Commits survive a crash of the process; with ``synchronous = NORMAL`` the last ones may be
    lost to a power cut, which ``reconcile`` repairs from the container labels.
    """

    def __init__(
        self,
        path: Path,
        *,
        busy_timeout: float = 10.0,
        log: logging.Logger | None = None,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self.path = Path(path)
        self.busy_timeout = busy_timeout
        self.log = log or logging.getLogger(__name__)
        self._clock = clock
        self._schema_ready = False
        self._schema_lock = threading.Lock()

    # -- connections ------------------------------------------------------------------------

    def _open(self) -> sqlite3.Connection:
        conn = sqlite3.connect(self.path, timeout=self.busy_timeout, isolation_level=None)
        try:
            conn.execute("PRAGMA foreign_keys = ON")
            conn.execute("PRAGMA synchronous = NORMAL")
        except BaseException:
            conn.close()
            raise
        return conn

    def _use_wal(self, conn: sqlite3.Connection) -> None:
        """Switch the file to WAL (once per file; it stays so).

        The switch can fail at once with "database is locked" while another connection is
        making the same switch, without waiting on the busy timeout: retry until it passes.
        """
        deadline = time.monotonic() + self.busy_timeout
        delay = 0.001
        while True:
            try:
                conn.execute("PRAGMA journal_mode = WAL")
            except sqlite3.OperationalError:
                if time.monotonic() >= deadline:
                    raise
                time.sleep(delay)
                delay = min(delay * 2, 0.05)
            else:
                return

    def _check_version(self, conn: sqlite3.Connection) -> int:
        version = int(conn.execute("PRAGMA user_version").fetchone()[0])
        if version > SCHEMA_VERSION:
            raise LedgerUnavailable(
                f"The lease database {self.path} was written by a newer jupyter-gpudev "
                f"(schema {version}); upgrade jupyter-gpudev here too",
                details={"path": str(self.path), "schema": version},
            )
        return version

    def _ensure_schema(self) -> None:
        """Create the folder (mode 0o700), switch to WAL and create the tables, once."""
        with self._schema_lock:
            if self._schema_ready:
                return
            if not self.path.parent.exists():
                self.path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
            with contextlib.closing(self._open()) as conn:
                mode = str(conn.execute("PRAGMA journal_mode").fetchone()[0]).lower()
                if mode != "wal" or self._check_version(conn) != SCHEMA_VERSION:
                    self._use_wal(conn)
                    conn.execute("BEGIN IMMEDIATE")
                    try:
                        self._check_version(conn)
                        for statement in _SCHEMA:
                            conn.execute(statement)
                        conn.execute(f"PRAGMA user_version = {SCHEMA_VERSION}")
                    except BaseException:
                        conn.execute("ROLLBACK")
                        raise
                    conn.execute("COMMIT")
            self._schema_ready = True

    @contextlib.contextmanager
    def _connection(self) -> Iterator[sqlite3.Connection]:
        try:
            self._ensure_schema()
            with contextlib.closing(self._open()) as conn:
                yield conn
        except (sqlite3.Error, OSError) as exc:  # OSError: its folder cannot be made
            self.log.exception("Lease database %s could not be used", self.path)
            raise LedgerUnavailable(
                f"The lease database {self.path} could not be used (the server log has the "
                "details); check that the file is writable and not held by a stuck process",
                details={"path": str(self.path)},
            ) from exc

    @contextlib.contextmanager
    def _transaction(
        self, mode: Literal["IMMEDIATE", "DEFERRED"] = "IMMEDIATE"
    ) -> Iterator[sqlite3.Connection]:
        """One transaction: ``IMMEDIATE`` takes the write lock up front, ``DEFERRED`` reads."""
        with self._connection() as conn:
            conn.execute("BEGIN IMMEDIATE" if mode == "IMMEDIATE" else "BEGIN DEFERRED")
            try:
                yield conn
            except BaseException:
                if conn.in_transaction:
                    conn.execute("ROLLBACK")
                raise
            conn.execute("COMMIT")

    # -- reading ----------------------------------------------------------------------------

    @staticmethod
    def _lease(conn: sqlite3.Connection, row: _Row) -> Lease:
        uuids = conn.execute(
            "SELECT uuid FROM lease_gpus WHERE lease_id = ? ORDER BY position", (row[0],)
        ).fetchall()
        return _from_row(row, tuple(u for (u,) in uuids))

    @staticmethod
    def _active(conn: sqlite3.Connection, host: str | None) -> list[Lease]:
        if host is None:
            rows = conn.execute(
                "SELECT lease_id, host, container, owner, created_at, released_at FROM leases "
                "WHERE released_at IS NULL ORDER BY created_at, rowid"
            ).fetchall()
            gpus = conn.execute(
                "SELECT lease_id, uuid FROM lease_gpus WHERE active = 1 ORDER BY position"
            ).fetchall()
        else:
            rows = conn.execute(
                "SELECT lease_id, host, container, owner, created_at, released_at FROM leases "
                "WHERE host = ? AND released_at IS NULL ORDER BY created_at, rowid",
                (host,),
            ).fetchall()
            gpus = conn.execute(
                "SELECT lease_id, uuid FROM lease_gpus WHERE host = ? AND active = 1 "
                "ORDER BY position",
                (host,),
            ).fetchall()
        by_lease: dict[str, list[str]] = {}
        for lease_id, uuid in gpus:
            by_lease.setdefault(lease_id, []).append(uuid)
        return [_from_row(row, tuple(by_lease.get(row[0], ()))) for row in rows]

    @classmethod
    def _for_container(cls, conn: sqlite3.Connection, host: str, container: str) -> Lease | None:
        row = conn.execute(
            "SELECT lease_id, host, container, owner, created_at, released_at FROM leases "
            "WHERE host = ? AND container = ? AND released_at IS NULL",
            (host, container),
        ).fetchone()
        return None if row is None else cls._lease(conn, row)

    def get(self, lease_id: str) -> Lease | None:
        """The lease with this id, active or released; ``None`` if there is none."""
        with self._transaction("DEFERRED") as conn:
            row = conn.execute(
                "SELECT lease_id, host, container, owner, created_at, released_at FROM leases "
                "WHERE lease_id = ?",
                (lease_id,),
            ).fetchone()
            return None if row is None else self._lease(conn, row)

    def for_container(self, host: str, container: str) -> Lease | None:
        """The active lease of a container, if it holds one."""
        with self._transaction("DEFERRED") as conn:
            return self._for_container(conn, host, container)

    def active(self, host: str | None = None) -> list[Lease]:
        """Active leases (of one host, or all), oldest first."""
        with self._transaction("DEFERRED") as conn:
            return self._active(conn, host)

    def holders(self, host: str) -> dict[str, Lease]:
        """Which active lease holds each leased GPU UUID of a host."""
        return {uuid: lease for lease in self.active(host) for uuid in lease.gpu_uuids}

    def pinned(self, host: str) -> set[str]:
        """The containers of a host that are pinned (kept running after their last kernel)."""
        with self._transaction("DEFERRED") as conn:
            rows = conn.execute("SELECT container FROM pins WHERE host = ?", (host,)).fetchall()
            return {name for (name,) in rows}

    def set_pinned(self, host: str, container: str, pinned: bool) -> None:
        """Pin a container (or unpin it; unpinning one that is not pinned does nothing)."""
        with self._transaction() as conn:
            if pinned:
                conn.execute(
                    "INSERT OR IGNORE INTO pins (host, container, pinned_at) VALUES (?, ?, ?)",
                    (host, container, time.time()),
                )
            else:
                conn.execute("DELETE FROM pins WHERE host = ? AND container = ?", (host, container))

    # -- writing ----------------------------------------------------------------------------

    @staticmethod
    def _insert(conn: sqlite3.Connection, lease: Lease) -> None:
        conn.execute(
            "INSERT INTO leases (lease_id, host, container, owner, created_at) "
            "VALUES (?, ?, ?, ?, ?)",
            (lease.lease_id, lease.host, lease.container, lease.owner, lease.created_at),
        )
        conn.executemany(
            "INSERT INTO lease_gpus (lease_id, host, uuid, position) VALUES (?, ?, ?, ?)",
            [(lease.lease_id, lease.host, uuid, n) for n, uuid in enumerate(lease.gpu_uuids)],
        )

    @staticmethod
    def _mark_released(conn: sqlite3.Connection, lease_id: str, now: float) -> bool:
        cursor = conn.execute(
            "UPDATE leases SET released_at = ? WHERE lease_id = ? AND released_at IS NULL",
            (now, lease_id),
        )
        if cursor.rowcount != 1:
            return False
        conn.execute("UPDATE lease_gpus SET active = 0 WHERE lease_id = ?", (lease_id,))
        return True

    def acquire(
        self,
        host: str,
        container: str,
        owner: str,
        request: GPURequest,
        units: Sequence[LeasableGPU],
    ) -> Lease:
        """Lease GPUs of ``host`` (its leasable ``units``) to ``container``, atomically.

        Raises ``BadRequest`` for a request with no GPU or an unknown UUID, ``Conflict`` when
        the container already holds a lease, and ``NoFreeGPU`` when too few matching GPUs are
        free.
        """
        _require(host=host, container=container, owner=owner)
        if not request.wanted:
            raise BadRequest("a GPU request needs a count >= 1 or UUIDs")
        by_uuid: dict[str, LeasableGPU] = {}
        for unit in units:
            by_uuid.setdefault(unit.uuid, unit)
        _check_explicit(host, request, by_uuid)
        lease_id = uuidlib.uuid4().hex
        with self._transaction() as conn:
            existing = self._for_container(conn, host, container)
            if existing is not None:
                raise Conflict(
                    f"Container {container!r} on host {host!r} already holds lease "
                    f"{existing.lease_id} ({len(existing.gpu_uuids)} GPUs); release it first",
                    details={"lease": existing.to_json()},
                )
            held = {uuid: lease for lease in self._active(conn, host) for uuid in lease.gpu_uuids}
            chosen = _choose(host, request, list(by_uuid.values()), held)
            lease = Lease(
                lease_id=lease_id,
                host=host,
                container=container,
                owner=owner,
                gpu_uuids=tuple(unit.uuid for unit in chosen),
                created_at=self._clock(),
            )
            self._insert(conn, lease)
        self.log.info(
            "Leased %s on host %s to container %s for %s (lease %s)",
            ", ".join(lease.gpu_uuids),
            host,
            container,
            owner,
            lease_id,
        )
        return lease

    def _log_release(self, lease: Lease, why: str) -> None:
        self.log.info(
            "Released lease %s of container %s on host %s (%s): %s",
            lease.lease_id,
            lease.container,
            lease.host,
            why,
            ", ".join(lease.gpu_uuids),
        )

    def release(self, lease_id: str) -> bool:
        """Release a lease and free its GPUs: ``True`` the first time, ``False`` ever after."""
        now = self._clock()
        with self._transaction() as conn:
            row = conn.execute(
                "SELECT lease_id, host, container, owner, created_at, released_at FROM leases "
                "WHERE lease_id = ? AND released_at IS NULL",
                (lease_id,),
            ).fetchone()
            if row is None:
                return False
            lease = self._lease(conn, row)
            self._mark_released(conn, lease_id, now)
        self._log_release(lease, "released")
        return True

    def release_container(self, host: str, container: str) -> Lease | None:
        """Release the active lease of a container: the released lease, or ``None``."""
        now = self._clock()
        with self._transaction() as conn:
            lease = self._for_container(conn, host, container)
            if lease is None:
                return None
            self._mark_released(conn, lease.lease_id, now)
        self._log_release(lease, "container released")
        return replace(lease, released_at=now)

    def _free_vanished(
        self,
        conn: sqlite3.Connection,
        host: str,
        containers: Mapping[str, tuple[str, ...]],
        created_before: float | None,
        now: float,
    ) -> tuple[dict[str, Lease], list[Lease]]:
        """Free the leases whose container is gone; returns the others by container, and those."""
        leased: dict[str, Lease] = {}
        freed: list[Lease] = []
        for lease in self._active(conn, host):
            if lease.container in containers:
                leased[lease.container] = lease
            elif created_before is not None and lease.created_at >= created_before:
                continue  # taken after the listing: a start in flight
            elif self._mark_released(conn, lease.lease_id, now):
                freed.append(replace(lease, released_at=now))
        return leased, freed

    def reconcile(
        self,
        host: str,
        containers: Mapping[str, tuple[str, ...]],
        *,
        owners: Mapping[str, str] | None = None,
        created_before: float | None = None,
    ) -> ReconcileReport:
        """Make the ledger agree with the containers that exist on ``host``, in one transaction.

        ``containers`` maps the name of every gpudev container that still exists on the host
        (running or stopped) to the GPU UUIDs its label says it holds; ``owners`` optionally
        gives their owners (default ``"unknown"``). Leases of vanished containers are freed;
        containers that hold GPUs by label but no lease get one again if those GPUs are free.
        Leases created at or after ``created_before`` (the time the containers were listed)
        are left alone: their container may be being created right now.
        """
        now = self._clock()
        releases: list[Lease] = []
        conflicts: list[ReconcileConflict] = []
        mismatched: list[LeaseMismatch] = []
        with self._transaction() as conn:
            leased, freed = self._free_vanished(conn, host, containers, created_before, now)
            held = {uuid: lease for lease in leased.values() for uuid in lease.gpu_uuids}
            for name in sorted(containers):
                labelled = tuple(dict.fromkeys(containers[name]))
                current = leased.get(name)
                if current is not None:
                    if set(current.gpu_uuids) != set(labelled):
                        mismatched.append(
                            LeaseMismatch(name, current.lease_id, current.gpu_uuids, labelled)
                        )
                    continue
                if not labelled:
                    continue
                taken = tuple(_holder(uuid, held[uuid]) for uuid in labelled if uuid in held)
                if taken:
                    conflicts.append(ReconcileConflict(name, labelled, taken))
                    continue
                lease = Lease(
                    lease_id=uuidlib.uuid4().hex,
                    host=host,
                    container=name,
                    owner=(owners or {}).get(name, "unknown"),
                    gpu_uuids=labelled,
                    created_at=now,
                )
                self._insert(conn, lease)
                releases.append(lease)
                held.update(dict.fromkeys(labelled, lease))
        for lease in freed:
            self._log_release(lease, "its container is gone")
        for lease in releases:
            self.log.info(
                "Leased %s on host %s to container %s again from its label (lease %s)",
                ", ".join(lease.gpu_uuids),
                host,
                lease.container,
                lease.lease_id,
            )
        for conflict in conflicts:
            self.log.warning(
                "Container %s on host %s is labelled with GPUs held by other leases: %s",
                conflict.container,
                host,
                ", ".join(f"{h.uuid} by {h.container}" for h in conflict.held_by),
            )
        for mismatch in mismatched:
            self.log.warning(
                "Lease %s of container %s on host %s holds %s but the label says %s",
                mismatch.lease_id,
                mismatch.container,
                host,
                ", ".join(mismatch.leased) or "none",
                ", ".join(mismatch.labelled) or "none",
            )
        return ReconcileReport(
            host=host,
            freed=tuple(freed),
            releases=tuple(releases),
            conflicts=tuple(conflicts),
            mismatched=tuple(mismatched),
        )
