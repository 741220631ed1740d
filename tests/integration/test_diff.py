"""``jupyter gpudev diff``: real changes made inside a real dev container, captured and rendered.

The container reaches Debian's mirror (apt, plain HTTP) and the Python package index (through
the host CA bundle, mounted by ``c.MountPolicy.mount_ca_bundle``), as a user's would.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

import docker
import pytest
from traitlets.config import Config

from jupyter_gpudev.changes.capture import ChangeCapture
from jupyter_gpudev.containers import DevContainers, StartRequest, docker_name
from jupyter_gpudev.containers.model import container_key
from jupyter_gpudev.errors import Conflict
from tests.integration.test_cli import gpudev

pytestmark = pytest.mark.integration

SETUP_PY = (
    "from setuptools import setup\n"
    'setup(name="gpudevbase", version="1.0", packages=["gpudevbase"])\n'
)


def write_environment(root: Path, name: str) -> None:
    """An environment NAME with its own Dockerfile: the kernel image plus a pip-installed
    package (to uninstall), and a containerEnv variable the image lacks."""
    folder = root / ".devcontainer" / name
    (folder / "basepkg" / "gpudevbase").mkdir(parents=True)
    (folder / "basepkg" / "setup.py").write_text(SETUP_PY)
    (folder / "basepkg" / "gpudevbase" / "__init__.py").write_text("VALUE = 1\n")
    (folder / "Dockerfile").write_text(
        "FROM gpudev-python:bookworm\n"
        "COPY basepkg /tmp/basepkg\n"
        "RUN python3 -m pip install --no-index --no-build-isolation --break-system-packages "
        "/tmp/basepkg && rm -rf /tmp/basepkg /root/.cache\n"
    )
    (folder / "devcontainer.json").write_text(
        json.dumps({"build": {"dockerfile": "Dockerfile"}, "containerEnv": {"MY_SETTING": "on"}})
    )


@pytest.fixture
def ca_bundle_manager(
    tmp_path: Path, dev_containers: Callable[..., DevContainers]
) -> DevContainers:
    """A manager of the environment ``diff`` (``write_environment``) with the host CA bundle
    mounted, so its containers reach the package index; GPUs as this machine has them."""
    root = tmp_path / "work"
    write_environment(root, "diff")
    config = Config()
    config.MountPolicy.mount_ca_bundle = True
    return dev_containers(root, config)


def sh(
    docker_client: docker.DockerClient,
    name: str,
    script: str,
    environment: dict[str, str] | None = None,
    *,
    owner: str | None = None,
) -> str:
    """Run ``script`` as root in the dev container ``name`` (``owner``'s in shared mode, where
    names are per user); its output (exit 0 asserted)."""
    container = docker_client.containers.get(docker_name(container_key(name, owner)))
    code, output = container.exec_run(["/bin/sh", "-c", script], user="0", environment=environment)
    assert isinstance(output, bytes)
    text = output.decode(errors="replace")
    assert code == 0, text
    return text


CHANGES = """
set -e
apt-get update -qq
DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends cowsay >/dev/null
python3 -m pip install -q --no-cache-dir --break-system-packages iniconfig==2.0.0 packaging==24.1
python3 -m pip uninstall -y -q --break-system-packages gpudevbase
echo "Welcome to the GPU box" >> /etc/motd
rm /etc/issue
mkdir -p /root/.config/tool && echo "colour = true" > /root/.config/tool/config.toml
mkdir -p /root/.ssh && echo "-----BEGIN OPENSSH PRIVATE KEY-----" > /root/.ssh/id_ed25519
"""


def test_changes_made_in_a_container_come_out_as_a_dockerfile_diff(
    ca_bundle_manager: DevContainers, docker_client: docker.DockerClient, tmp_path: Path
) -> None:
    # Given a dev container of an environment with its own Dockerfile
    info = ca_bundle_manager.start(StartRequest(environment="diff", name="diffbox"))
    capture = ChangeCapture(ca_bundle_manager)
    # Then right after the start, only the variable the environment sets and the image lacks
    _, fresh = capture.diff("diffbox")
    added = [line for line in fresh.diff.splitlines() if line.startswith("+") and "+++" not in line]
    assert [a for a in added if a != "+" and not a.startswith("+#")] == ['+ENV MY_SETTING="on"']
    # When a user installs and removes packages, edits /etc, deletes a file, adds a config
    sh(docker_client, "diffbox", CHANGES)
    captured, rendered = capture.diff("diffbox")
    lines = rendered.new_text.splitlines()
    # Then the Dockerfile gets the apt install, pinned, in one layer with the list cleanup
    cowsay = sh(docker_client, "diffbox", "dpkg-query -W -f '${Version}' cowsay")
    start = lines.index("RUN apt-get update \\")
    assert lines[start : start + 4] == [
        "RUN apt-get update \\",
        " && apt-get install -y --no-install-recommends \\",
        f"      cowsay={cowsay} \\",
        " && rm -rf /var/lib/apt/lists/*",
    ]
    # And pip installs (a new package, an upgrade of a base one) pinned, and the uninstall
    start = lines.index(
        "RUN /usr/bin/python3 -m pip install --no-cache-dir --break-system-packages \\"
    )
    assert lines[start + 1 : start + 3] == ["      iniconfig==2.0.0 \\", "      packaging==24.1"]
    assert "RUN /usr/bin/python3 -m pip uninstall -y --break-system-packages gpudevbase" in lines
    # And the edited and new files are copied, the deleted one removed, the variable set
    assert captured.changes.files.kept == ["/etc/motd", "/root/.config/tool/config.toml"]
    assert "COPY gpudev-context/diffbox/files/ /" in lines
    assert 'RUN ["rm", "-rf", "--", "/etc/issue"]' in lines
    assert 'ENV MY_SETTING="on"' in lines
    # And the key is reported, never written; packages' own files are not file changes
    assert "/root/.ssh/id_ed25519: looks like a credential, not copied" in rendered.reported
    assert "id_ed25519" not in rendered.new_text
    assert "/usr/games/cowsay" not in rendered.new_text
    # And it is a unified diff of the environment's Dockerfile, stable from one run to the next
    assert rendered.diff.startswith(
        "--- a/.devcontainer/diff/Dockerfile\n+++ b/.devcontainer/diff/Dockerfile\n"
    )
    assert capture.diff("diffbox")[1].diff == rendered.diff
    # When the container is stopped (kept because it has changes), the diff is the same
    ca_bundle_manager.stop(info.name)
    assert capture.diff("diffbox")[1].diff == rendered.diff
    # And the command line prints the same diff, and the credential as a note on stderr
    result = gpudev(
        "diff",
        "diffbox",
        f"--root-dir={ca_bundle_manager.root_dir}",
        f"--DevContainers.state_dir={tmp_path / 'state'}",
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout == rendered.diff
    assert "note: /root/.ssh/id_ed25519: looks like a credential, not copied" in result.stderr


def test_lifecycle_commands_are_part_of_the_baseline(
    ca_bundle_manager: DevContainers, docker_client: docker.DockerClient
) -> None:
    # Given an environment whose postCreateCommand installs a package and writes a file
    folder = ca_bundle_manager.root_dir / ".devcontainer" / "lifecycle"
    folder.mkdir(parents=True)
    (folder / "devcontainer.json").write_text(
        json.dumps(
            {
                "image": "gpudev-python:bookworm",
                "postCreateCommand": "python3 -m venv /opt/tools && touch /etc/from-lifecycle",
            }
        )
    )
    ca_bundle_manager.start(StartRequest(environment="lifecycle", name="lifebox"))
    capture = ChangeCapture(ca_bundle_manager)
    # Then what the environment's own commands did is not a change
    captured, rendered = capture.diff("lifebox")
    assert rendered.diff == "", rendered.diff
    # And a user's change after them is
    sh(docker_client, "lifebox", "echo tuned > /etc/from-user")
    captured, rendered = capture.diff("lifebox")
    assert captured.changes.files.kept == ["/etc/from-user"]
    assert rendered.created  # the environment had only an image: a new Dockerfile FROM it
    assert "+FROM gpudev-python:bookworm\n" in rendered.diff
    # And an unknown container is a clear error
    result = gpudev(
        "diff",
        "nobox",
        f"--root-dir={ca_bundle_manager.root_dir}",
        f"--DevContainers.state_dir={ca_bundle_manager.state_dir}",
    )
    assert result.returncode == 2
    assert "No dev container named 'nobox'" in result.stderr


def test_commit_write_patches_the_dockerfile_and_the_rebuilt_image_has_the_changes(
    ca_bundle_manager: DevContainers, docker_client: docker.DockerClient, tmp_path: Path
) -> None:
    # Given a dev container with an uninstalled base package, an edited and a new /etc file,
    # and a config file whose content is a private key
    ca_bundle_manager.start(StartRequest(environment="diff", name="writebox"))
    sh(
        docker_client,
        "writebox",
        "python3 -m pip uninstall -y -q --break-system-packages gpudevbase && "
        "echo 'Welcome to the GPU box' >> /etc/motd && "
        "mkdir -p /etc/tool && echo 'threads = 4' > /etc/tool/tool.conf && "
        "printf '%s\\n' '-----BEGIN RSA PRIVATE KEY-----' > /etc/tool/settings.conf",
    )
    folder = ca_bundle_manager.root_dir / ".devcontainer" / "diff"
    before = (folder / "Dockerfile").read_text()
    # When `jupyter gpudev commit --write` runs
    args = (
        f"--root-dir={ca_bundle_manager.root_dir}",
        f"--DevContainers.state_dir={tmp_path / 'state'}",
    )
    result = gpudev("commit", "writebox", "--write", *args)
    assert result.returncode == 0, result.stderr
    # Then the Dockerfile is patched, the previous one kept, the files copied into the context
    after = (folder / "Dockerfile").read_text()
    assert after.startswith(before)
    assert (folder / "Dockerfile.prev").read_text() == before
    assert "pip uninstall -y --break-system-packages gpudevbase" in after
    copied = folder / "gpudev-context" / "writebox" / "files" / "etc"
    assert (copied / "tool" / "tool.conf").read_text() == "threads = 4\n"
    assert (copied / "motd").read_text().endswith("Welcome to the GPU box\n")
    # And the file holding a key is left out and reported
    assert not (copied / "tool" / "settings.conf").exists()
    assert "/etc/tool/settings.conf: looks like a credential, not copied" in result.stderr
    # And a diff right after, on the unchanged container, is empty
    again = gpudev("diff", "writebox", *args)
    assert again.returncode == 0, again.stderr
    assert again.stdout == ""
    assert "No changes in writebox" in again.stderr
    # When a later change is committed too, the first commit's files stay in the context
    sh(docker_client, "writebox", "echo 'later' > /etc/tool/later.conf")
    second = gpudev("commit", "writebox", "--write", *args)
    assert second.returncode == 0, second.stderr
    assert (copied / "tool" / "tool.conf").read_text() == "threads = 4\n"
    assert (copied / "tool" / "later.conf").read_text() == "later\n"
    # When the environment is started again, its image is rebuilt from the patched Dockerfile
    ca_bundle_manager.start(StartRequest(environment="diff", name="rebuilt"))
    out = sh(
        docker_client,
        "rebuilt",
        "cat /etc/tool/tool.conf /etc/tool/later.conf /etc/motd; "
        "python3 -c 'import gpudevbase' 2>&1 || true",
    )
    # Then the rebuilt container has the changes
    assert "threads = 4" in out
    assert "later" in out
    assert "Welcome to the GPU box" in out
    assert "No module named 'gpudevbase'" in out
    # And the key file left out is still an uncommitted change: no removal without force
    with pytest.raises(Conflict, match=r"settings\.conf"):
        ca_bundle_manager.remove("writebox")


def test_commit_write_of_an_image_only_environment_creates_its_dockerfile(
    ca_bundle_manager: DevContainers, docker_client: docker.DockerClient
) -> None:
    # Given an environment with only an image, and a changed container of it
    folder = ca_bundle_manager.root_dir / ".devcontainer" / "plain"
    folder.mkdir(parents=True)
    (folder / "devcontainer.json").write_text(
        '{\n  // an image, no Dockerfile\n  "image": "gpudev-python:bookworm",\n'
        '  "containerEnv": {"LANGUAGE": "en"}\n}\n'
    )
    ca_bundle_manager.start(StartRequest(environment="plain", name="plainbox"))
    sh(docker_client, "plainbox", "echo 'set -o vi' > /etc/inputrc.local")
    ca_bundle_manager.stop("plainbox")
    # When the changes of the stopped container are written
    written = ChangeCapture(ca_bundle_manager).write("plainbox")
    # Then a Dockerfile FROM the image is created and devcontainer.json builds it instead
    assert written.rendered.created
    assert (folder / "Dockerfile").read_text().startswith("FROM gpudev-python:bookworm\n")
    copied = folder / "gpudev-context" / "plainbox" / "files" / "etc" / "inputrc.local"
    assert copied.read_text() == "set -o vi\n"
    config = json.loads((folder / "devcontainer.json").read_text())
    assert config == {"build": {"dockerfile": "Dockerfile"}, "containerEnv": {"LANGUAGE": "en"}}
    assert "// an image" in (folder / "devcontainer.json.prev").read_text()
    env = ca_bundle_manager.environments.get("plain", ca_bundle_manager.root_dir)
    assert env.build is not None
    assert env.build.dockerfile == (folder / "Dockerfile").resolve()
    # And, everything committed, it can be removed without force
    ca_bundle_manager.remove("plainbox")


def test_the_command_line_lists_the_changes_and_commits_some_of_them(
    ca_bundle_manager: DevContainers, docker_client: docker.DockerClient
) -> None:
    # Given a dev container with two new files (and the variable its environment sets)
    ca_bundle_manager.start(StartRequest(environment="diff", name="cherrybox"))
    sh(docker_client, "cherrybox", "echo one > /etc/one.conf && echo two > /etc/two.conf")
    args = (
        f"--root-dir={ca_bundle_manager.root_dir}",
        f"--DevContainers.state_dir={ca_bundle_manager.state_dir}",
    )
    # When its diff is asked for as JSON
    listed = gpudev("diff", "cherrybox", "--json", *args)
    assert listed.returncode == 0, listed.stderr
    # Then each change is an item with its id, kind, label and detail
    items = json.loads(listed.stdout)["items"]
    assert [i["id"] for i in items] == [
        "file:/etc/one.conf",
        "file:/etc/two.conf",
        "env:MY_SETTING",
    ]
    assert items[2] == {
        "id": "env:MY_SETTING",
        "kind": "env",
        "label": "MY_SETTING=on",
        "detail": "environment variable",
    }
    # When the diff leaves one file out, it is not in the diff, and listed as left out
    shown = gpudev("diff", "cherrybox", "--exclude", "file:/etc/two.conf", *args)
    assert shown.returncode == 0, shown.stderr
    assert "/etc/one.conf" in shown.stdout
    assert "two.conf" not in shown.stdout
    assert "  - file:/etc/two.conf" in shown.stderr
    assert "  + file:/etc/one.conf" in shown.stderr
    # When an id is not one, it is refused naming it
    bad = gpudev("commit", "cherrybox", "--exclude", "two.conf", *args)
    assert bad.returncode == 2
    assert "Not a change id: 'two.conf'" in bad.stderr
    # When the commit is written without the second file and the variable
    dockerfile = ca_bundle_manager.root_dir / ".devcontainer" / "diff" / "Dockerfile"
    before = dockerfile.read_text()
    written = gpudev(
        "commit",
        "cherrybox",
        "--write",
        "--exclude",
        "file:/etc/two.conf",
        "--exclude=env:MY_SETTING",
        *args,
    )
    assert written.returncode == 0, written.stderr
    assert "left out, still uncommitted: file:/etc/two.conf, env:MY_SETTING" in written.stderr
    # Then only the first file is written
    added = dockerfile.read_text()[len(before) :]
    assert "/etc/one.conf" in added
    assert "two.conf" not in added
    assert "MY_SETTING" not in added
    context = dockerfile.parent / "gpudev-context" / "cherrybox" / "files" / "etc"
    assert (context / "one.conf").exists()
    assert not (context / "two.conf").exists()
    # And the next diff has the two changes left out, and only them
    again = gpudev("diff", "cherrybox", "--json", *args)
    assert [i["id"] for i in json.loads(again.stdout)["items"]] == [
        "file:/etc/two.conf",
        "env:MY_SETTING",
    ]
    # When every change is left out, the commit writes nothing
    nothing = gpudev(
        "commit",
        "cherrybox",
        "--write",
        "--exclude=file:/etc/two.conf",
        "--exclude=env:MY_SETTING",
        "--json",
        *args,
    )
    assert nothing.returncode == 0, nothing.stderr
    result = json.loads(nothing.stdout)
    assert result["empty"] is True
    assert result["written"] is None
    assert result["held"] == ["file:/etc/two.conf", "env:MY_SETTING"]
    assert dockerfile.read_text() == before + added
    # And the container cannot be removed without force: the variable is not committed
    ca_bundle_manager.stop("cherrybox")
    removal = gpudev("rm", "cherrybox", *args)
    assert removal.returncode == Conflict.exit_code
    assert "2 uncommitted change(s) (e.g. /etc/two.conf, env:MY_SETTING)" in removal.stderr
    with pytest.raises(Conflict) as refused:
        ca_bundle_manager.remove("cherrybox")
    assert "env:MY_SETTING" in refused.value.details["changes"]
