"""What the kernel benchmarks share: the floor kernel and the readiness and round-trip
measures. No jupyter_gpudev import: bench_gateway.py runs it from another venv."""

from __future__ import annotations

import json
import os
import queue
import socket
import statistics
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import docker
from jupyter_client.blocking.client import BlockingKernelClient


def median_ms(func: Callable[[], object], runs: int) -> float:
    """The median wall time of ``runs`` calls of ``func``, in milliseconds."""
    samples = []
    for _ in range(runs):
        started = time.perf_counter()
        func()
        samples.append(time.perf_counter() - started)
    return statistics.median(samples) * 1000


PORT_NAMES = ("shell_port", "iopub_port", "stdin_port", "control_port", "hb_port")


def free_ports(count: int) -> list[int]:
    sockets = [socket.socket() for _ in range(count)]
    for sock in sockets:
        sock.bind(("127.0.0.1", 0))
    ports = [int(sock.getsockname()[1]) for sock in sockets]
    for sock in sockets:
        sock.close()
    return ports


def new_connection_info() -> dict[str, Any]:
    """Five free local ports and a fresh key (no ``ip``: the caller says where)."""
    return {
        **dict(zip(PORT_NAMES, free_ports(len(PORT_NAMES)), strict=True)),
        "transport": "tcp",
        "signature_scheme": "hmac-sha256",
        "key": os.urandom(16).hex(),
    }


def first_kernel_info(info: dict[str, Any]) -> None:
    """Wait for the first kernel_info reply: the same readiness test for every kernel measured
    (a client without a kernel manager judges "alive" by heartbeats, which start late, so ask
    for kernel_info until the kernel answers)."""
    kc = BlockingKernelClient()
    kc.load_connection_info(info)  # type: ignore[arg-type]
    kc.start_channels()
    try:
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
                return
    finally:
        kc.stop_channels()


async def round_trips(client: Any, count: int) -> list[float]:
    """Seconds of each of ``count`` executions of ``1+1``."""
    samples = []
    for _ in range(count):
        started = time.perf_counter()
        await client.execute_interactive("1+1", timeout=30, output_hook=lambda _msg: None)
        samples.append(time.perf_counter() - started)
    return samples


def run_floor_kernel(
    engine: docker.DockerClient, image: str, work: Path, name: str | None = None
) -> tuple[Any, dict[str, Any], float]:
    """``docker run`` of the image's ipykernel with published ports (and init), up to its first
    kernel_info reply: the cold-start floor. Returns the container, its connection info (at
    127.0.0.1) and the seconds it took."""
    info = new_connection_info()
    (work / "kernel.json").write_text(json.dumps({**info, "ip": "0.0.0.0"}))  # noqa: S104
    started = time.perf_counter()
    container = engine.containers.run(
        image,
        ["python3", "-m", "ipykernel_launcher", "-f", "/conn/kernel.json"],
        name=name,
        detach=True,
        init=True,
        ports={f"{p}/tcp": ("127.0.0.1", p) for p in (info[n] for n in PORT_NAMES)},
        mounts=[docker.types.Mount("/conn", str(work), type="bind")],
    )
    local = {**info, "ip": "127.0.0.1"}
    first_kernel_info(local)
    return container, local, time.perf_counter() - started
