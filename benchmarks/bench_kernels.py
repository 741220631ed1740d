"""Kernels in dev containers against the floor, in one run:

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
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import docker
from floor import first_kernel_info, new_connection_info, round_trips, run_floor_kernel
from jupyter_client.kernelspec import KernelSpecManager
from jupyter_client.manager import AsyncKernelManager
from traitlets.config import Config

from jupyter_gpudev.changes.tracker import track_changes
from jupyter_gpudev.containers import DevContainers, StartRequest, docker_name
from jupyter_gpudev.engine import HostPool
from jupyter_gpudev.kernels import provisioner
from jupyter_gpudev.kernels.kernelspecs import GPUDevKernelSpecManager

IMAGE = os.environ.get("GPUDEV_IMAGE", "gpudev-python:bookworm")
RUNS = int(os.environ.get("BENCH_RUNS", "5"))
ROUND_TRIPS = int(os.environ.get("BENCH_ROUND_TRIPS", "200"))
ROOT = Path(__file__).resolve().parent.parent
A100 = "GPU-5d5ba0d6-d33d-2b2c-524d-9e3d8d2b8a77"


async def ready(km: AsyncKernelManager) -> Any:
    client = km.client()
    client.start_channels()
    await client.wait_for_ready(timeout=120)
    return client


async def started_and_ready(km: AsyncKernelManager) -> float:
    """Seconds from start_kernel to the kernel's first kernel_info reply."""
    started = time.perf_counter()
    await km.start_kernel()
    await asyncio.get_running_loop().run_in_executor(
        None, first_kernel_info, dict(km.get_connection_info())
    )
    return time.perf_counter() - started


async def local_kernel(
    ksm: KernelSpecManager | None = None, name: str = "python3", with_trips: bool = False
) -> tuple[float, list[float]]:
    km = AsyncKernelManager(kernel_name=name, kernel_spec_manager=ksm or KernelSpecManager())
    elapsed = await started_and_ready(km)
    client = await ready(km)
    trips = await round_trips(client, ROUND_TRIPS) if with_trips else []
    client.stop_channels()
    await km.shutdown_kernel(now=True)
    return elapsed, trips


def raw_docker_run(client: docker.DockerClient, work: Path) -> float:
    """docker run of ipykernel with published ports, up to the kernel_info reply."""
    container, _, elapsed = run_floor_kernel(client, IMAGE, work)
    container.remove(force=True)
    return elapsed


def raw_docker_exec(client: docker.DockerClient, name: str, manager: DevContainers) -> float:
    """A bare ``docker exec`` of the image's ipykernel in the running dev container (no
    provisioner): the same-version floor for a warm start."""
    container = client.containers.get(docker_name(name))
    info = new_connection_info()
    inside = json.dumps({**info, "ip": "0.0.0.0"})  # noqa: S104
    started = time.perf_counter()
    exec_id = client.api.exec_create(
        container.id,
        [
            "/bin/sh",
            "-c",
            'printf "%s" "$C" > /tmp/floor.json; echo $$ > /tmp/floor.pid; '
            "exec python3 -m ipykernel_launcher -f /tmp/floor.json",
        ],
        environment={"C": inside},
    )["Id"]
    client.api.exec_start(exec_id, detach=True)
    first_kernel_info({**info, "ip": manager.address_of(container)})
    elapsed = time.perf_counter() - started
    container.exec_run(["/bin/sh", "-c", "kill $(cat /tmp/floor.pid)"])
    return elapsed


def same_version_kernels(engine: docker.DockerClient, kernels: Path) -> KernelSpecManager | None:
    """A local venv (benchmarks/.venv-image-kernel) with the image's own ipykernel stack, and a
    kernelspec for it: the same-version floor for a warm start. None if it cannot be built."""
    versions = engine.containers.run(
        IMAGE,
        [
            "python3",
            "-c",
            "import importlib.metadata as m; print(' '.join(f'{p}=={m.version(p)}' for p in "
            "('ipykernel','ipython','jupyter_client','pyzmq','tornado','traitlets')))",
        ],
        remove=True,
    )
    pins = versions.decode().split()
    venv = ROOT / "benchmarks" / ".venv-image-kernel"
    python = venv / "bin" / "python"
    stamp = venv / "pins.txt"
    if not stamp.exists() or stamp.read_text().split() != pins:
        try:
            subprocess.run([sys.executable, "-m", "venv", "--clear", str(venv)], check=True)
            subprocess.run([str(python), "-m", "pip", "install", "-q", *pins], check=True)
        except subprocess.CalledProcessError as exc:
            print(f"same-version local kernel unavailable ({exc})", file=sys.stderr)
            return None
        stamp.write_text(" ".join(pins))
    spec = kernels / "image-version"
    spec.mkdir(parents=True, exist_ok=True)
    argv = [str(python), "-m", "ipykernel_launcher", "-f", "{connection_file}"]
    (spec / "kernel.json").write_text(
        json.dumps({"argv": argv, "display_name": " ".join(pins), "language": "python"})
    )
    return KernelSpecManager(kernel_dirs=[str(kernels)])


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
        track_changes(manager)
        provisioner.set_manager(manager)
        ksm = GPUDevKernelSpecManager(root_dir=str(work))

        floor_cold, ours_cold, local_start, ours_warm, exec_warm = [], [], [], [], []
        same_start: list[float] = []
        same_ksm = same_version_kernels(engine, Path(tmp) / "local-kernels")
        local_trips: list[float] = []
        ours_trips: list[float] = []
        released: list[float] = []
        shared = manager.start(StartRequest(environment="default", name="bench-shared"))
        # Pinned: a shared container otherwise stops when its last kernel ends.
        manager.pin(shared.name)
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
            cold = await started_and_ready(km)
            client = await ready(km)
            trips = await round_trips(client, ROUND_TRIPS) if run == RUNS else []
            client.stop_channels()
            await km.shutdown_kernel()
            local, ltrips = await local_kernel(with_trips=run == RUNS)
            same = (await local_kernel(same_ksm, "image-version"))[0] if same_ksm else 0.0
            wkm = AsyncKernelManager(kernel_name="bench-shared", kernel_spec_manager=shared_ksm)
            warm = await started_and_ready(wkm)
            await wkm.shutdown_kernel()
            exec_floor = raw_docker_exec(engine, shared.name, manager)
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
            exec_warm.append(exec_floor)
            same_start.append(same)
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
    if same_ksm is not None:
        print(row("warm start vs local ipykernel, image's versions", ours_warm, same_start, "-"))
    print(row("warm start vs bare docker exec of the image's kernel", ours_warm, exec_warm, "-"))
    print(row("1+1 round trip vs local ipykernel", ours_trips, local_trips, "<= 1.1"))
    if released:
        print(
            f"| shutdown request to lease released | {statistics.median(released) * 1000:.0f}"
            f" (max {max(released) * 1000:.0f}) | - | - | <= 1000 ms |"
        )


if __name__ == "__main__":
    asyncio.run(main())
