"""gateway_provisioners' DockerProvisioner against the same floor as bench_kernels.py, in one run
(how another Docker kernel provisioner compares on the same image):

- cold start (a new container and its kernel, up to the first kernel_info reply, measured as in
  bench_kernels.py) against a raw ``docker run`` of ipykernel with published ports;
- execute round trip of ``1+1`` (median of BENCH_ROUND_TRIPS=200) against the same floor kernel;
- shutdown (request to the container gone) against the floor's shutdown_request + remove.

DockerProvisioner runs ``launch_docker.py`` locally, which starts a container of a kernel image
whose CMD is gateway_provisioners' ``bootstrap-kernel.sh``; in the container,
``launch_ipykernel.py`` picks the ports, starts ipykernel and sends the (encrypted) connection
info back to the server's response address.  The kernel image here is ``gwbench-gp-kernel``:
``FROM gpudev-python:bookworm`` plus the launchers (staged with gateway_provisioners'
``ImageBootstrapInstaller``, as ``jupyter image-bootstrap install`` would inside the image), the
launcher's one extra dependency (pycryptodomex, copied in as a wheel: containers have no
network), a ``python`` link to Debian's python3 and the conventional ``jovyan`` user (uid 1000:
DockerProvisioner refuses uid 0).  The kernelspec is made by ``jupyter-docker-spec install``.
The response address is the docker bridge gateway (GP_RESPONSE_IP), reachable from containers.

Setup (once) and run, from the repository root:

    python3.11 -m venv benchmarks/.venv-gateway
    echo '*' > benchmarks/.venv-gateway/.gitignore
    benchmarks/.venv-gateway/bin/pip install 'gateway_provisioners[docker]' jupyter_client
    benchmarks/.venv-gateway/bin/python benchmarks/bench_gateway.py

BENCH_RUNS (5 starts after one warm-up), BENCH_ROUND_TRIPS (200), GPUDEV_IMAGE (the base image),
BENCH_KEEP_IMAGE=1 (keep gwbench-gp-kernel afterwards), GP_POLL_INTERVAL and other GP_* settings
of gateway_provisioners are read from the environment.  Containers and the image it makes are
named ``gwbench-...`` and removed at the end.
"""

from __future__ import annotations

import asyncio
import contextlib
import importlib
import json
import os
import platform
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from importlib.metadata import version
from pathlib import Path

import docker
from floor import first_kernel_info, round_trips, run_floor_kernel
from jupyter_client.asynchronous.client import AsyncKernelClient
from jupyter_client.kernelspec import KernelSpecManager
from jupyter_client.manager import AsyncKernelManager

from jupyter_gpudev.engine import bridge_address

IMAGE = os.environ.get("GPUDEV_IMAGE", "gpudev-python:bookworm")
RUNS = int(os.environ.get("BENCH_RUNS", "5"))
ROUND_TRIPS = int(os.environ.get("BENCH_ROUND_TRIPS", "200"))
PREFIX = "gwbench"
KERNEL_IMAGE = f"{PREFIX}-gp-kernel:bookworm"
KERNEL_NAME = f"{PREFIX}_docker"
WHEELS = Path(sys.prefix) / f"{PREFIX}-wheels"  # the venv: downloaded once, kept offline after

DOCKERFILE = """\
ARG BASE
FROM ${BASE}
COPY wheels/ /tmp/wheels/
RUN python3 -m pip install --no-index --no-deps --break-system-packages /tmp/wheels/*.whl \\
 && rm -rf /tmp/wheels \\
 && ln -s /usr/bin/python3 /usr/local/bin/python \\
 && useradd -m -u 1000 -g 100 jovyan
COPY kernel-launchers/ /usr/local/bin/kernel-launchers/
COPY bootstrap-kernel.sh /usr/local/bin/bootstrap-kernel.sh
RUN chmod 0755 /usr/local/bin/bootstrap-kernel.sh \\
 && chown -R 1000:100 /usr/local/bin/kernel-launchers /usr/local/bin/bootstrap-kernel.sh
ENV KERNEL_LANGUAGE=python
USER 1000
CMD /usr/local/bin/bootstrap-kernel.sh
"""


@dataclass
class Samples:
    cold: list[float] = field(default_factory=list)
    trips: list[float] = field(default_factory=list)
    clean_trips: list[float] = field(default_factory=list)  # before any gateway kernel
    shutdown: list[float] = field(default_factory=list)


def gone(engine: docker.DockerClient, label: str) -> None:
    """Wait until no container (running or not) has the label."""
    filters: dict[str, str | list[str] | bool] = {"label": label}
    deadline = time.monotonic() + 60
    while engine.containers.list(all=True, filters=filters):
        if time.monotonic() > deadline:
            raise TimeoutError(f"containers {filters} still there after 60 s")
        time.sleep(0.005)


async def floor_kernel(
    engine: docker.DockerClient, work: Path, name: str, with_trips: bool
) -> tuple[float, list[float], float]:
    """``docker run`` of the image's ipykernel with published ports (bench_kernels'
    raw_docker_run): cold start to the first kernel_info reply, round trips, then shutdown
    request to the container removed."""
    container, info, cold = run_floor_kernel(engine, IMAGE, work, name)
    client = AsyncKernelClient()
    client.load_connection_info(info)  # type: ignore[arg-type]
    client.start_channels()
    await client.wait_for_ready(timeout=120)
    trips = await round_trips(client, ROUND_TRIPS) if with_trips else []
    started = time.perf_counter()
    client.shutdown()
    await asyncio.to_thread(container.wait, timeout=60)
    await asyncio.to_thread(container.remove)
    stopped = time.perf_counter() - started
    client.stop_channels()
    return cold, trips, stopped


async def gateway_kernel(
    engine: docker.DockerClient, ksm: KernelSpecManager, with_trips: bool
) -> tuple[float, list[float], float]:
    """The same through DockerProvisioner: start_kernel to the first kernel_info reply, round
    trips with the manager's own client, shutdown_kernel to the container gone."""
    km = AsyncKernelManager(kernel_name=KERNEL_NAME, kernel_spec_manager=ksm)
    started = time.perf_counter()
    await km.start_kernel()
    await asyncio.to_thread(first_kernel_info, dict(km.get_connection_info()))
    cold = time.perf_counter() - started
    client = km.client()
    client.start_channels()
    await client.wait_for_ready(timeout=120)
    trips = await round_trips(client, ROUND_TRIPS) if with_trips else []
    client.stop_channels()
    started = time.perf_counter()
    await km.shutdown_kernel()
    await asyncio.to_thread(gone, engine, f"kernel_id={km.kernel_id}")
    stopped = time.perf_counter() - started
    return cold, trips, stopped


def image_versions(engine: docker.DockerClient) -> str:
    out = engine.containers.run(
        IMAGE,
        [
            "python3",
            "-c",
            "import importlib.metadata as m, platform; print(platform.python_version(), "
            "' '.join(f'{p}=={m.version(p)}' for p in ('ipykernel','jupyter_client','pyzmq')))",
        ],
        name=f"{PREFIX}-probe-{os.getpid()}",
        remove=True,
    )
    return bytes(out).decode().strip()


def build_kernel_image(engine: docker.DockerClient, context: Path) -> None:
    """FROM the base image + gateway_provisioners' launchers, as ``jupyter image-bootstrap
    install --languages python`` lays them out under /usr/local/bin (staged here with its own
    installer class, since that command writes to /usr/local/bin of wherever it runs)."""
    bootstrap_app = importlib.import_module("gateway_provisioners.cli.image_bootstrapapp")
    base_app = importlib.import_module("gateway_provisioners.cli.base_app")
    installer = bootstrap_app.ImageBootstrapInstaller()
    installer._copy_launcher_files("python", str(context / "kernel-launchers" / "python"))
    script = context / bootstrap_app.BOOTSTRAP_FILE_NAME
    shutil.copyfile(
        Path(base_app.kernel_launchers_dir) / "bootstrap" / bootstrap_app.BOOTSTRAP_FILE_NAME,
        script,
    )
    bootstrap_app.ImageBootstrapInstaller._finalize_bootstrap(str(script))
    if not list(WHEELS.glob("pycryptodomex-*.whl")):
        subprocess.run(
            [
                sys.executable,
                "-m",
                "pip",
                "download",
                "-q",
                "--no-deps",
                "--only-binary=:all:",
                "--python-version",
                "3.11",
                "--platform",
                f"manylinux2014_{platform.machine()}",
                "pycryptodomex",
                "-d",
                str(WHEELS),
            ],
            check=True,
        )
    shutil.copytree(WHEELS, context / "wheels")
    (context / "Dockerfile").write_text(DOCKERFILE)
    engine.images.build(
        path=str(context), tag=KERNEL_IMAGE, buildargs={"BASE": IMAGE}, rm=True, forcerm=True
    )


def install_kernelspec(prefix: Path) -> KernelSpecManager:
    """``jupyter-docker-spec install`` into a temporary prefix, then point the spec's launcher
    at this interpreter (it needs the docker package) and name the containers gwbench-<id>."""
    subprocess.run(
        [
            str(Path(sys.executable).parent / "jupyter-docker-spec"),
            "install",
            f"--prefix={prefix}",
            f"--kernel-name={KERNEL_NAME}",
            f"--image-name={KERNEL_IMAGE}",
            "--log-level=WARN",
        ],
        check=True,
    )
    kernels = prefix / "share" / "jupyter" / "kernels"
    spec_file = kernels / KERNEL_NAME / "kernel.json"
    spec = json.loads(spec_file.read_text())
    spec["argv"][0] = sys.executable
    # The launcher passes its whole environment into the container: the container name is
    # KERNEL_USERNAME-KERNEL_ID, and HOME must be the kernel user's (not this process's /root).
    spec["env"] = {"KERNEL_USERNAME": PREFIX, "HOME": "/home/jovyan"}
    spec_file.write_text(json.dumps(spec, indent=2))
    return KernelSpecManager(kernel_dirs=[str(kernels)])


def cleanup(engine: docker.DockerClient) -> None:
    for container in engine.containers.list(all=True, filters={"name": f"{PREFIX}-"}):
        container.remove(force=True)
    if os.environ.get("BENCH_KEEP_IMAGE") != "1":
        with contextlib.suppress(docker.errors.ImageNotFound):
            engine.images.remove(KERNEL_IMAGE, force=True)


async def main() -> None:
    engine = docker.from_env()
    bridge = bridge_address(engine)
    # Read by gateway_provisioners when its modules load (at the first kernel's start)
    os.environ.setdefault("GP_RESPONSE_IP", bridge)
    floor, gateway = Samples(), Samples()
    try:
        in_image = image_versions(engine)
        with tempfile.TemporaryDirectory(prefix=f"{PREFIX}-") as tmp:
            context = Path(tmp) / "context"
            context.mkdir()
            started = time.perf_counter()
            build_kernel_image(engine, context)
            print(f"built {KERNEL_IMAGE} in {time.perf_counter() - started:.1f} s", file=sys.stderr)
            ksm = install_kernelspec(Path(tmp) / "prefix")
            for run in range(RUNS + 1):  # run 0 warms up
                last = run == RUNS
                # Run 0's floor kernel goes first of all: its round trips are on an event loop
                # that gateway_provisioners' ResponseManager (started with the first gateway
                # kernel, polled on this loop until the process ends) has not touched yet.
                f_cold, f_trips, f_stop = await floor_kernel(
                    engine, Path(tmp), f"{PREFIX}-floor-{run}", last or run == 0
                )
                g_cold, g_trips, g_stop = await gateway_kernel(engine, ksm, last)
                if run == 0:
                    floor.clean_trips = f_trips
                    continue
                floor.cold.append(f_cold)
                gateway.cold.append(g_cold)
                floor.shutdown.append(f_stop)
                gateway.shutdown.append(g_stop)
                if last:
                    floor.trips, gateway.trips = f_trips, g_trips
    finally:
        cleanup(engine)

    def row(label: str, ours: list[float], base: list[float]) -> str:
        mo, mf = statistics.median(ours), statistics.median(base)
        return f"| {label} | {mo * 1000:.1f} | {mf * 1000:.1f} | {mo / mf:.2f} |"

    poll = os.environ.get("GP_POLL_INTERVAL", "0.5 (default)")
    sock = os.environ.get("GP_SOCKET_TIMEOUT", "0.01 (default)")
    print(
        f"gateway_provisioners {version('gateway_provisioners')}, jupyter_client "
        f"{version('jupyter_client')} (server side); image {IMAGE}: Python {in_image}; "
        f"response address {os.environ['GP_RESPONSE_IP']}, GP_POLL_INTERVAL {poll}, "
        f"GP_SOCKET_TIMEOUT {sock}\n"
    )
    print(f"{RUNS} starts of each after one warm-up, {ROUND_TRIPS} round trips; medians in ms\n")
    print("| measure | DockerProvisioner | floor | ratio |")
    print("| --- | --- | --- | --- |")
    print(row("cold start vs `docker run` of ipykernel", gateway.cold, floor.cold))
    trips = f"`1+1` round trip (median of {ROUND_TRIPS})"
    print(row(f"{trips}, floor on the same loop (ResponseManager on)", gateway.trips, floor.trips))
    print(row(f"{trips}, floor before the ResponseManager", gateway.trips, floor.clean_trips))
    print(row("shutdown request to container removed", gateway.shutdown, floor.shutdown))
    own = "floor's own `1+1`: ResponseManager on (left) vs before it"
    print(row(own, floor.trips, floor.clean_trips))


if __name__ == "__main__":
    asyncio.run(main())
