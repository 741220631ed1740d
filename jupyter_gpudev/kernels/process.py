"""One kernel process inside a dev container: started by one exec, found again by its runtime
files (``RUNTIME_DIR/<runtime id>.{json,pid,log}``), signalled through its pid file.

``ContainerProcesses`` is ``KernelProcesses`` (``kernels.runtime``) for a Docker container:
used by the provisioner (a kernel of the server) and by the warm pool (a kernel started ahead,
handed to the provisioner later, runtime files and all).
"""

from __future__ import annotations

import json
import shlex
import time
from collections.abc import Callable
from typing import Any, ClassVar

import docker.errors

from ..containers import DevContainers
from ..containers.commands import exec_user
from ..engine import Host
from ..engine.gpuprocs import PID_MAX
from ..labels import L_OWNER
from .placements import PLACEMENTS

#: Where a kernel's connection file and pid file live inside the container.
RUNTIME_DIR = "/tmp/.gpudev"  # noqa: S108 - inside the container, owned by the kernel's user
DEFAULT_ARGV = ["python3", "-m", "ipykernel_launcher", "-f", "{connection_file}"]
IMAGE_KERNELSPECS = (
    "/usr/local/share/jupyter/kernels/python3/kernel.json",
    "/usr/share/jupyter/kernels/python3/kernel.json",
    "/opt/conda/share/jupyter/kernels/python3/kernel.json",
)
PORT_NAMES = ("shell_port", "iopub_port", "stdin_port", "control_port", "hb_port")
#: Seconds between two checks of a kernel just started (an engine request each).
START_POLL = 0.02
#: The same for a first kernel (``kernels.first``): each check lists the container's processes,
#: which the engine does by running ``ps`` (about 10 ms).
FIRST_POLL = 0.1
#: Listings that must show neither a first kernel's launcher nor its end before it is taken
#: for gone.
FIRST_LOOKS = 3
#: The width of the engine's process listing a first kernel is watched through.
TOP_COLUMNS = 120
#: Seconds a first kernel's host PID is waited for while its launcher has not forked it, right
#: after its start (``watch_start``); a kernel reached again is looked up once.
FIRST_FORK_WAIT = 2.0
#: The handle (``start``'s) of a dedicated container's first kernel: not an exec id. Followed
#: by ``:`` and its launcher's host PID where that was taken at the container's start
#: (``first_handle``); without (an earlier version's), any launcher listed counts.
FIRST_HANDLE = "first"
#: The first line of the first kernel's launcher (``kernels.first.LAUNCHER``) while it runs
#: the kernel, and of the shell it becomes after (with the kernel's exit code): the engine
#: lists these processes' arguments as ``/bin/sh -c`` and the script.
FIRST_RUNNING = "#gpudev-kernel-running"
FIRST_ENDED = "#gpudev-kernel-ended="
FIRST_LISTED = f"/bin/sh -c {FIRST_RUNNING}"
_ENDED_LISTED = f"/bin/sh -c {FIRST_ENDED}"


def write_unlisted(variable: str, path: str) -> str:
    """Shell text writing the shell variable ``variable``'s value to ``path`` (a shell word)
    without the value ever being a program's argument (``/proc/PID/cmdline`` is readable by
    every account of the host): with the shell's builtin ``printf`` (said so in those words:
    a function, even one whose text says "builtin", is not taken), or, where the image's
    ``/bin/sh`` has none (mksh, some busybox builds), a here-document on ``cat``'s input. Its
    status is the write's."""
    return (
        'case "$(command -V printf 2>/dev/null)" in\n'
        f"  'printf is a shell builtin') command printf '%s' \"${variable}\" > {path} ;;\n"
        f"  *) cat > {path} <<GPUDEV_UNLISTED\n"
        f"${{{variable}}}\n"
        "GPUDEV_UNLISTED\n"
        "  ;;\n"
        "esac"
    )


def runtime_files(runtime_id: str) -> tuple[str, str, str]:
    """The kernel's connection, pid and log files inside the container."""
    kernel_file, pid_file, log_file = (
        f"{RUNTIME_DIR}/{runtime_id}.{ext}" for ext in ("json", "pid", "log")
    )
    return kernel_file, pid_file, log_file


def first_handle(launcher: int | None) -> str:
    """The handle of a first kernel whose launcher has the host PID ``launcher`` (``None``:
    not known, ``FIRST_HANDLE`` alone)."""
    return FIRST_HANDLE if launcher is None else f"{FIRST_HANDLE}:{int(launcher)}"


def is_first(handle: str) -> bool:
    """Whether ``handle`` is a first kernel's (``first_handle``), not an exec id."""
    return handle == FIRST_HANDLE or handle.startswith(f"{FIRST_HANDLE}:")


def first_launcher(handle: str) -> int | None:
    """The launcher's host PID a first kernel's handle names; ``None`` where it names none."""
    if not handle.startswith(f"{FIRST_HANDLE}:"):
        return None
    digits = handle[len(FIRST_HANDLE) + 1 :]
    if not digits.isascii() or not digits.isdigit() or len(digits) > len(str(PID_MAX)):
        return None
    number = int(digits)
    return number if 0 < number <= PID_MAX else None


def _pid(value: Any) -> int | None:
    """A listed PID, ``None`` where it is not one."""
    try:
        number = int(str(value))
    except ValueError:
        return None
    return number if 0 < number <= PID_MAX else None


def launcher_of(processes: list[Any]) -> int | None:
    """The launcher's host PID in the listing (``first_kernel``'s) of a container just
    started, before its launcher was told anything: its processes are then its init and the
    launcher, the one process listed as the launcher (none or several: ``None``)."""
    rows = [row for row in processes if isinstance(row, list) and len(row) >= 3]
    marked = [row[0] for row in rows if str(row[2]).startswith(FIRST_LISTED)]
    return _pid(marked[0]) if len(marked) == 1 else None


def first_kernel(processes: list[Any], launcher: int | None = None) -> tuple[bool, int | None, int]:
    """A first kernel as its container's processes say, listed by the engine's ``top`` with
    ``-o pid,ppid,args`` (host PIDs): whether its launcher still runs it, the kernel's host PID
    (the launcher's child) when listed, and its exit code once it ended (-1 where none is
    listed). What the container's processes say is read as data.

    ``launcher``: the launcher's host PID, taken when the container started, before any
    process of its user ran (``launcher_of``): only that process counts. It runs the kernel
    while it is listed as the launcher; it ended, with its code, when it is listed as the
    shell after; listed otherwise or not at all, it ended (-1). A process of the user's that
    calls itself the launcher (a decoy) is not looked at. Without it (a kernel an earlier
    version started), any process listed as the launcher counts: a decoy misleads gpudev
    about that container's own kernel."""
    rows = [row for row in processes if isinstance(row, list) and len(row) >= 3]
    if launcher is not None:
        return _pinned(rows, launcher)
    marked = {row[0]: row[1] for row in rows if str(row[2]).startswith(FIRST_LISTED)}
    if not marked:
        for row in rows:
            code = _ended_code(str(row[2]))
            if code is not None:
                return False, None, code
        return False, None, -1
    # The launcher is the marked process whose parent is not marked; its one child is the
    # kernel, from its fork (marked too: the subshell that becomes the kernel, same PID).
    launchers = {pid for pid, ppid in marked.items() if ppid not in marked}
    for pid, ppid, *_ in rows:
        if ppid in launchers:
            number = _pid(pid)
            if number is not None:
                return True, number, -1
    return True, None, -1


def _pinned(rows: list[list[Any]], launcher: int) -> tuple[bool, int | None, int]:
    """``first_kernel`` by the launcher's PID alone."""
    args = next((str(row[2]) for row in rows if _pid(row[0]) == launcher), None)
    if args is None or not args.startswith(FIRST_LISTED):
        code = _ended_code(args) if args is not None else None
        return False, None, -1 if code is None else code
    for pid, ppid, *_ in rows:
        if _pid(ppid) == launcher:
            number = _pid(pid)
            if number is not None:
                return True, number, -1
    return True, None, -1


def _ended_code(args: str) -> int | None:
    """The exit code the shell the launcher becomes lists (-1: not readable); ``None`` where
    ``args`` are not that shell's."""
    if not args.startswith(_ENDED_LISTED):
        return None
    rest = args[len(_ENDED_LISTED) : len(_ENDED_LISTED) + 4]
    digits = rest[: len(rest) - len(rest.lstrip("0123456789"))]
    return int(digits) if 0 < len(digits) <= 3 else -1


def list_processes(api: Any, container_id: str) -> list[Any]:
    """The container's processes as ``first_kernel`` reads them (the engine's ``top``)."""
    # The arguments cut to a width: the container's processes choose them (in shared mode
    # one service polls every user's containers).
    listed = api.top(container_id, ps_args=f"-o pid,ppid,args --cols {TOP_COLUMNS}")
    rows = listed.get("Processes") if isinstance(listed, dict) else None
    return rows if isinstance(rows, list) else []


def kernelspec_argv(data: Any) -> list[str] | None:
    """The argv of a kernel.json read from an image (hostile input: only a list of strings)."""
    if not isinstance(data, bytes):
        return None
    try:
        argv = json.loads(data)["argv"]
    except (ValueError, KeyError, TypeError):
        return None
    if isinstance(argv, list) and argv and all(isinstance(a, str) for a in argv):
        return list(argv)
    return None


def image_argv(container: Any) -> list[str]:
    """The image's own python3 kernelspec argv if it has one, else the ipykernel default.
    Read as the user kernels run as (``exec_user``), by ``cat``'s absolute path: a folder on
    the container's PATH may be that user's, and the read never runs what they put there as
    another user (the container's, root where the image's is)."""
    user = exec_user(container)
    for path in IMAGE_KERNELSPECS:
        code, output = container.exec_run(["/bin/cat", path], user=user)
        argv = kernelspec_argv(output) if code == 0 else None
        if argv is not None:
            return argv
    return list(DEFAULT_ARGV)


def argv_key(container: Any) -> str:
    """Whose image kernel argv a container's is (``KernelPlacements.argv``): its image's id and
    its owner's name. The argv is read in a container, whose user may have changed the file:
    it is never another owner's (in shared mode one process starts every user's kernels)."""
    attrs = getattr(container, "attrs", None) or {}
    labels = (attrs.get("Config") or {}).get("Labels") or {}
    return f"{attrs.get('Image', '')}\0{labels.get(L_OWNER, '')}"


def signal_argv(runtime_id: str, signum: int) -> list[str]:
    """The command that sends ``signum`` to the kernel (its pid file names it)."""
    _, pid_file, _ = runtime_files(runtime_id)
    return ["/bin/sh", "-c", f'kill -{int(signum)} "$(cat {shlex.quote(pid_file)})"']


def exec_pid(state: Any) -> int | None:
    """The host PID of an exec the engine inspected, while it runs (else ``None``)."""
    if not isinstance(state, dict) or not state.get("Running"):
        return None
    pid = state.get("Pid")
    return pid if type(pid) is int and 0 < pid <= PID_MAX else None


class ContainerProcesses:
    """The kernel processes of one Docker container (``kernels.runtime.KernelProcesses``):
    each one exec, polled by its exec id (the handle), reached at the container's address or
    through a forward over an ssh:// host's connection."""

    keeps_warm: ClassVar[bool] = True
    exit_codes: ClassVar[bool] = True
    stopped_and_kept: ClassVar[bool] = True

    def __init__(
        self, host: Host, container: Any, address_of: Callable[[Any], str] | None = None
    ) -> None:
        self.host = host
        #: The engine's container object, as inspected when this was made.
        self.container = container
        self.api = container.client.api
        self.container_id = str(container.id)
        self._address_of = address_of
        self._address = ""
        #: Each exec's process's PID on the host, as the engine last reported it.
        self._pids: dict[str, int] = {}
        self._user: str | None = None
        #: A first kernel is watched (``_first``: a process listing per check).
        self._watching_first = False
        #: A kernel was just started here (``watch_start``): a first kernel's launcher may not
        #: have forked it yet (``host_pid`` waits for it then, and only then).
        self._just_started = False

    @property
    def user(self) -> str:
        """Who its kernels run as (``containers.commands.exec_user``: remoteUser where the
        container does not run as the server's user; ``""``: the container's user)."""
        if self._user is None:
            self._user = exec_user(self.container)
        return self._user

    @classmethod
    def of(
        cls,
        manager: DevContainers,
        host: Host,
        name: str,
        handle: str = "",  # noqa: ARG003 - an exec id names no container
    ) -> ContainerProcesses:
        """The processes of the container ``name`` on ``host``, looked up (inspected) now."""
        found, container = manager.find(name, host.name)
        return cls(found, container, manager.address_of)

    @classmethod
    def of_id(cls, host: Host, container_id: str) -> ContainerProcesses:
        """The processes of the container ``container_id`` on ``host``, without looking it up:
        enough to signal a kernel (a warm kernel's record names its container by id)."""
        return cls(host, host.client().containers.prepare_model({"Id": container_id}))

    @property
    def instance(self) -> str:
        """The container as it runs now: its id and its start (a restart kills its kernels)."""
        started = self.container.attrs.get("State", {}).get("StartedAt", "")
        return f"{self.container_id}@{started}"

    @property
    def working_dir(self) -> str:
        return str(self.container.attrs.get("Config", {}).get("WorkingDir") or "/")

    @property
    def address(self) -> str:
        """The container's address on its host (once: the forwards are made to it)."""
        if not self._address:
            if self._address_of is None:
                raise TypeError("ContainerProcesses made without address_of")
            self._address = self._address_of(self.container)
        return self._address

    def kernel_argv(self) -> list[str]:
        """The image's kernel argv, looked up once per image and owner: an exec costs tens of
        milliseconds."""
        key = argv_key(self.container)
        argv = PLACEMENTS.argv(key)
        if argv is None:
            argv = image_argv(self.container)
            PLACEMENTS.remember_argv(key, argv)
        return argv

    def reach(self, ports: tuple[int, ...]) -> list[tuple[str, int]]:
        address = self.address
        return [self.host.reach(address, port) for port in ports]

    def close_forwards(self, ports: tuple[int, ...]) -> None:
        if self.host.tunnels is not None:
            self.host.unreach(self.address, ports)

    def start(
        self,
        *,
        argv: list[str],
        runtime_id: str,
        connection: dict[str, Any],
        workdir: str | None,
        environment: dict[str, str],
    ) -> str:
        """Start the kernel: one exec writes its private connection file (the key leaves the
        environment before the kernel starts), records its pid for signals, then becomes the
        kernel, output to its log file. ``argv``'s ``{connection_file}`` is that file. Returns
        the exec id (polled for the kernel's exit)."""
        kernel_file, pid_file, log_file = runtime_files(runtime_id)
        argv = [kernel_file if arg == "{connection_file}" else arg for arg in argv]
        script = (
            f"umask 077; mkdir -p {RUNTIME_DIR}\n"
            f"{write_unlisted('GPUDEV_CONNECTION', shlex.quote(kernel_file))} || exit 126\n"
            "unset GPUDEV_CONNECTION\n"
            f"echo $$ > {shlex.quote(pid_file)}\n"
            f'exec "$@" >> {shlex.quote(log_file)} 2>&1'
        )
        exec_id = str(
            self.api.exec_create(
                self.container_id,
                ["/bin/sh", "-c", script, "kernel", *argv],
                workdir=workdir,
                environment={**environment, "GPUDEV_CONNECTION": json.dumps(connection)},
                user=self.user,
            )["Id"]
        )
        self.api.exec_start(exec_id, detach=True)
        return exec_id

    def exit_code(self, handle: str, runtime_id: str) -> int | None:  # noqa: ARG002
        """Its exec's state: the kernel's exit code, ``None`` while it runs. A first kernel
        (``kernels.first``) runs while its launcher is listed, and its code is then listed too
        (``first_kernel``)."""
        if is_first(handle):
            self._watching_first = True
            return self._first_exit(handle)
        state = self.api.exec_inspect(handle)
        pid = exec_pid(state)
        if pid is not None:
            self._pids[handle] = pid
        return None if state.get("Running") else int(state.get("ExitCode") or 0)

    def host_pid(self, handle: str) -> int | None:
        """The kernel's PID on the host: the engine's for its exec (whose shell ``exec``s the
        kernel: the same process), which the container cannot forge; ``None`` once it ended.
        The one ``exit_code`` read last is reused (a start's watch reads it). A first kernel's
        is its launcher's child: waited for right after its start (the launcher forks it once
        it has read its input), else looked up once (one reached again was forked long ago)."""
        pid = self._pids.get(handle)
        if pid is None and is_first(handle):
            deadline = time.monotonic() + (FIRST_FORK_WAIT if self._just_started else 0.0)
            running, pid, _ = self._first(handle)
            while running and pid is None and time.monotonic() < deadline:
                time.sleep(START_POLL)
                running, pid, _ = self._first(handle)
        elif pid is None:
            pid = exec_pid(self.api.exec_inspect(handle))
            if pid is not None:
                self._pids[handle] = pid
        return pid

    def watch_start(self, poll: Callable[[], int | None], seconds: float) -> int | None:
        """Polled every ``START_POLL`` (an engine request, no exec) until it exits or
        ``seconds`` have passed."""
        self._just_started = True
        deadline = time.monotonic() + seconds
        while time.monotonic() < deadline:
            code = poll()
            if code is not None:
                return code
            time.sleep(FIRST_POLL if self._watching_first else START_POLL)
        return None

    def _first_exit(self, handle: str) -> int | None:
        """A first kernel's exit code, ``None`` while it runs. Only a listing that shows it
        ended gives a code at once; one that shows neither its launcher nor the shell after is
        looked at again (a listing is the engine running ``ps``), and a listing the engine
        cannot give leaves it running while the container runs: a kernel is never taken for
        dead on one reading (jupyter_client would start another on its ports)."""
        for attempt in range(FIRST_LOOKS):
            if attempt:
                time.sleep(START_POLL)
            try:
                running, _, code = self._first(handle)
            except docker.errors.APIError:
                state = self.api.inspect_container(self.container_id).get("State") or {}
                if state.get("Running"):
                    return None
                return -1
            if running:
                return None
            if code >= 0:
                return code
        return -1

    def _first(self, handle: str) -> tuple[bool, int | None, int]:
        """``first_kernel`` of this container's processes now, by the launcher ``handle``
        names if any (the kernel's PID kept)."""
        rows = list_processes(self.api, self.container_id)
        running, pid, code = first_kernel(rows, first_launcher(handle))
        if pid is not None:
            self._pids[handle] = pid
        return running, pid, code

    def send_signal(self, runtime_id: str, signum: int) -> None:
        """Signal the kernel through a detached exec: its effect is what the kernel does next,
        which the caller watches; waiting for the ``kill`` itself would add a round trip."""
        exec_id = self.api.exec_create(
            self.container_id, signal_argv(runtime_id, signum), user=self.user
        )["Id"]
        self.api.exec_start(exec_id, detach=True)

    def log_tail(self, runtime_id: str) -> list[str]:
        _, _, log_file = runtime_files(runtime_id)
        _, output = self.container.exec_run(["tail", "-n", "20", log_file], user=self.user)
        tail = output.decode(errors="replace").strip() if isinstance(output, bytes) else ""
        return tail.splitlines()

    def remove_files(self, runtime_id: str) -> None:
        self.container.exec_run(["rm", "-f", *runtime_files(runtime_id)], user=self.user)
