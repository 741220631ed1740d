"""The pods of one cluster kept by one LIST and a WATCH, so that listings ask nothing.

Without it, every listing of a Kubernetes host (``jupyter gpudev ls``, each panel's poll every
5 s) is a LIST of the namespace's dev container pods: fine for one user, 200 LISTs a second for
1,000 panels. ``WatchedPods`` answers listings from what one LIST returned, kept current by the
WATCH that starts at that LIST's resource version (the API server then sends every later
change: added, modified, deleted). It is as the engine's event stream is for Docker hosts
(``engine/watch.py``): while no watch is open (the first listing, after the watch broke or
the server said its version is too old, 410 Gone) a listing is a LIST again, so what is
answered is never older than the cluster's word. gpudev's own writes (a pod started or deleted
by this server) make the next listing a LIST too (``stale``): a user sees at once what they did.
"""

from __future__ import annotations

import contextlib
import json
import socket
import threading
import time
from collections.abc import Iterator
from typing import Any

from ..errors import GPUDevError

#: How long one watch request lasts before the API server ends it and it is made again (from
#: the last version seen): a connection that went quiet without closing is noticed then.
WATCH_SECONDS = 300
#: At most this many objects are kept (as for a LIST: ``cluster.MAX_ITEMS``).
MAX_KEPT = 10_000
#: The longest watch event read (a pod is a few kilobytes; the API server's own limit on an
#: object is about 1.5 MiB).
MAX_EVENT = 4 << 20


class WatchedPods:
    """The objects a LIST of ``path`` with ``labels`` returns, kept by a WATCH (see the
    module's text). ``cluster`` is the host's ``Cluster``. Thread-safe; the watch is read by
    one daemon thread."""

    def __init__(self, cluster: Any, path: str, labels: str, log: Any) -> None:
        self.cluster = cluster
        self.path = path
        self.labels = labels
        self.log = log
        self._lock = threading.Lock()
        self._items: dict[str, dict[str, Any]] = {}
        #: Bumped by every LIST and ``stale``: a thread of an older one stops.
        self._generation = 0
        self._live = False
        self._response: Any = None
        #: LIST requests made (tests and benchmarks read it).
        self.lists = 0

    def items(self) -> list[dict[str, Any]]:
        """The objects, from what the watch keeps while it is open, else by a LIST (which
        opens a watch from its version)."""
        with self._lock:
            if self._live:
                return list(self._items.values())
        answer = self.cluster.request("GET", self.path, query=(("labelSelector", self.labels),))
        answer = answer if isinstance(answer, dict) else {}
        found = [i for i in _list(answer.get("items"))[:MAX_KEPT] if isinstance(i, dict)]
        version = str(_dict(answer.get("metadata")).get("resourceVersion") or "")
        with self._lock:
            self.lists += 1
            self._generation += 1
            generation = self._generation
            self._items = {_uid(i): i for i in found if _uid(i)}
            self._live = bool(version)
            old, self._response = self._response, None
        _close(old)
        if version:
            threading.Thread(
                target=self._follow,
                args=(generation, version),
                name="gpudev-pod-watch",
                daemon=True,
            ).start()
        return found

    def stale(self) -> None:
        """Ask the cluster again at the next listing (after gpudev's own write)."""
        with self._lock:
            self._generation += 1
            self._live = False
            old, self._response = self._response, None
        _close(old)

    close = stale

    # -- the watch ------------------------------------------------------------------------

    def _follow(self, generation: int, version: str) -> None:
        """Follow the watch from ``version`` while ``generation`` is the current one; a watch
        the server ended in time is made again from the last version seen."""
        while True:
            opened = time.monotonic()
            try:
                response = self.cluster.open_watch(
                    self.path, self.labels, version, timeout_seconds=WATCH_SECONDS
                )
            except GPUDevError as err:
                self.log.info("gpudev: pod watch of %s: %s", self.path, err.message)
                self._end(generation)
                return
            with self._lock:
                if generation != self._generation:
                    current = False
                else:
                    current = True
                    self._response = response
            if not current:
                _close(response)
                return
            try:
                for event in _events(response):
                    applied = self._apply(generation, event)
                    if applied is None:
                        self._end(generation)  # 410 Gone, a bad event: the next listing LISTs
                        return
                    version = applied or version
            except Exception as exc:  # any end of the stream: trust nothing kept
                self.log.info("gpudev: pod watch of %s ended: %r", self.path, exc)
                self._end(generation)
                return
            finally:
                _close(response)
            if time.monotonic() - opened < WATCH_SECONDS / 2:
                # Ended long before its time (an API server going away): not made again at
                # once, in a loop; the next listing LISTs.
                self.log.info("gpudev: pod watch of %s ended early", self.path)
                self._end(generation)
                return
            with self._lock:
                if generation != self._generation:
                    return

    def _apply(self, generation: int, event: dict[str, Any]) -> str | None:
        """Apply one watch event: the version it carries ('' for none); ``None`` when the
        watch must end (an ERROR, such as 410 Gone, or an event that is not one)."""
        kind = event.get("type")
        item = event.get("object")
        if kind == "ERROR" or not isinstance(item, dict):
            self.log.info("gpudev: pod watch of %s: %s", self.path, str(event)[:200])
            return None
        version = str(_dict(item.get("metadata")).get("resourceVersion") or "")
        uid = _uid(item)
        with self._lock:
            if generation != self._generation:
                return version
            if kind in ("ADDED", "MODIFIED") and uid:
                if uid in self._items or len(self._items) < MAX_KEPT:
                    self._items[uid] = item
            elif kind == "DELETED" and uid:
                self._items.pop(uid, None)
        return version

    def _end(self, generation: int) -> None:
        with self._lock:
            if generation == self._generation:
                self._live = False
                self._response = None


def _events(response: Any) -> Iterator[dict[str, Any]]:
    """The JSON events of a watch response, one a line."""
    pending = b""
    for chunk in response.stream(1 << 14):
        pending += chunk
        if len(pending) > MAX_EVENT:
            raise ValueError("a watch event is too large")
        *lines, pending = pending.split(b"\n")
        for line in lines:
            if line.strip():
                event = json.loads(line)
                if not isinstance(event, dict):
                    raise ValueError("a watch event is not an object")
                yield event


def _close(response: Any) -> None:
    """End a watch response, also while another thread is blocked reading it: its socket is
    shut down first (closing the response alone would wait for that reader's lock, for as
    long as the watch stays quiet)."""
    if response is None:
        return
    sock = _socket_of(response)
    if sock is not None:
        with contextlib.suppress(OSError):
            sock.shutdown(socket.SHUT_RDWR)
    with contextlib.suppress(Exception):
        response.close()


def _uid(item: dict[str, Any]) -> str:
    return str(_dict(item.get("metadata")).get("uid") or "")


def _dict(value: Any) -> dict[str, Any]:
    return value if isinstance(value, dict) else {}


def _list(value: Any) -> list[Any]:
    return value if isinstance(value, list) else []


def _socket_of(response: Any) -> Any:
    """The socket a urllib3 response reads from: its connection's while it holds one, else
    the one http.client handed to the response (a connection that closes after it)."""
    sock = getattr(getattr(response, "connection", None), "sock", None)
    if sock is None:
        raw = getattr(getattr(getattr(response, "_fp", None), "fp", None), "raw", None)
        sock = getattr(raw, "_sock", None)
    return sock
