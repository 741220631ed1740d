"""What the panel's polling costs as the dev containers grow: 1, 10, 40 and 100 of them.

Through a real Jupyter server with the extension (its REST API, what the panel polls every few
seconds), one run:

- ``GET /gpudev/api/containers`` (every container with its uncommitted-change count) against
  the floor, the engine's own list call with the same label filter (one request, the engine's
  in-memory view: what any listing must at least do), made through the same client library;
- ``GET /gpudev/api/hosts`` against the engine's ``version()`` + ``info()`` (what a host's
  state needs at least);
- ``jupyter gpudev ls --json`` (a new process each time) against ``docker ps -a`` with the same
  filter (also a new process).

Each container has one file written and one deleted, so each count is a real ``docker diff``.
After the first listing (which counts every container, as a server's first listing does) the
measured listings are the steady state: counts past their 15 s are answered as kept while one
background thread recounts them, so from about 25 containers on the engine is busy with
``docker diff`` most of the time, as it would be on a shared host. Alternating runs, medians.

Run: ``.venv/bin/python benchmarks/bench_scale.py`` (engine + kernel image needed).
BENCH_SIZES (1,10,40,100), BENCH_RUNS (15).
"""

from __future__ import annotations

import contextlib
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.request
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import docker
from server import HEADERS, start_server, stop_server
from traitlets.config import Config

from jupyter_gpudev.containers import DevContainers, StartRequest, docker_name
from jupyter_gpudev.engine import HostPool
from jupyter_gpudev.labels import L_MANAGED

SIZES = [int(n) for n in os.environ.get("BENCH_SIZES", "1,10,40,100").split(",")]
RUNS = int(os.environ.get("BENCH_RUNS", "15"))


def alternate(pairs: dict[str, Callable[[], object]], runs: int) -> dict[str, float]:
    """Median ms of each callable, run in turn ``runs`` times (one warm-up each)."""
    samples: dict[str, list[float]] = {name: [] for name in pairs}
    for func in pairs.values():
        func()
    for _ in range(runs):
        for name, func in pairs.items():
            started = time.perf_counter()
            func()
            samples[name].append(time.perf_counter() - started)
    return {name: statistics.median(values) * 1000 for name, values in samples.items()}


class Server:
    """A real Jupyter server with the extension, on loopback (``server.start_server``)."""

    def __init__(self, root: Path, state: Path) -> None:
        self.process, self.port = start_server(root, state, [])
        deadline = time.monotonic() + 60
        while True:
            try:
                self.get("/gpudev/api/hosts")
                break
            except OSError:
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.2)

    def get(self, path: str, timeout: float = 600) -> bytes:
        request = urllib.request.Request(f"http://127.0.0.1:{self.port}{path}", headers=HEADERS)
        with urllib.request.urlopen(request, timeout=timeout) as response:  # noqa: S310
            return bytes(response.read())

    def close(self) -> None:
        stop_server(self.process)


def measure(
    engine: docker.DockerClient, server: Server, state: Path, label: list[str]
) -> tuple[dict[str, float], float]:
    """The medians of every measure at the current size, and the first listing's ms."""
    started = time.perf_counter()
    server.get("/gpudev/api/containers")  # the first listing counts them all
    first = (time.perf_counter() - started) * 1000
    medians = alternate(
        {
            "list floor": lambda: engine.api.containers(all=True, filters={"label": label}),
            "containers route": lambda: server.get("/gpudev/api/containers"),
            "hosts floor": lambda: (engine.version(), engine.info()),
            "hosts route": lambda: server.get("/gpudev/api/hosts"),
        },
        RUNS,
    )
    env = {**os.environ, "JUPYTER_CONFIG_DIR": str(state / "config")}
    jupyter = str(Path(sys.executable).parent / "jupyter")
    ls_argv = [jupyter, "gpudev", "ls", "--json", f"--DevContainers.state_dir={state}"]
    cli: dict[str, Callable[[], object]] = {
        "gpudev ls": lambda: subprocess.run(ls_argv, env=env, capture_output=True, check=True),
    }
    docker_cli = shutil.which("docker")
    if docker_cli:
        cli["docker ps"] = lambda: subprocess.run(
            [docker_cli, "ps", "-a", "--filter", f"label={label[0]}"],
            capture_output=True,
            check=True,
        )
    medians.update(alternate(cli, max(3, RUNS // 3)))
    return medians, first


def main() -> None:
    engine = docker.from_env()
    label = [f"{L_MANAGED}=1"]
    rows: list[tuple[int, dict[str, float], float]] = []
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp) / "work"
        work.mkdir()
        state = Path(tmp) / "state"
        config = Config()
        config.DevContainers.state_dir = str(state)
        config.DevContainers.stop_timeout = 1
        manager = DevContainers(root_dir=work, host_pool=HostPool(config=config), config=config)
        names: list[str] = []

        def add(index: int) -> None:
            name = f"benchscale{index}"
            manager.start(StartRequest(environment="default", name=name, gpus=0))
            engine.containers.get(docker_name(name)).exec_run(
                ["/bin/sh", "-c", "echo x > /etc/bench-scale && rm -f /etc/issue"], user="0"
            )
            names.append(name)

        try:
            for size in SIZES:
                with ThreadPoolExecutor(4) as pool:
                    list(pool.map(add, range(len(names), size)))
                server = Server(work, state)
                try:
                    medians, first = measure(engine, server, state, label)
                finally:
                    server.close()
                rows.append((size, medians, first))
                print(size, medians, f"first listing {first:.0f} ms", file=sys.stderr)
        finally:
            for name in names:
                with contextlib.suppress(docker.errors.NotFound):
                    engine.containers.get(docker_name(name)).remove(force=True)
    print(f"{RUNS} alternating runs per measure (CLI: {max(3, RUNS // 3)}), medians in ms\n")
    print(
        "| containers | list floor | containers route | ratio | hosts floor | hosts route "
        "| ratio | `docker ps -a` | `gpudev ls` | ratio | first listing (all counted) |"
    )
    print("| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |")
    for size, m, first in rows:
        ps = m.get("docker ps", float("nan"))
        print(
            f"| {size} | {m['list floor']:.1f} | {m['containers route']:.1f} "
            f"| {m['containers route'] / m['list floor']:.2f}x | {m['hosts floor']:.1f} "
            f"| {m['hosts route']:.1f} | {m['hosts route'] / m['hosts floor']:.2f}x "
            f"| {ps:.0f} | {m['gpudev ls']:.0f} | {m['gpudev ls'] / ps:.1f}x | {first:.0f} |"
        )


if __name__ == "__main__":
    main()
