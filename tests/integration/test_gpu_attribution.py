"""Attribution of GPU processes on the real engine: a real container's real processes, listed as
GPU processes by the fake nvidia-smi, map to exactly that container, and the test's own process
to none; here (``/proc`` read directly) and through ``ssh://`` (the real sshd in front of this
machine: nvidia-smi and the awk program run over SSH, one command each)."""

from __future__ import annotations

import os
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import docker
import pytest
from docker.models.containers import Container
from traitlets.config import Config

from jupyter_gpudev.engine import (
    Attribution,
    CommandProcReader,
    GPUInventory,
    HostPool,
    LocalProcReader,
    attribute,
    host_pid,
)
from tests.conftest import FAKE_SMI, FIXTURES
from tests.sshd import SSHServer

pytestmark = pytest.mark.integration

IMAGE = "gpudev-python:bookworm"
GPU_0 = "GPU-5d5ba0d6-d33d-2b2c-524d-9e3d8d2b8a77"
GPU_1 = "GPU-8f2a9c41-7b3e-4c55-9d0a-2e6f1b7c3d90"


@dataclass(frozen=True)
class Running:
    """A container whose init (a shell) started a "kernel" (``sleep``) and wrote its PID, as
    seen inside the container, to a PID file, as a kernel launcher does."""

    container: Container
    init_pid: int
    kernel_pid: int
    kernel_container_pid: int


def children(pid: int) -> list[int]:
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            fields = (entry / "stat").read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        if int(fields[1]) == pid:
            found.append(int(entry.name))
    return found


def comm(pid: int) -> str | None:
    try:
        return Path(f"/proc/{pid}/comm").read_text().strip()
    except OSError:
        return None


@pytest.fixture
def running(docker_client: docker.DockerClient) -> Iterator[Running]:
    container = docker_client.containers.run(
        IMAGE,
        ["sh", "-c", "sleep 600 & echo $! > /tmp/kernel.pid; wait"],
        detach=True,
        network_mode="none",
        labels={"gpudev.test": "attribution"},
    )
    try:
        deadline = time.monotonic() + 30
        while True:
            container.reload()
            init_pid = int(container.attrs["State"]["Pid"])
            code, out = container.exec_run(["cat", "/tmp/kernel.pid"])
            assert isinstance(out, bytes)
            kernel = [p for p in children(init_pid) if comm(p) == "sleep"]
            if code == 0 and out.strip().isdigit() and len(kernel) == 1:
                break
            assert time.monotonic() < deadline, "the container's kernel did not start"
            time.sleep(0.2)
        yield Running(container, init_pid, kernel[0], int(out.strip()))
    finally:
        container.remove(force=True)


@pytest.fixture
def apps(tmp_path: Path, running: Running) -> Path:
    """The fake nvidia-smi's process list: the container's kernel and init on GPU 0, this
    test's own process on GPU 1."""
    path = tmp_path / "compute-apps.csv"
    path.write_text(
        f"{GPU_0}, {running.kernel_pid}, 4096\n"
        f"{GPU_0}, {running.init_pid}, 10\n"
        f"{GPU_1}, {os.getpid()}, 100\n"
    )
    return path


def check(result: Attribution, running: Running) -> None:
    """The container's processes map to exactly it, the test's own process to none, and the
    kernel's PID file's PID to the kernel's host PID."""
    assert (result.reason, result.proc_reason) == (None, None)
    gpu_0, gpu_1 = result.gpu(GPU_0), result.gpu(GPU_1)
    assert gpu_0 is not None
    assert gpu_1 is not None
    kernel, init = gpu_0.processes
    assert (kernel.pid, kernel.memory_used_mib) == (running.kernel_pid, 4096)
    assert kernel.container_id == running.container.id
    assert init.container_id == running.container.id
    assert [p.container_id for p in gpu_1.processes] == [None]
    assert [p.pid for p in gpu_1.processes] == [os.getpid()]
    # the kernel's lineage: itself and the container's init (PID 1 inside)
    assert [s.pid for s in kernel.lineage] == [running.kernel_pid, running.init_pid]
    assert host_pid(running.kernel_container_pid, kernel.lineage) == running.kernel_pid
    assert host_pid(1, kernel.lineage) == running.init_pid
    assert kernel.held_by(running.kernel_container_pid)
    assert not init.held_by(running.kernel_container_pid)


def test_a_containers_processes_map_to_it_on_the_real_engine(
    running: Running, apps: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Given the fake nvidia-smi listing the container's processes and this test's own
    monkeypatch.setenv("FAKE_NVIDIA_SMI_DIR", str(FIXTURES / "smi" / "two-a100"))
    monkeypatch.setenv("FAKE_NVIDIA_SMI_APPS", str(apps))
    inventory = GPUInventory(backend="nvidia-smi", nvidia_smi_path=str(FAKE_SMI), cache_seconds=0)
    # When they are attributed through this machine's /proc
    result = attribute(inventory.processes(), LocalProcReader())
    # Then each maps to exactly its container, or to none
    assert result.source == "nvidia-smi"
    check(result, running)


def test_an_ssh_host_attributes_the_same_through_one_command_each(
    running: Running, apps: Path, tmp_path: Path, ssh_server: SSHServer
) -> None:
    # Given this machine as an ssh:// host whose nvidia-smi is the fake with that process list
    smi = tmp_path / "remote-nvidia-smi"
    smi.write_text(
        f"#!/bin/sh\nFAKE_NVIDIA_SMI_DIR={FIXTURES / 'smi' / 'two-a100'} "
        f'FAKE_NVIDIA_SMI_APPS={apps} exec {FAKE_SMI} "$@"\n'
    )
    smi.chmod(0o755)
    config = Config()
    config.GPUInventory.backend = "none"
    config.GPUInventory.cache_seconds = 0.0
    config.HostPool.include_local = False
    config.HostPool.hosts_file = str(tmp_path / "hosts.json")
    config.HostPool.hosts = {"far": ssh_server.host_entry(nvidia_smi=str(smi))}
    pool = HostPool(config=config)
    try:
        host = pool.get("far")
        assert host.gpu_inventory is not None
        reader = host.proc_reader()
        assert isinstance(reader, CommandProcReader)
        # When its GPU processes are read and attributed over SSH
        commands: list[list[str]] = []
        runner = reader.runner

        def counted(argv: list[str], timeout: float) -> object:
            commands.append(argv)
            return runner(argv, timeout)

        reader.runner = counted  # type: ignore[assignment]
        result = attribute(host.gpu_inventory.processes(), reader)
    finally:
        pool.close()
    # Then the answer is the same as here, /proc read by one awk command with the PIDs
    check(result, running)
    assert len(commands) == 1
    assert commands[0][0] == "awk"
    assert commands[0][3:] == [str(running.kernel_pid), str(running.init_pid), str(os.getpid())]
