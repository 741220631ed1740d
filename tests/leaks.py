"""The one "nothing leaked, nothing lost" check the fault, property and load tests end with.

Take a :class:`Baseline` before the test acts (what existed then is not the test's), then call
:func:`assert_nothing_leaked` at its end. It fails, naming each leftover, on:

- a container the test's server made (label ``L_SERVER``, or any gpudev container that was not
  there before) that still exists, unless it is named in ``kept`` (a container the rules say must
  stay, such as a stopped one with uncommitted changes: it must then be stopped, not running);
- a GPU claim container (``L_CLAIM``) whose holder is not a running container;
- an active lease in the state folder's ledger not held by a running container;
- a kernel process (``ipykernel``) left running in a kept container;
- a temporary file in the state folder (``*.tmp``, ``*.part``, ``tmp*``) that was not there before;
- a dangling image with gpudev's labels that was not dangling before.

With ``server_id`` only that server's containers count (other tests may run beside it);
with ``workspace`` only those of that workspace folder (a CLI run makes a server id of its
own each time); without either, every gpudev container that was not there before. With
``ledger_id`` only the GPU claims made through that ledger count (an engine other tests use at
the same time has theirs).
"""

from __future__ import annotations

import time
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path

import docker
import docker.errors
from docker.models.containers import Container
from docker.models.images import Image

from jupyter_gpudev.containers import docker_name
from jupyter_gpudev.labels import (
    L_CLAIM,
    L_CLAIM_HOLDER,
    L_ENV,
    L_LEDGER,
    L_MANAGED,
    L_SERVER,
    L_WORKSPACE,
    LABEL,
)
from jupyter_gpudev.leasing import LeaseLedger

TEMPORARY = ("*.tmp", "*.part", ".*.part", "tmp*", ".tmp*")


def _temporaries(state: Path | None) -> set[str]:
    if state is None or not state.is_dir():
        return set()
    return {
        str(path.relative_to(state))
        for pattern in TEMPORARY
        for path in state.rglob(pattern)
        if path.is_file() or path.is_symlink()
    }


@dataclass
class Baseline:
    """What existed before the test: none of it is the test's to clean up."""

    containers: set[str] = field(default_factory=set)
    dangling: set[str] = field(default_factory=set)
    temporaries: set[str] = field(default_factory=set)

    @classmethod
    def take(
        cls, client: docker.DockerClient, state: Path | None = None, *, ignore_removed: bool = False
    ) -> Baseline:
        """``ignore_removed``: a container removed (by another test) between the engine's list
        and its inspection is left out instead of failing the test."""
        listed = client.containers.list(
            all=True, filters={"label": L_MANAGED}, ignore_removed=ignore_removed
        )
        return cls(
            containers={c.id for c in listed if c.id},
            dangling={i.id for i in _dangling(client) if i.id},
            temporaries=_temporaries(state),
        )


def _dangling(client: docker.DockerClient) -> list[Image]:
    """The dangling images (listed again when one goes while it is read)."""
    for _ in range(5):
        try:
            return client.images.list(filters={"dangling": True})
        except docker.errors.ImageNotFound:
            continue
    return client.images.list(filters={"dangling": True})


def _containers(
    managed: list[Container],
    baseline: Baseline,
    server_id: str | None,
    kept: set[str],
    workspace: Path | None = None,
) -> list[str]:
    found: list[str] = []
    for container in managed:
        labels = container.labels or {}
        if server_id is not None:
            mine = labels.get(L_SERVER) == server_id
        elif workspace is not None:
            mine = labels.get(L_WORKSPACE) == str(workspace.resolve())
        else:
            mine = container.id not in baseline.containers
        if not mine or labels.get(L_CLAIM):  # (a dev container's is empty)
            continue
        if container.name not in kept:
            found.append(f"container {container.name} ({container.status}) left behind")
        elif container.status == "running":
            found.append(f"kept container {container.name} is still running")
    return found


def _kernels(managed: list[Container], kept: set[str]) -> list[str]:
    found: list[str] = []
    for container in managed:
        if container.name not in kept or container.status != "running":
            continue
        try:
            top = container.top()
        except docker.errors.APIError:
            continue
        for process in top.get("Processes") or []:
            if any("ipykernel" in str(word) for word in process):
                found.append(f"kernel process left in {container.name}: {process[-1]}")
    return found


def _held(
    client: docker.DockerClient,
    state: Path | None,
    running: set[str],
    ledger_id: str | None = None,
) -> list[str]:
    found: list[str] = []
    for claim in client.containers.list(all=True, filters={"label": L_CLAIM}, ignore_removed=True):
        if not (claim.labels or {}).get(L_CLAIM):
            continue  # a dev container (its claim label is set, empty)
        if ledger_id is not None and (claim.labels or {}).get(L_LEDGER) != ledger_id:
            continue
        holder = (claim.labels or {}).get(L_CLAIM_HOLDER, "")
        if holder not in running:
            found.append(f"GPU claim {claim.name} held by {holder[:12] or 'nobody'} left behind")
    if state is not None and (state / "leases.sqlite").exists():
        for lease in LeaseLedger(state / "leases.sqlite").active():
            if lease.container not in running and docker_name(lease.container) not in running:
                found.append(f"lease {lease.lease_id} of {lease.container} still active")
    return found


def leftovers(
    client: docker.DockerClient,
    baseline: Baseline,
    *,
    state: Path | None = None,
    server_id: str | None = None,
    kept: Iterable[str] = (),
    workspace: Path | None = None,
    ledger_id: str | None = None,
    environments: Iterable[str] | None = None,
) -> list[str]:
    """Every leftover, in words (empty when nothing leaked). ``environments``: only the
    dangling images of those environments (label ``L_ENV``) count."""
    kept_names = set(kept)
    managed = client.containers.list(all=True, filters={"label": L_MANAGED}, ignore_removed=True)
    running = {key for c in managed if c.status == "running" for key in (c.id or "", c.name or "")}
    found = _containers(managed, baseline, server_id, kept_names, workspace)
    found += _held(client, state, running, ledger_id)
    found += _kernels(managed, kept_names)
    for name in sorted(_temporaries(state) - baseline.temporaries):
        found.append(f"temporary file {name} left in the state folder")
    for image in _dangling(client):
        labels = image.labels or {}
        if environments is not None and labels.get(L_ENV) not in set(environments):
            continue
        if image.id not in baseline.dangling and any(key.startswith(LABEL) for key in labels):
            found.append(f"dangling gpudev image {image.short_id} left behind")
    return found


def assert_nothing_leaked(
    client: docker.DockerClient,
    baseline: Baseline,
    *,
    state: Path | None = None,
    server_id: str | None = None,
    kept: Iterable[str] = (),
    settle: float = 10.0,
    workspace: Path | None = None,
    ledger_id: str | None = None,
    environments: Iterable[str] | None = None,
) -> None:
    """Fail naming every leftover; waits up to ``settle`` seconds for cleanups in flight."""
    kept = tuple(kept)
    deadline = time.monotonic() + settle
    while True:
        found = leftovers(
            client,
            baseline,
            state=state,
            server_id=server_id,
            kept=kept,
            workspace=workspace,
            ledger_id=ledger_id,
            environments=None if environments is None else tuple(environments),
        )
        if not found or time.monotonic() > deadline:
            break
        time.sleep(0.25)
    assert not found, "leaked:\n  " + "\n  ".join(found)
