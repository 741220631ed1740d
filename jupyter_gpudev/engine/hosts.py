"""Hosts: one Docker engine or Kubernetes cluster each, with its GPUs. ``HostPool`` holds
every configured host.

The local engine (``DOCKER_HOST`` or the default socket) is the default host; more hosts come
from ``c.HostPool.hosts`` and, at run time, from ``jupyter gpudev hosts add`` or the panel
(persisted in ``c.HostPool.hosts_file``). ``ssh://`` hosts use one persistent SSH connection for
the Docker API, their GPU inventory (``nvidia-smi`` there), path checks and port forwards (see
``jupyter_gpudev.ssh``); ``tcp://`` hosts use TLS client certificates.

What differs by the kind of host is its ``backend`` (``backend.HostBackend``): a Docker engine's
(``DockerEngine``, below) or a Kubernetes cluster's (``cluster.Cluster``); ``HOST_KINDS`` says
which a host's URL gets.

Every call here that talks to an engine blocks: the server runs them in worker threads."""

from __future__ import annotations

import contextlib
import errno
import ipaddress
import os
import shutil
import stat
import subprocess
import threading
import time
from collections.abc import Callable, Mapping
from typing import Any
from urllib.parse import urlsplit

import docker
import docker.errors
from docker.constants import DEFAULT_DOCKER_API_VERSION, MINIMUM_DOCKER_API_VERSION
from docker.tls import TLSConfig
from docker.utils import version_lt

from ..errors import (
    ENGINE_FAILURES,
    BadRequest,
    EngineError,
    EngineUnreachable,
    GPUDevError,
    engine_errors,
)
from ..labels import L_MANAGED
from .attribution import CommandProcReader, LocalProcReader, ProcReader
from .backend import HostBackend
from .cluster import Cluster
from .gpus import GPUInventory, Inventory, ProbeUnavailable
from .info import EngineInfo, HostInfo
from .registries import withhold_build_credentials, withhold_credentials
from .spec import HostSpec
from .ssh import SSHConnection, SSHDockerAdapter, SSHTarget
from .tunnels import Tunnels
from .watch import ContainerStates

#: Seconds an engine's answer to ``engine_info`` is taken as still true where it is read for
#: what changes only with a restart of the engine (its data root, security options, default
#: logging driver, whether it is rootless).
ENGINE_INFO_AGE = 10.0


def _positive(value: object) -> int | None:
    """A count the engine reported, when it is a positive whole number."""
    return value if isinstance(value, int) and not isinstance(value, bool) and value > 0 else None


class DockerEngine:
    """The ``backend.HostBackend`` of a Docker engine host: its report is the engine's, its
    ``/proc`` is read here or over SSH."""

    kind = "docker"

    def __init__(self, host: Host) -> None:
        self.host = host

    def report(self, origin: str) -> HostInfo:
        host = self.host
        engine: EngineInfo | None = None
        reason: str | None = None
        try:
            engine = host.engine_info()
        except EngineUnreachable as exc:
            reason = exc.message
        return HostInfo(
            name=host.name,
            url=host.spec.url,
            transport=host.spec.transport,
            is_local=host.spec.is_local,
            reachable=engine is not None,
            reason=reason,
            engine=engine,
            gpus=host.gpus()
            if engine is not None or host.spec.is_local
            else Inventory(source="none", reason="the host is unreachable"),
            origin=origin,
            workspace=host.spec.workspace,
        )

    def no_engine(self) -> None:
        return None

    def proc_reader(self) -> ProcReader | None:
        host = self.host
        if host.ssh is not None:
            return CommandProcReader(
                host.smi_runner,
                host.timeout,
                where=f"host {host.name!r}",
                rootless_uid=self._rootless_uid(),
            )
        return LocalProcReader(rootless_uid=self._rootless_uid()) if host.spec.is_local else None

    def _rootless_uid(self) -> int | None:
        """The account that owns the engine where it is rootless: its containers' cgroups are
        in that account's systemd user slice (``attribution._path_container``). Here the owner
        of the engine's unix socket; on an ``ssh://`` host the SSH user (a rootless engine's
        socket is in its owner's runtime folder, mode 0700: an account other than root that
        reaches it is its owner). ``None``: root (a rootful engine's socket), an engine that
        does not say it is rootless (``EngineInfo.rootless``), or either not known. Costs no
        call to the engine for a root-owned socket, no command on a host whose engine is not
        rootless (``engine_info`` is one kept ``ENGINE_INFO_AGE`` seconds)."""
        host = self.host
        if host.ssh is None:
            owner = self._socket_owner()
            return owner if owner and self._engine_rootless() else None
        if not self._engine_rootless():
            return None
        try:
            uid = (host.user_ids() or "").partition(":")[0]
        except (GPUDevError, OSError, subprocess.SubprocessError):
            return None
        owner = int(uid) if uid.isdigit() and len(uid) <= 10 else None
        return owner or None

    def _socket_owner(self) -> int | None:
        """The owner of the engine's socket here (``None``: not a ``unix://`` one, or gone)."""
        url = urlsplit(self.host.spec.url)
        if url.scheme != "unix":
            return None
        try:
            return os.stat(url.path).st_uid
        except (OSError, ValueError):
            return None

    def _engine_rootless(self) -> bool:
        """The engine says it is rootless (``False``: it does not, or does not answer)."""
        try:
            return self.host.engine_info(max_age=ENGINE_INFO_AGE).rootless
        except (GPUDevError, OSError):
            return False

    def close(self) -> None:
        """Nothing of its own: the host closes its clients and SSH connection."""


def _cluster(host: Host) -> HostBackend:
    return Cluster(host.spec, timeout=host.timeout, log=host.log)


#: Each kind of host by its URL's transport (``HostSpec.transport``; a Docker engine where
#: none is named): what ``Host.backend`` is made of.
HOST_KINDS: dict[str, Callable[[Host], HostBackend]] = {"k8s": _cluster}


class Host:
    """One host: its ``backend`` (what kind it is), a lazily opened, persistent Docker client
    where it is an engine, plus the host's GPU inventory."""

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
        #: Whether builds may send the engine this process's registry credentials (not in the
        #: shared service: ``withhold_build_credentials``).
        self.build_credentials = True
        self._client: docker.DockerClient | None = None
        self._probe_client: docker.DockerClient | None = None
        self._lock = threading.Lock()
        #: The last ``engine_info`` read, and when (``time.monotonic``).
        self._info: tuple[float, EngineInfo] | None = None
        #: ssh:// hosts: the one connection everything goes through, and its port forwards.
        self.ssh: SSHConnection | None = None
        self.tunnels: Tunnels | None = None
        self._user_ids: str | None = None
        #: gpudev's containers on this engine as last inspected, kept by its event stream.
        self.containers = ContainerStates(f"{L_MANAGED}=1", log)
        if spec.transport == "ssh":
            self.ssh = SSHConnection(
                SSHTarget.from_url(
                    spec.url, identity_file=spec.identity_file, known_hosts=spec.known_hosts
                ),
                timeout=timeout,
                log=log,
            )
            self.tunnels = Tunnels(self.ssh, log=log)
        #: What kind of host it is (``backend.HostBackend``; ``HOST_KINDS``).
        self.backend: HostBackend = HOST_KINDS.get(spec.transport, DockerEngine)(self)

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
        refused = self.backend.no_engine()
        if refused is not None:
            raise EngineUnreachable(refused, details={"host": self.name})
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
        """A client of this engine; a host a user added at run time never gets the registry
        credentials of the user running the server (pulls, pushes and builds alike), and the
        shared service's builds send none."""
        client = self._engine_client(version, timeout, tls)
        if self.origin == "added":
            withhold_credentials(client)
        elif not self.build_credentials:
            withhold_build_credentials(client)
        return client

    def withhold_build_credentials(self) -> None:
        """From now on, builds on this engine send it no registry credentials (the shared
        service: they would be its own, sent for any user's Dockerfile)."""
        with self._lock:
            self.build_credentials = False
            for client in (self._client, self._probe_client):
                if client is not None:
                    withhold_build_credentials(client)

    def _engine_client(
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
        self.containers.close()
        with self._lock:
            for client in (self._client, self._probe_client):
                if client is not None:
                    client.close()
            self._client = self._probe_client = None

    def close(self) -> None:
        self._close_clients()
        self.backend.close()
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

    def engine_info(self, max_age: float = 0.0) -> EngineInfo:
        """Ask the engine for its version and features (``timeout`` per call); raises
        ``EngineUnreachable``. ``max_age``: seconds an earlier answer may be old to be
        returned instead (what a change count reads for each container: its data root and
        security options, which change only with a restart of the engine)."""
        with self._lock:
            cached = self._info
        now = time.monotonic()
        if max_age > 0 and cached is not None and 0 <= now - cached[0] < max_age:
            return cached[1]
        info = self._read_engine_info()
        with self._lock:
            self._info = (now, info)
        return info

    def _read_engine_info(self) -> EngineInfo:
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
            cpus=_positive(info.get("NCPU")),
            memory_mib=(_positive(info.get("MemTotal")) or 0) // (1 << 20) or None,
            data_root=str(info["DockerRootDir"]) if info.get("DockerRootDir") else None,
            security_options=tuple(str(o) for o in info.get("SecurityOptions") or ()),
            logging_driver=str(info["LoggingDriver"]) if info.get("LoggingDriver") else None,
        )

    def free_storage_mib(self, path: str) -> int | None:
        """MiB free for unprivileged use in the file system of ``path`` on the host (``df``,
        here or over SSH; its output read as untrusted); ``None`` where the host cannot tell
        (a tcp:// engine runs no commands) or ``df`` did not answer."""
        if self.ssh is None and not self.spec.is_local:
            return None
        try:
            result = self.run(["df", "-Pk", "--", path], 10.0)
        except (GPUDevError, OSError, subprocess.SubprocessError):
            return None
        lines = result.stdout.splitlines()[:3] if result.returncode == 0 else []
        fields = lines[1].split() if len(lines) == 2 else []
        if len(fields) < 6 or not fields[3].isdigit() or len(fields[3]) > 18:
            return None
        return int(fields[3]) // 1024

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

    def proc_reader(self) -> ProcReader | None:
        """How the attribution of GPU processes reads this host's ``/proc``: directly here,
        by one command per read over SSH; ``None`` where commands cannot run (tcp://, and
        Kubernetes, whose GPU processes are the nodes'): its ``backend``'s."""
        return self.backend.proc_reader()

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
        """The host's state, as its kind reports it; an unreachable host is reported, not
        raised."""
        return self.backend.report(self.origin)


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
