"""Environments: which image a dev container runs and how, read from devcontainer.json and config.

An environment comes from one of three places, listed in this order:

1. ``.devcontainer/devcontainer.json`` and ``.devcontainer/<sub>/devcontainer.json`` under the
   Jupyter root directory (``c.EnvironmentManager.discover``);
2. the administrator's ``c.EnvironmentManager.environments`` (name -> devcontainer.json form);
3. the built-in ``default`` environment: CPU only, ``c.EnvironmentManager.default_image``.

Only the devcontainer.json keys jupyter-gpudev acts on are read; the many others of the spec are
ignored. ``runArgs`` are default-deny: the few options that make sense for GPU work are turned
into typed ``RunOptions`` and nothing is ever handed to Docker verbatim.

Everything here is parsing and validation: nothing runs, no engine is contacted."""

from __future__ import annotations

import builtins
import dataclasses
import fnmatch
import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

from traitlets import Bool, Dict, List, TraitError, Unicode, validate
from traitlets.config import LoggingConfigurable

from ..engine.registries import normalize_image_ref
from ..errors import BadRequest, ConfigError, NotFound
from .capabilities import capability_name
from .jsonc import read_jsonc_file
from .model import (
    DEFAULT_NAME,
    NAME_RE,
    Environment,
    EnvironmentList,
    ImageNotAllowed,
    slugify,
)
from .reader import _candidate_files, _default_workspace, _inside, _SpecReader

CONFIG_TRAIT = "c.EnvironmentManager.environments"


class EnvironmentManager(LoggingConfigurable):
    """Environments offered to start. Configure with ``c.EnvironmentManager.*``."""

    environments = Dict(
        default_value={},
        help="""Environments declared by the administrator, offered in every root directory:
        name -> a dict in devcontainer.json form (image or build, containerEnv, mounts,
        runArgs, hostRequirements, customizations.gpudev, ...). Build paths must be absolute.
        A devcontainer.json with the same name in the root directory takes precedence.""",
    ).tag(config=True)

    default_image = Unicode(
        "gpudev-python:bookworm",
        help="""The image of the built-in 'default' environment (CPU only, Python and
        ipykernel); `jupyter gpudev image bootstrap` builds the default one.""",
    ).tag(config=True)

    include_default = Bool(
        True,
        help="""Offer the built-in 'default' environment (unless an environment found in the
        root directory or declared in configuration is itself named 'default').""",
    ).tag(config=True)

    discover = Bool(
        True,
        help="""Read .devcontainer/devcontainer.json and .devcontainer/*/devcontainer.json
        under the Jupyter root directory.""",
    ).tag(config=True)

    allowed_images = List(
        Unicode(),
        default_value=[],
        help="""More images that may be started, as fnmatch patterns ('*' also matches '/'),
        e.g. 'nvcr.io/nvidia/pytorch:*'. Without a match, only the images of declared
        environments (devcontainer.json, configuration, the default image and images built
        from a Dockerfile under the root) may start.""",
    ).tag(config=True)

    allow_host_network = Bool(
        False,
        help="""Accept --network=host (or --net=host) in runArgs. The container then shares
        the host's network namespace and can reach every service listening on the host.""",
    ).tag(config=True)

    allow_host_pid = Bool(
        False,
        help="""Accept --pid=host in runArgs. The container then sees (and, as the same user,
        can signal) every process of the host.""",
    ).tag(config=True)

    allow_host_ipc = Bool(
        False,
        help="""Accept --ipc=host in runArgs. The container then shares the host's IPC
        namespace: its shared memory (/dev/shm), semaphores and message queues, those of other
        users' processes included. --shm-size (or customizations.gpudev.shmSize) is the usual
        answer to a small /dev/shm.""",
    ).tag(config=True)

    allowed_env_vars = List(
        Unicode(),
        default_value=[],
        help="""Variables a devcontainer.json's containerEnv may set although they decide
        which code every process in the container loads: PATH, LD_* (LD_PRELOAD,
        LD_LIBRARY_PATH, ...), PYTHON* (PYTHONPATH, PYTHONSTARTUP, PYTHONHOME, ...) and
        BASH_ENV; fnmatch patterns, e.g. ['PYTHONPATH', 'LD_LIBRARY_PATH']. Environments
        declared in c.EnvironmentManager.environments may always set them.""",
    ).tag(config=True)

    allowed_capabilities = List(
        Unicode(),
        default_value=[],
        help="""Linux capabilities an environment may add to its dev container (capAdd,
        runArgs --cap-add=NAME, a Dev Container Feature's capAdd), by name, e.g.
        ['SYS_PTRACE'] for debuggers; none by default, and any capability not named here is
        refused. A capability widens what root in the container can do to the host's kernel:
        name only those your users need. In shared mode this is the service's configuration,
        the administrator's: no user's file can widen it.""",
    ).tag(config=True)

    @validate("allowed_capabilities")
    def _valid_capabilities(self, proposal: Any) -> list[str]:
        names: list[str] = []
        for item in proposal["value"]:
            name = capability_name(item)
            if name is None:
                raise TraitError(
                    "c.EnvironmentManager.allowed_capabilities lists capability names such as "
                    f"'SYS_PTRACE', not {item!r}"
                )
            names.append(name)
        return names

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self._last_root: Path | None = None
        #: What the server does not use of an environment (its users, where it imposes its
        #: own), in words: notes of each environment listed; set by ``DevContainers``.
        self.user_notes: Callable[[Environment], builtins.list[str]] = lambda _env: []

    def _reader(
        self, data: dict[str, Any], *, where: str, root_real: str, base_dir: str | None
    ) -> _SpecReader:
        return _SpecReader(
            data,
            where=where,
            root_real=root_real,
            base_dir=base_dir,
            allow_host_network=self.allow_host_network,
            allow_host_pid=self.allow_host_pid,
            allow_host_ipc=self.allow_host_ipc,
            allowed_env=tuple(self.allowed_env_vars),
            allowed_caps=tuple(self.allowed_capabilities),
        )

    def _read_file(
        self, path: Path, root_real: str, where: str, guess: str, *, top_level: bool
    ) -> tuple[Environment, builtins.list[str]]:
        real = os.path.realpath(path)
        if not _inside(real, root_real):
            raise BadRequest(
                f"{where}: links to a file outside the Jupyter root directory",
                details={"name": guess},
            )
        data = read_jsonc_file(path, where)
        if not isinstance(data, dict):
            raise BadRequest(f"{where}: must hold a JSON object", details={"name": guess})
        declared = data.get("name")
        if declared is not None and not isinstance(declared, str):
            raise BadRequest(f"{where}: 'name' must be a string", details={"name": guess})
        name = (slugify(declared or "") or guess) if top_level else guess
        if not NAME_RE.match(name):
            raise BadRequest(
                f"{where}: {name!r} cannot be an environment name; set 'name' (or rename the "
                "folder) to 1-63 lowercase letters, digits, '.', '_' or '-'",
                details={"name": name},
            )
        reader = self._reader(data, where=where, root_real=root_real, base_dir=str(path.parent))
        try:
            env = reader.read(name=name, display_name=declared or name, source=where)
        except BadRequest as exc:
            exc.details.setdefault("name", name)
            raise
        return env, reader.notes

    def _read_config(
        self, name: Any, data: Any, root_real: str
    ) -> tuple[Environment, builtins.list[str]]:
        where = f"{CONFIG_TRAIT}[{name!r}]"
        if not isinstance(name, str) or not NAME_RE.match(name):
            raise ConfigError(
                f"{where}: an environment name is 1-63 lowercase letters, digits, '.', '_' or "
                "'-', starting with a letter or digit"
            )
        if not isinstance(data, dict):
            raise ConfigError(f"{where}: expected a dict in devcontainer.json form")
        declared = data.get("name")
        if declared is not None and not isinstance(declared, str):
            raise ConfigError(f"{where}: 'name' must be a string")
        reader = self._reader(data, where=where, root_real=root_real, base_dir=None)
        try:
            env = reader.read(name=name, display_name=declared or name, source="config")
        except BadRequest as exc:
            raise ConfigError(exc.message) from None
        return env, reader.notes

    def list(self, root_dir: Path) -> EnvironmentList:
        """Every environment for ``root_dir``; unreadable files are reported, not raised.

        Raises ``ConfigError`` when ``c.EnvironmentManager.environments`` is invalid.
        """
        root_real = os.path.realpath(root_dir)
        self._last_root = Path(root_real)
        found: builtins.list[Environment] = []
        problems: builtins.list[dict[str, str]] = []
        taken: dict[str, str] = {}

        def add(env: Environment, notes: builtins.list[str], where: str) -> None:
            if env.name in taken:
                problems.append(
                    {
                        "file": where,
                        "name": env.name,
                        "level": "error",
                        "message": f"{where}: the environment name {env.name!r} is already used "
                        f"by {taken[env.name]}; give this one another name",
                    }
                )
                return
            taken[env.name] = where
            notes = [*notes, *(f"{where}: {note}" for note in self.user_notes(env))]
            found.append(dataclasses.replace(env, notes=tuple(notes)) if notes else env)
            problems.extend(
                {"file": where, "name": env.name, "level": "warning", "message": note}
                for note in notes
            )

        if self.discover and os.path.isdir(root_real):
            linked = os.path.join(root_real, ".devcontainer")
            if os.path.islink(linked) and not _inside(os.path.realpath(linked), root_real):
                problems.append(
                    {
                        "file": ".devcontainer",
                        "name": "",
                        "level": "warning",
                        "message": ".devcontainer links to a folder outside the Jupyter root "
                        "directory: none of its files is read",
                    }
                )
            for path, guess, top_level in _candidate_files(root_real):
                where = path.relative_to(root_real).as_posix()
                try:
                    env, notes = self._read_file(path, root_real, where, guess, top_level=top_level)
                except BadRequest as exc:
                    self.log.debug("Environment file %s: %s", where, exc.message)
                    problems.append(
                        {
                            "file": where,
                            "name": str(exc.details.get("name", guess)),
                            "level": "error",
                            "message": exc.message,
                        }
                    )
                    continue
                add(env, notes, where)
        for name, data in self.environments.items():
            env, notes = self._read_config(name, data, root_real)
            add(env, notes, f"{CONFIG_TRAIT}[{name!r}]")
        if self.include_default and DEFAULT_NAME not in taken:
            found.append(
                Environment(
                    name=DEFAULT_NAME,
                    display_name="Python (default)",
                    source="default",
                    image=self.default_image,
                    workspace_folder=_default_workspace(root_real),
                )
            )
        return EnvironmentList(environments=found, problems=problems)

    def get(self, name: str, root_dir: Path) -> Environment:
        """One environment by name: ``NotFound`` listing the known names, or ``BadRequest``
        with the problem when the file that defines it cannot be used."""
        listing = self.list(root_dir)
        for env in listing.environments:
            if env.name == name:
                return env
        for problem in listing.problems:
            if problem.get("name") == name and problem.get("level") == "error":
                raise BadRequest(
                    f"The environment {name!r} cannot be used: {problem['message']}",
                    details={"environment": name, "file": problem["file"]},
                )
        raise NotFound(
            f"No environment named {name!r}; known environments: "
            f"{', '.join(listing.names()) or 'none'}",
            details={"environment": name},
        )

    def is_image_allowed(self, image: str, root_dir: Path | None) -> bool:
        """Whether ``image`` may start: declared by an environment, or matching allowed_images.

        With ``root_dir=None`` only configuration counts (no devcontainer.json is read).
        """
        if not image:
            return False
        wanted = normalize_image_ref(image)
        if self.include_default and wanted == normalize_image_ref(self.default_image):
            return True
        for pattern in self.allowed_images:
            if fnmatch.fnmatchcase(image, pattern) or fnmatch.fnmatchcase(wanted, pattern):
                return True
        if root_dir is None:
            declared = [
                self._read_config(name, data, "/")[0] for name, data in self.environments.items()
            ]
        else:
            declared = self.list(root_dir).environments
        return any(normalize_image_ref(env.image_ref()) == wanted for env in declared)

    def check_image_allowed(self, env: Environment, root_dir: Path | None = None) -> None:
        """Raise ``ImageNotAllowed`` unless the environment's image may start.

        ``root_dir`` defaults to the root directory of this manager's latest ``list``/``get``
        (a Jupyter server has one); with neither, devcontainer.json files are not consulted.
        """
        image = env.image_ref()
        root = root_dir if root_dir is not None else self._last_root
        if not self.is_image_allowed(image, root):
            raise ImageNotAllowed(
                f"The image {image!r} is not declared by any environment: it must be named by a "
                "devcontainer.json under the Jupyter root directory, by "
                f"{CONFIG_TRAIT}, be the default image, be built from a Dockerfile under the "
                "root, or match c.EnvironmentManager.allowed_images",
                details={"image": image, "environment": env.name},
            )
