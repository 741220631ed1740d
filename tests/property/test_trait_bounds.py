"""Every number a kernelspec or the shared service's config gives ``ServiceKernelProvisioner``
and ``HubIdentityProvider`` has its bounds on its trait: out of them is a ``TraitError`` when
set, not a value read later (a negative GPU count taken as "the environment's", a negative or
NaN timeout)."""

from __future__ import annotations

import math
from typing import Any

import pytest
from traitlets import Float, HasTraits, Int, TraitError

from jupyter_gpudev.kernels.remote import ServiceKernelProvisioner
from jupyter_gpudev.shared.identity import HubIdentityProvider

#: (class, trait, the smallest value it takes, whether that bound itself is refused).
BOUNDS: list[tuple[type[HasTraits], str, float, bool]] = [
    (ServiceKernelProvisioner, "gpus", -1, False),
    (ServiceKernelProvisioner, "unreachable_grace", 0.0, False),
    (HubIdentityProvider, "cache_seconds", 0.0, False),
    (HubIdentityProvider, "timeout", 0.0, True),
    (HubIdentityProvider, "concurrent_lookups", 1, False),
]


def _numbers(cls: type[HasTraits]) -> set[str]:
    return {
        name
        for name, trait in cls.class_traits(config=True).items()
        if isinstance(trait, Int | Float)
    }


@pytest.mark.parametrize("cls", [ServiceKernelProvisioner, HubIdentityProvider])
def test_every_number_trait_has_a_lower_bound(cls: type[HasTraits]) -> None:
    # Every number trait is in BOUNDS, and has a lower bound there
    listed = {name for owner, name, _, _ in BOUNDS if owner is cls}
    assert _numbers(cls) == listed
    for name in listed:
        trait = cls.class_traits()[name]
        assert isinstance(trait, Int | Float)
        assert trait.min is not None, name


def _set(cls: type[HasTraits], name: str, value: Any) -> None:
    """Validate ``value`` as ``cls``'s trait does (an instance made without its ``__init__``:
    the provisioner needs a kernel manager, the provider a server)."""
    trait = cls.class_traits()[name]
    trait._validate(HasTraits.__new__(cls), value)


@pytest.mark.parametrize(("cls", "name", "low", "strict"), BOUNDS)
def test_the_bounds_take_what_is_in_them_and_refuse_what_is_not(
    cls: type[HasTraits], name: str, low: float, strict: bool
) -> None:
    _set(cls, name, low + 1)
    if strict:
        with pytest.raises(TraitError):
            _set(cls, name, low)
    else:
        _set(cls, name, low)
    for bad in (low - 1, low - 1000, *([math.nan] if strict else [])):
        with pytest.raises(TraitError):
            _set(cls, name, bad)
