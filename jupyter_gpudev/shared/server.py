"""``jupyter gpudev serve``: the shared service, a Jupyter server with gpudev's API only.

It alone holds the Docker engines (the local socket, SSH keys, TLS files), the registry
credentials, the lease ledger and the policies. Users' servers reach it in client mode
(``c.GPUDevApp.service_url``); each request acts for the JupyterHub user whose API token it
carries (``identity.HubIdentityProvider``). Nothing else a Jupyter server offers is served:
no kernels, contents, files or terminals (they would run as the service's account, which
has the engine), and no other server extension is loaded.

The kernels it runs for clients outlive it: they are written in the kernel table of its state
folder (``shared.kernel_table``), which ``GPUDevApp`` checks when it starts, and reached again
once its event loop runs (``KernelProcesses.restore``), before its orphan sweep, which leaves
their containers alone (``DevContainers.stop_orphan_kernels``' ``keep``).

Request bodies are bounded (``MAX_BODY_SIZE``, 4 MiB, not jupyter_server's 512 MiB): tornado
reads a request's whole body before its handler, and so before the token is checked; anyone
who reaches the port could otherwise make the service hold 512 MiB per connection.
"""

from __future__ import annotations

import os
from typing import Any
from urllib.parse import urlparse

from jupyter_server.serverapp import ServerApp
from jupyter_server.services.contents.largefilemanager import AsyncLargeFileManager
from traitlets import Integer, default
from traitlets.config import Configurable

from ..errors import GPUDevError
from ..services import CLASSES
from .authority import GPUDevService
from .identity import HubIdentityProvider

#: The service's own configurable classes (besides every part's, ``services.CLASSES``).
SHARED_CLASSES: tuple[type[Configurable], ...] = (GPUDevService, HubIdentityProvider)

#: The largest request body the service reads (bytes). Its API's bodies are small JSON
#: objects: a start request, a kernel launch (its key, cwd and session name), a host; the
#: largest a person makes is a commit's ``exclude`` list: 10,000 change ids at most
#: (``changes.model``), about 2.5 MB when each is a 250-character path.
MAX_BODY_SIZE = 4 << 20


class NoFilesManager(AsyncLargeFileManager):
    """The service's contents manager: no ``/files/`` route (it would serve the service's
    folder, as the service's account, to every user)."""

    def get_extra_handlers(self) -> list[Any]:
        return []


class GPUDevServer(ServerApp):
    """The shared gpudev service. Configure with ``c.GPUDevService``, ``c.HostPool`` & co."""

    name = "jupyter-gpudev-serve"
    description = """The shared gpudev service: one authority for the Docker engines, GPU
    leases and policies of a deployment; users' Jupyter servers use it in client mode
    (c.GPUDevApp.service_url). Run by JupyterHub as a service, or standalone."""

    classes: list[type[Configurable]] = [*ServerApp.classes, *CLASSES, *SHARED_CLASSES]  # noqa: RUF012

    #: Which of the Jupyter server's own REST services it offers: none.
    default_services: tuple[str, ...] = ()  # type: ignore[assignment]

    #: ``GPUDevApp`` acts as the shared authority in this server.
    gpudev_shared_service = True

    max_body_size = Integer(
        MAX_BODY_SIZE,
        config=True,
        help="""The largest request body the service reads, in bytes (4 MiB): a larger one is
        refused (400) and its connection closed before any of it is read. Every body is read
        whole before the caller's token is checked, so this bounds what anyone who reaches the
        port can make the service hold per connection. Its API's largest body is a commit's
        list of excluded changes (10,000 ids at most).""",
    )

    max_buffer_size = Integer(
        MAX_BODY_SIZE,
        config=True,
        help="""The most bytes the service buffers from one connection (4 MiB; see
        max_body_size).""",
    )

    @default("identity_provider_class")
    def _default_identity_provider_class(self) -> type[HubIdentityProvider]:
        return HubIdentityProvider

    @default("contents_manager_class")
    def _default_contents_manager_class(self) -> type[NoFilesManager]:
        return NoFilesManager

    @default("base_url")
    def _default_base_url(self) -> str:
        return os.environ.get("JUPYTERHUB_SERVICE_PREFIX", "/")

    @default("port")
    def _default_port(self) -> int:
        url = urlparse(os.environ.get("JUPYTERHUB_SERVICE_URL", ""))
        return url.port or 10101

    @default("ip")
    def _default_ip(self) -> str:
        url = urlparse(os.environ.get("JUPYTERHUB_SERVICE_URL", ""))
        return url.hostname or "127.0.0.1"

    @default("allow_root")
    def _default_allow_root(self) -> bool:
        # It runs no kernels, terminals or notebooks; its account has the engine anyway
        # (root, or a member of the docker group: the same rights).
        return True

    @default("port_retries")
    def _default_port_retries(self) -> int:
        return 0  # JupyterHub (and users' servers) expect it at its address, not the next one

    @default("open_browser")
    def _default_open_browser(self) -> bool:
        return False

    def find_server_extensions(self) -> None:
        """gpudev and nothing else, whatever the config path enables."""
        self.jpserver_extensions = {"jupyter_gpudev": True}

    def init_server_extensions(self) -> None:
        self.jpserver_extensions = {"jupyter_gpudev": True}
        super().init_server_extensions()

    def init_webapp(self, *args: Any, **kwargs: Any) -> None:
        # No terminals: the service's shell would have the engine.
        self.terminals_enabled = False
        self.extra_services = []
        if not isinstance(self.contents_manager, NoFilesManager):
            raise SystemExit(
                "jupyter gpudev serve: c.ServerApp.contents_manager_class cannot be changed "
                "(the service serves no files)"
            )
        try:  # users' folders: a layout a user could redirect is refused now, not later
            GPUDevService(parent=self, log=self.log).folders().check()
        except GPUDevError as err:
            raise SystemExit(f"jupyter gpudev serve: {err}") from None
        super().init_webapp(*args, **kwargs)
