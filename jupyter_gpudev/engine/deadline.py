"""A build's time limit (``c.DevContainers.build_timeout``): past it, the build's HTTP stream
from the engine is cut, and the engine cancels the build (it stops when its client goes away,
as ``docker build`` does at Ctrl-C; ``forcerm`` removes the step's container).

A build that never ends (``RUN sleep infinity``, a step waiting on input) would otherwise hold
one of the server's workers, and in the shared service one of its user's operations, for good.
Closing the connection from another thread does not wake a read blocked on it; shutting the
socket down does.
"""

from __future__ import annotations

import contextlib
import socket
import threading
from collections.abc import Iterator
from typing import Any

#: What the message of a build cut by its time limit names.
SETTING = "c.DevContainers.build_timeout"


def response_of(stream: Iterator[Any]) -> Any | None:
    """The HTTP response a docker-py build stream reads (``APIClient.build`` returns a
    generator over it; its argument, bound before the first item is read)."""
    frame = getattr(stream, "gi_frame", None)
    return None if frame is None else frame.f_locals.get("response")


class BuildDeadline:
    """``with BuildDeadline(seconds, api, response) as deadline:`` around the reading of a
    build's stream; ``deadline.cut``: the stream was cut for the time limit (``seconds``
    ``None`` or 0: no limit)."""

    def __init__(self, seconds: float | None, api: Any, response: Any) -> None:
        self.seconds = seconds
        self.cut = False
        self._api = api
        self._response = response
        self._timer: threading.Timer | None = None

    def __enter__(self) -> BuildDeadline:
        if self.seconds and self._response is not None:
            self._timer = threading.Timer(self.seconds, self._cut)
            self._timer.daemon = True
            self._timer.start()
        return self

    def __exit__(self, *_: object) -> None:
        if self._timer is not None:
            self._timer.cancel()

    def message(self, what: str) -> str:
        return (
            f"Building {what} took longer than {self.seconds:.0f} s ({SETTING}): it was "
            "stopped; make its slow steps faster, or ask for a longer limit"
        )

    def _cut(self) -> None:
        self.cut = True
        try:
            raw = self._api._get_raw_response_socket(self._response)
        except Exception:  # gone already: the build ended as the timer fired
            return
        sock = getattr(raw, "_sock", raw)  # a file-like wrapper of it, for some transports
        shutdown = getattr(sock, "shutdown", None)
        if shutdown is not None:
            with contextlib.suppress(OSError):  # closed already
                shutdown(socket.SHUT_RDWR)
