"""Settings checked before anything is built, with one message naming the bad one.

``check_config`` checks every value a configuration gives the traits of gpudev's classes (a
config file's ``c.Class.trait``, a command line's ``--Class.trait``) as a trait would: its type
and bounds, an ``Enum``'s values, its class's ``@validate`` handlers, a float finite. The
command line (``cli.usage``) and the server extension (``app``) both call it, so that a bad
value stops a command or a server at its start, naming the setting, what it expects and the
value given (escaped and cut for one line: ``one_line``, ``shown``)."""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

from traitlets import Bool, Container, Dict, Enum, Float, HasTraits, Int, TraitError, Unicode
from traitlets.config import Config
from traitlets.config.loader import DeferredConfig, LazyConfigValue

from .errors import ConfigError
from .traits import PositiveFloat
from .untrusted import escape_unprintable

#: How many characters of a value a usage error shows (escaped, then cut).
SHOWN = 60


def _escaped(text: str, limit: int) -> tuple[str, bool]:
    """``text`` with each character a terminal would act on or hide (controls, line breaks,
    bidi marks) escaped as Python writes it, cut at ``limit`` characters; whether it was."""
    escaped = escape_unprintable(text[: limit + 1])
    return escaped[:limit], len(escaped) > limit or len(text) > limit


def one_line(text: str, limit: int = SHOWN) -> str:
    """``text`` for one line of a message (escaped, ``...`` after a cut)."""
    escaped, cut = _escaped(text, limit)
    return escaped + ("..." if cut else "")


def error_line(text: str) -> str:
    """A message as one line of an error, whole: each character a terminal would act on or
    hide escaped (whatever a request or a container put in it)."""
    return escape_unprintable(text)


def shown(value: str) -> str:
    """A value as typed, quoted, for one line of a message (escaped, ``...`` after a cut)."""
    escaped, cut = _escaped(value, SHOWN)
    return f"'{escaped}'" + ("..." if cut else "")


def _number(value: float) -> str:
    return f"{value:g}" if isinstance(value, float) else str(value)


def _bounds(trait: Int[Any, Any] | Float[Any, Any]) -> str:
    """ ", 0 or more", ", more than 0", ", 1 to 65535", or "" (a Float's bounds default to
    -inf and inf)."""
    low = None if trait.min is None or math.isinf(trait.min) else _number(trait.min)
    high = None if trait.max is None or math.isinf(trait.max) else _number(trait.max)
    above = isinstance(trait, PositiveFloat)
    if low is not None and high is not None:
        return f", more than {low}, {high} or less" if above else f", {low} to {high}"
    if low is not None:
        return f", more than {low}" if above else f", {low} or more"
    if high is not None:
        return f", {high} or less"
    return ""


#: What a value of each kind of trait is, for people (the first that fits).
_KINDS: tuple[tuple[type[Any], str], ...] = (
    (Bool, "true or false"),
    (Int, "a whole number"),
    (Float, "a finite number"),
    (Unicode, "a value"),
    (Dict, "KEY=VALUE (repeat the option for more)"),
    (Container, "a value (repeat the option for more)"),
)


def expects(trait: Any) -> str:
    """What a trait takes, for people: its allowed values, or its kind and bounds."""
    if isinstance(trait, Enum):
        return "one of " + ", ".join(str(v) for v in trait.values or ())
    kind = next((text for cls, text in _KINDS if isinstance(trait, cls)), None)
    if kind is None:
        return str(trait.info())
    return kind + (_bounds(trait) if isinstance(trait, Int | Float) else "")


def owner_of(section: str, app: HasTraits, known: dict[str, type[Any]]) -> HasTraits | None:
    """What the ``@validate`` handlers of ``section``'s traits run on: the command for its own
    traits; for a part's, an instance made without ``__init__`` (nothing configured,
    connected or started: the handlers judge the value alone)."""
    if section in {cls.__name__ for cls in type(app).__mro__}:
        return app
    cls = known.get(section)
    if cls is None:
        return None
    try:
        bare: HasTraits = HasTraits.__new__(cls)
    except Exception:  # a part that cannot be made so keeps its own checks, when built
        return None
    return bare


def check_config(
    config: Config, app: HasTraits, classes: Sequence[type[Any]], where: Sequence[str]
) -> None:
    """Every value ``config`` gives a trait of ``classes`` or of ``app``'s (a config file's
    ``c.Class.trait``), checked as the command line's are: its type and bounds, an
    ``Enum``'s values, its class's ``@validate`` handlers, a float finite. A bad one is a
    ``ConfigError`` naming it, what it expects, the value and ``where`` (the files read), before
    anything is built: a part read only by some commands is refused by all of them."""
    known: dict[str, type[Any]] = {cls.__name__: cls for cls in classes}
    known.update((cls.__name__, cls) for cls in type(app).__mro__ if issubclass(cls, HasTraits))
    files = f" (in {', '.join(where)})" if where else ""
    for section, values in config.items():
        cls = known.get(section)
        if cls is None or not isinstance(values, Config):
            continue
        traits = cls.class_traits(config=True)
        for key, given in values.items():
            trait = traits.get(key)
            if trait is None or isinstance(given, LazyConfigValue):
                continue  # an unknown name is traitlets' to warn of; a lazy one has no value
            value = given.get_value(trait) if isinstance(given, DeferredConfig) else given
            option = f"c.{section}.{key}"
            taken, value = _typed(trait, value)
            if not taken:
                raise _bad_config(option, f"expects {expects(trait)}", given, files)
            owner = owner_of(section, app, known)
            try:
                if owner is not None:
                    trait._validate(owner, value)
            except TraitError as err:
                said = one_line(str(err).removeprefix(f"{option}: "), 200)
                raise _bad_config(option, f": {said}", given, files) from None


def _typed(trait: Any, value: Any) -> tuple[bool, Any]:
    """Whether ``trait``'s type and bounds take ``value`` (a float: finite too), and the value
    as taken (a bare HasTraits has no @validate handlers)."""
    try:
        value = trait._validate(HasTraits(), value)
    except TraitError:
        return False, value
    finite = not isinstance(trait, Float) or value is None or math.isfinite(value)
    return finite, value


def _bad_config(option: str, what: str, given: object, files: str) -> ConfigError:
    """``Bad configuration: c.Class.trait expects WHAT; got VALUE (in FILES)``."""
    message = f"Bad configuration: {option}{'' if what.startswith(':') else ' '}{what}"
    return ConfigError(
        f"{message}; got {shown(str(given))}{files}",
        details={"option": option, "value": str(given)[: SHOWN * 4]},
    )
