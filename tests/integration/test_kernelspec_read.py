"""The image's kernelspec is read in the container as the user kernels run as, by an absolute
path: never a program the container's user put on the PATH, run as another (root) user.

In single-user mode with ``c.DevContainers.run_as_server_user`` off the container runs as the
image's user (root here) and kernels as ``remoteUser``; that user may write to a folder on the
PATH before ``/usr/bin``.
"""

from __future__ import annotations

import contextlib
import json
import secrets
import shlex
from collections.abc import Callable
from pathlib import Path

import docker
import pytest
from traitlets.config import Config

from jupyter_gpudev.containers import DevContainers, StartRequest
from jupyter_gpudev.errors import GPUDevError
from jupyter_gpudev.kernels.process import ContainerProcesses
from tests.leaks import Baseline, assert_nothing_leaked

pytestmark = pytest.mark.integration

BASE = "gpudev-base:bookworm"
ARGV = ["python3", "-m", "ipykernel_launcher", "-f", "{connection_file}", "--from-image"]

#: A ``cat`` the container's user plants: it records who ran it, then does what cat does.
PLANTED_CAT = '#!/bin/sh\nid -u >> /tmp/planted-cat-ran-as\nexec /bin/cat "$@"\n'


def test_the_image_kernelspec_is_not_read_by_a_planted_program_as_root(
    tmp_path: Path,
    dev_containers: Callable[..., DevContainers],
    docker_client: docker.DockerClient,
) -> None:
    root = tmp_path / "work"
    env = f"kspec{secrets.token_hex(4)}"
    # Given an image whose user is root, with a kernelspec, an account "dev" and a folder of
    # dev's first on the PATH; the container runs as root, kernels as dev
    folder = root / ".devcontainer" / env
    folder.mkdir(parents=True)
    spec = json.dumps({"argv": ARGV, "display_name": "Python 3", "language": "python"})
    (folder / "kernel.json").write_text(spec)
    (folder / "Dockerfile").write_text(
        f"FROM {BASE}\n"
        "USER root\n"
        "RUN useradd -m -u 4102 dev && install -d -o dev /opt/devbin"
        " && mkdir -p /usr/local/share/jupyter/kernels/python3\n"
        "COPY kernel.json /usr/local/share/jupyter/kernels/python3/kernel.json\n"
        "RUN chmod 644 /usr/local/share/jupyter/kernels/python3/kernel.json\n"
        "ENV PATH=/opt/devbin:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin\n"
    )
    (folder / "devcontainer.json").write_text(
        '{"build": {"dockerfile": "Dockerfile"}, "remoteUser": "dev"}'
    )
    config = Config()
    config.GPUInventory.backend = "none"
    config.DevContainers.run_as_server_user = False
    manager = dev_containers(root, config)
    baseline = Baseline.take(docker_client, ignore_removed=True)
    name = f"{env}-dev"
    try:
        info = manager.start(StartRequest(environment=env, name=name))
        container = docker_client.containers.get(info.container_id)
        assert container.attrs["Config"]["User"] in ("", "root", "0")
        # And dev planted a cat in their folder on the PATH
        code, out = container.exec_run(
            [
                "/bin/sh",
                "-c",
                f"printf '%s' {shlex.quote(PLANTED_CAT)} > /opt/devbin/cat"
                " && chmod 755 /opt/devbin/cat",
            ],
            user="dev",
        )
        assert code == 0, out
        # When gpudev reads the image's kernel argv, as a kernel's start does
        host, found = manager.find(name)
        argv = ContainerProcesses(host, found, manager.address_of).kernel_argv()
        # Then it is the image's kernelspec's
        assert argv == ARGV
        # And the planted program never ran as root
        # (read by absolute path, by root: this read is not the planted program's)
        code, out = container.exec_run(["/bin/sh", "-c", "/bin/cat /tmp/planted-cat-ran-as || :"])
        assert isinstance(out, bytes)
        assert b"0" not in out.split(), out
    finally:
        with contextlib.suppress(GPUDevError):
            manager.remove(name, force=True)
        for image in docker_client.images.list(name=f"gpudev-env-{env}"):
            docker_client.images.remove(str(image.id), force=True)
    assert_nothing_leaked(docker_client, baseline, server_id=manager.server_id, environments=[env])
