"""What the listings say of dev containers stopped, or about to be, for GPUs that did no work
(``containers.gpu_idle``): kept apart so that every view of the shared service reads the same
notes, and so that the listing needs nothing of the reclaim itself."""

from __future__ import annotations

import threading

#: What the stopped notes keep at most (the oldest dropped first).
MAX_STOPPED_NOTES = 4096


class IdleNotes:
    """What the listings say of GPU-idle dev containers, by host and container key: the stop
    to come (shown while it runs) and the stop done (shown until it runs again). One for all
    the views of the shared service; thread-safe."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._pending: dict[tuple[str, str], str] = {}
        self._stopped: dict[tuple[str, str], str] = {}

    def set_pending(self, notes: dict[tuple[str, str], str]) -> None:
        with self._lock:
            self._pending = dict(notes)

    def stopped(self, host: str, key: str, text: str) -> None:
        with self._lock:
            self._stopped.pop((host, key), None)
            self._stopped[(host, key)] = text
            while len(self._stopped) > MAX_STOPPED_NOTES:
                del self._stopped[next(iter(self._stopped))]

    def for_container(self, host: str, key: str, *, running: bool) -> tuple[str, ...]:
        """The note for the container (key ``key`` on ``host``) in its state, if any. A
        running container's stopped note is dropped: it was started again."""
        with self._lock:
            if running:
                self._stopped.pop((host, key), None)
                text = self._pending.get((host, key))
            else:
                text = self._stopped.get((host, key))
        return (text,) if text else ()
