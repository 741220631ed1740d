"""A user's server in client mode forwards ``/gpudev/api/PATH`` to the shared service with its
JupyterHub token: only to the service's own API, whatever the path's encoding.

The service here is a stand-in that notes every path it is asked for, so that what the
forwarding sends is seen as sent (a front proxy between the two may normalise ``..``)."""

from __future__ import annotations

import http.server
import threading
from collections.abc import Awaitable, Callable, Iterator
from typing import Any, ClassVar

import pytest
from tornado.httpclient import HTTPClientError, HTTPResponse

pytestmark = pytest.mark.integration

Fetch = Callable[..., Awaitable[HTTPResponse]]


class Noting(http.server.BaseHTTPRequestHandler):
    asked: ClassVar[list[str]] = []

    def _answer(self) -> None:
        Noting.asked.append(self.path)
        body = b'{"ok": true}'
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    do_GET = do_POST = do_PUT = do_DELETE = _answer

    def log_message(self, *args: object) -> None:
        pass


@pytest.fixture
def stand_in() -> Iterator[str]:
    Noting.asked = []
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Noting)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    yield f"http://127.0.0.1:{server.server_address[1]}"
    server.shutdown()
    server.server_close()


@pytest.fixture
def gpudev_config(
    gpudev_config: dict[str, Any], stand_in: str, monkeypatch: pytest.MonkeyPatch
) -> dict[str, Any]:
    monkeypatch.setenv("JUPYTERHUB_API_TOKEN", "a-server-token")
    return {**gpudev_config, "GPUDevApp": {"service_url": stand_in}}


@pytest.mark.parametrize(
    "path",
    [
        "containers/../../../hub/api/users",
        "../../hub/api/users",
        "containers/./x",
    ],
)
async def test_a_path_leaving_the_services_api_is_not_forwarded(jp_fetch: Fetch, path: str) -> None:
    # Given a user's server forwarding gpudev to the service, When it is asked for a path
    # with dot segments (as a browser sends %2F..%2F, decoded by the server's routing)
    with pytest.raises(HTTPClientError) as refused:
        await jp_fetch("gpudev", "api", path)
    # Then it answers 404 and the service was never asked (nor anything else at its address)
    assert refused.value.code == 404
    assert Noting.asked == []
    # While a plain path is forwarded, under the service's API
    await jp_fetch("gpudev", "api", "containers")
    assert Noting.asked == ["/gpudev/api/containers"]


async def test_its_own_reclaim_routes_answer(jp_fetch: Fetch) -> None:
    # Given a user's server in client mode, whose GPU kernels' reclaim is its own (the panel
    # asks it for the warnings and for "keep"), When the panel asks for them
    answer = await jp_fetch("gpudev", "api", "reclaims")
    # Then it answers itself (no kernel of its own holds a GPU: none), never the service
    assert answer.code == 200
    assert b'"reclaims": []' in answer.body
    # And "keep" of a kernel it does not run is that kernel's 404, not a server error
    with pytest.raises(HTTPClientError) as unknown:
        await jp_fetch(
            "gpudev",
            "api",
            "kernels",
            "0123abcd-0000-4000-8000-000000000000",
            "keep",
            method="POST",
            body=b"",
        )
    assert unknown.value.code == 404
    assert Noting.asked == []
