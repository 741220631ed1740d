"""Pre-started ("warm") kernels in running shared dev containers.

Starting a kernel in a dev container costs the interpreter's start and ipykernel's imports
(0.4-0.8 s on this project's machine). ``WarmKernels`` keeps ``count`` kernels started and
answering in each running shared dev container a user is likely to pick next (one that is
pinned, or that has a kernel of this server), and the provisioner takes one instead of starting
a kernel: each warm kernel is handed out once, and a fresh one is prepared after.

A warm kernel uses nothing its container does not already hold: it is not one of the
container's kernels (a shared container still stops after its last kernel, and the warm ones
with it), nothing here starts, resumes or keeps a container, and it holds no lease. It runs as
the container's user, like every kernel, with no environment of the server. Warm kernels are
kept where ``KernelProcesses.keeps_warm`` (``kernels.runtime``): in Docker containers, started
and signalled through ``process.ContainerProcesses``.
"""

from __future__ import annotations

import contextlib
import json
import os
import secrets
import signal
import socket
import threading
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import zmq
from jupyter_client.session import Session
from traitlets import Int
from traitlets.config import LoggingConfigurable

from .. import safefs
from ..containers import DevContainers
from ..containers.reconcile import process_alive, process_gone, process_identity
from ..errors import ENGINE_FAILURES, GPUDevError
from ..labels import L_KERNEL
from ..traits import PositiveFloat
from .placements import PLACEMENTS, Key
from .process import PORT_NAMES, ContainerProcesses
from .runtime import KernelProcesses, processes_type

#: What ends a step of the pool's background work quietly (logged): the engine's errors and its
#: connection's (a container stopping, a host closed), gpudev's.
_BEST_EFFORT: tuple[type[Exception], ...] = (*ENGINE_FAILURES, GPUDevError, OSError)


@dataclass(frozen=True)
class WarmKernel:
    """A kernel started ahead in a shared container, answering kernel_info."""

    host: str
    container: str
    #: The kernel processes of its container as it ran when the kernel was started (a restart
    #: kills the kernel): it is signalled, checked and its forwards closed through them.
    processes: ContainerProcesses
    #: The image's kernel argv it was started with (``{connection_file}`` not filled in).
    argv: tuple[str, ...]
    runtime_id: str
    exec_id: str
    #: Its ports inside the container, and where this server reaches each one (the
    #: container's address, or a forward over an ssh:// host's connection).
    ports: tuple[int, ...]
    reached: tuple[tuple[str, int], ...]
    key: bytes

    def connection(self) -> dict[str, Any]:
        """Its connection info as this server reaches it."""
        return {
            "transport": "tcp",
            "signature_scheme": "hmac-sha256",
            "ip": self.reached[0][0],
            "key": self.key,
            **dict(zip(PORT_NAMES, (port for _, port in self.reached), strict=True)),
        }


class _Record:
    """The warm kernels this machine's servers hold ready, in ``warm-kernels.json`` of the
    state folder (by runtime id: host, container id, server pid): after a server crash, the
    next server stops the ones whose server is gone. A kernel handed out leaves the record
    (it is a kernel of its server now)."""

    def __init__(self, state_dir: str) -> None:
        self.path = Path(state_dir) / "warm-kernels.json"
        self._lock = threading.Lock()

    def _read(self) -> dict[str, dict[str, Any]]:
        try:
            data = json.loads(self.path.read_text())
        except (OSError, ValueError):
            return {}
        if not isinstance(data, dict):
            return {}
        return {str(k): v for k, v in data.items() if isinstance(v, dict)}

    def _change(self, change: Callable[[dict[str, dict[str, Any]]], object]) -> None:
        with self._lock:
            entries = self._read()
            change(entries)
            with contextlib.suppress(OSError, GPUDevError):  # a record lost: nothing else
                self.path.parent.mkdir(parents=True, exist_ok=True)
                with safefs.Folder.open(self.path.parent) as folder:  # never through a link
                    folder.replace(self.path.name, json.dumps(entries).encode(), 0o600)

    def add(self, warm: WarmKernel) -> None:
        entry = {
            "host": warm.host,
            "container_id": warm.processes.container_id,
            "machine": socket.gethostname(),
            "pid": os.getpid(),
            "process": process_identity(),
        }
        self._change(lambda entries: entries.__setitem__(warm.runtime_id, entry))

    def remove(self, runtime_id: str) -> None:
        self._change(lambda entries: entries.pop(runtime_id, None))

    def orphans(self) -> dict[str, dict[str, Any]]:
        """The recorded kernels of this machine's servers that are gone."""
        machine = socket.gethostname()
        return {
            runtime_id: entry
            for runtime_id, entry in self._read().items()
            if entry.get("machine") == machine
            and isinstance(entry.get("pid"), int)
            and _gone(entry, machine)
        }


def _gone(entry: dict[str, Any], machine: str) -> bool:
    """Whether the server that recorded ``entry`` ended: by its identity (PID, start time,
    boot: a PID reused by another process does not keep it), or its PID alone where an
    earlier version recorded no identity."""
    identity = entry.get("process")
    if isinstance(identity, str) and identity:
        return process_gone(identity, machine)
    return not process_alive(entry["pid"])


class WarmKernels(LoggingConfigurable):
    """The warm kernels of this server (see the module's text)."""

    count = Int(
        1,
        min=0,
        config=True,
        help="""Kernels kept started and ready in each running shared dev container that is
        pinned or has a kernel of this server, so that a kernel started in it from the picker
        answers at once (each is handed out once; a fresh one is prepared after). 0 or more;
        0: off. They use the container's memory, never a GPU it does not already hold.""",
    )
    ready_timeout = PositiveFloat(
        60.0,
        config=True,
        help="Seconds a warm kernel may take to answer its first kernel_info (more than 0); "
        "past that it is stopped.",
    )

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self._lock = threading.Lock()
        self._ready: dict[Key, list[WarmKernel]] = {}
        self._starting: dict[Key, int] = {}
        self._pool: ThreadPoolExecutor | None = None
        self._closed = False
        self._record: _Record | None = None
        #: The manager of the containers (set by ``fill``): its hosts close the forwards of an
        #: ssh:// host's warm kernels.
        self._manager: DevContainers | None = None

    # -- handing out ------------------------------------------------------------------------

    def take(self, key: Key, processes: KernelProcesses, argv: list[str]) -> WarmKernel | None:
        """A ready warm kernel of the container whose ``processes`` these are (just looked up)
        started with ``argv``, now alive, taken out of the pool; ``None`` if there is none."""
        while True:
            with self._lock:
                kept = self._ready.get(key, [])
                if not kept:
                    return None
                warm = kept.pop(0)
                if not kept:
                    del self._ready[key]
            same = warm.processes.instance == processes.instance
            if same and list(warm.argv) == list(argv) and _running(warm):
                if self._record is not None:
                    self._record.remove(warm.runtime_id)
                return warm
            self._stop(warm)

    def prepare(self, warm: WarmKernel, workdir: str, session_name: str | None) -> bool:
        """Make a taken kernel the one asked for: its working folder (the notebook's) and
        ``JPY_SESSION_NAME``, set by one silent execution (no history, no output). Whether it
        answered as expected."""
        lines = [f"__import__('os').chdir({workdir!r})"]
        if session_name:
            lines.append(f"__import__('os').environ['JPY_SESSION_NAME'] = {session_name!r}")
        content = {
            "code": "\n".join(lines),
            "silent": True,
            "store_history": False,
            "user_expressions": {},
            "allow_stdin": False,
            "stop_on_error": True,
        }
        with _Shell(warm) as shell:
            reply = shell.ask("execute_request", content, timeout=10.0)
        return reply is not None and reply.get("content", {}).get("status") == "ok"

    def discard(self, warm: WarmKernel) -> None:
        """Stop a taken kernel that could not be prepared."""
        self._stop(warm)

    # -- keeping the pool -------------------------------------------------------------------

    def fill(self, manager: DevContainers, key: Key) -> None:
        """Start warm kernels in the background until ``count`` are ready or starting in the
        shared container ``key`` (nothing if it is not running, nor where no warm kernels are
        kept: in a pod)."""
        try:
            if not processes_type(manager.host_pool.get(key[0])).keeps_warm:
                return
        except GPUDevError:
            return  # a host gone meanwhile
        if self._record is None:
            self._record = _Record(manager.state_dir)
        self._manager = manager
        with self._lock:
            if self._closed or self.count <= 0:
                return
            missing = self.count - len(self._ready.get(key, [])) - self._starting.get(key, 0)
            if missing <= 0:
                return
            self._starting[key] = self._starting.get(key, 0) + missing
            if self._pool is None:
                self._pool = ThreadPoolExecutor(2, "gpudev-warm-kernel")
            pool = self._pool
        for _ in range(missing):
            pool.submit(self._start_one, manager, key)
        pool.submit(self._drop_gone)

    def _drop_gone(self) -> None:
        """Stop and forget the ready warm kernels that no longer run (their container removed,
        or stopped after its last kernel): ``take`` drops such a kernel only when a kernel
        starts in the same container again, and a removed one never does."""
        with self._lock:
            ready = [(key, warm) for key, kernels in self._ready.items() for warm in kernels]
        for key, warm in ready:
            if _running(warm):
                continue
            with self._lock:
                kept = self._ready.get(key, [])
                if not any(other is warm for other in kept):
                    continue  # taken meanwhile
                kept[:] = [other for other in kept if other is not warm]
                if not kept:
                    del self._ready[key]
            self._stop(warm)

    def fill_pinned(self, manager: DevContainers) -> None:
        """``fill`` every pinned shared container (at the server's start): the ones a user
        keeps for kernels."""
        self.stop_orphans(manager)
        if self.count <= 0:
            return
        for host in manager.host_pool.names():
            try:
                pinned = manager.ledger.pinned(host)
            except GPUDevError as err:
                self.log.warning("gpudev: no warm kernels on %s: %s", host, err.message)
                continue
            for name in sorted(pinned):
                self.fill(manager, (host, name))

    def stop_orphans(self, manager: DevContainers) -> list[str]:
        """Stop the warm kernels a server of this machine that is gone left ready (after a
        crash they would run on, unused, in their containers); their runtime ids."""
        if self._record is None:
            self._record = _Record(manager.state_dir)
        stopped: list[str] = []
        for runtime_id, entry in self._record.orphans().items():
            try:
                host = manager.host_pool.get(str(entry.get("host", "")))
                container_id = str(entry.get("container_id", ""))
                ContainerProcesses.of_id(host, container_id).send_signal(runtime_id, 9)
            except _BEST_EFFORT as exc:
                self.log.info("gpudev: warm kernel %s left by a server: %s", runtime_id, exc)
            else:
                stopped.append(runtime_id)
            self._record.remove(runtime_id)
        if stopped:
            self.log.info("gpudev: stopped %d warm kernel(s) left by a server", len(stopped))
        return stopped

    def _start_one(self, manager: DevContainers, key: Key) -> None:
        warm: WarmKernel | None = None
        ready: WarmKernel | None = None
        try:
            warm = self._start(manager, key)
        except _BEST_EFFORT as exc:
            self.log.info("gpudev: no warm kernel in %s: %s", key[1], exc)
        finally:
            with self._lock:
                if self._starting.get(key, 0) > 1:
                    self._starting[key] -= 1
                else:
                    self._starting.pop(key, None)
                if warm is not None and not self._closed:
                    self._ready.setdefault(key, []).append(warm)
                    ready, warm = warm, None
        if ready is not None and self._record is not None:
            self._record.add(ready)
        if warm is not None:  # closed meanwhile
            self._stop(warm)

    def _start(self, manager: DevContainers, key: Key) -> WarmKernel | None:
        host_name, name = key
        host, container = manager.find(name, host_name)
        if container.status != "running" or container.labels.get(L_KERNEL):
            return None  # stopped, or made for one kernel: nothing to keep warm
        processes = ContainerProcesses(host, container, manager.address_of)
        argv = processes.kernel_argv()
        ports = PLACEMENTS.choose_ports(name, len(PORT_NAMES))
        try:
            reached = tuple(processes.reach(ports))
            key_bytes = secrets.token_hex(32).encode()
            runtime_id = f"warm-{secrets.token_hex(8)}"
            inside = {
                "transport": "tcp",
                "signature_scheme": "hmac-sha256",
                "ip": "0.0.0.0",  # noqa: S104 - container-local
                "key": key_bytes.decode(),
                **dict(zip(PORT_NAMES, ports, strict=True)),
            }
            exec_id = processes.start(
                argv=list(argv),
                runtime_id=runtime_id,
                connection=inside,
                workdir=processes.working_dir,
                environment={},
            )
        except BaseException:
            with contextlib.suppress(GPUDevError):
                processes.close_forwards(ports)
            PLACEMENTS.release_ports(name, ports)
            raise
        warm = WarmKernel(
            host=host.name,
            container=name,
            processes=processes,
            argv=tuple(argv),
            runtime_id=runtime_id,
            exec_id=exec_id,
            ports=ports,
            reached=reached,
            key=key_bytes,
        )
        if not self._answers(warm):
            self._stop(warm)
            return None
        self.log.info("gpudev: a warm kernel is ready in %s", name)
        return warm

    def _answers(self, warm: WarmKernel) -> bool:
        """Wait for the kernel's first kernel_info reply (or its exit, or the timeout)."""
        deadline = time.monotonic() + self.ready_timeout
        with _Shell(warm) as shell:
            while time.monotonic() < deadline:
                if shell.ask("kernel_info_request", {}, timeout=0.25) is not None:
                    return True
                if not _running(warm):
                    return False
        return False

    def _stop(self, warm: WarmKernel) -> None:
        """Kill a warm kernel and forget its runtime files and ports."""
        with contextlib.suppress(*_BEST_EFFORT):
            warm.processes.send_signal(warm.runtime_id, signal.SIGKILL)
        if self._manager is not None:
            with contextlib.suppress(GPUDevError):
                warm.processes.close_forwards(warm.ports)
        PLACEMENTS.release_ports(warm.container, warm.ports)
        if self._record is not None:
            self._record.remove(warm.runtime_id)

    def ready(self, key: Key) -> int:
        """How many warm kernels are ready in ``key`` (tests, the benchmark)."""
        with self._lock:
            return len(self._ready.get(key, []))

    def close(self, manager: DevContainers | None = None) -> None:
        """Stop every warm kernel (the server stops); none is started after."""
        with self._lock:
            self._closed = True
            ready, self._ready = self._ready, {}
            pool, self._pool = self._pool, None
        if pool is not None:
            pool.shutdown(wait=False, cancel_futures=True)
        if manager is None:
            return
        for kernels in ready.values():
            for warm in kernels:
                self._stop(warm)


def _running(warm: WarmKernel) -> bool:
    try:
        return warm.processes.exit_code(warm.exec_id, warm.runtime_id) is None
    except ENGINE_FAILURES:
        return False


class _Shell:
    """A plain ZMQ connection to a warm kernel's shell port, signed with its key: no client
    object (jupyter_client's blocking client makes an event loop in every thread it is used
    in, and never closes it)."""

    def __init__(self, warm: WarmKernel) -> None:
        self.session = Session(key=warm.key, signature_scheme="hmac-sha256")
        ip, port = warm.reached[0][0], warm.reached[0][1]
        self.socket: zmq.Socket[bytes] = zmq.Context.instance().socket(zmq.DEALER)
        self.socket.setsockopt(zmq.LINGER, 0)
        self.socket.connect(f"tcp://{ip}:{port}")

    def __enter__(self) -> _Shell:
        return self

    def __exit__(self, *_exc: object) -> None:
        self.socket.close()

    def ask(self, msg_type: str, content: dict[str, Any], timeout: float) -> dict[str, Any] | None:
        """Send one request; its reply, or ``None`` if none came within ``timeout``."""
        sent = self.session.send(self.socket, msg_type, content)
        if sent is None:
            return None
        msg_id = sent["header"]["msg_id"]
        deadline = time.monotonic() + timeout
        while (left := deadline - time.monotonic()) > 0:
            if not self.socket.poll(int(left * 1000) + 1):
                return None
            _, reply = self.session.recv(self.socket, mode=0)
            if reply is not None and reply.get("parent_header", {}).get("msg_id") == msg_id:
                return dict(reply)
        return None
