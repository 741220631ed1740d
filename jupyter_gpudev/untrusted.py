"""Values from outside gpudev, read and shown safely: the one home of these small helpers.

An API server's JSON is read with ``as_dict`` and ``as_list`` (a field of the wrong type reads
as empty, never as an error). What a cluster, an engine or a container says is shown as one
line with ``clean`` (control characters as spaces, cut), or, where its lines matter (a
container's output, a progress message), with ``printable`` (each control character escaped,
so that a terminal shows it and never acts on it); a name or a message on one line of a table
or an error, with ``escape_unprintable`` (line breaks and bidirectional marks escaped too).
"""

from __future__ import annotations

import posixpath
import re
from typing import Any

#: The longest message ``clean`` keeps unless told otherwise.
MAX_MESSAGE = 500

#: C0 and C1 controls and DEL: what ``clean`` turns into spaces.
_CONTROL_RE = re.compile(r"[\x00-\x1f\x7f-\x9f]+")

#: What a terminal acts on instead of showing: C0 controls but tab and newline (ESC starts CSI
#: and OSC sequences), DEL, C1 controls (0x9b is a CSI, 0x9d an OSC), a carriage return that
#: does not end a line (it rewrites the line), lone surrogates (bytes that were not UTF-8).
_UNPRINTABLE_RE = re.compile(r"\r(?!\n)|[\x00-\x08\x0b\x0c\x0e-\x1f\x7f-\x9f\ud800-\udfff]")


def as_dict(value: Any) -> dict[str, Any]:
    """``value`` when it is a JSON object, else an empty one."""
    return value if isinstance(value, dict) else {}


def as_list(value: Any) -> list[Any]:
    """``value`` when it is a JSON array, else an empty one."""
    return value if isinstance(value, list) else []


def clean(text: Any, limit: int = MAX_MESSAGE) -> str:
    """A message safe to show on one line: text only (anything else is ``""``), control
    characters as spaces, at most ``limit`` characters."""
    if not isinstance(text, str):
        return ""
    flat = _CONTROL_RE.sub(" ", text).strip()
    return flat if len(flat) <= limit else flat[: limit - 3] + "..."


def _escaped(match: re.Match[str]) -> str:
    code = ord(match.group())
    if code == 0x0D:
        return "\\r"
    return f"\\x{code:02x}" if code < 0x100 else f"\\u{code:04x}"


def printable(text: str) -> str:
    """``text`` (a container's output, or anything else it wrote) as a terminal shows it and
    never runs it: each control character written out as an escape (ESC as ``\\x1b``, so
    ``ESC ]52;...`` cannot set the clipboard), newlines, tabs and the carriage return of a
    CRLF kept, and the rest, any script's text, as it is."""
    return _UNPRINTABLE_RE.sub(_escaped, text)


def escape_unprintable(text: str) -> str:
    """``text`` (a name or a message from a user, a request or a container) as one line a
    terminal shows whole and never acts on: every character Python deems unprintable written
    out as an escape: controls and line breaks, and also the format and separator characters
    that reorder or hide text (bidirectional overrides, zero-width spaces, U+2028)."""
    if text.isprintable():
        return text
    return "".join(c if c.isprintable() else repr(c)[1:-1] for c in text)


def link_stays_inside(path: str, target: str) -> bool:
    """Whether the link ``path`` -> ``target`` (names read from an archive or a container) is
    relative and, resolved lexically from the link's folder, stays inside the tree it is in
    (never climbs above its root)."""
    if target.startswith("/"):
        return False
    depth = len([p for p in posixpath.dirname(path).split("/") if p])
    for part in target.split("/"):
        if part == "..":
            depth -= 1
            if depth < 0:
                return False
        elif part not in ("", "."):
            depth += 1
    return True
