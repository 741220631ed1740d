"""A host a user added at run time never receives the server user's registry credentials; the
shared service's builds never send its credentials, and its pulls send them only for the images
``c.Registries.shared_pull_images`` names (issue #30).

The engine is a fake one on loopback (plain HTTP) that records the headers of every request:
pulls carry credentials in ``X-Registry-Auth``, builds carry all of them in
``X-Registry-Config``. The same requests to a configured host show the test can fail.
"""

from __future__ import annotations

import base64
import io
import json
import logging
import tarfile
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import ClassVar

import pytest
from traitlets.config import Config

from jupyter_gpudev.engine import Host, HostPool, HostSpec, Registries, RegistryError

SECRET = "s3cret-password"  # noqa: S105 - a test credential, asserted absent
REGISTRY = "registry.example.org"
LOG = logging.getLogger("test_credentials")
#: What the fake engine says of a pull of an image whose name holds the key.
REFUSALS = {
    "private": "Head https://registry.example.org/v2/private/manifests/1: unauthorized",
    "missing": "manifest for registry.example.org/missing:1 not found: manifest unknown",
}


class FakeEngine(BaseHTTPRequestHandler):
    """Answers the version probe, pulls and builds; keeps each request's headers."""

    seen: ClassVar[list[tuple[str, dict[str, str]]]] = []

    def _answer(self, body: bytes, content_type: str = "application/json") -> None:
        self.send_response(200)
        self.send_header("Content-Type", content_type)
        self.send_header("Api-Version", "1.41")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def do_GET(self) -> None:
        self.seen.append((self.path, dict(self.headers)))
        if self.path.endswith("/version"):
            self._answer(json.dumps({"ApiVersion": "1.41", "Version": "20.10.24"}).encode())
        else:
            self._answer(b"OK", "text/plain")

    def do_POST(self) -> None:
        length = int(self.headers.get("Content-Length") or 0)
        if length:
            self.rfile.read(length)
        elif self.headers.get("Transfer-Encoding") == "chunked":
            while True:
                size = int(self.rfile.readline().strip() or b"0", 16)
                self.rfile.read(size + 2)
                if size == 0:
                    break
        self.seen.append((self.path, dict(self.headers)))
        for name, words in REFUSALS.items():
            if name in self.path:
                self._answer(json.dumps({"error": words}).encode() + b"\n")
                return
        self._answer(b'{"status": "done"}\n')

    def log_message(self, *args: object) -> None:
        pass


@pytest.fixture
def engine() -> Iterator[str]:
    FakeEngine.seen = []
    server = ThreadingHTTPServer(("127.0.0.1", 0), FakeEngine)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield f"tcp://127.0.0.1:{server.server_address[1]}"
    server.shutdown()
    server.server_close()


@pytest.fixture(autouse=True)
def docker_login(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The server user has logged in to the registry (``docker login`` wrote config.json)."""
    token = base64.b64encode(f"me:{SECRET}".encode()).decode()
    (tmp_path / "config.json").write_text(json.dumps({"auths": {REGISTRY: {"auth": token}}}))
    monkeypatch.setenv("DOCKER_CONFIG", str(tmp_path))


def host(url: str, origin: str) -> Host:
    made = Host(HostSpec("far", url, tls_verify=False), timeout=5, gpu_inventory=None, log=LOG)
    made.origin = origin
    return made


def pull_and_build(
    url: str, origin: str, *, made: Host | None = None, registries: Registries | None = None
) -> dict[str, dict[str, str]]:
    """A pull through ``registries`` and a build, through a host of that origin (or ``made``):
    the headers the engine saw, by kind of request."""
    engine = made or host(url, origin)
    try:
        client = engine.client()
        (registries or Registries()).pull(client, f"{REGISTRY}/team/image:1", lambda _event: None)
        context = io.BytesIO()
        with tarfile.open(fileobj=context, mode="w") as archive:
            dockerfile = b"FROM scratch\n"
            info = tarfile.TarInfo("Dockerfile")
            info.size = len(dockerfile)
            archive.addfile(info, io.BytesIO(dockerfile))
        context.seek(0)
        for _ in client.api.build(fileobj=context, custom_context=True, tag="x:1"):
            pass
    finally:
        engine.close()
    return {
        ("pull" if "/images/create" in path else "build"): headers
        for path, headers in FakeEngine.seen
        if "/images/create" in path or "/build" in path
    }


def credentials_in(headers: dict[str, str]) -> str:
    sent = ""
    for name in ("X-Registry-Auth", "X-Registry-Config"):
        value = headers.get(name)
        if value:
            sent += base64.urlsafe_b64decode(value + "=" * (-len(value) % 4)).decode()
    return sent


def test_a_configured_host_gets_the_credentials(engine: str) -> None:
    seen = pull_and_build(engine, "config")
    assert SECRET in credentials_in(seen["pull"])
    assert SECRET in credentials_in(seen["build"])


def test_a_host_added_at_run_time_never_gets_them(engine: str) -> None:
    seen = pull_and_build(engine, "added")
    for kind in ("pull", "build"):
        sent = credentials_in(seen[kind])
        assert SECRET not in sent, kind
        assert REGISTRY not in sent, kind
        assert base64.b64encode(f"me:{SECRET}".encode()).decode() not in sent, kind


def none_of_them_in(sent: str) -> bool:
    return (
        SECRET not in sent
        and REGISTRY not in sent
        and base64.b64encode(f"me:{SECRET}".encode()).decode() not in sent
    )


def test_the_shared_services_builds_never_send_its_credentials(engine: str) -> None:
    # Given the shared service's pool, whose builds send no credentials, with a configured host
    config = Config()
    config.HostPool.include_local = False
    config.HostPool.hosts = {"far": {"url": engine, "tls_verify": False}}
    pool = HostPool(config=config, log=LOG)
    pool.withhold_build_credentials()
    # When a build runs there, and a pull that may carry the service's credentials
    seen = pull_and_build(engine, "config", made=pool.get("far"))
    # Then the build carried none of them, and the pull carried them
    assert none_of_them_in(credentials_in(seen["build"]))
    assert SECRET in credentials_in(seen["pull"])


def test_a_client_open_before_the_service_withholds_them_stops_sending_them(engine: str) -> None:
    # Given a configured host whose client is open
    made = host(engine, "config")
    made.client()
    # When the service withholds its credentials from builds, and a build runs
    made.withhold_build_credentials()
    seen = pull_and_build(engine, "config", made=made)
    # Then the build carried none of them
    assert none_of_them_in(credentials_in(seen["build"]))


@pytest.mark.parametrize("source", ["docker login", "c.Registries.credentials"])
def test_a_shared_pull_carries_the_services_credentials_only_for_the_images_allowed(
    engine: str, source: str, tmp_path: Path
) -> None:
    # Given the service's credentials (its Docker configuration, or c.Registries.credentials)
    # and its registries acting for a user, the administrator allowing REGISTRY/shared/*
    config = Config()
    config.Registries.shared_pull_images = [f"{REGISTRY}/shared/*"]
    if source == "c.Registries.credentials":
        (tmp_path / "password").write_text(SECRET)
        config.Registries.credentials = {
            REGISTRY: {"username": "me", "password_file": str(tmp_path / "password")}
        }
        (tmp_path / "config.json").write_text("{}")
    registries = Registries(config=config, log=LOG)
    registries.user = "gpudev-alice"
    said: list[dict[str, object]] = []
    engine_host = host(engine, "config")
    try:
        client = engine_host.client()
        # When it pulls an image the allow-list does not name
        registries.pull(client, f"{REGISTRY}/team/image:1", said.append)
        # Then the pull carried none of the credentials, and said so
        assert none_of_them_in(credentials_in(pulls()[-1]))
        assert "without the gpudev service's credentials" in str(said[0]["message"])
        # When it pulls one the allow-list names
        registries.pull(client, f"{REGISTRY}/shared/base:1", said.append)
        # Then that pull carried them
        assert SECRET in credentials_in(pulls()[-1])
    finally:
        engine_host.close()


def pulls() -> list[dict[str, str]]:
    """The headers of the pulls the engine saw, in order."""
    return [headers for path, headers in FakeEngine.seen if "/images/create" in path]


@pytest.mark.parametrize("image", ["private", "missing"])
def test_a_shared_pull_that_fails_says_it_was_made_without_the_services_credentials(
    engine: str, image: str, caplog: pytest.LogCaptureFixture
) -> None:
    # Given the service's registries acting for a user, no allow-list
    registries = Registries(log=LOG)
    registries.user = "gpudev-alice"
    engine_host = host(engine, "config")
    try:
        # When a pull the registry refuses (or has no such image for) fails
        with pytest.raises(RegistryError) as failed:
            registries.pull(engine_host.client(), f"{REGISTRY}/{image}:1", lambda _event: None)
    finally:
        engine_host.close()
    # Then the error says the service's credentials were not used, and which setting decides
    message = failed.value.message
    assert "without the gpudev service's credentials" in message
    assert "c.Registries.shared_pull_images" in message
    # And neither it nor the log holds a credential
    token = base64.b64encode(f"me:{SECRET}".encode()).decode()
    for said in (message, str(failed.value.details), caplog.text):
        assert SECRET not in said
        assert token not in said
