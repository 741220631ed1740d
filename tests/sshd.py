"""A real SSH server for the tests and benchmarks: OpenSSH's sshd on loopback, on a free port,
with a generated host key, key-only authentication and a generated client key, in front of the
local Docker engine (so ``ssh://root@127.0.0.1:PORT`` is a remote host that reaches it).
scripts/setup.sh --test installs openssh-server."""

from __future__ import annotations

import getpass
import os
import shutil
import signal
import socket
import subprocess
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from tests.ports import free_port

SSHD = "/usr/sbin/sshd"


class SSHDMissing(RuntimeError):
    """sshd is not installed, or it did not start."""


@dataclass(frozen=True)
class SSHServer:
    """A running sshd: ``url`` is ``ssh://USER@127.0.0.1:PORT``."""

    port: int
    user: str
    folder: Path
    pid: int
    #: The client key the server accepts, and a known_hosts file that holds its host key.
    identity_file: Path
    known_hosts: Path

    @property
    def url(self) -> str:
        return f"ssh://{self.user}@127.0.0.1:{self.port}"

    def host_entry(self, **extra: object) -> dict[str, object]:
        """A ``c.HostPool.hosts`` entry for this server."""
        return {
            "url": self.url,
            "identity_file": str(self.identity_file),
            "known_hosts": str(self.known_hosts),
            **extra,
        }

    def new_key(self, name: str) -> Path:
        """Another client key, one the server does not accept."""
        return _keygen(self.folder / name)

    def drop_connections(self) -> int:
        """Kill the per-connection sshd processes (every open connection drops; the server
        keeps listening). Returns how many were killed."""
        killed = 0
        for entry in Path("/proc").iterdir():
            if not entry.name.isdigit():
                continue
            try:
                fields = (entry / "stat").read_text().rsplit(")", 1)[1].split()
            except OSError:
                continue
            if int(fields[1]) == self.pid:
                try:
                    os.kill(int(entry.name), signal.SIGKILL)
                    killed += 1
                except ProcessLookupError:
                    pass
        return killed


def _keygen(path: Path) -> Path:
    subprocess.run(
        [
            shutil.which("ssh-keygen") or "/usr/bin/ssh-keygen",
            "-q",
            "-t",
            "ed25519",
            "-N",
            "",
            "-C",
            "gpudev-test",
            "-f",
            str(path),
        ],
        check=True,
    )
    return path


@contextmanager
def run_sshd(folder: Path) -> Iterator[SSHServer]:
    """Start sshd with its keys and config in ``folder``; stopped on exit."""
    if not os.path.exists(SSHD):
        raise SSHDMissing("sshd is needed (scripts/setup.sh --test installs openssh-server)")
    folder.mkdir(parents=True, exist_ok=True)
    host_key = _keygen(folder / "host_key")
    client_key = _keygen(folder / "client_key")
    authorized = folder / "authorized_keys"
    authorized.write_text(Path(f"{client_key}.pub").read_text())
    authorized.chmod(0o600)
    port = free_port()
    known_hosts = folder / "known_hosts"
    host_public = Path(f"{host_key}.pub").read_text().split()
    known_hosts.write_text(f"[127.0.0.1]:{port} {host_public[0]} {host_public[1]}\n")
    config = folder / "sshd_config"
    config.write_text(
        f"ListenAddress 127.0.0.1\nPort {port}\nHostKey {host_key}\n"
        f"AuthorizedKeysFile {authorized}\nPidFile {folder / 'sshd.pid'}\n"
        "PubkeyAuthentication yes\nPasswordAuthentication no\n"
        "KbdInteractiveAuthentication no\nUsePAM no\nPermitRootLogin prohibit-password\n"
        "StrictModes no\nAllowTcpForwarding yes\nX11Forwarding no\nPrintMotd no\n"
        # OpenSSH's default MaxSessions (10): the server must live with it.
        "MaxStartups 100\nLogLevel ERROR\n"
    )
    os.makedirs("/run/sshd", exist_ok=True)  # its privilege-separation folder
    log = (folder / "sshd.log").open("w")
    process = subprocess.Popen(
        [SSHD, "-D", "-e", "-f", str(config)], stdout=log, stderr=subprocess.STDOUT
    )
    try:
        deadline = time.monotonic() + 15
        while True:
            try:
                with socket.create_connection(("127.0.0.1", port), timeout=1) as sock:
                    if sock.recv(64).startswith(b"SSH-"):
                        break
            except OSError:
                pass
            if process.poll() is not None or time.monotonic() > deadline:
                raise SSHDMissing(f"sshd did not start: {(folder / 'sshd.log').read_text()}")
            time.sleep(0.05)
        yield SSHServer(
            port=port,
            user=getpass.getuser(),
            folder=folder,
            pid=process.pid,
            identity_file=client_key,
            known_hosts=known_hosts,
        )
    finally:
        process.terminate()
        try:
            process.wait(timeout=10)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()
        log.close()
