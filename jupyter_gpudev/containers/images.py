"""The image a dev container runs: built from the environment's Dockerfile or pulled with the
registry's credentials, with progress; present images are used as they are, but for a built one
whose base image changed under its tag since (e.g. after ``image bootstrap --force``).

In shared mode (``mine``: the user's ``namespace.UserImages``) a build is the user's own: its
context is packed first (``engine.context``), the Dockerfile checked and the digest taken from
that very archive, which is what the engine gets; it is tagged under the user's repository and
used only when gpudev's records say it built it for them from that digest. An image named by
the environment, or in its Dockerfile, is refused when it is another user's (``namespace``).
A shared service's build sends the engine no registry credentials (``engine.registries``): the
images its Dockerfile names that the engine lacks are pulled first (``fetch_named``), with the
service's credentials only where ``c.Registries.shared_pull_images`` allows.
"""

from __future__ import annotations

import re
import tarfile
from pathlib import Path
from typing import IO, Any

import docker
import docker.errors

from ..engine import BuildTrust, Progress, Registries, RegistryError, stream_build
from ..engine.context import TEXT_LIMIT, folder_context
from ..environments import Environment
from ..environments.model import BuildSpec
from ..errors import BadRequest, GPUDevError, ImageError, engine_errors
from ..labels import L_BUILD_BASES, L_ENV
from . import references
from .features import Features, install_features
from .namespace import UserImages, build_digest, build_reference, context_digest

#: A FROM line's image (``FROM [--platform=...] IMAGE [AS name]``).
_FROM_RE = re.compile(r"^\s*FROM\s+(?:--\S+\s+)*(\S+)", re.IGNORECASE | re.MULTILINE)


def ensure_image(
    client: docker.DockerClient,
    env: Environment,
    registries: Registries,
    say: Progress,
    log: Any,
    *,
    trust: BuildTrust | None = None,
    mine: UserImages | None = None,
    features: Features | None = None,
    owner: tuple[int, int] | None = None,
    timeout: float | None = None,
) -> tuple[str, list[str]]:
    """Build or pull the environment's image when the host lacks it; returns its reference and
    its ``Config.Env`` (for the CUDA check). A build trusts ``trust``'s CA bundle. ``mine``:
    shared mode's user (see the module). The environment's Dev Container Features are then
    installed on it (``features.install_features``; ``features``: ``c.Features``, read from
    ``registries``' configuration when not given; ``owner``: who a lockfile it writes in the
    workspace belongs to; ``timeout``: each build's, ``c.DevContainers.build_timeout``)."""
    if mine is not None:
        ref, image = _ensure_own(
            client, env, say, log, registries=registries, trust=trust, mine=mine, timeout=timeout
        )
    else:
        ref, image = _ensure_single(client, env, registries, say, log, trust=trust, timeout=timeout)
    if env.features:
        ref = install_features(
            client,
            env,
            ref,
            registries=registries,
            say=say,
            log=log,
            trust=trust,
            settings=features,
            mine=mine,
            owner=owner,
            timeout=timeout,
        )
        image = client.images.get(ref)
    return ref, list(image.attrs.get("Config", {}).get("Env") or [])


def _ensure_single(
    client: docker.DockerClient,
    env: Environment,
    registries: Registries,
    say: Progress,
    log: Any,
    *,
    trust: BuildTrust | None,
    timeout: float | None,
) -> tuple[str, Any]:
    """``ensure_image`` in single-user mode: the reference and the image."""
    ref = env.image_ref()
    try:
        image = client.images.get(ref)
    except docker.errors.ImageNotFound:
        image = None
    if image is not None and env.build is not None:
        moved = moved_bases(client, image.labels.get(L_BUILD_BASES, ""))
        if moved:
            say({"stage": "build", "message": f"its base {moved[0]} changed: building again"})
            image = None
    if image is None:
        if env.build is not None:
            build(client, env, ref, say, log, trust=trust, timeout=timeout)
        else:
            pull(client, registries, ref, say)
        image = client.images.get(ref)
    return ref, image


def _ensure_own(
    client: docker.DockerClient,
    env: Environment,
    say: Progress,
    log: Any,
    *,
    registries: Registries,
    trust: BuildTrust | None,
    mine: UserImages,
    timeout: float | None,
) -> tuple[str, Any]:
    """``ensure_image`` in shared mode: the reference and the image."""
    spec = env.build
    if spec is None:
        ref = env.image_ref()
        mine.check(client, ref, f"The environment {env.name!r}")
        try:
            image = client.images.get(ref)
        except docker.errors.ImageNotFound:
            pull(client, registries, ref, say)
            mine.check(client, ref, f"The environment {env.name!r}")  # what the pull brought
            image = client.images.get(ref)
        return ref, image
    archive, name = folder_context(spec.context, _dockerfile_name(spec))
    with archive:
        text = _member_text(archive, name)
        what = f"The Dockerfile of {env.name!r}"
        mine.check_build_args(spec.args, f"The build of {env.name!r}")
        mine.check_dockerfile(client, text, dict(spec.args), what)
        digest = build_digest(dict(spec.args), spec.target, context_digest(archive, name))
        ref = build_reference(env.name, mine.user, digest)
        image_id = mine.reusable(client, ref, digest)
        if image_id is not None:
            image = client.images.get(image_id)
            moved = moved_bases(client, image.labels.get(L_BUILD_BASES, ""))
            if moved:
                say({"stage": "build", "message": f"its base {moved[0]} changed: building again"})
                image_id = None
        if image_id is None:
            if fetch_named(client, registries, text, dict(spec.args), say=say, what=what):
                mine.check_dockerfile(client, text, dict(spec.args), what)  # what was pulled
            build(
                client,
                env,
                ref,
                say,
                log,
                trust=trust,
                context=(archive, name, text),
                timeout=timeout,
            )
            image = client.images.get(ref)
            mine.builds.record(
                str(image.id), mine.user, environment=env.name, digest=digest, reference=ref
            )
    return ref, image


#: What ``_registry_in`` says of a name whose registry the variable after its prefix decides.
_UNKNOWN_REGISTRY = "?"


def _registry_in(prefix: str) -> str | None:
    """The registry host of an image name known up to ``prefix`` (the text before a variable
    gpudev has no value for), where the prefix names one: ``127.0.0.1:5000/x:`` or, its port
    left to a variable, ``127.0.0.1:``; ``None`` for a Docker Hub name (``python:``, a tag
    begun: ``python:3.12-``); ``_UNKNOWN_REGISTRY`` where the variable decides it (before the
    name's first ``/``, unless a tag has begun: ``metadata:`` and ``${NOPE:-80/x}`` make the
    host and port ``metadata:80``)."""
    if prefix.startswith("["):  # an IPv6 address: a host, whole once its bracket closes
        return prefix[: prefix.index("]") + 1] if "]" in prefix else _UNKNOWN_REGISTRY
    if "@" in prefix:  # the name is whole: a digest follows
        prefix = prefix.split("@", 1)[0] + ":tag"
    if "/" not in prefix:
        head, colon, after = prefix.partition(":")
        if not colon or after.isdigit() or not after:  # a host, or a host and its port, so far
            if colon and ("." in head or head.lower() == "localhost" or head != head.lower()):
                return head  # a host by any reading: its port is left to the variable
            return _UNKNOWN_REGISTRY
        return None
    head = prefix.split("/", 1)[0]
    # (an upper-case letter: a host, as newer engines read it; a path is lower case)
    if "." in head or ":" in head or head.lower() == "localhost" or head != head.lower():
        return head
    return None


def _check_builders_pull(registries: Registries, named: references.Named) -> None:
    """Shared mode: refuse a name the builder pulls itself (gpudev has no value for one of
    its variables) from a registry users may not reach, or whose registry gpudev cannot
    tell: the name as the builder reads it with those variables unset is checked whole;
    where that is no name, or a platform ARG may be set, its registry as far as known."""
    if registries.user is None:
        return
    guess = (named.unset or "").strip()
    if guess:
        try:
            Registries.registry_of(guess)
        except (ValueError, GPUDevError):
            pass  # no name the builder could pull either
        else:
            registries.check_reachable(guess)
            return
    written, prefix = named.written, named.prefix.strip()
    registry = _registry_in(prefix)
    if registry == _UNKNOWN_REGISTRY:
        raise BadRequest(
            f"{written}: a variable gpudev has no value for decides its registry, which the "
            "gpudev service must check first: give the variable a value (an ARG default, a "
            "build argument) or write the registry out (docker.io/library/python:${TAG})",
            details={"image": written},
        )
    if registry and registry != _UNKNOWN_REGISTRY:
        registries.check_registry_reachable(registry, written)


def fetch_named(
    client: docker.DockerClient,
    registries: Registries,
    text: str,
    args: dict[str, str],
    *,
    say: Progress,
    what: str,
) -> bool:
    """Pull the images the Dockerfile ``text`` (built with ``args``; ``what``: whose) names
    that the engine lacks, through ``registries`` (in shared mode: with the service's
    credentials only where ``c.Registries.shared_pull_images`` allows); whether any was
    pulled. Not the ``# syntax=`` image (only BuildKit reads it, and gpudev's BuildKit builds
    leave the directive out), nor a name gpudev cannot resolve (the builder pulls it, without
    credentials; in shared mode its registry, where the name's known part names one, is held
    to the same rule). A failed pull is an ``ImageError`` naming where the Dockerfile names it; in
    shared mode a registry at a private address is refused first (``check_reachable``)."""
    pulled = False
    for named in references.images(text, args):
        ref = (named.resolved or "").strip()
        if named.where == references.SYNTAX or ref == "scratch":
            continue
        try:
            if not ref:  # the builder pulls it: its registry, where known, is checked here
                _check_builders_pull(registries, named)
                continue
            if _present(client, ref):
                continue
            registries.check_reachable(ref)
        except BadRequest as err:
            raise BadRequest(
                f"{what}, {named.where}, names {err.message}", details=err.details
            ) from err
        try:
            registries.pull(client, ref, say)
        except RegistryError as err:
            raise ImageError(
                f"{what}, {named.where}, names {ref}, which is not on this host and could not "
                f"be pulled: {err.message}",
                details={"image": ref, **err.details},
            ) from err
        pulled = True
    return pulled


def _present(client: docker.DockerClient, ref: str) -> bool:
    """Whether the engine has an image by the name (or id) ``ref``."""
    try:
        client.images.get(ref)
    except (docker.errors.ImageNotFound, docker.errors.NullResource):
        return False
    except docker.errors.APIError as exc:
        if exc.status_code == 400:  # a name the engine cannot read: it has no image by it
            return False
        raise
    return True


def _dockerfile_name(spec: BuildSpec) -> str:
    """The Dockerfile's path relative to the context, or its absolute path outside it."""
    if spec.dockerfile.is_relative_to(spec.context):
        return str(spec.dockerfile.relative_to(spec.context))
    return str(spec.dockerfile)


def _member_text(archive: IO[bytes], name: str) -> str:
    """The text of the file ``name`` in the context tar ``archive`` (left at its start)."""
    archive.seek(0)
    try:
        with tarfile.open(fileobj=archive, mode="r:") as tar:
            member = tar.getmember(name)
            data = tar.extractfile(member) if member.isreg() else None
            text = data.read(TEXT_LIMIT + 1) if data is not None else None
    except KeyError:
        text = None
    archive.seek(0)
    if text is None or len(text) > TEXT_LIMIT:
        raise ImageError(f"The build context has no Dockerfile {name} of at most 8 MiB")
    return text.decode("utf-8", "replace")


def base_refs(dockerfile: Path | str) -> list[str]:
    """The images a Dockerfile's FROM lines name (not its stages, ``scratch`` or ones built
    from build arguments); ``dockerfile``: its path, or its text."""
    if isinstance(dockerfile, str):
        text = dockerfile
    else:
        try:
            text = dockerfile.read_text(errors="replace")
        except OSError:
            return []
    refs = _FROM_RE.findall(text)
    stages = {m.lower() for m in re.findall(r"\bAS\s+(\S+)\s*$", text, re.I | re.M)}
    return [r for r in refs if "$" not in r and r.lower() not in stages and r != "scratch"]


def local_ids(client: docker.DockerClient, refs: list[str]) -> dict[str, str]:
    """The ids of the ones of ``refs`` present on the engine."""
    found: dict[str, str] = {}
    for ref in refs:
        try:
            found[ref] = str(client.images.get(ref).id)
        except docker.errors.ImageNotFound:
            continue
    return found


def moved_bases(client: docker.DockerClient, label: str) -> list[str]:
    """The bases recorded in ``label`` (``L_BUILD_BASES``) whose tag names another image now."""
    recorded = dict(item.rsplit("@", 1) for item in label.split() if "@" in item)
    now = local_ids(client, list(recorded))
    return [ref for ref, image_id in recorded.items() if ref in now and now[ref] != image_id]


def build(
    client: docker.DockerClient,
    env: Environment,
    ref: str,
    say: Progress,
    log: Any,
    *,
    trust: BuildTrust | None = None,
    context: tuple[IO[bytes], str, str] | None = None,
    timeout: float | None = None,
) -> None:
    """Build the environment's image as ``ref``, streaming the build's progress; ``context``:
    the context already packed (the tar, the Dockerfile's name in it and its text), else its
    folder is packed for the build; ``timeout``: the build's limit (``stream_build``)."""
    spec = env.build
    if spec is None:
        raise ImageError(f"The environment {env.name!r} has no build")
    say({"stage": "build", "message": f"building {ref} from {spec.dockerfile.name}"})
    sent: dict[str, Any] = (
        {"fileobj": context[0], "custom_context": True, "dockerfile": context[1]}
        if context is not None
        else {"path": str(spec.context), "dockerfile": _dockerfile_name(spec)}
    )
    bases = base_refs(context[2] if context is not None else spec.dockerfile)
    with engine_errors(f"Building the image of {env.name!r}", log):
        stream_build(
            client,
            f"the image of {env.name!r}",
            say,
            trust,
            timeout=timeout,
            **sent,
            tag=ref,
            buildargs=dict(spec.args),
            target=spec.target,
            labels={
                L_ENV: env.name,
                L_BUILD_BASES: " ".join(f"{r}@{i}" for r, i in local_ids(client, bases).items()),
            },
        )


def pull(client: docker.DockerClient, registries: Registries, ref: str, say: Progress) -> None:
    """Pull with the registry's credentials; a registry that cannot be reached or refuses says
    so, with what to do when no registry is reachable at all."""
    try:
        registries.pull(client, ref, say)
    except RegistryError as err:
        raise ImageError(
            f"The image {ref} is not on this host and could not be pulled: {err.message}. "
            "Without a registry, build a base image with `jupyter gpudev image bootstrap`, "
            "or `docker load` the image.",
            details={"image": ref, **err.details},
        ) from err
