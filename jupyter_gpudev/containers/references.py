"""The images a Dockerfile names: what a build reads besides its context.

A build reads an image wherever the Dockerfile names one: ``FROM IMAGE``, ``COPY --from=IMAGE``,
``RUN --mount=...,from=IMAGE``, the ``# syntax=IMAGE`` directive, and the same inside
``ONBUILD`` (run by a later build from the image); a ``--from`` or ``FROM`` that names an earlier
stage (``FROM x AS name``, or its index) reads no image. ``images`` lists them, read the way
both builders the engine has read the file, and conservatively where they differ: the classic
builder has no heredocs (a ``RUN <<EOF`` body's lines are instructions to it), BuildKit has
them (they are not), so the lines of a heredoc body count both ways.

Names are written with variables (``FROM $BASE``, ``COPY --from=${STAGE}``): they are resolved
as the builder would, from the ``ARG`` lines and the build's arguments (``FROM`` sees the
``ARG`` lines before the first ``FROM``; an instruction in a stage, that stage's ``ARG`` and
``ENV`` lines as well), with ``${X:-word}`` and ``${X:+word}``. A variable gpudev cannot know
(the builder's ``TARGETARCH`` and the like, a base image's ``ENV``, a form it does not read) is
not guessed: the name is then only known up to it (``Named.prefix``), and the caller decides.
"""

from __future__ import annotations

import csv
import json
import re
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field

#: A parser directive at the top of a Dockerfile (``# syntax=...``, ``# escape=```).
_DIRECTIVE_RE = re.compile(r"^\s*#\s*([A-Za-z][A-Za-z0-9_-]*)\s*=\s*(.*?)\s*$")
#: A variable: ``$NAME``, ``${NAME}``, ``${NAME:-word}``, ``${NAME:+word}``.
_VARIABLE_RE = re.compile(
    r"\$(?:\{(?P<braced>[A-Za-z_][A-Za-z0-9_]*)(?:(?P<op>:[-+])(?P<word>[^}$]*))?\}"
    r"|(?P<bare>[A-Za-z_][A-Za-z0-9_]*))"
)
#: A heredoc's start in an instruction: ``<<EOF``, ``<<-EOF``, ``<<"EOF"``.
_HEREDOC_RE = re.compile(r"<<(-?)([\"']?)([A-Za-z_][A-Za-z0-9_]*)\2")
#: A stage name as BuildKit takes it (compared in lower case).
_STAGE_RE = re.compile(r"^[a-z][a-z0-9._-]*\Z")
#: The instructions whose lines may start heredocs.
_HEREDOC_INSTRUCTIONS = {"RUN", "COPY", "ADD"}
#: How a git remote starts where a builder takes an ``ADD`` source for one (besides URLs):
#: these, and any ``user@host:path`` (``_SCP_REMOTE``).
_GIT_REMOTES = ("git@", "github.com/")
_SCP_REMOTE = re.compile(r"^[^/\s@]+@[^/\s:]+:")
#: Where the ``# syntax=`` directive's image is named (BuildKit's frontend, not a base).
SYNTAX = "the # syntax= directive"


@dataclass(frozen=True)
class Named:
    """An image a Dockerfile names. ``resolved`` is the name with its variables substituted,
    ``None`` when one of them has no value gpudev knows; ``prefix`` is what comes before that
    variable (all of it when resolved). ``where`` says where (``line 3, COPY --from``)."""

    written: str
    resolved: str | None
    prefix: str
    where: str
    #: A ``FROM`` line's image (its ``ONBUILD`` triggers run in this build).
    base: bool = False
    #: The name as the builder reads it when every variable gpudev has no value for is unset
    #: (``${X:-word}`` its word); ``None`` where one is a platform ARG BuildKit sets itself.
    unset: str | None = field(default=None, compare=False)


#: The ARGs BuildKit gives every build without a declaration (``--platform`` and the like).
PLATFORM_ARGS = frozenset(
    f"{side}{part}"
    for side in ("BUILD", "TARGET")
    for part in ("PLATFORM", "OS", "ARCH", "VARIANT")
)


@dataclass
class _Scope:
    """The variables an instruction sees; ``None`` for one declared without a value known."""

    values: dict[str, str | None] = field(default_factory=dict)

    def unset(self, text: str) -> str | None:
        """``text`` as the builder reads it where every variable without a value known here
        is unset; ``None`` when one is a platform ARG (BuildKit sets those)."""
        out: list[str] = []
        position = 0
        for match in _VARIABLE_RE.finditer(text):
            out.append(text[position : match.start()])
            name = match.group("braced") or match.group("bare")
            if name in PLATFORM_ARGS and self.values.get(name) is None:
                return None
            value = self.values.get(name) or ""
            op, word = match.group("op"), match.group("word") or ""
            if op == ":-":
                value = value or word
            elif op == ":+":
                value = word if value else ""
            out.append(value)
            position = match.end()
        return "".join(out) + text[position:]

    def substitute(self, text: str) -> tuple[str | None, str]:
        """``text`` with its variables substituted, and the part before the first one that
        has no known value (``None`` and that part then)."""
        out: list[str] = []
        position = 0
        for match in _VARIABLE_RE.finditer(text):
            out.append(text[position : match.start()])
            name = match.group("braced") or match.group("bare")
            if name not in self.values or self.values[name] is None:
                return None, "".join(out)
            value = self.values[name] or ""
            op, word = match.group("op"), match.group("word") or ""
            if op == ":-":
                value = value or word
            elif op == ":+":
                value = word if value else ""
            out.append(value)
            position = match.end()
        rest = text[position:]
        if "$" in rest:  # a form not read here (an escaped '$', ${X#...}): not guessed
            cut = rest.index("$")
            return None, "".join(out) + rest[:cut]
        return "".join(out) + rest, "".join(out) + rest


def images(text: str, args: Mapping[str, str]) -> list[Named]:
    """The images the Dockerfile ``text`` names (see the module), built with the build
    arguments ``args``; each once per place that names it."""
    physical = text.replace("\r\n", "\n").replace("\r", "\n").split("\n")
    directives, start = _directives(physical)
    found: list[Named] = []
    syntax = directives.get("syntax")
    if syntax:
        found.append(Named(syntax, syntax, syntax, SYNTAX))
    escape = "`" if directives.get("escape") == "`" else "\\"
    seen: set[Named] = set()
    for heredocs in (False, True):
        lines = _instructions(physical, start, escape, heredocs=heredocs)
        for named in _Reader(args).read(lines):
            if named not in seen:
                seen.add(named)
                found.append(named)
    return found


def escape_character(text: str) -> str:
    """The escape character of the Dockerfile ``text``: the backtick where its ``escape``
    parser directive says so, else the backslash."""
    physical = text.replace("\r\n", "\n").replace("\r", "\n").split("\n")
    return "`" if _directives(physical)[0].get("escape") == "`" else "\\"


def trigger_images(triggers: list[str], base: str) -> list[Named]:
    """The images the ``ONBUILD`` triggers of the image ``base`` name (its ``Config.OnBuild``:
    instructions a build from it runs): no variable of theirs is known, and no stage name."""
    found: list[Named] = []
    for number, trigger in enumerate(triggers, 1):
        found.extend(_Reader({}).instruction(number, trigger, trigger=f"ONBUILD of {base}"))
    return found


def remote_sources(text: str, args: Mapping[str, str]) -> list[str]:
    """Where the Dockerfile ``text``, built with ``args``, has the engine fetch something
    itself: an ``ADD`` whose source is a URL or a git remote, or one whose variables gpudev
    cannot resolve; in its lines, its ``ONBUILD`` triggers and what heredocs hold (read both
    ways, as ``images`` does)."""
    physical = text.replace("\r\n", "\n").replace("\r", "\n").split("\n")
    directives, start = _directives(physical)
    escape = "`" if directives.get("escape") == "`" else "\\"
    found: list[str] = []
    for heredocs in (False, True):
        reader = _Reader(args)
        for _ in reader.read(_instructions(physical, start, escape, heredocs=heredocs)):
            pass
        found.extend(where for where in reader.fetched if where not in found)
    return found


def trigger_remote_sources(triggers: list[str], base: str) -> list[str]:
    """``remote_sources`` of the ``ONBUILD`` triggers of the image ``base``."""
    reader = _Reader({})
    for number, trigger in enumerate(triggers, 1):
        for _ in reader.instruction(number, trigger, trigger=f"ONBUILD of {base}"):
            pass
    return reader.fetched


def shared_mounts(text: str) -> list[str]:
    """Where the Dockerfile ``text`` mounts what BuildKit keeps between builds, whoever runs
    them: a ``RUN --mount`` of type ``cache`` (its files are kept under its id, the target when
    it has none), or of a type written with a variable; in its lines, its ``ONBUILD``
    triggers, and the lines a heredoc holds (read both ways, as ``images`` does)."""
    physical = text.replace("\r\n", "\n").replace("\r", "\n").split("\n")
    directives, start = _directives(physical)
    escape = "`" if directives.get("escape") == "`" else "\\"
    found: list[str] = []
    for heredocs in (False, True):
        for number, line in _instructions(physical, start, escape, heredocs=heredocs):
            for where in _cache_mounts(line, f"line {number}"):
                if where not in found:
                    found.append(where)
    return found


def trigger_shared_mounts(triggers: list[str], base: str) -> list[str]:
    """``shared_mounts`` of the ``ONBUILD`` triggers of the image ``base``."""
    found: list[str] = []
    for number, trigger in enumerate(triggers, 1):
        found.extend(_cache_mounts(trigger, f"ONBUILD of {base} line {number}"))
    return found


def _cache_mounts(instruction: str, where: str) -> Iterator[str]:
    words = instruction.split()
    if words and words[0].upper() == "ONBUILD":
        words, where = words[1:], f"ONBUILD {where}"
    if not words or words[0].upper() != "RUN":
        return
    for value in _flag_values(words[1:], "mount"):
        fields = _mount_fields(value)
        kinds = [setting for key, setting in fields if key == "type"]
        if any("$" in key for key, _ in fields) or any(
            kind == "cache" or "$" in kind for kind in kinds
        ):
            shown = value if len(value) <= 80 else value[:77] + "..."
            yield f"{where}, RUN --mount={shown}"


def _directives(physical: list[str]) -> tuple[dict[str, str], int]:
    """The parser directives at the top (lower-case names), and where the lines after them
    start."""
    directives: dict[str, str] = {}
    for index, line in enumerate(physical):
        match = _DIRECTIVE_RE.match(line)
        if match is None or match.group(1).lower() in directives:
            return directives, index
        directives[match.group(1).lower()] = match.group(2)
    return directives, len(physical)


def _instructions(
    physical: list[str], start: int, escape: str, *, heredocs: bool
) -> Iterator[tuple[int, str]]:
    """The instructions from ``physical[start:]``, each with the number of its first line:
    continued lines joined (``escape`` at a line's end), blank and comment lines left out;
    with ``heredocs``, the bodies of heredocs too, as BuildKit reads them."""
    continued = re.compile(re.escape(escape) + r"[ \t]*$")
    current: list[str] = []
    waiting: list[tuple[str, bool]] = []
    first = 0
    for number, line in enumerate(physical[start:], start + 1):
        if waiting:
            marker, strip_tabs = waiting[0]
            if (line.lstrip("\t") if strip_tabs else line) == marker:
                waiting.pop(0)
            continue
        if not line.strip() or line.lstrip().startswith("#"):
            continue  # also inside a continued instruction: dropped there
        if not current:
            first = number
        if continued.search(line):
            current.append(continued.sub("", line))
            continue
        instruction = "".join([*current, line]).strip()
        current = []
        yield first, instruction
        keyword = instruction.split(None, 1)[0].upper()
        if heredocs and keyword in _HEREDOC_INSTRUCTIONS:
            waiting = [(m.group(3), m.group(1) == "-") for m in _HEREDOC_RE.finditer(instruction)]
    if current:
        yield first, "".join(current).strip()


class _Reader:
    """Walks a Dockerfile's instructions, keeping its stages and variables."""

    def __init__(self, args: Mapping[str, str]) -> None:
        self.args = dict(args)
        #: The ARG lines before the first FROM (what FROM lines see).
        self.globals = _Scope()
        #: The current stage's variables (``None`` before the first FROM).
        self.stage: _Scope | None = None
        #: The stages so far, by name (lower case), and how many.
        self.stages: set[str] = set()
        self.count = 0
        #: Where an ``ADD`` has the engine fetch a source itself (``remote_sources``).
        self.fetched: list[str] = []

    def read(self, lines: Iterator[tuple[int, str]]) -> Iterator[Named]:
        """The images named by ``lines`` (numbered instructions), in order."""
        for number, line in lines:
            yield from self.instruction(number, line)

    def instruction(self, number: int, line: str, trigger: str = "") -> Iterator[Named]:
        """The images the instruction ``line`` names; ``trigger``: where it runs, when it is
        an ``ONBUILD`` trigger."""
        words = line.split()
        if not words:
            return
        keyword, rest = words[0].upper(), words[1:]
        if keyword == "ONBUILD" and rest:
            inner = _Reader({})
            yield from inner.instruction(number, " ".join(rest), trigger=trigger or "ONBUILD")
            self.fetched.extend(inner.fetched)
            return
        where = f"{trigger} line {number}" if trigger else f"line {number}"
        if keyword == "ARG":
            self._declare(rest, arg=True)
        elif keyword == "ENV" and self.stage is not None:
            self._declare(rest, arg=False)
        elif keyword == "FROM":
            yield from self._from(rest, where)
        elif keyword in ("COPY", "ADD"):
            for value in _flag_values(rest, "from"):
                yield from self._source(value, f"{where}, {keyword} --from")
            if keyword == "ADD":
                self._added(rest, where)
        elif keyword == "RUN":
            for value in _flag_values(rest, "mount"):
                for source in _mount_sources(value):
                    yield from self._source(source, f"{where}, RUN --mount from=")

    def _from(self, words: list[str], where: str) -> Iterator[Named]:
        index = 0
        while index < len(words) and words[index].startswith("--"):  # --platform=...
            index += 1
        rest = words[index:]
        if not rest:
            return
        written = rest[0]
        alias = rest[2].lower() if len(rest) >= 3 and rest[1].upper() == "AS" else None
        resolved, prefix = self.globals.substitute(written)
        if resolved is None or resolved.lower() not in self.stages:
            unset = self.globals.unset(written)
            yield Named(written, resolved, prefix, f"{where}, FROM", base=True, unset=unset)
        self.count += 1
        if alias and _STAGE_RE.match(alias):
            self.stages.add(alias)
        # A stage sees the global ARGs it declares again, and its own ARG and ENV lines.
        self.stage = _Scope()

    def _source(self, written: str, where: str) -> Iterator[Named]:
        scope = self.stage if self.stage is not None else self.globals
        resolved, prefix = scope.substitute(written)
        if resolved is not None and (
            resolved.lower() in self.stages or (resolved.isdigit() and int(resolved) < self.count)
        ):
            return  # an earlier stage
        yield Named(written, resolved, prefix, where, unset=scope.unset(written))

    def _added(self, words: list[str], where: str) -> None:
        """Note where an ``ADD``'s source is fetched by the engine: a URL, a git remote, or
        a source with a variable gpudev has no value for."""
        scope = self.stage if self.stage is not None else self.globals
        for source in _add_sources(words):
            resolved, _ = scope.substitute(source)
            lowered = _lexed(resolved or "").strip().lower()
            remote = "://" in lowered or _SCP_REMOTE.match(lowered) is not None
            if resolved is None or remote or lowered.startswith(_GIT_REMOTES):
                shown = source if len(source) <= 80 else source[:77] + "..."
                self.fetched.append(f"{where}, ADD {shown}")

    def _declare(self, words: list[str], *, arg: bool) -> None:
        scope = self.stage if self.stage is not None else self.globals
        if not arg and len(words) >= 2 and "=" not in words[0]:  # ENV NAME value (old form)
            scope.values[words[0]] = _unquoted(" ".join(words[1:]))
            return
        for word in words:
            name, has_value, value = word.partition("=")
            if not re.match(r"^[A-Za-z_][A-Za-z0-9_]*\Z", name):
                continue
            if not arg:
                resolved, _ = scope.substitute(_unquoted(value))
                scope.values[name] = resolved
            elif name in self.args:
                scope.values[name] = self.args[name]
            elif has_value:
                resolved, _ = scope.substitute(_unquoted(value))
                scope.values[name] = resolved
            elif self.stage is not None and name in self.globals.values:
                scope.values[name] = self.globals.values[name]
            else:
                scope.values[name] = ""  # declared without a value: the builder makes it empty


def _add_sources(words: list[str]) -> list[str]:
    """The sources of an ``ADD`` (its words after the keyword): all but the destination, in
    the shell form or the JSON form."""
    index = 0
    while index < len(words) and words[index].startswith("--"):
        index += 1
    rest = words[index:]
    if rest and rest[0].startswith("["):
        try:
            parsed = json.loads(" ".join(rest))
        except ValueError:
            parsed = None
        if isinstance(parsed, list) and all(isinstance(item, str) for item in parsed):
            return [str(item) for item in parsed[:-1]]
    return rest[:-1]


def _unquoted(value: str) -> str:
    if len(value) >= 2 and value[0] == value[-1] and value[0] in "\"'":
        return value[1:-1]
    return value


def _flag_values(words: list[str], flag: str) -> Iterator[str]:
    """The values of ``--flag=VALUE`` (or ``--flag VALUE``) among an instruction's leading
    flags (flag names compared in lower case)."""
    index = 0
    while index < len(words) and words[index].startswith("--"):
        name, has_value, value = words[index][2:].partition("=")
        if name.lower() == flag:
            if has_value:
                yield _unquoted(value)
            elif index + 1 < len(words):
                index += 1
                yield _unquoted(words[index])
        index += 1


def _mount_sources(value: str) -> Iterator[str]:
    """The ``from=`` of a ``RUN --mount`` (comma-separated ``key=value`` fields, CSV-quoted)."""
    for key, source in _mount_fields(value, lower=False):
        if key == "from" and source:
            yield source


def _mount_fields(value: str, *, lower: bool = True) -> list[tuple[str, str]]:
    """The ``key=value`` fields of a ``RUN --mount`` as BuildKit reads them: split as CSV,
    each part through the shell's quotes and escapes (``_lexed``); keys in lower case, and
    values too with ``lower``."""
    fields = []
    for row in csv.reader([value]):
        for item in row:
            key, _, setting = item.strip().partition("=")
            setting = _lexed(setting).strip()
            fields.append((_lexed(key).strip().lower(), setting.lower() if lower else setting))
    return fields


def _lexed(word: str) -> str:
    """``word`` as the builders' shell lexer reads it: quotes taken out, an escaped character
    kept without its escape. Both the backslash and the backtick count as the escape, whichever
    the file's is: reading more as escapes finds more URLs and cache mounts, never fewer."""
    out: list[str] = []
    quote = ""
    index = 0
    while index < len(word):
        char = word[index]
        escaped = char in "\\`" and index + 1 < len(word)
        if quote and char == quote:
            quote = ""
        elif quote == "'":
            out.append(char)
        elif not quote and char in "'\"":
            quote = char
        elif escaped:
            index += 1
            out.append(word[index])
        else:
            out.append(char)
        index += 1
    return "".join(out)
