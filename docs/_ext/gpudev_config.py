"""The configuration reference, generated from the traits, and the devcontainer.json support
table, generated from the reader's (``environments/support.py``).

Every option's help is written once, in the code, on the trait (``help=``). This extension walks
the configurable classes (the faces' and ``jupyter_gpudev.services.CLASSES``) and puts one
``confval`` per ``config=True`` trait, with its type and default, where ``configuration.md`` has
the marker line. :func:`reference_markdown` is plain Python: the unit tests call it without
Sphinx (``tests/unit/test_docs_reference.py``).
"""

from __future__ import annotations

import inspect
import re
import string
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from jupyter_gpudev.app import GPUDevApp
from jupyter_gpudev.environments.support import PROPERTIES, SPEC
from jupyter_gpudev.services import CLASSES
from jupyter_gpudev.shared.server import SHARED_CLASSES

if TYPE_CHECKING:
    from sphinx.application import Sphinx
    from sphinx.environment import BuildEnvironment
    from traitlets import TraitType
    from traitlets.config import Configurable

#: The page that holds the reference, and the line in it that the reference replaces.
PAGE = "configuration"
MARKER = "<!-- gpudev:config-reference -->"
#: The page that holds the devcontainer.json support table, and its marker line.
SUPPORT_PAGE = "environments"
SUPPORT_MARKER = "<!-- gpudev:devcontainer-support -->"
#: How each kind of support reads in the table.
WORDS = {
    "supported": "supported",
    "partly": "partly",
    "ignored": "ignored, with a note",
    "refused": "refused",
}

_PACKAGE = "jupyter_gpudev"
_CODE = re.compile(r"``(.+?)``|`([^`\n]+)`", re.DOTALL)
_PUNCTUATION = frozenset(string.punctuation)


def documented_classes() -> list[type[Configurable]]:
    """The server extension, the shared service's own classes (``SHARED_CLASSES``), then every
    class of ``services.CLASSES`` in its order."""
    faces: list[type[Configurable]] = [GPUDevApp, *SHARED_CLASSES]
    return [*faces, *(cls for cls in CLASSES if cls not in faces)]


@dataclass(frozen=True)
class Option:
    """One ``config=True`` trait, as the reference shows it."""

    owner: str
    name: str
    kind: str
    default: str
    help: str

    @property
    def path(self) -> str:
        return f"c.{self.owner}.{self.name}"


@dataclass(frozen=True)
class ClassReference:
    """One configurable class: its own options, and where the rest of what it reads is."""

    name: str
    module: str
    summary: str
    options: tuple[Option, ...]
    inherits: tuple[tuple[str, tuple[str, ...]], ...]  # a gpudev base class, its options
    upstream: str | None


def _is_ours(cls: type) -> bool:
    return cls.__module__.split(".")[0] == _PACKAGE


def _kind(trait: TraitType[Any, Any]) -> str:
    kind = type(trait).__name__
    values = getattr(trait, "values", None)
    if values is not None:
        kind += " (" + ", ".join(repr(value) for value in values) + ")"
    if trait.allow_none:
        kind += " or None"
    return kind


def _default(cls: type[Configurable], name: str, trait: TraitType[Any, Any]) -> str:
    generators: dict[str, Any] = getattr(cls, "_trait_default_generators", {})
    if name in generators:
        return ""  # computed when the object is made: the help text says how
    return trait.default_value_repr()


def class_reference(cls: type[Configurable]) -> ClassReference:
    """The options ``cls`` defines itself; those of gpudev classes it extends are listed under
    those classes, and a Jupyter base class's are that project's."""
    own = sorted(cls.class_own_traits(config=True).items())
    options = tuple(
        Option(cls.__name__, name, _kind(trait), _default(cls, name, trait), trait.help)
        for name, trait in own
    )
    bases = [base for base in cls.__mro__[1:] if hasattr(base, "class_own_traits")]
    inherits = tuple(
        (base.__name__, tuple(sorted(base.class_own_traits(config=True))))
        for base in bases
        if _is_ours(base) and base.class_own_traits(config=True)
    )
    upstream = next(
        (
            f"{base.__module__}.{base.__name__}"
            for base in bases
            if not _is_ours(base) and base.class_own_traits(config=True)
        ),
        None,
    )
    summary = inspect.cleandoc(cls.__doc__ or "").split("\n\n")[0]
    return ClassReference(cls.__name__, cls.__module__, summary, options, inherits, upstream)


def _code(text: str) -> str:
    """``text`` as one inline code span, whatever backticks it holds."""
    longest = max((len(run) for run in re.findall(r"`+", text)), default=0)
    fence = "`" * (longest + 1)
    pad = " " if text.startswith("`") or text.endswith("`") else ""
    return f"{fence}{pad}{text}{pad}{fence}"


def _escape(text: str) -> str:
    """Plain text as Markdown that says exactly that: every ASCII punctuation character is
    escaped (``<Jupyter data dir>`` is no HTML, ``gpudev-env-*`` no emphasis)."""
    return "".join("\\" + char if char in _PUNCTUATION else char for char in text)


def prose(text: str) -> str:
    """A help text or docstring as Markdown: its ``code`` and `code` spans kept as code,
    everything else literal; paragraphs kept, lines joined."""
    paragraphs = [" ".join(part.split()) for part in inspect.cleandoc(text).split("\n\n")]
    rendered = []
    for paragraph in paragraphs:
        if not paragraph:
            continue
        out, last = [], 0
        for match in _CODE.finditer(paragraph):
            out.append(_escape(paragraph[last : match.start()]))
            out.append(_code(match.group(1) or match.group(2)))
            last = match.end()
        out.append(_escape(paragraph[last:]))
        rendered.append("".join(out))
    return "\n\n".join(rendered)


def _option_markdown(option: Option) -> list[str]:
    fence = "`" * 4
    lines = [f"{fence}{{confval}} {option.path}", f":type: {_code(option.kind)}"]
    if option.default:
        lines.append(f":default: {_code(option.default)}")
    else:
        lines.append(":default: computed when it starts (see below)")
    lines += ["", prose(option.help) or "(No help text.)", fence, ""]
    return lines


def _class_markdown(ref: ClassReference) -> list[str]:
    lines = [f"({ref.name.lower()}-options)=", f"### `{ref.name}`", ""]
    if ref.summary:
        lines += [prose(ref.summary), ""]
    lines += [f"Defined in `{ref.module}`; set as `c.{ref.name}.NAME`.", ""]
    for base, names in ref.inherits:
        links = ", ".join(f"{{confval}}`{name} <c.{base}.{name}>`" for name in names)
        lines += [
            f"It also reads the options of [`{base}`](#{base.lower()}-options), as "
            f"`c.{ref.name}.NAME` or `c.{base}.NAME`: {links}.",
            "",
        ]
    if ref.upstream:
        lines += [f"It also reads the options of its Jupyter base class `{ref.upstream}`.", ""]
    for option in ref.options:
        lines += _option_markdown(option)
    return lines


def reference_markdown(classes: list[type[Configurable]] | None = None) -> str:
    """The whole reference as MyST Markdown: a section per class, a ``confval`` per option."""
    lines: list[str] = []
    for cls in documented_classes() if classes is None else classes:
        lines += _class_markdown(class_reference(cls))
    return "\n".join(lines).rstrip() + "\n"


def support_markdown() -> str:
    """The devcontainer.json support table (``environments.support.PROPERTIES``, the rows the
    reader checks files against) as MyST Markdown: one row per property, in the table's order."""
    lines = [
        f"Following {SPEC}.",
        "",
        "| property | gpudev | what gpudev does |",
        "| -------- | ------ | ---------------- |",
    ]
    for prop in PROPERTIES:
        says = prop.says.replace("|", "\\|").replace("\n", " ")
        lines.append(f"| `{prop.name}` | {WORDS[prop.support]} | {says} |")
    return "\n".join(lines) + "\n"


#: Each generated page: its marker line and what replaces it.
GENERATED = {
    PAGE: (MARKER, reference_markdown),
    SUPPORT_PAGE: (SUPPORT_MARKER, support_markdown),
}


def _insert_reference(_app: Sphinx, docname: str, source: list[str]) -> None:
    if docname in GENERATED:
        marker, generate = GENERATED[docname]
        if marker not in source[0]:
            raise ValueError(f"{docname}.md lost its marker line {marker}")
        source[0] = source[0].replace(marker, generate())


def _always_reread(
    _app: Sphinx,
    env: BuildEnvironment,
    _added: set[str],
    _changed: set[str],
    _removed: set[str],
) -> list[str]:
    # The generated parts follow the code, which Sphinx does not watch: read them every build.
    return [page for page in GENERATED if page in env.found_docs]


def setup(app: Sphinx) -> dict[str, Any]:
    app.connect("source-read", _insert_reference)
    app.connect("env-get-outdated", _always_reread)
    return {"version": "1", "parallel_read_safe": True, "parallel_write_safe": True}
