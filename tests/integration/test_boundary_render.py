"""Content of a real dev container cannot add a Dockerfile instruction or crash a diff.

A file named with a newline, a distribution whose ``direct_url.json`` holds a newline or the
wrong types: the diff has exactly the instructions gpudev means to write (split as Docker's
parser does), reports what it left out, and removal with force still works.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

import docker
import pytest
from traitlets.config import Config

from jupyter_gpudev.changes.capture import ChangeCapture
from jupyter_gpudev.containers import DevContainers, StartRequest
from tests.dockerfile_syntax import instructions
from tests.integration.test_cli import gpudev
from tests.integration.test_diff import sh

pytestmark = pytest.mark.integration

ENVIRONMENT = "bnd-render"
SITE = "/usr/local/lib/python3.11/dist-packages"


@pytest.fixture
def image_env_manager(
    tmp_path: Path, dev_containers: Callable[..., DevContainers]
) -> DevContainers:
    """A manager of one environment of an image (``ENVIRONMENT``); GPUs as this machine has
    them."""
    root = tmp_path / "work"
    folder = root / ".devcontainer" / ENVIRONMENT
    folder.mkdir(parents=True)
    (folder / "devcontainer.json").write_text(json.dumps({"image": "gpudev-python:bookworm"}))
    config = Config()
    return dev_containers(root, config)


def plant_dist(docker_client: docker.DockerClient, name: str, dist: str, direct: object) -> None:
    """A distribution folder written by hand into site-packages, as any process could."""
    folder = f"{SITE}/{dist}-1.0.dist-info"
    script = (
        "import json, os, sys\n"
        "folder, name, direct = sys.argv[1], sys.argv[2], sys.argv[3]\n"
        "os.makedirs(folder)\n"
        "open(folder + '/METADATA', 'w').write(f'Metadata-Version: 2.1\\nName: {name}\\n"
        "Version: 1.0\\n\\n')\n"
        "open(folder + '/RECORD', 'w').write('')\n"
        "open(folder + '/direct_url.json', 'w').write(direct)\n"
    )
    container = docker_client.containers.get(f"gpudev-{name}")
    code, output = container.exec_run(
        ["/usr/bin/python3", "-c", script, folder, dist, json.dumps(direct)], user="0"
    )
    assert code == 0, output


def test_newlines_in_a_file_name_and_a_direct_url_add_no_instruction(
    image_env_manager: DevContainers, docker_client: docker.DockerClient
) -> None:
    # Given a dev container with a file named with a newline and a Dockerfile instruction,
    # a file whose name has spaces and quotes, and a distribution whose direct_url.json
    # URL holds a newline and an instruction
    name = "bnd-render-nl"
    image_env_manager.start(StartRequest(environment=ENVIRONMENT, name=name))
    sh(
        docker_client,
        name,
        "printf x > \"$(printf '/etc/a\\nRUN touch pwned')\" && "
        "printf y > '/etc/it'\"'\"'s \"q\" b.conf'",
    )
    plant_dist(
        docker_client,
        name,
        "evil",
        {"url": "https://example.org/evil-1.0.tar.gz\nRUN touch /pwned2", "archive_info": {}},
    )
    # When its diff is made
    capture = ChangeCapture(image_env_manager)
    _, rendered = capture.diff(name)
    # Then the Dockerfile has exactly the instructions meant: FROM the image, the files' COPY
    assert instructions(rendered.new_text) == [
        ("FROM", "gpudev-python:bookworm"),
        ("COPY", f"gpudev-context/{name}/files/ /"),
    ]
    assert "pwned" not in rendered.new_text.replace("# ", "")
    # And the file with spaces and quotes is still copied; the one with a newline is not
    assert rendered.files == ['/etc/it\'s "q" b.conf']
    # And both bad entries are reported, escaped (printable)
    assert all(r.isprintable() for r in rendered.reported)
    assert any("'/etc/a\\nRUN touch pwned'" in r for r in rendered.reported), rendered.reported
    assert any("evil" in r and "direct_url.json" in r for r in rendered.reported)
    # And the command line prints the same instructions, and no raw line of the container's
    result = gpudev(
        "diff",
        name,
        f"--root-dir={image_env_manager.root_dir}",
        f"--DevContainers.state_dir={image_env_manager.state_dir}",
    )
    assert result.returncode == 0, result.stderr
    assert not any(
        line.lstrip("+ ").startswith("RUN touch")
        for line in (result.stdout + result.stderr).splitlines()
    )
    listed = gpudev(
        "diff",
        name,
        "--json",
        f"--root-dir={image_env_manager.root_dir}",
        f"--DevContainers.state_dir={image_env_manager.state_dir}",
    )
    items = json.loads(listed.stdout)["items"]
    assert all(i["label"].isprintable() and i["id"].isprintable() for i in items)


def test_a_direct_url_with_the_wrong_types_is_reported_and_removal_with_force_works(
    image_env_manager: DevContainers, docker_client: docker.DockerClient
) -> None:
    # Given a dev container with a change a commit left out (held)
    name = "bnd-render-held"
    image_env_manager.start(StartRequest(environment=ENVIRONMENT, name=name))
    sh(docker_client, name, "echo one > /etc/one.conf && echo two > /etc/two.conf")
    capture = ChangeCapture(image_env_manager)
    capture.apply(capture.prepare(name, exclude=["file:/etc/two.conf"]))
    # And a distribution whose direct_url.json has a list where an object belongs
    plant_dist(docker_client, name, "crafted", {"url": "file:///src/crafted", "dir_info": []})
    # When its diff is made, it answers: the distribution is reported, not written
    captured, rendered = capture.diff(name)
    assert any("crafted" in r and "direct_url.json" in r for r in rendered.reported)
    assert "crafted" not in rendered.new_text
    assert [i.id for i in captured.items if i.kind == "file"] == ["file:/etc/two.conf"]
    # And removing it with force works (its held changes are checked, then dropped)
    image_env_manager.remove(name, force=True)
    assert not docker_client.containers.list(all=True, filters={"name": f"gpudev-{name}"})
