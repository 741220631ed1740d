"""Capture a dev container's change set and render its Dockerfile diff.

``ChangeCapture`` joins the parts: the container's baseline (``Baselines``, kept in the state
folder), the package probe and ``docker diff`` (``jupyter_gpudev.changes``) and the renderer
(``jupyter_gpudev.dockerfile``). Nothing runs in a dev container to read its packages, running
or stopped (kept because it has changes): they are its image's (probed once in a throwaway
container of the image) plus what its ``docker diff`` and the package files it names, read as
data, say (``jupyter_gpudev.packages``); looking at changes never needs a GPU lease.

What differs by the kind of the container's host is its ``ChangeSource`` (``source.py``;
``kinds.source_type`` picks it): a Docker engine's containers are read as above
(``docker_changes.py``), pods on a Kubernetes host by file listings and ``tar`` run in them
(``pod_changes.py``). Rendering, staging the kept files and writing a commit are the same for
every kind, here."""

from __future__ import annotations

import dataclasses
import json
import os
import shutil
import socket
import tarfile
import tempfile
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import docker.errors

from .. import safefs
from ..containers import commandlog
from ..containers.reconcile import process_gone, process_identity
from ..engine.context import read_checked_text
from ..environments import MAX_FILE_BYTES, Environment, load_jsonc
from ..errors import EngineError, Forbidden, GPUDevError, engine_errors
from . import classify, model, packages, probe
from .dockerfile import RenderedDiff, render

if TYPE_CHECKING:
    from docker.models.containers import Container

    from ..containers import DevContainers
    from ..engine.hosts import Host
from .baselines import DIGESTED_FILES, Baseline, Baselines, _check_id
from .classify import engine_made, mount_targets, uncommitted
from .export import FILE_SIZE_LIMIT, ArchiveSource, Exported, _Exporter, read_digests
from .helpers import PROBE_OUTPUT_LIMIT, PROBE_TIMEOUT, run_probe, shown
from .kinds import source_type
from .source import Captured, ChangeSource, Prepared

__all__ = ["Captured", "ChangeCapture", "DiffChanged", "Prepared", "WriteResult", "sweep_staging"]

#: A commit's staging folder in the temporary folder: ``gpudev-stage-PID.START.BOOT-...``, the
#: process that made it (``process_identity``: its PID, start time and boot; ``PID`` alone
#: without ``/proc``, and from earlier versions), so that one left by a process killed
#: mid-commit can be told apart, even once another process has its PID.
STAGING = "gpudev-stage-"


def staging_prefix() -> str:
    """The name a staging folder of this process starts with (``STAGING``)."""
    process = process_identity().partition(":")[2]
    return f"{STAGING}{process.replace(':', '.')}-"


def sweep_staging() -> list[Path]:
    """Remove the staging folders (ours) that processes of this machine left when they died
    in the middle of a commit (the server's start-up does this); the ones removed."""
    removed = []
    machine = socket.gethostname()
    for path in Path(tempfile.gettempdir()).glob(f"{STAGING}*-*"):
        process = path.name.removeprefix(STAGING).partition("-")[0]
        try:
            mine = path.lstat().st_uid == os.geteuid() and path.is_dir() and not path.is_symlink()
        except OSError:
            continue
        if mine and process_gone(f"{machine}:{process.replace('.', ':')}", machine):
            shutil.rmtree(path, ignore_errors=True)  # never follows a link inside
            removed.append(path)
    return removed


class DiffChanged(GPUDevError):
    """The diff a commit would write is not the one the user reviewed (its ``expect``
    digest): the container changed since, or other changes are left out."""

    status = 409
    exit_code = 6
    code = "diff_changed"


class ChangeCapture:
    """Change sets and Dockerfile diffs of the dev containers of a ``DevContainers``."""

    def __init__(self, containers: DevContainers) -> None:
        self.containers = containers
        self.baselines = Baselines(containers.state_dir)
        #: The largest file a commit copies out of a container (larger: reported, not copied).
        self.file_size_limit = FILE_SIZE_LIMIT
        #: How long the image probe may run, and the most of its output read.
        self.probe_timeout = PROBE_TIMEOUT
        self.probe_output_limit = PROBE_OUTPUT_LIMIT

    # -- baselines --------------------------------------------------------------------------

    def record_baseline(
        self, container: Container, diff: list[dict[str, Any]] | None = None
    ) -> None:
        """The packages of a container that just ran its lifecycle commands (read as data,
        nothing run in it): its own baseline. ``diff``: its ``docker diff`` where the caller
        read it (``DockerChanges.diff``); else the engine's."""
        if container.client is None:
            raise EngineError(f"No engine client for {container.name}")
        env = container.attrs.get("Config", {}).get("Env") or []
        diff = list(container.diff() or []) if diff is None else diff
        files = {str(d["Path"]): int(d["Kind"]) for d in diff}
        current = self.probe_current(container.client, container, diff)
        for problem in current.problems:
            self.containers.log.warning("gpudev: baseline of %s: %s", container.name, problem)
        keepable = classify.file_changes(
            diff,
            classify.mount_targets(container.attrs),
            current.result.owned_files,
            made=classify.engine_made(container.attrs),
        ).kept
        baseline = Baseline(current.result.state, model.env_dict(env), files)
        baseline.digests = self._digests(container, keepable, diff)
        baseline.log_lines = len(self.commands(container))
        self.baselines.save_container(str(container.id), baseline)

    def _digests(
        self, container: Container, paths: list[str], diff: list[dict[str, Any]]
    ) -> dict[str, str]:
        """What ``paths`` (at most ``DIGESTED_FILES``) are now in ``container``."""
        if not paths:
            return {}
        chosen = sorted(paths)[:DIGESTED_FILES]
        return read_digests(container, chosen, diff, self.file_size_limit).digests

    def commands(self, container: Container | ArchiveSource) -> list[str]:
        """The command lines of the container's command log (``[]`` without one): through the
        engine, or from ``container``'s files where they are read from its own layer."""
        reader = (
            packages.SourceReader(container)
            if isinstance(container, ArchiveSource)
            else packages.ContainerReader(container)
        )
        try:
            data = reader(commandlog.LOG, commandlog.LOG_LIMIT)
        except (packages.Unreadable, tarfile.TarError) as exc:  # e.g. cut short as it was read
            self.containers.log.info("gpudev: the command log of %s: %s", container.name, exc)
            return []
        return commandlog.commands(data.decode("utf-8", "replace")) if data else []

    def edited(
        self, container: Container | ArchiveSource, base: Baseline, diff: list[dict[str, Any]]
    ) -> list[dict[str, Any]]:
        """The entries of ``diff`` that the baseline already had (same path and kind) but whose
        content changed since (``Baseline.digests``): an edit of a committed file, or of one a
        lifecycle command made."""
        same = {
            str(d["Path"]): d
            for d in diff
            if str(d["Path"]) in base.digests and base.files.get(str(d["Path"])) == int(d["Kind"])
        }
        if not same:
            return []
        now = read_digests(container, sorted(same), diff, self.file_size_limit).digests
        return [d for path, d in sorted(same.items()) if now.get(path) != base.digests[path]]

    def _image_baseline(self, client: docker.DockerClient, image_id: str) -> model.PackageState:
        cached = self.baselines.image(image_id)
        if cached is not None:
            return cached
        state = self.probe_image(client, image_id).state
        self.baselines.save_image(image_id, state)
        return state

    def probe_image(
        self,
        client: docker.DockerClient,
        image: str,
        owned_dpkg: list[str] | None = None,
        owned_dists: list[str] | None = None,
    ) -> model.ProbeResult:
        """The probe in a helper container of ``image`` (``helpers.run_probe``: confined as a
        dev container and more, as root with no capability but reading, no network, no GPU,
        no mount, a read-only root; stopped past ``probe_timeout`` seconds or
        ``probe_output_limit`` bytes; removed after). The image may hold a container's files
        (a verify build's), so its programs run by absolute path, with a fixed PATH and no
        LD_*/PYTHON* variables (``changes.probe_environment``), and what they print is parsed
        as hostile input. Never run in a dev container."""
        with engine_errors(f"Probing the packages of {shown(image)}"):
            image_env = client.images.get(image).attrs.get("Config", {}).get("Env") or []
        output = run_probe(
            client,
            image,
            ["/bin/sh", "-c", probe.PROBE_SCRIPT],
            probe.probe_environment(owned_dpkg or [], owned_dists or [], image_env),
            self.containers.confinement(),
            timeout=self.probe_timeout,
            limit=self.probe_output_limit,
        )
        return probe.parse_probe(output.decode("utf-8", "replace"))

    def baseline(self, client: docker.DockerClient, container: Container) -> Baseline:
        own = self.baselines.container(str(container.id))
        image = _check_id(str(container.attrs.get("Image", "")))
        if own is None:
            return Baseline(self._image_baseline(client, image))
        if own.packages.accounts is None:  # recorded before users and groups were read
            accounts = self._image_baseline(client, image).accounts
            own = dataclasses.replace(
                own, packages=dataclasses.replace(own.packages, accounts=accounts)
            )
        return own

    # -- capture ------------------------------------------------------------------------------

    def capture(self, name: str, host: str | None = None, exclude: Iterable[str] = ()) -> Captured:
        """The change set of a dev container, running or stopped, less the changes whose ids
        are in ``exclude`` (``Captured.items`` lists them all)."""
        excluded = model.check_change_ids(exclude)
        located = self.containers.locate(name, host)
        return self.source(located.host).capture(located.native, name, excluded)

    def source(self, host: Host) -> ChangeSource:
        """What the changes of the dev containers of ``host`` are read and committed with
        (``kinds.source_type``)."""
        return source_type(host)(self, host)

    def source_of(self, captured: Captured) -> ChangeSource:
        """``source`` of the host ``captured`` was read on."""
        return self.source(self.containers.host_pool.get(captured.info.host))

    def probe_current(
        self,
        client: docker.DockerClient,
        container: Container,
        diff: list[dict[str, Any]],
    ) -> packages.Derived:
        """The packages of the container now, with the files of its changed packages, running
        or stopped: its image's, its ``docker diff`` against it (``diff``) and the package
        files it names, read as data through the engine. Nothing runs in the container."""
        image = self._image_baseline(client, _check_id(str(container.attrs.get("Image", ""))))
        return packages.current_state(image, diff, packages.ContainerReader(container))

    def container_uncommitted(
        self,
        container: Container,
        baseline: Baseline | None,
        diff: list[dict[str, Any]] | None = None,
    ) -> list[str]:
        """What removing ``container`` would lose (``classify.uncommitted``): the rule
        ``remove`` refuses by and the panel's count shows; files the baseline had, edited
        since, included. ``diff``: as ``record_baseline``'s."""
        diff = list(container.diff() or []) if diff is None else diff
        edited = self.edited(container, baseline, diff) if baseline is not None else []
        return uncommitted(
            diff,
            mount_targets(container.attrs),
            baseline.files if baseline else {},
            made=engine_made(container.attrs),
            held=baseline.held if baseline else (),
            edited=[str(d["Path"]) for d in edited],
        )

    # -- render -------------------------------------------------------------------------------

    def diff(
        self, name: str, host: str | None = None, exclude: Iterable[str] = ()
    ) -> tuple[Captured, RenderedDiff]:
        """The Dockerfile diff of a dev container's changes (less the ``exclude`` ones)."""
        captured = self.capture(name, host, exclude)
        return captured, self._render(captured)

    def _targets(self, env: Environment) -> tuple[Path, str | None, Path]:
        """The Dockerfile to patch (or create), its text (``None``: new) and build context."""
        root = self.containers.root_dir
        if env.build is not None:
            try:
                text = read_checked_text(env.build.dockerfile)  # no link followed on its way
            except OSError as exc:
                raise GPUDevError(f"Reading {env.build.dockerfile}: {exc.strerror}") from exc
            return env.build.dockerfile, text, env.build.context
        folder = (
            (root / env.source).parent
            if env.source.endswith("devcontainer.json")
            else root / ".devcontainer" / env.name
        )
        return folder / "Dockerfile", None, folder

    def _render(self, captured: Captured, message: str | None = None) -> RenderedDiff:
        env = captured.environment
        root = self.containers.root_dir
        dockerfile, old_text, context = self._targets(env)
        return render(
            captured.changes,
            container=captured.info.name,
            environment=env.name,
            dockerfile=_relative(dockerfile, root),
            old_text=old_text,
            image=captured.info.image or env.image,
            context_folder=_relative(context / "gpudev-context" / captured.info.name, context),
            message=message,
        )

    def prepare(
        self,
        name: str,
        host: str | None = None,
        message: str | None = None,
        *,
        stage: bool = True,
        scan: bool = False,
        exclude: Iterable[str] = (),
        expect: str | None = None,
    ) -> Prepared:
        """Capture the changes and copy the kept files out of the container into a staging
        folder (files whose content looks like a credential are left out and reported), then
        render the diff. Nothing in the workspace is touched until ``apply``; ``discard``
        (or ``apply``) removes the staging folder. ``stage=False`` copies nothing (a diff or a
        snapshot); with ``scan`` the kept files' content is still checked for credentials,
        inside a running container (a push), without copying them out. ``exclude``: the ids
        of changes left out. ``expect``: the ``digest`` of the diff the user reviewed (with
        the same exclusions, rendered without a message, as ``diff`` does); a ``DiffChanged``
        error, before anything is copied, when the diff is another one now."""
        captured = self.capture(name, host, exclude)
        if expect is not None:
            digest = self._render(captured).digest
            if digest != expect:
                raise DiffChanged(
                    f"The changes of {captured.info.name} are not the ones shown when the diff "
                    "was made (the container changed since, or other changes are left out): "
                    "nothing was written. Review the diff again, then commit what it shows.",
                    details={"expected": expect, "digest": digest},
                )
        dockerfile, old_text, context = self._targets(captured.environment)
        files = captured.changes.files
        staging = None
        if files.kept and stage:
            staging = Path(tempfile.mkdtemp(prefix=staging_prefix()))
        try:
            if staging is not None:
                exported = self._export(captured.source, files.kept, staging, captured.diff)
            elif scan and files.kept:
                exported = Exported(
                    secrets=self.scan_credentials(captured.source, files.kept, captured.diff)
                )
            else:
                exported = Exported()
        except BaseException:
            if staging is not None:
                shutil.rmtree(staging, ignore_errors=True)
            raise
        left_out = {*exported.secrets, *exported.skipped, *exported.links}
        files.kept = [p for p in files.kept if p not in left_out]
        files.secrets = sorted({*files.secrets, *exported.secrets})
        files.links = dict(sorted(exported.links.items()))
        files.skipped = dict(sorted(exported.skipped.items()))
        captured.changes.notes.extend(f"{p}: {why}" for p, why in files.skipped.items())
        rendered = self._render(captured, message)
        prepared = Prepared(captured, rendered, dockerfile, old_text, context, staging)
        prepared.digests = {p: d for p, d in exported.digests.items() if p in files.kept}
        return prepared

    def apply(self, prepared: Prepared) -> WriteResult:
        """Write what ``prepare`` staged: the kept files into the build context
        (``gpudev-context/NAME/``, added to an earlier commit's), the Dockerfile (the previous
        one kept as ``Dockerfile.prev``), devcontainer.json pointed at a new Dockerfile; then
        the container's baseline moves forward (a diff right after is empty, but for the
        changes the commit left out: ``Baseline.held``). An empty diff (every change left
        out) writes nothing in the workspace."""
        captured, rendered = prepared.captured, prepared.rendered
        dockerfile = prepared.dockerfile
        folder = prepared.folder
        backup = devcontainer = None
        try:
            if rendered.diff:
                if prepared.staging is not None and rendered.files:
                    with (
                        self._workspace_folder(prepared.context) as context,
                        context.folder(f"gpudev-context/{captured.info.name}", create=True) as out,
                        safefs.Folder.open(prepared.staging) as staged,
                    ):
                        safefs.copy_tree(staged, out)
                with self._workspace_folder(dockerfile.parent) as where:
                    if prepared.old_text is not None:
                        backup = dockerfile.with_name(dockerfile.name + ".prev")
                        where.replace(backup.name, prepared.old_text.encode())
                    where.replace(dockerfile.name, rendered.new_text.encode())
                    if rendered.created:
                        devcontainer = self._use_dockerfile(captured.environment, dockerfile, where)
        except OSError as exc:
            raise GPUDevError(
                f"Writing the commit of {captured.info.name} failed: {exc.strerror or exc} "
                f"({exc.filename or dockerfile.parent})"
            ) from exc
        finally:
            prepared.discard()
        # What was just captured is the new starting point: a diff right after is empty.
        baseline = captured.as_baseline(prepared.digests)
        self.baselines.save_container(captured.key, baseline)
        return WriteResult(
            captured, rendered, dockerfile, backup, folder if rendered.files else None, devcontainer
        )

    def write(self, name: str, host: str | None = None, message: str | None = None) -> WriteResult:
        """``prepare`` then ``apply``: the Dockerfile diff written into the workspace."""
        return self.apply(self.prepare(name, host, message))

    def scan_credentials(
        self, container: Container | ArchiveSource, paths: list[str], diff: list[dict[str, Any]]
    ) -> set[str]:
        """The kept files whose content looks like a credential, read through the engine's
        archive API (nothing runs in the container; running or stopped) and checked here.
        ``diff``: the container's ``docker diff`` the capture read (asking the engine again
        costs as much again: most of a second)."""
        if not paths:
            return set()
        exporter = _Exporter(container, None, self.file_size_limit)
        exporter.run(paths, diff)
        return exporter.result.secrets

    def _export(
        self,
        container: Container | ArchiveSource,
        paths: list[str],
        folder: Path,
        diff: list[dict[str, Any]],
    ) -> Exported:
        """Copy kept files out of the container into ``folder/sources`` and ``folder/files``
        through the engine's archive API (the engine reads them; no program of the container
        runs, so a replaced ``tar`` has no say), running or stopped. Written only at the paths
        asked for, with ``safefs`` (no link followed, no name from the archive trusted): see
        ``_Exporter``. ``diff``: the container's ``docker diff``, whose added folders holding
        mostly kept files are fetched in one archive each."""
        with safefs.Folder.open(folder) as stage:
            exporter = _Exporter(container, stage, self.file_size_limit, digests=True)
            try:
                exporter.run(paths, diff)
            finally:
                exporter.close()
        return exporter.result

    def check_writable(self, prepared: Prepared) -> None:
        """``Forbidden`` when ``apply`` would write outside the user's folder in the shared
        service: an administrator's environment (its Dockerfile and build context are every
        user's; the service writes as root, and every user's next start would build what one
        user put there)."""
        if self.containers.access.single_user:
            return
        root = self.containers.root_dir
        for path in (prepared.dockerfile.parent, prepared.context):
            if safefs.relative_inside(path, root) is None:
                raise Forbidden(
                    f"The environment {prepared.captured.environment.name!r} is the "
                    "administrator's (its Dockerfile is outside your folder): a commit writes "
                    "only into your folder. Read the diff, or make a snapshot (--snapshot); to "
                    "keep changing it, copy it into your .devcontainer folder first.",
                    details={"environment": prepared.captured.environment.name},
                )

    def _workspace_folder(self, folder: Path) -> safefs.Folder:
        """``folder`` opened for writing (made when missing) from the Jupyter root directory
        down, no link followed on the way (``safefs.LinkRefused`` names one); a folder outside
        the root (an administrator's environment) is opened as configured, in a single-user
        server only (``check_writable``)."""
        root = self.containers.root_dir
        inside = safefs.relative_inside(folder, root)
        if inside is None:
            if not self.containers.access.single_user:
                raise Forbidden(f"{folder} is outside your folder: nothing is written there")
            folder.mkdir(parents=True, exist_ok=True)
            return safefs.Folder.open(folder)
        # What is written in the workspace is its owner's (the shared service writes as root).
        with safefs.Folder.open(root, owner=self.containers.workspace_owner) as top:
            return top.folder(inside, create=True)

    def _use_dockerfile(self, env: Environment, dockerfile: Path, where: safefs.Folder) -> Path:
        """Point the environment's devcontainer.json (in the open folder ``where``) at the new
        Dockerfile instead of its image (created for the built-in or admin environments); the
        old one is kept as devcontainer.json.prev. Neither is written through a link."""
        path = dockerfile.parent / "devcontainer.json"
        data: dict[str, Any] = {}
        old = where.read_bytes(path.name, MAX_FILE_BYTES)
        if old is not None:
            try:
                text = old.decode("utf-8")
            except UnicodeDecodeError:
                raise GPUDevError(f"{path}: not UTF-8 text") from None
            loaded = load_jsonc(text, str(path))
            data = dict(loaded) if isinstance(loaded, dict) else {}
            where.replace("devcontainer.json.prev", old)
        data.pop("image", None)
        data["build"] = {"dockerfile": dockerfile.name}
        if old is None and env.container_env:
            data["containerEnv"] = dict(env.container_env)
        where.replace(path.name, (json.dumps(data, indent=2) + "\n").encode())
        return path


@dataclass
class WriteResult:
    """What ``commit --write`` wrote: the Dockerfile (and its backup), the files copied into
    the build context, devcontainer.json when it was switched to the new Dockerfile."""

    captured: Captured
    rendered: RenderedDiff
    dockerfile: Path
    backup: Path | None
    context_folder: Path | None
    devcontainer: Path | None

    def to_json(self) -> dict[str, Any]:
        return {
            **self.rendered.to_json(),
            # An empty diff (every change left out) writes nothing; the baseline still moves.
            "written": str(self.dockerfile) if self.rendered.diff else None,
            "held": self.captured.held,
            "backup": str(self.backup) if self.backup else None,
            "context_folder": str(self.context_folder) if self.context_folder else None,
            "devcontainer": str(self.devcontainer) if self.devcontainer else None,
        }


def _relative(path: Path, root: Path) -> str:
    try:
        return str(path.resolve().relative_to(root.resolve()))
    except ValueError:
        return str(path)
