"""Capabilities for proxied web apps: a signed, expiring grant to one port of one dev container.

A browser that opens ``/gpudev/proxy/NAME/PORT/...`` (logged in to Jupyter) is sent on to
``/gpudev/app/CAPABILITY/...``, where the app is served with a ``sandbox`` Content Security
Policy: its pages run in an opaque origin of their own, so their scripts can read none of
Jupyter's cookies (``_xsrf`` included) and their requests carry none of them, so they cannot call
Jupyter's API as the user. Requests under ``/gpudev/app/`` are authorised by the capability in
their path alone (which the app's relative links keep), never by cookies.

A capability names the container, the port, the user it was given to (who must still see the
container when it is used) and when it expires; it is signed with a key of this server process
(HMAC-SHA256), so it is worthless after a restart and cannot be forged or altered. Anyone who
holds the URL reaches that one port until it expires: like a share link.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import json
import secrets
import time
from dataclasses import dataclass

from ..errors import NotFound

#: How long a capability lasts (seconds): a working day; the panel's link mints a new one.
LIFETIME = 12 * 3600
#: The route's pattern for a capability (base64url payload, a dot, base64url signature).
PATTERN = r"[A-Za-z0-9_-]{8,2048}\.[A-Za-z0-9_-]{16,128}"

_KEY = secrets.token_bytes(32)


def _b64(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).decode().rstrip("=")


def _unb64(text: str) -> bytes:
    return base64.urlsafe_b64decode(text + "=" * (-len(text) % 4))


def _sign(payload: str, key: bytes) -> str:
    return _b64(hmac.new(key, payload.encode(), hashlib.sha256).digest()[:24])


@dataclass(frozen=True)
class AppCapability:
    """Port ``port`` of the dev container ``name`` (on ``host``), for ``user``, until
    ``expires`` (epoch seconds)."""

    name: str
    host: str
    port: int
    user: str
    admin: bool
    expires: int

    def mint(self, key: bytes = _KEY) -> str:
        """The capability as it goes in a URL."""
        payload = _b64(
            json.dumps(
                [self.name, self.host, self.port, self.user, self.admin, self.expires],
                separators=(",", ":"),
            ).encode()
        )
        return f"{payload}.{_sign(payload, key)}"

    @classmethod
    def grant(
        cls, name: str, host: str, port: int, user: str, *, admin: bool, now: float | None = None
    ) -> AppCapability:
        """A capability that lasts ``LIFETIME`` from ``now``."""
        start = time.time() if now is None else now
        return cls(name, host, port, user, admin, int(start) + LIFETIME)

    @classmethod
    def verify(cls, token: str, key: bytes = _KEY, now: float | None = None) -> AppCapability:
        """The capability ``token`` carries; ``NotFound`` (as for a port that is not served)
        when it is forged, altered, malformed or expired."""
        gone = NotFound("This link to a web port is not valid (any more): open it again")
        payload, _, signature = token.partition(".")
        if not payload or not hmac.compare_digest(signature, _sign(payload, key)):
            raise gone
        try:
            name, host, port, user, admin, expires = json.loads(_unb64(payload))
        except (ValueError, TypeError):
            raise gone from None
        if not (
            isinstance(name, str)
            and isinstance(host, str)
            and isinstance(port, int)
            and isinstance(user, str)
            and isinstance(admin, bool)
            and isinstance(expires, int)
        ):
            raise gone
        if (time.time() if now is None else now) >= expires:
            raise gone
        return cls(name, host, port, user, admin, expires)
