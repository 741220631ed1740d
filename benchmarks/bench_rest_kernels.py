"""Kernels through the path Lab takes: a real Jupyter server's REST API and websocket.

- **GPU release**: from ``DELETE /api/kernels/ID`` to the kernel's GPU lease freed in the ledger
  *and* its container no longer running (both watched from outside the server, every 5 ms),
  for a kernel with a dedicated GPU container and for the last kernel of a shared GPU container
  (``c.DevContainers.linger = 0``). Floor: the engine's stop of an idle dev container of the
  same environment (init, gpudev's network, a leased GPU), the least any release costs.
- **Warm start**: from ``POST /api/kernels`` to the first ``kernel_info_reply`` on the kernel's
  websocket, for ``gpudev--NAME`` (a running, pinned shared container) against the server's
  local ``python3`` kernel through the same path. BENCH_WARM (1) is the server's
  ``c.WarmKernels.count``: with 1, the start takes the warm kernel kept in that container.

The GPUs are the fake inventory's, made visible to containers by the stand-in NVIDIA hook
(tests/fixtures/nvidia-hook; ``GPUDEV_TEST_NVIDIA_HOOK=1 scripts/setup.sh`` installs it).
Alternating runs, medians.

Run: ``.venv/bin/python benchmarks/bench_rest_kernels.py`` (engine + kernel image needed).
BENCH_RUNS (7).
"""

from __future__ import annotations

import asyncio
import json
import os
import statistics
import sys
import tempfile
import threading
import time
import uuid
from pathlib import Path
from typing import Any

import docker
from server import FAKE_SMI, HEADERS, start_server, stop_server
from tornado.httpclient import AsyncHTTPClient, HTTPRequest
from tornado.websocket import websocket_connect
from traitlets.config import Config

from jupyter_gpudev.changes.tracker import track_changes
from jupyter_gpudev.containers import DevContainers, StartRequest, docker_name
from jupyter_gpudev.engine import HostPool
from jupyter_gpudev.leasing import LeaseLedger

ROOT = Path(__file__).resolve().parent.parent
RUNS = int(os.environ.get("BENCH_RUNS", "7"))
#: ``c.WarmKernels.count`` of the server (1: the default; 0: every kernel started when asked).
WARM = int(os.environ.get("BENCH_WARM", "1"))


class Server:
    """A real Jupyter server with the extension, on loopback."""

    def __init__(self, root: Path, state: Path, extra: list[str]) -> None:
        self.log = (state / "server.log").open("w")
        self.process, self.port = start_server(root, state, extra, self.log)
        self.base = f"http://127.0.0.1:{self.port}"
        self.http = AsyncHTTPClient()

    async def ready(self) -> None:
        deadline = time.monotonic() + 60
        while True:
            try:
                await self.call("GET", "/api/status")
            except OSError:
                if time.monotonic() > deadline:
                    raise
                await asyncio.sleep(0.2)
            else:
                return

    async def call(self, method: str, path: str, body: Any = None) -> Any:
        request = HTTPRequest(
            self.base + path,
            method=method,
            headers=HEADERS,
            body=json.dumps(body) if body is not None else None,
            request_timeout=600,
        )
        response = await self.http.fetch(request)
        return json.loads(response.body) if response.body else None

    async def start_kernel(self, name: str) -> tuple[str, float]:
        """Start a kernel through the REST API; its id and the seconds to its first
        kernel_info reply on its websocket."""
        started = time.perf_counter()
        kernel = await self.call("POST", "/api/kernels", {"name": name})
        ws = await websocket_connect(
            HTTPRequest(
                f"ws://127.0.0.1:{self.port}/api/kernels/{kernel['id']}/channels",
                headers=HEADERS,
            )
        )
        msg_id = uuid.uuid4().hex
        ws.write_message(
            json.dumps(
                {
                    "header": {
                        "msg_id": msg_id,
                        "msg_type": "kernel_info_request",
                        "username": "bench",
                        "session": uuid.uuid4().hex,
                        "version": "5.3",
                        "date": "",
                    },
                    "parent_header": {},
                    "metadata": {},
                    "channel": "shell",
                    "buffers": [],
                    "content": {},
                }
            )
        )
        while True:
            raw = await asyncio.wait_for(ws.read_message(), timeout=120)
            if raw is None:
                raise RuntimeError("the kernel's websocket closed")
            msg = json.loads(raw)
            if (
                msg.get("msg_type") == "kernel_info_reply"
                and msg.get("parent_header", {}).get("msg_id") == msg_id
            ):
                break
        elapsed = time.perf_counter() - started
        ws.close()
        return str(kernel["id"]), elapsed

    def close(self) -> None:
        stop_server(self.process)
        self.log.close()


def watch_release(state: Path, container: str) -> tuple[threading.Event, list[float]]:
    """Start watching (every 5 ms) for ``container``'s lease to be freed and the container
    to stop; ``go`` set = the clock starts; the result list gets the seconds it took."""
    go = threading.Event()
    result: list[float] = []

    def watch() -> None:
        client = docker.from_env()
        ledger = LeaseLedger(state / "leases.sqlite")
        go.wait()
        started = time.perf_counter()
        while True:
            leased = ledger.for_container("local", container) is not None
            try:
                running = client.api.inspect_container(docker_name(container))["State"]["Running"]
            except docker.errors.NotFound:
                running = False
            if not leased and not running:
                result.append(time.perf_counter() - started)
                return
            if time.perf_counter() - started > 60:
                result.append(float("nan"))
                return
            time.sleep(0.005)

    threading.Thread(target=watch, daemon=True).start()
    return go, result


async def release(server: Server, state: Path, kernel_id: str, container: str) -> float:
    go, result = watch_release(state, container)
    await asyncio.sleep(0.2)  # the watcher is connected
    go.set()
    await server.call("DELETE", f"/api/kernels/{kernel_id}")
    while not result:  # noqa: ASYNC110 - the watcher is a thread
        await asyncio.sleep(0.005)
    return result[0]


def stop_floor(engine: docker.DockerClient, manager: DevContainers) -> float:
    """A raw engine stop (``docker stop``) of an idle dev container of the same environment,
    made the same way (init, gpudev's network, its leased GPU): what releasing the GPU of a
    container costs at least."""
    info = manager.start(StartRequest(environment="gpu", name="bench-floor"))
    try:
        started = time.perf_counter()
        engine.api.stop(info.container_id, timeout=2)
        return time.perf_counter() - started
    finally:
        manager.remove(info.name, force=True)


async def main() -> None:
    engine = docker.from_env()
    os.environ["FAKE_NVIDIA_SMI_DIR"] = str(ROOT / "tests/fixtures/smi/two-a100")
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp) / "work"
        gpu_env = work / ".devcontainer" / "gpu"
        gpu_env.mkdir(parents=True)
        (gpu_env / "devcontainer.json").write_text(
            json.dumps({"image": "gpudev-python:bookworm", "hostRequirements": {"gpu": True}})
        )
        state = Path(tmp) / "state"
        config = Config()
        config.GPUInventory.backend = "nvidia-smi"
        config.GPUInventory.nvidia_smi_path = str(FAKE_SMI)
        config.DevContainers.state_dir = str(state)
        manager = DevContainers(root_dir=work, host_pool=HostPool(config=config), config=config)
        track_changes(manager)
        warm = manager.start(StartRequest(environment="default", name="bench-warm"))
        manager.pin(warm.name)
        server = Server(work, state, ["--DevContainers.linger=0", f"--WarmKernels.count={WARM}"])
        samples: dict[str, list[float]] = {
            "floor stop": [],
            "dedicated": [],
            "shared last": [],
            "local warm": [],
            "gpudev warm": [],
        }
        try:
            await server.ready()
            for run in range(RUNS + 1):  # run 0 warms up
                floor = stop_floor(engine, manager)
                kernel_id, _ = await server.start_kernel("gpudev-gpu")
                dedicated = await release(server, state, kernel_id, f"kernel-{kernel_id}")
                shared = manager.start(StartRequest(environment="gpu", name="bench-shared-gpu"))
                kernel_id, _ = await server.start_kernel(f"gpudev--{shared.name}")
                shared_last = await release(server, state, kernel_id, shared.name)
                manager.remove(shared.name, force=True)
                kernel_id, local = await server.start_kernel("python3")
                await server.call("DELETE", f"/api/kernels/{kernel_id}")
                await asyncio.sleep(3)  # the warm kernel taken last time is replaced
                kernel_id, ours = await server.start_kernel(f"gpudev--{warm.name}")
                await server.call("DELETE", f"/api/kernels/{kernel_id}")
                if run == 0:
                    continue
                for name, value in zip(
                    samples, (floor, dedicated, shared_last, local, ours), strict=True
                ):
                    samples[name].append(value)
                print(run, {k: round(v[-1] * 1000) for k, v in samples.items()}, file=sys.stderr)
        finally:
            server.close()
            manager.remove(warm.name, force=True)
            for container in engine.containers.list(
                all=True, filters={"label": f"org.jupyter.gpudev.server={manager.server_id}"}
            ):
                container.remove(force=True)
    med = {name: statistics.median(values) * 1000 for name, values in samples.items()}
    print(f"{RUNS} alternating runs, medians in ms (min-max), c.WarmKernels.count={WARM}\n")
    print("| measure | ours | floor | ratio |")
    print("| --- | --- | --- | --- |")

    def spread(name: str) -> str:
        values = samples[name]
        return f"{med[name]:.0f} ({min(values) * 1000:.0f}-{max(values) * 1000:.0f})"

    for name in ("dedicated", "shared last"):
        print(
            f"| DELETE to lease freed + stopped, {name} | {spread(name)} "
            f"| {spread('floor stop')} | {med[name] / med['floor stop']:.2f} |"
        )
    print(
        f"| POST to first kernel_info, gpudev--NAME (warm) | {spread('gpudev warm')} "
        f"| {spread('local warm')} (local python3) | {med['gpudev warm'] / med['local warm']:.2f} |"
    )


if __name__ == "__main__":
    asyncio.run(main())
