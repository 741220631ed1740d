"""The HTTP side of gpudev: the REST API (``api``) and the web-port proxy (``proxy``) on one
base (``base``); ``routes()`` is the one table of their URLs."""

from __future__ import annotations

from .api import (
    ContainerCommitHandler,
    ContainerDiffHandler,
    ContainerHandler,
    ContainerLogsHandler,
    ContainerPinHandler,
    ContainerPortHandler,
    ContainerPortsHandler,
    ContainersHandler,
    ContainerStartHandler,
    ContainerStopHandler,
    ContainerTerminalHandler,
    EnvironmentsHandler,
    HostHandler,
    HostsHandler,
    KernelHandler,
    KernelKeepHandler,
    KernelReleaseHandler,
    KernelUsageHandler,
    MetricsHandler,
    ReclaimsHandler,
    UsageHandler,
)
from .base import GPUDevHandler
from .capabilities import PATTERN as _CAPABILITY
from .proxy import AppProxyHandler, PortProxyHandler

API = "/gpudev/api"
#: A dev container's name: the user's own name for it, or (an administrator naming another
#: user's in shared mode) its name on the engine, gpudev-OWNER.NAME (``containers.model``).
NAME = r"(?P<name>[a-z0-9][a-z0-9_.-]{0,150})"
KERNEL = r"(?P<kernel_id>[0-9a-f-]{1,64})"


def reclaim_routes() -> list[tuple[str, type[GPUDevHandler]]]:
    """The idle GPU kernel reclaim's URLs (about this server's own kernels)."""
    return [
        (rf"{API}/reclaims", ReclaimsHandler),
        (rf"{API}/kernels/{KERNEL}/keep", KernelKeepHandler),
        (rf"{API}/kernels/{KERNEL}/release", KernelReleaseHandler),
    ]


def routes() -> list[tuple[str, type[GPUDevHandler]]]:
    """Every gpudev URL and its handler (``ExtensionApp`` puts the server's base_url first)."""
    return [
        (rf"{API}/hosts", HostsHandler),
        (rf"{API}/usage", UsageHandler),
        (rf"{API}/hosts/(?P<name>[^/]+)", HostHandler),
        (rf"{API}/environments", EnvironmentsHandler),
        (rf"{API}/containers", ContainersHandler),
        (rf"{API}/containers/{NAME}", ContainerHandler),
        (rf"{API}/containers/{NAME}/stop", ContainerStopHandler),
        (rf"{API}/containers/{NAME}/start", ContainerStartHandler),
        (rf"{API}/containers/{NAME}/pin", ContainerPinHandler),
        (rf"{API}/containers/{NAME}/diff", ContainerDiffHandler),
        (rf"{API}/containers/{NAME}/commit", ContainerCommitHandler),
        (rf"{API}/containers/{NAME}/terminal", ContainerTerminalHandler),
        *reclaim_routes(),
        (rf"{API}/containers/{NAME}/logs", ContainerLogsHandler),
        (rf"{API}/containers/{NAME}/ports", ContainerPortsHandler),
        (rf"{API}/containers/{NAME}/ports/(?P<port>[0-9]{{1,5}})", ContainerPortHandler),
        (rf"/gpudev/proxy/{NAME}/(?P<port>[0-9]{{1,5}})(?P<path>/.*)?", PortProxyHandler),
        (rf"/gpudev/app/(?P<capability>{_CAPABILITY})(?P<path>/.*)?", AppProxyHandler),
        (rf"{API}/kernels/{KERNEL}", KernelHandler),
        (rf"{API}/kernels/{KERNEL}/usage", KernelUsageHandler),
        # Prometheus: the server's own /metrics, gathered off the event loop (and in the
        # shared service for administrators only).
        (r"/metrics", MetricsHandler),
    ]
