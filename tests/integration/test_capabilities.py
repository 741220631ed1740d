"""``c.EnvironmentManager.allowed_capabilities`` on the real engine: capAdd, runArgs --cap-add
and a Dev Container Feature's capAdd add exactly the capabilities an administrator names; any
other is refused, and nothing is left behind."""

from __future__ import annotations

import json
import secrets
from collections.abc import Callable
from pathlib import Path
from typing import Any

import docker
import pytest
from traitlets.config import Config

from jupyter_gpudev.containers import DevContainers, StartRequest
from jupyter_gpudev.errors import BadRequest
from tests.leaks import Baseline, assert_nothing_leaked

pytestmark = pytest.mark.integration

BASE = "gpudev-base:bookworm"


def write_env(root: Path, name: str, data: dict[str, Any]) -> Path:
    folder = root / ".devcontainer" / name
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "devcontainer.json").write_text(json.dumps({"image": BASE, **data}))
    return folder


def manager_with(
    dev_containers: Callable[..., DevContainers], root: Path, allowed: list[str]
) -> DevContainers:
    config = Config()
    config.GPUInventory.backend = "none"
    config.EnvironmentManager.allowed_capabilities = allowed
    return dev_containers(root, config)


def cap_add(client: docker.DockerClient, container_id: str) -> set[str]:
    """The container's added capabilities as the engine recorded them (without ``CAP_``)."""
    added = client.containers.get(container_id).attrs["HostConfig"].get("CapAdd") or []
    return {str(name).removeprefix("CAP_") for name in added}


def test_capabilities_are_added_only_where_the_administrator_names_them(
    tmp_path: Path,
    dev_containers: Callable[..., DevContainers],
    docker_client: docker.DockerClient,
) -> None:
    root = tmp_path / "work"
    tag = secrets.token_hex(4)
    # Given environments asking for SYS_PTRACE (capAdd, runArgs) and for SYS_ADMIN
    write_env(root, "ptrace", {"capAdd": ["SYS_PTRACE"]})
    write_env(root, "runargs", {"runArgs": ["--cap-add=SYS_PTRACE"]})
    write_env(root, "admin", {"capAdd": ["SYS_PTRACE", "SYS_ADMIN"]})
    # And a local feature adding SYS_PTRACE, on an environment that asks for none itself
    folder = write_env(root, f"feat{tag}", {"features": {"./dbg": {}}})
    (folder / "dbg").mkdir()
    (folder / "dbg" / "devcontainer-feature.json").write_text(
        json.dumps({"id": "dbg", "version": "1.0.0", "capAdd": ["SYS_PTRACE"]})
    )
    (folder / "dbg" / "install.sh").write_text("#!/bin/sh\ntrue\n")

    # When the administrator allows nothing (the default): each is refused, naming the setting
    default = manager_with(dev_containers, root, [])
    baseline = Baseline.take(docker_client, ignore_removed=True)
    for env in ("ptrace", "runargs", f"feat{tag}"):
        with pytest.raises(BadRequest, match="SYS_PTRACE is not allowed") as refused:
            default.start(StartRequest(environment=env, name=f"cap-{tag}-0"))
        assert "c.EnvironmentManager.allowed_capabilities" in refused.value.message
    assert_nothing_leaked(docker_client, baseline, server_id=default.server_id)

    # When it allows SYS_PTRACE
    manager = manager_with(dev_containers, root, ["SYS_PTRACE"])
    baseline = Baseline.take(docker_client, ignore_removed=True)
    try:
        for number, env in enumerate(("ptrace", "runargs", f"feat{tag}"), start=1):
            info = manager.start(StartRequest(environment=env, name=f"cap-{tag}-{number}"))
            # Then the container really has it added, and nothing else
            assert cap_add(docker_client, info.container_id) == {"SYS_PTRACE"}, env
            manager.remove(f"cap-{tag}-{number}", force=True)
        # And a capability it does not name is still refused, nothing created
        with pytest.raises(BadRequest, match="SYS_ADMIN is not allowed"):
            manager.start(StartRequest(environment="admin", name=f"cap-{tag}-9"))
    finally:
        for image in docker_client.images.list(name=f"gpudev-features-feat{tag}"):
            docker_client.images.remove(str(image.id), force=True)
    assert_nothing_leaked(
        docker_client,
        baseline,
        server_id=manager.server_id,
        ledger_id=manager.ledger_id,
        environments=[f"feat{tag}"],
    )
