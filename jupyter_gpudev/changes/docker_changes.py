"""The changes of a Docker engine's dev containers (``source.ChangeSource``): read through the
engine (its ``docker diff``, its archive API; nothing runs in the container), the packages
derived from the image's, probed once in a helper container; a snapshot is a ``docker commit``
of the container made on its engine (``commit.Committer``), begun while the changes are read.
"""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor
from typing import TYPE_CHECKING

from ..engine import Host, Progress
from ..errors import engine_errors
from . import classify, compare, model
from .dockerfile import change_items
from .snapshots import SnapshotTags
from .source import (
    Captured,
    CaptureParts,
    CommitAsk,
    EarlyCommit,
    Prepared,
    Prune,
    Snapshot,
    Snapshots,
)

if TYPE_CHECKING:
    from docker.models.containers import Container


class DockerChanges:
    """The changes of the dev containers of one Docker engine host (``source.ChangeSource``)."""

    stages_snapshot = False

    def __init__(self, parts: CaptureParts, host: Host) -> None:
        self.parts = parts
        self.host = host

    def capture(self, native: Container, name: str, excluded: tuple[str, ...]) -> Captured:
        """A Docker container's change set: its ``docker diff`` against its baseline, its
        packages derived from its image's, its files read through the engine."""
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
            # Docker 20.10 overlay2): the command log is read meanwhile.
            reading = pool.submit(parts.commands, container)
            base = parts.baseline(client, container)
            whole_diff = list(container.diff() or [])
            # A path the baseline already had, with the same kind, is not a new change.
            diff = [d for d in whole_diff if base.files.get(str(d["Path"])) != int(d["Kind"])]
            diff += parts.edited(container, base, whole_diff)
            derived = parts.probe_current(client, container, whole_diff)
            commands = reading.result()
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
        )
        captured.changes = result.without(set(captured.held))
        captured.log_lines = len(commands)
        return captured

    def record_baseline(self, native: Container) -> None:
        self.parts.record_baseline(native)

    def uncommitted(self, native: Container, name: str, prune: Prune) -> list[str]:
        """Its changed files, less what the baseline and the engine account for, and the
        changes a commit left out that still exist (``prune``)."""
        key = str(native.id)
        baseline = self.parts.baselines.container(key)
        if baseline is not None and baseline.held:
            baseline = prune(name, self.host.name, key, baseline)
        return self.parts.container_uncommitted(native, baseline)

    def check_commit(self, name: str, options: CommitAsk) -> None:
        """Nothing a commit asks for is refused here."""

    def early_commit(self, native: Container, commits: Snapshots) -> EarlyCommit:
        return commits.early(self.host, native)

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
