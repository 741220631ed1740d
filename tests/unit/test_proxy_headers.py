"""The web-port proxy's header rules (``handlers.proxy``), without a server: which cookies and
credentials reach the app, which of its response headers reach the browser, and how the
capability is written in the log. The same rules against a real app: tests/integration/
test_proxy_headers.py."""

from __future__ import annotations

import pytest
from tornado import httputil

from jupyter_gpudev.handlers.proxy import (
    ORIGIN_WIDE,
    forwarded_headers,
    is_credential_cookie,
    is_jupyter_cookie,
    response_headers,
    set_cookie_name,
    without_capability,
)

LOGIN = "username-127-0-0-1-8888"


@pytest.mark.parametrize(
    "name",
    [
        "_xsrf",
        LOGIN,
        "username-other-host-1",
        "jupyterhub-session-id",
        "jupyterhub-user-alice",
        "__Host-jupyterhub-user-alice",
        "__Host-jupyterhub-hub-login",
        "__Secure-jupyterhub-session-id",
        "__host-_xsrf",
        "__SECURE-" + LOGIN,
        "__Host-Http-jupyterhub-user-alice",
    ],
)
def test_jupyter_cookies_are_known_with_or_without_a_prefix(name: str) -> None:
    assert is_jupyter_cookie(name, LOGIN)
    assert is_credential_cookie(name, LOGIN)


@pytest.mark.parametrize(
    "name",
    [
        "AWSELBAuthSessionCookie-0",
        "AWSELBAuthSessionCookie-1",
        "CF_Authorization",
        "_oauth2_proxy",
        "_oauth2_proxy_csrf",
        "__Secure-_oauth2_proxy",
        "_pomerium",
        "_forward_auth",
        "authservice_session",
        "VouchCookie",
    ],
)
def test_front_proxy_login_cookies_are_credentials(name: str) -> None:
    assert not is_jupyter_cookie(name, LOGIN)
    assert is_credential_cookie(name, LOGIN)


@pytest.mark.parametrize("name", ["theme", "app", "xsrf", "session", "__Host-app", "_streamlit"])
def test_other_cookies_may_be_the_apps(name: str) -> None:
    assert not is_credential_cookie(name, LOGIN)


@pytest.mark.parametrize(
    ("header", "name"),
    [
        ("a=1; Path=/", "a"),
        (" a =1", "a"),
        ("=_xsrf=attacker; Path=/", ""),
        ("_xsrf; Path=/", ""),
        ("=x", ""),
        ("a=; Path=/", "a"),
        ("__Host-x=1; Path=/; Secure", "__Host-x"),
    ],
)
def test_a_set_cookie_names_the_cookie_a_browser_keeps(header: str, name: str) -> None:
    assert set_cookie_name(header) == name


def test_no_authorization_is_forwarded_whatever_its_scheme() -> None:
    for value in ("token abc", "Bearer a.b.c", "Basic YWxpY2U6c2VjcmV0", "Negotiate xyz", "x"):
        incoming = httputil.HTTPHeaders({"Authorization": value, "Accept": "*/*"})
        out = forwarded_headers(incoming, drop_cookie=lambda _: False, websocket=False)
        assert "Authorization" not in out, value
        assert out["Accept"] == "*/*"


def test_cookies_are_forwarded_less_those_dropped() -> None:
    incoming = httputil.HTTPHeaders({"Cookie": f"theme=dark; {LOGIN}=x; CF_Authorization=j"})
    out = forwarded_headers(
        incoming, drop_cookie=lambda name: is_credential_cookie(name, LOGIN), websocket=False
    )
    assert out.get_list("Cookie") == ["theme=dark"]
    none = forwarded_headers(incoming, drop_cookie=lambda _: True, websocket=False)
    assert "Cookie" not in none


def test_origin_wide_and_jupyter_set_cookie_headers_are_dropped() -> None:
    upstream = httputil.HTTPHeaders()
    for name in ORIGIN_WIDE:
        upstream.add(name.title(), "x")
    for cookie in ("=_xsrf=a", "_xsrf", "__Host-jupyterhub-session-id=a", "app=1; Path=/"):
        upstream.add("Set-Cookie", cookie)
    upstream.add("X-App", "mine")
    kept = list(response_headers(upstream, lambda name: is_credential_cookie(name, LOGIN)))
    assert kept == [("Set-Cookie", "app=1; Path=/"), ("X-App", "mine")]


def test_the_capability_is_written_cap() -> None:
    cap = "WyJweC0xIiwibG9jYWwiXQ.u9heJp8deNxTwYV-Rh1euTAA"
    assert without_capability(f"/b/gpudev/app/{cap}/x?y=1") == "/b/gpudev/app/CAP/x?y=1"
    assert without_capability(f"GET /gpudev/app/{cap} (1.2.3.4)") == "GET /gpudev/app/CAP (1.2.3.4)"
    assert without_capability(f"http://h/gpudev/app/{cap}?q") == "http://h/gpudev/app/CAP?q"
    assert without_capability("/gpudev/proxy/x/8000/") == "/gpudev/proxy/x/8000/"
