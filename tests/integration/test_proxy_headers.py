"""What crosses the web-port proxy besides the body: the browser's credentials (its cookies, its
``Authorization``) on the way in, headers that act on Jupyter's whole origin on the way out,
requests other sites make a browser send, and the capability in the server's log.

Each test starts a dev container (the environment of ``test_proxy``) running a small app on
port 8000 that answers every request with the URI and headers it got, after adding the response
headers its ``h`` parameter names (a JSON object of header: value, or of header: [values]).
"""

from __future__ import annotations

import asyncio
import json
import logging
import re
import secrets
from collections.abc import Iterator
from pathlib import Path
from typing import Any
from urllib.parse import quote

import docker
import pytest
from tornado.httpclient import AsyncHTTPClient, HTTPResponse

from tests.integration.test_proxy import (  # noqa: F401 (the fixtures of that module)
    ENVIRONMENT,
    READY,
    SCRIPT,
    Fetch,
    _web_environment,
    gpudev_config,
    login_cookie,
    read_file,
)
from tests.leaks import Baseline, assert_nothing_leaked

pytestmark = [pytest.mark.integration, pytest.mark.usefixtures("server_containers_removed")]

APP = r"""
import asyncio, json
import tornado.web


class Echo(tornado.web.RequestHandler):
    def check_xsrf_cookie(self):
        pass

    def answer(self, *args):
        with open("/tmp/seen.log", "a") as log:
            log.write(self.request.uri + "\n")
        for name, values in json.loads(self.get_argument("h", "{}")).items():
            for value in values if isinstance(values, list) else [values]:
                self.add_header(name, value)
        self.set_header("Content-Type", "application/json")
        headers = {}
        for key, value in self.request.headers.get_all():
            headers.setdefault(key.lower(), []).append(value)
        self.write(json.dumps({"uri": self.request.uri, "headers": headers}))

    get = post = head = answer


async def main():
    tornado.web.Application([(r"/.*", Echo)]).listen(8000, address="0.0.0.0")
    open("/tmp/app-ready", "w").close()
    await asyncio.Event().wait()


asyncio.run(main())
"""

#: Cookies a browser sends Jupyter's origin that are not Jupyter's own login: JupyterHub's with
#: ``cookie_host_prefix_enabled``, and front proxies' (AWS ALB, Cloudflare Access, oauth2-proxy)
FOREIGN = (
    "__Host-jupyterhub-user-alice=HUBOAUTH; __Host-jupyterhub-hub-login=HUBLOGIN; "
    "__Secure-jupyterhub-session-id=HUBSESSION; AWSELBAuthSessionCookie-0=ALB; "
    "CF_Authorization=CFJWT; _oauth2_proxy=OAUTH2"
)
#: Response headers that act on the whole origin (Jupyter's), not on the one response
ORIGIN_WIDE = {
    "NEL": '{"report_to":"e","max_age":86400,"success_fraction":1.0}',
    "Report-To": '{"group":"e","max_age":86400,"endpoints":[{"url":"https://evil.example/r"}]}',
    "Reporting-Endpoints": 'e="https://evil.example/r"',
    "Clear-Site-Data": '"cookies", "storage"',
    "Alt-Svc": 'h2=":9999"',
    "Strict-Transport-Security": "max-age=1; includeSubDomains",
    "Service-Worker-Allowed": "/",
    "Set-Login": "logged-in",
    "Accept-CH": "Sec-CH-UA-Model",
    "Critical-CH": "Sec-CH-UA-Model",
    "Origin-Agent-Cluster": "?0",
    "WWW-Authenticate": 'Basic realm="Jupyter"',
}
#: ``Set-Cookie`` headers a browser would take for Jupyter's cookies (a nameless cookie's value
#: is sent as it is: ``=_xsrf=x`` comes back as ``_xsrf=x``; prefixed names of JupyterHub's)
PLANTED = [
    "=_xsrf=attacker; Path=/",
    "_xsrf; Path=/",
    "__Host-jupyterhub-session-id=planted; Path=/; Secure",
    "__Secure-jupyterhub-user-alice=planted; Path=/; Secure",
]


async def plain(url: str, **kwargs: Any) -> HTTPResponse:
    """A request as given (no token added), its answer whatever its status."""
    client = AsyncHTTPClient(force_instance=True)
    try:
        return await client.fetch(url, raise_error=False, follow_redirects=False, **kwargs)
    finally:
        client.close()


def server_id(jp_serverapp: Any) -> str:
    return str(jp_serverapp.web_app.settings["gpudev"].containers.server_id)


async def start_echo(jp_fetch: Fetch, docker_client: docker.DockerClient) -> str:
    """Start a dev container through the API, run the echo app in it; its name."""
    name = f"pxh-{secrets.token_hex(3)}"
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
            return name
        await asyncio.sleep(0.1)
    pytest.fail(f"the app in {name} did not start: {read_file(container, '/tmp/app.log')}")


async def remove(jp_fetch: Fetch, name: str) -> None:
    await jp_fetch("gpudev", "api", "containers", name, method="DELETE")


def seen_by_app(docker_client: docker.DockerClient, name: str) -> list[str]:
    """The URIs the app has been asked for, oldest first."""
    return read_file(docker_client.containers.get(f"gpudev-{name}"), "/tmp/seen.log").split()


def headers_seen(response: HTTPResponse) -> dict[str, list[str]]:
    assert response.code == 200, (response.code, response.body)
    seen: dict[str, list[str]] = json.loads(response.body)["headers"]
    return seen


async def test_the_app_gets_no_credential_of_the_browser_or_of_a_front_proxy(
    jp_fetch: Fetch,
    docker_client: docker.DockerClient,
    jp_serverapp: Any,
    jp_base_url: str,
    jp_http_port: int,
) -> None:
    baseline = Baseline.take(docker_client, ignore_removed=True)
    # Given the app in a dev container, and a browser logged in to Jupyter with a cookie, that
    # also holds a front proxy's credentials (Basic auth, its cookies) and JupyterHub's cookies
    name = await start_echo(jp_fetch, docker_client)
    here = f"127.0.0.1:{jp_http_port}"
    server = f"http://{here}"
    cookie = await login_cookie(jp_fetch, here)
    browser = {
        "Cookie": f"{cookie}; theme=dark; {FOREIGN}",
        "Authorization": "Basic YWxpY2U6c2VjcmV0",
    }
    url = f"{server}{jp_base_url}gpudev/proxy/{name}/8000/x"
    # When it opens the app: it is sent on to the sandbox, and opens that
    sent = await plain(url, headers={**browser, "Sec-Fetch-Mode": "navigate"})
    assert sent.code == 302, sent.body
    app = server + sent.headers["Location"]
    assert "/gpudev/app/" in app
    page = await plain(app, headers={**browser, "Sec-Fetch-Mode": "navigate"})
    # Then the app in the sandbox gets no cookie at all (it can set none: none is its own)
    # and no Authorization
    seen = headers_seen(page)
    assert "cookie" not in seen, seen
    assert "authorization" not in seen, seen
    # When a script of a Jupyter page fetches from the app, with the same credentials
    fetched = await plain(url, headers={**browser, **SCRIPT})
    # Then the app gets only the cookies that may be its own: none of Jupyter's, of
    # JupyterHub's (prefixed or not), of the front proxy's; and no Authorization
    seen = headers_seen(fetched)
    assert seen.get("cookie") == ["theme=dark"], seen
    assert "authorization" not in seen, seen
    # And a Bearer token (a front proxy's ID token) does not reach it either
    bearer = {"Cookie": cookie, "Authorization": "Bearer ID.TOKEN.JWT", **SCRIPT}
    seen = headers_seen(await plain(url, headers=bearer))
    assert "authorization" not in seen, seen
    # When a script client follows the sandbox's address with a token that is not this
    # server's (a Hub API token, as `curl -L -H "Authorization: token ..."` sends it on)
    foreign_token = await plain(app, headers={"Authorization": "token HUB-PERSONAL-API-TOKEN"})
    # Then the app answers, and does not get it
    seen = headers_seen(foreign_token)
    assert "authorization" not in seen, seen
    # And the server's own token never reaches it, on either route
    own = {"Authorization": f"token {jp_serverapp.identity_provider.token}"}
    assert "authorization" not in headers_seen(await plain(app, headers=own))
    assert "authorization" not in headers_seen(await plain(url, headers={**own, **SCRIPT}))
    await remove(jp_fetch, name)
    assert_nothing_leaked(docker_client, baseline, server_id=server_id(jp_serverapp))


async def test_response_headers_that_act_on_the_whole_origin_are_dropped(
    jp_fetch: Fetch,
    docker_client: docker.DockerClient,
    jp_serverapp: Any,
    jp_base_url: str,
    jp_http_port: int,
) -> None:
    baseline = Baseline.take(docker_client, ignore_removed=True)
    # Given the app in a dev container, and a browser logged in to Jupyter
    name = await start_echo(jp_fetch, docker_client)
    here = f"127.0.0.1:{jp_http_port}"
    server = f"http://{here}"
    cookie = await login_cookie(jp_fetch, here)
    url = f"{server}{jp_base_url}gpudev/proxy/{name}/8000/x"
    sent = await plain(url, headers={"Cookie": cookie, "Sec-Fetch-Mode": "navigate"})
    app = server + sent.headers["Location"].split("?")[0]
    # When the app answers with headers that act on the whole origin, cookies that a browser
    # would take for Jupyter's, and headers of its own
    wanted = {**ORIGIN_WIDE, "Set-Cookie": [*PLANTED, "app=1; Path=/"], "X-App": "mine"}
    query = "?h=" + quote(json.dumps(wanted))
    answers = {
        "sandbox": await plain(app + query),
        "proxy": await plain(url + query, headers={**SCRIPT, "Cookie": cookie}),
    }
    for route, answer in answers.items():
        assert answer.code == 200, (route, answer.body)
        got = {key.lower() for key, _ in answer.headers.get_all()}
        # Then none of those reaches the browser, on either route
        assert not got & {key.lower() for key in ORIGIN_WIDE}, (route, sorted(got))
        set_cookies = answer.headers.get_list("Set-Cookie")
        assert not [c for c in set_cookies if c in PLANTED or c.lstrip().startswith("=")], (
            route,
            set_cookies,
        )
        assert not [c for c in set_cookies if "jupyterhub" in c], (route, set_cookies)
        # And the app's own headers do
        assert answer.headers["X-App"] == "mine", route
    # And the app's own cookie is set where it may have one (not in the sandbox)
    assert answers["proxy"].headers.get_list("Set-Cookie") == ["app=1; Path=/"]
    assert answers["sandbox"].headers.get_list("Set-Cookie") == []
    await remove(jp_fetch, name)
    assert_nothing_leaked(docker_client, baseline, server_id=server_id(jp_serverapp))


async def test_requests_other_sites_make_a_browser_send_never_reach_the_app(
    jp_fetch: Fetch,
    docker_client: docker.DockerClient,
    jp_serverapp: Any,
    jp_base_url: str,
    jp_http_port: int,
) -> None:
    baseline = Baseline.take(docker_client, ignore_removed=True)
    # Given the app in a dev container, and a browser logged in to Jupyter with a cookie
    name = await start_echo(jp_fetch, docker_client)
    here = f"127.0.0.1:{jp_http_port}"
    cookie = await login_cookie(jp_fetch, here)
    url = f"http://{here}{jp_base_url}gpudev/proxy/{name}/8000/x"
    # When another site's script reads from the app (a CORS fetch, with the cookie), or a
    # HEAD, or includes it as a script (no-cors: no Origin, but Sec-Fetch-Site says so)
    evil = "https://evil.example"
    cors = {"Cookie": cookie, **SCRIPT, "Origin": evil, "Sec-Fetch-Site": "cross-site"}
    refused = [
        await plain(url, headers=cors),
        await plain(url, method="HEAD", headers=cors),
        await plain(url, headers={**cors, "Origin": "null"}),
        await plain(
            url,
            headers={
                "Cookie": cookie,
                "Sec-Fetch-Mode": "no-cors",
                "Sec-Fetch-Dest": "script",
                "Sec-Fetch-Site": "cross-site",
                "Accept": "*/*",
            },
        ),
    ]
    # Then each is refused, and the app saw none of them
    assert [r.code for r in refused] == [403, 403, 403, 403], [r.body for r in refused]
    assert seen_by_app(docker_client, name) == []
    # When a page of this server fetches from it (its own Origin, same-origin)
    own = {**cors, "Origin": f"http://{here}", "Sec-Fetch-Site": "same-origin"}
    # Then it goes through
    assert (await plain(url, headers=own)).code == 200
    assert (await plain(url, method="HEAD", headers=own)).code == 200
    # And a link from another site still opens the app (in the sandbox)
    link = {
        "Cookie": cookie,
        "Sec-Fetch-Mode": "navigate",
        "Sec-Fetch-Dest": "document",
        "Sec-Fetch-Site": "cross-site",
    }
    opened = await plain(url, headers=link)
    assert opened.code == 302
    assert "/gpudev/app/" in opened.headers["Location"]
    await remove(jp_fetch, name)
    assert_nothing_leaked(docker_client, baseline, server_id=server_id(jp_serverapp))


class _Records(logging.Handler):
    def __init__(self) -> None:
        super().__init__(logging.DEBUG)
        self.lines: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.lines.append(record.getMessage())


@pytest.fixture
def log_lines(jp_serverapp: Any) -> Iterator[list[str]]:
    """Every line logged while the test runs, by the server's loggers and tornado's."""
    records = _Records()
    loggers = [logging.getLogger(), jp_serverapp.log, logging.getLogger("tornado.access")]
    levels = [each.level for each in loggers]
    for each in loggers:
        each.addHandler(records)
        each.setLevel(logging.DEBUG)
    yield records.lines
    for each, level in zip(loggers, levels, strict=True):
        each.removeHandler(records)
        each.setLevel(level)


async def test_the_capability_is_not_written_to_the_log(  # noqa: PLR0917
    jp_fetch: Fetch,
    docker_client: docker.DockerClient,
    jp_serverapp: Any,
    jp_base_url: str,
    jp_http_port: int,
    jp_root_dir: Path,
    log_lines: list[str],
) -> None:
    del jp_root_dir
    baseline = Baseline.take(docker_client, ignore_removed=True)
    # Given the app in a dev container (on 8000; nothing listens on 8002), and a browser
    # sent on to the sandbox's address of each port
    name = await start_echo(jp_fetch, docker_client)
    here = f"127.0.0.1:{jp_http_port}"
    cookie = await login_cookie(jp_fetch, here)
    links = []
    for port in (8000, 8002):
        url = f"http://{here}{jp_base_url}gpudev/proxy/{name}/{port}/x"
        sent = await plain(url, headers={"Cookie": cookie, "Sec-Fetch-Mode": "navigate"})
        links.append(f"http://{here}" + sent.headers["Location"])
    capabilities = [re.search(r"/gpudev/app/([^/]+)/", link)[1] for link in links]  # type: ignore[index]
    # When the app answers through the capability, and when nothing answers (502)
    assert (await plain(links[0])).code == 200
    assert (await plain(links[1])).code == 502
    # Then the capability is in no line of the log
    leaked = [line for line in log_lines for cap in capabilities if cap in line]
    assert leaked == []
    # And both requests are logged, the capability replaced
    assert len([line for line in log_lines if "/gpudev/app/CAP/x" in line]) >= 2, log_lines
    await remove(jp_fetch, name)
    assert_nothing_leaked(docker_client, baseline, server_id=server_id(jp_serverapp))
