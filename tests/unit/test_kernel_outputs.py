"""How the Lab extension renders outputs of gpudev kernels
(``c.GPUDevApp.untrusted_kernel_outputs``, ``c.GPUDevApp.kernel_output_widgets``): untrusted by
default in shared mode, where the kernel's container is not the user's to trust, trusted in
single-user mode; the administrator decides."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any, cast

import pytest
from traitlets.config import Config

from jupyter_gpudev.app import GPUDevApp


def app_in(mode: str, config: Config | None = None) -> GPUDevApp:
    """A GPUDevApp (no server started) in ``mode``: single, client or service."""
    url = "http://127.0.0.1:10101/services/gpudev/" if mode == "client" else ""
    app = GPUDevApp(config=config or Config(), service_url=url)
    if mode == "service":
        app.serverapp = cast(Any, SimpleNamespace(gpudev_shared_service=True))
    assert app.mode == mode
    return app


@pytest.mark.parametrize(
    ("mode", "expected"),
    [("single", "trusted"), ("client", "untrusted"), ("service", "untrusted")],
)
def test_by_default_outputs_are_untrusted_in_shared_mode_only(mode: str, expected: str) -> None:
    # Given no configuration of the setting
    app = app_in(mode)
    # Then it is None, resolved by the mode, and widgets still render where untrusted
    assert app.untrusted_kernel_outputs is None
    assert app.kernel_outputs == expected


@pytest.mark.parametrize("mode", ["single", "client", "service"])
@pytest.mark.parametrize(
    ("untrusted", "widgets", "expected"),
    [
        (True, True, "untrusted"),
        (True, False, "untrusted-no-widgets"),
        (False, True, "trusted"),
        (False, False, "trusted"),
    ],
)
def test_the_administrator_decides_in_every_mode(
    mode: str, untrusted: bool, widgets: bool, expected: str
) -> None:
    # Given the setting and the widgets' configured
    config = Config()
    config.GPUDevApp.untrusted_kernel_outputs = untrusted
    config.GPUDevApp.kernel_output_widgets = widgets
    # Then the mode does not matter
    assert app_in(mode, config).kernel_outputs == expected


def test_none_in_the_configuration_means_by_mode() -> None:
    # Given the setting written as None (the default, said explicitly)
    config = Config()
    config.GPUDevApp.untrusted_kernel_outputs = None
    config.GPUDevApp.kernel_output_widgets = False
    # Then single-user mode trusts, client mode does not (and renders no widgets)
    assert app_in("single", config).kernel_outputs == "trusted"
    assert app_in("client", config).kernel_outputs == "untrusted-no-widgets"


def test_the_help_says_what_each_value_does() -> None:
    # Given the documented traits
    help_text = GPUDevApp.class_traits()["untrusted_kernel_outputs"].help
    widgets = GPUDevApp.class_traits()["kernel_output_widgets"].help
    # Then the default per mode and what still renders are said
    assert "None (the default): on in shared mode" in " ".join(help_text.split())
    assert "off in single-user mode" in " ".join(help_text.split())
    assert "Output widgets" in widgets
