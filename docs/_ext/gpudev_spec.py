"""The devcontainer.json support table, generated from ``environments/support.py``.

The reader and this table read the same rows (``support.PROPERTIES``), so what the
documentation says of a property is what gpudev does with it. ``environments.md`` has the
marker line the table replaces; :func:`support_markdown` is plain Python, called by the unit
tests without Sphinx (``tests/unit/test_spec_support.py``).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from jupyter_gpudev.environments.support import PROPERTIES, SPEC

if TYPE_CHECKING:
    from sphinx.application import Sphinx
    from sphinx.environment import BuildEnvironment

PAGE = "environments"
MARKER = "<!-- gpudev:devcontainer-support -->"

#: How each kind of support reads in the table.
WORDS = {
    "supported": "supported",
    "partly": "partly",
    "ignored": "ignored, with a note",
    "refused": "refused",
}


def _cell(text: str) -> str:
    return text.replace("|", "\\|").replace("\n", " ")


def support_markdown() -> str:
    """The table as MyST Markdown: one row per property, in the table's order."""
    lines = [
        f"Following {SPEC}.",
        "",
        "| property | gpudev | what gpudev does |",
        "| -------- | ------ | ---------------- |",
    ]
    lines += [
        f"| `{prop.name}` | {WORDS[prop.support]} | {_cell(prop.says)} |" for prop in PROPERTIES
    ]
    return "\n".join(lines) + "\n"


def _insert_table(_app: Sphinx, docname: str, source: list[str]) -> None:
    if docname == PAGE:
        if MARKER not in source[0]:
            raise ValueError(f"{PAGE}.md lost its marker line {MARKER}")
        source[0] = source[0].replace(MARKER, support_markdown())


def _always_reread(
    _app: Sphinx,
    env: BuildEnvironment,
    _added: set[str],
    _changed: set[str],
    _removed: set[str],
) -> list[str]:
    # The table follows the code, which Sphinx does not watch: read the page every build.
    return [PAGE] if PAGE in env.found_docs else []


def setup(app: Sphinx) -> dict[str, Any]:
    app.connect("source-read", _insert_table)
    app.connect("env-get-outdated", _always_reread)
    return {"version": "1", "parallel_read_safe": True, "parallel_write_safe": True}
