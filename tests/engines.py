"""A Docker engine of the tests' own: a second ``dockerd`` from this machine's binaries.

Fault tests stop and start an engine; doing that to the machine's engine would kill every other
test's containers. :func:`run_engine` starts ``dockerd`` (which starts and stops a ``containerd``
of its own) with everything of its own under one temporary folder: data root, exec root, unix
socket, pidfile, log. It runs in a network namespace of its own (``unshare --net``: started
with ``--bridge=none`` on this machine, dockerd deletes ``docker0``, the machine engine's
bridge), with no iptables rules, no IP masquerading, no default bridge, and its own address
pool (``10.214.0.0/16``; ``10.213.0.0/16`` is ``scripts/gpu-e2e.sh``'s). Like
the engine ``scripts/setup.sh`` starts for the test suite, it has the stand-in NVIDIA hook on its
PATH (``tests/fixtures/nvidia-hook``), so containers with a GPU DeviceRequest start.

:meth:`Engine.stop` is ``systemctl stop docker``: SIGTERM, and without live-restore the engine
stops its containers on the way down. :meth:`Engine.start` starts it again on the same data
root. The context manager's exit tears it all down: the engine stopped (killed if it must be),
what it left mounted under its folder unmounted, the bridges of its pool deleted, the folder
removed. It needs root (mounts, a daemon); :func:`why_not` says why not where it cannot run.
:func:`session_engine` is the one engine of a test session (each fault module's ``engine``
fixture asks it).
"""

from __future__ import annotations

import contextlib
import ipaddress
import json
import os
import shutil
import signal
import socket
import subprocess
import tempfile
import time
from collections.abc import Iterable, Iterator
from pathlib import Path

import docker
import docker.errors
import pytest

HOOK = Path(__file__).parent / "fixtures" / "nvidia-hook"
POOL = "10.214.0.0/16"
#: The images the fault tests use, loaded once per session.
TEST_IMAGES = ("gpudev-base:bookworm", "gpudev-python:bookworm")
_SESSION = pytest.StashKey["Engine"]()


def _tool(name: str) -> str:
    """The full path of a program on PATH (``name`` itself when it is not found)."""
    return shutil.which(name) or name


def why_not() -> str | None:
    """Why a dedicated engine cannot run here (``None``: it can)."""
    if os.geteuid() != 0:
        return "a dedicated Docker engine needs root (a daemon of its own, mounts)"
    if shutil.which("dockerd") is None:
        return "no dockerd on PATH (scripts/setup.sh installs docker.io)"
    return None


class Engine:
    """One dedicated engine; ``url`` is its ``unix://`` address."""

    def __init__(self, folder: Path) -> None:
        self.folder = folder
        self.socket = folder / "docker.sock"
        self.url = f"unix://{self.socket}"
        self.log = folder / "dockerd.log"
        self._process: subprocess.Popen[bytes] | None = None
        self._client: docker.DockerClient | None = None

    @property
    def pid(self) -> int | None:
        return self._process.pid if self._process is not None else None

    def client(self) -> docker.DockerClient:
        """A client of this engine (one, kept; a new one after each start)."""
        if self._client is None:
            self._client = docker.DockerClient(base_url=self.url, timeout=120)
        return self._client

    def answers(self) -> bool:
        """Whether it answers ``/_ping`` (a plain socket: no client left half-open)."""
        try:
            with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as conn:
                conn.settimeout(5)
                conn.connect(str(self.socket))
                conn.sendall(b"GET /_ping HTTP/1.0\r\nHost: engine\r\n\r\n")
                reply = b""
                while chunk := conn.recv(4096):
                    reply += chunk
        except OSError:
            return False
        return reply.startswith(b"HTTP/1.") and b" 200 " in reply.split(b"\r\n", 1)[0]

    def start(self, timeout: float = 60.0) -> None:
        """Start ``dockerd`` on this folder's data root; return once it answers."""
        if self._process is not None and self._process.poll() is None:
            raise RuntimeError("the dedicated engine is already running")
        config = self.folder / "daemon.json"
        config.write_text(json.dumps({"live-restore": False}))
        env = dict(os.environ)
        env["PATH"] = f"{HOOK}{os.pathsep}{env.get('PATH', '')}"
        env.pop("DOCKER_HOST", None)
        with self.log.open("ab") as log:
            self._process = subprocess.Popen(
                [
                    # A network namespace of its own: dockerd deletes the interface docker0
                    # (the machine engine's bridge) when it starts with --bridge=none, and
                    # once more when it starts again on its data root.
                    _tool("unshare"),
                    "--net",
                    "--",
                    _tool("dockerd"),
                    "--config-file",
                    str(config),
                    "--data-root",
                    str(self.folder / "data"),
                    "--exec-root",
                    str(self.folder / "exec"),
                    "--pidfile",
                    str(self.folder / "dockerd.pid"),
                    "--host",
                    self.url,
                    "--iptables=false",
                    "--ip-masq=false",
                    "--bridge=none",
                    "--default-address-pool",
                    f"base={POOL},size=24",
                ],
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=subprocess.STDOUT,
                env=env,
                start_new_session=True,  # a Ctrl-C of pytest is not the engine's
            )
        self._drop_client()
        deadline = time.monotonic() + timeout
        while not self.answers():
            if self._process.poll() is not None:
                raise RuntimeError(f"the dedicated engine exited: {self.tail()}")
            if time.monotonic() > deadline:
                raise RuntimeError(f"the dedicated engine did not answer: {self.tail()}")
            time.sleep(0.1)

    def stop(self, timeout: float = 60.0) -> None:
        """SIGTERM, as a service manager stops it; it stops its containers on the way down.
        Killed (with its containerd) when it has not exited within ``timeout``."""
        self._drop_client()
        process = self._process
        if process is None or process.poll() is not None:
            return
        process.send_signal(signal.SIGTERM)
        try:
            process.wait(timeout)
        except subprocess.TimeoutExpired:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(process.pid, signal.SIGKILL)
            process.wait(10)

    def restart(self) -> None:
        self.stop()
        self.start()

    def tail(self, lines: int = 20) -> str:
        try:
            return "\n".join(self.log.read_text(errors="replace").splitlines()[-lines:])
        except OSError:
            return "(no log)"

    def load(self, images: Iterable[str]) -> None:
        """Copy ``images`` from the machine's engine (``docker save | docker load``)."""
        names = list(images)
        if not names:
            return
        base = dict(os.environ)
        base.pop("DOCKER_HOST", None)
        save = subprocess.Popen([_tool("docker"), "save", *names], stdout=subprocess.PIPE, env=base)
        assert save.stdout is not None
        try:
            loaded = subprocess.run(
                [_tool("docker"), "--host", self.url, "load", "--quiet"],
                stdin=save.stdout,
                capture_output=True,
                check=False,
                env=base,
            )
        finally:
            save.stdout.close()
            save.wait()
        if save.returncode != 0 or loaded.returncode != 0:
            raise RuntimeError(f"images not loaded: {loaded.stderr.decode(errors='replace')}")

    def close(self) -> None:
        """Stop it and remove everything it made: mounts, bridges, its folder."""
        self.stop(timeout=30)
        # Whatever is left of its process group (its containerd, shims).
        if self._process is not None:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(self._process.pid, signal.SIGKILL)
        for target in sorted(_mounts_under(self.folder), reverse=True):  # deepest first
            subprocess.run([_tool("umount"), "-l", target], capture_output=True, check=False)
        for bridge in _bridges_in(POOL):
            subprocess.run(
                [_tool("ip"), "link", "delete", bridge], capture_output=True, check=False
            )
        shutil.rmtree(self.folder, ignore_errors=True)

    def _drop_client(self) -> None:
        if self._client is not None:
            with contextlib.suppress(Exception):
                self._client.close()
            self._client = None


def _mounts_under(folder: Path) -> list[str]:
    prefix = f"{folder}/"
    found = []
    for line in Path("/proc/self/mountinfo").read_text().splitlines():
        target = line.split()[4].encode().decode("unicode_escape")
        if target.startswith(prefix) or target == str(folder):
            found.append(target)
    return found


def _bridges_in(pool: str) -> list[str]:
    """The ``br-*`` interfaces with an address in ``pool`` (networks the engine made; never
    another engine's: the pool is this module's own)."""
    network = ipaddress.ip_network(pool)
    shown = subprocess.run(
        [_tool("ip"), "-o", "-4", "addr", "show"], capture_output=True, text=True, check=False
    ).stdout
    found = set()
    for line in shown.splitlines():
        words = line.split()
        if len(words) < 4 or not words[1].startswith("br-"):
            continue
        with contextlib.suppress(ValueError):
            if ipaddress.ip_interface(words[3]).ip in network:
                found.add(words[1])
    return sorted(found)


@contextlib.contextmanager
def run_engine(images: Iterable[str] = ()) -> Iterator[Engine]:
    """A dedicated engine, started, with ``images`` loaded from the machine's engine; torn
    down fully on exit, whatever happened."""
    folder = Path(tempfile.mkdtemp(prefix="gpudev-engine-", dir="/tmp"))
    engine = Engine(folder)
    try:
        engine.start()
        engine.load(images)
        yield engine
    finally:
        engine.close()


def session_engine(config: pytest.Config) -> Engine:
    """The session's dedicated engine with ``TEST_IMAGES``: started on first use (a skip
    saying why where it cannot run), torn down when the session ends."""
    engine = config.stash.get(_SESSION, None)
    if engine is None:
        reason = why_not()
        if reason is not None:
            pytest.skip(reason)
        stack = contextlib.ExitStack()
        config.add_cleanup(stack.close)
        engine = stack.enter_context(run_engine(TEST_IMAGES))
        config.stash[_SESSION] = engine
    return engine
