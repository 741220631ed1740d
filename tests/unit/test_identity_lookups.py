"""The shared service asks the Hub about at most ``concurrent_lookups`` tokens at a time.

Every token the service has not seen costs a Hub request (``GET /user``) through the process's
shared HTTP client (10 connections): without a bound, a flood of random tokens would take
them all and legitimate callers' checks would queue behind it and time out.
"""

from __future__ import annotations

import asyncio
import http.server
import secrets
import threading
import time
from collections.abc import Iterator
from typing import Any, ClassVar

import pytest
from tornado.web import HTTPError
from traitlets import TraitError

from jupyter_gpudev.shared.identity import HubIdentityProvider, HubUser

SERVICE_TOKEN = "service-token"  # noqa: S105 (the stand-in Hub's, unused: it knows no token)


class _SlowHub(http.server.BaseHTTPRequestHandler):
    """A Hub API that knows no token and answers each request after ``delay`` seconds,
    counting the requests it has in hand at once."""

    delay: ClassVar[float] = 0.2
    lock: ClassVar[threading.Lock] = threading.Lock()
    in_flight: ClassVar[int] = 0
    most: ClassVar[int] = 0
    asked: ClassVar[int] = 0

    def do_GET(self) -> None:
        cls = type(self)
        with cls.lock:
            cls.in_flight += 1
            cls.asked += 1
            cls.most = max(cls.most, cls.in_flight)
        try:
            time.sleep(cls.delay)
            self.send_response(403)
            self.send_header("Content-Length", "0")
            self.end_headers()
        finally:
            with cls.lock:
                cls.in_flight -= 1

    def log_message(self, *args: Any) -> None:
        pass


@pytest.fixture
def hub() -> Iterator[str]:
    """The slow Hub's API URL (its counters reset)."""
    _SlowHub.delay, _SlowHub.in_flight, _SlowHub.most, _SlowHub.asked = 0.2, 0, 0, 0
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _SlowHub)
    server.daemon_threads = True
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}/hub/api"
    finally:
        server.shutdown()
        server.server_close()


async def look_up(
    provider: HubIdentityProvider, tokens: list[str]
) -> list[HubUser | str | BaseException | None]:
    return await asyncio.gather(
        *(provider.user_for_token(t) for t in tokens), return_exceptions=True
    )


def test_unknown_tokens_put_at_most_concurrent_lookups_requests_in_flight(hub: str) -> None:
    provider = HubIdentityProvider(api_url=hub, api_token=SERVICE_TOKEN)
    assert provider.concurrent_lookups == 4
    # When 20 callers send 20 different tokens at once
    answers = asyncio.run(look_up(provider, [secrets.token_hex(16) for _ in range(20)]))
    # Then each is refused (the Hub knows none), and the Hub had at most 4 requests at a time
    assert answers == [None] * 20
    assert _SlowHub.asked == 20
    assert _SlowHub.most == 4


def test_a_lookup_that_cannot_start_within_the_timeout_is_refused_as_busy(hub: str) -> None:
    # Given a Hub that takes 0.6 s and a timeout of 1 s
    _SlowHub.delay = 0.6
    provider = HubIdentityProvider(
        api_url=hub, api_token=SERVICE_TOKEN, timeout=1.0, concurrent_lookups=4
    )
    # When 12 tokens come at once: 4 are asked at once, 4 more at 0.6 s; the last 4 would
    # wait until 1.2 s
    answers = asyncio.run(look_up(provider, [secrets.token_hex(16) for _ in range(12)]))
    # Then those are refused with 503 (try again) without asking the Hub
    assert answers[:8] == [None] * 8
    for answer in answers[8:]:
        assert isinstance(answer, HTTPError), answer
        assert answer.status_code == 503
        assert "busy checking tokens" in str(answer.log_message)
    assert _SlowHub.asked == 8
    assert _SlowHub.most == 4


def test_a_token_the_hub_refused_is_not_asked_again_within_cache_seconds(hub: str) -> None:
    _SlowHub.delay = 0.0
    provider = HubIdentityProvider(api_url=hub, api_token=SERVICE_TOKEN, cache_seconds=60)
    token = secrets.token_hex(16)
    assert asyncio.run(provider.user_for_token(token)) is None
    assert asyncio.run(provider.user_for_token(token)) is None
    assert _SlowHub.asked == 1
    assert token not in str(provider._cache)  # kept under its hash only


def test_concurrent_lookups_is_at_least_one() -> None:
    with pytest.raises(TraitError):
        HubIdentityProvider(concurrent_lookups=0)
