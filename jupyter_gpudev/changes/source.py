"""What a capture of a dev container's changes is, and what differs by the kind of its host.

``Captured`` is one capture: the change set, what it was compared with, and where it was read
(its ``ChangeOrigin``: a Docker container through the engine, ``EngineOrigin``, or a pod's files,
``podfiles.PodSource``). ``Prepared`` is a commit ready to be written, ``Snapshot`` a snapshot
image made of it.

``ChangeSource`` is what the change side does to the dev containers of one host whatever its
kind: capture one, take its baseline, tell what removing it would lose, and a commit's steps that
differ (what it refuses, its early ``docker commit``, its snapshot). ``docker_changes.py`` does
them for a Docker engine's containers, ``pod_changes.py`` for pods on a Kubernetes host;
``kinds.source_type`` is the one place that picks, by the host's kind. What they need of the
capture and of a commit are the protocols ``CaptureParts`` and ``Snapshots``.
"""

from __future__ import annotations

import shutil
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

import docker

from ..engine import Host, Progress, Registries
from ..errors import BadRequest
from . import compare, model
from .baselines import DIGESTED_FILES, Baseline, Baselines
from .dockerfile import RenderedDiff
from .export import ArchiveSource
from .snapshots import SnapshotTags

if TYPE_CHECKING:
    from docker.models.containers import Container

    from ..containers import DevContainerInfo, DevContainers
    from ..environments import Environment

#: The left-out changes of a baseline made to agree with the container now
#: (``ChangeTracker._prune_held``): its name, host, baseline key and baseline.
Prune = Callable[[str, str, str, Baseline], Baseline]


class ChangeOrigin(Protocol):
    """Where a capture was read, as the steps after it need it."""

    @property
    def key(self) -> str:
        """What its baselines are kept under."""

    @property
    def files(self) -> Container | ArchiveSource:
        """Where its files are read (``export``)."""

    def variables(self) -> list[str]:
        """Its environment variables now, as ``NAME=value``."""

    def engine(self, name: str) -> tuple[docker.DockerClient, Container]:
        """The Docker engine and container it was read from; a ``BadRequest`` naming
        ``name`` where there is none (a verify build, a ``docker commit`` need one)."""


@dataclass
class EngineOrigin:
    """A Docker container read through its engine (``ChangeOrigin``)."""

    container: Container | None
    client: docker.DockerClient | None

    @property
    def key(self) -> str:
        return str(self.engine("the container")[1].id)

    @property
    def files(self) -> Container:
        return self.engine("the container")[1]

    def variables(self) -> list[str]:
        attrs = self.container.attrs if self.container is not None else {}
        return list(attrs.get("Config", {}).get("Env") or [])

    def engine(self, name: str) -> tuple[docker.DockerClient, Container]:
        if self.client is None or self.container is None:
            raise BadRequest(f"{name} was not read through a Docker engine")
        return self.client, self.container


@dataclass
class Captured:
    """A container's change set, with what it was captured from: the container, its packages
    now and its whole ``docker diff`` (what a baseline moved forward to this point holds), the
    baseline it was compared with, every change as an item and the ones left out."""

    info: DevContainerInfo
    environment: Environment
    #: What a commit carries: every change less the ``excluded`` ones.
    changes: model.ChangeSet
    #: The Docker container (``None`` where it was not read through a Docker engine).
    container: Container | None
    packages: model.PackageState
    diff: list[dict[str, Any]]
    #: The client of the engine the container is on (``None`` where there is none).
    client: docker.DockerClient | None
    base: Baseline
    #: The environment variables the container's were compared with (the baseline's).
    before_env: dict[str, str] = field(default_factory=dict)
    #: Every change (excluded ones too), in the order the Dockerfile renders them.
    items: list[model.ChangeItem] = field(default_factory=list)
    #: The change ids asked to be left out (some may match no current change).
    excluded: tuple[str, ...] = ()
    #: How many lines the command log had (what the next baseline starts after).
    log_lines: int = 0
    #: Where it was read (its kind's ``ChangeSource`` says); default: the Docker
    #: ``container`` through the engine of ``client`` (``EngineOrigin``).
    origin: ChangeOrigin | None = None

    def __post_init__(self) -> None:
        if self.origin is None:
            self.origin = EngineOrigin(self.container, self.client)

    @property
    def _origin(self) -> ChangeOrigin:
        return self.origin or EngineOrigin(self.container, self.client)

    @property
    def pod(self) -> ChangeOrigin | None:
        """Where it was read when that was not a Docker container (a pod's
        ``podfiles.PodSource``), else ``None``."""
        return self.origin if self.container is None else None

    @property
    def key(self) -> str:
        """What the container's baseline is kept under."""
        return self._origin.key

    @property
    def source(self) -> Container | ArchiveSource:
        """Where the container's files are read from."""
        return self._origin.files

    def engine(self) -> tuple[docker.DockerClient, Container]:
        """The engine and the Docker container; where there is none, what needs them (a
        snapshot, a push, a verify build) is refused with a clear message."""
        return self._origin.engine(self.info.name)

    @property
    def held(self) -> list[str]:
        """The ids of the current changes left out, in the items' order."""
        asked = set(self.excluded)
        return [item.id for item in self.items if item.id in asked]

    @property
    def excluded_unknown(self) -> list[str]:
        """The ids asked to be left out that match no current change."""
        current = {item.id for item in self.items}
        return [i for i in self.excluded if i not in current]

    def selection_json(self) -> dict[str, Any]:
        """``items`` (every change), ``excluded`` (as asked) and ``excluded_unknown``."""
        return {
            "items": [item.to_json() for item in self.items],
            "excluded": list(self.excluded),
            "excluded_unknown": self.excluded_unknown,
        }

    def expected_packages(self) -> tuple[model.PackageState, dict[str, str | None]]:
        """What an image rebuilt from this commit has (``changes.expected_state``)."""
        return compare.expected_state(self.base.packages, self.packages, set(self.held))

    def as_baseline(self, digests: Mapping[str, str] | None = None) -> Baseline:
        """The container as it is now, less what a commit did not write (credentials, and the
        changes left out, put back as the old baseline had them): those stay changes, reported
        by the next diff and kept from a removal without force."""
        held = self.held
        left_out = set(held)
        env = model.env_dict(self._origin.variables())
        secrets = set(self.changes.files.secrets)
        # Not copied (credentials, and what could not be: a FIFO, over the size limit): still
        # changes after the commit.
        not_copied = secrets | set(self.changes.files.skipped)
        files = {str(d["Path"]): int(d["Kind"]) for d in self.diff if d["Path"] not in not_copied}
        for name in self.changes.env_secrets:
            env.pop(name, None)
        for item in self.items:
            if item.id not in left_out:
                continue
            if item.kind == "env":
                name = item.id.removeprefix("env:")
                env.pop(name, None)
                if name in self.before_env:
                    env[name] = self.before_env[name]
            elif item.kind in ("file", "delete"):
                path = item.id.split(":", 1)[1]
                inside = path.rstrip("/") + "/"
                for old in [p for p in files if p == path or p.startswith(inside)]:
                    del files[old]
                files.update(
                    (p, k) for p, k in self.base.files.items() if p == path or p.startswith(inside)
                )
        packages = compare.revert_excluded(self.base.packages, self.packages, left_out)
        # What the commit wrote is what an edit is compared with from now on; the rest keeps
        # what it was compared with before.
        known = {
            p: d for p, d in self.base.digests.items() if files.get(p) == self.base.files.get(p)
        }
        known.update(digests or {})
        kept = dict(sorted(known.items())[:DIGESTED_FILES])
        return Baseline(packages, env, files, sorted(secrets), held, kept, self.log_lines)


@dataclass
class Prepared:
    """A commit ready to be written: the capture, its rendered diff, the Dockerfile and build
    context it goes to, and the staging folder holding the kept files (``sources/``, ``files/``)."""

    captured: Captured
    rendered: RenderedDiff
    dockerfile: Path
    old_text: str | None
    context: Path
    staging: Path | None
    #: What each staged kept path was in the container (``Exported.digests``).
    digests: dict[str, str] = field(default_factory=dict)

    @property
    def folder(self) -> Path:
        """Where the kept files go in the build context (what the COPY lines read)."""
        return self.context / "gpudev-context" / self.captured.info.name

    def discard(self) -> None:
        if self.staging is not None:
            shutil.rmtree(self.staging, ignore_errors=True)
            self.staging = None


@dataclass
class Snapshot:
    """A snapshot image: where it is (``reference``: its tag on the engine, or a pod's pushed
    reference), its id, labels, the driver files left out, its tag on the engine (``local``,
    ``None`` for a pod's), where it was pushed and the pushed digest."""

    reference: str
    image_id: str
    labels: dict[str, str]
    removed_driver_files: list[str]
    pushed_digest: str | None = None
    local: str | None = None
    pushed_to: str | None = None

    def to_json(self) -> dict[str, Any]:
        return {
            "reference": self.reference,
            "local": self.local,
            "pushed_to": self.pushed_to,
            "image_id": self.image_id,
            "labels": dict(self.labels),
            "removed_driver_files": list(self.removed_driver_files),
            "pushed": self.pushed_digest is not None,
            "digest": self.pushed_digest or None,
        }


class EarlyCommit(Protocol):
    """A snapshot's ``docker commit`` begun while the changes are read (``commit.py``)."""

    #: gpudev's own files its layer leaves out.
    own: list[str]

    def result(self) -> tuple[str, Any]:
        """The committed image and the layer leaving gpudev's own files out (``None``)."""

    def discard(self) -> None:
        """Remove what it made."""

    def discard_soon(self) -> None:
        """Begin removing what it made, without waiting (``discard`` waits)."""


class CommitAsk(Protocol):
    """What a commit asks for, as a kind checks it (``commit.CommitOptions``)."""

    @property
    def verify(self) -> bool: ...
    @property
    def snapshot(self) -> str | None: ...
    @property
    def push(self) -> bool: ...
    @property
    def message(self) -> str | None: ...


#: A snapshot built from the patched Dockerfile elsewhere than this server's engine and
#: pushed as ``tag`` (``podbuild.PodBuild.run``): its pushed digest.
Build = Callable[..., str]


class Snapshots(Protocol):
    """What a kind's snapshot asks of the commit (``commit.Committer``)."""

    @property
    def registries(self) -> Registries: ...

    def early(
        self, found: Host, container: Container, folders: ArchiveSource | None = None
    ) -> EarlyCommit:
        """A snapshot's ``docker commit`` of ``container``, begun now (``folders``: where its
        folders are read from, ``None``: the committed image)."""

    def engine_snapshot(
        self,
        prepared: Prepared,
        options: CommitAsk,
        tags: SnapshotTags,
        say: Progress,
        *,
        early: EarlyCommit | None,
    ) -> Snapshot:
        """The snapshot made on the container's engine (``docker commit``), tagged and pushed
        as ``options`` say."""

    def built_snapshot(
        self, prepared: Prepared, options: CommitAsk, say: Progress, build: Build
    ) -> Snapshot:
        """The snapshot ``build`` makes and pushes from the patched Dockerfile, the build
        context and the staged files."""


class CaptureParts(Protocol):
    """What a kind's ``ChangeSource`` uses of the capture (``capture.ChangeCapture``)."""

    @property
    def containers(self) -> DevContainers: ...
    @property
    def baselines(self) -> Baselines: ...

    def edited(
        self, container: Container | ArchiveSource, base: Baseline, diff: list[dict[str, Any]]
    ) -> list[dict[str, Any]]: ...
    def baseline(self, client: docker.DockerClient, container: Container) -> Baseline: ...
    def commands(self, container: Container | ArchiveSource) -> list[str]: ...
    def probe_current(
        self, client: docker.DockerClient, container: Container, diff: list[dict[str, Any]]
    ) -> Any: ...
    def record_baseline(
        self, container: Container, diff: list[dict[str, Any]] | None = None
    ) -> None: ...
    def container_uncommitted(
        self,
        container: Container,
        baseline: Baseline | None,
        diff: list[dict[str, Any]] | None = None,
    ) -> list[str]: ...


class ChangeSource(Protocol):
    """The changes of the dev containers of one host (``kinds.source_type``). What a method
    is given as ``native`` is what the host's dev container backend found
    (``containers.Located.native``)."""

    #: Whether a commit with a snapshot has the kept files staged (its snapshot is built from
    #: them, not committed from the container).
    stages_snapshot: bool

    def capture(self, native: Any, name: str, excluded: tuple[str, ...]) -> Captured:
        """Its change set less the ``excluded`` changes (``ChangeCapture.capture``)."""

    def record_baseline(self, native: Any) -> None:
        """Its baseline, taken after its lifecycle commands ran."""

    def uncommitted(self, native: Any, name: str, prune: Prune) -> list[str]:
        """What removing it would lose (the paths); empty: nothing."""

    def check_commit(self, name: str, options: CommitAsk) -> None:
        """Refuse, before anything is read, what a commit of it cannot do."""

    def early_commit(self, native: Any, commits: Snapshots) -> EarlyCommit | None:
        """A snapshot's ``docker commit`` begun now, where there is one."""

    def check_prepared(self, prepared: Prepared, options: CommitAsk) -> None:
        """Refuse, before anything is built or written, what the prepared commit lacks."""

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
        """Its snapshot (``commit.py``'s third step)."""
