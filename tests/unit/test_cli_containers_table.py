"""The table ``jupyter gpudev ls``, ``start`` and ``resume`` print, with its warnings."""

from __future__ import annotations

from jupyter_gpudev.cli.containers import format_containers
from jupyter_gpudev.containers import DevContainerInfo


def info(*warnings: str) -> DevContainerInfo:
    return DevContainerInfo(
        name="box",
        container_id="c" * 64,
        host="local",
        environment="default",
        owner="alice",
        image="gpudev-python:bookworm",
        state="running",
        status="running",
        created="2026-11-28T00:00:00+00:00",
        gpu_uuids=("GPU-a",),
        lease_id="l1",
        ports={},
        warnings=warnings,
    )


def test_a_containers_warnings_follow_the_table_each_on_a_line_of_its_own() -> None:
    text = format_containers([info("its GPUs have done no work for 50 min", "second")])
    lines = text.splitlines()
    assert lines[0].split() == ["NAME", "HOST", "ENVIRONMENT", "STATE", "GPUS", "OWNER", "PORTS"]
    assert lines[-2:] == ["box: its GPUs have done no work for 50 min", "box: second"]


def test_a_warning_cannot_drive_the_terminal() -> None:
    # Given a warning carrying what a devcontainer.json's command key may hold: an OSC 52
    # sequence (sets the clipboard) and a line break
    text = format_containers([info("command failed (x\x1b]52;c;ZWNobyBoaQ==\x07)\nforged")])
    # Then it is printed as text, on its one line
    assert "\x1b" not in text
    assert "\x07" not in text
    assert text.splitlines()[-1].startswith("box: command failed")
    assert len(text.splitlines()) == 3


def test_no_cell_or_warning_can_reorder_or_hide_text() -> None:
    # Given an owner (shown to an administrator) and a warning with bidirectional overrides,
    # zero-width and line-separator characters, a line break
    box = info("the command \u2066failed\u2069 \u200b\u2028next")
    box = DevContainerInfo(**{**box.__dict__, "owner": "eve\u202e\nroot"})
    text = format_containers([box])
    # Then each is written out as an escape, and each row stays one line
    for char in ("\u202e", "\u2066", "\u2069", "\u200b", "\u2028"):
        assert char not in text
    assert len(text.splitlines()) == 3
    assert "\\u202e" in text.splitlines()[1]
