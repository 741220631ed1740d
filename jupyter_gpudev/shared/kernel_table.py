"""The shared service's kernel table: what it needs to reach each client's kernel again after
it restarts, in ``<state_dir>/kernels.sqlite`` (``c.DevContainers.state_dir``).

A row per kernel: its owner and id (together they name it, as in ``shared.kernels``), whether
its owner acted as an administrator, and the provisioner's own persistable info
(``GPUDevProvisioner.get_provisioner_info``: host, container, the process's handle, runtime
id, ports) with the service's few extras (kernel name, signature scheme, idle timeout). No
secret is written: a kernel's connection key is the client's, which sends it again with every
launch; a ``key`` anywhere in the info is dropped before writing.

The file is the service's alone. Its folder is reached from ``/`` a folder at a time without
following a link; each folder on the way belongs to root or the service's account and no one
else can write it (a sticky folder above, such as ``/tmp``, is allowed), so no other account
can swap the file or its folder for a link; the state folder is made (mode 0700) when
missing. The file is opened without following a link and must be a plain file of the
service's account with one name; it is kept at mode 0600 (SQLite gives its journal the same
mode). A row is written whole or not at all: each write is one ``BEGIN IMMEDIATE``
transaction, with ``synchronous = FULL``.

Another process of the service's account on this machine (``jupyter gpudev top``) reads it
without writing (``KernelTable.read``, ``RecordedKernels``): the host PID written with each
kernel tells its GPU processes, in a shared container too.

Calls block (disk, a writer's lock): the service runs them in worker threads.
"""

from __future__ import annotations

import contextlib
import errno
import json
import os
import sqlite3
import stat
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ..containers.hooks import LiveKernel
from ..errors import GPUDevError

#: The table's file, in the state folder.
FILE = "kernels.sqlite"
#: The schema this module writes (``PRAGMA user_version``).
SCHEMA_VERSION = 1
_SCHEMA = """
    CREATE TABLE IF NOT EXISTS kernels (
        owner     TEXT NOT NULL,
        kernel_id TEXT NOT NULL,
        admin     INTEGER NOT NULL,
        info      TEXT NOT NULL,
        saved_at  REAL NOT NULL,
        PRIMARY KEY (owner, kernel_id)
    )
"""
_SELECT = "SELECT owner, kernel_id, admin, info FROM kernels ORDER BY saved_at, rowid"
#: SQLite's other files beside the table's (a rollback journal; WAL ones if ever switched).
_SIDE_FILES = ("-journal", "-wal", "-shm")
_DIR_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC
_FILE_FLAGS = os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC | os.O_NONBLOCK


class KernelTableUnavailable(GPUDevError):
    """The kernel table cannot be used safely (a folder or file others could change, a link,
    a broken file): the service's kernels would not outlive a restart."""

    status = 503
    code = "kernel_table"


@dataclass(frozen=True)
class KernelRecord:
    """One kernel the service runs for a client, as written in the table."""

    owner: str
    kernel_id: str
    #: Its owner acted as an administrator (a Hub admin) when they launched it.
    admin: bool
    #: The provisioner's persistable info (``get_provisioner_info``), no key in it.
    info: dict[str, Any] = field(default_factory=dict)


def without_secrets(value: Any) -> Any:
    """``value`` with every ``key`` entry of every dict in it left out (a kernel's
    connection key: the client's, never written)."""
    if isinstance(value, dict):
        return {k: without_secrets(v) for k, v in value.items() if k != "key"}
    if isinstance(value, list | tuple):
        return [without_secrets(v) for v in value]
    return value


class KernelTable:
    """The kernels of the shared service in ``state_dir``; each call opens its own connection.

    ``trusted``: the accounts that may own the folders on the way (root and the service's);
    the file itself must be the service's (``os.geteuid()``, or ``owner`` in tests)."""

    def __init__(
        self,
        state_dir: str | os.PathLike[str],
        *,
        log: Any,
        trusted: frozenset[int] | None = None,
        owner: int | None = None,
        busy_timeout: float = 10.0,
    ) -> None:
        self.folder = Path(os.path.realpath(state_dir))
        self.path = self.folder / FILE
        self.log = log
        self.owner = os.geteuid() if owner is None else owner
        self.trusted = trusted if trusted is not None else frozenset({0, self.owner})
        self.busy_timeout = busy_timeout
        self._schema_ready = False
        self._lock = threading.Lock()

    # -- the file, checked ----------------------------------------------------------------------

    def _refuse(self, why: str) -> KernelTableUnavailable:
        return KernelTableUnavailable(
            f"The kernel table {self.path} is not used: {why}. The service's kernels would not "
            "be reached again after it restarts; an administrator fixes the state folder "
            "(c.DevContainers.state_dir)",
            details={"path": str(self.path)},
        )

    def _folder(self) -> int:
        """An open handle of the state folder, reached from ``/`` without following links,
        each folder checked (the missing ones made, mode 0700)."""
        fd = os.open("/", _DIR_FLAGS)
        parts = [part for part in str(self.folder).split("/") if part]
        try:
            self._check_folder(fd, "/", last=not parts)
            for index, part in enumerate(parts):
                shown = "/" + "/".join(parts[: index + 1])
                try:
                    child = os.open(part, _DIR_FLAGS, dir_fd=fd)
                except FileNotFoundError:
                    with contextlib.suppress(FileExistsError):
                        os.mkdir(part, 0o700, dir_fd=fd)
                    child = os.open(part, _DIR_FLAGS, dir_fd=fd)
                except OSError as err:
                    if err.errno in (errno.ELOOP, errno.ENOTDIR):
                        raise self._refuse(f"{shown} is a link or not a folder") from None
                    raise
                os.close(fd)
                fd = child
                self._check_folder(fd, shown, last=index == len(parts) - 1)
        except BaseException:
            os.close(fd)
            raise
        return fd

    def _check_folder(self, fd: int, shown: str, *, last: bool) -> None:
        info = os.fstat(fd)
        if info.st_uid not in self.trusted:
            raise self._refuse(
                f"{shown} belongs to uid {info.st_uid}, who could replace the table with a link"
            )
        writable = info.st_mode & (stat.S_IWGRP | stat.S_IWOTH)
        if writable and (last or not info.st_mode & stat.S_ISVTX):
            raise self._refuse(f"{shown} is writable by its group or by everyone (chmod go-w)")

    def _check_file(self, fd: int, name: str) -> None:
        info = os.fstat(fd)
        self._check_info(info, name)
        if stat.S_IMODE(info.st_mode) != 0o600:
            os.fchmod(fd, 0o600)

    def _check_info(self, info: os.stat_result, name: str) -> None:
        if not stat.S_ISREG(info.st_mode) or info.st_nlink != 1:
            raise self._refuse(f"{name} is a link or not a plain file with one name")
        if info.st_uid != self.owner:
            raise self._refuse(f"{name} belongs to uid {info.st_uid}, not to the service's account")

    def _checked(self) -> None:
        """The table's folder and file (made, mode 0600, when missing), and SQLite's side
        files if any, are the service's alone and no link; else ``KernelTableUnavailable``."""
        folder = self._folder()
        try:
            try:
                fd = os.open(FILE, _FILE_FLAGS, 0o600, dir_fd=folder)
            except OSError as err:
                if err.errno in (errno.ELOOP, errno.ENXIO, errno.EISDIR):
                    raise self._refuse(f"{FILE} is a link or not a plain file") from None
                raise
            try:
                self._check_file(fd, FILE)
            finally:
                os.close(fd)
            for suffix in _SIDE_FILES:
                try:
                    info = os.stat(FILE + suffix, dir_fd=folder, follow_symlinks=False)
                except FileNotFoundError:
                    continue
                self._check_info(info, FILE + suffix)
                if stat.S_IMODE(info.st_mode) != 0o600:
                    os.chmod(FILE + suffix, 0o600, dir_fd=folder)
        finally:
            os.close(folder)

    # -- connections ----------------------------------------------------------------------------

    @contextlib.contextmanager
    def _transaction(self, mode: str = "IMMEDIATE") -> Iterator[sqlite3.Connection]:
        """One transaction on a new connection, after the file was checked."""
        try:
            self._checked()
            with contextlib.closing(
                sqlite3.connect(self.path, timeout=self.busy_timeout, isolation_level=None)
            ) as conn:
                conn.execute("PRAGMA synchronous = FULL")
                self._ensure_schema(conn)
                conn.execute(f"BEGIN {mode}")
                try:
                    yield conn
                except BaseException:
                    if conn.in_transaction:
                        conn.execute("ROLLBACK")
                    raise
                conn.execute("COMMIT")
        except (sqlite3.Error, OSError) as exc:
            self.log.exception("gpudev: the kernel table %s could not be used", self.path)
            raise KernelTableUnavailable(
                f"The kernel table {self.path} could not be used (the service log has the "
                "details): check the state folder (c.DevContainers.state_dir) and its disk",
                details={"path": str(self.path)},
            ) from exc

    def _ensure_schema(self, conn: sqlite3.Connection) -> None:
        with self._lock:
            if self._schema_ready:
                return
            conn.execute("BEGIN IMMEDIATE")
            try:
                self._check_version(conn)
                conn.execute(_SCHEMA)
                conn.execute(f"PRAGMA user_version = {SCHEMA_VERSION}")
            except BaseException:
                conn.execute("ROLLBACK")
                raise
            conn.execute("COMMIT")
            self._schema_ready = True

    def _check_version(self, conn: sqlite3.Connection) -> None:
        version = int(conn.execute("PRAGMA user_version").fetchone()[0])
        if version > SCHEMA_VERSION:
            raise self._refuse(
                f"it was written by a newer jupyter-gpudev (schema {version}); upgrade "
                "jupyter-gpudev here too"
            )

    def check(self) -> None:
        """The table can be used (its folder and file checked, made when missing), else
        ``KernelTableUnavailable``: the service checks it when it starts."""
        with self._transaction("DEFERRED"):
            pass

    # -- the rows -------------------------------------------------------------------------------

    def save(self, record: KernelRecord) -> None:
        """Write ``record`` (replacing the kernel's earlier one), without any key."""
        info = json.dumps(without_secrets(record.info), sort_keys=True)
        with self._transaction() as conn:
            conn.execute(
                "INSERT OR REPLACE INTO kernels (owner, kernel_id, admin, info, saved_at) "
                "VALUES (?, ?, ?, ?, ?)",
                (record.owner, record.kernel_id, int(record.admin), info, time.time()),
            )

    def remove(self, owner: str, kernel_id: str) -> None:
        """Forget the kernel ``kernel_id`` of ``owner`` (nothing if unknown)."""
        with self._transaction() as conn:
            conn.execute(
                "DELETE FROM kernels WHERE owner = ? AND kernel_id = ?", (owner, kernel_id)
            )

    def load(self) -> list[KernelRecord]:
        """Every kernel written, oldest first; a row that cannot be read is logged and left
        out (and left in the file)."""
        with self._transaction("DEFERRED") as conn:
            rows = conn.execute(_SELECT).fetchall()
        return self._records(rows)

    def read(self) -> list[KernelRecord]:
        """``load`` for another process than the service's (``jupyter gpudev top``): nothing
        is made or written (no folder, file, journal or schema), and no table is ``[]``. The
        file is used on the same terms (the service's account's, no link);
        ``KernelTableUnavailable`` when it cannot be read."""
        try:
            if not self.path.is_file():
                return []
            self._checked()  # the file is there: nothing is made
            uri = f"{self.path.as_uri()}?mode=ro"
            with contextlib.closing(
                sqlite3.connect(uri, uri=True, timeout=self.busy_timeout)
            ) as conn:
                version = int(conn.execute("PRAGMA user_version").fetchone()[0])
                if version == 0:  # made, its schema not written yet
                    return []
                self._check_version(conn)
                rows = conn.execute(_SELECT).fetchall()
        except (sqlite3.Error, OSError) as exc:
            raise KernelTableUnavailable(
                f"The kernel table {self.path} could not be read: {exc}",
                details={"path": str(self.path)},
            ) from exc
        return self._records(rows)

    def _records(self, rows: list[Any]) -> list[KernelRecord]:
        records: list[KernelRecord] = []
        for owner, kernel_id, admin, raw in rows:
            try:
                info = json.loads(raw)
            except (TypeError, ValueError):
                info = None
            if not isinstance(info, dict) or not isinstance(owner, str):
                self.log.warning("gpudev: kernel %r in %s cannot be read", kernel_id, self.path)
                continue
            records.append(KernelRecord(owner, str(kernel_id), bool(admin), info))
        return records


class RecordedKernels:
    """The service's kernels as its table records them (``containers.hooks``'
    ``KernelProcessTracking``), for another process of its account (``jupyter gpudev top``):
    each with its host and dev container, and the host PID of its process as the engine
    reported it at its launch. A kernel recorded runs as far as the table knows (one that
    ended while its client was gone is there until the service forgets it); its activity is
    not known. ``local``: the name of the local engine (a record without a host is there)."""

    def __init__(self, table: KernelTable, local: str) -> None:
        self.table = table
        self.local = local

    def processes(self, host: str) -> list[LiveKernel]:
        """The recorded kernels on ``host``; none when the table cannot be read (logged)."""
        try:
            records = self.table.read()
        except KernelTableUnavailable as err:
            self.table.log.debug("gpudev: %s", err.message)
            return []
        found = []
        for record in records:
            info = record.info
            pid = info.get("host_pid")
            if str(info.get("host") or self.local) != host:
                continue
            found.append(
                LiveKernel(
                    record.kernel_id,
                    host,
                    str(info.get("container") or ""),
                    pid if isinstance(pid, int) and not isinstance(pid, bool) and pid > 0 else None,
                )
            )
        return found
