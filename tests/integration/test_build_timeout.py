"""A build that never ends is stopped at ``c.DevContainers.build_timeout``
(``engine.deadline``): the request answers, and nothing of the build runs on on the engine.
Without it a ``RUN sleep infinity`` held a server worker (and in the shared service one of its
user's operations) for good. Both builders: the classic one, and BuildKit (the CA bundle's)."""

from __future__ import annotations

import io
import json
import secrets
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import docker
import pytest

from jupyter_gpudev.containers import DevContainers, StartRequest
from jupyter_gpudev.engine.images import stream_build
from jupyter_gpudev.environments import MountPolicy
from jupyter_gpudev.errors import ImageError
from tests.integration.conftest import BASE, two_a100

pytestmark = pytest.mark.integration


def running_sleeps(client: docker.DockerClient, marker: str) -> list[str]:
    """The engine's containers running this test's step (classic builds), by name."""
    found = []
    for container in client.containers.list():
        command = " ".join(container.attrs["Config"].get("Cmd") or [])
        if marker in command:
            found.append(str(container.name))
    return found


def step_processes(marker: str) -> list[str]:
    """This test's step's processes on the machine, by command line (BuildKit's steps run in
    no container the engine lists)."""
    found = []
    for entry in Path("/proc").iterdir():
        try:
            command = (entry / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
        except OSError:
            continue
        if command.startswith("sleep") and marker in command:
            found.append(command)
    return found


@pytest.mark.parametrize("builder", ["classic", "buildkit"])
def test_a_build_past_its_time_limit_is_stopped_and_says_why(
    docker_client: docker.DockerClient, builder: str
) -> None:
    # Given a Dockerfile whose step never ends (its marker: a sleep no other build runs)
    seconds = 3000 + secrets.randbelow(1000)
    marker = f"sleep {seconds}"
    dockerfile = f"FROM {BASE}\nRUN {marker}\n".encode()
    trust = MountPolicy(mount_ca_bundle=True).build_trust() if builder == "buildkit" else None
    seen: list[dict[str, Any]] = []
    # When it is built with a limit of 4 s
    began = time.monotonic()
    with pytest.raises(ImageError) as stopped:
        stream_build(
            docker_client,
            "the test's image",
            seen.append,
            trust,
            timeout=4.0,
            fileobj=io.BytesIO(dockerfile),
            tag=f"gpudev-test-timeout:{seconds}",
        )
    # Then it is stopped at the limit, saying so and by which setting
    assert time.monotonic() - began < 20
    assert "took longer than 4 s" in stopped.value.message
    assert "c.DevContainers.build_timeout" in stopped.value.message
    # And within seconds nothing of the step runs on: the engine cancelled the build
    deadline = time.monotonic() + 20
    while running_sleeps(docker_client, marker) or step_processes(marker):
        assert time.monotonic() < deadline, "the step still runs after the build was stopped"
        time.sleep(0.5)
    assert not docker_client.images.list(name=f"gpudev-test-timeout:{seconds}")


def test_a_start_whose_build_never_ends_fails_saying_so_and_leaves_nothing(
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    dev_containers: Callable[..., DevContainers],
    docker_client: docker.DockerClient,
) -> None:
    # Given an environment whose Dockerfile's step never ends, and a build limit of 4 s
    seconds = 3000 + secrets.randbelow(1000)
    folder = tmp_path / "work" / ".devcontainer" / "slow"
    folder.mkdir(parents=True)
    (folder / "Dockerfile").write_text(f"FROM {BASE}\nRUN sleep {seconds}\n")
    (folder / "devcontainer.json").write_text(
        json.dumps({"build": {"dockerfile": "Dockerfile"}, "hostRequirements": {"gpu": True}})
    )
    config = two_a100(monkeypatch)
    config.DevContainers.build_timeout = 4.0
    manager = dev_containers(tmp_path / "work", config)
    # When a dev container of it is started
    began = time.monotonic()
    with pytest.raises(ImageError, match=r"c\.DevContainers\.build_timeout"):
        manager.start(StartRequest(environment="slow", name="never-built", gpus=1))
    # Then the start fails at the limit, and leaves no container, no lease, no running step
    assert time.monotonic() - began < 30
    assert manager.list(all_states=True) == []
    assert manager.ledger.active() == []
    deadline = time.monotonic() + 20
    while running_sleeps(docker_client, f"sleep {seconds}"):
        assert time.monotonic() < deadline, "the step still runs after the start failed"
        time.sleep(0.5)


def test_a_build_over_ssh_past_its_time_limit_is_stopped(
    tmp_path: Path,
    ssh_server: Any,
    remote_smi: Path,
    docker_client: docker.DockerClient,
) -> None:
    # Given an ssh:// host (the local engine through the real sshd: its API over a channel
    # of the host's one SSH connection) and a Dockerfile whose step never ends
    from tests.integration.test_remote_hosts import make_manager  # noqa: PLC0415

    manager = make_manager(tmp_path, ssh_server, remote_smi, local=False)
    try:
        client = manager.host_pool.get("far").client()
        seconds = 3000 + secrets.randbelow(1000)
        began = time.monotonic()
        # When it is built over SSH with a limit of 4 s
        with pytest.raises(ImageError, match="took longer than 4 s"):
            stream_build(
                client,
                "the test's image",
                lambda _event: None,
                timeout=4.0,
                fileobj=io.BytesIO(f"FROM {BASE}\nRUN sleep {seconds}\n".encode()),
            )
        # Then it is stopped at the limit, and the engine cancelled the build
        assert time.monotonic() - began < 20
        deadline = time.monotonic() + 20
        while running_sleeps(docker_client, f"sleep {seconds}"):
            assert time.monotonic() < deadline, "the step still runs after the build was stopped"
            time.sleep(0.5)
    finally:
        manager.host_pool.close()
