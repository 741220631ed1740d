"""What the GPU end-to-end run (``gpu_e2e.py``) is made of: its modes, its record of checks
and figures and their page, the machine (the kernel image, the stand-in driver, NVML) and the
Jupyter server it drives as a user would."""

from __future__ import annotations

import asyncio
import contextlib
import datetime
import json
import os
import stat
import subprocess
import sys
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TextIO

import docker
import timing
from tornado.httpclient import AsyncHTTPClient, HTTPRequest
from tornado.websocket import websocket_connect

ROOT = Path(__file__).resolve().parent.parent
IMAGE = "gpudev-e2e:kernel"
SNAPSHOT = "gpudev-e2e-snapshot:latest"
TOKEN = uuid.uuid4().hex
#: The kernel's site of carried wheels, inside the image.
KERNEL_SITE = "/opt/gpudev-e2e/site"
#: Seconds a GPU kernel may idle before it is reclaimed, and between two looks.
IDLE_TIMEOUT = 12.0
CHECK_INTERVAL = 1.0
#: What a file in a snapshot is called when it is a driver file (the injection's targets).
DRIVER_NAMES = ("libcuda.so", "libnvidia-", "nvidia-smi", "libcudadebugger")


class CheckFailed(Exception):
    """A check of the run failed; the message says which and what was seen."""


@dataclass
class Mode:
    """What differs between a GPU run and ``--no-gpu``."""

    gpu: bool
    #: The Python a kernel runs, inside the container (a mounted folder of the machine's).
    kernel_python: str
    #: Host folders mounted read-only at the same path (the Python's), the allowed roots.
    mounts: tuple[str, ...]
    #: The machine's folders (relative to /) imported as the image.
    image_dirs: tuple[str, ...]

    @classmethod
    def for_run(cls, gpu: bool) -> Mode:
        if gpu:
            python = os.environ.get("GPU_E2E_PYTHON", "/opt/torch/.venv/bin/python3")
            mounts = {str(Path(python).parents[2])}  # /opt/torch
            if not Path(sys.base_prefix).is_relative_to("/usr"):
                mounts.add(sys.base_prefix)  # the venv's interpreter, where no image holds it
            return cls(
                gpu=True,
                kernel_python=python,
                mounts=tuple(sorted(mounts)),
                image_dirs=(
                    "bin",
                    "sbin",
                    "lib",
                    "lib64",
                    "etc",
                    "usr/bin",
                    "usr/sbin",
                    "usr/lib",
                    "usr/lib64",
                ),
            )
        # Here the server's own virtual environment is the kernel's Python; the machine's
        # /usr/lib is gigabytes: only its libraries folder is imported.
        return cls(
            gpu=False,
            kernel_python=str(Path(sys.prefix) / "bin" / "python3"),
            mounts=tuple(sorted({sys.prefix, sys.base_prefix})),
            image_dirs=(
                *("bin", "sbin", "lib", "lib64", "etc", "usr/bin", "usr/sbin", "usr/lib64"),
                "usr/lib/x86_64-linux-gnu",
            ),
        )


@dataclass
class Record:
    """What the run saw: each check and figure, in order, also written to the raw log."""

    log_file: TextIO
    started: float = field(default_factory=time.perf_counter)
    checks: list[tuple[str, bool, str]] = field(default_factory=list)
    figures: list[tuple[str, str]] = field(default_factory=list)
    facts: dict[str, str] = field(default_factory=dict)

    def log(self, message: str) -> None:
        line = f"[{time.perf_counter() - self.started:7.2f} s] {message}"
        print(line, flush=True)
        self.log_file.write(line + "\n")
        self.log_file.flush()

    def check(self, name: str, ok: bool, seen: object = "") -> None:
        self.checks.append((name, ok, str(seen)))
        self.log(f"{'PASS' if ok else 'FAIL'} {name}{f': {seen}' if seen != '' else ''}")
        if not ok:
            raise CheckFailed(f"{name}: {seen}")

    def figure(self, name: str, seconds: float) -> None:
        self.value(name, f"{seconds * 1000:.0f} ms")

    def value(self, name: str, text: str) -> None:
        """A figure already written out (a median of many runs, a ratio)."""
        self.figures.append((name, text))
        self.log(f"FIGURE {name}: {text}")


def wait_for(probe: Callable[[], bool], timeout: float, interval: float = 0.005) -> float | None:
    """Seconds until ``probe()`` is true (``None``: not within ``timeout``)."""
    started = time.perf_counter()
    while True:
        if probe():
            return time.perf_counter() - started
        if time.perf_counter() - started > timeout:
            return None
        time.sleep(interval)


# -- the machine: image, driver stand-in, NVML ------------------------------------------------


def stage_kernel_files(stage: Path, mode: Mode, wheels: Path) -> None:
    """What the image adds to the machine's folders: its kernelspec, the carried kernel
    packages (GPU run), /tmp and /root."""
    kernels = stage / "usr/local/share/jupyter/kernels/python3"
    kernels.mkdir(parents=True)
    argv = ["/usr/bin/env", f"PYTHONPATH={KERNEL_SITE}", mode.kernel_python]
    argv += ["-m", "ipykernel_launcher", "-f", "{connection_file}"]
    spec = {"argv": argv, "display_name": "Python 3 (gpudev e2e)", "language": "python"}
    (kernels / "kernel.json").write_text(json.dumps(spec))
    site = stage / KERNEL_SITE.lstrip("/")
    site.mkdir(parents=True)
    if mode.gpu:
        subprocess.run(
            [sys.executable, "-m", "pip", "install", "--quiet", "--no-index", "--no-deps"]
            + ["--no-compile", "--target", str(site)]
            + [str(w) for w in sorted(wheels.glob("*.whl")) if "jupyter_gpudev" not in w.name],
            check=True,
        )
    (stage / "tmp").mkdir()
    (stage / "tmp").chmod(0o1777)
    (stage / "root").mkdir()


def import_image(engine: docker.DockerClient, mode: Mode, stage: Path) -> str:
    """``docker import`` of a tar of the machine's folders and the staged files; its id."""
    dirs = [d for d in mode.image_dirs if os.path.lexists(f"/{d}")]
    command = ["tar", "--numeric-owner", "-c", "-C", "/", *dirs, "-C", str(stage), "."]
    tar = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL)
    assert tar.stdout is not None
    answer = engine.api.import_image_from_stream(
        tar.stdout, repository=IMAGE.split(":", 1)[0], tag="kernel"
    )
    tar.wait()  # tar exits 1 when a file changed as it read it (/etc here): not a failure
    try:
        return str(engine.images.get(IMAGE).id)
    except docker.errors.ImageNotFound as exc:
        raise CheckFailed(f"docker import made no image: {str(answer)[-2000:]}") from exc


def stand_in_driver(work: Path, smi_dir: Path) -> dict[str, Any]:
    """``--no-gpu``: the driver layout LegacyGPUInjection reads, for the fake inventory's GPU:
    character devices cloned from /dev/null, its /proc information, library files."""
    dev, proc, lib = work / "dev", work / "proc", work / "lib"
    for folder in (dev, proc, lib):
        folder.mkdir()
    for node in ("nvidia0", "nvidiactl", "nvidia-uvm", "nvidia-uvm-tools"):
        os.mknod(dev / node, 0o666 | stat.S_IFCHR, os.makedev(1, 3))
    row = (smi_dir / "query.csv").read_text().splitlines()[0].split(", ")
    bus = row[7].lower()
    bus = f"{bus.split(':', 1)[0][-4:]}:{bus.split(':', 1)[1]}"
    (proc / bus).mkdir()
    (proc / bus / "information").write_text(f"Model: {row[2]}\nDevice Minor: 0\n")
    (lib / "libcuda.so.580.159.04").write_text("a stand-in, not a library")
    (lib / "libcuda.so.1").symlink_to("libcuda.so.580.159.04")
    (lib / "libnvidia-ml.so.1").write_text("a stand-in, not a library")
    return {
        "enabled": True,
        "device_dir": str(dev),
        "proc_dir": str(proc),
        "library_dirs": [str(lib)],
        "binary_dirs": [],
    }


class Nvml:
    """The leased GPU as NVML sees it on the host (GPU run only)."""

    def __init__(self, gpu_uuid: str) -> None:
        import pynvml  # noqa: PLC0415 - only where a GPU is

        self.nvml = pynvml
        pynvml.nvmlInit()
        self.handle = pynvml.nvmlDeviceGetHandleByUUID(gpu_uuid)
        self.idle_used = self.used_mib()

    def used_mib(self) -> int:
        return int(self.nvml.nvmlDeviceGetMemoryInfo(self.handle).used) // 2**20

    def processes(self) -> dict[int, int]:
        """Host PID -> MiB of each compute process on the GPU."""
        found = self.nvml.nvmlDeviceGetComputeRunningProcesses(self.handle)
        return {int(p.pid): int(p.usedGpuMemory or 0) // 2**20 for p in found}

    def in_container(self, container_id: str) -> dict[int, int]:
        return {pid: mib for pid, mib in self.processes().items() if in_cgroup(pid, container_id)}

    def free_of(self, container_id: str) -> bool:
        """No process of the container on the GPU and its memory back to the idle reading."""
        return not self.in_container(container_id) and self.used_mib() <= self.idle_used + 2


def in_cgroup(pid: int, container_id: str) -> bool:
    try:
        return container_id in Path(f"/proc/{pid}/cgroup").read_text()
    except OSError:
        return False


def gpu_facts(gpu_uuid: str) -> dict[str, str]:
    import pynvml  # noqa: PLC0415 - only where a GPU is

    handle = pynvml.nvmlDeviceGetHandleByUUID(gpu_uuid)
    return {
        "GPU": f"{pynvml.nvmlDeviceGetName(handle)} ({gpu_uuid})",
        "driver": str(pynvml.nvmlSystemGetDriverVersion()),
    }


def poll_cost(mode: Mode, runs: int) -> tuple[list[tuple[str, list[float]]], Any]:
    """What one usage poll costs, in-process, as the server reads it (``GPUInventory`` with no
    cache, ``attribute`` through ``LocalProcReader``), against the bare process read: NVML's
    ``nvmlDeviceGetComputeRunningProcesses`` on every GPU (GPU run), the fake ``nvidia-smi``'s
    ``--query-compute-apps`` (``--no-gpu``). The samples of each path, floor first, and the
    attribution of one read."""
    from jupyter_gpudev.engine import (  # noqa: PLC0415 - the server's package, carried
        GPUInventory,
        LocalProcReader,
        attribute,
    )

    reader = LocalProcReader()
    if mode.gpu:
        import pynvml  # noqa: PLC0415 - only where a GPU is

        pynvml.nvmlInit()
        handles = [pynvml.nvmlDeviceGetHandleByIndex(i) for i in range(pynvml.nvmlDeviceGetCount())]
        inventory = GPUInventory(backend="nvml", cache_seconds=0.0)

        def floor() -> None:
            for handle in handles:
                pynvml.nvmlDeviceGetComputeRunningProcesses(handle)

        floor_name = "nvmlDeviceGetComputeRunningProcesses alone, every GPU"

        def utilisation(since: int) -> Callable[[], None]:
            def read() -> None:
                for handle in handles:
                    with contextlib.suppress(pynvml.NVMLError):  # no sample since then
                        pynvml.nvmlDeviceGetProcessUtilization(handle, since)

            return read

        parts = [
            (
                "nvmlDeviceGetGraphicsRunningProcesses alone, every GPU",
                _each(handles, pynvml.nvmlDeviceGetGraphicsRunningProcesses),
            ),
            ("nvmlDeviceGetProcessUtilization alone, every sample kept", utilisation(0)),
            (
                "nvmlDeviceGetProcessUtilization alone, samples of the last second",
                utilisation(int((time.time() - 1) * 1e6)),
            ),
        ]
    else:
        smi = ROOT / "tests" / "fixtures" / "fake-nvidia-smi"
        inventory = GPUInventory(backend="nvidia-smi", nvidia_smi_path=str(smi), cache_seconds=0.0)
        floor = inventory.processes  # type: ignore[assignment]
        floor_name = "the fake nvidia-smi's process read alone"
        parts = []
    try:
        processes = inventory.processes()
        rows = [
            (floor_name, timing.timed(floor, runs)),
            *((name, timing.timed(read, runs)) for name, read in parts),
            (
                "GPUInventory.processes (compute, graphics, samples)",
                timing.timed(inventory.processes, runs),
            ),
            (
                "attribute: /proc to containers",
                timing.timed(lambda: attribute(processes, reader), runs),
            ),
            (
                "a poll: GPUInventory.processes + attribute",
                timing.timed(lambda: attribute(inventory.processes(), reader), runs),
            ),
        ]
        return rows, attribute(inventory.processes(), reader)
    finally:
        inventory.close()


def _each(handles: list[Any], call: Callable[[Any], Any]) -> Callable[[], None]:
    def read() -> None:
        for handle in handles:
            call(handle)

    return read


# -- the server ---------------------------------------------------------------------------------


class Server:
    """A real ``jupyter server`` with gpudev on loopback, reached as a user reaches it."""

    def __init__(self, work: Path, env: dict[str, str], log: TextIO) -> None:
        port = free_port()
        self.base = f"http://127.0.0.1:{port}"
        self.headers = {"Authorization": f"token {TOKEN}"}
        self.process = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "jupyter_server",
                f"--port={port}",
                "--ip=127.0.0.1",
                f"--IdentityProvider.token={TOKEN}",
                f"--ServerApp.root_dir={work / 'root'}",
                "--ServerApp.open_browser=False",
                "--allow-root",
            ],
            env=env,
            stdout=log,
            stderr=subprocess.STDOUT,
        )
        self.http = AsyncHTTPClient()

    async def call(self, method: str, path: str, body: Any = None) -> tuple[int, Any]:
        request = HTTPRequest(
            self.base + path,
            method=method,
            headers=self.headers,
            body=json.dumps(body) if body is not None else None,
            request_timeout=300,
        )
        response = await self.http.fetch(request, raise_error=False)
        if response.code == 599:
            raise OSError(f"{method} {path}: {response.error}")
        text = response.body.decode() if response.body else ""
        try:
            return response.code, json.loads(text) if text else None
        except ValueError:
            return response.code, text

    async def ready(self) -> None:
        deadline = time.monotonic() + 90
        while True:
            if self.process.poll() is not None:
                raise CheckFailed("the server exited at its start (see server.log)")
            try:
                status, _ = await self.call("GET", "/api/status")
            except OSError:
                status = 0
            if status == 200:
                return
            if time.monotonic() > deadline:
                raise CheckFailed("the server did not answer within 90 s")
            await asyncio.sleep(0.2)

    async def execute(self, kernel_id: str, code: str, timeout: float = 180) -> dict[str, Any]:
        """Run ``code`` in the kernel through its websocket; its last printed JSON line. Run
        once more when the reply came without it: a websocket opened just after the kernel
        started may miss the first output on its iopub channel (seen once in CI)."""
        try:
            return await self._execute(kernel_id, code, timeout)
        except CheckFailed as first:
            if "printed no result" not in str(first):
                raise
        return await self._execute(kernel_id, code, timeout)

    async def _execute(self, kernel_id: str, code: str, timeout: float) -> dict[str, Any]:
        ws = await websocket_connect(
            HTTPRequest(
                f"{self.base.replace('http', 'ws', 1)}/api/kernels/{kernel_id}/channels",
                headers=self.headers,
            )
        )
        msg_id = uuid.uuid4().hex
        header = {"msg_id": msg_id, "msg_type": "execute_request", "username": "e2e"}
        header |= {"session": uuid.uuid4().hex, "version": "5.3", "date": ""}
        content = {"code": code, "silent": False, "store_history": False}
        content |= {"user_expressions": {}, "allow_stdin": False, "stop_on_error": True}
        ws.write_message(
            json.dumps(
                {
                    "header": header,
                    "parent_header": {},
                    "metadata": {},
                    "channel": "shell",
                    "buffers": [],
                    "content": content,
                }
            )
        )
        out: list[str] = []
        deadline = time.monotonic() + timeout
        try:
            while True:
                raw = await asyncio.wait_for(ws.read_message(), deadline - time.monotonic())
                if raw is None:
                    raise CheckFailed("the kernel's websocket closed")
                msg = json.loads(raw)
                if msg.get("parent_header", {}).get("msg_id") != msg_id:
                    continue
                kind = msg.get("msg_type")
                if kind == "stream":
                    out.append(str(msg["content"].get("text", "")))
                elif kind == "error":
                    out.append("\n".join(msg["content"].get("traceback", [])))
                elif kind == "execute_reply":
                    break
        finally:
            ws.close()
        lines = [line for line in "".join(out).splitlines() if line.startswith("{")]
        if not lines:
            raise CheckFailed(f"the kernel printed no result: {''.join(out)[-2000:]}")
        return dict(json.loads(lines[-1]))

    def close(self) -> None:
        self.process.terminate()
        try:
            self.process.wait(30)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait(10)


def free_port() -> int:
    import socket  # noqa: PLC0415

    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def write_environments(root: Path, mode: Mode) -> None:
    mounts = [f"source={m},target={m},type=bind,readonly" for m in mode.mounts]
    for name, gpu in (("e2e", True), ("cpu", False)):
        folder = root / ".devcontainer" / name
        folder.mkdir(parents=True)
        spec: dict[str, Any] = {"name": name, "image": IMAGE, "mounts": mounts}
        if gpu:
            spec["hostRequirements"] = {"gpu": True}
        (folder / "devcontainer.json").write_text(json.dumps(spec))


def server_config(work: Path, mode: Mode, network: str, injection: dict[str, Any]) -> Any:
    inventory: dict[str, Any] = {"backend": "nvml"}
    if not mode.gpu:
        smi = ROOT / "tests" / "fixtures" / "fake-nvidia-smi"
        inventory = {"backend": "nvidia-smi", "nvidia_smi_path": str(smi)}
    return {
        "ServerApp": {"jpserver_extensions": {"jupyter_gpudev": True}},
        "DevContainers": {
            "state_dir": str(work / "state"),
            "port_guard": False,  # the firewall chain is this machine's: never touched
            "network": network,
        },
        "GPUInventory": inventory,
        "LegacyGPUInjection": injection,
        "MountPolicy": {"allowed_roots": list(mode.mounts)},
        "GPUCuller": {
            "idle_timeout": IDLE_TIMEOUT,
            "check_interval": CHECK_INTERVAL,
            "warning_seconds": 0.0,
        },
        "WarmKernels": {"count": 0},
    }


# -- results ------------------------------------------------------------------------------------


def render(record: Record, outcome: str) -> str:
    date = datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC")
    lines = [
        "# GPU end to end (`scripts/gpu-e2e.sh`)",
        "",
        f"Run {date}: **{outcome}** in {time.perf_counter() - record.started:.0f} s.",
        "",
        *(f"- {key}: {value}" for key, value in record.facts.items()),
        "",
        "| figure | value |",
        "| --- | --- |",
        *(f"| {name} | {value} |" for name, value in record.figures),
        "",
        "| check | result |",
        "| --- | --- |",
        *(
            f"| {name} | {'passed' if ok else 'FAILED: ' + seen[:300]} |"
            for name, ok, seen in record.checks
        ),
        "",
    ]
    return "\n".join(lines)
