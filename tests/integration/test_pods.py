"""A dev container on a Kubernetes host, its pod run by the real Docker engine (issue #20).

The API server is ``tests/k8s_api.py``'s stand-in (no control plane can run here), reached
through the real ``kubernetes`` client; its pods are real containers of the real image
(``DockerKubelet``): the exec protocol, the lifecycle commands, GNU find's listing as the
pod's user and the comparison of two listings all run for real."""

from __future__ import annotations

import asyncio
import base64
import contextlib
import copy
import io
import json
import logging
import os
import secrets
import select
import tarfile
import tempfile
import time
import urllib.request
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import docker
import pytest
from ptyprocess import PtyProcess

from jupyter_gpudev.access import Caller
from jupyter_gpudev.changes.commit import CommitOptions, Committer
from jupyter_gpudev.changes.tracker import track_changes
from jupyter_gpudev.containers import DevContainers, StartRequest
from jupyter_gpudev.engine import HostPool
from jupyter_gpudev.engine.registries import Registries
from jupyter_gpudev.errors import BadRequest, Conflict, GPUDevError, NotFound
from jupyter_gpudev.kernels import provisioner
from jupyter_gpudev.kernels.kernelspecs import SHARED_PREFIX, GPUDevKernelSpecManager
from jupyter_gpudev.labels import A_NAME, K_KERNEL
from tests.integration.test_kernels import kernel_manager, run
from tests.k8s_api import DockerKubelet, FakeCluster, JobEnd, cluster_manager
from tests.registry import Registry

pytestmark = pytest.mark.integration
LOG = logging.getLogger("test")
ALICE = Caller("alice")


@pytest.fixture
def cluster(docker_client: docker.DockerClient, tmp_path: Path) -> Iterator[FakeCluster]:
    kubelet = DockerKubelet(
        docker_client, tmp_path / "volumes", f"gpudev-test-kubelet-{secrets.token_hex(4)}"
    )
    yield FakeCluster(kubelet=kubelet)
    kubelet.close()


@pytest.fixture
def pod_manager(
    cluster: FakeCluster, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> Iterator[DevContainers]:
    """A manager whose one host is ``cluster`` (``tests/k8s_api.py``'s ``cluster_manager``),
    its pods real containers, a starting one read every 50 ms."""
    with cluster_manager(cluster, tmp_path, monkeypatch, pod_poll_interval=0.05) as made:
        yield made


def test_a_pods_lifecycle_commands_and_changes_run_in_its_image(
    pod_manager: DevContainers, cluster: FakeCluster, tmp_path: Path
) -> None:
    # Given an environment whose postCreateCommand writes a file outside the workspace
    folder = pod_manager.root_dir / ".devcontainer" / "k8s"
    folder.mkdir(parents=True)
    image = pod_manager.environments.get("default", pod_manager.root_dir).image
    (folder / "devcontainer.json").write_text(
        json.dumps(
            {
                "image": image,
                "postCreateCommand": "id -u > /tmp/made-by-setup && echo set up as $(id -u)",
            }
        )
    )
    # When it starts on the cluster
    said: list[dict[str, object]] = []
    info = pod_manager.start(
        StartRequest("k8s", host="cluster", name="real-pod"), said.append, caller=ALICE
    )
    # Then the command ran in the pod as its user (1000, never root), its words reported
    assert info.state == "running"
    assert ("postCreateCommand", "set up as 1000") in [(e["stage"], e["message"]) for e in said]
    assert not [w for w in info.warnings if "listed" in w], info.warnings
    # (what the setup wrote is in the listing taken after it: not a change of the user's)
    pods = pod_manager.pods(pod_manager.host_pool.get("cluster"))
    assert (
        pods.cluster.exec(
            "gpudev-real-pod", ["cat", "/tmp/made-by-setup"], timeout=30, limit=100
        ).stdout
        == b"1000\n"
    )
    # When the user writes in the workspace and outside it
    workspace = cluster.objects[("pods", "team-ml", "gpudev-real-pod")]["spec"]["containers"][0][
        "volumeMounts"
    ][0]["mountPath"]
    for argv in (
        ["sh", "-c", f"echo notes > {workspace}/notes.txt"],
        [
            "sh",
            "-c",
            "mkdir -p /tmp/tool && echo x > /tmp/tool/bin "
            "&& echo y > '/tmp/a name\nwith a newline'",
        ],
    ):
        assert pods.cluster.exec("gpudev-real-pod", argv, timeout=30, limit=100).exit_code == 0
    # Then removing it without force is refused, naming the changes outside the workspace
    with pytest.raises(Conflict) as caught:
        pod_manager.remove("real-pod", "cluster", caller=ALICE)
    changes = caught.value.details["changes"]
    assert "/tmp/made-by-setup" not in changes
    assert "/tmp/tool" in changes
    assert "/tmp/tool/bin" in changes
    assert "/tmp/a name\nwith a newline" in changes
    assert not [c for c in changes if c.startswith(workspace)]
    # And with force the pod's container is gone, the workspace's files kept
    pod_manager.remove("real-pod", "cluster", force=True, caller=ALICE)
    assert cluster.names("pods") == []
    assert not cluster.kubelet.containers
    kept = list((tmp_path / "volumes").glob("*-workspace/notes.txt"))
    assert [p.read_text() for p in kept] == ["notes\n"]


def test_an_unchanged_pod_is_removed_without_force(
    pod_manager: DevContainers, cluster: FakeCluster
) -> None:
    pod_manager.start(StartRequest("default", host="cluster", name="plain"), None, caller=ALICE)
    pod_manager.remove("plain", "cluster", caller=ALICE)
    assert cluster.names("pods") == []


@pytest.fixture
def tools_image(docker_client: docker.DockerClient) -> Iterator[str]:
    """The test image with a folder its non-root user may write (a pod's user cannot write
    the image's own folders)."""
    tag = f"gpudev-test-tools:{secrets.token_hex(4)}"
    base = "gpudev-python:bookworm"
    docker_client.images.build(
        fileobj=__import__("io").BytesIO(f"FROM {base}\nRUN mkdir -m 0777 /opt/tools\n".encode()),
        tag=tag,
        rm=True,
    )
    yield tag
    with contextlib.suppress(docker.errors.DockerException):
        docker_client.images.remove(tag, force=True)


def environment(manager: DevContainers, name: str, config: dict[str, Any]) -> Path:
    """Write the environment ``name`` (its devcontainer.json) into the manager's workspace;
    its folder."""
    folder = manager.root_dir / ".devcontainer" / name
    folder.mkdir(parents=True)
    (folder / "devcontainer.json").write_text(json.dumps(config))
    return folder


def test_a_pods_changes_are_committed_as_a_dockerfile_diff(
    pod_manager: DevContainers, cluster: FakeCluster, tools_image: str
) -> None:
    # Given change tracking, and a pod of an environment with a folder its user may write
    capture = track_changes(pod_manager)
    folder = environment(pod_manager, "tools", {"image": tools_image})
    said: list[dict[str, object]] = []
    info = pod_manager.start(StartRequest("tools", host="cluster", name="cpod"), said.append)
    assert not [w for w in info.warnings if "commit" in w], info.warnings
    assert "probing the packages of gpudev-cpod" in [e["message"] for e in said]
    pods = pod_manager.pods(pod_manager.host_pool.get("cluster"))

    def run_in_pod(script: str) -> None:
        result = pods.cluster.exec("gpudev-cpod", ["sh", "-c", script], timeout=60, limit=4096)
        assert result.exit_code == 0, result.stderr

    # When the user makes a Python environment with a package, and a settings file
    site = "/opt/tools/env/lib/python3.11/site-packages"
    run_in_pod(
        "python3 -m venv --without-pip /opt/tools/env"
        f" && mkdir -p {site}/demo_pkg-1.0.dist-info"
        f" && printf 'Metadata-Version: 2.1\\nName: demo-pkg\\nVersion: 1.0\\n'"
        f" > {site}/demo_pkg-1.0.dist-info/METADATA"
        f" && printf 'pip\\n' > {site}/demo_pkg-1.0.dist-info/INSTALLER"
        " && echo 'threads = 4' > /opt/tools/settings.toml"
        " && ln -s settings.toml /opt/tools/current.toml"
    )
    # Then its diff, read through exec, has both, the file copied from the build context
    captured, rendered = capture.diff("cpod", "cluster")
    assert captured.pod is not None
    assert "demo-pkg==1.0" in rendered.diff, rendered.diff
    assert "/opt/tools/settings.toml" in rendered.files
    # And a verify build (it needs a Docker engine) is refused, nothing written
    committer = Committer(capture, Registries())
    with pytest.raises(BadRequest, match="pod on a Kubernetes host"):
        committer.commit("cpod", CommitOptions(verify=True, write=True), "cluster")
    assert not (folder / "Dockerfile").exists()
    # When it is written
    result = committer.commit("cpod", CommitOptions(write=True), "cluster")
    assert result.written is not None
    # Then the Dockerfile and the file it copies are in the workspace
    dockerfile = (folder / "Dockerfile").read_text()
    assert f"FROM {tools_image}" in dockerfile
    assert "demo-pkg==1.0" in dockerfile
    copied = folder / "gpudev-context" / "cpod" / "files" / "opt" / "tools"
    assert (copied / "settings.toml").read_text() == "threads = 4\n"
    assert os.readlink(copied / "current.toml") == "settings.toml"
    # And a diff right after is empty: the commit is the new starting point
    _, again = capture.diff("cpod", "cluster")
    assert again.diff == "", again.diff
    # When the committed file is edited again, removing the pod is refused (it would be lost)
    run_in_pod("echo 'threads = 8' > /opt/tools/settings.toml")
    with pytest.raises(Conflict) as caught:
        pod_manager.remove("cpod", "cluster")
    assert caught.value.details["changes"] == ["/opt/tools/settings.toml"]
    # And once committed again it is removed without force, its baselines forgotten
    committer.commit("cpod", CommitOptions(write=True), "cluster")
    assert (
        folder / "gpudev-context" / "cpod" / "files" / "opt" / "tools" / "settings.toml"
    ).read_text() == "threads = 8\n"
    pod_manager.remove("cpod", "cluster")
    assert cluster.names("pods") == []
    assert not list(capture.baselines.folder.glob("*" + captured.key + "*"))


@pytest.fixture(scope="module")
def busybox_image(docker_client: docker.DockerClient) -> Iterator[str]:
    """The stand-in for the image of a build Job's own steps (crane:debug: its shell and tools
    are busybox's, in /busybox): Debian's static busybox, its applets linked in /busybox."""
    binary = Path("/bin/busybox")
    if not binary.is_file():
        pytest.fail("busybox-static is not installed (scripts/setup.sh --test installs it)")
    tag = f"gpudev-test-busybox:{secrets.token_hex(4)}"
    context = io.BytesIO()
    with tarfile.open(fileobj=context, mode="w") as archive:
        archive.add(str(binary), arcname="busybox")
        dockerfile = (
            b"FROM scratch\nCOPY busybox /busybox/busybox\n"
            b'RUN ["/busybox/busybox", "--install", "-s", "/busybox"]\nENV PATH=/busybox\n'
        )
        info = tarfile.TarInfo("Dockerfile")
        info.size = len(dockerfile)
        archive.addfile(info, io.BytesIO(dockerfile))
    context.seek(0)
    docker_client.images.build(fileobj=context, custom_context=True, tag=tag, rm=True)
    yield tag
    with contextlib.suppress(docker.errors.DockerException):
        docker_client.images.remove(tag, force=True)


def builder_stand_in(
    cluster: FakeCluster,
    docker_client: docker.DockerClient,
    volumes: Path,
    tools_image: str,
    started: list[list[str]] | None = None,
) -> Callable[[dict[str, Any]], JobEnd]:
    """What a build Job's pod does (no image of kaniko or crane here), each step through its
    own volume mounts only: a step of gpudev's own (any init container but kaniko's) runs for
    real in ``tools_image``, the stand-in for its image, as the Job says (its command, user,
    capabilities, no privilege escalation, root file system, no network); kaniko's step is a
    build by the real engine of the context and Dockerfile its arguments name (it has no
    credentials); the push step pushes with the credentials of the Job's Secret, which only it
    mounts, to the real registry, and says the pushed reference as crane does. ``started``:
    the NetworkPolicies of the namespace when each pod started."""

    def run(job: dict[str, Any]) -> JobEnd:
        if started is not None:
            started.append(cluster.names("networkpolicies"))
        spec = job["spec"]["template"]["spec"]
        scratch = Path(tempfile.mkdtemp(prefix="emptydir-", dir=volumes))

        def folder(volume_name: str) -> Path:
            volume = next(v for v in spec["volumes"] if v["name"] == volume_name)
            claim = (volume.get("persistentVolumeClaim") or {}).get("claimName")
            if claim is None:
                assert "emptyDir" in volume, volume
                made = scratch / volume_name
                made.mkdir(exist_ok=True)
                made.chmod(0o777)  # as a kubelet makes an emptyDir
                return made
            (dev_pod,) = [
                pod
                for (plural, _ns, _n), pod in cluster.objects.items()
                if plural == "pods"
                and any(
                    (v.get("persistentVolumeClaim") or {}).get("claimName") == claim
                    for v in pod["spec"].get("volumes") or []
                )
                and "job-name" not in pod["metadata"].get("labels", {})
            ]
            return volumes / f"{dev_pod['metadata']['name']}-workspace"

        def on_host(step: dict[str, Any], path: str) -> Path:
            for mount in step.get("volumeMounts") or []:
                root = mount["mountPath"].rstrip("/")
                if path == root or path.startswith(root + "/"):
                    return folder(mount["name"]) / path[len(root) :].lstrip("/")
            raise AssertionError(f"{path} is on no volume of the {step['name']} step")

        for step in spec["initContainers"]:
            ended = build(step, on_host) if step["name"] == "build" else own(step, folder)
            if ended is not None:
                return ended
        (push,) = spec["containers"]
        assert "registry" in {m["name"] for m in push["volumeMounts"]}
        return push_image(spec, push)

    def own(step: dict[str, Any], folder: Callable[[str], Path]) -> JobEnd | None:
        security = step.get("securityContext") or {}
        assert "registry" not in {m["name"] for m in step.get("volumeMounts") or []}
        container = docker_client.containers.run(
            tools_image,
            step.get("args") or [],
            entrypoint=step["command"],
            user=f"{security.get('runAsUser', 0)}:{security.get('runAsGroup', 0)}",
            cap_drop=(security.get("capabilities") or {}).get("drop"),
            cap_add=(security.get("capabilities") or {}).get("add"),
            security_opt=[] if security.get("allowPrivilegeEscalation") else ["no-new-privileges"],
            read_only=bool(security.get("readOnlyRootFilesystem")),
            network_disabled=True,
            volumes={
                str(folder(m["name"])): {
                    "bind": m["mountPath"],
                    "mode": "ro" if m.get("readOnly") else "rw",
                }
                for m in step.get("volumeMounts") or []
            },
            detach=True,
        )
        try:
            code = int(container.wait(timeout=120)["StatusCode"])
            output = bytes(container.logs())
        finally:
            container.remove(force=True)
        return JobEnd(failed=step["name"], exit_code=code, output=output) if code else None

    def build(
        step: dict[str, Any], on_host: Callable[[dict[str, Any], str], Path]
    ) -> JobEnd | None:
        args = step["args"]
        # the step that runs the Dockerfile's commands has no credentials, pushes nothing
        assert "registry" not in {m["name"] for m in step["volumeMounts"]}
        assert "--no-push" in args
        found = {a.split("=", 1)[0]: a.split("=", 1)[1] for a in args if "=" in a}
        labels = dict(a.split("=", 1)[1].split("=", 1) for a in args if a.startswith("--label="))
        try:
            docker_client.images.build(
                path=str(on_host(step, found["--context"].removeprefix("dir://"))),
                dockerfile=str(on_host(step, found["--dockerfile"])),
                tag=found["--destination"],
                labels=labels,
                rm=True,
            )
        except docker.errors.DockerException as exc:
            return JobEnd(failed="build", output=f"error building: {exc}\n".encode())
        return None

    def push_image(spec: dict[str, Any], push: dict[str, Any]) -> JobEnd:
        destination = push["args"][-1]
        secret_name = next(v for v in spec["volumes"] if v["name"] == "registry")["secret"][
            "secretName"
        ]
        secret = cluster.objects[("secrets", "team-ml", secret_name)]
        config = json.loads(base64.b64decode(secret["data"]["config.json"]))
        registry_host = destination.split("/", 1)[0]
        user, password = (
            base64.b64decode(config["auths"][registry_host]["auth"]).decode().split(":", 1)
        )
        try:
            repository, tag = destination.rsplit(":", 1)
            digest = ""
            for event in docker_client.api.push(
                repository,
                tag=tag,
                stream=True,
                decode=True,
                auth_config={"username": user, "password": password},
            ):
                if "error" in event:
                    return JobEnd(
                        failed="push", output=f"error pushing: {event['error']}\n".encode()
                    )
                digest = (event.get("aux") or {}).get("Digest", digest)
        except docker.errors.DockerException as exc:
            return JobEnd(failed="push", output=f"error pushing: {exc}\n".encode())
        return JobEnd(message=f"{repository}@{digest}", output=b"pushed\n")

    return run


#: What a hostile pod runs on the build context gpudev left in its workspace claim: every
#: Dockerfile there, loose or in an archive, replaced by its own (argv: the workspace, the
#: Dockerfile); prints how many it replaced.
REWRITE = """
import io, os, sys, tarfile
workspace, swap = sys.argv[1], sys.argv[2].encode()
count = 0
for folder, _dirs, files in os.walk(os.path.join(workspace, ".gpudev-build")):
    for name in files:
        path = os.path.join(folder, name)
        if "Dockerfile" in name:
            with open(path, "wb") as out:
                out.write(swap)
            count += 1
        elif tarfile.is_tarfile(path):
            with tarfile.open(path) as old:
                members = [(m, old.extractfile(m).read() if m.isfile() else None) for m in old]
            with tarfile.open(path, "w") as new:
                for member, data in members:
                    if data is not None and "Dockerfile" in member.name:
                        data, member.size = swap, len(swap)
                        count += 1
                    new.addfile(member, io.BytesIO(data) if data is not None else None)
print(count)
"""


def test_a_pods_snapshot_is_built_in_the_cluster_and_pushed(  # noqa: PLR0917
    pod_manager: DevContainers,
    cluster: FakeCluster,
    tools_image: str,
    registry: Registry,
    docker_client: docker.DockerClient,
    busybox_image: str,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # Given a pod with a settings file, the user's credentials for a real registry, and a
    # cluster whose build Jobs run (the engine stands in for kaniko, busybox for crane's)
    capture = track_changes(pod_manager)
    monkeypatch.setenv("DOCKER_CONFIG", str(registry.docker_config(tmp_path / "docker")))
    started: list[list[str]] = []
    cluster.job_runner = builder_stand_in(
        cluster, docker_client, tmp_path / "volumes", busybox_image, started
    )
    folder = environment(pod_manager, "tools", {"image": tools_image})
    pod_manager.start(StartRequest("tools", host="cluster", name="spod"), None)
    pods = pod_manager.pods(pod_manager.host_pool.get("cluster"))
    made = pods.cluster.exec(
        "gpudev-spod",
        ["sh", "-c", "echo 'threads = 4' > /opt/tools/settings.toml"],
        timeout=60,
        limit=4096,
    )
    assert made.exit_code == 0, made.stderr
    committer = Committer(capture, Registries())
    tag = f"{registry.address}/team/spod:v1"
    # A snapshot without a push (no image stays anywhere) and a verify build are refused
    for options, words in (
        (CommitOptions(snapshot=tag), "needs --push"),
        (CommitOptions(verify=True, write=True), "verify build needs a Docker engine"),
    ):
        with pytest.raises(BadRequest, match=words):
            committer.commit("spod", options, "cluster")
    assert cluster.names("jobs") == []
    assert not (folder / "Dockerfile").exists()
    # When it is committed with a push
    said: list[dict[str, Any]] = []
    result = committer.commit(
        "spod", CommitOptions(snapshot=tag, push=True, message="tuned"), "cluster", said.append
    )
    # Then the cluster built and pushed the patched Dockerfile, the registry has that digest
    assert result.snapshot is not None
    digest = result.snapshot.pushed_digest or ""
    assert digest.startswith("sha256:")
    auth = {"username": registry.username, "password": registry.password}
    remote = docker_client.api.inspect_distribution(tag, auth_config=auth)  # type: ignore[no-untyped-call]
    assert remote["Descriptor"]["digest"] == digest
    # And the image has the file, gpudev's labels, and nothing of the pod's that was not kept
    built = docker_client.images.get(tag)
    assert built.labels["org.opencontainers.image.description"] == "tuned"
    out = docker_client.containers.run(tag, ["cat", "/opt/tools/settings.toml"], remove=True)
    assert out == b"threads = 4\n"
    # And its pod started with its NetworkPolicy there (made before the Secret it waits for)
    (there,) = started
    assert [n for n in there if n.startswith("gpudev-build-spod-")], there
    # And the Job, its pod, the Secret and NetworkPolicy and the context are gone; nothing
    # was written
    assert cluster.names("jobs") == []
    assert cluster.names("secrets") == []
    assert cluster.names("networkpolicies") == ["gpudev-spod"]
    assert cluster.names("pods") == ["gpudev-spod"]
    assert not list((tmp_path / "volumes").glob("*/.gpudev-build"))
    assert not (folder / "Dockerfile").exists()
    assert any("building" in str(e["message"]) for e in said)
    # When the registry refuses the credentials, the build's failure says so, nothing is left
    monkeypatch.setenv(
        "DOCKER_CONFIG",
        str(registry.docker_config(tmp_path / "bad", password="wrong-" + registry.password)),
    )
    with pytest.raises(GPUDevError, match="refused the push") as refused:
        committer.commit("spod", CommitOptions(snapshot=tag + "x", push=True), "cluster")
    assert registry.password not in refused.value.message
    assert cluster.names("jobs") == []
    assert cluster.names("secrets") == []


def test_a_build_context_the_pod_rewrites_in_its_claim_is_never_built(  # noqa: PLR0917
    pod_manager: DevContainers,
    cluster: FakeCluster,
    tools_image: str,
    registry: Registry,
    docker_client: docker.DockerClient,
    busybox_image: str,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # Given a changed pod, the user's credentials for a real registry, a cluster whose build
    # Jobs run, and a hostile pod: once the build Job exists, before it runs, it replaces every
    # Dockerfile of the build context gpudev left in its workspace claim with its own
    capture = track_changes(pod_manager)
    monkeypatch.setenv("DOCKER_CONFIG", str(registry.docker_config(tmp_path / "docker")))
    environment(pod_manager, "tools", {"image": tools_image})
    pod_manager.start(StartRequest("tools", host="cluster", name="evil"), None)
    pod = cluster.objects[("pods", "team-ml", "gpudev-evil")]
    workspace = pod["spec"]["containers"][0]["volumeMounts"][0]["mountPath"]
    assert cluster.kubelet.exec(pod, ["sh", "-c", "echo x > /opt/tools/settings.toml"])[0] == 0
    honest = builder_stand_in(cluster, docker_client, tmp_path / "volumes", busybox_image)
    swap = f"FROM {tools_image}\nRUN echo swapped > /swapped\n"
    rewritten: list[int] = []

    def hostile(job: dict[str, Any]) -> JobEnd:
        code, out, err = cluster.kubelet.exec(pod, ["python3", "-c", REWRITE, workspace, swap])
        assert code == 0, err
        rewritten.append(int(out))
        return honest(job)

    cluster.job_runner = hostile
    tag = f"{registry.address}/team/evil:v1"
    with contextlib.suppress(docker.errors.ImageNotFound):
        docker_client.images.remove(tag, force=True)
    # When its snapshot is committed with a push
    refused: GPUDevError | None = None
    try:
        Committer(capture, Registries()).commit(
            "evil", CommitOptions(snapshot=tag, push=True), "cluster"
        )
    except GPUDevError as exc:
        refused = exc
    # Then the pod did rewrite the context, and nothing of its Dockerfile was built or pushed
    # with the service's credentials
    assert len(rewritten) == 1
    assert rewritten[0] > 0
    with contextlib.suppress(docker.errors.ImageNotFound):
        docker_client.images.get(tag)  # built, then
        built = docker_client.containers.run(tag, ["sh", "-c", "cat /swapped || true"], remove=True)
        assert b"swapped" not in built, "the pod's own Dockerfile was built and pushed"
    # And the build was refused before it ran: the context's digest is not gpudev's
    assert isinstance(refused, Conflict), refused
    assert "not the one gpudev wrote" in refused.message
    auth = {"username": registry.username, "password": registry.password}
    with pytest.raises(docker.errors.APIError):
        docker_client.api.inspect_distribution(tag, auth_config=auth)  # type: ignore[no-untyped-call]
    # And the Job, its Secret and NetworkPolicy, and the context in the claim are gone
    assert cluster.names("jobs") == []
    assert cluster.names("secrets") == []
    assert cluster.names("networkpolicies") == ["gpudev-evil"]
    assert not list((tmp_path / "volumes").glob("*/.gpudev-build"))


@pytest.mark.parametrize("forward", ["never", "always"])
async def test_a_kernel_runs_in_a_pod_from_the_picker(
    pod_manager: DevContainers, cluster: FakeCluster, forward: str
) -> None:
    # Given a running pod, offered in the picker as a dev container kernels share, reached at
    # its IP (a server in the cluster) or through port-forwards (a server outside), pinned
    # (else it is deleted after its last kernel: see the next test)
    pod_manager.kubernetes.port_forward = forward
    pod_manager.start(StartRequest("default", host="cluster", name="kpod"), None)
    assert pod_manager.pin("kpod", "cluster").pinned is True
    provisioner.set_manager(pod_manager)
    try:
        specs = GPUDevKernelSpecManager(root_dir=str(pod_manager.root_dir)).find_kernel_specs()
        assert SHARED_PREFIX + "kpod" in specs
        # When a kernel starts in it
        km = kernel_manager(pod_manager, SHARED_PREFIX + "kpod")
        await km.start_kernel()
        client = km.client()
        client.start_channels()
        try:
            await client.wait_for_ready(timeout=60)
            # Then it runs in the pod as the pod's user, reached at the pod's IP
            out, reply = await run(
                client, "import os, socket; print(os.getuid(), socket.gethostname())"
            )
            assert reply["status"] == "ok", reply
            pod = cluster.objects[("pods", "team-ml", "gpudev-kpod")]
            container = cluster.kubelet.containers["gpudev-kpod"]
            assert out.split() == ["1000", container.attrs["Config"]["Hostname"]]
            reached = json.loads(Path(km.connection_file).read_text())["ip"]
            assert reached == (pod["status"]["podIP"] if forward == "never" else "127.0.0.1")
            assert bool(cluster.forwards) == (forward == "always")
            # While it runs, a poll at the pod's IP is a connection to its heartbeat port, not
            # an exec (a request to the API server); through port-forwards it is an exec
            before = len(cluster.execs)
            for _ in range(3):
                assert await km.is_alive()
            assert (len(cluster.execs) - before == 0) == (forward == "never")
            # Its key went in as the exec's input: no exec URL holds it
            key = km.session.key.decode()
            assert not [p for _m, p in cluster.requests if key in p]
            # An interrupt reaches it (by exec), and it keeps running
            await km.interrupt_kernel()
            assert await km.is_alive()
            # A restart replaces the process, in the same pod
            await km.restart_kernel()
            await client.wait_for_ready(timeout=60)
            out, reply = await run(client, "print(40 + 2)")
            assert out.strip() == "42"
        finally:
            client.stop_channels()
            await km.shutdown_kernel()
        # At shutdown the kernel's process is gone, its runtime files too; the pod runs on
        assert not await km.is_alive()
        listed = container.exec_run(["ls", "/tmp/.gpudev"], user="1000:1000").output
        for _ in range(50):
            if not listed.strip():
                break
            await asyncio.sleep(0.1)
            listed = container.exec_run(["ls", "/tmp/.gpudev"], user="1000:1000").output
        assert listed.strip() == b""
        procs = container.exec_run(["sh", "-c", "ps -eo args || ls /proc"]).output.decode()
        assert "ipykernel" not in procs
        assert (
            pod_manager.get("kpod", "cluster", caller=Caller("root", admin=True)).state == "running"
        )
    finally:
        provisioner.set_manager(None)


async def one_kernel(manager: DevContainers, container: str, code: str) -> None:
    """Start a kernel in the shared ``container``, run ``code`` there, shut it down."""
    km = kernel_manager(manager, SHARED_PREFIX + container)
    await km.start_kernel()
    client = km.client()
    client.start_channels()
    try:
        await client.wait_for_ready(timeout=60)
        _, reply = await run(client, code)
        assert reply["status"] == "ok", reply
    finally:
        client.stop_channels()
        await km.shutdown_kernel()


async def test_a_shared_pod_is_deleted_after_its_last_kernel_unless_pinned_or_changed(
    pod_manager: DevContainers, cluster: FakeCluster, tools_image: str
) -> None:
    # Given change tracking and a running pod that kernels share
    track_changes(pod_manager)
    environment(pod_manager, "tools", {"image": tools_image})
    pod_manager.start(StartRequest("tools", host="cluster", name="spod"), None)
    provisioner.set_manager(pod_manager)
    try:
        # When it is pinned, then the end of its last kernel leaves it running
        assert pod_manager.pin("spod", "cluster").pinned is True
        assert [i.pinned for i in pod_manager.list() if i.name == "spod"] == [True]
        await one_kernel(pod_manager, "spod", "print(1)")
        assert cluster.names("pods") == ["gpudev-spod"]
        # When it is unpinned and its last kernel changed a file outside its workspace, then
        # it keeps running, with the change (a pod is not stopped and kept); removed, its pin
        # is gone
        assert pod_manager.pin("spod", "cluster", pinned=False).pinned is False
        await one_kernel(pod_manager, "spod", "open('/opt/tools/model.cfg', 'w').write('lr = 0.1')")
        assert cluster.names("pods") == ["gpudev-spod"]
        assert pod_manager.get("spod", "cluster").state == "running"
        pod_manager.pin("spod", "cluster")
        pod_manager.remove("spod", "cluster", force=True)
        assert "spod" not in pod_manager.ledger.pinned("cluster")
        # When the last kernel of an unchanged, unpinned pod ends (a pin left by a pod of its
        # name deleted behind gpudev's back is not its own), then the pod is deleted (its
        # GPUs freed) and its workspace claim kept
        pod_manager.ledger.set_pinned("cluster", "spod2", True)
        assert (
            pod_manager.start(StartRequest("tools", host="cluster", name="spod2")).pinned is False
        )
        await one_kernel(pod_manager, "spod2", "print(2)")
        assert cluster.names("pods") == []
        assert "gpudev-ws-spod2" in cluster.names("persistentvolumeclaims")
        with pytest.raises(NotFound):
            pod_manager.get("spod2", "cluster")
    finally:
        provisioner.set_manager(None)


def test_a_pod_made_for_one_kernel_is_not_pinned(
    pod_manager: DevContainers, cluster: FakeCluster
) -> None:
    # Given a pod labelled as one kernel's (as the picker makes them)
    pod_manager.start(StartRequest("default", host="cluster", name="own"), None)
    cluster.objects[("pods", "team-ml", "gpudev-own")]["metadata"]["labels"][K_KERNEL] = "k1"
    # When it is pinned, then that is refused: it ends with its kernel
    with pytest.raises(BadRequest, match="belongs to one kernel"):
        pod_manager.pin("own", "cluster")


async def test_a_kernel_of_an_environment_on_the_cluster_has_a_pod_of_its_own(
    pod_manager: DevContainers, cluster: FakeCluster, tools_image: str
) -> None:
    # Given change tracking and an environment whose host is the cluster
    track_changes(pod_manager)
    environment(
        pod_manager,
        "onk8s",
        {"image": tools_image, "customizations": {"gpudev": {"host": "cluster"}}},
    )
    provisioner.set_manager(pod_manager)
    try:
        for change in (False, True):
            # When a kernel of it starts from the picker
            km = kernel_manager(pod_manager, "gpudev-onk8s")
            await km.start_kernel()
            client = km.client()
            client.start_channels()
            try:
                await client.wait_for_ready(timeout=60)
                # Then it runs in a pod of its own on the cluster, as the pod's user
                (pod_name,) = cluster.names("pods")
                pod = cluster.objects[("pods", "team-ml", pod_name)]
                assert pod["metadata"]["labels"][K_KERNEL] == km.kernel_id
                code = "import os; print(os.getuid())"
                if change:  # a file written outside the workspace: lost with the pod
                    code += "; open('/opt/tools/model.cfg', 'w').write('lr = 0.1')"
                out, reply = await run(client, code)
                assert (reply["status"], out.strip()) == ("ok", "1000"), reply
            finally:
                client.stop_channels()
                await km.shutdown_kernel()
            if not change:
                # And at its end the pod is deleted (its GPUs freed), its workspace claim kept
                assert cluster.names("pods") == []
                assert cluster.names("persistentvolumeclaims")
            else:
                # Unless files outside its workspace changed: then it keeps running, with
                # the change, until it is committed or removed
                assert cluster.names("pods") == [pod_name]
                name = pod["metadata"]["annotations"][A_NAME]
                with pytest.raises(Conflict, match=r"model\.cfg"):
                    pod_manager.remove(name, "cluster")
                pod_manager.remove(name, "cluster", force=True)
    finally:
        provisioner.set_manager(None)


def test_a_web_port_of_a_pod_is_reached_at_its_ip(
    pod_manager: DevContainers, cluster: FakeCluster
) -> None:
    pod_manager.start(StartRequest("default", host="cluster", name="web"), None, caller=ALICE)
    pods = pod_manager.pods(pod_manager.host_pool.get("cluster"))
    serve = "nohup python3 -m http.server 8000 >/dev/null 2>&1 </dev/null & echo $!"
    assert (
        pods.cluster.exec("gpudev-web", ["sh", "-c", serve], timeout=30, limit=100).exit_code == 0
    )
    pod_manager.set_web_port("web", 8000, "cluster", caller=ALICE)
    address, port = pod_manager.proxy_target("web", 8000, "cluster", caller=ALICE)
    for _ in range(100):
        try:
            with urllib.request.urlopen(f"http://{address}:{port}/", timeout=5) as answer:
                assert answer.status == 200
                break
        except OSError:
            time.sleep(0.1)
    else:
        pytest.fail("the pod's web server did not answer at its IP")


def test_a_terminal_in_a_pod_is_a_shell_there(
    pod_manager: DevContainers, cluster: FakeCluster, tmp_path: Path
) -> None:
    pod_manager.start(StartRequest("default", host="cluster", name="term"), None, caller=ALICE)
    argv = pod_manager.terminal_command("term", "cluster", caller=ALICE)
    # gpudev's own bridge, addressed by configuration and the pod's name only
    assert argv[1:3] == ["-m", "jupyter_gpudev.containers.pod_terminal"]
    assert argv[3:] == [
        "--host",
        "cluster",
        "--url",
        "k8s://lab-ml/team-ml",
        "--pod",
        "gpudev-term",
    ]
    # When a terminal runs it (as Jupyter's terminals do: in a pseudo-terminal)
    shell = PtyProcess.spawn(argv, env=dict(os.environ), dimensions=(30, 100))
    try:
        seen = b""

        def until(text: bytes) -> None:
            nonlocal seen
            deadline = time.monotonic() + 30
            while text not in seen:
                assert time.monotonic() < deadline, seen[-500:]
                if select.select([shell.fd], [], [], 0.5)[0]:
                    seen += shell.read(4096)

        # Then typed lines run in the pod, as its user, in a terminal of the browser's size
        until(b"$ ")  # the shell's prompt (what is typed before it may be dropped)
        shell.write(b"echo hello-$((6*7)) $(id -u) $(stty size) $TERM\r")
        until(b"hello-42 1000 30 100 xterm-256color")
        shell.setwinsize(40, 120)
        time.sleep(0.5)
        shell.write(b"echo size $(stty size)\r")
        until(b"size 40 120")
        # And the shell's exit ends the terminal with its code
        shell.write(b"exit 3\r")
        deadline = time.monotonic() + 30
        while shell.isalive():
            assert time.monotonic() < deadline
            with contextlib.suppress(EOFError):
                shell.read(4096)
        assert shell.exitstatus == 3
    finally:
        if shell.isalive():
            shell.terminate(force=True)


def test_a_refusing_cluster_does_not_hide_the_docker_hosts(
    pod_manager: DevContainers, cluster: FakeCluster, tmp_path: Path
) -> None:
    # Given the local engine and a cluster whose API server refuses gpudev (no RBAC)
    cluster.forbid[("GET", "pods")] = 'pods is forbidden: User "gpudev" cannot list pods'
    config = copy.deepcopy(pod_manager.config)
    config.HostPool.include_local = True
    pool = HostPool(config=config, log=LOG)
    both = DevContainers(root_dir=pod_manager.root_dir, host_pool=pool, config=config)
    try:
        # When a Docker container is started, listed and found by name (no --host)
        both.start(StartRequest("default", name="beside-k8s"), None, caller=ALICE)
        # Then the cluster's refusal is only skipped
        assert "beside-k8s" in [i.name for i in both.list(caller=ALICE)]
        assert both.get("beside-k8s", caller=ALICE).host == pool.local_name
        with pytest.raises(NotFound):
            both.get("nowhere", caller=ALICE)
        both.remove("beside-k8s", force=True, caller=ALICE)
    finally:
        pool.close()
