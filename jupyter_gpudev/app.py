"""The server extension: builds each manager once and registers the REST routes."""

from __future__ import annotations

from dataclasses import dataclass

from jupyter_server.extension.application import ExtensionApp

from . import __version__, routes
from .hosts import HostPool


@dataclass
class GPUDevContext:
    """Every manager the handlers may call, built once per server."""

    host_pool: HostPool


class GPUDevApp(ExtensionApp):
    """jupyter-gpudev: dev containers on GPU hosts. Configured through ``c.HostPool`` & co."""

    name = "gpudev"
    version = __version__
    description = "Dev containers on GPU hosts, with kernels inside and exclusive GPU leases."
    load_other_extensions = True

    def initialize_settings(self) -> None:
        # Nothing here talks to an engine or to NVML: that happens on the first request.
        self.context = GPUDevContext(host_pool=HostPool(parent=self, log=self.log))
        self.settings[routes.SETTINGS_KEY] = self.context

    def initialize_handlers(self) -> None:
        self.handlers.extend(routes.handlers())

    async def stop_extension(self) -> None:
        self.context.host_pool.close()
