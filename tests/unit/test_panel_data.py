"""What the panel and the notebook toolbar read: the kernel registry, the change-count cache,
engine times and the leases of a host (no server, no engine)."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

import pytest

from jupyter_gpudev.changes.baselines import Baseline, Baselines
from jupyter_gpudev.changes.model import PackageState
from jupyter_gpudev.changes.tracker import ChangeCounts
from jupyter_gpudev.containers import engine_time
from jupyter_gpudev.engine import HostInfo
from jupyter_gpudev.kernels.live import KernelPlacement, KernelRegistry
from jupyter_gpudev.leasing import Lease

T0 = datetime(2026, 11, 21, 16, 3, 9, tzinfo=timezone.utc)


# -- the kernel registry ----------------------------------------------------------------------


@dataclass
class Kernel:
    last_activity: Any


@dataclass
class KernelManager:
    """The part of a MultiKernelManager the registry reads."""

    kernels: dict[str, Kernel] = field(default_factory=dict)
    _pending_kernels: dict[str, object] = field(default_factory=dict)

    def __contains__(self, kernel_id: str) -> bool:
        return kernel_id in self.kernels

    def get_kernel(self, kernel_id: str) -> Kernel:
        return self.kernels[kernel_id]


def at(seconds: float) -> datetime:
    return datetime.fromtimestamp(T0.timestamp() + seconds, tz=timezone.utc)


def placed(kernel_id: str, container: str = "box", dedicated: bool = False) -> KernelPlacement:
    return KernelPlacement(kernel_id, "local", container, dedicated)


def test_a_container_counts_its_live_kernels_and_their_latest_activity() -> None:
    # Given two kernels in a shared container and one in a container of its own
    km = KernelManager({"a": Kernel(at(10)), "b": Kernel(at(30)), "c": Kernel(at(50))})
    registry = KernelRegistry(km)
    registry.add(placed("a"))
    registry.add(placed("b"))
    registry.add(placed("c", "kernel-c", dedicated=True))
    # Then each container has its own kernels, with the latest activity among them
    usage = registry.usage("local", "box")
    assert (usage.count, usage.last_activity) == (2, at(30))
    assert registry.usage("local", "kernel-c").count == 1
    # And another host's container of the same name has none
    assert registry.usage("remote", "box").count == 0
    assert registry.usage("local", "other").last_activity is None


def test_an_ended_kernel_no_longer_counts() -> None:
    # Given a kernel in a container
    km = KernelManager({"a": Kernel(at(0))})
    registry = KernelRegistry(km)
    registry.add(placed("a"))
    # When its provisioner cleans up
    registry.remove("a")
    registry.remove("a")  # and again: nothing happens
    # Then the container has no kernel
    assert registry.usage("local", "box").count == 0
    assert registry.get("a") is None


def test_a_kernel_the_server_dropped_without_cleanup_is_forgotten() -> None:
    # Given a registered kernel that the server no longer has (it died for good)
    km = KernelManager({"a": Kernel(at(0))})
    registry = KernelRegistry(km)
    registry.add(placed("a"))
    del km.kernels["a"]
    # Then it is not counted, not found, and not a kernel of the server
    assert registry.usage("local", "box").count == 0
    assert registry.get("a") is None
    assert registry.exists("a") is False


def test_a_starting_kernel_counts_without_activity() -> None:
    # Given a kernel still starting (in the manager's pending map, no last_activity yet)
    km = KernelManager(_pending_kernels={"a": object()})
    registry = KernelRegistry(km)
    registry.add(placed("a"))
    # Then it counts, with no activity known
    usage = registry.usage("local", "box")
    assert (usage.count, usage.last_activity) == (1, None)
    placement = registry.get("a")
    assert placement is not None
    assert placement.container == "box"


def test_a_plain_kernel_exists_but_has_no_placement() -> None:
    # Given the server has a local (non-gpudev) kernel
    registry = KernelRegistry(KernelManager({"plain": Kernel(at(0))}))
    # Then it exists, but runs in no container
    assert registry.exists("plain") is True
    assert registry.get("plain") is None
    assert registry.exists("nope") is False


def test_without_a_kernel_manager_every_registered_kernel_counts() -> None:
    registry = KernelRegistry()
    registry.add(placed("a"))
    assert registry.usage("local", "box").count == 1
    assert registry.usage("local", "box").last_activity is None
    assert registry.exists("a") is True
    assert registry.exists("b") is False


# -- the change-count cache -------------------------------------------------------------------


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


class Counter:
    """A count that says how often it was computed."""

    def __init__(self, value: int | None) -> None:
        self.value = value
        self.calls = 0

    def __call__(self) -> int | None:
        self.calls += 1
        return self.value


@pytest.fixture
def clock() -> Clock:
    return Clock()


def test_a_running_containers_count_is_reused_for_at_most_the_ttl(clock: Clock) -> None:
    # Given a running container's count was computed
    cache = ChangeCounts(clock)
    counter = Counter(0)
    assert cache.count("id", "key", True, counter) == 0
    # When it is asked again within the TTL, it is not computed again
    clock.now += ChangeCounts.RUNNING_TTL - 0.1
    counter.value = 3
    assert cache.count("id", "key", True, counter) == 0
    assert cache.peek("id", "key", True) == 0
    assert counter.calls == 1
    # When the TTL has passed, the kept count is answered while it is counted again
    clock.now += 0.2
    assert cache.peek("id", "key", True) is None
    assert cache.count("id", "key", True, counter) == 0
    cache.wait()
    assert counter.calls == 2
    # Then the next answer is the new count, fresh again
    assert cache.count("id", "key", True, counter) == 3
    assert counter.calls == 2


def test_a_stopped_containers_count_holds_until_its_state_changes(clock: Clock) -> None:
    # Given a stopped container's count
    cache = ChangeCounts(clock)
    counter = Counter(2)
    stopped = ("exited", "t1", "t2")
    assert cache.count("id", stopped, False, counter) == 2
    # Then it holds however long after
    clock.now += 10 * ChangeCounts.RUNNING_TTL
    assert cache.count("id", stopped, False, counter) == 2
    assert counter.calls == 1
    # When it was started and stopped again (another key), it is computed again
    counter.value = 5
    assert cache.peek("id", ("exited", "t3", "t4"), False) is None
    assert cache.count("id", ("exited", "t3", "t4"), False, counter) == 5
    assert counter.calls == 2
    # And forgetting it drops it
    cache.forget("id")
    assert cache.peek("id", ("exited", "t3", "t4"), False) is None


def test_a_listing_that_does_not_wait_never_computes_and_answers_what_is_kept(
    clock: Clock,
) -> None:
    # Given a container never counted
    cache = ChangeCounts(clock)
    counter = Counter(4)
    # Then a listing that does not wait gets no count, and nothing is computed
    assert cache.count("id", "key", True, counter, wait=False) is None
    assert counter.calls == 0
    # When it was counted once and its time passed
    assert cache.count("id", "key", True, counter) == 4
    clock.now += ChangeCounts.RUNNING_TTL + 1
    counter.value = 6
    # Then the kept count is answered at once, counted again in the background
    assert cache.count("id", "key", True, counter, wait=False) == 4
    cache.wait()
    assert counter.calls == 2
    assert cache.count("id", "key", True, counter, wait=False) == 6
    # And a count kept for another state is not answered (that would be wrong, not stale)
    assert cache.count("id", "other", True, counter, wait=False) is None
    assert counter.calls == 2


def test_a_container_baseline_is_parsed_once_until_its_file_changes(tmp_path: Path) -> None:
    baselines = Baselines(tmp_path)
    packages = PackageState(dpkg={"bash": "5.2"})
    baselines.save_container("abc123", Baseline(packages, None, {"/etc/x": 1}))
    first = baselines.container("abc123")
    # Read again, unchanged: the same object, not parsed again
    assert baselines.container("abc123") is first
    # Saved again: the new content
    baselines.save_container("abc123", Baseline(packages, None, {"/etc/x": 1, "/etc/y": 1}))
    second = baselines.container("abc123")
    assert second is not None
    assert second.files == {"/etc/x": 1, "/etc/y": 1}
    # Forgotten: none
    baselines.forget("abc123")
    assert baselines.container("abc123") is None


def test_a_failed_count_is_not_kept(clock: Clock) -> None:
    cache = ChangeCounts(clock)
    failing = Counter(None)
    assert cache.count("id", "key", False, failing) is None
    assert cache.count("id", "key", False, failing) is None
    assert failing.calls == 2


def test_counts_not_read_for_long_are_dropped(clock: Clock) -> None:
    # Given a count of a container that then disappears
    cache = ChangeCounts(clock)
    cache.count("gone", "key", False, Counter(1))
    # When another count is made long after
    clock.now += ChangeCounts.FORGET_AFTER + 1
    cache.count("other", "key", False, Counter(1))
    # Then the old one is gone
    assert cache.peek("gone", "key", False) is None
    assert cache.peek("other", "key", False) == 1


def test_concurrent_requests_share_one_computation(clock: Clock) -> None:
    # Given a slow count being computed
    cache = ChangeCounts(clock)
    started, release = threading.Event(), threading.Event()
    calls: list[int] = []

    def slow() -> int | None:
        calls.append(1)
        started.set()
        release.wait(10)
        return None  # a failed count is not kept: a request after it would count again

    results: list[int | None] = []
    first = threading.Thread(target=lambda: results.append(cache.count("id", "k", True, slow)))
    first.start()
    assert started.wait(10)
    # When a second request for it comes meanwhile (given time to reach the cache)
    second = threading.Thread(target=lambda: results.append(cache.count("id", "k", True, slow)))
    second.start()
    time.sleep(0.3)
    release.set()
    first.join(10)
    second.join(10)
    # Then both get the one answer, computed once (not kept, so not a later cache hit)
    assert results == [None, None]
    assert calls == [1]


def test_closing_drops_the_queued_recounts_and_answers_their_waiters(clock: Clock) -> None:
    # Given two running containers whose kept counts are past their time
    cache = ChangeCounts(clock)
    for container in ("a", "b"):
        cache.count(container, "k", True, Counter(1))
    clock.now += ChangeCounts.RUNNING_TTL + 1
    started, release = threading.Event(), threading.Event()
    calls: list[str] = []

    def slow(name: str) -> Callable[[], int | None]:
        def count() -> int | None:
            calls.append(name)
            started.set()
            release.wait(10)
            return 2

        return count

    # When both are recounted in the background (one at a time: b waits behind a)
    assert cache.count("a", "k", True, slow("a")) == 1
    assert cache.count("b", "k", True, slow("b")) == 1
    assert started.wait(10)
    # And the server stops meanwhile
    cache.close()
    release.set()
    # Then the queued recount never runs, and nobody waits for it
    cache.wait()
    assert calls == ["a"]


# -- engine times -----------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("2026-11-21T16:03:09.123456789Z", "2026-11-21T16:03:09Z"),
        ("2026-11-21T16:03:09Z", "2026-11-21T16:03:09Z"),
        ("2026-11-21T18:03:09.5+02:00", "2026-11-21T16:03:09Z"),
        ("0001-01-01T00:00:00Z", None),
        ("", None),
        (None, None),
        ("yesterday", None),
        ("2026-13-45T16:03:09Z", None),
    ],
)
def test_engine_times_become_iso_utc_to_the_second(text: Any, expected: str | None) -> None:
    assert engine_time(text) == expected


# -- the leases of a host ---------------------------------------------------------------------


def test_a_host_reports_who_holds_its_gpus_and_nothing_else_of_the_lease() -> None:
    # Given a host with one active lease
    lease = Lease(
        lease_id="abc",
        host="local",
        container="box",
        owner="ada",
        gpu_uuids=("GPU-1", "GPU-2"),
        created_at=T0.timestamp(),
    )
    info = HostInfo(
        name="local", url="u", transport="local", is_local=True, reachable=True, leases=(lease,)
    )
    # Then its JSON lists the lease's holder, GPUs and since when, and no other field
    assert info.to_json()["leases"] == [
        {
            "lease_id": "abc",
            "container": "box",
            "owner": "ada",
            "gpu_uuids": ["GPU-1", "GPU-2"],
            "since": "2026-11-21T16:03:09Z",
        }
    ]
    # And a host without leases has an empty list
    down = HostInfo(name="b", url="v", transport="tcp", is_local=False, reachable=False)
    assert down.to_json()["leases"] == []
