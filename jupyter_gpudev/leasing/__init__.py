"""Leasing: exclusive GPU claims by UUID. ``model`` holds leases, requests and the pure
decisions (what is leasable, what fits); ``ledger`` the SQLite ledger that records them and
releases each exactly once."""

from .ledger import LeaseLedger
from .model import (
    GPUHolder,
    GPURequest,
    LeasableGPU,
    Lease,
    LedgerUnavailable,
    NoFreeGPU,
    ReconcileReport,
    check_fit,
    iso_utc,
    leasable_units,
)

__all__ = [
    "GPUHolder",
    "GPURequest",
    "LeasableGPU",
    "Lease",
    "LeaseLedger",
    "LedgerUnavailable",
    "NoFreeGPU",
    "ReconcileReport",
    "check_fit",
    "iso_utc",
    "leasable_units",
]
