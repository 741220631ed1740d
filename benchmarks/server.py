"""A real Jupyter server with the extension, for the benchmarks that go through its REST API:
a subprocess on loopback with token authentication, gpudev's state in a folder of the run, GPUs
from the fake inventory, no user configuration."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
from pathlib import Path
from typing import IO

ROOT = Path(__file__).resolve().parent.parent
FAKE_SMI = ROOT / "tests" / "fixtures" / "fake-nvidia-smi"
TOKEN = "bench-token"  # noqa: S105 - a throwaway token for a loopback-only server
HEADERS = {"Authorization": f"token {TOKEN}"}


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def start_server(
    root: Path, state: Path, extra: list[str], output: IO[str] | None = None
) -> tuple[subprocess.Popen[bytes], int]:
    """Start the server on a free port (``extra``: more command-line options); its process and
    port. Its output goes to ``output`` (default: nowhere)."""
    port = free_port()
    env = {
        **os.environ,
        "FAKE_NVIDIA_SMI_DIR": str(ROOT / "tests/fixtures/smi/two-a100"),
        "JUPYTER_CONFIG_DIR": str(state / "config"),
    }
    process = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "jupyter_server",
            f"--port={port}",
            "--ip=127.0.0.1",
            f"--IdentityProvider.token={TOKEN}",
            f"--ServerApp.root_dir={root}",
            "--ServerApp.open_browser=False",
            "--allow-root",
            f"--DevContainers.state_dir={state}",
            "--GPUInventory.backend=nvidia-smi",
            f"--GPUInventory.nvidia_smi_path={FAKE_SMI}",
            *extra,
        ],
        env=env,
        stdout=output if output is not None else subprocess.DEVNULL,
        stderr=subprocess.STDOUT if output is not None else subprocess.DEVNULL,
    )
    return process, port


def stop_server(process: subprocess.Popen[bytes]) -> None:
    """Stop it; killed if it has not stopped within 30 s (said on stderr)."""
    process.terminate()
    try:
        process.wait(30)
    except subprocess.TimeoutExpired:
        print("the server did not stop within 30 s", file=sys.stderr)
        process.kill()
        process.wait(10)
