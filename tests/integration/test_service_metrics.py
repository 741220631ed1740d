"""The shared service's ``/metrics``: every Hub user may log in to the service, so its metrics
(every user's leases and GPU use, gpudev's gauges among them) are for its administrators only.
A real Jupyter server in service mode, whose users a test identity provider names by a header
(the Hub's own is tested in test_shared_hub.py)."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import pytest
from jupyter_server.auth.identity import IdentityProvider, User
from jupyter_server.serverapp import ServerApp
from tornado.httpclient import HTTPClientError, HTTPResponse
from traitlets.config import Config

Fetch = Callable[..., Awaitable[HTTPResponse]]

pytestmark = pytest.mark.integration


class HeaderUsers(IdentityProvider):
    """The user a request names in ``X-Test-User`` (none: not logged in)."""

    def get_user(self, handler: Any) -> User | None:
        name = handler.request.headers.get("X-Test-User")
        return User(username=name) if name else None


def as_service(config: Config, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Config:
    """``config`` made the shared service's (as ``jupyter gpudev serve`` sets its ServerApp),
    its users named by ``HeaderUsers``, their folders under ``tmp_path / "users"``."""
    monkeypatch.setattr(ServerApp, "gpudev_shared_service", True, raising=False)
    config.ServerApp.identity_provider_class = HeaderUsers
    config.GPUDevService.user_root = str(tmp_path / "users" / "{user}")
    (tmp_path / "users").mkdir()
    return config


@pytest.fixture
def jp_server_config(
    jp_server_config: Config, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> Config:
    as_service(jp_server_config, tmp_path, monkeypatch)
    jp_server_config.Access.admin_users = {"boss"}
    return jp_server_config


async def test_only_administrators_read_the_services_metrics(jp_fetch: Fetch) -> None:
    # Given the service: an administrator reads its metrics, gpudev's gauges among them
    response = await jp_fetch("metrics", headers={"X-Test-User": "boss"})
    assert "# TYPE gpudev_gpu_memory_used_mib gauge" in response.body.decode()
    # When a user who is not one asks, or nobody
    for headers in ({"X-Test-User": "alice"}, {}):
        with pytest.raises(HTTPClientError) as caught:
            await jp_fetch("metrics", headers=headers)
        # Then they are refused
        assert caught.value.code == 403
