"""An environment's image built by the real engine while its user swaps a folder of the build
context for a link to a host folder: the image never holds the host's files (issue #30, item 8).
"""

from __future__ import annotations

import contextlib
import io
import json
import logging
import secrets
import tarfile
import time
from pathlib import Path

import docker
import docker.errors
import pytest

from jupyter_gpudev.containers.images import build
from jupyter_gpudev.environments import EnvironmentManager
from jupyter_gpudev.errors import GPUDevError
from tests.integration.conftest import BASE
from tests.unit.test_build_context import NAMES, SECRET, Swapper

pytestmark = pytest.mark.integration

LOG = logging.getLogger("test_build_context")
#: How many builds the race tries, and for how long at most.
BUILDS, SECONDS = 60, 90.0


def copied_files(client: docker.DockerClient, image: str) -> dict[str, bytes]:
    """The files under ``/keys`` of ``image``, read from a container never started."""
    container = client.containers.create(image, ["true"])
    try:
        chunks, _stat = container.get_archive("/keys")
        found = {}
        with tarfile.open(fileobj=io.BytesIO(b"".join(chunks))) as tar:
            for member in tar:
                data = tar.extractfile(member) if member.isreg() else None
                if data is not None:
                    found[member.name] = data.read()
        return found
    finally:
        container.remove(force=True)


def test_an_image_built_while_a_context_folder_is_swapped_never_holds_a_host_file(
    tmp_path: Path, docker_client: docker.DockerClient
) -> None:
    # Given an environment whose Dockerfile copies its folder `keys`, and a host folder (standing
    # for the service's ~/.ssh) holding files of the same names
    root = tmp_path.resolve() / "ws"
    folder = root / ".devcontainer" / "race"
    (folder / "keys").mkdir(parents=True)
    (folder / "devcontainer.json").write_text(json.dumps({"build": {"dockerfile": "Dockerfile"}}))
    (folder / "Dockerfile").write_text(f"FROM {BASE}\nCOPY keys /keys/\n")
    outside = tmp_path.resolve() / "host-ssh"
    outside.mkdir()
    for name in NAMES:
        (folder / "keys" / name).write_bytes(b"harmless\n")
        (outside / name).write_bytes(SECRET + b"\n")
    env = EnvironmentManager().get("race", root)
    tag = f"gpudev-test-context-race:{secrets.token_hex(4)}"
    built = refused = 0
    deadline = time.monotonic() + SECONDS
    try:
        # When its image is built again and again while its user swaps `keys` for a link to
        # the host folder and back
        with Swapper(folder / "keys", outside, folder.parent) as swapper:
            while built + refused < BUILDS and time.monotonic() < deadline:
                try:
                    build(docker_client, env, tag, lambda _event: None, LOG)
                except (GPUDevError, OSError):  # refused: the context changed meanwhile
                    refused += 1
                    continue
                built += 1
                # Then no image holds the host's secret
                leaked = [
                    name
                    for name, data in copied_files(docker_client, tag).items()
                    if SECRET in data
                ]
                assert not leaked, (
                    f"build {built + refused} copied the host's secret into the image as "
                    f"{leaked[:3]}"
                )
        assert swapper.swaps > 0
        assert built > 0, (built, refused)
    finally:
        with contextlib.suppress(docker.errors.APIError):
            docker_client.images.remove(tag, force=True)
