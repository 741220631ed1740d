"""An SSH host dropping in the middle of a dev container start (tests/sshd.py's real sshd in
front of the local engine: every connection killed while the start's image build streams over
it): a clear error, no lease or GPU claim left on that host, and the same start working when
tried again."""

from __future__ import annotations

import contextlib
import json
import secrets
from collections.abc import Iterator
from pathlib import Path

import docker
import pytest
from docker.models.containers import Container

from jupyter_gpudev.containers import DevContainers, StartRequest, docker_name
from jupyter_gpudev.errors import GPUDevError
from jupyter_gpudev.labels import L_HOST
from tests.integration.conftest import remove_containers
from tests.integration.test_fault_kill import InFlightCall, poll
from tests.integration.test_remote_hosts import make_manager
from tests.leaks import Baseline, assert_nothing_leaked
from tests.sshd import SSHServer

pytestmark = [pytest.mark.integration, pytest.mark.usefixtures("gpu_engine")]


def building(client: docker.DockerClient, token: str) -> list[str]:
    """The ids of the build containers running the test's waiting ``RUN`` step."""
    return [
        str(summary["Id"])
        for summary in client.api.containers(filters={"status": "running"})
        if token in str(summary.get("Command") or "")
    ]


def let_build_go(client: docker.DockerClient, token: str) -> None:
    """Let every waiting build step of the test finish."""
    for found in building(client, token):
        with contextlib.suppress(docker.errors.APIError):  # it ended meanwhile
            client.containers.get(found).exec_run(["touch", "/tmp/gpudev-go"])


def running_command(client: docker.DockerClient, name: str) -> Container | None:
    """The dev container ``name`` once its lifecycle command is waiting in it."""
    try:
        container = client.containers.get(docker_name(name))
        processes = container.top().get("Processes") or [] if container.status == "running" else []
    except docker.errors.APIError:
        return None
    waiting = any("gpudev-go" in " ".join(map(str, p)) for p in processes)
    return container if waiting else None


@pytest.fixture
def far_only(
    tmp_path: Path, ssh_server: SSHServer, remote_smi: Path, docker_client: docker.DockerClient
) -> Iterator[tuple[DevContainers, str]]:
    """A manager with only the ssh:// host ``far`` (two GPUs), and a GPU environment ``built``
    whose build waits in a ``RUN`` step (marked by a token of its own, so never cached) until
    the test lets it go."""
    manager = make_manager(tmp_path, ssh_server, remote_smi, local=False)
    token = f"gpudev-fault-{secrets.token_hex(6)}"
    folder = manager.root_dir / ".devcontainer" / "built"
    folder.mkdir(parents=True)
    (folder / "Dockerfile").write_text(
        "FROM gpudev-base:bookworm\n"
        f"RUN echo {token} && until test -e /tmp/gpudev-go; do sleep 0.1; done\n"
    )
    (folder / "devcontainer.json").write_text(
        json.dumps({"build": {"dockerfile": "Dockerfile"}, "hostRequirements": {"gpu": True}})
    )
    yield manager, token
    let_build_go(docker_client, token)
    remove_containers(docker_client, manager)


def test_a_start_whose_ssh_host_drops_fails_clearly_leaves_nothing_and_works_again(
    far_only: tuple[DevContainers, str],
    ssh_server: SSHServer,
    docker_client: docker.DockerClient,
) -> None:
    manager, token = far_only
    state = Path(manager.state_dir)
    baseline = Baseline.take(docker_client, state)
    request = StartRequest(environment="built", name="fault-dropped", host="far")
    # When a GPU dev container is started on far, and every SSH connection to far drops
    # while its image builds there
    start = InFlightCall(manager.start, request)
    first = poll(lambda: building(docker_client, token), "the build's RUN step", during=(start,))
    assert ssh_server.drop_connections() >= 1
    # Then the start fails, saying so
    failed = start.failed()
    assert isinstance(failed, GPUDevError), repr(failed)
    assert "Building the image of 'built' failed" in failed.message, failed.message
    assert "connection" in failed.message, failed.message
    # And nothing is left on far: no container, no lease, no GPU claim
    let_build_go(docker_client, token)
    assert not docker_client.containers.list(
        all=True, filters={"name": docker_name("fault-dropped")}
    )
    assert manager.ledger.active("far") == []
    assert_nothing_leaked(docker_client, baseline, state=state, server_id=manager.server_id)
    # When it is started again, it works: its build goes on through a new connection
    # (its own RUN step: the first build's may still be ending, and let go before this one runs)
    again = InFlightCall(manager.start, request)
    poll(
        lambda: set(building(docker_client, token)) - set(first),
        "the build's RUN step, again",
        during=(again,),
    )
    let_build_go(docker_client, token)
    info = again.answer()
    assert info.host == "far"
    assert len(info.gpu_uuids) == 1
    container = docker_client.containers.get(docker_name("fault-dropped"))
    assert container.status == "running"
    assert container.labels[L_HOST] == "far"
    assert [lease.container for lease in manager.ledger.active("far")] == ["fault-dropped"]
    manager.remove("fault-dropped", "far", True)
    assert manager.ledger.active("far") == []
    assert_nothing_leaked(docker_client, baseline, state=state, server_id=manager.server_id)


def test_a_start_whose_ssh_host_drops_during_its_lifecycle_command_goes_on(
    far_only: tuple[DevContainers, str],
    ssh_server: SSHServer,
    docker_client: docker.DockerClient,
) -> None:
    manager, _ = far_only
    state = Path(manager.state_dir)
    folder = manager.root_dir / ".devcontainer" / "waits"
    folder.mkdir(parents=True)
    (folder / "devcontainer.json").write_text(
        json.dumps(
            {
                "image": "gpudev-base:bookworm",
                "postCreateCommand": "until test -e /tmp/gpudev-go; do sleep 0.1; done",
            }
        )
    )
    baseline = Baseline.take(docker_client, state)
    # When a dev container is started on far, and every SSH connection to far drops while
    # its postCreateCommand runs (the command goes on in the container)
    start = InFlightCall(
        manager.start, StartRequest(environment="waits", name="fault-waits", host="far")
    )
    container = poll(
        lambda: running_command(docker_client, "fault-waits"), "its command", during=(start,)
    )
    assert ssh_server.drop_connections() >= 1
    # Then the start waits for the command through a new connection, and once it ends the
    # container is whole: running, its baseline recorded (no warning)
    container.exec_run(["touch", "/tmp/gpudev-go"])
    info = start.answer()
    assert info.warnings == ()
    assert info.state == "running"
    manager.remove("fault-waits", "far")  # nothing changed in it since: no force needed
    assert_nothing_leaked(docker_client, baseline, state=state, server_id=manager.server_id)
