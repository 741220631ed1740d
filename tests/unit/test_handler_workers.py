"""Reading requests run their blocking calls in workers of their own (``handlers.base``): a
listing never waits behind starts, stops and commits, which hold a worker for seconds each
(the load benchmark saw listings wait seconds behind starts in one shared pool)."""

from __future__ import annotations

import threading
from concurrent.futures import wait

from jupyter_gpudev.handlers.base import _WORKERS, executor_for


def test_reads_and_writes_have_workers_of_their_own() -> None:
    assert executor_for("GET") is executor_for("head")
    assert executor_for("POST") is executor_for("DELETE") is executor_for("PUT")
    assert executor_for("GET") is not executor_for("POST")


def test_a_read_is_answered_while_every_write_worker_is_busy() -> None:
    # Given every write worker held by a slow write (a start waiting on its engine)
    release = threading.Event()
    writes = [executor_for("POST").submit(release.wait, 30) for _ in range(_WORKERS)]
    try:
        # When a read comes in
        read = executor_for("GET").submit(lambda: "listed")
        # Then it is answered at once, not after the writes
        assert read.result(timeout=5) == "listed"
        assert not any(write.done() for write in writes)
    finally:
        release.set()
        wait(writes, timeout=30)
