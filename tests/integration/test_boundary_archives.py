"""Content inside a dev container is untrusted: what a commit copies out of it, and what it
planted in the workspace, can never make gpudev write outside the staging folder or the
Jupyter root directory (real engine, real containers; the container plays the attacker)."""

from __future__ import annotations

import io
import json
import os
import tarfile
from collections.abc import Callable
from pathlib import Path

import docker
import pytest
from docker.models.containers import Container
from traitlets.config import Config

from jupyter_gpudev.changes.capture import ChangeCapture
from jupyter_gpudev.changes.commit import CommitOptions, Committer
from jupyter_gpudev.containers import DevContainers, StartRequest
from jupyter_gpudev.errors import GPUDevError
from tests.integration.test_diff import sh

pytestmark = pytest.mark.integration

BUILD_ENV = "bnd-arch-build"
IMAGE_ENV = "bnd-arch-image"


@pytest.fixture
def build_and_image_manager(
    tmp_path: Path, dev_containers: Callable[..., DevContainers]
) -> DevContainers:
    """A manager of two environments, one built from a Dockerfile (``BUILD_ENV``) and one of an
    image (``IMAGE_ENV``); GPUs as this machine has them."""
    root = tmp_path / "work"
    build = root / ".devcontainer" / BUILD_ENV
    build.mkdir(parents=True)
    (build / "Dockerfile").write_text("FROM gpudev-python:bookworm\n")
    (build / "devcontainer.json").write_text(json.dumps({"build": {"dockerfile": "Dockerfile"}}))
    image = root / ".devcontainer" / IMAGE_ENV
    image.mkdir(parents=True)
    (image / "devcontainer.json").write_text(json.dumps({"image": "gpudev-python:bookworm"}))
    config = Config()
    return dev_containers(root, config)


def tar_bytes(*members: tuple[tarfile.TarInfo, bytes | None]) -> bytes:
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w") as archive:
        for info, data in members:
            if data is not None:
                info.size = len(data)
            archive.addfile(info, io.BytesIO(data) if data is not None else None)
    return buffer.getvalue()


def member(name: str, kind: bytes = tarfile.REGTYPE, linkname: str = "") -> tarfile.TarInfo:
    info = tarfile.TarInfo(name)
    info.type, info.linkname, info.mode = kind, linkname, 0o644
    return info


def replace_tar(container: Container, crafted: bytes) -> None:
    """The container's ``tar`` (both names) becomes a script that prints ``crafted`` and
    leaves a mark that it ran."""
    script = b"#!/bin/sh\ntouch /tmp/bnd-tar-ran\ncat /opt/bnd-crafted.tar\n"
    fake = member("bnd-tar")
    fake.mode = 0o755
    assert container.put_archive(
        "/opt", tar_bytes((member("bnd-crafted.tar"), crafted), (fake, script))
    )
    code, output = container.exec_run(
        [
            "/bin/sh",
            "-c",
            "cp /opt/bnd-tar /usr/bin/tar && { [ -L /bin ] || cp /opt/bnd-tar /bin/tar; }",
        ],
        user="0",
    )
    assert code == 0, output


def workspace(container: Container, root: Path) -> str:
    """Where the Jupyter root directory is mounted in the container."""
    for mount in container.attrs["Mounts"]:
        if os.path.realpath(mount["Source"]) == os.path.realpath(root):
            return str(mount["Destination"])
    raise AssertionError("the workspace is not mounted")


def test_a_container_tar_with_a_duplicate_member_cannot_write_on_the_host(
    build_and_image_manager: DevContainers, docker_client: docker.DockerClient, tmp_path: Path
) -> None:
    # Given a running container with a changed file, whose tar was replaced by one that
    # emits that file twice: first a symlink to a host path, then a regular file
    outside = tmp_path / "outside"
    outside.mkdir()
    target = outside / "planted"
    build_and_image_manager.start(StartRequest(environment=BUILD_ENV, name="bnd-arch-tar"))
    container = docker_client.containers.get("gpudev-bnd-arch-tar")
    sh(docker_client, "bnd-arch-tar", "echo harmless > /etc/bnd-evil")
    replace_tar(
        container,
        tar_bytes(
            (member("etc/bnd-evil", tarfile.SYMTYPE, str(target)), None),
            (member("etc/bnd-evil"), b"written by the container\n"),
        ),
    )
    capture = ChangeCapture(build_and_image_manager)
    # When a commit is prepared (what --verify builds from), then written
    prepared = capture.prepare("bnd-arch-tar")
    try:
        # Then nothing exists at the host path
        assert not os.path.lexists(target)
    finally:
        prepared.discard()
    Committer(capture, build_and_image_manager.registries).commit(
        "bnd-arch-tar", CommitOptions(write=True)
    )
    assert not os.path.lexists(target)
    assert list(outside.iterdir()) == []
    # And the container's tar never ran; the file came out as the container has it
    code, _ = container.exec_run(["test", "-e", "/tmp/bnd-tar-ran"], user="0")
    assert code != 0
    folder = (
        build_and_image_manager.root_dir
        / ".devcontainer"
        / BUILD_ENV
        / "gpudev-context"
        / "bnd-arch-tar"
    )
    staged = folder / "files" / "etc" / "bnd-evil"
    assert not staged.is_symlink()
    assert staged.read_text() == "harmless\n"


def test_dotdot_names_devices_and_fifos_stay_out_of_the_host(
    build_and_image_manager: DevContainers, docker_client: docker.DockerClient, tmp_path: Path
) -> None:
    # Given a container with a FIFO and a file, whose tar emits names climbing out with ../,
    # an absolute name and a device node for them
    outside = tmp_path / "outside"
    outside.mkdir()
    build_and_image_manager.start(StartRequest(environment=BUILD_ENV, name="bnd-arch-dots"))
    container = docker_client.containers.get("gpudev-bnd-arch-dots")
    sh(
        docker_client,
        "bnd-arch-dots",
        "mkfifo /etc/bnd-fifo && echo kept > /etc/bnd-kept && "
        "ln -s ../../../../../../tmp /etc/bnd-escape && ln -s bnd-kept /etc/bnd-near",
    )
    climb = "../" * 12 + str(outside).lstrip("/")
    replace_tar(
        container,
        tar_bytes(
            (member(f"{climb}/dotdot"), b"climbed\n"),
            (member(f"/{str(outside).lstrip('/')}/absolute"), b"absolute\n"),
            (member("etc/bnd-fifo", tarfile.CHRTYPE), None),
            (member("etc/bnd-kept/../../../../" + str(outside).lstrip("/") + "/x"), b"x\n"),
        ),
    )
    capture = ChangeCapture(build_and_image_manager)
    # When it is committed
    result = Committer(capture, build_and_image_manager.registries).commit(
        "bnd-arch-dots", CommitOptions(write=True)
    )
    # Then nothing was written outside the workspace
    assert list(outside.iterdir()) == []
    # And the FIFO is reported as not copied, with the reason
    assert result.written is not None
    reported = result.written.rendered.reported
    assert any(line.startswith("/etc/bnd-fifo: ") and "not copied" in line for line in reported)
    # And the file came out; the link inside the tree is a link, the escaping one is a RUN line
    files = (
        build_and_image_manager.root_dir
        / ".devcontainer"
        / BUILD_ENV
        / "gpudev-context"
        / "bnd-arch-dots"
    )
    assert (files / "files" / "etc" / "bnd-kept").read_text() == "kept\n"
    assert os.readlink(files / "files" / "etc" / "bnd-near") == "bnd-kept"
    assert not os.path.lexists(files / "files" / "etc" / "bnd-escape")
    text = result.written.rendered.new_text
    assert 'RUN ["ln", "-sfn", "--", "../../../../../../tmp", "/etc/bnd-escape"]' in text


def test_links_planted_in_the_workspace_are_never_written_through(
    build_and_image_manager: DevContainers, docker_client: docker.DockerClient, tmp_path: Path
) -> None:
    # Given files outside the Jupyter root directory
    outside = tmp_path / "outside"
    outside.mkdir()
    victims = {name: outside / name for name in ("prev", "tmp", "json-prev", "json-tmp")}
    for path in victims.values():
        path.write_text("original\n")
    escape_dir = outside / "dir"
    escape_dir.mkdir()
    # And a container of an environment with a Dockerfile, with a change, which planted a
    # link in the build context where the commit copies its files
    build_and_image_manager.start(StartRequest(environment=BUILD_ENV, name="bnd-arch-ws"))
    container = docker_client.containers.get("gpudev-bnd-arch-ws")
    mounted = workspace(container, build_and_image_manager.root_dir)
    env_dir = f"{mounted}/.devcontainer/{BUILD_ENV}"
    sh(docker_client, "bnd-arch-ws", "echo changed > /etc/bnd-ws.conf")
    container.exec_run(["mkdir", "-p", f"{env_dir}/gpudev-context/bnd-arch-ws/files"], user="0")
    container.exec_run(
        ["ln", "-s", str(escape_dir), f"{env_dir}/gpudev-context/bnd-arch-ws/files/etc"],
        user="0",
    )
    committer = Committer(
        ChangeCapture(build_and_image_manager), build_and_image_manager.registries
    )
    dockerfile = build_and_image_manager.root_dir / ".devcontainer" / BUILD_ENV / "Dockerfile"
    before = dockerfile.read_text()
    # When it is committed, the commit fails naming the link, and nothing is written
    with pytest.raises(GPUDevError) as refused:
        committer.commit("bnd-arch-ws", CommitOptions(write=True))
    assert "gpudev-context/bnd-arch-ws/files/etc" in refused.value.message
    assert "link" in refused.value.message
    assert list(escape_dir.iterdir()) == []
    assert dockerfile.read_text() == before

    # Given the link removed, and links planted at the backup and at the old temp name
    os.unlink(dockerfile.parent / "gpudev-context" / "bnd-arch-ws" / "files" / "etc")
    for name, victim in (("Dockerfile.prev", "prev"), (".Dockerfile.gpudev-tmp", "tmp")):
        container.exec_run(["ln", "-s", str(victims[victim]), f"{env_dir}/{name}"], user="0")
    # When it is committed, it is written, and the files outside are unchanged
    result = committer.commit("bnd-arch-ws", CommitOptions(write=True))
    assert result.written is not None
    assert "/etc/bnd-ws.conf" in dockerfile.read_text()
    assert not dockerfile.with_name("Dockerfile.prev").is_symlink()
    assert dockerfile.with_name("Dockerfile.prev").read_text() == before
    assert victims["prev"].read_text() == "original\n"
    assert victims["tmp"].read_text() == "original\n"

    # Given a container of an image-only environment, whose commit creates a Dockerfile and
    # rewrites devcontainer.json, with links planted at every name that commit writes
    build_and_image_manager.start(StartRequest(environment=IMAGE_ENV, name="bnd-arch-img"))
    sh(docker_client, "bnd-arch-img", "echo changed > /etc/bnd-img.conf")
    img_dir = f"{mounted}/.devcontainer/{IMAGE_ENV}"
    for name, victim_name in (
        ("devcontainer.json.prev", "json-prev"),
        (".devcontainer.json.gpudev-tmp", "json-tmp"),
        (".Dockerfile.gpudev-tmp", "tmp"),
    ):
        victim = str(victims[victim_name])
        container.exec_run(["ln", "-s", victim, f"{img_dir}/{name}"], user="0")
    # When it is committed
    result = committer.commit("bnd-arch-img", CommitOptions(write=True))
    # Then it is written, the backup is a file, and nothing outside changed
    assert result.written is not None
    img = build_and_image_manager.root_dir / ".devcontainer" / IMAGE_ENV
    assert "/etc/bnd-img.conf" in (img / "Dockerfile").read_text()
    assert json.loads((img / "devcontainer.json").read_text())["build"] == {
        "dockerfile": "Dockerfile"
    }
    assert not (img / "devcontainer.json.prev").is_symlink()
    for path in victims.values():
        assert path.read_text() == "original\n"
    assert list(escape_dir.iterdir()) == []
