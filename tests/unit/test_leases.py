"""The lease ledger: GPU choice, exclusivity across threads and processes, release, reconcile."""

from __future__ import annotations

import json
import logging
import multiprocessing
import sqlite3
import stat
import threading
from contextlib import closing
from datetime import datetime, timezone
from multiprocessing.queues import Queue
from multiprocessing.synchronize import Barrier
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from jupyter_gpudev.engine import GPU, Inventory, MigDevice
from jupyter_gpudev.errors import BadRequest, Conflict, GPUDevError
from jupyter_gpudev.leasing import (
    GPURequest,
    LeasableGPU,
    Lease,
    LeaseLedger,
    NoFreeGPU,
    leasable_units,
)

HOST = "local"
#: 2026-11-21 16:03:09 UTC, the fixed clock of the tests that read times.
T0 = datetime(2026, 11, 21, 16, 3, 9, tzinfo=timezone.utc).timestamp()


def gpu_uuid(index: int) -> str:
    return f"GPU-5d5ba0d6-d33d-2b2c-524d-9e3d8d2b8a{index:02x}"


def gpu(
    index: int,
    *,
    name: str = "NVIDIA A100-SXM4-80GB",
    total: int | None = 81920,
    used: int | None = 0,
    migs: tuple[MigDevice, ...] = (),
) -> GPU:
    return GPU(
        uuid=gpu_uuid(index),
        index=index,
        name=name,
        memory_total_mib=total,
        memory_used_mib=used,
        mig_enabled=bool(migs),
        mig_devices=migs,
    )


def units(*gpus: GPU) -> list[LeasableGPU]:
    return leasable_units(Inventory(source="nvml", gpus=gpus))


def ledger_at(tmp_path: Path, clock: float | None = None) -> LeaseLedger:
    if clock is None:
        return LeaseLedger(tmp_path / "leases.db")
    return LeaseLedger(tmp_path / "leases.db", clock=lambda: clock)


def take(
    ledger: LeaseLedger, container: str, request: GPURequest, pool: list[LeasableGPU]
) -> Lease:
    return ledger.acquire(HOST, container, "alice", request, pool)


# --------------------------------------------------------------------------------------------
# Choosing GPUs
# --------------------------------------------------------------------------------------------


def test_a_count_takes_the_gpus_with_most_free_memory_then_the_lowest_index(
    tmp_path: Path,
) -> None:
    # Given four GPUs: two equally idle, one busy, one whose used memory is unknown
    pool = units(
        gpu(0, used=60000),
        gpu(1, used=1000),
        gpu(2, used=1000),
        gpu(3, total=None, used=None),
    )
    ledger = ledger_at(tmp_path)
    # When two GPUs are asked for
    lease = take(ledger, "gpudev-alice-train", GPURequest(count=2), pool)
    # Then the two with the most free memory win, the lower index first among equals
    assert lease.gpu_uuids == (gpu_uuid(1), gpu_uuid(2))
    # And the next request gets the busy one before the one of unknown memory
    assert take(ledger, "second", GPURequest(count=1), pool).gpu_uuids == (gpu_uuid(0),)
    assert take(ledger, "third", GPURequest(count=1), pool).gpu_uuids == (gpu_uuid(3),)


def test_the_model_filter_is_a_case_insensitive_substring(tmp_path: Path) -> None:
    # Given an A100 with more free memory than two L4s
    pool = units(gpu(0), gpu(1, name="NVIDIA L4", total=23034), gpu(2, name="NVIDIA L4"))
    # When one "l4" is asked for
    lease = take(ledger_at(tmp_path), "c", GPURequest(count=1, model="l4"), pool)
    # Then an L4 is leased, never the A100
    assert lease.gpu_uuids == (gpu_uuid(2),)


def test_min_memory_counts_total_memory_and_skips_unknown_memory(tmp_path: Path) -> None:
    # Given a 24 GiB GPU with nothing used, an 80 GiB one half used, and one of unknown size
    pool = units(gpu(0, total=24576), gpu(1, used=40000), gpu(2, total=None))
    ledger = ledger_at(tmp_path)
    # When GPUs with at least 40 GiB are asked for
    lease = take(ledger, "c", GPURequest(count=1, min_memory_mib=40960), pool)
    # Then only the 80 GiB GPU qualifies, although the 24 GiB one has more free memory
    assert lease.gpu_uuids == (gpu_uuid(1),)
    # And a second such request finds none (the unknown one does not count as big enough)
    with pytest.raises(NoFreeGPU) as caught:
        take(ledger, "d", GPURequest(count=1, min_memory_mib=40960), pool)
    assert "with at least 40960 MiB: 1 match, 0 free" in caught.value.message


def test_explicit_uuids_are_leased_in_the_order_asked(tmp_path: Path) -> None:
    # Given three GPUs
    pool = units(gpu(0), gpu(1), gpu(2))
    # When two are asked for by UUID, the higher index first
    request = GPURequest(uuids=(gpu_uuid(2), gpu_uuid(0)))
    lease = take(ledger_at(tmp_path), "c", request, pool)
    # Then exactly those are leased, in that order
    assert lease.gpu_uuids == (gpu_uuid(2), gpu_uuid(0))


def test_an_unknown_uuid_is_a_bad_request_naming_it(tmp_path: Path) -> None:
    # Given one GPU
    pool = units(gpu(0))
    ledger = ledger_at(tmp_path)
    # When a GPU that is not on the host is asked for by UUID
    with pytest.raises(BadRequest) as caught:
        take(ledger, "c", GPURequest(uuids=(gpu_uuid(0), "GPU-not-here")), pool)
    # Then the error names it, and nothing was leased
    assert "GPU-not-here" in caught.value.message
    assert caught.value.status == 400
    assert ledger.active() == []


def test_an_explicit_uuid_outside_the_filters_is_a_bad_request(tmp_path: Path) -> None:
    # Given an L4
    pool = units(gpu(0, name="NVIDIA L4", total=23034))
    # When it is asked for by UUID with a filter it does not pass
    with pytest.raises(BadRequest) as caught:
        take(ledger_at(tmp_path), "c", GPURequest(uuids=(gpu_uuid(0),), model="A100"), pool)
    # Then the error says which filter it fails
    assert "model containing 'A100'" in caught.value.message


def test_a_taken_uuid_is_no_free_gpu(tmp_path: Path) -> None:
    # Given GPU 1 leased to one container
    pool = units(gpu(0), gpu(1))
    ledger = ledger_at(tmp_path)
    take(ledger, "first", GPURequest(uuids=(gpu_uuid(1),)), pool)
    # When another container asks for it by UUID
    with pytest.raises(NoFreeGPU) as caught:
        take(ledger, "second", GPURequest(uuids=(gpu_uuid(1),)), pool)
    # Then it is refused with a 409 naming the holder, and the free GPU 0 was not taken instead
    assert (caught.value.status, caught.value.exit_code, caught.value.code) == (
        409,
        5,
        "no_free_gpu",
    )
    assert "by container first for alice" in caught.value.message
    assert ledger.for_container(HOST, "second") is None


def test_no_free_gpu_names_each_holder_its_owner_and_since_when(tmp_path: Path) -> None:
    # Given one of two A100s leased by alice's container at a known time
    pool = units(gpu(0), gpu(1, used=5000))
    ledger = ledger_at(tmp_path, clock=T0)
    ledger.acquire(HOST, "gpudev-alice-train", "alice", GPURequest(count=1), pool)
    # When bob asks for two
    with pytest.raises(NoFreeGPU) as caught:
        ledger.acquire(HOST, "gpudev-bob-eval", "bob", GPURequest(count=2), pool)
    # Then the message says how many were asked, how many are free, and who holds the other
    assert caught.value.message == (
        "2 GPUs requested on host 'local', 1 free. Held: GPU 0 NVIDIA A100-SXM4-80GB "
        "(GPU-5d5b...) by container gpudev-alice-train for alice since 2026-11-21 16:03 UTC."
    )
    # And the details list the holder as JSON, with the time in ISO 8601 UTC
    body = caught.value.to_json()
    assert body["error"] == "no_free_gpu"
    (holder,) = body["details"]["holders"]
    assert holder["uuid"] == gpu_uuid(0)
    assert (holder["container"], holder["owner"]) == ("gpudev-alice-train", "alice")
    assert holder["since"] == "2026-11-21T16:03:09Z"
    assert body["details"]["requested"] == 2
    assert body["details"]["free"] == 1
    json.dumps(body)


def test_a_host_without_gpus_says_so(tmp_path: Path) -> None:
    # Given a host with no GPU
    # When one is asked for
    with pytest.raises(NoFreeGPU) as caught:
        take(ledger_at(tmp_path), "c", GPURequest(count=1), [])
    # Then the message says the host has none
    assert caught.value.message == (
        "1 GPU requested on host 'local', 0 free: the host has no leasable GPU."
    )


def test_a_request_for_no_gpu_creates_no_lease(tmp_path: Path) -> None:
    # Given a host with a GPU
    ledger = ledger_at(tmp_path)
    # When a container asks for no GPU at all
    with pytest.raises(BadRequest) as caught:
        take(ledger, "cpu-only", GPURequest(), units(gpu(0)))
    # Then it is refused (CPU-only containers hold no lease) and nothing is recorded
    assert caught.value.message == "a GPU request needs a count >= 1 or UUIDs"
    assert ledger.active() == []


@pytest.mark.parametrize(
    ("kwargs", "words"),
    [
        ({"count": 1, "uuids": (gpu_uuid(0),)}, "not both"),
        ({"count": -1}, ">= 0"),
        ({"uuids": (gpu_uuid(0), gpu_uuid(0))}, "more than once"),
        ({"count": 1, "min_memory_mib": -5}, "MiB"),
        ({"count": 1, "model": " "}, "model"),
    ],
)
def test_malformed_requests_are_bad_requests(kwargs: dict[str, object], words: str) -> None:
    # Given a malformed request / When it is built / Then it is a 400 that says what is wrong
    with pytest.raises(BadRequest, match=words):
        GPURequest(**kwargs)  # type: ignore[arg-type]


def test_mig_instances_replace_their_parent_gpu(tmp_path: Path) -> None:
    # Given a GPU in MIG mode with two instances, one without MIG, and one in MIG mode with none
    migs = (
        MigDevice(uuid="MIG-c6d4f1ef-42e4-5de3-91c7-45d71c87eb3f", index=0, profile="3g.40gb"),
        MigDevice(
            uuid="MIG-0a1b2c3d-42e4-5de3-91c7-45d71c87eb3f",
            index=1,
            profile="1g.10gb",
            memory_total_mib=9728,
        ),
    )
    pool = units(gpu(0, migs=migs), gpu(1), gpu(2, migs=()))
    empty_mig = leasable_units(
        Inventory(source="nvml", gpus=(GPU(uuid=gpu_uuid(3), index=3, name="X", mig_enabled=True),))
    )
    # When the leasable units are listed
    # Then each MIG instance is a unit of its own, named by profile, and its parent is not
    assert [(u.uuid, u.name, u.parent_uuid) for u in pool] == [
        (migs[0].uuid, "NVIDIA A100-SXM4-80GB MIG 3g.40gb", gpu_uuid(0)),
        (migs[1].uuid, "NVIDIA A100-SXM4-80GB MIG 1g.10gb", gpu_uuid(0)),
        (gpu_uuid(1), "NVIDIA A100-SXM4-80GB", None),
        (gpu_uuid(2), "NVIDIA A100-SXM4-80GB", None),
    ]
    assert pool[1].memory_total_mib == 9728
    assert pool[1].index == 0
    # And a GPU in MIG mode without instances offers nothing
    assert empty_mig == []
    # And a MIG instance can be leased by UUID while the parent cannot
    ledger = ledger_at(tmp_path)
    lease = take(ledger, "mig", GPURequest(uuids=(migs[1].uuid,)), pool)
    assert lease.gpu_uuids == (migs[1].uuid,)
    with pytest.raises(BadRequest):
        take(ledger, "parent", GPURequest(uuids=(gpu_uuid(0),)), pool)


# --------------------------------------------------------------------------------------------
# Lifecycle
# --------------------------------------------------------------------------------------------


def test_a_lease_is_released_exactly_once_and_its_gpu_is_free_again(tmp_path: Path) -> None:
    # Given the only GPU leased
    pool = units(gpu(0))
    ledger = ledger_at(tmp_path)
    lease = take(ledger, "first", GPURequest(count=1), pool)
    # When it is released twice
    first, second = ledger.release(lease.lease_id), ledger.release(lease.lease_id)
    # Then only the first release counts
    assert (first, second) == (True, False)
    assert ledger.release("no-such-lease") is False
    # And the lease is kept as history, no longer active, and the GPU can be leased again
    released = ledger.get(lease.lease_id)
    assert released is not None
    assert released.released_at is not None
    assert released.gpu_uuids == (gpu_uuid(0),)
    assert ledger.active() == []
    assert ledger.holders(HOST) == {}
    assert take(ledger, "second", GPURequest(count=1), pool).gpu_uuids == (gpu_uuid(0),)


def test_release_by_container_is_exactly_once_too(tmp_path: Path) -> None:
    # Given a container holding a lease
    pool = units(gpu(0), gpu(1))
    ledger = ledger_at(tmp_path)
    lease = take(ledger, "train", GPURequest(count=2), pool)
    # When its container's lease is released twice
    released = ledger.release_container(HOST, "train")
    again = ledger.release_container(HOST, "train")
    # Then the first call returns the released lease and the second finds nothing
    assert released is not None
    assert released.lease_id == lease.lease_id
    assert released.released_at is not None
    assert again is None
    assert ledger.release(lease.lease_id) is False
    assert ledger.for_container(HOST, "train") is None


def test_leases_persist_across_ledger_objects_on_the_same_file(tmp_path: Path) -> None:
    # Given a lease written through one ledger object
    pool = units(gpu(0), gpu(1))
    lease = ledger_at(tmp_path).acquire(HOST, "train", "alice", GPURequest(count=1), pool)
    # When a fresh ledger object opens the same file (as the CLI would)
    other = ledger_at(tmp_path)
    # Then it sees the lease, refuses its GPU, and can release it
    assert other.get(lease.lease_id) == lease
    assert other.for_container(HOST, "train") == lease
    assert other.holders(HOST) == {lease.gpu_uuids[0]: lease}
    with pytest.raises(NoFreeGPU):
        other.acquire(HOST, "eval", "bob", GPURequest(uuids=lease.gpu_uuids), pool)
    assert other.release(lease.lease_id) is True
    assert ledger_at(tmp_path).active() == []


def test_the_same_container_cannot_hold_two_leases(tmp_path: Path) -> None:
    # Given a container holding one GPU
    pool = units(gpu(0), gpu(1))
    ledger = ledger_at(tmp_path)
    first = take(ledger, "train", GPURequest(count=1), pool)
    # When the same container asks again
    with pytest.raises(Conflict) as caught:
        take(ledger, "train", GPURequest(count=1), pool)
    # Then it is a 409 conflict that names the container and its lease
    assert (caught.value.status, caught.value.code) == (409, "conflict")
    assert "'train'" in caught.value.message
    assert first.lease_id in caught.value.message
    assert ledger.active() == [first]
    # And after a release the name can lease again
    ledger.release(first.lease_id)
    assert take(ledger, "train", GPURequest(count=1), pool).container == "train"


def test_hosts_are_separate_and_active_is_oldest_first(tmp_path: Path) -> None:
    # Given two hosts whose GPUs happen to share a UUID, and a clock that ticks
    ticks = iter(range(100))
    ledger = LeaseLedger(tmp_path / "leases.db", clock=lambda: T0 + next(ticks))
    pool = units(gpu(0))
    # When the same UUID and the same container name are leased on each host
    a = ledger.acquire("box-a", "train", "alice", GPURequest(count=1), pool)
    b = ledger.acquire("box-b", "train", "bob", GPURequest(count=1), pool)
    # Then both leases exist, listed per host and oldest first overall
    assert ledger.active() == [a, b]
    assert ledger.active("box-b") == [b]
    assert ledger.holders("box-a") == {gpu_uuid(0): a}


def test_the_file_lives_in_a_private_folder_in_wal_mode(tmp_path: Path) -> None:
    # Given a ledger whose folder does not exist yet
    path = tmp_path / "state" / "gpudev" / "leases.db"
    ledger = LeaseLedger(path)
    assert not path.parent.exists()  # nothing happens before first use
    # When it is first used
    ledger.active()
    # Then the folder is created private and the database uses WAL
    assert stat.S_IMODE(path.parent.stat().st_mode) == 0o700
    with closing(sqlite3.connect(path)) as conn:
        assert conn.execute("PRAGMA journal_mode").fetchone()[0] == "wal"


def test_acquire_and_release_are_logged(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    # Given a ledger
    ledger = ledger_at(tmp_path)
    # When a lease is taken and released
    with caplog.at_level(logging.INFO, logger="jupyter_gpudev.leasing.ledger"):
        lease = take(ledger, "train", GPURequest(count=1), units(gpu(0)))
        ledger.release(lease.lease_id)
    # Then both are logged at info level with the lease id
    messages = [r.getMessage() for r in caplog.records if r.levelno == logging.INFO]
    assert any(m.startswith("Leased") and lease.lease_id in m for m in messages)
    assert any(m.startswith("Released") and lease.lease_id in m for m in messages)


# --------------------------------------------------------------------------------------------
# Reconcile
# --------------------------------------------------------------------------------------------


def test_reconcile_frees_releases_and_reports_conflicts_and_mismatches(tmp_path: Path) -> None:
    # Given leases for a container that is gone, one that still exists, and one whose label
    # disagrees with its lease
    pool = units(*(gpu(i) for i in range(5)))
    ledger = ledger_at(tmp_path)
    gone = take(ledger, "gone", GPURequest(uuids=(gpu_uuid(0),)), pool)
    kept = take(ledger, "kept", GPURequest(uuids=(gpu_uuid(1),)), pool)
    drifted = take(ledger, "drifted", GPURequest(uuids=(gpu_uuid(2),)), pool)
    # When the engine reports: "kept" as leased, "drifted" labelled with GPU 3, "orphan"
    # labelled with the GPU of the vanished container, "clash" labelled with kept's GPU, and a
    # CPU-only container
    report = ledger.reconcile(
        HOST,
        {
            "kept": (gpu_uuid(1),),
            "drifted": (gpu_uuid(3),),
            "orphan": (gpu_uuid(0),),
            "clash": (gpu_uuid(1), gpu_uuid(4)),
            "cpu-only": (),
        },
        owners={"orphan": "carol"},
    )
    # Then the vanished container's lease is freed
    assert [lease.lease_id for lease in report.freed] == [gone.lease_id]
    assert ledger.get(gone.lease_id) is not None
    # And the orphan gets its GPU back under a new lease
    (orphan,) = report.releases
    assert (orphan.container, orphan.owner, orphan.gpu_uuids) == ("orphan", "carol", (gpu_uuid(0),))
    assert ledger.for_container(HOST, "orphan") == orphan
    # And the clash is reported with who holds the GPU, and gets no lease
    (clash,) = report.conflicts
    assert clash.container == "clash"
    assert [(h.uuid, h.container) for h in clash.held_by] == [(gpu_uuid(1), "kept")]
    assert ledger.for_container(HOST, "clash") is None
    # And the drifted lease is reported and left alone
    (mismatch,) = report.mismatched
    assert (mismatch.lease_id, mismatch.leased, mismatch.labelled) == (
        drifted.lease_id,
        (gpu_uuid(2),),
        (gpu_uuid(3),),
    )
    assert ledger.for_container(HOST, "drifted") == drifted
    assert ledger.for_container(HOST, "kept") == kept
    assert ledger.for_container(HOST, "cpu-only") is None
    # And the report is JSON
    body = report.to_json()
    assert body["conflicts"][0]["held_by"][0]["container"] == "kept"
    json.dumps(body)


def test_reconcile_re_leases_with_an_unknown_owner_and_is_idempotent(tmp_path: Path) -> None:
    # Given an empty ledger (say, a lost database) and a container labelled with two GPUs
    ledger = ledger_at(tmp_path)
    containers = {"train": (gpu_uuid(0), gpu_uuid(1))}
    # When reconcile runs twice
    first = ledger.reconcile(HOST, containers)
    second = ledger.reconcile(HOST, containers)
    # Then the first creates the lease for an unknown owner and the second changes nothing
    (lease,) = first.releases
    assert lease.owner == "unknown"
    assert second.to_json() == {
        "host": HOST,
        "freed": [],
        "releases": [],
        "conflicts": [],
        "mismatched": [],
    }
    assert ledger.active() == [lease]


# --------------------------------------------------------------------------------------------
# Exclusivity under concurrency
# --------------------------------------------------------------------------------------------


@settings(max_examples=25, deadline=None)
@given(
    gpu_count=st.integers(min_value=1, max_value=8),
    counts=st.lists(st.integers(min_value=1, max_value=3), min_size=8, max_size=16),
)
def test_concurrent_threads_never_share_a_gpu(
    tmp_path_factory: pytest.TempPathFactory, gpu_count: int, counts: list[int]
) -> None:
    # Given a fresh ledger file, some GPUs, and one thread per request, each with its own
    # ledger object on the same file
    path = tmp_path_factory.mktemp("threads") / "leases.db"
    pool = units(*(gpu(i) for i in range(gpu_count)))
    barrier = threading.Barrier(len(counts))
    results: list[Lease | BaseException | None] = [None] * len(counts)

    def request(n: int) -> None:
        ledger = LeaseLedger(path)
        barrier.wait()
        try:
            results[n] = ledger.acquire(
                HOST, f"c{n}", f"user{n}", GPURequest(count=counts[n]), pool
            )
        except BaseException as exc:  # every outcome is checked below
            results[n] = exc

    threads = [threading.Thread(target=request, args=(n,)) for n in range(len(counts))]
    # When they all acquire at once
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=60)
    # Then each got exactly its count or NoFreeGPU, no GPU went to two leases, and no more
    # than there are GPUs was leased
    leases = [r for r in results if isinstance(r, Lease)]
    failures = [(n, r) for n, r in enumerate(results) if not isinstance(r, Lease)]
    assert all(isinstance(r, NoFreeGPU) for _, r in failures), failures
    for lease in leases:
        assert len(lease.gpu_uuids) == counts[int(lease.container[1:])]
    leased = [uuid for lease in leases for uuid in lease.gpu_uuids]
    assert len(leased) == len(set(leased)) <= gpu_count
    # And a refusal was justified: what is still free now is less than it asked for
    for n, _ in failures:
        assert gpu_count - len(leased) < counts[n]
    # And the file agrees with what the threads were told
    assert sorted(LeaseLedger(path).active(), key=lambda x: x.lease_id) == sorted(
        leases, key=lambda x: x.lease_id
    )


PROCESS_GPUS = 16


Outcome = tuple[int, list[str] | str]


def grab_until_full(path: str, worker: int, barrier: Barrier, results: Queue[Outcome]) -> None:
    """In a child process: lease one GPU at a time until none is free; report the UUIDs."""
    try:
        ledger = LeaseLedger(Path(path))
        pool = units(*(gpu(i) for i in range(PROCESS_GPUS)))
        barrier.wait()
        got: list[str] = []
        while True:
            try:
                lease = ledger.acquire(
                    HOST, f"p{worker}-{len(got)}", f"w{worker}", GPURequest(count=1), pool
                )
            except NoFreeGPU:
                break
            got.extend(lease.gpu_uuids)
        results.put((worker, got))
    except GPUDevError as exc:
        results.put((worker, repr(exc)))


def test_concurrent_processes_never_share_a_gpu(tmp_path: Path) -> None:
    # Given four processes (spawned, so nothing is shared but the file) and sixteen GPUs
    ctx = multiprocessing.get_context("spawn")
    path = tmp_path / "leases.db"
    barrier = ctx.Barrier(4)
    results: Queue[Outcome] = ctx.Queue()
    processes = [
        ctx.Process(target=grab_until_full, args=(str(path), n, barrier, results)) for n in range(4)
    ]
    # When each leases one GPU at a time until none is left
    for process in processes:
        process.start()
    try:
        outcomes = dict(results.get(timeout=120) for _ in processes)
    finally:
        for process in processes:
            process.join(timeout=30)
            process.close()
        results.close()
        results.join_thread()
    # Then every GPU was leased exactly once across all processes
    assert all(isinstance(got, list) for got in outcomes.values()), outcomes
    leased = [uuid for got in outcomes.values() for uuid in got]
    assert sorted(leased) == sorted(gpu_uuid(i) for i in range(PROCESS_GPUS))
    assert len(LeaseLedger(path).holders(HOST)) == PROCESS_GPUS


def test_reconcile_leaves_leases_taken_after_the_listing_alone(tmp_path: Path) -> None:
    # Given a lease taken before the containers were listed, and one taken after (a start in
    # flight whose container does not exist yet)
    clock = [1000.0]
    ledger = LeaseLedger(tmp_path / "leases.sqlite", clock=lambda: clock[0])
    pool = units(gpu(0), gpu(1))
    old = take(ledger, "old-gone", GPURequest(uuids=(gpu_uuid(0),)), pool)
    listed_at = clock[0] + 1
    clock[0] += 2
    in_flight = take(ledger, "being-created", GPURequest(uuids=(gpu_uuid(1),)), pool)
    # When reconcile runs on a listing that has neither container
    report = ledger.reconcile(HOST, {}, created_before=listed_at)
    # Then only the older lease is freed
    assert [lease.lease_id for lease in report.freed] == [old.lease_id]
    assert ledger.for_container(HOST, "being-created") == in_flight


def test_reconcile_never_gives_a_gpu_of_a_start_in_flight_to_a_labelled_container(
    tmp_path: Path,
) -> None:
    # Given a start in flight holding GPU 1 (its container not listed yet), and a listed
    # container whose label says it holds GPU 1 too (another server's, or a stale label)
    clock = [1000.0]
    ledger = LeaseLedger(tmp_path / "leases.sqlite", clock=lambda: clock[0])
    pool = units(gpu(0), gpu(1))
    listed_at = clock[0]
    clock[0] += 1
    in_flight = take(ledger, "being-created", GPURequest(uuids=(gpu_uuid(1),)), pool)
    # When reconcile runs (the old code inserted a second lease of GPU 1: IntegrityError, shown
    # to users as "the lease database could not be used")
    report = ledger.reconcile(HOST, {"labelled": (gpu_uuid(1),)}, created_before=listed_at)
    # Then the labelled container is reported as a conflict, and the start keeps its GPU
    assert [c.container for c in report.conflicts] == ["labelled"]
    assert report.releases == ()
    assert ledger.holders(HOST)[gpu_uuid(1)] == in_flight


def test_gpus_held_elsewhere_are_never_chosen_and_are_named(tmp_path: Path) -> None:
    # Given two GPUs, one claimed on the engine by another server's container
    ledger = ledger_at(tmp_path)
    pool = units(gpu(0), gpu(1))
    elsewhere = {gpu_uuid(0): Lease("", HOST, "theirs", "bob", (gpu_uuid(0),), T0)}
    # When one GPU is asked for, then the other one is leased
    lease = ledger.acquire(
        HOST, "mine", "alice", GPURequest(count=1), pool, held_elsewhere=elsewhere
    )
    assert lease.gpu_uuids == (gpu_uuid(1),)
    # And a second request is refused naming what holds the first one
    with pytest.raises(NoFreeGPU, match="0 free") as caught:
        ledger.acquire(HOST, "more", "alice", GPURequest(count=1), pool, held_elsewhere=elsewhere)
    assert {h["container"] for h in caught.value.details["holders"]} == {"theirs", "mine"}


def test_a_unique_index_violation_is_no_free_gpu_not_a_broken_database(tmp_path: Path) -> None:
    # Given a ledger whose unique index holds GPU 0 for a lease row that is not active (what
    # an older version, or a hand edit, can leave)
    ledger = ledger_at(tmp_path)
    pool = units(gpu(0))
    take(ledger, "first", GPURequest(count=1), pool)
    with closing(sqlite3.connect(tmp_path / "leases.db")) as conn:
        conn.execute("UPDATE leases SET released_at = 1")
        conn.commit()
    # When GPU 0 is leased
    with pytest.raises(NoFreeGPU, match="leased meanwhile; try again") as caught:
        take(ledger, "second", GPURequest(count=1), pool)
    # Then it is the 409 a user can act on, not a 503 "check that the file is writable"
    assert caught.value.status == 409


def test_reconcile_adopts_only_the_containers_it_is_told_to(tmp_path: Path) -> None:
    # Given two containers labelled with GPUs and no lease: one running, one only created (a
    # start in flight that may be giving its GPUs back right now)
    ledger = ledger_at(tmp_path)
    listing = {"running": (gpu_uuid(0),), "created": (gpu_uuid(1),)}
    # When reconcile may adopt only the running one
    report = ledger.reconcile(HOST, listing, adoptable={"running"})
    # Then only that one is leased again
    assert [lease.container for lease in report.releases] == ["running"]
    assert ledger.for_container(HOST, "created") is None
