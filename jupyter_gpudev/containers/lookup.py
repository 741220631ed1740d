"""Finding and describing dev containers: by name on the hosts of a ``HostPool``, their
reports (state, GPUs, lease, ports, kernels, changes), logs, terminals and web ports.

``ContainerLookup`` is the base of ``DevContainers`` (the lifecycle): it holds what reading
needs (the hosts, the ledger, the state folder) and never starts, stops or removes anything.
Configured as ``c.DevContainers.*`` (its options in ``options.py``). A Docker container's
report is shaped in ``reports.py``, a pod's in ``pods.py``; output is read by ``logs.py``."""

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

import docker
import docker.errors
from docker.models.containers import Container
from jupyter_core.paths import jupyter_data_dir
from traitlets import Bunch, Instance, default, observe
from traitlets.config import LoggingConfigurable

from ..access import Access, Caller
from ..engine import Host, HostInfo, HostPool
from ..engine.podforward import PodForwards
from ..errors import (
    BadRequest,
    Conflict,
    EngineError,
    EngineUnreachable,
    GPUDevError,
    NotFound,
    engine_errors,
)
from ..k8s.settings import RENAMED, KubernetesHosts
from ..labels import A_NAME, A_OWNER, L_HOST, L_MANAGED, L_NAME, L_OWNER, STOPPED
from ..leasing import LeaseLedger
from . import options
from .hooks import ChangeTracking, KernelTracking
from .logs import container_output, pod_output
from .model import DevContainerInfo, KernelInfo, docker_name, given_name, keys_meant, user_name
from .pods import PodListings, Pods, annotation, pod_address, pod_info, pod_uid
from .ports import AddedPorts, declared_ports
from .reconcile import on_host
from .reports import Known, container_info, hosts_seen
from .terminals import pod_terminal_argv, terminal_argv


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
        **kwargs: Any,
    ) -> None:
        """``ledger``: a lease ledger shared with other managers (the shared service's views
        of each user); default: this manager's own, in ``state_dir``, opened on first use."""
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

    def pods(self, host: Host) -> Pods:
        """The dev container pods of a Kubernetes host."""
        if host.cluster is None:
            raise BadRequest(f"Host {host.name!r} is not a Kubernetes cluster")
        return Pods(
            host.cluster,
            timeout=self.kubernetes.start_timeout,
            poll=self.kubernetes.poll_interval,
            log=self.log,
            watch=self.kubernetes.watch,
        )

    @property
    def pod_listings(self) -> PodListings:
        """The file listings of pods taken at their start (in ``state_dir``)."""
        return PodListings(os.path.join(self.state_dir, "pod-listings"))

    def locate(
        self, name: str, host: str | None = None, *, caller: Caller | None = None
    ) -> tuple[Host, Container | dict[str, Any]]:
        """The dev container called ``name`` on ``host`` (or on the first host, in the pool's
        order, that has one): a Docker container, or a pod on a Kubernetes host (its JSON), if
        ``caller`` (default: the single-user mode's user) may see it: another user's is
        ``NotFound``, exactly like one that does not exist. A host that cannot be asked is
        skipped (it is the error only when no host could be)."""
        who = self.access.resolve(caller)
        keys = self.keys_meant(name, who)
        unreachable: list[GPUDevError] = []
        hosts = self._hosts(host)
        for candidate in hosts:
            if candidate.spec.is_kubernetes:
                try:
                    pods = self.pods(candidate)
                    for key in keys:
                        pod = pods.find(key)
                        if pod is not None and who.sees_owner(annotation(pod, A_OWNER)):
                            return candidate, pod
                except GPUDevError as err:  # a cluster's refusal is not another host's
                    unreachable.append(err)
                continue
            try:
                with engine_errors(f"Looking up {user_name(name)!r}", self.log):
                    for engine_name in dict.fromkeys(docker_name(key) for key in keys):
                        try:
                            container = candidate.client().containers.get(engine_name)
                        except docker.errors.NotFound:
                            continue
                        if (
                            container.labels.get(L_MANAGED) == "1"
                            and on_host(container, candidate)
                            and self.access.may_see(who, container.labels, self.ledger_id)
                        ):
                            return candidate, container
            except EngineUnreachable as err:
                unreachable.append(err)
                continue
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
        pod's IP (``pod_port_forward``)."""
        if not self.forwards_pods(host) or host.cluster is None:
            return pod_address(pod), port
        with self._lock:
            forwards = self._pod_forwards.get(host.name)
            if forwards is None:
                forwards = self._pod_forwards[host.name] = PodForwards(host.cluster, self.log)
        return "127.0.0.1", forwards.forward(str(pod["metadata"]["name"]), port)

    def close_pod_forwards(self, host: str, pod: str, ports: tuple[int, ...] | None = None) -> None:
        """Close this server's forwards to a pod (to ``ports`` of it when given)."""
        with self._lock:
            forwards = self._pod_forwards.get(host)
        if forwards is not None:
            forwards.close_to(pod, ports)

    def _on_cluster(self, host: str | None) -> bool:
        return bool(host) and self._host(host).spec.is_kubernetes

    def _pod_info(self, host: Host, pod: dict[str, Any]) -> DevContainerInfo:
        return self.as_seen(
            pod_info(
                pod,
                host.name,
                added_ports=self.added_ports.read().get(pod_uid(pod), ()),
                pinned=annotation(pod, A_NAME) in self.ledger.pinned(host.name),
            )
        )

    def as_seen(self, info: DevContainerInfo) -> DevContainerInfo:
        """``info`` (named by its key) with the name its viewer gives it (``shown_name``)."""
        return replace(info, name=self.shown_name(info.key, info.owner))

    def find(
        self, name: str, host: str | None = None, *, caller: Caller | None = None
    ) -> tuple[Host, Container]:
        """``locate`` for what only Docker containers can do: a pod is a ``BadRequest`` saying
        so."""
        found_host, found = self.locate(name, host, caller=caller)
        if isinstance(found, dict):
            raise BadRequest(
                f"{user_name(name)!r} runs in a pod on host {found_host.name!r}: this is not done "
                "for pods yet (start, ls, logs, rm, pin, diff, commit, push, kernels, terminals "
                "and web ports are)"
            )
        return found_host, found

    def container_address(
        self, name: str, host: str | None = None, *, caller: Caller | None = None
    ) -> str:
        """The IP address at which the host reaches the container (kernels connect there)."""
        _, container = self.find(name, host, caller=caller)
        return self.address_of(container)

    def address_of(self, container: Container) -> str:
        """``container_address`` of a container object already at hand."""
        name = container.labels.get(L_NAME, container.name or "")
        settings = container.attrs.get("NetworkSettings", {})
        if container.attrs.get("HostConfig", {}).get("NetworkMode") == "host":
            return "127.0.0.1"
        networks = settings.get("Networks") or {}
        preferred: dict[str, Any] = networks.get(self.network) or next(iter(networks.values()), {})
        address = str(preferred.get("IPAddress") or settings.get("IPAddress") or "")
        if not address:
            raise EngineError(f"{user_name(name)!r} has no network address (is it running?)")
        return address

    def get(
        self,
        name: str,
        host: str | None = None,
        *,
        count_changes: bool = False,
        caller: Caller | None = None,
    ) -> DevContainerInfo:
        """One container; ``count_changes``: count its uncommitted changes (see ``describe``)."""
        found_host, container = self.locate(name, host, caller=caller)
        if isinstance(container, dict):
            return self._pod_info(found_host, container)
        return self.describe(found_host, container, count_changes=count_changes)

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
        ledger_id = self.ledger_id
        found: list[tuple[Host, Container, Known]] = []
        hosts = self._hosts(host)
        unreachable: list[GPUDevError] = []
        added = self.added_ports.read()
        pods: list[DevContainerInfo] = []
        for candidate in hosts:
            if candidate.spec.is_kubernetes:
                try:
                    listed_pods = self.pods(candidate).managed()
                except GPUDevError as err:  # a cluster's refusal is not another host's
                    self.log.warning("gpudev: pods of %s: %s", candidate.name, err.message)
                    unreachable.append(err)
                    continue
                pinned = frozenset(self.ledger.pinned(candidate.name))
                pods.extend(
                    self.as_seen(
                        pod_info(
                            p,
                            candidate.name,
                            added_ports=added.get(pod_uid(p), ()),
                            pinned=annotation(p, A_NAME) in pinned,
                        )
                    )
                    for p in listed_pods
                    if who.sees_owner(annotation(p, A_OWNER))
                )
                continue
            try:
                client = candidate.client()
            except EngineUnreachable as err:
                unreachable.append(err)
                continue
            with engine_errors(f"Listing dev containers on {candidate.name!r}", self.log):
                # One list request; inspect data reused while the engine's events allow.
                listed = candidate.containers.list(
                    client,
                    all_states=all_states,
                    filters={"label": [f"{L_MANAGED}=1", f"{L_HOST}={candidate.name}"]},
                )
            known = Known(
                leases={lease.container: lease for lease in self.ledger.active(candidate.name)},
                pinned=frozenset(self.ledger.pinned(candidate.name)),
                added_ports=added,
            )
            for attrs in listed:
                container = client.containers.prepare_model(attrs)
                if self.access.may_see(who, container.labels, ledger_id):
                    found.append((candidate, container, known))
        if unreachable and len(unreachable) == len(hosts):
            raise unreachable[0]  # no engine answered: say so, not "no containers"

        # Kept counts first (no engine call, stale ones recounted in the background); only
        # the containers never counted in their state wait, several counted at once.
        result = [
            self.describe(h, c, count_changes=count_changes, known=k, wait=False)
            for h, c, k in found
        ]
        if not all_states:
            pods = [p for p in pods if p.state not in STOPPED]
        waiting = [i for i, info in enumerate(result) if count_changes and info.uncommitted is None]

        def counted(index: int) -> DevContainerInfo:
            found_host, container, known = found[index]
            return self.describe(found_host, container, count_changes=True, known=known)

        if len(waiting) > 1:
            with ThreadPoolExecutor(min(self.COUNT_WORKERS, len(waiting))) as pool:
                for index, info in zip(waiting, pool.map(counted, waiting), strict=True):
                    result[index] = info
        elif waiting:
            result[waiting[0]] = counted(waiting[0])
        return sorted([*result, *pods], key=lambda info: (info.host, info.name))

    def terminal_command(
        self, name: str, host: str | None = None, *, caller: Caller | None = None
    ) -> builtins.list[str]:
        """The argv of a shell inside a running dev container, for a Jupyter terminal.

        Every element comes from the engine or from configuration, never from the request: the
        container is found by its validated name, and addressed by its id.
        """
        found_host, container = self.locate(name, host, caller=caller)
        if isinstance(container, dict):
            if self._pod_info(found_host, container).state != "running":
                raise Conflict(f"{user_name(name)!r} is not running")
            return pod_terminal_argv(found_host, str(container["metadata"]["name"]))
        if container.status != "running":
            raise Conflict(f"{user_name(name)!r} is not running: start it first")
        return terminal_argv(found_host, container, self.docker_cli)

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
        found_host, container = self.locate(name, host, caller=caller)
        if isinstance(container, dict):
            info = self._pod_info(found_host, container)
            if not add and port in info.forward_ports:
                raise BadRequest(
                    f"Port {port} is one of the forwardPorts of {user_name(name)!r}'s "
                    "environment: it is always served (only ports added at run time can be "
                    "removed)"
                )
            if not pod_uid(container):
                raise EngineError(f"The pod of {user_name(name)!r} has no uid: not served")
            self.added_ports.set(pod_uid(container), port, add=add)
            return self._pod_info(found_host, container)
        if not add and port in declared_ports(container):
            raise BadRequest(
                f"Port {port} is one of the forwardPorts of {user_name(name)!r}'s environment: "
                "it is always served (only ports added at run time can be removed)"
            )
        self.added_ports.set(str(container.id), port, add=add)
        return self.describe(found_host, container)

    def proxy_target(
        self, name: str, port: int, host: str | None = None, *, caller: Caller | None = None
    ) -> tuple[str, int]:
        """Where the server connects to reach a web port of a running dev container: its
        address on the host's bridge network (a local host), or a local end of an SSH forward
        (a remote host), or a pod's IP. Only the container's web ports are served."""
        found_host, container = self.locate(name, host, caller=caller)
        if isinstance(container, dict):
            info = self._pod_info(found_host, container)
            served, running = info.web_ports, info.state == "running"
        else:
            served = self.added_ports.web_ports(container)
            running = container.status == "running"
        if port not in served:
            raise NotFound(
                f"Port {port} of {user_name(name)!r} is not forwarded: add it to forwardPorts, "
                f"or with `jupyter gpudev ports add {user_name(name)} {port}`",
                details={"name": user_name(name), "port": port},
            )
        if not running:
            raise Conflict(f"{user_name(name)!r} is not running: start it first")
        if isinstance(container, dict):
            return self.pod_reach(found_host, container, port)
        return found_host.reach(self.address_of(container), port)

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
        found_host, container = self.locate(name, host, caller=caller)
        limit = self.max_log_bytes
        if isinstance(container, dict):
            cluster, pod = self.pods(found_host).cluster, str(container["metadata"]["name"])
            yield from pod_output(cluster, pod, follow=follow, tail=tail, limit=limit)
            return
        yield from container_output(container, follow=follow, tail=tail, limit=limit)

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
        """The container as reported. Its uncommitted changes are counted (``docker diff``,
        kept a while, see ``ChangeCounts``) only with ``count_changes``; otherwise a kept count
        that still holds is reported, or ``None``. ``known``: the ledger and port reads of a
        listing, made once for all its containers; ``wait`` off: a count that would have to be
        waited for is ``None``."""
        labels = container.labels
        name = labels.get(L_NAME, user_name(container.name or ""))  # its key
        if known is None:
            lease = self.ledger.for_container(host.name, labels.get(L_NAME, ""))
            pinned = labels.get(L_NAME, "") in self.ledger.pinned(host.name)
            added = self.added_ports.read()
        else:
            lease = known.leases.get(labels.get(L_NAME, ""))
            pinned = labels.get(L_NAME, "") in known.pinned
            added = known.added_ports
        usage = self.kernels.usage(host.name, name) if self.kernels is not None else None
        return container_info(
            container,
            host.name,
            key=name,
            shown_name=self.shown_name(name, labels.get(L_OWNER, "")),
            lease=lease,
            pinned=pinned,
            added=added,
            usage=usage,
            uncommitted=(
                self.changes.count(host, container, compute=count_changes, wait=wait)
                if self.changes is not None
                else None
            ),
            warnings=warnings,
        )
