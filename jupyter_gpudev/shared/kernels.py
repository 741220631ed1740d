"""The shared service's side of client-mode kernels: the kernel processes it runs in users'
dev containers for their servers (``kernels.remote.ServiceKernelProvisioner`` asks).

Each kernel is a ``GPUDevProvisioner`` working on the caller's view (their containers, the
shared ledger), with the session key the user's server sent; it is known by its owner and
kernel id together, so no one reaches another user's kernel (404). Routes, under
``/gpudev/api/kernel-processes``: ``POST`` launch (or relaunch, for a restart), ``GET ID``
poll, ``POST ID/signal``, ``POST ID/cleanup``.
"""

from __future__ import annotations

import asyncio
import json
import re
import signal
from typing import Any

from jupyter_client.kernelspec import KernelSpec
from tornado import web
from traitlets import Any as AnyTrait
from traitlets import Unicode
from traitlets.config import LoggingConfigurable

from ..errors import BadRequest, NotFound
from ..handlers.base import GPUDevHandler, authorized_to_execute, maps_errors
from ..kernels.process import DEFAULT_ARGV
from ..kernels.provisioner import GPUDevProvisioner, KernelLaunchError
from ..services import Services

KERNEL_ID = re.compile(r"[0-9a-f-]{1,64}")
#: Signals a client may send to its kernel (interrupt, terminate, kill, hang up).
SIGNALS = frozenset({signal.SIGINT, signal.SIGTERM, signal.SIGKILL, signal.SIGHUP})
SCHEMES = frozenset({"hmac-sha256", "hmac-sha512", "hmac-md5"})
#: Where ``GPUDevApp`` puts the service's ``KernelProcesses``.
PROCESSES_KEY = "gpudev_kernel_processes"


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
    """The kernels the service runs for clients, by (owner, kernel id)."""

    def __init__(self, log: Any) -> None:
        self.log = log
        self._kernels: dict[tuple[str, str], ServiceKernel] = {}
        self._lock = asyncio.Lock()

    def _get(self, owner: str, kernel_id: str) -> ServiceKernel:
        kernel = self._kernels.get((owner, kernel_id))
        if kernel is None:
            raise NotFound(f"No kernel {kernel_id!r} of yours runs here")
        return kernel

    async def launch(self, view: Services, owner: str, body: Any) -> dict[str, Any]:
        if not isinstance(body, dict):
            raise BadRequest("The body must be a JSON object")
        kernel_id = body.get("kernel_id")
        if not isinstance(kernel_id, str) or not KERNEL_ID.fullmatch(kernel_id):
            raise BadRequest("'kernel_id' must be a kernel id")
        key = _field(body, "key", str, "")
        scheme = _field(body, "signature_scheme", str, "hmac-sha256")
        if not key or len(key) > 512 or scheme not in SCHEMES:
            raise BadRequest("'key' and 'signature_scheme' must be a session's")
        env = _field(body, "env", dict, {}) or {}
        session_name = env.get("JPY_SESSION_NAME")
        kept = {"JPY_SESSION_NAME": session_name} if isinstance(session_name, str) else {}
        cwd = _field(body, "cwd", str, None)
        async with self._lock:
            kernel = self._kernels.get((owner, kernel_id))
            fresh = kernel is None
            if kernel is None:
                parent = KernelOwner(
                    kernel_name=str(_field(body, "kernel_name", str, "") or ""),
                    session=_Session(key.encode(), scheme),
                )
                kernel = ServiceKernel(view, parent=parent, kernel_id=kernel_id, log=self.log)
                # The image's own kernel command is used (see GPUDevProvisioner._kernel_argv)
                kernel.kernel_spec = KernelSpec(
                    argv=list(DEFAULT_ARGV), display_name="gpudev", language="python"
                )
                kernel.environment = str(_field(body, "environment", str, "default"))
                kernel.container = str(_field(body, "container", str, "") or "")
                gpus = _field(body, "gpus", int, None)
                kernel.gpus = -1 if gpus is None else gpus
                kernel.host = str(_field(body, "host", str, "") or "")
                self._kernels[(owner, kernel_id)] = kernel
        try:
            kwargs = await kernel.pre_launch(env=kept, cwd=cwd)
            connection = dict(await kernel.launch_kernel(kwargs.pop("cmd"), **kwargs))
        except KernelLaunchError as err:
            if fresh:
                self._kernels.pop((owner, kernel_id), None)
            raise err.error from None
        except BaseException:
            if fresh:
                self._kernels.pop((owner, kernel_id), None)
            raise
        connection.pop("key", None)  # the client has it; it is never sent back
        return {
            "connection": connection,
            "container": kernel.container_name,
            "host": kernel.host,
            "dedicated": kernel._dedicated,
            "gpu_uuids": list(kernel.gpu_uuids()),
            "idle_timeout": kernel.idle_timeout(),
        }

    async def poll(self, owner: str, kernel_id: str) -> int | None:
        return await self._get(owner, kernel_id).poll()

    async def signal(self, owner: str, kernel_id: str, signum: Any) -> None:
        if not isinstance(signum, int) or isinstance(signum, bool) or signum not in SIGNALS:
            raise BadRequest("'signum' must be SIGINT, SIGTERM, SIGKILL or SIGHUP")
        await self._get(owner, kernel_id).send_signal(signum)

    async def cleanup(self, owner: str, kernel_id: str, body: Any) -> None:
        body = body if isinstance(body, dict) else {}
        kernel = self._get(owner, kernel_id)
        kernel.keep_container = bool(_field(body, "keep_container", bool, False))
        restart = bool(_field(body, "restart", bool, False))
        await kernel.cleanup(restart=restart)
        if not restart:
            self._kernels.pop((owner, kernel_id), None)


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
    ]
