"""The shared service's side of client-mode kernels: the kernel processes it runs in users'
dev containers for their servers (``kernels.remote.ServiceKernelProvisioner`` asks).

Each kernel is a ``GPUDevProvisioner`` working on the caller's view (their containers, the
shared ledger), with the session key the user's server sent; it is known by its owner and
kernel id together, so no one reaches another user's kernel (404). Routes, under
``/gpudev/api/kernel-processes``: ``POST`` launch (or relaunch, for a restart), ``GET ID``
poll, ``POST ID/signal``, ``POST ID/cleanup``, ``POST ID/activity``.

Each launched kernel is written in the kernel table (``shared.kernel_table``: its owner, id
and the provisioner's persistable info, never its key) and forgotten at its cleanup, so that
a restarted service reaches it again (``restore``): the kernels whose process still runs are
kept, by the same owner and id; those that ended meanwhile are released as a cleanup would.
A relaunch (a restart of the kernel) brings the client's key again, as every launch does.

A kernel whose server stopped asking after it (killed, its machine gone: a running server
polls each kernel every few seconds, ``kernels.remote`` at least every ``ASK_EVERY`` seconds)
is ended after ``c.GPUDevService.abandoned_kernel_timeout`` as its shutdown would end it
(``end_abandoned``): its dedicated container removed, or kept with its changes, its GPUs freed.

A kernel running (launched, or reached again) is in its owner's view's kernel registry
(``Authority.kernels``, ``kernels.live``) by the id its client's server gave it, with its
process's host PID: GPU use (``GET /gpudev/api/usage``, its ``?kernel=ID``, ``/metrics``)
tells its processes as a single-user server tells its own, owner-scoped the same way. Its
messages go between the client and the kernel, unseen here: the client tells its last
activity (``POST ID/activity``, ``kernels.remote``), which is its idle time here (none
before the first report, and none from an older client).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import re
import signal
import time
from datetime import datetime, timezone
from typing import Any

from jupyter_client.kernelspec import KernelSpec
from tornado import web
from traitlets import Any as AnyTrait
from traitlets import Unicode
from traitlets.config import LoggingConfigurable

from ..containers.limits import Whose, check_count
from ..errors import BadRequest, GPUDevError, NotFound
from ..handlers.base import (
    GPUDevHandler,
    OperationCount,
    UserViews,
    authorized_to_execute,
    maps_errors,
)
from ..kernels.placements import PLACEMENTS
from ..kernels.process import DEFAULT_ARGV
from ..kernels.provisioner import GPUDevProvisioner, KernelLaunchError
from ..services import Services
from .kernel_table import KernelRecord, KernelTable, without_secrets

KERNEL_ID = re.compile(r"[0-9a-f-]{1,64}")
#: Signals a client may send to its kernel (interrupt, terminate, kill, hang up).
SIGNALS = frozenset({signal.SIGINT, signal.SIGTERM, signal.SIGKILL, signal.SIGHUP})
SCHEMES = frozenset({"hmac-sha256", "hmac-sha512", "hmac-md5"})
#: Where ``GPUDevApp`` puts the service's ``KernelProcesses``.
PROCESSES_KEY = "gpudev_kernel_processes"
#: The setting of how long a kernel no server asks after runs on.
ABANDONED_SETTING = "c.GPUDevService.abandoned_kernel_timeout"
#: The most seconds between two looks for abandoned kernels.
ABANDONED_LOOK_EVERY = 60.0


class _Session:
    def __init__(self, key: bytes, scheme: str) -> None:
        self.key = key
        self.signature_scheme = scheme


class KernelOwner(LoggingConfigurable):
    """Stands in for the user's kernel manager: its session (key, scheme) and kernel name."""

    kernel_name = Unicode("")
    connection_file = Unicode("")
    session = AnyTrait()


class ServiceKernel(GPUDevProvisioner):
    """A kernel the service runs for a client, in the caller's view."""

    def __init__(self, view: Services, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self._view = view

    @property
    def _manager(self) -> Any:
        return self._view.containers

    @property
    def owner_state(self) -> KernelOwner:
        """Its stand-in kernel manager (session key and scheme, kernel name)."""
        parent = self.parent
        assert isinstance(parent, KernelOwner)  # noqa: S101 - always made with one
        return parent

    def use_session(self, key: str, scheme: str) -> None:
        """The client's session for the next launch (each launch brings it again)."""
        self.owner_state.session = _Session(key.encode(), scheme)

    async def get_provisioner_info(self) -> dict[str, Any]:
        """What reaches the kernel again after a restart of the service: the provisioner's
        info and the launch's own settings, without the connection key."""
        info: dict[str, Any] = await super().get_provisioner_info()
        info.update(
            kernel_name=self.owner_state.kernel_name,
            signature_scheme=self.owner_state.session.signature_scheme,
            environment=self.environment,
            gpus=self.gpus,
            idle_timeout=self._idle_timeout,
        )
        return dict(without_secrets(info))

    async def load_provisioner_info(self, provisioner_info: dict[str, Any]) -> None:
        """A kernel launched by an earlier run of the service: reached by its process's
        handle, with no key until its client's next launch."""
        await super().load_provisioner_info(provisioner_info)
        self.environment = str(provisioner_info.get("environment") or "default")
        gpus = provisioner_info.get("gpus")
        self.gpus = gpus if isinstance(gpus, int) and not isinstance(gpus, bool) else -1
        timeout = provisioner_info.get("idle_timeout")
        self._idle_timeout = float(timeout) if isinstance(timeout, int | float) else None
        self._launched = True  # a failed relaunch keeps the container, as a restart's does

    def rejoin(self) -> None:
        """Count it again among its shared container's kernels, and its ports as taken."""
        if not self._dedicated and self._container_name:
            self._join_shared()
        if self._container_name and self._ports:
            PLACEMENTS.reserve_ports(self._container_name, self._ports)


def _service_kernel(
    view: Services, kernel_id: str, *, kernel_name: str, key: str, scheme: str, log: Any
) -> ServiceKernel:
    parent = KernelOwner(kernel_name=kernel_name, session=_Session(key.encode(), scheme))
    kernel = ServiceKernel(view, parent=parent, kernel_id=kernel_id, log=log)
    # The image's own kernel command is used (see GPUDevProvisioner._kernel_argv)
    kernel.kernel_spec = KernelSpec(
        argv=list(DEFAULT_ARGV), display_name="gpudev", language="python"
    )
    return kernel


def _session_of(body: dict[str, Any]) -> tuple[str, str]:
    """The key and signature scheme of a launch's body."""
    key = _field(body, "key", str, "")
    scheme = _field(body, "signature_scheme", str, "hmac-sha256")
    if not key or len(key) > 512 or scheme not in SCHEMES:
        raise BadRequest("'key' and 'signature_scheme' must be a session's")
    return str(key), str(scheme)


def _kept_env(body: dict[str, Any]) -> dict[str, str]:
    """What of a launch's environment the kernel gets: its session's name."""
    env = _field(body, "env", dict, {}) or {}
    session_name = env.get("JPY_SESSION_NAME")
    return {"JPY_SESSION_NAME": session_name} if isinstance(session_name, str) else {}


def _field(body: dict[str, Any], name: str, kind: type, default: Any) -> Any:
    """``body[name]`` (or ``default``) if ``None`` or of type ``kind`` (a bool is no int)."""
    value = body.get(name, default)
    if value is None:
        return None
    fits = (
        isinstance(value, bool)
        if kind is bool
        else (isinstance(value, kind) and not isinstance(value, bool))
    )
    if not fits:
        raise BadRequest(f"'{name}' must be a {kind.__name__}")
    return value


class KernelProcesses:
    """The kernels the service runs for clients, by (owner, kernel id).

    ``table``: where they are written, to be reached again after a restart (``restore``);
    ``views``: each owner's view (``shared.authority.Authority``), for ``restore``. Without
    them (tests of the HTTP layer) the kernels live as long as the process."""

    def __init__(
        self,
        log: Any,
        table: KernelTable | None = None,
        views: UserViews | None = None,
        *,
        abandoned_timeout: float = 0.0,
        clock: Any = time.monotonic,
    ) -> None:
        self.log = log
        self._kernels: dict[tuple[str, str], ServiceKernel] = {}
        #: Seconds a kernel no server asks after runs on (``end_abandoned``; 0: for good).
        self.abandoned_timeout = abandoned_timeout
        self._clock = clock
        #: When (``clock``) each kernel's server last asked after it, or it was launched or
        #: reached again.
        self._asked: dict[tuple[str, str], float] = {}
        #: The kernels whose launch (or relaunch) is under way: never abandoned meanwhile.
        self._launching: set[tuple[str, str]] = set()
        self._looking: asyncio.Task[None] | None = None
        self._lock = asyncio.Lock()
        self.table = table
        self.views = views
        self._restoring: asyncio.Future[tuple[int, int]] | None = None
        #: Launches under way by owner: each one of their operations in the service.
        self.launching = OperationCount()

    async def _ready(self) -> None:
        """A call waits for the restore under way: a kernel is not reported gone meanwhile."""
        if self._restoring is not None and not self._restoring.done():
            await asyncio.shield(self._restoring)

    def _get(self, owner: str, kernel_id: str) -> ServiceKernel:
        """The owner's kernel, which its server asked after now."""
        kernel = self._kernels.get((owner, kernel_id))
        if kernel is None:
            raise NotFound(f"No kernel {kernel_id!r} of yours runs here")
        self._asked[(owner, kernel_id)] = self._clock()
        return kernel

    async def _run(self, func: Any, *args: Any) -> Any:
        return await asyncio.get_running_loop().run_in_executor(None, func, *args)

    async def _save(self, owner: str, admin: bool, kernel: ServiceKernel) -> None:
        if self.table is None:
            return
        info = await kernel.get_provisioner_info()
        # Its process's PID on the host (the engine's word, read at its launch): what tells
        # its GPU processes in another process of this machine (``jupyter gpudev top``).
        info["host_pid"] = await self._run(kernel._kernel_host_pid)
        await self._run(self.table.save, KernelRecord(owner, str(kernel.kernel_id), admin, info))

    async def _forget(self, owner: str, kernel_id: str) -> None:
        if self.table is None:
            return
        try:
            await self._run(self.table.remove, owner, kernel_id)
        except GPUDevError as err:  # it is gone; a restart finds it ended and drops it then
            self.log.warning(
                "gpudev: kernel %s not removed from the table: %s", kernel_id, err.message
            )

    async def launch(self, view: Services, owner: str, body: Any) -> dict[str, Any]:
        if not isinstance(body, dict):
            raise BadRequest("The body must be a JSON object")
        kernel_id = body.get("kernel_id")
        if not isinstance(kernel_id, str) or not KERNEL_ID.fullmatch(kernel_id):
            raise BadRequest("'kernel_id' must be a kernel id")
        key, scheme = _session_of(body)
        kept = _kept_env(body)
        cwd = _field(body, "cwd", str, None)
        kernel_name = str(_field(body, "kernel_name", str, "") or "")
        environment = str(_field(body, "environment", str, "default"))
        container = str(_field(body, "container", str, "") or "")
        gpus = _field(body, "gpus", int, None)
        host = str(_field(body, "host", str, "") or "")
        limit = view.containers.limits.for_user(
            owner, shared=not view.containers.access.single_user
        ).kernels
        await self._ready()
        async with self._lock:
            kernel = self._kernels.get((owner, kernel_id))
            fresh = kernel is None
            if kernel is None:
                # Counted by owner under the lock, with the launches under way: one more
                # beyond c.UserLimits.kernels is refused (a relaunch is no new kernel).
                held = sorted(kid for (who, kid) in self._kernels if who == owner)
                check_count(limit, held, Whose(owner, owner), what="kernel", undo="shut down")
                kernel = _service_kernel(
                    view, kernel_id, kernel_name=kernel_name, key=key, scheme=scheme, log=self.log
                )
                kernel.environment = environment
                kernel.container = container
                kernel.gpus = -1 if gpus is None else gpus
                kernel.host = host
                self._kernels[(owner, kernel_id)] = kernel
            else:  # a relaunch: the client's key again (a restored kernel had none)
                kernel.use_session(key, scheme)
            self._asked[(owner, kernel_id)] = self._clock()
            self._launching.add((owner, kernel_id))
        operations = self.views.operations_per_user if self.views is not None else 0
        try:
            with self.launching.held(owner, operations):
                kwargs = await kernel.pre_launch(env=kept, cwd=cwd)
                connection = dict(await kernel.launch_kernel(kwargs.pop("cmd"), **kwargs))
                await self._save(owner, view.containers.access.local().admin, kernel)
        except KernelLaunchError as err:
            await self._launch_failed(owner, kernel, fresh)
            raise err.error from None
        except BaseException:
            await self._launch_failed(owner, kernel, fresh)
            raise
        finally:
            self._launch_ended(owner, kernel_id)
        connection.pop("key", None)  # the client has it; it is never sent back
        return {
            "connection": connection,
            "container": kernel.container_name,
            "host": kernel.host,
            "dedicated": kernel._dedicated,
            "gpu_uuids": list(kernel.gpu_uuids()),
            "idle_timeout": kernel.idle_timeout(),
        }

    def _launch_ended(self, owner: str, kernel_id: str) -> None:
        """A pull or a build may take long: the server's asking counts from the launch's end."""
        self._launching.discard((owner, kernel_id))
        if (owner, kernel_id) in self._asked:
            self._asked[(owner, kernel_id)] = self._clock()

    async def _launch_failed(self, owner: str, kernel: ServiceKernel, fresh: bool) -> None:
        if not fresh:
            return
        self._kernels.pop((owner, str(kernel.kernel_id)), None)
        self._asked.pop((owner, str(kernel.kernel_id)), None)
        if kernel.has_process:  # started, but not written: not left running unknown
            self.log.warning("gpudev kernel %s: not written in the table, ended", kernel.kernel_id)
            await kernel.kill()
            await kernel.cleanup(restart=False)

    async def poll(self, owner: str, kernel_id: str) -> int | None:
        await self._ready()
        return await self._get(owner, kernel_id).poll()

    async def signal(self, owner: str, kernel_id: str, signum: Any) -> None:
        if not isinstance(signum, int) or isinstance(signum, bool) or signum not in SIGNALS:
            raise BadRequest("'signum' must be SIGINT, SIGTERM, SIGKILL or SIGHUP")
        await self._ready()
        await self._get(owner, kernel_id).send_signal(signum)

    async def cleanup(self, owner: str, kernel_id: str, body: Any) -> None:
        body = body if isinstance(body, dict) else {}
        await self._ready()
        kernel = self._get(owner, kernel_id)
        kernel.keep_container = bool(_field(body, "keep_container", bool, False))
        restart = bool(_field(body, "restart", bool, False))
        await kernel.cleanup(restart=restart)
        if not restart:
            self._kernels.pop((owner, kernel_id), None)
            self._asked.pop((owner, kernel_id), None)
            await self._forget(owner, kernel_id)

    async def activity(self, owner: str, kernel_id: str, body: Any) -> None:
        """The kernel's last activity, as its client saw it: an ISO 8601 time (one to come
        is taken for now)."""
        stamp = _field(body if isinstance(body, dict) else {}, "last_activity", str, None)
        try:
            when = datetime.fromisoformat(stamp) if stamp else None
        except ValueError:
            when = None
        if when is None:
            raise BadRequest("'last_activity' must be an ISO 8601 time")
        if when.tzinfo is None:
            when = when.replace(tzinfo=timezone.utc)
        when = min(when, datetime.now(timezone.utc))
        await self._ready()
        kernel = self._get(owner, kernel_id)
        registry = kernel._view.kernels
        if registry is not None:
            registry.record_activity(kernel_id, when)

    # -- kernels whose server is gone ------------------------------------------------------------

    async def end_abandoned(self) -> list[tuple[str, str]]:
        """End the kernels no server asked after (polled, signalled, told their activity)
        for ``abandoned_timeout`` seconds, as their shutdown would: the process killed, a
        dedicated container removed, or kept with its changes, the GPUs freed; the record
        forgotten. A running server asks every few seconds: such a kernel's server was
        killed, or its machine is gone, and nothing else would ever end it. Returns the
        (owner, kernel id) of those ended."""
        if not self.abandoned_timeout:
            return []
        await self._ready()
        ended = []
        for owner, kernel_id in list(self._asked):
            async with self._lock:  # taken out under the launches' lock: a relaunch or a
                # cleanup that comes now finds no kernel (404)
                key = (owner, kernel_id)
                kernel = self._kernels.get(key)
                silent = self._clock() - self._asked.get(key, self._clock())
                if kernel is None or key in self._launching or silent <= self.abandoned_timeout:
                    continue  # cleaned up, launching, or asked after
                self._kernels.pop(key, None)
                self._asked.pop(key, None)
            self.log.warning(
                "gpudev kernel %s of %s: no server asked after it for %.0f s (%s): ended, "
                "its GPUs freed",
                kernel_id,
                owner,
                silent,
                ABANDONED_SETTING,
            )
            try:
                if kernel.has_process:
                    await kernel.kill()
                await kernel.cleanup(restart=False)
            except Exception:  # kept in the table: the next start of the service sees to it
                self.log.exception("gpudev kernel %s: ending it failed", kernel_id)
                continue
            await self._forget(owner, kernel_id)
            ended.append((owner, kernel_id))
        return ended

    def start_looking(self) -> None:
        """Look for abandoned kernels every ``ABANDONED_LOOK_EVERY`` seconds (a quarter of
        the timeout, if less) on the running loop (``GPUDevApp`` starts it); not at all
        while ``abandoned_timeout`` is 0."""
        if self._looking is None and self.abandoned_timeout:
            self._looking = asyncio.ensure_future(self._look())

    async def _look(self) -> None:
        every = min(ABANDONED_LOOK_EVERY, self.abandoned_timeout / 4)
        while True:
            await asyncio.sleep(every)
            try:
                await self.end_abandoned()
            except Exception:
                self.log.exception("gpudev: the look for abandoned kernels failed; it goes on")

    async def stop_looking(self) -> None:
        if self._looking is not None:
            self._looking.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._looking
            self._looking = None

    # -- after a restart of the service ---------------------------------------------------------

    def start_restore(self) -> asyncio.Future[tuple[int, int]]:
        """``restore`` on the running loop, once (``GPUDevApp`` starts it, and sweeps
        orphans after it); calls for kernels wait for it."""
        if self._restoring is None:
            self._restoring = asyncio.ensure_future(self.restore())
        return self._restoring

    def kept_containers(self) -> frozenset[tuple[str, str]]:
        """``(host, container)`` of the containers dedicated to a kernel held now."""
        return frozenset(
            (kernel.host, kernel.container_name)
            for kernel in list(self._kernels.values())
            if kernel._dedicated and kernel.container_name
        )

    async def restore(self) -> tuple[int, int]:
        """Reach the kernels of the table again: those whose process still runs are kept
        (by owner and id, as before), those that ended are released as a cleanup would and
        forgotten. Returns how many were kept and how many forgotten (logged)."""
        try:
            return await self._restore()
        except Exception:  # the service serves on; the kernels not reached stay in the table
            self.log.exception("gpudev: the kernels of clients could not be reached again")
            return (0, 0)

    async def _restore(self) -> tuple[int, int]:
        if self.table is None or self.views is None:
            return (0, 0)
        started = time.monotonic()
        records = await self._run(self.table.load)
        kernels: list[tuple[KernelRecord, ServiceKernel]] = []
        for record in records:
            kernel = await self._restored(record)
            if kernel is not None:
                kernels.append((record, kernel))
        # Every kernel of a shared container counted first: one that ended does not stop
        # the container under another that runs.
        for _, kernel in kernels:
            kernel.rejoin()
        codes = await asyncio.gather(*(self._exit_code(r, k) for r, k in kernels))
        ended = [
            (r, k, code) for (r, k), code in zip(kernels, codes, strict=True) if code is not None
        ]
        for (record, kernel), code in zip(kernels, codes, strict=True):
            if code is None:
                self._kernels.setdefault((record.owner, record.kernel_id), kernel)
                self._asked[(record.owner, record.kernel_id)] = self._clock()  # from now on
                await self._run(kernel._register)  # the view's kernel registry, if any
        await asyncio.gather(*(self._release(r, k, code) for r, k, code in ended))
        kept, forgotten = len(kernels) - len(ended), len(ended)
        self.log.info(
            "gpudev: %d kernels of clients reached again, %d that had ended forgotten (%.2f s)",
            kept,
            forgotten,
            time.monotonic() - started,
        )
        return kept, forgotten

    async def _exit_code(self, record: KernelRecord, kernel: ServiceKernel) -> int | None:
        """The restored kernel's exit code; ``None`` while it runs, or when its process
        cannot be checked now (kept, for its owner to end)."""
        try:
            return await kernel.poll()
        except Exception as exc:  # logged; the kernel is kept
            self.log.warning(
                "gpudev kernel %s of %s: its process not checked: %r",
                record.kernel_id,
                record.owner,
                exc,
            )
            return None

    async def _release(self, record: KernelRecord, kernel: ServiceKernel, code: int) -> None:
        """A kernel that ended while the service was down: released as a cleanup would."""
        self.log.info(
            "gpudev kernel %s of %s ended (%s) while the service was down: released",
            record.kernel_id,
            record.owner,
            code,
        )
        try:
            await kernel.cleanup(restart=False)
        except GPUDevError as err:
            self.log.warning("gpudev kernel %s: %s", record.kernel_id, err.message)
        await self._forget(record.owner, record.kernel_id)

    async def _restored(self, record: KernelRecord) -> ServiceKernel | None:
        """The kernel of ``record`` in its owner's view; ``None`` (kept in the table, tried
        again at the next start) when that view cannot be had now."""
        assert self.views is not None  # noqa: S101 - restore checked
        try:
            view = self.views.for_user(record.owner, hub_admin=record.admin)
        except GPUDevError as err:
            self.log.warning(
                "gpudev kernel %s of %s not reached again: %s",
                record.kernel_id,
                record.owner,
                err.message,
            )
            return None
        info = record.info
        kernel = _service_kernel(
            view,
            record.kernel_id,
            kernel_name=str(info.get("kernel_name") or ""),
            key="",  # the client's; its next launch brings it
            scheme=str(info.get("signature_scheme") or "hmac-sha256"),
            log=self.log,
        )
        await kernel.load_provisioner_info(
            {
                **info,
                "kernel_id": record.kernel_id,
                "connection_info": info.get("connection_info") or {},
            }
        )
        return kernel


class _KernelProcessHandler(GPUDevHandler):
    @property
    def processes(self) -> KernelProcesses:
        held = self.settings.get(PROCESSES_KEY)
        if not isinstance(held, KernelProcesses):
            raise web.HTTPError(404)
        return held

    @property
    def owner(self) -> str:
        return str(self.current_user.username)

    def body(self) -> Any:
        try:
            return json.loads(self.request.body or b"{}")
        except ValueError as exc:
            raise BadRequest("The body is not valid JSON") from exc


class KernelProcessesHandler(_KernelProcessHandler):
    """``POST /gpudev/api/kernel-processes``: place and start a kernel (shared service)."""

    @web.authenticated
    @authorized_to_execute
    @maps_errors
    async def post(self) -> None:
        answer = await self.processes.launch(self.gpudev, self.owner, self.body())
        self.set_status(201)
        self.finish(json.dumps(answer))


class KernelProcessHandler(_KernelProcessHandler):
    """``GET /gpudev/api/kernel-processes/ID``: ``{"exit_code": N or null}``."""

    @web.authenticated
    @authorized_to_execute
    @maps_errors
    async def get(self, kernel_id: str) -> None:
        code = await self.processes.poll(self.owner, kernel_id)
        self.finish(json.dumps({"exit_code": code}))


class KernelSignalHandler(_KernelProcessHandler):
    """``POST /gpudev/api/kernel-processes/ID/signal``: ``{"signum": N}``."""

    @web.authenticated
    @authorized_to_execute
    @maps_errors
    async def post(self, kernel_id: str) -> None:
        await self.processes.signal(self.owner, kernel_id, self.body().get("signum"))
        self.set_status(204)
        self.finish()


class KernelActivityHandler(_KernelProcessHandler):
    """``POST /gpudev/api/kernel-processes/ID/activity``: ``{"last_activity": ISO 8601}``."""

    @web.authenticated
    @authorized_to_execute
    @maps_errors
    async def post(self, kernel_id: str) -> None:
        await self.processes.activity(self.owner, kernel_id, self.body())
        self.set_status(204)
        self.finish()


class KernelCleanupHandler(_KernelProcessHandler):
    """``POST /gpudev/api/kernel-processes/ID/cleanup``: ``{"restart", "keep_container"}``."""

    @web.authenticated
    @authorized_to_execute
    @maps_errors
    async def post(self, kernel_id: str) -> None:
        await self.processes.cleanup(self.owner, kernel_id, self.body())
        self.set_status(204)
        self.finish()


def kernel_routes(api: str) -> list[tuple[str, type[GPUDevHandler]]]:
    """The service's kernel-process URLs (``api``: the REST prefix)."""
    kernel = r"(?P<kernel_id>[0-9a-f-]{1,64})"
    return [
        (rf"{api}/kernel-processes", KernelProcessesHandler),
        (rf"{api}/kernel-processes/{kernel}", KernelProcessHandler),
        (rf"{api}/kernel-processes/{kernel}/signal", KernelSignalHandler),
        (rf"{api}/kernel-processes/{kernel}/cleanup", KernelCleanupHandler),
        (rf"{api}/kernel-processes/{kernel}/activity", KernelActivityHandler),
    ]
