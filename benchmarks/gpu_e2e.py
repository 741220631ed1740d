"""The GPU end-to-end run (``scripts/gpu-e2e.sh run`` on a GPU machine, ``--no-gpu`` here).

Against an engine that ``scripts/gpu-e2e.sh`` started for it (its own data root and socket,
``DOCKER_HOST``), as a user would, through a real Jupyter server's REST API and kernel
websockets:

1. a kernel-capable image from the machine's own Python: ``docker import`` of a tar of the
   machine's folders (and a kernelspec whose argv runs the machine's Python, with the carried
   ``ipykernel`` on its path); the Python's folders are allowed read-only mounts;
2. ``jupyter server`` with gpudev: the real NVML inventory and ``LegacyGPUInjection`` (with
   ``--no-gpu``: the recorded H200 of the fake ``nvidia-smi`` and a stand-in driver layout,
   character devices cloned from ``/dev/null``, so that leases, the 409, idle reclaim and the
   snapshot's driver filter run too), a short ``GPUCuller.idle_timeout``;
3. a dev container with one GPU: exactly the leased GPU visible (``nvidia-smi -L`` and CUDA's
   device count: GPU only); a second start asking for a GPU gets the 409 naming the holder; a
   container without a GPU sees none; ``jupyter gpudev commit --snapshot`` of the first, and no
   driver file in the snapshot;
4. a kernel from the environment's picker entry runs a CUDA matrix product (plain Python with
   ``--no-gpu``) and the result is checked; NVML lists its process and
   ``GET /gpudev/api/usage?kernel=ID`` reports NVML's memory for it (GPU only); the cost of
   a usage poll (the server's process read and attribution, in-process) against the bare read
   (``nvmlDeviceGetComputeRunningProcesses`` on every GPU; ``--no-gpu``: the fake
   ``nvidia-smi``'s), and that it puts the kernel's process in its container (GPU only);
   DELETE, then the time until NVML shows the GPU free (``--no-gpu``: until the lease is
   released);
5. a second kernel left idle is reclaimed, its GPU (lease) freed, its container stopped;
6. floors: a local ipykernel (no container, the machine's Python) running the same code, from
   ``shutdown_kernel`` until NVML shows its process off the GPU (``--no-gpu``: until it is
   gone), orderly and killed; GPU only: ``docker run`` of the same image, devices and mounts
   with the same Python code to its first CUDA result; ``docker stop`` of such a container
   until NVML shows the GPU free.

Results: ``gpu-e2e.md`` (machine, driver, date, each figure and check), ``gpu-e2e.log``, the
server's log and ``results.json`` in the results folder; on a GPU run also
``benchmarks/results/gpu-e2e.md``. Never run by hand: the shell script starts and stops the
engine around it.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import platform
import shutil
import statistics
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import docker
from docker.types import Mount
from gpu_e2e_parts import (
    CHECK_INTERVAL,
    DRIVER_NAMES,
    IDLE_TIMEOUT,
    IMAGE,
    ROOT,
    SNAPSHOT,
    CheckFailed,
    Mode,
    Nvml,
    Record,
    Server,
    gpu_facts,
    import_image,
    poll_cost,
    render,
    server_config,
    stage_kernel_files,
    stand_in_driver,
    wait_for,
    write_environments,
)

#: The same code in a kernel and in the floor's ``docker run``: a matrix product on the GPU,
#: checked exactly (integers times 2I) and against float64 on the CPU; one JSON line.
CUDA_CODE = """
import json, os, torch
a = (torch.arange(512 * 512, device="cuda", dtype=torch.float32).reshape(512, 512) % 7) - 3
exact = bool(torch.equal(a @ (2 * torch.eye(512, device="cuda")), 2 * a))
x = torch.randn(512, 512, device="cuda")
y = torch.randn(512, 512, device="cuda")
z = (x @ y).double().cpu()
error = float(((z - x.double().cpu() @ y.double().cpu()).abs().max()).item())
props = torch.cuda.get_device_properties(0)
print(json.dumps({"ok": exact and error < 1e-2, "error": error, "pid": os.getpid(),
    "device_count": torch.cuda.device_count(), "name": props.name, "uuid": str(props.uuid)}))
"""
#: Timed runs of each path of the poll's cost on a GPU run (five with ``--no-gpu``: each read
#: of the fake ``nvidia-smi`` there is a Python process start).
POLL_RUNS = 200
#: Shutdowns of a local ipykernel timed for the floor, orderly and killed.
LOCAL_RUNS = 3
#: Without a GPU: plain Python, checked the same way.
CPU_CODE = """
import json, os
print(json.dumps({"ok": sum(i * i for i in range(100)) == 328350, "pid": os.getpid(),
    "device_count": 0}))
"""
#: The floor of "GPU freed": a process holding GPU memory until it is stopped.
HOLD_CODE = """
import sys, time, torch
x = torch.ones(256 * 2**20, device="cuda")
torch.cuda.synchronize()
print("ready", flush=True)
time.sleep(600)
"""


# -- the run ------------------------------------------------------------------------------------


def container_env(container: Any) -> dict[str, str]:
    pairs = (item.split("=", 1) for item in container.attrs["Config"]["Env"] or [])
    return dict(pairs)


def exec_text(container: Any, argv: list[str]) -> tuple[int, str]:
    code, output = container.exec_run(argv)
    return int(code), output.decode(errors="replace") if isinstance(output, bytes) else ""


def driver_files(engine: docker.DockerClient, image: str) -> set[str]:
    """Files of ``image`` named like the driver's (on its root file system)."""
    expr = " -o ".join(f"-name '{name}*'" for name in DRIVER_NAMES)
    script = (
        f"find / -xdev \\( -type f -o -type l \\) \\( {expr} -o -path '/usr/local/nvidia/*' \\)"
        " -print 2>/dev/null; true"
    )
    output = engine.containers.run(image, ["sh", "-c", script], remove=True, network_mode="none")
    return set(output.decode().split())


def probe_bridge(engine: docker.DockerClient, record: Record) -> str:
    """The network dev containers join: gpudev's own bridge where this kernel has bridges
    and veth pairs, else (said plainly) the host's network."""
    try:
        net = engine.networks.create("gpudev-e2e-probe", driver="bridge")
        try:
            engine.containers.run(IMAGE, ["true"], remove=True, network=net.name)
        finally:
            net.remove()
    except docker.errors.DockerException as exc:
        record.log(f"NOTE bridge networking failed here ({exc}): this run uses the host network")
        record.facts["network"] = "host (bridge networking failed on this machine)"
        return "host"
    record.facts["network"] = "bridge (gpudev's own network)"
    return "gpudev"


async def wait_async(probe: Callable[[], Any], timeout: float, interval: float = 0.01) -> float:
    """Seconds until the coroutine ``probe()`` is true; CheckFailed after ``timeout``."""
    started = time.perf_counter()
    while not await probe():
        if time.perf_counter() - started > timeout:
            raise CheckFailed(f"not within {timeout} s")
        await asyncio.sleep(interval)
    return time.perf_counter() - started


@contextlib.contextmanager
def watching(
    probe: Callable[[], bool], timeout: float
) -> Iterator[tuple[threading.Event, list[float | None]]]:
    """A thread that, once ``go`` is set, polls ``probe`` every 5 ms; the seconds it took
    land in the list (``None``: not within ``timeout``)."""
    go = threading.Event()
    result: list[float | None] = []

    def watch() -> None:
        go.wait()
        result.append(wait_for(probe, timeout))

    thread = threading.Thread(target=watch, daemon=True)
    thread.start()
    yield go, result
    go.set()
    thread.join(timeout + 5)


async def run(mode: Mode, work: Path, results: Path, record: Record) -> None:
    engine = docker.DockerClient(base_url=os.environ["DOCKER_HOST"], timeout=600)
    waited = wait_for(lambda: _pings(engine), 60, 0.2)
    if waited is None:
        raise CheckFailed("the engine did not answer within 60 s (see engine.log)")
    version = engine.version()
    record.facts["engine"] = f"Docker Engine {version.get('Version')} (started by the script)"
    record.facts["machine"] = f"{platform.node()}, Linux {platform.release()}"
    record.facts["mode"] = "GPU" if mode.gpu else "--no-gpu (the fake nvidia-smi's H200)"

    record.log("image: docker import of the machine's folders")
    stage = work / "stage"
    stage_kernel_files(stage, mode, ROOT / ".gpu-e2e" / "wheels")
    started = time.perf_counter()
    import_image(engine, mode, stage)
    record.figure("docker import of the machine's folders (the kernel image)", _since(started))
    network = probe_bridge(engine, record)

    smi_dir = ROOT / "tests" / "fixtures" / "smi" / "h200"
    injection: dict[str, Any] = {"enabled": True}
    if not mode.gpu:
        driver = work / "driver"
        driver.mkdir()
        injection = stand_in_driver(driver, smi_dir)
    (work / "config").mkdir()
    config = server_config(work, mode, network, injection)
    (work / "config" / "jupyter_server_config.json").write_text(json.dumps(config, indent=1))
    write_environments(work / "root", mode)
    env = {
        **os.environ,
        "JUPYTER_CONFIG_DIR": str(work / "config"),
        "JUPYTER_DATA_DIR": str(work / "data"),
        "JUPYTER_RUNTIME_DIR": str(work / "runtime"),
        "FAKE_NVIDIA_SMI_DIR": str(smi_dir),
    }
    with (results / "server.log").open("w") as server_log:
        server = Server(work, env, server_log)
        try:
            await server.ready()
            await user_steps(
                mode=mode, work=work, engine=engine, server=server, env=env, record=record
            )
        finally:
            server.close()
            for container in engine.containers.list(all=True):
                with contextlib.suppress(docker.errors.DockerException):
                    container.remove(force=True)
            for net in engine.networks.list(names=["gpudev"]):
                with contextlib.suppress(docker.errors.DockerException):
                    net.remove()


def _pings(engine: docker.DockerClient) -> bool:
    try:
        return bool(engine.ping())
    except docker.errors.DockerException:
        return False


def _since(started: float) -> float:
    return time.perf_counter() - started


async def user_steps(
    *,
    mode: Mode,
    work: Path,
    engine: docker.DockerClient,
    server: Server,
    env: dict[str, str],
    record: Record,
) -> None:
    # A dev container with one GPU
    started = time.perf_counter()
    status, dev = await server.call(
        "POST", "/gpudev/api/containers", {"environment": "e2e", "name": "leaseholder", "gpus": 1}
    )
    record.check("a dev container with one GPU starts", status == 201, (status, dev))
    record.figure("POST a dev container with one GPU, to running", _since(started))
    leased = list(dev["gpu_uuids"])
    record.check("it holds a lease of exactly one GPU", len(leased) == 1, leased)
    gpu = leased[0]
    nvml = Nvml(gpu) if mode.gpu else None
    if mode.gpu:
        record.facts.update(gpu_facts(gpu))
    else:
        record.facts["GPU"] = f"none: the fake nvidia-smi's H200 ({gpu}) and stand-in devices"
    container = engine.containers.get(dev["container_id"])
    seen = container_env(container).get("NVIDIA_VISIBLE_DEVICES")
    record.check("NVIDIA_VISIBLE_DEVICES is the leased GPU", seen == gpu, seen)
    devices = sorted(d["PathInContainer"] for d in container.attrs["HostConfig"]["Devices"] or [])
    record.check(
        "the GPU's device node and the control nodes are passed", "/dev/nvidia0" in devices, devices
    )
    if mode.gpu:
        code, listing = exec_text(container, ["/usr/local/nvidia/bin/nvidia-smi", "-L"])
        uuids = [line for line in listing.splitlines() if line.startswith("GPU ")]
        record.check(
            "nvidia-smi -L inside lists exactly the leased GPU",
            code == 0 and len(uuids) == 1 and gpu in uuids[0],
            listing.strip(),
        )
        count = await asyncio.to_thread(
            exec_text,
            container,
            [mode.kernel_python, "-c", "import torch; print(torch.cuda.device_count())"],
        )
        record.check("CUDA inside counts one device", count[1].strip().endswith("1"), count)

    # A second start asking for a GPU: 409, naming the holder
    status, refused = await server.call(
        "POST", "/gpudev/api/containers", {"environment": "e2e", "name": "second", "gpus": 1}
    )
    message = json.dumps(refused)
    record.check("a second GPU start gets 409", status == 409, (status, refused))
    record.check("the 409 names the holder", "leaseholder" in message, message)

    # A container without a GPU sees none
    status, cpu = await server.call(
        "POST", "/gpudev/api/containers", {"environment": "cpu", "name": "nogpu"}
    )
    record.check("a container without a GPU starts", status == 201, (status, cpu))
    record.check("it holds no lease", not cpu["gpu_uuids"], cpu["gpu_uuids"])
    plain = engine.containers.get(cpu["container_id"])
    code, _ = exec_text(plain, ["sh", "-c", "ls /dev/nvidia*"])
    record.check("it has no /dev/nvidia* node", code != 0, code)
    if mode.gpu:
        count = await asyncio.to_thread(
            exec_text,
            plain,
            [mode.kernel_python, "-c", "import torch; print(torch.cuda.device_count())"],
        )
        record.check("CUDA inside it counts no device", count[1].strip().endswith("0"), count)

    # commit --snapshot of the GPU container: its change kept, no driver file
    code, _ = exec_text(container, ["sh", "-c", "echo e2e > /opt/gpudev-e2e-change.txt"])
    record.check("a change is written in the dev container", code == 0, code)
    started = time.perf_counter()
    commit = await asyncio.to_thread(
        subprocess.run,
        [
            *(sys.executable, "-c", "from jupyter_gpudev.cli import main; main()"),
            *("commit", "leaseholder", "--snapshot", SNAPSHOT, f"--root-dir={work / 'root'}"),
        ],
        env=env,
        capture_output=True,
        text=True,
        check=False,
    )
    record.log(f"commit: {commit.stdout.strip()} {commit.stderr.strip()[-2000:]}")
    record.check(
        "jupyter gpudev commit --snapshot succeeds", commit.returncode == 0, commit.returncode
    )
    record.figure("jupyter gpudev commit --snapshot (CLI)", _since(started))
    base_files = await asyncio.to_thread(driver_files, engine, IMAGE)
    snap_files = await asyncio.to_thread(driver_files, engine, SNAPSHOT)
    record.check(
        "no driver file in the snapshot", not (snap_files - base_files), snap_files - base_files
    )
    kept = engine.containers.run(
        SNAPSHOT, ["cat", "/opt/gpudev-e2e-change.txt"], remove=True, network_mode="none"
    )
    record.check("the snapshot has the change", kept.decode().strip() == "e2e", kept)
    for name in ("leaseholder", "nogpu"):
        status, _ = await server.call("DELETE", f"/gpudev/api/containers/{name}?force=1")
        record.check(f"DELETE {name}", status == 204, status)

    # A kernel from the environment's picker entry
    status, specs = await server.call("GET", "/api/kernelspecs")
    spec = "gpudev-e2e"
    record.check(
        "the picker has the environment's entry",
        spec in specs["kernelspecs"],
        sorted(specs["kernelspecs"]),
    )
    kernel_code = CUDA_CODE if mode.gpu else CPU_CODE
    started = time.perf_counter()
    status, kernel = await server.call("POST", "/api/kernels", {"name": spec})
    record.check("a kernel starts from the picker entry", status == 201, (status, kernel))
    result = await server.execute(kernel["id"], kernel_code)
    cold = _since(started)
    record.check("the kernel's result is right", bool(result.get("ok")), result)
    record.figure(
        "cold start: POST /api/kernels to the first result" + (" (CUDA)" if mode.gpu else ""), cold
    )
    status, where = await server.call("GET", f"/gpudev/api/kernels/{kernel['id']}")
    record.check("the kernel's container holds the leased GPU", where["gpu_uuids"] == [gpu], where)
    kernel_container = engine.containers.get(f"gpudev-{where['container']}")
    floor_args: dict[str, Any] = {}
    if mode.gpu:
        assert nvml is not None
        record.check(
            "CUDA in the kernel sees one device, the leased one",
            result["device_count"] == 1 and result["uuid"] in gpu,
            result,
        )
        procs = nvml.in_container(str(kernel_container.id))
        record.check("NVML lists the kernel's process on the GPU", bool(procs), procs)

        async def usage_matches() -> bool:
            _, usage = await server.call("GET", f"/gpudev/api/usage?kernel={kernel['id']}")
            gpus = (usage or {}).get("kernel", {}).get("gpus", [])
            mine = sum(nvml.in_container(str(kernel_container.id)).values())
            return bool(gpus) and gpus[0].get("memory_used_mib") == mine

        try:
            await wait_async(usage_matches, 5, 0.5)
            matched = True
        except CheckFailed:
            matched = False
        _, usage = await server.call("GET", f"/gpudev/api/usage?kernel={kernel['id']}")
        record.check(
            "usage?kernel= reports NVML's memory of its process",
            matched,
            (usage, nvml.in_container(str(kernel_container.id))),
        )
        floor_args = same_devices(kernel_container)
    await measure_poll(mode=mode, gpu=gpu, container_id=str(kernel_container.id), record=record)
    release = await shut_down(
        mode=mode,
        work=work,
        server=server,
        kernel_id=kernel["id"],
        container=kernel_container,
        name=where["container"],
        nvml=nvml,
    )
    record.figure(
        "DELETE /api/kernels/ID to the GPU free by NVML"
        if mode.gpu
        else "DELETE /api/kernels/ID to the lease released",
        release,
    )

    # Idle reclaim
    status, idle = await server.call("POST", "/api/kernels", {"name": spec})
    record.check("a second kernel starts", status == 201, (status, idle))
    await server.execute(idle["id"], kernel_code)
    idle_since = time.perf_counter()
    _, where = await server.call("GET", f"/gpudev/api/kernels/{idle['id']}")
    idle_container = engine.containers.get(f"gpudev-{where['container']}")

    async def reclaimed() -> bool:
        status, _ = await server.call("GET", f"/api/kernels/{idle['id']}")
        return status == 404

    await wait_async(reclaimed, IDLE_TIMEOUT + 10 * CHECK_INTERVAL + 30, 0.05)
    record.figure(
        f"idle reclaim: last activity to the kernel gone (idle_timeout {IDLE_TIMEOUT:.0f} s)",
        _since(idle_since),
    )

    released = lease_probe(work, where["container"])
    last_seen: list[Any] = []

    async def freed() -> bool:
        _, info = await server.call("GET", f"/gpudev/api/containers/{where['container']}")
        last_seen[:] = [info]
        stopped = isinstance(info, dict) and info.get("state") not in ("running", None)
        done = stopped and info.get("lease_id") is None and released()
        if mode.gpu and nvml is not None:
            done = done and nvml.free_of(str(idle_container.id))
        return done

    try:
        took = await wait_async(freed, 30, 0.05)
    except CheckFailed:
        took = None
    record.check(
        "the reclaimed kernel's container is stopped and kept, its lease released"
        + (", its GPU free by NVML" if mode.gpu else ""),
        took is not None,
        last_seen,
    )

    local = await local_kernel_floor(mode=mode, code=kernel_code, nvml=nvml, record=record)
    record.facts["against a local ipykernel"] = (
        f"{'GPU freed' if mode.gpu else 'lease released'} {release / local:.2f}x a local "
        f"ipykernel's orderly shutdown ({(release - local) * 1000:.0f} ms more)"
    )
    if mode.gpu:
        await floors(
            engine=engine,
            mode=mode,
            args=floor_args,
            nvml=nvml,
            cold=cold,
            release=release,
            record=record,
        )


async def measure_poll(*, mode: Mode, gpu: str, container_id: str, record: Record) -> None:
    """The cost of a usage poll against the bare process read (the issue's goal: at most 2x),
    with the kernel's process on the GPU; on a GPU run, that the poll puts it in its
    container."""
    runs = POLL_RUNS if mode.gpu else 5
    rows, attribution = await asyncio.to_thread(poll_cost, mode, runs)
    medians = [statistics.median(samples) for _, samples in rows]
    for (name, samples), median in zip(rows, medians, strict=True):
        p90 = statistics.quantiles(samples, n=10)[-1] if len(samples) > 1 else median
        record.value(
            f"poll cost ({len(samples)} runs): {name}",
            f"median {median * 1000:.3f} ms, p90 {p90 * 1000:.3f} ms",
        )
    record.value(
        "poll cost: a poll / the bare process read",
        f"{medians[-1] / medians[0]:.2f}x",
    )
    record.facts["poll cost"] = (
        f"a usage poll {medians[-1] / medians[0]:.2f}x the bare process read "
        f"({medians[-1] * 1000:.3f} ms against {medians[0] * 1000:.3f} ms)"
    )
    if mode.gpu:
        use = attribution.gpu(gpu)
        found = [p for p in (use.processes if use else ()) if p.container_id == container_id]
        record.check(
            "the poll attributes the kernel's GPU process to its container",
            bool(found),
            attribution.to_json(),
        )


def same_devices(container: Any) -> dict[str, Any]:
    """The devices, driver mounts and environment of a kernel's container, for the floor."""
    host = container.attrs["HostConfig"]
    devices = [
        f"{d['PathOnHost']}:{d['PathInContainer']}:{d['CgroupPermissions']}"
        for d in host.get("Devices") or []
    ]
    mounts = [
        Mount(m["Destination"], m["Source"], type="bind", read_only=not m.get("RW", False))
        for m in container.attrs["Mounts"]
        if m.get("Type") == "bind"
    ]
    env = container_env(container)
    keep = ("LD_LIBRARY_PATH", "NVIDIA_VISIBLE_DEVICES", "CUDA_DEVICE_ORDER")
    return {
        "devices": devices,
        "mounts": mounts,
        "environment": {k: env[k] for k in keep if k in env},
    }


async def shut_down(
    *,
    mode: Mode,
    work: Path,
    server: Server,
    kernel_id: str,
    container: Any,
    name: str,
    nvml: Nvml | None,
) -> float:
    """DELETE the kernel; the seconds until NVML shows its GPU free (GPU run) or its lease is
    released (``--no-gpu``), watched from outside the server."""
    if mode.gpu:
        assert nvml is not None
        probe = lambda: nvml.free_of(str(container.id))  # noqa: E731
    else:
        probe = lease_probe(work, name)
    with watching(probe, 60) as (go, result):
        await asyncio.sleep(0.1)
        go.set()
        status, _ = await server.call("DELETE", f"/api/kernels/{kernel_id}")
        if status != 204:
            raise CheckFailed(f"DELETE /api/kernels/{kernel_id}: {status}")
        while not result:  # noqa: ASYNC110 - the watcher is a thread
            await asyncio.sleep(0.005)
    if result[0] is None:
        raise CheckFailed("the GPU was not freed within 60 s of the DELETE")
    return float(result[0])


def lease_probe(work: Path, name: str) -> Callable[[], bool]:
    """Whether the dev container ``name`` holds no lease any more (the server's ledger, read
    from outside it)."""
    from jupyter_gpudev.leasing import LeaseLedger  # noqa: PLC0415 - after the server's start

    ledger = LeaseLedger(work / "state" / "leases.sqlite")
    return lambda: ledger.for_container("local", name) is None


async def local_kernel_floor(*, mode: Mode, code: str, nvml: Nvml | None, record: Record) -> float:
    """The floor of a kernel's shutdown: an ipykernel of this machine's Python, no container,
    started by jupyter_client, running the same code; from ``shutdown_kernel`` until NVML shows
    its process off the GPU (``--no-gpu``: until its process is gone), orderly (``now=False``,
    as a DELETE asks) and killed (``now=True``). Each ``LOCAL_RUNS`` times; the orderly
    median is returned."""
    from jupyter_client.manager import AsyncKernelManager  # noqa: PLC0415

    def gone(pid: int) -> Callable[[], bool]:
        if mode.gpu:
            assert nvml is not None
            return lambda: pid not in nvml.processes()
        return lambda: not _alive(pid)

    medians: dict[bool, float] = {}
    for now in (False, True):
        samples = []
        for _ in range(LOCAL_RUNS):
            manager = AsyncKernelManager(kernel_name="python3")
            await manager.start_kernel()
            client = manager.client()
            client.start_channels()
            try:
                await client.wait_for_ready(timeout=120)
                reply = await client.execute_interactive(code, timeout=180)
                if reply["content"]["status"] != "ok":
                    raise CheckFailed(f"the local kernel's code failed: {reply['content']}")
            finally:
                client.stop_channels()
            provisioner = manager.provisioner
            pid = getattr(provisioner, "pid", None)
            if pid is None:
                raise CheckFailed("the local kernel has no process id")
            probe = gone(int(pid))
            if probe():
                raise CheckFailed(f"the local kernel's process {pid} is not seen before shutdown")
            with watching(probe, 60) as (go, result):
                await asyncio.sleep(0.1)
                go.set()
                await manager.shutdown_kernel(now=now)
                while not result:  # noqa: ASYNC110 - the watcher is a thread
                    await asyncio.sleep(0.005)
            if result[0] is None:
                raise CheckFailed("the local kernel's process was not gone within 60 s")
            samples.append(float(result[0]))
        medians[now] = statistics.median(samples)
        record.value(
            f"floor: a local ipykernel, shutdown_kernel(now={now}) to its process "
            + ("off the GPU by NVML" if mode.gpu else "gone")
            + f" (median of {LOCAL_RUNS})",
            f"{medians[now] * 1000:.0f} ms ({', '.join(f'{t * 1000:.0f}' for t in samples)})",
        )
    return medians[False]


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    # A child not yet reaped still answers: its state tells.
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] != "Z"
    except (OSError, IndexError):
        return False


async def floors(
    *,
    engine: docker.DockerClient,
    mode: Mode,
    args: dict[str, Any],
    nvml: Nvml | None,
    cold: float,
    release: float,
    record: Record,
) -> None:
    """The same image, devices and mounts with ``docker run`` (init): to the first CUDA
    result, and ``docker stop`` until NVML shows the GPU free."""
    assert nvml is not None
    started = time.perf_counter()
    floor = engine.containers.run(
        IMAGE,
        [mode.kernel_python, "-c", CUDA_CODE],
        detach=True,
        init=True,
        network_mode="none",
        **args,
    )
    found = wait_for(lambda: b'"ok"' in floor.logs(), 180, 0.02)
    record.check("the floor's docker run computes", found is not None, floor.logs()[-2000:])
    floor_cold = _since(started)
    floor.remove(force=True)
    record.figure(
        "floor: docker run of the same image and devices to the first CUDA result", floor_cold
    )
    holder = engine.containers.run(
        IMAGE,
        [mode.kernel_python, "-c", HOLD_CODE],
        detach=True,
        init=True,
        network_mode="none",
        **args,
    )
    ready = wait_for(lambda: b"ready" in holder.logs(), 180, 0.02)
    record.check(
        "the floor's holder holds GPU memory",
        ready is not None and bool(nvml.in_container(str(holder.id))),
        holder.logs()[-2000:],
    )
    with watching(lambda: nvml.free_of(str(holder.id)), 60) as (go, result):
        await asyncio.sleep(0.1)
        go.set()
        holder.stop(timeout=10)
        while not result:  # noqa: ASYNC110
            await asyncio.sleep(0.005)
    holder.remove(force=True)
    if result[0] is None:
        raise CheckFailed("the floor's GPU was not freed within 60 s of docker stop")
    record.figure("floor: docker stop to the GPU free by NVML", result[0])
    record.facts["ratios"] = (
        f"cold start {cold / floor_cold:.2f}x the floor; GPU freed {release / result[0]:.2f}x "
        f"the floor ({(release - result[0]) * 1000:.0f} ms more)"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--no-gpu", action="store_true")
    parser.add_argument("--work", type=Path, required=True)
    parser.add_argument("results", type=Path)
    options = parser.parse_args()
    options.results.mkdir(parents=True, exist_ok=True)
    mode = Mode.for_run(gpu=not options.no_gpu)
    with (options.results / "gpu-e2e.log").open("w") as log_file:
        record = Record(log_file)
        outcome = "passed"
        try:
            asyncio.run(run(mode, options.work, options.results, record))
        except Exception as exc:  # whatever broke, the results say it
            outcome = f"FAILED: {exc}"
            record.log(outcome)
        page = render(record, outcome)
        (options.results / "gpu-e2e.md").write_text(page)
        (options.results / "results.json").write_text(
            json.dumps(
                {
                    "outcome": outcome,
                    "facts": record.facts,
                    "figures": record.figures,
                    "checks": record.checks,
                },
                indent=1,
            )
        )
        if mode.gpu:
            shutil.copy(
                options.results / "gpu-e2e.md", ROOT / "benchmarks" / "results" / "gpu-e2e.md"
            )
        record.log(f"gpu-e2e: {outcome}")
    if outcome != "passed":
        raise SystemExit(1)


if __name__ == "__main__":
    main()
