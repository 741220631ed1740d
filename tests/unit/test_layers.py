"""The package's parts depend on each other one way only (ARCHITECTURE.md).

From the faces down through kernels and changes to containers, then environments, leasing and
the engine; nothing below imports anything above, and no module imports itself back through
others. The faces are ranked too: the services builder, then the HTTP handlers, then shared
mode (whose handlers are built on them), then the command line and the app (which use both,
and never each other), so that handlers and shared mode, or the command line and shared mode,
cannot import each other again. Every import counts: module level, inside functions and under
``TYPE_CHECKING``.
"""

from __future__ import annotations

import ast
from collections.abc import Iterable, Mapping
from pathlib import Path

import pytest

import jupyter_gpudev

PACKAGE = "jupyter_gpudev"
ROOT = Path(jupyter_gpudev.__file__).parent

#: Each part's rank: a module may import its own part and the parts ranked below it (not
#: another part of its own rank). Every part is here: a new one is placed on purpose.
RANKS = {
    "_version": 0,
    "errors": 0,
    "labels": 0,
    "untrusted": 0,
    "access": 1,
    "safefs": 1,
    "engine": 2,
    "leasing": 3,
    "environments": 4,
    "k8s": 5,
    "containers": 6,
    "changes": 7,
    "kernels": 7,
    # The faces, ranked: the one builder of the object graph ...
    "services": 8,
    # ... the HTTP handlers on it (their base finds the shared service's views through a
    # protocol of its own, never ``shared.authority``) ...
    "handlers": 9,
    # ... shared mode, whose handlers and service client build on the handlers ...
    "shared": 10,
    # ... and what nothing in the package imports: the command line, the server extension and
    # the public dotted paths of the kernel provisioner and kernelspec manager.
    "cli": 11,
    "app": 11,
    "provisioner": 11,
    "kernelspecs": 11,
    # The package itself (it loads ``app`` for the server) and ``python -m jupyter_gpudev``.
    "": 12,
    "__main__": 12,
}


def modules() -> dict[str, Path]:
    found = {}
    for path in ROOT.rglob("*.py"):
        if "labextension" in path.parts:
            continue
        parts = path.relative_to(ROOT.parent).with_suffix("").parts
        name = ".".join(parts[:-1] if parts[-1] == "__init__" else parts)
        found[name] = path
    return found


def imports(name: str, path: Path, known: Iterable[str]) -> set[str]:
    """The package's modules that ``name`` imports, anywhere in it."""
    known = set(known)
    package = name if path.name == "__init__.py" else name.rsplit(".", 1)[0]
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names if alias.name in known)
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")[: len(package.split(".")) - node.level + 1]
                target = ".".join([*base, node.module] if node.module else base)
            else:
                target = node.module or ""
            submodules = {f"{target}.{a.name}" for a in node.names} & known
            found.update(submodules)
            if target in known and len(submodules) < len(node.names):
                found.add(target)
    found.discard(name)
    return found


def graph() -> dict[str, set[str]]:
    mods = modules()
    return {name: imports(name, path, mods) for name, path in mods.items()}


def cycles(edges: Mapping[str, Iterable[str]]) -> list[list[str]]:
    """The strongly connected components with more than one module (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []

    def visit(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        on_stack.add(node)
        for nxt in edges.get(node, ()):
            if nxt not in index:
                visit(nxt)
                low[node] = min(low[node], low[nxt])
            elif nxt in on_stack:
                low[node] = min(low[node], index[nxt])
        if low[node] == index[node]:
            component = []
            while True:
                top = stack.pop()
                on_stack.discard(top)
                component.append(top)
                if top == node:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for node in sorted(edges):
        if node not in index:
            visit(node)
    return found


def part(module: str) -> str:
    rest = module.removeprefix(PACKAGE).lstrip(".")
    return rest.split(".", 1)[0] if rest else ""


def rank(module: str) -> int:
    return RANKS[part(module)]


def upward(edges: Mapping[str, Iterable[str]]) -> list[str]:
    """Imports of a higher part, or between two different parts of one rank."""
    wrong = []
    for source, targets in sorted(edges.items()):
        for target in sorted(targets):
            if part(source) == part(target):
                continue
            if rank(target) >= rank(source):
                wrong.append(f"{source} -> {target}")
    return wrong


def test_the_checker_finds_a_cycle_and_an_upward_import() -> None:
    # Given a made-up graph with a cycle and an engine module importing a container module
    edges = {
        f"{PACKAGE}.engine.hosts": {f"{PACKAGE}.containers.lookup"},
        f"{PACKAGE}.containers.lookup": {f"{PACKAGE}.engine.hosts"},
        f"{PACKAGE}.changes.capture": {f"{PACKAGE}.kernels.live"},
        f"{PACKAGE}.cli": {f"{PACKAGE}.kernels.live"},
    }
    # Then both are reported, and a face importing a part below it is not
    assert cycles(edges) == [[f"{PACKAGE}.containers.lookup", f"{PACKAGE}.engine.hosts"]]
    assert upward(edges) == [
        f"{PACKAGE}.changes.capture -> {PACKAGE}.kernels.live",
        f"{PACKAGE}.engine.hosts -> {PACKAGE}.containers.lookup",
    ]


def test_the_checker_ranks_the_faces() -> None:
    # Given the loops issue #32 removed: handlers and shared mode, the CLI and shared mode
    edges = {
        f"{PACKAGE}.handlers.base": {f"{PACKAGE}.shared.authority", f"{PACKAGE}.services"},
        f"{PACKAGE}.shared.client": {f"{PACKAGE}.cli.remote", f"{PACKAGE}.handlers.base"},
        f"{PACKAGE}.cli.base": {f"{PACKAGE}.shared.service_api", f"{PACKAGE}.app"},
        f"{PACKAGE}.services": {f"{PACKAGE}.handlers.base"},
    }
    # Then each face importing one above it, or one of its own rank, is reported; a face
    # importing one below it is not
    assert upward(edges) == [
        f"{PACKAGE}.cli.base -> {PACKAGE}.app",
        f"{PACKAGE}.handlers.base -> {PACKAGE}.shared.authority",
        f"{PACKAGE}.services -> {PACKAGE}.handlers.base",
        f"{PACKAGE}.shared.client -> {PACKAGE}.cli.remote",
    ]


def test_the_checker_reads_relative_and_nested_imports(tmp_path: Path) -> None:
    # Given a module importing a sibling inside a function and a parent's module under TYPE_CHECKING
    source = tmp_path / "capture.py"
    source.write_text(
        "from typing import TYPE_CHECKING\n"
        "if TYPE_CHECKING:\n"
        "    from ..containers.lifecycle import DevContainers\n"
        "def f():\n"
        "    from . import model as ch\n"
        "    from .. import labels\n"
    )
    known = [
        f"{PACKAGE}.containers.lifecycle",
        f"{PACKAGE}.changes.model",
        f"{PACKAGE}.labels",
        PACKAGE,
    ]
    # Then all three count
    assert imports(f"{PACKAGE}.changes.capture", source, known) == {
        f"{PACKAGE}.containers.lifecycle",
        f"{PACKAGE}.changes.model",
        f"{PACKAGE}.labels",
    }


def test_every_module_has_a_part() -> None:
    # Every package and top-level module under jupyter_gpudev is ranked (a new one must be
    # placed on purpose)
    assert {part(name) for name in modules()} - set(RANKS) == set()


def test_no_import_cycle() -> None:
    assert cycles(graph()) == []


@pytest.mark.parametrize("layer", sorted(set(RANKS)))
def test_no_part_imports_a_part_above_it(layer: str) -> None:
    wrong = [edge for edge in upward(graph()) if part(edge.split(" -> ")[0]) == layer]
    assert wrong == []
