"""A real ``jupyter server`` in its own process, as a user runs it: for the tests that kill it
(SIGKILL, no cleanup runs) and start another on the same state folder."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
import urllib.request
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from tests.conftest import FAKE_SMI, FIXTURES
from tests.ports import free_port

TOKEN = "crash-test-token"  # noqa: S105 - a throwaway token for a loopback-only test server


class Server:
    """``jupyter server`` in its own process, as a user runs it: its workspace ``root``, its
    state folder ``state``, its Jupyter configuration folder ``config_dir``; GPUs from the fake
    nvidia-smi's two A100s. ``env``: more environment variables; ``args``: more options."""

    def __init__(
        self,
        root: Path,
        state: Path,
        config_dir: Path,
        *,
        env: Mapping[str, str] | None = None,
        args: Sequence[str] = (),
    ) -> None:
        self.port = free_port()
        self.log = root.parent / f"server-{self.port}.log"
        argv = [
            sys.executable,
            "-m",
            "jupyter_server",
            f"--port={self.port}",
            "--ip=127.0.0.1",
            f"--IdentityProvider.token={TOKEN}",
            f"--ServerApp.root_dir={root}",
            "--ServerApp.open_browser=False",
            "--allow-root",
            "--GPUInventory.backend=nvidia-smi",
            f"--GPUInventory.nvidia_smi_path={FAKE_SMI}",
            f"--DevContainers.state_dir={state}",
            "--DevContainers.stop_timeout=2",
            *args,
        ]
        environment = {
            **os.environ,
            "FAKE_NVIDIA_SMI_DIR": str(FIXTURES / "smi" / "two-a100"),
            "JUPYTER_CONFIG_DIR": str(config_dir),
            **(env or {}),
        }
        with self.log.open("wb") as out:
            self.process = subprocess.Popen(
                argv, env=environment, stdout=out, stderr=subprocess.STDOUT
            )
        self.wait_ready()

    def call(self, method: str, path: str, body: Any = None, *, timeout: float = 120) -> Any:
        data = json.dumps(body).encode() if body is not None else None
        request = urllib.request.Request(
            f"http://127.0.0.1:{self.port}{path}",
            data=data,
            method=method,
            headers={"Authorization": f"token {TOKEN}", "Content-Type": "application/json"},
        )
        with urllib.request.urlopen(request, timeout=timeout) as response:  # noqa: S310 - loopback
            raw = response.read()
        return json.loads(raw) if raw else None

    def wait_ready(self) -> None:
        deadline = time.monotonic() + 60
        while True:
            if self.process.poll() is not None:
                raise AssertionError(f"server exited: {self.log.read_text()[-2000:]}")
            try:
                self.call("GET", "/api/status")
            except OSError:
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.2)
            else:
                return

    def kill(self) -> None:
        self.process.send_signal(signal.SIGKILL)
        self.process.wait(10)

    def stop(self) -> None:
        if self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(20)
            except subprocess.TimeoutExpired:
                self.process.kill()
