"""A pod's snapshot built by its cluster (``changes/podbuild.py``): the pure parts, and the
Job's end read from what the API server says (issue #20)."""

from __future__ import annotations

import base64
import json
import logging
from dataclasses import dataclass, field
from types import SimpleNamespace
from typing import Any, cast

import pytest

from jupyter_gpudev.changes.podbuild import PodBuild, registry_config, workspace_of
from jupyter_gpudev.errors import Conflict, EngineError, GPUDevError

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


def wait(cluster: JobCluster, clock: list[float] | None = None, deadline: int = 100) -> str:
    ticks = clock if clock is not None else [0.0]

    def sleep(seconds: float) -> None:
        ticks[0] += seconds

    capture = cast(Any, SimpleNamespace(containers=SimpleNamespace(log=logging.getLogger("t"))))
    build = PodBuild(capture, cast(Any, None), poll=10, clock=lambda: ticks[0], sleep=sleep)
    return build._wait(
        cast(Any, cluster), "gpudev-build-x", "r.example:5000/x:1", source="s", deadline=deadline
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
