"""A dedicated kernel container's first kernel, started by the container's own start.

A kernel started by an exec into a running container costs that exec (about 50 ms on this
project's machine) after the container's start; ``docker run`` of a kernel does not. A dedicated
container's command is therefore a small launcher (``LAUNCHER``) that reads, from the
container's standard input, the kernel's connection, runtime id, folder, environment and
argv, one per line, writes the connection file (``umask 077``, as the exec does), runs the
kernel as its child, and then runs the container's usual keep-alive command. gpudev attaches
to the input before the start and writes the lines right after it (``containers.lifecycle``);
the key is never in the container's configuration (its ``Cmd`` and ``Env`` hold no
connection), and no string of a user's reaches a shell: the script is fixed, the values are
read into variables.

The container outlives the kernel: a restart is an exec into it, as in a shared container, and
its GPUs stay leased throughout (a container that stopped with its kernel would be one whose
lease the ledger may free, see ``containers.reconcile``). While the launcher runs the kernel,
its process is listed by the engine (``top``) with ``process.FIRST_RUNNING`` first in its
script; after, the shell that runs the keep-alive command lists ``process.FIRST_ENDED`` and
the kernel's exit code. That is how the first kernel is watched, without an exec
(``process.ContainerProcesses``). Any process of the container can list itself so (the
kernel runs its user's code): the launcher's host PID is taken right after the start, before
it is told anything, while the container's processes are its init and the launcher only
(``pin_launcher``); from then on only that process counts (``process.first_kernel``), its PID
kept in the kernel's handle (``process.first_handle``). A launcher not seen then is told
nothing.

With nothing to read (the image's kernel command not known yet, a value that cannot be sent
as a line, an input the engine did not attach), the launcher runs only the keep-alive
command and the kernel is started by an exec as before.
"""

from __future__ import annotations

import json
import re
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from ..engine.attribution import container_id
from ..engine.gpuprocs import PID_MAX
from ..errors import ENGINE_FAILURES
from .placements import PLACEMENTS
from .process import (
    FIRST_ENDED,
    FIRST_RUNNING,
    RUNTIME_DIR,
    START_POLL,
    argv_key,
    first_handle,
    launcher_of,
    list_processes,
    write_unlisted,
)

#: Seconds the launcher of a container just started is waited for in its process listing
#: (its init runs it within milliseconds of the start).
FIRST_PIN_WAIT = 1.0
#: Where the processes of a local engine are read (the server on the engine's machine).
PROC = Path("/proc")
#: Seconds the launcher is looked for in ``PROC`` before the engine's listing is asked.
PROC_PIN_WAIT = 0.02
#: How the launcher's command line starts in ``/proc/PID/cmdline``.
_LAUNCHER_CMDLINE = b"/bin/sh\0-c\0" + FIRST_RUNNING.encode()

LAUNCHER = f"""{FIRST_RUNNING}
IFS= read -r connection || connection=
if [ -n "$connection" ] && IFS= read -r id && IFS= read -r dir; then
  (
    umask 077
    mkdir -p {RUNTIME_DIR} || exit 126
{write_unlisted("connection", f'"{RUNTIME_DIR}/$id.json"')} || exit 126
    unset connection
    while IFS= read -r pair && [ -n "$pair" ]; do export "$pair"; done
    set --
    while IFS= read -r arg && [ -n "$arg" ]; do set -- "$@" "$arg"; done
    if [ -n "$dir" ]; then cd -- "$dir" || exit 126; fi
    exec /bin/sh -c 'echo $$ > "$0"; exec "$@"' "{RUNTIME_DIR}/$id.pid" "$@" \\
      < /dev/null >> "{RUNTIME_DIR}/$id.log" 2>&1
  )
  exec /bin/sh -c "{FIRST_ENDED}$?
\\"\\$@\\"
exit" gpudev-kernel "$@"
fi
unset connection
exec "$@"
"""

_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*\Z")
_RUNTIME_ID = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,127}\Z")


def _line(value: str) -> bool:
    """Whether ``value`` can be sent as one line the launcher reads back unchanged."""
    return "\n" not in value and "\r" not in value and "\0" not in value


def instructions(
    *,
    connection: dict[str, Any],
    runtime_id: str,
    workdir: str | None,
    environment: dict[str, str],
    argv: list[str],
) -> bytes:
    """The lines the launcher reads; ``b""`` when one of the values cannot be sent as a line
    (the kernel is then started by an exec, which takes any value)."""
    text = json.dumps(connection, separators=(",", ":"))
    if not _RUNTIME_ID.match(runtime_id) or not argv:
        return b""
    pairs = [f"{name}={value}" for name, value in environment.items()]
    if not all(_NAME.match(name) for name in environment):
        return b""
    values = [text, runtime_id, workdir or "", *pairs, *argv]
    if not all(_line(value) for value in values) or not all(argv):
        return b""
    try:
        return "\n".join([text, runtime_id, workdir or "", *pairs, "", *argv, "", ""]).encode()
    except UnicodeEncodeError:  # a name that is not UTF-8 (surrogates): an exec takes it
        return b""


def _read(path: Path, limit: int) -> bytes | None:
    try:
        with path.open("rb") as stream:
            return stream.read(limit)
    except OSError:
        return None


def _is_launcher(pid: int, full_id: str, proc: Path) -> bool:
    """Whether ``pid`` in ``proc`` runs the launcher, in the container ``full_id``."""
    cmdline = _read(proc / str(pid) / "cmdline", len(_LAUNCHER_CMDLINE))
    cgroup = _read(proc / str(pid) / "cgroup", 8192)
    if cmdline != _LAUNCHER_CMDLINE or cgroup is None:
        return False
    return container_id(cgroup.decode(errors="replace")) == full_id


def launcher_in_proc(init: int, full_id: str, proc: Path = PROC) -> int | None:
    """The launcher's host PID as this machine's ``/proc`` shows it: the container's init's
    one child (the init itself in a container without one), its command line the
    launcher's and its cgroup the container's; ``None`` where that is not so (yet), or this
    ``/proc`` is not the engine's (a server in a container of its own)."""
    if not 0 < init <= PID_MAX:
        return None
    if _is_launcher(init, full_id, proc):
        return init
    listed = _read(proc / str(init) / "task" / str(init) / "children", 4096)
    children = (listed or b"").split()
    if len(children) != 1 or not children[0].isdigit():
        return None
    child = int(children[0])
    return child if 0 < child <= PID_MAX and _is_launcher(child, full_id, proc) else None


def _pin_in_proc(container: Any) -> int | None:
    """``launcher_in_proc``, waited for ``PROC_PIN_WAIT`` seconds (its init forks it as the
    container starts): about 1 ms, where the engine's listing takes 10-12."""
    try:
        state = container.client.api.inspect_container(str(container.id)).get("State") or {}
    except ENGINE_FAILURES:
        return None
    init, full_id = state.get("Pid"), str(container.id)
    if type(init) is not int:
        return None
    deadline = time.monotonic() + PROC_PIN_WAIT
    while True:
        found = launcher_in_proc(init, full_id)
        if found is not None or time.monotonic() >= deadline:
            return found
        time.sleep(0.002)


def pin_launcher(container: Any, *, local: bool = False) -> int | None:
    """The host PID of the launcher of ``container``, started and not told anything yet:
    read from this machine's ``/proc`` where the engine is ``local`` and it is there, else
    from the engine's listing (``process.launcher_of``); ``None`` when the engine does not
    list it within ``FIRST_PIN_WAIT`` seconds, or lists several."""
    if local:
        found = _pin_in_proc(container)
        if found is not None:
            return found
    api, full_id = container.client.api, str(container.id)
    deadline = time.monotonic() + FIRST_PIN_WAIT
    while True:
        try:
            rows = list_processes(api, full_id)
        except ENGINE_FAILURES:
            return None
        launcher = launcher_of(rows)
        if launcher is not None or len(rows) > 2 or time.monotonic() >= deadline:
            return launcher
        time.sleep(START_POLL)


class FirstKernel:
    """A dedicated container's first kernel (``containers.model.FirstProcess``), as the
    provisioner describes it before the container exists: the lines are made once the engine
    has created the container (its image, hence the kernel command; its folder)."""

    def __init__(self, runtime_id: str, lines: Callable[[Any, Any, str, list[str]], bytes]) -> None:
        self.runtime_id = runtime_id
        self._lines = lines
        #: The image kernel argv sent (``{connection_file}`` not filled in), once delivered.
        self.argv: tuple[str, ...] = ()
        self._sent: tuple[str, ...] = ()
        #: The launcher read its instructions (the container started with them).
        self.started = False
        #: The launcher's host PID, taken before it was told anything (``pin_launcher``).
        self.launcher: int | None = None

    @property
    def handle(self) -> str:
        """The kernel's handle (``process.first_handle``): its launcher's PID in it."""
        return first_handle(self.launcher)

    def command(self, keep_alive: tuple[str, ...]) -> tuple[str, ...]:
        return ("/bin/sh", "-c", LAUNCHER, "gpudev-kernel", *keep_alive)

    def instructions(self, host: Any, container: Any) -> bytes:
        argv = PLACEMENTS.argv(argv_key(container))
        if argv is None:  # not known before a kernel of this image was started by an exec
            return b""
        data = self._lines(host, container, self.runtime_id, list(argv))
        # Last before the launcher is told: until then no process of the user's runs.
        local = bool(getattr(getattr(host, "spec", None), "is_local", False))
        self.launcher = pin_launcher(container, local=local) if data else None
        if self.launcher is None:
            data = b""
        self._sent = tuple(argv) if data else ()
        return data

    def delivered(self) -> None:
        self.argv = self._sent
        self.started = bool(self._sent)
