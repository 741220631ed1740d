"""A dedicated container's first kernel starts with the container (``kernels.first``), not by
an exec after it, on the real engine: what it is told reaches it through the container's
input only, and it is a kernel like any other (folder, environment, wrappers, interrupt,
restart, its GPUs leased throughout, shut down and released)."""

from __future__ import annotations

import asyncio
import contextlib
import json
import time
from collections.abc import AsyncIterator, Iterator
from typing import Any

import docker
import pytest
from jupyter_client.manager import AsyncKernelManager

from jupyter_gpudev.changes.capture import ChangeCapture
from jupyter_gpudev.changes.commit import CommitOptions, Committer
from jupyter_gpudev.containers import DevContainers, docker_name
from jupyter_gpudev.containers.commandlog import LOG, SHIMS
from jupyter_gpudev.containers.targets import attach_input
from jupyter_gpudev.engine import HostPool
from jupyter_gpudev.kernels import provisioner
from jupyter_gpudev.kernels.first import (
    LAUNCHER,
    FirstKernel,
    instructions,
    launcher_in_proc,
    pin_launcher,
)
from jupyter_gpudev.kernels.process import (
    FIRST_HANDLE,
    FIRST_LISTED,
    FIRST_RUNNING,
    IMAGE_KERNELSPECS,
    TOP_COLUMNS,
    ContainerProcesses,
    first_handle,
    first_launcher,
)
from jupyter_gpudev.labels import L_OWNER
from tests.integration.test_kernels import A100_1, kernel_manager, run
from tests.leaks import Baseline, assert_nothing_leaked

pytestmark = pytest.mark.integration

IMAGE = "gpudev-python:bookworm"


@pytest.fixture
def manager(manager: DevContainers) -> Iterator[DevContainers]:
    (manager.root_dir / "notebooks").mkdir()
    provisioner.set_manager(manager)
    yield manager
    provisioner.set_manager(None)


def output(container: Any, argv: list[str]) -> bytes:
    _, out = container.exec_run(argv)
    assert isinstance(out, bytes)
    return out


@contextlib.asynccontextmanager
async def running_kernel(
    manager: DevContainers, name: str = "gpudev-default", *, now: bool = True
) -> AsyncIterator[tuple[AsyncKernelManager, Any]]:
    """A kernel of ``name`` started and answering, and its client; shut down after."""
    km = kernel_manager(manager, name)
    await km.start_kernel()
    client = km.client()
    client.start_channels()
    try:
        await client.wait_for_ready(timeout=60)
        yield km, client
    finally:
        client.stop_channels()
        await km.shutdown_kernel(now=now)


async def learn_the_image_kernel(manager: DevContainers, name: str) -> None:
    """One kernel of the image started (by an exec, the first time in this process): its
    kernel command is then known, and the next dedicated container starts with its kernel."""
    km = kernel_manager(manager, name)
    await km.start_kernel()
    await km.shutdown_kernel(now=True)


async def test_a_dedicated_kernel_starts_with_its_container_and_behaves_as_any_kernel(
    manager: DevContainers, docker_client: docker.DockerClient, gpu_engine: None
) -> None:
    # Given an environment with one GPU whose image's kernel command is known
    folder = manager.root_dir / ".devcontainer" / "gpu"
    folder.mkdir(parents=True)
    (folder / "devcontainer.json").write_text(
        json.dumps({"image": IMAGE, "hostRequirements": {"gpu": True}})
    )
    await learn_the_image_kernel(manager, "gpudev-gpu")
    # When its kernel starts from a notebook in notebooks/, with the server's environment
    km = kernel_manager(manager, "gpudev-gpu")
    await km.start_kernel(
        cwd=str(manager.root_dir / "notebooks"),
        env={"JPY_SESSION_NAME": "/n/notebooks/a b.ipynb", "SERVER_SECRET": "not-for-kernels"},
    )
    name = f"kernel-{km.kernel_id}"
    container = docker_client.containers.get(docker_name(name))
    client = km.client()
    client.start_channels()
    try:
        await client.wait_for_ready(timeout=60)
        # Then the container's own command started it: no exec into the container
        config = container.attrs["Config"]
        assert config["Cmd"][:3] == ["/bin/sh", "-c", LAUNCHER]
        assert config["OpenStdin"] is True
        assert not docker_client.containers.get(str(container.id)).attrs.get("ExecIDs")
        # And the key reached it through the input only: never in the configuration
        key = km.session.key.decode()
        assert key not in json.dumps(config)
        # And it is a kernel as an exec'd one is: the notebook's folder, only what the kernel
        # needs of the server's environment, the leased GPU, the wrappers first on PATH
        out, reply = await run(
            client,
            "import os, shutil, subprocess\n"
            "subprocess.run(['apt-get', '--version'], capture_output=True)\n"
            "print(os.getcwd(), os.environ.get('JPY_SESSION_NAME'), "
            "os.environ.get('SERVER_SECRET'), os.environ['NVIDIA_VISIBLE_DEVICES'], "
            "shutil.which('apt-get'), sep='|')\n"
            "print(open(f'/proc/{os.getppid()}/cmdline', 'rb').read().split(b'\\0')[2][:20])",
        )
        assert reply["status"] == "ok", reply
        first, parent = out.strip().split("\n")
        cwd, session, leaked, visible, apt = first.split("|")
        assert cwd == f"/workspaces/{manager.root_dir.name}/notebooks"
        assert session == "/n/notebooks/a b.ipynb"
        assert leaked == "None"
        assert visible == A100_1
        assert apt == f"{SHIMS}/apt-get"
        assert parent == repr(FIRST_RUNNING.encode()[:20])  # the launcher's child
        logged = output(container, ["cat", LOG])
        assert b"apt-get --version" in logged
        lease = manager.ledger.for_container("local", name)
        assert lease is not None
        assert lease.gpu_uuids == (A100_1,)
        # When a long cell is interrupted
        sleeping = client.execute("import time; time.sleep(60)")
        await asyncio.sleep(1)
        await km.interrupt_kernel()
        while True:
            msg = await client.get_iopub_msg(timeout=10)
            if msg["msg_type"] == "error":
                assert msg["content"]["ename"] == "KeyboardInterrupt"
                break
        while (await client.get_shell_msg(timeout=10))["parent_header"].get("msg_id") != sleeping:
            pass
        await asyncio.sleep(0.5)
        await run(client, "x = 42")
        # And the kernel is restarted
        await km.restart_kernel()
        await client.wait_for_ready(timeout=60)
        # Then a new kernel runs in the same container (an exec now), the GPU still leased
        out, reply = await run(client, "import socket; print('x' in dir(), socket.gethostname())")
        assert reply["status"] == "ok", reply
        assert out.split() == ["False", config["Hostname"]]
        assert docker_client.containers.get(str(container.id)).attrs.get("ExecIDs")
        assert manager.ledger.for_container("local", name) == lease
    finally:
        client.stop_channels()
        await km.shutdown_kernel()
    # And at shutdown its GPU is freed and the unchanged container removed
    assert manager.ledger.active("local") == []
    with pytest.raises(docker.errors.NotFound):
        docker_client.containers.get(str(container.id))


async def test_an_environment_with_lifecycle_commands_starts_its_kernel_by_an_exec(
    manager: DevContainers, docker_client: docker.DockerClient
) -> None:
    # Given an environment whose postStartCommand must run before any kernel
    folder = manager.root_dir / ".devcontainer" / "hooks"
    folder.mkdir(parents=True)
    (folder / "devcontainer.json").write_text(
        json.dumps({"image": IMAGE, "postStartCommand": "touch /tmp/started"})
    )
    await learn_the_image_kernel(manager, "gpudev-hooks")
    async with running_kernel(manager, "gpudev-hooks") as (km, client):
        # Then the container runs the keep-alive command, and the kernel sees the command's file
        container = docker_client.containers.get(docker_name(f"kernel-{km.kernel_id}"))
        assert LAUNCHER not in container.attrs["Config"]["Cmd"]
        out, _ = await run(client, "import os; print(os.path.exists('/tmp/started'))")
        assert out.strip() == "True"


def test_the_launcher_notes_its_kernel_exit_and_keeps_the_container_up(
    docker_client: docker.DockerClient,
) -> None:
    # Given a container made with the launcher, its input attached, told to run a command
    # that fails
    first = FirstKernel("kernel-t", lambda *_: b"")
    container = docker_client.containers.create(
        IMAGE, list(first.command(("sleep", "infinity"))), stdin_open=True, init=True
    )
    try:
        given = attach_input(container)
        assert given is not None
        container.start()
        handle = first_handle(pin_launcher(container))  # before it is told anything
        assert handle != FIRST_HANDLE
        # (read from this machine's /proc, the launcher the engine lists)
        assert pin_launcher(container, local=True) == first_launcher(handle)
        init = int(docker_client.api.inspect_container(str(container.id))["State"]["Pid"])
        assert launcher_in_proc(init, str(container.id)) == first_launcher(handle)
        assert launcher_in_proc(init, "0" * 64) is None  # (another container's id)
        told = instructions(
            connection={"key": "k3y"},
            runtime_id="kernel-t",
            workdir="/tmp",
            environment={"ANSWER": "42"},
            argv=["/bin/sh", "-c", 'echo "$ANSWER $(pwd)"; sleep 1; exit 3'],
        )
        given.deliver(told)
        processes = ContainerProcesses(HostPool().get("local"), container)
        # Then the kernel runs while the launcher is listed, with its host PID known
        assert processes.watch_start(lambda: processes.exit_code(handle, "kernel-t"), 0) is None
        assert processes.exit_code(handle, "kernel-t") is None
        assert processes.host_pid(handle) is not None
        # And when it ends, its exit code is the one the launcher wrote
        deadline = time.monotonic() + 20
        code = None
        while code is None and time.monotonic() < deadline:
            time.sleep(0.2)
            code = processes.exit_code(handle, "kernel-t")
        assert code == 3
        # And its output went to its log, its connection file is its user's only
        assert processes.log_tail("kernel-t") == ["42 /tmp"]
        mode = output(container, ["stat", "-c", "%a", "/tmp/.gpudev/kernel-t.json"])
        assert mode.strip() == b"600"
        # And the container still runs the keep-alive command
        container.reload()
        assert container.status == "running"
        rows = docker_client.api.top(str(container.id), ps_args="-o pid,args")["Processes"]
        assert "sleep infinity" in [row[1] for row in rows]
        # And the launcher's environment never held the connection
        assert b"k3y" not in output(container, ["cat", "/proc/1/environ"])
    finally:
        container.remove(force=True)


def test_a_launcher_given_nothing_only_keeps_the_container_up(
    docker_client: docker.DockerClient,
) -> None:
    first = FirstKernel("kernel-t", lambda *_: b"")
    container = docker_client.containers.create(
        IMAGE, list(first.command(("sleep", "infinity"))), stdin_open=True, init=True
    )
    try:
        given = attach_input(container)
        assert given is not None
        container.start()
        given.deliver(b"")
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline:
            rows = docker_client.api.top(str(container.id), ps_args="-o pid,args")["Processes"]
            if "sleep infinity" in [row[1] for row in rows]:
                break
            time.sleep(0.1)
        assert "sleep infinity" in [row[1] for row in rows]
        assert not any(row[1].startswith(FIRST_LISTED) for row in rows)
    finally:
        container.remove(force=True)


async def test_a_snapshot_of_a_first_kernels_container_has_its_images_command(
    manager: DevContainers, docker_client: docker.DockerClient
) -> None:
    # Given a dedicated container whose kernel started with it, and a change made from it
    await learn_the_image_kernel(manager, "gpudev-default")
    async with running_kernel(manager) as (km, client):
        name = f"kernel-{km.kernel_id}"
        container = docker_client.containers.get(docker_name(name))
        assert container.attrs["Config"]["Cmd"][2] == LAUNCHER
        _, reply = await run(
            client,
            "import subprocess; subprocess.run(['pip', '--version'], capture_output=True)\n"
            "open('/etc/first.conf', 'w').write('first\\n')",
        )
        assert reply["status"] == "ok", reply
        # When its changes are shown and committed as a snapshot
        capture = ChangeCapture(manager)
        _, diff = capture.diff(name)
        result = Committer(capture, manager.registries).commit(
            name, CommitOptions(snapshot="gpudev-test/first:v1")
        )
    # Then the diff has the change and the logged command, not the launcher
    rendered = diff.diff + "\n".join(diff.files)
    assert "/etc/first.conf" in rendered
    assert "pip --version" in rendered
    assert "gpudev-kernel" not in rendered
    # And the snapshot has the change, with the image's command and no open input
    assert result.snapshot is not None
    config = docker_client.images.get("gpudev-test/first:v1").attrs["Config"]
    assert config["Cmd"] == docker_client.images.get(IMAGE).attrs["Config"]["Cmd"]
    assert not config.get("OpenStdin")
    out = docker_client.containers.run(
        "gpudev-test/first:v1", ["cat", "/etc/first.conf"], remove=True
    )
    assert out == b"first\n"
    docker_client.images.remove("gpudev-test/first:v1")


def test_a_kernel_command_read_in_one_owners_container_is_never_anothers(
    docker_client: docker.DockerClient,
) -> None:
    # Given two containers of one image, alice's and bob's (shared mode: the service's one
    # process starts both users' kernels), and alice changed the image's kernelspec in hers
    host = HostPool().get("local")
    made = []
    try:
        for owner in ("alice", "bob"):
            made.append(
                docker_client.containers.run(
                    IMAGE,
                    ["sleep", "60"],
                    detach=True,
                    init=True,
                    labels={L_OWNER: owner},
                )
            )
        alice, bob = made
        spec = '{"argv": ["sh", "-c", "echo owned > /tmp/owned", "{connection_file}"]}'
        code, _ = alice.exec_run(
            [
                "sh",
                "-c",
                f"for f in {' '.join(IMAGE_KERNELSPECS)}; do "
                f"mkdir -p $(dirname $f) && printf '%s' '{spec}' > $f; done",
            ],
            user="root",
        )
        assert code == 0
        # When alice's kernel command is looked up first, then bob's
        alices = ContainerProcesses(host, docker_client.containers.get(str(alice.id)))
        assert alices.kernel_argv()[:2] == ["sh", "-c"]
        bobs = ContainerProcesses(host, docker_client.containers.get(str(bob.id)))
        # Then bob's is read in his own container: the image's, not alice's
        assert bobs.kernel_argv()[:2] != ["sh", "-c"]
    finally:
        for container in made:
            container.remove(force=True)


async def test_a_kept_first_kernel_container_resumes_with_its_keep_alive_command(
    manager: DevContainers, docker_client: docker.DockerClient
) -> None:
    # Given a dedicated container whose kernel started with it, with a change: kept at shutdown
    await learn_the_image_kernel(manager, "gpudev-default")
    async with running_kernel(manager, now=False) as (km, client):
        name = f"kernel-{km.kernel_id}"
        _, reply = await run(client, "open('/etc/kept.conf', 'w').write('kept')")
        assert reply["status"] == "ok", reply
    container = docker_client.containers.get(docker_name(name))
    assert container.status == "exited"
    # When it is started again (the panel's or the command line's start), with nothing told
    manager.resume(name)
    # Then its command only keeps it up: no launcher left waiting on its input
    deadline = time.monotonic() + 10
    while True:
        rows = docker_client.api.top(str(container.id), ps_args="-o pid,args")["Processes"]
        if "sleep infinity" in [row[1] for row in rows] or time.monotonic() > deadline:
            break
        await asyncio.sleep(0.1)
    assert "sleep infinity" in [row[1] for row in rows]
    assert not any(row[1].startswith(FIRST_LISTED) for row in rows)
    manager.remove(name, force=True)


async def test_an_image_with_an_entrypoint_starts_its_kernel_by_an_exec(
    manager: DevContainers, docker_client: docker.DockerClient
) -> None:
    # Given an environment whose image has an ENTRYPOINT (it could read the container's input,
    # or run its command late)
    folder = manager.root_dir / ".devcontainer" / "entry"
    folder.mkdir(parents=True)
    (folder / "Dockerfile").write_text(
        f'FROM {IMAGE}\nENTRYPOINT ["/bin/sh", "-c", "sleep 0.5; exec \\"$@\\"", "entry"]\n'
    )
    (folder / "devcontainer.json").write_text(json.dumps({"build": {"dockerfile": "Dockerfile"}}))
    await learn_the_image_kernel(manager, "gpudev-entry")
    # When its kernel starts
    async with running_kernel(manager, "gpudev-entry") as (km, client):
        # Then the container runs its usual command and the kernel works
        container = docker_client.containers.get(docker_name(f"kernel-{km.kernel_id}"))
        assert LAUNCHER not in container.attrs["Config"]["Cmd"]
        out, _ = await run(client, "print(6 * 7)")
        assert out.strip() == "42"


#: An image whose ``/bin/sh`` has no builtin ``printf`` (bash with it disabled after the
#: script's first line, so that gpudev's launcher is listed as usual), and whose ``printf``
#: program notes every argument it is given.
NO_BUILTIN_PRINTF = {
    "Dockerfile": f"""FROM {IMAGE}
COPY sh /tmp/sh
COPY printf /tmp/printf
RUN chmod 755 /tmp/sh /tmp/printf && mv /usr/bin/printf /usr/bin/printf.real \\
 && mv /tmp/printf /usr/bin/printf && rm /bin/sh && mv /tmp/sh /bin/sh
""",
    "sh": """#!/bin/bash
if [ "$1" = -c ] && [ $# -ge 2 ]; then
  s=$2; shift 2
  nl=$'\\n'
  case $s in
    *"$nl"*) s="${s%%"$nl"*}${nl}enable -n printf${nl}${s#*"$nl"}" ;;
    *) s="enable -n printf${nl}$s" ;;
  esac
  exec -a /bin/sh /bin/bash -c "$s" "$@"
fi
exec -a /bin/sh /bin/bash "$@"
""",
    "printf": """#!/bin/bash
echo "$*" >> /tmp/printf-args
exec /usr/bin/printf.real "$@"
""",
}


async def test_a_kernel_key_is_never_an_argument_where_the_shell_has_no_builtin_printf(
    manager: DevContainers, docker_client: docker.DockerClient
) -> None:
    # Given an image whose /bin/sh has no builtin printf: a program's arguments are seen by
    # every account of the host (/proc/PID/cmdline)
    folder = manager.root_dir / ".devcontainer" / "noprintf"
    folder.mkdir(parents=True)
    for file, text in NO_BUILTIN_PRINTF.items():
        (folder / file).write_text(text)
    (folder / "devcontainer.json").write_text(json.dumps({"build": {"dockerfile": "Dockerfile"}}))
    for launched in (False, True):  # the first by an exec, the second by the launcher
        # When a kernel starts in it
        async with running_kernel(manager, "gpudev-noprintf") as (km, client):
            container = docker_client.containers.get(docker_name(f"kernel-{km.kernel_id}"))
            assert bool(container.attrs.get("ExecIDs")) is not launched
            out, _ = await run(client, "print(6 * 7)")
            assert out.strip() == "42"
            # Then its key was never given to a program as an argument
            noted = output(container, ["sh", "-c", "cat /tmp/printf-args 2>/dev/null; true"])
            assert km.session.key not in noted
            assert b"sha256" not in noted  # (the connection's signature scheme)


#: A cell of a hostile user: a childless process that lists itself as the launcher
#: (``/bin/sh -c "#gpudev-kernel-running..."``, a Python running a comment and a sleep), in a
#: session of its own; it is left a child of the container's init once the kernel is gone.
DECOY = (
    "import subprocess, sys\n"
    "decoy = subprocess.Popen(\n"
    "    ['/bin/sh', '-c', '#gpudev-kernel-running\\nimport time; time.sleep(600)'],\n"
    "    executable=sys.executable, start_new_session=True, stdin=subprocess.DEVNULL,\n"
    "    stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,\n"
    ")\n"
    "print(decoy.pid)\n"
)


async def test_a_decoy_launcher_neither_keeps_a_dead_first_kernel_alive_nor_stalls_its_pid(
    manager: DevContainers, docker_client: docker.DockerClient
) -> None:
    # Given a dedicated container whose kernel started with it
    await learn_the_image_kernel(manager, "gpudev-default")
    baseline = Baseline.take(docker_client, ignore_removed=True)
    async with running_kernel(manager) as (km, client):
        container = docker_client.containers.get(docker_name(f"kernel-{km.kernel_id}"))
        init = container.attrs["State"]["Pid"]
        gpudev = km.provisioner
        assert isinstance(gpudev, provisioner.GPUDevProvisioner)
        handle = gpudev._exec_id
        # When its user starts a process that lists itself as the launcher
        _, reply = await run(client, DECOY)
        assert reply["status"] == "ok", reply
        ps_args = f"-o pid,ppid,args --cols {TOP_COLUMNS}"
        rows = docker_client.api.top(str(container.id), ps_args=ps_args)["Processes"]
        marked = {int(row[0]): int(row[1]) for row in rows if row[2].startswith(FIRST_LISTED)}
        launcher = next(pid for pid, parent in marked.items() if parent == init)
        assert len(marked) == 2  # the launcher and the decoy (a child of the kernel)
        # And the kernel exits
        client.execute("import os; os._exit(7)")
        # Then the kernel is seen ended, with its code, within a few seconds
        deadline = time.monotonic() + 5
        while await km.is_alive():
            assert time.monotonic() < deadline, "the decoy kept the ended kernel alive"
            await asyncio.sleep(0.1)
        assert await gpudev.poll() == 7
        # And the decoy runs on, a child of init: only the launcher pinned at the start counted
        rows = docker_client.api.top(str(container.id), ps_args=ps_args)["Processes"]
        decoys = [row for row in rows if row[2].startswith(FIRST_LISTED)]
        assert [int(row[1]) for row in decoys] == [init]
        assert int(decoys[0][0]) != launcher
        assert handle == f"{FIRST_HANDLE}:{launcher}"
        # And the kernel's host PID is looked up once, never waited for, by this handle or
        # by an earlier version's (a restarted server reaching the kernel again)
        for looked_up in (handle, FIRST_HANDLE):
            processes = ContainerProcesses(HostPool().get("local"), container)
            started = time.monotonic()
            assert processes.host_pid(looked_up) is None
            assert time.monotonic() - started < 1
    assert_nothing_leaked(docker_client, baseline, server_id=manager.server_id)
