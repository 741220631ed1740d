"""``jupyter gpudev image bootstrap`` and the image it makes, on the real engine.

scripts/setup.sh bootstraps the image before the tests run (it needs root and about a minute);
these tests check the result and the command's behaviour around it.
"""

from __future__ import annotations

import json
import os

import docker
import pytest

from tests.integration.test_cli import gpudev

pytestmark = pytest.mark.integration

IMAGE = os.environ.get("GPUDEV_IMAGE", "gpudev-python:bookworm")


@pytest.fixture(scope="module")
def bootstrapped(docker_client: docker.DockerClient) -> str:
    """The kernel image, bootstrapped here if the set-up script did not do it already."""
    try:
        docker_client.images.get(IMAGE)
    except docker.errors.ImageNotFound:
        result = gpudev("image", "bootstrap", f"--tag={IMAGE}")
        assert result.returncode == 0, result.stderr
    return IMAGE


def test_the_image_runs_ipykernel(docker_client: docker.DockerClient, bootstrapped: str) -> None:
    # When a container of the bootstrapped image imports ipykernel
    output = docker_client.containers.run(
        bootstrapped,
        [
            "python3",
            "-c",
            "import ipykernel, sys; print(ipykernel.__version__, sys.version_info[0])",
        ],
        remove=True,
        init=True,
    )
    # Then it works: the image is kernel-capable
    version, major = output.decode().split()
    assert major == "3"
    assert version[0].isdigit()


def test_the_image_has_a_current_ipykernel_whose_kernelspec_runs(
    docker_client: docker.DockerClient, bootstrapped: str
) -> None:
    """The set-up script builds it where the package index answers (through this machine's
    proxy, trusting its CA bundle): pip's ipykernel over Debian's 6.17, its kernelspec written
    for python3 (the wheel's names "python", which Debian does not have)."""
    output = docker_client.containers.run(
        bootstrapped,
        [
            "python3",
            "-c",
            "import ipykernel, json, shutil; "
            "spec = json.load(open('/usr/local/share/jupyter/kernels/python3/kernel.json')); "
            "print(ipykernel.__version__, bool(shutil.which(spec['argv'][0])))",
        ],
        remove=True,
    )
    version, runnable = output.decode().split()
    assert int(version.split(".")[0]) >= 7, version
    assert runnable == "True"


def test_the_image_is_labelled_as_bootstrapped(
    docker_client: docker.DockerClient, bootstrapped: str
) -> None:
    labels = docker_client.images.get(bootstrapped).labels
    assert labels["org.jupyter.gpudev.bootstrap"] == "bookworm"
    assert labels["org.jupyter.gpudev.bootstrap.kernel"] == "ipykernel"


def test_running_it_again_changes_nothing(
    docker_client: docker.DockerClient, bootstrapped: str
) -> None:
    # Given the image exists
    before = docker_client.images.get(bootstrapped).id
    # When bootstrap runs again
    result = gpudev("image", "bootstrap", f"--tag={bootstrapped}", "--json")
    # Then it reports the image as present and leaves it as it was
    assert result.returncode == 0, result.stderr
    payload = json.loads(result.stdout)
    assert payload["created"] is False
    assert payload["image_id"] == before
    assert docker_client.images.get(bootstrapped).id == before


def test_bad_input_is_refused_before_any_work(docker_client: docker.DockerClient) -> None:
    # When bootstrap is asked for a forced rebuild with a mirror that is not a URL
    tag = "gpudev-test-never-built:1"
    result = gpudev("image", "bootstrap", "--force", f"--tag={tag}", "--mirror=not a url")
    # Then it exits 2 with a message, and no image was made
    assert result.returncode == 2
    assert "Not a mirror URL: 'not a url'" in result.stderr
    with pytest.raises(docker.errors.ImageNotFound):
        docker_client.images.get(tag)


def test_missing_debootstrap_is_explained() -> None:
    # Given debootstrap is not installed
    tag = "gpudev-test-no-debootstrap:1"
    result = gpudev(
        "image",
        "bootstrap",
        f"--tag={tag}",
        f"--base-tag={tag}-base",
        "--mirror=http://deb.debian.org/debian",
        "--ImageBootstrapper.debootstrap_path=debootstrap-not-installed",
    )
    # Then the message says how to get it
    assert result.returncode == 4
    assert "apt-get install debootstrap" in result.stderr
