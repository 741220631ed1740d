"""The REST API when the engine does not answer: a 503 that names the address."""

from __future__ import annotations

import json
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import pytest
from tornado.httpclient import HTTPClientError, HTTPResponse

Fetch = Callable[..., Awaitable[HTTPResponse]]

pytestmark = pytest.mark.integration


@pytest.fixture
def gpudev_config(gpudev_config: dict[str, Any], tmp_path: Path) -> dict[str, Any]:
    return {**gpudev_config, "HostPool": {"local_url": f"unix://{tmp_path}/no-engine.sock"}}


async def test_unreachable_engine_is_503_naming_the_address(
    jp_fetch: Fetch, tmp_path: Path
) -> None:
    # Given the local engine address points at nothing (see gpudev_config above)
    address = f"unix://{tmp_path}/no-engine.sock"
    for parts in (("hosts",), ("hosts", "local")):
        # When the hosts are asked for
        with pytest.raises(HTTPClientError) as caught:
            await jp_fetch("gpudev", "api", *parts)
        # Then the answer is a 503 whose message names the address and says what to do
        assert caught.value.code == 503
        assert caught.value.response is not None
        body: dict[str, Any] = json.loads(caught.value.response.body)
        assert body["error"] == "engine_unreachable"
        assert address in body["message"]
        assert "Start the Docker engine" in body["message"]
        assert "Traceback" not in caught.value.response.body.decode()
        # And the hosts are still listed, with their reasons, for the panel
        (host,) = body["details"]["hosts"]
        assert host["reachable"] is False
        assert host["url"] == address
