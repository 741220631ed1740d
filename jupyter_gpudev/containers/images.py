"""The image a dev container runs: built from the environment's Dockerfile or pulled with the
registry's credentials, with progress; present images are used as they are, but for a built one
whose base image changed under its tag since (e.g. after ``image bootstrap --force``)."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import docker
import docker.errors

from ..engine import BuildTrust, Progress, Registries, RegistryError, stream_build
from ..environments import Environment
from ..errors import ImageError, engine_errors
from ..labels import L_BUILD_BASES, L_ENV

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
) -> tuple[str, list[str]]:
    """Build or pull the environment's image when the host lacks it; returns its reference and
    its ``Config.Env`` (for the CUDA check). A build trusts ``trust``'s CA bundle."""
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
            build(client, env, ref, say, log, trust=trust)
        else:
            pull(client, registries, ref, say)
        image = client.images.get(ref)
    return ref, list(image.attrs.get("Config", {}).get("Env") or [])


def base_refs(dockerfile: Path) -> list[str]:
    """The images a Dockerfile's FROM lines name (not its stages, ``scratch`` or ones built
    from build arguments)."""
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
) -> None:
    """Build the environment's image as ``ref``, streaming the build's progress."""
    spec = env.build
    if spec is None:
        raise ImageError(f"The environment {env.name!r} has no build")
    say({"stage": "build", "message": f"building {ref} from {spec.dockerfile.name}"})
    dockerfile = (
        str(spec.dockerfile.relative_to(spec.context))
        if spec.dockerfile.is_relative_to(spec.context)
        else str(spec.dockerfile)
    )
    with engine_errors(f"Building the image of {env.name!r}", log):
        stream_build(
            client,
            f"the image of {env.name!r}",
            say,
            trust,
            path=str(spec.context),
            dockerfile=dockerfile,
            tag=ref,
            buildargs=dict(spec.args),
            target=spec.target,
            labels={
                L_ENV: env.name,
                L_BUILD_BASES: " ".join(
                    f"{r}@{i}" for r, i in local_ids(client, base_refs(spec.dockerfile)).items()
                ),
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
