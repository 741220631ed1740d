"""What attributing a host's GPU processes to containers costs over reading them.

Fake data, as on a busy 8-GPU host: ``CONTAINERS`` dev containers, each with a kernel that
started one worker per GPU, each worker on its GPU (40 x 8 = 320 GPU processes). The processes
come from the fake ``nvidia-smi`` (``tests/fixtures/fake-nvidia-smi``, a Python script: a
process start per read, as the real tool's) and, for comparison, from NVML's seam (the fake
pynvml of the unit tests: no driver, so it costs next to nothing). ``/proc`` is a folder shaped
like it (shim, init, kernel and workers per container; cgroup v1 files of 10 hierarchies, the
engine's cgroupfs layout), read by ``LocalProcReader`` (this machine) and by the awk program an
``ssh://`` host runs (here through ``awk`` locally: the SSH round trip not counted).

Floor: the fake process read alone (``GPUInventory.processes``, nvidia-smi, no cache). Ours:
``attribute`` of those processes, each reader, and a whole poll (read + attribution). The goal:
a poll costs at most 2x the read.

Run: ``.venv/bin/python benchmarks/bench_attribution.py``. It prints a Markdown table; paste it
into benchmarks/results/attribution.md with the date and machine.
"""

from __future__ import annotations

import os
import statistics
import subprocess
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import timing

from jupyter_gpudev.engine import (
    CommandProcReader,
    GPUInventory,
    LocalProcReader,
    attribute,
)
from tests.conftest import FAKE_SMI, FIXTURES
from tests.unit.test_gpus import fake_nvml

RUNS = int(os.environ.get("BENCH_RUNS", "30"))
CONTAINERS = int(os.environ.get("BENCH_CONTAINERS", "40"))
GPUS = int(os.environ.get("BENCH_GPUS", "8"))
HIERARCHIES = ("name=systemd", "pids", "blkio", "freezer", "devices", "memory", "cpuset", "cpu")


def timed(func: Callable[[], object]) -> list[float]:
    return timing.timed(func, RUNS)


def gpu_uuid(index: int) -> str:
    return f"GPU-{index:08x}-d33d-2b2c-524d-9e3d8d2b8a77"


def container_id(index: int) -> str:
    return f"{index:064x}"


def status(pid: int, ppid: int, ns: tuple[int, ...]) -> str:
    ns_pids = "\t".join(str(n) for n in ns)
    return (
        f"Name:\tpython\nUmask:\t0022\nState:\tS (sleeping)\nTgid:\t{pid}\nNgid:\t0\n"
        f"Pid:\t{pid}\nPPid:\t{ppid}\nTracerPid:\t0\nUid:\t1000\t1000\t1000\t1000\n"
        f"Gid:\t1000\t1000\t1000\t1000\nFDSize:\t64\nGroups:\t\nNStgid:\t{pid}\n"
        f"NSpid:\t{ns_pids}\nNSpgid:\t{pid}\nNSsid:\t{pid}\n"
        "VmPeak:\t 8123456 kB\nVmSize:\t 8123456 kB\nThreads:\t24\n"
    )


def cgroup(path: str) -> str:
    lines = [f"{len(HIERARCHIES) - i}:{name}:{path}" for i, name in enumerate(HIERARCHIES)]
    return "\n".join([*lines, f"0::{path}"]) + "\n"


def fake_host(root: Path) -> tuple[list[tuple[str, int, int]], int]:
    """Writes the fake /proc under ``root``; returns the GPU processes (GPU, PID, MiB) and the
    number of processes written."""
    apps: list[tuple[str, int, int]] = []
    written = 0

    def add(pid: int, ppid: int, ns: tuple[int, ...], path: str) -> None:
        nonlocal written
        folder = root / str(pid)
        folder.mkdir(parents=True)
        (folder / "status").write_text(status(pid, ppid, ns))
        (folder / "cgroup").write_text(cgroup(path))
        written += 1

    for index in range(CONTAINERS):
        base = 10_000 + index * 100
        docker = f"/docker/{container_id(index)}"
        add(base, 1, (base,), "/system.slice/containerd.service")  # the shim
        add(base + 1, base, (base + 1, 1), docker)  # init
        add(base + 2, base + 1, (base + 2, 7), docker)  # the kernel
        for gpu in range(GPUS):
            worker = base + 10 + gpu
            add(worker, base + 2, (worker, 20 + gpu), docker)
            apps.append((gpu_uuid(gpu), worker, 1024 + gpu))
    return apps, written


def run_here(argv: list[str], timeout: float) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        argv, capture_output=True, text=True, errors="replace", timeout=timeout, check=False
    )


def nvml_devices(apps: list[tuple[str, int, int]]) -> list[dict[str, Any]]:
    devices: list[dict[str, Any]] = [
        {"uuid": gpu_uuid(gpu), "name": "NVIDIA H100 80GB HBM3", "memory": (81559, 0)}
        for gpu in range(GPUS)
    ]
    for uuid, pid, mib in apps:
        device = next(d for d in devices if d["uuid"] == uuid)
        device.setdefault("compute", []).append((pid, mib))
        device.setdefault("samples", []).append((pid, 1 << 40, 50, 10))
    return devices


def main() -> None:
    with tempfile.TemporaryDirectory() as folder, pytest.MonkeyPatch.context() as patch:
        root = Path(folder)
        apps, written = fake_host(root / "proc")
        listing = root / "compute-apps.csv"
        listing.write_text("".join(f"{uuid}, {pid}, {mib}\n" for uuid, pid, mib in apps))
        patch.setenv("FAKE_NVIDIA_SMI_DIR", str(FIXTURES / "smi" / "two-a100"))
        patch.setenv("FAKE_NVIDIA_SMI_APPS", str(listing))
        smi = GPUInventory(backend="nvidia-smi", nvidia_smi_path=str(FAKE_SMI), cache_seconds=0)
        nvml_module = fake_nvml(nvml_devices(apps))
        nvml = GPUInventory(backend="nvml", nvml_loader=lambda: nvml_module, cache_seconds=0)
        local = LocalProcReader(root / "proc")
        remote = CommandProcReader(run_here, root=str(root / "proc"))

        processes = smi.processes()
        assert len(processes.processes) == len(apps), processes.reason
        check = attribute(processes, local)
        attributed = [p for g in check.gpus for p in g.processes if p.container_id]
        assert len(attributed) == len(apps)
        assert all(p.held_by(7) for p in attributed)
        assert attribute(processes, remote) == check

        read = timed(smi.processes)
        rows: list[tuple[str, list[float]]] = [
            ("floor: fake nvidia-smi process read", read),
            ("attribute, /proc read here", timed(lambda: attribute(processes, local))),
            ("attribute, /proc by the awk program", timed(lambda: attribute(processes, remote))),
            (
                "poll: nvidia-smi read + attribute here",
                timed(lambda: attribute(smi.processes(), local)),
            ),
            (
                "poll: nvidia-smi read + attribute by awk",
                timed(lambda: attribute(smi.processes(), remote)),
            ),
            ("fake NVML process read (in-process seam)", timed(nvml.processes)),
            (
                "poll: fake NVML read + attribute here",
                timed(lambda: attribute(nvml.processes(), local)),
            ),
        ]
        nvml.close()
    print(
        f"{CONTAINERS} containers x {GPUS} GPUs: {len(apps)} GPU processes, "
        f"{written} processes in the fake /proc"
    )
    poll = statistics.median(rows[3][1]) / statistics.median(read)
    print(f"poll / read (here): {poll:.2f}x\n")
    timing.print_table(rows, runs=RUNS, digits=2, ratio_digits=2)


if __name__ == "__main__":
    main()
