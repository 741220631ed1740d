"""A small OCI distribution client: one artifact's manifest and one layer of it, as the Dev
Container features-distribution specification publishes features.

- HTTPS, but plain HTTP to a registry on a loopback address (as the engine allows);
- the registry's own authentication: ``Basic`` with the credentials ``Registries.auth_for``
  gives for image pulls, or a ``Bearer`` token fetched from the realm it names with them;
- redirects (a blob is often served from elsewhere) followed by hand, at most a few: never to
  a loopback, private, link-local or otherwise non-public address unless it is the registry's
  own host, never with the registry's credentials, and the token realm checked the same way;
- a host that must be public (a redirect's or a token realm's elsewhere; the registry's own
  with ``public_only``) is resolved once, every address checked, and connected to at exactly
  those addresses (under its name: Host header, TLS server name and certificate check): a
  DNS server answering a public address at the check and a loopback one at the connection
  (DNS rebinding) reaches no service on the engine's machine;
- bounded reads, and every blob checked against its digest.
"""

from __future__ import annotations

import base64
import hashlib
import ipaddress
import json
import re
import socket
import time
import urllib.parse
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

import requests
import requests.adapters
import urllib3
import urllib3.connection
import urllib3.connectionpool
import urllib3.exceptions
import urllib3.util.connection

from ..errors import GPUDevError

MANIFEST_LIMIT = 4 << 20
TIMEOUT = 30.0
#: Seconds a whole answer may take to arrive (a manifest, a blob, a token).
DEADLINE = 300.0
MAX_REDIRECTS = 4

_CHALLENGE_RE = re.compile(r'(\w+)="([^"]*)"')


class OCIError(GPUDevError):
    """A registry that could not be reached, refused, or answered what is not expected."""

    status = 502
    exit_code = 4
    code = "registry"


@dataclass(frozen=True)
class Fetched:
    """A manifest's digest and bytes, or a blob's."""

    digest: str
    data: bytes


def _loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False


def _resolved(host: str) -> list[ipaddress.IPv4Address | ipaddress.IPv6Address] | None:
    """The addresses ``host`` resolves to (once), ``None`` when it does not resolve."""
    try:
        infos = socket.getaddrinfo(host.strip("[]"), None, type=socket.SOCK_STREAM)
    except OSError:
        return None
    return [ipaddress.ip_address(str(info[4][0]).split("%", 1)[0]) for info in infos]


#: IPv6 prefixes whose last 32 bits are an IPv4 address that a translator or the host's own
#: tunnel reaches: NAT64's well-known prefix, SIIT's IPv4-translated and the deprecated
#: IPv4-compatible addresses.
_V4_IN_LAST_32 = tuple(
    ipaddress.ip_network(prefix) for prefix in ("64:ff9b::/96", "::ffff:0:0:0/96", "::/96")
)
#: NAT64's local-use prefix: where in it an IPv4 address sits is the network's choice.
_NAT64_LOCAL = ipaddress.ip_network("64:ff9b:1::/48")


def _embedded_ipv4(address: ipaddress.IPv6Address) -> list[ipaddress.IPv4Address]:
    """The IPv4 addresses an IPv6 address stands for, where some tunnel or translator takes
    it (mapped, 6to4, Teredo's client, NAT64, SIIT, IPv4-compatible)."""
    found = [address.ipv4_mapped, address.sixtofour]
    if address.teredo is not None:
        found.append(address.teredo[1])
    if any(address in prefix for prefix in _V4_IN_LAST_32) and int(address) & 0xFFFFFFFF:
        found.append(ipaddress.IPv4Address(int(address) & 0xFFFFFFFF))
    return [v4 for v4 in found if v4 is not None]


def _public(address: ipaddress.IPv4Address | ipaddress.IPv6Address) -> bool:
    """Whether ``address`` is a public one, an IPv6 address standing for an IPv4 one only if
    that is public too."""
    if isinstance(address, ipaddress.IPv6Address):
        if address in _NAT64_LOCAL:
            return False
        if not all(_public(v4) for v4 in _embedded_ipv4(address)):
            return False
    return address.is_global and not address.is_multicast


def public_addresses(host: str) -> tuple[str, ...] | None:
    """The addresses ``host`` resolves to (resolved once), if every one is public; else None."""
    resolved = _resolved(host)
    if not resolved or not all(_public(address) for address in resolved):
        return None
    return tuple(dict.fromkeys(str(address) for address in resolved))


def public_host(host: str) -> bool:
    """Whether every address ``host`` resolves to is a public one."""
    return public_addresses(host) is not None


def private_host(host: str) -> bool:
    """Whether ``host`` (a name or address, with or without a port) resolves to a loopback,
    private, link-local or otherwise non-public address; ``False`` when it does not resolve."""
    name = urllib.parse.urlsplit(f"//{host}").hostname or host
    if _loopback(name):
        return True
    resolved = _resolved(name)
    return resolved is not None and not all(_public(address) for address in resolved)


def _normal(host: str) -> str:
    return host.strip("[]").rstrip(".").lower()


#: ``(scheme, host, port)`` -> the addresses to connect to, or None for the usual resolution.
_Route = Callable[[str, str, int], tuple[str, ...] | None]


class _Unchecked(Exception):
    """A connection to a host that must be public and was not checked: refused (never an
    ``OSError``, which urllib3 would retry or wrap)."""

    def __init__(self, host: str) -> None:
        super().__init__(host)
        self.host = host


class _PinnedMixin:
    """Connects to the addresses ``route`` gives (checked ones) instead of resolving the name
    again; the name stays the connection's ``host``: its Host header, its TLS server name and
    the name its certificate is checked against."""

    host: str
    port: int
    timeout: Any
    source_address: tuple[str, int] | None
    socket_options: Any

    def __init__(self, *args: Any, route: _Route, scheme: str, **kwargs: Any) -> None:
        self._route = route
        self._scheme = scheme
        super().__init__(*args, **kwargs)

    def _new_conn(self) -> socket.socket:
        addresses = self._route(self._scheme, self.host, self.port)
        if addresses is None:
            sock: socket.socket = super()._new_conn()  # type: ignore[misc]
            return sock
        error: OSError | None = None
        for address in addresses:
            try:
                return urllib3.util.connection.create_connection(
                    (address, self.port),
                    self.timeout,
                    source_address=self.source_address,
                    socket_options=self.socket_options,
                )
            except OSError as exc:
                error = exc
        if isinstance(error, TimeoutError):
            raise urllib3.exceptions.ConnectTimeoutError(
                self, f"Connection to {self.host} timed out. (connect timeout={self.timeout})"
            ) from error
        raise urllib3.exceptions.NewConnectionError(
            self,  # type: ignore[arg-type]
            f"Failed to establish a new connection to {self.host} at "
            f"{', '.join(addresses)}: {error}",
        ) from error


class _PinnedHTTPConnection(_PinnedMixin, urllib3.connection.HTTPConnection):
    pass


class _PinnedHTTPSConnection(_PinnedMixin, urllib3.connection.HTTPSConnection):
    pass


class _PinnedPoolManager(urllib3.PoolManager):
    def __init__(self, *args: Any, route: _Route, **kwargs: Any) -> None:
        self._route = route
        super().__init__(*args, **kwargs)

    def _new_pool(
        self, scheme: str, host: str, port: int, request_context: dict[str, Any] | None = None
    ) -> urllib3.connectionpool.HTTPConnectionPool:
        pool = super()._new_pool(scheme, host, port, request_context)
        pool.ConnectionCls = _PinnedHTTPSConnection if scheme == "https" else _PinnedHTTPConnection
        pool.conn_kw = {**pool.conn_kw, "route": self._route, "scheme": scheme}
        return pool


class _PinnedAdapter(requests.adapters.HTTPAdapter):
    """requests' transport, its connections going where ``route`` says."""

    def __init__(self, route: _Route) -> None:
        self._route = route  # before the base class makes its pool manager
        super().__init__()

    def init_poolmanager(
        self, connections: int, maxsize: int, block: bool = False, **pool_kwargs: Any
    ) -> None:
        self._pool_connections = connections
        self._pool_maxsize = maxsize
        self._pool_block = block
        self.poolmanager = _PinnedPoolManager(
            num_pools=connections, maxsize=maxsize, block=block, route=self._route, **pool_kwargs
        )


class OCIClient:
    """Reads from one registry (``registry``: ``host[:port]``) with ``auth`` (docker's auth
    config: ``username`` and ``password``; empty: anonymous)."""

    def __init__(
        self,
        registry: str,
        auth: Mapping[str, str],
        *,
        what: str,
        withheld: str = "",
        public_only: bool = False,
    ) -> None:
        """``withheld``: why no credentials are sent although some are known (the shared
        service's, which fetch for a user only what its administrator says), said when the
        registry asks for them. ``public_only``: the registry itself too is reached only at
        public addresses, those checked (the shared service, for a registry its administrator
        did not configure)."""
        self.registry = registry
        self.withheld = withheld
        self.public_only = public_only
        self.host = urllib.parse.urlsplit(f"//{registry}").hostname or registry
        self.scheme = "http" if _loopback(self.host) else "https"
        default = 80 if self.scheme == "http" else 443
        try:
            self._port = urllib.parse.urlsplit(f"//{registry}").port or default
        except ValueError:  # (over 65535)
            raise OCIError(
                f"{what}: the registry {registry[:100]} has no valid port",
                details={"registry": registry[:100]},
            ) from None
        self.what = what
        self._basic: str | None = None
        if auth.get("username") and auth.get("password"):
            pair = f"{auth['username']}:{auth['password']}".encode()
            self._basic = "Basic " + base64.b64encode(pair).decode()
        self._authorization: str | None = None
        #: Each host that must be public: the addresses checked, the only ones connected to.
        self._pinned: dict[str, tuple[str, ...]] = {}
        self.session = requests.Session()
        self.session.trust_env = False  # no proxy from the environment sees the credentials
        adapter = _PinnedAdapter(self._route)
        self.session.mount("http://", adapter)
        self.session.mount("https://", adapter)

    def close(self) -> None:
        self.session.close()

    def fail(self, message: str) -> OCIError:
        return OCIError(f"{self.what}: {message}", details={"registry": self.registry})

    def manifest(self, repository: str, reference: str, accept: str) -> Fetched:
        url = f"{self.scheme}://{self.registry}/v2/{repository}/manifests/{reference}"
        data = self._get(url, {"Accept": accept}, MANIFEST_LIMIT, repository)
        digest = "sha256:" + hashlib.sha256(data).hexdigest()
        if reference.startswith("sha256:") and digest != reference:
            raise self.fail(f"the registry's manifest is not {reference} (it is {digest})")
        return Fetched(digest, data)

    def download(self, url: str, limit: int) -> bytes:
        """The file at ``url`` (on this client's host: a tarball's URL), at most ``limit``
        bytes; HTTPS, or HTTP to a loopback address."""
        parts = urllib.parse.urlsplit(url)
        if parts.netloc.lower() != self.registry.lower() or parts.scheme != self.scheme:
            raise self.fail(f"{self.scheme}://{self.registry}/ is where it may be fetched from")
        return self._get(url, {}, limit, "")

    def blob(self, repository: str, digest: str, limit: int) -> Fetched:
        url = f"{self.scheme}://{self.registry}/v2/{repository}/blobs/{digest}"
        data = self._get(url, {}, limit, repository)
        found = "sha256:" + hashlib.sha256(data).hexdigest()
        if found != digest:
            raise self.fail(f"the registry's blob is not {digest} (it is {found})")
        return Fetched(digest, data)

    # -- transport ------------------------------------------------------------------------------

    def _own(self, url: str) -> bool:
        """Whether ``url`` is the registry itself: its host and port, and its scheme (an
        ``http://`` URL on an HTTPS registry's host never gets its credentials)."""
        parts = urllib.parse.urlsplit(url)
        return parts.netloc.lower() == self.registry.lower() and parts.scheme == self.scheme

    def _pin(self, host: str) -> bool:
        """Resolves ``host`` once for this client and keeps its addresses, the ones its
        connections go to, if all are public; whether they are."""
        key = _normal(host)
        if key not in self._pinned:
            addresses = public_addresses(host)
            if addresses is None:
                return False
            self._pinned[key] = addresses
        return True

    def _unpinned(self, scheme: str, host: str, port: int) -> bool:
        """Whether a connection to ``host:port`` resolves the name as usual: the registry's
        own host (configured by the administrator, or the user's own engine's), unless
        ``public_only``."""
        own = (scheme, _normal(host), port) == (self.scheme, _normal(self.host), self._port)
        return own and not self.public_only

    def _route(self, scheme: str, host: str, port: int) -> tuple[str, ...] | None:
        """Where a connection to ``host:port`` goes (the transport asks): its checked
        addresses, or None for the usual resolution; refused for a host never checked."""
        pinned = self._pinned.get(_normal(host))
        if pinned is not None:
            return pinned
        if self._unpinned(scheme, host, port):
            return None
        raise _Unchecked(host)

    def _check_connect(self, url: str) -> None:
        """Before a request to ``url``: a host that must be public is resolved and checked
        now, and its connections pinned to the addresses checked."""
        parts = urllib.parse.urlsplit(url)
        host = parts.hostname or ""
        try:
            port = parts.port or (80 if parts.scheme == "http" else 443)
        except ValueError:
            raise self.fail(f"{url} has no valid port: refused") from None
        if self._unpinned(parts.scheme, host, port) or self._pin(host):
            return
        if self._own(url) or _normal(host) == _normal(self.host):
            raise self.fail(f"the registry {self.registry} is not a public address: refused")
        raise self.fail(f"{host} is not a public address: refused")

    def _check_target(self, url: str) -> None:
        parts = urllib.parse.urlsplit(url)
        if parts.scheme not in ("http", "https") or not parts.hostname:
            raise self.fail(f"the registry sent it to {parts.scheme or '?'}: URLs, refused")
        if self._own(url) and not self.public_only:
            return
        if (parts.scheme != "https" and not self._own(url)) or not self._pin(parts.hostname):
            raise self.fail(
                f"the registry sent it to {parts.hostname}, which is not a public HTTPS "
                "address: refused"
            )

    def _unreachable(self, url: str, exc: Exception) -> OCIError:
        if isinstance(exc, _Unchecked):
            return self.fail(f"{exc.host} was not checked to be a public address: refused")
        if self._own(url):
            return self.fail(f"the registry {self.registry} cannot be reached ({exc})")
        host = urllib.parse.urlsplit(url).hostname
        return self.fail(f"{host}, where the registry sent it, cannot be reached ({exc})")

    def _get(self, url: str, headers: Mapping[str, str], limit: int, repository: str) -> bytes:
        answer = self._request(url, headers)
        # Only the registry itself may ask for its credentials: a 401 from a host it redirected
        # to is that host's refusal.
        if answer.status_code == 401 and self._authorization is None and self._own(answer.url):
            answer.close()
            self._authenticate(answer.headers.get("WWW-Authenticate", ""), repository)
            answer = self._request(url, headers)
        with answer:
            if answer.status_code == 401:
                raise self.fail(
                    "the registry refused the credentials (c.Registries.credentials or docker "
                    "login)"
                )
            if answer.status_code == 404:
                raise self.fail("the registry has no such feature or version")
            if answer.status_code != 200:
                raise self.fail(f"the registry answered HTTP {answer.status_code}")
            return self._read(answer, limit)

    def _request(self, url: str, headers: Mapping[str, str]) -> requests.Response:
        for _ in range(MAX_REDIRECTS + 1):
            sent = dict(headers)
            if self._own(url) and self._authorization:
                sent["Authorization"] = self._authorization
            self._check_connect(url)
            try:
                answer = self.session.get(
                    url, headers=sent, allow_redirects=False, stream=True, timeout=TIMEOUT
                )
            except (requests.RequestException, _Unchecked) as exc:
                raise self._unreachable(url, exc) from None
            if answer.status_code not in (301, 302, 303, 307, 308):
                return answer
            location = answer.headers.get("Location", "")
            answer.close()
            url = urllib.parse.urljoin(url, location)
            self._check_target(url)
        raise self.fail("the registry redirected it too many times")

    def _read(self, answer: requests.Response, limit: int) -> bytes:
        """The answer's body, at most ``limit`` bytes, within ``DEADLINE`` seconds in all (a
        registry sending a byte now and then does not hold a worker for ever)."""
        chunks: list[bytes] = []
        size = 0
        deadline = time.monotonic() + DEADLINE
        for chunk in answer.iter_content(1 << 16):
            size += len(chunk)
            if size > limit:
                raise self.fail(f"the registry's answer is over {limit >> 20} MiB")
            if time.monotonic() > deadline:
                raise self.fail(f"the registry's answer took over {DEADLINE:g} s")
            chunks.append(chunk)
        return b"".join(chunks)

    def _authenticate(self, challenge: str, repository: str) -> None:
        scheme, _, rest = challenge.partition(" ")
        params = dict(_CHALLENGE_RE.findall(rest))
        if scheme.lower() == "basic":
            if self._basic is None:
                raise self.fail(
                    f"the registry {self.registry} asks for credentials and "
                    + (self.withheld or "none are known (c.Registries.credentials or docker login)")
                )
            self._authorization = self._basic
            return
        if scheme.lower() != "bearer" or not params.get("realm"):
            raise self.fail(f"the registry asks for authentication gpudev cannot give ({scheme})")
        realm = params["realm"]
        self._check_target(realm)
        query = {"scope": params.get("scope") or f"repository:{repository}:pull"}
        if params.get("service"):
            query["service"] = params["service"]
        # The registry's credentials go to a token service on its own host only.
        headers = {"Authorization": self._basic} if self._basic and self._own(realm) else {}
        self._check_connect(realm)
        try:
            answer = self.session.get(
                realm,
                params=query,
                headers=headers,
                allow_redirects=False,
                stream=True,  # read within _read's bound, not whole before it
                timeout=TIMEOUT,
            )
        except (requests.RequestException, _Unchecked) as exc:
            if isinstance(exc, _Unchecked):
                raise self._unreachable(realm, exc) from None
            raise self.fail(f"the registry's token service cannot be reached ({exc})") from None
        with answer:
            if answer.status_code != 200:
                raise self.fail(f"the registry's token service answered HTTP {answer.status_code}")
            try:
                body: Any = json.loads(self._read(answer, 1 << 20))
            except ValueError:
                raise self.fail("the registry's token service answered no JSON") from None
        token = body.get("token") or body.get("access_token") if isinstance(body, dict) else None
        if not isinstance(token, str) or not token:
            raise self.fail("the registry's token service gave no token")
        self._authorization = f"Bearer {token}"
