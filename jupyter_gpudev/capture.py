"""Capture a dev container's change set and render its Dockerfile diff.

``ChangeCapture`` joins the parts: the container's baseline (``Baselines``, kept in the state
folder), the package probe and ``docker diff`` (``jupyter_gpudev.changes``) and the renderer
(``jupyter_gpudev.dockerfile``). Nothing runs in a dev container to read its packages, running
or stopped (kept because it has changes): they are its image's (probed once in a throwaway
container of the image) plus what its ``docker diff`` and the package files it names, read as
data, say (``jupyter_gpudev.packages``); looking at changes never needs a GPU lease.
"""

from __future__ import annotations

import contextlib
import io
import json
import os
import shutil
import tarfile
import tempfile
import threading
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, TYPE_CHECKING, Any

import docker.errors
import requests
from docker.utils import socket as docker_socket

from . import changes as ch
from . import packages
from .dockerfile import RenderedDiff, change_items, is_source_path, render
from .environments import Environment, read_jsonc_file
from .errors import EngineError, GPUDevError

if TYPE_CHECKING:
    from docker.models.containers import Container

    from .containers import DevContainerInfo, DevContainers

_SAFE_ID = "0123456789abcdefsha256:"
#: Where the list of files to export is put inside the container (the kernels' runtime dir).
EXPORT_DIR = "/tmp/.gpudev"  # noqa: S108 - inside the container


class DiffChanged(GPUDevError):
    """The diff a commit would write is not the one the user reviewed (its ``expect``
    digest): the container changed since, or other changes are left out."""

    status = 409
    exit_code = 6
    code = "diff_changed"


def _check_id(value: str) -> str:
    if not value or any(c not in _SAFE_ID for c in value):
        raise EngineError(f"Unexpected image or container id {value!r}")
    return value.replace("sha256:", "")


class Baselines:
    """Baselines on disk: per image (what a container of it starts from) and per container
    (one probed after its lifecycle commands, or moved forward by ``commit --write``)."""

    def __init__(self, state_dir: str | os.PathLike[str]) -> None:
        self.folder = Path(state_dir) / "baselines"
        self._lock = threading.Lock()

    def _read(self, path: Path) -> dict[str, Any] | None:
        try:
            data = json.loads(path.read_text())
        except (OSError, ValueError):
            return None
        return data if isinstance(data, dict) else None

    def _write(self, path: Path, data: dict[str, Any]) -> None:
        with self._lock:
            self.folder.mkdir(mode=0o700, parents=True, exist_ok=True)
            _atomic_write(path, json.dumps(data, sort_keys=True))

    def image(self, image_id: str) -> ch.PackageState | None:
        data = self._read(self.folder / f"image-{_check_id(image_id)}.json")
        return ch.PackageState.from_json(data) if data else None

    def save_image(self, image_id: str, state: ch.PackageState) -> None:
        self._write(self.folder / f"image-{_check_id(image_id)}.json", state.to_json())

    def container(self, container_id: str) -> Baseline | None:
        data = self._read(self.folder / f"container-{_check_id(container_id)}.json")
        if not data:
            return None
        env = data.get("env")
        files = data.get("files")
        return Baseline(
            ch.PackageState.from_json(data["packages"]),
            dict(env) if isinstance(env, dict) else None,
            {str(k): int(v) for k, v in files.items()} if isinstance(files, dict) else {},
            [str(p) for p in data.get("secrets") or []],
            [str(i) for i in data.get("held") or []],
        )

    def save_container(self, container_id: str, baseline: Baseline) -> None:
        self._write(
            self.folder / f"container-{_check_id(container_id)}.json",
            {
                "packages": baseline.packages.to_json(),
                "env": baseline.env,
                "files": baseline.files,
                "secrets": baseline.secrets,
                "held": baseline.held,
            },
        )

    def forget(self, container_id: str) -> None:
        path = self.folder / f"container-{_check_id(container_id)}.json"
        path.unlink(missing_ok=True)


@dataclass
class Baseline:
    """What a container started from: its packages, its environment variables (``None``: its
    image's) and the file changes it already had (``docker diff`` path -> kind)."""

    packages: ch.PackageState
    env: dict[str, str] | None = None
    files: dict[str, int] = field(default_factory=dict)
    #: Changed files a commit left out because their content holds a credential: still
    #: changes (kept from a removal without force), reported, never copied.
    secrets: list[str] = field(default_factory=list)
    #: The ids of the changes the last written commit left out (``exclude``): still changes,
    #: kept from a removal without force.
    held: list[str] = field(default_factory=list)


@dataclass
class Captured:
    """A container's change set, with what it was captured from: the container, its packages
    now and its whole ``docker diff`` (what a baseline moved forward to this point holds), the
    baseline it was compared with, every change as an item and the ones left out."""

    info: DevContainerInfo
    environment: Environment
    #: What a commit carries: every change less the ``excluded`` ones.
    changes: ch.ChangeSet
    container: Container
    packages: ch.PackageState
    diff: list[dict[str, Any]]
    #: The client of the engine the container is on.
    client: docker.DockerClient
    base: Baseline
    #: The environment variables the container's were compared with (the baseline's).
    before_env: dict[str, str] = field(default_factory=dict)
    #: Every change (excluded ones too), in the order the Dockerfile renders them.
    items: list[ch.ChangeItem] = field(default_factory=list)
    #: The change ids asked to be left out (some may match no current change).
    excluded: tuple[str, ...] = ()

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

    def expected_packages(self) -> tuple[ch.PackageState, dict[str, str | None]]:
        """What an image rebuilt from this commit has (``changes.expected_state``)."""
        return ch.expected_state(self.base.packages, self.packages, set(self.held))

    def as_baseline(self) -> Baseline:
        """The container as it is now, less what a commit did not write (credentials, and the
        changes left out, put back as the old baseline had them): those stay changes, reported
        by the next diff and kept from a removal without force."""
        held = self.held
        left_out = set(held)
        env = ch.env_dict(self.container.attrs.get("Config", {}).get("Env") or [])
        secrets = set(self.changes.files.secrets)
        files = {str(d["Path"]): int(d["Kind"]) for d in self.diff if d["Path"] not in secrets}
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
        packages = ch.revert_excluded(self.base.packages, self.packages, left_out)
        return Baseline(packages, env, files, sorted(secrets), held)


class ChangeCapture:
    """Change sets and Dockerfile diffs of the dev containers of a ``DevContainers``."""

    def __init__(self, containers: DevContainers) -> None:
        self.containers = containers
        self.baselines = containers.baselines

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
        baseline = Baseline(current.result.state, ch.env_dict(env), files)
        self.baselines.save_container(str(container.id), baseline)

    def _image_baseline(self, client: docker.DockerClient, image_id: str) -> ch.PackageState:
        cached = self.baselines.image(image_id)
        if cached is not None:
            return cached
        state = self.probe_image(client, image_id).state
        self.baselines.save_image(image_id, state)
        return state

    @staticmethod
    def probe_image(
        client: docker.DockerClient,
        image: str,
        owned_dpkg: list[str] | None = None,
        owned_dists: list[str] | None = None,
    ) -> ch.ProbeResult:
        """The probe in a throwaway container of ``image`` (no network, no GPU, no mounts, as
        root, removed after): the image is the trusted one, the sandbox shares nothing; its
        programs still run by absolute path, with a fixed PATH and no LD_*/PYTHON* variables
        (``changes.probe_environment``). Never used on a dev container's content."""
        try:
            image_env = client.images.get(image).attrs.get("Config", {}).get("Env") or []
            output = client.containers.run(
                image,
                entrypoint=["/bin/sh", "-c", ch.PROBE_SCRIPT],
                command=[],
                environment=ch.probe_environment(owned_dpkg or [], owned_dists or [], image_env),
                user="0",
                network_disabled=True,
                remove=True,
                labels={"org.jupyter.gpudev.probe": "1"},
            )
        except (docker.errors.DockerException, requests.exceptions.RequestException) as exc:
            raise EngineError(f"Probing the packages of {image}: {exc}") from exc
        text = output.decode("utf-8", "replace") if isinstance(output, bytes) else str(output)
        return ch.parse_probe(text)

    def baseline(self, client: docker.DockerClient, container: Container) -> Baseline:
        own = self.baselines.container(str(container.id))
        if own is not None:
            return own
        image = _check_id(str(container.attrs.get("Image", "")))
        return Baseline(self._image_baseline(client, image))

    # -- capture ------------------------------------------------------------------------------

    def capture(self, name: str, host: str | None = None, exclude: Iterable[str] = ()) -> Captured:
        """The change set of a dev container, running or stopped, less the changes whose ids
        are in ``exclude`` (``Captured.items`` lists them all)."""
        excluded = ch.check_change_ids(exclude)
        manager = self.containers
        found_host, container = manager._find(name, host)
        client = found_host.client()
        info = manager._info(found_host, container)
        environment = manager.environments.get(info.environment, manager.root_dir)
        try:
            base = self.baseline(client, container)
            whole_diff = list(container.diff() or [])
            # A path the baseline already had, with the same kind, is not a new change.
            diff = [d for d in whole_diff if base.files.get(str(d["Path"])) != int(d["Kind"])]
            derived = self._probe_current(client, container, whole_diff)
        except (docker.errors.DockerException, requests.exceptions.RequestException) as exc:
            raise EngineError(f"Reading the changes of {name!r}: {exc}") from exc
        current = derived.result
        result = ch.package_changes(base.packages, current.state)
        result.notes.extend(derived.problems)
        mounts = ch.mount_targets(container.attrs)
        new_envs = [p.env.prefix for p in result.python if p.new_env]
        result.files = ch.file_changes(
            diff, mounts, current.owned_files, new_envs, ch.engine_made(container.attrs)
        )
        known = set(base.secrets)  # found by content at an earlier commit
        result.files.secrets = sorted(
            {*result.files.secrets, *known.intersection(result.files.kept)}
        )
        result.files.kept = [p for p in result.files.kept if p not in known]
        image_env = client.images.get(str(container.attrs["Image"])).attrs["Config"].get("Env")
        ch.env_changes(
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
            before_env=dict(base.env) if base.env is not None else ch.env_dict(image_env or []),
            items=change_items(result),
            excluded=excluded,
        )
        captured.changes = result.without(set(captured.held))
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
                return env.build.dockerfile, env.build.dockerfile.read_text(), env.build.context
            except OSError as exc:
                raise GPUDevError(f"Reading {env.build.dockerfile}: {exc.strerror}") from exc
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
                secrets = self._export(captured.container, files.kept, staging)
            elif scan and files.kept:
                secrets = self.scan_credentials(captured.container, files.kept)
            else:
                secrets = set()
        except BaseException:
            if staging is not None:
                shutil.rmtree(staging, ignore_errors=True)
            raise
        files.kept = [p for p in files.kept if p not in secrets]
        files.secrets = sorted({*files.secrets, *secrets})
        rendered = self._render(captured, message)
        return Prepared(captured, rendered, dockerfile, old_text, context, staging)

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
                    shutil.copytree(prepared.staging, folder, symlinks=True, dirs_exist_ok=True)
                if prepared.old_text is not None:
                    backup = dockerfile.with_name(dockerfile.name + ".prev")
                    backup.write_text(prepared.old_text)
                dockerfile.parent.mkdir(parents=True, exist_ok=True)
                _atomic_write(dockerfile, rendered.new_text)
                if rendered.created:
                    devcontainer = self._use_dockerfile(captured.environment, dockerfile)
        except OSError as exc:
            raise GPUDevError(
                f"Writing the commit of {captured.info.name} failed: {exc.strerror} "
                f"({exc.filename})"
            ) from exc
        finally:
            prepared.discard()
        # What was just captured is the new starting point: a diff right after is empty.
        self.baselines.save_container(str(captured.container.id), captured.as_baseline())
        return WriteResult(
            captured, rendered, dockerfile, backup, folder if rendered.files else None, devcontainer
        )

    def write(self, name: str, host: str | None = None, message: str | None = None) -> WriteResult:
        """``prepare`` then ``apply``: the Dockerfile diff written into the workspace."""
        return self.apply(self.prepare(name, host, message))

    def scan_credentials(self, container: Container, paths: list[str]) -> set[str]:
        """The kept files whose content looks like a credential, found by ``grep`` inside a
        running container (a constant script; the expression and the path list are data);
        otherwise by copying them out into a throwaway folder."""
        container.reload()
        if container.status == "running":
            found = self._grep_secrets(container, paths)
            if found is not None:
                return found
        with tempfile.TemporaryDirectory(prefix="gpudev-scan-") as folder:
            return self._export(container, paths, Path(folder))

    def _grep_secrets(self, container: Container, paths: list[str]) -> set[str] | None:
        try:
            if not _put_list(container, "gpudev-scan.list", paths):
                return None
            code, output = container.exec_run(
                [
                    "/bin/sh",
                    "-c",
                    ch.CREDENTIAL_SCAN_SCRIPT,
                    "sh",
                    f"{EXPORT_DIR}/gpudev-scan.list",
                ],
                environment={"GPUDEV_SECRET_ERE": ch.CREDENTIAL_CONTENT_ERE},
                user="0",
                demux=True,
            )
            container.exec_run(["rm", "-f", f"{EXPORT_DIR}/gpudev-scan.list"], user="0")
        except (docker.errors.DockerException, requests.exceptions.RequestException):
            return None
        # grep: 0 some file matched, 1 none; xargs says 123 when a grep said 1 or 2.
        if code not in (0, 1, 123):
            return None
        stdout = output[0] if isinstance(output, tuple) else output
        wanted = set(paths)
        text = stdout.decode("utf-8", "replace") if isinstance(stdout, bytes) else ""
        return {line for line in text.splitlines() if line in wanted}

    def _export(self, container: Container, paths: list[str], folder: Path) -> set[str]:
        """Copy kept files out of the container into ``folder/sources`` and ``folder/files``
        (added to what an earlier commit of the container put there: its COPY line reads the
        same folder):
        regular files and symbolic links, written at paths computed here (never at a name read
        from an archive). Returns the paths whose content looks like a credential (not
        copied). A running container sends them all in one archive; otherwise one each."""
        secrets: set[str] = set()
        if not paths:
            return secrets
        wanted = set(paths)
        container.reload()
        batch = self._batch_archive(container, paths) if container.status == "running" else None
        if batch is not None:
            with batch, tarfile.open(fileobj=batch) as archive:
                for member in archive:
                    path = "/" + member.name.removeprefix("./").lstrip("/")
                    self._extract(
                        archive, member, path, wanted=wanted, folder=folder, secrets=secrets
                    )
            return secrets
        for path in paths:
            data = self._archive(container, path)
            if data is None:
                continue
            with tarfile.open(fileobj=io.BytesIO(data)) as archive:
                first = archive.next()  # a single-path archive: its first member is the path
                if first is not None:
                    self._extract(
                        archive, first, path, wanted=wanted, folder=folder, secrets=secrets
                    )
        return secrets

    def _extract(
        self,
        archive: tarfile.TarFile,
        member: tarfile.TarInfo,
        path: str,
        *,
        wanted: set[str],
        folder: Path,
        secrets: set[str],
    ) -> None:
        if path not in wanted or not (member.isfile() or member.issym()):
            return
        target = folder / ("sources" if is_source_path(path) else "files") / path.lstrip("/")
        target.parent.mkdir(parents=True, exist_ok=True)
        if member.issym():
            target.unlink(missing_ok=True)
            target.symlink_to(member.linkname)
            return
        extracted = archive.extractfile(member)
        content = extracted.read() if extracted else b""
        if ch.looks_secret_content(content):
            secrets.add(path)
            return
        target.write_bytes(content)
        target.chmod(member.mode & 0o777)

    @staticmethod
    def _archive(container: Container, path: str) -> bytes | None:
        try:
            stream, _ = container.get_archive(path)
            return b"".join(stream)
        except docker.errors.NotFound:
            return None  # gone since the capture
        except (docker.errors.DockerException, requests.exceptions.RequestException) as exc:
            raise EngineError(f"Copying {path} out of {container.name}: {exc}") from exc

    @staticmethod
    def _batch_archive(container: Container, paths: list[str]) -> IO[bytes] | None:
        """All paths in one tar stream (``tar -T`` reading a NUL-separated list put into the
        container); ``None`` when the image has no usable tar (then one archive per path)."""
        try:
            if not _put_list(container, "gpudev-export.list", paths):
                return None
            if container.client is None:
                return None
            api = container.client.api
            exec_id = api.exec_create(
                str(container.id),
                [
                    "tar",
                    "-c",
                    "-f",
                    "-",
                    "--null",
                    "--no-recursion",
                    "--ignore-failed-read",
                    "-T",
                    f"{EXPORT_DIR}/gpudev-export.list",
                ],
                user="0",
            )["Id"]
            # Streamed into a spooled file: docker-py's non-streamed demux joins the frames
            # one by one (quadratic: minutes for a few tens of MB).
            out = tempfile.SpooledTemporaryFile(max_size=32 << 20)  # noqa: SIM115 - returned
            sock = api.exec_start(exec_id, socket=True)
            try:
                frames = docker_socket.frames_iter(sock, tty=False)  # type: ignore[no-untyped-call]
                for stream, data in frames:
                    if stream == docker_socket.STDOUT:
                        out.write(data)
            finally:
                _close_raw(sock)
            code = api.exec_inspect(exec_id).get("ExitCode")
            container.exec_run(["rm", "-f", f"{EXPORT_DIR}/gpudev-export.list"], user="0")
        except (docker.errors.DockerException, requests.exceptions.RequestException):
            return None
        if code != 0 or out.tell() == 0:
            out.close()
            return None
        out.seek(0)
        return out

    def _use_dockerfile(self, env: Environment, dockerfile: Path) -> Path:
        """Point the environment's devcontainer.json at the new Dockerfile instead of its
        image (created for the built-in or admin environments); the old one is kept."""
        path = dockerfile.parent / "devcontainer.json"
        data: dict[str, Any] = {}
        if path.exists():
            loaded = read_jsonc_file(path, str(path))
            data = dict(loaded) if isinstance(loaded, dict) else {}
            path.with_name("devcontainer.json.prev").write_text(path.read_text())
        data.pop("image", None)
        data["build"] = {"dockerfile": dockerfile.name}
        if not path.exists() and env.container_env:
            data["containerEnv"] = dict(env.container_env)
        _atomic_write(path, json.dumps(data, indent=2) + "\n")
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


def _put_list(container: Container, name: str, paths: list[str]) -> bool:
    """Put a NUL-separated list of paths into the container as ``EXPORT_DIR/name`` (data for
    a constant command to read: no path reaches a shell line)."""
    listing = "\0".join(paths).encode() + b"\0"
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w") as tar:
        info = tarfile.TarInfo(name)
        info.size, info.mode = len(listing), 0o600
        tar.addfile(info, io.BytesIO(listing))
    container.exec_run(["mkdir", "-p", EXPORT_DIR], user="0")
    return bool(container.put_archive(EXPORT_DIR, buffer.getvalue()))


def _close_raw(sock: Any) -> None:
    """Close a socket docker-py handed out (``socket=True``): the file object, the HTTP
    response it keeps alive and the connection's socket (closing the file object alone
    leaves the connection open)."""
    for part in (sock, getattr(sock, "_response", None), getattr(sock, "_sock", None)):
        if part is not None:
            with contextlib.suppress(OSError, ValueError):  # already closed by another part
                part.close()


def _atomic_write(path: Path, text: str) -> None:
    tmp = path.with_name(f".{path.name}.gpudev-tmp")
    tmp.write_text(text)
    os.replace(tmp, path)


def _relative(path: Path, root: Path) -> str:
    try:
        return str(path.resolve().relative_to(root.resolve()))
    except ValueError:
        return str(path)
