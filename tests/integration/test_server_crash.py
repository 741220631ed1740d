"""A real Jupyter server killed with SIGKILL mid-session, then started again: no GPU stays held.

The kernel containers of the dead server cannot be reached again (their connection lived in
that process), so the new server stops them, which frees their leases, and removes the ones
with no changes.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
import urllib.request
from pathlib import Path
from typing import Any

import docker
import pytest

from jupyter_gpudev.containers import docker_name
from jupyter_gpudev.labels import L_KERNEL
from jupyter_gpudev.leasing import LeaseLedger
from tests.conftest import FAKE_SMI, FIXTURES
from tests.ports import free_port

pytestmark = pytest.mark.integration

TOKEN = "crash-test-token"  # noqa: S105 - a throwaway token for a loopback-only test server


class Server:
    """``jupyter server`` in its own process, as a user runs it."""

    def __init__(self, root: Path, state: Path, config_dir: Path) -> None:
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
        ]
        env = {
            **os.environ,
            "FAKE_NVIDIA_SMI_DIR": str(FIXTURES / "smi" / "two-a100"),
            "JUPYTER_CONFIG_DIR": str(config_dir),
        }
        with self.log.open("wb") as out:
            self.process = subprocess.Popen(argv, env=env, stdout=out, stderr=subprocess.STDOUT)
        self.wait_ready()

    def call(self, method: str, path: str, body: Any = None) -> Any:
        data = json.dumps(body).encode() if body is not None else None
        request = urllib.request.Request(
            f"http://127.0.0.1:{self.port}{path}",
            data=data,
            method=method,
            headers={"Authorization": f"token {TOKEN}", "Content-Type": "application/json"},
        )
        with urllib.request.urlopen(request, timeout=120) as response:  # noqa: S310 - loopback
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


@pytest.fixture
def workspace(tmp_path: Path) -> tuple[Path, Path, Path]:
    root = tmp_path / "work"
    (root / ".devcontainer" / "gpu").mkdir(parents=True)
    (root / ".devcontainer" / "gpu" / "devcontainer.json").write_text(
        json.dumps({"image": "gpudev-python:bookworm", "hostRequirements": {"gpu": True}})
    )
    return root, tmp_path / "state", tmp_path / "config"


@pytest.mark.usefixtures("gpu_engine")
def test_sigkill_then_restart_leaves_no_gpu_held(
    workspace: tuple[Path, Path, Path], docker_client: docker.DockerClient
) -> None:
    root, state, config = workspace
    first = Server(root, state, config)
    second: Server | None = None
    kernel: dict[str, Any] = {}
    try:
        # Given a GPU kernel running through the first server
        kernel = first.call("POST", "/api/kernels", {"name": "gpudev-gpu"})
        name = docker_name(f"kernel-{kernel['id']}")
        container = docker_client.containers.get(name)
        assert container.status == "running"
        assert container.labels[L_KERNEL] == kernel["id"]
        ledger = LeaseLedger(state / "leases.sqlite")
        assert [lease.container for lease in ledger.active("local")] == [f"kernel-{kernel['id']}"]
        # When the server is killed with SIGKILL (no cleanup runs)...
        first.kill()
        # ...its kernel container still holds the GPU
        assert docker_client.containers.get(name).status == "running"
        assert len(ledger.active("local")) == 1
        # When a server is started again on the same state
        second = Server(root, state, config)
        # Then, shortly after, the orphan is stopped (and removed: nothing changed in it),
        # and its lease is free
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            gone = not docker_client.containers.list(all=True, filters={"name": name})
            if gone and not ledger.active("local"):
                break
            time.sleep(0.2)
        assert ledger.active("local") == []
        assert docker_client.containers.list(all=True, filters={"name": name}) == []
        # And the GPU can be leased again: a new kernel starts with it
        again = second.call("POST", "/api/kernels", {"name": "gpudev-gpu"})
        assert docker_client.containers.get(docker_name(f"kernel-{again['id']}")).status == (
            "running"
        )
        second.call("DELETE", f"/api/kernels/{again['id']}")
        assert ledger.active("local") == []
    finally:
        first.stop()
        if second is not None:
            second.stop()
        if kernel:
            for leftover in docker_client.containers.list(
                all=True, filters={"name": f"kernel-{kernel['id']}"}
            ):
                leftover.remove(force=True)
