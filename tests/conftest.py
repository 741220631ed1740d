"""Shared fixtures. Integration tests use pytest-jupyter's real server and the real engine."""

from __future__ import annotations

import os
import shutil
import subprocess
from collections.abc import Callable
from pathlib import Path

import pytest

pytest_plugins = ("pytest_jupyter.jupyter_server",)

FIXTURES = Path(__file__).parent / "fixtures"
FAKE_SMI = FIXTURES / "fake-nvidia-smi"


@pytest.fixture
def fake_smi(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Callable[[str], Path]:
    """Put the fake ``nvidia-smi`` first on PATH, answering from a recorded scenario folder."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    (bin_dir / "nvidia-smi").symlink_to(FAKE_SMI)
    monkeypatch.setenv("PATH", f"{bin_dir}{os.pathsep}{os.environ.get('PATH', '')}")

    def use(scenario: str) -> Path:
        folder = FIXTURES / "smi" / scenario
        assert folder.is_dir(), scenario
        monkeypatch.setenv("FAKE_NVIDIA_SMI_DIR", str(folder))
        return folder

    return use


def gpu_present() -> bool:
    """True only where a real nvidia-smi lists a GPU (the ``gpu`` marker's condition)."""
    smi = shutil.which("nvidia-smi")
    if smi is None or Path(smi).resolve() == FAKE_SMI.resolve():
        return False
    result = subprocess.run([smi, "-L"], capture_output=True, text=True, check=False)
    return result.returncode == 0 and "GPU " in result.stdout


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    if gpu_present():
        return
    skip = pytest.mark.skip(reason="needs a real NVIDIA GPU (nvidia-smi finds none here)")
    for item in items:
        if "gpu" in item.keywords:
            item.add_marker(skip)
