"""Which server process made a container (``L_PROCESS``): its PID, its start time and the boot,
so that another process that got the PID of a dead server does not keep that server's orphans
(and their GPU leases) from being swept."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import tempfile
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from jupyter_gpudev.changes.capture import STAGING, sweep_staging
from jupyter_gpudev.containers import reconcile
from jupyter_gpudev.kernels.warm import _Record
from jupyter_gpudev.labels import L_HOST, L_KERNEL, L_LEDGER, L_MANAGED, L_NAME, L_PROCESS

LINUX = Path("/proc/self/stat").is_file() and Path("/proc/sys/kernel/random/boot_id").is_file()
needs_proc = pytest.mark.skipif(not LINUX, reason="reads /proc (Linux)")

MACHINE = socket.gethostname()


def start_of(pid: int) -> int:
    """Field 22 of /proc/PID/stat, read here on its own (after the last ")")."""
    text = Path(f"/proc/{pid}/stat").read_text()
    return int(text[text.rindex(")") + 1 :].split()[19])


def boot() -> str:
    return Path("/proc/sys/kernel/random/boot_id").read_text().strip().split("-")[0]


def ended_pid() -> int:
    ended = subprocess.Popen(["true"])  # noqa: S607 - a pid that no longer runs
    ended.wait()
    return ended.pid


def fake_host(labels: dict[str, dict[str, str]]) -> Any:
    """A host whose engine lists one running kernel container per entry of ``labels``."""
    containers = [
        SimpleNamespace(
            name=f"gpudev-{name}",
            status="running",
            labels={
                L_MANAGED: "1",
                L_LEDGER: "ledger",
                L_HOST: "local",
                L_NAME: name,
                L_KERNEL: f"id-{name}",
                **extra,
            },
        )
        for name, extra in labels.items()
    ]
    listing = SimpleNamespace(list=lambda **_: containers)
    return SimpleNamespace(name="local", client=lambda: SimpleNamespace(containers=listing))


@needs_proc
def test_a_live_pid_with_another_start_time_is_a_dead_server_to_the_orphan_sweep() -> None:
    # Given kernel containers labelled by server processes of this machine: this process as it
    # is; a process that had this PID before (another start time, the PID reused since); one
    # of an earlier boot; and earlier versions' labels (machine and PID only)
    pid, start = os.getpid(), start_of(os.getpid())
    host = fake_host(
        {
            "mine": {L_PROCESS: f"{MACHINE}:{pid}:{start}:{boot()}"},
            "reused": {L_PROCESS: f"{MACHINE}:{pid}:{start + 1}:{boot()}"},
            "rebooted": {L_PROCESS: f"{MACHINE}:{pid}:{start}:00000000"},
            "old-live": {L_PROCESS: f"{MACHINE}:{pid}"},
            "old-dead": {L_PROCESS: f"{MACHINE}:{ended_pid()}"},
            "elsewhere": {L_PROCESS: f"another-{MACHINE}:{pid}:{start + 1}:{boot()}"},
        }
    )
    # When the orphan sweep looks for them
    orphans = reconcile.orphan_kernel_containers(host, "ledger", MACHINE)
    # Then the PID's other process and the other boot count as dead servers, this process as
    # live; an old label is judged by its PID alone; another machine's is not judged here
    assert sorted(c.labels[L_NAME] for c in orphans) == ["old-dead", "rebooted", "reused"]


@needs_proc
def test_this_process_identity_is_machine_pid_start_and_boot() -> None:
    value = reconcile.process_identity()
    assert value == f"{MACHINE}:{os.getpid()}:{start_of(os.getpid())}:{boot()}"
    assert not reconcile.process_gone(value, MACHINE)
    # A live PID with another start time, or of another boot, is gone
    pid, start = os.getpid(), start_of(os.getpid())
    assert reconcile.process_gone(f"{MACHINE}:{pid}:{start - 1}:{boot()}", MACHINE)
    assert reconcile.process_gone(f"{MACHINE}:{pid}:{start}:ffffffff", MACHINE)
    # A PID that no longer runs is gone, whatever the label's form
    dead = ended_pid()
    assert reconcile.process_gone(f"{MACHINE}:{dead}:{start}:{boot()}", MACHINE)
    assert reconcile.process_gone(f"{MACHINE}:{dead}", MACHINE)
    # Another machine's process, or a label that is not one, is not judged
    assert not reconcile.process_gone(f"elsewhere:{dead}", MACHINE)
    for odd in ("", MACHINE, f"{MACHINE}:", f"{MACHINE}:x", f"{MACHINE}:{dead}:x:{boot()}"):
        assert not reconcile.process_gone(odd, MACHINE), odd


@needs_proc
def test_a_process_whose_name_has_spaces_and_parentheses(tmp_path: Path) -> None:
    # Given a process whose name (the stat file's second field) holds ") " and spaces
    odd = tmp_path / "a) (b c) d"
    odd.symlink_to(sys.executable)
    child = subprocess.Popen([str(odd), "-c", "import time; time.sleep(30)"])
    try:
        assert ") (b c" in Path(f"/proc/{child.pid}/stat").read_text()
        # Then its identity has its real start time, and it is alive while it runs
        value = reconcile.process_identity(child.pid)
        assert value == f"{MACHINE}:{child.pid}:{start_of(child.pid)}:{boot()}"
        assert not reconcile.process_gone(value, MACHINE)
    finally:
        child.kill()
        child.wait()
    assert reconcile.process_gone(value, MACHINE)


def fake_proc(root: Path, pid: int, stat: str, boot_id: str) -> Path:
    (root / str(pid)).mkdir(parents=True)
    (root / str(pid) / "stat").write_text(stat)
    (root / "sys" / "kernel" / "random").mkdir(parents=True)
    (root / "sys" / "kernel" / "random" / "boot_id").write_text(boot_id + "\n")
    return root


def test_the_start_time_is_read_after_the_last_parenthesis(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Given a stat file whose name field holds ") S 1 2" (a name chosen to mislead a reader
    # that splits on spaces or stops at the first ")")
    pid = os.getpid()
    fields = " ".join(str(n) for n in range(4, 22))  # fields 4 to 21
    stat = f"{pid} (x) S 1 2 (y)) R {fields} 987654 23 24\n"
    proc = fake_proc(tmp_path / "proc", pid, stat, "0a1b2c3d-0000-4000-8000-000000000000")
    monkeypatch.setattr(reconcile, "PROC", proc)
    # Then field 22 is the start time, and the boot id's first part names the boot
    assert reconcile.process_identity() == f"{MACHINE}:{pid}:987654:0a1b2c3d"
    assert not reconcile.process_gone(f"{MACHINE}:{pid}:987654:0a1b2c3d", MACHINE)
    assert reconcile.process_gone(f"{MACHINE}:{pid}:987655:0a1b2c3d", MACHINE)


def test_without_proc_the_pid_alone_decides(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # On a machine without /proc (not Linux)
    monkeypatch.setattr(reconcile, "PROC", tmp_path / "no-proc")
    # The identity is an earlier version's: machine and PID
    assert reconcile.process_identity() == f"{MACHINE}:{os.getpid()}"
    # And a label with a start time is judged by its PID
    assert not reconcile.process_gone(f"{MACHINE}:{os.getpid()}:1:0a1b2c3d", MACHINE)
    assert reconcile.process_gone(f"{MACHINE}:{ended_pid()}:1:0a1b2c3d", MACHINE)


@needs_proc
def test_a_staging_folder_of_a_process_that_had_this_pid_is_swept(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Given staging folders of commits (in the temporary folder): one of a process that had
    # this PID before (another start time), one of this process, one an earlier version
    # named by this PID only
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    pid, start = os.getpid(), start_of(os.getpid())
    earlier = tmp_path / f"{STAGING}{pid}.{start - 1}.{boot()}-abc"
    mine = tmp_path / f"{STAGING}{pid}.{start}.{boot()}-def"
    old = tmp_path / f"{STAGING}{pid}-ghi"
    for folder in (earlier, mine, old):
        folder.mkdir()
    # When the start-up sweeps them, the earlier process's is removed, the others kept
    assert sweep_staging() == [earlier]
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted([mine.name, old.name])


def test_a_warm_kernel_record_of_a_process_that_had_this_pid_is_an_orphan(tmp_path: Path) -> None:
    # Given warm kernels recorded by servers: one by this process (its identity), one by a
    # process that had this PID before (another start time), one by an earlier version (PID)
    machine, pid = socket.gethostname(), os.getpid()
    registry = _Record(str(tmp_path))
    entries = {
        "mine": {"machine": machine, "pid": pid, "process": reconcile.process_identity()},
        "reused": {
            "machine": machine,
            "pid": pid,
            "process": f"{machine}:{pid}:{start_of(pid) + 1}:{boot()}",
        },
        "old": {"machine": machine, "pid": ended_pid()},
        "old-alive": {"machine": machine, "pid": pid},
    }
    registry.path.parent.mkdir(parents=True, exist_ok=True)
    registry.path.write_text(json.dumps(entries))
    # Then only those of a server that ended are orphans
    assert sorted(registry.orphans()) == ["old", "reused"]
