"""Terminals inside dev containers, through a real Jupyter server."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Awaitable, Callable
from typing import Any

import docker
import pytest
from tornado.httpclient import HTTPClientError, HTTPResponse

from tests.integration.test_api_containers import start_default

Fetch = Callable[..., Awaitable[HTTPResponse]]

pytestmark = [pytest.mark.integration, pytest.mark.usefixtures("server_containers_removed")]


@pytest.fixture
def gpudev_config(gpudev_config: dict[str, Any]) -> dict[str, Any]:
    return {
        **gpudev_config,
        # jupyter_server_terminals' websocket handler does not load when unauthenticated access
        # is disabled server-wide (its GET lacks the marker jupyter_server checks for); every
        # request below still carries the token.
        "ServerApp": {"allow_unauthenticated_access": True},
    }


async def test_a_lab_terminal_runs_its_shell_in_the_container(
    jp_fetch: Fetch,
    jp_ws_fetch: Callable[..., Awaitable[Any]],
    docker_client: docker.DockerClient,
) -> None:
    # Given a running dev container
    await start_default(jp_fetch, "api-term")
    hostname = docker_client.containers.get("gpudev-api-term").attrs["Config"]["Hostname"]
    # When a terminal is opened into it
    response = await jp_fetch(
        "gpudev", "api", "containers", "api-term", "terminal", method="POST", body=b""
    )
    assert response.code == 201
    name = json.loads(response.body)["name"]
    # Then it is an ordinary Jupyter terminal, whose shell runs inside the container
    terminals = json.loads((await jp_fetch("api", "terminals")).body)
    assert name in [t["name"] for t in terminals]
    ws = await jp_ws_fetch("terminals", "websocket", name)
    ws.write_message(json.dumps(["stdin", "echo in-$(hostname)-ok\r"]))
    seen = ""
    deadline = asyncio.get_running_loop().time() + 30
    while f"in-{hostname}-ok" not in seen:
        assert asyncio.get_running_loop().time() < deadline, seen[-500:]
        raw = await asyncio.wait_for(ws.read_message(), timeout=30)
        message = json.loads(raw)
        if message[0] == "stdout":
            seen += message[1]
    ws.close()
    await jp_fetch("api", "terminals", name, method="DELETE")


async def test_no_terminal_into_a_stopped_container(jp_fetch: Fetch) -> None:
    await start_default(jp_fetch, "api-stopped")
    await jp_fetch("gpudev", "api", "containers", "api-stopped", "stop", method="POST", body=b"")
    with pytest.raises(HTTPClientError) as caught:
        await jp_fetch(
            "gpudev", "api", "containers", "api-stopped", "terminal", method="POST", body=b""
        )
    assert caught.value.code == 409
