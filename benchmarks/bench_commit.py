"""Commit and push against ``docker commit`` + ``docker push``, in one run (goal: at most 1.2x).

A running dev container of the default environment gets BENCH_MB (20) MB of new random data
(replacing the previous run's) before every measured commit, so every push uploads a new layer
of the same size, as a real commit does; plus an edited file. Measured, alternating, BENCH_RUNS
(5) times each, against a real registry with htpasswd auth on loopback (Debian's
docker-registry; tests/registry.py starts it):

- floor: ``container.commit()`` then ``push`` of that image (the engine API, as ``docker commit``
  and ``docker push`` call it);
- ours: ``jupyter gpudev commit NAME --snapshot TAG --push`` through ``Committer.commit``: the
  capture (package probe + the container's changed paths) and the rendered diff, the commit, the
  snapshot's own image configuration, the push; timed by stage from its progress events. Twice,
  by the two routes to the changed paths (``DockerChanges.read_layer``): ``engine``, the
  engine's ``docker diff``; ``layer``, the container's own overlay2 layer read on this machine
  (``changes/layer_diff.py``, route (b); root only).

And per run, what each route costs alone: the engine's ``docker diff``; the layer read; and
route (a), the change set read from a ``docker commit``'s layer through the engine API: the
commit, then the image's export (``GET /images/ID/get``, the only API that gives a layer's
data) streamed to the end, where its last layer is (in the first two runs only).

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
from jupyter_gpudev.changes.docker_changes import DockerChanges
from jupyter_gpudev.changes.layer_diff import upper_changes
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
        samples: dict[str, list[float]] = {"floor": [], "engine": [], "layer": []}
        stages: dict[str, dict[str, list[float]]] = {"engine": {}, "layer": {}}
        alone: dict[str, list[float]] = {"engine diff": [], "layer read": [], "route (a)": []}
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

            def our_commit(route: str, tag: str) -> None:
                DockerChanges.read_layer = route == "layer"
                marks: list[tuple[str, float]] = []

                def seen(event: dict[str, Any]) -> None:
                    if not marks or marks[-1][0] != event["stage"]:
                        marks.append((str(event["stage"]), time.perf_counter()))

                committer.commit(NAME, CommitOptions(snapshot=tag, push=True), None, seen)
                marks.append(("end", time.perf_counter()))
                for (stage, began), (_, ended) in itertools.pairwise(marks):
                    stages[route].setdefault(stage, []).append(ended - began)

            def timed(what: str, func: Any) -> None:
                started = time.perf_counter()
                func()
                alone[what].append(time.perf_counter() - started)

            def route_a() -> None:
                image = container.commit()
                try:
                    for _ in engine.api.get_image(str(image.id)):
                        pass
                finally:
                    engine.images.remove(str(image.id))

            # Warm-up: the base layers reach the registry once, the image's baseline is probed.
            new_data("warm")
            floor(f"{registry.address}/bench/floor:warm")
            for route in ("engine", "layer"):
                our_commit(route, f"{registry.address}/bench/{route}:warm")
            for run in range(RUNS):
                for who in ("floor", "engine", "layer"):
                    new_data(f"{who}{run}")
                    tag = f"{registry.address}/bench/{who}:r{run}"
                    started = time.perf_counter()
                    if who == "floor":
                        floor(tag)
                    else:
                        our_commit(who, tag)
                    samples[who].append(time.perf_counter() - started)
                container.reload()
                timed("engine diff", container.diff)
                timed("layer read", lambda: upper_changes(container.attrs))
                if run < 2:  # it writes the whole image to the engine's disk: twice is enough
                    timed("route (a)", route_a)
        finally:
            for container in engine.containers.list(all=True, filters={"name": docker_name(NAME)}):
                container.remove(force=True)
            for image in engine.images.list(name=f"{registry.address}/bench/*"):
                for tag in image.tags:
                    engine.images.remove(tag)
            manager.host_pool.close()
            DockerChanges.read_layer = True
    ms = {who: statistics.median(values) * 1000 for who, values in samples.items()}
    print(f"{RUNS} runs each, {MEGABYTES} MB of new data per commit, medians in ms\n")
    print("| docker commit + push | ours, engine's diff | ratio | ours, layer read | ratio |")
    print("| --- | --- | --- | --- | --- |")
    print(
        f"| {ms['floor']:.0f} | {ms['engine']:.0f} | {ms['engine'] / ms['floor']:.2f} "
        f"| {ms['layer']:.0f} | {ms['layer'] / ms['floor']:.2f} |"
    )
    for route, by_stage in stages.items():
        print(
            f"\n{route} route by stage (median ms): "
            + ", ".join(
                f"{stage} {statistics.median(v) * 1000:.0f}" for stage, v in by_stage.items()
            )
        )
    print(
        "\nalone (median ms): "
        + ", ".join(f"{what} {statistics.median(v) * 1000:.1f}" for what, v in alone.items())
    )
    for who, values in samples.items():
        print(f"{who} samples: {[round(s * 1000) for s in values]}")


if __name__ == "__main__":
    main()
