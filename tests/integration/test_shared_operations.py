"""The shared service runs at most ``c.GPUDevService.operations_per_user`` blocking operations
of one user's at once (``handlers.base.OperationCount``): one more is refused at once, not
queued for the workers every user's requests wait for; other users' are not refused. A real
Jupyter server in service mode whose users a test identity provider names by a header (as in
test_service_metrics.py); the starts are the real ones, made slower by a pause before each."""

from __future__ import annotations

import asyncio
import json
import secrets
import threading
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import docker
import pytest
from jupyter_server.serverapp import ServerApp
from tornado.httpclient import HTTPClientError, HTTPResponse
from traitlets.config import Config

from jupyter_gpudev.containers import DevContainers
from jupyter_gpudev.containers.lookup import ContainerLookup
from jupyter_gpudev.handlers.base import OperationCount, ReadQueue
from jupyter_gpudev.shared.authority import Authority
from tests.integration.test_service_metrics import HeaderUsers, as_service
from tests.integration.test_shared_terminal_limits import authority, remove_containers
from tests.leaks import Baseline, assert_nothing_leaked

Fetch = Callable[..., Awaitable[HTTPResponse]]

__all__ = ["authority"]  # the fixture, shared with test_shared_terminal_limits

pytestmark = pytest.mark.integration

ALICE, BOB = "alice", "bob"


class TokenUsers(HeaderUsers):
    """``HeaderUsers`` as the service's users are: by a token, so no XSRF cookie is asked."""

    def is_token_authenticated(self, handler: Any) -> bool:  # noqa: ARG002 - every one
        return True


@pytest.fixture
def jp_server_config(
    jp_server_config: Config, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> Config:
    as_service(jp_server_config, tmp_path, monkeypatch)
    jp_server_config.ServerApp.identity_provider_class = TokenUsers
    jp_server_config.GPUDevService.operations_per_user = 1
    jp_server_config.GPUDevService.reads_per_user = 1
    return jp_server_config


@pytest.fixture
def slow_starts(monkeypatch: pytest.MonkeyPatch) -> threading.Event:
    """Each start waits until the event is set (at most 30 s) before it starts."""
    go = threading.Event()
    start = DevContainers.start

    def waiting(self: DevContainers, *args: Any, **kwargs: Any) -> Any:
        go.wait(30)
        return start(self, *args, **kwargs)

    monkeypatch.setattr(DevContainers, "start", waiting)
    return go


#: This run's part of every container name (another run's may be left on the engine).
PART = secrets.token_hex(3)


def post_start(jp_fetch: Fetch, user: str, name: str) -> Awaitable[HTTPResponse]:
    body = json.dumps({"environment": "default", "name": f"{name}-{PART}"})
    return jp_fetch(
        "gpudev", "api", "containers", method="POST", body=body, headers={"X-Test-User": user}
    )


async def test_one_operation_past_a_users_limit_is_refused_at_once(
    jp_fetch: Fetch,
    jp_serverapp: ServerApp,
    authority: Authority,
    slow_starts: threading.Event,
    docker_client: docker.DockerClient,
) -> None:
    baseline = Baseline.take(docker_client, ignore_removed=True)
    # Given alice's start under way (waiting, as a long build would)
    first = asyncio.ensure_future(post_start(jp_fetch, ALICE, "one"))
    await asyncio.sleep(0.5)
    # When she asks for another start, Then it is refused at once, naming the setting
    began = time.monotonic()
    with pytest.raises(HTTPClientError) as refused:
        await post_start(jp_fetch, ALICE, "two")
    assert time.monotonic() - began < 5
    assert refused.value.code == 409
    error = json.loads(refused.value.response.body if refused.value.response else b"{}")
    assert error["error"] == "limit_reached"
    assert "c.GPUDevService.operations_per_user" in error["message"]
    # While bob's start is not refused
    second = asyncio.ensure_future(post_start(jp_fetch, BOB, "his"))
    await asyncio.sleep(0.5)
    assert not second.done()
    # And once alice's start has ended, she may start again
    slow_starts.set()
    assert (await first).code == 201
    assert (await second).code == 201
    assert (await post_start(jp_fetch, ALICE, "three")).code == 201
    assert OperationCount.of(jp_serverapp.web_app.settings).by_user == {}
    remove_containers(docker_client, authority)
    assert_nothing_leaked(docker_client, baseline, server_id=authority.service.containers.server_id)


class SlowListings:
    """Each listing of containers waits until ``go`` is set (at most 30 s), as a diff of a
    container with many changes, or a listing on a slow engine, would; ``began`` counts the
    listings that have begun, by user."""

    def __init__(self) -> None:
        self.go = threading.Event()
        self.began: dict[str, int] = {}


@pytest.fixture
def slow_listings(monkeypatch: pytest.MonkeyPatch) -> SlowListings:
    slow = SlowListings()
    listing = ContainerLookup.list

    def waiting(self: ContainerLookup, *args: Any, **kwargs: Any) -> Any:
        user = self.access.user
        slow.began[user] = slow.began.get(user, 0) + 1
        slow.go.wait(30)
        return listing(self, *args, **kwargs)

    monkeypatch.setattr(ContainerLookup, "list", waiting)
    return slow


def get_listing(jp_fetch: Fetch, user: str) -> Awaitable[HTTPResponse]:
    return jp_fetch("gpudev", "api", "containers", headers={"X-Test-User": user})


async def test_a_users_reads_past_their_limit_wait_for_theirs_not_the_workers(
    jp_fetch: Fetch, jp_serverapp: ServerApp, slow_listings: SlowListings
) -> None:
    # Given alice's read under way (slow: reads hold the workers every user's reads share)
    first = asyncio.ensure_future(get_listing(jp_fetch, ALICE))
    await asyncio.sleep(0.5)
    assert slow_listings.began == {ALICE: 1}
    # When she reads once more (her limit is 1), Then it waits for hers: no worker is taken
    second = asyncio.ensure_future(get_listing(jp_fetch, ALICE))
    await asyncio.sleep(0.5)
    assert slow_listings.began == {ALICE: 1}
    assert not second.done()
    # While bob's read runs at once
    his = asyncio.ensure_future(get_listing(jp_fetch, BOB))
    await asyncio.sleep(0.5)
    assert slow_listings.began == {ALICE: 1, BOB: 1}
    # And once her first read has ended, her second runs; all are answered, none refused
    slow_listings.go.set()
    assert [(await f).code for f in (first, second, his)] == [200, 200, 200]
    assert slow_listings.began == {ALICE: 2, BOB: 1}
    assert ReadQueue.of(jp_serverapp.web_app.settings).by_user == {}
