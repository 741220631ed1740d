"""The image a dev container runs: built from the environment's Dockerfile or pulled with the
registry's credentials, with progress; present images are used as they are."""

from __future__ import annotations

from typing import Any

import docker
import docker.errors

from ..engine import BuildTrust, Progress, Registries, RegistryError, stream_build
from ..environments import Environment
from ..errors import ImageError, engine_errors
from ..labels import L_ENV


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
        if env.build is not None:
            build(client, env, ref, say, log, trust=trust)
        else:
            pull(client, registries, ref, say)
        image = client.images.get(ref)
    return ref, list(image.attrs.get("Config", {}).get("Env") or [])


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
            labels={L_ENV: env.name},
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
