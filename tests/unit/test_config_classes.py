"""Every configurable part is in the apps' ``classes`` (``--help-all``, ``--generate-config``)
and built by ``services.Services`` from one config (no server, no engine)."""

from __future__ import annotations

import importlib
import inspect
import pkgutil
import subprocess
import sys
from pathlib import Path

import pytest
from traitlets import TraitError
from traitlets.config import Application, Config, Configurable

import jupyter_gpudev
from jupyter_gpudev.app import GPUDevApp
from jupyter_gpudev.cli import GPUDevCLI
from jupyter_gpudev.cli.containers import StartApp
from jupyter_gpudev.services import CLASSES, Services
from jupyter_gpudev.shared.server import SHARED_CLASSES, GPUDevServer


def configurable_classes() -> set[type[Configurable]]:
    """The classes of the package with config traits of their own, apps left out."""
    found: set[type[Configurable]] = set()
    for module in pkgutil.walk_packages(jupyter_gpudev.__path__, "jupyter_gpudev."):
        if module.name.startswith("jupyter_gpudev.labextension"):
            continue
        for _, cls in inspect.getmembers(importlib.import_module(module.name), inspect.isclass):
            if (
                cls.__module__.startswith("jupyter_gpudev.")
                and issubclass(cls, Configurable)
                and not issubclass(cls, Application)
                and cls.class_own_traits(config=True)
            ):
                found.add(cls)
    return found


def test_every_configurable_class_is_listed_by_the_server_extension_and_the_cli() -> None:
    # Given every class of the package that has config traits
    configurable = configurable_classes()
    assert {"DevContainers", "HostPool", "GPUDevProvisioner"} <= {c.__name__ for c in configurable}
    # Then the one list (and the shared service's own) has them all, and each app lists them
    assert configurable <= set(CLASSES) | set(SHARED_CLASSES)
    for app in (GPUDevApp, GPUDevCLI, StartApp, GPUDevServer):
        assert set(CLASSES) <= set(app.classes), app.__name__
    assert set(SHARED_CLASSES) <= set(GPUDevServer.classes)


def test_jupyter_gpudev_help_all_shows_the_traits_of_the_parts(tmp_path: Path) -> None:
    # When a user asks `jupyter gpudev` for every option
    result = subprocess.run(
        [sys.executable, "-m", "jupyter_gpudev", "--help-all"],
        capture_output=True,
        text=True,
        env={"JUPYTER_CONFIG_DIR": str(tmp_path), "JUPYTER_CONFIG_PATH": "", "PATH": ""},
        timeout=120,
        check=False,
    )
    # Then the traits of the managers are there, with their help
    assert result.returncode == 0, result.stderr
    for option in (
        "--DevContainers.pids_limit",
        "--HostPool.hosts",
        "--MountPolicy.",
        "--EnvironmentManager.",
        "--GPUInventory.backend",
        "--GPUCuller.idle_timeout",
        "--LegacyGPUInjection.enabled",
        "--GPUDevProvisioner.",
    ):
        assert option in result.stdout, option


def test_services_build_every_part_from_one_config(tmp_path: Path) -> None:
    # Given a config for two of the parts
    config = Config()
    config.DevContainers.pids_limit = 123
    config.GPUCuller.idle_timeout = 60.0
    config.GPUInventory.backend = "none"
    # When the services are built from it (as a kernel outside a server does)
    services = Services(tmp_path, config=config)
    try:
        # Then every part sees it, and the parts are wired to each other
        assert services.containers.pids_limit == 123
        assert services.culler.idle_timeout == 60.0
        assert services.containers.host_pool is services.host_pool
        assert services.capture.containers is services.containers
        assert services.committer.registries is services.containers.registries
        assert services.kernels is None  # no server: no kernels of its own
    finally:
        services.close()


def test_a_dev_containers_limits_and_waits_take_0_where_it_means_something(
    tmp_path: Path,
) -> None:
    # Given 0 where it means no limit, no wait or killed at once
    config = Config()
    config.GPUInventory.backend = "none"
    for name in ("stop_timeout", "pids_limit", "cpu_limit", "linger", "reconcile_grace"):
        config.DevContainers[name] = 0
    services = Services(tmp_path, config=config)
    try:
        assert services.containers.stop_timeout == 0
        assert services.containers.pids_limit == 0
    finally:
        services.close()
    # Then below it, or 0 where a wait must be one (or a log must be read at all), is refused
    for name, value, said in [
        ("stop_timeout", -1, "not be less than 0"),
        ("pids_limit", -1, "not be less than 0"),
        ("cpu_limit", -0.5, "not be less than 0"),
        ("linger", -1, "not be less than 0"),
        ("reconcile_grace", -1, "not be less than 0"),
        ("lifecycle_timeout", 0, "should be more than 0"),
        ("max_log_bytes", 0, "not be less than 1"),
    ]:
        bad = Config()
        bad.GPUInventory.backend = "none"
        bad.DevContainers[name] = value
        with pytest.raises(TraitError, match=rf"'{name}' trait of a DevContainers .* {said}"):
            Services(tmp_path, config=bad)
