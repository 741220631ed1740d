"""The package's parts depend on each other one way only (ARCHITECTURE.md).

From the faces (the CLI, the HTTP handlers, the app and the services builder) down through
kernels and changes to containers, then environments, leasing and the engine; nothing below
imports anything above, and no module imports itself back through others. Every import counts:
module level, inside functions and under ``TYPE_CHECKING``.
"""

from __future__ import annotations

import ast
from collections.abc import Iterable, Mapping
from pathlib import Path

import pytest

import jupyter_gpudev

PACKAGE = "jupyter_gpudev"
ROOT = Path(jupyter_gpudev.__file__).parent

#: Each part's rank: a module may import its own part and the parts ranked below it.
RANKS = {
    "_version": 0,
    "errors": 0,
    "access": 1,
    "labels": 0,
    "safefs": 1,
    "engine": 2,
    "leasing": 3,
    "environments": 4,
    "k8s": 5,
    "containers": 6,
    "changes": 7,
    "kernels": 7,
}
#: Everything else (``app``, ``services``, ``handlers``, ``cli``, ``shared``, the re-exporting
#: ``provisioner``/``kernelspecs`` modules, the package itself) is a face.
FACE = 9


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
    return RANKS.get(part(module), FACE)


def upward(edges: Mapping[str, Iterable[str]]) -> list[str]:
    """Imports of a higher part, or between two different parts of one rank."""
    wrong = []
    for source, targets in sorted(edges.items()):
        for target in sorted(targets):
            if part(source) == part(target) or rank(source) == FACE:
                continue
            if rank(target) >= rank(source):
                wrong.append(f"{source} -> {target}")
    return wrong


def test_the_checker_finds_a_cycle_and_an_upward_import() -> None:
    # Given a made-up graph with a cycle and an engine module importing a container module
    edges = {
        f"{PACKAGE}.engine.hosts": {f"{PACKAGE}.containers.lookup"},
        f"{PACKAGE}.containers.lookup": {f"{PACKAGE}.engine.hosts"},
        f"{PACKAGE}.changes.capture": {f"{PACKAGE}.kernels.registry"},
        f"{PACKAGE}.cli": {f"{PACKAGE}.kernels.registry"},
    }
    # Then both are reported, and a face importing anything is not
    assert cycles(edges) == [[f"{PACKAGE}.containers.lookup", f"{PACKAGE}.engine.hosts"]]
    assert upward(edges) == [
        f"{PACKAGE}.changes.capture -> {PACKAGE}.kernels.registry",
        f"{PACKAGE}.engine.hosts -> {PACKAGE}.containers.lookup",
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
    # Every package under jupyter_gpudev is ranked (a new one must be placed on purpose)
    packages = {part(name) for name, path in modules().items() if path.name == "__init__.py"}
    assert packages - {""} - {"handlers", "cli", "shared"} <= set(RANKS)


def test_no_import_cycle() -> None:
    assert cycles(graph()) == []


@pytest.mark.parametrize("layer", sorted(set(RANKS)))
def test_no_part_imports_a_part_above_it(layer: str) -> None:
    wrong = [edge for edge in upward(graph()) if part(edge.split(" -> ")[0]) == layer]
    assert wrong == []
