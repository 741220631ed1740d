"""Traits for options whose bounds traitlets cannot say: ``PositiveFloat``, a number of seconds
that must be more than 0 (a wait, an interval), where 0 would mean no wait at all or a loop
that never rests. ``Int(min=0)`` and ``Float(min=0)`` say the rest; ``configcheck`` says each
bound in words."""

from __future__ import annotations

from typing import Any

from traitlets import Float, TraitError
from traitlets.utils.descriptions import class_of


class PositiveFloat(Float[float, int | float]):
    """A float more than ``min`` (0 unless given): 0 itself, a negative number and NaN are
    refused, from the command line and from a config file alike."""

    info_text = "a number more than 0"

    def __init__(self, default_value: float, **kwargs: Any) -> None:
        kwargs.setdefault("min", 0.0)
        super().__init__(default_value, **kwargs)

    def validate(self, obj: Any, value: Any) -> float:
        # Before traitlets' own check, whose words ("not less than 0") would allow 0.
        if isinstance(value, int | float) and not value > self.min:  # NaN too
            raise TraitError(
                f"The value of the '{self.name}' trait of {class_of(obj)} instance should be "
                f"more than {self.min:g}, but a value of {value!r} was specified"
            )
        return float(super().validate(obj, value))
