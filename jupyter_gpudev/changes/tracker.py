"""A dev container's uncommitted changes, for the container lifecycle.

``DevContainers`` keeps a stopped container with uncommitted changes until it is committed or
removed with ``force``, and shows how many changes each container has; what counts as a change
is the commit side's rule. ``ChangeTracker`` answers both for it (it fits
``containers.hooks.ChangeTracking``; ``services.Services`` wires it), and keeps the counts so
that listing stays cheap.
"""

from __future__ import annotations

import contextlib
import threading
import time
from collections.abc import Callable, Hashable
from concurrent.futures import Future, InvalidStateError, ThreadPoolExecutor
from dataclasses import dataclass, replace
from typing import Any

from docker.models.containers import Container

from ..containers import STOPPED, DevContainers, user_name
from ..engine import Host
from ..errors import ENGINE_FAILURES, GPUDevError, NotFound
from ..labels import L_HOST, L_NAME
from .baselines import Baseline, Baselines, uid_key
from .capture import ChangeCapture


@dataclass
class _Count:
    key: Hashable
    value: int
    computed_at: float
    read_at: float


class ChangeCounts:
    """The uncommitted-change count of each container, kept so that listing stays cheap.

    Counting reads the container's changed paths through its host's ``ChangeSource``: on a
    Docker engine, from the container's own layer where this server can read it (about a
    millisecond), else the engine's ``docker diff``, which walks the image's whole tree (most
    of a second on this project's test machine, however small the change, and the engine runs
    them one at a time).
    A count is kept per container id with the ``key`` it was computed under (the container's
    state and start/stop times, and its baseline): a stopped container's is reused until its key
    changes. A running one's, whose files change at any time, is fresh for ``RUNNING_TTL``
    seconds; after that it is still answered while one background thread counts it again, so a
    listing never waits for more than the containers it has never counted, and the engine runs
    one diff at a time for all of them. Requests for a count being computed wait for that
    computation instead of starting another. A failed count (``None``) is not kept; counts not
    read for ``FORGET_AFTER`` seconds (containers gone) are dropped.
    """

    RUNNING_TTL = 15.0
    FORGET_AFTER = 3600.0

    def __init__(self, clock: Callable[[], float] = time.monotonic) -> None:
        self._clock = clock
        self._entries: dict[str, _Count] = {}
        self._pending: dict[str, tuple[Hashable, Future[int | None]]] = {}
        self._lock = threading.Lock()
        self._refresher: ThreadPoolExecutor | None = None

    def _fresh(self, container_id: str, key: Hashable, running: bool, now: float) -> int | None:
        entry = self._entries.get(container_id)
        if entry is None or entry.key != key:
            return None
        if running and now - entry.computed_at >= self.RUNNING_TTL:
            return None
        entry.read_at = now
        return entry.value

    def peek(self, container_id: str, key: Hashable, running: bool) -> int | None:
        """The kept count if it still holds, else ``None``; never computes."""
        with self._lock:
            return self._fresh(container_id, key, running, self._clock())

    def count(
        self,
        container_id: str,
        key: Hashable,
        running: bool,
        compute: Callable[[], int | None],
        *,
        wait: bool = True,
    ) -> int | None:
        """The kept count if it still holds, else ``compute()`` (kept unless ``None``). A
        running container's count past its time is answered as is while it is counted again in
        the background. Without ``wait``, ``None`` where a count would have to be waited for
        (nothing kept for this state): nothing is computed."""
        with self._lock:
            now = self._clock()
            hit = self._fresh(container_id, key, running, now)
            if hit is not None:
                return hit
            entry = self._entries.get(container_id)
            stale = entry.value if entry is not None and entry.key == key else None
            if stale is None and not wait:
                return None
            if entry is not None and stale is not None:
                entry.read_at = now
            pending = self._pending.get(container_id)
            shared = pending is not None and pending[0] == key
            future: Future[int | None] = pending[1] if pending is not None and shared else Future()
            if not shared:
                self._pending[container_id] = (key, future)
                if stale is not None:
                    if self._refresher is None:
                        self._refresher = ThreadPoolExecutor(1, "gpudev-change-count")
                    self._refresher.submit(self._compute, container_id, key, future, compute)
        if stale is not None:
            return stale
        if shared:
            return future.result()  # another request is computing it: wait for that
        return self._compute(container_id, key, future, compute)

    def wait(self) -> None:
        """Wait for the counts being computed (tests)."""
        with self._lock:
            futures = [future for _, future in self._pending.values()]
        for future in futures:
            future.result()

    def _compute(
        self,
        container_id: str,
        key: Hashable,
        future: Future[int | None],
        compute: Callable[[], int | None],
    ) -> int | None:
        value: int | None = None
        try:
            value = compute()
        finally:
            with self._lock:
                now = self._clock()
                if value is not None:
                    self._entries[container_id] = _Count(key, value, now, now)
                if self._pending.get(container_id, (None, None))[1] is future:
                    del self._pending[container_id]
                for stale in [
                    cid for cid, e in self._entries.items() if now - e.read_at > self.FORGET_AFTER
                ]:
                    del self._entries[stale]
            with contextlib.suppress(InvalidStateError):  # ``close`` answered it already
                future.set_result(value)
        return value

    def forget(self, container_id: str) -> None:
        with self._lock:
            self._entries.pop(container_id, None)

    def close(self) -> None:
        """Drop the recounts not begun (the server is stopping: a queue of ``docker diff``
        runs must not hold its exit); whoever waits for one gets ``None``."""
        with self._lock:
            refresher, self._refresher = self._refresher, None
            waiting = [future for _, future in self._pending.values()]
        if refresher is not None:
            refresher.shutdown(wait=False, cancel_futures=True)
        for future in waiting:
            with contextlib.suppress(InvalidStateError):
                future.set_result(None)


class ChangeTracker:
    """What a container's removal would lose and how many changes it has, for ``DevContainers``."""

    def __init__(self, capture: ChangeCapture) -> None:
        self.capture = capture
        self.containers: DevContainers = capture.containers
        #: The kept counts (see ``ChangeCounts``).
        self.counts = ChangeCounts()
        #: Per container id: the uncommitted changes (``model.uncommitted``) its change items
        #: were last counted for, and their number (see ``count``).
        self._item_counts: dict[str, tuple[tuple[str, ...], int]] = {}

    @property
    def baselines(self) -> Baselines:
        return self.capture.baselines

    def record_baseline(self, container: Container) -> None:
        """Its baseline, read by its host's ``ChangeSource`` (the host its ``L_HOST`` label
        names: the one that just started it); by the engine's diff where that host is not
        configured here."""
        host = self._host_of(container)
        if host is None:
            self.capture.record_baseline(container)
        else:
            self.capture.source(host).record_baseline(container)

    def _host_of(self, container: Container) -> Host | None:
        """The configured host ``container`` was created on (its ``L_HOST`` label), else
        ``None``."""
        name = container.labels.get(L_HOST)
        if not name:
            return None
        try:
            return self.containers.host_pool.get(name)
        except NotFound:
            return None

    def record_pod_baseline(self, host: Host, pod: dict[str, Any]) -> None:
        """A pod's baseline (its host's ``ChangeSource``'s ``record_baseline``)."""
        self.capture.source(host).record_baseline(pod)

    def forget_pod(self, uid: str) -> None:
        """Drop a deleted pod's baselines (kept under its uid, ``baselines.uid_key``)."""
        key = uid_key(uid)
        self.baselines.forget(key)
        self.baselines.forget_image(key)

    def close(self) -> None:
        self.counts.close()

    def forget(self, container_id: str) -> None:
        self.baselines.forget(container_id)
        self.counts.forget(container_id)
        self._item_counts.pop(container_id, None)

    def uncommitted(self, name: str, host: Host, container: Container) -> list[str]:
        """What removing ``container`` would lose: its changed files (less what the baseline
        and the engine account for) and the changes a commit left out that still exist."""
        return self.capture.source(host).uncommitted(container, name, self._prune_held)

    def uncommitted_pod(self, host: Host, pod: dict[str, Any]) -> list[str]:
        """What deleting a pod would lose (the rule ``uncommitted`` applies to a container;
        its host's ``ChangeSource`` reads it). A ``Conflict`` when its files were not listed
        when it started."""
        return self.capture.source(host).uncommitted(pod, "", self._prune_held)

    def _prune_held(self, name: str, host: str, container_id: str, baseline: Baseline) -> Baseline:
        """The baseline with only the left-out changes that still exist (one undone in the
        container since, e.g. a package removed again, is no longer uncommitted), saved.
        Kept as it is when the changes cannot be read."""
        try:
            current = {item.id for item in self.capture.capture(name, host).items}
        except GPUDevError as err:
            self.containers.log.warning("gpudev: left-out changes of %s not checked: %s", name, err)
            return baseline
        held = [change for change in baseline.held if change in current]
        if held != baseline.held:
            baseline = replace(baseline, held=held)
            self.baselines.save_container(container_id, baseline)
        return baseline

    def count(
        self, host: Host, container: Container, *, compute: bool, wait: bool = True
    ) -> int | None:
        """How many uncommitted changes ``container`` has, counted as the commit dialog and
        ``jupyter gpudev diff`` list them (one per package, file, deletion or variable: the
        capture's ``items``), so that a badge "N changes" names N things to review. The cheap
        rule ``remove`` applies (``model.uncommitted``, one entry per changed file) decides
        whether there is anything: none is 0 without a capture, and the items are counted
        again only when that list moved. Kept per state in ``counts``. ``None``: not counted
        (``compute`` off and nothing kept, or the engine failed)."""
        log = self.containers.log
        container_id = str(container.id)
        baseline = self.baselines.container(container_id)
        state = container.attrs.get("State", {})
        key = (
            state.get("Status"),
            state.get("StartedAt"),
            state.get("FinishedAt"),
            # commit --write moves the baseline forward (and records what it left out)
            baseline.fingerprint() if baseline else None,
        )
        running = str(state.get("Status", container.status)) not in STOPPED
        if not compute:
            return self.counts.peek(container_id, key, running)
        name = container.labels.get(L_NAME, user_name(container.name or ""))
        source = self.capture.source(host)

        def as_kept(_name: str, _host: str, _key: str, kept: Baseline) -> Baseline:
            """The baseline as kept: a count does not capture to prune the left-out changes
            (``_prune_held``; a removal does)."""
            return kept

        def count() -> int | None:
            try:
                changed = tuple(source.uncommitted(container, name, as_kept))
                if not changed:
                    return 0
                kept = self._item_counts.get(container_id)
                if kept is not None and kept[0] == changed:
                    return kept[1]
                # the container the listing found: not looked up again by its name
                items = len(source.capture(container, name, ()).items)
            except ENGINE_FAILURES as exc:
                log.warning("gpudev: changes of %s not counted: %r", container.name, exc)
                return None
            except GPUDevError as err:  # e.g. the host's connection dropped
                log.warning("gpudev: changes of %s not counted: %s", container.name, err)
                return None
            self._item_counts[container_id] = (changed, items)
            return items

        return self.counts.count(container_id, key, running, count, wait=wait)


def track_changes(containers: DevContainers) -> ChangeCapture:
    """Wire change capture into ``containers`` (what ``services.Services`` does; for code
    that builds a ``DevContainers`` on its own, e.g. tests and benchmarks)."""
    capture = ChangeCapture(containers)
    containers.changes = ChangeTracker(capture)
    return capture
