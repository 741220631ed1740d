"""The server on a busy engine (#36 item 3): what a user waits for with many running dev
containers and other users acting at once, against the same on an idle engine.

Through a real Jupyter server with the extension (``server.py``: a subprocess on loopback, its
REST API and a kernel's websocket), three measures, each taken twice:

- **kernel round trip**: ``1+1`` executed on a ``gpudev--NAME`` kernel (a pinned dev
  container's) over its websocket, from the ``execute_request`` sent to its ``execute_reply``;
- **listing**: ``GET /gpudev/api/containers`` (what the panel asks every 5 s, change counts
  included);
- **start**: ``POST /gpudev/api/containers`` of a dev container with no GPU, to its answer
  (the container running), removed after each sample.

**Idle**: only the kernel's container is running (of this run: the engine may have others).
**Busy**: ``--containers`` (40) more running dev containers, each with a changed file (so each
has a change count to keep), and ``--users`` (4) threads acting as users through the same REST
API in a loop: start a container, list, stop it, list, remove it. Medians, the busy/idle ratio,
and where the listing's time goes: ``DevContainers.list(count_changes=True)`` profiled in this
process (cProfile) on the busy engine, every count to compute (a first listing) and kept.

Run: ``.venv/bin/python benchmarks/bench_busy.py [--quick]`` (engine + kernel image needed);
``--quick``: 10 containers, 2 users, a few samples. Markdown on stdout, progress on stderr.
"""

from __future__ import annotations

import argparse
import contextlib
import cProfile
import io
import json
import pstats
import statistics
import sys
import tempfile
import threading
import time
import uuid
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import docker
import requests
import websocket
from server import HEADERS, start_server, stop_server
from traitlets.config import Config

from jupyter_gpudev.changes.capture import ChangeCapture
from jupyter_gpudev.changes.tracker import ChangeCounts, ChangeTracker, track_changes
from jupyter_gpudev.containers import DevContainers, docker_name
from jupyter_gpudev.engine import HostPool
from jupyter_gpudev.labels import L_NAME

#: Every container of a run is named with this and the run's own tag (removed at the end).
PREFIX = "busy"
#: How long one REST call may take before the run fails.
TIMEOUT = 300


@dataclass(frozen=True)
class Sizes:
    containers: int
    users: int
    round_trips: int
    listings: int
    starts: int


FULL = Sizes(containers=40, users=4, round_trips=30, listings=20, starts=5)
QUICK = Sizes(containers=10, users=2, round_trips=8, listings=6, starts=2)


def say(*words: object) -> None:
    print(time.strftime("%H:%M:%S"), *words, file=sys.stderr, flush=True)


class Rest:
    """The server's REST API (one session per thread: ``requests`` sessions are not shared)."""

    def __init__(self, port: int) -> None:
        self.base = f"http://127.0.0.1:{port}"
        self.session = requests.Session()
        self.session.headers.update(HEADERS)

    def call(self, method: str, path: str, body: Any = None) -> Any:
        response = self.session.request(method, self.base + path, json=body, timeout=TIMEOUT)
        if response.status_code >= 400:
            raise RuntimeError(f"{method} {path}: {response.status_code} {response.text[:300]}")
        return response.json() if response.content else None

    def ready(self) -> None:
        """Wait (up to 120 s) for the server to answer."""
        deadline = time.monotonic() + 120
        while True:
            try:
                self.call("GET", "/api/status")
            except requests.ConnectionError:
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.2)
            else:
                return

    def timed(self, method: str, path: str, body: Any = None) -> float:
        started = time.perf_counter()
        self.call(method, path, body)
        return time.perf_counter() - started

    def start(self, name: str) -> float:
        return self.timed(
            "POST", "/gpudev/api/containers", {"environment": "default", "name": name, "gpus": 0}
        )

    def remove(self, name: str) -> None:
        self.call("DELETE", f"/gpudev/api/containers/{name}?force=1")


class Kernel:
    """A kernel started through the REST API, its websocket open."""

    def __init__(self, rest: Rest, port: int, spec: str) -> None:
        self.rest = rest
        self.id = str(rest.call("POST", "/api/kernels", {"name": spec})["id"])
        self.ws = websocket.create_connection(
            f"ws://127.0.0.1:{port}/api/kernels/{self.id}/channels",
            header=[f"{k}: {v}" for k, v in HEADERS.items()],
            timeout=120,
        )
        self.session = uuid.uuid4().hex
        self.request("kernel_info_request", {})  # ready

    def request(self, msg_type: str, content: dict[str, Any]) -> dict[str, Any]:
        """Send a shell request; its reply (``*_reply`` with this request as parent)."""
        msg_id = uuid.uuid4().hex
        header = {
            "msg_id": msg_id,
            "msg_type": msg_type,
            "username": "bench",
            "session": self.session,
            "version": "5.3",
            "date": "",
        }
        message = {"header": header, "parent_header": {}, "metadata": {}, "content": content}
        self.ws.send(json.dumps({**message, "channel": "shell", "buffers": []}))
        reply_type = msg_type.replace("_request", "_reply")
        while True:
            raw = self.ws.recv()
            if not raw:
                raise RuntimeError("the kernel's websocket closed")
            msg = json.loads(raw)
            parent = msg.get("parent_header", {}).get("msg_id")
            if msg.get("msg_type") == reply_type and parent == msg_id:
                return dict(msg["content"])

    def round_trip(self) -> float:
        started = time.perf_counter()
        reply = self.request("execute_request", {"code": "1+1", "silent": False})
        elapsed = time.perf_counter() - started
        if reply.get("status") != "ok":
            raise RuntimeError(f"1+1 failed: {reply}")
        return elapsed

    def close(self) -> None:
        self.ws.close()
        self.rest.call("DELETE", f"/api/kernels/{self.id}")


@dataclass
class Users:
    """Threads acting as users: each starts a container, lists, stops it, lists, removes it,
    until told to stop; what each action took."""

    port: int
    tag: str
    count: int
    stop: threading.Event = field(default_factory=threading.Event)
    samples: dict[str, list[float]] = field(
        default_factory=lambda: {"start": [], "list": [], "stop": [], "remove": []}
    )
    errors: list[str] = field(default_factory=list)
    threads: list[threading.Thread] = field(default_factory=list)
    lock: threading.Lock = field(default_factory=threading.Lock)

    def begin(self) -> None:
        for user in range(self.count):
            thread = threading.Thread(target=self._act, args=(user,), daemon=True)
            thread.start()
            self.threads.append(thread)

    def _record(self, action: str, seconds: float) -> None:
        with self.lock:
            self.samples[action].append(seconds)

    def _act(self, user: int) -> None:
        rest = Rest(self.port)
        turn = 0
        while not self.stop.is_set():
            name = f"{PREFIX}{self.tag}u{user}n{turn}"
            turn += 1
            try:
                self._record("start", rest.start(name))
                self._record("list", rest.timed("GET", "/gpudev/api/containers"))
                self._record("stop", rest.timed("POST", f"/gpudev/api/containers/{name}/stop"))
                self._record("list", rest.timed("GET", "/gpudev/api/containers"))
                started = time.perf_counter()
                rest.remove(name)
                self._record("remove", time.perf_counter() - started)
            except (RuntimeError, requests.RequestException) as exc:
                with self.lock:
                    self.errors.append(f"user {user}: {exc}")
                with contextlib.suppress(RuntimeError, requests.RequestException):
                    rest.remove(name)

    def end(self) -> None:
        self.stop.set()
        for thread in self.threads:
            thread.join(TIMEOUT)


def samples_of(measure: Callable[[], float], runs: int) -> list[float]:
    return [measure() for _ in range(runs)]


def measure_all(
    rest: Rest, kernel: Kernel, tag: str, phase: str, sizes: Sizes
) -> dict[str, list[float]]:
    """The three measures, the samples of each interleaved (a slow moment of the shared
    machine falls on all three, not on one)."""
    found: dict[str, list[float]] = {"round trip": [], "listing": [], "start": []}
    rounds = max(sizes.round_trips, sizes.listings, sizes.starts)
    for index in range(rounds):
        if index < sizes.round_trips:
            found["round trip"].append(kernel.round_trip())
        if index < sizes.listings:
            found["listing"].append(rest.timed("GET", "/gpudev/api/containers"))
        if index < sizes.starts:
            name = f"{PREFIX}{tag}{phase}s{index}"
            found["start"].append(rest.start(name))
            rest.remove(name)
    return found


def profile_listing(root: Path, state: Path) -> tuple[list[str], float, float]:
    """``DevContainers.list(count_changes=True)`` in this process on the engine as it is,
    profiled: every count to compute (a first listing), then with the counts kept. The
    listing's own thread and the threads that count (several at once: their profiles merged)
    are profiled apart. The profiles' top functions by cumulative time (the listing computing,
    its counting threads: gpudev's functions, then the engine calls; the listing with counts
    kept), and the two listings' wall times."""
    config = Config()
    config.DevContainers.state_dir = str(state)
    manager = DevContainers(root_dir=root, host_pool=HostPool(config=config), config=config)
    track_changes(manager)
    tracker = manager.changes
    assert isinstance(tracker, ChangeTracker)
    counting: list[cProfile.Profile] = []
    lock = threading.Lock()
    # Each count, and the command log a capture reads meanwhile in a thread of its own,
    # profiled in the thread that runs it.
    wrapped = [(ChangeCounts, "_compute"), (ChangeCapture, "commands")]
    originals = [getattr(cls, name) for cls, name in wrapped]

    def profiled(method: Callable[..., Any]) -> Callable[..., Any]:
        def call(*args: Any) -> Any:
            profile = cProfile.Profile()  # the calling thread's only
            profile.enable()
            try:
                return method(*args)
            finally:
                profile.disable()
                with lock:
                    counting.append(profile)

        return call

    texts: list[str] = []
    walls: list[float] = []
    try:
        for (cls, name), method in zip(wrapped, originals, strict=True):
            setattr(cls, name, profiled(method))
        for fresh in (True, False):
            if fresh:
                tracker.counts = ChangeCounts()
            profile = cProfile.Profile()
            started = time.perf_counter()
            profile.enable()
            manager.list(count_changes=True)
            profile.disable()
            walls.append(time.perf_counter() - started)
            texts.append(top_functions(pstats.Stats(profile), None, 14))
            if fresh:
                tracker.counts.wait()
                merged = pstats.Stats(counting[0]) if counting else None
                for more in counting[1:]:
                    merged = merged.add(more) if merged is not None else None
                texts.append(
                    top_functions(merged, "jupyter_gpudev", 30) if merged else "nothing counted"
                )
                texts.append(
                    top_functions(merged, "docker/(api|models)/", 14)
                    if merged
                    else "nothing counted"
                )
    finally:
        for (cls, name), method in zip(wrapped, originals, strict=True):
            setattr(cls, name, method)
        tracker.close()
        manager.host_pool.close()
    return texts, walls[0], walls[1]


def top_functions(stats: pstats.Stats, only: str | None, top: int) -> str:
    """The ``top`` functions by cumulative time (``only``: those whose path matches)."""
    out = io.StringIO()
    stats.stream = out  # type: ignore[attr-defined]
    stats.sort_stats("cumulative")
    if only is None:
        stats.print_stats(top)
    else:
        stats.print_stats(only, top)
    return out.getvalue()


def median_ms(values: Sequence[float]) -> float:
    return statistics.median(values) * 1000 if values else float("nan")


def spread(values: Sequence[float]) -> str:
    if not values:
        return "none"
    low, high = min(values) * 1000, max(values) * 1000
    return f"{median_ms(values):.0f} ({low:.0f}-{high:.0f}, n={len(values)})"


def sweep(engine: docker.DockerClient, tag: str) -> None:
    """Remove every container of this run still there (its names start with its tag)."""
    for container in engine.containers.list(all=True, filters={"label": L_NAME}):
        if str(container.labels.get(L_NAME, "")).startswith(f"{PREFIX}{tag}"):
            say("removing leftover", container.name)
            container.remove(force=True)


def arguments(argv: Sequence[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--quick", action="store_true", help="10 containers, 2 users, few samples")
    parser.add_argument("--containers", type=int, help="running dev containers when busy")
    parser.add_argument("--users", type=int, help="threads acting as users when busy")
    return parser.parse_args(argv)


def main() -> None:
    args = arguments()
    sizes = QUICK if args.quick else FULL
    if args.containers is not None:
        sizes = replace(sizes, containers=args.containers)
    if args.users is not None:
        sizes = replace(sizes, users=args.users)
    engine = docker.from_env()
    tag = uuid.uuid4().hex[:6]
    with tempfile.TemporaryDirectory() as tmp:
        root, state = Path(tmp) / "work", Path(tmp) / "state"
        root.mkdir()
        state.mkdir()
        log = (state / "server.log").open("w")
        process, port = start_server(root, state, [], log)
        rest = Rest(port)
        kernel: Kernel | None = None
        users: Users | None = None
        background: list[str] = []
        try:
            rest.ready()
            box = f"{PREFIX}{tag}kernel"
            rest.start(box)
            rest.call("PUT", f"/gpudev/api/containers/{box}/pin")
            kernel = Kernel(rest, port, f"gpudev--{box}")
            say("idle: measuring")
            idle = measure_all(rest, kernel, tag, "idle", sizes)
            say("busy: starting", sizes.containers, "containers")
            for index in range(sizes.containers):
                name = f"{PREFIX}{tag}b{index}"
                rest.start(name)
                background.append(name)
                engine.containers.get(docker_name(name)).exec_run(
                    ["/bin/sh", "-c", "echo busy > /etc/busy-bench"], user="0"
                )
            first_listing = rest.timed("GET", "/gpudev/api/containers")
            listed = len(rest.call("GET", "/gpudev/api/containers")["containers"])
            users = Users(port, tag, sizes.users)
            users.begin()
            say("busy: measuring with", sizes.users, "users")
            busy = measure_all(rest, kernel, tag, "busy", sizes)
            say("busy: profiling the listing")
            profiles, cold_wall, kept_wall = profile_listing(root, state)
            users.end()
        finally:
            if users is not None:
                users.end()
            if kernel is not None:
                kernel.close()
            for name in background:
                try:
                    rest.remove(name)
                except (RuntimeError, requests.RequestException) as exc:
                    say("could not remove", name, exc)
            try:
                rest.remove(f"{PREFIX}{tag}kernel")
            except (RuntimeError, requests.RequestException) as exc:
                say("could not remove the kernel's container:", exc)
            stop_server(process)
            log.close()
            sweep(engine, tag)
    report(sizes, idle, busy, users, first_listing, listed, cold_wall, kept_wall)
    titles = (
        "The listing profiled, every count to compute: its own thread",
        "Its counting threads and their command-log reads, merged (gpudev's functions)",
        "Its counting threads, merged (the engine calls, docker SDK)",
        "The listing profiled, counts kept",
    )
    for title, text in zip(titles, profiles, strict=True):
        print(f"\n### {title} (top by cumulative time)\n")
        print("```\n" + trimmed(text) + "\n```")


def trimmed(text: str) -> str:
    """A pstats listing without its blank lines and with paths shortened."""
    lines = [line for line in text.splitlines() if line.strip()]
    shorter = {str(Path(sys.prefix)): "<venv>", str(Path(__file__).resolve().parent.parent): "."}
    for old, new in shorter.items():
        lines = [line.replace(old, new) for line in lines]
    return "\n".join(lines)


def report(  # noqa: PLR0917 - the run's figures, printed once
    sizes: Sizes,
    idle: dict[str, list[float]],
    busy: dict[str, list[float]],
    users: Users,
    first_listing: float,
    listed: int,
    cold_wall: float,
    kept_wall: float,
) -> None:
    print(
        f"## {sizes.containers} running dev containers, {sizes.users} users, against idle\n\n"
        f"The busy listing listed {listed} containers (this run's, its users' and any other on "
        "the engine). Medians in ms (min-max, samples).\n"
    )
    print("| measure | idle | busy | busy / idle |")
    print("| --- | --- | --- | --- |")
    for name in ("round trip", "listing", "start"):
        ratio = median_ms(busy[name]) / median_ms(idle[name])
        print(f"| {name} | {spread(idle[name])} | {spread(busy[name])} | {ratio:.2f} |")
    print(
        f"\nFirst listing after the {sizes.containers} containers got their changes (every "
        f"count to compute): {first_listing * 1000:.0f} ms.\n"
    )
    print("The users' own actions while busy (ms):\n")
    print("| action | median (min-max, n) |")
    print("| --- | --- |")
    for action, values in users.samples.items():
        print(f"| {action} | {spread(values)} |")
    if users.errors:
        print(f"\n{len(users.errors)} user errors; first: {users.errors[0][:300]}")
    print(
        f"\nIn-process listing while busy: every count to compute {cold_wall * 1000:.0f} ms, "
        f"counts kept {kept_wall * 1000:.0f} ms."
    )


if __name__ == "__main__":
    main()
