"""Choosing what a commit carries through the REST API of a real Jupyter server: ``exclude``
on the diff and the commit, ``expect`` on the commit."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import docker
import docker.errors
import pytest
from tornado.httpclient import HTTPClientError

from tests.integration.test_api_containers import Fetch, start_default

pytestmark = [pytest.mark.integration, pytest.mark.usefixtures("server_containers_removed")]


async def fetch_json(jp_fetch: Fetch, *path: str, **kwargs: Any) -> dict[str, Any]:
    response = await jp_fetch("gpudev", "api", "containers", *path, **kwargs)
    body: dict[str, Any] = json.loads(response.body)
    return body


async def refused(jp_fetch: Fetch, *path: str, **kwargs: Any) -> tuple[int, dict[str, Any]]:
    with pytest.raises(HTTPClientError) as caught:
        await jp_fetch("gpudev", "api", "containers", *path, **kwargs)
    assert caught.value.response is not None
    body: dict[str, Any] = json.loads(caught.value.response.body)
    return caught.value.code, body


async def test_diff_and_commit_leave_out_the_changes_named_in_exclude(
    jp_fetch: Fetch, jp_root_dir: Path, docker_client: docker.DockerClient
) -> None:
    # Given a running dev container with two new files
    await start_default(jp_fetch, "api-pick")
    container = docker_client.containers.get("gpudev-api-pick")
    code, _ = container.exec_run(
        ["/bin/sh", "-c", "echo a > /etc/api-a && echo b > /etc/api-b"], user="0"
    )
    assert code == 0
    # When the diff is asked for without the second one (and an id matching nothing)
    diff = await fetch_json(
        jp_fetch,
        "api-pick",
        "diff",
        params=[("exclude", "file:/etc/api-b"), ("exclude", "env:NOT_THERE")],
    )
    # Then both are items, the second is left out of the diff, the unknown id is listed
    assert [i["id"] for i in diff["items"]] == ["file:/etc/api-a", "file:/etc/api-b"]
    assert diff["items"][0]["kind"] == "file"
    assert diff["excluded"] == ["file:/etc/api-b", "env:NOT_THERE"]
    assert diff["excluded_unknown"] == ["env:NOT_THERE"]
    assert "/etc/api-a" in diff["diff"]
    assert "api-b" not in diff["diff"]
    assert diff["changes"]["files"]["kept"] == ["/etc/api-a"]
    # When an id is not one, the diff is a 400 naming it
    status, body = await refused(jp_fetch, "api-pick", "diff", params={"exclude": "api-b"})
    assert status == 400
    assert "Not a change id: 'api-b'" in body["message"]
    # And so is a commit
    status, body = await refused(
        jp_fetch,
        "api-pick",
        "commit",
        method="POST",
        body=json.dumps({"write": True, "exclude": ["/etc/api-b"]}),
    )
    assert status == 400
    assert "'/etc/api-b'" in body["message"]
    # When it is committed with the same exclusion and the reviewed diff's digest
    result = await fetch_json(
        jp_fetch,
        "api-pick",
        "commit",
        method="POST",
        body=json.dumps({"write": True, "exclude": ["file:/etc/api-b"], "expect": diff["digest"]}),
    )
    # Then only the first file is written, and the second is held
    assert result["digest"] == diff["digest"]
    assert result["held"] == ["file:/etc/api-b"]
    dockerfile = jp_root_dir / ".devcontainer" / "default" / "Dockerfile"
    assert "/etc/api-a" in dockerfile.read_text()
    assert "api-b" not in dockerfile.read_text()
    # And the next diff shows the second one again
    again = await fetch_json(jp_fetch, "api-pick", "diff")
    assert [i["id"] for i in again["items"]] == ["file:/etc/api-b"]
    # When a commit names the digest of a diff that is not the current one, it is a 409
    # and nothing is written
    before = dockerfile.read_text()
    status, body = await refused(
        jp_fetch,
        "api-pick",
        "commit",
        method="POST",
        body=json.dumps({"write": True, "expect": diff["digest"]}),
    )
    assert status == 409
    assert body["error"] == "diff_changed"
    assert "Review the diff again" in body["message"]
    assert dockerfile.read_text() == before
    # And the container cannot be removed without force
    status, body = await refused(jp_fetch, "api-pick", method="DELETE")
    assert status == 409
    assert body["details"]["changes"] == ["/etc/api-b"]
    # When the left-out change is undone in the container (the file deleted again)
    await jp_fetch("gpudev", "api", "containers", "api-pick", "start", method="POST", body=b"")
    container = docker_client.containers.get("gpudev-api-pick")
    code, _ = container.exec_run(["rm", "/etc/api-b"], user="0")
    assert code == 0
    # Then nothing is left to lose: it is removed without force
    await jp_fetch("gpudev", "api", "containers", "api-pick", method="DELETE")
    with pytest.raises(docker.errors.NotFound):
        docker_client.containers.get("gpudev-api-pick")


async def test_a_bad_expect_is_a_400(jp_fetch: Fetch) -> None:
    status, body = await refused(
        jp_fetch, "nobody", "commit", method="POST", body=json.dumps({"expect": "abc"})
    )
    assert status == 400
    assert "not a diff's digest" in body["message"]
    # And an empty one does not silently turn the check off
    status, body = await refused(
        jp_fetch, "nobody", "commit", method="POST", body=json.dumps({"expect": ""})
    )
    assert status == 400
    assert '"expect" is empty' in body["message"]
    # Nor is an exclusion that is not a list taken as none
    status, body = await refused(
        jp_fetch, "nobody", "commit", method="POST", body=json.dumps({"exclude": ""})
    )
    assert status == 400
