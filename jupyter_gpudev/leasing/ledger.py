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
first use."""

from __future__ import annotations

import contextlib
import errno
import logging
import shutil
import sqlite3
import threading
import time
import uuid as uuidlib
from collections.abc import Callable, Iterator, Mapping, Sequence, Set
from dataclasses import replace
from pathlib import Path
from typing import Literal

from ..errors import BadRequest, Conflict
from .model import (
    GPURequest,
    LeasableGPU,
    Lease,
    LeaseMismatch,
    LedgerUnavailable,
    NoFreeGPU,
    ReconcileConflict,
    ReconcileReport,
    _check_explicit,
    _choose,
    _holder,
    _require,
    seen_by,
)

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


_Row = tuple[str, str, str, str, float, float | None]


def _from_row(row: _Row, gpu_uuids: tuple[str, ...]) -> Lease:
    lease_id, host, container, owner, created_at, released_at = row
    return Lease(lease_id, host, container, owner, gpu_uuids, created_at, released_at)


#: Bytes free under which a failing ledger is said to be on a full disk (SQLite says "disk
#: I/O error" when its shared-memory file cannot grow).
LOW_ROOM = 64 * 1024


def _no_room(folder: Path, exc: BaseException) -> bool:
    """Whether ``exc`` (a ledger that could not be used) comes from a full disk."""
    if isinstance(exc, OSError) and exc.errno == errno.ENOSPC:
        return True
    if "disk is full" in str(exc):  # SQLITE_FULL
        return True
    try:
        return shutil.disk_usage(folder).free < LOW_ROOM
    except OSError:
        return False


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
            why = (
                "the disk it is on is full; make room there"
                if _no_room(self.path.parent, exc)
                else "the server log has the details; check that the file is writable and "
                "not held by a stuck process"
            )
            raise LedgerUnavailable(
                f"The lease database {self.path} could not be used: {why}",
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
        *,
        held_elsewhere: Mapping[str, Lease] | None = None,
        shown_to: str | None = None,
        admit: Callable[[list[Lease]], None] | None = None,
    ) -> Lease:
        """Lease GPUs of ``host`` (its leasable ``units``) to ``container``, atomically.

        ``held_elsewhere`` are GPUs held outside this ledger (claims on the engine by other
        servers or host entries): never chosen, and named when too few are free.
        ``shown_to``: the user asking, who is told of other users' leases without their
        containers (``None``: an administrator, told everything). ``admit``: called inside
        the write transaction with ``owner``'s active leases on every host, before any GPU
        is chosen; it raises to refuse (a per-user limit), so two leases for one owner are
        never both admitted against the same count.

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
            if admit is not None:
                admit([lease for lease in self._active(conn, None) if lease.owner == owner])
            held = dict(held_elsewhere or {})
            held.update(
                {uuid: lease for lease in self._active(conn, host) for uuid in lease.gpu_uuids}
            )
            held = {uuid: seen_by(lease, shown_to) for uuid, lease in held.items()}
            chosen = _choose(host, request, list(by_uuid.values()), held)
            lease = Lease(
                lease_id=lease_id,
                host=host,
                container=container,
                owner=owner,
                gpu_uuids=tuple(unit.uuid for unit in chosen),
                created_at=self._clock(),
            )
            try:
                self._insert(conn, lease)
            except sqlite3.IntegrityError:
                # Only a ledger written by an older version (or by hand) gets here: the unique
                # index holds a GPU that no active lease shows. Never a database failure.
                self.log.exception("Lease ledger %s: a GPU held twice", self.path)
                raise NoFreeGPU(
                    f"{', '.join(lease.gpu_uuids)} on host {host!r} was leased meanwhile; "
                    "try again",
                    details={"host": host, "gpu_uuids": list(lease.gpu_uuids)},
                ) from None
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
    ) -> tuple[dict[str, Lease], list[Lease], list[Lease]]:
        """Free the leases whose container is gone; returns the others by container, the leases
        of starts in flight (taken after the listing), and the freed ones."""
        leased: dict[str, Lease] = {}
        in_flight: list[Lease] = []
        freed: list[Lease] = []
        for lease in self._active(conn, host):
            if lease.container in containers:
                leased[lease.container] = lease
            elif created_before is not None and (
                created_before <= lease.created_at <= now + (now - created_before)
            ):
                # Taken after the listing: a start in flight. Not one dated further ahead than
                # the grace: its (wall) time is from before the clock went back.
                in_flight.append(lease)
            elif self._mark_released(conn, lease.lease_id, now):
                freed.append(replace(lease, released_at=now))
        return leased, in_flight, freed

    def reconcile(
        self,
        host: str,
        containers: Mapping[str, tuple[str, ...]],
        *,
        owners: Mapping[str, str] | None = None,
        created_before: float | None = None,
        adoptable: Set[str] | None = None,
    ) -> ReconcileReport:
        """Make the ledger agree with the containers that exist on ``host``, in one transaction.

        ``containers`` maps the name of every gpudev container that still exists on the host
        (running or stopped) to the GPU UUIDs its label says it holds; ``owners`` optionally
        gives their owners (default ``"unknown"``). Leases of vanished containers are freed;
        containers that hold GPUs by label but no lease get one again if those GPUs are free.
        Leases created at or after ``created_before`` (the time the containers were listed)
        are left alone: their container may be being created right now. Only the containers
        in ``adoptable`` (default: all) get a lease again from their label: a container that is
        only created may be a start in flight that is giving its GPUs back right now.
        """
        now = self._clock()
        releases: list[Lease] = []
        conflicts: list[ReconcileConflict] = []
        mismatched: list[LeaseMismatch] = []
        with self._transaction() as conn:
            leased, in_flight, freed = self._free_vanished(
                conn, host, containers, created_before, now
            )
            # A start in flight holds its GPUs too (its container is not listed yet).
            held = {
                uuid: lease for lease in (*in_flight, *leased.values()) for uuid in lease.gpu_uuids
            }
            for name in sorted(containers):
                labelled = tuple(dict.fromkeys(containers[name]))
                current = leased.get(name)
                if current is not None:
                    if set(current.gpu_uuids) != set(labelled):
                        mismatched.append(
                            LeaseMismatch(name, current.lease_id, current.gpu_uuids, labelled)
                        )
                    continue
                if not labelled or (adoptable is not None and name not in adoptable):
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
