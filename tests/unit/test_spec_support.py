"""The devcontainer.json support table (``environments/support.py``, issue #34): a row for every
property of the specification's schema, and each row's behaviour is what the reader does."""

from __future__ import annotations

import importlib.util
import json
import sys
from pathlib import Path
from typing import Any

import pytest

from jupyter_gpudev.environments import EnvironmentManager
from jupyter_gpudev.environments.support import BY_NAME, NESTED, PROPERTIES, SPEC
from jupyter_gpudev.errors import BadRequest
from tests.conftest import FIXTURES

SCHEMA = json.loads((FIXTURES / "devcontainer-spec" / "properties.json").read_text())

#: A value of each property that asks for something (not a ``quiet`` one), valid where the
#: property is supported. ``build.*`` and ``hostRequirements.*`` are given inside their object.
ASKING: dict[str, Any] = {
    "name": "Asking",
    "image": "python:3.12",
    "build": {"dockerfile": "Dockerfile"},
    "dockerFile": "Dockerfile",
    "context": ".",
    "build.dockerfile": "Dockerfile",
    "build.context": ".",
    "build.args": {"A": "1"},
    "build.target": "base",
    "build.cacheFrom": ["ghcr.io/example/cache:1"],
    "build.options": ["--network=host"],
    "features": {"ghcr.io/devcontainers/features/node:1": {"version": "20"}},
    "overrideFeatureInstallOrder": ["ghcr.io/devcontainers/features/node"],
    "runArgs": ["--init"],
    "containerEnv": {"A": "1"},
    "mounts": [],
    "workspaceFolder": "/work",
    "workspaceMount": "source=/x,target=/work,type=bind",
    "init": False,
    "privileged": True,
    "capAdd": ["SYS_PTRACE"],
    "securityOpt": ["seccomp=unconfined"],
    "overrideCommand": False,
    "shutdownAction": "stopContainer",
    "appPort": [8080],
    "forwardPorts": [8888],
    "portsAttributes": {"8888": {"label": "lab"}},
    "otherPortsAttributes": {"onAutoForward": "silent"},
    "containerUser": "vscode",
    "remoteUser": "vscode",
    "updateRemoteUserUID": False,
    "remoteEnv": {"B": "2"},
    "userEnvProbe": "loginInteractiveShell",
    "initializeCommand": "echo host",
    "onCreateCommand": "echo create",
    "updateContentCommand": "echo update",
    "postCreateCommand": "echo created",
    "postStartCommand": "echo started",
    "postAttachCommand": "echo attached",
    "waitFor": "onCreateCommand",
    "hostRequirements": {"gpu": "optional"},
    "hostRequirements.gpu": "optional",
    "hostRequirements.cpus": 8,
    "hostRequirements.memory": "16gb",
    "hostRequirements.storage": "100gb",
    "customizations": {"vscode": {"extensions": ["ms-python.python"]}},
    "secrets": {"TOKEN": {"description": "a token"}},
    "$schema": "https://example.org/devcontainer.schema.json",
    "additionalProperties": {"x": 1},
    "dockerComposeFile": "compose.yml",
    "service": "app",
    "runServices": ["db"],
}


def test_every_property_of_the_specification_has_a_row() -> None:
    # Given the schema's property names (transcribed, with its version, as test data)
    assert SPEC.split(", ")[1].startswith(SCHEMA["date"])
    wanted = set(SCHEMA["properties"])
    wanted |= {f"build.{name}" for name in SCHEMA["build"]}
    wanted |= {f"hostRequirements.{name}" for name in SCHEMA["hostRequirements"]}
    # Then the table has exactly those rows, once each
    names = [prop.name for prop in PROPERTIES]
    assert len(names) == len(set(names))
    assert set(names) == wanted
    assert set(NESTED) <= wanted


def read(root: Path, data: dict[str, Any]) -> tuple[list[str], BadRequest | None]:
    """The notes the listing has for ``data``, or the error a start would raise."""
    folder = root / ".devcontainer" / "e"
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "devcontainer.json").write_text(json.dumps(data))
    (folder / "Dockerfile").write_text("FROM python:3.12 AS base\n")
    manager = EnvironmentManager()
    try:
        env = manager.get("e", root)
    except BadRequest as err:
        return [], err
    return list(env.notes), None


def spec_with(name: str) -> dict[str, Any]:
    """A devcontainer.json that asks ``name`` (inside its object for a nested one)."""
    data: dict[str, Any] = {"image": "python:3.12"}
    outer, _, inner = name.partition(".")
    if inner:
        base = {"dockerfile": "Dockerfile"} if outer == "build" else {}
        data[outer] = {**base, inner: ASKING[name]}
        if outer == "build":
            del data["image"]
    else:
        data[name] = ASKING[name]
        if name in ("build", "dockerFile"):
            del data["image"]
        if name == "context":
            data = {"dockerFile": "Dockerfile", "context": "."}
    return data


@pytest.mark.parametrize("prop", PROPERTIES, ids=lambda prop: prop.name)
def test_each_rows_behaviour_is_what_the_reader_does(tmp_path: Path, prop: Any) -> None:
    # Given a devcontainer.json asking for the property
    assert not prop.quiet(ASKING[prop.name]), "ASKING must ask for something"
    notes, error = read(tmp_path, spec_with(prop.name))
    said = [note for note in notes if f"'{prop.name}' is ignored" in note]
    if prop.support == "refused":
        # Then a refused one is an error naming it and saying why
        assert error is not None
        assert f"'{prop.name}' is not allowed: {prop.says}" in error.message
        assert ".devcontainer/e/devcontainer.json" in error.message
    elif prop.support == "ignored":
        # Then an ignored one is read, with a note naming it and saying why
        assert error is None, error.message
        assert said == [f".devcontainer/e/devcontainer.json: '{prop.name}' is ignored: {prop.says}"]
    else:
        # Then a supported one is read without a note about it
        assert error is None, error.message
        assert said == []


#: The value of each property that asks for what gpudev does anyway (``[]`` for the rest).
QUIET: dict[str, Any] = {
    "init": True,
    "privileged": False,
    "overrideCommand": True,
    "shutdownAction": "none",
    "updateRemoteUserUID": True,
    "userEnvProbe": "none",
    "waitFor": "postStartCommand",
}
WITH_QUIET = [
    prop
    for prop in PROPERTIES
    if prop.support in ("ignored", "refused") and prop.quiet(QUIET.get(prop.name, []))
]


def test_only_compose_is_refused_whatever_its_value() -> None:
    always = {p.name for p in PROPERTIES if p.support in ("ignored", "refused")}
    assert always - {p.name for p in WITH_QUIET} == {"dockerComposeFile", "service", "runServices"}


@pytest.mark.parametrize("prop", WITH_QUIET, ids=lambda prop: prop.name)
def test_a_value_that_asks_for_what_gpudev_does_anyway_says_nothing(
    tmp_path: Path, prop: Any
) -> None:
    # Given the property with a value that asks for nothing gpudev does not do
    data = spec_with(prop.name)
    outer, _, inner = prop.name.partition(".")
    value = QUIET.get(prop.name, [])
    if inner:
        data[outer][inner] = value
    else:
        data[prop.name] = value
    # Then it is read without an error or a note about it
    notes, error = read(tmp_path, data)
    assert error is None
    assert not [note for note in notes if f"'{prop.name}'" in note]


def test_a_name_not_in_the_specification_is_a_note_not_silence(tmp_path: Path) -> None:
    # Given a misspelt lifecycle command and a misspelt build key
    data = {
        "build": {"dockerfile": "Dockerfile", "dockerFlie": "x"},
        "postCreateComand": "pip install -e .",
    }
    notes, error = read(tmp_path, data)
    # Then both are named in notes
    assert error is None
    assert any("'postCreateComand' is not a devcontainer.json property" in n for n in notes)
    assert any("'build.dockerFlie' is not a property" in n for n in notes)


def test_notes_reach_the_listing_and_the_environment(tmp_path: Path) -> None:
    # Given an environment with a property gpudev ignores (remoteEnv)
    spec = {"image": "python:3.12", "remoteEnv": ASKING["remoteEnv"]}
    notes, _ = read(tmp_path, spec)
    listing = EnvironmentManager().list(tmp_path)
    # Then the listing's warnings and the environment's JSON say the same
    (env,) = [e for e in listing.environments if e.name == "e"]
    assert env.to_json()["notes"] == notes
    assert [p["message"] for p in listing.problems if p["level"] == "warning"] == notes
    assert "'remoteEnv' is ignored" in notes[0]


def test_every_row_is_known_by_its_name() -> None:
    assert all(BY_NAME[prop.name] is prop for prop in PROPERTIES)


def test_the_documentation_shows_every_row_as_the_reader_reads_it() -> None:
    # Given the docs' generator (plain Python) and the page with its marker
    docs = Path(__file__).resolve().parents[2] / "docs"
    spec = importlib.util.spec_from_file_location("gpudev_config", docs / "_ext/gpudev_config.py")
    assert spec is not None
    assert spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # its dataclasses look their module up there
    spec.loader.exec_module(module)
    assert module.SUPPORT_MARKER in (docs / "environments.md").read_text()
    # Then the table has one row per property, saying its support and what gpudev does
    table = module.support_markdown()
    for prop in PROPERTIES:
        says = prop.says.replace("|", "\\|")
        assert f"| `{prop.name}` | {module.WORDS[prop.support]} | {says} |" in table
    assert SPEC in table
