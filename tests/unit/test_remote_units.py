"""Remote hosts without a remote host: SSH targets and messages, host specs and runtime hosts,
nvidia-smi and paths run through a recorded runner, and the placement check of leases."""

from __future__ import annotations

import base64
import hashlib
import json
import logging
import os
import shlex
import shutil
import socket
import subprocess
from collections.abc import Callable, Iterator
from pathlib import Path
from types import ModuleType
from typing import Any

import paramiko
import pytest
from traitlets.config import Config

from jupyter_gpudev.engine import (
    SMI_FIELDS,
    GPUInventory,
    Host,
    HostPool,
    HostSpec,
    NvidiaSmiProbe,
    ProbeUnavailable,
    RevokedHostKey,
    SSHConnection,
    SSHTarget,
    UnknownHostKey,
    describe_ssh_error,
    fingerprint,
)
from jupyter_gpudev.engine.ssh import _load_known_hosts, _RefuseUnknown
from jupyter_gpudev.environments import MountNotAllowed, MountPolicy, RemotePaths, ResolvedMount
from jupyter_gpudev.errors import (
    BadRequest,
    ConfigError,
    Conflict,
    EngineUnreachable,
    GPUDevError,
    NotFound,
)
from jupyter_gpudev.leasing import GPURequest, LeasableGPU, Lease, NoFreeGPU, check_fit
from tests.conftest import FIXTURES

LOG = logging.getLogger("tests.remote")


def free_port() -> int:
    """A port of 127.0.0.1 where nothing listens (bound, read, released)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
        probe.bind(("127.0.0.1", 0))
        port: int = probe.getsockname()[1]
    return port


# --------------------------------------------------------------------------------------------
# ssh.py: targets
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
# ssh.py: fingerprints, as ssh-keygen prints them
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
# ssh.py: what a failed connection says
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
# ssh.py: the connection
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


# --------------------------------------------------------------------------------------------
# hosts.py: host specs with the remote keys
# --------------------------------------------------------------------------------------------

SSH = "ssh://gpu@box:2222"


@pytest.mark.parametrize(
    ("value", "message"),
    [
        (
            {"url": "tcp://box:2376", "identity_file": "/k"},
            "['identity_file'] do not apply to a tcp",
        ),
        ({"url": "unix:///d.sock", "known_hosts": "/kh"}, "['known_hosts'] do not apply to a unix"),
        ({"url": SSH, "tls_verify": False}, "['tls_verify'] do not apply to a ssh"),
        ({"url": SSH, "tls_ca_cert": "/ca.pem"}, "['tls_ca_cert'] do not apply to a ssh"),
        ({"url": "unix:///d.sock", "tls_client_cert": "/c", "tls_client_key": "/k"}, "unix"),
        ({"url": SSH, "identity_file": 42}, "'identity_file' must be a file path"),
        ({"url": SSH, "known_hosts": ["/kh"]}, "'known_hosts' must be a string"),
        ({"url": SSH, "nvidia_smi": 1}, "'nvidia_smi' must be a string"),
        ({"url": SSH, "workspace": 7}, "'workspace' must be a string"),
        ({"url": SSH, "workspace": "work"}, "'workspace' must be an absolute path"),
        ({"url": SSH, "workspace": "/home/gpu/../root"}, "'workspace' must be an absolute path"),
        ({"url": SSH, "mount_roots": "/srv/data"}, "'mount_roots' must be a list"),
        ({"url": SSH, "mount_roots": {"path": "/srv"}}, "'mount_roots' must be a list"),
    ],
)
def test_remote_keys_are_checked_and_the_error_names_the_host(
    value: dict[str, Any], message: str
) -> None:
    with pytest.raises(ConfigError) as caught:
        HostSpec.parse("gpu-a", value)
    assert message in caught.value.message
    assert caught.value.message.startswith("c.HostPool.hosts['gpu-a']: ")


@pytest.mark.parametrize(
    ("key", "value"),
    [("nvidia_smi", "/usr/bin/nvidia-smi"), ("workspace", "/w"), ("mount_roots", ["/srv"])],
)
def test_remote_keys_are_refused_for_the_local_host(key: str, value: Any) -> None:
    # Given the local engine (its folders are the Jupyter root and c.MountPolicy)
    entry = {"url": "unix:///var/run/docker.sock", key: value}
    # Then a remote-host key is refused for it, but accepted for a remote host
    with pytest.raises(ConfigError, match=rf"\['{key}'\] do not apply to a unix:// host"):
        HostSpec.parse("local", entry, is_local=True)
    assert getattr(HostSpec.parse("far", {**entry, "url": SSH}), key) in (value, tuple(value))


def test_remote_keys_are_kept() -> None:
    spec = HostSpec.parse(
        "far",
        {
            "url": SSH,
            "identity_file": "~/.ssh/id_far",
            "known_hosts": "/etc/gpudev/known_hosts",
            "nvidia_smi": "/opt/nvidia/bin/nvidia-smi",
            "workspace": "/home/gpu/work",
            "mount_roots": ["/srv/data", {"path": "/scratch", "writable": True}],
        },
    )
    assert spec.transport == "ssh"
    assert spec.identity_file == "~/.ssh/id_far"
    assert spec.known_hosts == "/etc/gpudev/known_hosts"
    assert spec.nvidia_smi == "/opt/nvidia/bin/nvidia-smi"
    assert spec.workspace == "/home/gpu/work"
    assert spec.mount_roots == ("/srv/data", {"path": "/scratch", "writable": True})


def test_defaults_of_the_remote_keys() -> None:
    spec = HostSpec.parse("far", SSH)
    assert (spec.nvidia_smi, spec.workspace, spec.mount_roots) == ("nvidia-smi", None, ())
    assert (spec.identity_file, spec.known_hosts) == (None, None)


@pytest.mark.parametrize("url", ["ssh://me@box:abc", "ssh://me@box:99999"])
def test_an_ssh_url_with_a_bad_port_is_a_config_error(url: str) -> None:
    with pytest.raises(ConfigError, match="port"):
        HostSpec.parse("far", url)


@pytest.mark.parametrize(
    ("name", "entry", "is_local"),
    [
        ("far", SSH, False),
        (
            "far",
            {
                "url": SSH,
                "identity_file": "~/.ssh/id_far",
                "known_hosts": "/etc/gpudev/known_hosts",
                "nvidia_smi": "/opt/nvidia/bin/nvidia-smi",
                "workspace": "/home/gpu/work",
                "mount_roots": ["/srv/data", {"path": "/scratch", "writable": True}],
            },
            False,
        ),
        (
            "tls",
            {
                "url": "tcp://box:2376",
                "tls_ca_cert": "/ca.pem",
                "tls_client_cert": "/cert.pem",
                "tls_client_key": "/key.pem",
                "tls_verify": False,
            },
            False,
        ),
        ("plain", {"url": "tcp://box:2375", "tls_verify": True}, False),
        ("local", "unix:///var/run/docker.sock", True),
        ("local", {"url": "tcp://127.0.0.1:2376", "tls_verify": False}, True),
    ],
)
def test_to_config_round_trips_through_json(
    name: str, entry: str | dict[str, Any], is_local: bool
) -> None:
    # Given a spec
    spec = HostSpec.parse(name, entry, is_local=is_local)
    # When it is written as the hosts file holds it, and read back
    config = json.loads(json.dumps(spec.to_config()))
    # Then it is the same spec
    assert HostSpec.parse(name, config, is_local=is_local) == spec


def test_to_config_holds_only_the_keys_that_are_set() -> None:
    assert HostSpec.parse("far", SSH).to_config() == {"url": SSH}
    assert HostSpec.parse("plain", "tcp://box:2375").to_config() == {"url": "tcp://box:2375"}
    assert HostSpec.parse("far", {"url": SSH, "workspace": "/w"}).to_config() == {
        "url": SSH,
        "workspace": "/w",
    }


# --------------------------------------------------------------------------------------------
# hosts.py: hosts added at run time
# --------------------------------------------------------------------------------------------


@pytest.fixture
def make_pool(tmp_path: Path) -> Iterator[Callable[..., HostPool]]:
    """Pools without the local engine, on tmp/hosts.json; closed after the test."""
    made: list[HostPool] = []

    def make(**traits: Any) -> HostPool:
        config = Config()
        config.HostPool.include_local = False
        config.HostPool.hosts_file = str(tmp_path / "hosts.json")
        for key, value in traits.items():
            setattr(config.HostPool, key, value)
        config.GPUInventory.backend = "none"
        made.append(HostPool(config=config, log=LOG))
        return made[-1]

    yield make
    for pool in made:
        pool.close()


def engine_url(tmp_path: Path, name: str = "engine") -> str:
    """An ssh:// engine where nothing listens (port 1 of a loopback address of its own: an
    added host may not share a configured one's address): describing it is instant and
    offline. (A unix:// engine cannot be added at run time.)"""
    return f"ssh://{name}@127.{len(name)}.{ord(name[0])}.{ord(name[-1])}:1"


#: The key a host added at run time logs in with (its own; never checked here).
KEY = {"identity_file": "/nonexistent/id_for_tests"}


def hosts_file(tmp_path: Path) -> dict[str, Any]:
    data: dict[str, Any] = json.loads((tmp_path / "hosts.json").read_text())
    return data


def test_an_added_host_is_persisted_and_listed(
    make_pool: Callable[..., HostPool], tmp_path: Path
) -> None:
    # Given a pool with one configured host, and the administrator's settings for added ones
    pool = make_pool(
        hosts={"conf": engine_url(tmp_path, "conf")},
        runtime_host_settings={"workspace": "/home/gpu/work", "mount_roots": ["/srv/data"]},
    )
    # When an ssh:// host is added without checking it (its key file does not exist)
    info = pool.add(
        "gpu-a",
        "ssh://gpu@127.0.0.1:1",
        {
            "identity_file": str(tmp_path / "id_gone"),
            "known_hosts": str(tmp_path / "known_hosts"),
        },
        check=False,
    )
    # Then it is in the hosts file with what the user chose only
    assert hosts_file(tmp_path) == {
        "hosts": {
            "gpu-a": {
                "url": "ssh://gpu@127.0.0.1:1",
                "identity_file": str(tmp_path / "id_gone"),
                "known_hosts": str(tmp_path / "known_hosts"),
            }
        }
    }
    assert pool.get("gpu-a").spec.mount_roots == ("/srv/data",)
    # And listed after the configured one, as "added", with why it cannot be reached
    assert pool.names() == ["conf", "gpu-a"]
    assert (info.name, info.origin, info.transport, info.reachable) == (
        "gpu-a",
        "added",
        "ssh",
        False,
    )
    assert info.workspace == "/home/gpu/work"
    assert info.reason is not None
    assert "id_gone" in info.reason
    assert "does not exist" in info.reason
    assert pool.get("gpu-a").origin == "added"
    assert pool.get("conf").origin == "config"


def test_adding_a_configured_or_added_name_is_a_conflict(
    make_pool: Callable[..., HostPool], tmp_path: Path
) -> None:
    pool = make_pool(hosts={"conf": engine_url(tmp_path, "conf")})
    pool.add("mine", engine_url(tmp_path, "mine"), KEY, check=False)
    before = hosts_file(tmp_path)
    for name in ("conf", "mine"):
        with pytest.raises(Conflict, match=f"A host named '{name}' exists already"):
            pool.add(name, engine_url(tmp_path, "other"), KEY, check=False)
    assert hosts_file(tmp_path) == before


@pytest.mark.parametrize(
    ("url", "options", "message"),
    [
        ("http://box", {}, "unsupported URL"),
        ("ssh://me:pw@box", {}, "do not put a password in the URL"),
        ("ssh://me@box", {"tls_verify": False}, "do not apply to a ssh:// host"),
        ("ssh://me@box", {"workspace": "/srv"}, "the administrator chooses these"),
        ("ssh://me@box", {"nvidia_smi": "/tmp/x"}, "the administrator chooses these"),
        ("ssh://me@box", {}, "a key of its own (identity_file)"),
        ("ssh://me@box", {"colour": "red"}, "unknown keys"),
    ],
)
def test_a_bad_added_host_is_a_bad_request_in_the_words_of_hosts_add(
    make_pool: Callable[..., HostPool],
    tmp_path: Path,
    url: str,
    options: dict[str, Any],
    message: str,
) -> None:
    pool = make_pool()
    with pytest.raises(BadRequest) as caught:
        pool.add("far", url, options, check=False)
    assert message in caught.value.message
    assert caught.value.message.startswith("hosts add['far']: ")
    assert "c.HostPool.hosts" not in caught.value.message
    assert not (tmp_path / "hosts.json").exists()


def test_runtime_hosts_can_be_switched_off(
    make_pool: Callable[..., HostPool], tmp_path: Path
) -> None:
    # Given a hosts file that holds one host
    (tmp_path / "hosts.json").write_text(
        json.dumps({"hosts": {"old": {"url": engine_url(tmp_path), **KEY}}})
    )
    assert make_pool().names() == ["old"]
    # When runtime hosts are off
    pool = make_pool(allow_runtime_hosts=False)
    # Then the file is not read and adding is refused, saying where to configure instead
    assert pool.names() == []
    with pytest.raises(BadRequest, match=r"allow_runtime_hosts.*c\.HostPool\.hosts"):
        pool.add("new", engine_url(tmp_path, "new"), KEY, check=False)
    assert set(hosts_file(tmp_path)["hosts"]) == {"old"}


def test_removing_an_added_host_drops_it_from_the_file(
    make_pool: Callable[..., HostPool], tmp_path: Path
) -> None:
    pool = make_pool()
    pool.add("one", engine_url(tmp_path, "one"), KEY, check=False)
    pool.add("two", engine_url(tmp_path, "two"), KEY, check=False)
    pool.remove("one")
    assert set(hosts_file(tmp_path)["hosts"]) == {"two"}
    assert pool.names() == ["two"]
    with pytest.raises(NotFound):
        pool.get("one")


def test_configured_hosts_cannot_be_removed(
    make_pool: Callable[..., HostPool], tmp_path: Path
) -> None:
    pool = make_pool(hosts={"conf": engine_url(tmp_path, "conf")})
    with pytest.raises(BadRequest, match=r"'conf' comes from the configuration \(config\)"):
        pool.remove("conf")
    assert pool.names() == ["conf"]
    with pytest.raises(NotFound):
        pool.remove("nope")


def test_a_second_pool_sees_changes_without_a_restart(
    make_pool: Callable[..., HostPool], tmp_path: Path
) -> None:
    # Given two pools on one hosts file (the server and the CLI), the second already loaded
    server, cli = make_pool(), make_pool()
    assert server.names() == []
    # When the CLI adds a host
    cli.add("gpu-a", engine_url(tmp_path, "a"), KEY, check=False)
    # Then the server lists it, as added, without a restart
    assert server.names() == ["gpu-a"]
    assert server.get("gpu-a").origin == "added"
    # And when the CLI removes it, the server drops it (and closes it)
    cli.remove("gpu-a")
    assert server.names() == []


def test_an_unchanged_host_keeps_its_object_across_reloads(
    make_pool: Callable[..., HostPool], tmp_path: Path
) -> None:
    # Given a server that holds an added host (its SSH connection, its tunnels)
    server, cli = make_pool(), make_pool()
    cli.add("a", engine_url(tmp_path, "a"), KEY, check=False)
    held = server.get("a")
    # When another host is added
    cli.add("b", engine_url(tmp_path, "b"), KEY, check=False)
    # Then the first one is the same object (its connection is not reopened)
    assert server.get("a") is held
    assert server.names() == ["a", "b"]


def test_a_same_size_change_in_the_same_timestamp_tick_is_seen(
    make_pool: Callable[..., HostPool], tmp_path: Path
) -> None:
    # Given a server that has read a hosts file with host "aa"
    server, cli = make_pool(), make_pool()
    cli.add("aa", engine_url(tmp_path, "x"), KEY, check=False)
    assert server.names() == ["aa"]
    stamp = os.stat(tmp_path / "hosts.json").st_mtime_ns
    size = os.stat(tmp_path / "hosts.json").st_size
    # When the CLI swaps it for "bb" (same size) within the same timestamp tick
    cli.remove("aa")
    cli.add("bb", engine_url(tmp_path, "x"), KEY, check=False)
    assert os.stat(tmp_path / "hosts.json").st_size == size
    os.utime(tmp_path / "hosts.json", ns=(stamp, stamp))  # a file system with coarse timestamps
    # Then the server sees "bb"
    assert server.names() == ["bb"]


def test_adding_a_host_with_a_bad_port_leaves_the_pool_usable(
    make_pool: Callable[..., HostPool], tmp_path: Path
) -> None:
    pool = make_pool(hosts={"conf": engine_url(tmp_path, "conf")})
    with pytest.raises(BadRequest, match="port"):
        pool.add("far", "ssh://me@box:abc", check=False)
    assert pool.names() == ["conf"]


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("{not json", "cannot be read"),
        ('["a list"]', "has no 'hosts' object"),
        ('{"hosts": ["a"]}', "has no 'hosts' object"),
    ],
)
def test_a_corrupt_hosts_file_is_a_config_error_naming_it(
    make_pool: Callable[..., HostPool], tmp_path: Path, text: str, message: str
) -> None:
    (tmp_path / "hosts.json").write_text(text)
    with pytest.raises(ConfigError) as caught:
        make_pool().names()
    assert f"The hosts file {tmp_path / 'hosts.json'} " in caught.value.message
    assert message in caught.value.message


def test_an_invalid_entry_is_skipped_and_logged_and_the_others_kept(
    make_pool: Callable[..., HostPool], tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    # Given a hosts file with a good host, a bad one and one that clashes with the config
    (tmp_path / "hosts.json").write_text(
        json.dumps(
            {
                "hosts": {
                    "good": {"url": engine_url(tmp_path, "good"), **KEY},
                    "bad": {"url": "http://box"},
                    "conf": {"url": engine_url(tmp_path, "clash")},
                }
            }
        )
    )
    # When the pool reads it
    with caplog.at_level(logging.WARNING, logger=LOG.name):
        names = make_pool(hosts={"conf": engine_url(tmp_path, "conf")}).names()
    # Then the good one is listed, the others skipped with a warning each
    assert names == ["conf", "good"]
    warnings = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert any("host 'bad' of" in w and "ignored: unsupported URL" in w for w in warnings)
    assert any("'conf' is also configured; ignored" in w for w in warnings)


def test_an_entry_written_as_a_url_string_is_not_erased_by_the_next_add(
    make_pool: Callable[..., HostPool], tmp_path: Path
) -> None:
    # Given a hosts file edited by hand, with an entry in the c.HostPool.hosts string form
    (tmp_path / "hosts.json").write_text(json.dumps({"hosts": {"box": "ssh://me@box"}}))
    # When another host is added
    make_pool().add("other", engine_url(tmp_path, "other"), KEY, check=False)
    # Then the hand-written entry is still in the file
    assert "box" in hosts_file(tmp_path)["hosts"]


# --------------------------------------------------------------------------------------------
# hosts.py: Host
# --------------------------------------------------------------------------------------------


def make_host(spec: HostSpec) -> Host:
    return Host(spec, timeout=1.0, gpu_inventory=None, log=LOG)


def test_the_local_host_reaches_containers_at_their_own_address() -> None:
    host = make_host(HostSpec.parse("local", "unix:///var/run/docker.sock", is_local=True))
    try:
        assert host.reach("172.17.0.5", 8888) == ("172.17.0.5", 8888)
        assert host.tunnels is None
    finally:
        host.close()


def test_commands_cannot_run_on_a_tcp_host() -> None:
    host = make_host(HostSpec.parse("tls", "tcp://box:2376"))
    try:
        with pytest.raises(BadRequest, match=r"'tls' is a tcp:// engine.*use ssh://"):
            host.run(["id", "-u"])
    finally:
        host.close()


def test_commands_run_on_the_local_host_here() -> None:
    host = make_host(HostSpec.parse("local", "unix:///var/run/docker.sock", is_local=True))
    try:
        result = host.run(["id", "-u"])
        assert (result.returncode, result.stdout.strip()) == (0, str(os.getuid()))
    finally:
        host.close()


def test_a_second_unix_host_is_not_called_tcp() -> None:
    host = make_host(HostSpec.parse("rootless", "unix:///run/user/1000/docker.sock"))
    try:
        with pytest.raises(BadRequest) as caught:
            host.run(["id", "-u"])
        assert "tcp://" not in caught.value.message
        reason = host.gpus().reason
        assert reason is not None
        assert "local://" not in reason
    finally:
        host.close()


# --------------------------------------------------------------------------------------------
# gpus.py: nvidia-smi through a runner
# --------------------------------------------------------------------------------------------


class RecordedSmi:
    """A runner answering like tests/fixtures/fake-nvidia-smi from a recorded folder:
    query.csv for --query-gpu, list.txt for -L, q.txt for -q; ``code`` for every call."""

    def __init__(self, scenario: str = "two-a100", code: int = 0, stderr: str = "") -> None:
        self.folder = FIXTURES / "smi" / scenario
        self.code = code
        self.stderr = stderr
        self.calls: list[tuple[list[str], float]] = []

    def __call__(self, argv: list[str], timeout: float) -> subprocess.CompletedProcess[str]:
        self.calls.append((argv, timeout))
        if self.code != 0:
            return subprocess.CompletedProcess(argv, self.code, "", self.stderr)
        args = argv[1:]
        query = next((a for a in args if a.startswith("--query-gpu=")), None)
        if query is not None:
            assert query.split("=", 1)[1].split(",") == list(SMI_FIELDS)
            assert "--format=csv,noheader,nounits" in args
            name = "query.csv"
        elif args[:1] == ["-L"]:
            name = "list.txt"
        elif args[:1] == ["-q"]:
            name = "q.txt"
        else:
            name = "default.txt"
        path = self.folder / name
        return subprocess.CompletedProcess(argv, 0, path.read_text() if path.exists() else "", "")


@pytest.mark.parametrize("scenario", ["two-a100", "mig-a100"])
def test_a_remote_nvidia_smi_reads_what_the_local_one_reads(
    fake_smi: Callable[[str], Path], scenario: str
) -> None:
    # Given the same recorded nvidia-smi here (on PATH) and on a remote host (through a runner)
    fake_smi(scenario)
    local = GPUInventory(backend="nvidia-smi").probe()
    runner = RecordedSmi(scenario)
    # When the remote one is probed with a path that exists only there
    remote = NvidiaSmiProbe(
        "/opt/nvidia/bin/nvidia-smi", 4.0, runner=runner, where="host 'x'"
    ).probe()
    # Then it finds the same GPUs, driver and CUDA version
    assert local.gpus
    assert remote == local
    # And every call went to the runner, with that path (not looked up here) and the timeout
    assert runner.calls
    assert all(argv[0] == "/opt/nvidia/bin/nvidia-smi" for argv, _ in runner.calls)
    assert all(timeout == 4.0 for _, timeout in runner.calls)


def test_a_remote_nvidia_smi_that_is_not_installed_names_the_host() -> None:
    runner = RecordedSmi(code=127, stderr="bash: nvidia-smi: command not found")
    probe = NvidiaSmiProbe("nvidia-smi", runner=runner, where="host 'x'")
    with pytest.raises(ProbeUnavailable) as caught:
        probe.probe()
    assert str(caught.value) == "nvidia-smi was not found on host 'x'"


def test_a_remote_nvidia_smi_that_fails_says_its_exit_and_first_line() -> None:
    runner = RecordedSmi(code=9, stderr="NVIDIA-SMI has failed\nmore")
    with pytest.raises(ProbeUnavailable, match=r"^nvidia-smi failed \(exit 9\): NVIDIA-SMI has"):
        NvidiaSmiProbe("nvidia-smi", runner=runner, where="host 'x'").probe()


def test_a_remote_nvidia_smi_that_hangs_is_unavailable() -> None:
    def hangs(argv: list[str], timeout: float) -> subprocess.CompletedProcess[str]:
        raise subprocess.TimeoutExpired(argv, timeout)

    with pytest.raises(ProbeUnavailable, match="did not answer in 3 s"):
        NvidiaSmiProbe("nvidia-smi", 3.0, runner=hangs).probe()


def nvml_must_not_load() -> ModuleType:
    raise AssertionError("NVML reads this machine's GPUs; a remote inventory must not load it")


@pytest.mark.parametrize("backend", ["auto", "nvidia-smi"])
def test_a_remote_inventory_never_tries_nvml(backend: str) -> None:
    runner = RecordedSmi()
    inventory = GPUInventory(
        nvml_must_not_load,
        runner=runner,
        where="host 'x'",
        backend=backend,
        nvidia_smi_path="nvidia-smi",
    )
    try:
        result = inventory.probe()
    finally:
        inventory.close()
    assert result.source == "nvidia-smi"
    assert [g.uuid for g in result.gpus] == [
        "GPU-5d5ba0d6-d33d-2b2c-524d-9e3d8d2b8a77",
        "GPU-8f2a9c41-7b3e-4c55-9d0a-2e6f1b7c3d90",
    ]
    assert runner.calls[0][0][0] == "nvidia-smi"


def test_a_remote_inventory_without_nvidia_smi_says_so_for_that_host() -> None:
    inventory = GPUInventory(
        nvml_must_not_load, runner=RecordedSmi(code=127), where="host 'x'", backend="auto"
    )
    try:
        result = inventory.probe()
    finally:
        inventory.close()
    assert (result.source, result.gpus) == ("none", ())
    assert result.reason == "nvidia-smi: nvidia-smi was not found on host 'x'"


# --------------------------------------------------------------------------------------------
# mounts.py: paths resolved on a remote host
# --------------------------------------------------------------------------------------------

#: Folders of the remote host; none of these exists on this machine.
REMOTE_ROOT = "/gpudev-remote/srv/data"


class RemoteTree:
    """A runner emulating ``realpath -m -- P`` and ``test -e/-d P`` on a remote file system
    held in memory: folders, files and symbolic links (absolute or relative targets)."""

    def __init__(
        self, dirs: set[str], files: set[str], links: dict[str, str], broken: bool = False
    ) -> None:
        self.dirs, self.files, self.links, self.broken = dirs, files, links, broken
        self.calls: list[list[str]] = []

    def resolve(self, path: str) -> str:
        todo = [part for part in path.split("/") if part]
        done: list[str] = []
        hops = 0
        while todo:
            part = todo.pop(0)
            if part == ".":
                continue
            if part == "..":
                if done:
                    done.pop()
                continue
            target = self.links.get("/" + "/".join([*done, part]))
            if target is None:
                done.append(part)
                continue
            hops += 1
            assert hops < 40, f"link loop at {path}"
            if target.startswith("/"):
                done = []
            todo = [p for p in target.split("/") if p] + todo
        return "/" + "/".join(done)

    def __call__(self, argv: list[str], timeout: float) -> subprocess.CompletedProcess[str]:
        self.calls.append(argv)
        assert timeout == 10.0
        match argv:
            case ["realpath", "-m", "--", path]:
                if self.broken:
                    return subprocess.CompletedProcess(argv, 1, "", "realpath: invalid option")
                return subprocess.CompletedProcess(argv, 0, self.resolve(path) + "\n", "")
            case ["test", "-e", path]:
                real = self.resolve(path)
                return subprocess.CompletedProcess(argv, int(real not in self.dirs | self.files))
            case ["test", "-d", path]:
                return subprocess.CompletedProcess(argv, int(self.resolve(path) not in self.dirs))
        return subprocess.CompletedProcess(argv, 127, "", f"{argv[0]}: command not found")


@pytest.fixture
def far() -> RemoteTree:
    """On host 'far': /srv/data with sets/imagenet and readme.txt, a link that escapes to
    /srv/secret, one that stays inside, /data linking to /srv/data, and a home folder."""
    srv = "/gpudev-remote/srv"
    tree = RemoteTree(
        dirs={
            srv,
            REMOTE_ROOT,
            f"{REMOTE_ROOT}/sets",
            f"{REMOTE_ROOT}/sets/imagenet",
            f"{srv}/secret",
            "/gpudev-remote/home/gpu/work",
        },
        files={f"{REMOTE_ROOT}/readme.txt", f"{srv}/secret/keys"},
        links={
            f"{REMOTE_ROOT}/escape": "../secret",
            f"{REMOTE_ROOT}/inside": f"{REMOTE_ROOT}/sets",
            "/gpudev-remote/data": "srv/data",
        },
    )
    assert not os.path.exists("/gpudev-remote"), "the remote tree must not exist here"
    return tree


TRAIT = "c.HostPool.hosts['far']['mount_roots']"


def on_far(tree: RemoteTree, *roots: Any) -> tuple[list[Any], RemotePaths, str]:
    return list(roots), RemotePaths(tree, "host 'far'"), TRAIT


def test_a_folder_under_a_remote_root_is_mounted_read_only(far: RemoteTree) -> None:
    # When a folder under the remote root is mounted
    mount = MountPolicy().resolve(
        f"{REMOTE_ROOT}/sets/", "/data/sets", site=on_far(far, REMOTE_ROOT)
    )
    # Then it is checked there and is read-only by default
    assert mount == ResolvedMount(f"{REMOTE_ROOT}/sets", "/data/sets", True)
    assert ["realpath", "-m", "--", f"{REMOTE_ROOT}/sets/"] in far.calls
    assert ["test", "-e", f"{REMOTE_ROOT}/sets"] in far.calls


def test_a_link_is_followed_on_the_remote_host(far: RemoteTree) -> None:
    # Given a link inside the root to another folder inside it
    mount = MountPolicy().resolve(
        f"{REMOTE_ROOT}/inside/imagenet", "/i", site=on_far(far, REMOTE_ROOT)
    )
    # Then the source is where the link points on that host
    assert mount.source == f"{REMOTE_ROOT}/sets/imagenet"


def test_a_remote_root_that_is_a_link_is_resolved_there(far: RemoteTree) -> None:
    # Given the root /data is a link to srv/data on that host
    mount = MountPolicy().resolve(
        "/gpudev-remote/data/readme.txt", "/r", site=on_far(far, "/gpudev-remote/data")
    )
    assert mount.source == f"{REMOTE_ROOT}/readme.txt"


def test_writable_remote_roots(far: RemoteTree) -> None:
    site = on_far(far, {"path": REMOTE_ROOT, "writable": True})
    assert MountPolicy().resolve(f"{REMOTE_ROOT}/sets", "/s", site=site).read_only is False
    assert MountPolicy().resolve(f"{REMOTE_ROOT}/sets", "/s", True, site=site).read_only is True


def test_writing_under_a_read_only_remote_root_is_refused(far: RemoteTree) -> None:
    with pytest.raises(MountNotAllowed, match=r"its root .* is read-only \(c\.HostPool"):
        MountPolicy().resolve(f"{REMOTE_ROOT}/sets", "/s", False, site=on_far(far, REMOTE_ROOT))


def test_a_link_escaping_the_remote_root_is_refused(far: RemoteTree) -> None:
    # When a link inside the root that points outside it on that host is mounted
    with pytest.raises(MountNotAllowed) as caught:
        MountPolicy().resolve(f"{REMOTE_ROOT}/escape", "/x", site=on_far(far, REMOTE_ROOT))
    # Then the refusal says where it resolves to there, on which host, under which setting
    message = caught.value.message
    assert "resolves to '/gpudev-remote/srv/secret'" in message
    assert "outside the folders of host 'far'" in message
    assert TRAIT in message
    assert caught.value.status == 403


def test_a_missing_remote_path_is_refused(far: RemoteTree) -> None:
    with pytest.raises(BadRequest, match="does not exist on host 'far'"):
        MountPolicy().resolve(f"{REMOTE_ROOT}/nope", "/n", site=on_far(far, REMOTE_ROOT))


def test_no_remote_roots_means_no_mounts(far: RemoteTree) -> None:
    with pytest.raises(MountNotAllowed, match=r"no folder of host 'far' may be mounted \(c\."):
        MountPolicy().resolve(f"{REMOTE_ROOT}/sets", "/s", site=on_far(far))


def test_a_path_that_cannot_be_resolved_remotely_is_a_bad_request(far: RemoteTree) -> None:
    far.broken = True
    with pytest.raises(BadRequest, match="could not be resolved on host 'far'"):
        MountPolicy().resolve(f"{REMOTE_ROOT}/sets", "/s", site=on_far(far, REMOTE_ROOT))


def test_the_local_allowed_roots_do_not_apply_to_a_remote_host(far: RemoteTree) -> None:
    # Given the remote root is also a local allowed root, but the remote host has none
    policy = MountPolicy(allowed_roots=[REMOTE_ROOT])
    # Then nothing is mounted on the remote host
    with pytest.raises(MountNotAllowed, match="no folder of host 'far'"):
        policy.resolve(f"{REMOTE_ROOT}/sets", "/s", site=on_far(far))


def test_the_remote_workspace_is_a_read_write_folder(far: RemoteTree) -> None:
    paths = RemotePaths(far, "host 'far'")
    mount = MountPolicy().workspace("/gpudev-remote/home/gpu/work", "/workspaces/x", paths)
    assert mount == ResolvedMount("/gpudev-remote/home/gpu/work", "/workspaces/x", False)
    assert ["test", "-d", "/gpudev-remote/home/gpu/work"] in far.calls


@pytest.mark.parametrize(
    "workspace", [f"{REMOTE_ROOT}/readme.txt", "/gpudev-remote/home/gpu/missing"]
)
def test_a_remote_workspace_that_is_not_a_folder_is_refused(
    far: RemoteTree, workspace: str
) -> None:
    paths = RemotePaths(far, "host 'far'")
    with pytest.raises(BadRequest, match=f"'{workspace}' is not a folder on host 'far'"):
        MountPolicy().workspace(workspace, "/workspaces/x", paths)


def test_a_remote_workspace_that_cannot_be_resolved_is_a_bad_request(far: RemoteTree) -> None:
    far.broken = True
    with pytest.raises(BadRequest, match="could not be resolved on host 'far'"):
        MountPolicy().workspace(
            "/gpudev-remote/home/gpu/work", "/w", RemotePaths(far, "host 'far'")
        )


def test_remote_realpath_is_asked_once_per_path(far: RemoteTree) -> None:
    paths = RemotePaths(far, "host 'far'")
    assert paths.realpath(f"{REMOTE_ROOT}/inside") == f"{REMOTE_ROOT}/sets"
    assert paths.realpath(f"{REMOTE_ROOT}/inside") == f"{REMOTE_ROOT}/sets"
    assert [c for c in far.calls if c[0] == "realpath"] == [
        ["realpath", "-m", "--", f"{REMOTE_ROOT}/inside"]
    ]


# --------------------------------------------------------------------------------------------
# leases.py: check_fit (placement)
# --------------------------------------------------------------------------------------------

A100 = "NVIDIA A100-SXM4-80GB"


def unit(index: int, name: str = A100, total: int = 81920) -> LeasableGPU:
    return LeasableGPU(
        uuid=f"GPU-0000000{index}-aaaa-bbbb-cccc-dddddddddddd",
        name=name,
        index=index,
        memory_total_mib=total,
        memory_used_mib=0,
    )


def held_by(container: str, *units: LeasableGPU) -> dict[str, Lease]:
    lease = Lease("lease-1", "far", container, "alice", tuple(u.uuid for u in units), 0.0)
    return {u.uuid: lease for u in units}


def test_a_request_that_fits_passes() -> None:
    gpus = [unit(0), unit(1), unit(2, "NVIDIA T4", 15360)]
    held = held_by("busy", gpus[0])
    check_fit("far", GPURequest(count=1), gpus, held)
    check_fit("far", GPURequest(count=2), gpus, held)
    check_fit("far", GPURequest(uuids=(gpus[1].uuid,)), gpus, held)
    check_fit("far", GPURequest(count=1, model="a100"), gpus, held)


def test_too_few_free_gpus_is_no_free_gpu_with_counts_and_holders() -> None:
    # Given two A100s, one held
    gpus = [unit(0), unit(1)]
    held = held_by("busy", gpus[0])
    # When two are asked for
    with pytest.raises(NoFreeGPU) as caught:
        check_fit("far", GPURequest(count=2), gpus, held)
    # Then it says how many are free, who holds the other, and counts in the details
    error = caught.value
    assert error.message.startswith("2 GPUs requested on host 'far', 1 free. Held: GPU 0")
    assert "by container busy for alice" in error.message
    assert (error.details["requested"], error.details["matching"], error.details["free"]) == (
        2,
        2,
        1,
    )
    assert error.status == 409


def test_a_filter_nothing_matches_is_no_free_gpu_with_zero_matches() -> None:
    with pytest.raises(NoFreeGPU, match=r"with model containing 'H100': 0 match, 0 free\."):
        check_fit("far", GPURequest(count=1, model="H100"), [unit(0)], {})


def test_a_held_gpu_asked_for_by_uuid_is_no_free_gpu() -> None:
    gpus = [unit(0), unit(1)]
    with pytest.raises(NoFreeGPU, match="1 GPU requested on host 'far' by UUID, 0 free"):
        check_fit("far", GPURequest(uuids=(gpus[0].uuid,)), gpus, held_by("busy", gpus[0]))


def test_an_unknown_uuid_is_a_bad_request_naming_the_host() -> None:
    with pytest.raises(BadRequest) as caught:
        check_fit("far", GPURequest(uuids=("GPU-nope",)), [unit(0)], {})
    assert caught.value.message == "There is no GPU with UUID GPU-nope on host 'far'"
    assert caught.value.details == {"host": "far", "uuid": "GPU-nope"}
    assert not isinstance(caught.value, NoFreeGPU)


def test_a_uuid_that_misses_the_filter_is_a_bad_request() -> None:
    gpus = [unit(0, "NVIDIA T4", 15360)]
    with pytest.raises(GPUDevError, match="does not have at least 40000 MiB") as caught:
        check_fit("far", GPURequest(uuids=(gpus[0].uuid,), min_memory_mib=40000), gpus, {})
    assert isinstance(caught.value, BadRequest)


# --------------------------------------------------------------------------------------------
# Review fixes: known_hosts markers, runtime hosts, URL characters
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


@pytest.mark.parametrize(
    ("url", "options", "text"),
    [
        ("unix:///var/run/docker.sock", {}, "unix:// engine cannot be added"),
        ("tcp://box:2376", {}, "needs mutual TLS"),
        (
            "tcp://box:2376",
            {
                "tls_ca_cert": "/ca",
                "tls_client_cert": "/c",
                "tls_client_key": "/k",
                "workspace": "/srv",
            },
            "the administrator chooses these",
        ),
        ("ssh://me@box", {"workspace": "/", **KEY}, "the administrator chooses these"),
        ("ssh://me@box", {"mount_roots": ["/"], **KEY}, "the administrator chooses these"),
        ("ssh://me@box", {"nvidia_smi": "/bin/sh", **KEY}, "the administrator chooses these"),
        ("ssh://me@box", {}, "never with the server's SSH agent or keys"),
    ],
)
def test_hosts_a_user_may_not_add_at_run_time(
    make_pool: Callable[..., HostPool], url: str, options: dict[str, Any], text: str
) -> None:
    pool = make_pool()
    with pytest.raises(BadRequest, match=text):
        pool.add("x", url, options, check=False)
    assert pool.names() == []


@pytest.mark.parametrize(
    "url", ["ssh://$(id)@box", "ssh://me@bo`x`", "ssh://-oProxyCommand=x@box", "tcp://a;b:1"]
)
def test_user_and_host_names_with_shell_or_option_characters_are_refused(url: str) -> None:
    with pytest.raises(ConfigError, match="letters, digits"):
        HostSpec.parse("far", url)


def test_a_configured_host_cannot_be_added_again_under_another_name(
    make_pool: Callable[..., HostPool], tmp_path: Path
) -> None:
    key = tmp_path / "admin_key"
    pool = make_pool(
        hosts={"conf": {"url": "ssh://admin@gpu-box.example.org", "identity_file": str(key)}}
    )
    # Its address, under any user or port, and in any case
    for url in ("ssh://me@gpu-box.example.org", "ssh://me@GPU-BOX.example.org:2222"):
        with pytest.raises(BadRequest, match="address of the configured host 'conf'"):
            pool.add("mine", url, KEY, check=False)
    # Its key, for another address
    with pytest.raises(BadRequest, match="the one of the configured host 'conf'"):
        pool.add("mine", "ssh://me@other.example.org", {"identity_file": str(key)}, check=False)
    assert pool.names() == ["conf"]


def test_the_hosts_file_cannot_widen_a_host_either(
    make_pool: Callable[..., HostPool], tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    # Given a hosts file (written by an older version, or by hand) that gives a host "/"
    entry = {"url": engine_url(tmp_path, "old"), "workspace": "/", "mount_roots": ["/"], **KEY}
    keyless = {"url": engine_url(tmp_path, "agent")}
    (tmp_path / "hosts.json").write_text(json.dumps({"hosts": {"old": entry, "agent": keyless}}))
    # When the pool reads it
    with caplog.at_level(logging.WARNING, logger=LOG.name):
        pool = make_pool(runtime_host_settings={"workspace": "/srv/shared"})
        names = pool.names()
    # Then the administrator's settings apply, and a host without a key of its own is skipped
    assert names == ["old"]
    assert pool.get("old").spec.workspace == "/srv/shared"
    assert pool.get("old").spec.mount_roots == ()
    warnings = " ".join(r.getMessage() for r in caplog.records)
    assert "mount_roots, workspace of host 'old' ignored" in warnings
    assert "'agent'" in warnings


def test_why_a_host_could_not_be_added_is_told_to_administrators_only(
    make_pool: Callable[..., HostPool], tmp_path: Path
) -> None:
    # Nothing listens there (a refused connection): a non-administrator cannot tell that from
    # a name that does not resolve or a key that was refused
    pool = make_pool()
    key = tmp_path / "id"
    key.write_text("not a key")
    told = []
    for url in (engine_url(tmp_path, "closed"), "ssh://me@no-such-host.invalid"):
        with pytest.raises(GPUDevError) as caught:
            pool.add("far", url, {"identity_file": str(key)}, check=True)
        told.append(caught.value.message.replace(url, "URL"))
        assert caught.value.status == 503
    assert told[0] == told[1]
    assert "server log" in told[0]
    # An administrator is told why
    with pytest.raises(GPUDevError) as detailed:
        pool.add("far", engine_url(tmp_path, "closed"), {"identity_file": str(key)}, detailed=True)
    assert detailed.value.message.replace(engine_url(tmp_path, "closed"), "URL") != told[0]
    assert pool.names() == []
