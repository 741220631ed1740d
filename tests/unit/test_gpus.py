"""GPU inventory: nvidia-smi output through a fake nvidia-smi on PATH or a recorded runner (a
remote host's), NVML through its seam."""

from __future__ import annotations

import shutil
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from types import ModuleType, SimpleNamespace
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st
from traitlets import TraitError

from jupyter_gpudev.engine import (
    GPU,
    SMI_FIELDS,
    GPUInventory,
    NvidiaSmiProbe,
    NvmlProbe,
    ProbeUnavailable,
    cuda_version_from_int,
    parse_smi_csv,
    parse_smi_list,
)
from tests.conftest import FAKE_SMI, FIXTURES

FakeSmi = Callable[[str], Path]


def smi_only() -> GPUInventory:
    return GPUInventory(backend="nvidia-smi")


def test_two_gpus_are_read_by_uuid_with_memory_utilisation_driver_and_cuda(
    fake_smi: FakeSmi,
) -> None:
    # Given an nvidia-smi that reports two A100s
    fake_smi("two-a100")
    # When the inventory is read
    inventory = smi_only().probe()
    # Then both GPUs are there, keyed by UUID, with every field parsed
    assert inventory.source == "nvidia-smi"
    assert inventory.reason is None
    assert inventory.driver_version == "535.129.03"
    assert inventory.cuda_version == "12.2"
    first, second = inventory.gpus
    assert first.uuid == "GPU-5d5ba0d6-d33d-2b2c-524d-9e3d8d2b8a77"
    assert (first.index, first.name) == (0, "NVIDIA A100-SXM4-80GB")
    assert (first.memory_total_mib, first.memory_used_mib) == (81920, 1234)
    assert first.utilization_percent == 37
    assert first.pci_bus_id == "00000000:07:00.0"
    assert first.cuda_version == "12.2"
    assert not first.mig_enabled
    assert first.mig_devices == ()
    assert second.uuid == "GPU-8f2a9c41-7b3e-4c55-9d0a-2e6f1b7c3d90"
    assert second.utilization_percent == 0


def test_mig_devices_are_listed_under_their_gpu(fake_smi: FakeSmi) -> None:
    # Given a GPU in MIG mode with three instances and a second GPU without MIG
    fake_smi("mig-a100")
    # When the inventory is read
    inventory = smi_only().probe()
    # Then the MIG instances hang under the first GPU with their own UUIDs and profiles
    mig_gpu, plain = inventory.gpus
    assert mig_gpu.mig_enabled
    assert mig_gpu.utilization_percent is None  # "[N/A]" under MIG
    assert [(m.index, m.profile) for m in mig_gpu.mig_devices] == [
        (0, "3g.20gb"),
        (1, "2g.10gb"),
        (2, "1g.5gb"),
    ]
    assert mig_gpu.mig_devices[0].uuid == "MIG-c6d4f1ef-42e4-5de3-91c7-45d71c87eb3f"
    assert not plain.mig_enabled
    assert plain.mig_devices == ()
    assert inventory.cuda_version == "12.4"


def test_not_available_fields_become_none(fake_smi: FakeSmi) -> None:
    # Given a consumer GPU that reports "[N/A]" and "[Not Supported]"
    fake_smi("mixed-na")
    # When the inventory is read
    (gpu,) = smi_only().probe().gpus
    # Then those fields are None, the rest is read
    assert gpu.memory_used_mib is None
    assert gpu.utilization_percent is None
    assert gpu.memory_total_mib == 24576
    assert gpu.mig_enabled is False
    assert gpu.cuda_version == "11.4"


def test_garbage_lines_are_skipped_with_warnings(fake_smi: FakeSmi) -> None:
    # Given output with an error line, a short line, a bad index/UUID and a duplicate
    fake_smi("garbage")
    # When the inventory is read
    inventory = smi_only().probe()
    # Then only the one well-formed GPU is kept, and each bad line is reported
    assert [g.name for g in inventory.gpus] == ["NVIDIA T4"]
    assert len(inventory.warnings) == 4
    assert any("duplicate UUID" in w for w in inventory.warnings)


def test_failing_nvidia_smi_is_no_gpu_with_its_reason(fake_smi: FakeSmi) -> None:
    # Given an nvidia-smi that cannot talk to the driver
    fake_smi("no-driver")
    # When the inventory is read
    inventory = smi_only().probe()
    # Then there is no GPU, and the reason says why (a normal state, not an exception)
    assert inventory.gpus == ()
    assert inventory.source == "none"
    assert inventory.reason is not None
    assert "exit 9" in inventory.reason
    assert "couldn't communicate with the NVIDIA driver" in inventory.reason


def test_missing_nvidia_smi_is_no_gpu_with_its_reason(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    # Given a PATH without nvidia-smi
    monkeypatch.setenv("PATH", str(tmp_path))
    # When the inventory is read
    inventory = smi_only().probe()
    # Then the reason names the missing tool
    assert inventory.gpus == ()
    assert inventory.reason == "nvidia-smi: nvidia-smi was not found on PATH"


def test_the_fake_refuses_unknown_fields_so_our_field_list_is_checked(fake_smi: FakeSmi) -> None:
    # Given the fake (like the real tool) refuses fields it does not know
    fake_smi("two-a100")
    bad = subprocess.run(
        [
            shutil.which("nvidia-smi") or "nvidia-smi",
            "--query-gpu=index,cuda_version",
            "--format=csv,noheader,nounits",
        ],
        capture_output=True,
        text=True,
        check=False,
    )
    # Then a wrong field list fails, while ours is accepted (the probe above read GPUs)
    assert bad.returncode == 2
    assert smi_only().probe().gpus


def test_backend_none_reports_disabled() -> None:
    inventory = GPUInventory(backend="none").probe()
    assert inventory.gpus == ()
    assert inventory.reason == "GPU inventory is disabled by configuration"


def test_explicit_nvidia_smi_path(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    # Given nvidia-smi is not on PATH but configured by absolute path
    monkeypatch.setenv("PATH", str(tmp_path))
    monkeypatch.setenv("FAKE_NVIDIA_SMI_DIR", str(FIXTURES / "smi" / "two-a100"))
    monkeypatch.setenv("PYTHONDONTWRITEBYTECODE", "1")
    inventory = GPUInventory(backend="nvidia-smi", nvidia_smi_path=str(FAKE_SMI))
    # Then it is found there (the fake's #! line needs python3 on PATH: give it one)
    (tmp_path / "python3").symlink_to(shutil.which("python3") or sys.executable)
    assert len(inventory.probe().gpus) == 2


# ------------------------------------------------------------------------------------------
# NVML, behind its one seam: a module object shaped like pynvml
# ------------------------------------------------------------------------------------------


class NVMLError(Exception):
    pass


class NVMLErrorLibraryNotFound(NVMLError):
    pass


class NVMLErrorNotSupported(NVMLError):
    pass


class NVMLErrorFunctionNotFound(NVMLError):
    pass


class NVMLErrorNotFound(NVMLError):
    pass


def fake_nvml(
    devices: list[dict[str, Any]],
    *,
    init_error: Exception | None = None,
    process_calls: bool = True,
) -> ModuleType:
    """A pynvml-shaped module over a list of device dicts (MIG children under 'migs').

    A device's processes: 'compute' and 'graphics', lists of ``(pid, MiB or None)``, or the
    string 'not supported' / 'function not found' for a driver that cannot say; 'samples',
    per-process utilisation samples ``(pid, time stamp µs, sm %, memory %)`` or 'not
    supported'. ``process_calls=False``: bindings too old to have the process calls at all."""
    module = ModuleType("pynvml_fake")
    calls: list[str] = []

    def handle(index: int) -> dict[str, Any]:
        return devices[index]

    def not_supported(*_: Any) -> Any:
        raise NVMLErrorNotSupported("Not Supported")

    def init() -> None:
        calls.append("init")
        if init_error is not None:
            raise init_error

    def mig_handle(parent: dict[str, Any], slot: int) -> dict[str, Any]:
        migs = parent.get("migs", [])
        if slot >= len(migs):
            raise NVMLErrorNotSupported("Not Found")
        return dict(migs[slot])

    def memory(h: dict[str, Any], version: int | None = None) -> SimpleNamespace:
        """Like NVML: version 1's ``used`` counts the driver's reserved memory (total - free);
        version 2 says ``reserved`` apart, as nvidia-smi does (seen on a real H200)."""
        if "memory" not in h:
            not_supported()
        total, used = h["memory"][0] << 20, h["memory"][1] << 20
        reserved = h.get("reserved", 0) << 20
        if version is None:
            return SimpleNamespace(total=total, used=used + reserved)
        if version != module.nvmlMemory_v2 or h.get("v1_only"):
            raise NVMLErrorNotSupported("Function Not Found")
        return SimpleNamespace(total=total, reserved=reserved, used=used)

    def util(h: dict[str, Any]) -> SimpleNamespace:
        if h.get("util") is None:
            not_supported()
        return SimpleNamespace(gpu=h["util"])

    def running(key: str) -> Callable[[dict[str, Any]], list[SimpleNamespace]]:
        def call(h: dict[str, Any]) -> list[SimpleNamespace]:
            calls.append(f"{key}:{h['uuid']}")
            listed = h.get(key, [])
            if listed == "not supported":
                not_supported()
            if listed == "function not found":
                raise NVMLErrorFunctionNotFound("Function Not Found")
            return [
                SimpleNamespace(
                    pid=pid,
                    usedGpuMemory=None if mib is None else mib << 20,
                    gpuInstanceId=0xFFFFFFFF,
                    computeInstanceId=0xFFFFFFFF,
                )
                for pid, mib in listed
            ]

        return call

    def process_utilization(h: dict[str, Any], since: int) -> list[SimpleNamespace]:
        """Like NVML: the samples newer than ``since``, NOT_FOUND when there are none."""
        calls.append(f"samples:{h['uuid']}:{since}")
        samples = h.get("samples", [])
        if samples == "not supported":
            not_supported()
        fresh = [
            SimpleNamespace(pid=pid, timeStamp=stamp, smUtil=sm, memUtil=mem, encUtil=0, decUtil=0)
            for pid, stamp, sm, mem in samples
            if stamp > since
        ]
        if not fresh:
            raise NVMLErrorNotFound("Not Found")
        return fresh

    if process_calls:
        module.__dict__.update(
            nvmlDeviceGetComputeRunningProcesses=running("compute"),
            nvmlDeviceGetGraphicsRunningProcesses=running("graphics"),
            nvmlDeviceGetProcessUtilization=process_utilization,
        )

    module.__dict__.update(
        NVMLError=NVMLError,
        NVMLError_LibraryNotFound=NVMLErrorLibraryNotFound,
        NVMLError_NotSupported=NVMLErrorNotSupported,
        NVMLError_FunctionNotFound=NVMLErrorFunctionNotFound,
        NVMLError_NotFound=NVMLErrorNotFound,
        NVML_DEVICE_MIG_ENABLE=1,
        nvmlMemory_v2=0x02000028,
        calls=calls,
        nvmlInit=init,
        nvmlShutdown=lambda: calls.append("shutdown"),
        nvmlSystemGetDriverVersion=lambda: "550.54.15",
        nvmlSystemGetCudaDriverVersion=lambda: 12040,
        nvmlDeviceGetCount=lambda: len(devices),
        nvmlDeviceGetHandleByIndex=handle,
        nvmlDeviceGetUUID=lambda h: h["uuid"].encode(),  # old bindings return bytes
        nvmlDeviceGetName=lambda h: h["name"],
        nvmlDeviceGetMemoryInfo=memory,
        nvmlDeviceGetUtilizationRates=util,
        nvmlDeviceGetPciInfo=lambda h: SimpleNamespace(busId=h.get("pci", "00000000:01:00.0")),
        nvmlDeviceGetMigMode=lambda h: (1, 1) if h.get("migs") else not_supported(),
        nvmlDeviceGetMinorNumber=lambda h: h["minor"] if "minor" in h else not_supported(),
        nvmlDeviceGetMaxMigDeviceCount=lambda _h: 7,
        nvmlDeviceGetMigDeviceHandleByIndex=mig_handle,
    )
    return module


def test_nvml_reads_gpus_and_mig_devices_and_shuts_down() -> None:
    # Given an NVML with one plain GPU and one in MIG mode
    nvml = fake_nvml(
        [
            {
                "uuid": "GPU-aaaa",
                "name": "NVIDIA H100 80GB HBM3",
                "memory": (81559, 500),
                "util": 12,
                "minor": 4,
            },
            {
                "uuid": "GPU-bbbb",
                "name": "NVIDIA A100-SXM4-40GB",
                "memory": (40960, 0),
                "util": None,
                "migs": [
                    {
                        "uuid": "MIG-1111",
                        "name": "NVIDIA A100-SXM4-40GB MIG 3g.20gb",
                        "memory": (19968, 0),
                    },
                    {
                        "uuid": "MIG-2222",
                        "name": "NVIDIA A100-SXM4-40GB MIG 1g.5gb",
                        "memory": (4864, 0),
                    },
                ],
            },
        ]
    )
    # When the inventory is read through the NVML path
    inventory = GPUInventory(backend="nvml", nvml_loader=lambda: nvml).probe()
    # Then both GPUs are read by UUID, the MIG instances are listed, and NVML is shut down
    assert inventory.source == "nvml"
    assert inventory.cuda_version == "12.4"
    h100, a100 = inventory.gpus
    assert (h100.uuid, h100.memory_total_mib, h100.memory_used_mib) == ("GPU-aaaa", 81559, 500)
    assert h100.utilization_percent == 12
    assert h100.driver_version == "550.54.15"
    assert h100.minor_number == 4
    assert a100_minor_unknown(a100)
    assert a100.mig_enabled
    assert a100.utilization_percent is None
    assert [(m.uuid, m.profile, m.memory_total_mib) for m in a100.mig_devices] == [
        ("MIG-1111", "3g.20gb", 19968),
        ("MIG-2222", "1g.5gb", 4864),
    ]
    # And NVML stays initialised between reads until the inventory is closed
    inventory_source = GPUInventory(backend="nvml", nvml_loader=lambda: nvml, cache_seconds=0)
    inventory_source.probe()
    inventory_source.probe()
    inventory_source.close()
    assert nvml.calls == ["init", "init", "shutdown"]


H200_UUID = "GPU-285afd17-379b-5020-0fd1-f9a5b08a4445"


def test_a_real_h200_reads_the_same_through_nvidia_smi_and_nvml(fake_smi: FakeSmi) -> None:
    """tests/fixtures/smi/h200 is what nvidia-smi printed on a real, idle H200 (driver
    580.159.04), where NVML said: 143771 MiB total, 616 MiB reserved by the driver, and a
    version-1 ``used`` of 615 MiB that counts the reserved memory; nvidia-smi said 0 MiB used."""
    # Given the recorded nvidia-smi and an NVML that answers as that GPU did
    fake_smi("h200")
    nvml = fake_nvml(
        [
            {
                "uuid": H200_UUID,
                "name": "NVIDIA H200",
                "memory": (143771, 0),
                "reserved": 616,
                "util": 0,
                "minor": 0,
                "pci": "00000000:00:06.0",
            }
        ]
    )
    # When both probes read it
    smi = smi_only().probe()
    through_nvml = GPUInventory(backend="nvml", nvml_loader=lambda: nvml).probe()
    # Then they agree on every field of the GPU, used memory included (the driver's reserve
    # is not the user's)
    assert (smi.driver_version, smi.cuda_version) == ("580.159.04", "13.0")
    assert smi.warnings == ()

    def seen(gpu: GPU) -> tuple[object, ...]:
        return (
            gpu.uuid,
            gpu.index,
            gpu.name,
            gpu.memory_total_mib,
            gpu.memory_used_mib,
            gpu.utilization_percent,
            gpu.pci_bus_id,
            gpu.mig_enabled,
        )

    assert [seen(g) for g in through_nvml.gpus] == [seen(g) for g in smi.gpus]
    assert seen(smi.gpus[0]) == (
        H200_UUID,
        0,
        "NVIDIA H200",
        143771,
        0,
        0,
        "00000000:00:06.0",
        False,
    )


def test_nvml_without_the_second_memory_version_counts_what_version_one_says() -> None:
    # Given a driver that only answers the first version of the memory query
    nvml = fake_nvml(
        [
            {
                "uuid": "GPU-aaaa",
                "name": "NVIDIA T4",
                "memory": (15360, 10),
                "reserved": 250,
                "v1_only": True,
            }
        ]
    )
    # When it is read, then the used memory is version one's (reserve included): no error
    (gpu,) = GPUInventory(backend="nvml", nvml_loader=lambda: nvml).probe().gpus
    assert (gpu.memory_total_mib, gpu.memory_used_mib) == (15360, 260)


def test_nvml_failure_while_reading_restarts_nvml_next_time(fake_smi: FakeSmi) -> None:
    # Given NVML that starts but then loses the GPU while it is being read
    fake_smi("two-a100")
    nvml = fake_nvml([{"uuid": "GPU-aaaa", "name": "NVIDIA L4", "memory": (23034, 0)}])

    def lost() -> int:
        raise NVMLError("GPU is lost")

    nvml.__dict__["nvmlDeviceGetCount"] = lost
    inventory = GPUInventory(nvml_loader=lambda: nvml, cache_seconds=0)
    # When the inventory is read
    result = inventory.probe()
    # Then NVML is shut down and nvidia-smi answers instead
    assert result.source == "nvidia-smi"
    assert nvml.calls == ["init", "shutdown"]


def a100_minor_unknown(gpu: Any) -> bool:
    return gpu.minor_number is None


def test_nvml_without_library_falls_back_to_nvidia_smi(fake_smi: FakeSmi) -> None:
    # Given NVML cannot find its library but nvidia-smi works
    fake_smi("two-a100")
    nvml = fake_nvml([], init_error=NVMLErrorLibraryNotFound("not found"))
    # When the inventory is read in auto mode
    inventory = GPUInventory(nvml_loader=lambda: nvml).probe()
    # Then the nvidia-smi answer is used
    assert inventory.source == "nvidia-smi"
    assert len(inventory.gpus) == 2


def test_no_driver_at_all_gives_both_reasons(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    # Given no NVML library and no nvidia-smi
    monkeypatch.setenv("PATH", str(tmp_path))
    nvml = fake_nvml([], init_error=NVMLErrorLibraryNotFound("not found"))
    # When the inventory is read
    inventory = GPUInventory(nvml_loader=lambda: nvml).probe()
    # Then "no GPU" is reported with both reasons
    assert inventory.gpus == ()
    assert inventory.reason is not None
    assert "(libnvidia-ml.so.1) was not found" in inventory.reason
    assert "nvidia-smi was not found on PATH" in inventory.reason


def test_missing_nvml_package_is_a_reason_not_an_error() -> None:
    def loader() -> ModuleType:
        raise ImportError("No module named 'pynvml'")

    with pytest.raises(ProbeUnavailable, match="nvidia-ml-py package is not installed"):
        NvmlProbe(loader).probe()


def test_importing_the_package_does_not_touch_nvml() -> None:
    # When jupyter_gpudev and its app are imported in a fresh interpreter
    code = (
        "import sys, jupyter_gpudev, jupyter_gpudev.app, jupyter_gpudev.cli.main,"
        " jupyter_gpudev.engine.gpus;"
        "print('pynvml' in sys.modules)"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    # Then pynvml was not even imported
    assert out.stdout.strip() == "False"


@pytest.mark.parametrize(
    ("value", "expected"), [(12040, "12.4"), (11080, "11.8"), (12000, "12.0"), (13010, "13.1")]
)
def test_cuda_version_from_int(value: int, expected: str) -> None:
    assert cuda_version_from_int(value) == expected


@given(st.text())
def test_parser_never_raises_on_arbitrary_text(text: str) -> None:
    gpus, warnings = parse_smi_csv(text)
    assert all(g.uuid.startswith(("GPU-", "MIG-")) for g in gpus)
    assert isinstance(warnings, list)
    parse_smi_list(text)


@given(
    st.lists(
        st.tuples(
            st.uuids(),
            st.integers(min_value=0, max_value=200_000),
            st.integers(min_value=0, max_value=100),
        ),
        max_size=8,
        unique_by=lambda t: t[0],
    )
)
def test_parser_reads_back_what_nvidia_smi_would_print(
    rows: list[tuple[Any, int, int]],
) -> None:
    text = "\n".join(
        f"{i}, GPU-{uuid}, NVIDIA L40S, {total}, {total // 2}, {util}, 550.90.07, "
        f"00000000:{i:02X}:00.0, Disabled"
        for i, (uuid, total, util) in enumerate(rows)
    )
    gpus, warnings = parse_smi_csv(text)
    assert warnings == []
    assert [(g.uuid, g.memory_total_mib, g.utilization_percent) for g in gpus] == [
        (f"GPU-{uuid}", total, util) for uuid, total, util in rows
    ]
    assert len(SMI_FIELDS) == 9


def test_reads_within_cache_seconds_share_one_probe() -> None:
    # Given an inventory that caches for a minute
    nvml = fake_nvml([{"uuid": "GPU-aaaa", "name": "NVIDIA L4", "memory": (23034, 0)}])
    reads: list[int] = []
    count = nvml.__dict__["nvmlDeviceGetCount"]

    def counting() -> int:
        reads.append(1)
        return int(count())

    nvml.__dict__["nvmlDeviceGetCount"] = counting
    inventory = GPUInventory(backend="nvml", nvml_loader=lambda: nvml, cache_seconds=60)
    # When it is asked three times
    results = [inventory.probe() for _ in range(3)]
    # Then NVML was read once and every caller got the same answer
    assert len(reads) == 1
    assert results[0] is results[1] is results[2]
    # And with caching off, every call reads
    inventory.cache_seconds = 0
    inventory.probe()
    assert len(reads) == 2


# --------------------------------------------------------------------------------------------
# nvidia-smi on another host, through a runner
# --------------------------------------------------------------------------------------------


class RecordedSmi:
    """A runner answering like tests/fixtures/fake-nvidia-smi from a recorded folder:
    query.csv for --query-gpu, list.txt for -L, q.txt for -q; ``code`` for every call."""

    def __init__(self, scenario: str = "two-a100", code: int = 0, stderr: str = "") -> None:
        self.folder = FIXTURES / "smi" / scenario
        self.code = code
        self.stderr = stderr
        self.calls: list[tuple[list[str], float]] = []

    def __call__(self, argv: list[str], timeout: float) -> subprocess.CompletedProcess[str]:
        self.calls.append((argv, timeout))
        if self.code != 0:
            return subprocess.CompletedProcess(argv, self.code, "", self.stderr)
        args = argv[1:]
        query = next((a for a in args if a.startswith("--query-gpu=")), None)
        if query is not None:
            assert query.split("=", 1)[1].split(",") == list(SMI_FIELDS)
            assert "--format=csv,noheader,nounits" in args
            name = "query.csv"
        elif args[:1] == ["-L"]:
            name = "list.txt"
        elif args[:1] == ["-q"]:
            name = "q.txt"
        else:
            name = "default.txt"
        path = self.folder / name
        return subprocess.CompletedProcess(argv, 0, path.read_text() if path.exists() else "", "")


@pytest.mark.parametrize("scenario", ["two-a100", "mig-a100"])
def test_a_remote_nvidia_smi_reads_what_the_local_one_reads(
    fake_smi: Callable[[str], Path], scenario: str
) -> None:
    # Given the same recorded nvidia-smi here (on PATH) and on a remote host (through a runner)
    fake_smi(scenario)
    local = GPUInventory(backend="nvidia-smi").probe()
    runner = RecordedSmi(scenario)
    # When the remote one is probed with a path that exists only there
    remote = NvidiaSmiProbe(
        "/opt/nvidia/bin/nvidia-smi", 4.0, runner=runner, where="host 'x'"
    ).probe()
    # Then it finds the same GPUs, driver and CUDA version
    assert local.gpus
    assert remote == local
    # And every call went to the runner, with that path (not looked up here) and the timeout
    assert runner.calls
    assert all(argv[0] == "/opt/nvidia/bin/nvidia-smi" for argv, _ in runner.calls)
    assert all(timeout == 4.0 for _, timeout in runner.calls)


def test_a_remote_nvidia_smi_that_is_not_installed_names_the_host() -> None:
    runner = RecordedSmi(code=127, stderr="bash: nvidia-smi: command not found")
    probe = NvidiaSmiProbe("nvidia-smi", runner=runner, where="host 'x'")
    with pytest.raises(ProbeUnavailable) as caught:
        probe.probe()
    assert str(caught.value) == "nvidia-smi was not found on host 'x'"


def test_a_remote_nvidia_smi_that_fails_says_its_exit_and_first_line() -> None:
    runner = RecordedSmi(code=9, stderr="NVIDIA-SMI has failed\nmore")
    with pytest.raises(ProbeUnavailable, match=r"^nvidia-smi failed \(exit 9\): NVIDIA-SMI has"):
        NvidiaSmiProbe("nvidia-smi", runner=runner, where="host 'x'").probe()


def test_a_remote_nvidia_smi_that_hangs_is_unavailable() -> None:
    def hangs(argv: list[str], timeout: float) -> subprocess.CompletedProcess[str]:
        raise subprocess.TimeoutExpired(argv, timeout)

    with pytest.raises(ProbeUnavailable, match="did not answer in 3 s"):
        NvidiaSmiProbe("nvidia-smi", 3.0, runner=hangs).probe()


def nvml_must_not_load() -> ModuleType:
    raise AssertionError("NVML reads this machine's GPUs; a remote inventory must not load it")


@pytest.mark.parametrize("backend", ["auto", "nvidia-smi"])
def test_a_remote_inventory_never_tries_nvml(backend: str) -> None:
    runner = RecordedSmi()
    inventory = GPUInventory(
        nvml_must_not_load,
        runner=runner,
        where="host 'x'",
        backend=backend,
        nvidia_smi_path="nvidia-smi",
    )
    try:
        result = inventory.probe()
    finally:
        inventory.close()
    assert result.source == "nvidia-smi"
    assert [g.uuid for g in result.gpus] == [
        "GPU-5d5ba0d6-d33d-2b2c-524d-9e3d8d2b8a77",
        "GPU-8f2a9c41-7b3e-4c55-9d0a-2e6f1b7c3d90",
    ]
    assert runner.calls[0][0][0] == "nvidia-smi"


def test_a_remote_inventory_without_nvidia_smi_says_so_for_that_host() -> None:
    inventory = GPUInventory(
        nvml_must_not_load, runner=RecordedSmi(code=127), where="host 'x'", backend="auto"
    )
    try:
        result = inventory.probe()
    finally:
        inventory.close()
    assert (result.source, result.gpus) == ("none", ())
    assert result.reason == "nvidia-smi: nvidia-smi was not found on host 'x'"


def test_an_inventory_waits_more_than_0_and_caches_0_or_more_seconds() -> None:
    # Given 0 s of cache: every read is a probe
    assert GPUInventory(backend="none", cache_seconds=0).cache_seconds == 0
    # Then a negative cache, or a wait of 0 s for nvidia-smi (never an answer), is refused
    with pytest.raises(TraitError, match=r"'cache_seconds' trait .* not be less than 0"):
        GPUInventory(backend="none", cache_seconds=-1)
    with pytest.raises(TraitError, match=r"'timeout' trait .* should be more than 0"):
        GPUInventory(backend="none", timeout=0)
