"""Dev containers on the real engine: lifecycle, GPU leases, refusals, reconcile.

GPUs come from the fake nvidia-smi (the inventory seam). Starting a container with a GPU
DeviceRequest needs an engine with the NVIDIA hook; scripts/test.sh starts one with a stand-in
hook (tests/fixtures/nvidia-hook) on machines without GPUs.
"""

from __future__ import annotations

import contextlib
import json
import os
import secrets
import stat
import threading
from pathlib import Path
from typing import Any

import docker
import pytest
from docker.models.containers import Container
from traitlets.config import Config

from jupyter_gpudev.changes.tracker import track_changes
from jupyter_gpudev.containers import (
    CudaMismatch,
    DevContainers,
    HostTooSmall,
    StartRequest,
    docker_name,
)
from jupyter_gpudev.engine import HostPool
from jupyter_gpudev.errors import BadRequest, Conflict, GPUDevError
from jupyter_gpudev.labels import L_BUILD_BASES, L_GPUS, L_LEASE, L_MANAGED, L_SERVER
from jupyter_gpudev.leasing import GPURequest, NoFreeGPU, leasable_units
from tests.conftest import FAKE_SMI, FIXTURES
from tests.integration.conftest import remove_containers

pytestmark = pytest.mark.integration

IMAGE = os.environ.get("GPUDEV_IMAGE", "gpudev-python:bookworm")
BASE = "gpudev-base:bookworm"
A100_0 = "GPU-5d5ba0d6-d33d-2b2c-524d-9e3d8d2b8a77"
A100_1 = "GPU-8f2a9c41-7b3e-4c55-9d0a-2e6f1b7c3d90"


def make_manager(root: Path, state: Path, *, gpus: bool = True, **extra: Any) -> DevContainers:
    config = Config()
    if gpus:
        config.GPUInventory.backend = "nvidia-smi"
        config.GPUInventory.nvidia_smi_path = str(FAKE_SMI)
    else:
        config.GPUInventory.backend = "none"
    config.GPUInventory.cache_seconds = 0.0
    config.DevContainers.state_dir = str(state)
    config.DevContainers.stop_timeout = 2
    for key, value in extra.items():
        section, trait = key.split("__")
        setattr(getattr(config, section), trait, value)
    pool = HostPool(config=config)
    manager = DevContainers(root_dir=root, host_pool=pool, config=config)
    track_changes(manager)
    return manager


@pytest.fixture
def root(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """The workspace: conftest's ``manager`` works in it too, configured as ``make_manager``
    configures one by default."""
    monkeypatch.setenv("FAKE_NVIDIA_SMI_DIR", str(FIXTURES / "smi" / "two-a100"))
    folder = tmp_path / "work"
    folder.mkdir(exist_ok=True)
    return folder


def write_devcontainer(
    root: Path, sub: str, spec: dict[str, Any], dockerfile: str | None = None
) -> None:
    folder = root / ".devcontainer" / sub
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "devcontainer.json").write_text(json.dumps(spec))
    if dockerfile is not None:
        (folder / "Dockerfile").write_text(dockerfile)


def test_cpu_container_lifecycle_from_the_default_environment(
    manager: DevContainers,
    docker_client: docker.DockerClient,
    root: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # Given a secret in the server's environment
    monkeypatch.setenv("GPUDEV_TEST_SECRET", "do-not-leak")
    events: list[dict[str, Any]] = []
    # When a CPU-only container of the default environment is started
    info = manager.start(StartRequest(environment="default", name="cpu-one"), events.append)
    # Then it runs, with progress reported, labelled, as the server user, with an init process
    assert info.state == "running"
    assert info.gpu_uuids == ()
    assert info.lease_id is None
    assert [e["stage"] for e in events][-1] == "ready"
    container = docker_client.containers.get(docker_name("cpu-one"))
    attrs = container.attrs
    assert container.labels[L_MANAGED] == "1"
    assert attrs["HostConfig"]["Init"] is True
    assert attrs["HostConfig"]["RestartPolicy"]["Name"] == "no"
    assert attrs["Config"]["User"] == f"{os.getuid()}:{os.getgid()}"
    assert not attrs["HostConfig"].get("DeviceRequests")
    env = dict(item.split("=", 1) for item in attrs["Config"]["Env"])
    # And no GPU is visible, explicitly, and nothing of the server's environment leaked in
    assert env["NVIDIA_VISIBLE_DEVICES"] == "void"
    assert env["CUDA_DEVICE_ORDER"] == "PCI_BUS_ID"
    assert "GPUDEV_TEST_SECRET" not in env
    code, out = container.exec_run(["sh", "-c", "env"])
    assert code == 0
    assert b"do-not-leak" not in out
    # And the workspace is mounted read-write at the workspace folder
    workspace = f"/workspaces/{root.name}"
    code, _ = container.exec_run(["sh", "-c", f"echo hi > {workspace}/from-container.txt"])
    assert code == 0
    written = root / "from-container.txt"
    assert written.read_text() == "hi\n"
    assert written.stat().st_uid == os.getuid()
    # When it is stopped
    stopped = manager.stop("cpu-one")
    # Then it is kept, not running
    assert stopped.state == "exited"
    assert docker_client.containers.get(docker_name("cpu-one")).status == "exited"
    assert "cpu-one" in [i.name for i in manager.list(all_states=True)]
    assert "cpu-one" not in [i.name for i in manager.list(all_states=False)]
    # When it is removed (no change inside it)
    manager.remove("cpu-one")
    # Then it is gone
    with pytest.raises(docker.errors.NotFound):
        docker_client.containers.get(docker_name("cpu-one"))


def test_devcontainer_with_a_dockerfile_is_built_with_progress_and_started(
    manager: DevContainers, docker_client: docker.DockerClient, root: Path
) -> None:
    # Given a devcontainer.json with a Dockerfile, env, a lifecycle command and a port
    mark = f"built-{secrets.token_hex(4)}"
    write_devcontainer(
        root,
        "tools",
        {
            "name": "Tools",
            # a fresh build argument each run, so the image is really built here
            "build": {"dockerfile": "Dockerfile", "args": {"MARK": mark}},
            "containerEnv": {"PROJECT": "demo"},
            "postCreateCommand": "echo created >> /tmp/post-create",
            "postStartCommand": ["sh", "-c", "echo started >> /tmp/post-start"],
            "forwardPorts": [8000],
        },
        dockerfile=f"FROM {BASE}\nARG MARK\nRUN echo $MARK > /built\n",
    )
    events: list[dict[str, Any]] = []
    # When it is started
    info = manager.start(StartRequest(environment="tools", name="tools-one"), events.append)
    # Then the image was built (progress streamed), and the container runs with its settings
    assert any(e["stage"] == "build" for e in events)
    container = docker_client.containers.get(docker_name("tools-one"))
    assert container.exec_run(["cat", "/built"]).output == f"{mark}\n".encode()
    assert container.exec_run(["cat", "/tmp/post-create"]).output == b"created\n"
    assert container.exec_run(["sh", "-c", "echo $PROJECT"]).output == b"demo\n"
    assert info.environment == "tools"
    # And the forwarded port is not published on the host (the proxy reaches it; anyone
    # logged in to this machine would reach a published one without Jupyter's login)
    assert not container.attrs["HostConfig"].get("PortBindings")
    assert info.ports == {}
    # And across a stop and a resume, postStartCommand runs again, postCreateCommand does not
    manager.stop("tools-one")
    manager.resume("tools-one")
    container = docker_client.containers.get(docker_name("tools-one"))
    assert container.exec_run(["cat", "/tmp/post-start"]).output == b"started\nstarted\n"
    assert container.exec_run(["cat", "/tmp/post-create"]).output == b"created\n"
    # A second start reuses the built image (no build)
    again: list[dict[str, Any]] = []
    manager.start(StartRequest(environment="tools", name="tools-two"), again.append)
    assert not any(e["stage"] == "build" for e in again)


def ran(container: Container) -> list[str]:
    """The steps the lifecycle commands wrote, in order."""
    output = container.exec_run(["cat", "/tmp/steps"]).output
    assert isinstance(output, bytes)
    return output.decode().split()


def test_the_five_lifecycle_commands_run_in_the_specifications_order(
    manager: DevContainers, docker_client: docker.DockerClient, root: Path
) -> None:
    # Given an environment with every lifecycle command, each appending its name to a file
    steps = (
        "onCreateCommand",
        "updateContentCommand",
        "postCreateCommand",
        "postStartCommand",
        "postAttachCommand",
    )
    write_devcontainer(
        root,
        "steps",
        {"image": BASE, **{step: f"echo {step} >> /tmp/steps" for step in steps}},
    )
    events: list[dict[str, Any]] = []
    # When it is started
    manager.start(StartRequest(environment="steps", name="steps-one"), events.append)
    # Then each ran once, in the specification's order, each reported as it ran
    assert ran(docker_client.containers.get(docker_name("steps-one"))) == list(steps)
    assert [e["stage"] for e in events if e["stage"] in steps] == list(steps)
    # And a stop and a resume run only the two that run at each start
    manager.stop("steps-one")
    manager.resume("steps-one")
    assert ran(docker_client.containers.get(docker_name("steps-one"))) == [
        *steps,
        "postStartCommand",
        "postAttachCommand",
    ]


def test_host_requirements_are_checked_against_the_engine_before_a_start(
    manager: DevContainers, docker_client: docker.DockerClient, root: Path
) -> None:
    # Given environments asking more CPUs than this machine has, and what it has
    cpus = int(docker_client.info()["NCPU"])
    write_devcontainer(root, "huge", {"image": BASE, "hostRequirements": {"cpus": cpus + 1}})
    write_devcontainer(
        root,
        "fits",
        {"image": BASE, "hostRequirements": {"cpus": cpus, "memory": "64mb", "storage": "64mb"}},
    )
    write_devcontainer(root, "disk", {"image": BASE, "hostRequirements": {"storage": "1000tb"}})
    # When the first is started: a 409 naming what is short, and nothing made
    with pytest.raises(HostTooSmall) as caught:
        manager.start(StartRequest(environment="huge", name="huge-one"))
    assert caught.value.status == 409
    assert f"has {cpus} CPUs, the environment needs {cpus + 1}" in caught.value.message
    assert not docker_client.containers.list(all=True, filters={"name": "gpudev-huge-one"})
    # And storage is read on the host (df where the engine keeps containers' files)
    with pytest.raises(HostTooSmall, match=r"MiB free for containers, the environment needs"):
        manager.start(StartRequest(environment="disk", name="disk-one"))
    # When the second is started: it fits, and every requirement was checked
    events: list[dict[str, Any]] = []
    manager.start(StartRequest(environment="fits", name="fits-one"), events.append)
    assert docker_client.containers.get(docker_name("fits-one")).status == "running"
    assert not [e for e in events if "was not checked" in e["message"]]


def test_an_environment_image_is_built_again_when_its_base_changed_under_its_tag(
    manager: DevContainers, docker_client: docker.DockerClient, root: Path
) -> None:
    # Given an environment built FROM a local tag (as after `image bootstrap`)
    base = f"gpudev-test-base:{secrets.token_hex(4)}"
    docker_client.images.get(BASE).tag(base)
    try:
        write_devcontainer(
            root,
            "onbase",
            {"build": {"dockerfile": "Dockerfile"}},
            dockerfile=f"FROM {base}\nRUN cat /etc/debian_version > /base-version\n",
        )
        manager.start(StartRequest(environment="onbase", name="onbase-one"))
        first = docker_client.containers.get(docker_name("onbase-one")).attrs["Image"]
        # When the tag is moved to another image (the base rebuilt: `image bootstrap --force`)
        docker_client.images.get(IMAGE).tag(base)
        events: list[dict[str, Any]] = []
        manager.start(StartRequest(environment="onbase", name="onbase-two"), events.append)
        # Then the environment's image is built again on the new base, and says why
        assert any("changed: building again" in str(e["message"]) for e in events), events
        second = docker_client.images.get(
            docker_client.containers.get(docker_name("onbase-two")).attrs["Image"]
        )
        assert second.id != first
        assert docker_client.images.get(IMAGE).id in second.labels[L_BUILD_BASES]
        # And with the base unchanged, the next start reuses it
        again: list[dict[str, Any]] = []
        manager.start(StartRequest(environment="onbase", name="onbase-three"), again.append)
        assert not any(e["stage"] == "build" for e in again)
    finally:
        with contextlib.suppress(docker.errors.APIError):
            docker_client.images.remove(base)


@pytest.mark.usefixtures("gpu_engine")
def test_gpu_container_gets_exactly_its_leased_uuids_and_frees_them_on_stop(
    manager: DevContainers, docker_client: docker.DockerClient
) -> None:
    # When a container asks for one GPU (most free memory first: GPU 1 has 4 MiB used)
    info = manager.start(StartRequest(environment="default", name="gpu-one", gpus=1))
    # Then the engine was asked for exactly that UUID, never a bare count
    container = docker_client.containers.get(docker_name("gpu-one"))
    (request,) = container.attrs["HostConfig"]["DeviceRequests"]
    assert request["Driver"] == "nvidia"
    assert request["DeviceIDs"] == [A100_1]
    assert request["Count"] == 0
    assert request["Capabilities"] == [["gpu"]]
    env = dict(item.split("=", 1) for item in container.attrs["Config"]["Env"])
    assert env["NVIDIA_VISIBLE_DEVICES"] == A100_1
    assert container.exec_run(["sh", "-c", "echo $NVIDIA_VISIBLE_DEVICES"]).output == (
        f"{A100_1}\n".encode()
    )
    assert info.gpu_uuids == (A100_1,)
    assert container.labels[L_GPUS] == A100_1
    lease = manager.ledger.for_container("local", "gpu-one")
    assert lease is not None
    assert lease.gpu_uuids == (A100_1,)
    assert container.labels[L_LEASE] == lease.lease_id
    # When it stops, the lease is free again
    manager.stop("gpu-one")
    assert manager.ledger.for_container("local", "gpu-one") is None
    assert manager.ledger.active("local") == []


@pytest.mark.usefixtures("gpu_engine")
def test_named_gpu_and_409_when_none_is_free(manager: DevContainers) -> None:
    # Given both GPUs are taken
    manager.start(StartRequest(environment="default", name="holder-a", gpu_uuids=(A100_0,)))
    manager.start(StartRequest(environment="default", name="holder-b", gpus=1))
    # When a third container asks for a GPU
    with pytest.raises(NoFreeGPU) as caught:
        manager.start(StartRequest(environment="default", name="late", gpus=1))
    # Then it is a 409 that says who holds which GPU, and nothing was left behind
    assert caught.value.status == 409
    assert "holder-a" in caught.value.message
    assert "holder-b" in caught.value.message
    with pytest.raises(GPUDevError):
        manager.get("late")
    assert len(manager.ledger.active("local")) == 2


@pytest.mark.usefixtures("gpu_engine")
def test_concurrent_starts_never_share_a_gpu(
    manager: DevContainers, docker_client: docker.DockerClient
) -> None:
    # Given four starts racing for two GPUs
    barrier = threading.Barrier(4)
    results: dict[str, Any] = {}

    def start(name: str) -> None:
        barrier.wait()
        try:
            results[name] = manager.start(StartRequest(environment="default", name=name, gpus=1))
        except GPUDevError as err:
            results[name] = err

    threads = [threading.Thread(target=start, args=(f"race-{i}",)) for i in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    # Then exactly two won, each with a different GPU, and the two others got a 409
    won = [r for r in results.values() if not isinstance(r, GPUDevError)]
    lost = [r for r in results.values() if isinstance(r, GPUDevError)]
    assert sorted(uuid for info in won for uuid in info.gpu_uuids) == sorted([A100_0, A100_1])
    assert all(isinstance(err, NoFreeGPU) for err in lost)
    assert len(lost) == 2
    # And the engine agrees: only the winners exist
    existing = docker_client.containers.list(
        all=True, filters={"label": f"{L_SERVER}={manager.server_id}"}
    )
    assert sorted(c.labels[L_GPUS] for c in existing) == sorted([A100_0, A100_1])


def test_gpu_request_on_a_host_without_gpus_is_refused(
    root: Path, tmp_path: Path, docker_client: docker.DockerClient
) -> None:
    manager = make_manager(root, tmp_path / "state", gpus=False)
    try:
        with pytest.raises(BadRequest, match="host 'local' has none"):
            manager.start(StartRequest(environment="default", name="no-gpu-here", gpus=1))
        assert (
            docker_client.containers.list(
                all=True, filters={"label": f"{L_SERVER}={manager.server_id}"}
            )
            == []
        )
    finally:
        manager.host_pool.close()


def test_cuda_newer_than_the_driver_is_refused_with_what_to_do(
    manager: DevContainers, root: Path, docker_client: docker.DockerClient
) -> None:
    # Given an image that needs CUDA 12.4, and a driver that supports 12.2 (the fake's)
    write_devcontainer(
        root,
        "cuda124",
        {"build": {"dockerfile": "Dockerfile"}, "hostRequirements": {"gpu": True}},
        dockerfile=f'FROM {BASE}\nENV NVIDIA_REQUIRE_CUDA="cuda>=12.4 brand=tesla,driver>=470"\n',
    )
    # When it is started with a GPU
    with pytest.raises(CudaMismatch) as caught:
        manager.start(StartRequest(environment="cuda124", name="needs-124"))
    # Then the message says what the image needs, what the driver gives, and what to do
    message = caught.value.message
    assert "needs CUDA >= 12.4" in message
    assert "supports CUDA up to 12.2" in message
    assert "Upgrade the host's driver" in message
    # And no container and no lease were left
    assert manager.ledger.active("local") == []
    with pytest.raises(docker.errors.NotFound):
        docker_client.containers.get(docker_name("needs-124"))


@pytest.mark.parametrize(
    ("spec", "message"),
    [
        ({"image": IMAGE, "runArgs": ["--privileged"]}, "--privileged"),
        ({"image": IMAGE, "runArgs": ["--cap-add=SYS_ADMIN"]}, "--cap-add"),
        ({"image": IMAGE, "runArgs": ["--network=host"]}, "allow_host_network"),
    ],
)
def test_dangerous_run_args_are_refused_by_name(
    manager: DevContainers, root: Path, spec: dict[str, Any], message: str
) -> None:
    write_devcontainer(root, "risky", spec)
    with pytest.raises(GPUDevError, match=message):
        manager.start(StartRequest(environment="risky", name="risky-one"))


def test_mount_escapes_are_refused(
    root: Path, tmp_path: Path, docker_client: docker.DockerClient
) -> None:
    # Given /data is an allowed root, with a symlink inside that points outside it
    data = tmp_path / "data"
    data.mkdir()
    secret = tmp_path / "data-secret"
    secret.mkdir()
    (data / "escape").symlink_to(secret)
    manager = make_manager(root, tmp_path / "state", MountPolicy__allowed_roots=[str(data)])
    try:
        for index, source in enumerate(
            [str(data / "escape"), str(secret), f"{data}/../data-secret", "relative/path"]
        ):
            write_devcontainer(
                root,
                f"m{index}",
                {"image": IMAGE, "mounts": [f"source={source},target=/mnt/x,type=bind"]},
            )
            # When each is started
            with pytest.raises(GPUDevError) as caught:
                manager.start(StartRequest(environment=f"m{index}", name=f"mount-{index}"))
            # Then it is refused with a 4xx naming the path, and nothing was created
            assert 400 <= caught.value.status < 500
        assert (
            docker_client.containers.list(
                all=True, filters={"label": f"{L_SERVER}={manager.server_id}"}
            )
            == []
        )
    finally:
        manager.host_pool.close()


def test_an_image_that_is_not_declared_is_refused(manager: DevContainers) -> None:
    with pytest.raises(GPUDevError) as caught:
        manager.start(StartRequest(environment="default", name="evil", image="evil/miner:latest"))
    assert caught.value.status == 403
    assert "evil/miner:latest" in caught.value.message


def test_removing_a_container_with_changes_needs_force(
    manager: DevContainers, docker_client: docker.DockerClient
) -> None:
    # Given a stopped container in which a file was changed
    manager.start(StartRequest(environment="default", name="changed"))
    container = docker_client.containers.get(docker_name("changed"))
    assert container.exec_run(["sh", "-c", "echo edited >> /etc/motd"], user="0").exit_code == 0
    manager.stop("changed")
    # When it is removed without --force
    with pytest.raises(Conflict) as caught:
        manager.remove("changed")
    # Then it is refused, naming the change, and the container is still there
    assert "/etc/motd" in caught.value.message
    assert docker_client.containers.get(docker_name("changed")).status == "exited"
    # And with force it goes
    manager.remove("changed", force=True)
    with pytest.raises(docker.errors.NotFound):
        docker_client.containers.get(docker_name("changed"))


@pytest.mark.usefixtures("gpu_engine")
def test_reconcile_after_a_crash(
    manager: DevContainers, docker_client: docker.DockerClient, root: Path, tmp_path: Path
) -> None:
    # Given a running GPU container...
    manager.start(StartRequest(environment="default", name="survivor", gpus=1))
    survivor_gpu = manager.ledger.for_container("local", "survivor")
    assert survivor_gpu is not None
    # ...and a crash that lost the ledger file, plus a stale lease for a container that is gone
    for lost in (tmp_path / "state").glob("leases.sqlite*"):
        lost.unlink()
    fresh = make_manager(root, tmp_path / "state", DevContainers__reconcile_grace=0.0)
    fresh.server_id = manager.server_id
    try:
        units = fresh.ledger.active("local")
        assert units == []
        inventory = fresh.host_pool.get("local").gpus()
        other = next(u for u in leasable_units(inventory) if u.uuid not in survivor_gpu.gpu_uuids)
        stale = fresh.ledger.acquire(
            "local", "vanished", "bob", GPURequest(uuids=(other.uuid,)), leasable_units(inventory)
        )
        # When the restarted server reconciles
        report = fresh.reconcile()
        # Then the stale lease is freed and the running container's GPU is leased again
        assert fresh.ledger.get(stale.lease_id) is None or not any(
            lease.lease_id == stale.lease_id for lease in fresh.ledger.active("local")
        )
        releases = fresh.ledger.for_container("local", "survivor")
        assert releases is not None
        assert releases.gpu_uuids == survivor_gpu.gpu_uuids
        assert report["local"]
    finally:
        fresh.host_pool.close()


@pytest.mark.usefixtures("gpu_engine")
def test_a_stopped_gpu_container_resumes_with_the_same_gpu_or_not_at_all(
    manager: DevContainers, docker_client: docker.DockerClient
) -> None:
    # Given a stopped container that was created with GPU 1
    manager.start(StartRequest(environment="default", name="pausing", gpu_uuids=(A100_1,)))
    manager.stop("pausing")
    # And another container that took that GPU meanwhile
    manager.start(StartRequest(environment="default", name="taker", gpu_uuids=(A100_1,)))
    # When the first one is started again, it is refused: its GPU is part of the container
    with pytest.raises(NoFreeGPU, match="taker"):
        manager.resume("pausing")
    assert docker_client.containers.get(docker_name("pausing")).status == "exited"
    # When the GPU is free again, it resumes, leased again, and stop frees it again
    manager.stop("taker")
    info = manager.resume("pausing")
    assert info.state == "running"
    assert info.lease_id is not None
    manager.stop("pausing")
    assert manager.ledger.active("local") == []


def test_optional_gpu_falls_back_to_the_cpu(
    root: Path, tmp_path: Path, docker_client: docker.DockerClient
) -> None:
    # Given an environment whose GPU is optional, on a host without GPUs
    write_devcontainer(root, "maybe", {"image": IMAGE, "hostRequirements": {"gpu": "optional"}})
    manager = make_manager(root, tmp_path / "state", gpus=False)
    try:
        # When it is started
        info = manager.start(StartRequest(environment="maybe", name="maybe-one"))
        # Then it runs without a GPU, and says so
        assert info.state == "running"
        assert info.gpu_uuids == ()
        assert any("started without a GPU" in w for w in info.warnings)
    finally:
        remove_containers(docker_client, manager)


def test_optional_gpu_falls_back_when_no_gpu_matches_its_filter(
    manager: DevContainers, root: Path
) -> None:
    # Given an optional GPU of a model this host (two A100s) does not have
    write_devcontainer(
        root,
        "maybe-h100",
        {
            "image": IMAGE,
            "hostRequirements": {"gpu": "optional"},
            "customizations": {"gpudev": {"gpuModel": "H100"}},
        },
    )
    # When it is started, it runs on the CPU and says so (no 409)
    info = manager.start(StartRequest(environment="maybe-h100", name="maybe-h100"))
    assert info.gpu_uuids == ()
    assert any("started without a GPU" in w for w in info.warnings)
    assert manager.ledger.active("local") == []


def test_a_missing_image_without_a_registry_points_to_bootstrap(
    manager: DevContainers, root: Path
) -> None:
    write_devcontainer(root, "gone", {"image": "gpudev-missing-image:never"})
    with pytest.raises(GPUDevError) as caught:
        manager.start(StartRequest(environment="gone", name="gone-one"))
    assert "gpudev-missing-image:never" in caught.value.message
    assert "jupyter gpudev image bootstrap" in caught.value.message
    assert manager.ledger.active("local") == []


def fake_driver(tmp_path: Path) -> dict[str, Any]:
    """A driver layout with real character devices (clones of /dev/null) and library files."""
    dev = tmp_path / "dev"
    dev.mkdir()
    for node in ("nvidia0", "nvidia3", "nvidiactl", "nvidia-uvm"):
        os.mknod(dev / node, 0o666 | stat.S_IFCHR, os.makedev(1, 3))
    proc = tmp_path / "proc"
    # GPU 1 of the fake inventory (bus 00000000:0F:00.0) is /dev/nvidia3; GPU 0 is /dev/nvidia0
    for bus, minor in (("0000:07:00.0", 0), ("0000:0f:00.0", 3)):
        (proc / bus).mkdir(parents=True)
        (proc / bus / "information").write_text(f"Model: NVIDIA A100\nDevice Minor: {minor}\n")
    lib = tmp_path / "lib"
    lib.mkdir()
    (lib / "libcuda.so.535.129.03").write_text("not really a library")
    (lib / "libcuda.so.1").symlink_to("libcuda.so.535.129.03")
    (lib / "libnvidia-ml.so.1").write_text("not really a library")
    (lib / "libunrelated.so.1").write_text("must not be mounted")
    return {
        "LegacyGPUInjection__enabled": True,
        "LegacyGPUInjection__device_dir": str(dev),
        "LegacyGPUInjection__proc_dir": str(proc),
        "LegacyGPUInjection__library_dirs": [str(lib)],
        "LegacyGPUInjection__binary_dirs": [],
    }


@pytest.mark.skipif(os.geteuid() != 0, reason="making device nodes needs root")
def test_driver_injection_without_the_hook_gives_only_the_leased_gpu(
    root: Path, tmp_path: Path, docker_client: docker.DockerClient
) -> None:
    # Given the opt-in fallback for engines without the NVIDIA hook, and a driver layout
    manager = make_manager(root, tmp_path / "state", **fake_driver(tmp_path))
    try:
        # When a container leases GPU 1
        info = manager.start(StartRequest(environment="default", name="legacy", gpus=1))
        assert info.gpu_uuids == (A100_1,)
        container = docker_client.containers.get(docker_name("legacy"))
        host_config = container.attrs["HostConfig"]
        # Then no DeviceRequest is made; only GPU 1's node and the control nodes are passed
        assert not host_config.get("DeviceRequests")
        assert sorted(d["PathInContainer"] for d in host_config["Devices"]) == [
            "/dev/nvidia-uvm",
            "/dev/nvidia3",
            "/dev/nvidiactl",
        ]
        assert container.exec_run(["test", "-c", "/dev/nvidia3"]).exit_code == 0
        assert container.exec_run(["test", "-e", "/dev/nvidia0"]).exit_code != 0
        # And the driver libraries are there, read-only, on LD_LIBRARY_PATH
        output = container.exec_run(["ls", "/usr/local/nvidia/lib64"]).output
        assert isinstance(output, bytes)
        assert sorted(output.decode().split()) == [
            "libcuda.so.1",
            "libcuda.so.535.129.03",
            "libnvidia-ml.so.1",
        ]
        write = container.exec_run(["sh", "-c", "echo x > /usr/local/nvidia/lib64/libcuda.so.1"])
        assert write.exit_code != 0
        env = dict(item.split("=", 1) for item in container.attrs["Config"]["Env"])
        assert env["LD_LIBRARY_PATH"] == "/usr/local/nvidia/lib64"
        assert env["NVIDIA_VISIBLE_DEVICES"] == A100_1
        # And stop frees the lease as usual
        manager.stop("legacy")
        assert manager.ledger.active("local") == []
    finally:
        remove_containers(docker_client, manager)


def test_driver_injection_refuses_what_it_cannot_map(
    root: Path, tmp_path: Path, docker_client: docker.DockerClient
) -> None:
    # Given the fallback, but no driver information for the GPUs
    manager = make_manager(
        root,
        tmp_path / "state",
        LegacyGPUInjection__enabled=True,
        LegacyGPUInjection__proc_dir=str(tmp_path / "nothing"),
    )
    try:
        with pytest.raises(GPUDevError, match="Cannot tell which /dev/nvidia"):
            manager.start(StartRequest(environment="default", name="unmapped", gpus=1))
        # And nothing was left behind
        assert manager.ledger.active("local") == []
        assert (
            docker_client.containers.list(
                all=True, filters={"label": f"{L_SERVER}={manager.server_id}"}
            )
            == []
        )
    finally:
        manager.host_pool.close()


def test_reconcile_never_frees_the_lease_of_a_start_in_flight(manager: DevContainers) -> None:
    # Given a lease just taken for a container that does not exist yet (being created)
    inventory = manager.host_pool.get("local").gpus()
    lease = manager.ledger.acquire(
        "local", "in-flight", "alice", GPURequest(count=1), leasable_units(inventory)
    )
    # When another start (or the server's start-up) reconciles the host
    manager.reconcile()
    # Then the young lease is still held: freeing it would hand its GPU out twice
    assert manager.ledger.for_container("local", "in-flight") == lease
