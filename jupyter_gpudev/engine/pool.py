"""The hosts a server can start dev containers on: the local engine, configured hosts and hosts
added at run time (``HostPool``, configured with ``c.HostPool.*``)."""

from __future__ import annotations

import json
import os
import threading
from concurrent.futures import ThreadPoolExecutor
from typing import Any
from urllib.parse import urlsplit

from jupyter_core.paths import jupyter_data_dir
from traitlets import Bool, Dict, Instance, Unicode, default
from traitlets.config import LoggingConfigurable

from ..errors import (
    BadRequest,
    ConfigError,
    Conflict,
    EngineUnreachable,
    GPUDevError,
    NotFound,
)
from ..traits import PositiveFloat
from .gpus import GPUInventory
from .hosts import Host
from .info import HostInfo
from .spec import DEFAULT_LOCAL_URL, HostSpec

#: What a host added at run time never chooses itself (``c.HostPool.runtime_host_settings``).
RUNTIME_FIXED = ("workspace", "mount_roots", "nvidia_smi")


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
        help="""More hosts, by name: a URL string (unix:///path, ssh://user@host[:port],
        tcp://host:port, or k8s://CONTEXT/NAMESPACE for a Kubernetes cluster) or a dict with
        'url' and what its transport needs. ssh://: 'identity_file' (the key to log in with)
        and 'known_hosts' (the host keys to check). tcp://: 'tls_ca_cert', 'tls_client_cert',
        'tls_client_key' (file paths) and 'tls_verify' (default true). Any remote host:
        'workspace' (a folder of that host mounted as the workspace; default none),
        'mount_roots' (its folders environments may mount, as c.MountPolicy.allowed_roots
        here; default none), 'nvidia_smi' (the command that lists its GPUs; default
        nvidia-smi). k8s://: 'ingress_from' (the NetworkPolicy peers that may reach dev pods;
        default the pods labelled gpudev.jupyter.org/role: server) and 'build_egress' (egress
        rules of snapshot build pods besides DNS; default none). A password in a URL is
        refused.""",
    ).tag(config=True)

    timeout = PositiveFloat(
        5.0,
        help="""Seconds to wait for a Docker engine to answer when probing it (the host list,
        connecting; more than 0). An engine slower than this is reported unreachable.""",
    ).tag(config=True)

    api_timeout = PositiveFloat(
        300.0,
        help="""Seconds to wait for a Docker engine to answer one operation (create, start,
        stop, diff, remove; more than 0). Builds and pulls stream and are not limited by
        it.""",
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

    runtime_host_settings = Dict(
        default_value={},
        help="""What every host added at run time gets, chosen here and never by the user who
        adds it: 'workspace' (a folder of that host mounted as the workspace; default none),
        'mount_roots' (its folders environments may mount, as in allowed_roots; default none),
        'nvidia_smi' (the command run there for the GPU inventory; default nvidia-smi).""",
    ).tag(config=True)

    gpu_inventory = Instance(GPUInventory, help="The local host's GPU inventory.")

    @default("gpu_inventory")
    def _default_gpu_inventory(self) -> GPUInventory:
        return GPUInventory(parent=self)

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self._hosts: dict[str, Host] | None = None
        self._hosts_stamp: bytes | None = None
        self._lock = threading.Lock()
        self._build_credentials = True

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
        if not self._build_credentials:
            host.withhold_build_credentials()
        if spec.transport == "ssh":
            host.gpu_inventory = GPUInventory(
                parent=self,
                backend="nvidia-smi",
                nvidia_smi_path=spec.nvidia_smi,
                runner=host.smi_runner,
                where=f"host {spec.name!r}",
            )
        return host

    def withhold_build_credentials(self) -> None:
        """Builds on every host, now and later, send the engine no registry credentials (the
        shared service's pool: see ``registry``)."""
        with self._lock:
            self._build_credentials = False
            hosts = list((self._hosts or {}).values())
        for host in hosts:
            host.withhold_build_credentials()

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
                    wanted[name] = (self._added_spec(name, entry, from_file=True), "added")
                except (ConfigError, BadRequest) as err:
                    self.log.warning(
                        "gpudev: host %r of %s ignored: %s",
                        name,
                        self.hosts_file,
                        err.message.replace(f"c.HostPool.hosts[{name!r}]: ", "").replace(
                            f"hosts add[{name!r}]: ", ""
                        ),
                    )
            current = self._hosts or {}
            hosts: dict[str, Host] = {}
            for name, (spec, origin) in wanted.items():
                kept = current.get(name)
                if kept is not None and kept.spec == spec and kept.origin == origin:
                    kept.origin = origin
                    hosts[name] = kept  # the same host: keep its connection and tunnels
                else:
                    hosts[name] = self._new_host(spec, origin)
            for name, host in current.items():
                if hosts.get(name) is not host:
                    host.close()
            self._hosts, self._hosts_stamp = hosts, stamp
            return hosts

    def _runtime_settings(self) -> dict[str, Any]:
        settings = dict(self.runtime_host_settings)
        unknown = set(settings) - set(RUNTIME_FIXED)
        if unknown:
            raise ConfigError(
                f"c.HostPool.runtime_host_settings: unknown keys {sorted(unknown)} (it takes "
                f"{', '.join(RUNTIME_FIXED)})"
            )
        return settings

    def _added_spec(self, name: str, entry: Any, *, from_file: bool = False) -> HostSpec:
        """The spec of a host added at run time: what the user chose (URL, key files) and the
        administrator's ``runtime_host_settings``. Keys only the administrator may set are
        refused in a request (``BadRequest``), dropped with a warning from the hosts file."""
        options: dict[str, Any] = {"url": entry} if isinstance(entry, str) else dict(entry)
        chosen = sorted(set(options) & set(RUNTIME_FIXED))
        if chosen and not from_file:
            raise BadRequest(
                f"hosts add[{name!r}]: {', '.join(chosen)}: the administrator chooses these "
                "for every host added at run time (c.HostPool.runtime_host_settings)",
                details={"keys": chosen},
            )
        if chosen:
            self.log.warning(
                "gpudev: %s: %s of host %r ignored (c.HostPool.runtime_host_settings decides)",
                self.hosts_file,
                ", ".join(chosen),
                name,
            )
        for key in chosen:
            del options[key]
        if urlsplit(str(options.get("url", ""))).scheme == "ssh":  # tcp:// runs no commands
            options.update(self._runtime_settings())
        try:
            spec = HostSpec.parse(name, options)
        except ConfigError as err:
            raise BadRequest(err.message.replace("c.HostPool.hosts", "hosts add")) from err
        if spec.transport == "ssh" and not spec.identity_file:
            raise BadRequest(
                f"hosts add[{name!r}]: an ssh:// host added at run time logs in with a key of "
                "its own (identity_file), never with the server's SSH agent or keys"
            )
        return spec

    def _check_not_configured(self, spec: HostSpec) -> None:
        """An added host may not reach a configured host's machine under another name, nor
        use a configured host's key or certificate files."""
        address = (urlsplit(spec.url).hostname or "").lower()
        files = {
            os.path.realpath(os.path.expanduser(path))
            for path in (spec.identity_file, spec.tls_client_key, spec.tls_client_cert)
            if path
        }
        for configured in self.specs():
            if address and (urlsplit(configured.url).hostname or "").lower() == address:
                raise BadRequest(
                    f"hosts add[{spec.name!r}]: {address} is the address of the configured "
                    f"host {configured.name!r}: use that one",
                    details={"host": configured.name},
                )
            theirs = {
                os.path.realpath(os.path.expanduser(path))
                for path in (
                    configured.identity_file,
                    configured.tls_client_key,
                    configured.tls_client_cert,
                )
                if path
            }
            if files & theirs:
                raise BadRequest(
                    f"hosts add[{spec.name!r}]: that key is the one of the configured host "
                    f"{configured.name!r}; a host you add uses a key of its own"
                )

    def add(
        self,
        name: str,
        url: str,
        options: dict[str, Any] | None = None,
        *,
        check: bool = True,
        detailed: bool = False,
    ) -> HostInfo:
        """Add a host at run time and persist it. With ``check`` the host must answer first
        (its SSH key known, key authentication accepted, its engine up); a host that fails
        the check is not added. Why it failed is said only when ``detailed`` (an
        administrator): anyone else is told the same whether nothing listens there, the name
        does not resolve or the key was refused (no port or DNS oracle); the log has it."""
        if not self.allow_runtime_hosts:
            raise BadRequest(
                "Adding hosts at run time is disabled (c.HostPool.allow_runtime_hosts); add "
                "it to c.HostPool.hosts instead"
            )
        spec = self._added_spec(name, {**(options or {}), "url": url})
        self._check_runtime(spec)
        self._check_not_configured(spec)
        if name in self._all():
            raise Conflict(f"A host named {name!r} exists already; remove it first")
        if check:
            probe = self._new_host(spec, "added")
            try:
                probe.engine_info()
            except GPUDevError as err:
                if detailed:
                    raise
                self.log.warning("gpudev: host %s (%s) not added: %s", name, url, err.message)
                raise EngineUnreachable(
                    f"Host {name!r} ({url}) could not be used: it did not answer, its host key "
                    "is not known, or it refused the key. The server log says which; an "
                    "administrator (c.Access.admin_users) is told here.",
                    details={"host": name},
                ) from None
            finally:
                probe.close()
        with self._lock:
            added = self.added()
            # What the user chose; the administrator's settings are applied when it is read.
            added[name] = {
                key: value for key, value in spec.to_config().items() if key not in RUNTIME_FIXED
            }
            self._save_added(added)
        self.log.info("gpudev: host %s (%s) added", name, url)
        return self.describe(name)

    @staticmethod
    def _check_runtime(spec: HostSpec) -> None:
        """What a user may add without the administrator: a remote engine reached with its own
        credentials, never this machine's socket (its containers could mount this machine's
        folders past c.MountPolicy), never a tcp:// engine without mutual TLS, and never a
        Kubernetes cluster (its credentials would be the server's kubeconfig)."""
        scheme = urlsplit(spec.url).scheme
        if scheme == "k8s":
            raise BadRequest(
                "A Kubernetes cluster cannot be added at run time: gpudev would reach it with "
                "the server's own kubeconfig credentials. Configure it in c.HostPool.hosts"
            )
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
            shown = repr(name) if len(name) <= 80 else f"{name[:80]!r}..."  # the caller's text
            raise NotFound(
                f"No host named {shown}; known hosts: {', '.join(hosts) or 'none'}",
                details={"host": name[:200]},
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
        # Not built (a part refused its config first, or no local host was used): nothing to
        # close, and building it now would only refuse that config again.
        if self.trait_has_value("gpu_inventory"):
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
