"""Capture a dev container's change set and render its Dockerfile diff.

``ChangeCapture`` joins the parts: the container's baseline (``Baselines``, kept in the state
folder), the package probe and ``docker diff`` (``jupyter_gpudev.changes``) and the renderer
(``jupyter_gpudev.dockerfile``). Nothing runs in a dev container to read its packages, running
or stopped (kept because it has changes): they are its image's (probed once in a throwaway
container of the image) plus what its ``docker diff`` and the package files it names, read as
data, say (``jupyter_gpudev.packages``); looking at changes never needs a GPU lease.

A pod on a Kubernetes host has no engine to ask: its ``docker diff`` is two file listings
compared (the one taken when it started and one now), its files are read by ``tar`` run in it
as its user, and its packages at the start were probed in it then (``changes/podfiles.py``).
Its commit writes the Dockerfile diff; its snapshot is built and pushed by its cluster
(``changes/podbuild.py``)."""

from __future__ import annotations

import dataclasses
import json
import shutil
import tempfile
from collections.abc import Iterable, Mapping
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import docker.errors

from .. import safefs
from ..containers import commandlog
from ..containers.pods import annotation, mount_paths, pod_info, pod_uid
from ..engine.context import read_checked_text
from ..environments import MAX_FILE_BYTES, Environment, load_jsonc
from ..errors import BadRequest, Conflict, EngineError, GPUDevError, engine_errors
from ..k8s.listing import compare_listings, parse_listing
from ..labels import A_NAME
from ..untrusted import clean
from . import classify, compare, model, packages, probe
from .dockerfile import RenderedDiff, change_items, render
from .podfiles import PodArchives, PodReader, pod_key, probe_pod

if TYPE_CHECKING:
    from docker.models.containers import Container

    from ..containers import DevContainerInfo, DevContainers
    from ..engine.hosts import Host
from .baselines import DIGESTED_FILES, Baseline, Baselines, _check_id
from .export import FILE_SIZE_LIMIT, ArchiveSource, Exported, _Exporter, read_digests
from .helpers import PROBE_OUTPUT_LIMIT, PROBE_TIMEOUT, run_probe, shown


class DiffChanged(GPUDevError):
    """The diff a commit would write is not the one the user reviewed (its ``expect``
    digest): the container changed since, or other changes are left out."""

    status = 409
    exit_code = 6
    code = "diff_changed"


@dataclass
class PodSource:
    """A pod whose changes were captured: its host, uid, files (``PodArchives``) and
    variables."""

    host: str
    uid: str
    archives: PodArchives
    env: list[str]


@dataclass
class Captured:
    """A container's change set, with what it was captured from: the container, its packages
    now and its whole ``docker diff`` (what a baseline moved forward to this point holds), the
    baseline it was compared with, every change as an item and the ones left out."""

    info: DevContainerInfo
    environment: Environment
    #: What a commit carries: every change less the ``excluded`` ones.
    changes: model.ChangeSet
    #: The Docker container (``None`` for a pod: see ``pod``).
    container: Container | None
    packages: model.PackageState
    diff: list[dict[str, Any]]
    #: The client of the engine the container is on (``None`` for a pod).
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
    #: A pod's capture: where its files are read and what it was compared with.
    pod: PodSource | None = None

    @property
    def key(self) -> str:
        """What the container's baseline is kept under (a pod's: ``pod_key``)."""
        if self.pod is not None:
            return pod_key(self.pod.uid)
        return str(self.engine()[1].id)

    @property
    def source(self) -> Container | ArchiveSource:
        """Where the container's files are read from."""
        return self.pod.archives if self.pod is not None else self.engine()[1]

    def engine(self) -> tuple[docker.DockerClient, Container]:
        """The engine and the Docker container; a pod has none: what needs them (a
        snapshot, a push, a verify build) is refused with a clear message."""
        if self.client is None or self.container is None:
            raise BadRequest(
                f"{self.info.name} is a pod on a Kubernetes host: it has no Docker engine "
                "(its snapshot is built and pushed by the cluster)"
            )
        return self.client, self.container

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
        if self.pod is not None:
            env = model.env_dict(self.pod.env)
        else:
            attrs = self.container.attrs if self.container is not None else {}
            env = model.env_dict(attrs.get("Config", {}).get("Env") or [])
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

    def record_baseline(self, container: Container) -> None:
        """The packages of a container that just ran its lifecycle commands (read as data,
        nothing run in it): its own baseline."""
        if container.client is None:
            raise EngineError(f"No engine client for {container.name}")
        env = container.attrs.get("Config", {}).get("Env") or []
        diff = list(container.diff() or [])
        files = {str(d["Path"]): int(d["Kind"]) for d in diff}
        current = self._probe_current(container.client, container, diff)
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
        baseline.log_lines = len(self._commands(container))
        self.baselines.save_container(str(container.id), baseline)

    def _digests(
        self, container: Container, paths: list[str], diff: list[dict[str, Any]]
    ) -> dict[str, str]:
        """What ``paths`` (at most ``DIGESTED_FILES``) are now in ``container``."""
        if not paths:
            return {}
        chosen = sorted(paths)[:DIGESTED_FILES]
        return read_digests(container, chosen, diff, self.file_size_limit).digests

    def _commands(self, container: Container) -> list[str]:
        """The command lines of the container's command log (``[]`` without one)."""
        try:
            data = packages.ContainerReader(container)(commandlog.LOG, commandlog.LOG_LIMIT)
        except packages.Unreadable as exc:
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

    # -- pods -------------------------------------------------------------------------------

    def record_pod_baseline(self, host: Host, pod: dict[str, Any]) -> None:
        """The packages of a pod that just ran its lifecycle commands, probed in it (see
        ``podfiles.probe_pod``): what its changes are counted against, kept as the pod's
        "image" (its start) and as its own baseline (moved forward by commits)."""
        cluster = self.containers.pods(host).cluster
        name = str(pod["metadata"]["name"])
        probed = probe_pod(cluster, name, annotation(pod, A_NAME) or name)
        for problem in probed.problems[:20]:
            self.containers.log.info("gpudev: baseline of %s: %s", name, clean(problem))
        key = pod_key(pod_uid(pod))
        self.baselines.save_image(key, probed.state)
        self.baselines.save_container(key, Baseline(probed.state, _pod_env(pod), {}))

    def forget_pod(self, uid: str) -> None:
        """Drop a deleted pod's baselines."""
        key = pod_key(uid)
        self.baselines.forget(key)
        self.baselines.forget_image(key)

    def pod_diff(self, host: Host, pod: dict[str, Any]) -> tuple[list[dict[str, Any]], list[str]]:
        """A pod's changes since it started, in ``docker diff``'s shape (its listing then
        compared with one now), and what of the listings could not be read. A ``Conflict``
        when it was not listed when it started."""
        name = annotation(pod, A_NAME) or str(pod["metadata"]["name"])
        before = self.containers.pod_listings.load(host.name, pod_uid(pod))
        if before is None:
            raise Conflict(
                f"{name!r} runs in a pod on host {host.name!r} whose files were not listed when "
                "it started, so its changes cannot be told from its image's files"
            )
        now = self.containers.pods(host).listing(str(pod["metadata"]["name"]))
        first, second = parse_listing(before), parse_listing(now)
        diff = compare_listings(first.entries, second.entries, skip=mount_paths(pod))
        return diff, [*first.problems, *second.problems]

    def pod_archives(self, host: Host, pod: dict[str, Any]) -> PodArchives:
        name = annotation(pod, A_NAME) or str(pod["metadata"]["name"])
        cluster = self.containers.pods(host).cluster
        return PodArchives(cluster, str(pod["metadata"]["name"]), name)

    def _capture_pod(self, host: Host, pod: dict[str, Any], excluded: tuple[str, ...]) -> Captured:
        """``capture`` of a pod: its listings compared instead of ``docker diff``, its files
        read by ``tar`` in it, its packages derived from its start's probe as a container's
        are from its image's. A pod's variables are its spec's: they do not change."""
        manager = self.containers
        info = pod_info(pod, host.name)
        whole_diff, problems = self.pod_diff(host, pod)  # first: says when it was not listed
        key = pod_key(pod_uid(pod))
        start = self.baselines.image(key)
        base = self.baselines.container(key)
        if start is None or base is None:
            raise Conflict(
                f"The packages of {info.name!r} were not probed when its pod started, so its "
                "changes cannot be read: start a new pod of the environment to commit from"
            )
        environment = manager.environments.get(info.environment, manager.root_dir)
        archives = self.pod_archives(host, pod)
        diff = [d for d in whole_diff if base.files.get(str(d["Path"])) != int(d["Kind"])]
        diff += self.edited(archives, base, whole_diff)
        derived = packages.current_state(start, whole_diff, PodReader(archives))
        current = derived.result
        result = compare.package_changes(base.packages, current.state)
        result.notes.extend(derived.problems)
        result.notes.extend(clean(p) for p in problems[:20])
        new_envs = [p.env.prefix for p in result.python if p.new_env]
        result.files = classify.file_changes(diff, mount_paths(pod), current.owned_files, new_envs)
        known = set(base.secrets)
        result.files.secrets = sorted(
            {*result.files.secrets, *known.intersection(result.files.kept)}
        )
        result.files.kept = [p for p in result.files.kept if p not in known]
        result.files.owners = classify.home_owners(result.files.kept, current.state.accounts)
        env = _pod_env(pod)
        captured = Captured(
            info,
            environment,
            result,
            None,
            current.state,
            whole_diff,
            None,
            base=base,
            before_env=dict(base.env) if base.env is not None else env,
            items=change_items(result),
            excluded=excluded,
            pod=PodSource(host.name, pod_uid(pod), archives, [f"{k}={v}" for k, v in env.items()]),
        )
        captured.changes = result.without(set(captured.held))
        return captured

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
        return self.containers.locate(name, host).read(
            engine=lambda found, container: self._capture_container(
                name, found, container, excluded
            ),
            pod=lambda found, pod: self._capture_pod(found, pod, excluded),
        )

    def _capture_container(
        self, name: str, found_host: Host, container: Container, excluded: tuple[str, ...]
    ) -> Captured:
        """``capture`` of a Docker container: its ``docker diff`` against its baseline, its
        packages derived from its image's, its files read through the engine."""
        manager = self.containers
        client = found_host.client()
        info = manager.describe(found_host, container)
        environment = manager.environments.get(info.environment, manager.root_dir)
        with (
            engine_errors(f"Reading the changes of {name!r}", manager.log),
            ThreadPoolExecutor(1, "gpudev-capture") as pool,
        ):
            # The engine's diff takes most of a second (it walks the image's whole tree, on
            # Docker 20.10 overlay2): the command log is read meanwhile.
            reading = pool.submit(self._commands, container)
            base = self.baseline(client, container)
            whole_diff = list(container.diff() or [])
            # A path the baseline already had, with the same kind, is not a new change.
            diff = [d for d in whole_diff if base.files.get(str(d["Path"])) != int(d["Kind"])]
            diff += self.edited(container, base, whole_diff)
            derived = self._probe_current(client, container, whole_diff)
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

    def _probe_current(
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
        staging = Path(tempfile.mkdtemp(prefix="gpudev-stage-")) if files.kept and stage else None
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

    def _workspace_folder(self, folder: Path) -> safefs.Folder:
        """``folder`` opened for writing (made when missing) from the Jupyter root directory
        down, no link followed on the way (``safefs.LinkRefused`` names one); a folder outside
        the root (an administrator's environment) is opened as configured."""
        root = self.containers.root_dir
        inside = safefs.relative_inside(folder, root)
        if inside is None:
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


def _pod_env(pod: dict[str, Any]) -> dict[str, str]:
    """The variables the dev container of a pod's spec sets (values only: a reference to a
    Secret or a field is not a value gpudev knows)."""
    env: dict[str, str] = {}
    containers = (pod.get("spec") or {}).get("containers") or []
    for container in containers[:1]:
        for item in (container or {}).get("env") or []:
            if isinstance(item, dict) and isinstance(item.get("name"), str):
                value = item.get("value")
                if isinstance(value, str):
                    env[item["name"]] = value
    return env


def _relative(path: Path, root: Path) -> str:
    try:
        return str(path.resolve().relative_to(root.resolve()))
    except ValueError:
        return str(path)
