"""The server extension: wires the managers (``services.Services``) and the routes."""

from __future__ import annotations

import asyncio
from typing import Any

from jupyter_server.extension.application import ExtensionApp
from tornado.ioloop import IOLoop
from traitlets.config import Configurable

from ._version import __version__
from .handlers import routes
from .handlers.base import SETTINGS_KEY
from .kernels import provisioner
from .kernels.kernelspecs import GPUDevKernelSpecManager
from .services import CLASSES, Services

KERNELSPEC_MANAGER = "jupyter_gpudev.kernelspecs.GPUDevKernelSpecManager"


class GPUDevApp(ExtensionApp):
    """jupyter-gpudev: dev containers on GPU hosts. Configured through ``c.HostPool`` & co."""

    name = "gpudev"
    version = __version__
    description = "Dev containers on GPU hosts, with kernels inside and exclusive GPU leases."
    load_other_extensions = True
    classes: list[type[Configurable]] = [*ExtensionApp.classes, *CLASSES]  # noqa: RUF012

    def initialize_settings(self) -> None:
        # Nothing here talks to an engine or to NVML: that happens on the first request.
        root_dir = self.serverapp.root_dir if self.serverapp is not None else "."
        kernel_manager = self.serverapp.kernel_manager if self.serverapp else None
        self.services = Services(root_dir, parent=self, kernel_manager=kernel_manager, log=self.log)
        self.settings[SETTINGS_KEY] = self.services
        # gpudev kernels (provisioner instances made by jupyter_client) use this same manager.
        provisioner.set_manager(self.services.containers)
        # Once the event loop runs: clean up after a crash, then watch idle GPU kernels. A
        # started server calls _start_jupyter_server_extension; a server embedded in a running
        # loop (tests) gets the callback; whichever comes first does it.
        self._loop_started = False
        IOLoop.current().add_callback(self._on_loop_start)

    async def _reconcile(self) -> None:
        """After a crash, free the leases of containers that are gone (and re-lease orphans)."""
        loop = asyncio.get_running_loop()
        containers = self.services.containers
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
        self.services.culler.start()

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
        self.handlers.extend(routes())

    async def stop_extension(self) -> None:
        task = getattr(self, "_reconcile_task", None)
        if task is not None:
            await task
        await self.services.culler.stop()
        provisioner.set_manager(None)
        self.services.close()
