"""The property tests' fixtures: the integration tests' real engine and real Jupyter server
(``tests/integration/conftest.py``), and hypothesis settings that make every run the same
(derandomized, no example database: CI reproduces what a developer saw)."""

from __future__ import annotations

from hypothesis import HealthCheck, settings

from tests.integration.conftest import (  # noqa: F401 - fixtures, found by pytest by name
    docker_client,
    gpudev_config,
    jp_server_config,
    server_containers_removed,
)

settings.register_profile(
    "gpudev-property",
    deadline=None,
    derandomize=True,
    database=None,
    print_blob=False,
    # One real server (or one isolated CLI environment) per test, shared by its examples:
    # what each example leaves is checked after it, and what the test leaves at its end.
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
