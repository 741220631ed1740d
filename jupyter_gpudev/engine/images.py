"""Images: a kernel-capable base image bootstrapped from the host's package mirror.

Air-gapped GPU clusters (and the machines this project is tested on) reach a Debian package
mirror but no container registry. ``ImageBootstrapper`` then builds a real Debian image with
``debootstrap``, imports it into the engine, and builds a Python + ipykernel image on top:
``jupyter gpudev image bootstrap``.
"""

from __future__ import annotations

import io
import os
import re
import shlex
import shutil
import subprocess
import tempfile
import threading
import time
from collections import deque
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import docker
import docker.errors
from traitlets import Bool, List, Unicode
from traitlets.config import LoggingConfigurable

from ..errors import ENGINE_FAILURES, BadRequest, ImageError
from ..labels import L_BOOTSTRAP, L_BOOTSTRAP_KERNEL
from .buildkit import (
    BuildTrust,
    Progress,
    buildkit_build,
    trusted_folder_context,
    trusted_tar_context,
)
from .context import folder_context
from .deadline import BuildDeadline, response_of

APT_SOURCE_FILES = (
    "/etc/apt/sources.list.d/debian.sources",
    "/etc/apt/sources.list",
)
_SUITE_RE = re.compile(r"^[a-z][a-z0-9-]{1,30}\Z")
_PACKAGE_RE = re.compile(r"^[a-z0-9][a-z0-9+.-]+\Z")
#: A pip requirement: a name, extras, version specifiers (quoted for the shell when written).
_REQUIREMENT_RE = re.compile(
    r"^[A-Za-z0-9][A-Za-z0-9._-]{0,100}(\[[A-Za-z0-9._,-]{1,100}\])?"
    r"((==|>=|<=|~=|!=|<|>)[A-Za-z0-9.*+!-]{1,50}(,(==|>=|<=|~=|!=|<|>)[A-Za-z0-9.*+!-]{1,50})*)?\Z"
)
_TAG_RE = re.compile(r"^[a-z0-9][a-z0-9._/:-]{0,200}\Z")
#: The classic builder's line naming the image a step made (or found in its cache).
_STEP_IMAGE_RE = re.compile(r"^ ---> ([0-9a-f]{12})\Z")
#: The classic builder's error when a step's command ended with a non-zero code: its own
#: failure, unless a signal killed it (128 + the signal's number: the engine stopping kills a
#: running step, as does the kernel's OOM killer).
_COMMAND_FAILED_RE = re.compile(r"returned a non-zero code: (\d+)")
#: The last of Linux's standard signals (a code above 128 + it is a command's own).
_LAST_SIGNAL = 31
#: Seconds the removal of what a cut build made keeps trying while its engine does not
#: answer (one restarting), in the background.
CUT_STEPS_PATIENCE = 20.0
#: Seconds an image a cut build removes may seem older than the build (the engine's clock).
CUT_STEPS_SLACK = 60.0
#: The most step images a build's log is read for (the last ones count).
MAX_STEP_IDS = 256


def stream_build(
    client: docker.DockerClient,
    what: str,
    say: Progress,
    trust: BuildTrust | None = None,
    *,
    timeout: float | None = None,
    **build_args: Any,
) -> str | None:
    """Run ``docker build`` with its log streamed to ``say``; returns the image id. Past
    ``timeout`` seconds (``None``: no limit) the build is stopped (``deadline``), an
    ``ImageError`` saying so.

    ``build_args`` are docker-py's: a context folder (``path``, ``dockerfile`` in it or an
    absolute path) or a file (``fileobj``: a context tar with ``custom_context``, or the
    Dockerfile alone), and ``tag``, ``buildargs``, ``target``, ``labels``. A context folder is
    packed here (``context.folder_context``: no link followed out of it), never by docker-py.
    With ``trust`` (``c.MountPolicy.mount_ca_bundle``) its ``RUN`` steps trust that CA bundle,
    through BuildKit (``buildkit``). An error the engine reports inside the (successful) HTTP
    stream is an ``ImageError`` naming ``what`` with the build's last lines; transport errors
    propagate to the caller.
    """
    if trust is not None:
        return _trusted_build(client, what, say, trust, build_args, timeout=timeout)
    if "path" in build_args:
        path = build_args.pop("path")
        archive, name = folder_context(path, build_args.pop("dockerfile", None))
        with archive:
            return stream_build(
                client,
                what,
                say,
                timeout=timeout,
                fileobj=archive,
                custom_context=True,
                dockerfile=name,
                **build_args,
            )
    made = _StepImages()
    try:
        return _classic_build(client, what, say, made, build_args, timeout=timeout)
    except BaseException:
        remove_cut_steps(client, list(made.ids), made.started)
        raise


def _classic_build(
    client: docker.DockerClient,
    what: str,
    say: Progress,
    made: _StepImages,
    build_args: dict[str, Any],
    *,
    timeout: float | None,
) -> str | None:
    tail: list[str] = []  # the build's last lines, for its error
    stream = client.api.build(rm=True, forcerm=True, decode=True, **build_args)
    with BuildDeadline(timeout, client.api, response_of(stream)) as deadline:
        try:
            image_id = _read_classic(stream, what, say, made, tail)
        except Exception as exc:
            if deadline.cut:
                raise ImageError(deadline.message(what), details={"log": tail}) from exc
            raise
    if deadline.cut:
        raise ImageError(deadline.message(what), details={"log": tail})
    return image_id


def _read_classic(
    stream: Iterator[dict[str, Any]], what: str, say: Progress, made: _StepImages, tail: list[str]
) -> str | None:
    """Read a classic build's stream to its end (its last lines kept in ``tail``); the image
    id it named."""
    image_id: str | None = None
    for event in stream:
        aux = event.get("aux")
        if isinstance(aux, dict) and aux.get("ID"):
            image_id = str(aux["ID"])
        if "error" in event:
            detail = str(event.get("errorDetail", {}).get("message") or event["error"]).strip()
            failed = _COMMAND_FAILED_RE.search(detail)
            if failed and 0 < int(failed.group(1)) - 128 <= _LAST_SIGNAL:
                detail += (
                    f" (killed by signal {int(failed.group(1)) - 128}: the engine stopped, "
                    "or the step ran out of memory)"
                )
            elif failed:
                made.ids.clear()  # the finished steps stay the engine's cache for a retry
            raise ImageError(f"Building {what} failed: {detail}", details={"log": tail})
        text = str(event.get("stream") or event.get("status") or "")
        for line in filter(None, (part.rstrip() for part in text.splitlines())):
            tail[:] = [*tail[-29:], line]
            made.read(line)
            say({"stage": "build", "message": line})
    return image_id


class _StepImages:
    """The images a classic build made as it went, from its log: each step's ``---> ID``
    line, except a ``FROM`` step's (an image it did not make) and a step found in the cache
    (``---> Using cache``: another build's)."""

    def __init__(self) -> None:
        #: The last ``MAX_STEP_IDS`` (a step's output may print lines like these, any number).
        self.ids: deque[str] = deque(maxlen=MAX_STEP_IDS)
        #: When the build began (``time.time``): an image made before is not its own.
        self.started = time.time()
        self._skip_next = False

    def read(self, line: str) -> None:
        if line.startswith("Step ") and " : " in line:
            self._skip_next = line.split(" : ", 1)[1].lstrip().upper().startswith("FROM ")
        elif line == " ---> Using cache":
            self._skip_next = True
        elif match := _STEP_IMAGE_RE.match(line):
            if not self._skip_next:
                self.ids.append(match.group(1))
            self._skip_next = False


def remove_cut_steps(client: docker.DockerClient, made: list[str], since: float) -> None:
    """After a build that failed for another reason than a step's own command (the engine
    restarting, a dropped SSH host, a step killed by a signal; a step that fails only then is
    the engine's doing, its error saying anything): remove the images its steps ``made`` that
    nothing names now (dangling: a finished step's image is left when the next step never
    ran), and one a step made on one of them that the log never named (the cut came first).
    The log is the build's output, which its steps write too: an image is removed only when
    nothing names it (no tag, no digest), it was made ``since`` the build began (less
    ``CUT_STEPS_SLACK`` seconds, another machine's clock), and no container uses it
    (``force`` off). In the background (the failure is said at once: over a dropped SSH
    connection an engine request may hang), tried again while the engine does not answer,
    for up to ``CUT_STEPS_PATIENCE`` seconds."""
    if not made:
        return
    threading.Thread(
        target=_remove_steps_patiently,
        args=(client, set(made), since),
        name="gpudev-cut-build",
        daemon=True,
    ).start()


def _remove_steps_patiently(client: docker.DockerClient, made: set[str], since: float) -> None:
    deadline = time.monotonic() + CUT_STEPS_PATIENCE
    while not _remove_steps(client, made, since) and time.monotonic() < deadline:
        time.sleep(0.5)


def _named(image: Mapping[str, Any]) -> bool:
    """Whether the engine's listing names ``image`` (a tag, or a digest: the engine's dangling
    filter lists an image pulled by digest only)."""
    names = [*(image.get("RepoTags") or []), *(image.get("RepoDigests") or [])]
    return any(not str(name).startswith("<none>") for name in names)


def _remove_steps(client: docker.DockerClient, made: set[str], since: float) -> bool:
    """One try; ``False`` when the engine did not answer."""
    try:
        dangling = client.api.images(filters={"dangling": True})
    except ENGINE_FAILURES:
        return False
    for image in dangling:
        short = str(image.get("Id", "")).removeprefix("sha256:")[:12]
        parent = str(image.get("ParentId", "")).removeprefix("sha256:")[:12]
        created = image.get("Created")
        if (
            (short in made or parent in made)
            and not _named(image)
            and isinstance(created, int)
            and created >= since - CUT_STEPS_SLACK
        ):
            try:
                client.api.remove_image(str(image["Id"]), force=False, noprune=False)
            except docker.errors.APIError:
                continue  # used meanwhile, or gone
            except ENGINE_FAILURES:
                return False
    return True


def _trusted_build(
    client: docker.DockerClient,
    what: str,
    say: Progress,
    trust: BuildTrust,
    build_args: dict[str, Any],
    *,
    timeout: float | None,
) -> str | None:
    keys = ("tag", "buildargs", "target", "labels")
    options = {k: build_args[k] for k in keys if k in build_args}
    name = str(build_args.get("dockerfile") or "Dockerfile")
    if "path" in build_args:
        folder = Path(build_args["path"])
        context = trusted_folder_context(folder, folder / name, trust)
    elif build_args.get("custom_context"):
        context = trusted_tar_context(build_args["fileobj"], name, trust)
    else:
        text = build_args["fileobj"].read().decode("utf-8", "replace")
        context = trusted_tar_context(None, text, trust)
    say({"stage": "build", "message": "building with BuildKit: RUN steps trust the CA bundle"})
    return buildkit_build(client, what, say, context, trust, timeout=timeout, **options)


def _deb822_stanzas(text: str) -> Iterator[dict[str, str]]:
    stanza: dict[str, str] = {}
    key = ""
    for line in [*text.splitlines(), ""]:
        if not line.strip():
            if stanza:
                yield stanza
            stanza, key = {}, ""
        elif line.startswith("#"):
            continue
        elif line[0].isspace() and key:
            stanza[key] += " " + line.strip()
        elif ":" in line:
            key, _, value = line.partition(":")
            key = key.strip().lower()
            stanza[key] = value.strip()


def mirror_from_sources(text: str, suite: str) -> str | None:
    """The first plain ``deb`` mirror URI that serves ``suite``, from either sources format."""
    if re.search(r"^\s*Types\s*:", text, re.MULTILINE | re.IGNORECASE):
        for stanza in _deb822_stanzas(text):
            if "deb" not in stanza.get("types", "").split():
                continue
            if suite in stanza.get("suites", "").split() and stanza.get("uris"):
                return stanza["uris"].split()[0]
        return None
    for line in text.splitlines():
        # "deb [options] URI suite components...": drop the comment and the options
        words = re.sub(r"\[[^\]]*\]", " ", line.split("#", 1)[0]).split()
        if len(words) >= 3 and words[0] == "deb" and words[2] == suite:
            return words[1]
    return None


def detect_mirror(suite: str, files: Iterable[str] = APT_SOURCE_FILES) -> str | None:
    for name in files:
        try:
            text = Path(name).read_text()
        except OSError:
            continue
        found = mirror_from_sources(text, suite)
        if found:
            return found
    return None


@dataclass(frozen=True)
class BootstrapResult:
    image: str
    image_id: str
    base_image: str
    created: bool
    mirror: str | None
    seconds: float

    def to_json(self) -> dict[str, Any]:
        return asdict(self)


class ImageBootstrapper(LoggingConfigurable):
    """Builds the kernel-capable base image without a registry. ``c.ImageBootstrapper.*``."""

    suite = Unicode("bookworm", help="The Debian suite debootstrap installs.").tag(config=True)

    mirror = Unicode(
        None,
        allow_none=True,
        help="""The Debian package mirror to bootstrap from. Default: the one this host's apt
        uses for the suite (/etc/apt/sources.list.d/debian.sources or /etc/apt/sources.list).""",
    ).tag(config=True)

    base_tag = Unicode(
        "gpudev-base:bookworm", help="Tag of the plain Debian image debootstrap produces."
    ).tag(config=True)

    image_tag = Unicode(
        "gpudev-python:bookworm",
        help="Tag of the kernel-capable image (Python, ipykernel, pip) built on the base image.",
    ).tag(config=True)

    packages = List(
        Unicode(),
        default_value=["python3-ipykernel", "python3-pip", "python3-venv", "ca-certificates"],
        help="Debian packages installed into the kernel-capable image.",
    ).tag(config=True)

    pip_packages = List(
        Unicode(),
        default_value=["ipykernel"],
        help="""Python packages pip then installs from the package index over Debian's (requirement
        specifiers, e.g. "ipykernel>=6.29"): by default a current ipykernel, whose kernels start
        in about 0.2 s against 0.45-0.65 s for Debian's. Where the index cannot be reached (or
        its TLS is intercepted and c.MountPolicy.mount_ca_bundle is off), the image keeps
        Debian's packages and says so in the build output. [] installs nothing with pip.""",
    ).tag(config=True)

    debootstrap_path = Unicode(
        "debootstrap", help="The debootstrap executable (a name on PATH or an absolute path)."
    ).tag(config=True)

    keep_rootfs = Bool(
        False, help="Keep the debootstrap root file system folder after importing it (debugging)."
    ).tag(config=True)

    def _check_inputs(self, mirror: str) -> None:
        if not _SUITE_RE.match(self.suite):
            raise BadRequest(f"Not a Debian suite name: {self.suite!r}")
        if not re.match(r"^(https?|file)://[^\s]+\Z", mirror):
            raise BadRequest(
                f"Not a mirror URL: {mirror!r} (expected http://, https:// or file://)"
            )
        for tag in (self.base_tag, self.image_tag):
            if not _TAG_RE.match(tag):
                raise BadRequest(f"Not an image tag: {tag!r}")
        for package in self.packages:
            if not _PACKAGE_RE.match(package):
                raise BadRequest(f"Not a Debian package name: {package!r}")
        for requirement in self.pip_packages:
            if not _REQUIREMENT_RE.match(requirement):
                raise BadRequest(f"Not a pip requirement: {requirement!r}")

    def _image_id(self, client: docker.DockerClient, tag: str) -> str | None:
        try:
            return str(client.images.get(tag).id)
        except docker.errors.ImageNotFound:
            return None

    def run(
        self,
        client: docker.DockerClient,
        *,
        force: bool = False,
        progress: Progress | None = None,
        trust: BuildTrust | None = None,
    ) -> BootstrapResult:
        """Make sure ``image_tag`` exists; build what is missing. Blocking and idempotent.
        ``trust``: the CA bundle the build's ``RUN`` steps trust (the pip step, behind a
        TLS-intercepting proxy)."""
        say: Progress = progress or (lambda _event: None)
        started = time.monotonic()
        existing = self._image_id(client, self.image_tag)
        if existing and not force:
            say({"stage": "done", "message": f"{self.image_tag} is already present"})
            return BootstrapResult(
                image=self.image_tag,
                image_id=existing,
                base_image=self.base_tag,
                created=False,
                mirror=None,
                seconds=time.monotonic() - started,
            )
        mirror = self.mirror or detect_mirror(self.suite)
        if not mirror:
            raise ImageError(
                f"No Debian mirror for {self.suite!r} was found in this host's apt sources; "
                "name one with --mirror URL (c.ImageBootstrapper.mirror)."
            )
        self._check_inputs(mirror)
        if force or self._image_id(client, self.base_tag) is None:
            self._bootstrap_base(client, mirror, say)
        else:
            say({"stage": "base", "message": f"{self.base_tag} is already present"})
        image_id = self._build_kernel_image(client, say, trust)
        say({"stage": "done", "message": f"{self.image_tag} is ready"})
        return BootstrapResult(
            image=self.image_tag,
            image_id=image_id,
            base_image=self.base_tag,
            created=True,
            mirror=mirror,
            seconds=time.monotonic() - started,
        )

    def _bootstrap_base(self, client: docker.DockerClient, mirror: str, say: Progress) -> None:
        debootstrap = shutil.which(self.debootstrap_path)
        if debootstrap is None:
            raise ImageError(
                f"{self.debootstrap_path} was not found; install it (apt-get install debootstrap)"
            )
        if hasattr(os, "geteuid") and os.geteuid() != 0:
            raise ImageError(
                "debootstrap needs root (it creates device nodes and sets owners); run "
                "`sudo jupyter gpudev image bootstrap` once, or build the image elsewhere"
            )
        tar = shutil.which("tar")
        if tar is None:
            raise ImageError("tar was not found; install it (apt-get install tar)")
        workdir = Path(tempfile.mkdtemp(prefix="gpudev-bootstrap-"))
        rootfs = workdir / "rootfs"
        try:
            say({"stage": "debootstrap", "message": f"debootstrap {self.suite} from {mirror}"})
            self._stream_process(
                [debootstrap, "--variant=minbase", self.suite, str(rootfs), mirror],
                "debootstrap",
                say,
            )
            tarball = workdir / "rootfs.tar"
            say(
                {"stage": "import", "message": f"importing the root file system as {self.base_tag}"}
            )
            subprocess.run(
                [tar, "--numeric-owner", "-C", str(rootfs), "-cf", str(tarball), "."],
                check=True,
                capture_output=True,
            )
            repository, _, tag = self.base_tag.rpartition(":")
            client.api.import_image_from_file(
                str(tarball),
                repository=repository or self.base_tag,
                tag=tag if repository else None,
                changes=['CMD ["/bin/bash"]', f'LABEL {L_BOOTSTRAP}="{self.suite}"'],
            )
        except subprocess.CalledProcessError as exc:
            raise ImageError(
                f"Packing the root file system failed (exit {exc.returncode})"
            ) from exc
        except docker.errors.DockerException as exc:
            self.log.exception("Importing %s failed", self.base_tag)
            raise ImageError(f"The engine refused to import {self.base_tag}") from exc
        finally:
            if not self.keep_rootfs:
                shutil.rmtree(workdir, ignore_errors=True)

    def _stream_process(self, argv: list[str], stage: str, say: Progress) -> None:
        tail: list[str] = []
        with subprocess.Popen(
            argv, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True
        ) as proc:
            assert proc.stdout is not None  # noqa: S101 - guaranteed by stdout=PIPE
            for raw in proc.stdout:
                line = raw.rstrip()
                if line:
                    tail = [*tail[-19:], line]
                    say({"stage": stage, "message": line})
            code = proc.wait()
        if code != 0:
            last = tail[-1] if tail else "no output"
            raise ImageError(f"{stage} failed (exit {code}): {last}", details={"log": tail})

    def dockerfile(self) -> str:
        packages = " ".join(sorted(self.packages))
        text = (
            f"FROM {self.base_tag}\n"
            "ENV DEBIAN_FRONTEND=noninteractive LANG=C.UTF-8\n"
            "RUN apt-get update \\\n"
            f" && apt-get install -y --no-install-recommends {packages} \\\n"
            " && rm -rf /var/lib/apt/lists/*\n"
        )
        if self.pip_packages:
            # Over Debian's, into /usr/local; ipykernel's own kernelspec names "python", which
            # Debian does not have: it is written again for python3. Without the index the
            # image keeps Debian's packages (the build says so).
            requirements = " ".join(shlex.quote(r) for r in self.pip_packages)
            text += (
                "RUN (python3 -m pip install --no-cache-dir --break-system-packages --retries 1 "
                "--timeout 20 --upgrade "
                f"{requirements} \\\n"
                "  && python3 -m ipykernel install --prefix /usr/local) \\\n"
                " || echo 'gpudev: the Python package index could not be reached: the image "
                "keeps Debian packages' >&2\n"
            )
        return text + f'LABEL {L_BOOTSTRAP}="{self.suite}" {L_BOOTSTRAP_KERNEL}="ipykernel"\n'

    def _build_kernel_image(
        self, client: docker.DockerClient, say: Progress, trust: BuildTrust | None
    ) -> str:
        say({"stage": "build", "message": f"building {self.image_tag} on {self.base_tag}"})
        try:
            stream_build(
                client,
                self.image_tag,
                say,
                trust,
                fileobj=io.BytesIO(self.dockerfile().encode()),
                tag=self.image_tag,
            )
        except docker.errors.DockerException as exc:
            self.log.exception("Building %s failed", self.image_tag)
            raise ImageError(f"The engine could not build {self.image_tag}") from exc
        image_id = self._image_id(client, self.image_tag)
        if image_id is None:
            raise ImageError(f"The build finished but {self.image_tag} is missing")
        return image_id
