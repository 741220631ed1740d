"""The picker entries' resources ship with the code that names them."""

from __future__ import annotations

from pathlib import Path

from jupyter_gpudev.kernels.kernelspecs import RESOURCES


def test_the_kernel_logo_is_in_the_resource_folder() -> None:
    # The launcher shows logo-svg.svg from the kernelspec's resource_dir (a moved module once
    # left it pointing at a folder that did not exist: the launcher card lost its logo)
    logo = Path(RESOURCES) / "logo-svg.svg"
    assert logo.is_file()
    assert logo.read_text(encoding="utf-8").lstrip().startswith("<svg")
