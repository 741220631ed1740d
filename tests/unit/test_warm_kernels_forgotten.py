"""A warm kernel whose container is gone (removed, or stopped after its last kernel) is not
kept: the next ``fill`` of any shared container drops it, its ports and its record, so a server
that starts and removes containers for days does not hold one engine answer per container
(the soak of benchmarks/bench_load.py grew about 70 KiB a cycle that way)."""

from __future__ import annotations

import json
import threading
import time
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import docker.errors

from jupyter_gpudev.kernels.placements import PLACEMENTS
from jupyter_gpudev.kernels.process import ContainerProcesses
from jupyter_gpudev.kernels.warm import WarmKernel, WarmKernels


class Processes(ContainerProcesses):
    """A container's kernel processes whose exec runs until ``gone`` is set (the container
    removed: the engine then answers 404 for the exec), and whose signals are counted."""

    def __init__(self, name: str) -> None:
        self.name = name
        self.container_id = f"id-{name}"
        self.gone = threading.Event()
        self.signals: list[int] = []

    @property
    def instance(self) -> str:
        return f"{self.container_id}@started"

    def exit_code(self, handle: str, runtime_id: str) -> int | None:  # noqa: ARG002
        if self.gone.is_set():
            raise docker.errors.NotFound("No such exec instance")
        return None

    def send_signal(self, runtime_id: str, signum: int) -> None:  # noqa: ARG002
        if self.gone.is_set():
            raise docker.errors.NotFound("No such container")
        self.signals.append(signum)

    def close_forwards(self, ports: tuple[int, ...]) -> None:
        pass


class Manager:
    """What ``fill`` asks of the manager: a Docker host, the state folder."""

    def __init__(self, state_dir: Path) -> None:
        self.state_dir = str(state_dir)
        self.host_pool = SimpleNamespace(
            get=lambda _name: SimpleNamespace(backend=SimpleNamespace(kind="docker"))
        )


ARGV = ("python3", "-m", "ipykernel_launcher", "-f", "{connection_file}")


def warm_kernel(processes: Processes) -> WarmKernel:
    ports = PLACEMENTS.choose_ports(processes.name, 5)
    return WarmKernel(
        host="local",
        container=processes.name,
        processes=processes,
        argv=ARGV,
        runtime_id=f"warm-{processes.name}",
        exec_id=f"exec-{processes.name}",
        ports=ports,
        reached=tuple(("172.17.0.2", p) for p in ports),
        key=b"k" * 64,
    )


def recorded(record: Path) -> dict[str, Any]:
    """The warm kernels' record (empty until its first write)."""
    return dict(json.loads(record.read_text())) if record.exists() else {}


def wait_for(check: Any, what: str, seconds: float = 10.0) -> None:
    deadline = time.monotonic() + seconds
    while not check():
        assert time.monotonic() < deadline, f"not within {seconds} s: {what}"
        time.sleep(0.02)


def test_the_warm_kernel_of_a_removed_container_is_dropped(tmp_path: Path) -> None:
    # Given warm kernels kept in shared containers, one ready in "first"
    manager = Manager(tmp_path)
    pool = WarmKernels(count=1)
    made: dict[str, Processes] = {}

    def start(_manager: Any, key: tuple[str, str]) -> WarmKernel:
        made[key[1]] = Processes(key[1])
        return warm_kernel(made[key[1]])

    pool._start = start  # type: ignore[method-assign,assignment]
    record = tmp_path / "warm-kernels.json"
    try:
        pool.fill(manager, ("local", "first"))  # type: ignore[arg-type]
        wait_for(lambda: pool.ready(("local", "first")) == 1, "a warm kernel in first")
        wait_for(lambda: "warm-first" in recorded(record), "first recorded")
        # When "first" is removed (its exec gone with it) and a kernel starts in "second"
        made["first"].gone.set()
        pool.fill(manager, ("local", "second"))  # type: ignore[arg-type]
        wait_for(lambda: pool.ready(("local", "second")) == 1, "a warm kernel in second")
        # Then the pool holds nothing of "first": no kernel, no key, no ports, no record
        wait_for(lambda: ("local", "first") not in pool._ready, "first dropped")
        assert pool.ready(("local", "first")) == 0
        assert "first" not in PLACEMENTS._ports_in_use
        wait_for(lambda: "warm-first" not in recorded(record), "first's record removed")
        # And the live one of "second" is kept, unsignalled
        assert pool.ready(("local", "second")) == 1
        assert made["second"].signals == []
        wait_for(lambda: "warm-second" in recorded(record), "second recorded")
    finally:
        pool.close(manager)  # type: ignore[arg-type]
    # The close stops the one left (its ports are released with it)
    assert made["second"].signals == [9]
    assert "second" not in PLACEMENTS._ports_in_use


def test_a_taken_kernel_leaves_no_empty_entry(tmp_path: Path) -> None:
    # Given one warm kernel ready in "third"
    manager = Manager(tmp_path)
    pool = WarmKernels(count=1)
    processes = Processes("third")
    pool._start = lambda _m, _k: warm_kernel(processes)  # type: ignore[method-assign,assignment]
    try:
        pool.fill(manager, ("local", "third"))  # type: ignore[arg-type]
        wait_for(lambda: pool.ready(("local", "third")) == 1, "a warm kernel in third")
        # When it is taken by a kernel of the same container instance
        taken = pool.take(("local", "third"), processes, list(ARGV))
        # Then it is handed out and its key is not kept as an empty list
        assert taken is not None
        assert ("local", "third") not in pool._ready
    finally:
        pool.close(manager)  # type: ignore[arg-type]
