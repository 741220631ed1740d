"""Reports of dev containers and hosts, made from what was read: a Docker dev container's
``DevContainerInfo`` from its engine attributes, the ledger's lease and pin and the ports
added at run time (``container_info``; a pod's is ``pods.pod_info``), what a listing reads once
for all the containers of a host (``Known``), and the hosts as a user sees them
(``hosts_seen``). ``ContainerLookup`` reads; these only shape, without an engine call.

What a user of the shared service who is not an administrator is told in place of a host's
failure (``HOST_FAILURE``), and which reasons of a GPU probe are kept for them
(``probe_reason_seen``), are here for the hosts listing and GPU use (``usage``) alike.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass, replace
from typing import Any

from docker.models.containers import Container

from ..access import ANOTHER_USER, Caller
from ..engine import HostInfo
from ..labels import (
    L_CREATED,
    L_ENV,
    L_IMAGE,
    L_KERNEL,
    L_OWNER,
    STOPPED,
    labelled_gpus,
)
from ..leasing import Lease, iso_utc
from .hooks import KernelUsageView
from .model import DevContainerInfo, engine_time
from .ports import declared_ports, web_ports

#: What a user who is not an administrator of the shared service is told in place of a host's
#: failure (to reach it, to run a command there): its words name the service's SSH account,
#: the host's address and port and its key files.
HOST_FAILURE = "This host cannot be reached now (the administrators' log says why)"


def probe_reason_seen(
    source: str, reason: str | None, *, elsewhere: bool, hidden: bool
) -> str | None:
    """Why a host's GPUs (or their processes) were not read, as the caller is told it
    (``source``, ``reason``: the probe's). Kept when ``hidden`` too: what a driver that
    answered said (``source`` not "none": no GPU, output it could not read), and a probe
    that did not run on another machine (``elsewhere`` false): a host without an inventory
    gpudev reads (the sentence names its scheme: tcp://, Kubernetes), an inventory off by
    configuration, NVML or nvidia-smi on this machine (no driver, not loaded). A probe run on
    another host that failed does so with its connection's words (``Host.smi_runner``):
    ``HOST_FAILURE``."""
    if reason is None or not hidden or source != "none" or not elsewhere:
        return reason
    return HOST_FAILURE


@dataclass(frozen=True)
class Known:
    """What a listing reads once for all the containers of one host: the ledger's active
    leases (by container name) and pins, and the ports added at run time (by container id)."""

    leases: dict[str, Lease]
    pinned: frozenset[str]
    added_ports: dict[str, list[int]]


def container_info(
    container: Container,
    host: str,
    *,
    key: str,
    shown_name: str,
    lease: Lease | None,
    pinned: bool,
    added: dict[str, list[int]],
    usage: KernelUsageView | None,
    uncommitted: int | None,
    warnings: tuple[str, ...] = (),
) -> DevContainerInfo:
    """The report of ``container`` (``key``: its key) on ``host``, named ``shown_name`` for
    its viewer: its state, GPUs, ``lease``, ports (those it publishes on the loopback address,
    its web ports with those ``added`` at run time), kernels (``usage``) and ``uncommitted``
    changes."""
    labels = container.labels
    ports: dict[str, int] = {}
    for exposed, bindings in (
        container.attrs.get("NetworkSettings", {}).get("Ports") or {}
    ).items():
        for binding in bindings or []:
            if binding.get("HostIp") in ("127.0.0.1", "") and binding.get("HostPort"):
                ports[exposed.split("/")[0]] = int(binding["HostPort"])
    state = container.attrs.get("State", {})
    status = str(state.get("Status", container.status))
    return DevContainerInfo(
        name=shown_name,
        key=key,
        container_id=str(container.id),
        host=host,
        environment=labels.get(L_ENV, ""),
        owner=labels.get(L_OWNER, ""),
        image=labels.get(L_IMAGE, ""),
        state=status,
        status=_status_text(state),
        created=labels.get(L_CREATED, ""),
        gpu_uuids=labelled_gpus(labels),
        lease_id=lease.lease_id if lease else None,
        ports=ports,
        warnings=warnings,
        pinned=pinned,
        kernel_id=labels.get(L_KERNEL) or None,
        web_ports=web_ports(container, added),
        forward_ports=tuple(sorted(declared_ports(container))),
        started_at=engine_time(state.get("StartedAt")) if state.get("Running") else None,
        finished_at=engine_time(state.get("FinishedAt")) if status in STOPPED else None,
        kernels=usage.count if usage is not None else None,
        last_activity=(
            iso_utc(usage.last_activity.timestamp())
            if usage is not None and usage.last_activity is not None
            else None
        ),
        uncommitted=uncommitted,
    )


def _status_text(state: dict[str, Any]) -> str:
    status = str(state.get("Status", "unknown"))
    if status == "exited":
        return f"exited ({state.get('ExitCode', '?')})"
    return status


def hosts_seen(
    infos: Iterable[HostInfo],
    leases: Iterable[Lease],
    who: Caller,
    *,
    shown_name: Callable[[str, str], str],
    hidden: bool,
) -> list[HostInfo]:
    """Hosts as ``who`` sees them, each with the active ``leases`` on it (none reported for a
    host that cannot be reached). Another user's lease is shown to a non-administrator as
    held by "another user", without its container; so is another user's dev container on a
    Kubernetes host. ``shown_name``: the name ``who`` gives a container (by key and owner);
    ``hidden``: what only administrators see is left out (``_seen_by_users``)."""
    held: dict[str, list[Lease]] = {}
    for lease in leases:
        if not who.sees_owner(lease.owner):
            lease = replace(lease, lease_id="", container="", owner=ANOTHER_USER)  # noqa: PLW2901
        else:
            lease = replace(lease, container=shown_name(lease.container, lease.owner))  # noqa: PLW2901
        held.setdefault(lease.host, []).append(lease)
    return [
        replace(
            info if not hidden else _seen_by_users(info),
            leases=tuple(held.get(info.name, ())) if info.reachable else (),
            cluster=info.cluster and info.cluster.seen_by(who.sees_owner, ANOTHER_USER),
        )
        for info in infos
    ]


def _seen_by_users(info: HostInfo) -> HostInfo:
    """A host as the shared service's users see it: its name, kind, engine and GPUs, not its
    address, the account gpudev logs in as, its folders or the words of a failure (which
    may name them): those are the administrators'. The GPU inventory of an ``ssh://`` host
    is nvidia-smi run over its connection (``HostPool``): a failure there is the
    connection's (``probe_reason_seen``)."""
    scheme = info.url.split("://", 1)[0] + "://" if "://" in info.url else ""
    reason = HOST_FAILURE if info.reason is not None else None
    gpus = replace(
        info.gpus,
        reason=probe_reason_seen(
            info.gpus.source, info.gpus.reason, elsewhere=info.transport == "ssh", hidden=True
        ),
    )
    return replace(info, url=scheme, workspace=None, reason=reason, gpus=gpus)
