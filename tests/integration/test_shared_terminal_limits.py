"""The shared service's terminals are limited (``c.GPUDevService.terminals_per_user`` and
``terminals_total``): each websocket to ``/gpudev/api/containers/NAME/tty`` runs ``docker exec
-it`` in a pseudo-terminal of the service, whose file descriptors and the host's ptys every
user shares. A real Jupyter server in service mode, whose users a test identity provider names
by a header (as in test_service_metrics.py), with dev containers on the real engine."""

from __future__ import annotations

import asyncio
import json
import os
import time
from collections.abc import Awaitable, Callable, Iterator
from pathlib import Path
from typing import Any

import docker
import pytest
from jupyter_server.serverapp import ServerApp
from ptyprocess import PtyProcess
from tornado.httpclient import HTTPClientError
from tornado.websocket import WebSocketClientConnection
from traitlets.config import Config

from jupyter_gpudev.containers import StartRequest
from jupyter_gpudev.handlers.base import SETTINGS_KEY
from jupyter_gpudev.labels import L_SERVER
from jupyter_gpudev.shared.authority import Authority
from jupyter_gpudev.shared.terminals import TerminalCount
from tests.integration.test_service_metrics import as_service
from tests.leaks import Baseline, assert_nothing_leaked

WSFetch = Callable[..., Awaitable[WebSocketClientConnection]]

pytestmark = pytest.mark.integration

ALICE, BOB = "alice", "bob"


@pytest.fixture
def jp_server_config(
    jp_server_config: Config, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> Config:
    as_service(jp_server_config, tmp_path, monkeypatch)
    jp_server_config.GPUDevService.terminals_per_user = 2
    return jp_server_config


@pytest.fixture
def authority(jp_serverapp: ServerApp, docker_client: docker.DockerClient) -> Iterator[Authority]:
    """The service's authority; its dev containers are removed after the test."""
    held = jp_serverapp.web_app.settings[SETTINGS_KEY]
    assert isinstance(held, Authority)
    yield held
    remove_containers(docker_client, held)


def remove_containers(client: docker.DockerClient, held: Authority) -> None:
    server_id = held.service.containers.server_id
    for container in client.containers.list(all=True, filters={"label": f"{L_SERVER}={server_id}"}):
        container.remove(force=True)


def as_user(user: str) -> dict[str, str]:
    return {"X-Test-User": user}


async def start(authority: Authority, user: str, name: str) -> None:
    containers = authority.for_user(user).containers
    await asyncio.to_thread(containers.start, StartRequest(environment="default", name=name))


async def open_tty(jp_ws_fetch: WSFetch, user: str, name: str) -> WebSocketClientConnection:
    ws = await jp_ws_fetch("gpudev", "api", "containers", name, "tty", headers=as_user(user))
    # the shell answers: the terminal runs
    ws.write_message(json.dumps(["stdin", "echo tty-$((6*7))\r"]))
    seen = ""
    while "tty-42" not in seen:
        raw = await asyncio.wait_for(ws.read_message(), timeout=30)
        assert raw is not None, f"closed: {seen[-300:]}"
        message = json.loads(raw)
        if message[0] == "stdout":
            seen += message[1]
    return ws


async def refused(jp_ws_fetch: WSFetch, user: str, name: str) -> HTTPClientError:
    """The error a terminal ``user`` asks for into ``name`` is refused with."""
    try:
        ws = await jp_ws_fetch("gpudev", "api", "containers", name, "tty", headers=as_user(user))
    except HTTPClientError as err:
        return err
    ws.close()
    pytest.fail(f"{user}'s terminal into {name} was opened")


def terminals_of_the_service() -> list[int]:
    """The ``docker exec`` processes this process (the service, in-process) runs, by pid."""
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
            argv = (entry / "cmdline").read_bytes().split(b"\0")
        except OSError:
            continue
        state, parent = stat.rsplit(")", 1)[1].split()[:2]
        if int(parent) == os.getpid() and state != "Z" and b"exec" in argv:
            found.append(int(entry.name))
    return found


async def until(condition: Callable[[], bool], what: str, timeout: float = 15.0) -> None:
    deadline = asyncio.get_running_loop().time() + timeout
    while not condition():
        assert asyncio.get_running_loop().time() < deadline, what
        await asyncio.sleep(0.1)


async def test_a_user_opens_no_more_terminals_than_the_limit(
    jp_ws_fetch: WSFetch,
    jp_serverapp: ServerApp,
    authority: Authority,
    docker_client: docker.DockerClient,
) -> None:
    baseline = Baseline.take(docker_client, ignore_removed=True)
    # Given alice's and bob's running dev containers, and at most 2 terminals per user
    await start(authority, ALICE, "tty-alice")
    await start(authority, BOB, "tty-bob")
    # When alice opens two terminals
    first = await open_tty(jp_ws_fetch, ALICE, "tty-alice")
    second = await open_tty(jp_ws_fetch, ALICE, "tty-alice")
    assert len(terminals_of_the_service()) == 2
    # Then her third is refused before the websocket opens, naming the setting
    error = await refused(jp_ws_fetch, ALICE, "tty-alice")
    assert error.code == 429, error
    assert error.response is not None
    message = json.loads(error.response.body)["message"]
    assert "c.GPUDevService.terminals_per_user" in message, message
    assert "2" in message, message
    assert len(terminals_of_the_service()) == 2
    # And bob still opens one
    bobs = await open_tty(jp_ws_fetch, BOB, "tty-bob")
    assert len(terminals_of_the_service()) == 3
    # When alice closes one, she may open another
    first.close()
    await until(lambda: len(terminals_of_the_service()) == 2, "the closed terminal ends")
    third = await open_tty(jp_ws_fetch, ALICE, "tty-alice")
    # And the terminal whose shell exits counts no more either
    third.write_message(json.dumps(["stdin", "exit\r"]))
    while await asyncio.wait_for(third.read_message(), timeout=30) is not None:
        pass
    third.close()
    await until(lambda: len(terminals_of_the_service()) == 2, "the exited terminal ends")
    again = await open_tty(jp_ws_fetch, ALICE, "tty-alice")
    # When every terminal is closed, no process is left and nothing is counted
    for ws in (second, bobs, again):
        ws.close()
    await until(lambda: not terminals_of_the_service(), "every terminal ends")
    counted = TerminalCount.of(jp_serverapp.web_app.settings)
    await until(lambda: counted.total == 0, f"counted: {counted.by_user}")
    assert counted.by_user == {}
    remove_containers(docker_client, authority)
    assert_nothing_leaked(docker_client, baseline, server_id=authority.service.containers.server_id)


async def test_a_refused_or_failed_terminal_counts_no_more(
    jp_ws_fetch: WSFetch, jp_serverapp: ServerApp, authority: Authority
) -> None:
    # Given alice asks for terminals into a container she does not have, three times
    for _ in range(3):
        error = await refused(jp_ws_fetch, ALICE, "tty-none")
        # Then each is refused as missing, not as over the limit
        assert error.code == 404, error
    assert TerminalCount.of(jp_serverapp.web_app.settings).total == 0


async def test_the_service_opens_no_more_terminals_than_its_limit(
    jp_ws_fetch: WSFetch, jp_serverapp: ServerApp, authority: Authority
) -> None:
    # Given alice's and bob's running dev containers, and at most 1 terminal in all
    authority.settings.terminals_total = 1
    await start(authority, ALICE, "tty-alice")
    await start(authority, BOB, "tty-bob")
    alices = await open_tty(jp_ws_fetch, ALICE, "tty-alice")
    # When bob opens one, he is refused, the message naming the setting
    error = await refused(jp_ws_fetch, BOB, "tty-bob")
    assert error.code == 429, error
    assert error.response is not None
    message = json.loads(error.response.body)["message"]
    assert "c.GPUDevService.terminals_total" in message, message
    # Once alice's is closed, he opens his
    alices.close()
    counted = TerminalCount.of(jp_serverapp.web_app.settings)
    await until(lambda: counted.total == 0, f"counted: {counted.by_user}")
    bobs = await open_tty(jp_ws_fetch, BOB, "tty-bob")
    bobs.close()
    await until(lambda: not terminals_of_the_service(), "every terminal ends")
    await until(lambda: counted.total == 0, f"counted: {counted.by_user}")


async def test_a_terminal_whose_process_fails_to_start_counts_no_more(
    jp_ws_fetch: WSFetch,
    jp_serverapp: ServerApp,
    authority: Authority,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # Given alice's running dev container, and a pseudo-terminal that cannot be made
    await start(authority, ALICE, "tty-alice")

    def no_pty(*args: Any, **kwargs: Any) -> None:
        raise OSError(24, "Too many open files")

    monkeypatch.setattr(PtyProcess, "spawn", no_pty)
    # When she tries three times (above her limit of 2)
    for _ in range(3):
        ws = await jp_ws_fetch(
            "gpudev", "api", "containers", "tty-alice", "tty", headers=as_user(ALICE)
        )
        # Then each websocket is closed, and nothing stays counted
        assert await asyncio.wait_for(ws.read_message(), timeout=30) is None
        ws.close()
    counted = TerminalCount.of(jp_serverapp.web_app.settings)
    await until(lambda: counted.total == 0, f"counted: {counted.by_user}")
    assert not terminals_of_the_service()


@pytest.mark.usefixtures("http_server_client")  # the server listens on jp_http_port
async def test_a_terminal_closed_before_it_opens_runs_nothing(
    jp_serverapp: ServerApp,
    jp_http_port: int,
    jp_base_url: str,
    authority: Authority,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # Given alice's running dev container, whose terminal command takes a while to find
    await start(authority, ALICE, "tty-alice")
    containers = authority.for_user(ALICE).containers
    found = containers.terminal_command

    def slowly(*args: Any, **kwargs: Any) -> list[str]:
        time.sleep(1.0)
        return found(*args, **kwargs)

    monkeypatch.setattr(containers, "terminal_command", slowly)
    # When her client asks for a terminal and goes away before the answer, three times
    for _ in range(3):
        _reader, writer = await asyncio.open_connection("127.0.0.1", jp_http_port)
        writer.write(
            (
                f"GET {jp_base_url}gpudev/api/containers/tty-alice/tty HTTP/1.1\r\n"
                f"Host: localhost:{jp_http_port}\r\nUpgrade: websocket\r\n"
                "Connection: Upgrade\r\nSec-WebSocket-Version: 13\r\n"
                "Sec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\nX-Test-User: alice\r\n\r\n"
            ).encode()
        )
        await writer.drain()
        await asyncio.sleep(0.3)
        writer.close()
        await writer.wait_closed()
    # Then no shell is left running for it, and nothing stays counted
    await asyncio.sleep(2.0)
    counted = TerminalCount.of(jp_serverapp.web_app.settings)
    await until(lambda: counted.total == 0, f"counted: {counted.by_user}")
    assert not terminals_of_the_service()
