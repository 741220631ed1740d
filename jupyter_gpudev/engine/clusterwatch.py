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

from ..untrusted import as_dict, as_list

#: How long one watch request lasts before the API server ends it and it is made again (from
#: the last version seen): a connection dropped without a word is noticed within this (and
#: the read timeout's margin).
WATCH_SECONDS = 60
#: After a watch failed, listings LIST without trying another for this many seconds (a
#: cluster or proxy that refuses watches costs a LIST a listing, as without the option).
WATCH_RETRY = 30.0
#: At most this many objects are kept (as a LIST keeps: ``cluster.MAX_ITEMS``).
MAX_KEPT = 20_000
#: The longest watch event read (a pod is a few kilobytes; the API server's own limit on an
#: object is about 1.5 MiB).
MAX_EVENT = 4 << 20


class WatchedPods:
    """The objects a LIST of ``path`` with ``labels`` returns, kept by a WATCH (see the
    module's text). ``cluster`` is the host's ``Cluster``. Thread-safe; the watch is read by
    one daemon thread. What ``items`` returns is shared with the cache: read it, never
    change it."""

    def __init__(self, cluster: Any, path: str, labels: str, log: Any) -> None:
        self.cluster = cluster
        self.path = path
        self.labels = labels
        self.log = log
        self._lock = threading.Lock()
        #: One LIST at a time: polls that come meanwhile wait for it and use its answer.
        self._listing = threading.Lock()
        self._items: dict[str, dict[str, Any]] = {}
        #: Bumped by every LIST and ``stale``: a thread of an older one stops, and a LIST
        #: that a ``stale`` overtook is not kept.
        self._generation = 0
        self._live = False
        self._closed = False
        #: After a watch failed, none is tried again before this (``time.monotonic()``).
        self._retry_at = 0.0
        self._response: Any = None
        #: LIST requests made (tests and benchmarks read it).
        self.lists = 0

    def items(self) -> list[dict[str, Any]]:
        """The objects, from what the watch keeps while it is open, else by a LIST (which
        opens a watch from its version, unless one failed in the last ``WATCH_RETRY``
        seconds)."""
        kept = self._kept()
        if kept is not None:
            return kept
        with self._listing:
            with self._lock:
                if self._live:  # listed by the poll this one waited for
                    return list(self._items.values())
                before = self._generation
            answer = self.cluster.request("GET", self.path, query=(("labelSelector", self.labels),))
            answer = as_dict(answer)
            found = [i for i in as_list(answer.get("items"))[:MAX_KEPT] if isinstance(i, dict)]
            version = str(as_dict(answer.get("metadata")).get("resourceVersion") or "")
            with self._lock:
                self.lists += 1
                watch = (
                    bool(version)
                    and not self._closed
                    and before == self._generation  # no write of ours since it was sent
                    and time.monotonic() >= self._retry_at
                )
                if not watch:
                    return found
                self._generation += 1
                generation = self._generation
                self._items = {_uid(i): i for i in found if _uid(i)}
                self._live = True
                old, self._response = self._response, None
        _close(old)
        threading.Thread(
            target=self._follow,
            args=(generation, version),
            name="gpudev-pod-watch",
            daemon=True,
        ).start()
        return found

    def _kept(self) -> list[dict[str, Any]] | None:
        """What the open watch keeps; ``None`` while none is open."""
        with self._lock:
            return list(self._items.values()) if self._live else None

    def stale(self) -> None:
        """Ask the cluster again at the next listing (after gpudev's own write)."""
        with self._lock:
            self._generation += 1
            self._live = False
            old, self._response = self._response, None
        _close(old)

    def close(self) -> None:
        """Stop watching for good: listings are a LIST each from now on."""
        with self._lock:
            self._closed = True
        self.stale()

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
            except Exception as exc:  # refused, unreachable, TLS...: trust nothing kept
                message = getattr(exc, "message", None) or repr(exc)
                self.log.info("gpudev: pod watch of %s: %s", self.path, message)
                self._end(generation, failed=True)
                return
            with self._lock:
                current = generation == self._generation
                if current:
                    self._response = response
            if not current:
                _close(response)
                return
            try:
                for event in _events(response):
                    applied = self._apply(generation, event)
                    if applied is None:  # 410 Gone, a bad event: the next listing LISTs
                        self._end(generation, failed=True)
                        return
                    version = applied or version
            except Exception as exc:  # any end of the stream: trust nothing kept
                self.log.info("gpudev: pod watch of %s ended: %r", self.path, exc)
                self._end(generation, failed=True)
                return
            finally:
                _close(response)
            if time.monotonic() - opened < WATCH_SECONDS / 2:
                # Ended long before its time (an API server going away): not made again at
                # once, in a loop; the next listing LISTs.
                self.log.info("gpudev: pod watch of %s ended early", self.path)
                self._end(generation, failed=True)
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
        version = str(as_dict(item.get("metadata")).get("resourceVersion") or "")
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

    def _end(self, generation: int, *, failed: bool) -> None:
        with self._lock:
            if generation == self._generation:
                self._live = False
                self._response = None
                if failed:
                    self._retry_at = time.monotonic() + WATCH_RETRY


def _events(response: Any) -> Iterator[dict[str, Any]]:
    """The JSON events of a watch response, one a line."""
    pending = bytearray()
    for chunk in response.stream(1 << 14):
        scanned = len(pending)  # no newline before: only the new bytes are searched
        pending += chunk
        end = pending.find(b"\n", scanned)
        while end >= 0:
            line = bytes(pending[:end])
            del pending[: end + 1]
            if line.strip():
                event = json.loads(line)
                if not isinstance(event, dict):
                    raise ValueError("a watch event is not an object")
                yield event
            end = pending.find(b"\n")
        if len(pending) > MAX_EVENT:
            raise ValueError("a watch event is too large")


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
    return str(as_dict(item.get("metadata")).get("uid") or "")


def _socket_of(response: Any) -> Any:
    """The socket a urllib3 response reads from: its connection's while it holds one, else
    the one http.client handed to the response (a connection that closes after it)."""
    sock = getattr(getattr(response, "connection", None), "sock", None)
    if sock is None:
        raw = getattr(getattr(getattr(response, "_fp", None), "fp", None), "raw", None)
        sock = getattr(raw, "_sock", None)
    return sock
