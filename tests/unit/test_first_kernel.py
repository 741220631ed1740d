"""A dedicated container's first kernel (``kernels.first``): what the launcher is told, and
how its process is recognised in the engine's process listing."""

from __future__ import annotations

import json
from types import SimpleNamespace
from typing import Any, cast

import docker.errors
import pytest

from jupyter_gpudev.kernels.first import LAUNCHER, FirstKernel, instructions
from jupyter_gpudev.kernels.placements import PLACEMENTS
from jupyter_gpudev.kernels.process import (
    FIRST_ENDED,
    FIRST_HANDLE,
    FIRST_LISTED,
    FIRST_RUNNING,
    ContainerProcesses,
    argv_key,
    first_kernel,
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
    def __init__(self, image: str) -> None:
        self.attrs = {"Image": image, "Config": {"WorkingDir": "/w", "Labels": {L_OWNER: "a"}}}


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


LAUNCHER_ROW = [
    "100",
    "90",
    f"{FIRST_LISTED} IFS= read -r connection ... gpudev-kernel sleep infinity",
]


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
    assert watched(_Engine([failing])).exit_code(FIRST_HANDLE, "kernel-a") is None
    assert watched(_Engine([failing], running=False)).exit_code(FIRST_HANDLE, "kernel-a") == -1
