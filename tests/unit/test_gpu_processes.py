"""The processes on the GPUs: ``nvidia-smi --query-compute-apps`` through the fake nvidia-smi on
PATH or a recorded runner (a remote host's), NVML through the fake pynvml of ``test_gpus``."""

from __future__ import annotations

import subprocess
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from jupyter_gpudev.engine import (
    APPS_FIELDS,
    GPUInventory,
    GPUProcess,
    NvidiaSmiProbe,
    parse_smi_apps,
)
from jupyter_gpudev.engine.attribution import ProcSnapshot, assign
from jupyter_gpudev.engine.gpuprocs import smi_processes
from tests.conftest import FIXTURES
from tests.unit.test_gpus import NVMLError, fake_nvml

FakeSmi = Callable[[str], Path]

A100_0 = "GPU-5d5ba0d6-d33d-2b2c-524d-9e3d8d2b8a77"
A100_1 = "GPU-8f2a9c41-7b3e-4c55-9d0a-2e6f1b7c3d90"


def smi_only(**kwargs: Any) -> GPUInventory:
    return GPUInventory(backend="nvidia-smi", **kwargs)


# --------------------------------------------------------------------------------------------
# nvidia-smi
# --------------------------------------------------------------------------------------------


def test_nvidia_smi_lists_each_process_with_its_gpu_and_memory(fake_smi: FakeSmi) -> None:
    # Given an nvidia-smi whose two A100s run three processes
    fake_smi("two-a100")
    # When the GPU processes are read
    processes = smi_only().processes()
    # Then each is there by GPU UUID and host PID, with its memory, and nothing is missing
    assert processes.source == "nvidia-smi"
    assert (processes.reason, processes.warnings, processes.unknown) == (None, (), ())
    assert processes.processes == (
        GPUProcess(A100_0, 4242, 1024),
        GPUProcess(A100_0, 4343, 200),
        GPUProcess(A100_1, 4444, 2),
    )
    assert processes.listed == (A100_0, A100_1)
    # And nvidia-smi gives no per-process utilisation
    assert processes.sampled == ()
    assert all(p.sm_percent is None for p in processes.processes)


def test_nvidia_smi_without_processes_is_an_empty_list_not_an_error(fake_smi: FakeSmi) -> None:
    # Given an nvidia-smi whose GPU runs nothing (it prints nothing)
    fake_smi("h200")
    # When the GPU processes are read, then there are none, and no reason
    processes = smi_only().processes()
    assert (processes.source, processes.processes, processes.reason) == ("nvidia-smi", (), None)


def test_not_available_memory_is_none(fake_smi: FakeSmi) -> None:
    # Given a driver that cannot say what each process holds ("[N/A]", "[Not Supported]")
    fake_smi("apps-na")
    # When they are read, then the processes are there, their memory None, no warning
    processes = smi_only().processes()
    assert [(p.pid, p.memory_used_mib) for p in processes.processes] == [(4242, None), (4444, None)]
    assert processes.warnings == ()


def test_garbled_output_is_unavailable_with_a_warning_per_line(fake_smi: FakeSmi) -> None:
    # Given output with an error line, bad PIDs, a bad UUID, short and long lines, a broken
    # quote and a PID with shell text in it
    fake_smi("apps-garbage")
    # When it is read
    processes = smi_only().processes()
    # Then nothing is guessed: no process, one warning a line, and a reason saying so
    assert processes.processes == ()
    assert len(processes.warnings) == 8
    assert processes.reason == "nvidia-smi's process list could not be read"


def test_failing_nvidia_smi_gives_a_reason_not_an_exception(fake_smi: FakeSmi) -> None:
    fake_smi("no-driver")
    processes = smi_only().processes()
    assert (processes.source, processes.processes) == ("none", ())
    assert processes.reason is not None
    assert "exit 9" in processes.reason


def test_good_lines_among_bad_ones_are_kept() -> None:
    text = f"{A100_0}, 12, 5\nnonsense\n{A100_0}, 12, 6\n{A100_1}, 13, 7 MiB\n"
    processes, warnings = parse_smi_apps(text)
    # the duplicate is reported, the unreadable memory is None with a warning
    assert processes == [GPUProcess(A100_0, 12, 5), GPUProcess(A100_1, 13, None)]
    assert len(warnings) == 3
    result = smi_processes(text)
    assert result.reason is None
    assert len(result.processes) == 2


def test_no_running_processes_line_is_no_process() -> None:
    assert smi_processes("No running processes found\n").processes == ()
    assert smi_processes("No running processes found\n").reason is None


def test_nvidia_smis_one_list_says_every_gpu_it_does_not_name_is_idle() -> None:
    # nvidia-smi lists every GPU's processes at once: a GPU it does not name runs none
    listed = assign(smi_processes(f"{A100_0}, 12, 5\n"), ProcSnapshot())
    idle = listed.gpu(A100_1)
    assert idle is not None
    assert idle.listed
    assert idle.processes == ()
    # an answer that could not be read says nothing of any GPU
    unread = assign(smi_processes("garbage\n"), ProcSnapshot())
    assert unread.gpu(A100_1) is None
    assert unread.gpu(A100_0) is None


def test_too_many_lines_are_cut_with_a_warning() -> None:
    text = "\n".join(f"{A100_0}, {pid}, 1" for pid in range(1, 70_000))
    processes, warnings = parse_smi_apps(text)
    assert len(processes) == 65_536
    assert warnings == ["nvidia-smi printed more than 65536 lines: the rest is unread"]


@given(st.text())
def test_the_process_parser_never_raises(text: str) -> None:
    result = smi_processes(text)
    assert all(0 < p.pid <= 4_194_304 for p in result.processes)
    assert all(p.gpu_uuid.startswith(("GPU-", "MIG-")) for p in result.processes)


@given(
    st.lists(
        st.tuples(
            st.sampled_from([A100_0, A100_1]),
            st.integers(min_value=1, max_value=4_194_304),
            st.one_of(st.none(), st.integers(min_value=0, max_value=200_000)),
        ),
        max_size=20,
        unique_by=lambda t: (t[0], t[1]),
    )
)
def test_the_process_parser_reads_back_what_nvidia_smi_would_print(
    rows: list[tuple[str, int, int | None]],
) -> None:
    text = "\n".join(f"{u}, {pid}, {'[N/A]' if m is None else m}" for u, pid, m in rows)
    processes, warnings = parse_smi_apps(text)
    assert warnings == []
    assert processes == [GPUProcess(u, pid, m) for u, pid, m in rows]


class RecordedApps:
    """A remote host's nvidia-smi: answers --query-compute-apps from a recorded folder."""

    def __init__(self, scenario: str) -> None:
        self.path = FIXTURES / "smi" / scenario / "compute-apps.csv"
        self.calls: list[list[str]] = []

    def __call__(self, argv: list[str], timeout: float) -> subprocess.CompletedProcess[str]:
        self.calls.append(argv)
        assert timeout > 0
        assert argv[1:] == [
            f"--query-compute-apps={','.join(APPS_FIELDS)}",
            "--format=csv,noheader,nounits",
        ]
        return subprocess.CompletedProcess(argv, 0, self.path.read_text(), "")


def test_a_remote_host_is_read_by_one_command_through_its_runner(fake_smi: FakeSmi) -> None:
    # Given the same recorded processes here and on a remote host
    fake_smi("two-a100")
    runner = RecordedApps("two-a100")
    remote = GPUInventory(runner=runner, where="host 'x'", nvidia_smi_path="/opt/nvidia-smi")
    # When both are read
    here, there = smi_only().processes(), remote.processes()
    # Then they agree, and the remote one was one command with the configured path
    assert here == there
    assert runner.calls == [
        [
            "/opt/nvidia-smi",
            f"--query-compute-apps={','.join(APPS_FIELDS)}",
            "--format=csv,noheader,nounits",
        ]
    ]


def test_a_remote_nvidia_smi_that_hangs_is_unavailable() -> None:
    def hangs(argv: list[str], timeout: float) -> subprocess.CompletedProcess[str]:
        raise subprocess.TimeoutExpired(argv, timeout)

    inventory = GPUInventory(runner=hangs, where="host 'x'", timeout=2.0)
    processes = inventory.processes()
    assert processes.reason == "nvidia-smi: nvidia-smi did not answer in 2 s"


def test_binary_output_of_a_local_nvidia_smi_is_unreadable_not_an_error(tmp_path: Path) -> None:
    # Given a local nvidia-smi that prints bytes that are not text
    smi = tmp_path / "nvidia-smi"
    smi.write_text("#!/bin/sh\nprintf '\\377\\376\\0GPU-\\200, 12, 1\\n'\n")
    smi.chmod(0o755)
    # When its processes are read, then the answer says it could not be read
    processes = NvidiaSmiProbe(str(smi)).processes()
    assert processes.reason == "nvidia-smi's process list could not be read"


def test_processes_are_cached_like_the_inventory(fake_smi: FakeSmi) -> None:
    runner = RecordedApps("two-a100")
    inventory = GPUInventory(runner=runner, cache_seconds=60)
    first, second = inventory.processes(), inventory.processes()
    assert first is second
    assert len(runner.calls) == 1
    inventory.cache_seconds = 0
    inventory.processes()
    assert len(runner.calls) == 2


def test_backend_none_has_no_processes() -> None:
    processes = GPUInventory(backend="none").processes()
    assert processes.reason == "GPU inventory is disabled by configuration"


# --------------------------------------------------------------------------------------------
# NVML
# --------------------------------------------------------------------------------------------


def busy_gpus() -> list[dict[str, Any]]:
    return [
        {
            "uuid": "GPU-aaaa",
            "name": "NVIDIA H100 80GB HBM3",
            "memory": (81559, 6000),
            "compute": [(700, 4096), (701, None)],
            "graphics": [(700, 4000), (702, 10)],
            "samples": [(700, 10, 50, 20), (700, 20, 70, 40), (701, 15, 0, 0), (999, 18, 9, 9)],
        },
        {
            "uuid": "GPU-bbbb",
            "name": "NVIDIA H100 80GB HBM3",
            "memory": (81559, 0),
            "compute": [],
            "samples": "not supported",
        },
    ]


def test_nvml_lists_compute_and_graphics_processes_with_their_utilisation() -> None:
    # Given an NVML with two GPUs: the first runs three processes, one of them both compute
    # and graphics, and samples their utilisation; the second runs none and samples nothing
    nvml = fake_nvml(busy_gpus())
    inventory = GPUInventory(backend="nvml", nvml_loader=lambda: nvml, cache_seconds=0)
    # When the processes are read
    processes = inventory.processes()
    # Then each process is there once, with the larger memory of the two lists, its type and
    # the mean of its samples (a sample of a process not listed is dropped)
    assert processes.source == "nvml"
    assert processes.processes == (
        GPUProcess("GPU-aaaa", 700, 4096, "C+G", 60, 30),
        GPUProcess("GPU-aaaa", 701, None, "C", 0, 0),
        GPUProcess("GPU-aaaa", 702, 10, "G", None, None),
    )
    assert processes.listed == ("GPU-aaaa", "GPU-bbbb")
    assert (processes.unknown, processes.sampled) == ((), ("GPU-aaaa",))
    # And the next read asks only for samples newer than those (none: no utilisation)
    again = inventory.processes()
    assert "samples:GPU-aaaa:20" in nvml.calls
    assert [p.sm_percent for p in again.processes] == [None, None, None]
    assert again.sampled == ("GPU-aaaa",)


def test_nvml_shares_the_inventorys_session() -> None:
    # Given an inventory read through NVML
    nvml = fake_nvml(busy_gpus())
    inventory = GPUInventory(backend="nvml", nvml_loader=lambda: nvml, cache_seconds=0)
    inventory.probe()
    # When the processes are read twice, then NVML was started once, for both
    inventory.processes()
    inventory.processes()
    inventory.close()
    assert [c for c in nvml.calls if c in ("init", "shutdown")] == ["init", "shutdown"]


@pytest.mark.parametrize("lacking", ["not supported", "function not found"])
def test_a_gpu_whose_driver_cannot_list_processes_is_unknown(lacking: str) -> None:
    # Given a driver that cannot list the first GPU's processes (nor sample them)
    gpus = busy_gpus()
    gpus[0]["compute"] = lacking
    gpus[0]["samples"] = "not supported"
    nvml = fake_nvml(gpus)
    # When the processes are read, then that GPU is unknown, the other listed: no error
    processes = GPUInventory(backend="nvml", nvml_loader=lambda: nvml).processes()
    assert (processes.unknown, processes.listed) == (("GPU-aaaa",), ("GPU-bbbb",))
    assert (processes.processes, processes.reason, processes.warnings) == ((), None, ())


def test_bindings_without_the_process_calls_leave_every_gpu_unknown() -> None:
    # Given NVML bindings too old to have the process calls
    nvml = fake_nvml(busy_gpus(), process_calls=False)
    # When the processes are read, then every GPU is unknown, and nothing failed
    processes = GPUInventory(backend="nvml", nvml_loader=lambda: nvml).processes()
    assert processes.source == "nvml"
    assert processes.unknown == ("GPU-aaaa", "GPU-bbbb")
    assert (processes.listed, processes.processes, processes.reason) == ((), (), None)


def test_a_gpu_lost_while_listing_is_a_warning_and_the_rest_is_read() -> None:
    nvml = fake_nvml(busy_gpus())
    running = nvml.__dict__["nvmlDeviceGetComputeRunningProcesses"]

    def lost(handle: dict[str, Any]) -> Any:
        if handle["uuid"] == "GPU-aaaa":
            raise NVMLError("GPU is lost")
        return running(handle)

    nvml.__dict__["nvmlDeviceGetComputeRunningProcesses"] = lost
    processes = GPUInventory(backend="nvml", nvml_loader=lambda: nvml).processes()
    assert processes.listed == ("GPU-bbbb",)
    assert processes.warnings == ("GPU-aaaa: GPU is lost",)


def test_nvml_failing_as_a_whole_falls_back_to_nvidia_smi(fake_smi: FakeSmi) -> None:
    # Given NVML that starts, then fails to count the GPUs
    fake_smi("two-a100")
    nvml = fake_nvml(busy_gpus())

    def lost() -> int:
        raise NVMLError("driver reloaded")

    nvml.__dict__["nvmlDeviceGetCount"] = lost
    # When the processes are read, then NVML is shut down and nvidia-smi answers
    processes = GPUInventory(nvml_loader=lambda: nvml).processes()
    assert processes.source == "nvidia-smi"
    assert len(processes.processes) == 3
    assert nvml.calls[-1] == "shutdown"


def test_a_remote_inventory_never_reads_processes_through_nvml() -> None:
    def must_not_load() -> Any:
        raise AssertionError("NVML reads this machine's GPUs")

    inventory = GPUInventory(must_not_load, runner=RecordedApps("two-a100"))
    assert inventory.processes().source == "nvidia-smi"
