"""JSON with comments and trailing commas, as devcontainer.json is written: read strictly
(duplicate keys, NaN/Infinity and oversized files refused) with line and column in messages."""

from __future__ import annotations

import json
import os
import stat
from pathlib import Path
from typing import Any

from ..errors import BadRequest

#: devcontainer.json files larger than this are refused (they are a few KiB in practice).
MAX_FILE_BYTES = 1 << 20


def _position(text: str, index: int) -> tuple[int, int]:
    line = text.count("\n", 0, index) + 1
    column = index - (text.rfind("\n", 0, index) + 1) + 1
    return line, column


def strip_jsonc(text: str, where: str = "<text>") -> str:
    """Blank out comments and trailing commas outside strings, keeping every line and column.

    Comments become spaces (line breaks inside block comments are kept), so positions in
    ``json`` errors still point into the original text.
    """
    out = list(text)
    n = len(text)
    i = 0
    in_string = False
    previous = ""  # the last significant character outside strings and comments
    pending_comma: int | None = None  # a comma that only whitespace and comments follow so far
    while i < n:
        ch = text[i]
        if in_string:
            if ch == "\\":
                i += 2
                continue
            if ch == '"':
                in_string = False
            i += 1
            continue
        nxt = text[i + 1] if i + 1 < n else ""
        if ch == "/" and nxt == "/":
            end = text.find("\n", i)
            end = n if end == -1 else end
            out[i:end] = " " * (end - i)
            i = end
            continue
        if ch == "/" and nxt == "*":
            end = text.find("*/", i + 2)
            if end == -1:
                line, column = _position(text, i)
                raise BadRequest(
                    f"{where}: line {line}, column {column}: a /* comment is never closed",
                    details={"file": where, "line": line, "column": column},
                )
            for k in range(i, end + 2):
                if out[k] not in "\r\n":
                    out[k] = " "
            i = end + 2
            continue
        if ch in " \t\r\n":
            i += 1
            continue
        if ch in "}]" and pending_comma is not None:
            out[pending_comma] = " "
        pending_comma = i if ch == "," and previous not in ("", "[", "{", ",") else None
        if ch == '"':
            in_string = True
        previous = ch
        i += 1
    return "".join(out)


def _refuse_constant(name: str) -> Any:
    raise ValueError(f"{name} is not valid JSON")


def load_jsonc(text: str, where: str = "<text>") -> Any:
    """Parse JSON with ``//`` and ``/* */`` comments and trailing commas (devcontainer.json).

    Errors are ``BadRequest`` naming ``where`` with the line and column.
    """
    if text.startswith("\ufeff"):
        text = text[1:]
    try:
        return json.loads(strip_jsonc(text, where), parse_constant=_refuse_constant)
    except json.JSONDecodeError as exc:
        raise BadRequest(
            f"{where}: line {exc.lineno}, column {exc.colno}: {exc.msg}",
            details={"file": where, "line": exc.lineno, "column": exc.colno},
        ) from None
    except ValueError as exc:
        raise BadRequest(f"{where}: {exc}", details={"file": where}) from None
    except RecursionError:
        raise BadRequest(f"{where}: nested too deeply", details={"file": where}) from None


def read_jsonc_file(path: Path, where: str) -> Any:
    """Read and parse one devcontainer.json; every failure is a ``BadRequest`` naming ``where``."""
    try:
        # Non-blocking: a FIFO planted under that name must not hang the listing (the shared
        # service reads users' folders); anything but a regular file is refused.
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC)
        with os.fdopen(fd, "rb") as handle:
            if not stat.S_ISREG(os.fstat(handle.fileno()).st_mode):
                raise BadRequest(f"{where}: not a regular file", details={"file": where})
            raw = handle.read(MAX_FILE_BYTES + 1)
    except OSError as exc:
        raise BadRequest(f"{where}: cannot be read ({exc.strerror or exc})") from None
    if len(raw) > MAX_FILE_BYTES:
        raise BadRequest(f"{where}: larger than {MAX_FILE_BYTES // 1024} KiB")
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError:
        raise BadRequest(f"{where}: not UTF-8 text") from None
    return load_jsonc(text, where)
