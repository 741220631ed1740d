"""The devcontainer.json support table (``environments/support.py``, issue #34): a row for every
property of the specification's schema, and each row's behaviour is what the reader does."""

from __future__ import annotations

import importlib.util
import json
import sys
from pathlib import Path
from types import SimpleNamespace
from typing import Any, cast

import pytest
from traitlets import TraitError

from jupyter_gpudev.containers.targets import Targets
from jupyter_gpudev.environments import Environment, EnvironmentManager
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


def read(root: Path, data: dict[str, Any], **settings: Any) -> tuple[list[str], BadRequest | None]:
    """The notes the listing has for ``data``, or the error a start would raise, with
    ``settings`` as ``c.EnvironmentManager``'s."""
    folder = root / ".devcontainer" / "e"
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "devcontainer.json").write_text(json.dumps(data))
    (folder / "Dockerfile").write_text("FROM python:3.12 AS base\n")
    manager = EnvironmentManager(**settings)
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
    # (capAdd, partly: with the capability it asks allowed by the administrator; refused
    # otherwise, see test_capabilities_are_added_only_where_the_administrator_names_them)
    notes, error = read(tmp_path, spec_with(prop.name), allowed_capabilities=["SYS_PTRACE"])
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


def test_capabilities_are_added_only_where_the_administrator_names_them(tmp_path: Path) -> None:
    # Given capAdd and runArgs --cap-add asking for SYS_PTRACE
    for data in (
        {"image": "python:3.12", "capAdd": ["SYS_PTRACE"]},
        {"image": "python:3.12", "runArgs": ["--cap-add=SYS_PTRACE"]},
        {"image": "python:3.12", "runArgs": ["--cap-add", "cap_sys_ptrace"]},
    ):
        # Then by default it is refused, naming the capability and the setting
        _, error = read(tmp_path, data)
        assert error is not None
        assert "SYS_PTRACE is not allowed: it adds Linux capabilities to the container" in (
            error.message
        )
        assert "c.EnvironmentManager.allowed_capabilities" in error.message
        # And where the administrator names it, it is the environment's, once
        _, error = read(tmp_path, data, allowed_capabilities=["SYS_PTRACE", "NET_ADMIN"])
        assert error is None
        env = EnvironmentManager(allowed_capabilities=["cap_sys_ptrace"]).get("e", tmp_path)
        assert env.run_options.cap_add == ("SYS_PTRACE",)
        assert env.allowed_caps == ("SYS_PTRACE",)
    # And one not named is still refused, as are ALL and what is not a name
    for asked in (["SYS_PTRACE", "SYS_ADMIN"], ["ALL"], ["SYS PTRACE"], "SYS_PTRACE"):
        _, error = read(
            tmp_path, {"image": "python:3.12", "capAdd": asked}, allowed_capabilities=["SYS_PTRACE"]
        )
        assert error is not None, asked
    _, error = read(
        tmp_path,
        {"image": "python:3.12", "runArgs": ["--cap-add=SYS_ADMIN"]},
        allowed_capabilities=["SYS_PTRACE"],
    )
    assert error is not None
    assert "SYS_ADMIN is not allowed" in error.message


def test_the_allowed_capabilities_setting_takes_names_only() -> None:
    assert EnvironmentManager(allowed_capabilities=["Sys_Ptrace"]).allowed_capabilities == [
        "SYS_PTRACE"
    ]
    for bad in ("ALL", "SYS PTRACE", "", "x" * 40):
        with pytest.raises(TraitError):
            EnvironmentManager(allowed_capabilities=[bad])


def _targets(*, single_user: bool, as_server: bool) -> Targets:
    lookup = SimpleNamespace(
        access=SimpleNamespace(single_user=single_user), workspace_owner=(1000, 1000)
    )
    return Targets(
        lookup=cast(Any, lookup),
        mount_policy=cast(Any, None),
        legacy_gpus=cast(Any, None),
        command=("sleep",),
        command_log=False,
        publish_ports=False,
        run_as_server_user=as_server,
        allow_root=True,
    )


def test_remote_and_container_user_apply_only_where_the_server_user_is_not_imposed() -> None:
    # Given an environment naming both users
    env = Environment("e", "e", "x", image="i", remote_user="dev", container_user="svc:svc")
    host = cast(
        Any, SimpleNamespace(user_ids=lambda: "1000:1000", spec=SimpleNamespace(is_local=True))
    )
    # Then in single-user mode without run_as_server_user they are the container's and the
    # processes' users
    own = _targets(single_user=True, as_server=False)
    assert own.run_as(host, env) == ("svc:svc", ())
    assert own.exec_user(env) == "dev"
    # And with run_as_server_user (the default) the server's user is the container's, and
    # processes run as it
    server = _targets(single_user=True, as_server=True)
    assert server.run_as(host, env) == ("1000:1000", ())
    assert server.exec_user(env) == ""
    # And in shared mode a name from the file never picks the processes' account
    for as_server in (True, False):
        assert _targets(single_user=False, as_server=as_server).exec_user(env) == ""


def test_a_user_name_is_checked_as_it_is_read(tmp_path: Path) -> None:
    for value in ("dev", "1000", "1000:1000", "dev:staff"):
        _, error = read(
            tmp_path, {"image": "python:3.12", "remoteUser": value, "containerUser": value}
        )
        assert error is None, value
    for value in ("dev --privileged", "-u", "a:b:c", "dev\n"):
        _, error = read(tmp_path, {"image": "python:3.12", "remoteUser": value})
        assert error is not None, value
        _, error = read(tmp_path, {"image": "python:3.12", "containerUser": value})
        assert error is not None, value


def test_a_user_the_container_does_not_run_as_is_a_note() -> None:
    env = Environment("e", "e", "x", image="i", remote_user="dev", container_user="svc")
    # Given run_as_server_user (the default): neither user is used, and each says so
    notes = _targets(single_user=True, as_server=True).user_notes(env)
    used = [n.split(" is not used")[0] for n in notes]
    assert used == ["'containerUser' svc", "'remoteUser' dev"]
    assert all("c.DevContainers.run_as_server_user" in n for n in notes)
    # And in shared mode they are not used either: the container runs as the calling user
    shared = _targets(single_user=False, as_server=False).user_notes(env)
    assert len(shared) == 2
    assert all("as you" in n for n in shared)
    # But where they are used, or not asked for, nothing is said
    assert _targets(single_user=True, as_server=False).user_notes(env) == []
    plain = Environment("e", "e", "x", image="i")
    assert _targets(single_user=True, as_server=True).user_notes(plain) == []
    # And root in shared mode is a request for root (allowed or refused at the start)
    root = Environment("e", "e", "x", image="i", remote_user="root")
    assert _targets(single_user=False, as_server=True).user_notes(root) == []


def test_the_environment_listing_shows_the_user_notes_of_the_server(tmp_path: Path) -> None:
    folder = tmp_path / ".devcontainer" / "u"
    folder.mkdir(parents=True)
    (folder / "devcontainer.json").write_text('{"image": "python:3.12", "remoteUser": "dev"}')
    manager = EnvironmentManager()
    manager.user_notes = lambda env: [f"about {env.remote_user}"]
    [env] = [e for e in manager.list(tmp_path).environments if e.name == "u"]
    assert env.notes == (".devcontainer/u/devcontainer.json: about dev",)
