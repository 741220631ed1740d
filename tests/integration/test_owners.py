"""Owners: a user sees and acts only on their own dev containers, administrators on all.

Two users' servers on one engine: ``DevContainers`` with their own state folders and
``c.Access.user`` (the OS account is the same in a test; a real second account comes with the
JupyterHub tests). Another user's container must look exactly like one that does not exist.
"""

from __future__ import annotations

import contextlib
import json
import secrets
from collections.abc import Awaitable, Callable, Iterator
from typing import Any

import docker
import pytest
from tornado.httpclient import HTTPClientError, HTTPResponse

from jupyter_gpudev.containers import DevContainerInfo, DevContainers, StartRequest, docker_name
from jupyter_gpudev.errors import NotFound
from jupyter_gpudev.leasing import NoFreeGPU

pytestmark = pytest.mark.integration

Fetch = Callable[..., Awaitable[HTTPResponse]]
Make = Callable[..., DevContainers]


@pytest.fixture
def make(user_server: Make) -> Make:
    """A user's server on the local engine; ``admins`` configured."""

    def make_one(user: str, admins: tuple[str, ...] = ()) -> DevContainers:
        return user_server(user, admins=admins)

    return make_one


@pytest.fixture
def bobs(make: Make) -> DevContainerInfo:
    """Bob's running dev container (CPU only)."""
    return make("bob").start(
        StartRequest(environment="default", name=f"bobs-{secrets.token_hex(3)}")
    )


def acts(manager: DevContainers, name: str) -> dict[str, Callable[[], object]]:
    """Everything a user can do to a container by its name."""
    return {
        "get": lambda: manager.get(name),
        "logs": lambda: list(manager.logs(name)),
        "stop": lambda: manager.stop(name),
        "remove": lambda: manager.remove(name, force=True),
        "resume": lambda: manager.resume(name),
        "pin": lambda: manager.pin(name),
        "terminal": lambda: manager.terminal_command(name),
        "add a port": lambda: manager.set_web_port(name, 8000),
        "proxy": lambda: manager.proxy_target(name, 8000),
        "address": lambda: manager.container_address(name),
    }


def test_another_users_container_is_not_found_by_any_action(
    make: Make, bobs: DevContainerInfo, docker_client: docker.DockerClient
) -> None:
    alice = make("alice")
    # The message for a container that does not exist, for comparison
    with pytest.raises(NotFound) as missing:
        alice.get("no-such-container")
    # When alice does anything to bob's container
    for what, act in acts(alice, bobs.name).items():
        with pytest.raises(NotFound) as caught:
            act()
        # Then it is the same 404 as for one that does not exist (nothing leaks)
        assert caught.value.status == 404, what
        assert caught.value.message == missing.value.message.replace(
            "no-such-container", bobs.name
        ), what
    # And it is not in her list, but in bob's
    assert bobs.name not in [info.name for info in alice.list()]
    assert docker_client.containers.get(docker_name(bobs.name)).status == "running"


def test_an_administrator_sees_and_stops_every_users_container(
    make: Make, bobs: DevContainerInfo, docker_client: docker.DockerClient
) -> None:
    admin = make("carol", admins=("carol",))
    assert bobs.name in [info.name for info in admin.list()]
    assert admin.get(bobs.name).owner == "bob"
    admin.stop(bobs.name)
    assert docker_client.containers.get(docker_name(bobs.name)).status == "exited"


def test_a_gpu_another_user_holds_is_held_by_another_user(make: Make, gpu_engine: None) -> None:
    # Given bob holding both GPUs
    bob, alice, admin = make("bob"), make("alice"), make("carol", admins=("carol",))
    held = bob.start(
        StartRequest(environment="default", name=f"bobs-{secrets.token_hex(3)}", gpus=2)
    )
    # When alice asks for one
    with pytest.raises(NoFreeGPU) as caught:
        alice.start(StartRequest(environment="default", gpus=1))
    # Then she is told the GPUs are held by another user, without bob's container or name
    said = caught.value.message + json.dumps(caught.value.details)
    assert caught.value.status == 409
    assert "another user" in caught.value.message
    assert held.name not in said
    assert "bob" not in said
    # And an administrator is told which container holds them
    with pytest.raises(NoFreeGPU) as told:
        admin.start(StartRequest(environment="default", gpus=1))
    assert held.name in told.value.message


# -- through a real Jupyter server's REST API -----------------------------------------------


@pytest.fixture
def gpudev_config(gpudev_config: dict[str, Any]) -> dict[str, Any]:
    return {**gpudev_config, "Access": {"user": "alice"}}


@pytest.fixture
def removed_after(docker_client: docker.DockerClient) -> Iterator[list[str]]:
    names: list[str] = []
    yield names
    for name in names:
        with contextlib.suppress(docker.errors.NotFound):
            docker_client.containers.get(docker_name(name)).remove(force=True)


async def status_of(jp_fetch: Fetch, *path: str, **kwargs: Any) -> tuple[int, str]:
    try:
        response = await jp_fetch(*path, **kwargs)
    except HTTPClientError as err:
        body = err.response.body.decode() if err.response is not None else ""
        return err.code, body
    return response.code, response.body.decode(errors="replace")


async def test_the_rest_api_answers_404_for_another_users_container(
    jp_fetch: Fetch, bobs: DevContainerInfo, docker_client: docker.DockerClient
) -> None:
    name = bobs.name
    requests: list[tuple[tuple[str, ...], dict[str, Any]]] = [
        (("gpudev", "api", "containers", name), {}),
        (("gpudev", "api", "containers", name, "logs"), {}),
        (("gpudev", "api", "containers", name, "diff"), {}),
        (("gpudev", "api", "containers", name, "stop"), {"method": "POST", "body": b""}),
        (("gpudev", "api", "containers", name, "start"), {"method": "POST", "body": b""}),
        (("gpudev", "api", "containers", name, "pin"), {"method": "PUT", "body": b""}),
        (("gpudev", "api", "containers", name, "terminal"), {"method": "POST", "body": b""}),
        (
            ("gpudev", "api", "containers", name, "ports"),
            {"method": "POST", "body": json.dumps({"port": 8000})},
        ),
        (("gpudev", "api", "containers", name, "ports", "8000"), {"method": "DELETE"}),
        (
            ("gpudev", "api", "containers", name, "commit"),
            {"method": "POST", "body": json.dumps({"write": False})},
        ),
        (("gpudev", "api", "containers", name), {"method": "DELETE", "params": {"force": "1"}}),
        (("gpudev", "proxy", name, "8000", "/"), {}),
    ]
    for path, kwargs in requests:
        code, body = await status_of(jp_fetch, *path, **kwargs)
        assert code == 404, (path, code, body)
    # And the listing does not show it
    listed = json.loads((await jp_fetch("gpudev", "api", "containers")).body)["containers"]
    assert name not in [c["name"] for c in listed]
    assert docker_client.containers.get(docker_name(name)).status == "running"


async def test_the_server_owns_what_it_starts_as_its_user(
    jp_fetch: Fetch, removed_after: list[str]
) -> None:
    # A login with the token is not a user name: the owner is the server's user (c.Access.user)
    name = f"alices-{secrets.token_hex(3)}"
    removed_after.append(name)
    response = await jp_fetch(
        "gpudev",
        "api",
        "containers",
        method="POST",
        body=json.dumps({"environment": "default", "name": name}),
    )
    assert json.loads(response.body)["owner"] == "alice"
