"""Time to a running dev container: ours against raw ``docker run`` of the same image with the
same options, in one run (goal: at most 1.15x).

Floor: the Docker SDK's ``containers.run`` (create + start) of the kernel image with the options
our start uses (init, labels, env, workspace bind mount, user, restart policy). Peer: the
``docker run -d`` command line with the same options. Ours: ``DevContainers.start`` of the
default environment, CPU-only (environment lookup, image allow-list, mount policy, labels,
create, start, inspect). The three are interleaved, each run removed before the next.

Run: ``.venv/bin/python benchmarks/bench_start.py`` (needs the engine and the kernel image).
"""

from __future__ import annotations

import os
import shutil
import statistics
import subprocess
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

import docker
from traitlets.config import Config

from jupyter_gpudev.changes.tracker import track_changes
from jupyter_gpudev.containers import DevContainers, StartRequest, docker_name
from jupyter_gpudev.engine import HostPool

IMAGE = os.environ.get("GPUDEV_IMAGE", "gpudev-python:bookworm")
RUNS = int(os.environ.get("BENCH_RUNS", "10"))


def main() -> None:
    client = docker.from_env()
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp) / "work"
        root.mkdir()
        config = Config()
        config.GPUInventory.backend = "none"
        config.DevContainers.state_dir = str(Path(tmp) / "state")
        manager = DevContainers(root_dir=root, host_pool=HostPool(config=config), config=config)
        track_changes(manager)
        workspace = f"/workspaces/{root.name}"
        user = f"{os.getuid()}:{os.getgid()}"
        labels = {"org.jupyter.gpudev.bench": "1"}
        env = {"NVIDIA_VISIBLE_DEVICES": "void", "CUDA_DEVICE_ORDER": "PCI_BUS_ID"}
        docker_cli = shutil.which("docker")

        def floor(i: int) -> Callable[[], None]:
            def run() -> None:
                client.containers.run(
                    IMAGE,
                    ["sleep", "infinity"],
                    name=f"bench-floor-{i}",
                    detach=True,
                    init=True,
                    labels=labels,
                    environment=env,
                    user=user,
                    working_dir=workspace,
                    mounts=[docker.types.Mount(workspace, str(root), type="bind")],
                )

            return run

        def peer(i: int) -> Callable[[], None]:
            assert docker_cli is not None
            argv = [
                docker_cli,
                "run",
                "-d",
                "--init",
                "--name",
                f"bench-peer-{i}",
                "--label",
                "org.jupyter.gpudev.bench=1",
                "-e",
                "NVIDIA_VISIBLE_DEVICES=void",
                "-e",
                "CUDA_DEVICE_ORDER=PCI_BUS_ID",
                "--user",
                user,
                "-w",
                workspace,
                "--restart",
                "no",
                "--mount",
                f"type=bind,source={root},target={workspace}",
                IMAGE,
                "sleep",
                "infinity",
            ]

            def run() -> None:
                subprocess.run(argv, check=True, capture_output=True)

            return run

        def ours(i: int) -> Callable[[], None]:
            def run() -> None:
                manager.start(StartRequest(environment="default", name=f"bench-ours-{i}"))

            return run

        samples: dict[str, list[float]] = {
            "floor: SDK containers.run": [],
            "ours: DevContainers.start": [],
        }
        if docker_cli:
            samples["peer: docker run -d"] = []
        makers = {
            "floor: SDK containers.run": floor,
            "ours: DevContainers.start": ours,
            "peer: docker run -d": peer,
        }
        names = {
            "floor: SDK containers.run": "bench-floor-",
            "ours: DevContainers.start": docker_name("bench-ours-"),
            "peer: docker run -d": "bench-peer-",
        }
        for i in range(-1, RUNS):  # run -1 is a warm-up
            for label, values in samples.items():
                fn = makers[label](i + 1)
                started = time.perf_counter()
                fn()
                elapsed = time.perf_counter() - started
                if i >= 0:
                    values.append(elapsed)
                client.containers.get(f"{names[label]}{i + 1}").remove(force=True)
        manager.host_pool.close()
    base = statistics.median(samples["floor: SDK containers.run"])
    print(f"{RUNS} runs each (interleaved), median and max in ms, ratio = median / floor\n")
    print("| path | median ms | max ms | ratio |")
    print("| --- | --- | --- | --- |")
    for label, values in samples.items():
        median = statistics.median(values)
        print(f"| {label} | {median * 1000:.0f} | {max(values) * 1000:.0f} | {median / base:.2f} |")


if __name__ == "__main__":
    main()
