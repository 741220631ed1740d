"""The server extension: builds each manager once and registers the REST routes."""

from __future__ import annotations

import asyncio
from dataclasses import dataclass
from typing import Any

from jupyter_server.extension.application import ExtensionApp
from tornado.ioloop import IOLoop

from . import __version__, provisioner, routes
from .capture import ChangeCapture
from .commit import Committer
from .containers import DevContainers
from .culler import GPUCuller
from .hosts import HostPool
from .kernels import KernelRegistry
from .kernelspecs import GPUDevKernelSpecManager

KERNELSPEC_MANAGER = "jupyter_gpudev.kernelspecs.GPUDevKernelSpecManager"


@dataclass
class GPUDevContext:
    """Every manager the handlers may call, built once per server."""

    host_pool: HostPool
    containers: DevContainers
    culler: GPUCuller
    capture: ChangeCapture
    committer: Committer
    #: The gpudev kernels of this server, in which container each runs.
    kernels: KernelRegistry


class GPUDevApp(ExtensionApp):
    """jupyter-gpudev: dev containers on GPU hosts. Configured through ``c.HostPool`` & co."""

    name = "gpudev"
    version = __version__
    description = "Dev containers on GPU hosts, with kernels inside and exclusive GPU leases."
    load_other_extensions = True

    def initialize_settings(self) -> None:
        # Nothing here talks to an engine or to NVML: that happens on the first request.
        host_pool = HostPool(parent=self, log=self.log)
        root_dir = self.serverapp.root_dir if self.serverapp is not None else "."
        kernel_manager = self.serverapp.kernel_manager if self.serverapp else None
        kernels = KernelRegistry(kernel_manager)
        containers = DevContainers(
            root_dir=root_dir, host_pool=host_pool, kernels=kernels, parent=self, log=self.log
        )
        culler = GPUCuller(kernel_manager, parent=self)
        capture = ChangeCapture(containers)
        self.context = GPUDevContext(
            host_pool=host_pool,
            containers=containers,
            culler=culler,
            capture=capture,
            committer=Committer(capture, containers.registries),
            kernels=kernels,
        )
        self.settings[routes.SETTINGS_KEY] = self.context
        # gpudev kernels (provisioner instances made by jupyter_client) use this same manager.
        provisioner.set_manager(containers)
        # Once the event loop runs: clean up after a crash, then watch idle GPU kernels. A
        # started server calls _start_jupyter_server_extension; a server embedded in a running
        # loop (tests) gets the callback; whichever comes first does it.
        self._loop_started = False
        IOLoop.current().add_callback(self._on_loop_start)

    async def _reconcile(self) -> None:
        """After a crash, free the leases of containers that are gone (and re-lease orphans)."""
        loop = asyncio.get_running_loop()
        containers = self.context.containers
        # Each step on its own: a failed sweep must not keep the leases unreconciled.
        for step in (containers.stop_orphan_kernels, containers.reconcile):
            try:
                await loop.run_in_executor(None, step)
            except Exception:
                self.log.exception("gpudev: %s failed", step.__name__)

    async def _start_jupyter_server_extension(self, serverapp: Any) -> None:  # noqa: ARG002
        await self._on_loop_start()

    async def _on_loop_start(self) -> None:
        if self._loop_started:
            return
        self._loop_started = True
        self._reconcile_task = asyncio.ensure_future(self._reconcile())
        self.context.culler.start()

    def _link_jupyter_server_extension(self, serverapp: Any) -> None:
        # The gpudev kernels are in the picker through our kernelspec manager, unless the
        # administrator chose another one. (Set here: the server builds its managers after
        # linking extensions, and reads no ServerApp traits from an extension's config files.)
        chosen = serverapp.config.get("ServerApp", {}).get("kernel_spec_manager_class")
        if chosen is None:
            serverapp.kernel_spec_manager_class = GPUDevKernelSpecManager
        elif chosen not in (GPUDevKernelSpecManager, KERNELSPEC_MANAGER):
            self.log.warning(
                "gpudev: c.ServerApp.kernel_spec_manager_class is %s; the gpudev kernels are "
                "not in the picker (use %s, or a subclass of it)",
                chosen,
                KERNELSPEC_MANAGER,
            )
        super()._link_jupyter_server_extension(serverapp)

    def initialize_handlers(self) -> None:
        self.handlers.extend(routes.handlers())

    async def stop_extension(self) -> None:
        task = getattr(self, "_reconcile_task", None)
        if task is not None:
            await task
        await self.context.culler.stop()
        provisioner.set_manager(None)
        self.context.host_pool.close()
