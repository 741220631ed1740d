"""The one place that builds gpudev's managers: for the server (``GPUDevApp``), the CLI and a
kernel started outside a server (the provisioner's fallback).

Every part is built from one traitlets ``parent`` (or ``config``), so ``c.ClassName.trait``
applies the same everywhere. Nothing here talks to an engine or to NVML: that happens on the
first call that needs it.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from traitlets.config import Config, Configurable

from .access import Access
from .changes.capture import ChangeCapture
from .changes.commit import Committer
from .changes.tracker import ChangeTracker
from .containers.features import Features
from .containers.gpu_idle import GPUIdleContainers
from .containers.idle_notes import IdleNotes
from .containers.lifecycle import DevContainers
from .containers.limits import UserLimits
from .containers.lookup import ContainerLookup
from .containers.metrics import GPUMetrics
from .containers.usage import GPUUse
from .engine import GPUInventory, HostPool, ImageBootstrapper, LegacyGPUInjection, Registries
from .environments import EnvironmentManager, MountPolicy
from .k8s.settings import KubernetesHosts
from .kernels.culler import GPUCuller
from .kernels.kernelspecs import GPUDevKernelSpecManager
from .kernels.live import KernelRegistry
from .kernels.provisioner import GPUDevProvisioner
from .kernels.remote import ServiceKernelProvisioner
from .kernels.warm import WarmKernels
from .leasing import LeaseLedger

#: Every configurable class of gpudev: the server extension's and the CLI's ``classes``, so
#: ``--help-all`` and ``--generate-config`` show their traits.
CLASSES: tuple[type[Configurable], ...] = (
    Access,
    HostPool,
    GPUInventory,
    ContainerLookup,
    DevContainers,
    KubernetesHosts,
    UserLimits,
    EnvironmentManager,
    MountPolicy,
    LegacyGPUInjection,
    Registries,
    Features,
    GPUCuller,
    GPUIdleContainers,
    ImageBootstrapper,
    GPUDevProvisioner,
    ServiceKernelProvisioner,
    GPUDevKernelSpecManager,
    WarmKernels,
)


@dataclass(frozen=True)
class SharedParts:
    """What the shared service's per-user views share: one engine connection per host, one
    lease ledger, one server id; ``access`` is the view's own (its user, administrator or
    not)."""

    host_pool: HostPool
    ledger: LeaseLedger
    server_id: str
    access: Access
    #: What listings say of GPU-idle dev containers (``containers.gpu_idle``).
    idle_notes: IdleNotes | None = None


class Services:
    """gpudev's managers, each built once, wired to each other."""

    def __init__(
        self,
        root_dir: str | Path,
        *,
        parent: Configurable | None = None,
        config: Config | None = None,
        kernel_manager: Any = None,
        log: logging.Logger | logging.LoggerAdapter[Any] | None = None,
        shared: SharedParts | None = None,
        kernels: KernelRegistry | None = None,
    ) -> None:
        """``root_dir``: the workspace root (mounted, searched for .devcontainer);
        ``parent`` or ``config``: where the traits come from; ``kernel_manager``: the server's
        (the culler and the kernel registry watch its kernels), ``None`` outside a server;
        ``shared``: the parts one user's view shares with the others in the shared service;
        ``kernels``: the registry of the kernels it runs, when not the server's own (the
        shared service's, scoped to the view's user)."""
        source: dict[str, Any] = (
            {"parent": parent} if parent is not None else {"config": config or Config()}
        )
        if log is not None:
            source["log"] = log
        self.host_pool = shared.host_pool if shared else HostPool(**source)
        #: The gpudev kernels of this server, in which container each runs (in a server, and
        #: in the shared service: its clients').
        if kernels is None and kernel_manager is not None:
            kernels = KernelRegistry(kernel_manager)
        self.kernels = kernels
        more: dict[str, Any] = {}
        if shared is not None:
            more = {
                "access": shared.access,
                "ledger": shared.ledger,
                "server_id": shared.server_id,
                "idle_notes": shared.idle_notes,
            }
        self.containers = DevContainers(
            root_dir=root_dir, host_pool=self.host_pool, kernels=self.kernels, **more, **source
        )
        self.culler = GPUCuller(kernel_manager, **source)
        #: Kernels started ahead in shared containers (used by a server's kernels only).
        self.warm = WarmKernels(**source)
        self.capture = ChangeCapture(self.containers)
        #: The containers' uncommitted changes, for their lifecycle (see ``containers.hooks``).
        self.tracker = ChangeTracker(self.capture)
        self.containers.changes = self.tracker
        self.committer = Committer(self.capture, self.containers.registries)
        #: GPU use by dev container and owner (``GET /gpudev/api/usage``, ``jupyter gpudev top``).
        self.usage = GPUUse(self.containers, kernels=self.kernels)
        #: The reclaim messages say what a kernel holds.
        self.culler.usage = self.usage
        #: Dev containers whose GPUs do no work, stopped (the server's, or the service's own
        #: view's, runs it: ``c.GPUIdleContainers``).
        self.gpu_idle = GPUIdleContainers(self.containers, self.usage, **source)
        #: Its Prometheus gauges, read on each scrape (the server installs it on /metrics).
        self.metrics = GPUMetrics(self.usage, log or logging.getLogger("jupyter_gpudev"))

    def close(self) -> None:
        """Stop the background change counts; close the engine connections (and SSH tunnels)
        the hosts opened."""
        self.warm.close(self.containers)
        self.tracker.close()
        self.host_pool.close()
