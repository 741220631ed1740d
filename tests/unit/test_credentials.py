"""A host a user added at run time never receives the server user's registry credentials.

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

from jupyter_gpudev.engine import Host, HostSpec, Registries

SECRET = "s3cret-password"  # noqa: S105 - a test credential, asserted absent
REGISTRY = "registry.example.org"
LOG = logging.getLogger("test_credentials")


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


def pull_and_build(url: str, origin: str) -> dict[str, dict[str, str]]:
    """A pull through ``Registries`` and a build, through a host of that origin: the headers
    the engine saw, by kind of request."""
    engine = host(url, origin)
    try:
        client = engine.client()
        Registries().pull(client, f"{REGISTRY}/team/image:1", lambda _event: None)
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
