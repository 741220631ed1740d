"""Output gpudev reads from hosts and containers is bounded in size and time: a command or a
container that prints without end cannot take the server down."""

from __future__ import annotations

import json
import logging
import subprocess
import time
from collections.abc import Callable
from pathlib import Path

import docker
import pytest
from traitlets.config import Config

from jupyter_gpudev.containers import DevContainers, StartRequest
from jupyter_gpudev.engine import SSHConnection, SSHTarget
from jupyter_gpudev.errors import EngineUnreachable
from tests.sshd import SSHServer

pytestmark = pytest.mark.integration

LOG = logging.getLogger("test")


def connect(ssh_server: SSHServer) -> SSHConnection:
    target = SSHTarget.from_url(
        ssh_server.url,
        identity_file=str(ssh_server.identity_file),
        known_hosts=str(ssh_server.known_hosts),
    )
    return SSHConnection(target, timeout=5.0, log=LOG)


def test_a_host_command_that_prints_without_end_is_stopped_at_the_cap(
    ssh_server: SSHServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Given an SSH host whose command prints endlessly, and a 1 MiB output cap
    monkeypatch.setattr(SSHConnection, "MAX_OUTPUT", 1 << 20, raising=False)
    connection = connect(ssh_server)
    try:
        # When gpudev runs it
        started = time.monotonic()
        with pytest.raises(EngineUnreachable) as caught:
            connection.run(["yes", "a long line of output that never ends"], 30.0)
        # Then it is stopped once past the cap, with a message naming the command and host
        assert time.monotonic() - started < 20
        assert "'yes'" in str(caught.value)
        assert "more than 1 MiB of output" in str(caught.value)
        # And the connection still runs commands (stdout and stderr both read)
        result = connection.run(["sh", "-c", "echo out; echo err >&2; exit 3"], 10.0)
        assert (result.returncode, result.stdout, result.stderr) == (3, "out\n", "err\n")
    finally:
        connection.close()


def test_a_host_command_that_never_ends_times_out_as_a_whole(ssh_server: SSHServer) -> None:
    # Given a host command that prints a little every half second and never ends
    connection = connect(ssh_server)
    try:
        # When gpudev runs it with a 2 s limit
        started = time.monotonic()
        with pytest.raises(subprocess.TimeoutExpired):
            connection.run(["sh", "-c", "while :; do echo tick; sleep 0.5; done"], 2.0)
        # Then it ends at the limit (not one read timeout after each line)
        assert time.monotonic() - started < 6
    finally:
        connection.close()


@pytest.fixture
def capped_logs_manager(
    tmp_path: Path, dev_containers: Callable[..., DevContainers]
) -> DevContainers:
    """A manager whose logs requests read at most 1 MiB; no GPU inventory."""
    config = Config()
    config.DevContainers.max_log_bytes = 1 << 20
    config.GPUInventory.backend = "none"
    root = tmp_path / "work"
    root.mkdir()
    return dev_containers(root, config)


def test_a_container_log_is_read_up_to_the_cap_and_says_where_it_was_cut(
    capped_logs_manager: DevContainers, docker_client: docker.DockerClient
) -> None:
    # Given a dev container whose output is 8 MiB (more than the 1 MiB cap)
    capped_logs_manager.start(StartRequest(environment="default", name="bnd-logs"))
    container = docker_client.containers.get("gpudev-bnd-logs")
    code, output = container.exec_run(
        ["/bin/sh", "-c", "head -c 8388608 /dev/zero | tr '\\0' a > /proc/1/fd/1"], user="0"
    )
    assert code == 0, output
    # When its logs are read without a tail
    text = "".join(capped_logs_manager.logs("bnd-logs"))
    # Then at most the cap is read, and the answer says it was cut and how to see the end
    read, _, note = text.partition("\n[gpudev: the output is cut here")
    assert read == "a" * (1 << 20)
    assert note.endswith("ask for its last lines (tail) to see its end]\n")
    # And with a tail, the engine's last line (it splits long lines at 16 KiB) is answered
    last = "".join(capped_logs_manager.logs("bnd-logs", tail=1))
    assert 0 < len(last) < 1 << 20
    assert set(last) == {"a"}


def test_lifecycle_output_and_time_are_bounded(
    capped_logs_manager: DevContainers, docker_client: docker.DockerClient
) -> None:
    # Given an environment whose postCreateCommand prints 64 MiB in one line, then 30 lines,
    # and whose postStartCommand never ends; lifecycle commands are waited for 3 s
    capped_logs_manager.lifecycle_timeout = 3.0
    folder = capped_logs_manager.root_dir / ".devcontainer" / "noisy"
    folder.mkdir(parents=True)
    (folder / "devcontainer.json").write_text(
        json.dumps(
            {
                "image": "gpudev-python:bookworm",
                "postCreateCommand": "head -c 67108864 /dev/zero | tr '\\0' x; echo; seq 1 30",
                "postStartCommand": "sleep 600",
            }
        )
    )
    # When a dev container of it starts
    events: list[dict[str, object]] = []
    started = time.monotonic()
    info = capped_logs_manager.start(
        StartRequest(environment="noisy", name="bnd-noisy"), events.append
    )
    # Then the start ends at the time limit, saying the command goes on unwatched
    assert time.monotonic() - started < 60
    assert any(
        "postStartCommand was still running after 3 s" in warning for warning in info.warnings
    )
    # And of the output only the last 20 lines are reported, each cut at 2000 characters
    created = [e["message"] for e in events if e.get("stage") == "postCreateCommand"]
    assert created[1:] == [str(n) for n in range(11, 31)]
    assert all(len(str(m)) <= 2000 for m in created)
