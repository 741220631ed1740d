"""Linux capabilities an environment may add (capAdd, runArgs --cap-add, a feature's capAdd):
only those an administrator names in c.EnvironmentManager.allowed_capabilities."""

from __future__ import annotations

import re
from collections.abc import Collection
from typing import Any

from ..errors import BadRequest

#: Why an environment may not add a capability, and who may allow one.
CAPABILITY_REFUSED = "it adds Linux capabilities to the container"
CAPABILITY_TRAIT = "c.EnvironmentManager.allowed_capabilities"

_CAPABILITY_RE = re.compile(r"^[A-Z][A-Z0-9_]{0,31}\Z")


def capability_name(text: Any) -> str | None:
    """A Linux capability's name as the engine takes it (``SYS_PTRACE``: upper case, no
    ``CAP_``), or ``None`` when ``text`` is not one (``ALL`` is not one)."""
    if not isinstance(text, str):
        return None
    name = text.strip().upper().removeprefix("CAP_")
    return name if _CAPABILITY_RE.match(name) and name != "ALL" else None


def allowed_capabilities(asked: Any, allowed: Collection[str], what: str) -> tuple[str, ...]:
    """The capabilities ``asked`` (a list of names, from a file) names, each one ``allowed``
    names (``c.EnvironmentManager.allowed_capabilities``: the administrator's); any other is a
    ``BadRequest`` naming it and the setting. ``what``: where it was asked, for the message."""
    if not isinstance(asked, list):
        raise BadRequest(f"{what} must be a list of capability names")
    found: list[str] = []
    for item in asked:
        name = capability_name(item)
        if name is None:
            raise BadRequest(f"{what}: {str(item)[:80]!r} is not a capability's name")
        if name not in allowed:
            raise BadRequest(
                f"{what}: {name} is not allowed: {CAPABILITY_REFUSED}; an administrator may "
                f"allow named capabilities ({CAPABILITY_TRAIT})",
                details={"capability": name, "trait": CAPABILITY_TRAIT},
            )
        if name not in found:
            found.append(name)
    return tuple(found)
