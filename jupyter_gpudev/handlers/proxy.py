"""An authenticated reverse proxy to the web ports of dev containers (TensorBoard and the like).

``/gpudev/proxy/NAME/PORT/PATH`` (under the server's base_url) reaches ``PATH`` on ``PORT`` of
the dev container ``NAME``, over HTTP (every method, bodies streamed back) and websockets. Only
the container's web ports are served: its environment's ``forwardPorts`` and the ports added with
``POST /gpudev/api/containers/NAME/ports``; never any other address or port of the server.

Every request is authenticated and authorised (``execute`` on ``gpudev``) like the REST API. The
proxied app never sees the user's credentials: no ``Authorization`` header reaches it, whatever
its scheme (Jupyter's token, JupyterHub's, a front proxy's Basic or Bearer credential: nothing
tells them from the app's own), nor any ``token`` parameter (whatever it carries); of the
cookies, those of Jupyter, of JupyterHub (``__Host-``/``__Secure-`` prefixed too) and of the
usual front proxies' logins are taken out (``AppProxyHandler`` forwards none at all). Proxied
apps know nothing of Jupyter's ``_xsrf`` token, so it is not asked for; cross-origin requests
are refused instead (the Origin check, for every method and websockets; a GET or HEAD that
``Sec-Fetch-Site`` says another site sent, unless it opens a page, too).

Response headers that act on Jupyter's whole origin rather than on the one response
(``ORIGIN_WIDE``: reporting, ``Clear-Site-Data``, HSTS, ``Alt-Svc``, ...) are not passed on,
nor a ``Set-Cookie`` that a browser would take for one of those credentials.

With ``c.ContainerLookup.isolate_web_apps`` (the default), whatever a browser may show as a page
(a navigation, a request that accepts HTML, or one without ``Sec-Fetch-Mode``: an older browser,
or a proxy that strips it) is sent on to the sandbox (``AppProxyHandler``); what is answered here
(a script's ``fetch``, a form an older browser posts) carries the sandbox's policy all the same.
"""

from __future__ import annotations

import asyncio
import functools
import re
from collections.abc import Awaitable, Callable, Iterable
from typing import Any
from urllib.parse import quote, unquote_plus, urlsplit, urlunsplit

from jupyter_server.auth.decorator import allow_unauthenticated
from jupyter_server.base.handlers import AuthenticatedHandler, JupyterHandler
from jupyter_server.base.websocket import WebSocketMixin
from jupyter_server.utils import url_path_join
from tornado import httputil, web
from tornado.httpclient import HTTPClientError, HTTPRequest
from tornado.iostream import StreamClosedError
from tornado.simple_httpclient import SimpleAsyncHTTPClient
from tornado.websocket import (
    WebSocketClientConnection,
    WebSocketClosedError,
    WebSocketError,
    WebSocketHandler,
    websocket_connect,
)

from ..access import Caller
from ..errors import GPUDevError
from .base import AdminStatus, GPUDevHandler, authorized_to_execute, maps_errors
from .capabilities import AppCapability

#: What a proxied app's pages may do in their sandbox: everything but share an origin with
#: Jupyter (no ``allow-same-origin``): its scripts run, forms post, popups and downloads open.
SANDBOX = (
    "sandbox allow-scripts allow-forms allow-popups allow-popups-to-escape-sandbox "
    "allow-modals allow-downloads allow-pointer-lock allow-presentation"
)

#: Headers about one connection, never forwarded (RFC 9110 section 7.6.1), plus ``Proxy-*``.
HOP_BY_HOP = frozenset(
    {"connection", "keep-alive", "te", "trailer", "transfer-encoding", "upgrade"}
)
#: The websocket handshake's own headers: each side of the relay makes its own.
_HANDSHAKE = frozenset(
    {
        "sec-websocket-key",
        "sec-websocket-version",
        "sec-websocket-extensions",
        "sec-websocket-protocol",
        "sec-websocket-accept",
    }
)
#: Cookies of Jupyter servers (``username-HOST-PORT`` login cookies, JupyterHub's) and ``_xsrf``.
_JUPYTER_COOKIE_PREFIXES = ("username-", "jupyterhub-")
_XSRF_COOKIE = "_xsrf"
#: The prefixes a browser gives a cookie's name special rules with (any case; longest first):
#: JupyterHub's ``cookie_host_prefix_enabled`` names its cookies ``__Host-jupyterhub-...``.
_COOKIE_NAME_PREFIXES = ("__host-http-", "__secure-", "__host-", "__http-")
#: Login cookies of the usual front proxies (casefolded prefixes): AWS ALB, Cloudflare Access,
#: oauth2-proxy, Pomerium, Traefik forward-auth, Kubeflow's oidc-authservice, Vouch.
_FRONT_PROXY_COOKIE_PREFIXES = (
    "awselbauthsessioncookie",
    "cf_authorization",
    "_oauth2_proxy",
    "_pomerium",
    "_forward_auth",
    "authservice_session",
    "vouchcookie",
)
#: Response headers that act on the whole origin (Jupyter's: every path, every later page),
#: not on the one response: never passed on, on either route. ``WWW-Authenticate`` too: the
#: browser would ask for a password on Jupyter's origin and keep it for that origin (the app
#: never gets an ``Authorization`` header anyway).
ORIGIN_WIDE = frozenset(
    {
        "nel",
        "report-to",
        "reporting-endpoints",
        "clear-site-data",
        "alt-svc",
        "strict-transport-security",
        "service-worker-allowed",
        "set-login",
        "accept-ch",
        "critical-ch",
        "origin-agent-cluster",
        "www-authenticate",
    }
)
#: Characters left as they are when a decoded path is written back into a URL (RFC 3986).
_PATH_SAFE = "/:@!$&'()*+,;=-._~"
#: A capability in a request's path or URI (``/gpudev/app/CAPABILITY``), for the log.
_CAPABILITY_IN_PATH = re.compile(r"(/gpudev/app/)[^/?#\s]+")
#: ``Sec-Fetch-Dest`` of requests whose answer a browser shows as a page (in a tab, a frame, an
#: ``<object>``), whatever their ``Sec-Fetch-Mode``.
_PAGE_DESTINATIONS = frozenset({"document", "iframe", "frame", "object", "embed", "fencedframe"})
#: Media types a browser shows as a page, its scripts run, when it asked for them.
_PAGE_TYPES = frozenset({"text/html", "application/xhtml+xml"})
#: What tornado turns into spaces in an argument before stripping it (its own rule).
_CONTROL = re.compile(r"[\x00-\x08\x0e-\x1f]")
#: Seconds to wait for a target to accept a connection.
CONNECT_TIMEOUT = 20.0
#: No limit on a proxied response's size or length: it is streamed, never held whole.
_UNLIMITED_BODY = 1 << 62
#: Close codes a websocket endpoint may send (RFC 6455 section 7.4): others are not relayed.
_RESERVED_CLOSE_CODES = frozenset({1004, 1005, 1006, 1015})


class UpstreamUnreachable(GPUDevError):
    """The app in the dev container did not answer (nothing listening, or it broke off)."""

    status = 502
    code = "proxy_unreachable"


def _unprefixed(name: str) -> str:
    """A cookie's name without the prefixes browsers give rules to (``__Host-``, ...)."""
    lowered = name.lower()
    for prefix in _COOKIE_NAME_PREFIXES:
        if lowered.startswith(prefix):
            return name[len(prefix) :]
    return name


def is_jupyter_cookie(name: str, login_cookie: str) -> bool:
    """A cookie that authenticates to a Jupyter server (this one or another on the host, or
    JupyterHub), its name with or without a ``__Host-``/``__Secure-`` prefix."""
    bare = _unprefixed(name)
    return any(
        each in (_XSRF_COOKIE, login_cookie) or each.startswith(_JUPYTER_COOKIE_PREFIXES)
        for each in (name, bare)
    )


def is_credential_cookie(name: str, login_cookie: str) -> bool:
    """A cookie that logs in to Jupyter (``is_jupyter_cookie``) or to a front proxy."""
    return is_jupyter_cookie(name, login_cookie) or _unprefixed(name).casefold().startswith(
        _FRONT_PROXY_COOKIE_PREFIXES
    )


def set_cookie_name(value: str) -> str:
    """The name a browser gives the cookie of a ``Set-Cookie`` value: ``""`` when it has none
    (no ``=`` before the first ``;``, or nothing before the ``=``); a browser then sends its
    value alone, so that ``=_xsrf=x`` comes back as ``_xsrf=x``."""
    name, equals, _ = value.split(";", 1)[0].partition("=")
    return name.strip() if equals else ""


def without_cookies(header: str, drop: Callable[[str], bool]) -> str:
    """A ``Cookie`` header without the cookies ``drop`` names; the others byte for byte."""
    kept = [
        part.strip()
        for part in header.split(";")
        if part.strip() and not drop(part.split("=", 1)[0].strip())
    ]
    return "; ".join(kept)


def _as_tornado_reads(value: str) -> str:
    """An argument as tornado's ``get_argument`` gives it to Jupyter's token check: control
    characters made spaces, then stripped (so ``?token=+TOKEN`` logs in)."""
    return _CONTROL.sub(" ", value).strip()


def without_token(query: str) -> str:
    """A query string without its ``token`` parameters, whatever they carry (this server's
    token, JupyterHub's, another server's: each may log in somewhere) and however their name is
    written (``%74oken``, padded, in any case); the other parameters byte for byte."""

    def is_token(part: str) -> bool:
        key = part.partition("=")[0]
        return _as_tornado_reads(unquote_plus(key)).casefold() == "token"

    return "&".join(part for part in query.split("&") if part and not is_token(part))


def without_capability(text: str) -> str:
    """A path, URI or URL with the capability after ``/gpudev/app/`` written ``CAP``."""
    return _CAPABILITY_IN_PATH.sub(r"\1CAP", text)


def accepts_page(accept: str) -> bool:
    """Whether an ``Accept`` header asks for a type that a browser shows as a page."""
    return any(kind.split(";", 1)[0].strip().lower() in _PAGE_TYPES for kind in accept.split(","))


def _connection_scoped(headers: httputil.HTTPHeaders) -> set[str]:
    """Hop-by-hop headers of this message: the fixed ones and those its Connection names."""
    named = {
        token.strip().lower()
        for value in headers.get_list("Connection")
        for token in value.split(",")
    }
    return set(HOP_BY_HOP) | named


def forwarded_headers(
    incoming: httputil.HTTPHeaders,
    *,
    drop_cookie: Callable[[str], bool],
    websocket: bool,
) -> httputil.HTTPHeaders:
    """The request headers the target gets: no hop-by-hop ones, no ``Authorization`` (whatever
    its scheme: the browser sends Jupyter's origin's credentials, a front proxy's Basic or
    Bearer ones too, and nothing tells them from the app's), no cookie ``drop_cookie`` names.

    ``Host`` is kept (as a reverse proxy in front of an app usually does), so that an app's
    same-origin checks and the absolute URLs it builds match what the browser sees."""
    scoped = _connection_scoped(incoming)
    out = httputil.HTTPHeaders()
    for name, value in incoming.get_all():
        lower = name.lower()
        if lower in scoped or lower.startswith(("proxy-", "x-forwarded-")):
            continue
        if lower in ("content-length", "expect") or (websocket and lower in _HANDSHAKE):
            continue
        if lower == "authorization":
            continue
        if lower == "cookie":
            kept = without_cookies(value, drop_cookie)
            if kept:
                out.add(name, kept)
            continue
        out.add(name, value)
    return out


def response_headers(
    upstream: httputil.HTTPHeaders, drop_cookie: Callable[[str], bool]
) -> Iterable[tuple[str, str]]:
    """The target's response headers the browser gets: no hop-by-hop ones, none that acts on
    the whole origin (``ORIGIN_WIDE``), and no ``Set-Cookie`` of a nameless cookie or of one
    ``drop_cookie`` names."""
    scoped = _connection_scoped(upstream)
    for name, value in upstream.get_all():
        lower = name.lower()
        if lower in scoped or lower.startswith("proxy-") or lower in ORIGIN_WIDE:
            continue
        if lower == "set-cookie":
            cookie = set_cookie_name(value)
            if not cookie or drop_cookie(cookie):
                continue
        yield name, value


def rewrite_location(location: str, prefix: str, own_netlocs: Iterable[str]) -> str:
    """A redirect to a path of the target's root (``/x``, or an absolute URL to the target or
    to this server) goes to the same path under the proxy ``prefix``; others are kept."""
    parts = urlsplit(location)
    if parts.scheme or parts.netloc:
        if parts.scheme not in ("http", "https") or parts.netloc not in set(own_netlocs):
            return location
    elif not parts.path.startswith("/"):
        return location  # relative to the current path: already under the prefix
    path = parts.path or "/"
    if path != prefix and not path.startswith(prefix + "/"):
        path = prefix + path
    return urlunsplit(("", "", path, parts.query, parts.fragment))


def _netloc(host: str, port: int) -> str:
    return f"[{host}]:{port}" if ":" in host else f"{host}:{port}"


def _close_code(code: int | None) -> int | None:
    """``code`` if one side may send it on to the other, else ``None``."""
    if code is None or not 1000 <= code <= 4999 or code in _RESERVED_CLOSE_CODES:
        return None
    return code


def _consume(future: asyncio.Future[Any]) -> None:
    """Mark a fire-and-forget flush's failure as seen (the client went away: nothing to do)."""
    if not future.cancelled():
        future.exception()


class PortProxyHandler(WebSocketMixin, WebSocketHandler, GPUDevHandler):
    """``/gpudev/proxy/NAME/PORT/PATH``: HTTP (every method) and websockets to a web port of a
    running dev container. 404: not a container, or not one of its web ports; 409: it is not
    running; 502: nothing answers on the port. Errors are JSON, as in the REST API."""

    _upstream: WebSocketClientConnection | None = None
    _relay: asyncio.Future[None] | None = None
    _client_closed = False

    # ------------------------------------------------------------------------------------------
    # Jupyter's checks, fitted to a proxy
    # ------------------------------------------------------------------------------------------

    def _upgrading(self) -> bool:
        return (
            self.request.method == "GET"
            and self.request.headers.get("Upgrade", "").lower() == "websocket"
        )

    async def prepare(self) -> None:  # type: ignore[override]
        # Jupyter's authentication (JupyterHandler's, not APIHandler's: its cross-origin check
        # is check_xsrf_cookie below here). A browser that is not logged in and opens a page is
        # sent to the login page; anything else, websockets included, is refused (403).
        await JupyterHandler.prepare(self, _redirect_to_login=not self._upgrading())
        # Our own answers (errors) are JSON; a proxied response brings its own Content-Type.
        self.set_header("Content-Type", "application/json")
        if self.request.method in ("GET", "HEAD") and not self._upgrading():
            self._refuse_cross_site()

    def _refuse_cross_site(self) -> None:
        """A GET or HEAD (tornado checks no XSRF there, hence no Origin) is refused when it
        comes from another origin, as other methods and websockets are: by the same rule
        (``check_origin``: its Origin, if it has one, is this server's or allowed by
        ``allow_origin``; a token-authenticated request is not a browser's, so not checked).
        Requests that carry no Origin (a ``<script>`` or ``<img>`` of another site) are
        refused too when ``Sec-Fetch-Site`` says another site sent them, unless they open a
        page (``Sec-Fetch-Mode: navigate``: a link, which the sandbox serves)."""
        if not self.check_origin():
            raise web.HTTPError(403, "Cross-origin requests to a proxied port are refused")
        headers = self.request.headers
        if (
            headers.get("Sec-Fetch-Site", "").strip().lower() == "cross-site"
            and headers.get("Sec-Fetch-Mode", "").strip().lower() != "navigate"
            and not self.skip_check_origin()
        ):
            raise web.HTTPError(403, "Cross-site requests to a proxied port are refused")

    def check_xsrf_cookie(self) -> None:
        """Proxied apps do not send Jupyter's ``_xsrf`` token, so it is not asked for; a
        cookie-authenticated request from another site is refused by its Origin instead."""
        if not hasattr(self, "_jupyter_current_user"):
            return  # tornado asks before prepare() knows the user; prepare() asks again
        if not self.check_origin():
            raise web.HTTPError(403, "Cross-origin requests to a proxied port are refused")

    def get_login_url(self) -> str:
        # APIHandler answers 403; a proxied page sends a browser to log in, as Jupyter's do.
        return AuthenticatedHandler.get_login_url(self)

    @property
    def content_security_policy(self) -> str:
        # Jupyter's default for pages (frame-ancestors 'self'), not the API's default-src 'none'
        # which would stop a proxied page from loading anything; the app may send its own.
        return str(JupyterHandler.content_security_policy.fget(self))  # type: ignore[attr-defined]

    def finish(self, chunk: str | bytes | dict[str, Any] | None = None) -> asyncio.Future[None]:
        # Count proxied traffic as activity (as APIHandler does), but keep the Content-Type
        # already set: the app's, or JSON for our own answers.
        self.update_api_activity()
        return web.RequestHandler.finish(self, chunk)

    def on_connection_close(self) -> None:
        self._client_closed = True
        super().on_connection_close()

    # ------------------------------------------------------------------------------------------
    # The methods (each authenticated, then authorised to execute)
    # ------------------------------------------------------------------------------------------

    @web.authenticated
    @authorized_to_execute
    @maps_errors
    async def get(  # type: ignore[override]
        self, name: str, port: str, path: str | None = None
    ) -> None:
        """A websocket (an Upgrade request), or a plain GET."""
        if self._upgrading():
            await self._websocket(name, port, path)
        elif self._isolating() and self._may_show_as_page():
            await self._to_app(name, port, path)
        else:
            await self._http(name, port, path)

    def _may_show_as_page(self) -> bool:
        """Whether a browser may show the answer as a page: a navigation (a tab, a frame), as
        ``Sec-Fetch-Mode`` or ``Sec-Fetch-Dest`` says; a request that accepts HTML; or one
        that does not say (no ``Sec-Fetch-Mode``: an older browser, or a proxy that strips
        it). Only what says it is not a page (a script's ``fetch``: ``cors``) is not."""
        headers = self.request.headers
        mode = headers.get("Sec-Fetch-Mode", "").strip().lower()
        return (
            mode in ("", "navigate")
            or headers.get("Sec-Fetch-Dest", "").strip().lower() in _PAGE_DESTINATIONS
            or accepts_page(",".join(headers.get_list("Accept")))
        )

    def _isolating(self) -> bool:
        """Whether pages are served in the sandbox (``c.ContainerLookup.isolate_web_apps``)."""
        return bool(self.gpudev.containers.isolate_web_apps)

    async def _capability_for(self, name: str, port: str) -> AppCapability:
        """The capability for this port of ``name``, for the caller (after ``_target``)."""
        containers = self.gpudev.containers
        found = await self.blocking(containers.locate, name)  # a pod's too
        who = containers.access.local()
        return AppCapability.grant(name, found.host.name, int(port), who.name, admin=who.admin)

    async def _to_app(self, name: str, port: str, path: str | None) -> None:
        """Send the browser on to the app's sandboxed address, with a capability for it."""
        await self._target(name, port)  # 404 or 409 here, as for any request
        grant = await self._capability_for(name, port)
        app = url_path_join(self.base_url, "gpudev/app", grant.mint())
        self.redirect(f"{app}{self._target_path(name, port, path)}", permanent=False)

    def added_response_headers(self, sent: set[str]) -> list[tuple[str, str]]:
        """Headers added to every proxied response (``sent``: the app's own, lowercase): when
        pages are sandboxed, the sandbox, should a browser show one answered here as a page
        (a form an older browser posts; a script's ``fetch`` ignores it)."""
        del sent
        return [("Content-Security-Policy", SANDBOX)] if self._isolating() else []

    @web.authenticated
    @authorized_to_execute
    @maps_errors
    async def post(self, name: str, port: str, path: str | None = None) -> None:
        """Any other method: sent on as it came, its body included."""
        await self._http(name, port, path)

    head = put = patch = delete = post
    # (APIHandler's own OPTIONS answers CORS preflights without authentication: not here)
    options = post  # type: ignore[assignment]

    # ------------------------------------------------------------------------------------------
    # Where to, and with what
    # ------------------------------------------------------------------------------------------

    def _prefix(self, name: str, port: str) -> str:
        """This port's proxy path, as the browser writes it (base_url included)."""
        return str(url_path_join(self.base_url, "gpudev/proxy", name, port))

    def _target_path(self, name: str, port: str, path: str | None) -> str:
        """The path and query the target gets: the rest of the request's own (still
        %-encoded) path after PORT, ``/`` when empty, and its query less any token."""
        prefix = self._prefix(name, port)
        raw = self.request.path
        rest = raw[len(prefix) :] if raw.startswith(prefix) else quote(path or "", safe=_PATH_SAFE)
        query = without_token(self.request.query)
        return (rest or "/") + (f"?{query}" if query else "")

    def _drop_cookie(self, name: str) -> bool:
        """Whether a cookie the browser sent is kept from the app: one that logs in to
        Jupyter, JupyterHub or a front proxy."""
        return is_credential_cookie(name, self.identity_provider.get_cookie_name(self))

    def _drop_set_cookie(self, name: str) -> bool:
        """Whether a cookie the app sets is kept from the browser: one that would replace
        one of those (a nameless one is never set: ``response_headers``)."""
        return self._drop_cookie(name)

    def _headers_for(self, name: str, port: str, *, websocket: bool) -> httputil.HTTPHeaders:
        headers = forwarded_headers(
            self.request.headers,
            drop_cookie=self._drop_cookie,
            websocket=websocket,
        )
        referer = headers.get("Referer")
        if referer:  # a Jupyter page opened with ?token=... sends its address as the Referer
            address, mark, query = referer.partition("?")
            kept = without_token(query.partition("#")[0]) if mark else ""
            headers["Referer"] = f"{address}?{kept}" if kept else address
        chain = self.request.headers.get("X-Forwarded-For")
        remote = self.request.remote_ip or ""
        headers["X-Forwarded-For"] = f"{chain}, {remote}" if chain else remote
        headers["X-Forwarded-Proto"] = self.request.protocol
        headers["X-Forwarded-Host"] = self.request.host
        headers["X-Forwarded-Prefix"] = self._prefix(name, port)
        return headers

    async def _target(self, name: str, port: str) -> tuple[str, int]:
        """Where to connect; a ``GPUDevError`` (404, 409) if this port is not to be served."""
        host, target_port = await self.blocking(
            self.gpudev.containers.proxy_target, name, int(port)
        )
        return str(host), int(target_port)

    def _unreachable(self, name: str, port: str, what: str, exc: BaseException) -> GPUDevError:
        self.log.info("gpudev proxy %s port %s: %s: %r", name, port, what, exc)
        return UpstreamUnreachable(
            f"Nothing answers on port {port} of {name!r}: is the app running there, "
            "listening on 0.0.0.0 (not only 127.0.0.1)?",
            details={"name": name, "port": int(port)},
        )

    # ------------------------------------------------------------------------------------------
    # HTTP
    # ------------------------------------------------------------------------------------------

    async def _http(self, name: str, port: str, path: str | None) -> None:
        host, target_port = await self._target(name, port)
        if self.request.method in ("GET", "HEAD") and self.request.path == self._prefix(name, port):
            # /gpudev/proxy/NAME/PORT -> .../PORT/: the page's relative links need the slash
            query = f"?{self.request.query}" if self.request.query else ""
            self.redirect(f"{self._prefix(name, port)}/{query}", permanent=True)
            return
        netloc = _netloc(host, target_port)
        relay = _ResponseRelay(
            self, self._prefix(name, port), (netloc, self.request.host), self._drop_set_cookie
        )
        method = self.request.method or "GET"
        body = (
            self.request.body if self.request.body or method in ("POST", "PUT", "PATCH") else None
        )
        request = HTTPRequest(
            f"http://{netloc}{self._target_path(name, port, path)}",
            method=method,
            headers=self._headers_for(name, port, websocket=False),
            body=body,
            follow_redirects=False,
            decompress_response=False,
            allow_nonstandard_methods=True,
            connect_timeout=CONNECT_TIMEOUT,
            # No overall limit: a download or an event stream lasts as long as it needs.
            request_timeout=0,
            header_callback=relay.header_line,
            streaming_callback=relay.chunk,
        )
        client = SimpleAsyncHTTPClient(force_instance=True, max_body_size=_UNLIMITED_BODY)
        try:
            await client.fetch(request, raise_error=False)
        except Exception as exc:  # whatever broke, it is answered the same way
            if self._client_closed:
                self.log.debug("gpudev proxy %s port %s: the client went away", name, port)
                return
            if not relay.started:
                raise self._unreachable(name, port, "no answer", exc) from exc
            # Part of the response is out: cut the connection, so that the client sees a
            # broken response, never a complete-looking truncated one.
            self.log.info("gpudev proxy %s port %s: broke off: %r", name, port, exc)
            self.request.connection.close()  # type: ignore[union-attr]
            return
        finally:
            client.close()
        self.finish()

    # ------------------------------------------------------------------------------------------
    # Websockets: connect to the target first, then accept the browser's, then relay
    # ------------------------------------------------------------------------------------------

    async def _websocket(self, name: str, port: str, path: str | None) -> None:
        origin = self.get_origin()
        if origin is not None and not self.check_origin(origin):
            # Checked before the target is touched (tornado checks again on accepting).
            raise web.HTTPError(403, "Cross-origin websockets to a proxied port are refused")
        host, target_port = await self._target(name, port)
        offered = [
            protocol.strip()
            for protocol in self.request.headers.get("Sec-WebSocket-Protocol", "").split(",")
            if protocol.strip()
        ]
        request = HTTPRequest(
            f"ws://{_netloc(host, target_port)}{self._target_path(name, port, path)}",
            headers=self._headers_for(name, port, websocket=True),
            connect_timeout=CONNECT_TIMEOUT,
            request_timeout=CONNECT_TIMEOUT,
        )
        try:
            self._upstream = await websocket_connect(
                request, subprotocols=offered or None, max_message_size=self.max_message_size
            )
        except HTTPClientError as exc:
            if exc.code == 599:  # tornado's code for "no HTTP answer at all"
                raise self._unreachable(name, port, "no websocket", exc) from exc
            self.log.info("gpudev proxy %s port %s: websocket refused: %r", name, port, exc)
            raise UpstreamUnreachable(
                f"The app on port {port} of {name!r} refused the websocket (HTTP {exc.code})",
                details={"name": name, "port": int(port), "status": exc.code},
            ) from exc
        except (OSError, StreamClosedError, WebSocketError) as exc:
            raise self._unreachable(name, port, "no websocket", exc) from exc
        try:
            # Accepts the browser's websocket, then reads its messages until it closes.
            await WebSocketHandler.get(self, name, port, path)
        finally:
            self._upstream.close()
            if self._relay is not None:
                await self._relay

    def select_subprotocol(self, subprotocols: list[str]) -> str | None:
        """The subprotocol the target chose, if the browser offered it (it did: it is the
        browser's offer that was sent on)."""
        chosen = self._upstream.selected_subprotocol if self._upstream is not None else None
        return chosen if chosen in subprotocols else None

    def open(self, *args: Any, **kwargs: Any) -> None:
        super().open(*args, **kwargs)  # Jupyter's keep-alive pings
        if self._upstream is not None:
            self._relay = asyncio.ensure_future(self._from_target(self._upstream))

    async def _from_target(self, upstream: WebSocketClientConnection) -> None:
        """Target -> browser, until the target closes; then the browser's side is closed."""
        while True:
            message = await upstream.read_message()
            if message is None:
                break
            try:
                await self.write_message(message, binary=isinstance(message, bytes))
            except WebSocketClosedError:
                return
        self.close(_close_code(upstream.close_code), upstream.close_reason)

    async def on_message(self, message: str | bytes) -> None:
        """Browser -> target (the next message is read once this one is sent on)."""
        if self._upstream is None:
            return
        try:
            await self._upstream.write_message(message, binary=isinstance(message, bytes))
        except WebSocketClosedError:
            self.close()

    def on_close(self) -> None:
        """The browser closed: close the target's side with the same code."""
        if self._upstream is not None:
            self._upstream.close(_close_code(self.close_code), self.close_reason)


class _ResponseRelay:
    """Passes the target's response on as it comes: status and headers first (the Location of
    a redirect rewritten under the proxy path), then each chunk of the body, flushed before the
    next is read, so that a large body is never held whole."""

    def __init__(
        self,
        handler: PortProxyHandler,
        prefix: str,
        own_netlocs: tuple[str, str],
        drop_cookie: Callable[[str], bool],
    ) -> None:
        self.handler = handler
        self.prefix = prefix
        self.own_netlocs = own_netlocs
        self.drop_cookie = drop_cookie
        self.start_line: httputil.ResponseStartLine | None = None
        self.headers = httputil.HTTPHeaders()
        self.started = False

    def header_line(self, line: str) -> None:
        if self.start_line is None:  # "HTTP/1.1 200 OK" (the reason may be empty)
            self.start_line = httputil.parse_response_start_line(line.rstrip("\r\n"))
        elif line.strip():
            self.headers.parse_line(line)
        else:
            self._send_head(self.start_line)

    def _send_head(self, start_line: httputil.ResponseStartLine) -> None:
        handler = self.handler
        handler.set_status(start_line.code, start_line.reason or None)
        handler.clear_header("Content-Type")
        sent: set[str] = set()
        for name, value in response_headers(self.headers, self.drop_cookie):
            if name.lower() not in sent:
                handler.clear_header(name)
                sent.add(name.lower())
            if name.lower() == "location":
                handler.add_header(name, rewrite_location(value, self.prefix, self.own_netlocs))
            else:
                handler.add_header(name, value)
        for name, value in handler.added_response_headers(sent):
            handler.add_header(name, value)
        self.started = True
        # Headers out now: the body may take a while (an event stream), or never come (HEAD).
        handler.flush().add_done_callback(_consume)

    def chunk(self, data: bytes) -> Awaitable[None]:
        self.handler.write(data)
        return self.handler.flush()


class AppProxyHandler(PortProxyHandler):
    """``/gpudev/app/CAPABILITY/PATH``: a web port of a dev container as ``PortProxyHandler``
    serves it, authorised by the capability in the path (``capabilities.py``) instead of the
    Jupyter login, and served in a sandbox: an opaque origin that shares no cookie and no
    storage with Jupyter. Its own requests (relative links, ``fetch``, websockets) come from
    that opaque origin (``Origin: null``): they are allowed here, the capability decides. It
    sets no cookie: its path is on Jupyter's origin, where any cookie reaches Jupyter too; so
    none that the browser sends is the app's, and none is forwarded.

    The capability is a bearer credential: the server's log lines write it as ``CAP``."""

    _grant: AppCapability | None = None

    async def prepare(self) -> None:  # type: ignore[override]
        # No Jupyter login: the capability is checked by each method (answers are JSON).
        self.set_header("Content-Type", "application/json")

    def check_xsrf_cookie(self) -> None:
        """No cookie authorises anything here: nothing to forge."""

    def check_origin(self, origin_to_satisfy_tornado: str = "") -> bool:
        """Any origin: the sandbox's is opaque (``null``); the capability decides."""
        del origin_to_satisfy_tornado
        return True

    def _granted(self, capability: str) -> AppCapability:
        self._grant = AppCapability.verify(capability)
        return self._grant

    @property
    def grant(self) -> AppCapability:
        """The request's capability (checked first by each method)."""
        if self._grant is None:
            raise web.HTTPError(404)
        return self._grant

    def _prefix(self, name: str, port: str) -> str:
        del name, port  # the capability's own
        return str(url_path_join(self.base_url, "gpudev/app", self.grant.mint()))

    async def _target(self, name: str, port: str) -> tuple[str, int]:
        del name, port  # the capability's own
        grant = self.grant
        admin = grant.admin and await self._still_admin(grant.user)
        who = Caller(grant.user, admin=admin)
        containers = self.gpudev_of(grant.user, admin=admin).containers
        target = functools.partial(
            containers.proxy_target, grant.name, grant.port, grant.host, caller=who
        )
        host, target_port = await self.blocking(target)
        return str(host), int(target_port)

    async def _still_admin(self, name: str) -> bool:
        """Whether ``name``, an administrator when the capability was granted, still is (the
        shared service asks the Hub, ``AdminStatus``): a demoted administrator's links to
        other users' apps end with the demotion, not with the capability's lifetime."""
        provider = self.identity_provider
        return await provider.is_admin(name) if isinstance(provider, AdminStatus) else True

    def _drop_set_cookie(self, name: str) -> bool:
        """Every cookie the app sets: the browser would keep it for Jupyter's origin (and send
        it to Jupyter and to every other app); in the sandbox no page can use it anyway."""
        del name
        return True

    def _drop_cookie(self, name: str) -> bool:
        """Every cookie the browser sends: none is the app's (it sets none here); all are
        Jupyter's origin's (its login, JupyterHub's, a front proxy's, other apps')."""
        del name
        return True

    @property
    def logged_path(self) -> str:
        return without_capability(self.request.path)

    def _request_summary(self) -> str:
        # tornado's words for this request in its warnings (uncaught errors, HTTPError)
        return without_capability(super()._request_summary())

    def _log(self) -> None:
        """Jupyter's access log line (``log_request`` writes ``request.uri``, and the
        ``Referer`` of a failure) with the capability replaced by ``CAP``."""
        uri, referer = self.request.uri, self.request.headers.get("Referer")
        self.request.uri = without_capability(uri or "")
        if referer is not None:
            self.request.headers["Referer"] = without_capability(referer)
        try:
            super()._log()
        finally:
            self.request.uri = uri
            if referer is not None:
                self.request.headers["Referer"] = referer

    def _headers_for(self, name: str, port: str, *, websocket: bool) -> httputil.HTTPHeaders:
        """As for any proxied request; the sandbox's opaque origin (``null``) reaches the app
        as the address it is served at: its pages are the app's own (apps compare the Origin
        of their websockets with their Host)."""
        headers = super()._headers_for(name, port, websocket=websocket)
        if headers.get("Origin") == "null":
            headers["Origin"] = f"{self.request.protocol}://{self.request.host}"
        return headers

    def added_response_headers(self, sent: set[str]) -> list[tuple[str, str]]:
        """The sandbox, and no address of the app leaked to other sites; the app's own
        ``fetch`` reads its answers (its origin is opaque, hence ``*``: no cookie is used)."""
        added = [("Content-Security-Policy", SANDBOX), ("Referrer-Policy", "same-origin")]
        if "access-control-allow-origin" not in sent:
            added.append(("Access-Control-Allow-Origin", "*"))
        return added

    # Not the Jupyter login: the capability in the path authorises (checked first, 404).
    @allow_unauthenticated
    @maps_errors
    async def get(  # type: ignore[override]
        self, capability: str, path: str | None = None
    ) -> None:
        grant = self._granted(capability)
        if self._upgrading():
            await self._websocket(grant.name, str(grant.port), path)
        else:
            await self._http(grant.name, str(grant.port), path)

    @allow_unauthenticated
    @maps_errors
    async def post(self, capability: str, path: str | None = None) -> None:
        grant = self._granted(capability)
        await self._http(grant.name, str(grant.port), path)

    head = put = patch = delete = post

    @allow_unauthenticated
    @maps_errors
    async def options(  # type: ignore[override]
        self, capability: str, path: str | None = None
    ) -> None:
        """A CORS preflight of the app's own ``fetch`` is answered here; any other OPTIONS goes
        to the app."""
        grant = self._granted(capability)
        wanted = self.request.headers.get("Access-Control-Request-Method")
        if not wanted:
            await self._http(grant.name, str(grant.port), path)
            return
        await self._target(grant.name, str(grant.port))  # 404 or 409 as for the request
        self.set_status(204)
        self.set_header("Access-Control-Allow-Origin", "*")
        self.set_header("Access-Control-Allow-Methods", wanted)
        asked = self.request.headers.get("Access-Control-Request-Headers")
        if asked:
            self.set_header("Access-Control-Allow-Headers", asked)
        self.set_header("Access-Control-Max-Age", "600")
        self.clear_header("Content-Type")
        self.finish()
