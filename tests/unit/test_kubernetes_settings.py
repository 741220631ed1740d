"""``c.KubernetesHosts``: the Kubernetes options of dev containers, and their old names."""

from __future__ import annotations

import logging
from pathlib import Path

import pytest
from traitlets import TraitError
from traitlets.config import Config

from jupyter_gpudev.containers import DevContainers
from jupyter_gpudev.engine import HostPool
from jupyter_gpudev.k8s.settings import RENAMED, KubernetesHosts


def manager(tmp_path: Path, config: Config) -> DevContainers:
    config.HostPool.hosts_file = str(tmp_path / "hosts.json")
    config.GPUInventory.backend = "none"
    pool = HostPool(config=config, log=logging.getLogger("test"))
    return DevContainers(root_dir=tmp_path, host_pool=pool, config=config)


def test_the_options_are_read_from_c_kubernetes_hosts(tmp_path: Path) -> None:
    config = Config()
    config.KubernetesHosts.start_timeout = 42.0
    config.KubernetesHosts.port_forward = "always"
    config.KubernetesHosts.poll_interval = 0.5
    config.KubernetesHosts.watch = True
    settings = manager(tmp_path, config).kubernetes
    assert (settings.start_timeout, settings.port_forward) == (42.0, "always")
    assert (settings.poll_interval, settings.watch) == (0.5, True)


@pytest.mark.parametrize("section", ["DevContainers", "ContainerLookup"])
def test_an_old_name_still_sets_the_option_and_says_its_new_name(
    tmp_path: Path, section: str, caplog: pytest.LogCaptureFixture
) -> None:
    # Given a configuration from before, with the old names
    config = Config()
    config[section].pod_start_timeout = 7.0
    config[section].pod_port_forward = "never"
    config[section].pod_poll_interval = 0.25
    config[section].pod_watch = True
    # When a manager is made from it
    with caplog.at_level(logging.WARNING):
        settings = manager(tmp_path, config).kubernetes
    # Then the new options hold those values, and each old name was reported with its new one
    assert (settings.start_timeout, settings.port_forward) == (7.0, "never")
    assert (settings.poll_interval, settings.watch) == (0.5 / 2, True)
    for old, new in RENAMED.items():
        assert f"c.DevContainers.{old} is deprecated: use c.KubernetesHosts.{new}" in caplog.text


def test_the_defaults_are_unchanged_and_nothing_is_said(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    with caplog.at_level(logging.WARNING):
        settings = manager(tmp_path, Config()).kubernetes
    defaults = KubernetesHosts()
    assert (settings.start_timeout, settings.port_forward) == (600.0, "auto")
    assert (settings.poll_interval, settings.watch) == (defaults.poll_interval, False)
    assert "deprecated" not in caplog.text


@pytest.mark.parametrize(
    ("section", "name"),
    [
        ("KubernetesHosts", "start_timeout"),
        ("KubernetesHosts", "poll_interval"),
        ("ContainerLookup", "pod_start_timeout"),
        ("DevContainers", "pod_poll_interval"),
    ],
)
def test_a_wait_of_0_is_refused_under_the_new_name_and_the_old(
    tmp_path: Path, section: str, name: str
) -> None:
    # Given a wait (or a poll interval) of 0, which would fail every start (or never rest)
    config = Config()
    config[section][name] = 0
    # Then the part that reads it refuses it, naming it
    with pytest.raises(TraitError, match=rf"'{name}' trait of a .* should be more than 0"):
        _ = manager(tmp_path, config).kubernetes
