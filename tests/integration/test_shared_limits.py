"""Per-user limits in shared mode (issue #30): no user takes every GPU, starts containers
without bound, pins them forever, or runs one without a memory and CPU limit.

Two users' views of one service are built in-process (``Authority.for_user``, with the real
accounts gpudev-alice and gpudev-bob); their dev containers run on the real engine, with GPUs
from the fake nvidia-smi (two A100s). A refusal is a 409 whose message names the limit, the
setting it comes from and what the user holds, and leaves nothing behind: no container
without a lease, no lease without a container.
"""

from __future__ import annotations

import json
import logging
import secrets
import threading
import uuid
from collections.abc import Callable, Iterator
from functools import partial
from pathlib import Path
from typing import Any

import docker
import pytest

from jupyter_gpudev.containers import DevContainerInfo, DevContainers, StartRequest, docker_name
from jupyter_gpudev.errors import GPUDevError
from jupyter_gpudev.kernels.placements import PLACEMENTS
from jupyter_gpudev.labels import L_OWNER, L_SERVER
from jupyter_gpudev.shared.authority import Authority
from jupyter_gpudev.shared.kernels import KernelProcesses
from tests.integration.shared_views import close, new_service, service_config

pytestmark = pytest.mark.integration

ALICE, BOB = "gpudev-alice", "gpudev-bob"
LOG = logging.getLogger("gpudev-test")
#: The two GPUs of the fake nvidia-smi.
GPU_0 = "GPU-5d5ba0d6-d33d-2b2c-524d-9e3d8d2b8a77"
GPU_1 = "GPU-8f2a9c41-7b3e-4c55-9d0a-2e6f1b7c3d90"
Make = Callable[..., Authority]


@pytest.fixture
def service(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, docker_client: docker.DockerClient
) -> Iterator[Make]:
    """Makes the shared service's views with ``c.UserLimits`` set to ``limits`` (its state in
    the test's folder); the containers of every service made are removed afterwards."""
    made: list[Authority] = []

    def make(**limits: Any) -> Authority:
        config = service_config(tmp_path, monkeypatch)
        config.GPUInventory.cache_seconds = 0.0
        for key, value in limits.items():
            config.UserLimits[key] = value
        made.append(new_service(tmp_path, config))
        return made[-1]

    yield make
    for held in made:
        close(held, docker_client)


def containers_of(held: Authority, user: str) -> DevContainers:
    return held.for_user(user).containers


def start(manager: DevContainers, name: str, **asked: Any) -> DevContainerInfo:
    return manager.start(StartRequest(environment="default", name=name, **asked))


def refusal(action: Callable[[], object]) -> GPUDevError:
    """The error ``action`` raised; failing the test when it did what it was asked."""
    try:
        done = action()
    except GPUDevError as err:
        return err
    pytest.fail(f"not refused: {getattr(done, 'name', done)!r} was done")


def owned_on_engine(client: docker.DockerClient, held: Authority, user: str) -> list[str]:
    """The names of ``user``'s dev containers of this service on the engine, any state."""
    server = held.service.containers.server_id
    found = client.containers.list(
        all=True, filters={"label": [f"{L_SERVER}={server}", f"{L_OWNER}={user}"]}
    )
    return sorted(str(container.name) for container in found)


def gpus_leased_to(held: Authority, user: str) -> int:
    ledger = held.service.containers.ledger
    return sum(len(lease.gpu_uuids) for lease in ledger.active() if lease.owner == user)


def part() -> str:
    return secrets.token_hex(3)


# -- GPUs -----------------------------------------------------------------------------------


def test_a_user_holds_no_more_gpus_than_allowed(
    service: Make, gpu_engine: None, docker_client: docker.DockerClient
) -> None:
    # Given one GPU allowed to each user, and alice holding one
    held = service(gpus=1)
    alice, bob = containers_of(held, ALICE), containers_of(held, BOB)
    first = start(alice, f"g1-{part()}", gpus=1)
    assert len(first.gpu_uuids) == 1
    # When she starts another container with a GPU (the host has one more free)
    refused = refusal(lambda: start(alice, f"g2-{part()}", gpus=1))
    # Then it is refused with a 409 naming the limit, its setting and what she holds
    assert (refused.status, refused.code) == (409, "limit_reached"), refused.message
    assert "1 of 1 GPU" in refused.message
    assert "c.UserLimits.gpus" in refused.message
    assert first.name in refused.message
    # And nothing was left: no second container, no second lease
    assert owned_on_engine(docker_client, held, ALICE) == [first.key]
    assert gpus_leased_to(held, ALICE) == 1
    # And bob, whose limit is his own, takes the other GPU
    assert len(start(bob, f"gb-{part()}", gpus=1).gpu_uuids) == 1


def test_a_user_cannot_ask_for_more_gpus_at_once_than_allowed(
    service: Make, gpu_engine: None, docker_client: docker.DockerClient
) -> None:
    # Given one GPU allowed to each user, and alice holding none
    held = service(gpus=1)
    alice = containers_of(held, ALICE)
    # When she asks for both GPUs of the host in one container
    refused = refusal(lambda: start(alice, f"g2-{part()}", gpus=2))
    # Then it is refused, and nothing was made or leased
    assert (refused.status, refused.code) == (409, "limit_reached"), refused.message
    assert "c.UserLimits.gpus" in refused.message
    assert owned_on_engine(docker_client, held, ALICE) == []
    assert gpus_leased_to(held, ALICE) == 0


def test_resuming_a_container_counts_its_gpus_again(service: Make, gpu_engine: None) -> None:
    # Given alice's stopped GPU container, and another that holds her one allowed GPU now
    held = service(gpus=1)
    alice = containers_of(held, ALICE)
    stopped = start(alice, f"g1-{part()}", gpu_uuids=(GPU_0,))
    alice.stop(stopped.name)
    running = start(alice, f"g2-{part()}", gpu_uuids=(GPU_1,))
    # When she resumes the stopped one (its GPU is free)
    refused = refusal(lambda: alice.resume(stopped.name))
    # Then it is refused, naming the container that holds her GPU, and it stays stopped
    assert (refused.status, refused.code) == (409, "limit_reached"), refused.message
    assert running.name in refused.message
    assert alice.get(stopped.name).state != "running"
    # And once that one is stopped, it resumes
    alice.stop(running.name)
    assert alice.resume(stopped.name).state == "running"


# -- running and pinned containers ----------------------------------------------------------


def test_a_user_runs_no_more_containers_than_allowed(
    service: Make, docker_client: docker.DockerClient
) -> None:
    # Given two running containers allowed to each user, and alice running two
    held = service(running=2)
    alice, bob = containers_of(held, ALICE), containers_of(held, BOB)
    names = [start(alice, f"r{n}-{part()}").name for n in range(2)]
    # When she starts a third
    refused = refusal(lambda: start(alice, f"r3-{part()}"))
    # Then it is refused, naming the limit and her running containers
    assert (refused.status, refused.code) == (409, "limit_reached"), refused.message
    assert "2 of 2 running" in refused.message
    assert "c.UserLimits.running" in refused.message
    assert all(name in refused.message for name in names)
    assert len(owned_on_engine(docker_client, held, ALICE)) == 2
    # And bob starts his own
    start(bob, f"rb-{part()}")
    # When she stops one, starts another, and resumes the one she stopped
    alice.stop(names[0])
    start(alice, f"r4-{part()}")
    refused = refusal(lambda: alice.resume(names[0]))
    # Then the resume is refused: it would be a third running one
    assert (refused.status, refused.code) == (409, "limit_reached"), refused.message
    assert alice.get(names[0]).state != "running"


def test_a_user_pins_no_more_containers_than_allowed(service: Make) -> None:
    # Given one pinned container allowed to each user, and alice's two containers, one pinned
    held = service(pinned=1)
    alice, bob = containers_of(held, ALICE), containers_of(held, BOB)
    first, second = (start(alice, f"p{n}-{part()}").name for n in range(2))
    assert alice.pin(first).pinned
    # When she pins the other
    refused = refusal(lambda: alice.pin(second))
    # Then it is refused, naming the one she pinned, and it is not pinned
    assert (refused.status, refused.code) == (409, "limit_reached"), refused.message
    assert "1 of 1 pinned" in refused.message
    assert "c.UserLimits.pinned" in refused.message
    assert first in refused.message
    assert not alice.get(second).pinned
    # And pinning the pinned one again, or bob pinning his, is not refused
    assert alice.pin(first).pinned
    assert bob.pin(start(bob, f"pb-{part()}").name).pinned
    # And once she unpins the first, the other can be pinned
    alice.pin(first, pinned=False)
    assert alice.pin(second).pinned


def test_an_administrator_resuming_a_users_container_counts_it_for_that_user(
    service: Make,
) -> None:
    # Given one running container allowed, and alice's stopped container and a running one
    held = service(running=1)
    alice = containers_of(held, ALICE)
    stopped = start(alice, f"a1-{part()}").key  # the name an administrator gives it
    alice.stop(stopped)
    start(alice, f"a2-{part()}")
    # When an administrator resumes alice's stopped container
    admin = held.for_user("gpudev-admin", hub_admin=True).containers
    refused = refusal(lambda: admin.resume(stopped))
    # Then it is refused by alice's limit, which the message says is hers
    assert (refused.status, refused.code) == (409, "limit_reached"), refused.message
    assert f"{ALICE} has 1 of 1 running" in refused.message


def test_a_user_keeps_no_more_containers_than_allowed_stopped_ones_included(
    service: Make, docker_client: docker.DockerClient
) -> None:
    # Given two kept containers allowed to each user (no running limit), and alice keeping
    # two stopped ones
    held = service(containers=2)
    alice, bob = containers_of(held, ALICE), containers_of(held, BOB)
    names = [start(alice, f"k{n}-{part()}").name for n in range(2)]
    for name in names:
        alice.stop(name)
    # When she starts a third
    refused = refusal(lambda: start(alice, f"k3-{part()}"))
    # Then it is refused, naming the limit, her containers and what to do
    assert (refused.status, refused.code) == (409, "limit_reached"), refused.message
    assert "2 of 2 dev containers" in refused.message
    assert "c.UserLimits.containers" in refused.message
    assert "remove (or commit and remove)" in refused.message
    assert all(name in refused.message for name in names)
    assert len(owned_on_engine(docker_client, held, ALICE)) == 2
    # And resuming one she keeps is not refused, and bob starts his own
    assert alice.resume(names[0]).state == "running"
    start(bob, f"kb-{part()}")
    # And once she removes one, she starts another
    alice.remove(names[1], force=True)
    start(alice, f"k4-{part()}")
    assert len(owned_on_engine(docker_client, held, ALICE)) == 2


# -- concurrency ----------------------------------------------------------------------------


def concurrently(actions: list[Callable[[], object]]) -> list[object]:
    """Run ``actions`` in threads released at once: each one's result or error."""
    barrier = threading.Barrier(len(actions))
    results: list[object] = [None] * len(actions)

    def run(index: int) -> None:
        barrier.wait()
        try:
            results[index] = actions[index]()
        except GPUDevError as err:
            results[index] = err

    threads = [threading.Thread(target=run, args=(n,)) for n in range(len(actions))]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=240)
    return results


def test_concurrent_starts_of_one_user_pass_a_limit_of_one_once(
    service: Make, docker_client: docker.DockerClient
) -> None:
    # Given one running container allowed to each user
    held = service(running=1)
    alice = containers_of(held, ALICE)
    # When alice starts four at once
    results = concurrently([partial(start, alice, f"c{n}-{part()}") for n in range(4)])
    # Then exactly one started, and the others were refused by the limit
    started = [r for r in results if isinstance(r, DevContainerInfo)]
    refused = [r for r in results if isinstance(r, GPUDevError)]
    assert len(started) == 1, [getattr(r, "message", r) for r in results]
    assert [r.code for r in refused] == ["limit_reached"] * 3, [r.message for r in refused]
    assert owned_on_engine(docker_client, held, ALICE) == [started[0].key]


def test_concurrent_gpu_starts_of_one_user_pass_a_gpu_limit_of_one_once(
    service: Make, gpu_engine: None, docker_client: docker.DockerClient
) -> None:
    # Given one GPU allowed to each user, on a host with two free
    held = service(gpus=1)
    alice = containers_of(held, ALICE)
    # When alice starts four GPU containers at once
    results = concurrently([partial(start, alice, f"cg{n}-{part()}", gpus=1) for n in range(4)])
    # Then exactly one holds a GPU, and the others were refused by the limit
    started = [r for r in results if isinstance(r, DevContainerInfo)]
    refused = [r for r in results if isinstance(r, GPUDevError)]
    assert len(started) == 1, [getattr(r, "message", r) for r in results]
    assert [r.code for r in refused] == ["limit_reached"] * 3, [r.message for r in refused]
    assert gpus_leased_to(held, ALICE) == 1
    assert owned_on_engine(docker_client, held, ALICE) == [started[0].key]


def test_concurrent_starts_of_one_user_pass_a_containers_limit_of_one_once(
    service: Make, docker_client: docker.DockerClient
) -> None:
    # Given one kept container allowed to each user, and no running limit
    held = service(containers=1, running=0)
    alice = containers_of(held, ALICE)
    # When alice starts four at once (each passes the count before its build)
    results = concurrently([partial(start, alice, f"ck{n}-{part()}") for n in range(4)])
    # Then exactly one was made: the count under her lock, before the container is created
    started = [r for r in results if isinstance(r, DevContainerInfo)]
    refused = [r for r in results if isinstance(r, GPUDevError)]
    assert len(started) == 1, [getattr(r, "message", r) for r in results]
    assert [r.code for r in refused] == ["limit_reached"] * 3, [r.message for r in refused]
    assert all("c.UserLimits.containers" in r.message for r in refused)
    assert owned_on_engine(docker_client, held, ALICE) == [started[0].key]


# -- kernels --------------------------------------------------------------------------------


async def test_a_user_launches_no_more_kernels_through_the_service_than_allowed(
    service: Make, docker_client: docker.DockerClient, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Given one kernel allowed to each user, and alice's kernel launched through the service
    monkeypatch.setattr(PLACEMENTS, "_kernels_in", {})
    monkeypatch.setattr(PLACEMENTS, "_ports_in_use", {})
    held = service(kernels=1)
    processes = KernelProcesses(LOG)
    view = held.for_user(ALICE)
    first = str(uuid.uuid4())
    await processes.launch(view, ALICE, kernel_body(first))
    made = owned_on_engine(docker_client, held, ALICE)
    assert len(made) == 1, made
    try:
        # When her server launches a second kernel
        second = str(uuid.uuid4())
        with pytest.raises(GPUDevError) as caught:
            await processes.launch(view, ALICE, kernel_body(second))
        # Then it is refused, naming the limit and her kernel, and nothing was started
        refused = caught.value
        assert (refused.status, refused.code) == (409, "limit_reached"), refused.message
        assert "1 of 1 kernel" in refused.message
        assert "c.UserLimits.kernels" in refused.message
        assert first in refused.message
        assert owned_on_engine(docker_client, held, ALICE) == made
        with pytest.raises(GPUDevError, match="No kernel"):
            await processes.poll(ALICE, second)
        assert await processes.poll(ALICE, first) is None
    finally:
        await processes.cleanup(ALICE, first, {})
    assert owned_on_engine(docker_client, held, ALICE) == []


def kernel_body(kernel_id: str) -> dict[str, Any]:
    """What a client's provisioner sends to launch a kernel (``kernels.remote``)."""
    return {
        "kernel_id": kernel_id,
        "environment": "default",
        "key": secrets.token_hex(32),
        "signature_scheme": "hmac-sha256",
        "kernel_name": "gpudev-default",
        "env": {},
    }


# -- memory and CPUs ------------------------------------------------------------------------


def host_config(client: docker.DockerClient, name: str) -> dict[str, Any]:
    config: dict[str, Any] = client.containers.get(docker_name(name)).attrs["HostConfig"]
    return config


def environment(root: Path, name: str, custom: dict[str, Any]) -> None:
    folder = root / ".devcontainer" / name
    folder.mkdir(parents=True, exist_ok=True)
    spec = {"image": "gpudev-python:bookworm", "customizations": {"gpudev": custom}}
    (folder / "devcontainer.json").write_text(json.dumps(spec))


def test_a_container_without_limits_of_its_own_gets_the_services_default(
    service: Make, docker_client: docker.DockerClient
) -> None:
    # Given the service with no limit configured
    held = service()
    alice = containers_of(held, ALICE)
    # When alice starts a container whose environment asks for no memory or CPU limit
    box = start(alice, f"m-{part()}").key
    # Then it has the shared mode's default limits (CPUs: no more than the host has)
    limits = host_config(docker_client, box)
    assert limits["Memory"] == 32 * 1024**3
    cpus = int(docker_client.info()["NCPU"])
    assert limits["NanoCpus"] == min(8, cpus) * 10**9


def test_a_container_asking_for_more_than_allowed_is_refused(
    service: Make, docker_client: docker.DockerClient
) -> None:
    # Given at most 1g of memory and one CPU per container, 512m by default
    held = service(memory="1g", memory_default="512m", cpus=1.0)
    alice = containers_of(held, ALICE)
    root = alice.root_dir
    environment(root, "big", {"memory": "2g"})
    environment(root, "busy", {"cpus": 2})
    environment(root, "small", {"memory": "768m", "cpus": 0.5})
    # When alice starts an environment asking for more memory, or more CPUs, than that
    for env, setting in (("big", "c.UserLimits.memory"), ("busy", "c.UserLimits.cpus")):
        refused = refusal(partial(alice.start, StartRequest(environment=env, name=f"x-{part()}")))
        # Then it is refused before anything is made, naming the setting
        assert (refused.status, refused.code) == (409, "limit_reached"), refused.message
        assert setting in refused.message
        assert env in refused.message
    assert owned_on_engine(docker_client, held, ALICE) == []
    # And one asking for less gets what it asked, one asking nothing the default
    small = alice.start(StartRequest(environment="small", name=f"s-{part()}")).key
    assert host_config(docker_client, small)["Memory"] == 768 * 1024**2
    assert host_config(docker_client, small)["NanoCpus"] == 5 * 10**8
    plain = start(alice, f"d-{part()}").key
    assert host_config(docker_client, plain)["Memory"] == 512 * 1024**2
    assert host_config(docker_client, plain)["NanoCpus"] == 10**9


def test_single_user_mode_sets_no_limit_unless_configured(
    user_server: Callable[..., DevContainers], docker_client: docker.DockerClient
) -> None:
    # Given a single-user server with no limit configured
    manager = user_server("alice")
    # When it starts three containers
    names = [start(manager, f"su{n}-{part()}").name for n in range(3)]
    # Then all run, with no memory or CPU limit
    for name in names:
        assert manager.get(name).state == "running"
        assert host_config(docker_client, name)["Memory"] == 0
        assert host_config(docker_client, name)["NanoCpus"] == 0
