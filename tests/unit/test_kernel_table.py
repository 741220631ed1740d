"""The shared service's kernel table (``shared.kernel_table``) and what the service does with
it after a restart (``shared.kernels.KernelProcesses.restore``), without an engine: the
provisioner's process calls are replaced at their one seam (``poll``, ``cleanup``)."""

from __future__ import annotations

import asyncio
import logging
import os
import signal
import stat
from pathlib import Path
from typing import Any

import pytest

from jupyter_gpudev.containers.hooks import LiveKernel
from jupyter_gpudev.errors import Forbidden, NotFound
from jupyter_gpudev.kernels.remote import ServiceError, ServiceKernelProvisioner
from jupyter_gpudev.shared.client import ServiceClient
from jupyter_gpudev.shared.kernel_table import (
    FILE,
    KernelRecord,
    KernelTable,
    KernelTableUnavailable,
    RecordedKernels,
)
from jupyter_gpudev.shared.kernels import KernelProcesses, ServiceKernel
from tests.ports import free_port

LOG = logging.getLogger("gpudev-test")
KEY = "5e3c1a0f9b7d4e2a8c6b1d3f5a7e9c0b"
#: What ``ServiceKernel.get_provisioner_info`` gives for a kernel in a dedicated container.
INFO: dict[str, Any] = {
    "kernel_id": "k1",
    "connection_info": {"ip": "172.22.0.2", "shell_port": 40001, "key": KEY},
    "host": "local",
    "container": "gpudev-alice.kernel-k1",
    "dedicated": True,
    "pod_gpus": 0,
    "exec_id": "0123abcd",
    "runtime_id": "kernel-k1",
    "ports": [40001, 40002, 40003, 40004, 40005],
    "kernel_name": "gpudev-default",
    "signature_scheme": "hmac-sha256",
    "environment": "default",
    "gpus": -1,
    "idle_timeout": 600.0,
}
#: Uids of other accounts (this test runs as root or as someone else).
OTHER_UID = 1001 if os.geteuid() != 1001 else 1002


def table_in(tmp_path: Path, **kwargs: Any) -> KernelTable:
    return KernelTable(tmp_path / "state", log=LOG, **kwargs)


def test_a_kernel_is_written_loaded_and_removed_without_its_key(tmp_path: Path) -> None:
    # Given the table of a service whose state folder does not exist yet
    table = table_in(tmp_path)
    # When a kernel is written
    table.save(KernelRecord("alice", "k1", False, INFO))
    # Then the folder is the service's alone and the file is mode 0600
    assert stat.S_IMODE((tmp_path / "state").stat().st_mode) == 0o700
    assert stat.S_IMODE((tmp_path / "state" / FILE).stat().st_mode) == 0o600
    # And it is read back as written, but for the key, which is nowhere in the file
    (record,) = table.load()
    assert (record.owner, record.kernel_id, record.admin) == ("alice", "k1", False)
    assert record.info["exec_id"] == "0123abcd"
    assert record.info["connection_info"] == {"ip": "172.22.0.2", "shell_port": 40001}
    assert KEY.encode() not in (tmp_path / "state" / FILE).read_bytes()
    # When it is written again (a relaunch) it replaces the first; another owner's is apart
    table.save(KernelRecord("alice", "k1", False, {**INFO, "exec_id": "4567ef"}))
    table.save(KernelRecord("bob", "k1", True, INFO))
    assert [(r.owner, r.info["exec_id"]) for r in table.load()] == [
        ("alice", "4567ef"),
        ("bob", "0123abcd"),
    ]
    # When alice's is removed, bob's stays; removing an unknown one does nothing
    table.remove("alice", "k1")
    table.remove("alice", "k1")
    assert [r.owner for r in KernelTable(tmp_path / "state", log=LOG).load()] == ["bob"]


def test_another_process_reads_the_kernels_with_their_host_pids_writing_nothing(
    tmp_path: Path,
) -> None:
    # Given no table yet: another process (`jupyter gpudev top`) reads none, and makes none
    recorded = RecordedKernels(table_in(tmp_path), "local")
    assert recorded.processes("local") == []
    assert not (tmp_path / "state").exists()
    # Given the service's table with alice's kernel in a shared container, its host PID
    # written, one with a PID that is no number, and one on another host
    table_in(tmp_path).save(
        KernelRecord(
            "alice", "k1", False, {**INFO, "container": "gpudev-alice.box", "host_pid": 4321}
        )
    )
    table_in(tmp_path).save(KernelRecord("bob", "k2", False, {**INFO, "host_pid": "4321"}))
    table_in(tmp_path).save(KernelRecord("bob", "k3", False, {**INFO, "host": "far"}))
    before = {p.name: p.stat().st_mtime_ns for p in (tmp_path / "state").iterdir()}
    # When it reads them
    found = recorded.processes("local")
    # Then each kernel of the host is there, by its id, container and host PID (if a number)
    assert found == [
        LiveKernel("k1", "local", "gpudev-alice.box", 4321),
        LiveKernel("k2", "local", "gpudev-alice.kernel-k1", None),
    ]
    assert [k.kernel_id for k in recorded.processes("far")] == ["k3"]
    # And nothing of the state folder was written
    assert {p.name: p.stat().st_mtime_ns for p in (tmp_path / "state").iterdir()} == before


def test_a_table_that_cannot_be_read_tells_no_kernel(tmp_path: Path) -> None:
    # Given a table file of another account (as another user's `top` finds it)
    table_in(tmp_path).check()
    table = table_in(tmp_path, owner=OTHER_UID, trusted=frozenset({0, os.geteuid()}))
    # Then reading it is refused, and no kernel is told by it
    with pytest.raises(KernelTableUnavailable, match="not to the service's account"):
        table.read()
    assert RecordedKernels(table, "local").processes("local") == []


def test_a_file_of_another_account_is_refused_and_left_alone(tmp_path: Path) -> None:
    if os.geteuid() != 0:
        pytest.skip("making a file of another account needs root")
    # Given a kernel table that another account made
    (tmp_path / "state").mkdir(mode=0o700)
    planted = tmp_path / "state" / FILE
    planted.write_bytes(b"")
    os.chown(planted, OTHER_UID, OTHER_UID)
    # Then it is not used, and the refusal says why
    with pytest.raises(KernelTableUnavailable, match=f"belongs to uid {OTHER_UID}"):
        table_in(tmp_path).check()
    assert planted.read_bytes() == b""


def test_a_file_of_another_account_is_refused_whoever_runs_the_service(tmp_path: Path) -> None:
    # Given the table of a service whose account is not the file's (as another user sees it)
    table_in(tmp_path).check()
    table = table_in(tmp_path, owner=OTHER_UID, trusted=frozenset({0, os.geteuid()}))
    # Then it is refused
    with pytest.raises(KernelTableUnavailable, match="not to the service's account"):
        table.save(KernelRecord("alice", "k1", False, INFO))


@pytest.mark.parametrize("name", [FILE, FILE + "-journal"])
def test_a_link_in_place_of_the_file_or_its_journal_is_refused(tmp_path: Path, name: str) -> None:
    # Given a link where the table (or SQLite's journal of it) goes, to a file elsewhere
    (tmp_path / "state").mkdir(mode=0o700)
    target = tmp_path / "elsewhere"
    (tmp_path / "state" / name).symlink_to(target)
    # Then the table is not used, and nothing is written through the link
    with pytest.raises(KernelTableUnavailable, match="link"):
        table_in(tmp_path).save(KernelRecord("alice", "k1", False, INFO))
    assert not target.exists()


def test_a_hard_link_to_the_file_is_refused(tmp_path: Path) -> None:
    # Given the table with a second name (another folder's entry could keep it)
    table_in(tmp_path).check()
    os.link(tmp_path / "state" / FILE, tmp_path / "second-name")
    # Then it is not used
    with pytest.raises(KernelTableUnavailable, match="one name"):
        table_in(tmp_path).load()


def test_a_folder_others_could_change_is_refused(tmp_path: Path) -> None:
    # Given a state folder everyone may write (anyone could swap the table for a link)
    (tmp_path / "state").mkdir()
    (tmp_path / "state").chmod(0o777)
    # Then the table is not used
    with pytest.raises(KernelTableUnavailable, match="writable by its group or by everyone"):
        table_in(tmp_path).check()


def test_a_folder_of_another_account_on_the_way_is_refused(tmp_path: Path) -> None:
    # Given a state folder under a folder another account owns (it could rename the state)
    table = table_in(tmp_path, trusted=frozenset({OTHER_UID}))
    # Then the table is not used
    with pytest.raises(KernelTableUnavailable, match="belongs to uid"):
        table.check()


def test_a_file_with_a_loose_mode_is_made_the_services_alone(tmp_path: Path) -> None:
    # Given a table left readable by everyone
    table_in(tmp_path).check()
    (tmp_path / "state" / FILE).chmod(0o644)
    # When it is used, it is mode 0600 again
    table_in(tmp_path).load()
    assert stat.S_IMODE((tmp_path / "state" / FILE).stat().st_mode) == 0o600


class Views:
    """Each owner's view, as ``Authority.for_user`` gives it (nothing in it is used here)."""

    operations_per_user = 0
    reads_per_user = 0

    def __init__(self, refused: frozenset[str] = frozenset()) -> None:
        self.asked: list[tuple[str, bool]] = []
        self.refused = refused

    def for_user(self, name: str, *, hub_admin: bool = False) -> Any:
        self.asked.append((name, hub_admin))
        if name in self.refused:
            raise Forbidden(f"{name}'s folder cannot be used")
        return object()


@pytest.fixture
def processes_seam(monkeypatch: pytest.MonkeyPatch) -> dict[str, Any]:
    """The provisioner's process calls replaced: ``running`` (exec ids still running),
    ``cleaned`` (kernel ids cleaned up), ``signals``."""
    seen: dict[str, Any] = {"running": set(), "cleaned": [], "signals": []}

    async def poll(self: ServiceKernel) -> int | None:
        return None if self._exec_id in seen["running"] else 137

    async def cleanup(self: ServiceKernel, restart: bool = False) -> None:
        seen["cleaned"].append((self.kernel_id, restart))

    async def send_signal(self: ServiceKernel, signum: int) -> None:
        seen["signals"].append((self.kernel_id, signum, self._exec_id))

    monkeypatch.setattr(ServiceKernel, "poll", poll)
    monkeypatch.setattr(ServiceKernel, "cleanup", cleanup)
    monkeypatch.setattr(ServiceKernel, "send_signal", send_signal)
    monkeypatch.setattr(ServiceKernel, "_register", lambda _self: None)
    return seen


def test_after_a_restart_a_running_kernel_is_kept_for_its_owner_and_an_ended_one_dropped(
    tmp_path: Path, processes_seam: dict[str, Any]
) -> None:
    # Given a table with alice's running kernel and bob's kernel that ended meanwhile
    table = table_in(tmp_path)
    table.save(KernelRecord("alice", "k1", False, INFO))
    ended = {**INFO, "kernel_id": "k2", "exec_id": "dead", "container": "gpudev-bob.kernel-k2"}
    table.save(KernelRecord("bob", "k2", True, ended))
    processes_seam["running"].add("0123abcd")
    # When the restarted service restores them
    views = Views()
    processes = KernelProcesses(LOG, table=table, views=views)
    assert asyncio.run(processes.restore()) == (1, 1)
    # Then each was looked at in its owner's own view, as they launched it
    assert views.asked == [("alice", False), ("bob", True)]
    # And bob's is released as a cleanup would, and forgotten
    assert processes_seam["cleaned"] == [("k2", False)]
    assert [r.kernel_id for r in table.load()] == ["k1"]
    # And alice's is hers, as before the restart: bob cannot reach it
    kernel = processes._kernels[("alice", "k1")]
    assert (kernel.container_name, kernel.host, kernel.runtime_id) == (
        "gpudev-alice.kernel-k1",
        "local",
        "kernel-k1",
    )
    assert kernel.idle_timeout() == 600.0
    assert processes.kept_containers() == {("local", "gpudev-alice.kernel-k1")}
    with pytest.raises(NotFound):
        asyncio.run(processes.poll("bob", "k1"))
    with pytest.raises(NotFound):
        asyncio.run(processes.signal("bob", "k1", signal.SIGINT))
    with pytest.raises(NotFound):
        asyncio.run(processes.cleanup("bob", "k1", {}))
    # And alice reaches the same process; her cleanup forgets it
    assert asyncio.run(processes.poll("alice", "k1")) is None
    asyncio.run(processes.signal("alice", "k1", signal.SIGINT))
    assert processes_seam["signals"] == [("k1", signal.SIGINT, "0123abcd")]
    asyncio.run(processes.cleanup("alice", "k1", {}))
    assert table.load() == []


def test_a_kernel_whose_owner_has_no_view_now_is_kept_in_the_table_for_the_next_start(
    tmp_path: Path, processes_seam: dict[str, Any]
) -> None:
    # Given alice's kernel written, and her folder unusable when the service restarts
    table = table_in(tmp_path)
    table.save(KernelRecord("alice", "k1", False, INFO))
    processes = KernelProcesses(LOG, table=table, views=Views(frozenset({"alice"})))
    # Then it is neither reached nor forgotten: the next start tries again
    assert asyncio.run(processes.restore()) == (0, 0)
    assert processes_seam["cleaned"] == []
    assert [r.kernel_id for r in table.load()] == ["k1"]


def test_a_restored_kernels_info_has_no_key_until_its_client_launches_it_again(
    tmp_path: Path, processes_seam: dict[str, Any]
) -> None:
    # Given alice's kernel reached again after a restart
    table = table_in(tmp_path)
    table.save(KernelRecord("alice", "k1", False, INFO))
    processes_seam["running"].add("0123abcd")
    processes = KernelProcesses(LOG, table=table, views=Views())
    asyncio.run(processes.restore())
    kernel = processes._kernels[("alice", "k1")]
    # Then the service holds no key for it, and what it would write again has none
    assert kernel.owner_state.session.key == b""
    info = asyncio.run(kernel.get_provisioner_info())
    assert "key" not in info
    assert "key" not in info["connection_info"]
    # When its client launches it again (a restart of the kernel) the key comes with it
    kernel.use_session(KEY, "hmac-sha256")
    assert kernel.owner_state.session.key == KEY.encode()


class DownService:
    """The shared service as a client's server sees it while it restarts: unreachable."""

    def __init__(self) -> None:
        self.status = 503
        self.polls = 0

    async def poll(self, kernel_id: str) -> int | None:  # noqa: ARG002
        self.polls += 1
        if self.status:
            raise ServiceError(self.status, "The shared gpudev service cannot be reached")
        return None


def test_a_clients_kernel_is_running_while_the_service_restarts(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # Given a client's kernel, launched, while the service is down
    service = DownService()
    monkeypatch.setattr(ServiceKernelProvisioner, "service", service)
    kernel = ServiceKernelProvisioner(kernel_id="k1", unreachable_grace=60.0)
    kernel._launched = True
    # Then it is taken for running
    assert asyncio.run(kernel.poll()) is None
    # And once the service is back, it is asked again, and still running
    service.status = 0
    assert asyncio.run(kernel.poll()) is None
    assert service.polls == 2


def test_a_clients_kernel_is_lost_after_the_grace_and_other_errors_are_raised(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # Given a client's kernel whose service stays unreachable past the grace
    service = DownService()
    monkeypatch.setattr(ServiceKernelProvisioner, "service", service)
    kernel = ServiceKernelProvisioner(kernel_id="k1", unreachable_grace=0.0)
    kernel._launched = True
    # Then it is reported dead
    assert asyncio.run(kernel.poll()) == -1
    # And a refusal that is no outage is the caller's to see
    service.status = 403
    other = ServiceKernelProvisioner(kernel_id="k2", unreachable_grace=60.0)
    other._launched = True
    with pytest.raises(ServiceError):
        asyncio.run(other.poll())


def test_a_service_that_does_not_answer_is_unreachable_not_an_error_of_the_client(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # Given a client-mode server whose service is down (nothing listens at its address)
    monkeypatch.setenv("JUPYTERHUB_API_TOKEN", "users-token")
    client = ServiceClient(f"http://127.0.0.1:{free_port()}/", LOG, timeout=2.0)
    # Then a kernel's call is a 503 the provisioner waits out (not a connection error)
    with pytest.raises(ServiceError) as raised:
        asyncio.run(client.poll("k1"))
    assert raised.value.status_code == 503
