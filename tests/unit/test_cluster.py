"""A Kubernetes cluster as a host (``engine/cluster.py``): the API server's answers read as
data, and the client layer at its HTTP seam: a local HTTP server answers as an API server would
(the answers in ``tests/fixtures/k8s/``, written from the API reference: no live cluster was
reachable), reached through a real kubeconfig by the official ``kubernetes`` client."""

from __future__ import annotations

import json
import logging
import threading
from collections.abc import Iterator
from dataclasses import replace
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any, ClassVar

import pytest

from jupyter_gpudev.cli.hosts import format_hosts
from jupyter_gpudev.containers.pod_plan import cluster_note
from jupyter_gpudev.engine import Host, HostSpec
from jupyter_gpudev.engine.cluster import Cluster, parse_cluster
from jupyter_gpudev.errors import EngineUnreachable
from jupyter_gpudev.k8s.objects import GPUAsk
from jupyter_gpudev.k8s.placement import fit
from tests.conftest import FIXTURES

ANSWERS = FIXTURES / "k8s"
TOKEN = "k8s-test-token-5f0e"  # noqa: S105 - a test credential, asserted never shown
LOG = logging.getLogger("test_cluster")


def answer(name: str) -> Any:
    return json.loads((ANSWERS / f"{name}.json").read_text())


def described() -> Any:
    return parse_cluster(
        answer("version"), answer("nodes"), answer("pods"), namespace="team-ml", context="dev"
    )


# -- the answers, read as data ------------------------------------------------------------------


def test_nodes_and_their_gpus_with_what_is_allocated() -> None:
    info = described()
    assert info.version == "v1.34.2"
    nodes = {n.name: n for n in info.nodes}
    assert list(nodes) == ["cpu-1", "gpu-a100-1", "gpu-mig-1"]
    a100 = nodes["gpu-a100-1"]
    assert (a100.ready, a100.schedulable) == (True, True)
    assert (a100.product, a100.memory_mib) == ("NVIDIA-A100-SXM4-80GB", 81920)
    # 2 of gpudev's pod + 4 of the training job (its init container's 1 does not add up)
    [whole] = a100.gpus
    assert (whole.resource, whole.capacity, whole.allocatable, whole.allocated) == (
        "nvidia.com/gpu",
        8,
        8,
        6,
    )
    mig = nodes["gpu-mig-1"]
    assert mig.schedulable is False
    assert {g.resource: (g.allocatable, g.allocated) for g in mig.gpus} == {
        "nvidia.com/gpu": (0, 0),
        "nvidia.com/mig-1g.5gb": (7, 1),
    }
    assert nodes["cpu-1"].gpus == ()
    assert nodes["cpu-1"].ready is False


def test_allocations_say_whose_only_for_gpudevs_own_pods() -> None:
    allocations = {(a.namespace, a.node, a.resource): a for a in described().allocations}
    ours = allocations[("team-ml", "gpu-a100-1", "nvidia.com/gpu")]
    assert (ours.container, ours.owner, ours.count) == ("alice-gpu", "alice@example.org", 2)
    # Another namespace's pod is another workload, whatever annotations it wrote
    theirs = allocations[("research", "gpu-a100-1", "nvidia.com/gpu")]
    assert (theirs.container, theirs.owner, theirs.count) == ("", "", 4)
    # A pod not scheduled yet holds nothing
    assert not [a for a in described().allocations if a.count == 8]


@pytest.mark.parametrize(
    "hostile",
    [
        None,
        [],
        {"items": "x"},
        {"items": [None, 3, {"metadata": "x"}, {"metadata": {"name": "\x1b[31mred"}}]},
        {"items": [{"metadata": {"name": "n"}, "status": {"capacity": {"nvidia.com/gpu": "-1"}}}]},
        {"items": [{"metadata": {"name": "n"}, "status": {"conditions": "Ready"}}]},
    ],
)
def test_odd_answers_are_skipped_never_raised(hostile: Any) -> None:
    info = parse_cluster(hostile, hostile, hostile)
    assert info.version == "?"
    for node in info.nodes:
        assert node.name == "n"
        assert node.gpus == ()


# -- the client layer at its HTTP seam ----------------------------------------------------------


class FakeAPIServer(BaseHTTPRequestHandler):
    """Answers /version, the node list and the pod list; keeps each request's path and
    Authorization header. ``status`` other than 200 answers every request with it."""

    seen: ClassVar[list[tuple[str, str]]] = []
    status: ClassVar[int] = 200

    def do_GET(self) -> None:
        FakeAPIServer.seen.append((self.path, self.headers.get("Authorization", "")))
        path = self.path.split("?", 1)[0].rstrip("/")
        name = {"/version": "version", "/api/v1/nodes": "nodes", "/api/v1/pods": "pods"}.get(path)
        body = json.dumps(
            answer(name) if name and self.status == 200 else {"kind": "Status", "code": 403}
        ).encode()
        self.send_response(self.status if name else 404)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *_args: Any) -> None:
        pass


@pytest.fixture
def api_server() -> Iterator[str]:
    FakeAPIServer.seen = []
    FakeAPIServer.status = 200
    server = ThreadingHTTPServer(("127.0.0.1", 0), FakeAPIServer)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.server_port}"
    server.shutdown()
    server.server_close()


@pytest.fixture
def kubeconfig(api_server: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    path = tmp_path / "kubeconfig"
    path.write_text(
        json.dumps(
            {
                "apiVersion": "v1",
                "kind": "Config",
                "clusters": [{"name": "lab", "cluster": {"server": api_server}}],
                "users": [{"name": "gpudev", "user": {"token": TOKEN}}],
                "contexts": [{"name": "lab-ml", "context": {"cluster": "lab", "user": "gpudev"}}],
                "current-context": "lab-ml",
            }
        )
    )
    monkeypatch.setenv("KUBECONFIG", str(path))
    monkeypatch.delenv("KUBERNETES_SERVICE_HOST", raising=False)
    return path


def cluster(url: str = "k8s://lab-ml/team-ml") -> Cluster:
    return Cluster(HostSpec.parse("cluster", url), timeout=5, log=LOG)


def test_a_cluster_is_read_with_three_requests_as_its_context_says(kubeconfig: Path) -> None:
    info = cluster().describe()
    assert info.version == "v1.34.2"
    assert (info.context, info.namespace) == ("lab-ml", "team-ml")
    assert [n.name for n in info.nodes] == ["cpu-1", "gpu-a100-1", "gpu-mig-1"]
    paths = [path for path, _ in FakeAPIServer.seen]
    assert [p.split("?")[0].rstrip("/") for p in paths] == [
        "/version",
        "/api/v1/nodes",
        "/api/v1/pods",
    ]
    # Finished pods are left out by the API server, not read
    assert "fieldSelector=status.phase%21%3DSucceeded%2Cstatus.phase%21%3DFailed" in paths[2]
    # And every request carried the context's credentials
    assert {auth for _, auth in FakeAPIServer.seen} == {f"Bearer {TOKEN}"}
    # The current context is used when the URL names none
    assert cluster("k8s:///team-ml").describe().context == ""


def test_refused_credentials_say_so_without_showing_them(kubeconfig: Path) -> None:
    FakeAPIServer.status = 403
    with pytest.raises(EngineUnreachable) as refused:
        cluster().describe()
    assert "refused gpudev's credentials (403)" in refused.value.message
    assert "RBAC" in refused.value.message
    assert TOKEN not in refused.value.message
    assert TOKEN not in json.dumps(refused.value.to_json())


def test_an_unknown_context_and_a_silent_server_are_unreachable(
    kubeconfig: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    with pytest.raises(EngineUnreachable, match="no usable kubeconfig context 'elsewhere'"):
        cluster("k8s://elsewhere/team-ml").describe()
    # A server that does not answer (nothing listens on that port any more)
    config = json.loads(kubeconfig.read_text())
    config["clusters"][0]["cluster"]["server"] = "http://127.0.0.1:9"
    silent = tmp_path / "silent"
    silent.write_text(json.dumps(config))
    monkeypatch.setenv("KUBECONFIG", str(silent))
    with pytest.raises(EngineUnreachable, match="did not answer"):
        cluster().describe()


# -- the host as gpudev lists it ---------------------------------------------------------------


def test_a_kubernetes_host_is_listed_with_its_nodes_and_who_holds_gpus(kubeconfig: Path) -> None:
    host = Host(
        HostSpec.parse("cluster", "k8s://lab-ml/team-ml"), timeout=5, gpu_inventory=None, log=LOG
    )
    try:
        info = host.describe()
    finally:
        host.close()
    assert (info.reachable, info.transport, info.engine) == (True, "k8s", None)
    assert info.cluster is not None
    assert info.gpus.reason == "a Kubernetes cluster: its GPUs are listed by node"
    data = json.loads(json.dumps(info.to_json()))
    assert data["cluster"]["nodes"][1]["gpus"][0]["allocated"] == 6
    text = format_hosts([info])
    assert "cluster  k8s://lab-ml/team-ml  Kubernetes v1.34.2 (namespace team-ml)" in text
    assert "nvidia.com/gpu: 6 of 8 allocated" in text
    assert "2 nvidia.com/gpu held by alice-gpu (alice@example.org)" in text
    assert "4 nvidia.com/gpu held by a workload in research" in text
    assert "node gpu-mig-1 cordoned" in text
    assert "and 1 node(s) without GPUs" in text
    # Another user sees that a dev container holds them, not whose
    seen = info.cluster.seen_by(lambda owner: owner == "bob", "another user")
    ours = [a for a in seen.allocations if a.namespace == "team-ml"]
    assert [(a.container, a.owner) for a in ours] == [("", "another user")]
    assert "held by another user" in format_hosts([replace(info, cluster=seen)])


def test_an_unreachable_cluster_is_reported_not_raised(
    kubeconfig: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    FakeAPIServer.status = 403
    host = Host(
        HostSpec.parse("cluster", "k8s://lab-ml/team-ml"), timeout=5, gpu_inventory=None, log=LOG
    )
    info = host.describe()
    assert (info.reachable, info.cluster) == (False, None)
    assert "refused gpudev's credentials" in str(info.reason)
    assert "UNREACHABLE" in format_hosts([info])


# -- could the cluster take the GPUs now (``k8s/placement.py``) ------------------------------


@pytest.mark.parametrize(
    ("ask", "nodes", "reasons"),
    [
        (GPUAsk(count=2), ("gpu-a100-1",), {"gpu-mig-1": "cordoned"}),
        (
            GPUAsk(count=3),
            (),
            {"gpu-a100-1": "2 free nvidia.com/gpu of 8", "gpu-mig-1": "cordoned"},
        ),
        (
            GPUAsk(count=1, product="NVIDIA-H100-80GB-HBM3"),
            (),
            {"gpu-a100-1": "its GPUs are NVIDIA-A100-SXM4-80GB", "gpu-mig-1": "cordoned"},
        ),
        (
            GPUAsk(count=1, min_memory_mib=90000),
            (),
            {"gpu-a100-1": "81920 MiB per GPU, 90000 asked", "gpu-mig-1": "cordoned"},
        ),
    ],
)
def test_which_nodes_could_take_the_gpus_now(
    ask: GPUAsk, nodes: tuple[str, ...], reasons: dict[str, str]
) -> None:
    found = fit(described(), ask)
    assert found is not None
    assert (found.nodes, found.reasons) == (nodes, reasons)


def test_what_a_dry_run_says_of_the_cluster() -> None:
    info = described()
    assert cluster_note(GPUAsk(count=2), info, None) == (
        "2 nvidia.com/gpu: would fit on gpu-a100-1"
    )
    assert cluster_note(GPUAsk(count=3), info, None) == (
        "3 nvidia.com/gpu: no node can take them now (gpu-a100-1: 2 free nvidia.com/gpu of 8; "
        "gpu-mig-1: cordoned)"
    )
    assert cluster_note(GPUAsk(count=1), None, "it refused") == (
        "the cluster could not be read (it refused): its nodes were not checked"
    )
    # Nothing to check without GPUs, or with a DRA claim (the scheduler matches devices)
    assert cluster_note(GPUAsk(), info, None) is None
    assert fit(info, GPUAsk(count=1, claim=True)) is None
