"""What ``ContainerStates`` keeps between listings, against an engine stand-in at the client
seam (the real engine's behaviour is in tests/integration/test_listing.py)."""

from __future__ import annotations

import logging
import threading
from collections.abc import Iterator
from typing import Any

from jupyter_gpudev.engine.watch import ContainerStates

EVENTS_THREAD = "gpudev-container-events"


class Stream:
    """An event stream that says nothing until ``release``, then ``events``, then ends."""

    def __init__(self, events: list[dict[str, Any]]) -> None:
        self.events = events
        self.release = threading.Event()

    def __iter__(self) -> Iterator[dict[str, Any]]:
        self.release.wait(10)
        yield from self.events

    def close(self) -> None:
        """Like docker-py's: the reading thread may still hand on what it had read."""


class Api:
    def __init__(self, streams: list[Stream]) -> None:
        self.streams = streams

    def events(self, **_: Any) -> Stream:
        return self.streams.pop(0)

    def containers(self, **_: Any) -> list[dict[str, Any]]:
        return [{"Id": "c1", "State": "running"}]

    def inspect_container(self, container_id: str) -> dict[str, Any]:
        return {"Id": container_id, "State": {"Status": "running"}}


class Client:
    def __init__(self, streams: list[Stream]) -> None:
        self.api = Api(streams)


def events_threads() -> set[threading.Thread]:
    return {t for t in threading.enumerate() if t.name == EVENTS_THREAD}


def test_an_event_read_from_a_closed_stream_does_not_touch_what_the_new_stream_keeps() -> None:
    # Given a container listed once while a first stream was open, then that stream closed,
    # and the container listed again under a second stream
    old = Stream([{"id": "c1", "Action": "start"}])  # read before the close, handed on after
    new = Stream([])
    client = Client([old, new])
    states = ContainerStates("org.jupyter.gpudev.managed=1", logging.getLogger("test"))
    before = events_threads()
    states.list(client, all_states=True, filters={})  # type: ignore[arg-type]
    (old_thread,) = events_threads() - before
    states.close()
    states.list(client, all_states=True, filters={})  # type: ignore[arg-type]
    assert states.inspected["c1"] == 2
    # When the old stream's thread hands on its stale event and ends
    old.release.set()
    old_thread.join(10)
    assert not old_thread.is_alive()
    # Then the new stream's kept inspect still stands: the next listing asks the engine nothing
    states.list(client, all_states=True, filters={})  # type: ignore[arg-type]
    assert states.inspected["c1"] == 2
    states.close()
    new.release.set()
