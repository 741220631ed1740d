"""The one reading of the command line of ``jupyter gpudev`` and its subcommands: a bad option
or value is a ``UsageError``, one line with the option as typed (``--gpus``, not
``StartApp.gpus``), what it expects and the value given (escaped, capped), then the command's
usage, exit status 2; never traitlets' "CRITICAL | Bad config" or argparse's usage dump.

``UsageLoader`` is traitlets' command-line loader with each failure turned into one, and each
value checked as read (its trait's type and bounds, an ``Enum``'s values, the ``@validate``
handlers of its class, floats finite), so that nothing is built before a bad value is refused.
A bound that is a fact of an option's meaning belongs on its trait (``Int(min=0)``,
``traits.PositiveFloat``, an ``@validate``); this module says it in words."""

from __future__ import annotations

import difflib
import math
from collections.abc import Sequence
from typing import Any, NoReturn

from traitlets import Container, Dict, Float, HasTraits, TraitError
from traitlets.config.loader import (
    ArgumentError,
    DeferredConfig,
    KVArgParseConfigLoader,
    _KVArgParser,
)

from ..configcheck import SHOWN, expects, one_line, owner_of, shown
from ..errors import BadRequest


class UsageError(BadRequest):
    """A command line the command cannot take. ``message`` is one line: the option or
    argument as typed, what it expects, the value given; ``usage`` is the command's usage,
    filled in by the command that reports it. Exit status 2."""

    def __init__(
        self,
        message: str,
        *,
        option: str | None = None,
        value: str | None = None,
        expects: str | None = None,
    ) -> None:
        details: dict[str, Any] = {}
        if option is not None:
            details["option"] = option
        if value is not None:
            details["value"] = value[: SHOWN * 4]
        if expects is not None:
            details["expects"] = expects
        super().__init__(message, details=details)
        self.usage = ""


def got(values: Sequence[str]) -> str:
    """The values given, for "...; got X": none, one, or how many and the first few."""
    if not values:
        return "none"
    if len(values) == 1:
        return shown(values[0])
    listed = ", ".join(shown(v) for v in values[:4])
    return f"{len(values)}: {listed}{', ...' if len(values) > 4 else ''}"


def bad_value(option: str, expects: str, values: Sequence[str]) -> UsageError:
    """``OPTION expects WHAT; got VALUE``: the one shape of every bad value."""
    return UsageError(
        f"{option} expects {expects}; got {got(values) if values else 'nothing'}",
        option=option,
        value=values[0] if len(values) == 1 else None,
        expects=expects,
    )


def _keys(keys: object) -> tuple[str, ...]:
    """An alias's or flag's names (traitlets takes a name or a tuple of names)."""
    return tuple(str(k) for k in keys) if isinstance(keys, tuple) else (str(keys),)


def _spelled(key: str) -> str:
    return ("-" if len(key) == 1 else "--") + key


class _ParseError(Exception):
    """What argparse says of a command line it cannot read (instead of its usage dump)."""


class _Parser(_KVArgParser):
    def error(self, message: str) -> NoReturn:
        raise _ParseError(message)


class UsageLoader(KVArgParseConfigLoader):
    """traitlets' reading of the command line, with every failure a ``UsageError`` naming the
    option as the user typed it (``--gpus``, not ``StartApp.gpus``): an unknown option
    (traitlets only warns), a missing value, a value given twice, a value its trait refuses
    (type, bounds such as ``Int(min=0)``, the allowed values of an ``Enum``, a ``@validate``
    of the command's own traits), a float that is not finite. Values are checked here, as
    read, so that nothing is built before a bad one is refused."""

    parser_class = _Parser

    def __init__(
        self,
        app: HasTraits,
        argv: list[str] | None,
        aliases: dict[str, Any],
        flags: dict[str, Any],
        *,
        command: str,
        classes: list[type[Any]] | None,
        log: Any = None,
        subcommands: dict[str, Any] | None = None,
    ) -> None:
        super().__init__(argv, aliases, flags, classes=classes, log=log, subcommands=subcommands)
        self.app = app
        self.command = command
        self.known: dict[str, type[Any]] = {cls.__name__: cls for cls in classes or ()}
        self.known.update(
            (cls.__name__, cls) for cls in type(app).__mro__ if issubclass(cls, HasTraits)
        )
        #: The options as typed, by what they set (``StartApp.gpus`` -> ``--gpus``).
        self.typed: dict[str, str] = {}
        self.spelled: dict[str, str] = {}
        for keys, target in self.aliases.items():
            for key in _keys(keys):
                self.spelled.setdefault(target, _spelled(key))

    # what was typed

    def _options(self, *, dotted: bool) -> list[str]:
        """The options this command takes, as typed (``--Class.trait`` ones if ``dotted``)."""
        names = [
            _spelled(key)
            for table in (self.aliases, self.flags)
            for keys in table
            for key in _keys(keys)
        ]
        if dotted:
            names += [
                f"--{name}.{trait}"
                for name, cls in self.known.items()
                for trait in cls.class_traits(config=True)
            ]
        return names

    def _parse_args(self, args: Any) -> Any:
        unpacked = {}
        for keys, target in self.aliases.items():
            if keys in self.flags:
                continue
            for key in _keys(keys):
                unpacked[_spelled(key)] = target
        for arg in args:
            if arg == "--":
                break
            option = str(arg).split("=", 1)[0]
            if option.startswith("-") and not _is_number(option):
                self.typed[unpacked.get(option, option.lstrip("-"))] = option
        try:
            return super()._parse_args(args)
        except _ParseError as err:
            raise self._parse_error(str(err)) from None

    def option(self, target: str) -> str:
        """The option that set ``target`` (``Class.trait``, or an unknown name), as typed
        (escaped: an unknown one is the user's text)."""
        return one_line(self.typed.get(target) or self.spelled.get(target) or f"--{target}")

    def unknown(self, option: str) -> UsageError:
        option = one_line(option)
        close = difflib.get_close_matches(
            option, self._options(dotted="." in option), n=1, cutoff=0.8
        )
        hint = f" (did you mean {close[0]}?)" if close else ""
        return UsageError(f"{option} is not an option of {self.command}{hint}", option=option)

    def _is_known(self, target: str) -> bool:
        """Whether ``target`` (an option without its dashes, or ``Class.trait``) names an
        option: an alias or flag, a config trait of a known class, or ``Other.trait`` for a
        class this command does not list (``ServerApp.root_dir`` is read too) unless its
        name is a misspelling of one it does (``DevContainer.stop_timeout``)."""
        if target in self.argparse_traits:
            return True
        section, _, key = target.rpartition(".")
        if not section:
            return any(target in _keys(keys) for keys in (*self.flags, *self.aliases))
        cls = self.known.get(section)
        if cls is None:
            return not difflib.get_close_matches(section, list(self.known), n=1, cutoff=0.9)
        return key in cls.class_traits(config=True)

    def _unrecognized(self, first: str) -> UsageError:
        if first.startswith("-"):
            return self.unknown(first.split("=", 1)[0])
        # argparse reads the arguments before the first option only
        return UsageError(
            f"{self.command} takes its arguments before the options; got {shown(first)} after them"
        )

    def _parse_error(self, message: str) -> UsageError:
        """argparse's complaint as a usage error about the option as typed."""
        head, _, rest = message.partition(": ")
        first = rest.split(" ")[0]
        if head == "unrecognized arguments":
            return self._unrecognized(first)
        if not head.startswith("argument "):
            return UsageError(one_line(message, 200))
        target = head.removeprefix("argument ").split("/")[0].lstrip("-")
        option = self.option(target)
        trait = self.argparse_traits.get(target)
        if not self._is_known(target):
            return self.unknown(option)
        if rest == "expected one argument":
            return bad_value(option, expects(trait[0]) if trait else "a value", [])
        if rest.startswith("ignored explicit argument "):
            value = rest.removeprefix("ignored explicit argument ").strip("'")
            return UsageError(f"{option} takes no value; got {shown(value)}", option=option)
        return UsageError(f"{option}: {one_line(rest, 200)}", option=option)

    # the values

    def _handle_unrecognized_alias(self, arg: str) -> None:
        raise self.unknown(self.option(arg))

    def _convert_to_config(self) -> None:
        try:
            super()._convert_to_config()
        except ArgumentError as err:
            # traitlets wraps what a value's reading raised; a usage error stays one.
            if isinstance(err.__cause__, UsageError):
                raise err.__cause__ from None
            raise

    def _exec_config_str(self, lhs: Any, rhs: Any, trait: Any = None) -> None:
        if trait is None:
            if not self._is_known(lhs):
                raise self.unknown(self.option(lhs))
            super()._exec_config_str(lhs, rhs, trait)
            return
        *path, key = lhs.split(".")
        section = self.config
        for part in path:
            section = section[part]
        section[key] = self.checked(lhs, rhs, trait)

    def _owner(self, target: str) -> HasTraits | None:
        return owner_of(target.rpartition(".")[0], self.app, self.known)

    def checked(self, target: str, given: Any, trait: Any) -> Any:
        """The value of ``--target`` read and validated as its trait would, or a usage error
        with the option as typed, what it expects and the value."""
        option = self.option(target)
        values = [str(v) for v in given] if isinstance(given, list) else [str(given)]
        many = isinstance(trait, Container | Dict)
        if not many and len(values) > 1:
            raise bad_value(option, f"one value, {expects(trait)}", values)
        value = given.get_value(trait) if isinstance(given, DeferredConfig) else given
        try:
            # The trait's type and bounds (a bare HasTraits has no @validate handlers) ...
            value = trait._validate(HasTraits(), value)
        except TraitError:
            raise bad_value(option, expects(trait), values) from None
        if isinstance(trait, Float) and value is not None and not math.isfinite(value):
            raise bad_value(option, expects(trait), values)
        owner = self._owner(target)
        if owner is not None:
            try:
                # ... then its class's @validate handlers, whose message says what is wrong.
                value = trait._validate(owner, value)
            except TraitError as err:
                said = str(err).removeprefix(f"c.{target}: ")  # the option is named once
                raise UsageError(
                    f"{option}: {one_line(said, 200)}; got {got(values)}",
                    option=option,
                    value=values[0],
                ) from None
        return value


def _is_number(text: str) -> bool:
    try:
        float(text)
    except ValueError:
        return False
    return True
