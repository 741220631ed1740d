"""The authenticated proxy to web ports of dev containers, against a real app in a real one.

Each test starts a dev container whose environment forwards ports 8000 and 8002, and runs in it
a small tornado app on 8000 and 8001 (nothing listens on 8002). The app writes every request it
sees to ``/tmp/seen.log``, so that a test can tell that a refused request never reached it.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import secrets
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import docker
import pytest
from docker.models.containers import Container
from jupyter_server.auth.authorizer import AllowAllAuthorizer
from jupyter_server.auth.identity import PasswordIdentityProvider, User
from jupyter_server.base.handlers import JupyterHandler
from tornado.httpclient import AsyncHTTPClient, HTTPClientError, HTTPRequest, HTTPResponse
from tornado.websocket import WebSocketClientConnection, websocket_connect

from jupyter_gpudev.access import Access
from jupyter_gpudev.handlers.capabilities import AppCapability
from jupyter_gpudev.handlers.proxy import (
    accepts_page,
    rewrite_location,
    without_cookies,
    without_token,
)

Fetch = Callable[..., Awaitable[HTTPResponse]]
WsFetch = Callable[..., Awaitable[WebSocketClientConnection]]

pytestmark = [pytest.mark.integration, pytest.mark.usefixtures("server_containers_removed")]

IMAGE = "gpudev-python:bookworm"  # has python3 and tornado
SEEN = "/tmp/seen.log"
READY = "/tmp/app-ready"
ENVIRONMENT = "web"
BIG = 8 * 1024 * 1024

APP = r"""
import asyncio, json
import tornado.web, tornado.websocket

RELEASE = asyncio.Event()
BIG = 8 * 1024 * 1024


def seen(port, **event):
    with open("/tmp/seen.log", "a") as log:
        log.write(json.dumps({"port": port, **event}) + "\n")


def all_headers(request):
    headers = {}
    for key, value in request.headers.get_all():
        headers.setdefault(key.lower(), []).append(value)
    return headers


class Base(tornado.web.RequestHandler):
    def prepare(self):
        seen(self.settings["port"], method=self.request.method, uri=self.request.uri)

    def check_xsrf_cookie(self):
        pass


class Root(Base):
    def get(self):
        self.set_header("Content-Type", "text/plain")
        self.write("hello from port %d" % self.settings["port"])


class Echo(Base):
    def answer(self, *args):
        self.write({
            "port": self.settings["port"],
            "method": self.request.method,
            "uri": self.request.uri,
            "path": self.request.path,
            "query": self.request.query,
            "body": self.request.body.decode("latin-1"),
            "headers": all_headers(self.request),
        })

    get = post = put = patch = delete = options = answer

    def head(self, *args):
        self.set_header("X-Echo-Method", "HEAD")


class Big(Base):
    async def get(self):
        block = bytes(range(256)) * 256
        self.set_header("Content-Type", "application/octet-stream")
        if self.get_argument("sized", None):
            self.set_header("Content-Length", str(BIG))
        for _ in range(BIG // len(block)):
            self.write(block)
            await self.flush()


class Stream(Base):
    async def get(self):
        RELEASE.clear()
        self.write("first\n")
        await self.flush()
        try:
            await asyncio.wait_for(RELEASE.wait(), 15)
        except asyncio.TimeoutError:
            self.write("never released\n")
        else:
            self.write("second\n")


class Release(Base):
    def post(self):
        RELEASE.set()
        self.write("released")


class Redirect(Base):
    def get(self):
        self.redirect(self.get_argument("to"), status=302)


class Status(Base):
    async def get(self):
        # Written by hand: tornado would never send an empty reason phrase
        line = "HTTP/1.1 %s %s\r\n" % (self.get_argument("code"), self.get_argument("reason"))
        self._auto_finish = False
        stream = self.request.connection.detach()
        await stream.write((line + "Content-Length: 6\r\nConnection: close\r\n\r\nstatus").encode())
        stream.close()


class Page(Base):
    def get(self):
        self.set_header("Content-Type", "text/html")
        self.write("<script>steal(document.cookie)</script>")


class Cookies(Base):
    def get(self):
        self.set_cookie("app", "1")
        self.set_cookie("_xsrf", "planted")
        self.set_cookie("username-127-0-0-1-1", "planted")
        self.write("cookies")


class Truncated(Base):
    async def get(self):
        if not self.get_argument("chunked", None):
            self.set_header("Content-Length", "100000")
        self.write(b"x" * 10)
        await self.flush()
        self.request.connection.close()


class Echoes(tornado.websocket.WebSocketHandler):
    def prepare(self):
        seen(self.settings["port"], method="WEBSOCKET", uri=self.request.uri,
             headers=all_headers(self.request))

    def select_subprotocol(self, subprotocols):
        return "echo.v1" if "echo.v1" in subprotocols else None

    def on_message(self, message):
        if message == "close, please":
            self.close(4001, "asked to")
        else:
            self.write_message(message, binary=isinstance(message, bytes))

    def on_close(self):
        seen(self.settings["port"], event="closed", code=self.close_code)


def application(port):
    return tornado.web.Application([
        (r"/", Root), (r"/echo.*", Echo), (r"/big", Big), (r"/stream", Stream),
        (r"/release", Release), (r"/redirect", Redirect), (r"/status", Status),
        (r"/cookies", Cookies), (r"/truncated", Truncated), (r"/ws", Echoes), (r"/page", Page),
    ], port=port)


async def main():
    for port in (8000, 8001):
        application(port).listen(port, address="0.0.0.0")
    open("/tmp/app-ready", "w").close()
    await asyncio.Event().wait()


asyncio.run(main())
"""


class HeaderDeniedAuthorizer(AllowAllAuthorizer):
    """Allows everything, but what a request marked ``X-Deny: ACTION/RESOURCE`` asks for."""

    def is_authorized(
        self,
        handler: JupyterHandler,
        user: User,  # noqa: ARG002
        action: str,
        resource: str,
    ) -> bool:
        return handler.request.headers.get("X-Deny") != f"{action}/{resource}"


#: What a page's script (``fetch``, ``XMLHttpRequest``) says it is: no browser shows its answer
#: as a page, so the proxy answers it itself (a page is sent on to the sandbox).
SCRIPT = {"Sec-Fetch-Mode": "cors", "Sec-Fetch-Dest": "empty", "Accept": "*/*"}


@pytest.fixture
def script_fetch(jp_fetch: Fetch) -> Fetch:
    """``jp_fetch`` as a page's script sends it (``SCRIPT``, under the caller's headers)."""

    async def fetch(*parts: str, headers: dict[str, str] | None = None, **kwargs: Any) -> Any:
        return await jp_fetch(*parts, headers={**SCRIPT, **(headers or {})}, **kwargs)

    return fetch


#: The users ``HubLikeIdentity`` says are administrators now (as the Hub would).
ADMINS_NOW: set[str] = set()


class HubLikeIdentity(PasswordIdentityProvider):
    """The server's usual identity, and whether a user is an administrator now, as the shared
    service's Hub identity says it (``handlers.base.AdminStatus``)."""

    async def is_admin(self, name: str) -> bool:
        return name in ADMINS_NOW


@pytest.fixture
def gpudev_config(gpudev_config: dict[str, Any]) -> dict[str, Any]:
    return {
        **gpudev_config,
        "ServerApp": {
            "authorizer_class": HeaderDeniedAuthorizer,
            "identity_provider_class": HubLikeIdentity,
        },
    }


@pytest.fixture(autouse=True)
def _web_environment(jp_root_dir: Path) -> None:
    """An environment forwarding 8000 (the app) and 8002 (nothing listens there)."""
    folder = jp_root_dir / ".devcontainer" / ENVIRONMENT
    folder.mkdir(parents=True)
    spec = {"image": IMAGE, "forwardPorts": [8000, 8002]}
    (folder / "devcontainer.json").write_text(json.dumps(spec))


def read_file(container: Container, path: str) -> str:
    """A file's text in the container ("" if there is none)."""
    code, output = container.exec_run(["cat", path])
    return output.decode() if code == 0 and isinstance(output, bytes) else ""


@dataclass
class App:
    """The app running in a dev container."""

    name: str
    container: Container

    def seen(self) -> list[dict[str, Any]]:
        """Every request the app has seen so far, oldest first."""
        return [json.loads(line) for line in read_file(self.container, SEEN).splitlines()]


async def start_app(jp_fetch: Fetch, docker_client: docker.DockerClient) -> App:
    """Start a dev container through the API, run the app in it, wait until it listens."""
    name = f"px-{secrets.token_hex(3)}"
    await jp_fetch(
        "gpudev",
        "api",
        "containers",
        method="POST",
        body=json.dumps({"environment": ENVIRONMENT, "name": name}),
    )
    container = docker_client.containers.get(f"gpudev-{name}")
    container.exec_run(
        ["sh", "-c", 'exec python3 -c "$APP" > /tmp/app.log 2>&1'],
        environment={"APP": APP},
        detach=True,
    )
    for _ in range(100):
        if container.exec_run(["test", "-f", READY]).exit_code == 0:
            return App(name, container)
        await asyncio.sleep(0.1)
    pytest.fail(f"the app in {name} did not start: {read_file(container, '/tmp/app.log')}")


def proxy(app: App | str, port: int | str, *path: str) -> tuple[str, ...]:
    name = app.name if isinstance(app, App) else app
    return ("gpudev", "proxy", name, str(port), *path)


async def refused(request: Awaitable[Any]) -> HTTPClientError:
    with pytest.raises(HTTPClientError) as caught:
        await request
    return caught.value


def error_body(error: HTTPClientError) -> dict[str, Any]:
    assert error.response is not None
    assert error.response.headers["Content-Type"].startswith("application/json")
    body: dict[str, Any] = json.loads(error.response.body)
    return body


async def closed(connection: WebSocketClientConnection) -> None:
    """Close a websocket and wait until its socket is gone."""
    if connection.close_code is not None:  # closed by the server: its socket is gone
        connection.close()
        return
    connection.close()
    while True:
        message = await asyncio.wait_for(connection.read_message(), 10)
        if message is None:
            return


async def login_cookie(jp_fetch: Fetch, host: str) -> str:
    """The ``name=value`` of Jupyter's login cookie for requests to ``host``."""
    response = await jp_fetch("api", "status", headers={"Host": host})
    for header in response.headers.get_list("Set-Cookie"):
        if header.startswith("username-"):
            return header.split(";", 1)[0]
    pytest.fail(f"no login cookie in {response.headers.get_list('Set-Cookie')}")


async def test_http_requests_go_through_without_the_jupyter_credentials(  # noqa: PLR0917
    jp_fetch: Fetch,
    script_fetch: Fetch,
    docker_client: docker.DockerClient,
    jp_serverapp: Any,
    jp_base_url: str,
    jp_http_port: int,
) -> None:
    # Given the app running in a dev container, on a port of its forwardPorts
    app = await start_app(jp_fetch, docker_client)
    prefix = f"{jp_base_url}gpudev/proxy/{app.name}/8000"
    token = jp_serverapp.identity_provider.token
    # When its root is asked for through the proxy
    root = await script_fetch(*proxy(app, 8000, "/"))
    # Then the app answers it
    assert root.body == b"hello from port 8000"
    assert root.headers["Content-Type"] == "text/plain"
    # And the port's path without a slash redirects to it (a page's relative links need it)
    bare = await refused(script_fetch(*proxy(app, 8000), follow_redirects=False))
    assert bare.code == 301
    assert bare.response is not None
    assert bare.response.headers["Location"] == f"{prefix}/"
    # When a GET carries the query string, Jupyter's token (in the URL and in the header) and
    # cookies, Jupyter's among them
    cookies = f"_xsrf=x1; theme=dark; username-127-0-0-1-{jp_http_port}=abc; username-h-1=zz"
    echoed = await script_fetch(
        *proxy(app, 8000, "echo", "a b"),
        params={"q": "1", "token": token, "r": "two words"},
        headers={"Cookie": cookies},
    )
    seen = json.loads(echoed.body)
    # Then the app gets the path (still %-encoded) and the query, less the token
    assert seen["method"] == "GET"
    assert seen["uri"] == "/echo/a%20b?q=1&r=two+words"
    # And none of the Jupyter credentials: no Authorization, only its own cookie
    headers = seen["headers"]
    assert "authorization" not in headers
    assert headers["cookie"] == ["theme=dark"]
    assert token not in json.dumps(seen)
    # Nor when the token is padded the way Jupyter still accepts it (?token=+TOKEN)
    padded = await script_fetch(*proxy(app, 8000, "echo"), params={"q": "2", "token": f" {token}"})
    assert json.loads(padded.body)["uri"] == "/echo?q=2"
    assert token not in padded.body.decode()
    # And forwarding headers that tell it where it is
    assert headers["host"] == [f"127.0.0.1:{jp_http_port}"]
    assert headers["x-forwarded-host"] == [f"127.0.0.1:{jp_http_port}"]
    assert headers["x-forwarded-proto"] == ["http"]
    assert headers["x-forwarded-prefix"] == [prefix]
    assert headers["x-forwarded-for"] == ["127.0.0.1"]
    # When a POST carries a body (and no _xsrf: proxied apps know nothing of it)
    posted = await jp_fetch(
        *proxy(app, 8000, "echo"),
        method="POST",
        body=b'{"x": 1}',
        headers={"Content-Type": "application/json"},
    )
    # Then the app gets it as it was sent
    seen = json.loads(posted.body)
    assert (seen["method"], seen["body"]) == ("POST", '{"x": 1}')
    assert seen["headers"]["content-type"] == ["application/json"]
    # And every other method goes through too
    for method in ("PUT", "PATCH", "DELETE", "OPTIONS"):
        body = b"payload" if method in ("PUT", "PATCH") else None
        answer = json.loads(
            (
                await script_fetch(
                    *proxy(app, 8000, "echo"),
                    method=method,
                    body=body,
                    allow_nonstandard_methods=True,
                )
            ).body
        )
        assert answer["method"] == method
        assert answer["body"] == (body or b"").decode()
    head = await script_fetch(*proxy(app, 8000, "echo"), method="HEAD")
    assert head.headers["X-Echo-Method"] == "HEAD"
    assert head.body == b""


async def test_large_bodies_are_streamed_whole_and_cut_bodies_stay_cut(
    jp_fetch: Fetch, script_fetch: Fetch, docker_client: docker.DockerClient
) -> None:
    # Given the app running in a dev container
    app = await start_app(jp_fetch, docker_client)
    expected = hashlib.sha256((bytes(range(256)) * 256) * (BIG // 65536)).hexdigest()
    # When a multi-megabyte body is downloaded, chunked and with a Content-Length
    for params in ({}, {"sized": "1"}):
        big = await script_fetch(*proxy(app, 8000, "big"), params=params, request_timeout=60)
        # Then it arrives whole and unchanged
        assert len(big.body) == BIG
        assert hashlib.sha256(big.body).hexdigest() == expected
    # When a response is sent in parts, the second only once the client has the first
    chunks: list[bytes] = []
    releases: list[asyncio.Future[HTTPResponse]] = []

    def received(chunk: bytes) -> None:
        chunks.append(chunk)
        if not releases:  # the first part is here: let the app send the second
            releases.append(
                asyncio.ensure_future(
                    script_fetch(*proxy(app, 8000, "release"), method="POST", body=b"")
                )
            )

    await script_fetch(*proxy(app, 8000, "stream"), streaming_callback=received, request_timeout=30)
    # Then the first part was passed on before the response ended (streamed, not held whole)
    assert b"".join(chunks) == b"first\nsecond\n"
    assert (await releases[0]).body == b"released"
    # When the app breaks off a response, short of its Content-Length or of its last chunk
    for params in ({}, {"chunked": "1"}):
        cut = await refused(script_fetch(*proxy(app, 8000, "truncated"), params=params))
        # Then the client sees a broken response, not a complete one
        assert cut.code == 599


async def test_statuses_and_redirects_are_passed_on_and_jupyter_cookies_not_set(
    jp_fetch: Fetch,
    script_fetch: Fetch,
    docker_client: docker.DockerClient,
    jp_base_url: str,
    jp_http_port: int,
) -> None:
    # Given the app running in a dev container
    app = await start_app(jp_fetch, docker_client)
    prefix = f"{jp_base_url}gpudev/proxy/{app.name}/8000"
    cases = [
        # to a path of the app's root: under the proxy path
        ("/echo?x=1", f"{prefix}/echo?x=1"),
        # to its root as the app saw it, with this server's host (the Host it was given)
        (f"http://127.0.0.1:{jp_http_port}/echo", f"{prefix}/echo"),
        # to another site, or relative to the page: as they are
        ("https://example.org/elsewhere", "https://example.org/elsewhere"),
        ("echo", "echo"),
        # already under the proxy path (an app that reads X-Forwarded-Prefix): as it is
        (f"{prefix}/echo", f"{prefix}/echo"),
    ]
    for target, location in cases:
        # When the app answers a redirect
        redirect = await refused(
            script_fetch(
                *proxy(app, 8000, "redirect"), params={"to": target}, follow_redirects=False
            )
        )
        # Then the browser gets it, with its Location under the proxy path when at the root
        assert redirect.code == 302
        assert redirect.response is not None
        assert redirect.response.headers["Location"] == location
    # And the proxy did not follow them itself: the app saw only the redirects
    assert {e["uri"].split("?")[0] for e in app.seen()} == {"/redirect"}
    # When the app answers other statuses, with or without a reason phrase
    teapot = await refused(
        script_fetch(*proxy(app, 8000, "status"), params={"code": "418", "reason": "Short"})
    )
    unusual = await script_fetch(*proxy(app, 8000, "status"), params={"code": "299", "reason": ""})
    # Then they are passed on as they are
    assert (teapot.code, teapot.message) == (418, "Short")
    assert (unusual.code, unusual.body) == (299, b"status")
    # When the app sets cookies, one of them named like Jupyter's
    answer = await script_fetch(*proxy(app, 8000, "cookies"))
    names = [c.split("=", 1)[0] for c in answer.headers.get_list("Set-Cookie")]
    # Then its own is set, and none that would replace Jupyter's
    assert "app" in names
    assert "_xsrf" not in names
    assert "username-127-0-0-1-1" not in names


async def test_websockets_relay_text_binary_subprotocols_and_closes(
    jp_fetch: Fetch, jp_ws_fetch: WsFetch, docker_client: docker.DockerClient
) -> None:
    # Given the app running in a dev container
    app = await start_app(jp_fetch, docker_client)
    # When a websocket is opened through the proxy, offering a subprotocol
    connection = await jp_ws_fetch(*proxy(app, 8000, "ws"), subprotocols=["echo.v1"])
    try:
        # Then the app's choice of subprotocol comes back
        assert connection.selected_subprotocol == "echo.v1"
        # And text and binary messages are echoed back as they were
        await connection.write_message("hello")
        assert await asyncio.wait_for(connection.read_message(), 10) == "hello"
        payload = bytes(range(256)) * 40
        await connection.write_message(payload, binary=True)
        assert await asyncio.wait_for(connection.read_message(), 10) == payload
        # When the browser closes it, with a code and a reason
        connection.close(4002, "done here")
        assert await asyncio.wait_for(connection.read_message(), 10) is None
    finally:
        await closed(connection)
    # And the app saw no Jupyter token
    opened = [e for e in app.seen() if e.get("method") == "WEBSOCKET"]
    assert len(opened) == 1
    assert "authorization" not in opened[0]["headers"]
    # And the browser closing its side closed the app's, with the same code
    for _ in range(50):
        if any(e.get("event") == "closed" for e in app.seen()):
            break
        await asyncio.sleep(0.1)
    else:
        pytest.fail(f"the app's websocket was not closed: {app.seen()}")
    assert [e["code"] for e in app.seen() if e.get("event") == "closed"] == [4002]
    # When the app closes a websocket
    connection = await jp_ws_fetch(*proxy(app, 8000, "ws"))
    try:
        await connection.write_message("close, please")
        # Then the browser's is closed too, with the app's code and reason
        assert await asyncio.wait_for(connection.read_message(), 10) is None
        assert (connection.close_code, connection.close_reason) == (4001, "asked to")
    finally:
        await closed(connection)


async def test_requests_without_credentials_never_reach_the_app(
    jp_fetch: Fetch, jp_ws_fetch: WsFetch, docker_client: docker.DockerClient
) -> None:
    # Given the app running in a dev container
    app = await start_app(jp_fetch, docker_client)
    anonymous = {"Authorization": ""}
    # When a page is asked for without a token or a login cookie
    page = await refused(
        jp_fetch(*proxy(app, 8000, "echo"), headers=anonymous, follow_redirects=False)
    )
    # Then the browser is sent to log in, and comes back here afterwards
    assert page.code == 302
    assert page.response is not None
    assert "/login?next=" in page.response.headers["Location"]
    # And other methods and websockets are refused
    post = await refused(
        jp_fetch(*proxy(app, 8000, "echo"), method="POST", body=b"x", headers=anonymous)
    )
    assert post.code == 403
    socket = await refused(jp_ws_fetch(*proxy(app, 8000, "ws"), headers=anonymous))
    assert socket.code == 403
    # And a wrong token is no better
    wrong = await refused(
        jp_fetch(
            *proxy(app, 8000, "echo"),
            method="PUT",
            body=b"x",
            headers={"Authorization": "token nope"},
        )
    )
    assert wrong.code == 403
    # And the app saw none of them
    assert app.seen() == []


async def test_the_proxy_needs_the_execute_permission_on_gpudev(
    jp_fetch: Fetch,
    script_fetch: Fetch,
    jp_ws_fetch: WsFetch,
    docker_client: docker.DockerClient,
) -> None:
    # Given the app running in a dev container
    app = await start_app(jp_fetch, docker_client)
    # When a user who may read but not execute on gpudev uses the proxy
    denied = {"X-Deny": "execute/gpudev"}
    page = await refused(jp_fetch(*proxy(app, 8000, "echo"), headers=denied))
    post = await refused(
        jp_fetch(*proxy(app, 8000, "echo"), method="POST", body=b"x", headers=denied)
    )
    socket = await refused(jp_ws_fetch(*proxy(app, 8000, "ws"), headers=denied))
    added = await refused(
        jp_fetch(
            "gpudev",
            "api",
            "containers",
            app.name,
            "ports",
            method="POST",
            body='{"port": 8001}',
            headers=denied,
        )
    )
    # Then all are refused, and the app saw none of them
    assert [page.code, post.code, socket.code, added.code] == [403, 403, 403, 403]
    assert app.seen() == []
    # And one who may not read (but may execute) still may
    allowed = await script_fetch(*proxy(app, 8000, "echo"), headers={"X-Deny": "read/gpudev"})
    assert json.loads(allowed.body)["method"] == "GET"


async def test_cookie_logins_need_no_xsrf_token_but_must_come_from_this_origin(
    jp_fetch: Fetch,
    jp_ws_fetch: WsFetch,
    docker_client: docker.DockerClient,
    jp_http_port: int,
) -> None:
    # Given the app running in a dev container, and a browser logged in with a cookie
    app = await start_app(jp_fetch, docker_client)
    here = f"127.0.0.1:{jp_http_port}"
    cookie = await login_cookie(jp_fetch, here)
    browser = {"Authorization": "", "Cookie": f"{cookie}; theme=dark"}
    # When it POSTs from a page of this server, with an Authorization header (Basic: the
    # browser's for this origin, a front proxy's as well as the app's)
    posted = await jp_fetch(
        *proxy(app, 8000, "echo"),
        method="POST",
        body=b"form=1",
        headers={**browser, "Origin": f"http://{here}", "Authorization": "Basic YXBwOmFwcA=="},
    )
    # Then it goes through without an _xsrf token; the app gets no Authorization (nothing
    # tells the app's from the front proxy's), and of the cookies only those that may be its own
    seen = json.loads(posted.body)
    assert seen["body"] == "form=1"
    assert "authorization" not in seen["headers"]
    assert seen["headers"]["cookie"] == ["theme=dark"]
    # And a websocket from this origin is relayed
    local = f"localhost:{jp_http_port}"
    ws_cookie = await login_cookie(jp_fetch, local)
    connection = await jp_ws_fetch(
        *proxy(app, 8000, "ws"),
        headers={"Authorization": "", "Cookie": ws_cookie, "Origin": f"http://{local}"},
    )
    try:
        await connection.write_message("same origin")
        assert await asyncio.wait_for(connection.read_message(), 10) == "same origin"
    finally:
        await closed(connection)
    before = len(app.seen())
    # When another site makes the browser POST, or open a websocket, with its cookie
    evil = "http://evil.example"
    post = await refused(
        jp_fetch(
            *proxy(app, 8000, "echo"),
            method="POST",
            body=b"steal=1",
            headers={**browser, "Origin": evil},
        )
    )
    socket = await refused(
        jp_ws_fetch(
            *proxy(app, 8000, "ws"),
            headers={"Authorization": "", "Cookie": ws_cookie, "Origin": evil},
        )
    )
    # Then both are refused, and the app saw neither
    assert post.code == 403
    assert socket.code == 403
    assert len(app.seen()) == before


async def test_only_web_ports_are_served_and_ports_can_be_added_and_removed(
    jp_fetch: Fetch, script_fetch: Fetch, docker_client: docker.DockerClient
) -> None:
    # Given the app listening on 8000 and 8001, and only 8000 forwarded
    app = await start_app(jp_fetch, docker_client)
    info = json.loads((await jp_fetch("gpudev", "api", "containers", app.name)).body)
    assert info["web_ports"] == [8000, 8002]
    # When 8001 is asked for through the proxy
    missing = await refused(script_fetch(*proxy(app, 8001, "echo")))
    # Then it is a 404 that says how to forward it, and the app saw nothing
    assert missing.code == 404
    assert "8001" in error_body(missing)["message"]
    assert app.seen() == []
    # When 8001 is added as a web port
    added = await jp_fetch(
        "gpudev", "api", "containers", app.name, "ports", method="POST", body='{"port": 8001}'
    )
    # Then the container lists it, and it is proxied
    assert json.loads(added.body)["web_ports"] == [8000, 8001, 8002]
    echoed = json.loads((await script_fetch(*proxy(app, 8001, "echo"))).body)
    assert echoed["port"] == 8001
    # When it is removed again
    removed = await jp_fetch(
        "gpudev", "api", "containers", app.name, "ports", "8001", method="DELETE"
    )
    # Then it is not proxied any more
    assert json.loads(removed.body)["web_ports"] == [8000, 8002]
    again = await refused(script_fetch(*proxy(app, 8001, "echo")))
    assert again.code == 404
    assert len(app.seen()) == 1
    # And bad port requests are 400s that say why
    for body in ("not json", '{"port": "8001"}', '{"port": 0}', '{"port": 70000}', "[8001]"):
        bad = await refused(
            jp_fetch("gpudev", "api", "containers", app.name, "ports", method="POST", body=body)
        )
        assert bad.code == 400
        assert "port" in error_body(bad)["message"]
    # And a port of an unknown container is a 404
    nobody = await refused(
        jp_fetch(
            "gpudev", "api", "containers", "nobody", "ports", method="POST", body='{"port": 1}'
        )
    )
    assert nobody.code == 404


async def test_unknown_stopped_and_silent_targets_are_json_errors(
    jp_fetch: Fetch, script_fetch: Fetch, jp_ws_fetch: WsFetch, docker_client: docker.DockerClient
) -> None:
    # When a container that does not exist is asked for
    unknown = await refused(script_fetch(*proxy("nobody-here", 8000, "/")))
    # Then it is a 404 naming it
    assert unknown.code == 404
    assert "nobody-here" in error_body(unknown)["message"]
    # Given the app running in a dev container; nothing listens on its forwarded port 8002
    app = await start_app(jp_fetch, docker_client)
    # When that port is asked for, over HTTP and as a websocket
    silent = await refused(script_fetch(*proxy(app, 8002, "/")))
    silent_ws = await refused(jp_ws_fetch(*proxy(app, 8002, "ws")))
    # Then both are 502s with a message naming the container and the port, and no traceback
    assert silent.code == 502
    body = error_body(silent)
    assert body["error"] == "proxy_unreachable"
    assert app.name in body["message"]
    assert "8002" in body["message"]
    assert "Traceback" not in json.dumps(body)
    assert silent_ws.code == 502
    # When the container is stopped
    await jp_fetch("gpudev", "api", "containers", app.name, "stop", method="POST", body=b"")
    stopped = await refused(script_fetch(*proxy(app, 8000, "/")))
    # Then its ports are a 409 that says to start it
    assert stopped.code == 409
    assert "not running" in error_body(stopped)["message"]


@pytest.mark.parametrize(
    ("method", "path"),
    [("POST", "containers/x/ports"), ("DELETE", "containers/x/ports/8000")],
)
async def test_port_routes_refuse_requests_without_a_token(
    jp_fetch: Fetch, method: str, path: str
) -> None:
    kwargs: dict[str, Any] = {"method": method, "headers": {"Authorization": ""}}
    if method == "POST":
        kwargs["body"] = json.dumps({"port": 8000})
    with pytest.raises(HTTPClientError) as caught:
        await jp_fetch("gpudev", "api", *path.split("/"), **kwargs)
    assert caught.value.code in (401, 403)


def test_the_query_cookie_and_location_rewriting_helpers() -> None:
    assert without_token("a=1&token=t0k&b=2") == "a=1&b=2"
    # Any token, not only this server's (JupyterHub's logs in too), however its name is written
    for other in ("token=other", "token=", "token", "%74oken=t0k", "TOKEN=t0k", "Token=t0k"):
        assert without_token(f"a=1&{other}&b=%20x") == "a=1&b=%20x", other
    # Padded as tornado strips it (Jupyter logs in with ?token=+TOKEN): taken out too
    for padded in ("token=+t0k", "token=t0k+", "token=%20t0k%0A", "token=%01t0k", "+token=t0k"):
        assert without_token(f"a=1&{padded}") == "a=1", padded
    # Parameters that only look like it are the app's
    assert without_token("tokens=1&my_token=2&token_type=3") == "tokens=1&my_token=2&token_type=3"
    assert accepts_page("text/html,application/xhtml+xml;q=0.9,*/*;q=0.8")
    assert accepts_page("Application/XHTML+XML")
    assert not accepts_page("*/*")
    assert not accepts_page("application/json, text/plain")
    assert without_cookies("a=1; _xsrf=2;b=3", lambda name: name == "_xsrf") == "a=1; b=3"
    assert rewrite_location("/x?y#z", "/p", ["h:1"]) == "/p/x?y#z"
    assert rewrite_location("http://h:1/x", "/p", ["h:1"]) == "/p/x"
    assert rewrite_location("http://other/x", "/p", ["h:1"]) == "http://other/x"
    assert rewrite_location("ftp://h:1/x", "/p", ["h:1"]) == "ftp://h:1/x"


# -- the sandbox: a browser is sent to the app's own address, with a capability ---------------


async def plain(url: str, **kwargs: Any) -> HTTPResponse:
    """A request with no Jupyter credential at all (no token, no cookie)."""
    client = AsyncHTTPClient(force_instance=True)
    try:
        return await client.fetch(url, raise_error=False, follow_redirects=False, **kwargs)
    finally:
        client.close()


async def test_a_browser_opening_an_app_gets_it_sandboxed_behind_a_capability(
    jp_fetch: Fetch,
    docker_client: docker.DockerClient,
    jp_serverapp: Any,
    jp_base_url: str,
    jp_http_port: int,
) -> None:
    app = await start_app(jp_fetch, docker_client)
    token = jp_serverapp.identity_provider.token
    server = f"http://127.0.0.1:{jp_http_port}"
    # When a browser opens a page of the app (a navigation), logged in to Jupyter
    sent = await jp_fetch(
        *proxy(app, 8000, "echo"),
        params={"q": "1", "token": token},
        headers={"Sec-Fetch-Mode": "navigate"},
        follow_redirects=False,
        raise_error=False,
    )
    # Then it is sent on to the app's capability address, without the token
    assert sent.code == 302
    location = sent.headers["Location"]
    assert location.startswith(f"{jp_base_url}gpudev/app/")
    assert location.endswith("/echo?q=1")
    assert token not in location
    # And that address answers with no Jupyter credential at all, in a sandbox
    page = await plain(server + location)
    assert page.code == 200
    assert json.loads(page.body)["uri"] == "/echo?q=1"
    policies = page.headers.get_list("Content-Security-Policy")
    assert any(p.startswith("sandbox ") and "allow-same-origin" not in p for p in policies)
    assert page.headers["Access-Control-Allow-Origin"] == "*"
    assert page.headers["Referrer-Policy"] == "same-origin"
    # And the app's relative links keep the capability (its prefix is the capability's)
    capability = location.split("/gpudev/app/", 1)[1].split("/", 1)[0]
    assert json.loads(page.body)["headers"]["x-forwarded-prefix"] == [
        f"{jp_base_url}gpudev/app/{capability}"
    ]
    # And its own fetch is allowed from the sandbox's opaque origin (a preflight, then a POST)
    preflight = await plain(
        f"{server}{jp_base_url}gpudev/app/{capability}/echo",
        method="OPTIONS",
        headers={
            "Origin": "null",
            "Access-Control-Request-Method": "PUT",
            "Access-Control-Request-Headers": "content-type",
        },
    )
    assert preflight.code == 204
    assert preflight.headers["Access-Control-Allow-Origin"] == "*"
    posted = await plain(
        f"{server}{jp_base_url}gpudev/app/{capability}/echo",
        method="POST",
        body=b"x=1",
        headers={"Origin": "null"},
    )
    assert posted.code == 200
    # And its websockets too
    connection = await websocket_connect(
        HTTPRequest(
            f"ws://127.0.0.1:{jp_http_port}{jp_base_url}gpudev/app/{capability}/ws",
            headers={"Origin": "null"},
        )
    )
    try:
        await connection.write_message("through the sandbox")
        assert await asyncio.wait_for(connection.read_message(), 10) == "through the sandbox"
    finally:
        await closed(connection)


async def test_a_forged_expired_or_foreign_capability_reaches_nothing(
    jp_fetch: Fetch, docker_client: docker.DockerClient, jp_base_url: str, jp_http_port: int
) -> None:
    app = await start_app(jp_fetch, docker_client)
    server = f"http://127.0.0.1:{jp_http_port}{jp_base_url}gpudev/app"
    user = Access().local().name
    good = AppCapability.grant(app.name, "local", 8000, user, admin=False)
    assert (await plain(f"{server}/{good.mint()}/echo")).code == 200
    payload, _, signature = good.mint().partition(".")
    forged = f"{payload}.{signature[:-2]}{'AA' if signature[-2:] != 'AA' else 'BB'}"
    altered = replace(good, port=8001).mint().split(".")[0] + "." + signature
    expired = replace(good, expires=int(time.time()) - 1).mint()
    # Another user's grant (a capability handed out before the container changed hands, or
    # minted for someone else): the owner check still applies
    foreign = replace(good, user="mallory").mint()
    # A port that is not one of its web ports
    unserved = replace(good, port=9).mint()
    for capability in (forged, altered, expired, foreign, unserved):
        answer = await plain(f"{server}/{capability}/echo")
        assert answer.code == 404, capability
    assert not any("mallory" in json.dumps(seen) for seen in app.seen())


async def test_an_administrators_capability_ends_with_their_rights(
    jp_fetch: Fetch, docker_client: docker.DockerClient, jp_base_url: str, jp_http_port: int
) -> None:
    # Given a capability granted to an administrator for another user's app (12 h long)
    app = await start_app(jp_fetch, docker_client)
    server = f"http://127.0.0.1:{jp_http_port}{jp_base_url}gpudev/app"
    grant = AppCapability.grant(app.name, "local", 8000, "mallory", admin=True).mint()
    ADMINS_NOW.add("mallory")
    try:
        assert (await plain(f"{server}/{grant}/echo")).code == 200
        # When the Hub demotes them
        ADMINS_NOW.discard("mallory")
        # Then it reaches nothing more
        assert (await plain(f"{server}/{grant}/echo")).code == 404
    finally:
        ADMINS_NOW.discard("mallory")


async def test_a_page_asked_for_without_sec_fetch_headers_is_sent_to_the_sandbox(
    jp_fetch: Fetch,
    script_fetch: Fetch,
    docker_client: docker.DockerClient,
    jp_base_url: str,
    jp_http_port: int,
) -> None:
    # Given the app running in a dev container, with an HTML page
    app = await start_app(jp_fetch, docker_client)
    # When the page is asked for by what may show it as a page: an older browser (or a proxy
    # that strips them) with no Sec-Fetch-* headers, a browser's navigation, a request
    # accepting HTML, an <object> of another page
    html = "text/html,application/xhtml+xml,*/*;q=0.8"
    for headers in (
        {},
        {"Accept": html},
        {"Sec-Fetch-Mode": "navigate", "Sec-Fetch-Dest": "document", "Accept": html},
        {**SCRIPT, "Accept": html},
        {"Sec-Fetch-Mode": "no-cors", "Sec-Fetch-Dest": "object", "Accept": "*/*"},
    ):
        sent = await jp_fetch(
            *proxy(app, 8000, "page"), headers=headers, follow_redirects=False, raise_error=False
        )
        # Then it is sent on to the sandbox, never served on Jupyter's origin
        assert sent.code == 302, headers
        assert sent.headers["Location"].startswith(f"{jp_base_url}gpudev/app/"), headers
        assert sent.body == b"", headers
    assert app.seen() == []
    # When a script of a Jupyter page fetches from the app
    fetched = await script_fetch(*proxy(app, 8000, "echo"))
    # Then the proxy answers it itself, with the sandbox as a backstop should a browser show it
    assert json.loads(fetched.body)["uri"] == "/echo"
    assert any(
        p.startswith("sandbox ") for p in fetched.headers.get_list("Content-Security-Policy")
    )
    # And a form posted by an older browser (no Sec-Fetch-*) is answered in the sandbox too
    posted = await jp_fetch(*proxy(app, 8000, "echo"), method="POST", body=b"x=1")
    assert json.loads(posted.body)["body"] == "x=1"
    assert any(p.startswith("sandbox ") for p in posted.headers.get_list("Content-Security-Policy"))
    # When the sandboxed app's own scripts fetch from it, HTML included
    location = sent.headers["Location"]
    server = f"http://127.0.0.1:{jp_http_port}"
    for headers in (SCRIPT, {**SCRIPT, "Accept": html}, {"Origin": "null"}):
        own = await plain(server + location, headers=headers)
        # Then the sandbox answers them (no redirect: they are already there)
        assert own.code == 200, headers
        assert own.body == b"<script>steal(document.cookie)</script>", headers


async def test_no_token_parameter_reaches_the_app_whatever_token_it_carries(
    jp_fetch: Fetch, docker_client: docker.DockerClient, jp_base_url: str, jp_http_port: int
) -> None:
    # Given the app running in a dev container, and a browser logged in with a cookie
    app = await start_app(jp_fetch, docker_client)
    here = f"127.0.0.1:{jp_http_port}"
    browser = {"Cookie": await login_cookie(jp_fetch, here)}
    # When its script asks for a URL whose query carries tokens that are not this server's
    # (JupyterHub's, another server's), however their name is written
    query = "q=1&token=hub-secret&%74oken=encoded-secret&Token=cased-secret&r=2"
    url = f"http://{here}{jp_base_url}gpudev/proxy/{app.name}/8000/echo?{query}"
    echoed = await plain(url, headers={**SCRIPT, **browser})
    # Then the app gets the query without any of them
    assert echoed.code == 200, echoed.body
    assert json.loads(echoed.body)["uri"] == "/echo?q=1&r=2"
    assert "secret" not in echoed.body.decode()
    # And a browser opening that URL is sent to the sandbox without them
    sent = await plain(url, headers={"Sec-Fetch-Mode": "navigate", **browser})
    assert sent.code == 302
    assert sent.headers["Location"].endswith("/echo?q=1&r=2")


async def test_a_sandboxed_app_sets_no_cookie_at_all(
    jp_fetch: Fetch, docker_client: docker.DockerClient, jp_base_url: str, jp_http_port: int
) -> None:
    # Given the app running in a dev container, opened in the sandbox: a path of Jupyter's
    # origin, where a cookie it sets would be sent to Jupyter too
    app = await start_app(jp_fetch, docker_client)
    grant = AppCapability.grant(app.name, "local", 8000, Access().local().name, admin=False)
    page = f"http://127.0.0.1:{jp_http_port}{jp_base_url}gpudev/app/{grant.mint()}/cookies"
    # When the app answers with cookies, its own and ones named like Jupyter's
    answer = await plain(page)
    # Then the page arrives, and none of its cookies
    assert (answer.code, answer.body) == (200, b"cookies")
    assert answer.headers.get_list("Set-Cookie") == []


async def test_no_token_reaches_the_app_in_the_referer(
    jp_fetch: Fetch, docker_client: docker.DockerClient, jp_base_url: str, jp_http_port: int
) -> None:
    # Given the app running in a dev container, and a script of a Jupyter page opened with
    # the token in its address (the browser sends that address as the Referer)
    app = await start_app(jp_fetch, docker_client)
    here = f"127.0.0.1:{jp_http_port}"
    browser = {"Cookie": await login_cookie(jp_fetch, here)}
    referer = f"http://{here}{jp_base_url}lab/tree?token=page-secret&x=1&Token=also-secret"
    url = f"http://{here}{jp_base_url}gpudev/proxy/{app.name}/8000/echo"
    # When it asks the app for something
    echoed = await plain(url, headers={**SCRIPT, **browser, "Referer": referer})
    # Then the app gets the Referer without the tokens
    assert echoed.code == 200, echoed.body
    assert "secret" not in echoed.body.decode()
    assert json.loads(echoed.body)["headers"]["referer"] == [
        f"http://{here}{jp_base_url}lab/tree?x=1"
    ]
