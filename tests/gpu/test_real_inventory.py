"""On a machine with a real NVIDIA GPU: both probes see the same GPUs.

Skipped where nvidia-smi finds no GPU (see tests/conftest.py).
"""

from __future__ import annotations

import pytest

from jupyter_gpudev.engine import GPUInventory

pytestmark = pytest.mark.gpu


def test_nvml_and_nvidia_smi_agree_on_the_gpus() -> None:
    # Given a host with a real driver
    # When both probes read the inventory
    nvml = GPUInventory(backend="nvml").probe()
    smi = GPUInventory(backend="nvidia-smi").probe()
    # Then they list the same GPUs by UUID, with the same names, driver and CUDA version
    assert nvml.source == "nvml"
    assert smi.source == "nvidia-smi"
    assert nvml.gpus
    assert [(g.uuid, g.index, g.name) for g in nvml.gpus] == [
        (g.uuid, g.index, g.name) for g in smi.gpus
    ]
    assert nvml.driver_version == smi.driver_version
    assert nvml.cuda_version == smi.cuda_version
    for a, b in zip(nvml.gpus, smi.gpus, strict=True):
        assert a.memory_total_mib is not None
        assert b.memory_total_mib is not None
        assert abs(a.memory_total_mib - b.memory_total_mib) <= 1
        # used memory without the driver's own reserve on both (616 MiB on an H200); a
        # program allocating between the two reads would move it, hence the margin
        assert a.memory_used_mib is not None
        assert b.memory_used_mib is not None
        assert abs(a.memory_used_mib - b.memory_used_mib) <= 64
        assert [m.uuid for m in a.mig_devices] == [m.uuid for m in b.mig_devices]
