"""Who calls the shared service: the JupyterHub user behind the request's API token.

Users' Jupyter servers in client mode (and the CLI there) send their JupyterHub API token
(``Authorization: token ...``). The service asks the Hub whose token it is (``GET
{api_url}/user`` with that token, as JupyterHub's own services do) and acts for that user only
if the Hub scoped the token to this service (``access:services!service=NAME``, or
``access:services``): a token scoped to anything else (a read-only API token, the OAuth token of
another user's shared server) is refused with 403. Whether the user is an administrator and
when the token expires are read with the service's own token (``GET /users/NAME``, ``GET
/users/NAME/tokens/ID``), never taken from what the caller's token may see. Answers are cached
under a hash of the token, never the token itself, for ``cache_seconds`` (5 s) and never past
the token's expiry, so a revocation or an administrator's demotion takes effect within that
(a token the Hub refused is kept too: asked again only after that). At most
``concurrent_lookups`` (4) tokens are asked about at a time: a flood of unknown tokens cannot
take every connection of the process's HTTP client (10), and a check that cannot start within
``timeout`` is refused with 503 (try again).
No cookies, no login page: the service has an API only.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import os
import re
import time
from dataclasses import dataclass
from datetime import datetime
from typing import Any
from urllib.parse import quote

from jupyter_server.auth.identity import IdentityProvider, User
from tornado import web
from tornado.httpclient import AsyncHTTPClient, HTTPClientError, HTTPRequest
from traitlets import Float, Int, Unicode, default

from ..traits import PositiveFloat

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

    api_token = Unicode(
        help="""The service's own JupyterHub API token: it reads whether a caller is an
        administrator and when their token expires (the Hub must grant it the scopes
        read:users and read:tokens, see examples/jupyterhub_config.py). Default:
        JUPYTERHUB_API_TOKEN, which JupyterHub sets for the services it starts. Never logged
        or answered.""",
    ).tag(config=True)

    service_name = Unicode(
        help="""This service's name in JupyterHub: a caller's token must carry the scope
        access:services!service=NAME (or access:services). Default: JUPYTERHUB_SERVICE_NAME,
        which JupyterHub sets for the services it starts, else "gpudev".""",
    ).tag(config=True)

    cache_seconds = Float(
        5.0,
        min=0.0,
        help="""How long the Hub's answer for one token is reused (seconds, 0 or more), never
        past the token's expiry (a revoked token, or an administrator the Hub demoted, keeps
        the old rights at most this long; 0: ask the Hub on every request).""",
    ).tag(config=True)

    timeout = PositiveFloat(
        10.0,
        help="""Seconds to wait for the Hub's answer, and for a turn to ask it
        (concurrent_lookups) (more than 0).""",
    ).tag(config=True)

    concurrent_lookups = Int(
        4,
        min=1,
        help="""How many tokens the service asks the Hub about at a time (1 or more): each
        token it has not seen (or no longer keeps, cache_seconds) costs a Hub request, so this
        bounds what a flood of unknown tokens costs the Hub and the service's HTTP client (10
        connections, shared with its other requests). A check that cannot start within
        timeout is refused with 503 (the caller tries again).""",
    ).tag(config=True)

    @default("token")
    def _no_token(self) -> str:
        return ""  # only the Hub's tokens are accepted: none of the server's own

    @default("api_url")
    def _default_api_url(self) -> str:
        return os.environ.get("JUPYTERHUB_API_URL", "")

    @default("api_token")
    def _default_api_token(self) -> str:
        return os.environ.get("JUPYTERHUB_API_TOKEN", "")

    @default("service_name")
    def _default_service_name(self) -> str:
        return os.environ.get("JUPYTERHUB_SERVICE_NAME", "") or "gpudev"

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        #: By token hash: (when the answer stops being used: on the monotonic clock, then on
        #: the wall clock (the token's expiry), the answer).
        self._cache: dict[str, tuple[float, float, HubUser | str | None]] = {}
        #: By user name: (when the answer stops being used, on the monotonic clock; admin).
        self._admins: dict[str, tuple[float, bool]] = {}
        #: The bound on lookups in flight, and the event loop it was made for (a semaphore
        #: serves one loop only).
        self._lookups: tuple[asyncio.AbstractEventLoop, asyncio.Semaphore] | None = None

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
        if isinstance(user, str):
            raise web.HTTPError(403, user)
        if user is not None:
            handler._token_authenticated = True  # type: ignore[attr-defined]
        return user

    def is_token_authenticated(self, handler: web.RequestHandler) -> bool:
        handler.current_user  # noqa: B018 (runs get_user once)
        return bool(getattr(handler, "_token_authenticated", False))

    @property
    def scopes(self) -> frozenset[str]:
        """The scopes of which a caller's token needs one."""
        return frozenset({"access:services", f"access:services!service={self.service_name}"})

    async def user_for_token(self, token: str) -> HubUser | str | None:
        """The Hub user who owns ``token``; a message if the token may not act for them here
        (not scoped to this service); ``None``: not a user's valid token."""
        key = hashlib.sha256(token.encode()).hexdigest()
        cached = self._cache.get(key)
        # cache_seconds on the monotonic clock (a wall clock set back keeps no answer longer),
        # the token's expiry on the wall clock (the Hub's time).
        if cached is not None and time.monotonic() < cached[0] and time.time() < cached[1]:
            return cached[2]
        answer, expires = await self._ask_hub_in_turn(token)
        if self.cache_seconds > 0 and expires > time.time():
            if len(self._cache) > 10_000:  # a bound, not a policy: drop the oldest half
                for old in sorted(self._cache, key=lambda k: self._cache[k][0])[:5_000]:
                    del self._cache[old]
            self._cache[key] = (time.monotonic() + self.cache_seconds, expires, answer)
        else:
            self._cache.pop(key, None)
        return answer

    async def is_admin(self, name: str) -> bool:
        """Whether the Hub says user ``name`` is an administrator now (read with the
        service's own token, kept ``cache_seconds``): for rights granted earlier and used
        without a token (a web app's capability), so that a demotion ends them as it ends a
        token's. A user the Hub does not know is not one."""
        cached = self._admins.get(name)
        if cached is not None and time.monotonic() < cached[0]:
            return cached[1]
        if not self.api_url or not self.api_token or not USER_NAME.fullmatch(name):
            return False
        account = await self._hub_get(
            f"/users/{quote(name, safe='')}", self.api_token, service=True
        )
        admin = account is not None and account.get("admin") is True
        if self.cache_seconds > 0:
            if len(self._admins) > 10_000:  # a bound, not a policy
                self._admins.clear()
            self._admins[name] = (time.monotonic() + self.cache_seconds, admin)
        return admin

    async def _ask_hub_in_turn(self, token: str) -> tuple[HubUser | str | None, float]:
        """``_ask_hub`` once one of the ``concurrent_lookups`` turns is free; 503 if none is
        within ``timeout``."""
        loop = asyncio.get_running_loop()
        if self._lookups is None or self._lookups[0] is not loop:
            self._lookups = (loop, asyncio.Semaphore(self.concurrent_lookups))
        turns = self._lookups[1]
        try:
            await asyncio.wait_for(turns.acquire(), self.timeout)
        except asyncio.TimeoutError:
            self.log.warning(
                "gpudev service: a token check waited %gs for one of %d turns to ask the Hub "
                "(c.HubIdentityProvider.concurrent_lookups); refused with 503",
                self.timeout,
                self.concurrent_lookups,
            )
            raise web.HTTPError(
                503, "The gpudev service is busy checking tokens, try again"
            ) from None
        try:
            return await self._ask_hub(token)
        finally:
            turns.release()

    async def _ask_hub(self, token: str) -> tuple[HubUser | str | None, float]:
        """The answer for ``token`` and the wall-clock time past which it must not be used."""
        never = float("inf")
        if not self.api_url:
            self.log.error(
                "gpudev service: no JupyterHub API to identify users "
                "(c.HubIdentityProvider.api_url or JUPYTERHUB_API_URL); every request is refused"
            )
            return None, never
        model = await self._hub_get("/user", token)
        if model is None:
            return None, never
        user = self._user_from(model)
        if user is None:
            return None, never
        scopes = model.get("scopes")
        if not isinstance(scopes, list) or not self.scopes.intersection(scopes):
            return (
                f"This JupyterHub token does not grant access to the gpudev service: it needs "
                f"the scope access:services!service={self.service_name} (the token of your "
                "Jupyter server or one you made with all your permissions has it)"
            ), never
        return await self._checked(user, model.get("token_id"))

    async def _checked(self, user: HubUser, token_id: Any) -> tuple[HubUser | None, float]:
        """``user`` with the administrator flag the Hub gives the service, and the expiry of
        their token (``token_id``), both read with the service's own token."""
        if not self.api_token:
            self.log.error(
                "gpudev service: no JupyterHub token of its own (c.HubIdentityProvider."
                "api_token or JUPYTERHUB_API_TOKEN) to read users; every request is refused"
            )
            raise web.HTTPError(503, "The gpudev service cannot read users from the Hub")
        name = quote(user.name, safe="")
        account = await self._hub_get(f"/users/{name}", self.api_token, service=True)
        if account is None:
            return None, float("inf")
        user.admin = account.get("admin") is True
        if not isinstance(token_id, str) or not token_id:
            return user, 0.0  # a Hub older than 5.0 says no token id: asked every time
        path = f"/users/{name}/tokens/{quote(token_id, safe='')}"
        info = await self._hub_get(path, self.api_token, service=True)
        if info is None:
            return None, float("inf")  # revoked meanwhile
        return user, _expiry(info.get("expires_at"))

    async def _hub_get(
        self, path: str, token: str, *, service: bool = False
    ) -> dict[str, Any] | None:
        """``GET`` of the Hub API's ``path`` with ``token``: its JSON object, or ``None`` when
        the Hub says the token or the thing is not there (401, 403, 404; with the service's
        own token, a 403 means it lacks a scope, which is logged and refused with 503)."""
        request = HTTPRequest(
            self.api_url.rstrip("/") + path,
            headers={"Authorization": f"token {token}"},
            request_timeout=self.timeout,
        )
        try:
            response = await AsyncHTTPClient().fetch(request)
        except HTTPClientError as err:
            if service and err.code in (401, 403):
                self.log.error(  # noqa: TRY400 (the Hub's answer says it all: no traceback)
                    "gpudev service: the Hub refused the service's own token (%s) reading "
                    "users or tokens: grant it the scopes read:users and read:tokens",
                    err.code,
                )
                raise web.HTTPError(
                    503, "The gpudev service cannot read users from the Hub"
                ) from None
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
        return model if isinstance(model, dict) else None

    def _user_from(self, model: dict[str, Any]) -> HubUser | None:
        if model.get("kind", "user") != "user":
            return None  # a service's or another server's token: not a person
        name = model.get("name")
        if not isinstance(name, str) or not USER_NAME.fullmatch(name):
            self.log.warning("gpudev service: refusing a Hub user with an unusable name")
            return None
        return HubUser(username=name, name=name)


def _expiry(value: Any) -> float:
    """A token's ``expires_at`` (ISO 8601, or ``None``: never) as wall-clock seconds; an
    expiry that cannot be read counts as now (the answer is not kept)."""
    if value is None:
        return float("inf")
    try:
        return datetime.fromisoformat(str(value)).timestamp()
    except ValueError:
        return 0.0
