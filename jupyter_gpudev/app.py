"""The server extension: wires the managers (``services.Services``) and the routes."""

from __future__ import annotations

import asyncio
import functools
import os
from collections.abc import Awaitable
from typing import Any

from jupyter_server.extension.application import ExtensionApp
from tornado.ioloop import IOLoop
from traitlets import Bool, Unicode, default
from traitlets.config import Configurable

from ._version import __version__
from .changes.capture import sweep_staging
from .configcheck import check_config
from .containers import metrics
from .errors import ConfigError, GPUDevError
from .handlers import API, NAME, reclaim_routes, routes
from .handlers.base import CULLER_KEY, SETTINGS_KEY
from .kernels import provisioner
from .kernels.culler import GPUCuller
from .kernels.kernelspecs import GPUDevKernelSpecManager
from .kernels.placements import PLACEMENTS
from .services import CLASSES, Services
from .shared.authority import Authority, GPUDevService
from .shared.client import (
    CLIENT_KEY,
    POOL_KEY,
    SERVICE_KEY,
    ClientTerminalHandler,
    ForwardHandler,
    KeptConnections,
    ServiceClient,
)
from .shared.kernel_table import KernelTable
from .shared.kernels import PROCESSES_KEY, KernelProcesses, kernel_routes
from .shared.proxy import ISOLATE_KEY, proxy_routes, target_routes
from .shared.terminals import terminal_routes

KERNELSPEC_MANAGER = "jupyter_gpudev.kernelspecs.GPUDevKernelSpecManager"
#: The page config key telling the Lab extension how to render outputs of gpudev kernels.
OUTPUTS_PAGE_CONFIG = "gpudevKernelOutputs"


class GPUDevApp(ExtensionApp):
    """jupyter-gpudev: dev containers on GPU hosts. Configured through ``c.HostPool`` & co."""

    name = "gpudev"
    version = __version__
    description = "Dev containers on GPU hosts, with kernels inside and exclusive GPU leases."
    load_other_extensions = True
    classes: list[type[Configurable]] = [*ExtensionApp.classes, *CLASSES, GPUDevService]  # noqa: RUF012

    service_url = Unicode(
        help="""Client mode: the shared gpudev service (jupyter gpudev serve) this server
        uses instead of a Docker engine of its own, e.g. http://127.0.0.1:10101/services/gpudev/.
        Its REST API (the panel's) is forwarded there as this server's JupyterHub user.
        Default: GPUDEV_SERVICE_URL; empty: single-user mode (this server runs containers on
        the engines it is configured with).""",
    ).tag(config=True)

    @default("service_url")
    def _default_service_url(self) -> str:
        return os.environ.get("GPUDEV_SERVICE_URL", "")

    untrusted_kernel_outputs = Bool(
        None,
        allow_none=True,
        help="""Render the outputs of gpudev kernels untrusted in JupyterLab, as outputs of a
        notebook from elsewhere: no JavaScript runs (application/javascript is not rendered,
        text/html, Markdown and SVG are sanitised or left out), so a kernel in a container (its
        image, a package it installed, a startup file) cannot drive the user's Lab (open a
        terminal on this server, call its API). Images, text, Markdown, LaTeX, JSON and
        sanitised HTML still show; a notebook saved with such outputs opens untrusted.
        None (the default): on in shared mode (a user's server using the shared service, and
        the service), off in single-user mode.""",
    ).tag(config=True)

    kernel_output_widgets = Bool(
        True,
        help="""While outputs of gpudev kernels render untrusted, still render the widgets
        (ipywidgets) the kernel opened in this session. Widgets are Lab code driven by the
        kernel, and ipywidgets' HTML and Output widgets put the kernel's HTML, and outputs
        rendered trusted, into the page: False closes that way too (widgets show as text).""",
    ).tag(config=True)

    @property
    def kernel_outputs(self) -> str:
        """How the Lab extension renders outputs of gpudev kernels (``OUTPUTS_PAGE_CONFIG``):
        ``"trusted"``, ``"untrusted"`` or ``"untrusted-no-widgets"``."""
        untrusted = self.untrusted_kernel_outputs
        if untrusted is None:
            untrusted = self.mode != "single"
        if not untrusted:
            return "trusted"
        return "untrusted" if self.kernel_output_widgets else "untrusted-no-widgets"

    @property
    def mode(self) -> str:
        """``"service"`` (the shared authority), ``"client"`` or ``"single"``."""
        if getattr(self.serverapp, "gpudev_shared_service", False):
            return "service"
        return "client" if self.service_url else "single"

    def _check_config(self) -> None:
        """Every gpudev setting (the command line's and the config files') checked before
        anything is built, as the CLI checks them: a bad one stops the server with one line
        naming it, rather than a server running on without gpudev."""
        server = self.serverapp
        config = server.config if server is not None else self.config
        files = [str(f) for f in getattr(server, "loaded_config_files", None) or ()]
        try:
            check_config(config, self, self.classes, files)
        except ConfigError as err:
            self.log.critical("gpudev: %s", err.message)
            raise SystemExit(f"jupyter_gpudev: {err.message}") from None

    def initialize_settings(self) -> None:
        self._ready = False
        self._check_config()
        if self.serverapp is not None:  # read by the Lab extension (untrusted-outputs plugin)
            page_config = self.serverapp.web_app.settings.setdefault("page_config_data", {})
            page_config[OUTPUTS_PAGE_CONFIG] = self.kernel_outputs
        # Nothing here talks to an engine or to NVML: that happens on the first request.
        root_dir = self.serverapp.root_dir if self.serverapp is not None else "."
        kernel_manager = self.serverapp.kernel_manager if self.serverapp else None
        self._loop_started = False
        self.services: Services | None = None
        self.authority: Authority | None = None
        #: The shared service's kernels of clients (``shared.kernels``), kept in its table.
        self.processes: KernelProcesses | None = None
        if self.mode == "client":
            self.settings[SERVICE_KEY] = self.service_url
            # gpudev kernels (kernels.remote) are placed and run by the service.
            PLACEMENTS.service = client = ServiceClient(self.service_url, self.log)
            self.settings[CLIENT_KEY] = client
            self.settings[POOL_KEY] = self._connections = KeptConnections()
            # Idle GPU kernels are reclaimed here: their activity is this server's to see.
            self.culler = GPUCuller(kernel_manager, parent=self, log=self.log)
            self.settings[CULLER_KEY] = self.culler
            isolate = self.config.get("ContainerLookup", {}).get("isolate_web_apps", True)
            self.settings[ISOLATE_KEY] = bool(isolate)
            self._ready = True
            IOLoop.current().add_callback(self._on_loop_start)
            self.log.info("gpudev: client mode, the shared service is %s", self.service_url)
            return
        if self.mode == "service":
            self.authority = Authority(root_dir, parent=self, log=self.log)
            self.settings[SETTINGS_KEY] = self.authority
            self.processes = KernelProcesses(
                self.log,
                table=self._kernel_table(self.authority),
                views=self.authority,
                abandoned_timeout=self.authority.abandoned_kernel_timeout,
            )
            self.settings[PROCESSES_KEY] = self.processes
            self._own = self.authority.service
        else:
            self.services = Services(
                root_dir, parent=self, kernel_manager=kernel_manager, log=self.log
            )
            self.settings[SETTINGS_KEY] = self.services
            self._own = self.services
            # gpudev kernels (provisioner instances made by jupyter_client) use this manager.
            provisioner.set_manager(self.services.containers)
        # The gauges of GPU leases and use on the server's /metrics (handlers.api
        # MetricsHandler: the service's for its administrators only).
        metrics.install(self._own.metrics)
        # Once the event loop runs: clean up after a crash, then watch idle GPU kernels. A
        # started server calls _start_jupyter_server_extension; a server embedded in a running
        # loop (tests) gets the callback; whichever comes first does it.
        self._ready = True
        IOLoop.current().add_callback(self._on_loop_start)

    def _kernel_table(self, authority: Authority) -> KernelTable:
        """The shared service's kernel table in its state folder, checked now: one that cannot
        be used safely stops the start (its clients' kernels would not outlive a restart)."""
        table = KernelTable(authority.service.containers.state_dir, log=self.log)
        try:
            table.check()
        except GPUDevError as err:
            raise SystemExit(f"jupyter gpudev serve: {err.message}") from None
        return table

    async def _reconcile(self, restoring: Awaitable[Any] | None = None) -> None:
        """After a crash, free the leases of containers that are gone (and re-lease orphans).
        ``restoring``: the shared service reaching its clients' kernels again, awaited first;
        their containers, made by a process that is gone, are not a dead server's orphans."""
        loop = asyncio.get_running_loop()
        containers = self._own.containers
        keep: frozenset[tuple[str, str]] = frozenset()
        if restoring is not None and self.processes is not None:
            await restoring
            keep = self.processes.kept_containers()
        # Each step on its own: a failed sweep must not keep the leases unreconciled.
        steps = (
            ("stop_orphan_kernels", functools.partial(containers.stop_orphan_kernels, keep)),
            ("reconcile", containers.reconcile),
            ("sweep_staging", sweep_staging),
        )
        for name, step in steps:
            try:
                await loop.run_in_executor(None, step)
            except Exception:
                self.log.exception("gpudev: %s failed", name)

    async def _start_jupyter_server_extension(self, serverapp: Any) -> None:  # noqa: ARG002
        await self._on_loop_start()

    async def _on_loop_start(self) -> None:
        if self._loop_started or not getattr(self, "_ready", False):
            return  # done, or the settings failed (the server logged why): nothing to start
        self._loop_started = True
        if self.mode == "client":  # nothing of its own to reconcile; its kernels to watch
            self.culler.start()
            return
        # The shared service's kernels of clients reached again (calls for them wait), then
        # the reconcile, which leaves their containers alone.
        restoring = self.processes.start_restore() if self.processes is not None else None
        if self.processes is not None:  # and those no server asks after any more, ended
            self.processes.start_looking()
        self._reconcile_task = asyncio.ensure_future(self._reconcile(restoring))
        # Dev containers whose GPUs do no work: the server's own, or every user's (service).
        self._own.gpu_idle.start()
        if self.services is not None:  # kernels run in single-user servers only
            self.services.culler.start()
            PLACEMENTS.warm = self.services.warm
            await asyncio.get_running_loop().run_in_executor(
                None, self.services.warm.fill_pinned, self.services.containers
            )

    def _link_jupyter_server_extension(self, serverapp: Any) -> None:
        # The gpudev kernels are in the picker through our kernelspec manager, unless the
        # administrator chose another one. (Set here: the server builds its managers after
        # linking extensions, and reads no ServerApp traits from an extension's config files.)
        chosen = serverapp.config.get("ServerApp", {}).get("kernel_spec_manager_class")
        if self.mode == "service":
            pass  # it runs no kernels of its own: those of clients, through kernel-processes
        elif chosen is None:
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
        if self.mode == "client":
            self.handlers.append((rf"{API}/containers/{NAME}/terminal", ClientTerminalHandler))
            self.handlers.extend(reclaim_routes())  # this server's kernels, reclaimed here
            self.handlers.append((rf"{API}/(?P<path>.*)", ForwardHandler))
            self.handlers.extend(proxy_routes(NAME))
            return
        self.handlers.extend(routes())
        if self.mode == "service":
            self.handlers.extend(kernel_routes(API))
            self.handlers.extend(terminal_routes(API, NAME))
            self.handlers.extend(target_routes(API, NAME))

    async def stop_extension(self) -> None:
        task = getattr(self, "_reconcile_task", None)
        if task is not None:
            try:
                await task
            except Exception:  # logged as it failed; the server must still stop
                self.log.exception("gpudev: the start-up reconcile failed")
        own = getattr(self, "_own", None)
        if own is not None:
            metrics.uninstall(own.metrics)
            await own.gpu_idle.stop()
        services = getattr(self, "services", None)
        if services is not None:
            await services.culler.stop()
            PLACEMENTS.warm = None
            provisioner.set_manager(None)
            services.close()
        processes = getattr(self, "processes", None)
        if processes is not None:
            await processes.stop_looking()
        authority = getattr(self, "authority", None)
        if authority is not None:
            authority.close()
        if self.mode == "client" and getattr(self, "_ready", False):
            await self.culler.stop()
            PLACEMENTS.service = None
            self._connections.close()
