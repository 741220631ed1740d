"""What counts as a GPU doing no work for the reclaim of GPU-idle dev containers
(``containers.gpu_idle``), and the notes their listings show."""

from __future__ import annotations

from jupyter_gpudev.containers.gpu_idle import gpu_working, lease_working
from jupyter_gpudev.containers.idle_notes import MAX_STOPPED_NOTES, IdleNotes
from jupyter_gpudev.containers.usage import GPUUsage, HostUsage, ProcessUse
from jupyter_gpudev.leasing import Lease


def gpu(uuid: str, utilisation: int | None, *shares: int | None) -> GPUUsage:
    processes = tuple(
        ProcessUse(kind="gpudev", memory_used_mib=100, sm_percent=share, memory_percent=None)
        for share in shares
    )
    return GPUUsage(uuid, 0, "NVIDIA A100", 81920, 100, utilisation, processes)


def lease(*uuids: str) -> Lease:
    return Lease("l1", "local", "box", "alice", tuple(uuids), 0.0)


def test_a_gpu_works_when_its_utilisation_or_a_process_share_is_above_zero() -> None:
    assert gpu_working(gpu("a", 0)) is False
    assert gpu_working(gpu("a", 0, 0, None)) is False
    assert gpu_working(gpu("a", 12)) is True
    # a sampled process's share counts even where the whole GPU's instant reading is 0
    assert gpu_working(gpu("a", 0, 0, 7)) is True
    assert gpu_working(gpu("a", None, 5)) is True
    # nothing known: not idle
    assert gpu_working(gpu("a", None)) is None
    assert gpu_working(gpu("a", None, None)) is None


def test_a_lease_is_idle_only_when_every_gpu_of_it_was_read_and_did_nothing() -> None:
    host = HostUsage("local", (gpu("a", 0), gpu("b", 0), gpu("c", None), gpu("d", 30)))
    assert lease_working(lease("a", "b"), host) is False
    assert lease_working(lease("a", "d"), host) is True
    assert lease_working(lease("a", "c"), host) is None  # one not read
    assert lease_working(lease("a", "gone"), host) is None  # not in the inventory
    assert lease_working(lease("c", "d"), host) is True  # one worked: not idle, whatever else
    assert lease_working(lease("a"), None) is None  # the host not read
    assert lease_working(lease(), host) is None  # no GPU at all: nothing to free


def test_notes_show_by_state_and_a_restart_drops_the_stopped_one() -> None:
    notes = IdleNotes()
    notes.set_pending({("local", "box"): "will be stopped"})
    assert notes.for_container("local", "box", running=True) == ("will be stopped",)
    assert notes.for_container("local", "box", running=False) == ()
    notes.set_pending({})
    notes.stopped("local", "box", "Stopped at 10:00 UTC")
    assert notes.for_container("local", "box", running=False) == ("Stopped at 10:00 UTC",)
    assert notes.for_container("local", "other", running=False) == ()
    # seen running again (resumed): the stopped note is gone for good
    assert notes.for_container("local", "box", running=True) == ()
    assert notes.for_container("local", "box", running=False) == ()


def test_stopped_notes_are_bounded() -> None:
    notes = IdleNotes()
    for index in range(MAX_STOPPED_NOTES + 10):
        notes.stopped("local", f"box-{index}", "Stopped")
    assert notes.for_container("local", "box-0", running=False) == ()
    assert notes.for_container("local", f"box-{MAX_STOPPED_NOTES + 9}", running=False)
