"""A bad gpudev setting stops the Jupyter server at start with one line naming it (issue #35):
not a server that runs on without gpudev after a traceback in its log (and then hung at exit)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.ports import free_port

pytestmark = pytest.mark.integration


def start_server(tmp_path: Path, *args: str) -> subprocess.CompletedProcess[str]:
    (tmp_path / "config").mkdir(exist_ok=True)
    (tmp_path / "work").mkdir(exist_ok=True)
    argv = [
        sys.executable,
        "-m",
        "jupyter_server",
        f"--port={free_port()}",
        "--ip=127.0.0.1",
        "--ServerApp.open_browser=False",
        f"--ServerApp.root_dir={tmp_path / 'work'}",
        "--allow-root",
        f"--DevContainers.state_dir={tmp_path / 'state'}",
        *args,
    ]
    env = {**os.environ, "JUPYTER_CONFIG_DIR": str(tmp_path / "config")}
    return subprocess.run(argv, env=env, capture_output=True, text=True, timeout=60, check=False)


@pytest.mark.parametrize(
    ("setting", "named"),
    [
        ("--DevContainers.stop_timeout=-1", "c.DevContainers.stop_timeout"),
        ("--GPUCuller.gpu_idle_timeout=-5", "c.GPUCuller.gpu_idle_timeout"),
        ("--GPUInventory.backend=cuda", "c.GPUInventory.backend"),
    ],
)
def test_a_bad_setting_on_the_command_line_stops_the_server(
    tmp_path: Path, setting: str, named: str
) -> None:
    # When a server starts with a bad gpudev setting
    run = start_server(tmp_path, setting)
    # Then it exits (not serving on without gpudev), naming the setting, without a traceback
    assert run.returncode != 0
    output = run.stdout + run.stderr
    assert f"Bad configuration: {named}" in output
    assert "Traceback" not in output


def test_a_bad_setting_in_a_config_file_names_the_file(tmp_path: Path) -> None:
    # Given a config file with a bad value
    (tmp_path / "config").mkdir()
    config = tmp_path / "config" / "jupyter_server_config.py"
    config.write_text("c.DevContainers.stop_timeout = 'soon'\n")
    # When the server starts
    run = start_server(tmp_path)
    # Then it exits naming the setting and the file
    output = run.stdout + run.stderr
    assert run.returncode != 0
    assert "Bad configuration: c.DevContainers.stop_timeout" in output
    assert str(config) in output
    assert "Traceback" not in output
