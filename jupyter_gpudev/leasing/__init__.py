"""Leasing: exclusive GPU claims by UUID. ``model`` holds leases, requests and the pure
decisions (what is leasable, what fits); ``ledger`` the SQLite ledger that records them and
releases each exactly once; ``claims`` the engine's claims, which decide between ledgers;
``holding`` both around a dev container's creation and start, released together."""

from .claims import CLAIM_IMAGE, Claim, EngineClaims, GPUTaken, claim_name
from .holding import Admit, GPUHolding, Leasable
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
    seen_by,
    would_lease,
)

__all__ = [
    "CLAIM_IMAGE",
    "Admit",
    "Claim",
    "EngineClaims",
    "GPUHolder",
    "GPUHolding",
    "GPURequest",
    "GPUTaken",
    "Leasable",
    "LeasableGPU",
    "Lease",
    "LeaseLedger",
    "LedgerUnavailable",
    "NoFreeGPU",
    "ReconcileReport",
    "check_fit",
    "claim_name",
    "iso_utc",
    "leasable_units",
    "seen_by",
    "would_lease",
]
