"""The service under load, a soak, and the Kubernetes paper plan measured (issue #35, "Load").

Three parts, one run (``--part`` picks some), in this order: k8s, service, soak.

- **service**: ``jupyter gpudev serve`` (shared mode) on loopback, a stand-in JupyterHub API
  naming ``--users`` simulated users by their tokens, with token ids as a Hub 5 does (none has
  an account here: the service's account owns their folders). Each user polls the panel's
  listing every 2 s, the two requests the panel's containers model makes per refresh
  (``GET /gpudev/api/containers`` and ``GET /gpudev/api/environments``); ``--starters`` of
  them meanwhile start a dev container with one GPU of the two fake A100s
  (``tests/fixtures/smi/two-a100``), hold it ``HOLD`` s, stop it and remove it, again and
  again (a 409, the machine full, waits 1 s and tries again), for ``--duration`` s.
  Latencies p50/p99, every status counted, the Hub's requests, and the
  service process's RSS, open files and threads (``/proc/PID``): idle after a warm-up (one
  start, a listing by each user), after ``--warm`` s of load, every ``--sample`` s, at the
  end, and ``--settle`` s after it with no client; then ``leftovers()``.
- **soak**: a single-user ``jupyter server`` with gpudev (``benchmarks/server.py``), ``--cycles``
  times through its REST API as the panel and Lab do: start a dev container, start a kernel in
  it (``gpudev--NAME``), execute ``1+1`` over the kernel's websocket, shut the kernel down,
  remove the container. Then ``tests/leaks.py``'s ``leftovers()`` (expected: none) and the
  server's RSS, open files and threads after the first cycle and after the last. With
  ``--trace-at CYCLE`` (twice or more) the server traces its memory (``tracemalloc``, from
  the end of cycle 1) and dumps it after those cycles (``benchmarks/server.py --traced``, on
  SIGUSR2); the first and last dumps are compared: the allocation sites that grew, by
  traceback and by line, and the live objects by type (the full tracebacks go to
  ``tracemalloc.log``, kept with ``--keep-logs``).
- **k8s**: the shared service whose one host is ``k8s://lab-ml/team-ml``, the stand-in API
  server (``tests/k8s_api.py``, in its own process) holding ``--pods`` dev pods started through
  the service by as many users, and nodes with ``--gpus`` GPUs (8 a node). ``--rate`` listing
  polls a second (``GET /gpudev/api/containers``, a random user each) for ``--k8s-duration``
  s, with ``c.KubernetesHosts.watch`` off and on: API requests per poll (counted by the
  stand-in), Hub requests per poll, p50/p99, the service's CPU seconds. The polls are
  open-loop with at most ``INFLIGHT`` outstanding: a poll due while that many are still out
  is counted as skipped.

Run as root after ``scripts/setup.sh --test``: ``.venv/bin/python benchmarks/bench_load.py``
(about 7 + 11 + 16 minutes on 2 cores), ``--quick`` (30 s, 10 users, 4 starters, 10 cycles,
100 pods, 20 s) for a check in about 3 minutes; ``--keep-logs DIR`` keeps the servers' logs.
It prints Markdown for benchmarks/results/load.md; progress goes to stderr.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import http.client
import http.server
import json
import os
import random
import secrets
import signal
import subprocess
import sys
import tempfile
import threading
import time
import tracemalloc
import uuid
from collections import Counter
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import docker
import docker.errors

from jupyter_gpudev.containers import docker_name
from jupyter_gpudev.containers.model import container_key
from jupyter_gpudev.labels import L_SERVER

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
FAKE_SMI = ROOT / "tests" / "fixtures" / "fake-nvidia-smi"
TWO_A100 = ROOT / "tests" / "fixtures" / "smi" / "two-a100"
#: Seconds a starter holds its dev container before stopping it.
HOLD = 1.0
#: The most k8s listing polls outstanding at once.
INFLIGHT = 64
GPUS_PER_NODE = 8
SERVICE_TOKEN = secrets.token_hex(16)
#: Requests the stand-in Hub has answered (all of them, in this process).
HUB_REQUESTS = [0]


# -- pure pieces ---------------------------------------------------------------------------------


def percentile(samples: Sequence[float], q: float) -> float:
    """The ``q``-th percentile (0-100) of ``samples``, nearest rank (``nan`` when empty)."""
    if not samples:
        return float("nan")
    ordered = sorted(samples)
    rank = max(1, -(-len(ordered) * q // 100))  # ceil(n * q / 100), at least 1
    return ordered[int(min(rank, len(ordered))) - 1]


@dataclass(frozen=True)
class Resources:
    """One process's footprint: resident memory (KiB), open files, threads, CPU seconds."""

    rss_kib: int
    fds: int
    threads: int
    cpu_s: float


def parse_status(text: str) -> tuple[int, int]:
    """``VmRSS`` (KiB) and ``Threads`` from the text of ``/proc/PID/status``."""
    values: dict[str, int] = {}
    for line in text.splitlines():
        key, _, rest = line.partition(":")
        if key in ("VmRSS", "Threads"):
            values[key] = int(rest.split()[0])
    return values["VmRSS"], values["Threads"]


def parse_cpu(stat: str, ticks: int) -> float:
    """User + system CPU seconds from the text of ``/proc/PID/stat`` (``ticks`` a second)."""
    fields = stat[stat.rindex(")") + 2 :].split()
    return (int(fields[11]) + int(fields[12])) / ticks  # utime, stime: fields 14 and 15


def resources(pid: int) -> Resources:
    proc = Path(f"/proc/{pid}")
    rss, threads = parse_status((proc / "status").read_text())
    cpu = parse_cpu((proc / "stat").read_text(), os.sysconf("SC_CLK_TCK"))
    return Resources(rss, len(os.listdir(proc / "fd")), threads, cpu)


def socket_inodes(table: str) -> set[str]:
    """The inodes of the sockets in the text of ``/proc/net/tcp``, ``tcp6`` or ``unix`` (the
    10th field of a TCP row, the 7th of a unix one; the first line names the columns)."""
    lines = table.splitlines()
    column = 6 if lines and lines[0].startswith("Num") else 9
    return {line.split()[column] for line in lines[1:] if len(line.split()) > column}


def fd_kind(target: str, tcp: set[str], unix: set[str]) -> str:
    """What one open file is, from its ``/proc/PID/fd`` link's target."""
    if target.startswith("socket:["):
        inode = target[8:-1]
        return "tcp" if inode in tcp else "unix" if inode in unix else "socket"
    if target.startswith(("pipe:", "anon_inode:")):
        return target.split(":", 1)[0] if target.startswith("pipe") else target
    return "file"


def fd_kinds(pid: int) -> Counter[str]:
    """The process's open files by kind (tcp, unix, pipe, anon_inode:..., file)."""
    net = Path(f"/proc/{pid}/net")
    tcp = set()
    for name in ("tcp", "tcp6"):
        with contextlib.suppress(OSError):
            tcp |= socket_inodes((net / name).read_text())
    unix = socket_inodes((net / "unix").read_text())
    kinds: Counter[str] = Counter()
    for fd in Path(f"/proc/{pid}/fd").iterdir():
        with contextlib.suppress(OSError):
            kinds[fd_kind(os.readlink(fd), tcp, unix)] += 1
    return kinds


def growth(before: float, after: float) -> float:
    """The growth from ``before`` to ``after`` in percent."""
    return (after - before) / before * 100 if before else float("inf") if after else 0.0


def _measures(footprint: Resources) -> tuple[float, float, float]:
    return footprint.rss_kib / 1024, footprint.fds, footprint.threads


def footprint_rows(
    columns: Sequence[Resources], growths: Sequence[tuple[int, int]], limit: float = 5.0
) -> list[str]:
    """Markdown rows: RSS (MiB), open files and threads in each of ``columns``, then the
    growth from column ``a`` to column ``b`` for each ``(a, b)`` of ``growths``
    (``**finding**`` beyond ``limit`` percent)."""
    rows = []
    measured = [_measures(column) for column in columns]
    for index, what in enumerate(("RSS (MiB)", "open files", "threads")):
        values = [m[index] for m in measured]
        cells = [what, *(f"{value:.0f}" for value in values)]
        for a, b in growths:
            grown = growth(values[a], values[b])
            cells.append(f"{grown:+.1f} %" + (" **finding**" if grown > limit else ""))
        rows.append(f"| {' | '.join(cells)} |")
    return rows


def latency_row(name: str, samples: Sequence[float]) -> str:
    """``| name | n | p50 ms | p99 ms | max ms |``."""
    cells = [percentile(samples, q) * 1000 for q in (50, 99)]
    top = max(samples) * 1000 if samples else float("nan")
    return f"| {name} | {len(samples)} | {cells[0]:.1f} | {cells[1]:.1f} | {top:.1f} |"


# -- HTTP ----------------------------------------------------------------------------------------


class Client:
    """One kept connection to a server on loopback, with a token."""

    def __init__(self, port: int, token: str, timeout: float = 120) -> None:
        self.port, self.token, self.timeout = port, token, timeout
        self.connection: http.client.HTTPConnection | None = None

    def call(self, method: str, path: str, body: Any = None) -> tuple[int, bytes]:
        headers = {"Authorization": f"token {self.token}"}
        data = None
        if body is not None:
            data = json.dumps(body).encode()
            headers["Content-Type"] = "application/json"
        for attempt in (0, 1):
            if self.connection is None:
                self.connection = http.client.HTTPConnection("127.0.0.1", self.port, self.timeout)
            try:
                self.connection.request(method, path, data, headers)
                response = self.connection.getresponse()
                return response.status, response.read()
            except (http.client.RemoteDisconnected, BrokenPipeError, ConnectionResetError):
                self.close()  # a kept connection the server closed: once more on a new one
                if attempt:
                    raise
        raise AssertionError("unreachable")

    def close(self) -> None:
        if self.connection is not None:
            self.connection.close()
            self.connection = None


@dataclass
class Record:
    """Latencies (s) by measure, statuses by measure, the first few unexpected answers."""

    latencies: dict[str, list[float]] = field(default_factory=dict)
    statuses: dict[str, Counter[str]] = field(default_factory=dict)
    unexpected: list[str] = field(default_factory=list)
    #: The server id of the dev containers started (``note_server``).
    server_id: str | None = None
    #: Polls that came a whole period late (a user's panel would have skipped one).
    late: int = 0
    lock: threading.Lock = field(default_factory=threading.Lock)

    def timed(
        self, client: Client, name: str, method: str, path: str, body: Any = None
    ) -> tuple[int, bytes]:
        started = time.perf_counter()
        try:
            status, data = client.call(method, path, body)
        except OSError as exc:
            client.close()
            status, data = 0, repr(exc).encode()
        took = time.perf_counter() - started
        with self.lock:
            self.statuses.setdefault(name, Counter())[str(status or "exception")] += 1
            if status and status < 400:
                self.latencies.setdefault(name, []).append(took)
            elif status != 409 and len(self.unexpected) < 20:
                self.unexpected.append(f"{name}: {status} {data[:300]!r}")
        return status, data


# -- the stand-in Hub and the service ------------------------------------------------------------


def stand_in_hub(users: dict[str, str]) -> http.server.ThreadingHTTPServer:
    """The JupyterHub API as the service asks it who a token is (``shared.identity``), in a
    thread: ``users`` token -> name, each scoped to the service; no administrator. As a Hub
    of 5.0 or later it names each token's id (the service then keeps its answer 60 s; without
    one it asks the Hub twice per request) and says the token does not expire."""
    ids = {token: f"t{index}" for index, token in enumerate(users)}
    names = set(users.values())

    class Hub(http.server.BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            HUB_REQUESTS[0] += 1  # one thread at a time under the GIL: a count, not a lock
            token = self.headers.get("Authorization", "").removeprefix("token ")
            name = users.get(token)
            asked, _, token_id = self.path.removeprefix("/hub/api/users/").partition("/tokens/")
            body: dict[str, Any] | None = None
            if self.path == "/hub/api/user" and name:
                body = {
                    "kind": "user",
                    "name": name,
                    "scopes": ["access:services"],
                    "token_id": ids[token],
                }
            elif token == SERVICE_TOKEN and asked in names and token_id:
                body = {"kind": "api_token", "id": token_id, "expires_at": None}
            elif token == SERVICE_TOKEN and asked in names:
                body = {"kind": "user", "name": asked, "admin": False}
            data = json.dumps(body).encode() if body else b""
            self.send_response(200 if body else 403)
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def log_message(self, *args: Any) -> None:
            pass

    hub = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Hub)
    hub.daemon_threads = True
    threading.Thread(target=hub.serve_forever, daemon=True).start()
    return hub


def free_port() -> int:
    import socket  # noqa: PLC0415

    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@contextlib.contextmanager
def service(
    folder: Path, users: dict[str, str], options: Sequence[str], env: dict[str, str]
) -> Iterator[tuple[subprocess.Popen[bytes], int]]:
    """``jupyter gpudev serve`` with a stand-in Hub naming ``users``; its process and port."""
    hub = stand_in_hub(users)
    port = free_port()
    (folder / "config").mkdir(parents=True, exist_ok=True)
    (folder / "users").mkdir(exist_ok=True)
    log = (folder / "service.log").open("wb")
    argv = [
        sys.executable,
        "-m",
        "jupyter_gpudev",
        "serve",
        f"--port={port}",
        f"--HubIdentityProvider.api_url=http://127.0.0.1:{hub.server_address[1]}/hub/api",
        f"--DevContainers.state_dir={folder / 'state'}",
        f"--GPUDevService.user_root={folder / 'users' / '{user}'}",
        "--DevContainers.stop_timeout=2",
        *(
            options
            or ["--GPUInventory.backend=nvidia-smi", f"--GPUInventory.nvidia_smi_path={FAKE_SMI}"]
        ),
    ]
    process = subprocess.Popen(
        argv,
        env={
            "PATH": os.environ.get("PATH", ""),
            "HOME": str(folder),
            "JUPYTER_CONFIG_DIR": str(folder / "config"),
            "JUPYTER_CONFIG_PATH": "",
            "JUPYTERHUB_API_TOKEN": SERVICE_TOKEN,
            "FAKE_NVIDIA_SMI_DIR": str(TWO_A100),
            **env,
        },
        stdout=log,
        stderr=subprocess.STDOUT,
    )
    log.close()
    try:
        probe = Client(port, next(iter(users)), timeout=10)
        deadline = time.monotonic() + 90
        while True:
            try:
                if probe.call("GET", "/gpudev/api/environments")[0] == 200:
                    break
            except OSError:
                probe.close()
            if process.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError((folder / "service.log").read_text()[-3000:])
            time.sleep(0.2)
        probe.close()
        yield process, port
    finally:
        process.send_signal(signal.SIGTERM)
        try:
            process.wait(60)
        except subprocess.TimeoutExpired:
            print("the service did not stop within 60 s", file=sys.stderr)
            process.kill()
            process.wait(10)
        hub.shutdown()
        hub.server_close()


def note_server(record: Record, name: str) -> None:
    """Keep the server id (label ``L_SERVER``) of the dev container the engine calls ``name``
    (just started), once: ``leftovers()`` then counts that server's containers only."""
    if record.server_id is not None:
        return
    with contextlib.suppress(docker.errors.APIError):
        labels = docker.from_env().api.inspect_container(name)["Config"]["Labels"]
        record.server_id = str(labels[L_SERVER])


def say(*words: object) -> None:
    print(time.strftime("%H:%M:%S"), *words, file=sys.stderr, flush=True)


# -- part 1: the service under load --------------------------------------------------------------


def poller(  # noqa: PLR0917 - one thread's arguments
    port: int, token: str, record: Record, offset: float, stop: float, who: str
) -> None:
    """One user's panel: the containers model's refresh every 2 s until ``stop``; ``who``
    says in the listing's name whether the user starts containers."""
    client = Client(port, token)
    due = time.monotonic() + offset
    while due < stop:
        time.sleep(max(0.0, due - time.monotonic()))
        record.timed(client, f"GET containers ({who})", "GET", "/gpudev/api/containers")
        record.timed(client, "GET environments", "GET", "/gpudev/api/environments")
        due += 2.0
        if due < time.monotonic():  # late by a whole period: that poll is lost, say so
            with record.lock:
                record.late += 1
            due = time.monotonic()
    client.close()


def starter(port: int, token: str, user: str, record: Record, stop: float) -> None:
    """Start (one GPU), hold, stop and remove dev containers until ``stop``."""
    client = Client(port, token)
    count = 0
    while time.monotonic() < stop:
        count += 1
        name = f"load-{count}"
        body = {"environment": "default", "name": name, "gpus": 1}
        status, _ = record.timed(
            client, "POST containers (start)", "POST", "/gpudev/api/containers", body
        )
        if status == 409:
            time.sleep(1.0)
            continue
        if status == 201:
            note_server(record, docker_name(container_key(name, user)))
        if status != 201:
            time.sleep(1.0)
        else:
            time.sleep(HOLD)
            record.timed(client, "POST .../stop", "POST", f"/gpudev/api/containers/{name}/stop")
        record.timed(client, "DELETE container", "DELETE", f"/gpudev/api/containers/{name}?force=1")
    client.close()


def part_service(args: argparse.Namespace, folder: Path) -> list[str]:
    from tests.leaks import Baseline, leftovers  # noqa: PLC0415

    engine = docker.from_env()
    tokens = {secrets.token_hex(16): f"loaduser{i:03d}" for i in range(args.users)}
    state = folder / "state"
    baseline = Baseline.take(engine, state)
    record = Record()
    with service(folder, tokens, [], {}) as (process, port):
        # A warm-up: one start, stop and removal, one listing by each user, then quiet; what
        # the service holds then (its pools made) is what the end is compared with.
        token = next(iter(tokens))
        warm_up = Record()
        starter(port, token, tokens[token], warm_up, time.monotonic() + 0.1)
        record.server_id = warm_up.server_id
        for token in tokens:
            first = Client(port, token)
            first.call("GET", "/gpudev/api/containers")
            first.call("GET", "/gpudev/api/environments")
            first.close()
        time.sleep(args.settle)
        before = resources(process.pid)
        kinds_before = fd_kinds(process.pid)
        hub_before = HUB_REQUESTS[0]
        say(f"service: {args.users} users, {args.starters} starters, {args.duration} s", before)
        stop = time.monotonic() + args.duration

        def who(index: int) -> str:
            return "a user starting containers" if index < args.starters else "other users"

        threads = [
            threading.Thread(
                target=poller,
                args=(port, token, record, 2.0 * i / len(tokens), stop, who(i)),
            )
            for i, token in enumerate(tokens)
        ]
        threads += [
            threading.Thread(target=starter, args=(port, token, tokens[token], record, stop))
            for token in list(tokens)[: args.starters]
        ]
        for thread in threads:
            thread.start()
        samples = [(0.0, before)]
        started = time.monotonic()
        while any(thread.is_alive() for thread in threads):
            threads[0].join(min(args.sample, max(0.1, stop - time.monotonic())))
            if time.monotonic() - started >= len(samples) * args.sample - 0.5:
                samples.append((time.monotonic() - started, resources(process.pid)))
                say("service:", samples[-1])
        for thread in threads:
            thread.join()
        after = resources(process.pid)
        hub_asked = HUB_REQUESTS[0] - hub_before
        time.sleep(args.settle)  # the clients are gone: what the service keeps without them
        settled = resources(process.pid)
        kinds_after = fd_kinds(process.pid)
        log_text = (folder / "service.log").read_text(errors="replace")
        say("service: done", after)
        server_ids = {
            (c.labels or {}).get("org.jupyter.gpudev.server", "")
            for c in engine.containers.list(all=True, filters={"label": "org.jupyter.gpudev.owner"})
        }
    left = leftovers(engine, baseline, state=state, server_id=record.server_id)
    lines = [
        f"{args.users} users polling every 2 s, {args.starters} of them starting, stopping and "
        f"removing dev containers with one GPU of 2 (hold {HOLD:.0f} s, a 409 waits 1 s), "
        f"{args.duration} s.",
        "",
        "| request | answered < 400 | p50 ms | p99 ms | max ms |",
        "| --- | --- | --- | --- | --- |",
    ]
    for name in (
        "GET containers (a user starting containers)",
        "GET containers (other users)",
        "GET environments",
        "POST containers (start)",
        "POST .../stop",
        "DELETE container",
    ):
        lines.append(latency_row(name, record.latencies.get(name, [])))
    lines += ["", "| request | statuses |", "| --- | --- |"]
    for name, counts in sorted(record.statuses.items()):
        lines.append(f"| {name} | {', '.join(f'{k}: {v}' for k, v in sorted(counts.items()))} |")
    lost = record.late
    lines += [
        "",
        f"Polls late by a whole period (skipped): {lost}. Requests to the stand-in Hub during "
        f"the load: {hub_asked}.",
        "",
    ]
    warm = next((r for t, r in samples if t >= args.warm), before)
    lines += [
        f"| service process | idle after a warm-up | after {args.warm:.0f} s of load "
        f"| end of the load | {args.settle:.0f} s later, no client | growth under load "
        f"(from {args.warm:.0f} s to the end) | growth idle to {args.settle:.0f} s after |",
        "| --- | --- | --- | --- | --- | --- | --- |",
    ]
    lines += footprint_rows([before, warm, after, settled], [(1, 2), (0, 3)])
    lines += [
        "",
        "Samples (s into the load: RSS MiB / open files / threads): "
        + ", ".join(f"{t:.0f}: {r.rss_kib / 1024:.0f}/{r.fds}/{r.threads}" for t, r in samples)
        + ".",
    ]
    lines += [
        f"Open files by kind, idle after the warm-up: {dict(sorted(kinds_before.items()))}; "
        f"{args.settle:.0f} s after the load: {dict(sorted(kinds_after.items()))}.",
        f"Service log: {log_text.count('Traceback')} tracebacks, "
        f"{sum(1 for x in log_text.splitlines() if ' 500 ' in x)} lines with a 500.",
    ]
    lines += ["", f"Service CPU seconds over the run: {after.cpu_s - before.cpu_s:.0f}."]
    lines += [f"Leftovers (tests/leaks.py `leftovers()`): {len(left)}", *[f"- {x}" for x in left]]
    lines += [f"Unexpected answers (first {len(record.unexpected)}):"]
    lines += [f"- `{x}`" for x in record.unexpected]
    del server_ids
    return lines


# -- part 2: the soak ----------------------------------------------------------------------------


async def execute(port: int, token: str, kernel_id: str, code: str) -> dict[str, Any]:
    """Run ``code`` over the kernel's websocket; its execute_reply content."""
    from tornado.httpclient import HTTPRequest  # noqa: PLC0415
    from tornado.websocket import websocket_connect  # noqa: PLC0415

    socket = await websocket_connect(
        HTTPRequest(
            f"ws://127.0.0.1:{port}/api/kernels/{kernel_id}/channels",
            headers={"Authorization": f"token {token}"},
        )
    )
    msg_id = uuid.uuid4().hex
    socket.write_message(
        json.dumps(
            {
                "header": {
                    "msg_id": msg_id,
                    "username": "bench",
                    "session": uuid.uuid4().hex,
                    "msg_type": "execute_request",
                    "version": "5.3",
                },
                "parent_header": {},
                "metadata": {},
                "content": {"code": code, "silent": False, "store_history": False},
                "channel": "shell",
            }
        )
    )
    try:
        while True:
            raw = await asyncio.wait_for(socket.read_message(), 120)
            if raw is None:
                raise RuntimeError("the kernel's websocket closed")
            message = json.loads(raw)
            if (
                message.get("parent_header", {}).get("msg_id") == msg_id
                and message["header"]["msg_type"] == "execute_reply"
            ):
                return dict(message["content"])
    finally:
        socket.close()
        with contextlib.suppress(asyncio.TimeoutError):
            while await asyncio.wait_for(socket.read_message(), 10) is not None:
                pass


def soak_cycle(client: Client, record: Record, port: int, token: str, name: str) -> bool:
    """One cycle; whether every step answered as expected."""
    status, _ = record.timed(
        client,
        "start container",
        "POST",
        "/gpudev/api/containers",
        {"environment": "default", "name": name},
    )
    if status != 201:
        return False
    note_server(record, docker_name(name))
    good = True
    status, data = record.timed(
        client, "start kernel", "POST", "/api/kernels", {"name": f"gpudev--{name}"}
    )
    if status == 201:
        kernel_id = json.loads(data)["id"]
        started = time.perf_counter()
        try:
            reply = asyncio.run(execute(port, token, kernel_id, "1+1"))
            with record.lock:
                record.latencies.setdefault("execute 1+1 (connect + reply)", []).append(
                    time.perf_counter() - started
                )
            good = reply.get("status") == "ok"
        except (OSError, RuntimeError, asyncio.TimeoutError) as exc:
            record.unexpected.append(f"execute: {exc!r}")
            good = False
        status, _ = record.timed(client, "shut kernel down", "DELETE", f"/api/kernels/{kernel_id}")
        good = good and status == 204
    else:
        good = False
    status, _ = record.timed(
        client, "remove container", "DELETE", f"/gpudev/api/containers/{name}?force=1"
    )
    return good and status == 204


def where(trace: tracemalloc.Traceback) -> str:
    """The innermost frame of ``trace`` and, when others, its innermost frames in gpudev and in
    jupyter_server, jupyter_client or tornado: where memory was asked for, on whose behalf."""
    frames = list(reversed(trace))  # innermost first
    shown = [frames[0]]
    for package in ("jupyter_gpudev", ("jupyter_server", "jupyter_client", "tornado")):
        names = (package,) if isinstance(package, str) else package
        found = next((f for f in frames if any(f"/{n}/" in f.filename for n in names)), None)
        if found is not None and found not in shown:
            shown.append(found)
    return " <- ".join(f"{short(f.filename)}:{f.lineno}" for f in shown)


def short(filename: str) -> str:
    """A source path from its package on (site-packages and the checkout left off)."""
    for marker in ("site-packages/", "/lib/python3", str(ROOT) + "/"):
        if marker in filename:
            return filename.split(marker, 1)[1].removeprefix(".11/")
    return filename


def compare_memory(
    first: tracemalloc.Snapshot,
    last: tracemalloc.Snapshot,
    types: tuple[dict[str, int], dict[str, int]],
    top: int = 15,
) -> tuple[list[str], list[str]]:
    """The growth from ``first`` to ``last``: Markdown lines (the totals, the ``top`` growing
    allocation sites by traceback and by line, the object types that grew) and a fuller text
    (every growing traceback of the top, all its frames)."""
    ignore = [tracemalloc.Filter(False, tracemalloc.__file__)]
    first, last = first.filter_traces(ignore), last.filter_traces(ignore)
    total = [sum(s.size for s in x.statistics("filename")) for x in (first, last)]
    by_trace = [d for d in last.compare_to(first, "traceback") if d.size_diff > 0][:top]
    by_line = [d for d in last.compare_to(first, "lineno") if d.size_diff > 0][:top]
    lines = [
        f"Traced by tracemalloc: {total[0] / 1024:.0f} KiB at the first dump, "
        f"{total[1] / 1024:.0f} KiB at the last ({(total[1] - total[0]) / 1024:+.0f} KiB).",
        "",
        "| growing allocation site (by traceback) | KiB more | blocks more | where |",
        "| --- | --- | --- | --- |",
    ]
    lines += [
        f"| {n} | {d.size_diff / 1024:+.1f} | {d.count_diff:+d} | `{where(d.traceback)}` |"
        for n, d in enumerate(by_trace, 1)
    ]
    lines += ["", "| growing line | KiB more | blocks more |", "| --- | --- | --- |"]
    lines += [
        f"| `{short(d.traceback[0].filename)}:{d.traceback[0].lineno}` "
        f"| {d.size_diff / 1024:+.1f} | {d.count_diff:+d} |"
        for d in by_line
    ]
    grown = sorted(((types[1].get(k, 0) - types[0].get(k, 0), k) for k in types[1]), reverse=True)[
        :top
    ]
    lines += [
        "",
        "Live objects that grew most by type (after `gc.collect()`): "
        + ", ".join(f"{k} {d:+d} ({types[1][k]})" for d, k in grown if d > 0)
        + ".",
    ]
    full: list[str] = []
    for n, d in enumerate(by_trace, 1):
        full += [
            f"#{n}: {d.size_diff / 1024:+.1f} KiB, {d.count_diff:+d} blocks",
            *d.traceback.format(),
        ]
        full.append("")
    return lines, full


def part_soak(args: argparse.Namespace, folder: Path) -> list[str]:
    import docker  # noqa: PLC0415
    from server import TOKEN, start_server, stop_server  # noqa: PLC0415

    from tests.leaks import Baseline, leftovers  # noqa: PLC0415

    engine = docker.from_env()
    work, state = folder / "work", folder / "state"
    work.mkdir()
    state.mkdir()
    baseline = Baseline.take(engine, state)
    record = Record()
    log = (folder / "server.log").open("w")
    traced = folder / "trace" if args.trace_at else None
    if traced is not None:
        traced.mkdir()
    process, port = start_server(work, state, ["--DevContainers.stop_timeout=2"], log, traced)
    dumps: list[tuple[int, Resources]] = []
    client = Client(port, TOKEN)
    failed = 0
    server_id = None
    try:
        deadline = time.monotonic() + 60
        while True:
            with contextlib.suppress(OSError):
                if client.call("GET", "/api/status")[0] == 200:
                    break
            client.close()
            if time.monotonic() > deadline:
                raise RuntimeError("the server did not start")
            time.sleep(0.2)
        before: Resources | None = None
        samples: list[tuple[int, Resources]] = [(0, resources(process.pid))]
        started = time.monotonic()
        for cycle in range(args.cycles):
            name = f"soak{cycle}-{secrets.token_hex(2)}"
            cycle_started = time.perf_counter()
            if not soak_cycle(client, record, port, TOKEN, name):
                failed += 1
            record.latencies.setdefault("whole cycle", []).append(
                time.perf_counter() - cycle_started
            )
            if cycle == 0:
                before = resources(process.pid)
            if traced is not None:
                trace_step(cycle + 1, process, traced, args.trace_at, dumps)
            if cycle % 25 == 0 or cycle == args.cycles - 1:
                samples.append((cycle + 1, resources(process.pid)))
                say(f"soak: cycle {cycle}, {failed} failed", samples[-1][1])
        took = time.monotonic() - started
        after = resources(process.pid)
        assert before is not None
        left = leftovers(engine, baseline, state=state, server_id=record.server_id)
    finally:
        client.close()
        stop_server(process)
        log.close()
    lines = [
        f"{args.cycles} cycles in {took:.0f} s, {failed} with a step that did not answer as "
        "expected.",
        "",
        "| step | answered < 400 | p50 ms | p99 ms | max ms |",
        "| --- | --- | --- | --- | --- |",
    ]
    for name in (
        "start container",
        "start kernel",
        "execute 1+1 (connect + reply)",
        "shut kernel down",
        "remove container",
        "whole cycle",
    ):
        lines.append(latency_row(name, record.latencies.get(name, [])))
    lines += [
        "",
        "| server process | idle, before | after cycle 1 | after the last | growth from cycle 1 |",
        "| --- | --- | --- | --- | --- |",
    ]
    lines += footprint_rows([samples[0][1], before, after], [(1, 2)])
    lines += [
        "",
        "Samples (after cycle: RSS MiB / open files / threads): "
        + ", ".join(f"{n}: {r.rss_kib / 1024:.0f}/{r.fds}/{r.threads}" for n, r in samples)
        + ".",
    ]
    log_text = (folder / "server.log").read_text(errors="replace")
    lines += [
        f"Server log: {log_text.count('Traceback')} tracebacks, "
        f"{sum(1 for x in log_text.splitlines() if ' 500 ' in x)} lines with a 500."
    ]
    lines += [
        "",
        f"Leftovers (tests/leaks.py `leftovers()`): {len(left)}",
        *[f"- {x}" for x in left],
    ]
    lines += [f"Unexpected answers (first {len(record.unexpected)}):"]
    lines += [f"- `{x}`" for x in record.unexpected]
    if traced is not None and len(dumps) >= 2:  # a first dump and a last
        lines += trace_report(folder, traced, dumps)
    del server_id
    return lines


def trace_report(folder: Path, traced: Path, dumps: list[tuple[int, Resources]]) -> list[str]:
    """Markdown lines comparing the first and last memory dumps of the traced server (after
    which cycle, its footprint then); the fuller text into ``folder``/tracemalloc.log."""
    from server import TRACE_FRAMES  # noqa: PLC0415

    (a, at_a), (b, at_b) = dumps[0], dumps[-1]
    found, full = compare_memory(
        tracemalloc.Snapshot.load(str(traced / "snapshot-1")),
        tracemalloc.Snapshot.load(str(traced / f"snapshot-{len(dumps)}")),
        (
            json.loads((traced / "types-1.json").read_text()),
            json.loads((traced / f"types-{len(dumps)}.json").read_text()),
        ),
    )
    lines = [
        "",
        f"**Under tracemalloc** ({TRACE_FRAMES} frames), dumped after cycles "
        f"{', '.join(str(n) for n, _ in dumps)}: RSS {at_a.rss_kib / 1024:.1f} MiB after "
        f"cycle {a}, {at_b.rss_kib / 1024:.1f} MiB after cycle {b} "
        f"({(at_b.rss_kib - at_a.rss_kib) / max(1, b - a):+.0f} KiB a cycle).",
        "",
        *found,
    ]
    (folder / "tracemalloc.log").write_text("\n".join([*found, "", *full]) + "\n")
    return lines


def trace_step(
    cycle: int,
    process: subprocess.Popen[bytes],
    traced: Path,
    at: Sequence[int],
    dumps: list[tuple[int, Resources]],
) -> None:
    """After ``cycle``: start the tracing after the first (its imports done), a dump after each
    cycle in ``at`` (appended to ``dumps`` with the footprint then)."""
    if cycle == 1:
        dump_memory(process, traced, 0)
    if cycle in at:
        dumps.append((cycle, dump_memory(process, traced, len(dumps) + 1)))


def dump_memory(process: subprocess.Popen[bytes], folder: Path, number: int) -> Resources:
    """Have the traced server (``benchmarks/server.py --traced``) start tracing (``number`` 0)
    or dump its memory (SIGUSR2) and wait for it; its footprint just before."""
    footprint = resources(process.pid)
    process.send_signal(signal.SIGUSR2)
    deadline = time.monotonic() + 600
    while not (folder / f"done-{number}").exists():
        if time.monotonic() > deadline or process.poll() is not None:
            raise RuntimeError(f"the server wrote no memory dump {number}")
        time.sleep(0.2)
    say(f"soak: memory dump {number}", footprint)
    return footprint


# -- part 3: the Kubernetes plan -----------------------------------------------------------------


def k8s_api_server(ready: Path, gpus: int) -> None:
    """The stand-in API server in this process until stdin closes (run by ``--k8s-api``):
    ``tests/k8s_api.py``'s, with nodes holding ``gpus`` GPUs, and ``/bench/requests`` answering
    how many requests it has had. It writes its kubeconfig's path to ``ready``."""
    from tests.k8s_api import APIServer, FakeCluster  # noqa: PLC0415

    nodes = [
        {
            "metadata": {
                "name": f"gpu-a100-{n + 1}",
                "labels": {"nvidia.com/gpu.product": "NVIDIA-A100-SXM4-80GB"},
            },
            "spec": {},
            "status": {
                "capacity": {"nvidia.com/gpu": str(min(GPUS_PER_NODE, gpus - n * GPUS_PER_NODE))},
                "allocatable": {
                    "nvidia.com/gpu": str(min(GPUS_PER_NODE, gpus - n * GPUS_PER_NODE))
                },
                "conditions": [{"type": "Ready", "status": "True"}],
            },
        }
        for n in range(-(-gpus // GPUS_PER_NODE))
    ]

    class Cluster(FakeCluster):
        """Turns pods into watch events only after a write (the stand-in's own cost: it
        would otherwise serialize every pod 50 times a second per open watch)."""

        dirty = True

        def observe(self) -> int:
            if not self.dirty:
                return self.version
            self.dirty = False
            return super().observe()

        def handle(self, method: str, url: str, body: Any) -> tuple[int, Any]:
            if url.startswith("/bench/requests"):
                counts = Counter(
                    ("WATCH" if "watch=" in p else m) + " " + p.split("?", 1)[0].rsplit("/", 1)[-1]
                    for m, p in list(self.requests)
                    if not p.startswith("/bench/")
                )
                return 200, dict(counts)
            if url.split("?", 1)[0] == "/api/v1/nodes":
                return 200, {"kind": "NodeList", "items": nodes}
            if method != "GET":
                with self.lock:
                    self.dirty = True
            answer = super().handle(method, url, body)
            if method != "GET":
                with self.lock:
                    self.dirty = True
            return answer

    cluster = Cluster()
    server = APIServer(cluster)
    config = server.kubeconfig(ready.with_suffix(".kubeconfig"))
    ready.write_text(str(config))
    sys.stdin.read()
    server.close()


def k8s_counts(kubeconfig: Path) -> Counter[str]:
    from tests.k8s_api import TOKEN  # noqa: PLC0415

    server = json.loads(kubeconfig.read_text())["clusters"][0]["cluster"]["server"]
    host, port = server.removeprefix("http://").split(":")
    connection = http.client.HTTPConnection(host, int(port), timeout=30)
    connection.request("GET", "/bench/requests", headers={"Authorization": f"Bearer {TOKEN}"})
    counts = Counter(json.loads(connection.getresponse().read()))
    connection.close()
    return counts


def open_loop(
    port: int, tokens: list[str], rate: float, seconds: float
) -> tuple[list[float], Counter[str], int]:
    """``rate`` polls a second for ``seconds``, each from a random user, at most ``INFLIGHT``
    outstanding: latencies, statuses, polls skipped."""
    latencies: list[float] = []
    statuses: Counter[str] = Counter()
    lock = threading.Lock()
    slots = threading.Semaphore(INFLIGHT)
    free: list[Client] = []
    skipped = 0

    def one(token: str) -> None:
        with lock:
            client = free.pop() if free else Client(port, token)
        client.token = token
        started = time.perf_counter()
        try:
            status, _ = client.call("GET", "/gpudev/api/containers")
        except OSError:
            client.close()
            status = 0
        took = time.perf_counter() - started
        with lock:
            statuses[str(status or "exception")] += 1
            if status == 200:
                latencies.append(took)
            free.append(client)
        slots.release()

    start = time.monotonic()
    count = int(rate * seconds)
    workers: list[threading.Thread] = []
    for n in range(count):
        due = start + n / rate
        time.sleep(max(0.0, due - time.monotonic()))
        if not slots.acquire(blocking=False):
            skipped += 1
            continue
        thread = threading.Thread(target=one, args=(random.choice(tokens),), daemon=True)  # noqa: S311
        thread.start()
        workers.append(thread)
        if len(workers) > 4 * INFLIGHT:
            workers = [w for w in workers if w.is_alive()]
    for thread in workers:
        thread.join(120)
    for client in free:
        client.close()
    return latencies, statuses, skipped


def part_k8s(args: argparse.Namespace, folder: Path) -> list[str]:
    ready = folder / "k8s-ready"
    stand_in = subprocess.Popen(
        [sys.executable, __file__, "--k8s-api", str(ready), "--gpus", str(args.gpus)],
        stdin=subprocess.PIPE,
    )
    rows: list[K8sRun] = []
    made = ""
    try:
        deadline = time.monotonic() + 60
        while not ready.exists() or not ready.read_text():
            if time.monotonic() > deadline or stand_in.poll() is not None:
                raise RuntimeError("the stand-in API server did not start")
            time.sleep(0.1)
        kubeconfig = Path(ready.read_text())
        tokens = {secrets.token_hex(16): f"k8suser{i:04d}" for i in range(args.pods)}
        env = {"KUBECONFIG": str(kubeconfig)}
        for watch in (False, True):
            where = folder / ("watch" if watch else "list")
            where.mkdir()
            (where / "config").mkdir()
            (where / "config" / "jupyter_gpudev_serve_config.json").write_text(
                json.dumps(
                    {
                        "HostPool": {
                            "include_local": False,
                            "hosts": {"cluster": {"url": "k8s://lab-ml/team-ml"}},
                            "hosts_file": str(where / "hosts.json"),
                        },
                        "KubernetesHosts": {
                            "port_forward": "never",
                            "poll_interval": 0.05,
                            "watch": watch,
                        },
                    }
                )
            )
            with service(where, tokens, ["--GPUInventory.backend=none"], env) as (process, port):
                if not watch:
                    made = make_pods(port, tokens)
                for token in list(tokens)[:3]:  # warm up (and, with the watch, open it)
                    Client(port, token).call("GET", "/gpudev/api/containers")
                time.sleep(2)
                counted = k8s_counts(kubeconfig)
                before = resources(process.pid)
                hub_before = HUB_REQUESTS[0]
                say(f"k8s: watch={watch}, {args.rate}/s for {args.k8s_duration} s")
                latencies, statuses, skipped = open_loop(
                    port, list(tokens), args.rate, args.k8s_duration
                )
                after = resources(process.pid)
                hub_asked = HUB_REQUESTS[0] - hub_before
                requests = k8s_counts(kubeconfig) - counted
                cpu = after.cpu_s - before.cpu_s
                rows.append(
                    K8sRun(watch, latencies, statuses, skipped, requests, cpu, after, hub_asked)
                )
                say(f"k8s: watch={watch}", statuses, skipped, dict(requests))
    finally:
        if stand_in.stdin is not None:
            stand_in.stdin.close()
        stand_in.wait(30)
    lines = [
        f"{args.pods} dev pods (one per user, {args.pods // 2} of them with a GPU), "
        f"{-(-args.gpus // GPUS_PER_NODE)} nodes with {args.gpus} GPUs; {args.rate} polls a second "
        f"(GET /gpudev/api/containers, a random user each) for {args.k8s_duration} s, at most "
        f"{INFLIGHT} outstanding. {made}",
        "",
        "| `watch` | polls answered | skipped (64 out) | achieved /s | API requests / poll "
        "| Hub requests / poll | p50 ms | p99 ms | service CPU s | CPU ms / poll "
        "| RSS MiB at end |",
        "| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |",
    ]
    for run in rows:
        polls = sum(run.statuses.values())
        lines.append(
            f"| {'on' if run.watch else 'off'} | {len(run.latencies)} of {polls} | {run.skipped} "
            f"| {len(run.latencies) / args.k8s_duration:.1f} "
            f"| {sum(run.requests.values()) / max(polls, 1):.2f} "
            f"| {run.hub_requests / max(polls, 1):.2f} "
            f"| {percentile(run.latencies, 50) * 1000:.0f} "
            f"| {percentile(run.latencies, 99) * 1000:.0f} | {run.cpu_s:.0f} "
            f"| {run.cpu_s / max(polls, 1) * 1000:.1f} | {run.after.rss_kib / 1024:.0f} |"
        )
    for run in rows:
        lines += [
            "",
            f"watch {'on' if run.watch else 'off'}: statuses {dict(run.statuses)}; "
            f"API requests while polling {dict(run.requests)}",
        ]
    return lines


@dataclass(frozen=True)
class K8sRun:
    """One k8s run's figures."""

    watch: bool
    latencies: list[float]
    statuses: Counter[str]
    skipped: int
    requests: Counter[str]
    cpu_s: float
    after: Resources
    hub_requests: int


def make_pods(port: int, tokens: dict[str, str]) -> str:
    """One dev pod per user, started through the service (half of them with a GPU)."""
    record = Record()
    items = list(tokens)

    def work(offset: int) -> None:
        for index in range(offset, len(items), 4):
            client = Client(port, items[index])
            body = {"environment": "default", "host": "cluster", "name": "dev", "gpus": index % 2}
            record.timed(client, "start pod", "POST", "/gpudev/api/containers", body)
            client.close()

    started = time.monotonic()
    threads = [threading.Thread(target=work, args=(n,)) for n in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    made = (
        f"The pods were started through the service, 4 at a time, in "
        f"{time.monotonic() - started:.0f} s: {dict(record.statuses.get('start pod', {}))}."
    )
    say("k8s:", made, record.unexpected[:3])
    return made


# -- main ----------------------------------------------------------------------------------------


def arguments(argv: Sequence[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0] if __doc__ else None)
    parser.add_argument("--part", action="append", choices=("service", "soak", "k8s"))
    parser.add_argument(
        "--quick", action="store_true", help="a short run: 30 s, 10 users, 10 cycles, 20 s"
    )
    parser.add_argument("--duration", type=float, default=600.0, help="seconds of the service load")
    parser.add_argument("--users", type=int, default=50)
    parser.add_argument("--starters", type=int, default=16)
    parser.add_argument("--cycles", type=int, default=300, help="soak cycles")
    parser.add_argument(
        "--pods", type=int, default=1000, help="dev pods (and users) on the cluster"
    )
    parser.add_argument("--gpus", type=int, default=500, help="GPUs on the cluster's nodes")
    parser.add_argument("--rate", type=float, default=200.0, help="k8s listing polls a second")
    parser.add_argument("--k8s-duration", type=float, default=120.0, help="seconds per k8s run")
    parser.add_argument("--sample", type=float, default=60.0, help="seconds between samples")
    parser.add_argument(
        "--warm",
        type=float,
        default=60.0,
        help="seconds of load before the footprint growth is measured from",
    )
    parser.add_argument(
        "--settle", type=float, default=10.0, help="seconds after the load before the last sample"
    )
    parser.add_argument(
        "--keep-logs", type=Path, help="a folder to copy the servers' logs into at the end"
    )
    parser.add_argument(
        "--trace-at",
        type=int,
        action="append",
        default=[],
        metavar="CYCLE",
        help="trace the soak's server's memory from cycle 1 on (tracemalloc) and dump it after "
        "this cycle (again for more; the first and last dumps are compared)",
    )
    parser.add_argument("--k8s-api", type=Path, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.quick:
        args.duration, args.users, args.starters, args.cycles = 30.0, 10, 4, 10
        args.pods, args.k8s_duration, args.sample, args.warm = 100, 20.0, 5.0, 10.0
        args.settle = 3.0
    return args


def keep_logs(folder: Path, into: Path) -> None:
    """Copy the ``*.log`` files under ``folder`` into ``into`` (their paths kept)."""
    for log in folder.rglob("*.log"):
        target = into / log.relative_to(folder)
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_bytes(log.read_bytes())


def main() -> None:
    args = arguments()
    # SIGTERM ends the run as Ctrl-C does: the servers started are stopped, folders removed
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    if args.k8s_api is not None:
        k8s_api_server(args.k8s_api, args.gpus)
        return
    parts = args.part or ["k8s", "service", "soak"]
    out: list[str] = []
    for part, run in (("k8s", part_k8s), ("service", part_service), ("soak", part_soak)):
        if part not in parts:
            continue
        with tempfile.TemporaryDirectory() as tmp:
            folder = Path(tmp)
            os.chmod(folder, 0o755)  # noqa: S103 - users' folders are made below it
            started = time.monotonic()
            own = resources(os.getpid()).cpu_s
            try:
                lines = run(args, folder)
            finally:
                if args.keep_logs is not None:
                    keep_logs(folder, args.keep_logs / part)
            took = time.monotonic() - started
            own = resources(os.getpid()).cpu_s - own
            load = ", ".join(f"{x:.1f}" for x in os.getloadavg())
            lines += [
                "",
                f"This benchmark's own process: {own:.0f} CPU s; the machine's load average at "
                f"the end: {load} (2 cores).",
            ]
            out += [f"## {part} ({took:.0f} s)", "", *lines, ""]
            print("\n".join(out[-len(lines) - 3 :]), flush=True)
    say("done")


if __name__ == "__main__":
    main()
