"""The REST API through a real Jupyter server, against the real Docker engine."""

from __future__ import annotations

import json
import re
from collections.abc import Awaitable, Callable

import docker
import pytest
from tornado.httpclient import HTTPClientError, HTTPResponse

from jupyter_gpudev.handlers import routes
from tests.integration.test_api_containers import ROUTES as CONTAINER_ROUTES

Fetch = Callable[..., Awaitable[HTTPResponse]]

pytestmark = pytest.mark.integration


async def test_hosts_lists_the_local_engine_with_its_real_version_and_gpus(
    jp_fetch: Fetch, docker_client: docker.DockerClient
) -> None:
    # Given a server with the extension and the real local engine
    # When the hosts are asked for
    response = await jp_fetch("gpudev", "api", "hosts")
    # Then the local engine is listed, reachable, with the version the engine itself reports
    assert response.code == 200
    (host,) = json.loads(response.body)["hosts"]
    engine_version = docker_client.version()
    assert host["name"] == "local"
    assert host["reachable"] is True
    assert host["engine"]["version"] == engine_version["Version"]
    assert host["engine"]["api_version"] == engine_version["ApiVersion"]
    assert host["engine"]["cgroup_driver"] == docker_client.info()["CgroupDriver"]
    assert host["engine"]["nvidia_runtime"] is False
    # And the GPUs the (fake) nvidia-smi reports, by UUID
    assert [gpu["uuid"] for gpu in host["gpus"]["gpus"]] == [
        "GPU-5d5ba0d6-d33d-2b2c-524d-9e3d8d2b8a77",
        "GPU-8f2a9c41-7b3e-4c55-9d0a-2e6f1b7c3d90",
    ]
    assert host["gpus"]["cuda_version"] == "12.2"


async def test_one_host_by_name(jp_fetch: Fetch) -> None:
    response = await jp_fetch("gpudev", "api", "hosts", "local")
    assert json.loads(response.body)["reachable"] is True


async def test_unknown_host_is_404_with_a_message(jp_fetch: Fetch) -> None:
    with pytest.raises(HTTPClientError) as caught:
        await jp_fetch("gpudev", "api", "hosts", "nope")
    assert caught.value.code == 404
    assert caught.value.response is not None
    body = json.loads(caught.value.response.body)
    assert body == {
        "error": "not_found",
        "message": "No host named 'nope'; known hosts: local",
        "details": {"host": "nope"},
    }


async def test_usage_lists_each_hosts_gpus_and_refuses_an_unknown_host(jp_fetch: Fetch) -> None:
    # The GPU use of every host: here the local engine's GPUs (each with its processes)
    response = await jp_fetch("gpudev", "api", "usage")
    hosts = json.loads(response.body)["hosts"]
    local = next(host for host in hosts if host["host"] == "local")
    assert all({"uuid", "processes", "processes_listed"} <= set(gpu) for gpu in local["gpus"])
    # And an unknown host is a 404 saying so
    with pytest.raises(HTTPClientError) as caught:
        await jp_fetch("gpudev", "api", "usage", params={"host": "nope"})
    assert caught.value.code == 404


@pytest.mark.parametrize("path", ["hosts", "hosts/local", "usage"])
async def test_every_route_refuses_requests_without_a_token(jp_fetch: Fetch, path: str) -> None:
    # Given no Authorization header (the fixture's token is overridden with nothing)
    with pytest.raises(HTTPClientError) as caught:
        await jp_fetch("gpudev", "api", *path.split("/"), headers={"Authorization": ""})
    # Then the server refuses
    assert caught.value.code in (401, 403)


async def test_metrics_are_the_servers_own_with_gpudevs_gauges_and_need_a_login(
    jp_fetch: Fetch,
) -> None:
    # Given a server with the extension: its /metrics (gpudev's handler in place of the
    # server's) has the server's own metrics and gpudev's gauges, as Prometheus reads them
    response = await jp_fetch("metrics")
    assert response.headers["Content-Type"].startswith("text/plain")
    text = response.body.decode()
    assert "# TYPE gpudev_gpu_utilization_percent gauge" in text
    assert "# TYPE gpudev_gpu_leases gauge" in text
    assert "http_request_duration_seconds" in text or "process_" in text
    # And as the server's own, it needs a login (c.ServerApp.authenticate_prometheus)
    with pytest.raises(HTTPClientError) as caught:
        await jp_fetch("metrics", headers={"Authorization": ""})
    assert caught.value.code == 403


async def test_every_route_refuses_a_wrong_token(jp_fetch: Fetch) -> None:
    with pytest.raises(HTTPClientError) as caught:
        await jp_fetch("gpudev", "api", "hosts", headers={"Authorization": "token wrong"})
    assert caught.value.code in (401, 403)


def test_the_auth_tests_cover_every_route() -> None:
    # Adding a route without adding it to an auth test fails here.
    # The proxy's own auth tests are in test_proxy.py, and so are those of the sandboxed app
    # route, which a capability in its path authorises instead of the login (forged, altered,
    # expired, another user's: 404).
    sandboxed = "/gpudev/app/AAAAAAAA.BBBBBBBBBBBBBBBBBBBBBBBB/"
    covered = {"hosts", "hosts/local", "usage", "/metrics", "/gpudev/proxy/x/8000/", sandboxed} | {
        path for _, path in CONTAINER_ROUTES
    }
    for pattern, _ in routes():
        tail = pattern.removeprefix("/gpudev/api/")
        assert any(re.fullmatch(tail, path) for path in covered), pattern
