"""Kernels of a server in client mode: their containers and processes are the shared
service's (``jupyter gpudev serve``); this server keeps only the kernel's connection.

``ServiceKernelProvisioner`` (``provisioner_name: gpudev-service``) asks the service, through
a ``KernelService`` (the HTTP client the server extension wires in client mode), to place the
kernel (a dedicated container of an environment, or a running shared one), to start it with
this server's session key, and later to poll, signal and clean it up. The service decides
leases and ownership exactly as for the REST API; the connection it answers is where this
machine reaches the kernel's ports.

Only this server sees the kernel's messages: while it runs, its polls tell the service the
kernel's last activity (``ACTIVITY_EVERY``), which the service's GPU use shows as its idle time.
They also tell it that a server still holds the kernel: a launched kernel is polled at least
every ``ASK_EVERY`` seconds, by its restarter or, without one, by a task of its own.

The kernel outlives a restart of the service, which reaches it again from its kernel table;
meanwhile (the service unreachable, at most ``unreachable_grace`` seconds) the kernel is taken
for running, and its key, which only this server holds, goes with each launch again.
"""

from __future__ import annotations

import asyncio
import signal
import time
from datetime import datetime
from typing import Any, cast

from jupyter_client.connect import KernelConnectionInfo
from jupyter_client.provisioning.provisioner_base import KernelProvisionerBase
from tornado import web
from traitlets import Float, Int, Unicode

from .placements import PLACEMENTS, KernelService

#: The provisioner name of kernelspecs in client mode (an entry point of the package).
SERVICE_PROVISIONER = "gpudev-service"
#: The service's answers while it is down or restarting (``shared.client``: 503 unreachable).
UNREACHABLE_STATUSES = frozenset({502, 503, 504})
#: At most one report of a kernel's activity to the service in this many seconds.
ACTIVITY_EVERY = 15.0
#: A launched kernel is polled at least this often, restarter or not (``autorestart`` off):
#: the service ends one no server asked after for ``c.GPUDevService.abandoned_kernel_timeout``.
ASK_EVERY = 60.0


class ServiceError(web.HTTPError):
    """The service refused or failed; its status and message reach the user as they are."""

    def __init__(self, status: int, message: str) -> None:
        super().__init__(status, log_message=message.replace("%", "%%"))
        self.message = message


class ServiceKernelProvisioner(KernelProvisionerBase):
    """A gpudev kernel whose container and process the shared service runs."""

    environment = Unicode("default", config=True, help="The environment of the container.")
    container = Unicode("", config=True, help="A running dev container to launch into.")
    gpus = Int(
        -1,
        min=-1,
        config=True,
        help="GPUs a dedicated container leases (-1 or more; -1: the environment's).",
    )
    host = Unicode("", config=True, help="The host (default: the service's local engine).")
    unreachable_grace = Float(
        300.0,
        min=0.0,
        config=True,
        help="""Seconds a kernel is still considered running while the gpudev service cannot
        be reached (it restarts, and then reaches its kernels again; 0 or more); after that
        it is reported dead, with the reason in the server log.""",
    )

    _container_name: str = ""
    _dedicated: bool = False
    _gpu_uuids: tuple[str, ...] = ()
    _connection: dict[str, Any] | None = None
    _exit_code: int | None = None
    _launched: bool = False
    _idle_timeout: float | None = None
    _unreachable_since: float = 0.0
    _activity_told: datetime | None = None
    _activity_told_at: float = -ACTIVITY_EVERY
    _asked_at: float = 0.0
    _asking: asyncio.Task[None] | None = None
    #: Set by the GPU culler: at shutdown, stop the container but keep it (a reclaim).
    keep_container: bool = False

    @property
    def service(self) -> KernelService:
        found = PLACEMENTS.service
        if found is None:
            raise ServiceError(
                503, "This server has no gpudev service to start kernels with (client mode)"
            )
        return found

    @property
    def container_name(self) -> str:
        return self._container_name

    def gpu_uuids(self) -> tuple[str, ...]:
        return self._gpu_uuids if self._dedicated else ()

    def gpu_count(self) -> int:
        return len(self.gpu_uuids())

    def idle_timeout(self) -> float | None:
        return self._idle_timeout

    @property
    def has_process(self) -> bool:
        return self._launched and self._exit_code is None

    async def pre_launch(self, **kwargs: Any) -> dict[str, Any]:
        """The service places and starts the kernel now (the container's start, pull or build
        does not count against the kernel's start timeout); ``launch_kernel`` answers."""
        kwargs = await super().pre_launch(**kwargs)
        km: Any = self.parent
        session = km.session
        env = kwargs.get("env") or {}
        request: dict[str, Any] = {
            "kernel_id": self.kernel_id,
            "environment": self.environment,
            "container": self._container_name or self.container,
            "gpus": None if self.gpus < 0 else self.gpus,
            "host": self.host or None,
            "key": session.key.decode(),
            "signature_scheme": session.signature_scheme,
            "kernel_name": getattr(km, "kernel_name", ""),
            "cwd": kwargs.get("cwd"),
            "env": {k: v for k, v in env.items() if k == "JPY_SESSION_NAME"},
            "restart": self._launched,
        }
        answer = await self.service.launch(request)
        self._connection = dict(answer["connection"])
        self._container_name = str(answer["container"])
        self.host = str(answer.get("host") or "")
        self._dedicated = bool(answer.get("dedicated"))
        self._gpu_uuids = tuple(answer.get("gpu_uuids") or ())
        timeout = answer.get("idle_timeout")
        self._idle_timeout = float(timeout) if isinstance(timeout, int | float) else None
        self._exit_code = None
        kwargs["cmd"] = ["gpudev-service-kernel"]  # the service runs the image's own command
        return kwargs

    async def launch_kernel(self, cmd: list[str], **kwargs: Any) -> KernelConnectionInfo:
        del cmd, kwargs
        if self._connection is None:
            raise ServiceError(500, "The gpudev service gave no connection for the kernel")
        self._launched = True
        self._asked_at = time.monotonic()
        if self._asking is None or self._asking.done():
            self._asking = asyncio.ensure_future(self._keep_asking())
        km: Any = self.parent
        connection = {**self._connection, "key": km.session.key}
        return cast(KernelConnectionInfo, connection)

    async def _keep_asking(self) -> None:
        """Poll the kernel when nothing did for ``ASK_EVERY`` seconds, while it runs here."""
        while self._launched and self._exit_code is None:
            await asyncio.sleep(max(0.0, self._asked_at + ASK_EVERY - time.monotonic()))
            if self._launched and time.monotonic() - self._asked_at >= ASK_EVERY:
                try:
                    await self.poll()
                except Exception as exc:  # the restarter's poll says it, if there is one
                    self._asked_at = time.monotonic()
                    self.log.debug("gpudev kernel %s: not asked after: %r", self.kernel_id, exc)

    async def poll(self) -> int | None:
        if not self._launched:
            return 0
        if self._exit_code is None:
            self._asked_at = time.monotonic()
            try:
                self._exit_code = await self.service.poll(str(self.kernel_id))
            except ServiceError as err:
                if err.status_code not in UNREACHABLE_STATUSES:
                    raise
                return self._unreachable(err)
            self._unreachable_since = 0.0
            if self._exit_code is None:
                await self._tell_activity()
        return self._exit_code

    async def _tell_activity(self) -> None:
        """Tell the service the kernel's last activity (this server's kernel manager's), when
        it changed, at most every ``ACTIVITY_EVERY`` seconds; a failure is only logged."""
        stamp = getattr(self.parent, "last_activity", None)
        now = time.monotonic()
        if not isinstance(stamp, datetime) or stamp == self._activity_told:
            return
        if now - self._activity_told_at < ACTIVITY_EVERY:
            return
        self._activity_told_at = now
        try:
            await self.service.activity(str(self.kernel_id), stamp)
        except ServiceError as err:  # an older service, or one restarting: the next poll's turn
            self.log.debug("gpudev kernel %s: activity not told: %s", self.kernel_id, err.message)
            return
        self._activity_told = stamp

    def _unreachable(self, err: ServiceError) -> int | None:
        """The service is down (restarting): the kernel runs as far as is known, for
        ``unreachable_grace`` seconds; after that it is reported dead."""
        now = time.monotonic()
        self._unreachable_since = self._unreachable_since or now
        if now - self._unreachable_since < self.unreachable_grace:
            return None
        self.log.warning(
            "gpudev kernel %s: the gpudev service unreachable for %.0f s, the kernel is lost: %s",
            self.kernel_id,
            now - self._unreachable_since,
            err.message,
        )
        self._exit_code = -1
        return self._exit_code

    async def wait(self) -> int | None:
        while True:
            code = await self.poll()
            if code is not None:
                return code
            await asyncio.sleep(0.05)

    async def send_signal(self, signum: int) -> None:
        if self.has_process:
            await self.service.signal(str(self.kernel_id), int(signum))

    async def kill(self, restart: bool = False) -> None:  # noqa: ARG002 - same either way
        await self.send_signal(signal.SIGKILL)

    async def terminate(self, restart: bool = False) -> None:  # noqa: ARG002
        await self.send_signal(signal.SIGTERM)

    async def cleanup(self, restart: bool = False) -> None:
        if not self._container_name:
            return
        await self.service.cleanup(
            str(self.kernel_id), restart=restart, keep_container=self.keep_container
        )
        if not restart:
            self._launched = False
            if self._asking is not None:
                self._asking.cancel()
                self._asking = None

    async def get_provisioner_info(self) -> dict[str, Any]:
        info: dict[str, Any] = await super().get_provisioner_info()
        info.update(
            host=self.host,
            container=self._container_name,
            dedicated=self._dedicated,
            gpu_uuids=list(self._gpu_uuids),
            launched=self._launched,
        )
        return info

    async def load_provisioner_info(self, provisioner_info: dict[str, Any]) -> None:
        await super().load_provisioner_info(provisioner_info)
        self._container_name = str(provisioner_info.get("container", ""))
        self.host = str(provisioner_info.get("host") or self.host)
        self._dedicated = bool(provisioner_info.get("dedicated", False))
        self._gpu_uuids = tuple(provisioner_info.get("gpu_uuids") or ())
        self._launched = bool(provisioner_info.get("launched", False))
