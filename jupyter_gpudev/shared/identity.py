"""Who calls the shared service: the JupyterHub user behind the request's API token.

Users' Jupyter servers in client mode (and the CLI there) send their JupyterHub API token
(``Authorization: token ...``). The service asks the Hub whose token it is (``GET
{api_url}/user`` with that token, as JupyterHub's own services do) and acts for that user;
answers are cached for ``cache_seconds`` under a hash of the token, never the token itself.
No cookies, no login page: the service has an API only.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import time
from dataclasses import dataclass
from typing import Any

from jupyter_server.auth.identity import IdentityProvider, User
from tornado import web
from tornado.httpclient import AsyncHTTPClient, HTTPClientError, HTTPRequest
from traitlets import Float, Unicode, default

#: A user name the service accepts (it names folders: ``{user}`` in ``user_root``).
USER_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._@+-]{0,63}")

_HEADER = re.compile(r"(?:token|bearer)\s+(\S+)", re.IGNORECASE)


@dataclass
class HubUser(User):
    """A JupyterHub user; ``admin`` as the Hub says (``c.Access.admin_users`` adds more)."""

    admin: bool = False


def request_token(handler: web.RequestHandler) -> str | None:
    """The API token of ``Authorization: token T`` (or ``Bearer T``), if any."""
    match = _HEADER.fullmatch(handler.request.headers.get("Authorization", "").strip())
    return match.group(1) if match else None


class HubIdentityProvider(IdentityProvider):
    """Identifies each request's caller with the JupyterHub API (``c.HubIdentityProvider``)."""

    api_url = Unicode(
        help="""The JupyterHub API (http://HUB:8081/hub/api). Default: JUPYTERHUB_API_URL,
        which JupyterHub sets for the services it starts.""",
    ).tag(config=True)

    cache_seconds = Float(
        60.0,
        help="""How long the Hub's answer for one token is reused (a revoked token keeps
        working at most this long; 0: ask the Hub on every request).""",
    ).tag(config=True)

    timeout = Float(10.0, help="Seconds to wait for the Hub's answer.").tag(config=True)

    @default("token")
    def _no_token(self) -> str:
        return ""  # only the Hub's tokens are accepted: none of the server's own

    @default("api_url")
    def _default_api_url(self) -> str:
        return os.environ.get("JUPYTERHUB_API_URL", "")

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self._cache: dict[str, tuple[float, HubUser | None]] = {}

    @property
    def auth_enabled(self) -> bool:
        return True

    @property
    def login_available(self) -> bool:
        return False

    def get_handlers(self) -> list[Any]:
        return []

    async def get_user(self, handler: web.RequestHandler) -> HubUser | None:
        token = request_token(handler)
        if token is None:
            return None
        user = await self.user_for_token(token)
        if user is not None:
            handler._token_authenticated = True  # type: ignore[attr-defined]
        return user

    def is_token_authenticated(self, handler: web.RequestHandler) -> bool:
        handler.current_user  # noqa: B018 (runs get_user once)
        return bool(getattr(handler, "_token_authenticated", False))

    async def user_for_token(self, token: str) -> HubUser | None:
        """The Hub user who owns ``token`` (``None``: not a user's valid token)."""
        key = hashlib.sha256(token.encode()).hexdigest()
        now = time.monotonic()
        cached = self._cache.get(key)
        if cached is not None and now - cached[0] < self.cache_seconds:
            return cached[1]
        user = await self._ask_hub(token)
        if self.cache_seconds > 0:
            if len(self._cache) > 10_000:  # a bound, not a policy: drop the oldest half
                for old in sorted(self._cache, key=lambda k: self._cache[k][0])[:5_000]:
                    del self._cache[old]
            self._cache[key] = (now, user)
        return user

    async def _ask_hub(self, token: str) -> HubUser | None:
        if not self.api_url:
            self.log.error(
                "gpudev service: no JupyterHub API to identify users "
                "(c.HubIdentityProvider.api_url or JUPYTERHUB_API_URL); every request is refused"
            )
            return None
        request = HTTPRequest(
            self.api_url.rstrip("/") + "/user",
            headers={"Authorization": f"token {token}"},
            request_timeout=self.timeout,
        )
        try:
            response = await AsyncHTTPClient().fetch(request)
        except HTTPClientError as err:
            if err.code in (401, 403, 404):
                return None
            self.log.warning("gpudev service: the Hub answered %s identifying a token", err.code)
            raise web.HTTPError(503, "The JupyterHub API cannot identify users now") from None
        except OSError as err:
            self.log.warning("gpudev service: the Hub cannot be reached (%s)", err)
            raise web.HTTPError(503, "The JupyterHub API cannot be reached") from None
        try:
            model = json.loads(response.body)
        except ValueError:
            return None
        return self._user_from(model)

    def _user_from(self, model: Any) -> HubUser | None:
        if not isinstance(model, dict) or model.get("kind", "user") != "user":
            return None  # a service's or another server's token: not a person
        name = model.get("name")
        if not isinstance(name, str) or not USER_NAME.fullmatch(name):
            self.log.warning("gpudev service: refusing a Hub user with an unusable name")
            return None
        return HubUser(username=name, name=name, admin=model.get("admin") is True)
