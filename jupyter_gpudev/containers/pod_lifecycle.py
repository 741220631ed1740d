"""The lifecycle's paths on a Kubernetes host: a dev container's pod started (the plan's objects
created, the pod waited for, its lifecycle commands run, its files listed), planned and removed.

``DevContainers`` calls these for a ``k8s://`` host; the objects themselves are ``pods.py``'s
(created in order, a failed start undone) and ``plan.py``'s (the manifests). A pod is not stopped
and kept: removing it deletes it (its Service and GPU claim too; the workspace claim is kept),
which without ``force`` only happens when nothing outside its workspace claim changed since it
started or was last committed. Every function blocks (API server calls, execs).
"""

from __future__ import annotations

import contextlib
import os
import socket
from collections.abc import Callable
from contextlib import AbstractContextManager
from dataclasses import replace
from typing import Any

from ..access import Caller
from ..engine import Host, Progress
from ..environments import Environment
from ..errors import ConfigError, Conflict, EngineError, EngineUnreachable, GPUDevError
from ..labels import A_NAME
from ..untrusted import clean
from . import plan as planning
from .create import Confinement
from .lookup import ContainerLookup
from .model import DevContainerInfo, StartRequest, creation_time, given_name, user_name
from .pods import Pods, annotation, pod_changes, pod_info, pod_uid


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
    target, notes = planning.pod_target(
        env,
        request,
        host.spec,
        name=name,
        owner=who.name,
        command=command,
        server_id=lookup.server_id,
        created=creation_time(),
        process=f"{socket.gethostname()}:{os.getpid()}",
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
    cluster, error = None, None
    if pod.gpus.count and host.cluster is not None:
        try:
            cluster = host.cluster.describe()
        except (EngineUnreachable, ConfigError) as exc:
            error = exc.message
    note = planning.cluster_note(pod.gpus, cluster, error)
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
