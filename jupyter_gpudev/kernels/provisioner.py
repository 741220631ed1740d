"""``GPUDevProvisioner``: Jupyter kernels whose process lives inside a dev container.

A kernelspec whose metadata names the ``gpudev`` provisioner launches its kernel in a dev
container of its environment: a container dedicated to that kernel (created at launch with its
GPUs leased, stopped at shutdown), or a running dev container the spec names (shared by several
kernels, left running). The image, build, pull and GPU lease all happen in ``pre_launch``,
before the kernel starts, so the kernel start timeout only counts the kernel itself.

The kernel binds its ZMQ ports inside the container; the server reaches them at the
container's address on the isolated ``gpudev`` network (see ``DevContainers.network``), which
other containers cannot reach, or, on an ssh:// host, through forwards over the host's SSH
connection (torn down with the kernel). A restart replaces only the kernel process: the
container, and everything installed in it, survives.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import threading
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any, TypeVar, cast

import docker.errors
from jupyter_client.connect import KernelConnectionInfo
from jupyter_client.provisioning.provisioner_base import KernelProvisionerBase
from tornado import web
from traitlets import Bool, Float, Int, Unicode
from traitlets.config import Config

from ..containers import DevContainerInfo, DevContainers, StartRequest
from ..containers.placement import gpu_request
from ..engine import Host
from ..errors import ENGINE_FAILURES, Conflict, EngineUnreachable, GPUDevError, engine_error
from ..traits import PositiveFloat
from .first import FirstKernel
from .first import instructions as first_instructions
from .live import KernelPlacement, KernelRegistry
from .placements import PLACEMENTS
from .process import PORT_NAMES, is_first, runtime_files
from .runtime import KernelProcesses, kernel_processes, processes_type

T = TypeVar("T")

#: What ends a best-effort step (a signal, removing runtime files, closing forwards) quietly:
#: the engine's errors and its connection's (a container stopping, a host closed), gpudev's.
_BEST_EFFORT: tuple[type[Exception], ...] = (*ENGINE_FAILURES, GPUDevError)


class KernelLaunchError(web.HTTPError):
    """A gpudev error while launching a kernel, in the form jupyter_server reports to the user
    (its status and message, instead of "Unhandled error"); ``error`` is the original."""

    def __init__(self, error: GPUDevError) -> None:
        # tornado formats log_message with %: keep a literal % literal.
        super().__init__(error.status, log_message=error.message.replace("%", "%%"))
        self.error = error


class KernelStartFailed(GPUDevError):
    """The kernel process died at start; the message has its last output line."""

    status = 500
    exit_code = 4
    code = "kernel_start"


def set_manager(manager: DevContainers | None) -> None:
    """The server's ``DevContainers`` (set by ``GPUDevApp``), shared by every kernel."""
    PLACEMENTS.set_manager(manager)


def current_manager() -> DevContainers | None:
    """The manager ``set_manager`` gave (inside a Jupyter server), else ``None``."""
    return PLACEMENTS.current_manager()


class GPUDevProvisioner(KernelProvisionerBase):
    """Launches the kernel inside a dev container (``provisioner_name: gpudev``).

    Its ``config`` in the kernelspec metadata: ``environment`` (the environment's name),
    ``gpus`` (how many GPUs a dedicated container leases; default: the environment's),
    ``container`` (the name of a running dev container to share instead), ``host``.
    """

    environment = Unicode("default", config=True, help="The environment of the container.")
    container = Unicode(
        "", config=True, help="A running dev container to launch into (shared, left running)."
    )
    gpus = Int(
        -1,
        min=-1,
        config=True,
        help="GPUs a dedicated container leases (-1 or more; -1: the environment's).",
    )
    host = Unicode("", config=True, help="The host (default: the local engine).")
    startup_check_seconds = Float(
        0.05,
        min=0.0,
        config=True,
        help="""After launching, watch the kernel this long (seconds, 0 or more; 0: one look):
        one that exits at once is reported with its output and cleaned up, instead of a
        'kernel died' restart loop.""",
    )
    unreachable_grace = Float(
        60.0,
        min=0.0,
        config=True,
        help="""Seconds a kernel on a remote host is still considered running while its host
        cannot be reached (a dropped SSH connection is reopened on the next call; 0 or more);
        after that it is reported dead, with the reason in the server log.""",
    )
    exit_poll_seconds = PositiveFloat(
        0.01,
        config=True,
        help="""After a shutdown request, how often the kernel's process is checked for its
        exit (seconds, more than 0; one engine request each): a dedicated container is
        stopped, and its GPUs freed, right after.""",
    )
    remove_unchanged = Bool(
        True,
        config=True,
        help="""Remove a dedicated container at shutdown when nothing changed in it; one with
        changes is only stopped (kept until committed or discarded). A kernel's own pod on
        a Kubernetes host is always deleted when unchanged (a pod is not stopped and kept);
        one with changes keeps running until committed or removed.""",
    )

    # State, persisted through get/load_provisioner_info for reconnection after a restart.
    _container_name: str = ""
    _dedicated: bool = False
    #: The kernel's handle (``KernelProcesses.start``): a Docker exec id, ``pod:`` and its
    #: pod's name, or a dedicated container's first kernel's (``process.first_handle``).
    _exec_id: str = ""
    #: The stem of its runtime files (a kernel handed over from the warm pool keeps its own).
    _runtime_id: str = ""
    #: The image's kernel argv (``{connection_file}`` not filled in) this start uses.
    _image_argv: tuple[str, ...] = ()
    _ports: tuple[int, ...] = ()
    _exit_code: int | None = None
    #: The kernel processes of its dev container (``kernels.runtime``) its process runs in.
    _processes: KernelProcesses | None = None
    #: The ones ``_kernel_argv`` looked up, for the launch that follows.
    _launching: KernelProcesses | None = None
    #: The dedicated container's first kernel, started with it, until the launch adopts it.
    _first: FirstKernel | None = None
    #: The kernel has started once (a later failed launch is a restart's: the container stays).
    _launched: bool = False
    #: Counted among the kernels of a shared container.
    _joined: bool = False
    _idle_timeout: float | None = None
    _unreachable_since: float = 0.0
    #: Seconds ``shutdown_requested`` spent waiting for the kernel's exit.
    _shutdown_waited: float = 0.0
    #: Set by the GPU culler: at shutdown, stop the container but keep it (a reclaim).
    keep_container: bool = False
    #: The GPUs a dedicated pod asked the scheduler for (a cluster names no UUIDs to gpudev).
    _pod_gpus: int = 0

    @property
    def container_name(self) -> str:
        return self._container_name

    def gpu_uuids(self) -> tuple[str, ...]:
        """The GPUs this kernel holds: those of its dedicated container's lease (a kernel in a
        shared container holds none of its own)."""
        if not self._dedicated or not self._container_name:
            return ()
        manager = self._manager
        lease = manager.ledger.for_container(
            self.host or manager.host_pool.local_name, self._container_name
        )
        return lease.gpu_uuids if lease else ()

    def gpu_count(self) -> int:
        """How many GPUs this kernel holds: its dedicated container's leased ones, or those
        its dedicated pod was given by the scheduler."""
        if not self._dedicated:
            return 0
        return len(self.gpu_uuids()) or self._pod_gpus

    def idle_timeout(self) -> float | None:
        """The environment's own idle timeout (customizations.gpudev.idleTimeout), if any."""
        return self._idle_timeout

    @property
    def runtime_id(self) -> str:
        return self._runtime_id or f"kernel-{self.kernel_id}"

    @property
    def has_process(self) -> bool:
        return bool(self._exec_id) and self._exit_code is None

    @property
    def _manager(self) -> DevContainers:
        config = self.config if isinstance(self.config, Config) else Config()
        return PLACEMENTS.manager_for(config)

    def _host(self) -> Host:
        """The host of this kernel's container (the local engine until placement says)."""
        pool = self._manager.host_pool
        return pool.get(self.host or pool.local_name)

    async def _run(self, func: Callable[..., T], *args: Any) -> T:
        return await asyncio.get_running_loop().run_in_executor(None, func, *args)

    def _located(self) -> KernelProcesses:
        """The kernel processes of this kernel's dev container, looked up now."""
        found = kernel_processes(self._manager, self._host(), self._container_name, self._exec_id)
        self.host = found.host.name
        return found

    def _current(self) -> KernelProcesses:
        """The kernel processes its process runs in (looked up once after a server restart)."""
        if self._processes is None:
            self._processes = self._located()
        return self._processes

    # ------------------------------------------------------------------------------------------
    # Launch
    # ------------------------------------------------------------------------------------------

    async def pre_launch(self, **kwargs: Any) -> dict[str, Any]:
        """Make the container ready (build/pull, lease, start) before the kernel is started."""
        return await self._guarded(not self._container_name, self._pre_launch(**kwargs))

    async def _guarded(self, first: bool, step: Awaitable[T]) -> T:
        """Run a launch step. When the kernel's first start fails, nothing is left behind
        (jupyter_client never calls cleanup() for a kernel that did not start): its dedicated
        container is removed and its lease freed, or it leaves its shared container. Errors
        reach the user as HTTP errors with a message, engine errors included."""
        try:
            return await step
        except BaseException as exc:
            if first:
                await self._abandon()
            error = exc if isinstance(exc, GPUDevError) else None
            if isinstance(exc, ENGINE_FAILURES):
                what = f"Starting the kernel in {self._container_name!r}"
                error = engine_error(what, exc, self.log)
            if error is None:
                raise
            raise KernelLaunchError(error) from exc

    async def _abandon(self) -> None:
        await self._run(self._cleanup_sync, False)
        if self._joined:
            await self._leave_shared()

    async def _pre_launch(self, **kwargs: Any) -> dict[str, Any]:
        kwargs = await super().pre_launch(**kwargs)
        if self._container_name:
            pass  # a restart: the same container, with everything installed in it
        elif self.container:
            self._container_name = self.container
            self._dedicated = False
            # Joined first: a pending linger stop is cancelled before the container is checked.
            await self._run(self._ensure_running)
        else:
            name = f"kernel-{self.kernel_id}"[:63] if self.kernel_id else None
            first = self._first_kernel(name, kwargs) if name else None
            request = StartRequest(
                environment=self.environment,
                host=self.host or None,
                gpus=None if self.gpus < 0 else self.gpus,
                name=name,
                kernel_id=self.kernel_id or None,
                first_process=first,
            )
            start = asyncio.get_running_loop().run_in_executor(
                None, self._manager.start, request, self._log_progress
            )
            try:
                info = await self._outlast(start)
            finally:
                if name and self._ports:
                    PLACEMENTS.release_ports(name, self._ports)
                if start.done() and not start.cancelled() and start.exception() is None:
                    # Also when the kernel's start was cancelled meanwhile: what the start
                    # made is then the kernel's, removed with it (``_guarded``).
                    self._made(start.result())
            self._first = first if first is not None and first.started else None
            env = await self._run(
                self._manager.environments.get, self.environment, self._manager.root_dir
            )
            self._idle_timeout = env.idle_timeout
            if info.pod:
                wanted = gpu_request(env, request)
                self._pod_gpus = wanted.count if wanted is not None else 0
        # The kernel's own launch command is built in launch_kernel (it runs in the container).
        kwargs["cmd"] = await self._run(self._kernel_argv)
        return kwargs

    async def _outlast(self, start: asyncio.Future[T]) -> T:
        """The result of a dedicated container's start, which runs on in its thread when the
        kernel's start is cancelled: then that thread is waited for (the cancellation goes on
        after it), so that the container it makes is the kernel's and is removed, its lease
        freed, with the kernel (``_guarded``). A second cancellation ends the wait."""
        try:
            return await asyncio.shield(start)
        except asyncio.CancelledError:
            try:
                await asyncio.wait([start])
            except asyncio.CancelledError:
                self.log.warning(
                    "gpudev kernel %s: cancelled again while its container was starting: the "
                    "container, and its GPUs, may be left until removed, or until the orphan "
                    "sweep after this server ends",
                    self.kernel_id,
                )
                raise
            raise

    def _made(self, info: DevContainerInfo) -> None:
        """The dedicated container its start made is this kernel's (its first kernel's ports
        held in its name)."""
        if self._ports:
            PLACEMENTS.reserve_ports(info.key, self._ports)
        self._container_name = info.key
        self.host = info.host  # where placement put it
        self._dedicated = True

    def _first_kernel(self, name: str, kwargs: dict[str, Any]) -> FirstKernel:
        """The dedicated container's first kernel (``kernels.first``), started by the
        container's own start where the start allows it; its ports chosen now."""
        self._ports = PLACEMENTS.choose_ports(name, len(PORT_NAMES))
        try:
            inside, _ = self._connections([("", port) for port in self._ports])
            environment = self._kernel_env(kwargs.get("env") or {})
        except BaseException:
            PLACEMENTS.release_ports(name, self._ports)
            self._ports = ()
            raise
        cwd = kwargs.get("cwd")

        def lines(host: Host, container: Any, runtime_id: str, argv: list[str]) -> bytes:
            base = str((container.attrs.get("Config") or {}).get("WorkingDir") or "/")
            kernel_file, _, _ = runtime_files(runtime_id)
            return first_instructions(
                connection=inside,
                runtime_id=runtime_id,
                workdir=self._folder(base, host, cwd),
                environment=environment,
                argv=[kernel_file if arg == "{connection_file}" else arg for arg in argv],
            )

        return FirstKernel(f"kernel-{self.kernel_id}", lines)

    def _shared_key(self) -> tuple[str, str]:
        return (self.host or self._manager.host_pool.local_name, self._container_name)

    def _ensure_running(self) -> None:
        """A shared container that was stopped (e.g. after its last kernel) starts again, with
        the GPUs it was created with."""
        info = self._manager.get(self._container_name, self.host or None)
        self.host = info.host
        self._container_name = info.key  # the user's name for it until now
        if info.kernel_id:
            raise Conflict(
                f"{self._container_name!r} belongs to another kernel; start a kernel in a dev "
                "container that kernels share, or in a new one"
            )
        self._join_shared()
        if info.state != "running" and not processes_type(self._host()).stopped_and_kept:
            raise Conflict(f"The pod of {self._container_name!r} is not running ({info.status})")
        if info.state != "running":
            self._manager.resume(self._container_name, self.host or None, self._log_progress)

    def _join_shared(self) -> None:
        key = self._shared_key()
        PLACEMENTS.join(key, self.kernel_id)
        self._joined = True

    async def _leave_shared(self) -> None:
        """The last kernel of a shared container ended: stop it (freeing its GPUs) after the
        linger (``c.DevContainers.linger``), unless it is pinned or a kernel came back."""
        key = self._shared_key()
        self._joined = False
        if not PLACEMENTS.leave(key, self.kernel_id):
            return
        manager = self._manager
        if manager.linger > 0:
            loop = asyncio.get_running_loop()

            def later() -> None:
                loop.run_in_executor(None, _stop_if_unused, manager, key, self.log)

            PLACEMENTS.linger(key, loop.call_later(manager.linger, later))
            return
        await self._run(_stop_if_unused, manager, key, self.log)

    def _log_progress(self, event: dict[str, Any]) -> None:
        self.log.info(
            "gpudev kernel %s: [%s] %s", self.kernel_id, event.get("stage"), event.get("message")
        )

    def _kernel_argv(self) -> list[str]:
        """The image's own python3 kernelspec argv if it has one, else the ipykernel default
        (``KernelProcesses.kernel_argv``)."""
        processes = self._located()
        self._launching = processes  # launch_kernel uses it: one lookup per start
        self._image_argv = tuple(processes.kernel_argv())
        return list(self._image_argv)

    def _choose_ports(self) -> tuple[int, ...]:
        return PLACEMENTS.choose_ports(self._container_name, len(PORT_NAMES))

    def _release_ports(self) -> None:
        PLACEMENTS.release_ports(self._container_name, self._ports)

    async def launch_kernel(self, cmd: list[str], **kwargs: Any) -> KernelConnectionInfo:
        return await self._guarded(not self._launched, self._run(self._launch, cmd, kwargs))

    def _launch(self, cmd: list[str], kwargs: dict[str, Any]) -> KernelConnectionInfo:
        processes, self._launching = self._launching or self._located(), None
        self._processes = processes
        if self._first is not None:
            first, self._first = self._first, None
            return self._adopt_first(processes, first)
        warm = self._launch_warm(processes, kwargs)
        if warm is not None:
            return warm
        if not self._ports:  # a restart keeps its ports, as jupyter_client's local kernels do
            self._ports = self._choose_ports()
        # Where this server reaches each port: the container or pod itself, or a local forward.
        reached = processes.reach(self._ports)
        self._runtime_id = f"kernel-{self.kernel_id}"
        kernel_file, _, _ = runtime_files(self._runtime_id)
        inside, connection = self._connections(reached)
        argv = self._inside_argv(cmd)
        self._exec_id = processes.start(
            argv=argv,
            runtime_id=self._runtime_id,
            connection=inside,
            workdir=self._workdir(processes, kwargs.get("cwd")),
            environment=self._kernel_env(kwargs.get("env") or {}),
        )
        argv = [kernel_file if arg == "{connection_file}" else arg for arg in argv]
        self._exit_code = None
        self._check_started(processes, argv)
        self._launched = True
        self._register()
        self.log.info(
            "gpudev kernel %s started in %s (%s), reached at %s",
            self.kernel_id,
            self._container_name,
            " ".join(argv),
            reached,
        )
        self._keep_warm()
        return connection

    def _adopt_first(self, processes: KernelProcesses, first: FirstKernel) -> KernelConnectionInfo:
        """The kernel the dedicated container started with (``kernels.first``) becomes this
        kernel: checked as a kernel just exec'd is, then registered."""
        self._runtime_id = first.runtime_id
        reached = processes.reach(self._ports)
        _, connection = self._connections(reached)
        # Its launcher's host PID, taken at the container's start, in it: kept across a
        # server's restart with the handle (``process.first_handle``).
        self._exec_id = first.handle
        kernel_file, _, _ = runtime_files(self._runtime_id)
        argv = [kernel_file if arg == "{connection_file}" else arg for arg in first.argv]
        self._exit_code = None
        self._check_started(processes, argv)
        self._launched = True
        self._register()
        self.log.info(
            "gpudev kernel %s started with %s (%s), reached at %s",
            self.kernel_id,
            self._container_name,
            " ".join(argv),
            reached,
        )
        return connection

    def _connections(
        self, reached: list[tuple[str, int]]
    ) -> tuple[dict[str, Any], KernelConnectionInfo]:
        """The kernel's connection file inside (its own ports on every address) and the
        server's connection (where it reaches each port), with the session's key."""
        km: Any = self.parent
        info: dict[str, Any] = {
            "transport": "tcp",
            "signature_scheme": km.session.signature_scheme,
            "kernel_name": getattr(km, "kernel_name", ""),
        }
        key = km.session.key
        inside = {
            **info,
            **dict(zip(PORT_NAMES, self._ports, strict=True)),
            "ip": "0.0.0.0",  # noqa: S104 - the container's or pod's own network namespace
            "key": key.decode(),
        }
        connection: dict[str, Any] = {
            **info,
            **dict(zip(PORT_NAMES, (port for _, port in reached), strict=True)),
            "ip": reached[0][0],
            "key": key,
        }
        return inside, cast(KernelConnectionInfo, connection)

    def _inside_argv(self, cmd: list[str]) -> list[str]:
        """The kernel's command with jupyter_client's local connection file as a placeholder
        for the one inside."""
        local_file = getattr(self.parent, "connection_file", "")
        return ["{connection_file}" if arg == local_file else arg for arg in cmd]

    def _launch_warm(
        self, processes: KernelProcesses, kwargs: dict[str, Any]
    ) -> KernelConnectionInfo | None:
        """The first start of a kernel in a shared container takes a warm kernel of it
        (``kernels.warm``) when one is ready: it is moved to the notebook's folder and becomes
        this kernel, key and ports included. ``None``: start one as usual."""
        pool = PLACEMENTS.warm
        km: Any = self.parent
        if (
            pool is None
            or not processes.keeps_warm
            or self._launched
            or self._dedicated
            or not self._image_argv
            or km.session.signature_scheme != "hmac-sha256"
            or getattr(getattr(self, "kernel_spec", None), "env", None)
        ):
            return None
        warm = pool.take(self._shared_key(), processes, list(self._image_argv))
        if warm is None:
            return None
        env = kwargs.get("env") or {}
        workdir = self._workdir(processes, kwargs.get("cwd"))
        if not pool.prepare(warm, workdir, env.get("JPY_SESSION_NAME")):
            pool.discard(warm)
            return None
        self._exec_id, self._runtime_id, self._ports = warm.exec_id, warm.runtime_id, warm.ports
        self._exit_code = None
        self._launched = True
        self._register()
        self.log.info(
            "gpudev kernel %s: a warm kernel of %s (%s)",
            self.kernel_id,
            self._container_name,
            warm.runtime_id,
        )
        self._keep_warm()
        connection = {**warm.connection(), "kernel_name": getattr(km, "kernel_name", "")}
        return cast(KernelConnectionInfo, connection)

    def _keep_warm(self) -> None:
        """A kernel started in a shared container: keep warm ones ready there for the next."""
        if PLACEMENTS.warm is None or self._dedicated:
            return
        if processes_type(self._host()).keeps_warm:
            PLACEMENTS.warm.fill(self._manager, self._shared_key())

    def _check_started(self, processes: KernelProcesses, argv: list[str]) -> None:
        """A kernel that dies at once (no ipykernel, a bad argv) is an error with its output,
        and leaves no container or lease behind, instead of a "kernel died" restart loop."""
        code = processes.watch_start(self._poll_sync, self.startup_check_seconds)
        if code is None:
            return
        tail = processes.log_tail(self.runtime_id)
        why = ask = ""
        if processes.exit_codes:  # where only that it ended is known, nothing more is said
            why = f"(exit {code}) "
            ask = f", and is the kernel command right ({' '.join(argv)})"
        raise KernelStartFailed(
            f"The kernel exited at once {why}in {self._container_name!r}: "
            f"{tail[-1] if tail else 'no output'}. Does the image have ipykernel{ask}?",
            details={"log": tail},
        )

    def _kernel_env(self, env: dict[str, str]) -> dict[str, str]:
        """Only what the kernel needs from the launch environment: never the server's own."""
        keep = {"JPY_SESSION_NAME"}
        spec_env = getattr(getattr(self, "kernel_spec", None), "env", None) or {}
        result = {k: v for k, v in env.items() if k in keep}
        result.update({k: str(v) for k, v in spec_env.items()})
        return result

    def _workdir(self, processes: KernelProcesses, cwd: str | None) -> str | None:
        """The notebook's folder, as seen inside the container (the workspace mount). On a
        remote host the workspace is that host's folder, which need not have this machine's
        layout: the kernel starts at its root. ``None``: where the exec starts (a pod's)."""
        return self._folder(processes.working_dir, processes.host, cwd)

    def _folder(self, base: str | None, host: Host, cwd: str | None) -> str | None:
        """``_workdir`` from the container's working folder and its host. In the shared service
        ``cwd`` (a client's) is resolved only when it is under the user's folder as written: no
        link is followed, nor a folder looked at, elsewhere (another user's, an automount)."""
        manager = self._manager
        if base is None or not cwd or not host.spec.is_local:
            return base
        root = Path(manager.root_dir)
        lexical = Path(os.path.normpath(cwd)).is_relative_to(root)
        if not manager.access.single_user and not lexical:
            return base
        try:
            relative = Path(cwd).resolve().relative_to(root)
        except (ValueError, OSError, RuntimeError):  # (a link loop: RuntimeError until 3.13)
            return base
        return str(Path(base) / relative) if str(relative) != "." else base

    # ------------------------------------------------------------------------------------------
    # Process control
    # ------------------------------------------------------------------------------------------

    def _poll_sync(self) -> int | None:
        if not self._exec_id:
            return 0
        try:
            code = self._exit_of_process()
        except EngineUnreachable as err:
            # A remote host that dropped: still running as far as we know, for a while (the
            # next call reconnects); past the grace, dead, with the reason in the log.
            now = time.monotonic()
            self._unreachable_since = self._unreachable_since or now
            if now - self._unreachable_since < self.unreachable_grace:
                return None
            self.log.warning(
                "gpudev kernel %s: host unreachable for %.0f s, the kernel is lost: %s",
                self.kernel_id,
                now - self._unreachable_since,
                err.message,
            )
            self._exit_code = -1
            return self._exit_code
        except (docker.errors.DockerException, GPUDevError):
            self._exit_code = -1
            return self._exit_code
        self._unreachable_since = 0.0
        if code is not None and is_first(self._exec_id) and self._launched:
            self.log.info(
                "gpudev kernel %s: its first process in %s ended (%s)",
                self.kernel_id,
                self._container_name,
                code,
            )
        self._exit_code = code
        return code

    def _exit_of_process(self) -> int | None:
        """The kernel process's exit code, ``None`` while it runs (``KernelProcesses``)."""
        return self._current().exit_code(self._exec_id, self.runtime_id)

    async def poll(self) -> int | None:
        if self._exit_code is not None:
            return self._exit_code
        return await self._run(self._poll_sync)

    async def wait(self) -> int | None:
        while True:
            code = await self.poll()
            if code is not None:
                return code
            await asyncio.sleep(0.05)

    def _signal_sync(self, signum: int) -> None:
        try:
            self._located().send_signal(self.runtime_id, signum)
        except _BEST_EFFORT as exc:
            self.log.warning("gpudev kernel %s: signal %s failed: %r", self.kernel_id, signum, exc)

    async def shutdown_requested(self, restart: bool = False) -> None:  # noqa: ARG002
        """The kernel was asked to shut down: watch its process closely (every
        ``exit_poll_seconds``) for at most half the manager's shutdown wait, so that what
        follows its exit (a dedicated container stopped, its GPUs freed) starts at once;
        jupyter_client's own wait checks only every 0.1 s. The time spent here is taken off
        that wait (``get_shutdown_wait_time``)."""
        self._shutdown_waited = 0.0
        if not self.has_process:
            return
        limit = max(0.0, float(getattr(self.parent, "shutdown_wait_time", 5.0))) / 2
        started = time.monotonic()
        await self._run(self._wait_exit_sync, limit)
        self._shutdown_waited = time.monotonic() - started

    def _wait_exit_sync(self, limit: float) -> None:
        deadline = time.monotonic() + limit
        while self._poll_sync() is None and time.monotonic() < deadline:
            time.sleep(self.exit_poll_seconds)

    def get_shutdown_wait_time(self, recommended: float = 5.0) -> float:
        return max(0.0, recommended - self._shutdown_waited)

    async def send_signal(self, signum: int) -> None:
        if not self.has_process:
            return
        km = self.parent
        if signum == signal.SIGINT and getattr(km, "shutting_down", False):
            # jupyter_client interrupts a kernel before asking it to shut down, so that a
            # busy one listens. An idle one (as the server knows from its messages) needs
            # none; a busy one gets it without the shutdown waiting for the exec (~60 ms).
            if getattr(km, "execution_state", None) != "idle":
                asyncio.get_running_loop().run_in_executor(None, self._signal_sync, signum)
            return
        await self._run(self._signal_sync, signum)

    async def kill(self, restart: bool = False) -> None:  # noqa: ARG002 - same either way
        await self.send_signal(signal.SIGKILL)

    async def terminate(self, restart: bool = False) -> None:  # noqa: ARG002
        await self.send_signal(signal.SIGTERM)

    async def cleanup(self, restart: bool = False) -> None:
        await self._run(self._cleanup_sync, restart)
        if not restart and self._joined:
            await self._leave_shared()

    def _register(self) -> None:
        """Tell the server's kernel registry where this kernel runs (it counts a container's
        kernels); a restart registers it again, unchanged."""
        registry = self._manager.kernels
        if isinstance(registry, KernelRegistry) and self.kernel_id:
            registry.add(
                KernelPlacement(
                    kernel_id=self.kernel_id,
                    host=self.host or self._manager.host_pool.local_name,
                    container=self._container_name,
                    dedicated=self._dedicated,
                    host_pid=self._kernel_host_pid(),
                )
            )

    def _kernel_host_pid(self) -> int | None:
        """The kernel's PID on its host, as the engine says (``KernelProcesses.host_pid``):
        what its GPU processes are told by; ``None`` when not known."""
        if self._processes is None or not self._exec_id:
            return None
        try:
            return self._processes.host_pid(self._exec_id)
        except _BEST_EFFORT as exc:
            self.log.debug("gpudev kernel %s: no host PID: %r", self.kernel_id, exc)
            return None

    def _cleanup_sync(self, restart: bool) -> None:
        self._exec_id = ""
        registry = self._manager.kernels
        if not restart and self._launched and isinstance(registry, KernelRegistry):
            registry.remove(self.kernel_id)  # first: its container is now unused
        if restart or not self._container_name:
            return
        self._close_forwards()
        self._release_ports()
        self._ports = ()
        if not self._dedicated:
            # Off the shutdown's path (an exec, ~60 ms): a shared container whose last
            # kernel this was is stopped next, and its GPUs freed.
            threading.Thread(
                target=self._remove_runtime_files,
                args=(self._container_name, self.host or None, self.runtime_id),
                name="gpudev-kernel-files",
                daemon=True,
            ).start()
            return
        manager = self._manager
        host = self.host or None
        if not processes_type(self._host()).stopped_and_kept:
            self._end_pod(manager, host)
            return
        try:
            # Either way the lease is released as soon as the container has stopped (well
            # under 1 s); remove() stops it first.
            if self.remove_unchanged and not self.keep_container:
                try:
                    manager.remove(self._container_name, host)
                except Conflict:
                    self.log.info(
                        "gpudev kernel %s: %s has changes: stopped and kept until committed or "
                        "removed",
                        self.kernel_id,
                        self._container_name,
                    )
            else:
                manager.stop(self._container_name, host)
        except GPUDevError as err:
            self.log.warning(
                "gpudev kernel %s: cleaning up %s: %s",
                self.kernel_id,
                self._container_name,
                err.message,
            )

    def _end_pod(self, manager: DevContainers, host: str | None) -> None:
        """A kernel's own pod is deleted at its end (its GPUs freed, its workspace claim kept),
        unless files outside the workspace changed: a pod cannot be stopped and kept, so it
        keeps running, with its GPUs, until its changes are committed or it is removed."""
        try:
            manager.remove(self._container_name, host)
        except Conflict as err:
            self.log.warning(
                "gpudev kernel %s: the pod of %s is kept running with its GPUs: %s",
                self.kernel_id,
                self._container_name,
                err.message,
            )
        except GPUDevError as err:
            self.log.warning(
                "gpudev kernel %s: deleting the pod of %s: %s",
                self.kernel_id,
                self._container_name,
                err.message,
            )

    def _close_forwards(self) -> None:
        """Tear down this kernel's SSH forwards (a remote host) or port-forwards (a pod); a
        no-op on a local host."""
        if not self._ports:
            return
        with contextlib.suppress(*_BEST_EFFORT):
            self._current().close_forwards(self._ports)

    def _remove_runtime_files(self, container_name: str, host: str | None, runtime_id: str) -> None:
        with contextlib.suppress(*_BEST_EFFORT):
            manager = self._manager
            where = manager.host_pool.get(host or manager.host_pool.local_name)
            kernel_processes(manager, where, container_name).remove_files(runtime_id)

    async def get_provisioner_info(self) -> dict[str, Any]:
        info: dict[str, Any] = await super().get_provisioner_info()
        info.update(
            host=self.host,
            container=self._container_name,
            dedicated=self._dedicated,
            pod_gpus=self._pod_gpus,
            exec_id=self._exec_id,
            runtime_id=self.runtime_id,
            ports=list(self._ports),
        )
        return info

    async def load_provisioner_info(self, provisioner_info: dict[str, Any]) -> None:
        await super().load_provisioner_info(provisioner_info)
        self._container_name = str(provisioner_info.get("container", ""))
        self.host = str(provisioner_info.get("host") or self.host)
        self._dedicated = bool(provisioner_info.get("dedicated", False))
        self._pod_gpus = int(provisioner_info.get("pod_gpus", 0) or 0)
        self._exec_id = str(provisioner_info.get("exec_id", ""))
        self._runtime_id = str(provisioner_info.get("runtime_id", ""))
        self._ports = tuple(int(p) for p in provisioner_info.get("ports", []))


def _stop_if_unused(manager: DevContainers, key: tuple[str, str], log: Any) -> None:
    """Stop a shared container whose last kernel ended, unless a kernel joined it since or the
    user pinned it; a pod is deleted instead (a pod is not stopped and kept; its workspace
    claim is), unless files outside its workspace changed. Runs off the event loop (it waits
    for the container to stop)."""
    host, name = key
    if not PLACEMENTS.unused(key):
        return
    try:
        if name in manager.ledger.pinned(host):
            log.info("gpudev: %s is pinned: kept running after its last kernel", name)
            return
        if not processes_type(manager.host_pool.get(host)).stopped_and_kept:
            with PLACEMENTS.closing(key) as free:  # no kernel joins a pod being deleted
                if free:
                    _delete_unused_pod(manager, host, name, log)
            return
        manager.stop(name, host)
    except GPUDevError as err:
        log.warning("gpudev: ending %s after its last kernel: %s", name, err.message)
        return
    log.info("gpudev: stopped %s (its last kernel ended); its GPUs are free", name)


def _delete_unused_pod(manager: DevContainers, host: str, name: str, log: Any) -> None:
    """Delete a shared pod whose last kernel ended, its GPUs freed, when nothing outside its
    workspace changed; else it keeps running, with its GPUs, until committed or removed."""

    def pinned_meanwhile() -> str | None:  # while its files were being compared
        return f"{name!r} was pinned meanwhile" if name in manager.ledger.pinned(host) else None

    try:
        manager.remove(name, host, keep=pinned_meanwhile)
    except Conflict as err:
        log.warning(
            "gpudev: the pod %s keeps running, with its GPUs, after its last kernel: %s",
            name,
            err.message,
        )
        return
    log.info(
        "gpudev: deleted the pod %s (its last kernel ended); its GPUs are free, its workspace "
        "claim kept",
        name,
    )
