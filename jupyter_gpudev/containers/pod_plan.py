"""What a start on a Kubernetes host would create, without creating it: the pod and its
objects (the manifests of ``k8s/objects.py``) under the administrator's limits, and what the
cluster says now of the GPUs asked for. ``pod_lifecycle.py`` starts and plans with them;
nothing here creates anything.
"""

from __future__ import annotations

from typing import Any

from ..engine import HostSpec
from ..engine.info import ClusterInfo
from ..environments import Environment
from ..errors import BadRequest
from ..k8s import objects as k8s
from ..k8s.placement import fit
from .commands import has_lifecycle_commands
from .create import Confinement
from .model import StartRequest
from .placement import gpu_request


def pod_target(
    env: Environment,
    request: StartRequest,
    spec: HostSpec,
    *,
    name: str,
    owner: str,
    command: tuple[str, ...],
    server_id: str,
    created: str,
    process: str = "",
    ledger: str = "",
) -> tuple[k8s.PodTarget, list[str]]:
    """The pod a start on the Kubernetes host ``spec`` would make, and notes on what of the
    environment a cluster does differently. The scheduler picks the GPUs: a count, with the
    environment's model as the exact ``nvidia.com/gpu.product`` and its memory as the least
    ``nvidia.com/gpu.memory`` of the node. Its pod admits the peers the host names
    (``ingress_from``)."""
    wanted = gpu_request(env, request)
    if wanted is not None and wanted.uuids:
        raise BadRequest(
            "On a Kubernetes host the scheduler picks the GPUs: ask for a number of them "
            "(--gpus N), not for GPU UUIDs"
        )
    notes: list[str] = list(env.notes)
    if env.build is not None:
        notes.append(
            f"the environment builds its image ({env.image_ref()}) from a Dockerfile: a cluster "
            "pulls images, so the image must be pushed to a registry it reaches"
        )
    if has_lifecycle_commands(env):
        notes.append("lifecycle commands run by exec once the pod is running")
    notes.append("the package-manager command log is not kept in pods yet")
    ask = k8s.GPUAsk(
        count=wanted.count if wanted is not None else 0,
        product=wanted.model if wanted is not None else None,
        min_memory_mib=wanted.min_memory_mib if wanted is not None else None,
    )
    target = k8s.PodTarget(
        name=name,
        owner=owner,
        namespace=spec.namespace,
        image=env.image_ref(),
        command=command,
        server_id=server_id,
        created=created,
        gpus=ask,
        kernel_id=request.kernel_id,
        process=process,
        ledger=ledger,
        ingress_from=spec.ingress_from,
    )
    return target, notes


def cluster_note(ask: k8s.GPUAsk, cluster: ClusterInfo | None, error: str | None) -> str | None:
    """What the cluster says now of the GPUs asked: the nodes that could take them, or why
    none can (the scheduler still decides), or that it could not be read."""
    if ask.count < 1:
        return None
    if cluster is None:
        return f"the cluster could not be read ({error}): its nodes were not checked"
    found = fit(cluster, ask)
    return found.summary(ask) if found is not None else None


def pod_objects(env: Environment, target: k8s.PodTarget, confinement: Confinement) -> k8s.Plan:
    """The objects of a dev container on a cluster under the administrator's limits."""
    return k8s.dev_container_objects(
        env,
        target,
        k8s.PodConfinement(memory_bytes=confinement.memory_bytes, nano_cpus=confinement.nano_cpus),
    )


def pod_plan(
    env: Environment,
    target: k8s.PodTarget,
    confinement: Confinement,
    spec: HostSpec,
    notes: list[str],
) -> dict[str, Any]:
    """The answer of a dry run on a Kubernetes host: the objects in creation order (also as a
    ``List`` that ``kubectl apply -f -`` reads) and the notes."""
    made = pod_objects(env, target, confinement)
    return {
        "kind": "kubernetes",
        "host": spec.name,
        "context": spec.context,
        "namespace": spec.namespace,
        "name": target.name,
        "image": target.image,
        "gpus": {"count": target.gpus.count, "product": target.gpus.product},
        "objects": made.objects,
        "notes": [*notes, *made.notes],
    }
