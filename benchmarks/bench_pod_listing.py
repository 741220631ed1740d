"""What a listing of a Kubernetes host costs, with and without ``c.KubernetesHosts.watch``.

No control plane runs here: the API server is ``tests/k8s_api.py``'s stand-in, on loopback,
reached through the real ``kubernetes`` client, holding ``PODS`` dev container pods (made by
another server, as in a shared cluster). Floor: the client's own LIST of those pods, parsed.
Ours: ``DevContainers.list()`` with a LIST per listing (the default), and answered from the
watch. What carries over to a real cluster is the count of API requests per listing (1 and 0);
the times are this stand-in's.

Run: ``.venv/bin/python benchmarks/bench_pod_listing.py``. It prints a Markdown table; paste
it into benchmarks/results/pod-listing.md with the date and machine.
"""

from __future__ import annotations

import os
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

import pytest
import timing

from jupyter_gpudev.access import Caller
from jupyter_gpudev.containers import StartRequest
from jupyter_gpudev.labels import K_MANAGED
from tests.k8s_api import FakeCluster, cluster_manager

RUNS = int(os.environ.get("BENCH_RUNS", "50"))
PODS = int(os.environ.get("BENCH_PODS", "100"))
ADMIN = Caller("admin", admin=True)


def timed(func: Callable[[], object]) -> list[float]:
    return timing.timed(func, RUNS)


def lists(cluster: FakeCluster) -> int:
    """LIST requests of pods the stand-in answered (watches not counted)."""
    return sum(
        1
        for method, path in cluster.requests
        if method == "GET" and "/pods?" in path and "watch=true" not in path
    )


def main() -> None:
    cluster = FakeCluster()
    rows: list[tuple[str, list[float], float]] = []
    with tempfile.TemporaryDirectory() as folder, pytest.MonkeyPatch.context() as patch:
        root = Path(folder)
        for name in ("maker", "polling", "watching"):
            (root / name).mkdir()
        with cluster_manager(cluster, root / "maker", patch) as maker:
            for index in range(PODS):
                request = StartRequest("default", host="cluster", name=f"p{index}")
                maker.start(request, caller=Caller("bob"))
        with cluster_manager(cluster, root / "polling", patch) as polling:
            host = polling.host_pool.get("cluster").cluster
            assert host is not None
            labels = f"{K_MANAGED}=1"
            rows.append(
                (
                    "floor: the client's LIST",
                    timed(lambda: host.items("v1", "Pod", labels=labels)),
                    1.0,
                )
            )
            before = lists(cluster)
            samples = timed(lambda: polling.list(caller=ADMIN))
            rows.append(
                (
                    "DevContainers.list(), a LIST each",
                    samples,
                    (lists(cluster) - before) / (RUNS + 1),
                )
            )
        with cluster_manager(cluster, root / "watching", patch, pod_watch=True) as watching:
            watching.list(caller=ADMIN)
            time.sleep(0.5)  # the watch opened
            before = lists(cluster)
            samples = timed(lambda: watching.list(caller=ADMIN))
            rows.append(
                ("DevContainers.list(), pod_watch", samples, (lists(cluster) - before) / (RUNS + 1))
            )
    print(f"{PODS} pods")
    timing.print_table(
        [(name, samples) for name, samples, _ in rows],
        runs=RUNS,
        digits=2,
        extra=("LISTs per listing", [f"{per:.2f}" for _, _, per in rows]),
    )


if __name__ == "__main__":
    main()
