"""Remote hosts over SSH against the floor and peers, in one run:

- Docker API call latency (``ping`` and ``containers.list``), median of N calls: our ssh://
  host (one persistent paramiko connection, a dial-stdio channel per pooled HTTP connection)
  against the local socket (goal: at most 3x), and the peers: docker-py's own ssh:// adapter
  (paramiko) and ``use_ssh_client=True`` (an ``ssh`` process per connection), which is what
  the docker CLI does;
- execute round trip of ``1+1`` (median of N) through the SSH forwards to a kernel in a dev
  container on the ssh:// host, against a local ipykernel (goal: at most 1.3x), and against a
  kernel in a dev container on the local engine (no tunnel).

The "remote" host is a real sshd on loopback in front of the local engine (tests/sshd.py), so
the ratios measure what SSH adds, not a network. Run: ``.venv/bin/python
benchmarks/bench_remote.py`` (engine, kernel image and sshd needed: scripts/setup.sh --test).
"""

from __future__ import annotations

import asyncio
import os
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import docker
from floor import round_trips
from jupyter_client.kernelspec import KernelSpecManager
from jupyter_client.manager import AsyncKernelManager
from traitlets.config import Config

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from jupyter_gpudev.changes.tracker import track_changes
from jupyter_gpudev.containers import DevContainers
from jupyter_gpudev.engine import HostPool
from jupyter_gpudev.kernels import provisioner
from jupyter_gpudev.kernels.kernelspecs import GPUDevKernelSpecManager
from jupyter_gpudev.labels import L_SERVER
from tests.sshd import SSHServer, run_sshd

CALLS = int(os.environ.get("BENCH_CALLS", "300"))
PEER_CALLS = int(os.environ.get("BENCH_PEER_CALLS", "20"))
ROUND_TRIPS = int(os.environ.get("BENCH_ROUND_TRIPS", "200"))


def listing(client: docker.DockerClient) -> Callable[[], Any]:
    return lambda: client.containers.list(ignore_removed=True)


def timed(func: Callable[[], Any], count: int) -> list[float]:
    func()  # warm-up: connects
    samples = []
    for _ in range(count):
        started = time.perf_counter()
        func()
        samples.append(time.perf_counter() - started)
    return samples


def stock_clients(server: SSHServer, home: Path) -> tuple[docker.DockerClient, docker.DockerClient]:
    """docker-py's own ssh:// clients, configured the way they read it: ~/.ssh."""
    ssh = home / ".ssh"
    ssh.mkdir(parents=True)
    (ssh / "known_hosts").write_text(server.known_hosts.read_text())
    (ssh / "config").write_text(
        f"Host 127.0.0.1\n  IdentityFile {server.identity_file}\n  IdentitiesOnly yes\n"
        f"  UserKnownHostsFile {ssh / 'known_hosts'}\n"
    )
    os.environ["HOME"] = str(home)
    # OpenSSH reads the passwd entry's ~/.ssh, not $HOME: a wrapper first on PATH hands the
    # ssh processes docker-py starts the same configuration.
    wrapper = home / "bin" / "ssh"
    wrapper.parent.mkdir()
    wrapper.write_text(f'#!/bin/sh\nexec /usr/bin/ssh -F {ssh / "config"} "$@"\n')
    wrapper.chmod(0o755)
    os.environ["PATH"] = f"{wrapper.parent}:{os.environ['PATH']}"
    paramiko_client = docker.DockerClient(base_url=server.url, version="1.41")
    shell_client = docker.DockerClient(base_url=server.url, version="1.41", use_ssh_client=True)
    return paramiko_client, shell_client


async def kernel_trips(ksm: KernelSpecManager, name: str) -> list[float]:
    km = AsyncKernelManager(kernel_name=name, kernel_spec_manager=ksm)
    await km.start_kernel()
    client = km.client()
    client.start_channels()
    try:
        await client.wait_for_ready(timeout=120)
        await round_trips(client, 20)  # warm-up
        return await round_trips(client, ROUND_TRIPS)
    finally:
        client.stop_channels()
        await km.shutdown_kernel()


def manager_for(tmp: Path, hosts: dict[str, Any], include_local: bool) -> DevContainers:
    config = Config()
    config.GPUInventory.backend = "none"
    config.DevContainers.state_dir = str(tmp / "state")
    config.DevContainers.stop_timeout = 2
    config.HostPool.include_local = include_local
    config.HostPool.hosts = hosts
    config.HostPool.hosts_file = str(tmp / "hosts.json")
    manager = DevContainers(root_dir=tmp / "work", host_pool=HostPool(config=config), config=config)
    track_changes(manager)
    return manager


async def main() -> None:
    home, path = os.environ.get("HOME", ""), os.environ["PATH"]
    with tempfile.TemporaryDirectory() as name, run_sshd(Path(name) / "sshd") as server:
        tmp = Path(name)
        (tmp / "work").mkdir()
        ours = manager_for(tmp, {"far": server.host_entry()}, include_local=True)
        local = ours.host_pool.get("local").client()
        far = ours.host_pool.get("far").client()
        api: dict[str, dict[str, list[float]]] = {"ping": {}, "containers.list": {}}
        for label, client in (("local socket", local), ("ours, ssh://", far)):
            api["ping"][label] = timed(client.api.ping, CALLS)
            api["containers.list"][label] = timed(listing(client), CALLS)
        paramiko_client, shell_client = stock_clients(server, tmp / "home")
        try:
            for label, client, count in (
                ("docker-py ssh:// (paramiko)", paramiko_client, CALLS),
                ("docker-py ssh:// (ssh process, as the CLI)", shell_client, PEER_CALLS),
            ):
                api["ping"][label] = timed(client.api.ping, count)
                api["containers.list"][label] = timed(listing(client), count)
        finally:
            paramiko_client.close()
            shell_client.close()
            os.environ["HOME"], os.environ["PATH"] = home, path

        # Execute round trips: local ipykernel, a dev container on the local engine, and one
        # on the ssh:// host through the forwards.
        trips: dict[str, list[float]] = {}
        local_km = AsyncKernelManager(
            kernel_name="python3", kernel_spec_manager=KernelSpecManager()
        )
        await local_km.start_kernel()
        kernel = local_km.client()
        kernel.start_channels()
        await kernel.wait_for_ready(timeout=60)
        await round_trips(kernel, 20)
        trips["local ipykernel (floor)"] = await round_trips(kernel, ROUND_TRIPS)
        kernel.stop_channels()
        await local_km.shutdown_kernel(now=True)
        for label, include_local, hosts in (
            ("dev container, local engine", True, {}),
            ("dev container, ssh:// host (forwards)", False, {"far": server.host_entry()}),
        ):
            manager = manager_for(tmp, hosts, include_local)
            provisioner.set_manager(manager)
            try:
                ksm = GPUDevKernelSpecManager(root_dir=str(manager.root_dir))
                trips[label] = await kernel_trips(ksm, "gpudev-default")
            finally:
                provisioner.set_manager(None)
                for container in (
                    manager.host_pool.get(manager.host_pool.names()[0])
                    .client()
                    .containers.list(all=True, filters={"label": f"{L_SERVER}={manager.server_id}"})
                ):
                    container.remove(force=True)  # a kernel's container kept for its changes
                manager.host_pool.close()
        ours.host_pool.close()

    def ms(samples: list[float]) -> float:
        return statistics.median(samples) * 1000

    print(f"API calls: {CALLS} each ({PEER_CALLS} for the ssh-process peer), medians in ms\n")
    print("| call | path | median ms | p90 ms | ratio to local socket | goal |")
    print("| --- | --- | --- | --- | --- | --- |")
    for call, paths in api.items():
        floor = ms(paths["local socket"])
        for label, samples in paths.items():
            p90 = statistics.quantiles(samples, n=10)[-1] * 1000
            goal = "<= 3" if label == "ours, ssh://" else "-"
            print(
                f"| {call} | {label} | {ms(samples):.2f} | {p90:.2f} | "
                f"{ms(samples) / floor:.2f} | {goal} |"
            )
    floor = ms(trips["local ipykernel (floor)"])
    print(f"\n`1+1` round trips: {ROUND_TRIPS} each, medians in ms\n")
    print("| kernel | median ms | ratio to local ipykernel | goal |")
    print("| --- | --- | --- | --- |")
    for label, samples in trips.items():
        goal = "<= 1.3" if "ssh" in label else "-"
        print(f"| {label} | {ms(samples):.2f} | {ms(samples) / floor:.2f} | {goal} |")


if __name__ == "__main__":
    asyncio.run(main())
