"""Integration fixtures: the real Docker engine and a real Jupyter server (pytest-jupyter)."""

from __future__ import annotations

import base64
import json
import os
import secrets
import shutil
import socket
import subprocess
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import docker
import pytest
import requests
from traitlets.config import Config

from tests.conftest import FAKE_SMI, FIXTURES

BASE = "gpudev-base:bookworm"
A100_0 = "GPU-5d5ba0d6-d33d-2b2c-524d-9e3d8d2b8a77"


@pytest.fixture(scope="session")
def docker_client() -> Iterator[docker.DockerClient]:
    """The local engine. Its absence is a failure, not a skip: scripts/test.sh starts one."""
    try:
        client = docker.from_env()
        client.ping()
    except docker.errors.DockerException as exc:
        pytest.fail(f"integration tests need a running Docker engine (scripts/setup.sh): {exc}")
    yield client
    client.close()


@pytest.fixture
def gpudev_config() -> dict[str, Any]:
    """Per-test overrides merged into the server config (e.g. a different local_url)."""
    return {}


@pytest.fixture
def jp_server_config(gpudev_config: dict[str, Any], monkeypatch: pytest.MonkeyPatch) -> Config:
    """The extension enabled, unauthenticated access disabled, GPUs from the fake nvidia-smi."""
    monkeypatch.setenv("FAKE_NVIDIA_SMI_DIR", str(FIXTURES / "smi" / "two-a100"))
    config: dict[str, Any] = {
        "ServerApp": {
            "jpserver_extensions": {"jupyter_gpudev": True},
            "allow_unauthenticated_access": False,
        },
        "GPUInventory": {"backend": "nvidia-smi", "nvidia_smi_path": str(FAKE_SMI)},
    }
    for section, values in gpudev_config.items():
        config.setdefault(section, {}).update(values)
    return Config(config)


@pytest.fixture(scope="session")
def gpu_engine(docker_client: docker.DockerClient) -> None:
    """The engine can start containers with a GPU DeviceRequest (real or stand-in hook)."""
    try:
        docker_client.containers.run(
            BASE,
            ["true"],
            remove=True,
            device_requests=[
                docker.types.DeviceRequest(
                    driver="nvidia", device_ids=[A100_0], capabilities=[["gpu"]]
                )
            ],
        )
    except docker.errors.APIError as exc:
        message = (
            "the Docker engine has no NVIDIA hook, so GPU containers cannot start; "
            f"scripts/test.sh starts an engine with a stand-in hook ({exc.explanation})"
        )
        if os.environ.get("CI"):
            pytest.fail(message)
        pytest.skip(message)


@dataclass(frozen=True)
class Registry:
    """A real registry (Debian's docker-registry, the CNCF distribution) on loopback, with
    htpasswd basic auth: ``address`` is ``127.0.0.1:PORT``."""

    address: str
    username: str
    password: str

    def docker_config(self, folder: Path, password: str | None = None) -> Path:
        """A Docker client configuration (as ``docker login`` writes it) for this registry."""
        token = base64.b64encode(f"{self.username}:{password or self.password}".encode())
        folder.mkdir(parents=True, exist_ok=True)
        (folder / "config.json").write_text(
            json.dumps({"auths": {self.address: {"auth": token.decode()}}})
        )
        return folder


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@pytest.fixture(scope="session")
def registry(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Registry]:
    """Started for the session; its absence is a failure (scripts/setup.sh --test installs it)."""
    binary = shutil.which("docker-registry") or "/usr/bin/docker-registry"
    htpasswd = shutil.which("htpasswd")
    if not os.path.exists(binary) or htpasswd is None:
        pytest.fail("the registry tests need docker-registry and htpasswd (setup.sh --test)")
    folder = tmp_path_factory.mktemp("registry")
    username, password = "gpudev", secrets.token_urlsafe(18)
    hashed = subprocess.run(
        [htpasswd, "-Bbn", username, password], check=True, capture_output=True, text=True
    ).stdout
    (folder / "htpasswd").write_text(hashed)
    port = _free_port()
    (folder / "config.yml").write_text(
        "version: 0.1\n"
        "log:\n  level: warn\n"
        f"storage:\n  filesystem:\n    rootdirectory: {folder / 'data'}\n"
        "  delete:\n    enabled: true\n"
        f"http:\n  addr: 127.0.0.1:{port}\n"
        f"auth:\n  htpasswd:\n    realm: gpudev-test\n    path: {folder / 'htpasswd'}\n"
    )
    log = (folder / "registry.log").open("w")
    process = subprocess.Popen(
        [binary, "serve", str(folder / "config.yml")], stdout=log, stderr=subprocess.STDOUT
    )
    address = f"127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 30
        while True:
            try:
                answer = requests.get(f"http://{address}/v2/", timeout=2)
                if answer.status_code == 401:
                    break
            except requests.ConnectionError:
                pass
            if process.poll() is not None or time.monotonic() > deadline:
                pytest.fail(f"the registry did not start: {(folder / 'registry.log').read_text()}")
            time.sleep(0.2)
        yield Registry(address, username, password)
    finally:
        process.terminate()
        process.wait(timeout=10)
        log.close()
