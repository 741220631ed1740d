"""A real Jupyter server killed with SIGKILL mid-session, then started again: no GPU stays held.

The kernel containers of the dead server cannot be reached again (their connection lived in
that process), so the new server stops them, which frees their leases, and removes the ones
with no changes.
"""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

import docker
import pytest

from jupyter_gpudev.containers import docker_name
from jupyter_gpudev.labels import L_KERNEL
from jupyter_gpudev.leasing import LeaseLedger
from tests.servers import Server

pytestmark = pytest.mark.integration


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
