"""Arbitrary input through every REST route of a real Jupyter server with the extension, on
the real Docker engine: wrong types, missing and extra fields, huge strings, unicode, nested
junk, bytes that are not JSON, odd path segments (``..``, ``%00``, long) and query values.

For every example: never a 500, never a traceback; an error is JSON with a ``message``; a
4xx changes nothing (no container, lease, claim or host appears or goes). The run ends with
``tests.leaks``."""

from __future__ import annotations

import asyncio
import json
import re
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any
from urllib.parse import quote, urlencode

import docker
import pytest
from hypothesis import event, given, settings
from hypothesis import strategies as st
from tornado.httpclient import HTTPResponse
from tornado.httputil import url_concat

from jupyter_gpudev.handlers import routes
from jupyter_gpudev.labels import L_SERVER
from jupyter_gpudev.leasing import LeaseLedger
from jupyter_gpudev.services import Services
from tests.leaks import Baseline, assert_nothing_leaked
from tests.property.leakcheck import again_if_removed

pytestmark = pytest.mark.integration

PROFILE = settings.get_profile("gpudev-property")

#: Every route's methods, by its pattern in ``handlers.routes()`` (a route added without its
#: methods here fails ``test_every_route_is_fuzzed``). Methods a route does not take are sent
#: too: they must be a 405, not a 500.
METHODS: dict[str, tuple[str, ...]] = {
    "hosts": ("GET", "POST"),
    "usage": ("GET",),
    "hosts/{name}": ("GET", "DELETE"),
    "environments": ("GET",),
    "containers": ("GET", "POST"),
    "containers/{name}": ("GET", "DELETE"),
    "containers/{name}/stop": ("POST",),
    "containers/{name}/start": ("POST",),
    "containers/{name}/pin": ("PUT", "DELETE"),
    "containers/{name}/diff": ("GET",),
    "containers/{name}/commit": ("POST",),
    "containers/{name}/terminal": ("POST",),
    "reclaims": ("GET",),
    "kernels/{kernel}/keep": ("POST",),
    "kernels/{kernel}/release": ("POST",),
    "containers/{name}/logs": ("GET",),
    "containers/{name}/ports": ("POST",),
    "containers/{name}/ports/{port}": ("DELETE",),
    "/gpudev/proxy/{name}/{port}{path}": ("GET", "POST", "PUT", "PATCH", "DELETE"),
    "/gpudev/app/{capability}{path}": ("GET", "POST", "PUT", "PATCH", "DELETE", "OPTIONS"),
    "kernels/{kernel}": ("GET",),
    "kernels/{kernel}/usage": ("GET",),
    "/metrics": ("GET",),
}

#: The fields each body-taking route knows (sent with values of any type, and with others).
FIELDS: dict[str, tuple[str, ...]] = {
    "hosts": ("name", "url", "check", "identity_file", "known_hosts", "tls_ca_cert", "timeout"),
    "containers": ("environment", "host", "name", "gpus", "gpu_uuids", "image"),
    "containers/{name}/commit": (
        "write",
        "verify",
        "push",
        "snapshot",
        "message",
        "exclude",
        "expect",
    ),
    "containers/{name}/ports": ("port",),
}

#: The query arguments the routes read.
QUERY_KEYS = ("all", "force", "tail", "host", "kernel", "exclude")

ANY_METHOD = ("GET", "POST", "PUT", "PATCH", "DELETE")


def _template(pattern: str) -> str:
    """A route's pattern as a template of METHODS (``containers/{name}/stop``)."""
    text = pattern.removeprefix("/gpudev/api/")
    text = re.sub(r"\(\?P<(\w+)>[^()]*(\([^()]*\)[^()]*)*\)\??", r"{\1}", text)
    return text.replace("{kernel_id}", "{kernel}")


# -- strategies --------------------------------------------------------------------------------

#: Path segments that have broken path handling elsewhere: traversal, NUL, bad escapes, long.
ODD_SEGMENTS = st.sampled_from(
    [
        "..",
        "%2e%2e",
        "%2E%2E%2Fetc",
        "%00",
        "a%00b",
        "%ff",
        "%c3%28",
        "%2F",
        "a%2Fb",
        "~root",
        "-rf",
        "gpudev-x",
        "gpudev-alice.x",
        "local",
        "%20",
        "a" * 151,
        "0" * 300,
        "%E2%80%AE",
        "%F0%9F%92%A5",
    ]
)

NAMES = st.one_of(
    st.from_regex(r"[a-z0-9][a-z0-9_.-]{0,40}", fullmatch=True),
    ODD_SEGMENTS,
    st.text(min_size=1, max_size=40).map(lambda s: quote(s, safe="")),
)
KERNELS = st.one_of(
    st.from_regex(r"[0-9a-f-]{1,64}", fullmatch=True),
    st.uuids().map(str),
    ODD_SEGMENTS,
)
PORTS = st.one_of(
    st.integers(min_value=0, max_value=99999).map(str),
    st.sampled_from(["0", "00000", "65535", "65536", "99999", "08080"]),
)
CAPABILITIES = st.one_of(
    st.from_regex(r"[A-Za-z0-9_-]{8,40}\.[A-Za-z0-9_-]{16,40}", fullmatch=True),
    ODD_SEGMENTS,
)
TAILS = st.one_of(
    st.just(""),
    st.just("/"),
    st.lists(st.one_of(ODD_SEGMENTS, st.text(max_size=10).map(lambda s: quote(s, safe="")))).map(
        lambda parts: "/" + "/".join(parts)
    ),
)

SCALARS = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(min_value=-(2**70), max_value=2**70),
    st.floats(allow_nan=True, allow_infinity=True),
    st.text(max_size=30),
    st.sampled_from(["", "0", "-3", "1e309", "NaN", "x" * 10_000, "\u202e\x00\x1b[31m"]),
)
JSON_VALUES = st.recursive(
    SCALARS,
    lambda inner: st.one_of(
        st.lists(inner, max_size=4), st.dictionaries(st.text(max_size=8), inner, max_size=4)
    ),
    max_leaves=8,
)


def _bodies(template: str) -> st.SearchStrategy[bytes]:
    """JSON of any shape (an object of the route's fields and others, with values of any
    type; a list; a scalar) and bytes that are not JSON."""
    fields = FIELDS.get(template, ("x",))
    objects = st.dictionaries(
        st.one_of(st.sampled_from(fields), st.text(max_size=12)), JSON_VALUES, max_size=6
    )
    as_json = st.one_of(objects, JSON_VALUES).map(
        lambda value: json.dumps(value, allow_nan=True).encode()
    )
    not_json = st.one_of(
        st.binary(max_size=64),
        st.sampled_from([b"", b"{", b"[1,", b'{"a":', b"\xff\xfe", b"null", b'"x"', b"{}" * 3]),
    )
    return st.one_of(as_json, not_json)


QUERIES = st.one_of(
    st.dictionaries(
        st.one_of(st.sampled_from(QUERY_KEYS), st.text(min_size=1, max_size=8)),
        st.one_of(
            st.text(max_size=30),
            st.sampled_from(
                ["-1", "0", "100001", "1e9", "NaN", "99999999999999999999", "x" * 5000]
            ),
        ),
        max_size=3,
    ).map(lambda query: "?" + urlencode(query) if query else ""),
    st.sampled_from(["?tail=%ff", "?host=%00", "?kernel=%zz", "?exclude=..&exclude=", "?&&="]),
)


@st.composite
def requests(draw: st.DrawFn) -> tuple[str, str, str, bytes | None, dict[str, str]]:
    """One request: method, template, URL path (from the API root or the server root), body,
    headers."""
    template = draw(st.sampled_from(sorted(METHODS)))
    method = draw(st.one_of(st.sampled_from(METHODS[template]), st.sampled_from(ANY_METHOD)))
    values = {
        "name": draw(NAMES),
        "kernel": draw(KERNELS),
        "port": draw(PORTS),
        "capability": draw(CAPABILITIES),
        "path": draw(TAILS),
    }
    path = template.format(**values)
    path = path if path.startswith("/") else f"/gpudev/api/{path}"
    path += draw(QUERIES)
    body: bytes | None = None
    if method in ("POST", "PUT", "PATCH"):
        body = draw(_bodies(template))
    headers: dict[str, str] = {}
    if draw(st.booleans()):
        headers["Accept"] = "text/event-stream"
    return method, template, path, body, headers


# -- the server --------------------------------------------------------------------------------


@pytest.fixture
def gpudev_config(gpudev_config: dict[str, Any], tmp_path: Path) -> dict[str, Any]:
    """Hosts added at run time kept in the test's folder."""
    gpudev_config["HostPool"] = {"hosts_file": str(tmp_path / "hosts.json")}
    return gpudev_config


Send = Callable[[str, str, bytes | None, dict[str, str]], HTTPResponse]


@pytest.fixture
def send(
    jp_serverapp: Any,
    http_server_client: Any,
    jp_auth_header: dict[str, str],
    jp_base_url: str,
    jp_asyncio_loop: asyncio.AbstractEventLoop,
) -> Send:
    """One request as sent (its path not escaped again), through the real server; the
    response whatever its status."""
    base = jp_base_url.rstrip("/")

    def fetch(method: str, path: str, body: bytes | None, headers: dict[str, str]) -> HTTPResponse:
        request_headers = {**jp_auth_header, **headers}
        if body is None and method in ("POST", "PUT", "PATCH"):
            body = b""
        response: HTTPResponse = jp_asyncio_loop.run_until_complete(
            http_server_client.fetch(
                url_concat(base + path, None),
                method=method,
                body=body,
                headers=request_headers,
                raise_error=False,
                request_timeout=60,
                allow_nonstandard_methods=True,
                follow_redirects=False,
            )
        )
        return response

    return fetch


@pytest.fixture
def server(jp_serverapp: Any) -> Services:
    services = jp_serverapp.web_app.settings["gpudev"]
    assert isinstance(services, Services)
    return services


@pytest.fixture
def leak_check(
    docker_client: docker.DockerClient, server: Services, tmp_path: Path
) -> Iterator[None]:
    state = tmp_path / "state"
    baseline = again_if_removed(lambda: Baseline.take(docker_client, state))
    yield
    again_if_removed(
        lambda: assert_nothing_leaked(
            docker_client, baseline, state=state, server_id=server.containers.server_id
        )
    )


# -- what holds for every answer ---------------------------------------------------------------


def answered_well(response: HTTPResponse, what: str) -> dict[str, Any] | None:
    """Never a 500 or a traceback; an error from a gpudev handler is JSON with a message
    (tornado's own 404 for a path no route matches, and 405, are pages or JSON of the
    server's). Returns the error body, if JSON."""
    text = response.body.decode("utf-8", "replace") if response.body else ""
    assert response.code != 500, f"{what} -> 500: {text[:500]}"
    assert response.code < 600, what
    assert "Traceback" not in text, f"{what}: {text[:500]}"
    assert "Unhandled error" not in text, f"{what}: {text[:500]}"
    if response.headers.get("Content-Type") == "text/event-stream":
        return _stream_error(text, what)
    if response.code < 400 or not text.startswith("{"):
        return None
    body = json.loads(text)
    assert isinstance(body, dict), what
    assert isinstance(body.get("message"), str), f"{what}: {text[:300]}"
    assert body["message"].strip(), f"{what}: empty message"
    return body


def _stream_error(text: str, what: str) -> dict[str, Any] | None:
    """A progress stream ends in one ``result`` or ``error`` event; an error is never a 500."""
    blocks = [block.split("\n", 1) for block in text.strip().split("\n\n")]
    kinds = [head.removeprefix("event: ") for head, _ in blocks]
    assert kinds, f"{what}: an empty stream"
    assert kinds[-1] in ("result", "error"), f"{what}: {text[-300:]}"
    if kinds[-1] == "result":
        return None
    body = json.loads(blocks[-1][1].removeprefix("data: "))
    assert isinstance(body, dict), what
    assert body.get("status") != 500, f"{what}: {body}"
    assert isinstance(body.get("message"), str), f"{what}: {body}"
    assert body["message"].strip(), f"{what}: {body}"
    return body


def world(docker_client: docker.DockerClient, server: Services) -> tuple[Any, ...]:
    """What a refused request must not change: this server's containers (and their states),
    active leases, hosts (claims and the rest: ``tests.leaks`` at the end)."""
    containers = sorted(
        (str(c.attrs.get("Names")), str(c.attrs.get("State")))
        for c in docker_client.containers.list(
            all=True,
            filters={"label": f"{L_SERVER}={server.containers.server_id}"},
            sparse=True,  # no inspect per container: one another test removes meanwhile
        )
    )
    ledger = Path(server.containers.state_dir) / "leases.sqlite"
    leases = (
        sorted(lease.lease_id for lease in LeaseLedger(ledger).active()) if ledger.exists() else []
    )
    hosts = sorted(server.host_pool.names())
    return tuple(containers), tuple(leases), tuple(hosts)


# -- the tests -----------------------------------------------------------------------------------


def test_every_route_is_fuzzed() -> None:
    # Adding a route without listing its methods here fails.
    templates = {_template(pattern) for pattern, _ in routes()}
    assert templates == set(METHODS), templates ^ set(METHODS)


@pytest.mark.usefixtures("leak_check")
@settings(PROFILE, max_examples=400)
@given(request=requests())
def test_any_request_to_any_route_is_answered_without_a_500_and_changes_nothing_when_refused(
    send: Send,
    server: Services,
    docker_client: docker.DockerClient,
    request: tuple[str, str, str, bytes | None, dict[str, str]],
) -> None:
    method, _template_, path, body, headers = request
    # Given what exists before the request
    before = world(docker_client, server)
    # When it is sent
    response = send(method, path, body, headers)
    what = f"{method} {path} {body[:200]!r}" if body else f"{method} {path}"
    event(f"{method} {_template_} -> {response.code}")
    # Then it is answered without a 500 or a traceback, an error with a message
    answered_well(response, what)
    # And a refused request changed nothing
    if response.code >= 400:
        assert world(docker_client, server) == before, what


# -- one bad value at a time, against a real dev container ------------------------------------

#: The dev container the bad requests name (started once per test, through the API).
REAL = "prop-real"

WRONG_TYPES = st.one_of(
    st.booleans(),
    st.floats(allow_nan=True, allow_infinity=True),
    st.lists(st.integers(), min_size=1, max_size=3),
    st.dictionaries(st.text(max_size=5), st.integers(), min_size=1, max_size=2),
)
NOT_STRINGS = st.one_of(WRONG_TYPES, st.integers())
NOT_BOOLS = st.one_of(st.integers(), st.text(max_size=8), st.floats(), st.lists(st.booleans()))
NOT_A_NAME = st.one_of(
    st.text(min_size=1, max_size=30).filter(
        lambda s: not re.fullmatch(r"[a-z0-9][a-z0-9_.-]{0,62}", s)
    ),
    st.sampled_from(["Bad Name", "gpudev-x", "a" * 200, "..", "-x", "x\x00", "\u202ex"]),
)
NOT_A_COUNT = st.one_of(
    st.integers(max_value=-1),
    st.integers(min_value=2**63),
    st.floats(allow_nan=True, allow_infinity=True),
    st.text(max_size=10),
    st.booleans(),
    st.lists(st.integers(), max_size=2),
)
NOT_A_PORT = st.one_of(
    st.integers(max_value=0),
    st.integers(min_value=65536),
    st.floats(allow_nan=True, allow_infinity=True),
    st.text(max_size=10),
    st.booleans(),
    st.none(),
    st.lists(st.integers(min_value=1, max_value=65535), max_size=2),
)
NOT_AN_ID = st.one_of(
    NOT_STRINGS,
    st.text(max_size=20).filter(lambda s: ":" not in s),
)
#: An image reference no registry takes (a space, upper case in the repository).
NOT_A_TAG = st.text(max_size=20).map(lambda s: f"Not A Tag {s}")

#: (the field, its bad values, ``extra``: the other fields of an otherwise good body).
BAD_START = [
    ("gpus", NOT_A_COUNT),
    ("gpu_uuids", st.one_of(NOT_STRINGS, st.lists(NOT_STRINGS, min_size=1, max_size=3))),
    ("gpu_uuids", st.lists(st.text(min_size=1, max_size=20), min_size=1, max_size=3)),
    ("name", st.one_of(NOT_A_NAME, NOT_STRINGS)),
    (
        "host",
        st.one_of(st.text(min_size=1, max_size=20).filter(lambda s: s != "local"), NOT_STRINGS),
    ),
    ("image", st.one_of(st.text(min_size=1, max_size=40), NOT_STRINGS)),
    (
        "environment",
        st.one_of(st.text(max_size=20).filter(lambda s: s != "default"), NOT_STRINGS, st.none()),
    ),
]
BAD_COMMIT = [
    ("write", NOT_BOOLS),
    ("verify", NOT_BOOLS),
    ("push", NOT_BOOLS),
    ("snapshot", st.one_of(NOT_A_TAG, NOT_STRINGS)),
    ("message", NOT_STRINGS),
    ("expect", st.one_of(st.just(""), NOT_STRINGS)),
    ("exclude", st.one_of(NOT_AN_ID, st.lists(NOT_AN_ID, min_size=1, max_size=3))),
]
BAD_HOST = [
    ("name", st.one_of(NOT_A_NAME, NOT_STRINGS, st.none())),
    ("url", st.one_of(st.text(max_size=30), NOT_STRINGS, st.none())),
    ("check", st.one_of(st.integers(), st.text(max_size=8), st.none(), st.floats())),
    (
        "tls_verify",
        st.one_of(st.integers(), st.text(max_size=8), st.none(), st.lists(st.booleans())),
    ),
    ("tls_client_cert", NOT_STRINGS),
    ("identity_file", NOT_STRINGS),
    ("known_hosts", NOT_STRINGS),
    ("workspace", st.text(max_size=20)),
    ("mount_roots", JSON_VALUES),
]

#: Hosts a request may add (nothing listens there; ``check`` off).
GOOD_HOSTS: list[dict[str, Any]] = [
    {
        "name": "prop-host",
        "url": "ssh://prop@127.0.0.1:1",
        "identity_file": "/nonexistent/key",
        "check": False,
    },
    {
        "name": "prop-host",
        "url": "tcp://127.0.0.1:1",
        "tls_ca_cert": "/nonexistent/ca",
        "tls_client_cert": "/nonexistent/cert",
        "tls_client_key": "/nonexistent/key",
        "check": False,
    },
]


@st.composite
def bad_requests(draw: st.DrawFn) -> tuple[str, str, bytes | None, str, Any]:
    """One request with one bad value (the rest good): method, path, body, the field or
    argument named, the bad value."""
    kind = draw(
        st.sampled_from(
            ["start", "commit", "host", "port", "unport", "tail", "exclude", "kernel", "unknown"]
        )
    )
    api = "/gpudev/api"
    if kind in ("start", "commit", "host"):
        table = {"start": BAD_START, "commit": BAD_COMMIT, "host": BAD_HOST}[kind]
        field, values = draw(st.sampled_from(table))
        value = draw(values)
        good: dict[str, Any] = {
            "start": {"environment": "default"},
            "commit": {},
            "host": draw(st.sampled_from(GOOD_HOSTS)),
        }[kind]
        path = {
            "start": f"{api}/containers",
            "commit": f"{api}/containers/{REAL}/commit",
            "host": f"{api}/hosts",
        }[kind]
        body = json.dumps({**good, field: value}, allow_nan=True).encode()
        return "POST", path, body, field, value
    if kind == "unknown":
        where = draw(st.sampled_from(["containers", f"containers/{REAL}/commit"]))
        field = draw(
            st.text(min_size=1, max_size=12).filter(
                lambda s: (
                    s
                    not in FIELDS[
                        "containers" if where == "containers" else "containers/{name}/commit"
                    ]
                )
            )
        )
        good = {"environment": "default"} if where == "containers" else {}
        body = json.dumps({**good, field: draw(JSON_VALUES)}, allow_nan=True).encode()
        return "POST", f"{api}/{where}", body, field, None
    if kind == "port":
        value = draw(NOT_A_PORT)
        body = json.dumps({"port": value}, allow_nan=True).encode()
        return "POST", f"{api}/containers/{REAL}/ports", body, "port", value
    if kind == "unport":
        value = draw(st.one_of(st.integers(min_value=65536, max_value=99999), st.just(0)))
        text = draw(st.sampled_from([str(value), f"{value:05d}"]))
        return "DELETE", f"{api}/containers/{REAL}/ports/{text}", None, "port", text
    argument, route = {
        "tail": ("tail", f"containers/{REAL}/logs"),
        "exclude": ("exclude", f"containers/{REAL}/diff"),
        "kernel": ("kernel", "usage"),
    }[kind]
    values = {
        "tail": st.one_of(
            st.integers(max_value=0).map(str),
            st.integers(min_value=100_001).map(str),
            st.text(min_size=1, max_size=10).filter(lambda s: not s.isascii() or not s.isdigit()),
        ),
        "exclude": st.text(min_size=1, max_size=20).filter(lambda s: ":" not in s),
        "kernel": st.text(min_size=1, max_size=70).filter(
            lambda s: not re.fullmatch(r"[0-9a-f-]{1,64}", s)
        ),
    }[kind]
    value = draw(values)
    return "GET", f"{api}/{route}?{urlencode({argument: value})}", None, argument, value


def names_it(message: str, field: str, value: Any) -> bool:
    """Whether an error message names the field, or the value (as given, or as its repr)."""
    if field in message:
        return True
    if isinstance(value, list) and any(names_it(message, field, item) for item in value):
        return True
    shown = value if isinstance(value, str) else json.dumps(value, allow_nan=True)
    return bool(shown) and (shown[:20] in message or repr(value)[:20] in message)


@pytest.fixture
def real_container(send: Send) -> str:
    """A running dev container of the built-in environment, started through the API."""
    body = json.dumps({"environment": "default", "name": REAL}).encode()
    response = send("POST", "/gpudev/api/containers", body, {})
    assert response.code == 201, response.body[:500]
    return REAL


@pytest.mark.usefixtures("leak_check", "server_containers_removed")
@settings(PROFILE, max_examples=300)
@given(request=bad_requests())
def test_one_bad_value_is_a_4xx_naming_it_and_changes_nothing(  # noqa: PLR0917 - fixtures
    send: Send,
    server: Services,
    docker_client: docker.DockerClient,
    real_container: str,
    jp_root_dir: Path,
    request: tuple[str, str, bytes | None, str, Any],
) -> None:
    method, path, body, field, value = request
    # Given the dev container, the hosts, the leases and the workspace as they are
    before = world(docker_client, server)
    ports = sorted(server.containers.get(real_container).web_ports)
    files = sorted(jp_root_dir.rglob("*"))
    # When a request with one bad value is sent
    response = send(method, path, body, {})
    what = f"{method} {path} {body[:300]!r}" if body else f"{method} {path}"
    event(f"{method} {re.sub('[0-9]+$', 'N', path.split('?')[0])} -> {response.code}")
    # Then it is a 4xx whose JSON message names the field or the value
    error = answered_well(response, what)
    assert 400 <= response.code < 500, f"{what} -> {response.code}: {response.body[:300]!r}"
    assert error is not None, f"{what}: {response.body[:300]!r}"
    assert names_it(error["message"], field, value), f"{what}: {error['message']}"
    # And nothing changed: containers, leases, hosts, the container's ports, the workspace
    assert world(docker_client, server) == before, what
    assert sorted(server.containers.get(real_container).web_ports) == ports, what
    assert sorted(jp_root_dir.rglob("*")) == files, what


# -- what the properties found, kept as plain examples ----------------------------------------

FOUND: list[tuple[str, str, bytes | None, str]] = [
    # A negative GPU count passed the handler; refused later without naming "gpus".
    ("POST", "/gpudev/api/containers", b'{"environment": "default", "gpus": -1}', "'gpus'"),
    # A falsy gpu_uuids of the wrong type (false, 0, "", {}) was taken as "none asked for":
    # a container started.
    (
        "POST",
        "/gpudev/api/containers",
        b'{"environment": "default", "gpu_uuids": false}',
        "'gpu_uuids'",
    ),
    (
        "POST",
        "/gpudev/api/containers",
        b'{"environment": "default", "gpu_uuids": {}}',
        "'gpu_uuids'",
    ),
    # A bad change id to leave out was refused without naming "exclude" (tornado drops the
    # control characters of a query value: the message showed '').
    ("GET", f"/gpudev/api/containers/{REAL}/diff?exclude=%1F", None, '"exclude"'),
    ("POST", f"/gpudev/api/containers/{REAL}/commit", b'{"exclude": ["nope"]}', '"exclude"'),
    # tls_verify was read with bool(): "no" turned verification on, [] or 0 off, silently.
    (
        "POST",
        "/gpudev/api/hosts",
        json.dumps({**GOOD_HOSTS[1], "tls_verify": "no"}).encode(),
        "'tls_verify'",
    ),
    # A superscript digit passed str.isdigit and failed int(): a 500.
    ("GET", f"/gpudev/api/containers/{REAL}/logs?tail=%C2%B9", None, '"tail"'),
]


@pytest.mark.usefixtures("leak_check", "server_containers_removed")
@pytest.mark.parametrize(("method", "path", "body", "named"), FOUND)
def test_what_the_properties_found_is_refused_naming_it(  # noqa: PLR0917 - fixtures
    send: Send,
    server: Services,
    docker_client: docker.DockerClient,
    method: str,
    path: str,
    body: bytes | None,
    named: str,
) -> None:
    before = world(docker_client, server)
    response = send(method, path, body, {})
    error = answered_well(response, path)
    assert 400 <= response.code < 500, response.body[:300]
    assert error is not None
    assert named in error["message"]
    assert world(docker_client, server) == before
