"""Dev containers: placement, creation, the lifecycle (start, stop, resume, remove), lookup,
terminals, web ports and reconciliation with the lease ledger."""

from .hooks import ChangeTracking, KernelTracking
from .lifecycle import (
    STOPPED,
    CudaMismatch,
    DevContainerInfo,
    DevContainers,
    KernelInfo,
    NoHostFits,
    StartRequest,
    close_stream,
    docker_name,
    engine_time,
    labelled_gpus,
    user_name,
)

__all__ = [
    "STOPPED",
    "ChangeTracking",
    "CudaMismatch",
    "DevContainerInfo",
    "DevContainers",
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
