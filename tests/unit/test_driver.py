"""Driver injection planning (the fallback without the NVIDIA hook), without an engine."""

from __future__ import annotations

from pathlib import Path

import pytest

from jupyter_gpudev.engine import GPU, DriverInjectionError, LegacyGPUInjection, proc_bus_id


@pytest.mark.parametrize(
    ("smi", "proc"),
    [
        ("00000000:07:00.0", "0000:07:00.0"),
        ("00000000:0F:00.0", "0000:0f:00.0"),
        ("0000:3B:00.0", "0000:3b:00.0"),
    ],
)
def test_proc_bus_id(smi: str, proc: str) -> None:
    assert proc_bus_id(smi) == proc


def test_mig_instances_are_refused() -> None:
    with pytest.raises(DriverInjectionError, match="MIG instances"):
        LegacyGPUInjection().plan([], ["MIG-c6d4f1ef-42e4-5de3-91c7-45d71c87eb3f"])


def test_nvml_minor_number_is_used_when_proc_has_nothing(tmp_path: Path) -> None:
    # Given no /proc information but an NVML minor number, and a device node for it
    (tmp_path / "dev").mkdir()
    (tmp_path / "dev" / "nvidia5").write_text("")  # existence is all plan() checks
    lib = tmp_path / "lib"
    lib.mkdir()
    (lib / "libcuda.so.1").write_text("")
    gpu = GPU(uuid="GPU-a", index=0, name="NVIDIA L4", pci_bus_id=None, minor_number=5)
    injection = LegacyGPUInjection(
        device_dir=str(tmp_path / "dev"),
        proc_dir=str(tmp_path / "none"),
        library_dirs=[str(lib)],
        binary_dirs=[],
    ).plan([gpu], ["GPU-a"])
    # Then that node is the one passed
    assert injection.devices == (f"{tmp_path}/dev/nvidia5:/dev/nvidia5:rwm",)


def test_missing_libcuda_is_refused(tmp_path: Path) -> None:
    (tmp_path / "nvidia0").write_text("")
    gpu = GPU(uuid="GPU-a", index=0, name="NVIDIA L4", minor_number=0)
    with pytest.raises(DriverInjectionError, match=r"libcuda\.so was not found"):
        LegacyGPUInjection(device_dir=str(tmp_path), library_dirs=[str(tmp_path)]).plan(
            [gpu], ["GPU-a"]
        )


def test_a_gpu_outside_the_inventory_is_refused() -> None:
    with pytest.raises(DriverInjectionError, match="not in the inventory"):
        LegacyGPUInjection().plan([], ["GPU-unknown"])


def test_the_libraries_all_come_from_the_first_folder_with_libcuda(tmp_path: Path) -> None:
    # Given a stale driver's libraries left in a folder without libcuda, the driver in use in
    # a second folder, and an older one in a third (as on a host whose driver was moved)
    (tmp_path / "dev").mkdir()
    (tmp_path / "dev" / "nvidia0").write_text("")
    stale, current, older = tmp_path / "stale", tmp_path / "current", tmp_path / "older"
    for folder, version in ((stale, "535.1"), (current, "580.159.04"), (older, "550.2")):
        folder.mkdir()
        (folder / f"libnvidia-ml.so.{version}").write_text("")
    for folder, version in ((current, "580.159.04"), (older, "550.2")):
        (folder / f"libcuda.so.{version}").write_text("")
        (folder / f"libnvidia-ptxjitcompiler.so.{version}").write_text("")
    gpu = GPU(uuid="GPU-a", index=0, name="NVIDIA H200", minor_number=0)
    injection = LegacyGPUInjection(
        device_dir=str(tmp_path / "dev"),
        proc_dir=str(tmp_path / "none"),
        library_dirs=[str(stale), str(current), str(older)],
        binary_dirs=[],
    ).plan([gpu], ["GPU-a"])
    # Then every library mounted is the driver in use's: versions of two drivers never mix
    sources = sorted(Path(m["Source"]).name for m in injection.mounts)
    assert sources == [
        "libcuda.so.580.159.04",
        "libnvidia-ml.so.580.159.04",
        "libnvidia-ptxjitcompiler.so.580.159.04",
    ]


def test_a_wrapper_script_named_nvidia_smi_is_not_mounted(tmp_path: Path) -> None:
    # Given a host whose first nvidia-smi on the search path is a shell wrapper that runs the
    # driver's binary from its folder (seen on the GPU machine: mounted alone in a container,
    # it finds only itself), and the driver's binary (an ELF file) in a later folder
    (tmp_path / "dev").mkdir()
    (tmp_path / "dev" / "nvidia0").write_text("")
    lib, wrapper, driver = tmp_path / "lib", tmp_path / "bin", tmp_path / "nvidia-bin"
    for folder in (lib, wrapper, driver):
        folder.mkdir()
    (lib / "libcuda.so.1").write_text("")
    (wrapper / "nvidia-smi").write_text('#!/bin/sh\nexec /usr/local/nvidia/bin/nvidia-smi "$@"\n')
    (driver / "nvidia-smi").write_bytes(b"\x7fELF\x02\x01\x01" + bytes(57))
    gpu = GPU(uuid="GPU-a", index=0, name="NVIDIA H100", minor_number=0)

    def plan(binary_dirs: list[Path]) -> list[str]:
        injection = LegacyGPUInjection(
            device_dir=str(tmp_path / "dev"),
            proc_dir=str(tmp_path / "none"),
            library_dirs=[str(lib)],
            binary_dirs=[str(d) for d in binary_dirs],
        ).plan([gpu], ["GPU-a"])
        return [m["Source"] for m in injection.mounts if m["Target"].endswith("/nvidia-smi")]

    # Then the driver's binary is mounted, not the wrapper
    assert plan([wrapper, driver]) == [str(driver / "nvidia-smi")]
    # And with only the wrapper there is no nvidia-smi in the container rather than a broken one
    assert plan([wrapper]) == []
