"""Pod listings kept by one LIST and a WATCH (``c.KubernetesHosts.watch``): at the seam of
the cluster object, and through the real ``kubernetes`` client against the API server of
``tests/k8s_api.py``, whose watch streams the changes it sees in its pods (no control plane
can run here)."""

from __future__ import annotations

import json
import logging
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from jupyter_gpudev.access import Caller
from jupyter_gpudev.containers import DevContainers, StartRequest
from jupyter_gpudev.engine import clusterwatch
from jupyter_gpudev.engine.cluster import cluster_of
from jupyter_gpudev.engine.clusterwatch import WatchedPods
from jupyter_gpudev.errors import EngineUnreachable
from jupyter_gpudev.labels import K_MANAGED
from tests.k8s_api import FakeCluster, cluster_manager

LOG = logging.getLogger("test")
ADMIN = Caller("admin", admin=True)


def eventually(check: Callable[[], bool], seconds: float = 5.0) -> None:
    deadline = time.monotonic() + seconds
    while not check():
        assert time.monotonic() < deadline, "the listing never showed the change"
        time.sleep(0.02)


def pod(uid: str, version: int) -> dict[str, Any]:
    return {"metadata": {"uid": uid, "name": uid, "resourceVersion": str(version)}}


class Response:
    """A watch response whose body is ``lines``, then the end of the stream (or it stays
    open until closed, with ``hold``)."""

    def __init__(self, lines: list[bytes], hold: bool = False) -> None:
        self.lines = lines
        self.closed = threading.Event()
        self.hold = hold

    def stream(self, _size: int) -> Iterator[bytes]:
        yield from self.lines
        if self.hold:
            self.closed.wait(10)

    def release_conn(self) -> None:
        pass

    def close(self) -> None:
        self.closed.set()


class Cluster:
    """A cluster object at the seam: LIST answers ``items`` at ``version``; each watch
    answers the next of ``watches``."""

    def __init__(self, items: list[dict[str, Any]], watches: list[Response | Exception]) -> None:
        self.items = items
        self.version = 10
        self.watches = watches
        self.asked: list[str] = []

    def request(self, *_: Any, **__: Any) -> dict[str, Any]:
        return {"metadata": {"resourceVersion": str(self.version)}, "items": list(self.items)}

    def open_watch(self, *where: str, **_: Any) -> Any:
        self.asked.append(where[-1])  # the version it watches from
        answer = self.watches.pop(0) if self.watches else Response([], hold=True)
        if isinstance(answer, Exception):
            raise answer
        return answer


def event(kind: str, item: dict[str, Any]) -> bytes:
    return json.dumps({"type": kind, "object": item}).encode() + b"\n"


def uids(listing: WatchedPods) -> list[str]:
    return sorted(p["metadata"]["uid"] for p in listing.items())


def test_listings_follow_the_watch_from_the_lists_version_without_asking_again() -> None:
    # Given a LIST of one pod, then a watch that adds one (its line cut in two reads),
    # changes the first and deletes the second
    held = Response(
        [
            event("ADDED", pod("b", 11))[:10],
            event("ADDED", pod("b", 11))[10:] + event("MODIFIED", pod("a", 12)),
            event("DELETED", pod("b", 13)),
        ],
        hold=True,
    )
    cluster = Cluster([pod("a", 9)], [held])
    listing = WatchedPods(cluster, "/api/v1/namespaces/ns/pods", "managed=1", LOG)
    assert uids(listing) == ["a"]
    # When the watch has said so, then listings answer from it: no other LIST
    eventually(lambda: [p["metadata"]["resourceVersion"] for p in listing.items()] == ["12"])
    assert uids(listing) == ["a"]
    assert listing.lists == 1
    assert cluster.asked == ["10"]  # from the LIST's version: nothing in between is missed
    # When gpudev itself writes, then the next listing asks again (and watches from there)
    listing.stale()
    assert held.closed.is_set()
    cluster.version = 20
    listing.items()
    assert listing.lists == 2
    eventually(lambda: cluster.asked == ["10", "20"])
    listing.close()


def test_a_list_overtaken_by_a_write_of_ours_is_not_kept() -> None:
    # Given a LIST during which this server writes a pod (its answer may predate the write)
    cluster = Cluster([pod("a", 9)], [])
    listing = WatchedPods(cluster, "/api/v1/namespaces/ns/pods", "managed=1", LOG)
    asked = cluster.request

    def written_meanwhile(*args: Any, **kwargs: Any) -> dict[str, Any]:
        answer = asked(*args, **kwargs)
        listing.stale()
        return answer

    cluster.request = written_meanwhile  # type: ignore[method-assign]
    listing.items()
    # Then its answer is not kept, no watch starts from it, and the next listing asks again
    cluster.request = asked  # type: ignore[method-assign]
    listing.items()
    assert listing.lists == 2
    assert cluster.asked == ["10"]  # only the second LIST's watch
    listing.close()


def test_polls_during_a_list_wait_for_it_and_share_its_answer() -> None:
    # Given a LIST that takes a while
    cluster = Cluster([pod("a", 9)], [])
    listing = WatchedPods(cluster, "/api/v1/namespaces/ns/pods", "managed=1", LOG)
    asked = cluster.request

    def slow(*args: Any, **kwargs: Any) -> dict[str, Any]:
        time.sleep(0.2)
        return asked(*args, **kwargs)

    cluster.request = slow  # type: ignore[method-assign]
    # When eight panels poll at once, then the cluster is listed once
    polls = [threading.Thread(target=listing.items) for _ in range(8)]
    for poll in polls:
        poll.start()
    for poll in polls:
        poll.join()
    assert listing.lists == 1
    listing.close()


@pytest.mark.parametrize(
    "answer",
    [
        Response([json.dumps({"type": "ERROR", "object": {"code": 410}}).encode() + b"\n"]),
        Response([b"not json\n"], hold=True),
        Response([b"[1, 2]\n"], hold=True),
        Response([b"x" * (clusterwatch.MAX_EVENT + 1)], hold=True),
        Response([]),  # ended long before its time
        EngineUnreachable("the API server did not answer"),
    ],
)
def test_without_a_watch_every_listing_asks_the_cluster(
    answer: Response | Exception, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Given a watch that the server ends with 410 Gone, that says something that is not an
    # event, that ends at once, or that cannot be opened (another is tried after 0.5 s here)
    monkeypatch.setattr(clusterwatch, "WATCH_RETRY", 0.5)
    cluster = Cluster([pod("a", 9)], [answer])
    listing = WatchedPods(cluster, "/api/v1/namespaces/ns/pods", "managed=1", LOG)
    listing.items()
    # Then nothing kept is trusted: listings LIST, and no other watch is tried at once
    eventually(lambda: (listing.items(), listing.lists)[1] >= 2)
    listing.items()
    assert cluster.asked == ["10"]
    # And after the pause, a LIST opens a watch again, which holds: no more LISTs
    eventually(lambda: (listing.items(), cluster.asked)[1] == ["10", "10"])
    lists = listing.lists
    listing.items()
    assert listing.lists == lists
    listing.close()
    listing.items()  # closed: a LIST, and no watch
    assert (listing.lists, cluster.asked) == (lists + 1, ["10", "10"])


def test_a_watch_ended_in_time_is_made_again_from_the_last_version(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # Given watches that the API server ends after their time (short here)
    monkeypatch.setattr(clusterwatch, "WATCH_SECONDS", 0)
    first = Response([event("MODIFIED", pod("a", 15))])
    cluster = Cluster([pod("a", 9)], [first])
    listing = WatchedPods(cluster, "/api/v1/namespaces/ns/pods", "managed=1", LOG)
    listing.items()
    # Then the next one starts from the last version seen, and no LIST is made
    eventually(lambda: cluster.asked[:2] == ["10", "15"])
    assert listing.lists == 1
    listing.close()


# -- through the API server stand-in, two servers on one cluster -----------------------------


@pytest.fixture
def watching(
    cluster: FakeCluster, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> Iterator[DevContainers]:
    (tmp_path / "a").mkdir()
    with cluster_manager(cluster, tmp_path / "a", monkeypatch, pod_watch=True) as made:
        yield made


def names(manager: DevContainers) -> list[str]:
    return [i.name for i in manager.list(caller=ADMIN)]


def test_a_server_lists_from_its_watch_what_another_server_did(
    watching: DevContainers,
    cluster: FakeCluster,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # Given a server that watches the cluster's pods, listed once
    assert names(watching) == []
    host = cluster_of(watching.host_pool.get("cluster"))
    assert host is not None
    listing = host.watched("v1", "Pod", f"{K_MANAGED}=1")
    for _ in range(3):
        assert names(watching) == []
    assert listing.lists == 1
    # When another server starts a pod on that cluster and later removes it
    (tmp_path / "b").mkdir()
    with cluster_manager(cluster, tmp_path / "b", monkeypatch) as other:
        other.start(StartRequest("default", host="cluster", name="theirs"), caller=Caller("bob"))
        # Then the watching server's listings show it running, then gone, without a LIST
        eventually(lambda: names(watching) == ["theirs"])
        assert [i.state for i in watching.list(caller=ADMIN)] == ["running"]
        other.remove("theirs", "cluster", force=True, caller=Caller("bob"))
        eventually(lambda: names(watching) == [])
    assert listing.lists == 1
    # When it starts a pod itself, then its next listing shows it at once (a LIST after its
    # own write)
    watching.start(StartRequest("default", host="cluster", name="mine"), caller=Caller("alice"))
    assert names(watching) == ["mine"]
    assert listing.lists == 2
