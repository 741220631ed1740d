"""Content inside a dev container is untrusted: what it does may not reach the host.

Each test first plays the attack against a real container on the real engine: root inside the
container leaving a setuid-root program (or a device node, or a file capability) in the host's
workspace, a devcontainer.json asking for the host's IPC namespace or setting PATH, LD_PRELOAD
or PYTHONPATH for every process; then checks that package installs as root still work in the
hardened container.
"""

from __future__ import annotations

import json
import os
import stat
import struct
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import docker
import pytest
from docker.models.containers import Container

from jupyter_gpudev.containers import DevContainers, StartRequest, docker_name
from jupyter_gpudev.errors import BadRequest
from tests.integration.conftest import remove_containers
from tests.integration.test_containers import IMAGE, make_manager

pytestmark = pytest.mark.integration

WORKSPACE = "/workspaces/work"
#: VFS_CAP_REVISION_2 | VFS_CAP_FLAGS_EFFECTIVE, permitted = CAP_SETUID: `setcap cap_setuid+ep`.
SETUID_FILE_CAP = struct.pack("<IIIII", 0x02000001, 1 << 7, 0, 0, 0)


@pytest.fixture
def root(tmp_path: Path) -> Path:
    folder = tmp_path / "work"
    folder.mkdir()
    return folder


@pytest.fixture
def managers(
    root: Path, tmp_path: Path, docker_client: docker.DockerClient
) -> Iterator[list[DevContainers]]:
    """Managers made by ``new``; their containers are removed afterwards."""
    made: list[DevContainers] = []
    yield made
    for manager in made:
        remove_containers(docker_client, manager)


def new(managers: list[DevContainers], root: Path, tmp_path: Path, **extra: Any) -> DevContainers:
    manager = make_manager(root, tmp_path / f"state{len(managers)}", gpus=False, **extra)
    managers.append(manager)
    return manager


def write_env(root: Path, name: str, spec: dict[str, Any]) -> None:
    folder = root / ".devcontainer" / name
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "devcontainer.json").write_text(json.dumps({"image": IMAGE, **spec}))


def as_root(container: Container, script: str) -> tuple[int, str]:
    code, output = container.exec_run(["/bin/sh", "-c", script], user="0", workdir=WORKSPACE)
    assert isinstance(output, bytes)
    return int(code or 0), output.decode(errors="replace")


def test_a_dev_container_starts_with_no_new_privileges_fewer_capabilities_and_a_pid_limit(
    managers: list[DevContainers], root: Path, tmp_path: Path, docker_client: docker.DockerClient
) -> None:
    # Given the default configuration
    manager = new(managers, root, tmp_path)
    # When a dev container starts
    manager.start(StartRequest(environment="default", name="bnd-ctr-hard"))
    container = docker_client.containers.get(docker_name("bnd-ctr-hard"))
    host_config = container.attrs["HostConfig"]
    # Then the engine shows no-new-privileges, gpudev's seccomp profile, the dropped
    # capabilities and the pid limit; nothing is added
    security = host_config.get("SecurityOpt") or []
    assert any(opt.startswith("no-new-privileges") for opt in security), security
    assert any(opt.startswith("seccomp=") for opt in security), security
    dropped = set(host_config.get("CapDrop") or [])
    assert {"MKNOD", "SETFCAP", "FSETID", "NET_RAW"} <= {c.removeprefix("CAP_") for c in dropped}
    assert not host_config.get("CapAdd")
    assert host_config["Privileged"] is False
    assert host_config["PidsLimit"] == 4096
    # And no memory or CPU limit unless the environment asks for one
    assert host_config["Memory"] == 0
    assert host_config["NanoCpus"] == 0
    # And every process in it, exec'd ones too, has no_new_privs set
    code, output = as_root(container, "grep NoNewPrivs /proc/self/status")
    assert (code, output.split()) == (0, ["NoNewPrivs:", "1"])


def test_container_root_cannot_leave_setuid_programs_devices_or_file_caps_in_the_workspace(
    managers: list[DevContainers], root: Path, tmp_path: Path, docker_client: docker.DockerClient
) -> None:
    # Given a running dev container and root inside it
    manager = new(managers, root, tmp_path)
    manager.start(StartRequest(environment="default", name="bnd-ctr-suid"))
    container = docker_client.containers.get(docker_name("bnd-ctr-suid"))
    # When root copies a shell into the host's workspace and makes it setuid and setgid, creates
    # one with a setuid mode directly, copies a setuid program preserving its mode, makes a
    # block device node and gives a program a file capability
    as_root(container, "cp /bin/sh x && chmod u+s x")
    as_root(container, "cp /bin/sh g && chmod g+s g")
    as_root(
        container,
        "python3 -c \"import os; os.close(os.open('o', os.O_CREAT | os.O_WRONLY, 0o4755))\"",
    )
    as_root(container, "cp -a /bin/su su")
    as_root(container, "mknod disk b 8 0")
    as_root(container, "cp /bin/sh cap")
    as_root(
        container,
        f"python3 -c \"import os; os.setxattr('cap', 'security.capability', {SETUID_FILE_CAP!r})\"",
    )
    # Then nothing in the workspace, seen from the host, is setuid, setgid, a device or has
    # a file capability
    found = {path.name: path.lstat() for path in root.iterdir()}
    assert "x" in found  # the copies themselves were allowed
    setid = [name for name, st in found.items() if st.st_mode & (stat.S_ISUID | stat.S_ISGID)]
    assert setid == []
    assert not [name for name, st in found.items() if stat.S_ISBLK(st.st_mode)]
    with pytest.raises(OSError):  # noqa: PT011 - ENODATA: no such attribute
        os.getxattr(root / "cap", "security.capability")


def test_apt_get_install_useradd_and_chown_as_root_still_work_when_hardened(
    managers: list[DevContainers], root: Path, tmp_path: Path, docker_client: docker.DockerClient
) -> None:
    # Given a hardened dev container
    manager = new(managers, root, tmp_path)
    manager.start(StartRequest(environment="default", name="bnd-ctr-apt"))
    container = docker_client.containers.get(docker_name("bnd-ctr-apt"))
    # When root installs a Debian package (apt drops to _apt to download), adds a user and
    # gives it a folder
    code, output = as_root(
        container,
        "apt-get update -qq && DEBIAN_FRONTEND=noninteractive "
        "apt-get install -y -qq --no-install-recommends cowsay >/dev/null && "
        "/usr/games/cowsay moo && useradd -m bnd && mkdir /srv/bnd && chown bnd:bnd /srv/bnd "
        "&& su bnd -s /bin/sh -c 'touch /srv/bnd/ok' && stat -c %U /srv/bnd/ok",
    )
    # Then it all works
    assert code == 0, output
    assert "moo" in output
    assert output.strip().splitlines()[-1] == "bnd"


def test_memory_and_cpu_limits_from_the_environment_within_the_administrators(
    managers: list[DevContainers], root: Path, tmp_path: Path, docker_client: docker.DockerClient
) -> None:
    # Given an environment asking for 512 MiB and 1.5 CPUs, and one asking for more memory
    # than the administrator's limit
    write_env(root, "small", {"customizations": {"gpudev": {"memory": "512m", "cpus": 1.5}}})
    write_env(root, "big", {"customizations": {"gpudev": {"memory": "64g"}}})
    manager = new(managers, root, tmp_path, DevContainers__memory_limit="1g")
    # When they start
    manager.start(StartRequest(environment="small", name="bnd-ctr-small"))
    manager.start(StartRequest(environment="big", name="bnd-ctr-big"))
    # Then the engine enforces the environment's limits, never more than the administrator's
    small = docker_client.containers.get(docker_name("bnd-ctr-small")).attrs["HostConfig"]
    assert (small["Memory"], small["NanoCpus"]) == (512 << 20, 1_500_000_000)
    big = docker_client.containers.get(docker_name("bnd-ctr-big")).attrs["HostConfig"]
    assert big["Memory"] == 1 << 30


def test_an_environment_cannot_widen_the_confinement(
    managers: list[DevContainers], root: Path, tmp_path: Path, docker_client: docker.DockerClient
) -> None:
    # Given environments asking for capabilities, privileges, devices or a looser profile
    for name, args in {
        "capadd": ["--cap-add=SYS_ADMIN"],
        "priv": ["--privileged"],
        "secopt": ["--security-opt", "no-new-privileges=false"],
        "device": ["--device=/dev/kmsg"],
        "pids": ["--pids-limit=-1"],
    }.items():
        write_env(root, name, {"runArgs": args})
    manager = new(managers, root, tmp_path)
    # When they start, each is refused and nothing is left behind
    for name in ("capadd", "priv", "secopt", "device", "pids"):
        with pytest.raises(BadRequest, match="is not allowed"):
            manager.start(StartRequest(environment=name, name=f"bnd-ctr-{name}"))
    assert not docker_client.containers.list(
        all=True, filters={"label": f"org.jupyter.gpudev.server={manager.server_id}"}
    )


def test_host_ipc_needs_the_administrators_opt_in(
    managers: list[DevContainers], root: Path, tmp_path: Path, docker_client: docker.DockerClient
) -> None:
    # Given a devcontainer.json asking for the host's IPC namespace (and /dev/shm)
    write_env(root, "ipc", {"runArgs": ["--ipc=host"]})
    # When it starts with the default configuration, it is refused, naming the trait
    with pytest.raises(BadRequest, match=r"c\.EnvironmentManager\.allow_host_ipc = True"):
        new(managers, root, tmp_path).start(StartRequest(environment="ipc", name="bnd-ctr-ipc"))
    with pytest.raises(docker.errors.NotFound):
        docker_client.containers.get(docker_name("bnd-ctr-ipc"))
    # And with the administrator's opt-in it starts in the host's IPC namespace
    allowed = new(managers, root, tmp_path, EnvironmentManager__allow_host_ipc=True)
    allowed.start(StartRequest(environment="ipc", name="bnd-ctr-ipc"))
    container = docker_client.containers.get(docker_name("bnd-ctr-ipc"))
    assert container.attrs["HostConfig"]["IpcMode"] == "host"


@pytest.mark.parametrize(
    "case",
    [
        ("PATH", "/workspaces/work/bin:/usr/bin:/bin"),
        ("LD_PRELOAD", "/workspaces/work/evil.so"),
        ("LD_LIBRARY_PATH", "/workspaces/work/lib"),
        ("PYTHONPATH", "/workspaces/work/hook"),
        ("PYTHONSTARTUP", "/workspaces/work/hook.py"),
    ],
)
def test_container_env_may_not_set_search_paths_or_preloads_unless_allowed(
    managers: list[DevContainers],
    root: Path,
    tmp_path: Path,
    docker_client: docker.DockerClient,
    case: tuple[str, str],
) -> None:
    variable, value = case
    # Given a devcontainer.json setting a variable that decides which code every process
    # (gpudev's own commands as root included) loads
    write_env(root, "envhook", {"containerEnv": {variable: value}})
    # When it starts, it is refused with a message naming the variable and the trait
    with pytest.raises(BadRequest) as caught:
        new(managers, root, tmp_path).start(StartRequest(environment="envhook", name="bnd-ctr-env"))
    assert f"containerEnv.{variable}" in caught.value.message
    assert "c.EnvironmentManager.allowed_env_vars" in caught.value.message
    with pytest.raises(docker.errors.NotFound):
        docker_client.containers.get(docker_name("bnd-ctr-env"))
    # And when the administrator allows it, it is set
    allowed = new(managers, root, tmp_path, EnvironmentManager__allowed_env_vars=[variable])
    allowed.start(StartRequest(environment="envhook", name="bnd-ctr-env"))
    env = docker_client.containers.get(docker_name("bnd-ctr-env")).attrs["Config"]["Env"]
    assert f"{variable}={value}" in env
