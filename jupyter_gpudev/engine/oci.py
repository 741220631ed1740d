"""A small OCI distribution client: one artifact's manifest and one layer of it, as the Dev
Container features-distribution specification publishes features.

- HTTPS, but plain HTTP to a registry on a loopback address (as the engine allows);
- the registry's own authentication: ``Basic`` with the credentials ``Registries.auth_for``
  gives for image pulls, or a ``Bearer`` token fetched from the realm it names with them;
- redirects (a blob is often served from elsewhere) followed by hand, at most a few: never to
  a loopback, private, link-local or otherwise non-public address unless it is the registry's
  own host, never with the registry's credentials, and the token realm checked the same way;
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
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import requests

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


def public_host(host: str) -> bool:
    """Whether every address ``host`` resolves to is a public one."""
    try:
        infos = socket.getaddrinfo(host.strip("[]"), None)
    except OSError:
        return False
    for info in infos:
        address = ipaddress.ip_address(str(info[4][0]).split("%", 1)[0])
        if not address.is_global or address.is_multicast:
            return False
    return bool(infos)


class OCIClient:
    """Reads from one registry (``registry``: ``host[:port]``) with ``auth`` (docker's auth
    config: ``username`` and ``password``; empty: anonymous)."""

    def __init__(
        self, registry: str, auth: Mapping[str, str], *, what: str, withheld: str = ""
    ) -> None:
        """``withheld``: why no credentials are sent although some are known (the shared
        service's, which fetch for a user only what its administrator says), said when the
        registry asks for them."""
        self.registry = registry
        self.withheld = withheld
        self.host = urllib.parse.urlsplit(f"//{registry}").hostname or registry
        self.scheme = "http" if _loopback(self.host) else "https"
        self.what = what
        self._basic: str | None = None
        if auth.get("username") and auth.get("password"):
            pair = f"{auth['username']}:{auth['password']}".encode()
            self._basic = "Basic " + base64.b64encode(pair).decode()
        self._authorization: str | None = None
        self.session = requests.Session()
        self.session.trust_env = False  # no proxy from the environment sees the credentials

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

    def _check_target(self, url: str) -> None:
        parts = urllib.parse.urlsplit(url)
        if parts.scheme not in ("http", "https") or not parts.hostname:
            raise self.fail(f"the registry sent it to {parts.scheme or '?'}: URLs, refused")
        if self._own(url):
            return
        if parts.scheme != "https" or not public_host(parts.hostname):
            raise self.fail(
                f"the registry sent it to {parts.hostname}, which is not a public HTTPS "
                "address: refused"
            )

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
            try:
                answer = self.session.get(
                    url, headers=sent, allow_redirects=False, stream=True, timeout=TIMEOUT
                )
            except requests.RequestException as exc:
                raise self.fail(f"the registry {self.registry} cannot be reached ({exc})") from None
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
        try:
            answer = self.session.get(
                realm,
                params=query,
                headers=headers,
                allow_redirects=False,
                stream=True,  # read within _read's bound, not whole before it
                timeout=TIMEOUT,
            )
        except requests.RequestException as exc:
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
