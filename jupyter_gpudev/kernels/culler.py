"""Idle reclaim of GPU kernels: their own timeout, a warning first, and "keep" from Lab.

Idle kernels hold GPU memory for the life of their process, and the Jupyter server's own culler
is off by default and treats every kernel alike. ``GPUCuller`` looks only at gpudev kernels that
hold GPUs: a kernel idle (no message, not busy) for ``idle_timeout`` seconds (or its
environment's ``customizations.gpudev.idleTimeout``) is shut down, its container stopped (kept,
with its changes) and its GPUs freed. ``warning_seconds`` before that it is listed by
``GET /gpudev/api/reclaims`` so Lab can warn, and the user can keep it (``POST .../keep``),
which counts as activity, or release it at once.

Where GPU use is readable (``containers.usage``: a server's own engines), each look reads it
once for every GPU kernel, and the warning says what the kernel holds ("4.2 GiB on NVIDIA H100
(GPU 0), 0% for 25 min": ``Reclaim.holds``); elsewhere (client mode, a cluster) nothing changes.
With ``gpu_idle_timeout`` an administrator also reclaims a kernel whose GPUs did no work for
that long, even while a cell runs (one blocked on ``input()`` or a sleep), with the same warning
and "keep".
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

from ..containers.usage import GPUUse, HostUsage, KernelGPU, kernel_gpus
from ..errors import NotFound
from ..traits import PositiveFloat
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
    #: What it holds on its GPUs, for people ("4.2 GiB on NVIDIA H100 (GPU 0), 0% for 25 min");
    #: ``None``: not known.
    holds: str | None = None
    #: Seconds its GPUs have done no work (as seen at each look); ``None``: not known.
    gpu_idle_seconds: float | None = None

    def to_json(self) -> dict[str, Any]:
        return asdict(self)


class GPUCuller(LoggingConfigurable):
    """Reclaims idle GPU kernels. Configure with ``c.GPUCuller.*``."""

    idle_timeout = Float(
        3600.0,
        min=0.0,
        help="""Seconds a kernel that holds GPUs may stay idle (no message, not busy) before
        it is shut down and its GPUs freed; its container is stopped and kept (0 or more; 0
        turns reclaim off). An environment's customizations.gpudev.idleTimeout overrides
        it.""",
    ).tag(config=True)

    warning_seconds = Float(
        300.0,
        min=0.0,
        help="""Seconds before a reclaim that Lab is told, so the user can keep the kernel (0
        or more; 0: no warning).""",
    ).tag(config=True)

    check_interval = PositiveFloat(
        30.0,
        help="Seconds between two looks at the GPU kernels' activity (more than 0).",
    ).tag(config=True)

    gpu_idle_timeout = Float(
        0.0,
        min=0.0,
        help="""Seconds a kernel that holds GPUs may leave them without work (0 % utilization
        at every look, every check_interval) before it is reclaimed as an idle one is, even
        while a cell runs (a cell blocked on input() or a sleep): the same warning_seconds
        warning first, and the same "keep". Needs GPU use per process (the local engine and
        ssh:// hosts). 0 or more; 0 (the default) turns it off.""",
    ).tag(config=True)

    def __init__(
        self,
        kernel_manager: Any,
        clock: Callable[[], float] = time.time,
        monotonic: Callable[[], float] | None = None,
        **kwargs: Any,
    ) -> None:
        """``clock``: the wall clock (kernels' activity stamps, the reclaim time shown);
        ``monotonic``: the clock idle times are measured on (default ``time.monotonic``, or
        ``clock`` when only that is given: a test's clock that does not jump)."""
        super().__init__(**kwargs)
        self.kernel_manager = kernel_manager
        self._clock = clock
        if monotonic is None:
            monotonic = time.monotonic if clock is time.time else clock
        self._monotonic = monotonic
        # Every time below is on the monotonic clock: a jump of the wall clock neither
        # reclaims a kernel just used nor keeps an idle one.
        #: Per kernel: its activity stamp as last seen, and when (monotonic) that activity was.
        self._seen: dict[str, tuple[float | None, float]] = {}
        #: When the previous look was (``None``: none yet).
        self._looked_at: float | None = None
        self._kept: dict[str, float] = {}
        self._task: asyncio.Task[None] | None = None
        #: GPU use by kernel (``Services`` sets it; ``None``: not readable here).
        self.usage: GPUUse | None = None
        #: Per GPU kernel, at the last look: what it holds, and since when its GPUs are idle.
        self._holds: dict[str, str] = {}
        self._quiet: dict[str, float] = {}

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

    def _last_activity(self, kernel_id: str, kernel: Any, wall: float, now: float) -> float:
        """When (monotonic) the kernel was last active. Its stamp is wall time: only a new
        stamp counts, as that many seconds before ``now`` as the wall clock says (none for one
        to come), and never before the previous look (it was not there then)."""
        activity = getattr(kernel, "last_activity", None)
        stamp = activity.timestamp() if isinstance(activity, datetime.datetime) else None
        seen = self._seen.get(kernel_id)
        if seen is not None and (stamp is None or stamp == seen[0]):
            since = seen[1]
        else:
            ago = 0.0 if stamp is None else max(0.0, wall - stamp)  # unknown: from now
            if self._looked_at is not None:
                ago = min(ago, now - self._looked_at)
            since = now - ago
            self._seen[kernel_id] = (stamp, since)
        return max(since, self._kept.get(kernel_id, float("-inf")))

    def read_gpu_use(self) -> None:
        """Read GPU use once (blocking) and note, for each GPU kernel, what it holds and since
        when its GPUs do no work; nothing when GPU use cannot be read."""
        if self.usage is None:
            return
        kernels = [(k, p) for k, _, p in self._gpu_kernels() if isinstance(p, GPUDevProvisioner)]
        if not kernels:
            self._holds, self._quiet = {}, {}
            return
        local = self.usage.host_pool.local_name
        hosts: dict[str, HostUsage] = {}
        for name in sorted({p.host or local for _, p in kernels}):  # only their hosts, once
            try:
                hosts.update((read.host, read) for read in self.usage.usage(name))
            except Exception as exc:  # a message without it is the old one
                self.log.debug("gpudev: GPU use of %s not readable for reclaims: %r", name, exc)
        now = self._monotonic()
        holds: dict[str, str] = {}
        quiet: dict[str, float] = {}
        for kernel_id, provisioner in kernels:
            host = hosts.get(provisioner.host or local)
            gpus = _kernel_gpus(kernel_id, host, provisioner.gpu_uuids())
            working = [_working(gpu) for gpu in gpus] + [_left_working(kernel_id, host)]
            if gpus and None not in working and not any(working):
                quiet[kernel_id] = self._quiet.get(kernel_id, now)
            if gpus:
                since = quiet.get(kernel_id)
                holds[kernel_id] = holding(gpus, None if since is None else now - since)
        self._holds, self._quiet = holds, quiet

    def pending(self) -> list[Reclaim]:
        """GPU kernels within ``warning_seconds`` of their reclaim (what Lab warns about): idle
        ones, and (``gpu_idle_timeout``) those whose GPUs did no work, busy or not."""
        return [reclaim for reclaim, _ in self._pending()]

    def _pending(self) -> list[tuple[Reclaim, float]]:
        """``pending``, each with when (monotonic) it is due."""
        wall, now = self._clock(), self._monotonic()
        result = []
        kernels = self._gpu_kernels()
        for kernel_id in set(self._seen) - {k for k, _, _ in kernels}:
            del self._seen[kernel_id]
        for kernel_id, kernel, provisioner in kernels:
            timeout = self._timeout_for(provisioner)
            last = self._last_activity(kernel_id, kernel, wall, now)
            due = []
            if timeout > 0 and getattr(kernel, "execution_state", "") != "busy":
                due.append(last + timeout)
            quiet = self._quiet.get(kernel_id)
            gpu_idle = (
                None if quiet is None else max(quiet, self._kept.get(kernel_id, float("-inf")))
            )
            if self.gpu_idle_timeout > 0 and gpu_idle is not None:
                due.append(gpu_idle + self.gpu_idle_timeout)
            if not due:
                continue
            reclaim_at = min(due)
            if reclaim_at - now <= self.warning_seconds:
                result.append(
                    (
                        Reclaim(
                            kernel_id=kernel_id,
                            container=provisioner.container_name,
                            environment=provisioner.environment,
                            gpu_uuids=provisioner.gpu_uuids(),
                            gpus=provisioner.gpu_count(),
                            idle_seconds=max(0.0, now - last),
                            reclaim_at=wall + (reclaim_at - now),  # shown: wall time
                            holds=self._holds.get(kernel_id),
                            gpu_idle_seconds=None if quiet is None else max(0.0, now - quiet),
                        ),
                        reclaim_at,
                    )
                )
        self._looked_at = now
        return sorted(result, key=lambda pair: pair[1])

    def _look(self) -> list[tuple[Reclaim, float]]:
        self.read_gpu_use()
        return self._pending()

    def keep(self, kernel_id: str) -> None:
        """The user keeps the kernel: its idle time starts again from now."""
        self._require(kernel_id)
        self._kept[kernel_id] = self._monotonic()

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
        holds = self._holds.pop(kernel_id, None)
        self._quiet.pop(kernel_id, None)
        if holds:
            self.log.info("gpudev: releasing the GPUs of idle kernel %s (%s)", kernel_id, holds)
        else:
            self.log.info("gpudev: releasing the GPUs of idle kernel %s", kernel_id)
        await self.kernel_manager.shutdown_kernel(kernel_id)

    async def check(self) -> list[str]:
        """One look: reclaim every GPU kernel past its timeout. Returns their ids."""
        reclaimed = []
        pending = await asyncio.get_running_loop().run_in_executor(None, self._look)
        now = self._monotonic()
        for reclaim, due in pending:
            if due <= now:
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


def _kernel_gpus(
    kernel_id: str, host: HostUsage | None, leased: tuple[str, ...]
) -> tuple[KernelGPU, ...]:
    if host is None or host.reason is not None:
        return ()  # its processes are not known: nothing is said
    return kernel_gpus(kernel_id, host.gpus, leased)


def _left_working(kernel_id: str, host: HostUsage | None) -> bool:
    """Whether a process the kernel left running in its container (``!nohup job &``:
    re-parented to the container's init, so held by no kernel) does work on a GPU. The
    container is the kernel's own (the culler looks only at those): reclaiming the kernel
    stops it, and the job with it."""
    if host is None or host.reason is not None:
        return False
    processes = [p for gpu in host.gpus for p in gpu.processes]
    containers = {k.container for k in host.kernels if k.kernel == kernel_id}
    containers |= {p.container for p in processes if p.kernel == kernel_id and p.container}
    return any(
        p.orphan and p.container in containers and (p.sm_percent or 0) > 0 for p in processes
    )


def _working(gpu: KernelGPU) -> bool | None:
    """Whether the kernel's processes (else the whole GPU, where they are not sampled) did work
    on ``gpu``; ``None``: not known."""
    share = gpu.sm_percent if gpu.sm_percent is not None else gpu.gpu_utilization_percent
    return None if share is None else share > 0


def _minutes(seconds: float) -> str:
    minutes = int(seconds // 60)
    return f"{minutes} min" if minutes < 120 else f"{minutes // 60} h {minutes % 60:02d} min"


def holding(gpus: tuple[KernelGPU, ...], quiet_seconds: float | None) -> str:
    """What a kernel holds, for people: "4.2 GiB on NVIDIA H100 (GPU 0), 0% for 25 min" per
    GPU (its processes' memory and share, else the GPU's utilization)."""
    parts = []
    for gpu in gpus:
        memory = "?" if gpu.memory_used_mib is None else f"{gpu.memory_used_mib / 1024:.1f} GiB"
        text = f"{memory} on {gpu.name or gpu.uuid} (GPU {gpu.index})"
        share = gpu.sm_percent if gpu.sm_percent is not None else gpu.gpu_utilization_percent
        if share is not None:
            text += f", {share}%"
            if share == 0 and quiet_seconds is not None and quiet_seconds >= 60:
                text += f" for {_minutes(quiet_seconds)}"
        parts.append(text)
    return "; ".join(parts)
