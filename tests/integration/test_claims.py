"""Exclusive GPUs across servers, ledgers and host entries: the engine's claims decide.

Two users' servers are two ``DevContainers`` with their own state folders (own SQLite ledgers)
on the one local engine; two host entries are ``local`` and ``far`` (the same engine through a
real sshd). GPUs: the fake nvidia-smi (two A100s), started with the stand-in NVIDIA hook.
"""

from __future__ import annotations

import secrets
import threading
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import docker
import pytest

from jupyter_gpudev.containers import DevContainerInfo, DevContainers, StartRequest, docker_name
from jupyter_gpudev.errors import GPUDevError
from jupyter_gpudev.labels import L_CLAIM, L_CLAIM_HOLDER, L_MANAGED, L_SERVER
from jupyter_gpudev.leasing import NoFreeGPU, claim_name
from tests.sshd import SSHServer

pytestmark = pytest.mark.integration

A100_0 = "GPU-5d5ba0d6-d33d-2b2c-524d-9e3d8d2b8a77"
A100_1 = "GPU-8f2a9c41-7b3e-4c55-9d0a-2e6f1b7c3d90"

Make = Callable[..., DevContainers]


@pytest.fixture
def make(user_server: Make, gpu_engine: None) -> Make:
    """A user's server (``far``: the same engine through the real sshd as a second host)."""

    def make_one(user: str, far: dict[str, Any] | None = None) -> DevContainers:
        return user_server(user, hosts={"far": far} if far is not None else None)

    return make_one


@pytest.fixture(autouse=True)
def no_claims_left(docker_client: docker.DockerClient) -> Iterator[None]:
    """Claims of earlier tests' removed containers are stale; the tests start without them."""
    remove_claims(docker_client)
    yield
    remove_claims(docker_client)


def remove_claims(docker_client: docker.DockerClient) -> None:
    # (every dev container has the claim label too, empty)
    for claim in docker_client.containers.list(all=True, filters={"label": L_CLAIM}):
        if (claim.labels or {}).get(L_CLAIM) and not (claim.labels or {}).get(L_MANAGED):
            claim.remove(force=True)


def race(starts: list[Callable[[], DevContainerInfo]]) -> tuple[list[DevContainerInfo], list[Any]]:
    """Run ``starts`` at once (a barrier); the winners' infos and the losers' errors."""
    barrier = threading.Barrier(len(starts))
    results: list[Any] = [None] * len(starts)

    def run(index: int) -> None:
        barrier.wait()
        try:
            results[index] = starts[index]()
        except GPUDevError as err:
            results[index] = err
        except Exception as exc:  # anything else is a failure the test reports
            results[index] = exc

    threads = [threading.Thread(target=run, args=(i,)) for i in range(len(starts))]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=300)
    won = [r for r in results if isinstance(r, DevContainerInfo)]
    lost = [r for r in results if not isinstance(r, DevContainerInfo)]
    return won, lost


def gpus_of_running(docker_client: docker.DockerClient, *managers: DevContainers) -> list[str]:
    """Every GPU UUID in the DeviceRequests of the running containers these managers made."""
    servers = {m.server_id for m in managers}
    uuids: list[str] = []
    for container in docker_client.containers.list(filters={"label": f"{L_MANAGED}=1"}):
        if container.labels.get(L_SERVER) not in servers:
            continue
        for request in container.attrs["HostConfig"].get("DeviceRequests") or []:
            uuids.extend(request.get("DeviceIDs") or [])
    return sorted(uuids)


def assert_two_won(
    won: list[DevContainerInfo],
    lost: list[Any],
    docker_client: docker.DockerClient,
    *managers: DevContainers,
) -> None:
    assert len(won) == 2, lost
    assert all(isinstance(err, NoFreeGPU) and err.status == 409 for err in lost), [
        repr(err) for err in lost if not isinstance(err, NoFreeGPU)
    ]
    assert sorted(uuid for info in won for uuid in info.gpu_uuids) == [A100_0, A100_1]
    # The engine agrees: no GPU is in two running containers
    assert gpus_of_running(docker_client, *managers) == [A100_0, A100_1]


def test_sixteen_starts_by_two_users_over_two_gpus_give_two_containers(
    make: Make, docker_client: docker.DockerClient
) -> None:
    # Given two users' servers, each with its own ledger, on one engine with two GPUs
    alice, bob = make("alice"), make("bob")
    tag = secrets.token_hex(2)

    def start(manager: DevContainers, n: int) -> Callable[[], DevContainerInfo]:
        request = StartRequest(environment="default", name=f"r{n}-{tag}", gpus=1)
        return lambda: manager.start(request)

    # When 16 starts of one GPU each race, alternating between the two servers
    won, lost = race([start(alice, n) if n % 2 else start(bob, n) for n in range(16)])
    # Then exactly two run, on different GPUs, and the 14 others got a 409
    assert_two_won(won, lost, docker_client, alice, bob)
    # And each winner's GPU is claimed on the engine by its container
    for info in won:
        claim = docker_client.containers.get(claim_name(info.gpu_uuids[0]))
        holder = docker_client.containers.get(docker_name(info.name))
        assert claim.labels[L_CLAIM_HOLDER] == holder.id
        assert claim.status == "created"  # never started


def test_two_host_entries_of_one_engine_never_share_a_gpu(
    make: Make, docker_client: docker.DockerClient, ssh_server: SSHServer, remote_smi: Path
) -> None:
    # Given one server whose hosts ``local`` and ``far`` are the same engine with two GPUs
    manager = make("alice", far=ssh_server.host_entry(nvidia_smi=str(remote_smi)))
    tag = secrets.token_hex(2)

    def start(host: str, n: int) -> Callable[[], DevContainerInfo]:
        request = StartRequest(environment="default", name=f"h{n}-{tag}", gpus=1, host=host)
        return lambda: manager.start(request)

    # When 8 starts race, alternating between the two entries
    won, lost = race([start("far" if n % 2 else "local", n) for n in range(8)])
    # Then two run, on different GPUs
    assert_two_won(won, lost, docker_client, manager)


def test_resume_cannot_take_a_gpu_another_server_holds(
    make: Make, docker_client: docker.DockerClient
) -> None:
    # Given alice's container, created with GPU 0 and stopped (its GPU free again)
    alice, bob = make("alice"), make("bob")
    tag = secrets.token_hex(2)
    mine = alice.start(StartRequest(environment="default", name=f"mine-{tag}", gpu_uuids=(A100_0,)))
    alice.stop(mine.name)
    # And bob's server leasing GPU 0 meanwhile (its own ledger knows nothing of alice's)
    theirs = bob.start(StartRequest(environment="default", name=f"theirs-{tag}", gpus=2))
    assert A100_0 in theirs.gpu_uuids
    # When alice resumes hers, several times at once
    won, lost = race([lambda: alice.resume(mine.name) for _ in range(3)])
    # Then it is refused with a 409 that says the GPU is held, and it stays stopped
    assert won == []
    assert all(isinstance(err, NoFreeGPU) for err in lost), lost
    assert "held" in lost[0].message.lower()
    assert docker_client.containers.get(docker_name(mine.name)).status == "exited"
    assert gpus_of_running(docker_client, alice, bob) == [A100_0, A100_1]
    # And once bob's container stops, the resume works and holds GPU 0 again
    bob.stop(theirs.name)
    resumed = alice.resume(mine.name)
    assert resumed.state == "running"
    assert gpus_of_running(docker_client, alice, bob) == [A100_0]


def test_a_container_removed_behind_gpudevs_back_frees_its_gpu_at_once(
    make: Make, docker_client: docker.DockerClient
) -> None:
    # Given both GPUs held by alice's containers
    alice, bob = make("alice"), make("bob")
    tag = secrets.token_hex(2)
    first = alice.start(StartRequest(environment="default", name=f"a-{tag}", gpus=1))
    alice.start(StartRequest(environment="default", name=f"b-{tag}", gpus=1))
    with pytest.raises(NoFreeGPU):
        bob.start(StartRequest(environment="default", name=f"c-{tag}", gpus=1))
    # When one of them is removed with ``docker rm -f`` (its claim left behind)
    docker_client.containers.get(docker_name(first.name)).remove(force=True)
    # Then bob gets its GPU at once
    third = bob.start(StartRequest(environment="default", name=f"c-{tag}", gpus=1))
    assert third.gpu_uuids == first.gpu_uuids


def test_pruned_claims_are_made_again_before_anyone_can_take_the_gpu(
    make: Make, docker_client: docker.DockerClient
) -> None:
    # Given alice's container holding a GPU, and its claim removed by ``docker container prune``
    alice, bob = make("alice"), make("bob")
    tag = secrets.token_hex(2)
    held = alice.start(StartRequest(environment="default", name=f"a-{tag}", gpus=2))
    remove_claims(docker_client)
    # When bob asks for a GPU
    with pytest.raises(NoFreeGPU):
        bob.start(StartRequest(environment="default", name=f"b-{tag}", gpus=1))
    # Then the claims are back, held by alice's container
    holder = docker_client.containers.get(docker_name(held.name))
    for uuid in held.gpu_uuids:
        assert docker_client.containers.get(claim_name(uuid)).labels[L_CLAIM_HOLDER] == holder.id
