"""Environments and containers through the REST API of a real Jupyter server."""

from __future__ import annotations

import contextlib
import json
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import docker
import pytest
from tornado.httpclient import HTTPClientError, HTTPResponse

Fetch = Callable[..., Awaitable[HTTPResponse]]

pytestmark = [pytest.mark.integration, pytest.mark.usefixtures("server_containers_removed")]


async def start_default(jp_fetch: Fetch, name: str) -> dict[str, Any]:
    """Start a dev container of the built-in environment through the API."""
    response = await jp_fetch(
        "gpudev",
        "api",
        "containers",
        method="POST",
        body=json.dumps({"environment": "default", "name": name}),
    )
    started: dict[str, Any] = json.loads(response.body)
    return started


async def test_environments_lists_the_default(jp_fetch: Fetch) -> None:
    response = await jp_fetch("gpudev", "api", "environments")
    body = json.loads(response.body)
    assert "default" in [env["name"] for env in body["environments"]]
    assert body["problems"] == []


async def test_start_stop_remove_through_the_api(
    jp_fetch: Fetch, docker_client: docker.DockerClient
) -> None:
    # When a container is started
    response = await jp_fetch(
        "gpudev",
        "api",
        "containers",
        method="POST",
        body=json.dumps({"environment": "default", "name": "api-one"}),
    )
    # Then it is created (201), running, and owned by the server's user
    assert response.code == 201
    info = json.loads(response.body)
    assert info["state"] == "running"
    assert info["owner"]
    listed = json.loads((await jp_fetch("gpudev", "api", "containers")).body)["containers"]
    assert "api-one" in [c["name"] for c in listed]
    one = json.loads((await jp_fetch("gpudev", "api", "containers", "api-one")).body)
    assert one["container_id"] == info["container_id"]
    # When it is stopped through the API
    stopped = await jp_fetch(
        "gpudev", "api", "containers", "api-one", "stop", method="POST", body=b""
    )
    assert json.loads(stopped.body)["state"] == "exited"
    # And it can be started again, and stopped again
    resumed = await jp_fetch(
        "gpudev", "api", "containers", "api-one", "start", method="POST", body=b""
    )
    assert json.loads(resumed.body)["state"] == "running"
    await jp_fetch("gpudev", "api", "containers", "api-one", "stop", method="POST", body=b"")
    # And its logs are readable, whole or their last lines
    logs = await jp_fetch("gpudev", "api", "containers", "api-one", "logs")
    assert isinstance(json.loads(logs.body)["logs"], str)
    container = docker_client.containers.get("gpudev-api-one")
    whole = container.logs().decode()
    last = await jp_fetch("gpudev", "api", "containers", "api-one", "logs", params={"tail": "1"})
    assert json.loads(last.body)["logs"] == (whole.splitlines(keepends=True) or [""])[-1]
    with pytest.raises(HTTPClientError) as bad_tail:
        await jp_fetch("gpudev", "api", "containers", "api-one", "logs", params={"tail": "x"})
    assert bad_tail.value.code == 400
    # When it is removed
    removed = await jp_fetch("gpudev", "api", "containers", "api-one", method="DELETE")
    assert removed.code == 204
    with pytest.raises(HTTPClientError) as caught:
        await jp_fetch("gpudev", "api", "containers", "api-one")
    assert caught.value.code == 404


async def test_start_streams_progress_as_server_sent_events(jp_fetch: Fetch) -> None:
    response = await jp_fetch(
        "gpudev",
        "api",
        "containers",
        method="POST",
        body=json.dumps({"environment": "default", "name": "api-sse"}),
        headers={"Accept": "text/event-stream"},
    )
    assert response.headers["Content-Type"] == "text/event-stream"
    events = [
        (block.split("\n")[0].removeprefix("event: "), json.loads(block.split("\n")[1][6:]))
        for block in response.body.decode().strip().split("\n\n")
    ]
    stages = [data.get("stage") for kind, data in events if kind == "progress"]
    assert "create" in stages
    assert "start" in stages
    kind, result = events[-1]
    assert kind == "result"
    assert result["name"] == "api-sse"


@pytest.mark.parametrize(
    ("body", "message"),
    [
        ("not json", "not valid JSON"),
        ({"name": "x"}, "'environment'"),
        ({"environment": "default", "gpus": "two"}, "'gpus' must be a whole number"),
        ({"environment": "default", "colour": "red"}, "Unknown fields: colour"),
        ({"environment": "nope"}, "nope"),
        ({"environment": "default", "name": "Bad Name"}, "Not a container name"),
        ({"environment": "default", "name": "gpudev-x"}, "not starting with 'gpudev-'"),
        ({"environment": "default", "image": "evil/miner:latest"}, "evil/miner:latest"),
    ],
)
async def test_bad_start_requests_get_a_4xx_and_a_message(
    jp_fetch: Fetch, body: Any, message: str
) -> None:
    payload = body if isinstance(body, str) else json.dumps(body)
    with pytest.raises(HTTPClientError) as caught:
        await jp_fetch("gpudev", "api", "containers", method="POST", body=payload)
    assert 400 <= caught.value.code < 500
    assert caught.value.response is not None
    assert message in json.loads(caught.value.response.body)["message"]


ROUTES = [
    ("GET", "environments"),
    ("GET", "containers"),
    ("POST", "containers"),
    ("GET", "containers/x"),
    ("DELETE", "containers/x"),
    ("POST", "containers/x/stop"),
    ("POST", "containers/x/start"),
    ("POST", "containers/x/terminal"),
    ("PUT", "containers/x/pin"),
    ("DELETE", "containers/x/pin"),
    ("GET", "containers/x/diff"),
    ("POST", "containers/x/commit"),
    ("GET", "reclaims"),
    ("POST", "kernels/abc-1/keep"),
    ("POST", "kernels/abc-1/release"),
    ("GET", "kernels/abc-1"),
    ("GET", "kernels/abc-1/usage"),
    ("GET", "containers/x/logs"),
    ("POST", "containers/x/ports"),
    ("DELETE", "containers/x/ports/8000"),
    ("POST", "hosts"),
    ("DELETE", "hosts/local"),
]


@pytest.mark.parametrize(("method", "path"), ROUTES)
async def test_container_routes_refuse_requests_without_a_token(
    jp_fetch: Fetch, method: str, path: str
) -> None:
    kwargs: dict[str, Any] = {"method": method, "headers": {"Authorization": ""}}
    if method in ("POST", "PUT"):
        kwargs["body"] = json.dumps({"environment": "default"})
    with pytest.raises(HTTPClientError) as caught:
        await jp_fetch("gpudev", "api", *path.split("/"), **kwargs)
    assert caught.value.code in (401, 403)


async def test_pin_and_unpin_through_the_api(jp_fetch: Fetch) -> None:
    # Given a running shared dev container
    await start_default(jp_fetch, "api-pin")
    # When it is pinned (PUT) and unpinned (DELETE)
    pinned = await jp_fetch("gpudev", "api", "containers", "api-pin", "pin", method="PUT", body=b"")
    assert json.loads(pinned.body)["pinned"] is True
    listed = json.loads((await jp_fetch("gpudev", "api", "containers")).body)["containers"]
    assert [c["pinned"] for c in listed if c["name"] == "api-pin"] == [True]
    unpinned = await jp_fetch("gpudev", "api", "containers", "api-pin", "pin", method="DELETE")
    assert json.loads(unpinned.body)["pinned"] is False
    # And an unknown container is a 404 with a message
    with pytest.raises(HTTPClientError) as caught:
        await jp_fetch("gpudev", "api", "containers", "nothing-here", "pin", method="PUT", body=b"")
    assert caught.value.code == 404
    assert caught.value.response is not None
    assert "nothing-here" in json.loads(caught.value.response.body)["message"]


async def test_diff_and_commit_through_the_api(
    jp_fetch: Fetch, jp_root_dir: Path, docker_client: docker.DockerClient
) -> None:
    # Given a running dev container of the built-in environment, with an edited file
    await start_default(jp_fetch, "api-diff")
    container = docker_client.containers.get("gpudev-api-diff")
    code, _ = container.exec_run(["/bin/sh", "-c", "echo tuned > /etc/api-tuned"], user="0")
    assert code == 0
    # When its diff is asked for
    diff = json.loads((await jp_fetch("gpudev", "api", "containers", "api-diff", "diff")).body)
    # Then it is a new Dockerfile FROM the image with the file, and the change set
    assert diff["created"] is True
    assert "+FROM gpudev-python:bookworm\n" in diff["diff"]
    assert diff["changes"]["files"]["kept"] == ["/etc/api-tuned"]
    # When a bad commit request is sent, it is a 400 that says why
    with pytest.raises(HTTPClientError) as caught:
        await jp_fetch(
            "gpudev", "api", "containers", "api-diff", "commit", method="POST", body='{"write": 1}'
        )
    assert caught.value.code == 400
    # When it is committed with write
    written = await jp_fetch(
        "gpudev",
        "api",
        "containers",
        "api-diff",
        "commit",
        method="POST",
        body=json.dumps({"write": True}),
    )
    result = json.loads(written.body)
    # Then the Dockerfile and the copied file are in the workspace, and the diff is empty now
    dockerfile = jp_root_dir / ".devcontainer" / "default" / "Dockerfile"
    assert result["written"] == str(dockerfile)
    assert dockerfile.read_text().startswith("FROM gpudev-python:bookworm\n")
    copied = dockerfile.parent / "gpudev-context" / "api-diff" / "files" / "etc" / "api-tuned"
    assert copied.read_text() == "tuned\n"
    again = json.loads((await jp_fetch("gpudev", "api", "containers", "api-diff", "diff")).body)
    assert again["empty"] is True


@pytest.mark.parametrize(
    ("body", "message"),
    [
        ({"push": True}, "--push needs --snapshot TAG"),
        ({"snapshot": "Not A Tag"}, "is not an image reference"),
        ({"snapshot": 3}, '"snapshot" must be a string'),
        ({"squash": True}, "Unknown commit option(s): squash"),
        ([], "must be a JSON object"),
    ],
)
async def test_bad_commit_options_are_refused_before_anything_runs(
    jp_fetch: Fetch, body: Any, message: str
) -> None:
    with pytest.raises(HTTPClientError) as caught:
        await jp_fetch(
            "gpudev", "api", "containers", "nobody", "commit", method="POST", body=json.dumps(body)
        )
    assert caught.value.code == 400
    assert caught.value.response is not None
    assert message in json.loads(caught.value.response.body)["message"]


async def test_commit_with_a_snapshot_streams_progress_events(
    jp_fetch: Fetch, docker_client: docker.DockerClient
) -> None:
    # Given a running dev container with an edited file
    await start_default(jp_fetch, "api-snap")
    container = docker_client.containers.get("gpudev-api-snap")
    code, _ = container.exec_run(["/bin/sh", "-c", "echo snap > /etc/api-snap"], user="0")
    assert code == 0
    tag = "gpudev-test/api-snap:v1"
    try:
        # When it is committed as a snapshot, asking for server-sent events
        response = await jp_fetch(
            "gpudev",
            "api",
            "containers",
            "api-snap",
            "commit",
            method="POST",
            body=json.dumps({"snapshot": tag, "message": "from the API"}),
            headers={"Accept": "text/event-stream"},
        )
        events = [
            (block.split("\n")[0].removeprefix("event: "), json.loads(block.split("\n")[1][6:]))
            for block in response.body.decode().strip().split("\n\n")
        ]
        # Then progress came first (capture, snapshot), then the result with the snapshot
        stages = [data.get("stage") for kind, data in events if kind == "progress"]
        assert stages[0] == "capture"
        assert "snapshot" in stages
        kind, result = events[-1]
        assert kind == "result"
        assert result["snapshot"]["reference"] == tag
        assert result["snapshot"]["pushed"] is False
        assert result["written"] is None
        # And the image exists with the change and the message
        image = docker_client.images.get(tag)
        assert image.labels["org.opencontainers.image.description"] == "from the API"
        out = docker_client.containers.run(tag, ["cat", "/etc/api-snap"], remove=True)
        assert out == b"snap\n"
    finally:
        with contextlib.suppress(docker.errors.ImageNotFound):
            docker_client.images.remove(tag)
