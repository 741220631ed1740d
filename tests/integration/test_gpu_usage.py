"""GPU use by dev container and owner (``GET /gpudev/api/usage``, ``jupyter gpudev top``), on
the real engine: a real dev container's process, listed by the fake nvidia-smi as holding GPU
memory, is reported as that container's, with its owner; another user sees it as "another
user's", without name or PID; a process of no dev container is "other" (its PID and user for
administrators only)."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import docker
import pytest

from jupyter_gpudev.access import Caller
from jupyter_gpudev.containers import DevContainers, StartRequest
from jupyter_gpudev.containers.usage import GPUUse
from tests.integration.conftest import A100_0
from tests.integration.test_cli import gpudev

pytestmark = pytest.mark.integration

A100_1 = "GPU-8f2a9c41-7b3e-4c55-9d0a-2e6f1b7c3d90"


def listed_by_the_driver(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, *processes: tuple[str, int, int]
) -> Path:
    """The fake nvidia-smi lists ``processes`` (GPU, host PID, MiB) as the GPUs' processes."""
    apps = tmp_path / "compute-apps.csv"
    apps.write_text("".join(f"{gpu}, {pid}, {mib}\n" for gpu, pid, mib in processes))
    monkeypatch.setenv("FAKE_NVIDIA_SMI_APPS", str(apps))
    return apps


def host_pid(client: docker.DockerClient, container_id: str) -> int:
    return int(client.containers.get(container_id).attrs["State"]["Pid"])


def processes_on(usage: list[Any], uuid: str) -> list[dict[str, Any]]:
    hosts = [host.to_json() if hasattr(host, "to_json") else host for host in usage]
    gpus = [gpu for host in hosts for gpu in host["gpus"] if gpu["uuid"] == uuid]
    assert len(gpus) == 1, hosts
    return list(gpus[0]["processes"])


def test_a_containers_gpu_process_is_reported_as_its_own_and_hidden_from_others(
    manager: DevContainers,
    gpu_engine: None,
    docker_client: docker.DockerClient,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # Given a dev container holding a GPU, whose process holds 4 GiB there, and a process of
    # no dev container (this test's own) holding 512 MiB of the other GPU
    info = manager.start(StartRequest(environment="default", name="usage-box", gpus=1))
    (held,) = info.gpu_uuids
    free = A100_1 if held == A100_0 else A100_0
    pid = host_pid(docker_client, info.container_id)
    listed_by_the_driver(tmp_path, monkeypatch, (held, pid, 4096), (free, os.getpid(), 512))
    use = GPUUse(manager)
    # When its owner asks what the GPUs are doing
    seen = use.usage()
    # Then its GPU's process is their container's, with its PID and memory
    assert processes_on(seen, held) == [
        {
            "kind": "gpudev",
            "container": "usage-box",
            "owner": info.owner,
            "pid": pid,
            "uid": None,
            "kernel": None,
            "orphan": False,
            "memory_used_mib": 4096,
            "sm_percent": None,
            "memory_percent": None,
        }
    ]
    # And the other GPU's is no dev container's, without its PID or user
    assert processes_on(seen, free) == [
        {
            "kind": "other",
            "container": None,
            "owner": None,
            "pid": None,
            "uid": None,
            "kernel": None,
            "orphan": False,
            "memory_used_mib": 512,
            "sm_percent": None,
            "memory_percent": None,
        }
    ]
    # And another user sees the container's process as another user's: no name, no PID
    (theirs,) = processes_on(use.usage(caller=Caller("somebody-else")), held)
    assert (theirs["kind"], theirs["owner"], theirs["container"], theirs["pid"]) == (
        "another user",
        "another user",
        None,
        None,
    )
    # And an administrator sees the other process's PID and user
    (other,) = processes_on(use.usage(caller=Caller("admin", admin=True)), free)
    assert (other["pid"], other["uid"]) == (os.getpid(), os.getuid())


def test_top_prints_it_and_its_json_is_the_apis(
    manager: DevContainers,
    gpu_engine: None,
    docker_client: docker.DockerClient,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # Given a dev container whose process holds 2 GiB of its GPU
    info = manager.start(StartRequest(environment="default", name="top-box", gpus=1))
    pid = host_pid(docker_client, info.container_id)
    apps = listed_by_the_driver(tmp_path, monkeypatch, (info.gpu_uuids[0], pid, 2048))
    env = {
        "FAKE_NVIDIA_SMI_DIR": os.environ["FAKE_NVIDIA_SMI_DIR"],
        "FAKE_NVIDIA_SMI_APPS": str(apps),
    }
    # When its owner runs `jupyter gpudev top --once` and `--json`
    text = gpudev("top", "--once", env=env)
    as_json = gpudev("top", "--json", env=env)
    # Then the table names the container and what it holds, and the JSON is the API's shape
    assert text.returncode == 0, text.stderr
    assert f"top-box ({info.owner}) pid {pid}: 2.0 GiB" in text.stdout
    assert as_json.returncode == 0, as_json.stderr
    (process,) = processes_on(json.loads(as_json.stdout)["hosts"], info.gpu_uuids[0])
    assert (process["container"], process["memory_used_mib"]) == ("top-box", 2048)


def test_a_gpu_with_no_process_in_nvidia_smis_list_is_idle_not_unknown(
    manager: DevContainers,
    gpu_engine: None,
    docker_client: docker.DockerClient,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # Given nvidia-smi's process list naming a process on one GPU only (it lists every GPU's
    # processes at once, so the other GPU has none)
    info = manager.start(StartRequest(environment="default", name="idle-box", gpus=1))
    (held,) = info.gpu_uuids
    free = A100_1 if held == A100_0 else A100_0
    listed_by_the_driver(
        tmp_path, monkeypatch, (held, host_pid(docker_client, info.container_id), 64)
    )
    # When its owner asks what the GPUs are doing
    hosts = [host.to_json() for host in GPUUse(manager).usage()]
    gpus = {gpu["uuid"]: gpu for host in hosts for gpu in host["gpus"]}
    # Then the other GPU is listed with no processes (idle), not "not listed" (unknown)
    assert gpus[free]["processes"] == []
    assert gpus[free]["processes_listed"] is True
    assert gpus[held]["processes_listed"] is True
