"""The shared service's terminals cannot stop or exhaust the service: a terminal's input is
written to its pseudo-terminal without blocking, held up to
``c.GPUDevService.terminal_input_buffer`` (the terminal closed past it), and its output is read
no faster than its client takes it (at most ``c.GPUDevService.terminal_output_buffer``
unsent). A real Jupyter server in service mode, in this process (its event loop is the
test's), with dev containers and ``docker exec`` terminals on the real engine, as in
test_shared_terminal_limits.py."""

from __future__ import annotations

import asyncio
import contextlib
import json
import signal
import threading
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from pathlib import Path

import docker
import pytest
from jupyter_server.serverapp import ServerApp
from tornado.httpclient import HTTPResponse
from tornado.websocket import WebSocketClientConnection, WebSocketClosedError
from traitlets.config import Config

from jupyter_gpudev.shared.authority import Authority
from jupyter_gpudev.shared.terminals import TerminalCount
from tests.integration.test_service_metrics import as_service
from tests.integration.test_shared_terminal_limits import (
    ALICE,
    as_user,
    authority,
    open_tty,
    remove_containers,
    start,
    terminals_of_the_service,
    until,
)
from tests.leaks import Baseline, assert_nothing_leaked

WSFetch = Callable[..., Awaitable[WebSocketClientConnection]]
Fetch = Callable[..., Awaitable[HTTPResponse]]

__all__ = ["authority"]  # the fixture, shared with test_shared_terminal_limits

pytestmark = [pytest.mark.integration, pytest.mark.timeout(180)]

#: How long the event loop may go without running the heartbeat before the watchdog frees it.
STALLED = 8.0


@pytest.fixture
def jp_server_config(
    jp_server_config: Config, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> Config:
    return as_service(jp_server_config, tmp_path, monkeypatch)


class Stalls:
    """The longest the event loop went without running a 50 ms heartbeat."""

    def __init__(self) -> None:
        self.longest = 0.0
        self.freed = False


class Stalled(Exception):
    """Raised in the event loop's thread, by the watchdog, to end a write that blocks it."""


@asynccontextmanager
async def watched_loop() -> AsyncIterator[Stalls]:
    """Measure the event loop's stalls; should it stall for ``STALLED`` seconds (a terminal's
    write blocking it), a thread interrupts it with a signal whose handler raises ``Stalled``
    (killing the terminal's process does not end a write blocked on its pty), so that the
    test fails instead of hanging."""
    stalls = Stalls()
    beat = [time.monotonic()]
    done = threading.Event()
    main = threading.main_thread().ident
    assert main == threading.get_ident(), "the event loop runs in the main thread"

    async def heartbeat() -> None:
        while True:
            now = time.monotonic()
            stalls.longest = max(stalls.longest, now - beat[0])
            beat[0] = now
            await asyncio.sleep(0.05)

    def stalled() -> bool:
        return time.monotonic() - beat[0] > STALLED

    def interrupt(signum: int, frame: object) -> None:
        if stalled():  # still blocked (not a late signal)
            raise Stalled(f"the event loop was blocked for {STALLED} s")

    def watchdog() -> None:
        while not done.wait(0.5):
            if stalled():
                stalls.freed = True
                signal.pthread_kill(main, signal.SIGUSR1)

    previous = signal.signal(signal.SIGUSR1, interrupt)
    task = asyncio.create_task(heartbeat())
    thread = threading.Thread(target=watchdog, daemon=True)
    thread.start()
    try:
        yield stalls
    finally:
        done.set()
        thread.join(5)
        task.cancel()
        signal.signal(signal.SIGUSR1, previous)


async def answered_within(jp_fetch: Fetch, seconds: float) -> float:
    """How long the service took to answer another request (asserted under ``seconds``)."""
    began = time.monotonic()
    await asyncio.wait_for(jp_fetch("api", headers=as_user(ALICE)), timeout=seconds + 30)
    took = time.monotonic() - began
    assert took < seconds, f"the service answered another request after {took:.1f} s"
    return took


async def input_never_read(jp_ws_fetch: WSFetch, authority: Authority) -> WebSocketClientConnection:
    """Alice's terminal, whose shell (raw, without echo) has been replaced by a process that
    never reads its input."""
    await start(authority, ALICE, "tty-alice")
    ws = await open_tty(jp_ws_fetch, ALICE, "tty-alice")
    ws.write_message(json.dumps(["stdin", "stty raw -echo; echo ready-$((6*7)); exec sleep 600\r"]))
    seen = ""
    while "ready-42" not in seen:
        raw = await asyncio.wait_for(ws.read_message(), timeout=30)
        assert raw is not None, f"closed: {seen[-300:]}"
        message = json.loads(raw)
        if message[0] == "stdout":
            seen += message[1]
    return ws


async def send_until_closed(ws: WebSocketClientConnection, total: int) -> int:
    """Send ``total`` bytes of input to ``ws`` in 32 KiB messages, or as many as it takes
    before it is closed; how many were sent."""
    sent = 0
    with contextlib.suppress(WebSocketClosedError):
        while sent < total:
            await ws.write_message(json.dumps(["stdin", "x" * 32768]))
            sent += 32768
    return sent


async def closed(ws: WebSocketClientConnection) -> tuple[int | None, str | None]:
    """The close code and reason of ``ws``, once the service has closed it."""
    while await asyncio.wait_for(ws.read_message(), timeout=30) is not None:
        pass
    ws.close()
    return ws.close_code, ws.close_reason


async def test_a_large_stdin_message_to_a_terminal_that_reads_nothing_blocks_nothing(
    jp_ws_fetch: WSFetch,
    jp_fetch: Fetch,
    jp_serverapp: ServerApp,
    authority: Authority,
    docker_client: docker.DockerClient,
) -> None:
    baseline = Baseline.take(docker_client, ignore_removed=True)
    # Given alice's terminal, whose container never reads its input
    ws = await input_never_read(jp_ws_fetch, authority)
    async with watched_loop() as stalls:
        # When she sends it 1 MB in one message
        ws.write_message(json.dumps(["stdin", "x" * 1_000_000]))
        await asyncio.sleep(0.5)
        # Then the service still answers other requests at once
        await answered_within(jp_fetch, 2.0)
        # And her terminal is closed (the message is over the websocket's limit)
        code, reason = await closed(ws)
    assert not stalls.freed, "the event loop was blocked until the terminal was killed"
    assert stalls.longest < 2.0, f"the event loop stalled for {stalls.longest:.1f} s"
    assert code == 1009, (code, reason)
    await until(lambda: not terminals_of_the_service(), "the terminal ends")
    counted = TerminalCount.of(jp_serverapp.web_app.settings)
    await until(lambda: counted.total == 0, f"counted: {counted.by_user}")
    remove_containers(docker_client, authority)
    assert_nothing_leaked(docker_client, baseline, server_id=authority.service.containers.server_id)


async def test_a_terminal_whose_input_is_not_read_is_closed_past_its_input_buffer(
    jp_ws_fetch: WSFetch,
    jp_fetch: Fetch,
    jp_serverapp: ServerApp,
    authority: Authority,
    docker_client: docker.DockerClient,
) -> None:
    baseline = Baseline.take(docker_client, ignore_removed=True)
    # Given alice's terminal, whose container never reads its input
    ws = await input_never_read(jp_ws_fetch, authority)
    limit = authority.settings.terminal_input_buffer
    assert limit == 1024 * 1024
    async with watched_loop() as stalls:
        # When she sends it 3 MiB of input in small messages
        sent = await send_until_closed(ws, 3 * limit)
        # Then the service answers other requests at once
        await answered_within(jp_fetch, 2.0)
        # And her terminal was closed, the reason naming the setting
        code, reason = await closed(ws)
    assert not stalls.freed, "the event loop was blocked until the terminal was killed"
    assert stalls.longest < 2.0, f"the event loop stalled for {stalls.longest:.1f} s"
    assert limit < sent, sent
    assert code == 1009, (code, reason)
    assert reason is not None
    assert "c.GPUDevService.terminal_input_buffer" in reason, reason
    await until(lambda: not terminals_of_the_service(), "the terminal ends")
    counted = TerminalCount.of(jp_serverapp.web_app.settings)
    await until(lambda: counted.total == 0, f"counted: {counted.by_user}")
    remove_containers(docker_client, authority)
    assert_nothing_leaked(docker_client, baseline, server_id=authority.service.containers.server_id)


def rss_mib() -> float:
    """This process's resident memory (the service's: it runs in-process), in MiB."""
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    raise AssertionError("no VmRSS in /proc/self/status")


async def test_a_terminal_whose_client_reads_nothing_holds_bounded_memory(
    jp_ws_fetch: WSFetch,
    jp_serverapp: ServerApp,
    authority: Authority,
    docker_client: docker.DockerClient,
) -> None:
    baseline = Baseline.take(docker_client, ignore_removed=True)
    # Given alice's terminal
    await start(authority, ALICE, "tty-alice")
    ws = await open_tty(jp_ws_fetch, ALICE, "tty-alice")
    before = rss_mib()
    # When it runs `yes` and her client reads nothing for 5 seconds (tornado's client stops
    # reading its socket while a message it has read waits to be taken)
    ws.write_message(json.dumps(["stdin", "exec yes\r"]))
    most = before
    for _ in range(50):
        await asyncio.sleep(0.1)
        most = max(most, rss_mib())
        # (on the unbounded service, stop before the machine runs out of memory)
        if most - before > 1024:
            break
    # Then the service's memory grew by less than 64 MiB
    assert most - before < 64, f"the service's memory grew by {most - before:.0f} MiB"
    # And once she reads again, the output flows again: more than the service holds unsent
    received = 0
    while received < 3 * authority.settings.terminal_output_buffer:
        raw = await asyncio.wait_for(ws.read_message(), timeout=30)
        assert raw is not None, "closed"
        received += len(raw)
    # When she closes it, its process ends and nothing stays counted
    ws.close()
    await until(lambda: not terminals_of_the_service(), "the terminal ends")
    counted = TerminalCount.of(jp_serverapp.web_app.settings)
    await until(lambda: counted.total == 0, f"counted: {counted.by_user}")
    remove_containers(docker_client, authority)
    assert_nothing_leaked(docker_client, baseline, server_id=authority.service.containers.server_id)
