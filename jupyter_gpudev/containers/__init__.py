"""Dev containers: where a start goes (``placement``), what the engine is asked for
(``create``, a pure builder), the lifecycle (``lifecycle.DevContainers``: start, stop, resume,
remove, list), the commands run inside (``commands``), terminals, web ports, and what the
lifecycle needs from the parts above it (``hooks``)."""

from ..labels import STOPPED, labelled_gpus
from .commands import close_stream
from .hooks import ChangeTracking, KernelTracking
from .lifecycle import DevContainers
from .model import (
    DevContainerInfo,
    KernelInfo,
    StartRequest,
    docker_name,
    engine_time,
    user_name,
)
from .placement import CudaMismatch, HostTooSmall, NoHostFits

__all__ = [
    "STOPPED",
    "ChangeTracking",
    "CudaMismatch",
    "DevContainerInfo",
    "DevContainers",
    "HostTooSmall",
    "KernelInfo",
    "KernelTracking",
    "NoHostFits",
    "StartRequest",
    "close_stream",
    "docker_name",
    "engine_time",
    "labelled_gpus",
    "user_name",
]
