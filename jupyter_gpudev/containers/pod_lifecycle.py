"""Dev containers as pods on a Kubernetes host (``PodBackend``, the
``backend.DevContainerBackend`` of a ``k8s://`` host): a pod started (the plan's objects created,
the pod waited for, its lifecycle commands run, its files listed), planned, found, listed,
reported, reached and removed; the kernels' own pods a dead server left, deleted
(``delete_orphan_kernel_pods``).

The objects themselves are ``pods.py``'s (created in order, a failed start undone, a pod's
output read) and ``pod_plan.py``'s (the manifests). A pod is not stopped and kept: removing it
deletes it (its Service and GPU claim too; the workspace claim is kept), which without
``force`` only happens when nothing outside its workspace claim changed since it started or was
last committed. On a cluster the scheduler places a pod and holds its GPUs: no lease is
written. Every method blocks (API server calls, execs).
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager
from dataclasses import replace
from typing import TYPE_CHECKING, Any

from ..access import Caller
from ..engine import Host, Progress
from ..engine.cluster import Cluster
from ..environments import Environment
from ..errors import (
    BadRequest,
    ConfigError,
    Conflict,
    EngineError,
    EngineUnreachable,
    GPUDevError,
)
from ..labels import A_LEDGER, A_NAME, A_OWNER, A_PROCESS, STOPPED
from ..untrusted import clean
from . import pod_plan as planning
from .backend import Located, Release, Skipped, Starting
from .create import Confinement
from .lookup import ContainerLookup
from .model import DevContainerInfo, StartRequest, creation_time, given_name, user_name
from .pods import (
    Pods,
    annotation,
    pod_address,
    pod_changes,
    pod_info,
    pod_kernel,
    pod_output,
    pod_uid,
)
from .reconcile import process_gone, process_identity
from .reports import Known
from .terminals import pod_terminal_argv

if TYPE_CHECKING:
    from docker.models.containers import Container


def start_pod(
    lookup: ContainerLookup,
    host: Host,
    env: Environment,
    request: StartRequest,
    *,
    who: Caller,
    say: Progress,
    name: str,
    command: tuple[str, ...],
    confinement: Callable[[], Confinement],
    room: AbstractContextManager[None],
    timeout: float,
) -> DevContainerInfo:
    """``start`` on a Kubernetes host: the plan's objects created, the pod waited for.

    ``name``: its key; ``command``: its main process; ``confinement``: the administrator's,
    within ``who``'s limits; ``room``: held while the pod is made (``who``'s running
    containers counted); ``timeout``: of each lifecycle command."""
    if env.features:  # a cluster pulls its image: nothing here would install them
        raise BadRequest(
            f"The environment {env.name!r} names Dev Container Features, which gpudev installs "
            "only on a Docker engine yet; on a Kubernetes host, use an image with the tools"
        )
    target, notes = planning.pod_target(
        env,
        request,
        host.spec,
        name=name,
        owner=who.name,
        command=command,
        server_id=lookup.server_id,
        created=creation_time(),
        process=process_identity(),
        ledger=lookup.ledger_id,
    )
    made = planning.pod_objects(env, target, confinement())
    pods = lookup.pods(host)
    with room:  # a pending pod is counted
        pod, kept = pods.start(made, target, say)
        # A pin left by a pod of that name deleted behind gpudev's back (kubectl, an
        # eviction) is not this one's.
        lookup.ledger.set_pinned(host.name, target.name, False)
    pod_name = str(pod["metadata"]["name"])
    warnings = [*notes, *made.notes, *kept]
    warnings += pods.run_lifecycle(pod_name, env, say, timeout=timeout)
    warnings += _record_pod_baseline(lookup, host, pod, pods, say)
    if request.kernel_id and lookup.pod_listings.load(host.name, pod_uid(pod)) is None:
        # Its changes could never be told, so it could never be deleted at the kernel's
        # end without force: it would hold its GPUs until someone removes it.
        pods.delete(pod)
        raise EngineError(
            f"The files of the kernel's pod {pod_name} could not be listed (gpudev needs "
            "GNU find in the image), so what it changes could not be kept: it was deleted"
        )
    say({"stage": "ready", "message": f"{given_name(target.name)} is running"})
    return lookup.as_seen(replace(pod_info(pod, host.name), warnings=tuple(warnings)))


def _record_pod_baseline(
    lookup: ContainerLookup, host: Host, pod: dict[str, Any], pods: Pods, say: Progress
) -> list[str]:
    """A pod's files listed and its packages probed after its lifecycle commands: what
    its changes are counted against (a cluster has no ``docker diff``). Warnings."""
    pod_name = str(pod["metadata"]["name"])
    say({"stage": "baseline", "message": f"listing the files of {pod_name}"})
    try:
        recorded = lookup.pod_listings.save(host.name, pod_uid(pod), pods.listing(pod_name))
    except GPUDevError as err:
        lookup.log.warning("gpudev: no file listing of %s: %s", pod_name, err.message)
        recorded = False
    if not recorded:
        return [
            "its files could not be listed now, so its changes cannot be counted: removing "
            "it will need force, and it cannot be committed"
        ]
    if lookup.changes is None:
        return []
    say({"stage": "baseline", "message": f"probing the packages of {pod_name}"})
    try:
        lookup.changes.record_pod_baseline(host, pod)
    except GPUDevError as err:
        lookup.log.warning("gpudev: no package baseline of %s: %s", pod_name, err.message)
        return [f"its packages could not be probed ({err.message}): it cannot be committed"]
    return []


def plan_pod(
    host: Host,
    cluster: Cluster,
    env: Environment,
    request: StartRequest,
    *,
    name: str,
    owner: str,
    command: tuple[str, ...],
    server_id: str,
    confinement: Callable[[], Confinement],
) -> dict[str, Any]:
    """``plan`` on a Kubernetes host: the manifests of the pod and its objects, and what the
    cluster says of the GPUs asked for (nothing created)."""
    pod, pod_notes = planning.pod_target(
        env,
        request,
        host.spec,
        name=name,
        owner=owner,
        command=command,
        server_id=server_id,
        created=creation_time(),
    )
    described, error = None, None
    if pod.gpus.count:
        try:
            described = cluster.describe()
        except (EngineUnreachable, ConfigError) as exc:
            error = exc.message
    note = planning.cluster_note(pod.gpus, described, error)
    said = [*pod_notes, note] if note else pod_notes
    return planning.pod_plan(env, pod, confinement(), host.spec, said)


def remove_pod(
    lookup: ContainerLookup,
    name: str,
    host: Host,
    pod: dict[str, Any],
    *,
    force: bool,
    keep: Callable[[], str | None] | None = None,
) -> None:
    """Delete a dev container's pod (its Service and GPU claim too; the workspace claim
    is kept). Without ``force`` only when nothing outside its workspace claim changed
    since it started or was last committed: that is lost with the pod. ``keep``, asked
    right before it is deleted, may give a reason to keep it after all (a ``Conflict``)."""
    pods = lookup.pods(host)
    uid = pod_uid(pod)
    if not force:
        changed = _pod_uncommitted(lookup, name, host, pod, pods)
        again = pods.find(user_name(name))
        if again is None or pod_uid(again) != uid:
            raise Conflict(f"The pod of {user_name(name)!r} changed meanwhile: try again")
        if changed:
            shown = ", ".join(clean(path) for path in changed[:3])
            raise Conflict(
                f"{user_name(name)!r} has {len(changed)} uncommitted change(s) outside its "
                f"workspace claim (e.g. {shown}) that are lost with its pod: commit them "
                "first, or remove it with force (the workspace claim is kept)",
                details={"changes": changed[:50]},
            )
    reason = keep() if keep is not None else None
    if reason:
        raise Conflict(reason)
    for note in pods.delete(pod):
        lookup.log.info("gpudev: %s", note)
    lookup.close_pod_forwards(host.name, str(pod["metadata"]["name"]))
    lookup.pod_listings.forget(host.name, uid)
    if lookup.changes is not None:
        with contextlib.suppress(GPUDevError):  # an odd uid has no baseline
            lookup.changes.forget_pod(uid)
    lookup.ledger.set_pinned(host.name, annotation(pod, A_NAME) or user_name(name), False)


def _pod_uncommitted(
    lookup: ContainerLookup, name: str, host: Host, pod: dict[str, Any], pods: Pods
) -> list[str]:
    """What deleting a pod would lose (see ``lookup.changes``; without change tracking:
    every change since it started)."""
    if lookup.changes is not None:
        try:
            return lookup.changes.uncommitted_pod(host, pod)
        except Conflict:
            pass  # not listed when it started: said below
    before = lookup.pod_listings.load(host.name, pod_uid(pod))
    if before is None:
        raise Conflict(
            f"{user_name(name)!r} runs in a pod on host {host.name!r} whose files were "
            "not listed when it started, so gpudev cannot tell what would be lost: "
            "remove it with force (the workspace claim is kept)"
        )
    changed, problems = pod_changes(before, pods.listing(str(pod["metadata"]["name"])), pod)
    for problem in problems[:5]:
        lookup.log.info("gpudev: listing of %s: %s", user_name(name), clean(problem))
    return changed


def delete_orphan_kernel_pods(
    host: Host,
    pods: Callable[[Host], Pods],
    *,
    machine: str,
    ledger_id: str,
    remove: Callable[[str, str], None],
    log: Any,
) -> list[str]:
    """``stop_orphan_kernels`` on a Kubernetes host: the kernels' own pods a dead server
    process of this machine left are deleted (their GPUs are the scheduler's until then);
    ones whose files outside the workspace changed keep running until committed or removed
    (a pod is never stopped and kept)."""
    try:
        managed = pods(host).managed()
    except GPUDevError as err:
        log.warning("gpudev: orphan kernels on %s not checked: %s", host.name, err)
        return []
    deleted: list[str] = []
    for pod in managed:
        if not pod_kernel(pod) or annotation(pod, A_LEDGER) != ledger_id:
            continue  # another server's (another user's) kernel pod
        if not process_gone(annotation(pod, A_PROCESS), machine):
            continue
        name = annotation(pod, A_NAME)
        try:
            remove(name, host.name)
        except Conflict as err:
            log.warning("gpudev: orphan kernel pod %s kept: %s", name, err.message)
            continue
        except GPUDevError as err:
            log.warning("gpudev: orphan kernel pod %s: %s", name, err.message)
            continue
        log.info("gpudev: deleted %s, left by a server that is gone", name)
        deleted.append(name)
    return deleted


class PodBackend:
    """The dev containers of one Kubernetes host, as pods (``backend.DevContainerBackend``)."""

    def __init__(self, lookup: ContainerLookup, host: Host) -> None:
        self.lookup = lookup
        self.host = host

    @property
    def pods(self) -> Pods:
        return self.lookup.pods(self.host)

    @classmethod
    def start(
        cls, lookup: ContainerLookup, host: Host | None, starting: Starting
    ) -> DevContainerInfo:
        """``start_pod`` on ``host``, the host the start names."""
        host = _named(host)
        return start_pod(
            lookup,
            host,
            starting.env,
            starting.request,
            who=starting.who,
            say=starting.say,
            name=starting.name(),
            command=starting.command,
            confinement=lambda: starting.confinement(host),
            room=starting.room(),
            timeout=starting.timeout,
        )

    @classmethod
    def plan(cls, lookup: ContainerLookup, host: Host | None, starting: Starting) -> dict[str, Any]:
        """``plan_pod`` on ``host``, the host the plan names."""
        host = _named(host)
        return plan_pod(
            host,
            lookup.pods(host).cluster,
            starting.env,
            starting.request,
            name=starting.name(),
            owner=starting.who.name,
            command=starting.command,
            server_id=lookup.server_id,
            confinement=lambda: starting.confinement(host),
        )

    # -- finding and reading -------------------------------------------------------------------

    def find(
        self,
        name: str,  # noqa: ARG002 - no message of its own
        keys: tuple[str, ...],
        who: Caller,
    ) -> dict[str, Any] | None:
        try:
            pods = self.pods
            for key in keys:
                pod = pods.find(key)
                if pod is not None and who.sees_owner(annotation(pod, A_OWNER)):
                    return pod
        except GPUDevError as err:  # a cluster's refusal is not another host's
            raise Skipped(err) from None
        return None

    def listed(
        self, who: Caller, *, all_states: bool, added: dict[str, list[int]]
    ) -> list[Located]:
        try:
            listed = self.pods.managed()
        except GPUDevError as err:  # a cluster's refusal is not another host's
            self.lookup.log.warning("gpudev: pods of %s: %s", self.host.name, err.message)
            raise Skipped(err) from None
        known = Known(
            leases={},
            pinned=frozenset(self.lookup.ledger.pinned(self.host.name)),
            added_ports=added,
        )
        return [
            Located(self.host, self, pod, known)
            for pod in listed
            if who.sees_owner(annotation(pod, A_OWNER))
            and (all_states or pod_info(pod, self.host.name).state not in STOPPED)
        ]

    def report(
        self,
        native: dict[str, Any],
        *,
        count_changes: bool = False,  # noqa: ARG002 - its changes are not counted here
        known: Known | None = None,
        wait: bool = True,  # noqa: ARG002
        warnings: tuple[str, ...] = (),
    ) -> DevContainerInfo:
        """The pod as reported (no lease: the scheduler holds its GPUs)."""
        if known is None:
            added = self.lookup.added_ports.read()
            pinned = annotation(native, A_NAME) in self.lookup.ledger.pinned(self.host.name)
        else:
            added = known.added_ports
            pinned = annotation(native, A_NAME) in known.pinned
        info = pod_info(
            native, self.host.name, added_ports=added.get(pod_uid(native), ()), pinned=pinned
        )
        return self.lookup.as_seen(replace(info, warnings=warnings) if warnings else info)

    def container(self, native: dict[str, Any], name: str) -> Container:  # noqa: ARG002
        raise BadRequest(
            f"{user_name(name)!r} runs in a pod on host {self.host.name!r}: this is not done "
            "for pods yet (start, ls, logs, rm, pin, diff, commit, push, kernels, terminals "
            "and web ports are)"
        )

    def key(self, native: dict[str, Any], name: str) -> str:
        return annotation(native, A_NAME) or user_name(name)

    def owner(self, native: dict[str, Any]) -> str:
        return annotation(native, A_OWNER)

    def kernel_id(self, native: dict[str, Any]) -> str | None:
        return pod_kernel(native)

    def running(self, native: dict[str, Any]) -> bool:
        return pod_info(native, self.host.name).state == "running"

    def web_ports(self, native: dict[str, Any]) -> tuple[int, ...]:
        added = self.lookup.added_ports.read().get(pod_uid(native), ())
        return pod_info(native, self.host.name, added_ports=added).web_ports

    def set_web_port(
        self, native: dict[str, Any], name: str, port: int, *, add: bool
    ) -> DevContainerInfo:
        if not add and port in self.report(native).forward_ports:
            raise BadRequest(
                f"Port {port} is one of the forwardPorts of {user_name(name)!r}'s "
                "environment: it is always served (only ports added at run time can be "
                "removed)"
            )
        if not pod_uid(native):
            raise EngineError(f"The pod of {user_name(name)!r} has no uid: not served")
        self.lookup.added_ports.set(pod_uid(native), port, add=add)
        return self.report(native)

    def reach(self, native: dict[str, Any], port: int) -> tuple[str, int]:
        """A local port-forward, or the pod's IP (``c.KubernetesHosts.port_forward``)."""
        if not self.lookup.forwards_pods(self.host):
            return pod_address(native), port
        forwards = self.lookup.pod_forwards(self.host.name, self.pods.cluster)
        return "127.0.0.1", forwards.forward(str(native["metadata"]["name"]), port)

    def terminal_argv(self, native: dict[str, Any], name: str) -> list[str]:
        if not self.running(native):
            raise Conflict(f"{user_name(name)!r} is not running")
        return pod_terminal_argv(self.host, str(native["metadata"]["name"]))

    def logs(
        self, native: dict[str, Any], *, follow: bool, tail: int | None, limit: int
    ) -> Iterator[str]:
        cluster, pod = self.pods.cluster, str(native["metadata"]["name"])
        return pod_output(cluster, pod, follow=follow, tail=tail, limit=limit)

    # -- stop and remove -----------------------------------------------------------------------

    def stop(
        self,
        native: dict[str, Any],  # noqa: ARG002
        name: str,
        *,
        timeout: float,  # noqa: ARG002
        release: Release,  # noqa: ARG002 - no lease on a cluster
    ) -> None:
        raise Conflict(
            f"{user_name(name)!r} is a pod: a pod is not stopped and kept. Removing it "
            "(rm --force) deletes it and what changed outside its workspace claim, and "
            "frees its GPUs; the workspace claim is kept"
        )

    def remove(
        self,
        native: dict[str, Any],
        name: str,
        *,
        force: bool,
        keep: Callable[[], str | None] | None,
        timeout: float,  # noqa: ARG002
        release: Release,  # noqa: ARG002 - no lease on a cluster
    ) -> None:
        """``remove_pod``: a pod is checked by listing its files, which takes a while:
        ``keep``, asked right before it is deleted, may give a reason to keep it after all."""
        remove_pod(self.lookup, name, self.host, native, force=force, keep=keep)

    def uncommitted(self, native: dict[str, Any], name: str) -> list[str]:
        return _pod_uncommitted(self.lookup, name, self.host, native, self.pods)

    # -- what the lifecycle's other parts ask of a host ----------------------------------------

    def owned(self, owner: str) -> dict[str, str]:
        pods = [p for p in self.pods.managed() if annotation(p, A_OWNER) == owner]
        return {annotation(p, A_NAME): pod_info(p, self.host.name).state for p in pods}

    def stop_orphan_kernels(
        self, *, machine: str, ledger_id: str, remove: Callable[[str, str], None]
    ) -> list[str]:
        return delete_orphan_kernel_pods(
            self.host,
            self.lookup.pods,
            machine=machine,
            ledger_id=ledger_id,
            remove=remove,
            log=self.lookup.log,
        )

    def passed_over(self) -> str | None:
        return f"a Kubernetes cluster: start there with --host {self.host.name}"

    def host_cpus(self) -> Callable[[], int] | None:
        return None  # a pod's limits have no default share of a node


def _named(host: Host | None) -> Host:
    """The Kubernetes host a start or plan names (``lifecycle.backend_type`` gives pods to a
    start only on a host it names)."""
    if host is None:
        raise BadRequest("A dev container starts as a pod only on the Kubernetes host named")
    return host
