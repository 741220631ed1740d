"""What client mode costs against single-user mode, in one run (goals: the kernel round trip
unchanged, an API call at most 1.5x single-user).

Both servers run on this machine against the same engine, and are reached directly (not through
JupyterHub's proxy), with a token in the header:

- single-user: ``jupyter server`` with gpudev, talking to the engine itself (the floor);
- client mode: gpudev-alice's server, spawned by a real JupyterHub (``tests/hub.py``: the
  README's example configuration as is), which forwards to the gpudev service the Hub runs.

Measured through the REST API: listing the dev containers (with two running) and the
environments; starting (and removing) a dev container; starting a gpudev kernel and shutting it
down; and the kernel's round trip (``execute_request`` of ``pass`` to its reply over the
server's websocket), which in both modes goes from the server straight to the container.

Run as root (the Hub spawns servers as the test users): ``.venv/bin/python
benchmarks/bench_shared.py`` after ``scripts/setup.sh --test``. BENCH_RUNS (20) repeats the API
calls and round trips; starts are repeated BENCH_STARTS (5) times.
"""

from __future__ import annotations

import asyncio
import json
import os
import re
import secrets
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path
from typing import Any

from floor import median_ms
from tornado.httpclient import HTTPRequest
from tornado.websocket import websocket_connect

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from tests.hub import free_port, request, run_hub

RUNS = int(os.environ.get("BENCH_RUNS", "20"))
STARTS = int(os.environ.get("BENCH_STARTS", "5"))
USER = "gpudev-alice"


class Server:
    """A server reached directly: ``base`` (its URL with base_url) and a token."""

    def __init__(self, name: str, base: str, token: str) -> None:
        self.name, self.base, self.token = name, base.rstrip("/"), token

    def call(self, method: str, path: str, body: Any = None) -> tuple[int, Any]:
        return request(method, self.base + path, body, token=self.token)


def ok(answer: tuple[int, Any], *statuses: int) -> Any:
    status, body = answer
    assert status in statuses, (status, body)
    return body


async def round_trips(server: Server, kernel_id: str, runs: int) -> list[float]:
    url = server.base.replace("http", "ws", 1) + f"/api/kernels/{kernel_id}/channels"
    socket = await websocket_connect(
        HTTPRequest(url, headers={"Authorization": f"token {server.token}"})
    )
    session = uuid.uuid4().hex
    samples = []
    try:
        for index in range(runs + 2):  # two warm-ups
            msg_id = uuid.uuid4().hex
            started = time.perf_counter()
            socket.write_message(
                json.dumps(
                    {
                        "header": {
                            "msg_id": msg_id,
                            "username": "bench",
                            "session": session,
                            "msg_type": "execute_request",
                            "version": "5.3",
                        },
                        "parent_header": {},
                        "metadata": {},
                        "content": {"code": "pass", "silent": False, "store_history": False},
                        "channel": "shell",
                    }
                )
            )
            while True:
                raw = await asyncio.wait_for(socket.read_message(), 60)
                assert raw is not None
                message = json.loads(raw)
                if (
                    message.get("parent_header", {}).get("msg_id") == msg_id
                    and message["header"]["msg_type"] == "execute_reply"
                ):
                    break
            if index >= 2:
                samples.append(time.perf_counter() - started)
    finally:
        socket.close()
        while await asyncio.wait_for(socket.read_message(), 10) is not None:
            pass  # until the server's close frame: the socket is closed, not left to the GC
    return samples


def measure(server: Server) -> dict[str, float]:
    results: dict[str, float] = {}
    keep = [f"bench-{server.name}-{i}-{secrets.token_hex(2)}" for i in range(2)]
    for name in keep:
        ok(
            server.call("POST", "/gpudev/api/containers", {"environment": "default", "name": name}),
            201,
        )
    try:
        results["GET /gpudev/api/containers (2 running)"] = median_ms(
            lambda: ok(server.call("GET", "/gpudev/api/containers"), 200), RUNS
        )
        results["GET /gpudev/api/environments"] = median_ms(
            lambda: ok(server.call("GET", "/gpudev/api/environments"), 200), RUNS
        )

        def start_and_remove() -> float:
            name = f"bench-{server.name}-{secrets.token_hex(3)}"
            started = time.perf_counter()
            ok(
                server.call(
                    "POST", "/gpudev/api/containers", {"environment": "default", "name": name}
                ),
                201,
            )
            took = time.perf_counter() - started
            ok(server.call("DELETE", f"/gpudev/api/containers/{name}?force=1"), 204)
            return took

        results["start a dev container (POST, to 201)"] = (
            statistics.median(start_and_remove() for _ in range(STARTS)) * 1000
        )
        kernel_starts, kernel_stops, trips = [], [], []
        for _ in range(STARTS):
            started = time.perf_counter()
            kernel = ok(server.call("POST", "/api/kernels", {"name": "gpudev-default"}), 201)
            kernel_starts.append(time.perf_counter() - started)
            trips.extend(asyncio.run(round_trips(server, kernel["id"], RUNS)))
            started = time.perf_counter()
            ok(server.call("DELETE", f"/api/kernels/{kernel['id']}"), 204)
            kernel_stops.append(time.perf_counter() - started)
        results["start a gpudev kernel (POST /api/kernels, to 201)"] = (
            statistics.median(kernel_starts) * 1000
        )
        results["kernel round trip (execute pass, over the websocket)"] = (
            statistics.median(trips) * 1000
        )
        results["shut the kernel down (DELETE /api/kernels/ID)"] = (
            statistics.median(kernel_stops) * 1000
        )
    finally:
        for name in keep:
            server.call("DELETE", f"/gpudev/api/containers/{name}?force=1")
    return results


def single_user_server(folder: Path) -> tuple[subprocess.Popen[bytes], Server]:
    port, token = free_port(), secrets.token_hex(16)
    root = Path("/home") / USER / "projects"
    env = {k: v for k, v in os.environ.items() if not k.startswith(("JUPYTERHUB_", "GPUDEV_"))}
    bindir = Path(sys.executable).parent
    process = subprocess.Popen(
        [
            str(bindir / "jupyter"),
            "server",
            f"--port={port}",
            "--ip=127.0.0.1",
            "--no-browser",
            "--allow-root",
            f"--IdentityProvider.token={token}",
            f"--ServerApp.root_dir={root}",
            f"--DevContainers.state_dir={folder / 'single-state'}",
            "--DevContainers.stop_timeout=2",
            f"--Access.user={USER}",
        ],
        env=env,
        stdout=(folder / "single.log").open("wb"),
        stderr=subprocess.STDOUT,
    )
    server = Server("single", f"http://127.0.0.1:{port}", token)
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        try:
            if server.call("GET", "/api/status")[0] == 200:
                return process, server
        except OSError:
            pass
        time.sleep(0.3)
    raise AssertionError((folder / "single.log").read_text())


def main() -> None:
    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp)
        os.chmod(folder, 0o755)  # noqa: S103 (the Hub's folder; users read nothing there)
        config = f"c.DevContainers.state_dir = {str(folder / 'service-state')!r}\n"
        config += "c.DevContainers.stop_timeout = 2\n"
        process, single = single_user_server(folder)
        try:
            with run_hub(folder / "hub", config, {}) as hub:
                hub.start_server(USER)
                routes = re.findall(
                    rf"Adding user {USER} to proxy /user/{USER}/ => (http://[0-9.:]+)",
                    hub.log.read_text(),
                )
                client = Server("client", f"{routes[-1]}/user/{USER}", hub.token_for(USER))
                measured = {"single": measure(single), "client": measure(client)}
        finally:
            process.terminate()
            process.wait(30)
    print("| measure (median ms) | single-user | client mode | ratio |")
    print("| --- | --- | --- | --- |")
    for what, floor in measured["single"].items():
        ours = measured["client"][what]
        print(f"| {what} | {floor:.1f} | {ours:.1f} | {ours / floor:.2f}x |")


if __name__ == "__main__":
    main()
