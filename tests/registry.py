"""A real container registry for the tests and benchmarks: Debian's docker-registry (the CNCF
distribution registry) on loopback, on a free port, with htpasswd basic auth and a random
password, storing into a folder of the caller's. scripts/setup.sh --test installs it."""

from __future__ import annotations

import base64
import json
import os
import secrets
import shutil
import subprocess
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import requests

from tests.ports import free_port


class RegistryMissing(RuntimeError):
    """docker-registry or htpasswd is not installed, or the registry did not start."""


@dataclass(frozen=True)
class Registry:
    """A running registry: ``address`` is ``127.0.0.1:PORT``."""

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


@contextmanager
def run_registry(folder: Path) -> Iterator[Registry]:
    """Start a registry storing into ``folder``; stopped on exit."""
    binary = shutil.which("docker-registry") or "/usr/bin/docker-registry"
    htpasswd = shutil.which("htpasswd")
    if not os.path.exists(binary) or htpasswd is None:
        raise RegistryMissing("docker-registry and htpasswd are needed (scripts/setup.sh --test)")
    username, password = "gpudev", secrets.token_urlsafe(18)
    hashed = subprocess.run(
        [htpasswd, "-Bbn", username, password], check=True, capture_output=True, text=True
    ).stdout
    (folder / "htpasswd").write_text(hashed)
    port = free_port()
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
                if answer.status_code == 401:  # up, and asking for credentials
                    break
            except requests.ConnectionError:
                pass
            if process.poll() is not None or time.monotonic() > deadline:
                raise RegistryMissing(
                    f"the registry did not start: {(folder / 'registry.log').read_text()}"
                )
            time.sleep(0.2)
        yield Registry(address, username, password)
    finally:
        process.terminate()
        process.wait(timeout=10)
        log.close()
