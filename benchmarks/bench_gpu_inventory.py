"""What reading the local GPUs costs over the floor, on a machine with a real NVIDIA GPU.

Floor: the least any tool does to list GPUs by UUID, through NVML already initialised
(``nvmlDeviceGetCount`` and one ``nvmlDeviceGetUUID`` per GPU). Peer: ``nvidia-smi -L`` (what
people run by hand; a process start and an NVML start per call). Ours: ``GPUInventory`` with
each backend (NVML kept initialised between reads; ``nvidia-smi --query-gpu`` per read), NVML
started and shut down for every read (what a probe without a kept handle would cost), and the
default 1 s cache (what many panels polling at once cost).

Needs no Docker engine: run ``python benchmarks/bench_gpu_inventory.py`` where ``nvidia-smi``
sees a GPU. It prints a Markdown table; paste it into benchmarks/results/gpu-inventory.md with
the date and machine.
"""

from __future__ import annotations

import os
import shutil
import subprocess
from collections.abc import Callable
from typing import Any

import timing

from jupyter_gpudev.engine import GPUInventory, NvmlProbe

RUNS = int(os.environ.get("BENCH_RUNS", "30"))


def timed(func: Callable[[], object]) -> list[float]:
    return timing.timed(func, RUNS)


def main() -> None:
    import pynvml  # noqa: PLC0415 - only where a GPU is

    def floor() -> list[Any]:
        count = pynvml.nvmlDeviceGetCount()
        return [
            pynvml.nvmlDeviceGetUUID(pynvml.nvmlDeviceGetHandleByIndex(i)) for i in range(count)
        ]

    def nvml_cold() -> None:
        probe = NvmlProbe()
        probe.probe()
        probe.close()

    smi = shutil.which("nvidia-smi")
    if smi is None:
        raise SystemExit("nvidia-smi is not on PATH: this benchmark needs a real NVIDIA GPU")
    # First, while nothing in this process holds NVML (its start is counted: a start while
    # another holder is there costs nothing)
    cold = timed(nvml_cold)
    by_smi = GPUInventory(backend="nvidia-smi", cache_seconds=0.0)
    by_smi_samples = timed(by_smi.probe)
    pynvml.nvmlInit()
    nvml = GPUInventory(backend="nvml", cache_seconds=0.0)
    cached = GPUInventory()
    rows: list[tuple[str, list[float]]] = [
        ("floor: NVML count + UUIDs, initialised", timed(floor)),
        (
            "peer: `nvidia-smi -L`",
            timed(lambda: subprocess.run([smi, "-L"], capture_output=True, check=True)),
        ),
        ("GPUInventory nvml, kept initialised", timed(nvml.probe)),
        ("NvmlProbe started and shut down per read", cold),
        ("GPUInventory nvidia-smi (--query-gpu per read)", by_smi_samples),
        ("GPUInventory default (auto, 1 s cache)", timed(cached.probe)),
    ]
    pynvml.nvmlShutdown()
    nvml.close()
    cached.close()
    inventory = GPUInventory(backend="nvml").probe()
    gpus = ", ".join(g.name for g in inventory.gpus)
    print(f"GPUs: {gpus}; driver {inventory.driver_version}, CUDA {inventory.cuda_version}")
    timing.print_table(rows, runs=RUNS, digits=3, ratio_digits=1)


if __name__ == "__main__":
    main()
