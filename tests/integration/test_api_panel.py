"""What the panel and the notebook toolbar read, through a real server on the real engine: the
leases of each host, each container's times, kernels and uncommitted changes, and where a
kernel runs."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Awaitable, Callable
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

import docker
import pytest
from tornado.httpclient import HTTPClientError, HTTPResponse

from jupyter_gpudev.changes.tracker import ChangeCounts
from jupyter_gpudev.handlers.base import SETTINGS_KEY

Fetch = Callable[..., Awaitable[HTTPResponse]]

pytestmark = [pytest.mark.integration, pytest.mark.usefixtures("server_containers_removed")]


async def get_json(jp_fetch: Fetch, *path: str) -> Any:
    return json.loads((await jp_fetch("gpudev", "api", *path)).body)


async def start(jp_fetch: Fetch, name: str, environment: str = "default") -> dict[str, Any]:
    response = await jp_fetch(
        "gpudev",
        "api",
        "containers",
        method="POST",
        body=json.dumps({"environment": environment, "name": name}),
    )
    started: dict[str, Any] = json.loads(response.body)
    return started


async def listed(jp_fetch: Fetch, name: str) -> dict[str, Any]:
    """The container ``name`` as ``GET /gpudev/api/containers`` lists it."""
    containers = (await get_json(jp_fetch, "containers"))["containers"]
    (found,) = [c for c in containers if c["name"] == name]
    return dict(found)


def recent(stamp: Any) -> bool:
    """An ISO 8601 UTC time to the second, within the last few minutes."""
    assert isinstance(stamp, str)
    assert stamp.endswith("Z")
    when = datetime.fromisoformat(stamp.replace("Z", "+00:00"))
    return abs((datetime.now(timezone.utc) - when).total_seconds()) < 300


async def test_a_host_lists_who_holds_its_gpus_since_when(
    jp_fetch: Fetch, jp_root_dir: Path, gpu_engine: None
) -> None:
    # Given an environment with one GPU, and a dev container of it started through the API
    folder = jp_root_dir / ".devcontainer" / "gpu"
    folder.mkdir(parents=True)
    (folder / "devcontainer.json").write_text(
        json.dumps({"image": "gpudev-python:bookworm", "hostRequirements": {"gpu": True}})
    )
    box = await start(jp_fetch, "panel-gpu", "gpu")
    assert len(box["gpu_uuids"]) == 1
    # When the hosts are listed
    (local,) = [h for h in (await get_json(jp_fetch, "hosts"))["hosts"] if h["name"] == "local"]
    # Then the host lists the lease: its container, owner, GPUs and since when, nothing else
    # (other leases may be listed: the engine's other gpudev containers are reconciled in)
    (lease,) = [held for held in local["leases"] if held["container"] == "panel-gpu"]
    assert set(lease) == {"lease_id", "container", "owner", "gpu_uuids", "since"}
    assert lease["lease_id"] == box["lease_id"]
    assert lease["container"] == "panel-gpu"
    assert lease["owner"] == box["owner"]
    assert lease["gpu_uuids"] == box["gpu_uuids"]
    assert recent(lease["since"])
    # And the host alone says the same
    assert lease in (await get_json(jp_fetch, "hosts", "local"))["leases"]
    # When the container is stopped, its GPU is free and its lease is no longer listed
    await jp_fetch("gpudev", "api", "containers", "panel-gpu", "stop", method="POST", body=b"")
    leases = (await get_json(jp_fetch, "hosts", "local"))["leases"]
    assert lease["lease_id"] not in [held["lease_id"] for held in leases]


def server_counts(serverapp: Any) -> ChangeCounts:
    """The change counts kept by the test server's dev containers."""
    counts: ChangeCounts = serverapp.web_app.settings[SETTINGS_KEY].tracker.counts
    return counts


async def test_a_container_reports_its_times_kernels_and_uncommitted_changes(
    jp_fetch: Fetch,
    jp_serverapp: Any,
    docker_client: docker.DockerClient,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # Given the change count of a running container is kept for an hour
    monkeypatch.setattr(ChangeCounts, "RUNNING_TTL", 3600.0)
    # When a dev container is started
    started = await start(jp_fetch, "panel-times")
    # Then the answer has its start time and kernels, and no stop time
    assert recent(started["started_at"])
    assert started["finished_at"] is None
    assert started["kernels"] == 0
    assert started["last_activity"] is None
    # And listed, it has no uncommitted change
    box = await listed(jp_fetch, "panel-times")
    assert box["uncommitted"] == 0
    assert box["started_at"] == started["started_at"]
    # When a file is written in it
    container = docker_client.containers.get("gpudev-panel-times")
    code, _ = container.exec_run(["/bin/sh", "-c", "echo tuned > /etc/panel-tuned"], user="0")
    assert code == 0
    # Then within that time the kept count is listed (no new docker diff)
    assert (await listed(jp_fetch, "panel-times"))["uncommitted"] == 0
    # And once a running count's time is up, it is counted again in the background and the
    # next listing has the change (list and get alike)
    monkeypatch.setattr(ChangeCounts, "RUNNING_TTL", 1.0)
    await asyncio.sleep(1.1)
    assert (await listed(jp_fetch, "panel-times"))["uncommitted"] == 0
    await asyncio.get_running_loop().run_in_executor(None, server_counts(jp_serverapp).wait)
    assert (await listed(jp_fetch, "panel-times"))["uncommitted"] == 1
    one = await get_json(jp_fetch, "containers", "panel-times")
    assert one["uncommitted"] == 1
    # When it is stopped
    stopped = json.loads(
        (
            await jp_fetch(
                "gpudev", "api", "containers", "panel-times", "stop", method="POST", body=b""
            )
        ).body
    )
    # Then it has a stop time and no start time; its changes are counted when listed
    assert stopped["started_at"] is None
    assert recent(stopped["finished_at"])
    box = await listed(jp_fetch, "panel-times")
    assert box["finished_at"] == stopped["finished_at"]
    assert box["uncommitted"] == 1


async def test_the_change_count_is_the_number_of_changes_the_diff_lists(
    jp_fetch: Fetch, docker_client: docker.DockerClient
) -> None:
    # Given a running dev container in which a Debian package is installed (with its
    # dependencies, a few thousand files)
    await start(jp_fetch, "panel-apt")
    container = docker_client.containers.get("gpudev-panel-apt")
    code, output = container.exec_run(
        [
            "/bin/sh",
            "-c",
            "apt-get update -qq && DEBIAN_FRONTEND=noninteractive "
            "apt-get install -y -qq --no-install-recommends cowsay",
        ],
        user="0",
    )
    assert code == 0, output
    files = len(container.diff() or [])
    # When it is listed (counted afresh) and its diff is read, as the commit dialog does
    count = await get_json(jp_fetch, "containers", "panel-apt")
    diff = await get_json(jp_fetch, "containers", "panel-apt", "diff")
    # Then the count is the number of change items the diff lists (the package), not the
    # number of files it touched
    assert [i["id"] for i in diff["items"]] == ["apt:cowsay"]
    assert files > 100
    assert count["uncommitted"] == len(diff["items"]) == 1


async def test_a_kernel_says_which_container_and_gpus_it_holds(jp_fetch: Fetch) -> None:
    # Given a running shared dev container
    await start(jp_fetch, "panel-box")
    # When a kernel starts in it, and another in a container of its own
    shared = json.loads(
        (
            await jp_fetch(
                "api", "kernels", method="POST", body=json.dumps({"name": "gpudev--panel-box"})
            )
        ).body
    )
    own = json.loads(
        (
            await jp_fetch(
                "api", "kernels", method="POST", body=json.dumps({"name": "gpudev-default"})
            )
        ).body
    )
    try:
        # Then each kernel says where it runs
        assert await get_json(jp_fetch, "kernels", shared["id"]) == {
            "kernel_id": shared["id"],
            "container": "panel-box",
            "host": "local",
            "environment": "default",
            "gpu_uuids": [],
            "shared": True,
            "state": "running",
            "pod": False,
        }
        mine = await get_json(jp_fetch, "kernels", own["id"])
        assert mine["container"] == f"kernel-{own['id']}"
        assert mine["shared"] is False
        assert mine["state"] == "running"
        # And each container counts its kernel, with the kernel's last activity
        box = await listed(jp_fetch, "panel-box")
        assert box["kernels"] == 1
        assert recent(box["last_activity"])
        assert (await listed(jp_fetch, f"kernel-{own['id']}"))["kernels"] == 1
    finally:
        await jp_fetch("api", "kernels", own["id"], method="DELETE")
        await jp_fetch("api", "kernels", shared["id"], method="DELETE")
    # When the kernels have ended, the shared container has none (and stopped with the last)
    box = await listed(jp_fetch, "panel-box")
    assert (box["kernels"], box["last_activity"], box["state"]) == (0, None, "exited")
    # And an ended kernel is a 404 that says so
    with pytest.raises(HTTPClientError) as caught:
        await jp_fetch("gpudev", "api", "kernels", shared["id"])
    assert caught.value.code == 404
    assert caught.value.response is not None
    assert "No kernel" in json.loads(caught.value.response.body)["message"]


async def test_a_kernel_not_in_a_dev_container_is_a_404(jp_fetch: Fetch) -> None:
    # Given a plain kernel of the server
    specs = json.loads((await jp_fetch("api", "kernelspecs")).body)["kernelspecs"]
    plain = next(name for name in specs if not name.startswith("gpudev-"))
    kernel = json.loads(
        (await jp_fetch("api", "kernels", method="POST", body=json.dumps({"name": plain}))).body
    )
    try:
        # When the toolbar asks where it runs, it is a 404 that says why
        with pytest.raises(HTTPClientError) as caught:
            await jp_fetch("gpudev", "api", "kernels", kernel["id"])
        assert caught.value.code == 404
        assert caught.value.response is not None
        body = json.loads(caught.value.response.body)
        assert body["error"] == "not_found"
        assert "not a gpudev kernel" in body["message"]
    finally:
        await jp_fetch("api", "kernels", kernel["id"], method="DELETE")
    # And so is an id the server never had
    with pytest.raises(HTTPClientError) as caught:
        await jp_fetch("gpudev", "api", "kernels", "0123-abcd")
    assert caught.value.code == 404
