"""Dev containers as pods on a Kubernetes host (issue #20), through the real ``kubernetes``
client and a real kubeconfig against the API server of ``tests/k8s_api.py`` (no control plane
can run here: what it stands in for is said there)."""

from __future__ import annotations

import copy
import json
import logging
import socket
import subprocess
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any
from urllib.parse import parse_qsl

import pytest

from jupyter_gpudev.access import Caller
from jupyter_gpudev.containers import DevContainers, StartRequest
from jupyter_gpudev.containers.reconcile import process_identity
from jupyter_gpudev.engine import Host, HostPool, HostSpec
from jupyter_gpudev.errors import Conflict, EngineError, GPUDevError, ImageError, NotFound
from jupyter_gpudev.k8s.listing import LISTING_ARGV
from jupyter_gpudev.kernels.kernelspecs import GPUDevKernelSpecManager
from jupyter_gpudev.kernels.provisioner import set_manager
from jupyter_gpudev.labels import A_LEDGER, A_PROCESS, K_KERNEL
from tests.k8s_api import TOKEN, UNSCHEDULABLE, FakeCluster, cluster_manager

LOG = logging.getLogger("test")
NS = "/api/v1/namespaces/team-ml"
ALICE = Caller("alice")
BOB = Caller("bob")


@pytest.fixture
def pod_manager(
    cluster: FakeCluster, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> Iterator[DevContainers]:
    """A manager whose one host is ``cluster`` (``tests/k8s_api.py``'s ``cluster_manager``),
    a start giving up on a pod not running after 0.5 s."""
    with cluster_manager(cluster, tmp_path, monkeypatch, pod_start_timeout=0.5) as made:
        yield made


def start(
    manager: DevContainers, name: str, caller: Caller = ALICE, **asked: Any
) -> tuple[Any, list[dict[str, Any]]]:
    said: list[dict[str, Any]] = []
    info = manager.start(
        StartRequest("default", host="cluster", name=name, **asked),
        said.append,
        caller=caller,
    )
    return info, said


def test_a_start_creates_the_objects_and_waits_for_the_pod(
    pod_manager: DevContainers, cluster: FakeCluster
) -> None:
    # When alice starts a dev container with a GPU on the cluster
    info, said = start(pod_manager, "train", gpus=1)
    # Then the claim, the pod's NetworkPolicy, the pod and its Service were created in that
    # order, each valid for the schemas (the server answers 422 otherwise), and the policy
    # made the pod's once it was there
    policies = "/apis/networking.k8s.io/v1/namespaces/team-ml/networkpolicies"
    assert cluster.writes() == [
        ("POST", f"{NS}/persistentvolumeclaims"),
        ("POST", policies),
        ("POST", f"{NS}/pods"),
        ("PATCH", f"{policies}/gpudev-train"),
        ("POST", f"{NS}/services"),
    ]
    pod = cluster.objects[("pods", "team-ml", "gpudev-train")]
    policy = cluster.objects[("networkpolicies", "team-ml", "gpudev-train")]
    assert policy["metadata"]["ownerReferences"] == [
        {"apiVersion": "v1", "kind": "Pod", "name": "gpudev-train", "uid": pod["metadata"]["uid"]}
    ]
    assert policy["spec"]["ingress"] == [
        {"from": [{"podSelector": {"matchLabels": {"gpudev.jupyter.org/role": "server"}}}]}
    ]
    assert pod["spec"]["containers"][0]["resources"]["limits"]["nvidia.com/gpu"] == "1"
    # And it is reported running, as alice's, where the scheduler put it
    assert (info.name, info.host, info.state, info.owner) == (
        "train",
        "cluster",
        "running",
        "alice",
    )
    assert info.status == "Running on node gpu-a100-1"
    assert info.environment == "default"
    assert info.started_at == "2026-11-25T10:00:02Z"
    assert any("package-manager command log" in w for w in info.warnings)
    assert [e["stage"] for e in said][-1] == "ready"


def test_a_pod_admits_the_peers_its_cluster_is_configured_with(
    cluster: FakeCluster, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Given a cluster whose gpudev server runs in the Hub's namespace
    server = {
        "namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": "jhub"}},
        "podSelector": {"matchLabels": {"app": "gpudev"}},
    }
    with cluster_manager(
        cluster, tmp_path, monkeypatch, host={"ingress_from": [server]}, pod_start_timeout=0.5
    ) as manager:
        # When a dev container starts there
        start(manager, "hubbed")
    # Then its pod admits that server only
    policy = cluster.objects[("networkpolicies", "team-ml", "gpudev-hubbed")]
    assert policy["spec"]["ingress"] == [{"from": [server]}]


def test_a_network_policy_left_from_before_is_taken_over_with_the_hosts_peers(
    pod_manager: DevContainers, cluster: FakeCluster
) -> None:
    # Given alice's NetworkPolicy of a dev container's name that no pod owns, letting anyone in
    # (one applied from a dry run, or left by a start that died before owning it)
    start(pod_manager, "again")
    left = cluster.objects[("networkpolicies", "team-ml", "gpudev-again")]
    del left["metadata"]["ownerReferences"]
    left["spec"]["ingress"] = [{"from": [{"ipBlock": {"cidr": "0.0.0.0/0"}}]}]
    pod_manager.remove("again", "cluster", force=True, caller=ALICE)
    assert cluster.names("networkpolicies") == ["gpudev-again"]
    # When a dev container of that name starts again
    start(pod_manager, "again")
    # Then the policy is its pod's, and lets in gpudev's server only
    policy = cluster.objects[("networkpolicies", "team-ml", "gpudev-again")]
    pod = cluster.objects[("pods", "team-ml", "gpudev-again")]
    assert [r["uid"] for r in policy["metadata"]["ownerReferences"]] == [pod["metadata"]["uid"]]
    assert policy["spec"]["ingress"] == [
        {"from": [{"podSelector": {"matchLabels": {"gpudev.jupyter.org/role": "server"}}}]}
    ]


def test_pods_are_listed_for_their_owner_only(pod_manager: DevContainers) -> None:
    start(pod_manager, "alices")
    start(pod_manager, "bobs", caller=BOB)
    assert [i.name for i in pod_manager.list(host="cluster", caller=ALICE)] == ["alices"]
    assert [i.name for i in pod_manager.list(host="cluster", caller=BOB)] == ["bobs"]
    everyone = pod_manager.list(host="cluster", caller=Caller("admin", admin=True))
    assert [(i.name, i.owner) for i in everyone] == [("alices", "alice"), ("bobs", "bob")]
    # Another user's pod is not found, exactly like one that does not exist
    assert pod_manager.get("alices", "cluster", caller=ALICE).state == "running"
    with pytest.raises(NotFound):
        pod_manager.get("alices", "cluster", caller=BOB)
    with pytest.raises(NotFound):
        pod_manager.remove("alices", "cluster", force=True, caller=BOB)


def test_a_pod_is_removed_with_force_and_its_workspace_claim_kept(
    pod_manager: DevContainers, cluster: FakeCluster
) -> None:
    start(pod_manager, "work")
    # A pod cannot be stopped and kept, and removing it without force is refused: its changes
    # outside the workspace cannot be read yet
    with pytest.raises(Conflict, match="not stopped and kept"):
        pod_manager.stop("work", "cluster", caller=ALICE)
    with pytest.raises(Conflict, match="were not listed when it started"):
        pod_manager.remove("work", "cluster", caller=ALICE)
    assert cluster.names("pods") == ["gpudev-work"]
    # With force the pod, its Service and NetworkPolicy go; the workspace claim stays
    assert cluster.names("networkpolicies") == ["gpudev-work"]
    pod_manager.remove("work", "cluster", force=True, caller=ALICE)
    assert cluster.names("pods") == []
    assert cluster.names("services") == []
    assert cluster.names("networkpolicies") == []
    assert cluster.names("persistentvolumeclaims") == ["gpudev-ws-work"]
    # And a new start of that name finds the claim and says so
    again, _ = start(pod_manager, "work")
    assert any("gpudev-ws-work was kept from before" in w for w in again.warnings)
    assert cluster.names("persistentvolumeclaims") == ["gpudev-ws-work"]


def test_an_unschedulable_pod_says_why_and_leaves_nothing(
    pod_manager: DevContainers, cluster: FakeCluster
) -> None:
    cluster.scheduler = "unschedulable"
    said: list[dict[str, Any]] = []
    with pytest.raises(Conflict) as caught:
        pod_manager.start(
            StartRequest("default", host="cluster", name="big", gpus=4), said.append, caller=ALICE
        )
    # The scheduler's own words, while waiting and in the error
    assert UNSCHEDULABLE in caught.value.message
    assert "The cluster could not place 'big'" in caught.value.message
    assert any(e["stage"] == "schedule" and UNSCHEDULABLE in e["message"] for e in said)
    # And what the start created is gone, the claim it made too (nothing was in it)
    assert cluster.names("pods") == []
    assert cluster.names("services") == []
    assert cluster.names("networkpolicies") == []
    assert cluster.names("persistentvolumeclaims") == []


def test_a_failed_start_keeps_a_workspace_claim_from_before(
    pod_manager: DevContainers, cluster: FakeCluster
) -> None:
    start(pod_manager, "keep")
    pod_manager.remove("keep", "cluster", force=True, caller=ALICE)
    cluster.scheduler = "unschedulable"
    with pytest.raises(Conflict):
        start(pod_manager, "keep", gpus=8)
    assert cluster.names("pods") == []
    assert cluster.names("persistentvolumeclaims") == ["gpudev-ws-keep"]


def test_another_users_claim_of_that_name_is_never_mounted(
    pod_manager: DevContainers, cluster: FakeCluster
) -> None:
    start(pod_manager, "shared-name", caller=BOB)
    pod_manager.remove("shared-name", "cluster", force=True, caller=BOB)
    with pytest.raises(Conflict, match="is not 'alice''s"):
        start(pod_manager, "shared-name")
    # No pod was made; bob's claim is untouched
    assert cluster.names("pods") == []
    claim = cluster.objects[("persistentvolumeclaims", "team-ml", "gpudev-ws-shared-name")]
    assert claim["metadata"]["annotations"]["gpudev.jupyter.org/owner"] == "bob"


def test_an_image_that_cannot_be_pulled_fails_at_once_and_cleans_up(
    pod_manager: DevContainers, cluster: FakeCluster
) -> None:
    cluster.scheduler = "bad-image"
    with pytest.raises(ImageError, match="ErrImagePull") as caught:
        start(pod_manager, "pull")
    assert "not found" in caught.value.message
    assert cluster.names("pods") == []
    assert cluster.names("persistentvolumeclaims") == []


def test_a_slow_pod_is_waited_for_with_progress(
    pod_manager: DevContainers, cluster: FakeCluster
) -> None:
    cluster.scheduler = "slow"
    info, said = start(pod_manager, "slow")
    assert info.state == "running"
    assert any(e["stage"] == "pod" and "Pending" in e["message"] for e in said)


def test_a_refused_create_says_the_clusters_reason_never_the_token(
    pod_manager: DevContainers, cluster: FakeCluster
) -> None:
    quota = (
        'pods "gpudev-quota" is forbidden: exceeded quota: gpus, requested: '
        "requests.nvidia.com/gpu=1, used: requests.nvidia.com/gpu=8, limited: "
        "requests.nvidia.com/gpu=8"
    )
    cluster.forbid[("POST", "pods")] = quota
    with pytest.raises(EngineError) as caught:
        start(pod_manager, "quota", gpus=1)
    assert "exceeded quota" in caught.value.message
    assert TOKEN not in str(caught.value.to_json())
    # The claim and the policy made before the pod was refused are deleted again
    assert cluster.names("persistentvolumeclaims") == []
    assert cluster.names("networkpolicies") == []


def test_a_pod_that_exists_is_a_conflict_and_is_not_touched(
    pod_manager: DevContainers, cluster: FakeCluster
) -> None:
    start(pod_manager, "twice")
    before = dict(cluster.objects[("pods", "team-ml", "gpudev-twice")])
    with pytest.raises(Conflict, match="already exists"):
        start(pod_manager, "twice")
    assert cluster.objects[("pods", "team-ml", "gpudev-twice")] == before
    assert cluster.names("services") == ["gpudev-twice"]
    # (its NetworkPolicy too: the start that failed did not make it, so did not undo it)
    assert cluster.names("networkpolicies") == ["gpudev-twice"]


def test_an_environment_on_the_cluster_starts_a_kernels_own_pod_there(
    pod_manager: DevContainers, cluster: FakeCluster
) -> None:
    # Given an environment whose host is the cluster (customizations.gpudev.host)
    environment(pod_manager, "onk8s", customizations={"gpudev": {"host": "cluster"}})
    # A kernel's pod whose files cannot be listed (no GNU find) could never be told unchanged,
    # so never deleted at the kernel's end: its start fails and deletes it
    with pytest.raises(EngineError, match="could not be listed"):
        pod_manager.start(StartRequest("onk8s", name="kernel-k0", kernel_id="k0"), None)
    assert cluster.names("pods") == []
    cluster.exec_handler = PodFiles()
    # When a kernel's own dev container starts without a host named (as the picker does)
    info = pod_manager.start(StartRequest("onk8s", name="kernel-k1", kernel_id="k1"), None)
    # Then it is a pod on the cluster, labelled as that kernel's: not offered to others
    assert (info.host, info.pod, info.kernel_id) == ("cluster", True, "k1")
    pod = cluster.objects[("pods", "team-ml", "gpudev-kernel-k1")]
    assert pod["metadata"]["labels"][K_KERNEL] == "k1"
    set_manager(pod_manager)
    try:
        assert GPUDevKernelSpecManager()._shared_containers() == []
    finally:
        set_manager(None)
    # And the dry run names the cluster too
    plan = pod_manager.plan(StartRequest("onk8s", name="other"))
    assert plan["host"] == "cluster", plan


def test_a_cluster_without_credentials_is_unreachable_not_a_crash(
    pod_manager: DevContainers,
    cluster: FakeCluster,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    config = tmp_path / "kubeconfig"
    config.write_text(config.read_text().replace(TOKEN, "wrong"))
    fresh = DevContainers(
        root_dir=pod_manager.root_dir,
        host_pool=HostPool(config=pod_manager.config, log=LOG),
        config=pod_manager.config,
    )
    with pytest.raises(GPUDevError, match="refused gpudev's credentials") as caught:
        fresh.list(host="cluster", caller=ALICE)
    assert "wrong" not in caught.value.message
    fresh.host_pool.close()


# -- inside a pod: exec, lifecycle commands, its changes ---------------------------------------

#: (kind, size, mtime, mode, link target) of each path of an image, as find lists it.
IMAGE_TREE = {
    "/": ("d", 4096, 1.0, "755", ""),
    "/etc": ("d", 4096, 1.0, "755", ""),
    "/etc/os-release": ("f", 267, 1.0, "644", ""),
    "/usr": ("d", 4096, 1.0, "755", ""),
    "/usr/bin": ("d", 4096, 1.0, "755", ""),
    "/usr/bin/python3": ("l", 10, 1.0, "777", "python3.11"),
    "/workspace": ("d", 4096, 1.0, "755", ""),
    "/proc": ("d", 0, 5.0, "555", ""),
}


class PodFiles:
    """What runs in the pods of ``FakeCluster``: ``find`` as LISTING_ARGV lists a tree per pod;
    ``touch PATH`` adds a file to it (the workspace mount's files never show: -xdev);
    ``say WORDS`` prints them; ``fail N`` exits with N; anything else does not exist."""

    def __init__(self) -> None:
        self.trees: dict[str, dict[str, tuple[str, int, float, str, str]]] = {}

    def __call__(
        self, pod: dict[str, Any], argv: list[str], stdin: bytes | None = None
    ) -> tuple[int, bytes, bytes]:
        tree = self.trees.setdefault(pod["metadata"]["name"], dict(IMAGE_TREE))
        if tuple(argv) == LISTING_ARGV:
            out = b"".join(
                b"\0".join(str(v).encode() for v in (k, s, m, mode, path, t)) + b"\0"
                for path, (k, s, m, mode, t) in sorted(tree.items())
            )
            return 1, out, b"find: '/root': Permission denied\n"
        if argv[0] == "touch":
            tree[argv[1]] = ("f", 0, 9.0, "644", "")
            return 0, b"", b""
        if argv[0] == "echo-input":
            return 0, stdin or b"", b""
        if argv[0] == "say":
            return 0, " ".join(argv[1:]).encode() + b"\n", b""
        if argv[0] == "fail":
            return int(argv[1]), b"", b"it failed\n"
        raise FileNotFoundError(argv[0])


def environment(manager: DevContainers, name: str, **fields: Any) -> None:
    folder = manager.root_dir / ".devcontainer" / name
    folder.mkdir(parents=True)
    image = manager.environments.get("default", manager.root_dir).image
    (folder / "devcontainer.json").write_text(json.dumps({"image": image, **fields}))


def test_exec_reads_output_exit_code_and_refusals(
    pod_manager: DevContainers, cluster: FakeCluster
) -> None:
    cluster.exec_handler = PodFiles()
    start(pod_manager, "ex")
    pods = pod_manager.pods(pod_manager.host_pool.get("cluster"))
    ran = pods.cluster.exec("gpudev-ex", ["say", "hello", "pod"], timeout=5, limit=1000)
    assert (ran.exit_code, ran.stdout, ran.cut) == (0, b"hello pod\n", False)
    assert cluster.execs[-1] == ("gpudev-ex", ["say", "hello", "pod"])
    # Input is sent on channel 0
    given = pods.cluster.exec(
        "gpudev-ex", ["echo-input"], timeout=5, limit=1000, stdin=b'{"key": "s3cret"}'
    )
    assert given.stdout == b'{"key": "s3cret"}'
    assert "s3cret" not in cluster.requests[-1][1]  # not in the URL (the audit log)
    # A large input goes in frames the API server takes (this one checks their size)
    large = bytes(range(256)) * (9 << 10) + b"end"  # 2.25 MiB
    echoed = pods.cluster.exec("gpudev-ex", ["echo-input"], timeout=30, limit=4 << 20, stdin=large)
    assert echoed.stdout == large
    assert cluster.stdin_frames[-3:] == [1 << 20, 1 << 20, len(large) - (2 << 20)]
    failed = pods.cluster.exec("gpudev-ex", ["fail", "3"], timeout=5, limit=1000)
    assert (failed.exit_code, failed.stderr) == (3, b"it failed\n")
    # Output past the limit is cut, never all held
    cut = pods.cluster.exec("gpudev-ex", ["say", "x" * 5000], timeout=5, limit=100)
    assert (cut.exit_code, len(cut.stdout), cut.cut) == (None, 100, True)
    # A program the pod does not have, in the server's words
    with pytest.raises(EngineError, match="executable file not found"):
        pods.cluster.exec("gpudev-ex", ["nothing-here"], timeout=5, limit=100)
    # A pod that is not there
    with pytest.raises(NotFound, match="no pod for an exec in gpudev-gone"):
        pods.cluster.exec("gpudev-gone", ["say"], timeout=5, limit=100)


def test_lifecycle_commands_run_by_exec_in_the_pod(
    pod_manager: DevContainers, cluster: FakeCluster
) -> None:
    files = PodFiles()
    cluster.exec_handler = files
    environment(
        pod_manager,
        "setup",
        postCreateCommand={"a": ["say", "installing"], "b": ["fail", "2"]},
        postStartCommand=["touch", "/opt/ready"],
    )
    said: list[dict[str, Any]] = []
    info = pod_manager.start(
        StartRequest("setup", host="cluster", name="lc"), said.append, caller=ALICE
    )
    assert ("postCreateCommand", "installing") in [(e["stage"], e["message"]) for e in said]
    assert "postCreateCommand (b) exited with 2" in info.warnings
    assert "/opt/ready" in files.trees["gpudev-lc"]
    # The listing is taken after them: what they made is not a change of the user's
    pod_manager.remove("lc", "cluster", caller=ALICE)
    assert cluster.names("pods") == []


def test_a_pod_with_changes_is_removed_only_with_force(
    pod_manager: DevContainers, cluster: FakeCluster
) -> None:
    files = PodFiles()
    cluster.exec_handler = files
    start(pod_manager, "chg")
    # The user writes in the workspace (a mount: not listed) and installs a file in /opt
    files.trees["gpudev-chg"]["/opt"] = ("d", 4096, 9.0, "755", "")
    files.trees["gpudev-chg"]["/opt/tool"] = ("f", 10, 9.0, "755", "")
    pod = cluster.objects[("pods", "team-ml", "gpudev-chg")]
    workspace = pod["spec"]["containers"][0]["volumeMounts"][0]["mountPath"]
    files.trees["gpudev-chg"][workspace] = ("d", 4096, 9.0, "755", "")
    del files.trees["gpudev-chg"]["/etc/os-release"]
    with pytest.raises(Conflict, match="3 uncommitted change") as caught:
        pod_manager.remove("chg", "cluster", caller=ALICE)
    assert caught.value.details["changes"] == ["/etc/os-release", "/opt", "/opt/tool"]
    assert cluster.names("pods") == ["gpudev-chg"]
    pod_manager.remove("chg", "cluster", force=True, caller=ALICE)
    assert cluster.names("pods") == []
    # Its listing is forgotten with it
    assert not list((Path(pod_manager.state_dir) / "pod-listings").rglob("*-*"))


def test_kernel_pods_a_dead_server_left_are_deleted_unless_changed(
    pod_manager: DevContainers, cluster: FakeCluster
) -> None:
    # Given two kernels' own pods and a pod kernels share, made by this server process
    files = PodFiles()
    cluster.exec_handler = files
    environment(pod_manager, "onk8s", customizations={"gpudev": {"host": "cluster"}})
    for kernel in ("k1", "k2", "k3"):
        pod_manager.start(StartRequest("onk8s", name=f"kernel-{kernel}", kernel_id=kernel), None)
    pod_manager.start(StartRequest("onk8s", name="shared"), None)
    process = process_identity()  # this process: machine, PID, start time, boot
    pods = {name: cluster.objects[("pods", "team-ml", name)] for name in cluster.names("pods")}
    assert pods["gpudev-kernel-k1"]["metadata"]["annotations"][A_PROCESS] == process
    assert A_PROCESS not in pods["gpudev-shared"]["metadata"]["annotations"]
    # While the server that made them runs, none is an orphan
    assert pod_manager.stop_orphan_kernels() == []
    # When that process is gone (a crash), and one of the pods has a change outside its
    # workspace
    ended = subprocess.Popen(["true"])  # noqa: S607 - a pid that no longer runs
    ended.wait()
    for pod in pods.values():
        pod["metadata"]["annotations"][A_PROCESS] = f"{socket.gethostname()}:{ended.pid}"
    files.trees["gpudev-kernel-k2"]["/opt/model.cfg"] = ("f", 10, 9.0, "644", "")
    # (and one is another server's on this machine: another lease ledger, another user's)
    pods["gpudev-kernel-k3"]["metadata"]["annotations"][A_LEDGER] = "another-ledger"
    # Then the unchanged kernel pod is deleted (its GPUs freed), the changed one kept running,
    # and the shared pod left alone
    assert pod_manager.stop_orphan_kernels() == ["kernel-k1"]
    assert cluster.names("pods") == ["gpudev-kernel-k2", "gpudev-kernel-k3", "gpudev-shared"]


def test_a_pod_that_could_not_be_listed_asks_for_force(
    pod_manager: DevContainers, cluster: FakeCluster
) -> None:
    # No find in the image (nothing answers an exec)
    cluster.exec_handler = lambda _pod, argv: (_ for _ in ()).throw(FileNotFoundError(argv[0]))
    info, _ = start(pod_manager, "nofind")
    assert any("removing it will need force" in w for w in info.warnings)
    with pytest.raises(Conflict, match="were not listed when it started"):
        pod_manager.remove("nofind", "cluster", caller=ALICE)
    pod_manager.remove("nofind", "cluster", force=True, caller=ALICE)


def test_a_pods_output_is_read_bounded(pod_manager: DevContainers, cluster: FakeCluster) -> None:
    start(pod_manager, "talk")
    cluster.outputs["gpudev-talk"] = b"".join(b"line %d\n" % n for n in range(1, 101))
    assert (
        "".join(pod_manager.logs("talk", "cluster", tail=2, caller=ALICE)) == "line 99\nline 100\n"
    )
    pod_manager.max_log_bytes = 20
    cut = "".join(pod_manager.logs("talk", "cluster", caller=ALICE))
    assert cut.startswith("line 1\nline 2\nline 3\n")
    assert "the output is cut here, after 20 bytes" in cut
    # Followed, it comes as the server sends it (here: all of it, then the pod's end)
    followed = "".join(pod_manager.logs("talk", "cluster", follow=True, tail=1, caller=ALICE))
    assert followed == "line 100\n"
    assert ("follow", "true") in parse_qsl(cluster.requests[-1][1].split("?", 1)[1])
    with pytest.raises(NotFound):
        list(pod_manager.logs("talk", "cluster", caller=BOB))


def test_a_start_without_a_host_says_how_to_start_on_the_cluster(
    pod_manager: DevContainers, cluster: FakeCluster
) -> None:
    # Two hosts, neither asked for: the cluster is not chosen behind the user's back
    config = copy.deepcopy(pod_manager.config)
    config.HostPool.hosts = {"cluster": "k8s://lab-ml/team-ml", "engine": "tcp://127.9.9.9:1"}
    pool = HostPool(config=config, log=LOG)
    two = DevContainers(root_dir=pod_manager.root_dir, host_pool=pool, config=config)
    try:
        with pytest.raises(GPUDevError, match="a Kubernetes cluster: start there with --host"):
            two.start(StartRequest("default"), None, caller=ALICE)
    finally:
        pool.close()
    assert cluster.writes() == []


def test_the_kernel_picker_offers_running_pods(
    pod_manager: DevContainers, cluster: FakeCluster
) -> None:
    # A running pod of the server's user, whom the picker lists for
    pod_manager.start(StartRequest("default", host="cluster", name="with-kernels"), None)
    set_manager(pod_manager)
    try:
        entries = GPUDevKernelSpecManager()._shared_containers()
    finally:
        set_manager(None)
    assert [(e.name, e.host) for e in entries] == [("with-kernels", "cluster")]


def test_web_ports_of_a_pod_are_served_at_its_ip(
    pod_manager: DevContainers, cluster: FakeCluster
) -> None:
    environment(pod_manager, "web", forwardPorts=[8888])
    pod_manager.start(StartRequest("web", host="cluster", name="site"), None, caller=ALICE)
    assert pod_manager.get("site", "cluster", caller=ALICE).web_ports == (8888,)
    # The environment's port is served at the pod's IP; another port only once added
    assert pod_manager.proxy_target("site", 8888, "cluster", caller=ALICE) == ("10.244.1.17", 8888)
    with pytest.raises(NotFound, match="not forwarded"):
        pod_manager.proxy_target("site", 9000, "cluster", caller=ALICE)
    added = pod_manager.set_web_port("site", 9000, "cluster", caller=ALICE)
    assert added.web_ports == (8888, 9000)
    assert [i.web_ports for i in pod_manager.list(host="cluster", caller=ALICE)] == [(8888, 9000)]
    assert pod_manager.proxy_target("site", 9000, "cluster", caller=ALICE) == ("10.244.1.17", 9000)
    # The environment's port cannot be removed; an added one can
    with pytest.raises(GPUDevError, match="always served"):
        pod_manager.set_web_port("site", 8888, "cluster", add=False, caller=ALICE)
    pod_manager.set_web_port("site", 9000, "cluster", add=False, caller=ALICE)
    with pytest.raises(NotFound):
        pod_manager.proxy_target("site", 9000, "cluster", caller=ALICE)
    # Another user reaches nothing
    with pytest.raises(NotFound):
        pod_manager.proxy_target("site", 8888, "cluster", caller=BOB)
    # A pod whose IP is odd is not connected to
    cluster.objects[("pods", "team-ml", "gpudev-site")]["status"]["podIP"] = "example.org"
    with pytest.raises(GPUDevError, match="no IP address"):
        pod_manager.proxy_target("site", 8888, "cluster", caller=ALICE)


def test_a_pod_replaced_under_the_same_name_is_not_deleted(
    pod_manager: DevContainers, cluster: FakeCluster
) -> None:
    start(pod_manager, "same")
    pods = pod_manager.pods(pod_manager.host_pool.get("cluster"))
    old = pods.find("same")
    assert old is not None
    # Another pod of that name now (the first was deleted and made again meanwhile)
    cluster.objects[("pods", "team-ml", "gpudev-same")]["metadata"]["uid"] = "0000-new-0000"
    with pytest.raises(Conflict, match="Precondition failed"):
        pods.delete(old)
    assert cluster.names("pods") == ["gpudev-same"]


def test_a_pod_address_of_this_machine_is_never_connected_to(
    pod_manager: DevContainers, cluster: FakeCluster
) -> None:
    environment(pod_manager, "web", forwardPorts=[8888])
    pod_manager.start(StartRequest("web", host="cluster", name="loop"), None, caller=ALICE)
    for address in ("127.0.0.1", "::1", "169.254.169.254", "0.0.0.0"):
        cluster.objects[("pods", "team-ml", "gpudev-loop")]["status"]["podIP"] = address
        with pytest.raises(GPUDevError, match="not one gpudev connects to"):
            pod_manager.proxy_target("loop", 8888, "cluster", caller=ALICE)


def test_a_cluster_that_refuses_is_reported_not_raised_past_other_hosts(
    pod_manager: DevContainers, cluster: FakeCluster
) -> None:
    cluster.forbid[("GET", "pods")] = 'pods is forbidden: User "gpudev" cannot list pods'
    # Alone, its refusal is the answer (not "no dev containers")
    with pytest.raises(GPUDevError, match="cannot list pods"):
        pod_manager.list(host="cluster", caller=ALICE)
    with pytest.raises(GPUDevError, match="cannot"):
        pod_manager.get("x", caller=ALICE)


def test_a_server_outside_the_cluster_reaches_pods_through_port_forwards(
    pod_manager: DevContainers, cluster: FakeCluster, monkeypatch: pytest.MonkeyPatch
) -> None:
    # A TCP echo server stands for the pod's web server (the API server stand-in forwards to it)
    server = socket.create_server(("127.0.0.1", 0))
    port = server.getsockname()[1]

    def echo() -> None:
        while True:
            try:
                conn, _ = server.accept()
            except OSError:
                return
            with conn:
                while data := conn.recv(4096):
                    conn.sendall(data.upper())

    threading.Thread(target=echo, daemon=True).start()
    try:
        environment(pod_manager, "fwd", forwardPorts=[port])
        pod_manager.start(StartRequest("fwd", host="cluster", name="far"), None, caller=ALICE)
        # Outside a cluster (a kubeconfig context), "auto" forwards; inside, with the pod's own
        # service account, it connects to pod IPs
        host = pod_manager.host_pool.get("cluster")
        pod_manager.kubernetes.port_forward = "auto"
        assert pod_manager.forwards_pods(host)
        monkeypatch.setenv("KUBERNETES_SERVICE_HOST", "10.96.0.1")
        assert pod_manager.forwards_pods(host)  # its context is not the service account
        inside = Host(
            HostSpec.parse("in", "k8s:///team-ml"), timeout=5, gpu_inventory=None, log=LOG
        )
        assert not pod_manager.forwards_pods(inside)
        monkeypatch.delenv("KUBERNETES_SERVICE_HOST")
        # When the web port is reached through the proxy's target
        address, local = pod_manager.proxy_target("far", port, "cluster", caller=ALICE)
        assert (address, local != port) == ("127.0.0.1", True)
        for _ in range(2):  # each connection is a websocket of its own
            with socket.create_connection((address, local), timeout=5) as conn:
                conn.sendall(b"hello pod")
                assert conn.recv(4096) == b"HELLO POD"
        assert cluster.forwards == [("gpudev-far", port), ("gpudev-far", port)]
        # The same local port is used again; removing the pod closes it
        assert pod_manager.proxy_target("far", port, "cluster", caller=ALICE)[1] == local
        pod_manager.remove("far", "cluster", force=True, caller=ALICE)
        with pytest.raises(ConnectionRefusedError):
            socket.create_connection((address, local), timeout=2).close()
    finally:
        server.close()
