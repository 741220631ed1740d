"""Content inside a dev container is untrusted: reading its packages runs none of its programs.

A user of a dev container (or anything it installed) can replace the programs and
interpreters a package probe would run, plant a virtual environment whose ``bin/python`` is a
script, and point ``PATH`` (``containerEnv``) at a folder of their own. Looking at the
container's changes (the baseline after the lifecycle commands, ``diff`` of a running and a
stopped container, ``commit --write``) must run none of them as root, and still see what the
user installed with apt and pip.
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
from tests.integration.test_diff import sh

pytestmark = pytest.mark.integration

WORKSPACE = "/srv/bnd-probe-ws"
MARKERS = f"{WORKSPACE}/markers"


def trap(name: str, real: str | None = None) -> str:
    """A program that leaves a marker in the workspace when root runs it (but for the test's
    own commands, which set BND_PROBE_SELF), then does what ``real`` does."""
    then = f'exec {real} "$@"' if real else "exit 0"
    return (
        "#!/bin/sh\n"
        f'[ "$(/usr/bin/id -u)" = 0 ] && [ -z "$BND_PROBE_SELF" ] && '
        f"/usr/bin/touch {MARKERS}/{name}\n"
        f"{then}\n"
    )


def plant_script() -> str:
    """What a user can do in a container: planted venvs (in the workspace, under /opt), a
    replaced dpkg-query, and look-alikes of the probe's programs in a folder on PATH."""
    files = {
        f"{WORKSPACE}/venv/pyvenv.cfg": "home = /usr/bin\nversion = 3.11.2\n",
        f"{WORKSPACE}/venv/bin/python": trap("workspace-venv-python", "/usr/bin/python3"),
        "/opt/bnd-probe-trap/pyvenv.cfg": "home = /usr/bin\nversion = 3.11.2\n",
        "/opt/bnd-probe-trap/bin/python": trap("opt-venv-python", "/usr/bin/python3"),
        "/usr/bin/dpkg-query": trap("usr-bin-dpkg-query", "/usr/bin/dpkg-query.real"),
        **{
            f"{WORKSPACE}/bin/{tool}": trap(f"path-{tool}", f"/usr/bin/{tool}")
            for tool in ("dpkg-query", "cat", "find", "sort")
        },
    }
    lines = [
        "set -e",
        f"mkdir -p {MARKERS} {WORKSPACE}/venv/bin {WORKSPACE}/bin /opt/bnd-probe-trap/bin",
        "chmod 777 " + MARKERS,
        "cp /usr/bin/dpkg-query /usr/bin/dpkg-query.real",
    ]
    for path, text in files.items():
        lines.append(f"cat > {path} <<'BND_EOF'\n{text}BND_EOF")
        if "/bin/" in path:
            lines.append(f"chmod 755 {path}")
    return "\n".join(lines) + "\n"


@pytest.fixture
def poisoned_path_manager(
    tmp_path: Path, dev_containers: Callable[..., DevContainers]
) -> DevContainers:
    """A manager of the environment ``bndprobe``: a PATH that puts the workspace's programs
    first, traps planted there by its own postCreateCommand, the host CA bundle mounted."""
    root = tmp_path / "work"
    folder = root / ".devcontainer" / "bndprobe"
    folder.mkdir(parents=True)
    (folder / "plant.sh").write_text(plant_script())
    poisoned = f"{WORKSPACE}/bin:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
    (folder / "devcontainer.json").write_text(
        json.dumps(
            {
                "image": "gpudev-python:bookworm",
                "workspaceFolder": WORKSPACE,
                "containerEnv": {"PATH": poisoned, "PYTHONSAFEPATH": ""},
                # The traps are planted by the environment's own command: the baseline
                # recorded right after it must not run them either.
                "postCreateCommand": f"/bin/sh {WORKSPACE}/.devcontainer/bndprobe/plant.sh",
            }
        )
    )
    config = Config()
    config.MountPolicy.mount_ca_bundle = True
    # An administrator may allow these in containerEnv: reading the packages must not care.
    config.EnvironmentManager.allowed_env_vars = ["PATH", "PYTHONSAFEPATH"]
    return dev_containers(root, config)


def as_user(docker_client: docker.DockerClient, name: str, script: str) -> str:
    return sh(docker_client, name, script, {"BND_PROBE_SELF": "1"})


CHANGES = """
set -e
apt-get update -qq
DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends cowsay >/dev/null
python3 -m venv --without-pip /opt/bnd-probe-real
python3 -m pip -q --python /opt/bnd-probe-real/bin/python install --no-cache-dir iniconfig==2.0.0
python3 -m pip install -q --no-cache-dir --break-system-packages packaging==24.1
"""


def test_reading_changes_runs_no_program_of_the_container(
    poisoned_path_manager: DevContainers, docker_client: docker.DockerClient, tmp_path: Path
) -> None:
    # Given a dev container whose lifecycle command planted venvs with a script as python, a
    # replaced dpkg-query and look-alikes on PATH, each leaving a marker when root runs it
    poisoned_path_manager.start(StartRequest(environment="bndprobe", name="bnd-probe-box"))
    markers = tmp_path / "work" / "markers"
    assert markers.is_dir()
    ran: dict[str, list[str]] = {}

    def what_ran(stage: str) -> None:  # the markers left since the last stage
        ran[stage] = sorted(p.name for p in markers.iterdir())
        for marker in markers.iterdir():
            marker.unlink()

    what_ran("baseline after the lifecycle command")
    # When the user installs a package with apt, and with pip into a new venv and the system
    as_user(docker_client, "bnd-probe-box", CHANGES)
    cowsay = as_user(
        docker_client, "bnd-probe-box", "/usr/bin/dpkg-query.real -W -f '${Version}' cowsay"
    )
    capture = ChangeCapture(poisoned_path_manager)
    captured, rendered = capture.diff("bnd-probe-box")
    what_ran("diff of the running container")
    # And it still reports the apt install, the new venv with its package and the pip install
    assert ("cowsay", cowsay) in captured.changes.apt.added
    envs = {p.env.prefix: p for p in captured.changes.python}
    assert envs["/opt/bnd-probe-real"].new_env
    assert [(d.name, d.version) for d in envs["/opt/bnd-probe-real"].added] == [
        ("iniconfig", "2.0.0")
    ]
    system = envs["/usr"]
    installed = {d.name: d.version for d in [*system.added, *(b for _, b in system.upgraded)]}
    assert installed == {"packaging": "24.1"}
    assert f"cowsay={cowsay}" in rendered.new_text
    assert "iniconfig==2.0.0" in rendered.new_text
    # When the container is stopped, its diff is the same
    poisoned_path_manager.stop("bnd-probe-box")
    assert capture.diff("bnd-probe-box")[1].diff == rendered.diff
    what_ran("diff of the stopped container")
    # When the changes are written, the next diff is empty
    capture.write("bnd-probe-box")
    assert capture.diff("bnd-probe-box")[1].diff == ""
    what_ran("commit --write")
    # Then at no point was any planted program run as root
    assert ran == {stage: [] for stage in ran}
