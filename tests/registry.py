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
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO

import requests

from tests.ports import free_port


class RegistryMissing(RuntimeError):
    """docker-registry or htpasswd is not installed, or the registry did not start."""


class _Process:
    """The registry's process: started (``start``, once it answers on ``address``), stopped
    abruptly (``stop``: SIGKILL, as a crash or a lost machine) and started again on the same
    port and storage."""

    def __init__(self, argv: list[str], folder: Path, address: str) -> None:
        self.argv, self.folder, self.address = argv, folder, address
        self.process: subprocess.Popen[bytes] | None = None
        self.log: IO[str] | None = None

    def start(self) -> None:
        self.log = (self.folder / "registry.log").open("a")
        self.process = subprocess.Popen(self.argv, stdout=self.log, stderr=subprocess.STDOUT)
        deadline = time.monotonic() + 30
        while True:
            try:
                answer = requests.get(f"http://{self.address}/v2/", timeout=2)
                if answer.status_code == 401:  # up, and asking for credentials
                    return
            except requests.ConnectionError:
                pass
            if self.process.poll() is not None or time.monotonic() > deadline:
                raise RegistryMissing(
                    f"the registry did not start: {(self.folder / 'registry.log').read_text()}"
                )
            time.sleep(0.2)

    def stop(self, *, kill: bool = True) -> None:
        if self.process is not None:
            if kill:
                self.process.kill()
            else:
                self.process.terminate()
            self.process.wait(timeout=10)
            self.process = None
        if self.log is not None:
            self.log.close()
            self.log = None


@dataclass(frozen=True)
class Registry:
    """A running registry: ``address`` is ``127.0.0.1:PORT``; ``folder``: where it keeps its
    configuration, its log and (under ``data``) what was pushed."""

    address: str
    username: str
    password: str
    folder: Path | None = None
    _process: _Process | None = field(default=None, compare=False, repr=False)

    def stop(self) -> None:
        """Stop the registry abruptly (SIGKILL: gone mid-request, as a crash or a lost
        machine); ``start`` brings it back on the same address with the same storage."""
        assert self._process is not None, "only a registry of run_registry can be stopped"
        self._process.stop()

    def start(self) -> None:
        """Start a registry ``stop`` stopped again; returns once it answers."""
        assert self._process is not None, "only a registry of run_registry can be started"
        self._process.start()

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
    (folder / "registry.log").write_text("")
    address = f"127.0.0.1:{port}"
    process = _Process([binary, "serve", str(folder / "config.yml")], folder, address)
    try:
        process.start()
        yield Registry(address, username, password, folder, process)
    finally:
        process.stop(kill=False)
