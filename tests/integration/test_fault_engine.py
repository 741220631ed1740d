"""The Docker engine restarted under gpudev: nothing leaked, nothing lost.

Each test runs on an engine of its own (``tests/engines.py``), restarted as a service manager
restarts it (SIGTERM, then started again on the same data root; live-restore off, so the
containers that ran are stopped). What gpudev must do then:

- containers that were running are stopped: their leases are freed by the next reconcile (every
  placement runs one, so the next start finds the GPU free), the engine's claims follow, and a
  stopped container with uncommitted changes is kept, its changes still listed, and resumes;
- a start in flight fails with a clear error and leaves no container, lease or claim;
- a commit whose build was cut fails clearly, leaves no half-written file and no dangling image,
  and succeeds when run again.
"""

from __future__ import annotations

import contextlib
import gc
import json
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import docker
import docker.errors
import pytest
from traitlets.config import Config

from jupyter_gpudev.changes.capture import ChangeCapture
from jupyter_gpudev.changes.commit import CommitOptions, Committer
from jupyter_gpudev.changes.tracker import track_changes
from jupyter_gpudev.containers import DevContainers, StartRequest, docker_name
from jupyter_gpudev.engine import HostPool
from jupyter_gpudev.errors import Conflict, GPUDevError
from jupyter_gpudev.labels import L_SERVER
from tests.conftest import FAKE_SMI, FIXTURES
from tests.engines import Engine, session_engine
from tests.integration.conftest import A100_0
from tests.leaks import Baseline, assert_nothing_leaked

pytestmark = [
    pytest.mark.integration,
    # docker-py's unix socket connection does not close its socket when connect() fails (an
    # engine restarting): each call made while it is down leaves one to the garbage collector.
    pytest.mark.filterwarnings("ignore:unclosed <socket.socket:ResourceWarning"),
    pytest.mark.filterwarnings(
        "ignore:Exception ignored in. <socket.socket:pytest.PytestUnraisableExceptionWarning"
    ),
]


@pytest.fixture
def engine(request: pytest.FixtureRequest) -> Engine:
    """The session's dedicated engine (``tests/engines.py``), with the test images."""
    return session_engine(request.config)


@pytest.fixture
def make(
    tmp_path: Path,
    engine: Engine,
    monkeypatch: pytest.MonkeyPatch,
    caplog: pytest.LogCaptureFixture,
) -> Iterator[Callable[[dict[str, Any]], DevContainers]]:
    """Makes a manager on the dedicated engine for a workspace whose environment ``env`` is
    the given devcontainer.json; GPUs: the fake nvidia-smi's two A100s."""
    monkeypatch.setenv("FAKE_NVIDIA_SMI_DIR", str(FIXTURES / "smi" / "two-a100"))
    made: list[DevContainers] = []

    def build(
        devcontainer: dict[str, Any], files: dict[str, str] | None = None, grace: float = 120.0
    ) -> DevContainers:
        root = tmp_path / "work"
        folder = root / ".devcontainer" / "env"
        folder.mkdir(parents=True, exist_ok=True)
        (folder / "devcontainer.json").write_text(json.dumps(devcontainer))
        for name, text in (files or {}).items():
            (folder / name).write_text(text)
        config = Config()
        config.HostPool.local_url = engine.url
        config.GPUInventory.backend = "nvidia-smi"
        config.GPUInventory.nvidia_smi_path = str(FAKE_SMI)
        config.GPUInventory.cache_seconds = 0.0
        config.DevContainers.state_dir = str(tmp_path / "state")
        config.DevContainers.stop_timeout = 2
        config.DevContainers.reconcile_grace = grace
        manager = DevContainers(root_dir=root, host_pool=HostPool(config=config), config=config)
        track_changes(manager)
        made.append(manager)
        return manager

    yield build
    if not engine.answers():  # a test that failed with the engine down
        engine.start()
    for manager in made:
        for container in engine.client().containers.list(
            all=True, filters={"label": f"{L_SERVER}={manager.server_id}"}
        ):
            container.remove(force=True)
        manager.host_pool.close()
    # The sockets docker-py left (see pytestmark) are collected here, not at the session's
    # end: the log records of the failures kept their tracebacks, which hold them.
    for when in ("setup", "call"):
        caplog.get_records(when).clear()
    gc.collect()


def sh(engine: Engine, name: str, script: str) -> str:
    result = engine.client().containers.get(docker_name(name)).exec_run(["sh", "-c", script])
    assert result.exit_code == 0, result.output
    assert isinstance(result.output, bytes)
    return result.output.decode()


def status(engine: Engine, name: str) -> str:
    return str(engine.client().containers.get(docker_name(name)).status)


def until(what: Callable[[], bool], seconds: float = 30.0) -> None:
    deadline = time.monotonic() + seconds
    while not what():
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.1)


def in_thread(call: Callable[[], Any]) -> tuple[threading.Thread, dict[str, Any]]:
    """Run ``call`` in a thread; the dict gets its ``result`` or ``error``."""
    out: dict[str, Any] = {}

    def run() -> None:
        try:
            out["result"] = call()
        except BaseException as exc:
            out["error"] = exc

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    return thread, out


def remove_new_images(engine: Engine, before: set[str]) -> None:
    """Remove the images made since ``before`` (children first: a parent in use waits)."""
    for _ in range(5):
        new = [i for i in engine.client().images.list(all=True) if i.id not in before]
        if not new:
            return
        for image in new:
            with contextlib.suppress(docker.errors.APIError):
                engine.client().images.remove(str(image.id), force=True)


IMAGE_ENV = {"image": "gpudev-python:bookworm"}
#: ``c.DevContainers.reconcile_grace`` of the first test (its default is 120 s).
GRACE = 1.0


def test_running_containers_stop_their_gpus_go_free_and_their_changes_stay(
    make: Callable[..., DevContainers], engine: Engine, tmp_path: Path
) -> None:
    manager = make(IMAGE_ENV, grace=GRACE)
    state = tmp_path / "state"
    baseline = Baseline.take(engine.client(), state)
    # Given a GPU dev container with an uncommitted change, and a CPU one without
    manager.start(StartRequest(environment="env", name="gbox", gpu_uuids=(A100_0,)))
    manager.start(StartRequest(environment="env", name="cbox"))
    sh(engine, "gbox", "echo kept > /etc/gpudev-fault")
    assert manager.ledger.for_container("local", "gbox") is not None
    # When the engine restarts
    engine.restart()
    # Then both are stopped, not removed
    assert status(engine, "gbox") == "exited"
    assert status(engine, "cbox") == "exited"
    # And once its lease is older than the reconcile grace (a lease younger than that may be a
    # resume in flight), the next start finds the GPU free: its placement reconciles, the
    # stopped one's lease is gone, and the engine's claims agree
    gbox = manager.ledger.for_container("local", "gbox")
    assert gbox is not None
    until(lambda: time.time() - gbox.created_at > GRACE)
    manager.start(StartRequest(environment="env", name="next", gpu_uuids=(A100_0,)))
    assert manager.ledger.for_container("local", "gbox") is None
    lease = manager.ledger.for_container("local", "next")
    assert lease is not None
    assert lease.gpu_uuids == (A100_0,)
    # And the stopped one's change is still there and listed: it is not removed without force
    with pytest.raises(Conflict, match="/etc/gpudev-fault"):
        manager.remove("gbox")
    # And it resumes with its change once its GPU is free again
    manager.stop("next")
    assert manager.resume("gbox").state == "running"
    assert sh(engine, "gbox", "cat /etc/gpudev-fault") == "kept\n"
    manager.stop("gbox")
    manager.remove("next")
    manager.remove("cbox")
    assert manager.ledger.active("local") == []
    assert_nothing_leaked(
        engine.client(),
        baseline,
        state=state,
        server_id=manager.server_id,
        kept={docker_name("gbox")},
    )


def test_a_start_cut_in_its_lifecycle_command_fails_and_leaves_nothing(
    make: Callable[..., DevContainers], engine: Engine, tmp_path: Path
) -> None:
    manager = make({**IMAGE_ENV, "postCreateCommand": "sleep 120"})
    state = tmp_path / "state"
    baseline = Baseline.take(engine.client(), state)
    events: list[dict[str, Any]] = []
    # Given a GPU start whose postCreateCommand runs
    thread, out = in_thread(
        lambda: manager.start(
            StartRequest(environment="env", name="cut", gpu_uuids=(A100_0,)),
            progress=events.append,
        )
    )

    def sleeping() -> bool:
        try:
            top = engine.client().containers.get(docker_name("cut")).top()
        except docker.errors.APIError:
            return False
        return any("sleep 120" in " ".join(p) for p in top.get("Processes") or [])

    until(sleeping)
    # When the engine restarts meanwhile
    engine.restart()
    thread.join(60)
    assert not thread.is_alive()
    # Then the start fails, saying the container did not survive its lifecycle commands
    error = out.get("error")
    assert isinstance(error, GPUDevError), out
    assert "postCreateCommand" in error.message
    # And nothing of it is left: no container, no lease, no claim
    with pytest.raises(docker.errors.NotFound):
        engine.client().containers.get(docker_name("cut"))
    assert manager.ledger.active("local") == []
    assert_nothing_leaked(engine.client(), baseline, state=state, server_id=manager.server_id)
    # And the same start succeeds once the engine is back
    again = make({**IMAGE_ENV, "postCreateCommand": "true"})
    assert again.start(StartRequest(environment="env", name="cut", gpus=1)).state == "running"
    again.remove("cut", force=True)
    assert_nothing_leaked(engine.client(), baseline, state=state, server_id=manager.server_id)


class CutAt:
    """A progress callback that stops the engine at the first event of ``stage`` whose message
    starts with ``prefix`` (by default the second step of a build: it is cut while its stream
    is open), after one that starts with ``after`` where given, ``wait`` seconds later; with
    ``restart``, a thread starts it again right away (a service manager's restart), else the
    test does."""

    def __init__(
        self,
        engine: Engine,
        stage: str = "build",
        prefix: str = "Step 2/",
        *,
        restart: bool = False,
        after: str | None = None,
        wait: float = 0.0,
    ) -> None:
        self.engine = engine
        self.stage = stage
        self.prefix = prefix
        self.restart = restart
        self.after = after
        self.wait = wait
        self.cut = False
        self._thread: threading.Thread | None = None

    def __call__(self, event: dict[str, Any]) -> None:
        if self.cut or event.get("stage") != self.stage:
            return
        message = str(event.get("message", ""))
        if self.after is not None:
            if message.startswith(self.after):
                self.after = None
            return
        if message.startswith(self.prefix):
            time.sleep(self.wait)
            self.cut = True
            self.engine.stop()
            if self.restart:
                self._thread = threading.Thread(target=self.engine.start, daemon=True)
                self._thread.start()

    def back(self) -> None:
        """The engine answers again (the build was cut)."""
        assert self.cut, f"not cut: no {self.stage} event began with {self.prefix!r}"
        if self._thread is not None:
            self._thread.join(90)
        if not self.engine.answers():
            self.engine.start()


def test_a_start_cut_in_its_image_build_fails_and_leaves_nothing(
    make: Callable[..., DevContainers], engine: Engine, tmp_path: Path
) -> None:
    manager = make(
        {"build": {"dockerfile": "Dockerfile"}},
        {"Dockerfile": "FROM gpudev-python:bookworm\nRUN echo one > /one\nRUN echo two > /two\n"},
    )
    state = tmp_path / "state"
    baseline = Baseline.take(engine.client(), state)
    images = {str(i.id) for i in engine.client().images.list(all=True)}
    # When the engine goes down during the environment's image build
    cut = CutAt(engine)
    with pytest.raises(GPUDevError) as caught:
        manager.start(StartRequest(environment="env", name="built", gpus=1), progress=cut)
    assert "env" in caught.value.message
    cut.back()
    # Then nothing is left: no container, lease, claim or dangling image
    assert engine.client().containers.list(all=True, filters={"name": docker_name("built")}) == []
    assert manager.ledger.active("local") == []
    assert_nothing_leaked(engine.client(), baseline, state=state, server_id=manager.server_id)
    # And the start succeeds now
    assert manager.start(StartRequest(environment="env", name="built")).state == "running"
    manager.remove("built", force=True)
    assert_nothing_leaked(engine.client(), baseline, state=state, server_id=manager.server_id)
    remove_new_images(engine, images)


def test_a_build_cut_after_a_finished_step_leaves_no_image_of_it(
    make: Callable[..., DevContainers], engine: Engine, tmp_path: Path
) -> None:
    # A build cut once a step of its own is done keeps that step's image: nameless, a leaf
    # (dangling), with the base image's gpudev labels; found in CI, where a commit's verify
    # build (its first step cached) ran on past the cut's moment.
    manager = make(
        {"build": {"dockerfile": "Dockerfile"}},
        {
            "Dockerfile": "FROM gpudev-python:bookworm\nRUN echo cut-one > /one\n"
            "RUN echo cut-two > /two\n"
        },
    )
    state = tmp_path / "state"
    baseline = Baseline.take(engine.client(), state)
    images = {str(i.id) for i in engine.client().images.list(all=True)}
    # When the engine restarts as the build's third step begins (its second is done)
    cut = CutAt(engine, prefix="Step 3/", restart=True)
    with pytest.raises(GPUDevError) as caught:
        manager.start(StartRequest(environment="env", name="built3"), progress=cut)
    assert "env" in caught.value.message
    cut.back()
    # Then no image of the build is left, dangling or not
    assert_nothing_leaked(engine.client(), baseline, state=state, server_id=manager.server_id)
    assert {str(i.id) for i in engine.client().images.list(all=True)} == images


def test_a_build_cut_while_a_step_runs_leaves_no_image_of_it(
    make: Callable[..., DevContainers], engine: Engine, tmp_path: Path
) -> None:
    # The engine stopping kills the running step's process: the build's last word is that
    # step's command "returned a non-zero code: 137", which is not the command's own failure
    # (found in CI: the step after the cut ran for a moment before the engine went down).
    manager = make(
        {"build": {"dockerfile": "Dockerfile"}},
        {"Dockerfile": "FROM gpudev-python:bookworm\nRUN echo run-one > /one\nRUN sleep 60\n"},
    )
    state = tmp_path / "state"
    baseline = Baseline.take(engine.client(), state)
    images = {str(i.id) for i in engine.client().images.list(all=True)}
    # When the engine restarts while the third step's command runs
    cut = CutAt(engine, prefix=" ---> Running in", after="Step 3/", restart=True, wait=1.0)
    with pytest.raises(GPUDevError) as caught:
        manager.start(StartRequest(environment="env", name="built5"), progress=cut)
    # Then the error says the step was killed, not that it failed of itself
    assert "killed" in caught.value.message, caught.value.message
    cut.back()
    # And no image of the build is left, dangling or not
    assert_nothing_leaked(engine.client(), baseline, state=state, server_id=manager.server_id)
    assert {str(i.id) for i in engine.client().images.list(all=True)} == images


def test_a_build_whose_own_command_fails_keeps_its_finished_steps_as_cache(
    make: Callable[..., DevContainers], engine: Engine
) -> None:
    # Given an environment whose build's third step fails (the user's command, not the engine)
    manager = make(
        {"build": {"dockerfile": "Dockerfile"}},
        {"Dockerfile": "FROM gpudev-python:bookworm\nRUN echo kept > /kept\nRUN exit 3\n"},
    )
    dangling = {str(i.id) for i in engine.client().images.list(filters={"dangling": True})}
    with pytest.raises(GPUDevError, match="non-zero code: 3"):
        manager.start(StartRequest(environment="env", name="failing"))
    # When it is built again, its second step comes from the cache (as `docker build` keeps it)
    events: list[dict[str, Any]] = []
    with pytest.raises(GPUDevError):
        manager.start(StartRequest(environment="env", name="failing"), progress=events.append)
    lines = [str(e.get("message")) for e in events if e.get("stage") == "build"]
    step = next(i for i, line in enumerate(lines) if line.endswith("RUN echo kept > /kept"))
    assert lines[step + 1] == " ---> Using cache", lines
    for image in engine.client().images.list(filters={"dangling": True}):
        if str(image.id) not in dangling:
            engine.client().images.remove(str(image.id))


def test_a_commit_cut_by_a_restart_leaves_nothing_and_runs_again(
    make: Callable[..., DevContainers], engine: Engine, tmp_path: Path
) -> None:
    dockerfile_text = "FROM gpudev-python:bookworm\nRUN echo base > /base\n"
    manager = make({"build": {"dockerfile": "Dockerfile"}}, {"Dockerfile": dockerfile_text})
    state = tmp_path / "state"
    dockerfile = manager.root_dir / ".devcontainer" / "env" / "Dockerfile"
    written = (manager.root_dir / ".devcontainer" / "env" / "devcontainer.json").read_text()
    # Given a dev container with uncommitted changes
    manager.start(StartRequest(environment="env", name="cbox"))
    sh(engine, "cbox", "echo one > /etc/fault-one; echo two > /etc/fault-two")
    baseline = Baseline.take(engine.client(), state)
    images = {str(i.id) for i in engine.client().images.list(all=True)}
    committer = Committer(ChangeCapture(manager), manager.registries)
    # When the engine restarts while the verify build of `commit --verify --write` runs
    cut = CutAt(engine, restart=True)
    with pytest.raises(GPUDevError):
        committer.commit("cbox", CommitOptions(verify=True, write=True), None, cut)
    cut.back()
    # Then the workspace's files are as they were, nothing half-written beside them
    assert dockerfile.read_text() == dockerfile_text
    folder = dockerfile.parent
    assert (folder / "devcontainer.json").read_text() == written
    assert sorted(p.name for p in folder.iterdir()) == ["Dockerfile", "devcontainer.json"]
    # And no image of it is left (dangling or not), no temporary file in the state folder
    assert_nothing_leaked(
        engine.client(),
        baseline,
        state=state,
        server_id=manager.server_id,
        kept={docker_name("cbox")},
    )
    assert {i.id for i in engine.client().images.list(all=True)} == images
    # When the container (stopped by the restart) runs again and the commit is run again
    manager.resume("cbox")
    result = committer.commit("cbox", CommitOptions(verify=True, write=True))
    # Then it succeeds and writes the changes
    assert result.verify is not None
    assert result.verify.differences == []
    assert "fault-one" in dockerfile.read_text() or "sources" in dockerfile.read_text()
    # When a snapshot is cut the same way, then run again
    tag = "gpudev-test/fault-snap:v1"
    cut = CutAt(engine, "snapshot", "committing", restart=True)
    with pytest.raises(GPUDevError):
        committer.commit("cbox", CommitOptions(snapshot=tag), None, cut)
    cut.back()
    with pytest.raises(docker.errors.ImageNotFound):
        engine.client().images.get(tag)
    assert_nothing_leaked(
        engine.client(),
        baseline,
        state=state,
        server_id=manager.server_id,
        kept={docker_name("cbox")},
    )
    manager.resume("cbox")
    snapshot = committer.commit("cbox", CommitOptions(snapshot=tag))
    assert snapshot.snapshot is not None
    out = engine.client().containers.run(tag, ["cat", "/etc/fault-one"], remove=True)
    assert out == b"one\n"
    engine.client().images.remove(tag)
    manager.remove("cbox", force=True)
    assert_nothing_leaked(engine.client(), baseline, state=state, server_id=manager.server_id)
    remove_new_images(engine, images)
