"""What gpudev does with each property of ``devcontainer.json``: one table, read by the reader
(``reader.py``: a refused property is an error, an ignored one a note in ``envs``,
``start --dry-run``, the panel's environment row and a start's progress) and rendered as the
support table of the documentation (``docs/_ext/gpudev_spec.py``), so the two cannot drift.

Every top-level property of the Dev Container specification's schema
(``schemas/devContainer.base.schema.json`` of devcontainers/spec, ``SPEC``) has a row, and the
properties of ``build`` and ``hostRequirements``; ``tests/unit/test_spec_support.py`` checks the
table against the schema's list, kept as test data. A property that is not in the
specification is ignored with a note naming it (a misspelt ``postCreateComand`` must not pass
in silence).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, Literal

from ..errors import BadRequest

#: The specification the table follows.
SPEC = "devcontainers/spec schemas/devContainer.base.schema.json, 2026-03-20 (c95ffeed)"

Support = Literal["supported", "partly", "ignored", "refused"]


def _never(_value: Any) -> bool:
    return False


def _falsy(value: Any) -> bool:
    """``false``, ``null``, ``[]``, ``{}``, ``""``: the property asks for nothing."""
    return not value


def _one_of(*values: Any) -> Callable[[Any], bool]:
    def matches(value: Any) -> bool:
        return any(value == v and type(value) is type(v) for v in values)

    return matches


@dataclass(frozen=True)
class Property:
    """One property: how gpudev supports it and, for people, what it does with it.

    ``quiet``: the values that ask for what gpudev does anyway (no note, no error); any other
    value of an ``ignored`` property is a note, of a ``refused`` one an error."""

    name: str
    support: Support
    says: str
    quiet: Callable[[Any], bool] = _never

    def note(self, where: str) -> str:
        return f"{where}: '{self.name}' is ignored: {self.says}"

    def error(self, where: str) -> BadRequest:
        return BadRequest(
            f"{where}: '{self.name}' is not allowed: {self.says}",
            details={"file": where, "property": self.name},
        )


_COMPOSE = "Docker Compose environments are not supported; use 'image' or 'build'"

PROPERTIES: tuple[Property, ...] = (
    # What the container is made from.
    Property("name", "supported", "the environment's name in the panel, the picker and the CLI"),
    Property("image", "supported", "the image, allowed by c.EnvironmentManager.allowed_images"),
    Property("build", "supported", "a Dockerfile built with BuildKit (see the build.* rows)"),
    Property("dockerFile", "supported", "the older spelling of build.dockerfile"),
    Property("context", "supported", "the older spelling of build.context"),
    Property("build.dockerfile", "supported", "inside the Jupyter root directory"),
    Property("build.context", "supported", "inside the Jupyter root directory"),
    Property("build.args", "supported", "build arguments, strings"),
    Property("build.target", "supported", "the stage to build"),
    Property(
        "build.cacheFrom",
        "ignored",
        "gpudev builds with the engine's own cache; images to take cache from are not pulled",
        _falsy,
    ),
    Property(
        "build.options",
        "ignored",
        "these are docker build flags, which gpudev does not pass (default-deny, as runArgs)",
        _falsy,
    ),
    Property(
        "features",
        "partly",
        "installed into the image on a Docker engine (one build per set of features, cached): "
        "OCI references (tags, digests; c.Features.registry_mirrors; devcontainer-lock.json "
        "pins), ./folders under .devcontainer/, tarball URLs only where "
        "c.Features.allowed_urls allows; options, containerEnv, installsAfter, dependsOn "
        "(listed, not added), legacyIds, lifecycle commands (each before the environment's "
        "own of the same step, in install order). In shared mode on an image of the "
        "user's own, fetched with the service's credentials only where "
        "c.Registries.shared_pull_images names it for them. Not yet: Kubernetes hosts "
        "(refused there). A feature asking for privileged, "
        "securityOpt, entrypoint or mounts, or capAdd beyond "
        "c.EnvironmentManager.allowed_capabilities, is refused",
    ),
    Property(
        "overrideFeatureInstallOrder",
        "supported",
        "these features install first, in this order (dependsOn still before them)",
    ),
    # How it runs.
    Property("runArgs", "partly", "default-deny: the few flags allowed are listed above"),
    Property("containerEnv", "supported", "except variables that decide which code loads"),
    Property("mounts", "partly", "host folders under c.MountPolicy.allowed_roots only"),
    Property("workspaceFolder", "supported", "where the workspace is mounted"),
    Property(
        "workspaceMount",
        "ignored",
        "gpudev mounts the Jupyter root directory itself, at workspaceFolder",
        _falsy,
    ),
    Property(
        "init",
        "supported",
        "gpudev always runs an init process as the container's first process",
        _one_of(True, None),
    ),
    Property(
        "privileged",
        "refused",
        "it gives the container every device and capability of the host",
        _one_of(False, None),
    ),
    Property(
        "capAdd",
        "partly",
        "only capabilities c.EnvironmentManager.allowed_capabilities names (none by default; "
        "runArgs --cap-add=NAME and a feature's capAdd alike); any other is refused: it adds "
        "Linux capabilities to the container",
    ),
    Property("securityOpt", "refused", "it weakens the container's confinement", _falsy),
    Property(
        "overrideCommand",
        "supported",
        "gpudev always runs its own keep-alive process, not the image's command",
        _one_of(True, None),
    ),
    Property(
        "shutdownAction",
        "ignored",
        "a dev container runs until it is stopped, or reclaimed when idle "
        "(c.DevContainers.idle_timeout), not when a browser tab closes",
        _one_of("none", None),
    ),
    Property(
        "appPort",
        "ignored",
        "publishing ports on the host is not allowed; use forwardPorts",
        _falsy,
    ),
    Property("forwardPorts", "supported", "web ports reached through the server's proxy"),
    Property(
        "portsAttributes",
        "ignored",
        "labels and auto-forward actions are an editor's; web ports show in the panel",
        _falsy,
    ),
    Property(
        "otherPortsAttributes",
        "ignored",
        "labels and auto-forward actions are an editor's; web ports show in the panel",
        _falsy,
    ),
    # Who it runs as.
    Property(
        "containerUser",
        "partly",
        "the container's user where gpudev does not run it as the server's user "
        "(c.DevContainers.run_as_server_user off, single-user mode); by default it runs as the "
        "server's UID and GID, and in shared mode as the calling user (a note says it is not "
        "used)",
    ),
    Property(
        "remoteUser",
        "partly",
        "kernels, terminals and lifecycle commands run as it where the container does not run "
        "as the server's user (c.DevContainers.run_as_server_user off, single-user mode); "
        "otherwise they run as the container's user, and a note says it is not used. In shared "
        "mode they run as the calling user, and remoteUser is read only as a request to run as "
        "root (c.DevContainers.allow_root)",
    ),
    Property(
        "updateRemoteUserUID",
        "ignored",
        "true (the default) is what gpudev does already with c.DevContainers.run_as_server_user "
        "(on by default): the container runs as the server's UID and GID, so the workspace's "
        "files keep their owner; the image's users are not changed",
        _one_of(True, None),
    ),
    Property(
        "remoteEnv",
        "ignored",
        "kernels and terminals get containerEnv; remoteEnv is not applied",
        _falsy,
    ),
    Property(
        "userEnvProbe",
        "ignored",
        "kernels and terminals start with the container's environment; no shell is probed",
        _one_of("none", None),
    ),
    # Lifecycle.
    Property(
        "initializeCommand",
        "ignored",
        "it runs on the host in other tools; gpudev never runs a command from a "
        "devcontainer.json outside the container",
        _falsy,
    ),
    Property("onCreateCommand", "supported", "run once, first, after the container is created"),
    Property(
        "updateContentCommand",
        "supported",
        "run once, after onCreateCommand (gpudev has no content update of its own)",
    ),
    Property("postCreateCommand", "supported", "run once, after updateContentCommand"),
    Property("postStartCommand", "supported", "run at each start"),
    Property(
        "postAttachCommand",
        "supported",
        "run at each start, after postStartCommand: kernels and terminals attach after it",
    ),
    Property(
        "waitFor",
        "supported",
        "a start waits for every lifecycle command, so no kernel starts before the step named",
    ),
    # The host.
    Property("hostRequirements", "supported", "checked before a start (the rows below)"),
    Property("hostRequirements.gpu", "supported", "true, 'optional' or {count, memory}"),
    Property(
        "hostRequirements.cpus",
        "supported",
        "the engine's CPU count, checked before a start (409 when short); "
        "customizations.gpudev.cpus limits the container",
    ),
    Property(
        "hostRequirements.memory",
        "supported",
        "the engine's machine memory, checked before a start (409 when short); "
        "customizations.gpudev.memory limits the container",
    ),
    Property(
        "hostRequirements.storage",
        "supported",
        "free space where the engine keeps containers' files (df on the host, here or over "
        "SSH), checked before a start; not on tcp:// hosts, which say so as the start begins",
    ),
    # Other tools' settings.
    Property("customizations", "supported", "customizations.gpudev is read; other tools' kept"),
    Property(
        "secrets",
        "ignored",
        "recommended secrets are an editor's prompt; gpudev asks for none",
        _falsy,
    ),
    Property("$schema", "supported", "for editors; nothing to do"),
    Property(
        "additionalProperties",
        "ignored",
        "a JSON Schema keyword the schema lists among the properties; not a setting",
        _falsy,
    ),
    # Docker Compose.
    Property("dockerComposeFile", "refused", _COMPOSE),
    Property("service", "refused", _COMPOSE),
    Property("runServices", "refused", _COMPOSE),
)

BY_NAME: Mapping[str, Property] = {prop.name: prop for prop in PROPERTIES}

#: The objects whose own properties have rows (``build.*``, ``hostRequirements.*``).
NESTED = ("build", "hostRequirements")


def _checked(prop: Property, value: Any, where: str, notes: list[str]) -> None:
    if prop.support == "refused" and not prop.quiet(value):
        raise prop.error(where)
    if prop.support == "ignored" and not prop.quiet(value):
        notes.append(prop.note(where))


def check_properties(data: Mapping[str, Any], where: str) -> list[str]:
    """The notes for what ``data`` asks that gpudev does not do; ``BadRequest`` for a refused
    property (its message names it and says why). A name not in the specification is a note."""
    notes: list[str] = []
    for key, value in data.items():
        prop = BY_NAME.get(key)
        if prop is None:
            notes.append(
                f"{where}: '{key}' is not a devcontainer.json property and is ignored "
                f"(see the support table: docs/environments.md)"
            )
            continue
        _checked(prop, value, where, notes)
        if key in NESTED and isinstance(value, Mapping):
            for inner, inner_value in value.items():
                nested = BY_NAME.get(f"{key}.{inner}")
                if nested is None:
                    notes.append(f"{where}: '{key}.{inner}' is not a property and is ignored")
                else:
                    _checked(nested, inner_value, where, notes)
    return notes
