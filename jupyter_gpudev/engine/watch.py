"""What one engine's labelled containers look like, kept between listings.

Listing containers through docker-py's ``containers.list`` inspects each one: one request per
container per listing, and an inspect waits for the container's lock, which a ``docker diff``
of it holds for most of a second. ``ContainerStates`` asks the engine for its list (one request,
answered from the engine's in-memory view, no container lock) and reuses each container's
inspect data until the engine's event stream says that container changed (started, stopped,
renamed, updated, removed...) or the list shows another state. While no stream is open (the
first listing, or after it broke) every container is inspected again, so what is answered is
never older than the stream's word.
"""

from __future__ import annotations

import contextlib
import threading
from collections import Counter
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any

import docker

#: Event actions after which a container's inspect data is read again (``exec_*``, archive
#: and attach events change nothing a listing shows). ``health_status: ...`` counts too.
CHANGING_ACTIONS = frozenset(
    {
        "create",
        "start",
        "restart",
        "die",
        "kill",
        "oom",
        "stop",
        "pause",
        "unpause",
        "rename",
        "update",
        "destroy",
    }
)


def changes_state(action: str) -> bool:
    """Whether a container event with this action may change what its inspect shows."""
    return action in CHANGING_ACTIONS or action.startswith("health_status")


@dataclass
class _Kept:
    attrs: dict[str, Any]
    state: str


class ContainerStates:
    """The inspect data of one engine's containers that carry ``label``, kept fresh by the
    engine's event stream (see the module's text). Thread-safe; the stream is read by one
    daemon thread, opened on the first listing and again after it ends."""

    #: At most this many containers are inspected at once.
    INSPECT_WORKERS = 8

    def __init__(self, label: str, log: Any) -> None:
        self.label = label
        self.log = log
        self._lock = threading.Lock()
        self._kept: dict[str, _Kept] = {}
        #: Bumped for a container when an event says it changed: an inspect begun before is
        #: not kept.
        self._generation: dict[str, int] = {}
        #: Bumped when the stream ends: everything inspected before is not kept.
        self._epoch = 0
        self._stream: Any = None
        self._watching = False
        #: Inspect requests made to the engine, by container id (tests read it).
        self.inspected: Counter[str] = Counter()

    # -- the stream -----------------------------------------------------------------------

    def _watch(self, client: docker.DockerClient) -> bool:
        """Open the event stream if none is open; whether one is open now. Once the engine
        has answered the request, every later event reaches the thread."""
        with self._lock:
            if self._watching:
                return True
        try:
            stream = client.api.events(
                filters={"type": ["container"], "label": [self.label]}, decode=True
            )
        except (docker.errors.DockerException, OSError) as exc:
            self.log.debug("gpudev: no container events from the engine: %r", exc)
            return False
        with self._lock:
            opened_meanwhile = self._stream is not None  # by another listing
            if not opened_meanwhile:
                self._watching = True
                self._stream = stream
        if opened_meanwhile:
            with contextlib.suppress(Exception):
                stream.close()
            return True
        thread = threading.Thread(
            target=self._follow, args=(stream,), name="gpudev-container-events", daemon=True
        )
        thread.start()
        return True

    def _follow(self, stream: Any) -> None:
        try:
            for event in _events(stream):
                container_id = str(event.get("id") or event.get("Actor", {}).get("ID") or "")
                action = str(event.get("Action") or event.get("status") or "")
                if not container_id or not changes_state(action):
                    continue
                if not self._changed(container_id, gone=action == "destroy", stream=stream):
                    break  # closed or replaced: its word is stale
        except Exception as exc:  # any end of the stream: trust nothing kept
            self.log.debug("gpudev: container event stream ended: %r", exc)
        finally:
            with self._lock:
                if self._stream is stream:
                    self._stream = None
                    self._watching = False
                    self._forget_all()

    def _forget_all(self) -> None:
        self._epoch += 1
        self._kept.clear()
        self._generation.clear()

    def changed(self, container_id: str, *, gone: bool = False) -> None:
        """Forget what is kept of one container (an event said it changed, or that it is
        ``gone``: its id never comes back)."""
        self._changed(container_id, gone=gone)

    def _changed(self, container_id: str, *, gone: bool, stream: Any = None) -> bool:
        """``changed``, when said by ``stream`` only while it is the open one (checked under
        the same lock); whether it was applied."""
        with self._lock:
            if stream is not None and self._stream is not stream:
                return False
            self._kept.pop(container_id, None)
            if gone:
                self._generation.pop(container_id, None)
                self.inspected.pop(container_id, None)
            else:
                self._generation[container_id] = self._generation.get(container_id, 0) + 1
            return True

    def close(self) -> None:
        """Stop following the engine (the host is closed); nothing kept is trusted after."""
        with self._lock:
            stream, self._stream = self._stream, None
            self._watching = False
            self._forget_all()
        if stream is not None:
            with contextlib.suppress(Exception):
                stream.close()

    # -- listing --------------------------------------------------------------------------

    def list(
        self, client: docker.DockerClient, *, all_states: bool, filters: dict[str, Any]
    ) -> list[dict[str, Any]]:
        """The inspect data of the containers the engine lists for ``filters`` (which must
        include this object's label), containers removed meanwhile left out."""
        trusted = self._watch(client)
        summaries = client.api.containers(all=all_states, filters=filters)
        found: dict[str, dict[str, Any] | None] = {}
        wanted: list[tuple[str, int, int]] = []  # (id, generation, epoch) to inspect
        with self._lock:
            for summary in summaries:
                container_id = str(summary.get("Id", ""))
                kept = self._kept.get(container_id) if trusted else None
                if kept is not None and kept.state == str(summary.get("State", "")):
                    found[container_id] = kept.attrs
                else:
                    found[container_id] = None
                    wanted.append(
                        (container_id, self._generation.get(container_id, 0), self._epoch)
                    )
            if all_states:  # what the engine no longer lists is gone
                for gone in [cid for cid in self._kept if cid not in found]:
                    del self._kept[gone]

        def inspect(item: tuple[str, int, int]) -> dict[str, Any] | None:
            container_id, generation, epoch = item
            try:
                attrs: dict[str, Any] = client.api.inspect_container(container_id)
            except docker.errors.NotFound:
                return None  # removed between the list and the inspect
            with self._lock:
                self.inspected[container_id] += 1
                if (
                    trusted
                    and self._watching
                    and self._epoch == epoch
                    and self._generation.get(container_id, 0) == generation
                ):
                    state = str(attrs.get("State", {}).get("Status", ""))
                    self._kept[container_id] = _Kept(attrs, state)
            return attrs

        if len(wanted) > 1:  # e.g. a first listing: several at once
            with ThreadPoolExecutor(min(self.INSPECT_WORKERS, len(wanted))) as pool:
                inspected = list(pool.map(inspect, wanted))
        else:
            inspected = [inspect(item) for item in wanted]
        for (container_id, _, _), attrs in zip(wanted, inspected, strict=True):
            found[container_id] = attrs
        return [attrs for attrs in found.values() if attrs is not None]


def _events(stream: Any) -> Iterator[dict[str, Any]]:
    for event in stream:
        if isinstance(event, dict):
            yield event
