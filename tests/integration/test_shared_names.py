"""Container names are per user in shared mode: a name one user gives says nothing to another.

Before, every user's dev containers shared one namespace on the service's engine, so bob
starting "train" was told that "a container named 'train' already exists" whenever alice had
one: a way to learn the names of other users' containers, and a name one user could take from
another. Now each user's "train" is their own container, named ``gpudev-OWNER.train`` on the
engine; an administrator names another user's container by that name, as their listing shows.

Two users' views of one service are built in-process (``Authority.for_user``, with the real
accounts gpudev-alice and gpudev-bob); their containers run on the real engine, with GPUs
from the fake nvidia-smi.
"""

from __future__ import annotations

import secrets
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import docker
import pytest

from jupyter_gpudev.containers import DevContainerInfo, DevContainers, StartRequest
from jupyter_gpudev.containers.model import container_key
from jupyter_gpudev.errors import GPUDevError
from jupyter_gpudev.labels import L_NAME, L_OWNER
from jupyter_gpudev.shared.authority import Authority
from tests.integration.shared_views import close, new_service, service_config

pytestmark = pytest.mark.integration

ALICE, BOB, ADMIN = "gpudev-alice", "gpudev-bob", "gpudev-admin"


@pytest.fixture
def held(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, docker_client: docker.DockerClient
) -> Iterator[Authority]:
    config = service_config(tmp_path, monkeypatch)
    config.GPUInventory.cache_seconds = 0.0
    service = new_service(tmp_path, config)
    yield service
    close(service, docker_client)


def view(held: Authority, user: str) -> DevContainers:
    return held.for_user(user, hub_admin=user == ADMIN).containers


def start(manager: DevContainers, name: str, **asked: Any) -> DevContainerInfo:
    return manager.start(StartRequest(environment="default", name=name, **asked))


def a_name() -> str:
    return f"train-{secrets.token_hex(3)}"


def test_two_users_each_have_their_own_container_of_one_name(
    held: Authority, gpu_engine: None, docker_client: docker.DockerClient
) -> None:
    # Given alice running "train" with a GPU
    name = a_name()
    alice, bob = view(held, ALICE), view(held, BOB)
    hers = start(alice, name, gpus=1)
    # When bob starts a container of the same name, with a GPU too
    his = start(bob, name, gpus=1)
    # Then he was not told that she has one: he has his own, and each sees their own by name
    assert (hers.name, his.name) == (name, name)
    assert alice.get(name).container_id == hers.container_id
    assert bob.get(name).container_id == his.container_id != hers.container_id
    # And the engine names each after its owner; inside, each is called what its user said
    for user, info in ((ALICE, hers), (BOB, his)):
        container = docker_client.containers.get(container_key(name, user))
        assert container.id == info.container_id
        assert container.labels[L_OWNER] == user
        assert container.labels[L_NAME] == container.name
        code, output = container.exec_run(["hostname"])
        assert isinstance(output, bytes)
        assert (code, output.decode().strip()) == (0, name)
    # And the ledger holds a lease for each, each reported to its user under their name
    leases = {lease.owner: lease for lease in held.service.containers.ledger.active()}
    assert set(leases) >= {ALICE, BOB}
    assert leases[ALICE].gpu_uuids != leases[BOB].gpu_uuids
    seen = [lease.held_json() for info in alice.describe_hosts() for lease in info.leases]
    assert {(lease["owner"], lease["container"]) for lease in seen} >= {
        (ALICE, name),
        ("another user", ""),
    }
    # And what bob does to his "train" leaves hers as it was
    bob.stop(name)
    assert alice.get(name).state == "running"
    assert bob.get(name).state == "exited"
    assert alice.get(name).lease_id == leases[ALICE].lease_id
    bob.remove(name, force=True)
    assert alice.get(name).state == "running"
    # And a name she already has is taken for her alone
    with pytest.raises(GPUDevError) as taken:
        start(alice, name)
    assert taken.value.status == 409
    assert f"A container named {name!r} already exists" in taken.value.message


def test_a_plan_never_says_another_users_name_is_taken(held: Authority, gpu_engine: None) -> None:
    # Given alice's running "train"
    name = a_name()
    start(view(held, ALICE), name)
    # When bob plans a start of his own "train"
    plan = view(held, BOB).plan(StartRequest(environment="default", name=name))
    # Then the plan is made (for a container of his own), not refused as a name in use
    assert plan is not None
    with pytest.raises(GPUDevError) as taken:
        view(held, ALICE).plan(StartRequest(environment="default", name=name))
    assert taken.value.status == 409


def test_an_administrator_names_another_users_container_as_their_listing_shows(
    held: Authority, gpu_engine: None
) -> None:
    # Given alice's "train" and the administrator's own "train"
    name = a_name()
    hers = start(view(held, ALICE), name)
    admin = view(held, ADMIN)
    own = start(admin, name)
    # When the administrator lists every container
    listed = {info.container_id: info for info in admin.list()}
    # Then their own is called by its name, and alice's by its name on the engine
    assert listed[own.container_id].name == name
    theirs = listed[hers.container_id]
    assert (theirs.name, theirs.owner) == (container_key(name, ALICE), ALICE)
    # And that name acts on alice's container (not on the administrator's "train")
    admin.stop(theirs.name)
    assert view(held, ALICE).get(name).state == "exited"
    assert admin.get(name).state == "running"
    # While bob cannot reach hers by it: another user's container does not exist for him
    with pytest.raises(GPUDevError) as hidden:
        view(held, BOB).get(theirs.name)
    assert hidden.value.status == 404


def test_a_container_named_before_names_were_per_user_stays_its_owners(
    held: Authority, gpu_engine: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Given alice's container made by a service before names were per user (its engine
    # name "gpudev-NAME", its key the plain name)
    name = a_name()
    alice = view(held, ALICE)
    monkeypatch.setattr(alice, "_new_name", lambda _env, request, _owner: request.name)
    old = start(alice, name)
    monkeypatch.undo()
    # When alice names it, it is hers as before
    assert alice.get(name).container_id == old.container_id
    # And she cannot make a second container of that name beside it
    with pytest.raises(GPUDevError) as taken:
        start(alice, name)
    assert taken.value.status == 409
    # While for bob it does not exist: he gets his own container of that name
    with pytest.raises(GPUDevError) as hidden:
        view(held, BOB).get(name)
    assert hidden.value.status == 404
    assert start(view(held, BOB), name).container_id != old.container_id
    # And stopping hers by name stops the old one
    alice.stop(name)
    assert alice.get(name).state == "exited"


def test_a_plan_on_a_busy_host_never_names_another_users_lease(
    held: Authority, gpu_engine: None
) -> None:
    # Given alice holding every GPU of the host
    name = a_name()
    alice = view(held, ALICE)
    hers = start(alice, name, gpus=len(alice.describe_hosts()[0].gpus.gpus))
    assert hers.lease_id
    # When bob plans a start with a GPU, Then he is told none is free, as a start tells him:
    # by another user, without her name, her container or her lease
    with pytest.raises(GPUDevError) as busy:
        view(held, BOB).plan(StartRequest(environment="default", name=a_name(), gpus=1))
    told = f"{busy.value.message} {busy.value.details}"
    assert "another user" in told
    for secret in (ALICE, name, hers.lease_id):
        assert secret not in told
