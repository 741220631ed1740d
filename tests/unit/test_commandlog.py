"""The command log's wrapper, run for real by /bin/sh (with its paths moved into a temporary
folder), and how a log is read and shown."""

from __future__ import annotations

import io
import os
import subprocess
import tarfile
from pathlib import Path

from jupyter_gpudev.changes import classify, dockerfile
from jupyter_gpudev.containers import commandlog


def test_the_wrapper_notes_the_command_then_runs_the_real_one(tmp_path: Path) -> None:
    shims, real, log = tmp_path / "shims", tmp_path / "bin", tmp_path / "commands.log"
    shims.mkdir()
    real.mkdir()
    script = commandlog.WRAPPER.replace(commandlog.SHIMS, str(shims)).replace(
        commandlog.LOG, str(log)
    )
    (shims / "pip").write_text(script)
    (shims / "pip").chmod(0o755)
    (real / "pip").write_text('#!/bin/sh\necho "real pip: $*"\nexit 3\n')
    (real / "pip").chmod(0o755)
    env = {"PATH": f"{shims}:{real}:/usr/bin:/bin"}
    # When the wrapper named `pip` is run
    done = subprocess.run(
        [str(shims / "pip"), "install", "-r", "requirements file.txt"],
        env=env,
        capture_output=True,
        text=True,
        check=False,
    )
    # Then the real one ran with the same arguments and its exit status came back
    assert (done.returncode, done.stdout) == (3, "real pip: install -r requirements file.txt\n")
    # And the command is in the log, after a time stamp
    stamp, _, command = log.read_text().rstrip("\n").partition(" ")
    assert stamp.endswith("Z")
    assert command == "pip install -r requirements file.txt"
    # And without a real one it says so, without running itself again
    (tmp_path / "empty").mkdir()
    alone = {"PATH": f"{shims}:{tmp_path / 'empty'}"}
    missing = subprocess.run(
        [str(shims / "pip")], env=alone, capture_output=True, text=True, check=False
    )
    assert (missing.returncode, missing.stderr) == (127, "pip: command not found\n")


def test_the_archive_holds_the_wrappers_and_an_open_log() -> None:
    with tarfile.open(fileobj=io.BytesIO(commandlog.archive())) as tar:
        members = {m.name: m for m in tar.getmembers()}
    assert members["var/log/gpudev"].mode == 0o1777
    assert members["var/log/gpudev/commands.log"].mode == 0o666
    assert {f"usr/local/lib/gpudev/shims/{t}" for t in commandlog.TOOLS} <= set(members)
    assert commandlog.path_with_shims(["PATH=/opt/conda/bin:/usr/bin"]) == (
        f"{commandlog.SHIMS}:/opt/conda/bin:/usr/bin"
    )
    assert commandlog.path_with_shims([]).endswith(":/usr/sbin:/usr/bin:/sbin:/bin")


def test_logged_commands_are_shown_as_escaped_comments() -> None:
    text = (
        "2026-11-25T03:00:00Z pip install x\n\n 2026 apt-get install ./a.deb\nZ evil\x1b[31m \\\n"
    )
    commands = commandlog.commands(text)
    assert commands == ["pip install x", "2026 apt-get install ./a.deb", "evil\x1b[31m \\"]
    assert dockerfile.command_lines(commands) == [
        "# commands run since the last commit (gpudev's command log, for reference):",
        "#   pip install x",
        "#   2026 apt-get install ./a.deb",
        "#   evil\\x1b[31m ",
    ]
    many = [f"pip install p{i}" for i in range(60)]
    assert dockerfile.command_lines(many)[1:3] == ["#   ... 10 earlier", "#   pip install p10"]
    assert os.path.basename(commandlog.LOG) == "commands.log"


def test_credentials_typed_in_a_command_are_never_shown() -> None:
    token = "ghp_" + "a" * 36
    assert (
        classify.redact_command(
            "pip install --index-url https://alice:s3cret@pypi.example/simple x"
        )
        == "pip install --index-url https://***@pypi.example/simple x"
    )
    assert classify.redact_command(f"npm config set --auth-token={token}") == (
        "npm config set --auth-token=***"
    )
    assert classify.redact_command(f"cargo login {token}") == "cargo login ***"
    assert classify.redact_command("conda install --password hunter2 numpy") == (
        "conda install --password *** numpy"
    )
    assert classify.redact_command("apt-get install ./a.deb") == "apt-get install ./a.deb"
