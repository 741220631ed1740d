"""Kernels inside dev containers, on the real engine: jupyter_client and a real Jupyter server."""

from __future__ import annotations

import asyncio
import json
import os
import time
import uuid
from collections.abc import Awaitable, Callable, Iterator
from pathlib import Path
from typing import Any

import docker
import pytest
from jupyter_client.manager import AsyncKernelManager
from tornado.httpclient import HTTPClientError, HTTPResponse

from jupyter_gpudev.containers import DevContainers, docker_name
from jupyter_gpudev.kernels import provisioner
from jupyter_gpudev.kernels.kernelspecs import GPUDevKernelSpecManager
from jupyter_gpudev.kernels.provisioner import KernelLaunchError, KernelStartFailed
from jupyter_gpudev.labels import L_SERVER

A100_1 = "GPU-8f2a9c41-7b3e-4c55-9d0a-2e6f1b7c3d90"

pytestmark = pytest.mark.integration

Fetch = Callable[..., Awaitable[HTTPResponse]]


@pytest.fixture
def manager(manager: DevContainers) -> Iterator[DevContainers]:
    """conftest's ``manager``, with a folder ``notebooks``, the kernel provisioner's."""
    (manager.root_dir / "notebooks").mkdir()
    provisioner.set_manager(manager)
    yield manager
    provisioner.set_manager(None)


def kernel_manager(containers: DevContainers, name: str = "gpudev-default") -> AsyncKernelManager:
    ksm = GPUDevKernelSpecManager(root_dir=str(containers.root_dir))
    return AsyncKernelManager(kernel_name=name, kernel_spec_manager=ksm)


async def run(client: Any, code: str, timeout: float = 30) -> tuple[str, dict[str, Any]]:
    """Execute ``code``; returns its stdout and the execute_reply content."""
    out: list[str] = []

    def collect(msg: dict[str, Any]) -> None:
        if msg["msg_type"] == "stream":
            out.append(msg["content"]["text"])

    reply = await client.execute_interactive(code, timeout=timeout, output_hook=collect)
    return "".join(out), reply["content"]


async def test_kernel_runs_in_its_container_in_the_notebook_folder(
    manager: DevContainers, docker_client: docker.DockerClient
) -> None:
    # Given the gpudev kernel of the default environment is in the picker
    km = kernel_manager(manager)
    assert "gpudev-default" in km.kernel_spec_manager.find_kernel_specs()
    # When it starts from a notebook in notebooks/
    await km.start_kernel(cwd=str(manager.root_dir / "notebooks"))
    client = km.client()
    client.start_channels()
    try:
        await client.wait_for_ready(timeout=60)
        out, reply = await run(
            client,
            "import os, socket; print(socket.gethostname(), os.getcwd(), "
            "os.environ['NVIDIA_VISIBLE_DEVICES'])",
        )
        # Then it runs inside a dedicated container, in the notebook's folder, with no GPU
        assert reply["status"] == "ok"
        hostname, cwd, visible = out.split()
        container = docker_client.containers.get(docker_name(f"kernel-{km.kernel_id}"))
        assert container.attrs["Config"]["Hostname"] == hostname
        assert cwd == f"/workspaces/{manager.root_dir.name}/notebooks"
        assert visible == "void"
        # And it is not reachable from another container (isolated network, no ICC)
        address = manager.container_address(f"kernel-{km.kernel_id}")
        port = km.connection_info["shell_port"] if hasattr(km, "connection_info") else None
        port = port or km.get_connection_info()["shell_port"]
        probe = docker_client.containers.run(
            "gpudev-python:bookworm",
            [
                "python3",
                "-c",
                "import socket; s = socket.socket(); s.settimeout(2); "
                f"print(s.connect_ex(('{address}', {port})))",
            ],
            remove=True,
            network="gpudev",
        )
        assert probe.decode().strip() != "0"
    finally:
        client.stop_channels()
        await km.shutdown_kernel()


async def test_gpu_kernel_interrupt_restart_keeps_packages_and_shutdown_frees_the_gpu(
    manager: DevContainers, docker_client: docker.DockerClient, gpu_engine: None
) -> None:
    # Given an environment that asks for one GPU
    folder = manager.root_dir / ".devcontainer" / "gpu"
    folder.mkdir(parents=True)
    (folder / "devcontainer.json").write_text(
        json.dumps({"image": "gpudev-python:bookworm", "hostRequirements": {"gpu": True}})
    )
    km = kernel_manager(manager, "gpudev-gpu")
    await km.start_kernel()
    client = km.client()
    client.start_channels()
    name = f"kernel-{km.kernel_id}"
    try:
        await client.wait_for_ready(timeout=60)
        # Then the kernel sees exactly its leased GPU
        out, _ = await run(client, "import os; print(os.environ['NVIDIA_VISIBLE_DEVICES'])")
        assert out.strip() == A100_1
        lease = manager.ledger.for_container("local", name)
        assert lease is not None
        assert lease.gpu_uuids == (A100_1,)
        # When a long cell is interrupted
        sleeping = client.execute("import time; time.sleep(60)")
        await asyncio.sleep(1)
        started = time.monotonic()
        await km.interrupt_kernel()
        while True:
            msg = await client.get_iopub_msg(timeout=10)
            if msg["msg_type"] == "error":
                assert msg["content"]["ename"] == "KeyboardInterrupt"
                break
        assert time.monotonic() - started < 5
        while (await client.get_shell_msg(timeout=10))["parent_header"].get("msg_id") != sleeping:
            pass
        await asyncio.sleep(0.5)  # ipykernel aborts requests that arrive right after an error
        # When a package is installed, and the kernel restarted
        install = (
            "import pathlib, subprocess, sys\n"
            "pkg = pathlib.Path('/tmp/gpudevprobe'); (pkg / 'gpudevprobe').mkdir(parents=True)\n"
            "(pkg / 'gpudevprobe' / '__init__.py').write_text('VALUE = 42\\n')\n"
            "(pkg / 'setup.py').write_text('from setuptools import setup\\n"
            'setup(name="gpudevprobe", version="1.0", packages=["gpudevprobe"])\\n\')\n'
            "r = subprocess.run([sys.executable, '-m', 'pip', 'install', '--user', '--no-index',"
            " '--no-build-isolation', '--break-system-packages', str(pkg)],"
            " capture_output=True, text=True)\n"
            "print(r.returncode)"
        )
        out, reply = await run(client, install, timeout=120)
        assert out.strip() == "0", reply
        await km.restart_kernel()
        await client.wait_for_ready(timeout=60)
        # Then the same container runs the new kernel, and the package is still there
        out, _ = await run(client, "import gpudevprobe; print(gpudevprobe.VALUE)")
        assert out.strip() == "42"
        assert manager.ledger.for_container("local", name) == lease
    finally:
        client.stop_channels()
        # When the kernel is shut down
        requested = time.monotonic()
        await km.shutdown_kernel()
    # Then the GPU lease is free (the container had changes: it is stopped and kept)
    assert manager.ledger.active("local") == []
    released_after = time.monotonic() - requested
    assert released_after < 30  # timing goals are measured in benchmarks/, not asserted here
    assert docker_client.containers.get(docker_name(name)).status == "exited"


async def test_a_kernel_that_fails_at_start_is_cleaned_up(
    manager: DevContainers, docker_client: docker.DockerClient
) -> None:
    # Given an environment whose image has no ipykernel (the plain Debian base image)
    folder = manager.root_dir / ".devcontainer" / "bare"
    folder.mkdir(parents=True)
    (folder / "devcontainer.json").write_text(json.dumps({"image": "gpudev-base:bookworm"}))
    km = kernel_manager(manager, "gpudev-bare")
    # When its kernel is started
    with pytest.raises(KernelLaunchError) as caught:
        await km.start_kernel()
    # Then the error says what happened, with the kernel's own last words, in the form the
    # Jupyter server shows (a status and a message)
    error = caught.value.error
    assert isinstance(error, KernelStartFailed)
    assert "The kernel exited at once (exit 127)" in error.message
    assert "Does the image have ipykernel" in error.message
    assert any("not found" in line for line in error.details["log"])
    assert caught.value.status_code == 500
    assert caught.value.log_message is not None
    assert "exited at once" in caught.value.log_message
    # And no container and no lease are left
    assert manager.ledger.active("local") == []
    assert (
        docker_client.containers.list(
            all=True, filters={"label": f"{L_SERVER}={manager.server_id}"}
        )
        == []
    )


# The server's config is conftest's gpudev_config: no kernel_spec_manager_class there, the
# extension itself puts the gpudev kernels in.
async def test_a_gpudev_kernel_through_the_server_rest_api_and_websocket(
    jp_fetch: Fetch, jp_ws_fetch: Callable[..., Awaitable[Any]], docker_client: docker.DockerClient
) -> None:
    # Given the server lists the gpudev kernels
    specs = json.loads((await jp_fetch("api", "kernelspecs")).body)["kernelspecs"]
    spec = specs["gpudev-default"]["spec"]
    assert spec["metadata"]["kernel_provisioner"]["provisioner_name"] == "gpudev"
    assert "gpudev" in spec["display_name"]
    # When a kernel is started through the REST API
    kernel = json.loads(
        (
            await jp_fetch(
                "api", "kernels", method="POST", body=json.dumps({"name": "gpudev-default"})
            )
        ).body
    )
    container_name = docker_name(f"kernel-{kernel['id']}")
    try:
        assert docker_client.containers.get(container_name).status == "running"
        # And code is executed over its websocket
        ws = await jp_ws_fetch("api", "kernels", kernel["id"], "channels")
        msg_id = uuid.uuid4().hex
        ws.write_message(
            json.dumps(
                {
                    "header": {
                        "msg_id": msg_id,
                        "msg_type": "execute_request",
                        "username": "t",
                        "session": uuid.uuid4().hex,
                        "version": "5.3",
                        "date": "",
                    },
                    "parent_header": {},
                    "metadata": {},
                    "channel": "shell",
                    "buffers": [],
                    "content": {
                        "code": "import socket; print(socket.gethostname())",
                        "silent": False,
                        "store_history": False,
                        "user_expressions": {},
                        "allow_stdin": False,
                    },
                }
            )
        )
        printed = ""
        replied = idle = False
        deadline = time.monotonic() + 60
        # The reply (shell) and the output (iopub) come on different channels, in no fixed
        # order: the output is complete when iopub says idle for this request.
        while time.monotonic() < deadline and not (replied and idle):
            raw = await asyncio.wait_for(ws.read_message(), timeout=60)
            msg = json.loads(raw)
            if msg.get("parent_header", {}).get("msg_id") != msg_id:
                continue
            if msg["msg_type"] == "stream":
                printed += msg["content"]["text"]
            replied = replied or msg["msg_type"] == "execute_reply"
            idle = idle or (
                msg["msg_type"] == "status" and msg["content"]["execution_state"] == "idle"
            )
        ws.close()
        # Then it ran in the container
        assert (
            printed.strip()
            == docker_client.containers.get(container_name).attrs["Config"]["Hostname"]
        )
    finally:
        # When the kernel is deleted, its container goes (nothing changed in it)
        await jp_fetch("api", "kernels", kernel["id"], method="DELETE")
    assert docker_client.containers.list(all=True, filters={"name": container_name}) == []


async def test_a_kernel_start_failure_reaches_the_user_as_a_message(
    jp_fetch: Fetch, jp_root_dir: Path, docker_client: docker.DockerClient
) -> None:
    # Given an environment whose image cannot run a kernel
    workspace = os.path.realpath(jp_root_dir)
    folder = jp_root_dir / ".devcontainer" / "bare"
    folder.mkdir(parents=True)
    (folder / "devcontainer.json").write_text(json.dumps({"image": "gpudev-base:bookworm"}))
    # When its kernel is started through the REST API
    with pytest.raises(HTTPClientError) as caught:
        await jp_fetch("api", "kernels", method="POST", body=json.dumps({"name": "gpudev-bare"}))
    # Then the answer carries our message, not "Unhandled error"
    assert caught.value.code == 500
    assert caught.value.response is not None
    body = json.loads(caught.value.response.body)
    assert "The kernel exited at once" in body["message"]
    assert (
        docker_client.containers.list(
            all=True, filters={"label": f"org.jupyter.gpudev.workspace={workspace}"}
        )
        == []
    )
