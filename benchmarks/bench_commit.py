"""Commit and push against ``docker commit`` + ``docker push``, in one run (goal: at most 1.05x).

A running dev container of the default environment gets BENCH_MB (20) MB of new random data
(replacing the previous run's) before every measured commit, so every push uploads a new layer
of the same size, as a real commit does; plus an edited file. Measured, alternating, BENCH_RUNS
(5) times each, against a real registry with htpasswd auth on loopback (Debian's
docker-registry; tests/registry.py starts it):

- floor: ``container.commit()`` then ``push`` of that image (the engine API, as ``docker commit``
  and ``docker push`` call it);
- ours: ``jupyter gpudev commit NAME --snapshot TAG --push`` through ``Committer.commit``: the
  capture (package probe + ``docker diff``) and the rendered diff, the commit, the snapshot's own
  image configuration, the push; timed by stage from its progress events.

Run: ``.venv/bin/python benchmarks/bench_commit.py`` (engine, kernel image, docker-registry).
"""

from __future__ import annotations

import itertools
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import docker
from traitlets.config import Config

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from jupyter_gpudev.changes.commit import CommitOptions, Committer
from jupyter_gpudev.changes.tracker import track_changes
from jupyter_gpudev.containers import DevContainers, StartRequest, docker_name
from jupyter_gpudev.engine import HostPool
from tests.registry import run_registry

RUNS = int(os.environ.get("BENCH_RUNS", "5"))
MEGABYTES = int(os.environ.get("BENCH_MB", "20"))
NAME = "bench-commit"


def main() -> None:
    engine = docker.from_env()
    with tempfile.TemporaryDirectory() as tmp, run_registry(Path(tmp)) as registry:
        os.environ["DOCKER_CONFIG"] = str(registry.docker_config(Path(tmp) / "docker"))
        auth = {"username": registry.username, "password": registry.password}
        work = Path(tmp) / "work"
        work.mkdir()
        config = Config()
        config.DevContainers.state_dir = str(Path(tmp) / "state")
        manager = DevContainers(root_dir=work, host_pool=HostPool(config=config), config=config)
        committer = Committer(track_changes(manager), manager.registries)
        floors: list[float] = []
        ours: list[float] = []
        stages: dict[str, list[float]] = {}
        try:
            manager.start(StartRequest(environment="default", name=NAME))
            container = engine.containers.get(docker_name(NAME))
            container.exec_run(
                ["sh", "-c", "echo tuned >> /etc/motd; mkdir -p /opt/data"], user="0"
            )

            def new_data(run: str) -> None:
                code, out = container.exec_run(
                    [
                        "sh",
                        "-c",
                        f"rm -f /opt/data/*; head -c {MEGABYTES}M /dev/urandom > /opt/data/{run}",
                    ],
                    user="0",
                )
                assert code == 0, out

            def floor(tag: str) -> None:
                image = container.commit()
                repository, version = tag.rsplit(":", 1)
                image.tag(repository, version)
                for event in engine.api.push(
                    repository, tag=version, stream=True, decode=True, auth_config=auth
                ):
                    assert "error" not in event, event

            def our_commit(tag: str) -> None:
                marks: list[tuple[str, float]] = []

                def seen(event: dict[str, Any]) -> None:
                    if not marks or marks[-1][0] != event["stage"]:
                        marks.append((str(event["stage"]), time.perf_counter()))

                committer.commit(NAME, CommitOptions(snapshot=tag, push=True), None, seen)
                marks.append(("end", time.perf_counter()))
                for (stage, began), (_, ended) in itertools.pairwise(marks):
                    stages.setdefault(stage, []).append(ended - began)

            # Warm-up: the base layers reach the registry once, the image's baseline is probed.
            new_data("warm")
            floor(f"{registry.address}/bench/floor:warm")
            our_commit(f"{registry.address}/bench/ours:warm")
            for run in range(RUNS):
                for who, func, samples in (("floor", floor, floors), ("ours", our_commit, ours)):
                    new_data(f"{who}{run}")
                    tag = f"{registry.address}/bench/{who}:r{run}"
                    started = time.perf_counter()
                    func(tag)
                    samples.append(time.perf_counter() - started)
        finally:
            for container in engine.containers.list(all=True, filters={"name": docker_name(NAME)}):
                container.remove(force=True)
            for image in engine.images.list(name=f"{registry.address}/bench/*"):
                for tag in image.tags:
                    engine.images.remove(tag)
            manager.host_pool.close()
    floor_ms = statistics.median(floors) * 1000
    ours_ms = statistics.median(ours) * 1000
    print(f"{RUNS} runs each, {MEGABYTES} MB of new data per commit, medians in ms\n")
    print("| docker commit + push | gpudev commit --snapshot --push | ratio |")
    print("| --- | --- | --- |")
    print(f"| {floor_ms:.0f} | {ours_ms:.0f} | {ours_ms / floor_ms:.2f} |")
    print(
        "\nours by stage (median ms): "
        + ", ".join(
            f"{stage} {statistics.median(values) * 1000:.0f}" for stage, values in stages.items()
        )
    )
    print(f"floor samples: {[round(s * 1000) for s in floors]}")
    print(f"ours samples: {[round(s * 1000) for s in ours]}")


if __name__ == "__main__":
    main()
