"""The registry client against DNS rebinding (``engine/oci.py``, ``containers/features.py``):
a name that resolves to a public address when it is checked and to the service's loopback
when it is connected to never reaches the loopback; the connection goes to the addresses
checked, under the name (Host header, TLS server name)."""

from __future__ import annotations

import errno
import http.server
import ipaddress
import socket
import socketserver
import threading
from collections.abc import Iterator
from typing import Any, ClassVar

import pytest

from jupyter_gpudev.containers import features as features_module
from jupyter_gpudev.containers.features import Features
from jupyter_gpudev.engine.oci import OCIClient, OCIError, _Unchecked
from jupyter_gpudev.environments import features as spec

NAME = "rebind.gpudev.test"
PUBLIC = "93.184.216.34"


class _Victim(socketserver.ThreadingTCPServer):
    """A service on the loopback: records what each connection to it sent first."""

    daemon_threads = True
    allow_reuse_address = True

    def __init__(self) -> None:
        self.received: list[bytes] = []
        super().__init__(("127.0.0.1", 0), _VictimHandler)


class _VictimHandler(socketserver.BaseRequestHandler):
    server: _Victim

    def handle(self) -> None:
        self.request.settimeout(5)
        try:
            self.server.received.append(self.request.recv(4096))
        except OSError:
            self.server.received.append(b"")


class _Registry(http.server.ThreadingHTTPServer):
    """A registry on the loopback (plain HTTP, as the engine allows there) that answers every
    request with ``status`` and ``headers``."""

    daemon_threads = True

    def __init__(self, status: int, headers: dict[str, str]) -> None:
        self.status = status
        self.headers = headers
        self.hosts: list[str] = []
        super().__init__(("127.0.0.1", 0), _RegistryHandler)


class _RegistryHandler(http.server.BaseHTTPRequestHandler):
    server: _Registry

    def do_GET(self) -> None:
        self.server.hosts.append(self.headers.get("Host", ""))
        self.send_response(self.server.status)
        for key, value in self.server.headers.items():
            self.send_header(key, value)
        self.send_header("Content-Length", "0")
        self.end_headers()

    def log_message(self, *_: Any) -> None:
        pass


def _serving(server: socketserver.TCPServer) -> Iterator[Any]:
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield server
    finally:
        server.shutdown()
        server.server_close()
        thread.join(5)


@pytest.fixture
def victim() -> Iterator[_Victim]:
    yield from _serving(_Victim())


@pytest.fixture
def resolved(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """``NAME`` resolves to ``PUBLIC`` the first time, to 127.0.0.1 every time after (a
    hostile DNS server's answers); the list records each answer."""
    answers: list[str] = []
    real = socket.getaddrinfo

    def getaddrinfo(host: Any, port: Any, *args: Any, **kwargs: Any) -> Any:
        if isinstance(host, str) and host.rstrip(".").lower() == NAME:
            answers.append(PUBLIC if not answers else "127.0.0.1")
            number = int(port) if port else 0
            return [(socket.AF_INET, socket.SOCK_STREAM, 6, "", (answers[-1], number))]
        return real(host, port, *args, **kwargs)

    monkeypatch.setattr(socket, "getaddrinfo", getaddrinfo)
    return answers


@pytest.fixture
def dialled(monkeypatch: pytest.MonkeyPatch) -> list[tuple[str, int]]:
    """Connections to non-loopback addresses fail at once (this machine reaches no public
    address in a test); the list records where they were made to."""
    attempts: list[tuple[str, int]] = []

    class Guarded(socket.socket):
        def connect(self, address: Any) -> None:
            if isinstance(address, tuple) and not ipaddress.ip_address(address[0]).is_loopback:
                attempts.append((address[0], address[1]))
                raise OSError(errno.ENETUNREACH, "no route to a public address in a test")
            super().connect(address)

    monkeypatch.setattr(socket, "socket", Guarded)
    return attempts


class _SharedRegistries:
    """The shared service's registries, none of them configured for the feature's."""

    user = "gpudev-alice"
    credentials: ClassVar[dict[str, Any]] = {}

    def pulls_with_credentials(self, _ref: str) -> bool:
        return False


def test_a_feature_registry_rebound_to_the_loopback_after_its_check_is_not_reached(
    resolved: list[str], dialled: list[tuple[str, int]], victim: _Victim
) -> None:
    # Given the shared service, and a user's feature on a registry whose name resolves to a
    # public address when it is checked and to 127.0.0.1 (a service's port) after that
    port = victim.server_address[1]
    ref = spec.parse_oci(f"{NAME}:{port}/x/feature:1")
    assert ref is not None
    # When it is fetched
    with pytest.raises(OCIError) as refused:
        features_module._fetch_oci(ref, "1", Features(), _SharedRegistries(), lambda _e: None)  # type: ignore[arg-type]
    # Then nothing reaches the loopback: the client connects only to an address it checked
    assert victim.received == []
    assert "not a public address" in str(refused.value)
    assert ("127.0.0.1", port) not in dialled


def test_a_public_only_client_connects_to_the_address_it_checked(
    resolved: list[str], dialled: list[tuple[str, int]], victim: _Victim
) -> None:
    # Given a client that reaches its registry only at public addresses
    port = victim.server_address[1]
    client = OCIClient(f"{NAME}:{port}", {}, what="the feature 'x'", public_only=True)
    # When it asks for a manifest
    with pytest.raises(OCIError, match=f"{NAME}:{port} cannot be reached"):
        client.manifest("x/feature", "1", spec.MANIFEST_TYPE)
    client.close()
    # Then the name was resolved once, and the connection went to that public address
    assert resolved == [PUBLIC]
    assert dialled == [(PUBLIC, port)]
    assert victim.received == []


def test_a_redirect_to_a_name_rebound_to_the_loopback_is_not_followed_there(
    resolved: list[str], dialled: list[tuple[str, int]], victim: _Victim
) -> None:
    # Given a registry that sends its blobs to a name resolving to a public address when the
    # redirect is checked and to a service on the loopback after that
    port = victim.server_address[1]
    location = f"https://{NAME}:{port}/blob"
    for registry in _serving(_Registry(307, {"Location": location})):
        client = OCIClient(f"127.0.0.1:{registry.server_address[1]}", {}, what="the feature 'x'")
        # When a manifest is asked for
        with pytest.raises(OCIError, match=f"{NAME}, where the registry sent it, cannot be"):
            client.manifest("x/feature", "1", spec.MANIFEST_TYPE)
        client.close()
    # Then the redirect went to the address checked, never to the loopback
    assert victim.received == []
    assert resolved == [PUBLIC]
    assert dialled == [(PUBLIC, port)]


def test_a_token_realm_on_a_name_rebound_to_the_loopback_is_not_asked(
    resolved: list[str], dialled: list[tuple[str, int]], victim: _Victim
) -> None:
    # Given a registry whose Bearer token realm is on such a name
    port = victim.server_address[1]
    challenge = f'Bearer realm="https://{NAME}:{port}/token",service="registry"'
    for registry in _serving(_Registry(401, {"WWW-Authenticate": challenge})):
        client = OCIClient(f"127.0.0.1:{registry.server_address[1]}", {}, what="the feature 'x'")
        # When a manifest is asked for
        with pytest.raises(OCIError, match="token service cannot be reached"):
            client.manifest("x/feature", "1", spec.MANIFEST_TYPE)
        client.close()
    # Then the token service was asked at the address checked, never on the loopback
    assert victim.received == []
    assert resolved == [PUBLIC]
    assert dialled == [(PUBLIC, port)]


def test_a_pinned_connection_keeps_the_name_for_the_host_header_and_tls(
    monkeypatch: pytest.MonkeyPatch, resolved: list[str], victim: _Victim
) -> None:
    # Given the public address NAME resolves to served here (its connections land on local
    # servers: a plain HTTP one, and one that records a TLS client's first bytes)
    plain = _Registry(200, {})
    landed: list[tuple[str, int]] = []

    class Landing(socket.socket):
        def connect(self, address: Any) -> None:
            if isinstance(address, tuple) and address[0] == PUBLIC:
                landed.append((address[0], address[1]))
                address = ("127.0.0.1", address[1])
            super().connect(address)

    monkeypatch.setattr(socket, "socket", Landing)
    http_port, tls_port = plain.server_address[1], victim.server_address[1]
    for registry in _serving(plain):
        client = OCIClient(f"{NAME}:{tls_port}", {}, what="the feature 'x'", public_only=True)
        # When a plain HTTP request goes through the pinned transport (the name is checked
        # and pinned as a redirect target is)
        client._pin(NAME)
        answer = client.session.get(f"http://{NAME}:{http_port}/v2/", timeout=5)
        answer.close()
        # Then the Host header is the name, not the address
        assert registry.hosts == [f"{NAME}:{http_port}"]
        # And over HTTPS the TLS server name is the name, and the certificate is checked
        # against it (here: no TLS server answers, a clear error)
        with pytest.raises(OCIError, match="cannot be reached"):
            client.manifest("x/feature", "1", spec.MANIFEST_TYPE)
        client.close()
    assert resolved == [PUBLIC]  # once per name: the later (loopback) answer is never asked
    assert landed == [(PUBLIC, http_port), (PUBLIC, tls_port)]
    assert len(victim.received) == 1
    assert NAME.encode() in victim.received[0]  # the ClientHello's server name


def test_a_connection_to_a_host_never_checked_is_refused_by_the_transport() -> None:
    # Given a client of a registry on the loopback (its own host resolved as usual)
    client = OCIClient("127.0.0.1:5000", {}, what="the feature 'x'")
    assert client._route("http", "127.0.0.1", 5000) is None
    # When its transport is asked for another host that nothing checked: refused, unresolved
    with pytest.raises(_Unchecked):
        client.session.get(f"https://{NAME}/v2/", timeout=5)
    with pytest.raises(_Unchecked):
        client.session.get("http://127.0.0.1:5001/v2/", timeout=5)
    client.close()


def test_a_registry_port_out_of_range_is_a_registry_error() -> None:
    with pytest.raises(OCIError, match="no valid port"):
        OCIClient("example.com:99999", {}, what="the feature")


def test_a_tarball_url_a_wildcard_allows_is_fetched_from_public_addresses_only(
    monkeypatch: pytest.MonkeyPatch, victim: _Victim
) -> None:
    # Given the shared service allowing tarball features from any host under gpudev.test, and
    # a name there that resolves to the service's loopback (an internal host)
    port = victim.server_address[1]
    real = socket.getaddrinfo

    def getaddrinfo(host: Any, service: Any, *args: Any, **kwargs: Any) -> Any:
        if host == "internal.gpudev.test":
            number = int(service) if service else 0
            return [(socket.AF_INET, socket.SOCK_STREAM, 6, "", ("127.0.0.1", number))]
        return real(host, service, *args, **kwargs)

    monkeypatch.setattr(socket, "getaddrinfo", getaddrinfo)
    url = f"https://internal.gpudev.test:{port}/f.tgz"
    request = spec.FeatureRequest(spec.FeatureRef(url, "url"), {})
    settings = Features(allowed_urls=[f"https://*.gpudev.test:{port}/*"])
    # When a user's feature names it
    with pytest.raises(OCIError, match="not a public address"):
        features_module._fetch_url(request, settings, lambda _e: None, shared=True)
    # Then nothing reaches the loopback; a host the administrator named is fetched as set
    assert victim.received == []
    named = Features(allowed_urls=[f"https://internal.gpudev.test:{port}/*"])
    with pytest.raises(OCIError):
        features_module._fetch_url(request, named, lambda _e: None, shared=True)
    assert len(victim.received) == 1
