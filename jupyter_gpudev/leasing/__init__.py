"""leasing."""

from .ledger import (
    GPURequest,
    LeasableGPU,
    Lease,
    LeaseLedger,
    NoFreeGPU,
    check_fit,
    iso_utc,
    leasable_units,
)

__all__ = [
    "GPURequest",
    "LeasableGPU",
    "Lease",
    "LeaseLedger",
    "NoFreeGPU",
    "check_fit",
    "iso_utc",
    "leasable_units",
]
