"""Hosts: one Docker engine each, with its GPUs. ``HostPool`` holds every configured host.

The local engine (``DOCKER_HOST`` or the default socket) is the default host; more hosts come
from ``c.HostPool.hosts`` and, at run time, from ``jupyter gpudev hosts add`` or the panel
(persisted in ``c.HostPool.hosts_file``). ``ssh://`` hosts use one persistent SSH connection for
the Docker API, their GPU inventory (``nvidia-smi`` there), path checks and port forwards (see
``jupyter_gpudev.ssh``); ``tcp://`` hosts use TLS client certificates.

Every call here that talks to an engine blocks: the server runs them in worker threads.
"""

from __future__ import annotations

import contextlib
import errno
import ipaddress
import json
import os
import re
import shutil
import stat
import subprocess
import threading
from collections.abc import Mapping
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict, dataclass, field, replace
from typing import Any, Literal, Protocol
from urllib.parse import urlsplit

import docker
import docker.errors
from docker.constants import DEFAULT_DOCKER_API_VERSION, MINIMUM_DOCKER_API_VERSION
from docker.tls import TLSConfig
from docker.utils import version_lt
from jupyter_core.paths import jupyter_data_dir
from traitlets import Bool, Dict, Float, Instance, TraitError, Unicode, default, validate
from traitlets.config import LoggingConfigurable

from ..errors import (
    ENGINE_FAILURES,
    BadRequest,
    ConfigError,
    Conflict,
    EngineError,
    EngineUnreachable,
    GPUDevError,
    NotFound,
    engine_errors,
)
from .gpus import GPUInventory, Inventory, ProbeUnavailable
from .ssh import SSHConnection, SSHDockerAdapter, SSHTarget
from .tunnels import Tunnels

Transport = Literal["local", "ssh", "tcp"]


class HeldLease(Protocol):
    """What a host report needs of a lease (``leasing.Lease``; engines know nothing of leases)."""

    def held_json(self) -> dict[str, Any]: ...


DEFAULT_LOCAL_URL = "unix:///var/run/docker.sock"
_NAME_RE = re.compile(r"^[a-z0-9][a-z0-9._-]{0,62}\Z")
#: A user or host name of an ssh:// or tcp:// URL (what reaches ``ssh`` for terminals).
_URL_PART_RE = re.compile(r"^[A-Za-z0-9_][A-Za-z0-9._:-]{0,252}\Z")
_TLS_KEYS = {"tls_ca_cert", "tls_client_cert", "tls_client_key", "tls_verify"}
_SSH_KEYS = {"identity_file", "known_hosts"}
#: Keys of a remote host: what runs there, and which of its folders containers see.
_REMOTE_KEYS = {"nvidia_smi", "workspace", "mount_roots"}
_HOST_KEYS = {"url"} | _TLS_KEYS | _SSH_KEYS | _REMOTE_KEYS


def _check_url(where: str, url: Any) -> None:
    if not isinstance(url, str) or not url:
        raise ConfigError(f"{where}: 'url' is required")
    parts = urlsplit(url)
    if parts.password:
        raise ConfigError(
            f"{where}: do not put a password in the URL; ssh:// uses keys, tcp:// uses TLS "
            "client certificates"
        )
    if parts.scheme not in ("unix", "ssh", "tcp"):
        raise ConfigError(
            f"{where}: unsupported URL {url!r}; use unix:///path, ssh://user@host[:port] "
            "or tcp://host:port"
        )
    if parts.scheme == "unix" and not parts.path:
        raise ConfigError(f"{where}: a unix:// URL needs a socket path")
    if parts.scheme in ("ssh", "tcp") and not parts.hostname:
        raise ConfigError(f"{where}: {url!r} has no host name")
    if parts.scheme in ("ssh", "tcp") and (
        not _URL_PART_RE.match(parts.hostname or "")
        or (parts.username is not None and not _URL_PART_RE.match(parts.username))
    ):
        raise ConfigError(
            f"{where}: {url!r}: a user or host name is letters, digits, '.', '_', '-' (or an "
            "IPv6 address in brackets)"
        )
    try:
        port = parts.port
    except ValueError:
        port = 0
    if port == 0:  # None (no port) is fine: the scheme's default
        raise ConfigError(f"{where}: {url!r} has no valid port (1-65535)")


@dataclass(frozen=True)
class HostSpec:
    """How to reach one engine. ``url`` never holds a secret: TLS material is in files."""

    name: str
    url: str
    tls_ca_cert: str | None = None
    tls_client_cert: str | None = None
    tls_client_key: str | None = None
    tls_verify: bool = True
    is_local: bool = False
    #: ssh://: the private key to use (default: ssh-agent, then ~/.ssh/id_*), and the
    #: known_hosts file host keys are checked against (default: ~/.ssh/known_hosts and
    #: /etc/ssh/ssh_known_hosts).
    identity_file: str | None = None
    known_hosts: str | None = None
    #: Remote hosts: the nvidia-smi command there, the folder mounted as the workspace, and the
    #: folders of that host environments may mount (as ``c.MountPolicy.allowed_roots``).
    nvidia_smi: str = "nvidia-smi"
    workspace: str | None = None
    mount_roots: tuple[str | dict[str, Any], ...] = ()

    @property
    def transport(self) -> Transport:
        scheme = urlsplit(self.url).scheme
        if scheme == "ssh":
            return "ssh"
        if scheme in ("tcp", "https", "http"):
            return "tcp"
        return "local"

    @classmethod
    def parse(  # noqa: PLR0912 - one check per key, each with its own message
        cls, name: str, value: str | dict[str, Any], *, is_local: bool = False
    ) -> HostSpec:
        """Validate one entry of ``c.HostPool.hosts``; errors name the trait and the host."""
        where = f"c.HostPool.hosts[{name!r}]"
        if not isinstance(name, str) or not _NAME_RE.match(name):
            raise ConfigError(
                f"{where}: a host name is 1-63 lowercase letters, digits, '.', '_' or '-'"
            )
        if isinstance(value, str):
            options: dict[str, Any] = {"url": value}
        elif isinstance(value, dict):
            unknown = set(value) - _HOST_KEYS
            if unknown:
                raise ConfigError(f"{where}: unknown keys {sorted(unknown)}")
            options = dict(value)
        else:
            raise ConfigError(f"{where}: expected a URL string or a dict with 'url'")
        url = options.get("url")
        _check_url(where, url)
        scheme = urlsplit(str(url)).scheme
        wrong = (
            (set(options) & _TLS_KEYS if scheme != "tcp" else set())
            | (set(options) & _SSH_KEYS if scheme != "ssh" else set())
            | (set(options) & _REMOTE_KEYS if is_local else set())
        )
        if wrong:
            raise ConfigError(f"{where}: {sorted(wrong)} do not apply to a {scheme}:// host")
        for key in ("tls_ca_cert", "tls_client_cert", "tls_client_key", "identity_file"):
            if options.get(key) is not None and not isinstance(options[key], str):
                raise ConfigError(f"{where}: {key!r} must be a file path")
        for key in ("known_hosts", "workspace", "nvidia_smi"):
            if options.get(key) is not None and not isinstance(options[key], str):
                raise ConfigError(f"{where}: {key!r} must be a string")
        workspace = options.get("workspace")
        if workspace is not None and (
            not workspace.startswith("/") or ".." in workspace.split("/")
        ):
            raise ConfigError(f"{where}: 'workspace' must be an absolute path of that host")
        roots = options.get("mount_roots", [])
        if not isinstance(roots, (list, tuple)):
            raise ConfigError(f"{where}: 'mount_roots' must be a list of paths of that host")
        if bool(options.get("tls_client_cert")) != bool(options.get("tls_client_key")):
            raise ConfigError(f"{where}: 'tls_client_cert' and 'tls_client_key' go together")
        return cls(
            name=name,
            url=str(url),
            tls_ca_cert=options.get("tls_ca_cert"),
            tls_client_cert=options.get("tls_client_cert"),
            tls_client_key=options.get("tls_client_key"),
            tls_verify=bool(options.get("tls_verify", True)),
            is_local=is_local,
            identity_file=options.get("identity_file"),
            known_hosts=options.get("known_hosts"),
            nvidia_smi=options.get("nvidia_smi") or "nvidia-smi",
            workspace=workspace,
            mount_roots=tuple(roots),
        )

    def to_config(self) -> dict[str, Any]:
        """The entry as ``c.HostPool.hosts`` (and the hosts file) hold it: set keys only."""
        entry: dict[str, Any] = {"url": self.url}
        for key in sorted(_HOST_KEYS - {"url", "tls_verify", "nvidia_smi", "mount_roots"}):
            if getattr(self, key) is not None:
                entry[key] = getattr(self, key)
        if self.transport == "tcp" and not self.tls_verify:
            entry["tls_verify"] = False
        if self.nvidia_smi != "nvidia-smi":
            entry["nvidia_smi"] = self.nvidia_smi
        if self.mount_roots:
            entry["mount_roots"] = list(self.mount_roots)
        return entry


@dataclass(frozen=True)
class EngineInfo:
    """What the engine says of itself."""

    version: str
    api_version: str
    os: str
    arch: str
    kernel_version: str | None
    operating_system: str | None
    cgroup_driver: str | None
    cgroup_version: str | None
    runtimes: tuple[str, ...]
    default_runtime: str | None
    nvidia_runtime: bool
    nvidia_hook: bool | None
    cdi: bool
    cdi_spec_dirs: tuple[str, ...]


@dataclass(frozen=True)
class HostInfo:
    """A host as the API and the CLI report it."""

    name: str
    url: str
    transport: Transport
    is_local: bool
    reachable: bool
    reason: str | None = None
    engine: EngineInfo | None = None
    gpus: Inventory = field(default_factory=lambda: Inventory(source="none"))
    #: Where the host comes from: "local", "config" (c.HostPool.hosts) or "added" (at run
    #: time: removable with `hosts remove`).
    origin: str = "config"
    #: Remote hosts: the folder of that host mounted as the workspace.
    workspace: str | None = None
    #: The active GPU leases on this host (set by ``DevContainers.describe_hosts``, which
    #: has the ledger), reported as ``Lease.held_json``.
    leases: tuple[HeldLease, ...] = ()

    def to_json(self) -> dict[str, Any]:
        data = asdict(replace(self, leases=()))
        data["leases"] = [lease.held_json() for lease in self.leases]
        return data


class Host:
    """One engine: a lazily opened, persistent Docker client plus the host's GPU inventory."""

    def __init__(
        self,
        spec: HostSpec,
        *,
        timeout: float,
        gpu_inventory: GPUInventory | None,
        log: Any,
        api_timeout: float = 300.0,
    ) -> None:
        self.spec = spec
        self.timeout = timeout
        self.api_timeout = api_timeout
        self.gpu_inventory = gpu_inventory
        self.log = log
        self.origin = "local" if spec.is_local else "config"
        self._client: docker.DockerClient | None = None
        self._probe_client: docker.DockerClient | None = None
        self._lock = threading.Lock()
        #: ssh:// hosts: the one connection everything goes through, and its port forwards.
        self.ssh: SSHConnection | None = None
        self.tunnels: Tunnels | None = None
        self._user_ids: str | None = None
        if spec.transport == "ssh":
            self.ssh = SSHConnection(
                SSHTarget.from_url(
                    spec.url, identity_file=spec.identity_file, known_hosts=spec.known_hosts
                ),
                timeout=timeout,
                log=log,
            )
            self.tunnels = Tunnels(self.ssh, log=log)

    @property
    def name(self) -> str:
        return self.spec.name

    def _check_socket(self) -> None:
        """Fail early, and without leaking a socket, when a unix:// socket cannot be used."""
        path = urlsplit(self.spec.url).path
        if not os.path.exists(path):
            raise FileNotFoundError(errno.ENOENT, "No such socket", path)
        if not stat.S_ISSOCK(os.stat(path).st_mode):
            raise FileNotFoundError(errno.ENOENT, "Not a socket", path)
        if not os.access(path, os.R_OK | os.W_OK):
            raise PermissionError(errno.EACCES, "Permission denied", path)

    def _connect(self, timeout: float) -> docker.DockerClient:
        if urlsplit(self.spec.url).scheme == "unix":
            self._check_socket()
        tls: TLSConfig | bool = False
        if self.spec.transport == "tcp" and (
            self.spec.tls_ca_cert or self.spec.tls_client_cert or self.spec.tls_verify
        ):
            client_cert = (
                (self.spec.tls_client_cert, self.spec.tls_client_key)
                if self.spec.tls_client_cert and self.spec.tls_client_key
                else None
            )
            tls = TLSConfig(
                client_cert=client_cert,
                ca_cert=self.spec.tls_ca_cert,
                verify=self.spec.tls_ca_cert or self.spec.tls_verify,
            )
        # Negotiate the API version with a short-lived client that is closed even when the
        # engine does not answer (version="auto" would leak its socket on failure).
        probe = self._new_client(MINIMUM_DOCKER_API_VERSION, self.timeout, tls)
        try:
            engine_api = str(probe.version(api_version=False)["ApiVersion"])
        except ENGINE_FAILURES:
            self._explain_remote_failure()
            raise
        finally:
            probe.close()
        api = (
            engine_api
            if version_lt(engine_api, DEFAULT_DOCKER_API_VERSION)
            else (DEFAULT_DOCKER_API_VERSION)
        )
        return self._new_client(api, timeout, tls)

    def _new_client(
        self, version: str, timeout: float, tls: TLSConfig | bool
    ) -> docker.DockerClient:
        if self.ssh is None:
            return docker.DockerClient(
                base_url=self.spec.url,
                version=version,
                timeout=timeout,  # type: ignore[arg-type] # requests takes a float
                tls=tls,
            )
        # docker-py's own ssh:// adapter opens a connection per client, never reconnects after
        # a drop and reads ~/.ssh only: carry the API over this host's one SSH connection.
        # (use_ssh_client=True only keeps docker-py from connecting by itself.)
        client = docker.DockerClient(
            base_url=self.spec.url,
            version=version,
            timeout=timeout,  # type: ignore[arg-type]
            use_ssh_client=True,
        )
        # Probes (timeout) get 2 channels, operations 4: with 2 commands at once and the
        # short-lived version probe, under OpenSSH's default of 10 sessions per connection.
        adapter = SSHDockerAdapter(self.ssh, timeout, 2 if timeout == self.timeout else 4)
        client.api.mount("http+docker://ssh", adapter)
        client.api._custom_adapter = adapter  # type: ignore[attr-defined] # closed with it
        return client

    def _explain_remote_failure(self) -> None:
        """An ssh:// engine that did not answer: say why when the host can tell (no docker
        command there, no access to its socket)."""
        if self.ssh is None:
            return
        try:
            result = self.ssh.run(["docker", "version", "--format", "{{.Server.Version}}"], 10.0)
        except (GPUDevError, OSError, subprocess.SubprocessError):
            return
        target = self.ssh.target
        if result.returncode == 127:
            reason = "the docker command is not installed there (ssh:// needs the docker CLI)"
        elif result.returncode != 0:
            first = (result.stderr.strip() or result.stdout.strip() or "no output").splitlines()
            reason = f"`docker version` failed there: {first[-1][:200]}"
        else:
            return
        raise EngineUnreachable(
            f"The Docker engine of {self.name} ({target.where}) did not answer over SSH: {reason}.",
            details={"host": self.name, "url": self.spec.url},
        )

    def _connected(self, probe: bool) -> docker.DockerClient:
        with self._lock:
            current = self._probe_client if probe else self._client
            if current is not None:
                return current
            with self._unreachable():
                current = self._connect(self.timeout if probe else self.api_timeout)
            if probe:
                self._probe_client = current
            else:
                self._client = current
            return current

    def client(self) -> docker.DockerClient:
        """The client for operations (builds, starts, diffs: ``api_timeout`` per call),
        connected on first use; raises ``EngineUnreachable``."""
        return self._connected(probe=False)

    def _close_clients(self) -> None:
        with self._lock:
            for client in (self._client, self._probe_client):
                if client is not None:
                    client.close()
            self._client = self._probe_client = None

    def close(self) -> None:
        self._close_clients()
        if self.tunnels is not None:
            self.tunnels.close()
        if self.ssh is not None:
            self.ssh.close()

    def _unreachable(self) -> contextlib.AbstractContextManager[None]:
        """Engine failures in it mean: no engine answered at this host's address."""
        return engine_errors(
            f"Docker engine {self.name} at {self.spec.url}",
            self.log,
            unreachable_at=self.spec.url,
            details={"host": self.name, "url": self.spec.url},
        )

    def engine_info(self) -> EngineInfo:
        """Ask the engine for its version and features (``timeout`` per call); raises
        ``EngineUnreachable``."""
        client = self._connected(probe=True)
        try:
            with self._unreachable():
                version = client.version()
                info = client.info()
        except EngineUnreachable:
            self._close_clients()  # reconnect next time: the engine may have restarted
            raise
        runtimes = tuple(sorted((info.get("Runtimes") or {}).keys()))
        cdi_dirs = tuple(info.get("CDISpecDirs") or ())
        hook: bool | None = None
        if self.spec.is_local:
            hook = any(
                shutil.which(tool) is not None
                for tool in ("nvidia-container-runtime-hook", "nvidia-container-toolkit")
            )
        return EngineInfo(
            version=str(version.get("Version", "unknown")),
            api_version=str(version.get("ApiVersion", "unknown")),
            os=str(version.get("Os") or info.get("OSType") or "unknown"),
            arch=str(version.get("Arch") or info.get("Architecture") or "unknown"),
            kernel_version=info.get("KernelVersion"),
            operating_system=info.get("OperatingSystem"),
            cgroup_driver=info.get("CgroupDriver"),
            cgroup_version=info.get("CgroupVersion"),
            runtimes=runtimes,
            default_runtime=info.get("DefaultRuntime"),
            nvidia_runtime="nvidia" in runtimes,
            nvidia_hook=hook,
            cdi=bool(cdi_dirs),
            cdi_spec_dirs=cdi_dirs,
        )

    def reach(self, address: str, port: int) -> tuple[str, int]:
        """Where this server connects to reach ``address:port`` on the host's side (a
        container's address on its bridge network): the address itself for the local engine
        and tcp:// engines (which must route to their containers)."""
        if self.tunnels is None:
            return address, port
        return "127.0.0.1", self.tunnels.forward(address, port)

    def unreach(self, address: str, ports: tuple[int, ...] | None = None) -> None:
        """Close the forwards to ``address`` (only to ``ports`` when given)."""
        if self.tunnels is not None:
            self.tunnels.close_to(address, ports)

    def run(self, argv: list[str], timeout: float = 10.0) -> subprocess.CompletedProcess[str]:
        """Run a command on the host (argument list, never a shell string of ours): locally,
        or over the host's SSH connection. tcp:// hosts cannot run commands."""
        if self.ssh is not None:
            return self.ssh.run(argv, timeout)
        if self.spec.is_local:
            return subprocess.run(
                argv, capture_output=True, text=True, timeout=timeout, check=False
            )
        scheme = urlsplit(self.spec.url).scheme
        raise BadRequest(
            f"Host {self.name!r} is a {scheme}:// engine: commands cannot run on it (use ssh://)"
        )

    def user_ids(self) -> str | None:
        """``uid:gid`` containers run as by default (so workspace files keep their owner):
        the server user's here, the SSH user's on an ssh:// host (asked once), ``None`` (the
        image's user) on a tcp:// host."""
        if self.spec.is_local:
            return f"{os.getuid()}:{os.getgid()}" if hasattr(os, "getuid") else None
        if self.ssh is None:
            return None
        if self._user_ids is None:
            result = self.run(["id", "-u"], 10.0), self.run(["id", "-g"], 10.0)
            values = [r.stdout.strip() for r in result if r.returncode == 0]
            if len(values) != 2 or not all(v.isdigit() for v in values):
                raise EngineError(f"Could not read the SSH user's uid/gid on host {self.name!r}")
            self._user_ids = f"{values[0]}:{values[1]}"
        return self._user_ids

    def smi_runner(self, argv: list[str], timeout: float) -> subprocess.CompletedProcess[str]:
        """``run`` for the GPU inventory: a host that cannot be reached has no inventory."""
        try:
            return self.run(argv, timeout)
        except GPUDevError as err:
            raise ProbeUnavailable(err.message) from err

    def gpus(self) -> Inventory:
        if self.gpu_inventory is None:
            return Inventory(
                source="none",
                reason=(
                    f"GPU inventory over {urlsplit(self.spec.url).scheme}:// is not supported "
                    "(use ssh://)"
                ),
            )
        return self.gpu_inventory.probe()

    def describe(self) -> HostInfo:
        """The host's state; an unreachable engine is reported, not raised."""
        engine: EngineInfo | None = None
        reason: str | None = None
        try:
            engine = self.engine_info()
        except EngineUnreachable as exc:
            reason = exc.message
        return HostInfo(
            name=self.name,
            url=self.spec.url,
            transport=self.spec.transport,
            is_local=self.spec.is_local,
            reachable=engine is not None,
            reason=reason,
            engine=engine,
            gpus=self.gpus()
            if engine is not None or self.spec.is_local
            else Inventory(source="none", reason="the host is unreachable"),
            origin=self.origin,
            workspace=self.spec.workspace,
        )


class HostPool(LoggingConfigurable):
    """Every host jupyter-gpudev can start containers on. Configure with ``c.HostPool.*``."""

    include_local = Bool(
        True,
        help="Offer this machine's own Docker engine as a host (named by local_name).",
    ).tag(config=True)

    local_name = Unicode("local", help="The name under which the local engine is listed.").tag(
        config=True
    )

    local_url = Unicode(
        None,
        allow_none=True,
        help="""Address of the local Docker engine. Default: the DOCKER_HOST environment
        variable, else unix:///var/run/docker.sock.""",
    ).tag(config=True)

    hosts = Dict(
        default_value={},
        help="""More hosts, by name: either a URL string (unix:///path, ssh://user@host[:port],
        tcp://host:port) or a dict with 'url' and, for tcp://, 'tls_ca_cert', 'tls_client_cert',
        'tls_client_key' (file paths) and 'tls_verify' (default true).""",
    ).tag(config=True)

    timeout = Float(
        5.0,
        help="""Seconds to wait for a Docker engine to answer when probing it (the host list,
        connecting). An engine slower than this is reported unreachable.""",
    ).tag(config=True)

    api_timeout = Float(
        300.0,
        help="""Seconds to wait for a Docker engine to answer one operation (create, start,
        stop, diff, remove). Builds and pulls stream and are not limited by it.""",
    ).tag(config=True)

    hosts_file = Unicode(
        help="""Where hosts added at run time (`jupyter gpudev hosts add`, the panel) are
        kept, as JSON. Default: <Jupyter data dir>/gpudev/hosts.json. The server and the CLI
        must use the same one; the server sees changes without a restart.""",
    ).tag(config=True)

    @default("hosts_file")
    def _default_hosts_file(self) -> str:
        return os.path.join(jupyter_data_dir(), "gpudev", "hosts.json")

    allow_runtime_hosts = Bool(
        True,
        help="""Let users add and remove hosts at run time (CLI, panel, REST). Off: only
        c.HostPool.hosts, and the hosts file is not read.""",
    ).tag(config=True)

    gpu_inventory = Instance(GPUInventory, help="The local host's GPU inventory.")

    @default("gpu_inventory")
    def _default_gpu_inventory(self) -> GPUInventory:
        return GPUInventory(parent=self)

    @validate("timeout")
    def _validate_timeout(self, proposal: Any) -> float:
        value = float(proposal["value"])
        if value <= 0:
            raise TraitError("c.HostPool.timeout must be a positive number of seconds")
        return value

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self._hosts: dict[str, Host] | None = None
        self._hosts_stamp: bytes | None = None
        self._lock = threading.Lock()

    def effective_local_url(self) -> str:
        return self.local_url or os.environ.get("DOCKER_HOST") or DEFAULT_LOCAL_URL

    def _local_spec(self) -> HostSpec:
        url = self.effective_local_url()
        entry: dict[str, Any] = {"url": url}
        if not self.local_url and url.startswith("tcp://"):
            # DOCKER_HOST=tcp://...: TLS as the docker CLI does it, from the environment.
            cert_path = os.environ.get("DOCKER_CERT_PATH") or os.path.expanduser("~/.docker")
            verify = os.environ.get("DOCKER_TLS_VERIFY", "") not in ("", "0")
            entry["tls_verify"] = verify
            if verify:
                entry.update(
                    tls_ca_cert=os.path.join(cert_path, "ca.pem"),
                    tls_client_cert=os.path.join(cert_path, "cert.pem"),
                    tls_client_key=os.path.join(cert_path, "key.pem"),
                )
        return HostSpec.parse(self.local_name, entry, is_local=True)

    def specs(self) -> list[HostSpec]:
        """Validated host specs, local first; raises ``ConfigError`` naming the bad entry."""
        specs: list[HostSpec] = []
        if self.include_local:
            specs.append(self._local_spec())
        for name, value in self.hosts.items():
            if any(spec.name == name for spec in specs):
                raise ConfigError(f"c.HostPool.hosts: the host name {name!r} is used twice")
            specs.append(HostSpec.parse(name, value))
        return specs

    def _file_stamp(self) -> bytes | None:
        """The hosts file's content (small): a change is seen even within one timestamp tick
        of a coarse file system."""
        try:
            with open(self.hosts_file, "rb") as handle:
                return handle.read()
        except OSError:
            return None

    def added(self) -> dict[str, Any]:
        """The hosts added at run time, as the hosts file holds them."""
        if not self.allow_runtime_hosts:
            return {}
        try:
            with open(self.hosts_file, encoding="utf-8") as handle:
                data = json.load(handle)
        except FileNotFoundError:
            return {}
        except (OSError, ValueError) as exc:
            raise ConfigError(f"The hosts file {self.hosts_file} cannot be read: {exc}") from exc
        hosts = data.get("hosts") if isinstance(data, dict) else None
        if not isinstance(hosts, dict):
            raise ConfigError(f"The hosts file {self.hosts_file} has no 'hosts' object")
        entries: dict[str, Any] = {}
        for name, entry in hosts.items():
            if isinstance(entry, (dict, str)):
                entries[str(name)] = entry if isinstance(entry, str) else dict(entry)
            else:
                self.log.warning(
                    "gpudev: %s: the entry of host %r is not a URL or an object; ignored",
                    self.hosts_file,
                    name,
                )
        return entries

    def _save_added(self, hosts: dict[str, Any]) -> None:
        folder = os.path.dirname(self.hosts_file) or "."
        os.makedirs(folder, exist_ok=True)
        tmp = f"{self.hosts_file}.{os.getpid()}.tmp"
        with open(tmp, "w", encoding="utf-8") as handle:
            json.dump({"hosts": hosts}, handle, indent=2, sort_keys=True)
        os.replace(tmp, self.hosts_file)

    def _new_host(self, spec: HostSpec, origin: str) -> Host:
        host = Host(
            spec,
            timeout=self.timeout,
            api_timeout=self.api_timeout,
            gpu_inventory=self.gpu_inventory if spec.is_local else None,
            log=self.log,
        )
        host.origin = origin
        if spec.transport == "ssh":
            host.gpu_inventory = GPUInventory(
                parent=self,
                backend="nvidia-smi",
                nvidia_smi_path=spec.nvidia_smi,
                runner=host.smi_runner,
                where=f"host {spec.name!r}",
            )
        return host

    def _all(self) -> dict[str, Host]:
        with self._lock:
            stamp = self._file_stamp() if self.allow_runtime_hosts else None
            if self._hosts is not None and stamp == self._hosts_stamp:
                return self._hosts
            wanted: dict[str, tuple[HostSpec, str]] = {
                spec.name: (spec, "local" if spec.is_local else "config") for spec in self.specs()
            }
            for name, entry in self.added().items():
                if name in wanted:
                    self.log.warning("gpudev: added host %r is also configured; ignored", name)
                    continue
                try:
                    wanted[name] = (HostSpec.parse(name, entry), "added")
                except ConfigError as err:
                    self.log.warning(
                        "gpudev: host %r of %s ignored: %s",
                        name,
                        self.hosts_file,
                        err.message.replace(f"c.HostPool.hosts[{name!r}]: ", ""),
                    )
            current = self._hosts or {}
            hosts: dict[str, Host] = {}
            for name, (spec, origin) in wanted.items():
                kept = current.get(name)
                if kept is not None and kept.spec == spec:
                    kept.origin = origin
                    hosts[name] = kept  # the same host: keep its connection and tunnels
                else:
                    hosts[name] = self._new_host(spec, origin)
            for name, host in current.items():
                if hosts.get(name) is not host:
                    host.close()
            self._hosts, self._hosts_stamp = hosts, stamp
            return hosts

    def add(
        self, name: str, url: str, options: dict[str, Any] | None = None, *, check: bool = True
    ) -> HostInfo:
        """Add a host at run time and persist it. With ``check`` the host must answer first
        (its SSH key known, key authentication accepted, its engine up); a host that fails
        the check is not added and the error says why."""
        if not self.allow_runtime_hosts:
            raise BadRequest(
                "Adding hosts at run time is disabled (c.HostPool.allow_runtime_hosts); add "
                "it to c.HostPool.hosts instead"
            )
        entry = {**(options or {}), "url": url}
        try:
            spec = HostSpec.parse(name, entry)
        except ConfigError as err:
            raise BadRequest(err.message.replace("c.HostPool.hosts", "hosts add")) from err
        self._check_runtime(spec)
        if name in self._all():
            raise Conflict(f"A host named {name!r} exists already; remove it first")
        if check:
            probe = self._new_host(spec, "added")
            try:
                probe.engine_info()
            finally:
                probe.close()
        with self._lock:
            added = self.added()
            added[name] = spec.to_config()
            self._save_added(added)
        self.log.info("gpudev: host %s (%s) added", name, url)
        return self.describe(name)

    @staticmethod
    def _check_runtime(spec: HostSpec) -> None:
        """What a user may add without the administrator: a remote engine reached with its own
        credentials, never this machine's socket (its containers could mount this machine's
        folders past c.MountPolicy), and never a tcp:// engine without mutual TLS."""
        scheme = urlsplit(spec.url).scheme
        if scheme == "unix":
            raise BadRequest(
                "A unix:// engine cannot be added at run time (it is this machine's): "
                "configure it in c.HostPool.hosts"
            )
        if scheme == "tcp" and not (
            spec.tls_verify and spec.tls_ca_cert and spec.tls_client_cert and spec.tls_client_key
        ):
            raise BadRequest(
                "A tcp:// engine added at run time needs mutual TLS: tls_ca_cert, "
                "tls_client_cert and tls_client_key, with tls_verify on"
            )
        if scheme == "tcp" and (spec.workspace or spec.mount_roots):
            raise BadRequest(
                "A tcp:// engine runs no commands, so its folders cannot be checked: workspace "
                "and mount_roots need an ssh:// host"
            )

    def remove(self, name: str) -> None:
        """Remove a host added at run time (configured ones stay: edit the config)."""
        host = self.get(name)
        if host.origin != "added":
            raise BadRequest(
                f"Host {name!r} comes from the configuration ({host.origin}); remove it there"
            )
        with self._lock:
            added = self.added()
            added.pop(name, None)
            self._save_added(added)
        self._all()  # closes its connection
        self.log.info("gpudev: host %s removed", name)

    def names(self) -> list[str]:
        return list(self._all())

    def get(self, name: str) -> Host:
        hosts = self._all()
        if name not in hosts:
            raise NotFound(
                f"No host named {name!r}; known hosts: {', '.join(hosts) or 'none'}",
                details={"host": name},
            )
        return hosts[name]

    def describe(self, name: str) -> HostInfo:
        return self.get(name).describe()

    def describe_all(self) -> list[HostInfo]:
        """Every host's state, probed concurrently (blocking: run it off the event loop)."""
        hosts = list(self._all().values())
        if len(hosts) <= 1:
            return [host.describe() for host in hosts]
        with ThreadPoolExecutor(max_workers=min(8, len(hosts))) as pool:
            return list(pool.map(Host.describe, hosts))

    def close(self) -> None:
        with self._lock:
            for host in (self._hosts or {}).values():
                host.close()
            self._hosts = None
        self.gpu_inventory.close()


def unreachable_summary(infos: list[HostInfo]) -> EngineUnreachable | None:
    """The error to answer with when no host at all is reachable, else ``None``."""
    if not infos or any(info.reachable for info in infos):
        return None
    message = " ".join(info.reason or f"{info.name}: unreachable" for info in infos)
    return EngineUnreachable(
        message,
        details={"hosts": [{"host": info.name, "url": info.url} for info in infos]},
    )


def address_for_containers(network: Mapping[str, Any]) -> str | None:
    """This host's IPv4 address as containers on a bridge ``network`` (its inspect ``attrs``)
    reach it: the network's ``Gateway`` where the engine reports one, else the first address
    of its subnet, which the engine gives the bridge interface (``docker0`` for ``bridge``);
    an engine created fresh reports only the subnet. ``None`` when neither is there (then
    only an ``extra_hosts`` entry ``NAME:host-gateway`` reaches the host)."""
    configs = (network.get("IPAM") or {}).get("Config") or []
    for config in configs:
        gateway = str((config or {}).get("Gateway") or "").split("/")[0]
        with contextlib.suppress(ValueError):
            if ipaddress.ip_address(gateway).version == 4:
                return gateway
    for config in configs:
        with contextlib.suppress(ValueError):
            subnet = ipaddress.ip_network(str((config or {}).get("Subnet") or ""), strict=False)
            if subnet.version == 4 and subnet.num_addresses > 2:
                return str(subnet.network_address + 1)
    return None


def bridge_address(client: docker.DockerClient, network: str = "bridge") -> str:
    """This host's address as seen from containers on ``network`` (``address_for_containers``);
    ``EngineError`` when the engine reports no IPv4 address or subnet for it."""
    with engine_errors(f"Reading the Docker network {network!r}"):
        attrs = client.networks.get(network).attrs
    address = address_for_containers(attrs)
    if address is None:
        raise EngineError(
            f"The Docker network {network!r} has no IPv4 gateway or subnet: containers reach "
            "this host there only through an extra host entry NAME:host-gateway"
        )
    return address
