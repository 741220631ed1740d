"""A dedicated container's first kernel (``kernels.first``): what the launcher is told, and
how its process is recognised in the engine's process listing."""

from __future__ import annotations

import json
import time
from pathlib import Path
from types import SimpleNamespace
from typing import Any, cast

import docker.errors
import pytest

from jupyter_gpudev.kernels import first as first_module
from jupyter_gpudev.kernels import process
from jupyter_gpudev.kernels.first import LAUNCHER, FirstKernel, instructions
from jupyter_gpudev.kernels.placements import PLACEMENTS
from jupyter_gpudev.kernels.process import (
    FIRST_ENDED,
    FIRST_HANDLE,
    FIRST_LISTED,
    FIRST_RUNNING,
    ContainerProcesses,
    argv_key,
    first_handle,
    first_kernel,
    first_launcher,
    is_first,
    launcher_of,
)
from jupyter_gpudev.labels import L_OWNER

CONNECTION = {"shell_port": 40001, "key": "s3cret", "ip": "0.0.0.0"}
ARGV = ["python3", "-m", "ipykernel_launcher", "-f", "/tmp/.gpudev/kernel-a.json"]


def told(**changes: Any) -> bytes:
    values: dict[str, Any] = {
        "connection": CONNECTION,
        "runtime_id": "kernel-a",
        "workdir": "/workspaces/w/notebooks",
        "environment": {"JPY_SESSION_NAME": "/w/notebooks/a b.ipynb"},
        "argv": ARGV,
    }
    values.update(changes)
    return instructions(**values)


def test_the_launcher_reads_one_value_a_line_in_order() -> None:
    lines = told().decode().split("\n")
    assert json.loads(lines[0]) == CONNECTION
    assert lines[1:4] == [
        "kernel-a",
        "/workspaces/w/notebooks",
        "JPY_SESSION_NAME=/w/notebooks/a b.ipynb",
    ]
    assert lines[4] == ""  # the end of the environment
    assert lines[5:10] == ARGV
    assert lines[10:] == ["", ""]  # the end of the argv, and of the input


def test_no_folder_is_an_empty_line() -> None:
    assert told(workdir=None).decode().split("\n")[2] == ""


@pytest.mark.parametrize(
    "changes",
    [
        {"environment": {"A": "two\nlines"}},
        {"environment": {"A": "nul\0"}},
        {"environment": {"NOT-A-NAME": "x"}},
        {"environment": {"A;B": "x"}},
        {"environment": {"1A": "x"}},
        {"argv": ["python3", "", "-f", "x"]},
        {"argv": ["python3", "a\nb"]},
        {"argv": []},
        {"workdir": "/a\nb"},
        {"workdir": "/a\rb"},
        {"runtime_id": "../x"},
        {"runtime_id": "a/b"},
        {"runtime_id": ""},
    ],
)
def test_a_value_that_is_not_one_line_leaves_the_kernel_to_an_exec(changes: dict[str, Any]) -> None:
    assert told(**changes) == b""


def test_the_key_is_in_the_input_never_in_the_command() -> None:
    first = FirstKernel("kernel-a", lambda *_: b"x")
    command = first.command(("sleep", "infinity"))
    assert command[:3] == ("/bin/sh", "-c", LAUNCHER)
    assert command[-2:] == ("sleep", "infinity")
    assert LAUNCHER.startswith(FIRST_RUNNING + "\n")
    assert all("s3cret" not in part for part in command)


class _Created:
    """A container just created and started: its engine lists ``listings`` (one per call, the
    last one again), docker-init and the launcher by default."""

    def __init__(self, image: str, listings: list[Any] | None = None) -> None:
        self.id = "c" * 64
        self.attrs = {"Image": image, "Config": {"WorkingDir": "/w", "Labels": {L_OWNER: "a"}}}
        self.client = SimpleNamespace(api=_Engine(listings or [[INIT_ROW, LAUNCHER_ROW]]))


def test_an_image_whose_kernel_command_is_not_known_gets_no_first_kernel() -> None:
    calls: list[Any] = []

    def lines(*args: Any) -> bytes:
        calls.append(args)
        return b"lines"

    first = FirstKernel("kernel-a", lines)
    assert first.instructions(None, _Created("sha256:" + "0" * 64)) == b""
    first.delivered()
    assert not first.started
    assert not calls


def test_a_known_image_gets_its_kernel_command_and_counts_as_started_once_delivered() -> None:
    image = "sha256:" + "1" * 64
    PLACEMENTS.remember_argv(
        argv_key(_Created(image)),
        ["python3", "-m", "ipykernel_launcher", "-f", "{connection_file}"],
    )
    first = FirstKernel(
        "kernel-a", lambda _host, _container, runtime, argv: f"{runtime} {argv}".encode()
    )
    assert first.instructions(None, _Created(image)).startswith(b"kernel-a ")
    assert not first.argv  # written, not yet known to have reached the container
    first.delivered()
    assert first.started
    assert first.argv == ("python3", "-m", "ipykernel_launcher", "-f", "{connection_file}")
    # And its launcher's host PID was taken before it was told anything: its handle names it
    assert first.launcher == 100
    assert first.handle == "first:100"


LAUNCHER_ROW = [
    "100",
    "90",
    f"{FIRST_LISTED} IFS= read -r connection ... gpudev-kernel sleep infinity",
]
INIT_ROW = ["90", "80", "/sbin/docker-init -- /bin/sh -c #gpudev-kernel-running ..."]


def test_the_launcher_is_pinned_once_listed_before_it_is_told_anything() -> None:
    # Given a container just started whose init has not run the launcher yet
    image = "sha256:" + "2" * 64
    PLACEMENTS.remember_argv(argv_key(_Created(image)), ["python3", "{connection_file}"])
    container = _Created(image, [[INIT_ROW], [INIT_ROW], [INIT_ROW, LAUNCHER_ROW]])
    first = FirstKernel("kernel-a", lambda *_: b"lines")
    # When it is told what to run
    assert first.instructions(None, container) == b"lines"
    # Then the launcher was waited for, and its PID is the one that counts from then on
    assert container.client.api.tops == 3
    assert first.launcher == 100


@pytest.mark.parametrize(
    "listing",
    [
        [INIT_ROW],  # never listed
        [INIT_ROW, LAUNCHER_ROW, ["120", "90", LAUNCHER_ROW[2]]],  # two: which one is not known
        docker.errors.APIError("Unexpected pid"),  # the engine could not list it
    ],
)
def test_a_launcher_not_pinned_is_told_nothing_and_the_kernel_is_execd(
    monkeypatch: pytest.MonkeyPatch, listing: Any
) -> None:
    monkeypatch.setattr(first_module, "FIRST_PIN_WAIT", 0.05)
    image = "sha256:" + "3" * 64
    PLACEMENTS.remember_argv(argv_key(_Created(image)), ["python3", "{connection_file}"])
    first = FirstKernel("kernel-a", lambda *_: b"lines")
    assert first.instructions(None, _Created(image, [listing])) == b""
    first.delivered()
    assert not first.started
    assert first.launcher is None


def test_the_launcher_is_the_one_marked_process_of_a_container_just_started() -> None:
    assert launcher_of([INIT_ROW, LAUNCHER_ROW]) == 100
    assert launcher_of([INIT_ROW]) is None
    assert launcher_of([INIT_ROW, LAUNCHER_ROW, ["101", "100", LAUNCHER_ROW[2]]]) is None
    assert launcher_of([["x", "90", LAUNCHER_ROW[2]]]) is None


def test_a_first_kernels_handle_names_its_launcher_where_it_was_pinned() -> None:
    assert first_handle(100) == "first:100"
    assert first_handle(None) == FIRST_HANDLE
    assert first_launcher("first:100") == 100
    assert all(is_first(handle) for handle in ("first", "first:100"))
    for handle in ("first", "first:", "first:x", "first:-1", f"first:{1 << 40}", "0" * 64):
        assert first_launcher(handle) is None
    assert not any(is_first(handle) for handle in ("0" * 64, "pod:kernel-a", "firsts", ""))


def test_the_launcher_runs_while_listed_and_its_child_is_the_kernel() -> None:
    rows = [
        ["90", "80", "/sbin/docker-init -- /bin/sh -c ..."],
        LAUNCHER_ROW,
        ["101", "100", "python3 -m ipykernel_launcher -f /tmp/.gpudev/kernel-a.json"],
        ["102", "101", "python3 -c child"],
    ]
    assert first_kernel(rows) == (True, 101, -1)


def test_a_launcher_not_yet_forked_runs_without_a_kernel_pid() -> None:
    assert first_kernel([["90", "80", "/sbin/docker-init"], LAUNCHER_ROW]) == (True, None, -1)


def test_the_launchers_fork_is_the_kernel_before_it_becomes_it_and_not_its_commands() -> None:
    # the subshell that becomes the kernel is listed as the launcher until then, and runs
    # commands of its own (mkdir) meanwhile
    fork = ["101", "100", LAUNCHER_ROW[2]]
    mkdir = ["102", "101", "mkdir -p /tmp/.gpudev"]
    assert first_kernel([LAUNCHER_ROW, mkdir, fork]) == (True, 101, -1)


@pytest.mark.parametrize(
    ("listed", "code"),
    [("0", 0), ("3", 3), ("255", 255), ("", -1), ("x", -1), ("99999", -1)],
)
def test_the_shell_the_launcher_becomes_lists_the_kernels_exit_code(listed: str, code: int) -> None:
    rows = [["100", "90", f'/bin/sh -c {FIRST_ENDED}{listed}?"$@"?exit gpudev-kernel sleep']]
    assert first_kernel([*rows, ["101", "100", "sleep infinity"]]) == (False, None, code)


def test_no_launcher_listed_means_the_first_kernel_ended() -> None:
    assert first_kernel(
        [["90", "80", "/sbin/docker-init -- sleep infinity"], ["100", "90", "sleep infinity"]]
    ) == (False, None, -1)
    assert first_kernel([]) == (False, None, -1)


@pytest.mark.parametrize(
    "rows",
    [
        [LAUNCHER_ROW, ["x", "100", "python3"]],
        [LAUNCHER_ROW, ["-5", "100", "python3"]],
        [LAUNCHER_ROW, [str(1 << 40), "100", "python3"]],
        [LAUNCHER_ROW, "not a row", None, ["101"], {"pid": 1}],
    ],
)
def test_hostile_rows_give_no_pid(rows: list[Any]) -> None:
    assert first_kernel(rows) == (True, None, -1)
    assert first_kernel(rows, 100) == (True, None, -1)


#: A process of the container's user (their kernel runs any code) that calls itself the
#: launcher: ``/bin/sh -c "#gpudev-kernel-running..."`` exec'd, a child of init once its
#: parent is gone.
DECOY = ["200", "90", f"{FIRST_LISTED} sleep 600"]
ENDED = ["100", "90", f'/bin/sh -c {FIRST_ENDED}3?"$@"?exit gpudev-kernel sleep infinity']


def test_a_decoy_does_not_keep_an_ended_pinned_kernel_running() -> None:
    rows = [INIT_ROW, DECOY, ENDED, ["101", "100", "sleep infinity"]]
    assert first_kernel(rows, 100) == (False, None, 3)


def test_a_decoys_child_is_never_the_pinned_launchers_kernel() -> None:
    rows = [INIT_ROW, DECOY, ["201", "200", "python3 -c decoy"], LAUNCHER_ROW]
    rows.append(["101", "100", "python3 -m ipykernel_launcher"])
    assert first_kernel(rows, 100) == (True, 101, -1)
    # not forked yet: running, its PID not known, whatever the decoy's child
    assert first_kernel(rows[:4], 100) == (True, None, -1)


def test_a_pinned_launcher_listed_as_something_else_or_not_at_all_ended_without_a_code() -> None:
    assert first_kernel([INIT_ROW, DECOY, ["100", "90", "sleep infinity"]], 100) == (
        False,
        None,
        -1,
    )
    assert first_kernel([INIT_ROW, DECOY, ["201", "200", "python3"]], 100) == (False, None, -1)
    assert first_kernel([], 100) == (False, None, -1)


def test_without_a_pinned_launcher_the_marked_processes_tell_as_before() -> None:
    # an earlier version's record: any marked process counts (a decoy misleads it)
    assert first_kernel([INIT_ROW, DECOY, ENDED, ["101", "100", "sleep"]]) == (True, None, -1)
    assert first_kernel([INIT_ROW, ENDED, ["101", "100", "sleep"]]) == (False, None, 3)
    assert first_kernel([INIT_ROW, LAUNCHER_ROW, ["101", "100", "python3"]]) == (True, 101, -1)


def test_a_value_that_is_not_utf8_leaves_the_kernel_to_an_exec() -> None:
    # a notebook folder whose name is not UTF-8 (os.fsdecode's surrogates)
    assert told(workdir="/w/\udcff") == b""


class _Engine:
    """The engine's answers to ``top`` (a list, one per call; an exception is raised) and to
    an inspect (running or not)."""

    def __init__(self, listings: list[Any], running: bool = True) -> None:
        self.listings = listings
        self.running = running
        self.tops = 0

    def top(self, _container: str, ps_args: str) -> dict[str, Any]:
        assert "--cols" in ps_args  # the container chooses its processes' arguments
        self.tops += 1
        answer = self.listings.pop(0) if len(self.listings) > 1 else self.listings[0]
        if isinstance(answer, Exception):
            raise answer
        return {"Processes": answer}

    def inspect_container(self, _container: str) -> dict[str, Any]:
        return {"State": {"Running": self.running}}


def watched(engine: _Engine) -> ContainerProcesses:
    container = SimpleNamespace(id="c" * 64, attrs={}, client=SimpleNamespace(api=engine))
    return ContainerProcesses(cast(Any, None), container)


RUNNING = [LAUNCHER_ROW, ["101", "100", "python3 -m ipykernel_launcher"]]
NOTHING = [["90", "80", "/sbin/docker-init -- /bin/sh -c ..."]]


def test_a_first_kernel_is_not_taken_for_dead_on_one_listing_without_it() -> None:
    engine = _Engine([NOTHING, NOTHING, RUNNING])
    assert watched(engine).exit_code(FIRST_HANDLE, "kernel-a") is None
    assert engine.tops == 3


def test_a_first_kernel_never_listed_again_is_gone() -> None:
    assert watched(_Engine([NOTHING])).exit_code(FIRST_HANDLE, "kernel-a") == -1


def test_a_first_kernels_end_is_taken_at_once() -> None:
    ended = [["100", "90", f"/bin/sh -c {FIRST_ENDED}0?x"]]
    engine = _Engine([ended])
    assert watched(engine).exit_code(FIRST_HANDLE, "kernel-a") == 0
    assert engine.tops == 1


def test_a_listing_the_engine_cannot_give_leaves_a_running_containers_kernel_running() -> None:
    failing = docker.errors.APIError("Unexpected pid")
    for handle in (FIRST_HANDLE, "first:100"):
        assert watched(_Engine([failing])).exit_code(handle, "kernel-a") is None
        assert watched(_Engine([failing], running=False)).exit_code(handle, "kernel-a") == -1


def test_a_pinned_kernel_ended_beside_a_decoy_is_seen_ended_at_once() -> None:
    engine = _Engine([[INIT_ROW, DECOY, ENDED, ["101", "100", "sleep infinity"]]])
    processes = watched(engine)
    assert processes.exit_code("first:100", "kernel-a") == 3
    assert engine.tops == 1
    started = time.monotonic()
    assert processes.host_pid("first:100") is None
    assert time.monotonic() - started < 0.5
    assert engine.tops == 2


def test_a_pinned_kernel_not_listed_is_gone_after_its_looks_whatever_the_decoys() -> None:
    engine = _Engine([[INIT_ROW, DECOY]])
    assert watched(engine).exit_code("first:100", "kernel-a") == -1
    assert engine.tops == process.FIRST_LOOKS


def test_a_pinned_kernels_pid_is_its_launchers_child() -> None:
    rows = [INIT_ROW, DECOY, ["201", "200", "python3"], LAUNCHER_ROW, ["101", "100", "python3"]]
    processes = watched(_Engine([rows]))
    assert processes.exit_code("first:100", "kernel-a") is None
    assert processes.host_pid("first:100") == 101


def test_a_kernel_reached_again_is_looked_up_once_not_waited_for() -> None:
    # A kernel reached again after a restart (no start watched): its launcher forked it long
    # ago; a decoy (an earlier version's record) or a launcher not forked makes no wait
    for handle, rows in (
        (FIRST_HANDLE, [INIT_ROW, DECOY, ENDED]),
        ("first:100", [INIT_ROW, LAUNCHER_ROW]),
    ):
        engine = _Engine([rows])
        started = time.monotonic()
        assert watched(engine).host_pid(handle) is None
        assert time.monotonic() - started < 0.5
        assert engine.tops == 1


def test_a_kernel_just_started_is_waited_for_until_its_launcher_forks_it() -> None:
    forked = [INIT_ROW, LAUNCHER_ROW, ["101", "100", "python3"]]
    engine = _Engine([[INIT_ROW, LAUNCHER_ROW], [INIT_ROW, LAUNCHER_ROW], forked])
    processes = watched(engine)
    assert processes.watch_start(lambda: None, 0) is None
    assert processes.host_pid("first:100") == 101
    assert engine.tops == 3


FULL_ID = "a" * 64
CGROUP = f"0::/system.slice/docker-{FULL_ID}.scope\n"
LAUNCHER_CMDLINE = b"/bin/sh\0-c\0" + LAUNCHER.encode() + b"\0gpudev-kernel\0sleep\0"


def fake_proc(root: Path, processes: dict[int, tuple[bytes, str, list[int]]]) -> Path:
    """A ``/proc`` with ``processes``: PID -> (command line, cgroup, children)."""
    for pid, (cmdline, cgroup, children) in processes.items():
        (root / str(pid) / "task" / str(pid)).mkdir(parents=True)
        (root / str(pid) / "cmdline").write_bytes(cmdline)
        (root / str(pid) / "cgroup").write_text(cgroup)
        (root / str(pid) / "task" / str(pid) / "children").write_text(
            "".join(f"{child} " for child in children)
        )
    return root


def test_the_launcher_is_read_from_proc_as_the_inits_one_child_in_the_container(
    tmp_path: Path,
) -> None:
    init = (b"/sbin/docker-init\0--\0/bin/sh\0", CGROUP, [101])
    proc = fake_proc(tmp_path, {100: init, 101: (LAUNCHER_CMDLINE, CGROUP, [])})
    assert first_module.launcher_in_proc(100, FULL_ID, proc) == 101
    # Not another container's, nor where the init has another child, or none yet
    assert first_module.launcher_in_proc(100, "b" * 64, proc) is None


@pytest.mark.parametrize(
    "processes",
    [
        # the init has not run the launcher yet (its child still the init's program)
        {100: (b"/sbin/docker-init\0", CGROUP, [101]), 101: (b"/sbin/docker-init\0", CGROUP, [])},
        # two children
        {
            100: (b"/sbin/docker-init\0", CGROUP, [101, 102]),
            101: (LAUNCHER_CMDLINE, CGROUP, []),
            102: (LAUNCHER_CMDLINE, CGROUP, []),
        },
        # a process that calls itself the launcher in another cgroup (this /proc is not the
        # engine's: a server in a container of its own)
        {100: (b"/sbin/docker-init\0", "0::/\n", [101]), 101: (LAUNCHER_CMDLINE, "0::/\n", [])},
        # nothing there
        {},
    ],
)
def test_a_launcher_not_read_from_proc_is_asked_of_the_engine(
    tmp_path: Path, processes: dict[int, tuple[bytes, str, list[int]]]
) -> None:
    assert first_module.launcher_in_proc(100, FULL_ID, fake_proc(tmp_path, processes)) is None


def test_a_container_without_an_init_has_the_launcher_as_its_first_process(
    tmp_path: Path,
) -> None:
    proc = fake_proc(tmp_path, {100: (LAUNCHER_CMDLINE, CGROUP, [])})
    assert first_module.launcher_in_proc(100, FULL_ID, proc) == 100
