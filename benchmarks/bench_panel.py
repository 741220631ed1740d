"""What the GPU Dev panel costs the server and the engine, in one run:

- listing the dev containers, as the panel does every 5 s (``DevContainers.list`` with their
  uncommitted-change counts), with N running containers: against the floor, one engine
  ``containers.list``; without counts; with every count to compute (a first listing); and with
  the counts kept (later listings: a running container's count past its 15 s is answered while
  one background thread counts it again); the first listing again with the changes read by the
  engine's diff only (``DockerChanges.read_layer`` off), where a server cannot read the
  containers' own layers. The peer is what a panel would do without the cache:
  one ``docker diff`` per container per listing.
- the commit dialog's diff with one change left out (``ChangeCapture.diff(exclude=...)``)
  against the same diff with everything: the selection must not cost a second capture.

Run: ``.venv/bin/python benchmarks/bench_panel.py`` (engine + kernel image needed).
BENCH_RUNS (5) repeats each measure; BENCH_CONTAINERS (8) running containers.
"""

from __future__ import annotations

import os
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

import docker
from floor import median_ms as floor_median_ms
from traitlets.config import Config

from jupyter_gpudev.changes.docker_changes import DockerChanges
from jupyter_gpudev.changes.tracker import ChangeCounts, ChangeTracker, track_changes
from jupyter_gpudev.containers import DevContainers, StartRequest, docker_name
from jupyter_gpudev.engine import HostPool

RUNS = int(os.environ.get("BENCH_RUNS", "5"))
CONTAINERS = int(os.environ.get("BENCH_CONTAINERS", "8"))


def median_ms(func: Callable[[], object], runs: int = RUNS) -> float:
    return floor_median_ms(func, runs)


def main() -> None:
    engine = docker.from_env()
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp) / "work"
        work.mkdir()
        config = Config()
        config.DevContainers.state_dir = str(Path(tmp) / "state")
        config.DevContainers.stop_timeout = 1
        manager = DevContainers(root_dir=work, host_pool=HostPool(config=config), config=config)
        capture = track_changes(manager)
        tracker = manager.changes
        assert isinstance(tracker, ChangeTracker)
        names = [f"benchpanel{i}" for i in range(CONTAINERS)]
        try:
            for name in names:
                manager.start(StartRequest(environment="default", name=name, gpus=0))
                container = engine.containers.get(docker_name(name))
                container.exec_run(
                    ["/bin/sh", "-c", "echo x > /etc/bench-panel && rm -f /etc/issue"], user="0"
                )
            ids = [str(engine.containers.get(docker_name(n)).id) for n in names]
            floor = median_ms(lambda: engine.containers.list(all=True))
            plain = median_ms(manager.list)

            def cold() -> None:
                tracker.counts = ChangeCounts()
                listed = manager.list(count_changes=True)
                assert all(i.uncommitted for i in listed if i.name in names), listed

            cold_ms = median_ms(cold, runs=max(2, RUNS // 2))
            # The same first listing with the changes read by the engine's diff only (as on a
            # remote engine, or a server that cannot read the containers' layers).
            DockerChanges.read_layer = False
            cold_engine_ms = median_ms(cold, runs=max(2, RUNS // 2))
            DockerChanges.read_layer = True
            tracker.counts = ChangeCounts()
            manager.list(count_changes=True)
            warm_ms = median_ms(lambda: manager.list(count_changes=True))
            # Past the running TTL: the kept counts are answered, recounted in the background.
            ChangeCounts.RUNNING_TTL = 0.0
            stale_ms = median_ms(lambda: manager.list(count_changes=True))
            started = time.perf_counter()
            tracker.counts.wait()
            drain_ms = (time.perf_counter() - started) * 1000
            ChangeCounts.RUNNING_TTL = 15.0
            peer_ms = median_ms(
                lambda: [engine.api.diff(container_id) for container_id in ids],
                runs=max(2, RUNS // 2),
            )

            whole = median_ms(lambda: capture.diff(names[0]), runs=max(2, RUNS // 2))
            selected = median_ms(
                lambda: capture.diff(names[0], exclude=("delete:/etc/issue",)),
                runs=max(2, RUNS // 2),
            )
        finally:
            for name in names:
                try:
                    manager.remove(name, force=True)
                except Exception as exc:  # report and go on cleaning
                    print(f"could not remove {name}: {exc}", file=sys.stderr)
            manager.host_pool.close()

    print(f"## Listing {CONTAINERS} running dev containers (median of {RUNS})\n")
    print("| listing | ms | ratio to the floor |")
    print("| --- | --- | --- |")
    rows = [
        ("engine containers.list (floor)", floor),
        ("ours, without counts", plain),
        ("ours, counts kept (fresh)", warm_ms),
        ("ours, counts past their time (answered, recounted in background)", stale_ms),
        ("ours, every count to compute (first listing)", cold_ms),
        ("ours, every count to compute, engine's diff only (read_layer off)", cold_engine_ms),
        ("peer: one docker diff per container per listing", peer_ms),
    ]
    for label, value in rows:
        print(f"| {label} | {value:.1f} | {value / floor:.1f}x |")
    print(f"\nBackground recount of all {CONTAINERS}: {drain_ms:.0f} ms (one diff at a time).\n")
    print("## Commit dialog diff (one container, two changes)\n")
    print("| diff | ms | ratio |")
    print("| --- | --- | --- |")
    print(f"| every change | {whole:.0f} | 1.00 |")
    print(f"| one change left out | {selected:.0f} | {selected / whole:.2f} |")


if __name__ == "__main__":
    main()
