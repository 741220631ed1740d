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
    "traits": 0,
    "configcheck": 1,
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


#: The modules that know one kind of host (a Kubernetes cluster, or only a Docker engine):
#: each kind's side of an interface. A name ending in "*" names every module it begins.
KIND_SPECIFIC = (
    # Kubernetes: the pure builders and readers, the cluster, its watch and port-forwards ...
    "k8s.*",
    "engine.cluster",
    "engine.clusterwatch",
    "engine.podforward",
    # ... dev containers as pods, their kernels, their files and builds.
    "containers.pods",
    "containers.pod_*",
    "kernels.pods",
    "changes.pod*",
    # A Docker engine's side of the same interfaces.
    "containers.docker_backend",
    "changes.docker_changes",
)

#: Generic modules allowed to import a kind-specific one, and why. Nothing else may: a kind is
#: reached through its host's backend (``Host.backend``) and the kind tables below.
KIND_TABLES = {
    # The tables from a host's kind to its implementation, one per part.
    "engine.hosts": "the table of host kinds: which backend a host's URL gets",
    "containers.lifecycle": "backend_type: the table of dev container backends by kind",
    # What the lookup keeps per server for the pods of Kubernetes hosts, as public members of
    # DevContainers: c.KubernetesHosts (a trait, set by its deprecated c.DevContainers.pod_*
    # names), pods(), forwards_pods(), the start listings and port-forwards. A base class of
    # their own would change the --help-all and --generate-config text.
    "containers.lookup": "ContainerLookup keeps the pods' settings, listings and forwards",
    "kernels.runtime": "processes_type: the table of kernel processes by kind",
    "changes.kinds": "the table of change sources by kind",
    # Faces and the builder.
    "services": "c.KubernetesHosts is a configurable the builder lists (CLASSES)",
    "cli.hosts": "`jupyter gpudev hosts rbac` prints the server's RBAC (k8s.objects.make_rbac)",
}


def kind_specific(module: str) -> bool:
    rest = module.removeprefix(PACKAGE).lstrip(".")
    return any(
        rest.startswith(name[:-1]) if name.endswith("*") else rest == name for name in KIND_SPECIFIC
    )


def kind_imports(edges: Mapping[str, Iterable[str]]) -> list[str]:
    """Imports of a kind-specific module by a generic one not in ``KIND_TABLES``."""
    allowed = {f"{PACKAGE}.{name}" for name in KIND_TABLES}
    return [
        f"{source} -> {target}"
        for source, targets in sorted(edges.items())
        if not kind_specific(source) and source not in allowed
        for target in sorted(targets)
        if kind_specific(target)
    ]


def test_the_checker_finds_a_generic_module_importing_a_kind() -> None:
    # Given a generic module importing the cluster, a pod module importing the cluster, and a
    # kind table importing a backend
    edges = {
        f"{PACKAGE}.changes.capture": {f"{PACKAGE}.containers.pods", f"{PACKAGE}.changes.model"},
        f"{PACKAGE}.containers.pod_lifecycle": {f"{PACKAGE}.engine.cluster"},
        f"{PACKAGE}.containers.lifecycle": {f"{PACKAGE}.containers.pod_lifecycle"},
        f"{PACKAGE}.containers.plan": {f"{PACKAGE}.k8s.objects"},
    }
    # Then only the generic modules' imports are reported
    assert kind_imports(edges) == [
        f"{PACKAGE}.changes.capture -> {PACKAGE}.containers.pods",
        f"{PACKAGE}.containers.plan -> {PACKAGE}.k8s.objects",
    ]


def test_every_kind_table_exists() -> None:
    # A table or face named as allowed is a module of the package (a rename updates it)
    assert {f"{PACKAGE}.{name}" for name in KIND_TABLES} - set(modules()) == set()


def test_no_generic_module_imports_a_kind_specific_one() -> None:
    # A generic module reaches a kind only through its host's backend and the kind tables
    assert kind_imports(graph()) == []
