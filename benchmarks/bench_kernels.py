"""Kernels in dev containers against the floor, in one run (issue "Kernels inside the dev
container"):

- cold start (a new container and its kernel, up to the kernel_info reply): ours against a raw
  ``docker run`` of ipykernel with published ports, same image (goal: at most 1.15x);
- warm start (a kernel into a running dev container): ours against a local ipykernel start
  (goal: at most 1.2x);
- execute round trip of ``1+1`` (median of 200): ours against a local ipykernel (goal: 1.1x);
- shutdown request to GPU lease released (goal: at most 1 s), through the stand-in NVIDIA hook
  when the engine has one, else for a CPU kernel (container stopped).

Run: ``.venv/bin/python benchmarks/bench_kernels.py`` (engine + kernel image needed).
"""

from __future__ import annotations

import asyncio
import json
import os
import queue
import socket
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import docker
from jupyter_client.blocking.client import BlockingKernelClient
from jupyter_client.kernelspec import KernelSpecManager
from jupyter_client.manager import AsyncKernelManager
from traitlets.config import Config

from jupyter_gpudev import provisioner
from jupyter_gpudev.containers import DevContainers, StartRequest, docker_name
from jupyter_gpudev.hosts import HostPool
from jupyter_gpudev.kernelspecs import GPUDevKernelSpecManager

IMAGE = os.environ.get("GPUDEV_IMAGE", "gpudev-python:bookworm")
RUNS = int(os.environ.get("BENCH_RUNS", "5"))
ROUND_TRIPS = int(os.environ.get("BENCH_ROUND_TRIPS", "200"))
ROOT = Path(__file__).resolve().parent.parent
A100 = "GPU-5d5ba0d6-d33d-2b2c-524d-9e3d8d2b8a77"


def free_ports(count: int) -> list[int]:
    sockets = [socket.socket() for _ in range(count)]
    for sock in sockets:
        sock.bind(("127.0.0.1", 0))
    ports = [int(sock.getsockname()[1]) for sock in sockets]
    for sock in sockets:
        sock.close()
    return ports


async def ready(km: AsyncKernelManager) -> Any:
    client = km.client()
    client.start_channels()
    await client.wait_for_ready(timeout=120)
    return client


async def round_trips(client: Any) -> list[float]:
    samples = []
    for _ in range(ROUND_TRIPS):
        started = time.perf_counter()
        await client.execute_interactive("1+1", timeout=30, output_hook=lambda _msg: None)
        samples.append(time.perf_counter() - started)
    return samples


async def local_kernel() -> tuple[float, list[float]]:
    km = AsyncKernelManager(kernel_name="python3", kernel_spec_manager=KernelSpecManager())
    started = time.perf_counter()
    await km.start_kernel()
    client = await ready(km)
    elapsed = time.perf_counter() - started
    trips = await round_trips(client)
    client.stop_channels()
    await km.shutdown_kernel(now=True)
    return elapsed, trips


def raw_docker_run(client: docker.DockerClient, work: Path) -> float:
    """docker run of ipykernel with published ports, up to the kernel_info reply."""

    ports = free_ports(5)
    names = ("shell_port", "iopub_port", "stdin_port", "control_port", "hb_port")
    info: dict[str, Any] = {
        **dict(zip(names, ports, strict=True)),
        "transport": "tcp",
        "signature_scheme": "hmac-sha256",
        "key": os.urandom(16).hex(),
    }
    (work / "kernel.json").write_text(json.dumps({**info, "ip": "0.0.0.0"}))  # noqa: S104
    started = time.perf_counter()
    container = client.containers.run(
        IMAGE,
        ["python3", "-m", "ipykernel_launcher", "-f", "/conn/kernel.json"],
        detach=True,
        init=True,
        ports={f"{p}/tcp": ("127.0.0.1", p) for p in ports},
        mounts=[docker.types.Mount("/conn", str(work), type="bind")],
    )
    kc = BlockingKernelClient()
    kc.load_connection_info({**info, "ip": "127.0.0.1"})  # type: ignore[typeddict-item]
    kc.start_channels()
    # A client without a kernel manager judges "alive" by heartbeats, which start late: ask for
    # kernel_info until the kernel answers (what wait_for_ready does for a managed kernel).
    deadline = time.monotonic() + 120
    while True:
        kc.kernel_info()
        try:
            reply = kc.get_shell_msg(timeout=0.25)
        except queue.Empty:
            if time.monotonic() > deadline:
                raise
            continue
        if reply["msg_type"] == "kernel_info_reply":  # to this request or an earlier one
            break
    elapsed = time.perf_counter() - started
    kc.stop_channels()
    container.remove(force=True)
    return elapsed


async def main() -> None:
    engine = docker.from_env()
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp) / "work"
        work.mkdir()
        os.environ["FAKE_NVIDIA_SMI_DIR"] = str(ROOT / "tests/fixtures/smi/two-a100")
        config = Config()
        config.GPUInventory.backend = "nvidia-smi"
        config.GPUInventory.nvidia_smi_path = str(ROOT / "tests/fixtures/fake-nvidia-smi")
        config.DevContainers.state_dir = str(Path(tmp) / "state")
        manager = DevContainers(root_dir=work, host_pool=HostPool(config=config), config=config)
        provisioner.set_manager(manager)
        ksm = GPUDevKernelSpecManager(root_dir=str(work))

        floor_cold, ours_cold, local_start, ours_warm = [], [], [], []
        local_trips: list[float] = []
        ours_trips: list[float] = []
        released: list[float] = []
        shared = manager.start(StartRequest(environment="default", name="bench-shared"))
        spec_dir = Path(tmp) / "kernels" / "bench-shared"
        spec_dir.mkdir(parents=True)
        (spec_dir / "kernel.json").write_text(
            json.dumps(
                {
                    "argv": ["python3", "-m", "ipykernel_launcher", "-f", "{connection_file}"],
                    "display_name": "shared",
                    "language": "python",
                    "metadata": {
                        "kernel_provisioner": {
                            "provisioner_name": "gpudev",
                            "config": {"container": shared.name},
                        }
                    },
                }
            )
        )
        shared_ksm = KernelSpecManager(kernel_dirs=[str(Path(tmp) / "kernels")])
        gpu_ok = True
        for run in range(RUNS + 1):  # run 0 warms up
            raw = raw_docker_run(engine, Path(tmp))
            km = AsyncKernelManager(kernel_name="gpudev-default", kernel_spec_manager=ksm)
            started = time.perf_counter()
            await km.start_kernel()
            client = await ready(km)
            cold = time.perf_counter() - started
            trips = await round_trips(client) if run == RUNS else []
            client.stop_channels()
            await km.shutdown_kernel()
            local, ltrips = await local_kernel()
            wkm = AsyncKernelManager(kernel_name="bench-shared", kernel_spec_manager=shared_ksm)
            started = time.perf_counter()
            await wkm.start_kernel()
            wclient = await ready(wkm)
            warm = time.perf_counter() - started
            wclient.stop_channels()
            await wkm.shutdown_kernel()
            # Shutdown to lease released, on a GPU kernel (needs the NVIDIA hook or a GPU)
            if gpu_ok:
                try:
                    gkm = AsyncKernelManager(kernel_name="gpudev-default", kernel_spec_manager=ksm)
                    spec = gkm.kernel_spec
                    assert spec is not None
                    spec.metadata["kernel_provisioner"]["config"]["gpus"] = 1
                    await gkm.start_kernel()
                    gclient = await ready(gkm)
                    gclient.stop_channels()
                    name = f"kernel-{gkm.kernel_id}"
                    shutdown = asyncio.ensure_future(gkm.shutdown_kernel())
                    started = time.perf_counter()
                    while manager.ledger.for_container("local", name) is not None:  # noqa: ASYNC110
                        await asyncio.sleep(0.005)
                    freed = time.perf_counter() - started
                    await shutdown
                except Exception as exc:
                    print(
                        f"GPU kernels unavailable here ({exc}); lease timing skipped",
                        file=sys.stderr,
                    )
                    gpu_ok = False
            if run == 0:
                continue
            floor_cold.append(raw)
            ours_cold.append(cold)
            local_start.append(local)
            ours_warm.append(warm)
            if gpu_ok:
                released.append(freed)
            if run == RUNS:
                ours_trips, local_trips = trips, ltrips
        manager.remove(shared.name, force=True)
        for container in engine.containers.list(all=True, filters={"name": docker_name("kernel-")}):
            if container.labels.get("org.jupyter.gpudev.server") == manager.server_id:
                container.remove(force=True)
        manager.host_pool.close()

    def row(label: str, ours: list[float], floor: list[float], goal: str) -> str:
        mo, mf = statistics.median(ours), statistics.median(floor)
        return f"| {label} | {mo * 1000:.1f} | {mf * 1000:.1f} | {mo / mf:.2f} | {goal} |"

    print(f"{RUNS} runs (starts), {ROUND_TRIPS} round trips; medians in ms\n")
    print("| measure | ours | floor | ratio | goal |")
    print("| --- | --- | --- | --- | --- |")
    print(row("cold start vs docker run + ipykernel", ours_cold, floor_cold, "<= 1.15"))
    print(row("warm start vs local ipykernel", ours_warm, local_start, "<= 1.2"))
    print(row("1+1 round trip vs local ipykernel", ours_trips, local_trips, "<= 1.1"))
    if released:
        print(
            f"| shutdown request to lease released | {statistics.median(released) * 1000:.0f}"
            f" (max {max(released) * 1000:.0f}) | - | - | <= 1000 ms |"
        )


if __name__ == "__main__":
    asyncio.run(main())
