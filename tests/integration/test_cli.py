"""``jupyter gpudev`` against the real engine, as a user runs it (a separate process)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import docker
import pytest

from tests.conftest import FAKE_SMI, FIXTURES

pytestmark = pytest.mark.integration

BIN = Path(sys.executable).parent


def gpudev(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    """Run ``jupyter gpudev ARGS`` with the fake nvidia-smi and an isolated Jupyter config."""
    full_env = {
        **os.environ,
        "FAKE_NVIDIA_SMI_DIR": str(FIXTURES / "smi" / "mig-a100"),
        **(env or {}),
    }
    jupyter = BIN / "jupyter"
    assert jupyter.exists(), f"the package must be installed in {BIN} (scripts/setup.sh)"
    return subprocess.run(
        [
            str(jupyter),
            "gpudev",
            *args,
            "--GPUInventory.backend=nvidia-smi",
            f"--GPUInventory.nvidia_smi_path={FAKE_SMI}",
        ],
        capture_output=True,
        text=True,
        env=full_env,
        timeout=120,
        check=False,
    )


@pytest.fixture
def isolated_config(tmp_path: Path) -> dict[str, str]:
    return {"JUPYTER_CONFIG_DIR": str(tmp_path / "config"), "JUPYTER_CONFIG_PATH": ""}


def test_hosts_json_shows_the_local_engine_and_gpus(
    docker_client: docker.DockerClient, isolated_config: dict[str, str]
) -> None:
    # When a user lists the hosts as JSON
    result = gpudev("hosts", "--json", env=isolated_config)
    # Then it succeeds, with the engine's real version and the MIG layout of the GPUs
    assert result.returncode == 0, result.stderr
    (host,) = json.loads(result.stdout)["hosts"]
    assert host["engine"]["version"] == docker_client.version()["Version"]
    first = host["gpus"]["gpus"][0]
    assert first["mig_enabled"] is True
    assert [m["profile"] for m in first["mig_devices"]] == ["3g.20gb", "2g.10gb", "1g.5gb"]


def test_hosts_text_output(
    docker_client: docker.DockerClient, isolated_config: dict[str, str]
) -> None:
    result = gpudev("hosts", env=isolated_config)
    assert result.returncode == 0, result.stderr
    assert f"Docker {docker_client.version()['Version']}" in result.stdout
    assert "MIG 3g.20gb [0] MIG-c6d4f1ef-42e4-5de3-91c7-45d71c87eb3f" in result.stdout


def test_hosts_reads_the_same_config_file_as_the_server(
    tmp_path: Path, isolated_config: dict[str, str]
) -> None:
    # Given c.HostPool.local_url set in jupyter_server_config.py (what the server reads)
    config_dir = Path(isolated_config["JUPYTER_CONFIG_DIR"])
    config_dir.mkdir()
    missing = f"unix://{tmp_path}/configured.sock"
    (config_dir / "jupyter_server_config.py").write_text(f"c.HostPool.local_url = {missing!r}\n")
    # When the CLI lists hosts
    result = gpudev("hosts", env=isolated_config)
    # Then it used that address
    assert result.returncode == 3
    assert missing in result.stderr


def test_unreachable_engine_exits_non_zero_naming_the_address(
    tmp_path: Path, isolated_config: dict[str, str]
) -> None:
    # Given DOCKER_HOST points at a socket nobody serves
    address = f"unix://{tmp_path}/nothing.sock"
    # When a user lists the hosts
    result = gpudev("hosts", env={**isolated_config, "DOCKER_HOST": address})
    # Then the exit code is non-zero and the message names the address and what to do
    assert result.returncode == 3
    assert f"error: No Docker engine answered at {address}: the socket does not exist" in (
        result.stderr
    )
    assert "Traceback" not in result.stderr
    # And with --json the same message is on stdout as JSON
    as_json = gpudev("hosts", "--json", env={**isolated_config, "DOCKER_HOST": address})
    assert as_json.returncode == 3
    assert address in json.loads(as_json.stdout)["message"]


def test_bad_config_is_a_clear_error(isolated_config: dict[str, str]) -> None:
    result = gpudev("hosts", "--HostPool.hosts={'Bad Name': 'tcp://x:1'}", env=isolated_config)
    assert result.returncode == 2
    assert "c.HostPool.hosts['Bad Name']" in result.stderr
    assert "Traceback" not in result.stderr


def test_a_bad_option_or_subcommand_is_a_usage_error(isolated_config: dict[str, str]) -> None:
    # An option's value its trait refuses, named as typed, with what it takes
    result = gpudev("hosts", "--HostPool.timeout=soon", env=isolated_config)
    assert result.returncode == 2
    assert result.stderr.splitlines() == [
        "error: --HostPool.timeout expects a finite number, more than 0; got 'soon'",
        "usage: jupyter gpudev hosts [options] (--help lists the options)",
    ]
    # An unknown option: an error, not a warning that lets the command go on
    result = gpudev("hosts", "--verbose=1", env=isolated_config)
    assert result.returncode == 2
    assert (
        result.stderr.splitlines()[0] == "error: --verbose is not an option of jupyter gpudev hosts"
    )
    # A misspelt subcommand
    result = gpudev("hsots", env=isolated_config)
    assert result.returncode == 2
    assert result.stderr.splitlines() == [
        "error: 'hsots' is not a subcommand of jupyter gpudev (did you mean hosts?)",
        "usage: jupyter gpudev SUBCOMMAND [options] (--help lists the options)",
    ]
    # A refresh interval that is no number: refused before the first refresh
    result = gpudev("top", "--interval=nan", env=isolated_config)
    assert result.returncode == 2
    assert result.stderr.splitlines()[0] == (
        "error: --interval expects a finite number, 0.2 or more; got 'nan'"
    )
    assert result.stdout == ""


def test_no_subcommand_lists_them(isolated_config: dict[str, str]) -> None:
    result = subprocess.run(
        [str(BIN / "jupyter-gpudev")],
        capture_output=True,
        text=True,
        env={**os.environ, **isolated_config},
        check=False,
    )
    assert result.returncode == 2
    assert "hosts" in result.stdout
    assert "image" in result.stdout


def test_a_reader_that_stops_early_ends_the_command_quietly(
    isolated_config: dict[str, str],
) -> None:
    # Given a command whose reader goes away before it writes (``| head`` stopping early)
    process = subprocess.Popen(
        [str(BIN / "jupyter"), "gpudev", "hosts", "rbac", "team-ml"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        env={**os.environ, **isolated_config},
    )
    assert process.stdout is not None
    process.stdout.close()
    _, err = process.communicate(timeout=120)
    # Then it ends as Unix tools do on SIGPIPE, saying nothing (no traceback)
    assert process.returncode == 141, err
    assert err.decode() == ""
