"""The Jupyter server SIGKILLed in the middle of a dev container start, a kernel start, a
``commit --write`` and a snapshot push; then a server started again on the same state folder.

Each kill lands at a state the test sees, not after a fixed sleep: a lifecycle command that
waits on a file the test never writes (the container exists, its start has not finished), the
commit's staging folder made, the registry holding a blob upload. After the restart the orphan
sweep has left nothing half-made (``tests/leaks.py``: no container without a lease, no lease
without a container, no claim without a holder, no kernel process, no temporary file), and the
user's work (a container with uncommitted changes) is still there.
"""

from __future__ import annotations

import json
import secrets
import signal
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Any, Generic, TypeVar

import docker
import pytest
import requests
from docker.models.containers import Container

from jupyter_gpudev.containers import docker_name
from jupyter_gpudev.labels import (
    L_CLAIM,
    L_CLAIM_HOLDER,
    L_KERNEL,
    L_NAME,
    L_SERVER,
    L_SNAPSHOT_CONTAINER,
    L_WORKSPACE,
)
from jupyter_gpudev.leasing import LeaseLedger
from tests.leaks import Baseline, assert_nothing_leaked
from tests.registry import Registry
from tests.servers import Server

pytestmark = pytest.mark.integration

T = TypeVar("T")

#: The user's work: a dev container with uncommitted changes (names are the engine's: unique).
WORK = "fault-work"

#: A lifecycle command that waits for a file nobody writes: the start stays in its middle.
WAIT = "until test -e /tmp/gpudev-go; do sleep 0.1; done"


class InFlightCall(Generic[T]):
    """``call(*args, **kwargs)`` made in a thread: what it answered, or how it failed."""

    def __init__(self, call: Callable[..., T], *args: Any, **kwargs: Any) -> None:
        self.result: list[T] = []
        self.error: BaseException | None = None
        self.thread = threading.Thread(target=self._run, args=(call, args, kwargs))
        self.thread.start()

    def _run(self, call: Callable[..., T], args: Any, kwargs: Any) -> None:
        try:
            self.result.append(call(*args, **kwargs))
        except BaseException as exc:  # the test's to read
            self.error = exc

    def done(self) -> bool:
        """Whether it answered or failed."""
        return not self.thread.is_alive()

    def _join(self, timeout: float) -> None:
        self.thread.join(timeout)
        assert not self.thread.is_alive(), f"no answer after {timeout:g} s"

    def answer(self, timeout: float = 120) -> T:
        """What it answered (its error raised)."""
        self._join(timeout)
        if self.error is not None:
            raise self.error
        return self.result[0]

    def failed(self, timeout: float = 120) -> BaseException:
        """How it failed (an answer is an assertion error)."""
        self._join(timeout)
        assert not self.result, f"it answered: {self.result[0]}"
        assert self.error is not None
        return self.error


def request(server: Server, method: str, path: str, body: Any = None) -> InFlightCall[Any]:
    """A request to ``server``, in flight."""
    return InFlightCall(server.call, method, path, body, timeout=300)


def cut_off(call: InFlightCall[Any]) -> None:
    """Assert that a request never answered: its server died in its middle."""
    assert isinstance(call.failed(30), OSError), repr(call.error)


def poll(
    check: Callable[[], Any],
    what: str,
    timeout: float = 60,
    every: float = 0.02,
    *,
    during: Sequence[InFlightCall[Any]] = (),
) -> Any:
    """``check()``'s first true value, asked every ``every`` seconds until ``timeout``; an
    assertion error, with its outcome, if a call of ``during`` ends first."""
    deadline = time.monotonic() + timeout
    while True:
        found = check()
        if found:
            return found
        for call in during:
            if call.done():
                raise AssertionError(
                    f"it ended before {what}: {call.result or call.error!r}"
                ) from call.error
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(every)


def environment(root: Path, name: str, **settings: Any) -> None:
    folder = root / ".devcontainer" / name
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "devcontainer.json").write_text(
        json.dumps({"image": "gpudev-python:bookworm", **settings})
    )


def sh(container: Container, script: str) -> str:
    code, output = container.exec_run(["/bin/sh", "-c", script], user="0")
    assert isinstance(output, bytes)
    text = output.decode(errors="replace")
    assert code == 0, text
    return text


def workspace_containers(client: docker.DockerClient, root: Path) -> list[Container]:
    return client.containers.list(
        all=True, filters={"label": f"{L_WORKSPACE}={root.resolve()}"}, ignore_removed=True
    )


def waiting(client: docker.DockerClient, root: Path) -> list[Container]:
    """The workspace's containers whose lifecycle command is still waiting."""
    found = []
    for container in workspace_containers(client, root):
        if container.status != "running":
            continue
        try:
            processes = container.top().get("Processes") or []
        except docker.errors.APIError:
            continue
        if any("gpudev-go" in " ".join(map(str, p)) for p in processes):
            found.append(container)
    return found


def nothing_leaked(
    client: docker.DockerClient,
    baseline: Baseline,
    folders: tuple[Path, Path],
    servers: set[str],
    *,
    kept: tuple[str, ...] = (),
) -> None:
    """``assert_nothing_leaked`` for each server that made a container in the workspace
    (``folders``: it and the state folder)."""
    root, state = folders
    servers |= {(c.labels or {}).get(L_SERVER, "") for c in workspace_containers(client, root)}
    for server_id in sorted(servers - {""}) or ["none"]:
        assert_nothing_leaked(client, baseline, state=state, server_id=server_id, kept=kept)


@pytest.fixture
def folders(tmp_path: Path, docker_client: docker.DockerClient) -> Iterator[tuple[Path, Path]]:
    """The workspace (environments ``plain``, ``base`` (a small image, for pushes), ``slow``
    and ``slowk``: GPU ones whose postCreateCommand never ends) and the state folder; the
    workspace's containers removed after the test."""
    root = tmp_path / "work"
    environment(root, "plain")
    environment(root, "base", image="gpudev-base:bookworm")
    environment(root, "slow", hostRequirements={"gpu": True}, postCreateCommand=WAIT)
    environment(root, "slowk", hostRequirements={"gpu": True}, postCreateCommand=WAIT)
    yield root, tmp_path / "state"
    for container in workspace_containers(docker_client, root):
        container.remove(force=True)


@pytest.fixture
def servers(tmp_path: Path) -> Iterator[list[Server]]:
    """The servers a test starts (those still running are stopped after it)."""
    started: list[Server] = []
    yield started
    for server in started:
        server.stop()


def start_work(server: Server, client: docker.DockerClient, env: str = "plain") -> Container:
    """The user's work: a dev container of ``env`` with an uncommitted change."""
    server.call("POST", "/gpudev/api/containers", {"environment": env, "name": WORK})
    container = client.containers.get(docker_name(WORK))
    sh(container, "echo precious > /etc/gpudev-work")
    return container


def work_is_there(server: Server, client: docker.DockerClient) -> None:
    info = server.call("GET", f"/gpudev/api/containers/{WORK}")
    assert info["uncommitted"] >= 1, info
    assert sh(client.containers.get(docker_name(WORK)), "cat /etc/gpudev-work") == "precious\n"


@pytest.mark.usefixtures("gpu_engine")
def test_killed_mid_start_and_mid_kernel_start(
    folders: tuple[Path, Path],
    servers: list[Server],
    docker_client: docker.DockerClient,
    tmp_path: Path,
) -> None:
    root, state = folders
    baseline = Baseline.take(docker_client, state)
    servers.append(first := Server(root, state, tmp_path / "config"))
    start_work(first, docker_client)
    # When a GPU dev container and a GPU kernel are started, and the server is SIGKILLed while
    # both containers exist but their lifecycle command still runs
    start = request(
        first, "POST", "/gpudev/api/containers", {"environment": "slow", "name": "fault-half"}
    )
    kernel = request(first, "POST", "/api/kernels", {"name": "gpudev-slowk"})
    poll(
        lambda: len(waiting(docker_client, root)) == 2,
        "both lifecycle commands running",
        during=(start, kernel),
    )
    made_by = {c.labels[L_SERVER] for c in workspace_containers(docker_client, root)}
    first.kill()
    cut_off(start)
    cut_off(kernel)
    ledger = LeaseLedger(state / "leases.sqlite")
    assert len(ledger.active("local")) == 2  # no cleanup ran
    # When a server is started again on the same state folder
    servers.append(second := Server(root, state, tmp_path / "config"))
    # Then the kernel's container, which no server can reach again, is swept away
    poll(
        lambda: (
            not [
                c
                for c in workspace_containers(docker_client, root)
                if (c.labels or {}).get(L_KERNEL)
            ]
        ),
        "the orphan kernel container removed",
        timeout=30,
        every=0.2,
    )
    # And the dev container is whole: running, its lease and its claim held by it
    made = docker_client.containers.get(docker_name("fault-half"))
    assert made.status == "running"
    leases = ledger.active("local")
    assert [lease.container for lease in leases] == ["fault-half"]
    claims = docker_client.containers.list(all=True, filters={"label": L_CLAIM})
    held = [c for c in claims if (c.labels or {}).get(L_CLAIM_HOLDER) == made.id]
    assert len(held) == len(leases[0].gpu_uuids) == 1
    assert made.labels[L_NAME] == "fault-half"
    # And the user's work is still there, its change uncommitted
    work_is_there(second, docker_client)
    # And once the user removes the half-started one and stops theirs, nothing is left
    second.call("DELETE", "/gpudev/api/containers/fault-half?force=1")
    second.call("POST", f"/gpudev/api/containers/{WORK}/stop")
    nothing_leaked(docker_client, baseline, folders, made_by, kept=(docker_name(WORK),))
    assert ledger.active("local") == []


@pytest.mark.usefixtures("gpu_engine")
def test_killed_between_creating_a_container_and_starting_it(
    folders: tuple[Path, Path],
    servers: list[Server],
    docker_client: docker.DockerClient,
    tmp_path: Path,
) -> None:
    root, state = folders
    baseline = Baseline.take(docker_client, state)
    servers.append(first := Server(root, state, tmp_path / "config"))
    # When a GPU dev container is started, and the server is frozen the moment the engine says
    # it created the container (before its GPU claim and its start), then SIGKILLed
    events = docker_client.events(
        until=int(time.time()) + 60,
        decode=True,
        filters={
            "type": "container",
            "event": "create",
            "label": f"{L_WORKSPACE}={root.resolve()}",
        },
    )
    try:
        start = request(
            first, "POST", "/gpudev/api/containers", {"environment": "slow", "name": "fault-never"}
        )
        created = next(iter(events), None)
        first.process.send_signal(signal.SIGSTOP)
        assert created is not None, f"no container was created: {start.error!r}"
    finally:
        events.close()
    never = docker_client.containers.get(docker_name("fault-never"))
    assert never.status == "created"
    made_by = {never.labels[L_SERVER]}
    first.kill()
    cut_off(start)
    ledger = LeaseLedger(state / "leases.sqlite")
    assert [lease.container for lease in ledger.active("local")] == ["fault-never"]
    # When a server is started again on the same state folder
    servers.append(Server(root, state, tmp_path / "config"))
    # Then the container that never started is gone, and its lease with it
    poll(
        lambda: (
            not ledger.active("local")
            and not docker_client.containers.list(
                all=True, filters={"name": docker_name("fault-never")}
            )
        ),
        "the container that never started removed, its lease released",
        timeout=30,
        every=0.2,
    )
    nothing_leaked(docker_client, baseline, folders, made_by)


def workspace_files(root: Path) -> dict[str, bytes]:
    """Every file under the workspace's .devcontainer, by relative path, with its content."""
    folder = root / ".devcontainer"
    return {
        str(path.relative_to(folder)): path.read_bytes()
        for path in sorted(folder.rglob("*"))
        if path.is_file()
    }


def test_killed_mid_commit_write(
    folders: tuple[Path, Path],
    servers: list[Server],
    docker_client: docker.DockerClient,
    tmp_path: Path,
) -> None:
    root, state = folders
    temp = tmp_path / "tmp"
    temp.mkdir()
    baseline = Baseline.take(docker_client, state)
    env = {"TMPDIR": str(temp)}
    servers.append(first := Server(root, state, tmp_path / "config", env=env))
    work = start_work(first, docker_client)
    # (enough files that copying them out of the container takes a while)
    sh(
        work,
        "mkdir -p /opt/data && cd /opt/data && for i in $(seq 1 400); do "
        "head -c 20000 /dev/urandom > f$i; done",
    )
    before = workspace_files(root)
    # When the container is committed with --write, and the server is SIGKILLed once the
    # commit has begun copying the changed files out
    commit = request(first, "POST", f"/gpudev/api/containers/{WORK}/commit", {"write": True})
    poll(
        lambda: list(temp.glob("gpudev-stage-*")),
        "the commit's staging folder",
        every=0.005,
        during=(commit,),
    )
    made_by = {work.labels[L_SERVER]}
    first.kill()
    cut_off(commit)
    # Then the workspace's files are the old ones, whole (nothing was written yet)
    assert workspace_files(root) == before
    # When a server is started again on the same state folder
    servers.append(second := Server(root, state, tmp_path / "config", env=env))
    # Then nothing of the commit is left behind: no temporary file, no staging folder
    poll(lambda: not list(temp.iterdir()), "the staging folder removed", timeout=30, every=0.2)
    # And the user's work is still there, uncommitted
    work_is_there(second, docker_client)
    # And the commit, made again, writes the new files whole
    result = second.call("POST", f"/gpudev/api/containers/{WORK}/commit", {"write": True})
    after = workspace_files(root)
    dockerfile = after["plain/Dockerfile"].decode()
    assert result["written"]
    assert "/etc/gpudev-work" in dockerfile
    config = json.loads(after["plain/devcontainer.json"])
    assert config["build"] == {"dockerfile": "Dockerfile"}
    assert after["plain/devcontainer.json.prev"] == before["plain/devcontainer.json"]
    copied = [name for name in after if name.startswith(f"plain/gpudev-context/{WORK}/")]
    assert len([name for name in copied if "/opt/data/" in name]) == 400
    assert not [name for name in after if "gpudev-tmp" in name or "gpudev-stage" in name]
    assert not list(temp.iterdir())
    second.call("POST", f"/gpudev/api/containers/{WORK}/stop")
    nothing_leaked(docker_client, baseline, folders, made_by, kept=(docker_name(WORK),))


def uploading(registry: Registry, repository: str) -> bool:
    """Whether the registry holds a blob upload in progress for ``repository``."""
    assert registry.folder is not None
    uploads = registry.folder / "data/docker/registry/v2/repositories" / repository / "_uploads"
    return uploads.is_dir() and any(uploads.iterdir())


def test_killed_mid_snapshot_push(
    folders: tuple[Path, Path],
    servers: list[Server],
    docker_client: docker.DockerClient,
    registry: Registry,
    tmp_path: Path,
) -> None:
    root, state = folders
    baseline = Baseline.take(docker_client, state)
    env = {"DOCKER_CONFIG": str(registry.docker_config(tmp_path / "docker"))}
    servers.append(first := Server(root, state, tmp_path / "config", env=env))
    work = start_work(first, docker_client, "base")
    repository = f"team/killed-{secrets.token_hex(4)}"
    tag = f"{registry.address}/{repository}:v1"
    # When a snapshot of the container is pushed, and the server is SIGKILLed once the
    # registry holds a blob upload of it
    options = {"snapshot": tag, "push": True}
    push = request(first, "POST", f"/gpudev/api/containers/{WORK}/commit", options)
    poll(lambda: uploading(registry, repository), "a blob upload", every=0.005, during=(push,))
    made_by = {work.labels[L_SERVER]}
    first.kill()
    cut_off(push)
    # Then the snapshot made before the push is whole, under its name: made, not pushed
    snapshot = docker_client.images.get(tag)
    assert snapshot.labels[L_SNAPSHOT_CONTAINER] == WORK
    # When a server is started again on the same state folder
    servers.append(second := Server(root, state, tmp_path / "config", env=env))
    # Then the user's work is still there, uncommitted
    work_is_there(second, docker_client)
    # And the push, made again, works
    result = second.call("POST", f"/gpudev/api/containers/{WORK}/commit", options)
    assert result["snapshot"]["pushed"]
    digest = result["snapshot"]["digest"]
    assert digest.startswith("sha256:")
    answer = requests.head(
        f"http://{registry.address}/v2/{repository}/manifests/v1",
        auth=(registry.username, registry.password),
        headers={"Accept": "application/vnd.docker.distribution.manifest.v2+json"},
        timeout=10,
    )
    assert answer.status_code == 200
    assert answer.headers["Docker-Content-Digest"] == digest
    docker_client.images.remove(tag)
    second.call("POST", f"/gpudev/api/containers/{WORK}/stop")
    nothing_leaked(docker_client, baseline, folders, made_by, kept=(docker_name(WORK),))
