"""Idle reclaim of GPU kernels: their own timeout, a warning first, and "keep" from Lab.

Idle kernels hold GPU memory for the life of their process, and the Jupyter server's own culler
is off by default and treats every kernel alike. ``GPUCuller`` looks only at gpudev kernels that
hold GPUs: a kernel idle (no message, not busy) for ``idle_timeout`` seconds (or its
environment's ``customizations.gpudev.idleTimeout``) is shut down, its container stopped (kept,
with its changes) and its GPUs freed. ``warning_seconds`` before that it is listed by
``GET /gpudev/api/reclaims`` so Lab can warn, and the user can keep it (``POST .../keep``),
which counts as activity, or release it at once.
"""

from __future__ import annotations

import asyncio
import contextlib
import datetime
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass
from typing import Any

from traitlets import Float
from traitlets.config import LoggingConfigurable

from ..errors import NotFound
from .provisioner import GPUDevProvisioner
from .remote import ServiceKernelProvisioner

#: A kernel that may hold GPUs: in a container of this server's, or of the shared service's.
GPUKernel = GPUDevProvisioner | ServiceKernelProvisioner


@dataclass(frozen=True)
class Reclaim:
    """A GPU kernel that will be reclaimed unless it is used (or kept) before ``reclaim_at``."""

    kernel_id: str
    container: str
    environment: str
    #: The GPUs by UUID (none for a pod: the cluster's device plugin names them).
    gpu_uuids: tuple[str, ...]
    #: How many GPUs the reclaim frees.
    gpus: int
    idle_seconds: float
    reclaim_at: float

    def to_json(self) -> dict[str, Any]:
        return asdict(self)


class GPUCuller(LoggingConfigurable):
    """Reclaims idle GPU kernels. Configure with ``c.GPUCuller.*``."""

    idle_timeout = Float(
        3600.0,
        help="""Seconds a kernel that holds GPUs may stay idle (no message, not busy) before
        it is shut down and its GPUs freed; its container is stopped and kept. An
        environment's customizations.gpudev.idleTimeout overrides it. 0 turns reclaim off.""",
    ).tag(config=True)

    warning_seconds = Float(
        300.0,
        help="How long before a reclaim Lab is told, so the user can keep the kernel.",
    ).tag(config=True)

    check_interval = Float(
        30.0, help="Seconds between two looks at the GPU kernels' activity."
    ).tag(config=True)

    def __init__(
        self,
        kernel_manager: Any,
        clock: Callable[[], float] = time.time,
        **kwargs: Any,
    ) -> None:
        super().__init__(**kwargs)
        self.kernel_manager = kernel_manager
        self._clock = clock
        self._kept: dict[str, float] = {}
        self._task: asyncio.Task[None] | None = None

    # ------------------------------------------------------------------------------------------

    def _gpu_kernels(self) -> list[tuple[str, Any, GPUKernel]]:
        found = []
        for kernel_id in list(self.kernel_manager.list_kernel_ids()):
            try:
                kernel = self.kernel_manager.get_kernel(kernel_id)
            except KeyError:
                continue
            provisioner = getattr(kernel, "provisioner", None)
            if isinstance(provisioner, GPUKernel) and provisioner.gpu_count():
                found.append((kernel_id, kernel, provisioner))
        return found

    def _timeout_for(self, provisioner: GPUKernel) -> float:
        own = provisioner.idle_timeout()
        return own if own is not None else self.idle_timeout

    def _last_activity(self, kernel_id: str, kernel: Any) -> float:
        activity = getattr(kernel, "last_activity", None)
        stamp = (
            activity.timestamp()
            if isinstance(activity, datetime.datetime)
            else self._clock()  # unknown: count from now, never reclaim on a guess
        )
        return max(stamp, self._kept.get(kernel_id, 0.0))

    def pending(self) -> list[Reclaim]:
        """GPU kernels within ``warning_seconds`` of their reclaim (what Lab warns about)."""
        now = self._clock()
        result = []
        for kernel_id, kernel, provisioner in self._gpu_kernels():
            timeout = self._timeout_for(provisioner)
            if timeout <= 0 or getattr(kernel, "execution_state", "") == "busy":
                continue
            last = self._last_activity(kernel_id, kernel)
            reclaim_at = last + timeout
            if reclaim_at - now <= self.warning_seconds:
                result.append(
                    Reclaim(
                        kernel_id=kernel_id,
                        container=provisioner.container_name,
                        environment=provisioner.environment,
                        gpu_uuids=provisioner.gpu_uuids(),
                        gpus=provisioner.gpu_count(),
                        idle_seconds=max(0.0, now - last),
                        reclaim_at=reclaim_at,
                    )
                )
        return sorted(result, key=lambda r: r.reclaim_at)

    def keep(self, kernel_id: str) -> None:
        """The user keeps the kernel: its idle time starts again from now."""
        self._require(kernel_id)
        self._kept[kernel_id] = self._clock()

    def _require(self, kernel_id: str) -> GPUKernel:
        for found_id, _, provisioner in self._gpu_kernels():
            if found_id == kernel_id:
                return provisioner
        raise NotFound(f"No kernel {kernel_id!r} that holds GPUs", details={"kernel_id": kernel_id})

    async def release(self, kernel_id: str) -> None:
        """Reclaim now: shut the kernel down; its container is stopped and kept."""
        # Finding the kernel's GPUs reads the lease ledger: off the event loop.
        provisioner = await asyncio.get_running_loop().run_in_executor(
            None, self._require, kernel_id
        )
        provisioner.keep_container = True
        self._kept.pop(kernel_id, None)
        self.log.info("gpudev: releasing the GPUs of idle kernel %s", kernel_id)
        await self.kernel_manager.shutdown_kernel(kernel_id)

    async def check(self) -> list[str]:
        """One look: reclaim every GPU kernel past its timeout. Returns their ids."""
        reclaimed = []
        now = self._clock()
        pending = await asyncio.get_running_loop().run_in_executor(None, self.pending)
        for reclaim in pending:
            if reclaim.reclaim_at <= now:
                try:
                    await self.release(reclaim.kernel_id)
                except Exception:
                    self.log.exception("gpudev: reclaiming kernel %s failed", reclaim.kernel_id)
                    continue
                reclaimed.append(reclaim.kernel_id)
        return reclaimed

    def start(self) -> None:
        if self._task is None and self.check_interval > 0:
            self._task = asyncio.ensure_future(self._run())

    async def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
            self._task = None

    async def _run(self) -> None:
        while True:
            await asyncio.sleep(self.check_interval)
            try:
                await self.check()
            except Exception:
                self.log.exception("gpudev: the GPU culler failed; it goes on")
