"""Warm kernels are started through the Docker engine: none is tried in a pod (no engine)."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

from jupyter_gpudev.kernels.warm import WarmKernels


class Manager:
    """A manager whose one host is a Kubernetes cluster; anything more that ``fill`` would
    reach for (its state folder, the host's engine) fails the test."""

    host_pool = SimpleNamespace(
        get=lambda _name: SimpleNamespace(
            cluster=object(), spec=SimpleNamespace(is_kubernetes=True)
        )
    )

    def __getattr__(self, name: str) -> Any:
        raise AssertionError(f"warm kernels reached for {name!r} of a pod's manager")


def test_no_warm_kernel_is_started_in_a_pinned_pod() -> None:
    # Given warm kernels wanted in each pinned shared container
    warm = WarmKernels(count=1)
    # When a pinned pod is to be filled, then nothing is started there (nor looked up)
    warm.fill(Manager(), ("cluster", "spod"))  # type: ignore[arg-type]
    assert warm.ready(("cluster", "spod")) == 0
    warm.close()
