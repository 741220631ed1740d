"""Why a dev container's pod is not running, from the API server's answers.

On a cluster the scheduler decides. A pod it cannot place stays ``Pending``; gpudev says why
(the scheduler's own words: "0/12 nodes are available: 4 Insufficient nvidia.com/gpu, ...")
instead of waiting silently, and a start gives up after its timeout, deleting the pod and
keeping the workspace claim. ``pod_state`` reads the pod and its events as data (hostile input:
every field checked, messages cut and stripped of control characters).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Literal

from ..untrusted import as_dict, as_list, clean

State = Literal["running", "starting", "unschedulable", "failed", "gone"]

#: Waiting reasons of a container that will not start by itself.
STUCK_REASONS = (
    "ErrImagePull",
    "ImagePullBackOff",
    "InvalidImageName",
    "CreateContainerConfigError",
    "CreateContainerError",
    "RunContainerError",
    "CrashLoopBackOff",
)


@dataclass(frozen=True)
class PodState:
    """``state`` and, unless running, why (``reason``: a short code; ``message``: words)."""

    state: State
    reason: str = ""
    message: str = ""


def _latest_event(events: Any, reason: str) -> str:
    """The message of the newest event with ``reason`` (by lastTimestamp, else order)."""
    found = [
        as_dict(e)
        for e in as_list(as_dict(events).get("items"))
        if as_dict(e).get("reason") == reason
    ]
    if not found:
        return ""
    found.sort(key=lambda e: str(e.get("lastTimestamp") or e.get("eventTime") or ""))
    return clean(found[-1].get("message"))


def _container_failure(status: dict[str, Any]) -> PodState | None:
    """A container that will not start by itself (an init container too: its image cannot be
    pulled, ...), or one that ended."""
    for container in as_list(status.get("initContainerStatuses")):
        waiting = as_dict(as_dict(as_dict(container).get("state")).get("waiting"))
        if waiting.get("reason") in STUCK_REASONS:
            return PodState("failed", clean(waiting.get("reason")), clean(waiting.get("message")))
    for container in as_list(status.get("containerStatuses")):
        state = as_dict(as_dict(container).get("state"))
        waiting = as_dict(state.get("waiting"))
        if waiting.get("reason") in STUCK_REASONS:
            return PodState("failed", clean(waiting.get("reason")), clean(waiting.get("message")))
        terminated = as_dict(state.get("terminated"))
        if terminated:
            why = clean(terminated.get("reason")) or "Terminated"
            code = terminated.get("exitCode")
            return PodState("failed", why, f"the container ended (exit {code})")
    return None


def _unscheduled(status: dict[str, Any], events: Any) -> PodState | None:
    """The scheduler's reason when it cannot place the pod."""
    for item in as_list(status.get("conditions")):
        condition = as_dict(item)
        if condition.get("type") == "PodScheduled" and condition.get("status") == "False":
            reason = clean(condition.get("reason")) or "Unschedulable"
            message = clean(condition.get("message")) or _latest_event(events, "FailedScheduling")
            return PodState("unschedulable", reason, message)
    return None


def pod_state(pod: Any, events: Any = None) -> PodState:
    """Where a pod is: ``running`` (its container runs), ``starting`` (scheduled, pulling or
    starting), ``unschedulable`` (the scheduler cannot place it: its reason), ``failed`` (it
    ended, or a container cannot start by itself: the image cannot be pulled, ...) or
    ``gone`` (no pod)."""
    if not isinstance(pod, dict) or not pod:
        return PodState("gone")
    status = as_dict(pod.get("status"))
    phase = status.get("phase")
    if phase in ("Succeeded", "Failed"):
        why = clean(status.get("reason")) or str(phase)
        return PodState("failed", why, clean(status.get("message")))
    found = _container_failure(status) or _unscheduled(status, events)
    if found is not None:
        return found
    running = any(
        "running" in as_dict(as_dict(c).get("state"))
        for c in as_list(status.get("containerStatuses"))
    )
    if phase == "Running" and running:
        return PodState("running")
    return PodState("starting", clean(phase) or "Pending")
