"""Listing dev containers on the real engine: one list request, inspect data reused while the
engine's event stream says nothing changed, never an answer older than the engine's word."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterable, Mapping
from pathlib import Path

import docker

from jupyter_gpudev.containers import DevContainerInfo, DevContainers, StartRequest, docker_name
from jupyter_gpudev.containers.model import engine_time


def listed(manager: DevContainers, name: str) -> DevContainerInfo:
    return next(info for info in manager.list(all_states=True) if info.name == name)


def eventually(check: Callable[[], bool], seconds: float = 10.0) -> None:
    deadline = time.monotonic() + seconds
    while not check():
        assert time.monotonic() < deadline, "the listing never showed the engine's change"
        time.sleep(0.05)


def test_listings_reuse_inspects_until_an_engine_event_says_a_container_changed(
    dev_containers: Callable[..., DevContainers],
    docker_client: docker.DockerClient,
    tmp_path: Path,
) -> None:
    # Given two running dev containers, listed once
    manager = dev_containers(tmp_path / "work")
    for name in ("list-a", "list-b"):
        manager.start(StartRequest(environment="default", name=name, gpus=0))
    states = manager.host_pool.get(manager.host_pool.local_name).containers
    before = listed(manager, "list-a")
    ids = {name: engine_id(docker_client, name) for name in ("list-a", "list-b")}
    # When they are listed again, nothing having changed
    inspects = dict(states.inspected)
    again = manager.list(all_states=True)
    # Then nothing is inspected again, and the answer is the same
    assert inspected(states.inspected, ids.values()) == inspected(inspects, ids.values())
    assert [i.started_at for i in again if i.name == "list-a"] == [before.started_at]
    # When one is restarted behind gpudev's back (running before and after: the list request
    # alone cannot tell)
    time.sleep(1.1)  # a second later: StartedAt differs
    docker_client.containers.get(docker_name("list-a")).restart(timeout=0)
    # Then a listing soon shows its new start, from a new inspect of that container only
    eventually(lambda: listed(manager, "list-a").started_at != before.started_at)
    assert listed(manager, "list-a").started_at == docker_started_at(docker_client, "list-a")
    assert states.inspected[ids["list-a"]] == inspects[ids["list-a"]] + 1
    assert states.inspected[ids["list-b"]] == inspects[ids["list-b"]]
    # When one is stopped and the other removed behind gpudev's back
    docker_client.containers.get(docker_name("list-b")).stop(timeout=0)
    docker_client.containers.get(docker_name("list-a")).remove(force=True)
    # Then the very next listing says so (the list request shows states and removals)
    infos = {i.name: i for i in manager.list(all_states=True) if i.name.startswith("list-")}
    assert set(infos) == {"list-b"}
    assert infos["list-b"].state == "exited"
    assert [i for i in manager.list(all_states=False) if i.name.startswith("list-")] == []


def test_without_the_event_stream_every_container_is_inspected_again(
    dev_containers: Callable[..., DevContainers],
    docker_client: docker.DockerClient,
    tmp_path: Path,
) -> None:
    # Given a dev container listed once, its inspect data kept (other tests' containers on the
    # engine are listed too: only this one's inspects are counted)
    manager = dev_containers(tmp_path / "work")
    manager.start(StartRequest(environment="default", name="list-c", gpus=0))
    container_id = engine_id(docker_client, "list-c")
    states = manager.host_pool.get(manager.host_pool.local_name).containers
    manager.list()
    inspects = states.inspected[container_id]
    # When the event stream ends (the engine restarted, the connection dropped)
    states.close()
    # Then nothing kept is trusted: the next listing inspects it again, and opens a new stream
    assert "list-c" in [i.name for i in manager.list()]
    assert states.inspected[container_id] == inspects + 1
    manager.list()
    assert states.inspected[container_id] == inspects + 1


def engine_id(client: docker.DockerClient, name: str) -> str:
    return str(client.containers.get(docker_name(name)).id)


def inspected(counts: Mapping[str, int], ids: Iterable[str]) -> int:
    """How many inspects ``counts`` holds for the containers ``ids``."""
    return sum(counts.get(i, 0) for i in ids)


def docker_started_at(client: docker.DockerClient, name: str) -> str | None:
    started = client.containers.get(docker_name(name)).attrs["State"]["StartedAt"]
    return engine_time(started)


def test_a_listing_does_not_wait_for_a_container_being_diffed(
    dev_containers: Callable[..., DevContainers],
    docker_client: docker.DockerClient,
    tmp_path: Path,
) -> None:
    """``docker diff`` holds the container's lock; an inspect of that container waits for it.
    The listing answers from the engine's list and kept inspect data instead."""
    manager = dev_containers(tmp_path / "work")
    names = [f"list-d{i}" for i in range(3)]
    for name in names:
        manager.start(StartRequest(environment="default", name=name, gpus=0))
    manager.list()
    states = manager.host_pool.get(manager.host_pool.local_name).containers
    ids = [engine_id(docker_client, name) for name in names]
    inspects = inspected(states.inspected, ids)
    # When every container's changes are being read while the listing runs
    stop = threading.Event()

    def diff_all() -> None:
        while not stop.is_set():
            for name in names:
                docker_client.containers.get(docker_name(name)).diff()

    worker = threading.Thread(target=diff_all)
    worker.start()
    try:
        for _ in range(5):
            assert sorted(i.name for i in manager.list() if i.name in names) == names
    finally:
        stop.set()
        worker.join()
    # Then no listing inspected a container (none waited on a lock)
    assert inspected(states.inspected, ids) == inspects
