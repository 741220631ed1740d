"""SSH to remote hosts without a remote host: targets, fingerprints as ssh-keygen prints them,
known_hosts files, what a failed connection says, and commands run over a stand-in channel."""

from __future__ import annotations

import base64
import hashlib
import logging
import shlex
import shutil
import socket
import subprocess
from collections.abc import Callable, Iterator
from pathlib import Path

import paramiko
import pytest

from jupyter_gpudev.engine import (
    RevokedHostKey,
    SSHConnection,
    SSHTarget,
    UnknownHostKey,
    describe_ssh_error,
    fingerprint,
)
from jupyter_gpudev.engine.ssh import _load_known_hosts, _RefuseUnknown
from jupyter_gpudev.errors import EngineUnreachable
from tests.ports import free_port

LOG = logging.getLogger("tests.ssh")


# --------------------------------------------------------------------------------------------
# targets
# --------------------------------------------------------------------------------------------


def test_an_ssh_url_gives_user_host_and_port() -> None:
    target = SSHTarget.from_url("ssh://gpu@box.example.org:2222")
    assert (target.username, target.hostname, target.port) == ("gpu", "box.example.org", 2222)
    assert target.where == "gpu@box.example.org:2222"
    assert (target.identity_file, target.known_hosts) == (None, None)


def test_an_ssh_url_without_user_or_port_uses_the_server_user_and_port_22(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # Given the server runs as alice
    monkeypatch.setenv("LOGNAME", "alice")
    # When a URL names only the host
    target = SSHTarget.from_url("ssh://box")
    # Then alice connects on port 22
    assert (target.username, target.hostname, target.port) == ("alice", "box", 22)


def test_key_paths_expand_the_home_folder(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    # Given a home folder
    monkeypatch.setenv("HOME", str(tmp_path))
    # When the key and known_hosts are given with ~
    target = SSHTarget.from_url(
        "ssh://me@box", identity_file="~/.ssh/id_gpu", known_hosts="~/.ssh/gpu_known_hosts"
    )
    # Then they are absolute paths under it, and the configured known_hosts is the only one
    assert target.identity_file == f"{tmp_path}/.ssh/id_gpu"
    assert target.known_hosts == f"{tmp_path}/.ssh/gpu_known_hosts"
    assert target.known_hosts_files() == [f"{tmp_path}/.ssh/gpu_known_hosts"]


def test_default_known_hosts_are_the_users_and_the_systems(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.setenv("HOME", str(tmp_path))
    assert SSHTarget.from_url("ssh://me@box").known_hosts_files() == [
        f"{tmp_path}/.ssh/known_hosts",
        "/etc/ssh/ssh_known_hosts",
    ]


# --------------------------------------------------------------------------------------------
# fingerprints, as ssh-keygen prints them
# --------------------------------------------------------------------------------------------


needs_ssh_keygen = pytest.mark.skipif(
    shutil.which("ssh-keygen") is None, reason="needs ssh-keygen (OpenSSH client)"
)


def keygen_fingerprint(public_key_file: Path) -> str:
    """The fingerprint field of `ssh-keygen -l -f`: "256 SHA256:... comment (ED25519)"."""
    out = subprocess.run(
        ["ssh-keygen", "-l", "-f", str(public_key_file)],  # noqa: S607 - the test's own tool
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    return out.split()[1]


@needs_ssh_keygen
@pytest.mark.parametrize(
    "make_key",
    [paramiko.ECDSAKey.generate, lambda: paramiko.RSAKey.generate(1024)],
    ids=["ecdsa", "rsa"],
)
def test_fingerprint_matches_ssh_keygen(
    tmp_path: Path, make_key: Callable[[], paramiko.PKey]
) -> None:
    # Given a key and its public half in OpenSSH's format
    key = make_key()
    public = tmp_path / "key.pub"
    public.write_text(f"{key.get_name()} {key.get_base64()} test\n")
    # Then our fingerprint is the one ssh-keygen prints (what an administrator compares)
    assert fingerprint(key) == keygen_fingerprint(public)
    # And it is the unpadded base64 of the SHA-256 of the key blob
    digest = base64.b64encode(hashlib.sha256(key.asbytes()).digest()).decode()
    assert fingerprint(key) == "SHA256:" + digest.rstrip("=")
    assert not fingerprint(key).endswith("=")


@needs_ssh_keygen
def test_fingerprint_of_an_ed25519_key_matches_ssh_keygen(tmp_path: Path) -> None:
    # Given an ed25519 key made by ssh-keygen (paramiko cannot generate one)
    subprocess.run(
        ["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-C", "t", "-f", str(tmp_path / "k")],  # noqa: S607
        check=True,
    )
    key = paramiko.Ed25519Key(filename=str(tmp_path / "k"))
    # Then the fingerprints agree
    assert fingerprint(key) == keygen_fingerprint(tmp_path / "k.pub")


# --------------------------------------------------------------------------------------------
# known_hosts: markers, hashed and bracketed entries, revoked keys
# --------------------------------------------------------------------------------------------


def test_known_hosts_markers_hashed_and_bracketed_entries_are_read(tmp_path: Path) -> None:
    # Given a known_hosts file with a plain, a [host]:port, a hashed, a @cert-authority, a
    # @revoked and a broken line
    trusted = paramiko.ECDSAKey.generate()
    other = paramiko.ECDSAKey.generate()
    gone = paramiko.ECDSAKey.generate()
    hashed = paramiko.HostKeys.hash_host("[hashed.example]:2222")
    path = tmp_path / "known_hosts"
    path.write_text(
        "# comment\n"
        f"plain.example {trusted.get_name()} {trusted.get_base64()}\n"
        f"[port.example]:2222 {other.get_name()} {other.get_base64()}\n"
        f"{hashed} {trusted.get_name()} {trusted.get_base64()}\n"
        f"@cert-authority *.example {other.get_name()} {other.get_base64()}\n"
        f"@revoked * {gone.get_name()} {gone.get_base64()}\n"
        "broken.example ssh-ed25519 not-base64!!\n"
    )
    keys = paramiko.HostKeys()
    # When it is loaded
    revoked = _load_known_hosts(keys, str(path), LOG)
    # Then the keys are there by name (hashed ones too), the CA line is not trusted, the revoked
    # key is returned, and the broken line is skipped
    assert keys.lookup("plain.example") is not None
    assert keys.lookup("[port.example]:2222") is not None
    assert keys.lookup("[hashed.example]:2222") is not None
    assert keys.lookup("ca.example") is None
    assert revoked == {gone.asbytes()}


def test_a_revoked_host_key_is_refused_with_a_message() -> None:
    key = paramiko.ECDSAKey.generate()
    target = SSHTarget.from_url("ssh://me@box:2222", known_hosts="/k")
    message = describe_ssh_error(target, RevokedHostKey("box", key))
    assert "@revoked" in message
    assert fingerprint(key) in message


# --------------------------------------------------------------------------------------------
# what a failed connection says
# --------------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def host_key() -> paramiko.PKey:
    return paramiko.ECDSAKey.generate()


def test_an_unknown_host_key_is_refused_by_the_policy_and_kept_for_the_message(
    host_key: paramiko.PKey,
) -> None:
    with pytest.raises(UnknownHostKey) as caught:
        _RefuseUnknown().missing_host_key(paramiko.SSHClient(), "[box]:2222", host_key)
    assert caught.value.key is host_key


def test_an_unknown_host_key_says_its_fingerprint_and_how_to_add_it(
    host_key: paramiko.PKey,
) -> None:
    # Given a host on port 2222 whose key is in no known_hosts file
    target = SSHTarget.from_url("ssh://me@box:2222", known_hosts="/srv/gpudev/known_hosts")
    # When the refusal is described
    message = describe_ssh_error(target, UnknownHostKey("box", host_key))
    # Then it names the key and its fingerprint, says it was never accepted, and how to add it
    assert f"ecdsa-sha2-nistp256 {fingerprint(host_key)}" in message
    assert "never accepted" in message
    assert "is not in /srv/gpudev/known_hosts" in message
    assert "`ssh-keyscan -p 2222 box >> /srv/gpudev/known_hosts`" in message


def test_a_changed_host_key_says_both_fingerprints(host_key: paramiko.PKey) -> None:
    # Given known_hosts holds another key than the one the host offers
    other = paramiko.ECDSAKey.generate()
    target = SSHTarget.from_url("ssh://me@box")
    # When the mismatch is described
    message = describe_ssh_error(target, paramiko.BadHostKeyException("box", host_key, other))
    # Then it gives the offered and the expected fingerprint, and warns
    assert f"offered {fingerprint(host_key)}, expected {fingerprint(other)}" in message
    assert "box:22" in message
    assert "intercepting" in message


def test_refused_keys_name_the_identity_file_and_authorized_keys() -> None:
    target = SSHTarget.from_url("ssh://gpu@box", identity_file="/keys/id_gpu")
    message = describe_ssh_error(target, paramiko.AuthenticationException("no"))
    assert "SSH authentication as gpu on box:22 failed" in message
    assert "the key /keys/id_gpu" in message
    assert "~gpu/.ssh/authorized_keys" in message


def test_refused_keys_without_an_identity_file_name_the_agent() -> None:
    target = SSHTarget.from_url("ssh://gpu@box")
    message = describe_ssh_error(target, paramiko.AuthenticationException("no"))
    assert "ssh-agent" in message
    assert "~/.ssh/id_*" in message
    assert "identity_file" in message
    assert "authorized_keys" in message


@needs_ssh_keygen
def test_an_encrypted_identity_file_says_to_use_the_agent(tmp_path: Path) -> None:
    # Given an identity file encrypted with a passphrase
    key_file = tmp_path / "id_gpu"
    subprocess.run(
        ["ssh-keygen", "-q", "-t", "ed25519", "-N", "pass", "-f", str(key_file)],  # noqa: S607
        check=True,
    )
    # When paramiko loads it without a passphrase, as SSHClient.connect does
    with pytest.raises(paramiko.SSHException) as caught:
        paramiko.Ed25519Key.from_private_key_file(str(key_file), None)
    # Then the message says the key is encrypted (not that the server refused it)
    target = SSHTarget.from_url("ssh://gpu@box", identity_file=str(key_file))
    message = describe_ssh_error(target, caught.value)
    assert f"The SSH key {key_file} is encrypted" in message
    assert "authorized_keys" not in message


@pytest.mark.parametrize(
    ("exc", "text"),
    [
        (
            paramiko.ssh_exception.NoValidConnectionsError(
                {("10.0.0.7", 2222): ConnectionRefusedError(111, "refused")}
            ),
            "No SSH server answered at box:2222: the connection was refused",
        ),
        (
            ConnectionRefusedError(111, "refused"),
            "No SSH server answered at box:2222: the connection was refused",
        ),
        (TimeoutError("timed out"), "The SSH server at box:2222 did not answer in time."),
        (
            socket.gaierror(-2, "Name or service not known"),
            "The host name 'box' could not be resolved.",
        ),
        (
            EOFError(),
            "The SSH connection to box:2222 failed: EOFError (the server log has the details).",
        ),
    ],
    ids=["no-valid-connections", "refused", "timeout", "gaierror", "other"],
)
def test_connection_failures_become_sentences(exc: BaseException, text: str) -> None:
    assert describe_ssh_error(SSHTarget.from_url("ssh://me@box:2222"), exc).startswith(text)


def test_a_missing_identity_file_is_named() -> None:
    target = SSHTarget.from_url("ssh://me@box", identity_file="/keys/gone")
    message = describe_ssh_error(target, FileNotFoundError("/keys/gone"))
    assert message == "The SSH key /keys/gone of ssh://me@box does not exist."


# --------------------------------------------------------------------------------------------
# the connection
# --------------------------------------------------------------------------------------------


def test_no_sshd_listening_is_unreachable_with_refused(tmp_path: Path) -> None:
    # Given a port of this machine where nothing listens
    port = free_port()
    target = SSHTarget.from_url(
        f"ssh://me@127.0.0.1:{port}", known_hosts=str(tmp_path / "known_hosts")
    )
    connection = SSHConnection(target, timeout=5.0, log=LOG)
    # When the transport is asked for
    with pytest.raises(EngineUnreachable) as caught:
        connection.transport()
    # Then the error says the connection was refused there, and nothing counts as connected
    assert caught.value.message.startswith(
        f"No SSH server answered at 127.0.0.1:{port}: the connection was refused"
    )
    assert caught.value.details == {"url": f"ssh://me@127.0.0.1:{port}"}
    assert connection.generation == 0
    assert not connection.connected
    # And the next use tries again (no failure is cached)
    with pytest.raises(EngineUnreachable):
        connection.transport()
    connection.close()


def test_a_missing_identity_file_fails_before_any_connection(tmp_path: Path) -> None:
    # Given an identity file that does not exist and a port where nothing listens
    target = SSHTarget.from_url(
        f"ssh://me@127.0.0.1:{free_port()}",
        identity_file=str(tmp_path / "id_gone"),
        known_hosts=str(tmp_path / "known_hosts"),
    )
    connection = SSHConnection(target, timeout=5.0, log=LOG)
    # Then the missing key is the reason (not "refused": no connection was tried)
    with pytest.raises(EngineUnreachable, match=r"id_gone of ssh://.* does not exist"):
        connection.transport()


class FakeChannel:
    """The parts of a paramiko channel that ``SSHConnection.run`` uses."""

    def __init__(
        self, stdout: bytes = b"", stderr: bytes = b"", code: int = 0, hang: bool = False
    ) -> None:
        self.stdout, self.stderr, self.code, self.hang = stdout, stderr, code, hang
        self.closed = False

    def settimeout(self, timeout: float) -> None:
        assert timeout > 0

    def recv_ready(self) -> bool:
        return bool(self.stdout) and not self.hang

    def recv_stderr_ready(self) -> bool:
        return bool(self.stderr) and not self.hang

    def recv(self, size: int) -> bytes:
        data, self.stdout = self.stdout[:size], self.stdout[size:]
        return data

    def recv_stderr(self, size: int) -> bytes:
        data, self.stderr = self.stderr[:size], self.stderr[size:]
        return data

    def exit_status_ready(self) -> bool:
        return not self.hang

    def recv_exit_status(self) -> int:
        return self.code

    def close(self) -> None:
        self.closed = True


@pytest.fixture
def ssh_box() -> Iterator[SSHConnection]:
    connection = SSHConnection(SSHTarget.from_url("ssh://me@box"), timeout=5.0, log=LOG)
    yield connection
    connection.close()


def capture_sessions(
    monkeypatch: pytest.MonkeyPatch, connection: SSHConnection, channel: FakeChannel
) -> list[tuple[str, float | None]]:
    sessions: list[tuple[str, float | None]] = []

    def session(command: str, timeout: float | None = None) -> FakeChannel:
        sessions.append((command, timeout))
        return channel

    monkeypatch.setattr(connection, "session", session)
    return sessions


def test_run_quotes_every_argument(monkeypatch: pytest.MonkeyPatch, ssh_box: SSHConnection) -> None:
    # Given a host that answers a command with output, errors and exit 3
    channel = FakeChannel(stdout=b"out\n", stderr=b"err\n", code=3)
    sessions = capture_sessions(monkeypatch, ssh_box, channel)
    argv = ["realpath", "-m", "--", "a b; rm -rf /", "$(id)", "`id`", "it's", "", "x\ny", "*"]
    # When the argument list is run there
    result = ssh_box.run(argv, 7.0)
    # Then the remote shell gets each argument as one quoted word, and nothing else
    ((command, timeout),) = sessions
    assert timeout == 7.0
    assert command.startswith("realpath -m -- 'a b; rm -rf /' ")
    assert shlex.split(command) == argv
    # And the result is the command's, with the channel closed
    assert result.args == argv
    assert (result.returncode, result.stdout, result.stderr) == (3, "out\n", "err\n")
    assert channel.closed


def test_run_decodes_bad_bytes_with_replacement(
    monkeypatch: pytest.MonkeyPatch, ssh_box: SSHConnection
) -> None:
    capture_sessions(monkeypatch, ssh_box, FakeChannel(stdout=b"caf\xe9\n"))
    assert ssh_box.run(["cat", "menu"], 1.0).stdout == "caf\ufffd\n"


def test_run_that_times_out_is_timeout_expired_and_closes_the_channel(
    monkeypatch: pytest.MonkeyPatch, ssh_box: SSHConnection
) -> None:
    channel = FakeChannel(hang=True)
    capture_sessions(monkeypatch, ssh_box, channel)
    with pytest.raises(subprocess.TimeoutExpired) as caught:
        ssh_box.run(["sleep", "99"], 2.0)
    assert (caught.value.cmd, caught.value.timeout) == (["sleep", "99"], 2.0)
    assert channel.closed
