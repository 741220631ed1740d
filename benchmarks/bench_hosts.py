"""How much the host inventory costs over the floor, in one run.

Floor: the Docker SDK's own ``version()`` + ``info()`` on the local socket (what any tool must
do). Peer: the ``docker info`` command line. Ours: ``HostPool.describe_all()`` (engine + GPU
inventory through the fake nvidia-smi, a Python script: one process start per read like the real
tool, but slower to start than it) with and without the inventory cache, and
``GET /gpudev/api/hosts`` through a real Jupyter server (default cache, so most calls reuse the
last GPU read, as concurrent panels do).

Run: ``.venv/bin/python benchmarks/bench_hosts.py`` (needs a running engine). It prints a
Markdown table; paste it into benchmarks/results/hosts.md with the date and machine.
"""

from __future__ import annotations

import copy
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request
from collections.abc import Callable
from pathlib import Path

import docker
import timing
from traitlets.config import Config

from jupyter_gpudev.engine import HostPool

ROOT = Path(__file__).resolve().parent.parent
FAKE_SMI = ROOT / "tests" / "fixtures" / "fake-nvidia-smi"
RUNS = int(os.environ.get("BENCH_RUNS", "30"))


def timed(func: Callable[[], object], runs: int = RUNS) -> list[float]:
    return timing.timed(func, runs)


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def serve_and_time() -> list[float]:
    port = free_port()
    token = "bench-token"  # noqa: S105 - a throwaway token for a loopback-only server
    env = {**os.environ, "FAKE_NVIDIA_SMI_DIR": str(ROOT / "tests/fixtures/smi/two-a100")}
    with tempfile.TemporaryDirectory() as root:
        server = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "jupyter_server",
                f"--port={port}",
                "--ip=127.0.0.1",
                f"--IdentityProvider.token={token}",
                f"--ServerApp.root_dir={root}",
                "--ServerApp.open_browser=False",
                "--allow-root",
                "--GPUInventory.backend=nvidia-smi",
                f"--GPUInventory.nvidia_smi_path={FAKE_SMI}",
            ],
            env=env,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        url = f"http://127.0.0.1:{port}/gpudev/api/hosts"
        request = urllib.request.Request(url, headers={"Authorization": f"token {token}"})
        try:
            deadline = time.monotonic() + 60
            while True:
                try:
                    urllib.request.urlopen(request, timeout=5).read()  # noqa: S310 - loopback
                    break
                except OSError:
                    if time.monotonic() > deadline:
                        raise
                    time.sleep(0.2)
            return timed(lambda: urllib.request.urlopen(request, timeout=10).read())  # noqa: S310
        finally:
            server.terminate()
            server.wait(10)


def main() -> None:
    client = docker.from_env()
    config = Config()
    config.GPUInventory.backend = "nvidia-smi"
    config.GPUInventory.nvidia_smi_path = str(FAKE_SMI)
    os.environ["FAKE_NVIDIA_SMI_DIR"] = str(ROOT / "tests/fixtures/smi/two-a100")
    pool = HostPool(config=config)
    uncached = copy.deepcopy(config)
    uncached.GPUInventory.cache_seconds = 0.0
    pool_uncached = HostPool(config=uncached)
    docker_cli = shutil.which("docker")
    rows: list[tuple[str, list[float]]] = [
        ("floor: SDK version()+info()", timed(lambda: (client.version(), client.info()))),
    ]
    if docker_cli:
        rows.append(
            (
                "peer: `docker info` CLI",
                timed(
                    lambda: subprocess.run([docker_cli, "info"], capture_output=True, check=True)
                ),
            )
        )
    pool_engine = HostPool(config=Config({"GPUInventory": {"backend": "none"}}))
    rows.append(("HostPool.describe_all(), no GPU probe", timed(pool_engine.describe_all)))
    rows.append(
        ("HostPool.describe_all(), nvidia-smi probe each call", timed(pool_uncached.describe_all))
    )
    rows.append(("HostPool.describe_all(), default 1 s cache", timed(pool.describe_all)))
    rows.append(("GET /gpudev/api/hosts (real server)", serve_and_time()))
    timing.print_table(rows, runs=RUNS)


if __name__ == "__main__":
    main()
