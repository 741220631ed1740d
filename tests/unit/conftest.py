"""Unit fixtures: stand-ins only, no engine and no server."""

from __future__ import annotations

from typing import TYPE_CHECKING

import pytest

if TYPE_CHECKING:
    from tests.k8s_api import FakeCluster


@pytest.fixture
def cluster() -> FakeCluster:
    """An empty Kubernetes cluster behind ``tests/k8s_api.py``'s API server stand-in (a
    ``cluster_manager`` serves it); its pods run nowhere."""
    from tests.k8s_api import FakeCluster  # noqa: PLC0415 - only the tests that ask load it

    return FakeCluster()
