"""The changes of a Docker engine's dev containers (``source.ChangeSource``): read through the
engine (its ``docker diff``, its archive API; nothing runs in the container), the packages
derived from the image's, probed once in a helper container; a snapshot is a ``docker commit``
of the container made on its engine (``commit.Committer``), begun while the changes are read.

Where the server runs as root on the engine's own machine (a ``unix://`` engine, overlay2 in
its data root, not rootless nor remapping users),
the changed paths are read from the container's own layer instead of the engine's diff
(``layer_diff.upper_changes``: the same entries, without walking the image's whole tree),
and the changed files a commit checks or copies from there too (``layer_diff.LayerFiles``);
``DockerChanges._changes`` is the one place that chooses.
"""

from __future__ import annotations

import logging
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, ClassVar
from urllib.parse import urlsplit

from ..engine import Host, Progress
from ..engine.hosts import ENGINE_INFO_AGE
from ..errors import engine_errors
from . import classify, compare, layer_diff, model
from .dockerfile import change_items
from .export import ArchiveSource, EngineArchives
from .snapshots import SnapshotTags
from .source import (
    Captured,
    CaptureParts,
    CommitAsk,
    EarlyCommit,
    EngineOrigin,
    Prepared,
    Prune,
    Snapshot,
    Snapshots,
)

if TYPE_CHECKING:
    import docker
    from docker.models.containers import Container

_log = logging.getLogger(__name__)


@dataclass
class LayerOrigin:
    """A Docker container read through its engine, its changed files from its own layer
    (``ChangeOrigin``; ``layer_diff.LayerFiles``, the engine's archives for the rest)."""

    through_engine: EngineOrigin
    archives: ArchiveSource

    @property
    def key(self) -> str:
        return self.through_engine.key

    @property
    def files(self) -> ArchiveSource:
        return self.archives

    def variables(self) -> list[str]:
        return self.through_engine.variables()

    def engine(self, name: str) -> tuple[docker.DockerClient, Container]:
        return self.through_engine.engine(name)


class DockerChanges:
    """The changes of the dev containers of one Docker engine host (``source.ChangeSource``)."""

    stages_snapshot = False
    #: Whether a local engine's containers have their changed paths read from their own
    #: overlay2 layer where this server can (``layer_diff``); else always the engine's diff.
    read_layer = True
    #: Why the engine's diff was used instead of a layer, each said once (at info level).
    _said: ClassVar[set[str]] = set()
    #: The most reasons remembered (then they are said at debug level only).
    MAX_SAID = 64

    def __init__(self, parts: CaptureParts, host: Host) -> None:
        self.parts = parts
        self.host = host

    def diff(self, container: Container) -> list[dict[str, Any]]:
        """The container's ``docker diff`` (``Path``, ``Kind``): read from its own layer
        (``layer_diff.upper_changes``) on a local engine where this server can read it, else
        asked of the engine (a remote host, another storage driver, a server not root, a
        layer the reader does not follow)."""
        return self._changes(container)[0]

    def _changes(self, container: Container) -> tuple[list[dict[str, Any]], ArchiveSource | None]:
        """``diff``, and where it was read from the layer, the container's files as archives
        read from there too (``layer_diff.LayerFiles``; ``None``: the engine's)."""
        root = self._local()
        if root is not None:
            try:
                files = layer_diff.LayerFiles(container.attrs, EngineArchives(container), root=root)
                return layer_diff.upper_changes(container.attrs, root=root), files
            except Exception as why:  # any failure of the reader: the engine's diff is right
                self._fallback(why)
        return list(container.diff() or []), None

    def _folders(self, container: Container) -> ArchiveSource | None:
        """Where a snapshot's layer leaving gpudev's files out reads the container's folders:
        its own layers where ``_changes`` reads them (``layer_diff.LayerFolders``), else
        ``None`` (a container of the committed image, through the engine)."""
        root = self._local()
        if root is not None:
            try:
                return layer_diff.LayerFolders(container.attrs, str(container.name), root=root)
            except Exception as why:
                self._fallback(why)
        return None

    def _local(self) -> str | None:
        """The engine's data root where the container's own layers may be read here:
        ``read_layer``, the engine on this machine's socket, saying its data root, neither
        rootless nor remapping users (its folders would not be root's, its ids not the
        files'); ``layer_diff`` checks the rest. ``None``: ask the engine."""
        if not self.read_layer or urlsplit(self.host.spec.url).scheme != "unix":
            return None
        try:
            info = self.host.engine_info(max_age=ENGINE_INFO_AGE)
        except Exception as why:
            self._fallback(why)
            return None
        if not info.data_root:
            self._fallback("the engine names no data root")
            return None
        for option in info.security_options:
            fields = dict(f.partition("=")[::2] for f in str(option).split(","))
            if fields.get("name") in ("rootless", "userns"):
                self._fallback(f"the engine runs with {fields['name']}")
                return None
        return info.data_root

    @classmethod
    def _fallback(cls, why: object) -> None:
        """Say (once per reason, at info level) why the engine's diff is used instead."""
        reason = f"{type(why).__name__}: {why}" if isinstance(why, BaseException) else str(why)
        if reason in cls._said or len(cls._said) >= cls.MAX_SAID:
            _log.debug("gpudev: the engine's diff, not the layer's: %s", reason)
            return
        cls._said.add(reason)
        _log.info("gpudev: reading changes through the engine's diff, not the layer: %s", reason)

    def capture(self, native: Container, name: str, excluded: tuple[str, ...]) -> Captured:
        """A Docker container's change set: its ``docker diff`` against its baseline, its
        packages derived from its image's, its files read through the engine (or, where
        ``_changes`` reads its layer, its changed files from there)."""
        parts, found_host, container = self.parts, self.host, native
        manager = parts.containers
        client = found_host.client()
        info = manager.describe(found_host, container)
        environment = manager.environments.get(info.environment, manager.root_dir)
        with (
            engine_errors(f"Reading the changes of {name!r}", manager.log),
            ThreadPoolExecutor(1, "gpudev-capture") as pool,
        ):
            # The engine's diff takes most of a second (it walks the image's whole tree, on
            # Docker 20.10 overlay2): the command log is read meanwhile. Where the container's
            # own layer is read, the log is read from there after it (no engine request).
            layer = self._local() is not None
            reading = None if layer else pool.submit(parts.commands, container)
            base = parts.baseline(client, container)
            whole_diff, files = self._changes(container)
            # A path the baseline already had, with the same kind, is not a new change.
            diff = [d for d in whole_diff if base.files.get(str(d["Path"])) != int(d["Kind"])]
            diff += parts.edited(files or container, base, whole_diff)
            derived = parts.probe_current(client, container, whole_diff)
            commands = (
                reading.result() if reading is not None else parts.commands(files or container)
            )
        current = derived.result
        result = compare.package_changes(base.packages, current.state)
        result.notes.extend(derived.problems)
        # Shown, written into the Dockerfile as comments: never a credential typed in one.
        result.commands = [classify.redact_command(c) for c in commands[base.log_lines :]]
        mounts = classify.mount_targets(container.attrs)
        new_envs = [p.env.prefix for p in result.python if p.new_env]
        result.files = classify.file_changes(
            diff, mounts, current.owned_files, new_envs, classify.engine_made(container.attrs)
        )
        known = set(base.secrets)  # found by content at an earlier commit
        result.files.secrets = sorted(
            {*result.files.secrets, *known.intersection(result.files.kept)}
        )
        result.files.kept = [p for p in result.files.kept if p not in known]
        result.files.owners = classify.home_owners(result.files.kept, current.state.accounts)
        image_env = client.images.get(str(container.attrs["Image"])).attrs["Config"].get("Env")
        classify.env_changes(
            container.attrs.get("Config", {}).get("Env") or [],
            image_env or [],
            base.env,
            result,
        )
        captured = Captured(
            info,
            environment,
            result,
            container,
            current.state,
            whole_diff,
            client,
            base=base,
            before_env=dict(base.env) if base.env is not None else model.env_dict(image_env or []),
            items=change_items(result),
            excluded=excluded,
            origin=LayerOrigin(EngineOrigin(container, client), files) if files else None,
        )
        captured.changes = result.without(set(captured.held))
        captured.log_lines = len(commands)
        return captured

    def record_baseline(self, native: Container) -> None:
        self.parts.record_baseline(native, self.diff(native))

    def uncommitted(self, native: Container, name: str, prune: Prune) -> list[str]:
        """Its changed files, less what the baseline and the engine account for, and the
        changes a commit left out that still exist (``prune``)."""
        key = str(native.id)
        baseline = self.parts.baselines.container(key)
        if baseline is not None and baseline.held:
            baseline = prune(name, self.host.name, key, baseline)
        return self.parts.container_uncommitted(native, baseline, self.diff(native))

    def check_commit(self, name: str, options: CommitAsk) -> None:
        """Nothing a commit asks for is refused here."""

    def early_commit(self, native: Container, commits: Snapshots) -> EarlyCommit:
        return commits.early(self.host, native, self._folders(native))

    def check_prepared(self, prepared: Prepared, options: CommitAsk) -> None:
        """Nothing is missing: the snapshot is the container's own layer."""

    def snapshot(
        self,
        commits: Snapshots,
        prepared: Prepared,
        *,
        options: CommitAsk,
        tags: SnapshotTags,
        say: Progress,
        early: EarlyCommit | None,
    ) -> Snapshot:
        return commits.engine_snapshot(prepared, options, tags, say, early=early)
