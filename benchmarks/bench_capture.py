"""Capture and render a Dockerfile diff against the floor, in one run:

- capture + render (``ChangeCapture.diff``) on a dev container with 20,000 changed files and 50
  changed Python packages, against ``docker diff`` plus one package listing of the same
  container (goal: at most 1.5x); two listings are measured as floors: ``pip list`` (what a user
  runs) and ``dpkg-query -W`` (the cheapest);
- how the time grows with the number of changed files (1,000 / 5,000 / 20,000).

The changed packages are 50 distributions added to the system site (``*.dist-info`` with
METADATA and RECORD, one module each), so no network is needed. The image's baseline is probed
(and cached) before timing, as it is after the first diff of an image.

Run: ``.venv/bin/python benchmarks/bench_capture.py`` (engine + kernel image needed).
BENCH_RUNS (5) repeats each measure; BENCH_FILES (20000) the largest file count.
"""

from __future__ import annotations

import os
import sys
import tempfile
from collections.abc import Callable
from pathlib import Path

import docker
from floor import median_ms as floor_median_ms
from traitlets.config import Config

from jupyter_gpudev.changes.tracker import track_changes
from jupyter_gpudev.containers import DevContainers, StartRequest, docker_name
from jupyter_gpudev.engine import HostPool

RUNS = int(os.environ.get("BENCH_RUNS", "5"))
MAX_FILES = int(os.environ.get("BENCH_FILES", "20000"))
PACKAGES = 50

#: Run in the container: N files in 100 folders, and 50 added distributions.
MAKE_CHANGES = r"""
import os, sys, sysconfig
n = int(sys.argv[1])
for i in range(n):
    folder = "/opt/data/d%03d" % (i % 100)
    os.makedirs(folder, exist_ok=True)
    with open("%s/f%06d.txt" % (folder, i), "w") as f:
        f.write("x" * 64)
site = "/usr/local/lib/python%d.%d/dist-packages" % sys.version_info[:2]
os.makedirs(site, exist_ok=True)
for i in range(int(sys.argv[2])):
    name = "benchpkg%02d" % i
    info = "%s/%s-1.0.dist-info" % (site, name)
    os.makedirs(info, exist_ok=True)
    with open("%s/%s.py" % (site, name), "w") as f:
        f.write("VALUE = %d\n" % i)
    with open(info + "/METADATA", "w") as f:
        f.write("Metadata-Version: 2.1\nName: %s\nVersion: 1.0\n" % name)
    with open(info + "/INSTALLER", "w") as f:
        f.write("pip\n")
    with open(info + "/RECORD", "w") as f:
        f.write("%s.py,,\n%s-1.0.dist-info/METADATA,,\n" % (name, name))
"""


def median_ms(func: Callable[[], object]) -> float:
    return floor_median_ms(func, RUNS)


def main() -> None:
    engine = docker.from_env()
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp) / "work"
        work.mkdir()
        config = Config()
        config.DevContainers.state_dir = str(Path(tmp) / "state")
        manager = DevContainers(root_dir=work, host_pool=HostPool(config=config), config=config)
        capture = track_changes(manager)
        rows = []
        counts = sorted({1000, 5000, MAX_FILES})
        try:
            for count in counts:
                name = f"bench-capture-{count}"
                manager.start(StartRequest(environment="default", name=name))
                container = engine.containers.get(docker_name(name))
                code, out = container.exec_run(
                    ["python3", "-c", MAKE_CHANGES, str(count), str(PACKAGES)], user="0"
                )
                assert code == 0, out
                captured, rendered = capture.diff(name)  # warm-up; probes the image once
                added = sum(len(p.added) for p in captured.changes.python)
                kept = len(captured.changes.files.kept)
                assert added == PACKAGES, added
                assert kept == count, kept
                ours = median_ms(lambda name=name: capture.diff(name))  # type: ignore[misc]

                def floor(listing: list[str], container: object = container) -> None:
                    container.diff()  # type: ignore[attr-defined]
                    container.exec_run(listing)  # type: ignore[attr-defined]

                pip = median_ms(lambda: floor(["python3", "-m", "pip", "list", "--format=json"]))
                dpkg = median_ms(lambda: floor(["dpkg-query", "-W"]))
                diff_only = median_ms(container.diff)
                rows.append((count, ours, pip, dpkg, diff_only, len(rendered.diff)))
                manager.remove(name, force=True)
        finally:
            for container in engine.containers.list(
                all=True, filters={"name": docker_name("bench-capture-")}
            ):
                container.remove(force=True)
            manager.host_pool.close()
    print(f"{RUNS} runs each, medians in ms; {PACKAGES} changed packages\n")
    print(
        "| changed files | capture + render | docker diff + pip list | ratio "
        "| docker diff + dpkg-query | ratio | docker diff alone |"
    )
    print("| --- | --- | --- | --- | --- | --- | --- |")
    for count, ours, pip, dpkg, diff_only, _ in rows:
        print(
            f"| {count} | {ours:.0f} | {pip:.0f} | {ours / pip:.2f} | {dpkg:.0f} "
            f"| {ours / dpkg:.2f} | {diff_only:.0f} |"
        )
    sys.stdout.flush()


if __name__ == "__main__":
    main()
