"""A small, strict Dockerfile instruction splitter that follows Docker's (BuildKit's) parser.

``moby/buildkit`` ``frontend/dockerfile/parser``: the text is split into lines at ``\\n`` only
(a trailing ``\\r`` dropped); a line whose first non-blank character is ``#`` is a comment,
anywhere (inside a continuation too); an instruction continues while its line ends with the
escape character ``\\`` followed only by spaces or tabs (the backslash and those removed, the
next line appended as it is); blank lines inside a continuation are skipped. The keyword is
the first word (case-insensitive). Parser directives (``# escape=``) are not supported: the
texts checked here have none. Heredocs are not expanded (gpudev's renderer writes none).
"""

from __future__ import annotations

import json
import re
import shlex

#: Go's ``unicode.IsSpace`` (what BuildKit trims at the start of a line).
_GO_SPACE = frozenset(
    "\t\n\v\f\r \x85\xa0\u1680\u2000\u2001\u2002\u2003\u2004\u2005\u2006\u2007\u2008\u2009"
    "\u200a\u2028\u2029\u202f\u205f\u3000"
)
_CONTINUATION_RE = re.compile(r"\\[ \t]*\Z")
_WHITESPACE_RE = re.compile(r"[\t\v\f\r ]+")


def _lstrip(line: str) -> str:
    i = 0
    while i < len(line) and line[i] in _GO_SPACE:
        i += 1
    return line[i:]


def _continued(line: str) -> tuple[str, bool]:
    """The line without its continuation mark, and whether the instruction ends here."""
    match = _CONTINUATION_RE.search(line)
    return (line[: match.start()], False) if match else (line, True)


def instructions(text: str) -> list[tuple[str, str]]:
    """The instructions of a Dockerfile: (KEYWORD, the rest of the logical line)."""
    lines = [line.removesuffix("\r") for line in text.split("\n")]
    if lines:
        lines[0] = lines[0].removeprefix("\ufeff")
    out: list[tuple[str, str]] = []
    i = 0
    while i < len(lines):
        first = _lstrip(lines[i])
        i += 1
        if first.startswith("#"):
            continue
        line, ended = _continued(first)
        if ended and not line:
            continue
        while not ended and i < len(lines):
            raw = lines[i]
            i += 1
            if _lstrip(raw).startswith("#") or not _lstrip(raw):
                continue
            more, ended = _continued(raw)
            line += more
        words = _WHITESPACE_RE.split(line.strip(), maxsplit=1)
        out.append((words[0].upper(), words[1] if len(words) > 1 else ""))
    return out


def exec_form(args: str) -> list[str] | None:
    """The arguments of an exec-form (JSON array) instruction, ``None`` when not one."""
    try:
        value = json.loads(args)
    except ValueError:
        return None
    if isinstance(value, list) and all(isinstance(v, str) for v in value):
        return value
    return None


def shell_words(args: str) -> list[str]:
    """The words ``/bin/sh -c`` sees in a shell-form ``RUN`` (quotes removed)."""
    return shlex.split(args, comments=False, posix=True)


def env_value(args: str) -> tuple[str, str]:
    """``NAME="value"`` as Docker's ENV reads it (in double quotes, a backslash escapes ``"``,
    ``$`` and itself, and is kept before anything else; an unescaped ``$`` would expand:
    refused)."""
    name, sep, rest = args.partition("=")
    if not sep or len(rest) < 2 or rest[0] != '"' or rest[-1] != '"':
        raise ValueError(f'not NAME="value": {args!r}')
    body, value, i = rest[1:-1], "", 0
    while i < len(body):
        c = body[i]
        if c == "\\" and i + 1 < len(body):
            nxt = body[i + 1]
            value += nxt if nxt in '"$\\' else c + nxt
            i += 2
            continue
        if c in '"$' or c == "\\":
            raise ValueError(f"unescaped {c!r} in {args!r}")
        value += c
        i += 1
    return name, value
