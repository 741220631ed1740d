"""A dev container on a Kubernetes host, its pod run by the real Docker engine (issue #20).

The API server is ``tests/k8s_api.py``'s stand-in (no control plane can run here), reached
through the real ``kubernetes`` client; its pods are real containers of the real image
(``DockerKubelet``): the exec protocol, the lifecycle commands, GNU find's listing as the
pod's user and the comparison of two listings all run for real."""

from __future__ import annotations

import json
import logging
import secrets
from collections.abc import Iterator
from pathlib import Path

import docker
import pytest
from traitlets.config import Config

from jupyter_gpudev.access import Caller
from jupyter_gpudev.containers import DevContainers, StartRequest
from jupyter_gpudev.engine import HostPool
from jupyter_gpudev.errors import Conflict
from tests.k8s_api import APIServer, DockerKubelet, FakeCluster

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
def manager(
    cluster: FakeCluster, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> Iterator[DevContainers]:
    server = APIServer(cluster)
    monkeypatch.setenv("KUBECONFIG", str(server.kubeconfig(tmp_path / "kubeconfig")))
    monkeypatch.delenv("KUBERNETES_SERVICE_HOST", raising=False)
    config = Config()
    config.HostPool.include_local = False
    config.HostPool.hosts = {"cluster": "k8s://lab-ml/team-ml"}
    config.HostPool.hosts_file = str(tmp_path / "hosts.json")
    config.GPUInventory.backend = "none"
    config.DevContainers.state_dir = str(tmp_path / "state")
    config.DevContainers.pod_poll_interval = 0.05
    root = tmp_path / "work"
    root.mkdir()
    pool = HostPool(config=config, log=LOG)
    yield DevContainers(root_dir=root, host_pool=pool, config=config)
    pool.close()
    server.close()


def test_a_pods_lifecycle_commands_and_changes_run_in_its_image(
    manager: DevContainers, cluster: FakeCluster, tmp_path: Path
) -> None:
    # Given an environment whose postCreateCommand writes a file outside the workspace
    folder = manager.root_dir / ".devcontainer" / "k8s"
    folder.mkdir(parents=True)
    image = manager.environments.get("default", manager.root_dir).image
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
    info = manager.start(
        StartRequest("k8s", host="cluster", name="real-pod"), said.append, caller=ALICE
    )
    # Then the command ran in the pod as its user (1000, never root), its words reported
    assert info.state == "running"
    assert ("postCreateCommand", "set up as 1000") in [(e["stage"], e["message"]) for e in said]
    assert not [w for w in info.warnings if "listed" in w], info.warnings
    # (what the setup wrote is in the listing taken after it: not a change of the user's)
    pods = manager.pods(manager.host_pool.get("cluster"))
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
        manager.remove("real-pod", "cluster", caller=ALICE)
    changes = caught.value.details["changes"]
    assert "/tmp/made-by-setup" not in changes
    assert "/tmp/tool" in changes
    assert "/tmp/tool/bin" in changes
    assert "/tmp/a name\nwith a newline" in changes
    assert not [c for c in changes if c.startswith(workspace)]
    # And with force the pod's container is gone, the workspace's files kept
    manager.remove("real-pod", "cluster", force=True, caller=ALICE)
    assert cluster.names("pods") == []
    assert not cluster.kubelet.containers
    kept = list((tmp_path / "volumes").glob("*-workspace/notes.txt"))
    assert [p.read_text() for p in kept] == ["notes\n"]


def test_an_unchanged_pod_is_removed_without_force(
    manager: DevContainers, cluster: FakeCluster
) -> None:
    manager.start(StartRequest("default", host="cluster", name="plain"), None, caller=ALICE)
    manager.remove("plain", "cluster", caller=ALICE)
    assert cluster.names("pods") == []
