"""``printable``: a container's output made safe to write to a terminal (no engine needed)."""

from __future__ import annotations

import io
import re

import pytest

from jupyter_gpudev.cli.base import ProgressBar
from jupyter_gpudev.untrusted import printable

#: Characters a terminal acts on (C0, DEL, C1); newline and tab are only text.
CONTROLS = re.compile(r"[\x00-\x08\x0b-\x1f\x7f-\x9f]")


@pytest.mark.parametrize(
    ("hostile", "shown"),
    [
        # OSC 52: writes the clipboard (here "rm -rf ~"), ended by BEL or by ST (ESC \)
        ("\x1b]52;c;cm0gLXJmIH4=\x07", "\\x1b]52;c;cm0gLXJmIH4=\\x07"),
        ("\x1b]52;c;cm0gLXJmIH4=\x1b\\", "\\x1b]52;c;cm0gLXJmIH4=\\x1b\\"),
        # OSC 8: a link whose text hides where it goes
        (
            "\x1b]8;;http://evil/\x1b\\docs\x1b]8;;\x1b\\",
            "\\x1b]8;;http://evil/\\x1b\\docs\\x1b]8;;\\x1b\\",
        ),
        # CSI: clears the screen, moves the cursor up, recolours
        ("\x1b[2J\x1b[1A\x1b[31mred", "\\x1b[2J\\x1b[1A\\x1b[31mred"),
        # C1 controls, as a UTF-8 terminal reads them: 0x9b is CSI, 0x9d OSC, 0x90 DCS
        ("\u009b2J\u009d52;c;eA==\u0007\u0090q", "\\x9b2J\\x9d52;c;eA==\\x07\\x90q"),
        # A carriage return alone rewrites its line; before a newline it does no harm
        ("safe\rspoofed\r\n", "safe\\rspoofed\r\n"),
        # Other C0 controls and DEL: backspace, vertical tab, form feed, NUL, shift-out
        ("a\bb\x0bc\x0cd\x00e\x0ef\x7f", "a\\x08b\\x0bc\\x0cd\\x00e\\x0ef\\x7f"),
    ],
)
def test_control_sequences_are_shown_not_run(hostile: str, shown: str) -> None:
    # When a container's output is made printable
    text = printable(hostile)
    # Then each control character is written out as an escape, the rest as it was
    assert text == shown
    # And no character a terminal would act on is left (a line's end aside)
    assert CONTROLS.search(text.replace("\r\n", "\n")) is None


def test_readable_text_stays_as_it_is() -> None:
    # Given output in several scripts, with tabs, newlines and a CRLF line end
    text = "épreuve 試験 проверка ✓ 🚀\tcolumn\r\nnext line\n"
    # When it is made printable, Then nothing changes
    assert printable(text) == text


def test_undecodable_bytes_cannot_smuggle_a_control_sequence() -> None:
    # Given output that is not valid UTF-8: a raw 8-bit CSI (0x9b) and a lone byte 0xff
    data = b"\x9b31mred\xff\xc3"
    # When it is decoded as the log reader does (undecodable bytes replaced), Then only
    # replacement characters and text are left
    assert printable(data.decode(errors="replace")) == "\ufffd31mred\ufffd\ufffd"
    # When undecodable bytes were kept as lone surrogates (surrogateescape), Then they are
    # escaped, never written out (no terminal can be sent them, and 0x9b stays inert)
    kept = printable(data.decode(errors="surrogateescape"))
    assert kept == "\\udc9b31mred\\udcff\\udcc3"
    assert kept.encode("utf-8") == kept.encode("ascii")


@pytest.mark.parametrize("tty", [True, False])
def test_progress_messages_from_a_build_are_shown_not_run(tty: bool) -> None:
    # Given the progress of a start on a terminal, or in a log
    stream = io.StringIO()
    stream.isatty = lambda: tty  # type: ignore[method-assign]
    bar = ProgressBar(stream)
    # When a build step prints control sequences (its own progress line, and a line)
    bar.update({"stage": "build", "message": "\x1b]52;c;eA==\x07step", "transient": True})
    bar.update({"stage": "build", "message": "\u009b2Jdone"})
    bar.close()
    # Then they are shown escaped; only the bar's own redraws reach the terminal
    written = stream.getvalue()
    if tty:  # (a transient message is drawn on a terminal only)
        assert "[build] \\x1b]52;c;eA==\\x07step" in written
    assert "[build] \\x9b2Jdone\n" in written
    assert CONTROLS.search(written.replace("\r\x1b[2K", "").replace("\r\n", "\n")) is None
