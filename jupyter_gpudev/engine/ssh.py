"""Remote Docker engines over SSH: one persistent paramiko connection per host.

Everything a remote host needs travels over that one connection: the Docker API (a session
channel running ``docker system dial-stdio`` per pooled HTTP connection, as the docker CLI does),
commands such as ``nvidia-smi`` and ``realpath``, and port forwards to containers (``direct-tcpip``
channels). A new ``ssh`` process per API call costs ~365 ms; a channel on a live connection
~1.7 ms.

Host keys are checked strictly against known_hosts: an unknown key is refused with its
fingerprint and what to do, never accepted. A connection that dropped is opened again on the
next use; callers that hold channels (tunnels) open new ones.

Every call here blocks: the server runs them in worker threads.
"""

from __future__ import annotations

import base64
import contextlib
import getpass
import hashlib
import logging
import os
import queue
import shlex
import socket
import subprocess
import threading
import time
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlsplit

import paramiko
import urllib3.connection
import urllib3.connectionpool
import urllib3.exceptions
from docker.transport.basehttpadapter import BaseHTTPAdapter

from ..errors import EngineUnreachable

#: The remote command behind each Docker API connection (docker CLI 18.09 and later).
DIAL_STDIO = "docker system dial-stdio"


@dataclass(frozen=True)
class SSHTarget:
    """Where to connect: ``ssh://user@host[:port]`` plus the key material to use."""

    url: str
    username: str
    hostname: str
    port: int
    identity_file: str | None = None
    known_hosts: str | None = None

    @classmethod
    def from_url(
        cls, url: str, *, identity_file: str | None = None, known_hosts: str | None = None
    ) -> SSHTarget:
        parts = urlsplit(url)
        return cls(
            url=url,
            username=parts.username or _local_user(),
            hostname=parts.hostname or "",
            port=parts.port or 22,
            identity_file=os.path.expanduser(identity_file) if identity_file else None,
            known_hosts=os.path.expanduser(known_hosts) if known_hosts else None,
        )

    @property
    def where(self) -> str:
        return f"{self.username}@{self.hostname}:{self.port}"

    def known_hosts_files(self) -> list[str]:
        """The files host keys are checked against: the configured one, or the user's and the
        system's."""
        if self.known_hosts:
            return [self.known_hosts]
        return [os.path.expanduser("~/.ssh/known_hosts"), "/etc/ssh/ssh_known_hosts"]


def _local_user() -> str:
    return getpass.getuser()


def fingerprint(key: paramiko.PKey) -> str:
    """The key's fingerprint as OpenSSH prints it (``SHA256:...``)."""
    digest = hashlib.sha256(key.asbytes()).digest()
    return "SHA256:" + base64.b64encode(digest).decode().rstrip("=")


class UnknownHostKey(paramiko.SSHException):
    """The server offered a key that no known_hosts file lists."""

    def __init__(self, hostname: str, key: paramiko.PKey) -> None:
        super().__init__(f"unknown host key for {hostname}")
        self.key = key


class RevokedHostKey(paramiko.SSHException):
    """The server offered a key a known_hosts file marks ``@revoked``."""

    def __init__(self, hostname: str, key: paramiko.PKey) -> None:
        super().__init__(f"revoked host key for {hostname}")
        self.key = key


def _load_known_hosts(keys: paramiko.HostKeys, path: str, log: Any) -> set[bytes]:
    """Read a known_hosts file into ``keys`` (hashed names and ``[host]:port`` entries
    included); returns the ``@revoked`` keys. ``@cert-authority`` lines are skipped (host
    certificates are not supported: such a host's plain key must be listed), and a line that
    cannot be read is skipped with a warning, never trusted."""
    revoked: set[bytes] = set()
    with open(path, encoding="utf-8", errors="replace") as handle:
        for number, raw in enumerate(handle, 1):
            line = raw.strip()
            if not line or line.startswith("#"):
                continue
            if line.startswith("@cert-authority"):
                continue
            if line.startswith("@revoked"):
                fields = line.split()
                if len(fields) >= 4:
                    try:
                        revoked.add(base64.b64decode(fields[3]))
                    except ValueError:
                        log.warning("gpudev: %s:%d: unreadable @revoked key", path, number)
                continue
            try:
                entry = paramiko.hostkeys.HostKeyEntry.from_line(line, number)
            except Exception as exc:  # paramiko's InvalidHostKey is a bare Exception
                log.warning("gpudev: %s:%d: skipped (%s)", path, number, type(exc).__name__)
                continue
            if entry is not None and entry.key is not None:
                for name in entry.hostnames:
                    keys.add(name, entry.key.get_name(), entry.key)
    return revoked


def _fail_fast_when_silent(transport: paramiko.Transport, keepalive: int) -> None:
    """paramiko's keepalives are never acknowledged: on a host that went silent (power loss,
    a partition), the connection would look alive until TCP gives up (~15 min). With a TCP
    user timeout, unacknowledged keepalives end it within about two intervals, so channels
    close, tunnels drop and the next use reconnects or says why."""
    sock = transport.sock
    if not isinstance(sock, socket.socket):
        return
    with contextlib.suppress(OSError, AttributeError):
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_KEEPALIVE, 1)
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_USER_TIMEOUT, keepalive * 2 * 1000)


class _RefuseUnknown(paramiko.MissingHostKeyPolicy):
    """Never accept a key known_hosts does not hold; keep the key for the message."""

    def missing_host_key(
        self,
        client: paramiko.SSHClient,  # noqa: ARG002 - paramiko's signature
        hostname: str,
        key: paramiko.PKey,
    ) -> None:
        raise UnknownHostKey(hostname, key)


def _known_hosts_name(target: SSHTarget) -> str:
    return target.hostname if target.port == 22 else f"[{target.hostname}]:{target.port}"


def describe_ssh_error(target: SSHTarget, exc: BaseException) -> str:  # noqa: PLR0911
    """A sentence about a failed SSH connection: what happened and what to do."""
    files = " or ".join(target.known_hosts_files())
    if isinstance(exc, UnknownHostKey):
        return (
            f"The SSH host key of {target.hostname}:{target.port} ({exc.key.get_name()} "
            f"{fingerprint(exc.key)}) is not in {files}: the connection was refused (an unknown "
            "key is never accepted). Check that fingerprint with the host's administrator, then "
            f"add the key, e.g. `ssh-keyscan -p {target.port} {target.hostname} >> "
            f"{target.known_hosts_files()[0]}`."
        )
    if isinstance(exc, RevokedHostKey):
        return (
            f"The SSH host key of {target.hostname}:{target.port} ({fingerprint(exc.key)}) is "
            f"marked @revoked in {files}: the connection was refused."
        )
    if isinstance(exc, paramiko.BadHostKeyException):
        return (
            f"The SSH host key of {target.hostname}:{target.port} is not the one in {files} "
            f"(offered {fingerprint(exc.key)}, expected {fingerprint(exc.expected_key)}): the "
            "connection was refused. If the host was reinstalled, remove its old line from "
            "known_hosts and add the new key; otherwise someone may be intercepting the "
            "connection."
        )
    # Before AuthenticationException: paramiko makes it a subclass.
    if isinstance(exc, paramiko.PasswordRequiredException):
        return (
            f"The SSH key {target.identity_file} is encrypted: load it into ssh-agent "
            "instead of naming it as identity_file."
        )
    if isinstance(exc, paramiko.AuthenticationException):
        keys = (
            f"the key {target.identity_file}"
            if target.identity_file
            else "the ssh-agent's keys and ~/.ssh/id_*"
        )
        return (
            f"SSH authentication as {target.username} on {target.hostname}:{target.port} "
            f"failed: the server accepted none of the keys tried ({keys}; only key "
            f"authentication is used). Add the public key to ~{target.username}/.ssh/"
            "authorized_keys on that host, or set the host's identity_file."
        )
    if isinstance(exc, FileNotFoundError) and target.identity_file:
        return f"The SSH key {target.identity_file} of {target.url} does not exist."
    if isinstance(exc, (ConnectionRefusedError, paramiko.ssh_exception.NoValidConnectionsError)):
        return (
            f"No SSH server answered at {target.hostname}:{target.port}: the connection was "
            "refused. Is sshd running there, and is the port right?"
        )
    if isinstance(exc, (socket.timeout, TimeoutError)):
        return f"The SSH server at {target.hostname}:{target.port} did not answer in time."
    if isinstance(exc, socket.gaierror):
        return f"The host name {target.hostname!r} could not be resolved."
    return (
        f"The SSH connection to {target.hostname}:{target.port} failed: "
        f"{type(exc).__name__} (the server log has the details)."
    )


class SSHConnection:
    """One persistent SSH connection to a host, opened on first use and again after a drop.

    ``generation`` grows with each (re)connection, so holders of channels can tell that the
    connection they used is gone.
    """

    def __init__(self, target: SSHTarget, *, timeout: float, log: Any, keepalive: int = 15) -> None:
        self.target = target
        self.timeout = timeout
        self.keepalive = keepalive
        self.log = log
        self.generation = 0
        #: Commands (``run``) at once: with the Docker API pools (``SSHDockerAdapter``) they
        #: stay under OpenSSH's default MaxSessions (10 session channels per connection).
        self._commands = threading.BoundedSemaphore(2)
        self._client: paramiko.SSHClient | None = None
        self._lock = threading.Lock()
        logging.getLogger("paramiko").setLevel(logging.WARNING)
        # A refused forward (a kernel port not listening yet) is ours to report, not an error.
        logging.getLogger("paramiko.transport").setLevel(logging.CRITICAL)

    def _open(self) -> paramiko.SSHClient:
        client = paramiko.SSHClient()
        revoked: set[bytes] = set()
        for path in self.target.known_hosts_files():
            if os.path.exists(path):
                revoked |= _load_known_hosts(client.get_host_keys(), path, self.log)
        client.set_missing_host_key_policy(_RefuseUnknown())
        if self.target.identity_file and not os.path.exists(self.target.identity_file):
            raise FileNotFoundError(self.target.identity_file)
        try:
            client.connect(
                self.target.hostname,
                port=self.target.port,
                username=self.target.username,
                key_filename=self.target.identity_file,
                look_for_keys=self.target.identity_file is None,
                allow_agent=self.target.identity_file is None,
                # Keys only: never a password prompt or keyboard-interactive.
                password=None,
                timeout=self.timeout,
                banner_timeout=self.timeout,
                auth_timeout=self.timeout,
            )
        except BaseException:
            client.close()
            raise
        transport = client.get_transport()
        if transport is not None:
            offered = transport.get_remote_server_key()
            if offered.asbytes() in revoked:
                client.close()
                raise RevokedHostKey(self.target.hostname, offered)
            transport.set_keepalive(self.keepalive)
            _fail_fast_when_silent(transport, self.keepalive)
        return client

    def transport(self) -> paramiko.Transport:
        """The live transport, connecting (again) when needed; raises ``EngineUnreachable``."""
        with self._lock:
            client = self._client
            transport = client.get_transport() if client is not None else None
            if transport is not None and transport.is_active():
                return transport
            if client is not None:
                self.log.warning(
                    "gpudev: SSH connection to %s dropped; reconnecting", self.target.where
                )
                client.close()
                self._client = None
            try:
                client = self._open()
            except (paramiko.SSHException, OSError) as exc:
                self.log.warning("gpudev: SSH %s: %r", self.target.where, exc)
                raise EngineUnreachable(
                    describe_ssh_error(self.target, exc),
                    details={"url": self.target.url},
                ) from exc
            self._client = client
            self.generation += 1
            transport = client.get_transport()
            assert transport is not None  # noqa: S101 - connect() succeeded
            return transport

    @property
    def connected(self) -> bool:
        with self._lock:
            transport = self._client.get_transport() if self._client else None
            return transport is not None and transport.is_active()

    def drop(self) -> None:
        """Close the connection (the next use opens a new one)."""
        with self._lock:
            if self._client is not None:
                self._client.close()
                self._client = None

    close = drop

    def _channel(self, open_it: Any) -> paramiko.Channel:
        """Open a channel, reconnecting once when the connection turned out to be dead."""
        for attempt in (1, 2):
            transport = self.transport()
            try:
                channel: paramiko.Channel = open_it(transport)
            except (paramiko.SSHException, EOFError, OSError) as exc:
                if transport.is_active() or attempt == 2:
                    raise EngineUnreachable(
                        f"The SSH connection to {self.target.hostname}:{self.target.port} "
                        f"refused a channel: {exc}",
                        details={"url": self.target.url},
                    ) from exc
                self.log.info(
                    "gpudev: SSH %s: channel failed on a dead connection", self.target.where
                )
            else:
                return channel
        raise AssertionError("unreachable")  # pragma: no cover

    def session(self, command: str, timeout: float | None = None) -> paramiko.Channel:
        """A channel running ``command`` on the host (a fixed command, or one built with
        ``shlex.quote``: the remote side runs it through the user's shell)."""

        def open_it(transport: paramiko.Transport) -> paramiko.Channel:
            channel = transport.open_session(timeout=self.timeout)
            channel.settimeout(timeout)
            channel.exec_command(command)
            return channel

        return self._channel(open_it)

    def direct(self, address: str, port: int) -> paramiko.Channel:
        """A channel to ``address:port`` as seen from the host (``direct-tcpip``)."""

        def open_it(transport: paramiko.Transport) -> paramiko.Channel:
            return transport.open_channel(
                "direct-tcpip", (address, port), ("127.0.0.1", 0), timeout=self.timeout
            )

        return self._channel(open_it)

    #: The most output (stdout and stderr each) a command on a host may give: the commands
    #: gpudev runs there (``nvidia-smi``, ``realpath``, ``id``...) print a few KiB.
    MAX_OUTPUT = 4 << 20

    def run(self, argv: list[str], timeout: float) -> subprocess.CompletedProcess[str]:
        """Run a command on the host, every argument quoted: no string reaches the remote
        shell unquoted. Exit 127: not found there. ``timeout`` bounds the whole command
        (``subprocess.TimeoutExpired``); output past ``MAX_OUTPUT`` is an ``EngineUnreachable``
        naming the command, and the command is closed."""
        command = " ".join(shlex.quote(arg) for arg in argv)
        with self._commands:
            channel = self.session(command, timeout=timeout)
            try:
                stdout, stderr = _read_bounded(channel, argv, timeout, self.MAX_OUTPUT, self)
                code = channel.recv_exit_status()
            finally:
                channel.close()
        return subprocess.CompletedProcess(
            argv, code, stdout.decode(errors="replace"), stderr.decode(errors="replace")
        )


def _read_bounded(
    channel: paramiko.Channel,
    argv: list[str],
    timeout: float,
    limit: int,
    connection: SSHConnection,
) -> tuple[bytes, bytes]:
    """A command's stdout and stderr, read together until it ends, within ``timeout`` seconds
    and at most ``limit`` bytes each."""
    out, err = bytearray(), bytearray()
    deadline = time.monotonic() + timeout
    while True:
        left = deadline - time.monotonic()
        if left <= 0:
            raise subprocess.TimeoutExpired(argv, timeout)
        channel.settimeout(min(left, 1.0))
        got = False
        if channel.recv_ready():
            out += channel.recv(65536)
            got = True
        if channel.recv_stderr_ready():
            err += channel.recv_stderr(65536)
            got = True
        if len(out) > limit or len(err) > limit:
            raise EngineUnreachable(
                f"{argv[0]!r} on {connection.target.where} gave more than "
                f"{limit >> 20} MiB of output; it was stopped"
            )
        if not got:
            if channel.exit_status_ready() and not (
                channel.recv_ready() or channel.recv_stderr_ready()
            ):
                return bytes(out), bytes(err)
            time.sleep(0.005)


# --------------------------------------------------------------------------------------------
# The Docker API over the connection
# --------------------------------------------------------------------------------------------


class _DialConnection(urllib3.connection.HTTPConnection):
    """One HTTP connection to the engine: a channel running ``docker system dial-stdio``."""

    def __init__(self, ssh: SSHConnection, timeout: float) -> None:
        super().__init__("localhost", timeout=timeout)
        self.ssh = ssh
        self.channel_timeout = timeout

    def connect(self) -> None:
        self.sock = self.ssh.session(DIAL_STDIO, timeout=self.channel_timeout)


class _DialPool(urllib3.connectionpool.HTTPConnectionPool):
    scheme = "ssh"

    def __init__(self, ssh: SSHConnection, timeout: float, maxsize: int) -> None:
        # block: at most maxsize channels; a call waits for a free one (up to its timeout)
        # instead of opening more sessions than the server allows.
        super().__init__("localhost", timeout=timeout, maxsize=maxsize, block=True)
        self.ssh = ssh
        self.channel_timeout = timeout

    def _new_conn(self) -> _DialConnection:
        return _DialConnection(self.ssh, self.channel_timeout)

    def _get_conn(self, timeout: float | None = None) -> Any:
        # urllib3's own check calls fileno() on the channel (a pipe per channel): look at the
        # channel instead, and drop connections whose channel or SSH connection is gone.
        conn = None
        try:
            conn = self.pool.get(block=self.block, timeout=timeout)  # type: ignore[union-attr]
        except AttributeError as exc:
            raise urllib3.exceptions.ClosedPoolError(self, "Pool is closed.") from exc
        except queue.Empty:
            if self.block:
                raise urllib3.exceptions.EmptyPoolError(self, "Pool is full.") from None
        if conn is not None and conn.sock is not None:
            channel = conn.sock
            transport = channel.get_transport()
            if channel.closed or transport is None or not transport.is_active():
                conn.close()
                conn = None
        return conn or self._new_conn()


class SSHDockerAdapter(BaseHTTPAdapter):
    """A requests adapter that carries Docker API calls over an ``SSHConnection``."""

    def __init__(self, ssh: SSHConnection, timeout: float, max_pool_size: int = 4) -> None:
        super().__init__()
        self.pool = _DialPool(ssh, timeout, max_pool_size)

    def get_connection(self, url: Any, proxies: Any = None) -> _DialPool:  # noqa: ARG002
        return self.pool

    def request_url(self, request: Any, proxies: Any) -> str:  # noqa: ARG002
        return str(request.path_url)

    def close(self) -> None:
        super().close()
        self.pool.close()
