"""``traits.PositiveFloat``: a wait or an interval, where 0 would be no wait at all or a loop
that never rests, takes only a number more than 0, from a config file as from code."""

from __future__ import annotations

import math

import pytest
from traitlets import HasTraits, TraitError
from traitlets.config import Config, Configurable

from jupyter_gpudev.traits import PositiveFloat


class Poller(Configurable):
    interval = PositiveFloat(1.0, help="Seconds between two looks (more than 0).").tag(config=True)


@pytest.mark.parametrize("value", [0, 0.0, -1, -0.5, math.nan])
def test_zero_a_negative_number_and_nan_are_refused_saying_more_than_0(value: float) -> None:
    with pytest.raises(TraitError) as refused:
        Poller(interval=value)
    assert str(refused.value) == (
        "The value of the 'interval' trait of a Poller instance should be more than 0, "
        f"but a value of {value!r} was specified"
    )


def test_a_config_files_zero_is_refused_when_the_part_is_built() -> None:
    config = Config()
    config.Poller.interval = 0
    with pytest.raises(TraitError, match="'interval' trait of a Poller instance should be more"):
        Poller(config=config)


@pytest.mark.parametrize(("value", "taken"), [(0.001, 0.001), (2, 2.0), (600.0, 600.0)])
def test_a_number_more_than_0_is_taken_as_a_float(value: float, taken: float) -> None:
    poller = Poller(interval=value)
    assert poller.interval == taken
    assert isinstance(poller.interval, float)


def test_a_value_of_another_type_is_refused_in_its_words() -> None:
    with pytest.raises(TraitError, match="expected a number more than 0, not the str 'soon'"):
        Poller(interval="soon")


def test_another_lower_bound_is_exclusive_too() -> None:
    class Slow(HasTraits):
        wait = PositiveFloat(5.0, min=1.0)

    assert Slow(wait=1.5).wait == 1.5
    with pytest.raises(TraitError, match="should be more than 1"):
        Slow(wait=1.0)
