"""Could a cluster take a dev container's GPUs now?

On a cluster the scheduler places pods; gpudev only looks first, from what the cluster said
(``engine.info.ClusterInfo``), to say before creating anything which nodes could take the
GPUs, or why none can ("gpu-a100-1: 1 free nvidia.com/gpu of 8; gpu-mig-1: cordoned"). The
scheduler still decides (other limits, taints, quotas, a race with another pod): a pod it
cannot place is reported with its own reason (``k8s.status``).
"""

from __future__ import annotations

from dataclasses import dataclass

from ..engine.info import ClusterInfo, ClusterNode
from .objects import GPUAsk


@dataclass(frozen=True)
class Fit:
    """The nodes that could take the GPUs now, and for each other GPU node why not."""

    nodes: tuple[str, ...]
    reasons: dict[str, str]

    def summary(self, ask: GPUAsk) -> str:
        wanted = f"{ask.count} {ask.resource}" + (f" ({ask.product})" if ask.product else "")
        if self.nodes:
            return f"{wanted}: would fit on {', '.join(self.nodes)}"
        if not self.reasons:
            return f"{wanted}: no node of the cluster has GPU resources"
        why = "; ".join(f"{node}: {reason}" for node, reason in sorted(self.reasons.items()))
        return f"{wanted}: no node can take them now ({why})"


def _unusable(node: ClusterNode, ask: GPUAsk) -> str | None:
    """Why no pod asking for ``ask`` can go to ``node`` whatever is free on it."""
    if not node.ready:
        return "not ready"
    if not node.schedulable:
        return "cordoned"
    if ask.product and node.product != ask.product:
        return f"its GPUs are {node.product or 'unlabelled'}"
    if ask.min_memory_mib and (node.memory_mib or 0) < ask.min_memory_mib:
        return f"{node.memory_mib or '?'} MiB per GPU, {ask.min_memory_mib} asked"
    return None


def _why_not(node: ClusterNode, ask: GPUAsk) -> str | None:
    unusable = _unusable(node, ask)
    if unusable is not None:
        return unusable
    gpus = next((g for g in node.gpus if g.resource == ask.resource), None)
    if gpus is None or gpus.allocatable == 0:
        return f"no {ask.resource}"
    free = max(gpus.allocatable - gpus.allocated, 0)
    if free < ask.count:
        return f"{free} free {ask.resource} of {gpus.allocatable}"
    return None


def fit(cluster: ClusterInfo, ask: GPUAsk) -> Fit | None:
    """Which GPU nodes could take ``ask`` now (``None``: nothing to check, no GPU asked or a
    DRA claim, which the scheduler matches device by device)."""
    if ask.count < 1 or ask.claim:
        return None
    nodes: list[str] = []
    reasons: dict[str, str] = {}
    for node in cluster.nodes:
        if not node.gpus:
            continue
        reason = _why_not(node, ask)
        if reason is None:
            nodes.append(node.name)
        else:
            reasons[node.name] = reason
    return Fit(tuple(nodes), reasons)
