"""The pure parts of the GPU end-to-end run (scripts/gpu-e2e.sh, benchmarks/gpu_e2e*.py): what
is carried, the server's configuration, the stand-in driver and the results page. The run
itself is the test command's "gpu-e2e --no-gpu" check."""

from __future__ import annotations

import io
import os
import stat
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "benchmarks"))

import gpu_e2e_parts
import gpu_e2e_prepare

SMI = Path(__file__).resolve().parents[1] / "fixtures" / "smi" / "h200"


def test_only_what_the_gpu_machine_lacks_is_carried() -> None:
    # Given a resolution with packages the GPU machine has, spelled in several ways
    resolved = {
        "Jinja2": "3.1.6",
        "typing_extensions": "4.16.0",
        "debugpy": "1.8.22",
        "jupyterlab": "4.5.0",
        "jupyter-gpudev": "0.8.0",
        "tornado": "6.6.1",
        "PyNaCl": "1.6.2",
    }
    # Then only the missing ones are carried, the run's unneeded ones never
    assert gpu_e2e_prepare.to_carry(resolved) == {"PyNaCl": "1.6.2", "tornado": "6.6.1"}


def test_the_server_requirements_leave_out_lab_and_extras() -> None:
    requirements = gpu_e2e_prepare.server_requirements()
    names = {gpu_e2e_prepare.normalize(r.split(">")[0].split("<")[0]) for r in requirements}
    assert "jupyter-server" in names
    assert "docker" in names
    assert "jupyterlab" not in names
    assert "pytest" not in names  # an extra's


def test_without_a_gpu_the_server_uses_the_fake_inventory_and_leaves_the_firewall(
    tmp_path: Path,
) -> None:
    mode = gpu_e2e_parts.Mode.for_run(gpu=False)
    config = gpu_e2e_parts.server_config(tmp_path, mode, "gpudev", {"enabled": True})
    assert config["GPUInventory"]["backend"] == "nvidia-smi"
    assert config["DevContainers"]["port_guard"] is False
    assert config["MountPolicy"]["allowed_roots"] == list(mode.mounts)
    assert sys.prefix in mode.mounts
    assert config["GPUCuller"]["idle_timeout"] == gpu_e2e_parts.IDLE_TIMEOUT
    # And on a GPU machine: NVML, and the PyTorch venv as the allowed mount (with its
    # interpreter's folder where that is outside /usr, which the imported image holds)
    gpu = gpu_e2e_parts.Mode.for_run(gpu=True)
    outside = not Path(sys.base_prefix).is_relative_to("/usr")
    assert set(gpu.mounts) == {"/opt/torch", *([sys.base_prefix] if outside else [])}
    assert gpu_e2e_parts.server_config(tmp_path, gpu, "gpudev", {})["GPUInventory"] == {
        "backend": "nvml"
    }


@pytest.mark.skipif(os.geteuid() != 0, reason="making device nodes needs root")
def test_the_stand_in_driver_maps_the_fake_gpu_to_nvidia0(tmp_path: Path) -> None:
    injection = gpu_e2e_parts.stand_in_driver(tmp_path, SMI)
    assert stat.S_ISCHR((tmp_path / "dev" / "nvidia0").stat().st_mode)
    info = tmp_path / "proc" / "0000:00:06.0" / "information"
    assert "Device Minor: 0" in info.read_text()
    assert injection["library_dirs"] == [str(tmp_path / "lib")]


def test_the_results_page_has_each_figure_and_check() -> None:
    record = gpu_e2e_parts.Record(io.StringIO())
    record.facts["driver"] = "580.159.04"
    record.figure("DELETE to the GPU free", 0.2345)
    record.check("visible GPU = leased GPU", True)
    with pytest.raises(gpu_e2e_parts.CheckFailed):
        record.check("the 409 names the holder", False, "no name")
    page = gpu_e2e_parts.render(record, "FAILED: the 409 names the holder")
    assert "- driver: 580.159.04" in page
    assert "| DELETE to the GPU free | 234 ms |" in page
    assert "| visible GPU = leased GPU | passed |" in page
    assert "| the 409 names the holder | FAILED: no name |" in page
