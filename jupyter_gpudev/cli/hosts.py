"""``jupyter gpudev hosts`` (list, add, remove) and ``jupyter gpudev image bootstrap``."""

from __future__ import annotations

import json
import sys
from typing import TYPE_CHECKING, Any

from traitlets import Bool, Unicode
from traitlets.config import Configurable

from .._version import __version__
from ..engine import HostInfo, ImageBootstrapper, Inventory, unreachable_summary
from ..engine.info import ClusterInfo
from ..errors import BadRequest
from ..k8s.objects import make_rbac
from ..services import CLASSES

if TYPE_CHECKING:
    pass
from .base import GPUDevApplication, GPUDevSubcommand


def _format_gpus(inventory: Inventory) -> list[str]:
    if not inventory.gpus:
        return [f"    GPUs: none ({inventory.reason or 'no GPU found'})"]
    lines = [
        f"    GPUs ({inventory.source}; driver {inventory.driver_version or '?'}, "
        f"CUDA {inventory.cuda_version or '?'}):"
    ]
    for gpu in inventory.gpus:
        memory = (
            f"{gpu.memory_used_mib or 0}/{gpu.memory_total_mib} MiB"
            if gpu.memory_total_mib is not None
            else "memory ?"
        )
        util = f"{gpu.utilization_percent}%" if gpu.utilization_percent is not None else "?"
        lines.append(f"      [{gpu.index}] {gpu.name}  {memory}  util {util}  {gpu.uuid}")
        lines.extend(
            f"          MIG {mig.profile} [{mig.index}] {mig.uuid}" for mig in gpu.mig_devices
        )
    return lines


def _format_cluster(name: str, url: str, cluster: ClusterInfo) -> list[str]:
    """A Kubernetes host: its version, then each GPU node with what is allocated and to
    whom (nodes without GPUs are counted)."""
    lines = [f"{name}  {url}  Kubernetes {cluster.version} (namespace {cluster.namespace})"]
    plain = [node for node in cluster.nodes if not node.gpus]
    for node in cluster.nodes:
        if not node.gpus:
            continue
        state = (
            ""
            if node.ready and node.schedulable
            else (" NOT READY" if not node.ready else " cordoned")
        )
        model = f"  {node.product}" if node.product else ""
        lines.append(f"    node {node.name}{state}{model}")
        for gpus in node.gpus:
            lines.append(f"      {gpus.resource}: {gpus.allocated} of {gpus.allocatable} allocated")
        for held in cluster.allocations:
            if held.node != node.name:
                continue
            whose = (
                f"{held.container} ({held.owner})"
                if held.container
                else held.owner or f"a workload in {held.namespace}"
            )
            lines.append(f"        {held.count} {held.resource} held by {whose}")
    if plain:
        lines.append(f"    and {len(plain)} node(s) without GPUs")
    if not any(node.gpus for node in cluster.nodes):
        lines.append("    no node has GPU resources (is NVIDIA's device plugin running?)")
    lines.extend(f"    warning: {w}" for w in cluster.warnings)
    return lines


def format_hosts(infos: list[HostInfo]) -> str:
    lines: list[str] = []
    for info in infos:
        if info.reachable and info.cluster is not None:
            lines.extend(_format_cluster(info.name, info.url, info.cluster))
            continue
        if info.reachable and info.engine is not None:
            engine = info.engine
            lines.append(
                f"{info.name}  {info.url}  Docker {engine.version} (API {engine.api_version}, "
                f"{engine.os}/{engine.arch}, cgroup {engine.cgroup_driver or '?'}"
                f"{' v' + engine.cgroup_version if engine.cgroup_version else ''})"
            )
            nvidia = "yes" if engine.nvidia_runtime else "no"
            hook = {True: "yes", False: "no", None: "unknown"}[engine.nvidia_hook]
            lines.append(
                f"    NVIDIA runtime: {nvidia}; NVIDIA hook: {hook}; "
                f"CDI: {'yes' if engine.cdi else 'no'}"
            )
        else:
            lines.append(f"{info.name}  {info.url}  UNREACHABLE")
            lines.append(f"    {info.reason}")
        lines.extend(_format_gpus(info.gpus))
    return "\n".join(lines)


class HostsApp(GPUDevSubcommand):
    """List the hosts, their Docker engines and their GPUs."""

    name = "jupyter-gpudev-hosts"
    description = """List every configured host: its Docker engine (version, API, OS/arch,
    cgroup driver, NVIDIA runtime, CDI) and its GPUs by UUID. Exits 3 when no engine answers."""

    subcommands: dict[str, Any] = {}  # filled in below: add, remove

    def start(self) -> None:
        if self.subapp is not None:
            self.subapp.start()
            return
        super().start()

    def run(self) -> None:
        if self.extra_args:
            raise BadRequest(
                f"Unknown hosts subcommand {self.extra_args[0]!r}: use `hosts`, `hosts add "
                "NAME URL` or `hosts remove NAME`"
            )
        infos = self.services().host_pool.describe_all()
        error = unreachable_summary(infos)
        if error is not None:
            error.details["hosts"] = [info.to_json() for info in infos]
            self.fail(error)
        self.emit({"hosts": [info.to_json() for info in infos]}, format_hosts(infos))


class HostsAddApp(GPUDevSubcommand):
    """Add a host at run time."""

    name = "jupyter-gpudev-hosts-add"
    description = """Add a host: `jupyter gpudev hosts add NAME URL` with URL
    ssh://user@host[:port] (its own key, --identity-file; the host key must be in known_hosts)
    or tcp://host:port (TLS client certificates). The host must answer first (--no-check: add
    it anyway). Its workspace, mount roots and nvidia-smi come from
    c.HostPool.runtime_host_settings. It is kept in c.HostPool.hosts_file, and the server sees
    it at once."""

    identity_file = Unicode(
        "", help="ssh://: the private key to log in with (required: never the SSH agent)."
    ).tag(config=True)
    known_hosts = Unicode("", help="ssh://: the known_hosts file to check the host key in.").tag(
        config=True
    )
    tls_ca_cert = Unicode("", help="tcp://: the CA certificate file.").tag(config=True)
    tls_client_cert = Unicode("", help="tcp://: the client certificate file.").tag(config=True)
    tls_client_key = Unicode("", help="tcp://: the client key file.").tag(config=True)
    check = Bool(True, help="Connect to the host before adding it.").tag(config=True)

    flags: dict[str, Any] = {
        **GPUDevSubcommand.flags,
        "no-check": ({"HostsAddApp": {"check": False}}, "Add the host without connecting."),
    }
    aliases: dict[str, Any] = {
        **GPUDevSubcommand.aliases,
        "identity-file": "HostsAddApp.identity_file",
        "known-hosts": "HostsAddApp.known_hosts",
        "tls-ca-cert": "HostsAddApp.tls_ca_cert",
        "tls-client-cert": "HostsAddApp.tls_client_cert",
        "tls-client-key": "HostsAddApp.tls_client_key",
    }

    def run(self) -> None:
        if len(self.extra_args) != 2:
            raise BadRequest("usage: jupyter gpudev hosts add NAME URL [--identity-file=...]")
        name, url = (str(arg) for arg in self.extra_args)
        options: dict[str, Any] = {
            key: value
            for key in (
                "identity_file",
                "known_hosts",
                "tls_ca_cert",
                "tls_client_cert",
                "tls_client_key",
            )
            if (value := getattr(self, key))
        }
        services = self.services()
        info = services.host_pool.add(
            name,
            url,
            options,
            check=self.check,
            detailed=services.containers.access.local().admin,
        )
        self.emit(info.to_json(), f"added {name}\n{format_hosts([info])}")


class HostsRemoveApp(GPUDevSubcommand):
    """Remove a host added at run time."""

    name = "jupyter-gpudev-hosts-remove"
    description = """Remove a host added with `hosts add` (not one of c.HostPool.hosts). A
    host that still has dev containers is kept: remove or commit them first."""

    def run(self) -> None:
        if len(self.extra_args) != 1:
            raise BadRequest("usage: jupyter gpudev hosts remove NAME")
        name = str(self.extra_args[0])
        self.services().containers.remove_host(name)
        self.emit({"removed": name}, f"removed {name}")


class HostsRbacApp(GPUDevSubcommand):
    """Print the RBAC a Kubernetes host needs."""

    name = "jupyter-gpudev-hosts-rbac"
    description = """Print what gpudev needs in a Kubernetes namespace, as one List for
    `kubectl apply -f -`: a ServiceAccount, a Role with only what gpudev does there (no
    wildcard), its RoleBinding, and a ClusterRole (with binding) that only reads nodes and pods.
    Usage: jupyter gpudev hosts rbac NAMESPACE [--account=gpudev]"""

    account = Unicode("gpudev", help="The ServiceAccount gpudev runs as.").tag(config=True)
    aliases: dict[str, Any] = {**GPUDevSubcommand.aliases, "account": "HostsRbacApp.account"}

    def run(self) -> None:
        if len(self.extra_args) != 1:
            raise BadRequest("usage: jupyter gpudev hosts rbac NAMESPACE [--account=gpudev]")
        objects = make_rbac(str(self.extra_args[0]), self.account)
        listed = {"apiVersion": "v1", "kind": "List", "items": objects}
        self.emit(listed, json.dumps(listed, indent=2))


HostsApp.subcommands = {
    "add": (HostsAddApp, "Add a host (ssh:// or tcp://) at run time."),
    "remove": (HostsRemoveApp, "Remove a host added at run time."),
    "rbac": (HostsRbacApp, "Print the RBAC of a Kubernetes host's namespace."),
}


class ImageBootstrapApp(GPUDevSubcommand):
    """Build the kernel-capable base image from the host's Debian mirror, without a registry."""

    name = "jupyter-gpudev-image-bootstrap"
    description = """Build a Debian image with debootstrap from this host's package mirror,
    import it into the local Docker engine, and build a Python + ipykernel image on top.
    For machines that reach a package mirror but no container registry. Needs root."""

    force = Bool(False, help="Rebuild even if the image exists.").tag(config=True)
    host = Unicode("", help="The host whose engine receives the image (default: local).").tag(
        config=True
    )

    flags: dict[str, Any] = {
        **GPUDevSubcommand.flags,
        "force": ({"ImageBootstrapApp": {"force": True}}, "Rebuild even if the image exists."),
    }
    aliases: dict[str, Any] = {
        **GPUDevSubcommand.aliases,
        "mirror": "ImageBootstrapper.mirror",
        "suite": "ImageBootstrapper.suite",
        "tag": "ImageBootstrapper.image_tag",
        "base-tag": "ImageBootstrapper.base_tag",
        "host": "ImageBootstrapApp.host",
    }

    def _progress(self, event: dict[str, Any]) -> None:
        print(f"[{event['stage']}] {event['message']}", file=sys.stderr, flush=True)

    def run(self) -> None:
        self.no_args()
        services = self.services()
        host = services.host_pool.get(self.host or services.host_pool.local_name)
        bootstrapper = ImageBootstrapper(parent=self, log=self.log)
        result = bootstrapper.run(
            host.client(),
            force=self.force,
            progress=self._progress,
            # Behind a TLS-intercepting proxy, the pip step trusts the host's CA bundle.
            trust=services.containers.mount_policy.build_trust(),
        )
        verb = "built" if result.created else "already present"
        self.emit(
            result.to_json(),
            f"{result.image} {verb} ({result.image_id[:19]}, {result.seconds:.1f} s)",
        )


class ImageApp(GPUDevApplication):
    """Images: ``jupyter gpudev image bootstrap``."""

    name = "jupyter-gpudev-image"
    usage = "jupyter gpudev image SUBCOMMAND [options]"
    version = __version__
    description = "Manage the images jupyter-gpudev starts."
    classes: list[type[Configurable]] = [*CLASSES]
    subcommands: dict[str, Any] = {
        "bootstrap": (ImageBootstrapApp, ImageBootstrapApp.description.splitlines()[0]),
    }

    def start(self) -> None:
        self.start_subcommand()
