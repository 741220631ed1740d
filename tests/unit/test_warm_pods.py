"""Warm kernels are started through the Docker engine: none is tried in a pod (no engine)."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

import pytest
from traitlets import TraitError

from jupyter_gpudev.kernels.warm import WarmKernels


class Manager:
    """A manager whose one host is a Kubernetes cluster; anything more that ``fill`` would
    reach for (its state folder, the host's engine) fails the test."""

    host_pool = SimpleNamespace(
        get=lambda _name: SimpleNamespace(
            backend=SimpleNamespace(kind="kubernetes"), spec=SimpleNamespace(is_kubernetes=True)
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


def test_0_warm_kernels_is_off_and_fewer_is_refused() -> None:
    # Given c.WarmKernels.count = 0: none is kept, nothing is looked up
    warm = WarmKernels(count=0)
    warm.fill(Manager(), ("cluster", "spod"))  # type: ignore[arg-type]
    assert warm.ready(("cluster", "spod")) == 0
    warm.close()
    # Then a negative count, or a wait of 0 for a warm kernel's answer, is refused
    with pytest.raises(TraitError, match=r"'count' trait .* not be less than 0"):
        WarmKernels(count=-1)
    with pytest.raises(TraitError, match=r"'ready_timeout' trait .* should be more than 0"):
        WarmKernels(ready_timeout=0)
