"""A host's configuration, checked: its URL (``unix://``, ``ssh://``, ``tcp://``, or ``k8s://``
for a Kubernetes cluster), TLS and SSH files, and the remote workspace settings, as configured
or added at run time."""

from __future__ import annotations

import ipaddress
import json
import re
from dataclasses import dataclass
from typing import Any, Literal
from urllib.parse import unquote, urlsplit

from ..errors import (
    ConfigError,
)

Transport = Literal["local", "ssh", "tcp", "k8s"]


DEFAULT_LOCAL_URL = "unix:///var/run/docker.sock"


_NAME_RE = re.compile(r"^[a-z0-9][a-z0-9._-]{0,62}\Z")


#: A user or host name of an ssh:// or tcp:// URL (what reaches ``ssh`` for terminals).
_URL_PART_RE = re.compile(r"^[A-Za-z0-9_][A-Za-z0-9._:-]{0,252}\Z")


_TLS_KEYS = {"tls_ca_cert", "tls_client_cert", "tls_client_key", "tls_verify"}


_SSH_KEYS = {"identity_file", "known_hosts"}


#: Keys of a remote host: what runs there, and which of its folders containers see.
_REMOTE_KEYS = {"nvidia_smi", "workspace", "mount_roots"}


#: Keys of a Kubernetes host: who may reach its dev container pods, where its build pods may
#: connect (NetworkPolicy peers and egress rules, as Kubernetes writes them).
_K8S_KEYS = {"ingress_from", "build_egress"}


_HOST_KEYS = {"url"} | _TLS_KEYS | _SSH_KEYS | _REMOTE_KEYS | _K8S_KEYS


#: A kubeconfig context name (percent-encoded in a k8s:// URL: EKS names hold ':' and '/').
_CONTEXT_RE = re.compile(r"^[A-Za-z0-9_.:@/+-]{1,253}\Z")
_NAMESPACE_RE = re.compile(r"^[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?\Z")


def _check_k8s_url(where: str, url: str) -> None:
    """``k8s://CONTEXT/NAMESPACE``: a context of the kubeconfig (empty: the current one, or the
    cluster gpudev runs in) and the namespace dev containers go into."""
    parts = urlsplit(url)
    context = unquote(parts.netloc)
    namespace = parts.path.strip("/")
    if parts.query or parts.fragment or "@" in parts.netloc:
        raise ConfigError(f"{where}: a k8s:// URL is k8s://CONTEXT/NAMESPACE, nothing more")
    if context and not _CONTEXT_RE.match(context):
        raise ConfigError(
            f"{where}: {context[:80]!r} is not a kubeconfig context name (letters, digits and "
            "'_.:@/+-'; percent-encode it in the URL)"
        )
    if not _NAMESPACE_RE.match(namespace):
        raise ConfigError(
            f"{where}: {url!r} names no namespace: use k8s://CONTEXT/NAMESPACE (an empty "
            "CONTEXT, k8s:///NAMESPACE, is the current context or the cluster gpudev runs in)"
        )


_LABEL_KEY_RE = re.compile(
    r"^([a-z0-9]([-a-z0-9.]{0,251}[a-z0-9])?/)?[A-Za-z0-9]([-A-Za-z0-9_.]{0,61}[A-Za-z0-9])?\Z"
)
_LABEL_VALUE_RE = re.compile(r"^([A-Za-z0-9]([-A-Za-z0-9_.]{0,61}[A-Za-z0-9])?)?\Z")
_PORT_NAME_RE = re.compile(r"^[a-z0-9]([-a-z0-9]{0,13}[a-z0-9])?\Z")


def _network(where: str, text: Any) -> ipaddress.IPv4Network | ipaddress.IPv6Network:
    if isinstance(text, str):
        try:
            return ipaddress.ip_network(text, strict=True)
        except ValueError:
            pass
    raise ConfigError(f"{where}: {str(text)[:60]!r} is not a CIDR block (e.g. 10.8.0.0/16)")


def _selector(where: str, value: Any) -> None:
    if not isinstance(value, dict) or set(value) - {"matchLabels"}:
        raise ConfigError(f"{where}: a selector is {{}} (all) or {{'matchLabels': {{...}}}}")
    labels = value.get("matchLabels", {})
    if not isinstance(labels, dict) or not all(
        isinstance(k, str)
        and isinstance(v, str)
        and _LABEL_KEY_RE.match(k)
        and _LABEL_VALUE_RE.match(v)
        for k, v in labels.items()
    ):
        raise ConfigError(f"{where}: matchLabels maps label names to label values (strings)")


def network_peer(where: str, peer: Any) -> dict[str, Any]:
    """One NetworkPolicy peer as Kubernetes writes it, checked: ``ipBlock`` (``cidr`` and
    ``except`` blocks inside it), or ``podSelector`` and/or ``namespaceSelector`` with
    ``matchLabels`` (a pod selector alone: pods of the policy's namespace)."""
    if (
        not isinstance(peer, dict)
        or not peer
        or set(peer)
        - {
            "podSelector",
            "namespaceSelector",
            "ipBlock",
        }
    ):
        raise ConfigError(
            f"{where}: a peer has podSelector and/or namespaceSelector, or ipBlock, and nothing "
            "else"
        )
    if "ipBlock" in peer:
        block = peer["ipBlock"]
        if len(peer) > 1:
            raise ConfigError(f"{where}: a peer is an ipBlock or selectors, not both")
        if not isinstance(block, dict) or set(block) - {"cidr", "except"} or "cidr" not in block:
            raise ConfigError(f"{where}: an ipBlock is {{'cidr': ..., 'except': [...]}}")
        network = _network(f"{where}.ipBlock.cidr", block["cidr"])
        excepted = block.get("except", [])
        if not isinstance(excepted, list):
            raise ConfigError(f"{where}: ipBlock.except is a list of CIDR blocks")
        for text in excepted:
            inner = _network(f"{where}.ipBlock.except", text)
            if inner.version != network.version or not inner.subnet_of(network):  # type: ignore[arg-type]
                raise ConfigError(
                    f"{where}: ipBlock.except {text!r} must be inside {block['cidr']!r}"
                )
    for key in ("podSelector", "namespaceSelector"):
        if key in peer:
            _selector(f"{where}.{key}", peer[key])
    return dict(json.loads(json.dumps(peer)))


def _port(where: str, port: Any) -> None:
    if not isinstance(port, dict) or set(port) - {"port", "protocol", "endPort"}:
        raise ConfigError(f"{where}: a port is {{'port': N, 'protocol': 'TCP', 'endPort': M}}")
    number = port.get("port")
    if isinstance(number, str):
        if not _PORT_NAME_RE.match(number) or "endPort" in port:
            raise ConfigError(f"{where}: {number[:40]!r} is not a port name (or has an endPort)")
    elif isinstance(number, bool) or not isinstance(number, int) or not 0 < number < 65536:
        raise ConfigError(f"{where}: the port is a number from 1 to 65535, or a name")
    if port.get("protocol", "TCP") not in ("TCP", "UDP", "SCTP"):
        raise ConfigError(f"{where}: the protocol is TCP, UDP or SCTP")
    end = port.get("endPort")
    first = number if isinstance(number, int) else 0
    if end is not None and (
        isinstance(end, bool) or not isinstance(end, int) or not first <= end < 65536
    ):
        raise ConfigError(f"{where}: endPort is a port number not below the port")


def egress_rule(where: str, rule: Any) -> dict[str, Any]:
    """One NetworkPolicy egress rule as Kubernetes writes it, checked: ``to`` (peers, see
    ``network_peer``; none: anywhere) and ``ports`` (none: every port)."""
    if not isinstance(rule, dict) or not rule or set(rule) - {"to", "ports"}:
        raise ConfigError(f"{where}: an egress rule has 'to' (peers) and/or 'ports', no more")
    if "to" in rule:
        if not isinstance(rule["to"], list) or not rule["to"]:
            raise ConfigError(f"{where}: 'to' is a list of peers (leave it out for anywhere)")
        for i, peer in enumerate(rule["to"]):
            network_peer(f"{where}.to[{i}]", peer)
    ports = rule.get("ports", [])
    if not isinstance(ports, list):
        raise ConfigError(f"{where}: 'ports' is a list")
    for i, port in enumerate(ports):
        _port(f"{where}.ports[{i}]", port)
    return dict(json.loads(json.dumps(rule)))


def _checked_list(where: str, value: Any, check: Any) -> tuple[dict[str, Any], ...] | None:
    if value is None:
        return None
    if not isinstance(value, (list, tuple)):
        raise ConfigError(f"{where}: a list")
    return tuple(check(f"{where}[{i}]", item) for i, item in enumerate(value))


def _check_url(where: str, url: Any) -> None:
    if not isinstance(url, str) or not url:
        raise ConfigError(f"{where}: 'url' is required")
    if url.startswith("k8s://"):
        _check_k8s_url(where, url)
        return
    parts = urlsplit(url)
    if parts.password:
        raise ConfigError(
            f"{where}: do not put a password in the URL; ssh:// uses keys, tcp:// uses TLS "
            "client certificates"
        )
    if parts.scheme not in ("unix", "ssh", "tcp"):
        raise ConfigError(
            f"{where}: unsupported URL {url!r}; use unix:///path, ssh://user@host[:port], "
            "tcp://host:port or k8s://CONTEXT/NAMESPACE"
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
    #: k8s://: the NetworkPolicy peers a dev container pod admits (gpudev's server), and the
    #: egress rules a snapshot build's pod may use besides the cluster's DNS (its registries
    #: and package mirrors); ``None``: gpudev's defaults (``k8s.objects.SERVER_PEERS``,
    #: nothing but DNS).
    ingress_from: tuple[dict[str, Any], ...] | None = None
    build_egress: tuple[dict[str, Any], ...] | None = None

    @property
    def transport(self) -> Transport:
        scheme = urlsplit(self.url).scheme
        if scheme == "ssh":
            return "ssh"
        if scheme == "k8s":
            return "k8s"
        if scheme in ("tcp", "https", "http"):
            return "tcp"
        return "local"

    @property
    def is_kubernetes(self) -> bool:
        """A Kubernetes cluster (``k8s://``): dev containers are pods there, not engine
        containers."""
        return self.transport == "k8s"

    @property
    def context(self) -> str:
        """The kubeconfig context of a ``k8s://`` host ('': the current one, or in-cluster)."""
        return unquote(urlsplit(self.url).netloc) if self.is_kubernetes else ""

    @property
    def namespace(self) -> str:
        """The namespace of a ``k8s://`` host's dev containers."""
        return urlsplit(self.url).path.strip("/") if self.is_kubernetes else ""

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
            | (set(options) & _REMOTE_KEYS if is_local or scheme == "k8s" else set())
            | (set(options) & _K8S_KEYS if scheme != "k8s" else set())
        )
        if wrong:
            raise ConfigError(f"{where}: {sorted(wrong)} do not apply to a {scheme}:// host")
        for key in ("tls_ca_cert", "tls_client_cert", "tls_client_key", "identity_file"):
            if options.get(key) is not None and not isinstance(options[key], str):
                raise ConfigError(f"{where}: {key!r} must be a file path")
        if not isinstance(options.get("tls_verify", True), bool):  # "no" is not False
            raise ConfigError(f"{where}: 'tls_verify' must be true or false")
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
            ingress_from=_checked_list(
                f"{where}['ingress_from']", options.get("ingress_from"), network_peer
            ),
            build_egress=_checked_list(
                f"{where}['build_egress']", options.get("build_egress"), egress_rule
            ),
        )

    def to_config(self) -> dict[str, Any]:
        """The entry as ``c.HostPool.hosts`` (and the hosts file) hold it: set keys only."""
        entry: dict[str, Any] = {"url": self.url}
        for key in sorted(
            _HOST_KEYS - _K8S_KEYS - {"url", "tls_verify", "nvidia_smi", "mount_roots"}
        ):
            if getattr(self, key) is not None:
                entry[key] = getattr(self, key)
        for key in sorted(_K8S_KEYS):
            if getattr(self, key) is not None:
                entry[key] = [dict(item) for item in getattr(self, key)]
        if self.transport == "tcp" and not self.tls_verify:
            entry["tls_verify"] = False
        if self.nvidia_smi != "nvidia-smi":
            entry["nvidia_smi"] = self.nvidia_smi
        if self.mount_roots:
            entry["mount_roots"] = list(self.mount_roots)
        return entry
