"""Finding and describing dev containers: by name on the hosts of a ``HostPool``, their
reports (state, GPUs, lease, ports, kernels, changes), logs, terminals and web ports.

``ContainerLookup`` is the base of ``DevContainers`` (the lifecycle): it holds what reading
needs (the hosts, the ledger, the state folder) and never starts, stops or removes anything.
Configured as ``c.DevContainers.*`` (its options in ``options.py``). What differs between a
Docker engine and a Kubernetes cluster is each host's ``backend`` (``backend.py``): what is
found is a ``Located`` handle, read and acted on through it."""

from __future__ import annotations

import builtins
import hashlib
import os
import secrets
import threading
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import replace
from pathlib import Path
from typing import Any

from docker.models.containers import Container
from jupyter_core.paths import jupyter_data_dir
from traitlets import Bunch, Instance, default, observe
from traitlets.config import LoggingConfigurable

from ..access import Access, Caller
from ..engine import Host, HostInfo, HostPool
from ..engine.cluster import Cluster
from ..engine.podforward import PodForwards
from ..errors import BadRequest, Conflict, EngineUnreachable, GPUDevError, NotFound
from ..k8s.settings import RENAMED, KubernetesHosts
from ..leasing import LeaseLedger
from . import options
from .backend import DevContainerBackend, Located, Skipped
from .hooks import ChangeTracking, KernelTracking
from .idle_notes import IdleNotes
from .model import DevContainerInfo, KernelInfo, docker_name, given_name, keys_meant, user_name
from .pods import PodListings, Pods, pods_of
from .ports import AddedPorts, engine_address
from .reports import Known, hosts_seen


class ContainerLookup(LoggingConfigurable):
    """The reading side of ``DevContainers``: find, describe, list, logs, terminals, ports."""

    # The options (``c.ContainerLookup.*``), their help texts in ``options.py``.
    state_dir = options.STATE_DIR
    max_log_bytes = options.MAX_LOG_BYTES
    network = options.NETWORK
    isolate_web_apps = options.ISOLATE_WEB_APPS
    docker_cli = options.DOCKER_CLI
    pod_start_timeout = options.POD_START_TIMEOUT
    pod_port_forward = options.POD_PORT_FORWARD
    pod_poll_interval = options.POD_POLL_INTERVAL
    pod_watch = options.POD_WATCH

    @default("state_dir")
    def _default_state_dir(self) -> str:
        return os.path.join(jupyter_data_dir(), "gpudev")

    host_pool = Instance(HostPool)

    access = Instance(Access, help="Who owns which dev container (``c.Access``).")

    kubernetes = Instance(KubernetesHosts, help="Pods on Kubernetes hosts (``c.KubernetesHosts``).")

    @default("access")
    def _default_access(self) -> Access:
        return Access(parent=self)

    @default("kubernetes")
    def _default_kubernetes(self) -> KubernetesHosts:
        return KubernetesHosts(parent=self)

    @observe(*RENAMED)
    def _moved_option(self, change: Bunch) -> None:
        """An option set under its old name (``c.DevContainers.pod_watch``) sets the new one."""
        new = RENAMED[change.name]
        self.log.warning(
            "gpudev: c.%s.%s is deprecated: use c.KubernetesHosts.%s",
            type(self).__name__,
            change.name,
            new,
        )
        setattr(self.kubernetes, new, change.new)

    def __init__(
        self,
        root_dir: str | Path,
        server_id: str | None = None,
        kernels: KernelTracking | None = None,
        changes: ChangeTracking | None = None,
        ledger: LeaseLedger | None = None,
        *,
        idle_notes: IdleNotes | None = None,
        **kwargs: Any,
    ) -> None:
        """``ledger``: a lease ledger shared with other managers (the shared service's views
        of each user); default: this manager's own, in ``state_dir``, opened on first use.
        ``idle_notes``: likewise shared (``gpu_idle``)."""
        super().__init__(**kwargs)
        self.root_dir = Path(root_dir).resolve()
        self.server_id = server_id or secrets.token_hex(6)
        #: The server's gpudev kernels (``None`` outside a server: kernel counts unknown).
        self.kernels = kernels
        #: The container's changes as a commit sees them (``changes.tracker.ChangeTracker``,
        #: wired by ``services.Services``). Without one (a bare ``DevContainers``) no baseline
        #: is recorded, changes are not counted, and ``remove`` without ``force`` refuses any
        #: container whose ``docker diff`` is not empty: nothing is lost unclassified.
        self.changes = changes
        self._ledger: LeaseLedger | None = ledger
        #: What listings say of GPU-idle dev containers (``gpu_idle``): in the shared
        #: service, one for every view (``services.SharedParts``).
        self.idle_notes = idle_notes if idle_notes is not None else IdleNotes()
        #: Who owns what gpudev writes into the workspace (uid, gid): the user, in the shared
        #: service's view of them; ``None`` (single-user mode): whoever runs the server.
        self.workspace_owner: tuple[int, int] | None = None
        self._lock = threading.Lock()
        #: Port forwards to pods, by host (``pod_reach``).
        self._pod_forwards: dict[str, PodForwards] = {}

    @property
    def ledger_id(self) -> str:
        """Names this manager's lease ledger in container labels (a hash of its path)."""
        path = os.path.realpath(os.path.join(self.state_dir, "leases.sqlite"))
        return hashlib.sha256(path.encode()).hexdigest()[:16]

    @property
    def ledger(self) -> LeaseLedger:
        with self._lock:
            if self._ledger is None:
                self._ledger = LeaseLedger(Path(self.state_dir) / "leases.sqlite")
            return self._ledger

    @property
    def added_ports(self) -> AddedPorts:
        """The web ports added at run time (``set_web_port``)."""
        return AddedPorts(self.state_dir, self.log)

    def _host(self, name: str | None) -> Host:
        return self.host_pool.get(name or self.host_pool.local_name)

    def _hosts(self, host: str | None) -> list[Host]:
        if host:
            return [self._host(host)]
        return [self.host_pool.get(n) for n in self.host_pool.names()]

    def backend(self, host: Host) -> DevContainerBackend:
        """What the dev containers of ``host`` are (a Docker engine's containers, or pods):
        ``DevContainers`` says (``lifecycle.backend_type``)."""
        raise NotImplementedError("a ContainerLookup finds through DevContainers' backends")

    def pods(self, host: Host) -> Pods:
        """The dev container pods of a Kubernetes host."""
        return pods_of(host, self.kubernetes, self.log)

    @property
    def pod_listings(self) -> PodListings:
        """The file listings of pods taken at their start (in ``state_dir``)."""
        return PodListings(os.path.join(self.state_dir, "pod-listings"))

    def locate(
        self, name: str, host: str | None = None, *, caller: Caller | None = None
    ) -> Located:
        """The dev container called ``name`` on ``host`` (or on the first host, in the pool's
        order, that has one), if ``caller`` (default: the single-user mode's user) may see it:
        another user's is ``NotFound``, exactly like one that does not exist. A host that
        cannot be asked is skipped (it is the error only when no host could be)."""
        who = self.access.resolve(caller)
        keys = self.keys_meant(name, who)
        unreachable: list[GPUDevError] = []
        hosts = self._hosts(host)
        for candidate in hosts:
            backend = self.backend(candidate)
            try:
                found = backend.find(name, keys, who)
            except Skipped as skipped:
                unreachable.append(skipped.error)
                continue
            if found is not None:
                return Located(candidate, backend, found)
        if unreachable and len(unreachable) == len(hosts):
            raise unreachable[0]
        raise NotFound(f"No dev container named {user_name(name)!r}", details={"name": name})

    def keys_meant(self, name: str, who: Caller) -> tuple[str, ...]:
        """The keys (``model.container_key``) ``who`` may mean by ``name``: in shared mode
        names are per user."""
        return keys_meant(name, None if self.access.single_user else who.name)

    def shown_name(self, key: str, owner: str) -> str:
        """The name this manager's user gives the container whose key is ``key``: in shared
        mode their own container's name, and another user's (an administrator sees it) its
        name on the engine, which names it for them (``keys_meant``)."""
        if self.access.single_user:
            return key
        if owner == self.access.user:
            return given_name(key)
        return docker_name(key)

    def forwards_pods(self, host: Host) -> bool:
        """Whether this server reaches the pods of ``host`` through port-forwards."""
        if self.kubernetes.port_forward != "auto":
            return bool(self.kubernetes.port_forward == "always")
        in_cluster = not host.spec.context and bool(os.environ.get("KUBERNETES_SERVICE_HOST"))
        return not in_cluster

    def pod_reach(self, host: Host, pod: dict[str, Any], port: int) -> tuple[str, int]:
        """Where this server connects to reach ``port`` of a pod: a local forward, or the
        pod's IP (``c.KubernetesHosts.port_forward``)."""
        return self.backend(host).reach(pod, port)

    def pod_forwards(self, host: str, cluster: Cluster) -> PodForwards:
        """This server's port-forwards to the pods of ``host`` (``cluster``)."""
        with self._lock:
            forwards = self._pod_forwards.get(host)
            if forwards is None:
                forwards = self._pod_forwards[host] = PodForwards(cluster, self.log)
        return forwards

    def close_pod_forwards(self, host: str, pod: str, ports: tuple[int, ...] | None = None) -> None:
        """Close this server's forwards to a pod (to ``ports`` of it when given)."""
        with self._lock:
            forwards = self._pod_forwards.get(host)
        if forwards is not None:
            forwards.close_to(pod, ports)

    def as_seen(self, info: DevContainerInfo) -> DevContainerInfo:
        """``info`` (named by its key) with the name its viewer gives it (``shown_name``)."""
        return replace(info, name=self.shown_name(info.key, info.owner))

    def find(
        self, name: str, host: str | None = None, *, caller: Caller | None = None
    ) -> tuple[Host, Container]:
        """``locate`` for what only Docker containers can do: a pod is a ``BadRequest`` saying
        so."""
        located = self.locate(name, host, caller=caller)
        return located.host, located.container(name)

    def container_address(
        self, name: str, host: str | None = None, *, caller: Caller | None = None
    ) -> str:
        """The IP address at which the host reaches the container (kernels connect there)."""
        _, container = self.find(name, host, caller=caller)
        return self.address_of(container)

    def address_of(self, container: Container) -> str:
        """``container_address`` of a container object already at hand."""
        return engine_address(container, self.network)

    def get(
        self,
        name: str,
        host: str | None = None,
        *,
        count_changes: bool = False,
        caller: Caller | None = None,
    ) -> DevContainerInfo:
        """One container; ``count_changes``: count its uncommitted changes (see ``describe``)."""
        return self.locate(name, host, caller=caller).report(count_changes=count_changes)

    def kernel(self, kernel_id: str) -> KernelInfo:
        """Where a live kernel of this server runs: its dev container, host and GPUs.
        ``NotFound`` for an unknown kernel and for one that is not a gpudev kernel."""
        placement = self.kernels.get(kernel_id) if self.kernels is not None else None
        if placement is None:
            if self.kernels is not None and self.kernels.exists(kernel_id):
                raise NotFound(
                    f"Kernel {kernel_id} is not a gpudev kernel: it does not run in a dev "
                    "container",
                    details={"kernel_id": kernel_id},
                )
            raise NotFound(
                f"No kernel {kernel_id} on this Jupyter server (it ended, or never existed)",
                details={"kernel_id": kernel_id},
            )
        info = self.get(placement.container, placement.host)
        return KernelInfo(
            kernel_id=kernel_id,
            container=info.name,
            host=info.host,
            environment=info.environment,
            gpu_uuids=info.gpu_uuids,
            shared=not placement.dedicated,
            state=info.state,
            pod=info.pod,
        )

    def describe_hosts(
        self, name: str | None = None, *, caller: Caller | None = None
    ) -> builtins.list[HostInfo]:
        """Every host (or the one named), each with the ledger's active GPU leases on it
        (none reported for a host that cannot be reached). Another user's lease is shown to a
        non-administrator as held by "another user", without its container; so is another
        user's dev container on a Kubernetes host."""
        who = self.access.resolve(caller)
        infos = [self.host_pool.describe(name)] if name else self.host_pool.describe_all()
        leases = self.ledger.active()
        hidden = not (self.access.single_user or who.admin)
        return hosts_seen(infos, leases, who, shown_name=self.shown_name, hidden=hidden)

    #: At most this many containers have their changes counted at once while listing.
    COUNT_WORKERS = 4

    def list(
        self,
        all_states: bool = True,
        host: str | None = None,
        *,
        count_changes: bool = False,
        caller: Caller | None = None,
    ) -> list[DevContainerInfo]:
        """Every managed container on the reachable hosts that ``caller`` may see (running
        only unless ``all_states``); ``count_changes``: count their uncommitted changes too
        (see ``describe``), several at once."""
        who = self.access.resolve(caller)
        found: list[Located] = []
        hosts = self._hosts(host)
        unreachable: list[GPUDevError] = []
        added = self.added_ports.read()
        for candidate in hosts:
            try:
                found += self.backend(candidate).listed(who, all_states=all_states, added=added)
            except Skipped as skipped:
                unreachable.append(skipped.error)
        if unreachable and len(unreachable) == len(hosts):
            raise unreachable[0]  # no host answered: say so, not "no containers"

        # Kept counts first (no engine call, stale ones recounted in the background); only
        # the containers never counted in their state wait, several counted at once.
        result = [located.report(count_changes=count_changes, wait=False) for located in found]
        waiting = [i for i, info in enumerate(result) if count_changes and info.uncommitted is None]

        def counted(index: int) -> DevContainerInfo:
            return found[index].report(count_changes=True)

        if len(waiting) > 1:
            with ThreadPoolExecutor(min(self.COUNT_WORKERS, len(waiting))) as pool:
                for index, info in zip(waiting, pool.map(counted, waiting), strict=True):
                    result[index] = info
        elif waiting:
            result[waiting[0]] = counted(waiting[0])
        return sorted(result, key=lambda info: (info.host, info.name))

    def terminal_command(
        self, name: str, host: str | None = None, *, caller: Caller | None = None
    ) -> builtins.list[str]:
        """The argv of a shell inside a running dev container, for a Jupyter terminal.

        Every element comes from the engine or from configuration, never from the request: the
        container is found by its validated name, and addressed by its id.
        """
        return self.locate(name, host, caller=caller).terminal_argv(name)

    def remove_host(self, name: str) -> None:
        """Remove a host added at run time, unless dev containers of it remain (they would
        be left without a way to stop them, or their GPUs without a way to be freed)."""
        host = self.host_pool.get(name)
        if host.origin == "added":
            try:
                remaining = [info.name for info in self.list(all_states=True, host=name)]
            except EngineUnreachable:
                remaining = []  # a host that is gone can be forgotten
            if remaining:
                raise Conflict(
                    f"Host {name!r} still has dev containers ({', '.join(remaining[:5])}): "
                    "remove them (or commit their changes) first",
                    details={"host": name, "containers": remaining},
                )
            held = sorted({lease.container for lease in self.ledger.active(name)})
            if held:  # an unreachable host whose containers may still run with their GPUs
                raise Conflict(
                    f"Host {name!r} cannot be reached and its containers still hold GPU leases "
                    f"({', '.join(held[:5])}): stop them there, or bring the host back first",
                    details={"host": name, "containers": held},
                )
        self.host_pool.remove(name)

    def set_web_port(
        self,
        name: str,
        port: int,
        host: str | None = None,
        *,
        add: bool = True,
        caller: Caller | None = None,
    ) -> DevContainerInfo:
        """Serve ``port`` of a container through the proxy (``add=False``: stop serving one
        added at run time; the environment's forwardPorts stay)."""
        if not 1 <= port <= 65535:
            raise BadRequest(f"Not a TCP port: {port}")
        return self.locate(name, host, caller=caller).set_web_port(name, port, add=add)

    def proxy_target(
        self, name: str, port: int, host: str | None = None, *, caller: Caller | None = None
    ) -> tuple[str, int]:
        """Where the server connects to reach a web port of a running dev container: its
        address on the host's bridge network (a local host), or a local end of an SSH forward
        (a remote host), or a pod's IP. Only the container's web ports are served."""
        located = self.locate(name, host, caller=caller)
        served, running = located.web_ports(), located.running()
        if port not in served:
            raise NotFound(
                f"Port {port} of {user_name(name)!r} is not forwarded: add it to forwardPorts, "
                f"or with `jupyter gpudev ports add {user_name(name)} {port}`",
                details={"name": user_name(name), "port": port},
            )
        if not running:
            raise Conflict(f"{user_name(name)!r} is not running: start it first")
        return located.reach(port)

    def logs(
        self,
        name: str,
        host: str | None = None,
        follow: bool = False,
        tail: int | None = None,
        *,
        caller: Caller | None = None,
    ) -> Iterator[str]:
        """The container's output; ``tail``: only its last lines. Without ``follow`` at most
        ``max_log_bytes`` are read (streamed, never the whole log at once), then a line says
        where the output was cut."""
        located = self.locate(name, host, caller=caller)
        yield from located.logs(follow=follow, tail=tail, limit=self.max_log_bytes)

    def describe(
        self,
        host: Host,
        container: Container,
        warnings: tuple[str, ...] = (),
        *,
        count_changes: bool = False,
        known: Known | None = None,
        wait: bool = True,
    ) -> DevContainerInfo:
        """``container``'s report (its backend's ``report``): its uncommitted changes counted
        only with ``count_changes`` (else a kept count that still holds, or ``None``);
        ``known``: the reads of a listing, made once for all its containers; ``wait`` off: a
        count that would have to be waited for is ``None``."""
        return self.backend(host).report(
            container, count_changes=count_changes, known=known, wait=wait, warnings=warnings
        )
