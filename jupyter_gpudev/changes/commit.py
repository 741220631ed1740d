"""``jupyter gpudev commit``: the Dockerfile diff, verified, snapshotted, pushed and written.

One commit runs these steps, each optional after the first, in an order that leaves nothing
half-done when a later step fails:

1. **capture**: the change set less the changes ``exclude`` names (refused with
   ``DiffChanged`` when ``expect`` is not its diff's digest), with the kept files copied into a
   staging folder (``ChangeCapture.prepare``), and the diff rendered;
2. **verify**: the patched Dockerfile is built (the build context with the staged files added,
   the workspace untouched) and the rebuilt image's packages are compared with the
   container's (less the excluded changes); any difference stops the commit (``VerifyFailed``)
   and each one is reported;
3. **snapshot**: a ``docker commit`` image of the container, tagged, labelled with its
   environment, base image digest and the diff's hash, with the driver files an NVIDIA runtime
   injected and gpudev's own files removed (by a layer of whiteouts gpudev writes,
   ``layers.py``: nothing of the snapshot runs), and an image configuration of its own (the
   environment image's command and variables plus the committed ENV lines: no lease, runtime
   or credential variable). The tag is the user's TAG, or in shared mode TAG under the user's
   own repository (``snapshots.py``), and it never replaces an image that is not this user's
   snapshot (``Conflict``); the image is recorded as theirs in gpudev's state;
4. **push**: the snapshot to the registry its tag names, with the user's credentials; a
   failure restores the tag as it was. In shared mode the registry's name is tagged for the
   push only (and put back as it was after it), and never over an image that is not this
   user's snapshot;
5. **write**: only now is the workspace written (``ChangeCapture.apply``), and with ``verify``
   the verified image becomes the environment's image (the next start does not rebuild).
"""

from __future__ import annotations

import contextlib
import hashlib
import io
import json
import re
import tarfile
import tempfile
import threading
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from datetime import datetime, timezone
from typing import IO, TYPE_CHECKING, Any

import docker
import docker.errors
import requests

from ..containers import commandlog
from ..containers.create import Confinement
from ..containers.features import install_features
from ..containers.namespace import UserImages, user_images
from ..engine import Progress, Reference, Registries, stream_build
from ..engine.context import pack_context
from ..errors import (
    ENGINE_FAILURES,
    FAILURES,
    BadRequest,
    Conflict,
    EngineError,
    GPUDevError,
    engine_errors,
)
from ..labels import (
    L_SNAPSHOT_CONTAINER,
    L_SNAPSHOT_DIFF,
    L_SNAPSHOT_DOCKERFILE,
    L_SNAPSHOT_ENV,
    L_VERIFY,
    LABEL,
    OCI_BASE_DIGEST,
    OCI_BASE_NAME,
    OCI_CREATED,
    OCI_DESCRIPTION,
)
from . import classify, compare, layer_diff, model
from .export import ArchiveSource, digest_differences, read_digests
from .helpers import inert
from .layers import RemovalLayer, folders_of, read_folders, removal_layer, targets, write_layer
from .snapshots import SnapshotRecords, SnapshotTags, snapshot_tags
from .source import Build, ChangeSource, CommitAsk, EarlyCommit, Snapshot

if TYPE_CHECKING:
    from docker.models.containers import Container

    from ..engine import Host
    from ..environments import Environment
    from .capture import ChangeCapture, Prepared, WriteResult

#: The Dockerfile a verify build reads (added to the build context, not written anywhere).
VERIFY_DOCKERFILE = ".gpudev-verify.Dockerfile"
#: Image configuration keys a snapshot takes from the environment's image.
_IMAGE_CONFIG_KEYS = (
    "Cmd",
    "Entrypoint",
    "WorkingDir",
    "User",
    "ExposedPorts",
    "Volumes",
    "StopSignal",
    "Healthcheck",
    "Shell",
    "OnBuild",
)
MAX_MESSAGE = 4000
_DIGEST_RE = re.compile(r"^[0-9a-f]{64}\Z")


class VerifyFailed(GPUDevError):
    """The image rebuilt from the patched Dockerfile has other packages than the container."""

    status = 409
    exit_code = 7
    code = "verify_failed"


@dataclass(frozen=True)
class CommitOptions:
    """What a commit does beyond rendering the diff."""

    write: bool = False
    verify: bool = False
    snapshot: str | None = None
    push: bool = False
    message: str | None = None
    #: Ids of changes (a diff's ``items``) this commit leaves out: they stay uncommitted.
    exclude: tuple[str, ...] = ()
    #: The ``digest`` of the diff the user reviewed (rendered without the message): the
    #: commit is refused (``DiffChanged``) when the diff is another one now.
    expect: str | None = None

    def check(self) -> None:
        """A clear error for options that cannot work together, a bad tag or change id."""
        model.check_change_ids(self.exclude)
        if self.expect is not None and not _DIGEST_RE.match(self.expect):
            raise BadRequest(
                f"expect {self.expect[:80]!r} is not a diff's digest (64 hexadecimal "
                'characters, the diff\'s "digest")'
            )
        if self.push and not self.snapshot:
            raise BadRequest("--push needs --snapshot TAG: the tag names the registry")
        if self.snapshot:
            reference = Reference.parse(self.snapshot)
            if self.push and reference.registry == "docker.io" and "/" not in reference.repository:
                raise BadRequest(
                    f"{self.snapshot!r} names no registry or account: push to "
                    "REGISTRY/NAME:TAG (e.g. 127.0.0.1:5000/team/env:v1)"
                )
        if self.message and len(self.message) > MAX_MESSAGE:
            raise BadRequest(f"The message is longer than {MAX_MESSAGE} characters")


@dataclass
class VerifyReport:
    """A verify build: the image, how long it took, each package difference."""

    image_id: str
    seconds: float
    differences: list[str] = field(default_factory=list)
    #: With Dev Container Features: the image of them installed on ``image_id`` (as a start
    #: installs them), which was compared, and the name ``image_id`` had for that build (the
    #: engine's BuildKit builds FROM a name, not an id); both removed after the commit.
    features_image_id: str = ""
    name: str = ""

    def to_json(self) -> dict[str, Any]:
        return {
            "image_id": self.image_id,
            "seconds": round(self.seconds, 2),
            "differences": list(self.differences),
            "ok": not self.differences,
        }


@dataclass
class CommitResult:
    prepared: Prepared
    written: WriteResult | None = None
    verify: VerifyReport | None = None
    snapshot: Snapshot | None = None

    def to_json(self) -> dict[str, Any]:
        base = (
            self.written.to_json()
            if self.written is not None
            else {**self.prepared.rendered.to_json(), "written": None}
        )
        return {
            **base,
            "verify": self.verify.to_json() if self.verify else None,
            "snapshot": self.snapshot.to_json() if self.snapshot else None,
            "changes": self.prepared.captured.changes.to_json(),
            **self.prepared.captured.selection_json(),
        }


class Committer:
    """Runs commits (see the module's docstring) for a ``ChangeCapture``."""

    def __init__(self, capture: ChangeCapture, registries: Registries) -> None:
        self.capture = capture
        self.registries = registries
        self.log = capture.containers.log
        #: Which images gpudev made as whose snapshot (in ``c.DevContainers.state_dir``).
        self.snapshots = SnapshotRecords(capture.containers.state_dir)

    def commit(
        self,
        name: str,
        options: CommitOptions,
        host: str | None = None,
        say: Progress | None = None,
    ) -> CommitResult:
        say = say or (lambda _event: None)
        options.check()
        tags = self._tags(options)  # a tag that is not the user's is refused before any work
        say({"stage": "capture", "message": f"reading the changes of {name}"})
        early, first = (
            self._commit_early(name, host, start=bool(options.snapshot))
            if options.snapshot or options.verify
            else (None, None)
        )
        if first is not None:  # refused before anything is read
            first.check_commit(name, options)
        # A snapshot built from the Dockerfile and the kept files (a pod's) has them staged.
        staged = options.write or options.verify or (first is not None and first.stages_snapshot)
        try:
            prepared = self.capture.prepare(
                name,
                host,
                options.message,
                stage=staged,
                scan=options.push,
                exclude=options.exclude,
                expect=options.expect,
            )
        except BaseException:
            if early is not None:
                early.discard()
            raise
        result = CommitResult(prepared)
        captured = prepared.captured
        keep_verified = False
        try:
            source = self.capture.source_of(captured)
            source.check_prepared(prepared, options)  # before anything is built or written
            if options.write:
                self.capture.check_writable(prepared)
            if options.verify:
                result.verify = self._verify(captured.engine()[0], prepared, say)
                if result.verify.differences:
                    raise VerifyFailed(
                        f"The image rebuilt from the patched Dockerfile differs from {name} in "
                        f"{len(result.verify.differences)} package(s), user(s) or file(s): "
                        + "; ".join(result.verify.differences[:10])
                        + ("; ..." if len(result.verify.differences) > 10 else "")
                        + ". Nothing was written.",
                        details={"differences": result.verify.differences},
                    )
            if tags is not None:
                result.snapshot = source.snapshot(
                    self, prepared, options=options, tags=tags, say=say, early=early
                )
            if options.write:
                say({"stage": "write", "message": f"writing {prepared.dockerfile}"})
                result.written = self.capture.apply(prepared)
                if result.verify is not None:
                    keep_verified = self._adopt(
                        captured.engine()[0], prepared, result.verify.image_id, say
                    )
        finally:
            prepared.discard()
            if early is not None:
                early.discard()
            if result.verify is not None:
                _remove_verified(captured.engine()[0], result.verify, keep=keep_verified)
        say({"stage": "done", "message": f"commit of {name} done"})
        return result

    # -- verify -------------------------------------------------------------------------------

    def _verify(
        self, client: docker.DockerClient, prepared: Prepared, say: Progress
    ) -> VerifyReport:
        env = prepared.captured.environment
        say({"stage": "verify", "message": "building the patched Dockerfile"})
        started = time.monotonic()
        build = env.build
        manager = self.capture.containers
        mine = user_images(manager.access, manager.state_dir, manager.environments.allowed_images)
        if mine is not None:
            mine.check_build_args(build.args if build else {}, f"The build of {env.name!r}")
            what = f"The patched Dockerfile of {env.name!r}"  # no other user's image is read
            mine.check_dockerfile(
                client, prepared.rendered.new_text, build.args if build else {}, what
            )
        labels = {L_VERIFY: prepared.captured.info.name}
        with engine_errors(f"Building the patched Dockerfile of {env.name!r}", self.log):
            before = _dangling(client, labels)
        image_id = checked = named = ""
        try:
            with (
                _verify_context(prepared) as context,
                engine_errors(f"Building the patched Dockerfile of {env.name!r}", self.log),
            ):
                image_id = _built(
                    client,
                    f"the patched Dockerfile of {env.name!r}",
                    say,
                    self.capture.containers.mount_policy.build_trust(),
                    timeout=manager.build_timeout or None,
                    fileobj=context,
                    custom_context=True,
                    dockerfile=VERIFY_DOCKERFILE,
                    buildargs=dict(build.args) if build else None,
                    target=build.target if build else None,
                    labels=labels,
                )
            checked = image_id
            if env.features:  # installed on the rebuilt image as a start installs them
                named = _verify_name(env.name, image_id)
                with engine_errors(f"Naming the rebuilt image of {env.name!r}", self.log):
                    repository, tag = named.rsplit(":", 1)
                    client.api.tag(image_id, repository, tag)
                checked = self._with_features(client, env, named, say, mine)
            say({"stage": "verify", "message": "comparing the packages of the rebuilt image"})
            rebuilt = self.capture.probe_image(client, checked).state
        except BaseException:  # what a build or probe the engine's restart cut left, too
            _remove_verified(client, VerifyReport(image_id, 0.0, [], checked, named))
            _remove_cut_build(client, labels, before, self.log)
            raise
        report = VerifyReport(image_id, 0.0, features_image_id=checked, name=named)
        # The container's packages less the changes left out: what the rebuild should have.
        expected, loose = prepared.captured.expected_packages()
        report.differences = compare.package_differences(expected, rebuilt, loose)
        if prepared.digests:
            say({"stage": "verify", "message": "comparing the kept files of the rebuilt image"})
            report.differences += self._file_differences(client, prepared, checked)
        report.seconds = time.monotonic() - started
        verdict = (
            "the rebuilt image has the container's packages"
            if not report.differences
            else f"{len(report.differences)} difference(s)"
        )
        say({"stage": "verify", "message": verdict})
        return report

    def _with_features(
        self,
        client: docker.DockerClient,
        env: Environment,
        image: str,
        say: Progress,
        mine: UserImages | None,
    ) -> str:
        """The id of the image of ``env``'s features installed on the rebuilt ``image``,
        by the build a start runs (``containers.features``: fetched, ordered, built the same
        way, ``c.Features`` read from the configuration; in shared mode, ``mine``, in the
        user's own repository)."""
        say({"stage": "verify", "message": "installing the features on the rebuilt image"})
        manager = self.capture.containers
        ref = install_features(
            client,
            env,
            image,
            registries=self.registries,
            say=say,
            log=self.log,
            trust=manager.mount_policy.build_trust(),
            mine=mine,
            owner=manager.workspace_owner,
            timeout=manager.build_timeout or None,
        )
        with engine_errors(f"Installing the features of {env.name!r}", self.log):
            return str(client.images.get(ref).id)

    def _file_differences(
        self, client: docker.DockerClient, prepared: Prepared, image_id: str
    ) -> list[str]:
        """The kept files whose content in the rebuilt image (read from a container of it that
        never starts) is not what was copied out of the dev container."""
        with inert(client, image_id, self.capture.containers.confinement()) as helper:
            paths = sorted(prepared.digests)
            limit = self.capture.file_size_limit
            rebuilt = read_digests(helper, paths, prepared.captured.diff, limit)
        return digest_differences(prepared.digests, rebuilt.digests)

    def _adopt(
        self, client: docker.DockerClient, prepared: Prepared, image_id: str, say: Progress
    ) -> bool:
        """Tag the verified image as the environment's image, when the written Dockerfile is
        what the environment builds now (then the next start does not build it again). Never
        in shared mode: there a user's environment image is one gpudev built for them from
        their context's files and recorded so (``containers/namespace.py``); the next start
        builds it."""
        manager = self.capture.containers
        if not manager.access.single_user:
            return False
        try:
            env = manager.environments.get(prepared.captured.environment.name, manager.root_dir)
            if env.build is None or env.build.target:
                return False
            repository, tag = env.image_ref().rsplit(":", 1)
            client.api.tag(image_id, repository, tag)
        except FAILURES as exc:
            self.log.info("The verified image is not reused for the next start: %s", exc)
            return False
        say({"stage": "write", "message": f"the verified image is {env.image_ref()}"})
        return True

    # -- snapshot and push --------------------------------------------------------------------

    def _commit_early(
        self, name: str, host: str | None, *, start: bool
    ) -> tuple[EarlyCommit | None, ChangeSource | None]:
        """The changes' source of the container (``ChangeCapture.source``) and, with
        ``start``, the snapshot's ``docker commit`` (and the layer leaving gpudev's own files
        out) started now where its kind makes one, in a worker thread, while the changes are
        read: the engine's diff alone takes most of a second. ``None`` for both (the commit is
        made later) when the container cannot be found now: the capture says why."""
        try:
            located = self.capture.containers.locate(name, host)
            source = self.capture.source(located.host)
            return (source.early_commit(located.native, self) if start else None), source
        except FAILURES:
            return None, None

    def early(
        self, found: Host, container: Container, folders: ArchiveSource | None = None
    ) -> _EarlyCommit:
        """The early ``docker commit`` of ``container`` on ``found`` (``_commit_early``);
        ``folders``: where the folders its layer leaving gpudev's own files out repeats are
        read (``layer_diff.LayerFolders``; ``None``: from a container of the committed image
        that never starts)."""
        client = found.client()
        confinement = self.capture.containers.confinement()
        env = container.attrs.get("Config", {}).get("Env") or []
        # The command-log wrappers are first on PATH when they were put into the container.
        with_log = any(e.startswith(f"PATH={commandlog.SHIMS}:") for e in env)
        own = list(commandlog.OWN_PATHS) if with_log else []
        return _EarlyCommit(client, container, own, confinement, folders)

    def built_snapshot(
        self, prepared: Prepared, options: CommitAsk, say: Progress, build: Build
    ) -> Snapshot:
        """A snapshot built from the patched Dockerfile, the build context and the staged
        files by ``build`` (a pod's: in its cluster), labelled as an engine's snapshot is, and
        pushed to the tag asked for."""
        captured = prepared.captured
        tag = str(options.snapshot)
        labels = {
            L_SNAPSHOT_ENV: captured.environment.name,
            L_SNAPSHOT_CONTAINER: captured.info.name,
            L_SNAPSHOT_DIFF: "sha256:" + _sha256(prepared.rendered.diff),
            L_SNAPSHOT_DOCKERFILE: "sha256:" + prepared.rendered.dockerfile_digest,
            OCI_BASE_NAME: captured.info.image,
            OCI_CREATED: datetime.now(timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ"),
        }
        if options.message:
            labels[OCI_DESCRIPTION] = options.message.strip()
        with _verify_context(prepared) as context:
            digest = build(
                prepared, tag, labels, say, context=context, dockerfile=VERIFY_DOCKERFILE
            )
        return Snapshot(tag, "", labels, [], pushed_digest=digest, pushed_to=tag)

    def engine_snapshot(
        self,
        prepared: Prepared,
        options: CommitAsk,
        tags: SnapshotTags,
        say: Progress,
        *,
        early: EarlyCommit | None,
    ) -> Snapshot:
        """The snapshot made on the container's engine (``_snapshot``)."""
        return self._snapshot(
            prepared.captured.engine()[0], prepared, options, tags, say, early=early
        )

    def _tags(self, options: CommitOptions) -> SnapshotTags | None:
        """Where the snapshot goes: TAG, or in shared mode TAG under the user's repository
        (``snapshots.snapshot_tags``); ``None`` without a snapshot."""
        if not options.snapshot:
            return None
        access = self.capture.containers.access
        user = None if access.single_user else access.local().name
        tags = snapshot_tags(options.snapshot, user, push=options.push)
        if tags.push is not None:  # in shared mode, only under the user's prefix
            self.registries.check_push(tags.push)
        return tags

    def _check_replaceable(self, image_id: str | None, name: str, pushed: bool) -> None:
        """A ``Conflict`` unless ``image_id`` (the image the engine has as ``name`` now, if
        any) is a snapshot gpudev made for this user: in single-user mode, one it made at all
        (its state folder is the user's). Known from gpudev's state, never from labels."""
        if image_id is None:
            return
        access = self.capture.containers.access
        owner = self.snapshots.owner(image_id)
        if owner is not None and (access.single_user or owner == access.local().name):
            return
        if pushed:
            why = (
                "a push would replace the host's copy of it (pulled, or another user's) while "
                "it runs: push to another reference, or ask an administrator to remove that copy"
            )
        elif access.single_user:
            why = f"choose another tag (or remove that image first: docker rmi {name})"
        else:
            why = "choose another tag"
        raise Conflict(
            f"The GPU host already has an image {name}, and it is not a snapshot you made with "
            f"gpudev, so it is not replaced: {why}",
            details={"reference": name},
        )

    def _snapshot(
        self,
        client: docker.DockerClient,
        prepared: Prepared,
        options: CommitAsk,
        tags: SnapshotTags,
        say: Progress,
        *,
        early: EarlyCommit | None = None,
    ) -> Snapshot:
        reference = Reference.parse(tags.local)
        captured = prepared.captured
        secrets = self._layer_credentials(prepared) if options.push else []
        if secrets:
            # A commit copies the container's whole layer: a key in it would be in the registry
            # (a removal in a later layer would still push its bytes).
            raise BadRequest(
                f"Not pushing a snapshot of {captured.info.name}: it has files that look like "
                f"credentials ({', '.join(secrets[:5])}{', ...' if len(secrets) > 5 else ''}); "
                "a snapshot holds every file of the container. Remove them from the container "
                "(or move them to a mount) and commit again.",
                details={"secrets": secrets},
            )
        container = captured.engine()[1]
        say({"stage": "snapshot", "message": f"committing {captured.info.name}"})
        drivers = sorted(
            str(d["Path"])
            for d in captured.diff
            if int(d["Kind"]) != 2 and classify.is_driver_path(str(d["Path"]))
        )
        own = [p for p in commandlog.OWN_PATHS if any(str(d["Path"]) == p for d in captured.diff)]
        previous = _image_id(client, reference.name)
        self._check_replaceable(previous, tags.local, pushed=False)
        temporary: list[str] = []
        try:
            with engine_errors(f"Committing {captured.info.name}", self.log):
                if early is not None:
                    committed, early_removal = early.result()
                else:
                    committed, early_removal = _commit(client, container), None
                    temporary.append(committed)
                reuse = early is not None and own == early.own and not drivers
                removal = early_removal if reuse else None
                if removal is None and (drivers or own):
                    say(
                        {
                            "stage": "snapshot",
                            "message": f"leaving out {len(drivers)} injected driver file(s)"
                            + (" and gpudev's command log" if own else ""),
                        }
                    )
                    removal = self._without(client, committed, [*drivers, *own])
                labels = self._labels(client, prepared, options.message)
                config = self._image_config(client, prepared, labels)
                image_id = _load_config(client, committed, config, reference, removal)
        finally:
            for image in reversed(temporary):
                _remove_image(client, image)
            if early is not None:
                early.discard_soon()  # while the push runs; the commit's end waits for it
        snapshot = Snapshot(tags.local, image_id, labels, drivers, local=tags.local)
        say({"stage": "snapshot", "message": f"tagged {tags.local} ({image_id[:19]})"})
        try:
            self.snapshots.record(image_id, self.capture.containers.access.local().name, tags.local)
            if tags.push is not None:
                snapshot.pushed_digest = self._push(client, image_id, tags, say)
                snapshot.pushed_to = tags.push
        except BaseException:
            _restore_tag(client, reference, previous)
            if previous is not None and previous != image_id:
                _remove_if_nameless(client, image_id)  # its name given back to the earlier one
            raise
        if previous is not None and previous != image_id:
            _remove_if_nameless(client, previous)  # the earlier snapshot it replaced by name
        return snapshot

    def _push(
        self, client: docker.DockerClient, image_id: str, tags: SnapshotTags, say: Progress
    ) -> str:
        """Push the snapshot ``image_id`` (tagged ``tags.local``) to ``tags.push``. When that is
        another name (shared mode), the name is tagged for the push only, one push at a time
        in this process, and put back as it was after it: never over an image that is not
        this user's snapshot, and what is pushed is the image just made."""
        assert tags.push is not None  # noqa: S101 - checked by the caller
        if tags.push == tags.local:
            return self.registries.push(client, tags.push, say)
        target = Reference.parse(tags.push)
        with _one_push_to(target.name):
            before = _image_id(client, target.name)
            if before != image_id:
                self._check_replaceable(before, tags.push, pushed=True)
            try:
                with engine_errors(f"Tagging the snapshot as {tags.push}", self.log):
                    client.api.tag(image_id, target.repository, target.tag)
                return self.registries.push(client, tags.push, say)
            finally:
                _restore_tag(client, target, before)

    def _layer_credentials(self, prepared: Prepared) -> list[str]:
        """Files of the container's layer that look like credentials: the kept ones (by name,
        and by content, checked when the commit was prepared) and, by content, the caches and
        temporary files a Dockerfile leaves out but a commit holds (a token that a login wrote
        into ~/.cache, a key in /tmp). Package files and mounts are not in question."""
        files = prepared.captured.changes.files
        found = set(files.secrets)
        if files.transient:
            found |= self.capture.scan_credentials(
                prepared.captured.source, files.transient, prepared.captured.diff
            )
        return sorted(found)

    def _without(
        self, client: docker.DockerClient, image: str, paths: list[str]
    ) -> RemovalLayer | None:
        """A layer removing ``paths`` (files or folders) from ``image``, written by gpudev
        (``layers``): nothing of the image runs (its PATH is the container's, whose root
        could put a program of its own first)."""
        return _removal(client, image, paths, self.capture.containers.confinement())

    def _labels(
        self, client: docker.DockerClient, prepared: Prepared, message: str | None
    ) -> dict[str, str]:
        captured = prepared.captured
        attrs = captured.engine()[1].attrs
        image_ref = str(attrs.get("Config", {}).get("Image") or "")
        base = client.images.get(str(attrs["Image"]))
        digests = [str(d) for d in base.attrs.get("RepoDigests") or []]
        labels = {
            L_SNAPSHOT_ENV: captured.environment.name,
            L_SNAPSHOT_CONTAINER: captured.info.name,
            L_SNAPSHOT_DIFF: "sha256:" + _sha256(prepared.rendered.diff),
            L_SNAPSHOT_DOCKERFILE: "sha256:" + prepared.rendered.dockerfile_digest,
            OCI_BASE_NAME: image_ref,
            OCI_BASE_DIGEST: digests[0].rsplit("@", 1)[-1] if digests else str(base.id),
            OCI_CREATED: datetime.now(timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ"),
        }
        if message:
            labels[OCI_DESCRIPTION] = message.strip()
        return labels

    @staticmethod
    def _image_config(
        client: docker.DockerClient, prepared: Prepared, labels: dict[str, str]
    ) -> dict[str, Any]:
        """The snapshot's configuration: the environment image's, plus the ENV lines the diff
        has (no GPU, runtime or CA-bundle variable, no credential) and the labels."""
        captured = prepared.captured
        base = client.images.get(str(captured.engine()[1].attrs["Image"])).attrs
        base_config = base.get("Config") or {}
        config = {k: base_config[k] for k in _IMAGE_CONFIG_KEYS if base_config.get(k)}
        env = model.env_dict(base_config.get("Env") or [])
        env.update(captured.changes.env)
        config["Env"] = [f"{k}={v}" for k, v in env.items()]
        config["Labels"] = {
            k: v for k, v in (base_config.get("Labels") or {}).items() if not k.startswith(LABEL)
        }
        config["Labels"].update(labels)
        return {
            "architecture": base.get("Architecture") or "amd64",
            "os": base.get("Os") or "linux",
            **({"variant": base["Variant"]} if base.get("Variant") else {}),
            "created": labels[OCI_CREATED],
            "config": config,
        }


class _EarlyCommit:
    """A ``docker commit`` of a container made in a worker thread, then (``own``) the layer
    removing gpudev's own files from it; ``result`` waits for both, ``discard`` removes the
    committed image (after the snapshot was made from it, or when the commit stopped
    before)."""

    def __init__(
        self,
        client: docker.DockerClient,
        container: Any,
        own: list[str],
        confinement: Confinement,
        folders: ArchiveSource | None = None,
    ) -> None:
        self.client = client
        self.own = own
        self.confinement = confinement
        self.folders = folders
        self.images: list[str] = []
        self._pool = ThreadPoolExecutor(1, "gpudev-snapshot")
        self._future = self._pool.submit(self._run, container)

    def _run(self, container: Any) -> tuple[str, RemovalLayer | None]:
        committed = _commit(self.client, container)
        self.images.append(committed)
        if not self.own:
            return committed, None
        if self.folders is not None:
            chosen = targets(self.own)
            try:
                folders = read_folders(self.folders, folders_of(chosen))
            except layer_diff.Unreadable:
                pass  # the container's layers cannot be read now: from the committed image
            else:
                return committed, write_layer(chosen, folders)
        return committed, _removal(self.client, committed, self.own, self.confinement)

    def result(self) -> tuple[str, RemovalLayer | None]:
        return self._future.result()

    def discard_soon(self) -> None:
        """Begin ``discard``'s removal in the worker thread (the engine takes up to most of a
        second to remove an image); ``discard`` waits for it."""
        with contextlib.suppress(RuntimeError):  # discarded already
            self._pool.submit(self._remove)

    def discard(self) -> None:
        with contextlib.suppress(Exception):
            self._future.result()
        self._pool.shutdown(wait=True)
        self._remove()

    def _remove(self) -> None:
        for image in reversed(self.images):
            _remove_image(self.client, image)
        self.images.clear()


def _removal(
    client: docker.DockerClient, image: str, paths: list[str], confinement: Confinement
) -> RemovalLayer | None:
    """The layer removing ``paths`` from ``image`` (``layers.removal_layer``), its folders read
    from a container of it that never starts."""
    with inert(client, image, confinement) as helper:
        return removal_layer(helper, paths)


def _sha256(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()


_PUSHES_LOCK = threading.Lock()
_PUSHES: dict[str, threading.Lock] = {}


@contextlib.contextmanager
def _one_push_to(name: str) -> Iterator[None]:
    """Held while a push tags ``name`` for itself: no other push of this process (the shared
    service's users) tags it meanwhile, so each pushes its own image."""
    with _PUSHES_LOCK:
        lock = _PUSHES.setdefault(name, threading.Lock())
    with lock:
        yield


def _image_id(client: docker.DockerClient, ref: str) -> str | None:
    with engine_errors(f"Looking up {ref}"):
        try:
            return str(client.images.get(ref).id)
        except docker.errors.ImageNotFound:
            return None


#: Seconds a failed build waits for its engine to answer again (one restarting) to remove
#: what the cut build left.
CUT_BUILD_PATIENCE = 20.0


def _commit(client: docker.DockerClient, container: Any) -> str:
    """``docker commit`` of ``container``; when its answer is lost (the engine restarting),
    the dangling commits of it are removed (an image made but never named is no one's)."""
    try:
        return str(container.commit().id)
    except requests.exceptions.ConnectionError:
        deadline = time.monotonic() + CUT_BUILD_PATIENCE
        while True:
            try:
                for image in client.images.list(filters={"dangling": True}):
                    if image.attrs.get("Container") == container.id:
                        _remove_image(client, str(image.id))
                break
            except ENGINE_FAILURES:
                if time.monotonic() >= deadline:
                    break
                time.sleep(0.5)
        raise


def _dangling(client: docker.DockerClient, labels: dict[str, str]) -> set[str]:
    """The ids of the dangling images with ``labels``."""
    wanted = [f"{key}={value}" for key, value in labels.items()]
    return {str(i.id) for i in client.images.list(filters={"dangling": True, "label": wanted})}


def _remove_cut_build(
    client: docker.DockerClient, labels: dict[str, str], before: set[str], log: Any
) -> None:
    """After a failed build (or a failed look at what it built): remove the dangling images
    with ``labels`` that were not there ``before`` (a build the engine's restart cut keeps its
    finished steps), waiting up to ``CUT_BUILD_PATIENCE`` seconds for an engine that does
    not answer."""
    deadline = time.monotonic() + CUT_BUILD_PATIENCE
    while True:
        try:
            left = _dangling(client, labels) - before
        except ENGINE_FAILURES as exc:
            if time.monotonic() >= deadline:
                log.warning("gpudev: the images of a cut build are left: %r", exc)
                return
            time.sleep(0.5)
            continue
        for image in left:
            _remove_image(client, image)
        return


def _built(client: docker.DockerClient, what: str, *args: Any, **kwargs: Any) -> str:
    """``stream_build``'s image id; an ``EngineError`` when the engine named none."""
    image_id = stream_build(client, what, *args, **kwargs)
    if not image_id:
        raise EngineError(f"The engine built {what} but named no image")
    return image_id


def _remove_image(client: docker.DockerClient, image: str) -> None:
    """Remove ``image`` (and its nameless parents) unless something uses it; waits up to
    ``CUT_BUILD_PATIENCE`` seconds for an engine that does not answer (one restarting)."""
    deadline = time.monotonic() + CUT_BUILD_PATIENCE
    while True:
        try:
            client.images.remove(image, force=False, noprune=False)
        except requests.exceptions.ConnectionError:
            if time.monotonic() < deadline:
                time.sleep(0.5)
                continue
        except ENGINE_FAILURES:
            pass
        return


def _verify_name(environment: str, image_id: str) -> str:
    """The name a verify build's image has while the features are installed on it."""
    repository = re.sub(r"[^a-z0-9_.-]+", "-", environment.lower())
    repository = re.sub(r"[_.-]{2,}", "-", repository).strip("_.-") or "unnamed"
    return f"gpudev-verify-{repository}:{image_id.removeprefix('sha256:')[:12]}"


def _remove_verified(
    client: docker.DockerClient, report: VerifyReport, *, keep: bool = False
) -> None:
    """Remove what a verify build made: the features image, the name given for it, and the
    rebuilt image itself unless ``keep`` (it became the environment's image)."""
    if report.features_image_id and report.features_image_id != report.image_id:
        _remove_image(client, report.features_image_id)
    if report.name:  # a name only: the image stays while another names it
        _remove_image(client, report.name)
    if report.image_id and not keep:
        _remove_image(client, report.image_id)


def _remove_if_nameless(client: docker.DockerClient, image: str) -> None:
    """Remove the snapshot ``image`` once no name points at it (another snapshot took its
    name): left, it would be a dangling image nobody can name. Kept while any name or
    container uses it."""
    with contextlib.suppress(*ENGINE_FAILURES):
        if not client.images.get(image).tags:
            client.images.remove(image, force=False, noprune=False)


def _restore_tag(client: docker.DockerClient, reference: Reference, previous: str | None) -> None:
    """Put a tag back as it was (``previous``; removed when it had none): after a failed
    snapshot push, after a push that tagged a registry's name for itself."""
    with contextlib.suppress(*ENGINE_FAILURES):
        if previous is None:
            client.images.remove(f"{reference.repository}:{reference.tag}", noprune=False)
        else:
            client.api.tag(previous, reference.repository, reference.tag, force=True)


def _load_config(
    client: docker.DockerClient,
    layers_from: str,
    config: dict[str, Any],
    reference: Reference,
    removal: RemovalLayer | None = None,
) -> str:
    """An image made of the layers of ``layers_from`` (and ``removal`` on them) with the
    configuration ``config``, tagged ``reference``: loaded from an archive holding the
    configuration, the manifest and the removal layer only (the engine has every other layer
    already, so no other layer data is read or written; it applies the removal's whiteouts as
    it stores the layer)."""
    source = client.images.get(layers_from).attrs
    diff_ids = list((source.get("RootFS") or {}).get("Layers") or [])
    if not diff_ids:
        raise EngineError(f"The image {layers_from} has no layers to snapshot")
    if removal is not None:
        diff_ids.append(removal.diff_id)
    config = {**config, "rootfs": {"type": "layers", "diff_ids": diff_ids}}
    raw = json.dumps(config, sort_keys=True).encode()
    digest = _sha256(raw.decode())
    layers = [f"{i:04d}/layer.tar" for i in range(len(diff_ids))]
    manifest = [
        {
            "Config": f"{digest}.json",
            "RepoTags": [f"{reference.repository}:{reference.tag}"],
            "Layers": layers,
        }
    ]
    files: list[tuple[str, bytes]] = [
        (f"{digest}.json", raw),
        ("manifest.json", json.dumps(manifest).encode()),
    ]
    if removal is not None:
        files.append((layers[-1], removal.data))
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w") as archive:
        for name, blob in files:
            _add_bytes(archive, name, blob)
    for event in client.api.load_image(buffer.getvalue()):  # type: ignore[no-untyped-call]
        if isinstance(event, dict) and ("error" in event or "errorDetail" in event):
            detail = (event.get("errorDetail") or {}).get("message") or event.get("error")
            raise EngineError(f"Writing the snapshot's configuration failed: {detail}")
    return f"sha256:{digest}"


@contextlib.contextmanager
def _verify_context(prepared: Prepared) -> Any:
    """The build context of a verify build, as a tar file: the environment's build context
    (its .dockerignore applied, no link followed: ``engine.context``), the patched Dockerfile
    and the staged files, where the written commit would put them."""
    context = prepared.context
    text = prepared.rendered.new_text
    handle: IO[bytes]
    if context.is_dir():
        handle = pack_context(context, VERIFY_DOCKERFILE, added=text)
    else:
        handle = tempfile.NamedTemporaryFile()  # noqa: SIM115 - closed below
        with tarfile.open(fileobj=handle, mode="w") as archive:
            _add_bytes(archive, VERIFY_DOCKERFILE, text.encode())
    try:
        if prepared.staging is not None:
            handle.seek(0)
            with tarfile.open(fileobj=handle, mode="a") as archive:
                folder = prepared.folder.relative_to(context)
                for entry in sorted(prepared.staging.rglob("*")):
                    arcname = str(folder / entry.relative_to(prepared.staging))
                    archive.add(str(entry), arcname=arcname, recursive=False)
        handle.seek(0)
        yield handle
    finally:
        handle.close()


def _add_bytes(archive: tarfile.TarFile, name: str, data: bytes) -> None:
    info = tarfile.TarInfo(name)
    info.size, info.mode = len(data), 0o644
    archive.addfile(info, io.BytesIO(data))
