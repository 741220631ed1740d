"""Helper containers gpudev makes of an image are confined, bounded and timed, and none runs a
program a dev container's root put there.

A snapshot is made of what a dev container's root wrote. When gpudev leaves its own files
(the command log, the wrappers) and the injected driver files out of the snapshot, nothing of
the snapshot may run: an ``rm`` planted first on the container's PATH would otherwise run as
root, outside the container's confinement, and what it did (a setuid-root shell) would be in
the snapshot, pushed to a registry.

The image probe has to run an image's programs (that is how it reads package state), and the
image may hold a container's files (the image a verify build rebuilt from them): a shell that
prints without end, never ends or forks must cost bounded time, memory and processes, and
leave no container behind.
"""

from __future__ import annotations

import contextlib
import io
import secrets
import tarfile
import threading
import time
import tracemalloc
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import docker
import docker.errors
import pytest
from traitlets.config import Config

from jupyter_gpudev.changes.capture import ChangeCapture
from jupyter_gpudev.changes.commit import CommitOptions, Committer
from jupyter_gpudev.containers import DevContainers, StartRequest, commandlog
from jupyter_gpudev.errors import GPUDevError
from jupyter_gpudev.labels import L_PROBE
from jupyter_gpudev.leasing import EngineClaims
from tests.integration.conftest import BASE
from tests.integration.test_diff import sh, write_environment

pytestmark = pytest.mark.integration

#: What the planted ``rm`` leaves when it runs: a marker and a setuid-root copy of a shell.
MARKER = "/usr/local/bin/planted-ran"
ROOTSH = "/usr/local/bin/planted-rootsh"
PLANTED_RM = f"""#!/bin/sh
/usr/bin/touch {MARKER}
/bin/cp /bin/dash {ROOTSH} && /bin/chmod 4755 {ROOTSH}
exec /bin/rm "$@"
"""


@pytest.fixture
def no_gpu_verify_manager(
    tmp_path: Path, dev_containers: Callable[..., DevContainers]
) -> DevContainers:
    """A manager of the environment ``verify`` (``test_diff.write_environment``); no GPU
    inventory (conftest's ``manager`` with that environment has the fake GPUs)."""
    root = tmp_path / "work"
    write_environment(root, "verify")
    config = Config()
    config.GPUInventory.backend = "none"
    return dev_containers(root, config)


def paths_in_image(docker_client: docker.DockerClient, image: str, paths: list[str]) -> set[str]:
    """Which of ``paths`` exist in ``image``: read by the engine from a container of it that
    never starts (nothing of the image runs)."""
    holder = docker_client.containers.create(image, entrypoint=["/nonexistent"])
    found = set()
    try:
        for path in paths:
            try:
                chunks, _ = docker_client.api.get_archive(str(holder.id), path)
            except docker.errors.NotFound:
                continue
            for _ in chunks:
                pass
            found.add(path)
    finally:
        holder.remove(force=True)
    return found


@pytest.mark.parametrize("driver_file", [False, True], ids=["command-log", "and-driver-file"])
def test_an_rm_planted_first_on_path_does_not_run_when_a_snapshot_is_made(
    no_gpu_verify_manager: DevContainers, docker_client: docker.DockerClient, driver_file: bool
) -> None:
    # Given a dev container with gpudev's command log (a logged pip: the snapshot leaves the
    # log out; with a file named as a driver file, left out too, that is done after the
    # commit) whose root planted an `rm` in the first folder of its PATH (the wrappers')
    no_gpu_verify_manager.start(StartRequest(environment="verify", name="plantbox"))
    path = sh(docker_client, "plantbox", "echo $PATH")
    assert path.startswith(f"{commandlog.SHIMS}:")
    planted = f"{commandlog.SHIMS}/rm"
    sh(
        docker_client,
        "plantbox",
        f"pip --version >/dev/null; echo kept > /etc/planted.conf\n"
        f"cat > {planted} <<'EOF'\n{PLANTED_RM}EOF\nchmod 755 {planted}"
        + ("\ntouch /opt/libcuda.so.1" if driver_file else ""),
    )
    tag = "gpudev-test/planted:v1"
    try:
        # When it is committed as a snapshot
        result = Committer(
            ChangeCapture(no_gpu_verify_manager), no_gpu_verify_manager.registries
        ).commit("plantbox", CommitOptions(snapshot=tag))
        assert result.snapshot is not None
        assert result.snapshot.removed_driver_files == (
            ["/opt/libcuda.so.1"] if driver_file else []
        )
        # Then the planted rm never ran: no marker, no setuid-root shell in the snapshot
        wanted = [MARKER, ROOTSH, "/etc/planted.conf", "/opt/libcuda.so.1", *commandlog.OWN_PATHS]
        found = paths_in_image(docker_client, tag, wanted)
        assert MARKER not in found
        assert ROOTSH not in found
        # And the snapshot still has the change and none of gpudev's files
        assert found == {"/etc/planted.conf"}
        # (and the dev container itself never ran it either)
        assert sh(docker_client, "plantbox", f"test -e {MARKER} || echo absent") == "absent\n"
    finally:
        with contextlib.suppress(docker.errors.ImageNotFound):
            docker_client.images.remove(tag)


def entry_in(docker_client: docker.DockerClient, container: str, path: str) -> tuple[int, ...]:
    """Mode, owner, group and time of ``path`` in ``container``, as the engine reads them."""
    chunks, _ = docker_client.api.get_archive(container, path)
    with tarfile.open(fileobj=io.BytesIO(b"".join(chunks)), mode="r:") as archive:
        first = archive.next()
    assert first is not None
    return first.mode & 0o7777, first.uid, first.gid, int(first.mtime)


def test_a_snapshot_leaves_files_out_under_folders_kept_as_they_were(
    no_gpu_verify_manager: DevContainers, docker_client: docker.DockerClient
) -> None:
    # Given a CPU dev container whose root made files named as driver files (left out of
    # snapshots) in a folder with its own owner, group and mode, and in the sticky /tmp
    no_gpu_verify_manager.start(StartRequest(environment="verify", name="oddbox"))
    sh(
        docker_client,
        "oddbox",
        "mkdir -p /opt/odd/deep && touch /opt/odd/deep/libcuda.so.1 /opt/odd/kept "
        "/tmp/libnvidia-ml.so.1 && chown 1000:50 /opt/odd && chmod 751 /opt/odd",
    )
    folders = ("/opt/odd", "/opt/odd/deep", "/tmp", "/opt")
    before = {f: entry_in(docker_client, "gpudev-oddbox", f) for f in folders}
    tag = "gpudev-test/odd:v1"
    try:
        # When it is committed as a snapshot
        result = Committer(
            ChangeCapture(no_gpu_verify_manager), no_gpu_verify_manager.registries
        ).commit("oddbox", CommitOptions(snapshot=tag))
        # Then those files are left out, and the rest is there
        assert result.snapshot is not None
        assert result.snapshot.removed_driver_files == [
            "/opt/odd/deep/libcuda.so.1",
            "/tmp/libnvidia-ml.so.1",
        ]
        wanted = ["/opt/odd/deep/libcuda.so.1", "/tmp/libnvidia-ml.so.1", "/opt/odd/kept"]
        assert paths_in_image(docker_client, tag, wanted) == {"/opt/odd/kept"}
        # And the folders they were in are as the container had them
        holder = docker_client.containers.create(tag, entrypoint=["/nonexistent"])
        try:
            after = {f: entry_in(docker_client, str(holder.id), f) for f in folders}
        finally:
            holder.remove(force=True)
        assert after == before
        assert after["/opt/odd"][:3] == (0o751, 1000, 50)
        assert after["/tmp"][0] == 0o1777
    finally:
        with contextlib.suppress(docker.errors.ImageNotFound):
            docker_client.images.remove(tag)


def test_a_gpu_claim_container_is_confined_too(docker_client: docker.DockerClient) -> None:
    # Given a container holding a GPU (created, never started, as a dev container is first)
    holder = docker_client.containers.create(BASE, entrypoint=["/nonexistent"])
    claims = EngineClaims(docker_client)
    uuid = f"GPU-{secrets.token_hex(4)}-0000-0000-0000-000000000000"
    try:
        # When gpudev claims a GPU for it on the engine (a container that never starts)
        (claim_id,) = claims.claim(
            [uuid], holder_id=str(holder.id), holder_name="claimbox", owner="ann"
        )
        # Then that container could do nothing even if someone started it: no capability, no
        # new privileges, a read-only root, no network
        host = docker_client.api.inspect_container(claim_id)["HostConfig"]
        assert host["CapDrop"] == ["ALL"]
        assert host["SecurityOpt"] == ["no-new-privileges"]
        assert host["ReadonlyRootfs"] is True
        assert host["NetworkMode"] == "none"
    finally:
        claims.release(str(holder.id))
        holder.remove(force=True)


# -- the image probe ------------------------------------------------------------------------


@pytest.fixture
def shell_images(docker_client: docker.DockerClient) -> Iterator[Callable[[str], str]]:
    """Makes images of BASE whose /bin/sh (what the probe runs) is a given dash script, with a
    volume declared at /data; after the test, any container of them is removed (after
    failing, with the probe left running), then the images."""
    made: list[str] = []

    def make(script: str) -> str:
        holder = docker_client.containers.create(BASE, entrypoint=["/nonexistent"])
        try:
            data = f"#!/bin/dash\n{script}\n".encode()
            buffer = io.BytesIO()
            with tarfile.open(fileobj=buffer, mode="w") as archive:
                info = tarfile.TarInfo("sh")
                info.size, info.mode = len(data), 0o755
                archive.addfile(info, io.BytesIO(data))
            holder.put_archive("/usr/bin", buffer.getvalue())
            image = str(
                holder.commit(
                    f"gpudev-test/hostile-sh-{len(made)}", "v1", changes=["VOLUME /data"]
                ).id
            )
        finally:
            holder.remove(force=True)
        made.append(image)
        return image

    yield make
    for image in made:
        for container in left_behind(docker_client, image):
            container.remove(force=True)
        docker_client.images.remove(image, force=True)


def left_behind(docker_client: docker.DockerClient, image: str) -> list[Any]:
    return list(docker_client.containers.list(all=True, filters={"ancestor": image}))


def probe_within(seconds: float, probe: Callable[[], object]) -> BaseException | None:
    """Run ``probe`` in a thread: the exception it ended with (``None``: none); a test failure
    when it is still running after ``seconds``."""
    ended: list[BaseException | None] = []

    def run() -> None:
        try:
            probe()
        except BaseException as exc:  # handed to the test
            ended.append(exc)
        else:
            ended.append(None)

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    thread.join(seconds)
    if thread.is_alive():
        pytest.fail(f"the probe was still running after {seconds:g} s")
    return ended[0]


def test_a_probe_whose_shell_prints_without_end_stops_at_the_cap_in_bounded_memory(
    no_gpu_verify_manager: DevContainers,
    docker_client: docker.DockerClient,
    shell_images: Callable[[str], str],
) -> None:
    # Given an image whose shell prints without end, and a probe cap of 1 MiB of output
    image = shell_images("exec /usr/bin/yes gpudev-probe-flood")
    capture = ChangeCapture(no_gpu_verify_manager)
    capture.probe_output_limit = 1 << 20
    capture.probe_timeout = 60.0
    # When its packages are probed
    tracemalloc.start()
    try:
        started = time.monotonic()
        error = probe_within(30, lambda: capture.probe_image(docker_client, image))
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    # Then the probe stops once past the cap, long before its time limit, with a clear error
    assert isinstance(error, GPUDevError), error
    assert time.monotonic() - started < 20
    assert error.message == (
        f"The package probe of {image[:19]} printed more than 1 MiB: it was stopped and "
        "removed (an image's package state is never that large)"
    )
    # And no more than a few times the cap was ever held
    assert peak < 8 << 20
    # And no container of the probe is left
    assert left_behind(docker_client, image) == []


def test_a_probe_that_never_ends_is_stopped_at_its_time_limit_and_removed(
    no_gpu_verify_manager: DevContainers,
    docker_client: docker.DockerClient,
    shell_images: Callable[[str], str],
) -> None:
    # Given an image whose shell prints nothing and never ends, and a 3 s probe time limit
    image = shell_images("exec /bin/sleep 600")
    capture = ChangeCapture(no_gpu_verify_manager)
    capture.probe_timeout = 3.0
    # When its packages are probed
    started = time.monotonic()
    error = probe_within(30, lambda: capture.probe_image(docker_client, image))
    # Then it ends at the limit with a clear error, and no container of it is left
    assert isinstance(error, GPUDevError), error
    assert 3 <= time.monotonic() - started < 15
    assert error.message == (
        f"The package probe of {image[:19]} was still running after 3 s: it was stopped and removed"
    )
    assert left_behind(docker_client, image) == []


#: 600 processes started by a shell of their own (which gives up when a fork fails), then a wait.
FORKER = """
/bin/dash -c 'i=0; while [ $i -lt 600 ]; do /bin/sleep 600 & i=$((i+1)); done' 2>/dev/null
exec /bin/sleep 600
"""


def test_a_probe_runs_confined_like_a_dev_container_and_cannot_fork_without_end(
    no_gpu_verify_manager: DevContainers,
    docker_client: docker.DockerClient,
    shell_images: Callable[[str], str],
) -> None:
    # Given an image whose shell starts 600 processes, then waits
    image = shell_images(FORKER)
    capture = ChangeCapture(no_gpu_verify_manager)
    capture.probe_timeout = 8.0
    seen: list[dict[str, Any]] = []
    most = [0]
    done = threading.Event()

    def watch() -> None:  # the probe's container, as the engine has it, while it runs
        while not done.is_set():
            for container in left_behind(docker_client, image):
                try:
                    seen.append(container.attrs)
                    # a container that is ending lists its processes as null
                    most[0] = max(most[0], len(container.top().get("Processes") or []))
                except docker.errors.APIError:
                    pass  # gone meanwhile
            time.sleep(0.2)

    watcher = threading.Thread(target=watch, daemon=True)
    watcher.start()
    # When its packages are probed
    try:
        error = probe_within(30, lambda: capture.probe_image(docker_client, image))
    finally:
        done.set()
        watcher.join(10)
    # Then the probe ran confined as a dev container is, and more: no capability but
    # reading, gpudev's seccomp profile, no new privileges, a read-only root, no network, no
    # log kept by the engine, and limits on its processes and memory
    assert seen, "the probe's container was never seen running"
    host = seen[-1]["HostConfig"]
    assert host["CapDrop"] == ["ALL"]
    assert host["CapAdd"] == ["DAC_OVERRIDE"]
    assert "no-new-privileges" in host["SecurityOpt"]
    assert any(o.startswith("seccomp=") and "fchmodat2" in o for o in host["SecurityOpt"])
    assert host["ReadonlyRootfs"] is True
    assert host["NetworkMode"] == "none"
    assert host["LogConfig"]["Type"] == "none"
    assert 0 < host["PidsLimit"] <= 256
    assert 0 < host["Memory"] <= 2 << 30
    assert seen[-1]["Config"]["Labels"][L_PROBE] == "1"
    (volume,) = [m["Name"] for m in seen[-1]["Mounts"] if m["Destination"] == "/data"]
    # And it never had more processes than its limit
    assert 0 < most[0] <= host["PidsLimit"]
    # And it was stopped at its time limit and removed
    assert isinstance(error, GPUDevError), error
    assert "was still running after 8 s" in error.message
    assert left_behind(docker_client, image) == []
    # (with the volume its image declares)
    with pytest.raises(docker.errors.NotFound):
        docker_client.volumes.get(volume)
