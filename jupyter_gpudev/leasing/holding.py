"""GPUs held by a dev container around its creation and start: leased in this server's ledger
(``ledger.py``), then claimed on its engine (``claims.py``: the decision between servers, users,
ledgers and host entries), and released together.

``GPUHolding`` takes these steps in that order for the lifecycle (``containers/lifecycle.py``),
whatever creates the container: a GPU claimed by someone else meanwhile is left out and the GPUs
chosen again, and nothing is left behind on failure (no container without its lease and claims,
no lease or claim without its container). Every method blocks (engine and ledger calls).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Iterable

import docker.errors
from docker.models.containers import Container

from ..engine import Host, Inventory, Progress
from ..errors import ENGINE_FAILURES, FAILURES, GPUDevError, LimitReached, engine_error
from ..labels import L_NAME, labelled_gpus
from .claims import EngineClaims, GPUTaken
from .ledger import LeaseLedger
from .model import (
    GPURequest,
    LeasableGPU,
    Lease,
    NoFreeGPU,
    leasable_units,
    seen_by,
    would_lease,
)

#: A host's units and who holds which of them (``GPUHolding.leasable``).
Leasable = tuple[list[LeasableGPU], dict[str, Lease]]
#: The ledger's check of an owner's GPU limit (``LeaseLedger.acquire``'s ``admit``).
Admit = Callable[[list[Lease]], None] | None


class GPUHolding:
    """The GPUs of dev containers: this ledger's leases and the claims on their engines."""

    def __init__(
        self, ledger: LeaseLedger, *, ledger_id: str, grace: float, log: logging.Logger
    ) -> None:
        self.ledger = ledger
        self.ledger_id = ledger_id
        #: Seconds a claim of a stopped container, or a new lease, is left alone.
        self.grace = grace
        self.log = log

    def claims(self, host: Host) -> EngineClaims:
        """The GPU claims on ``host``'s engine (the decision between ledgers and hosts)."""
        return EngineClaims(host.client(), grace=self.grace, ledger_id=self.ledger_id, log=self.log)

    def leasable(
        self,
        host: Host,
        inventory: Inventory,
        *,
        labelled: Iterable[str],
        taken: Iterable[str] = (),
        viewer: str | None,
    ) -> Leasable:
        """The host's units and who holds which of them: this ledger's leases, then the
        engine's claims of other servers and host entries (and GPUs a live container holds by
        label, ``labelled``, or that a start just lost, ``taken``), as ``viewer`` may see them
        (``None``: an administrator)."""
        held = self.ledger.holders(host.name)
        for uuid, claim in self.claims(host).live().items():
            held.setdefault(
                uuid, Lease("", host.name, claim.holder_name, claim.owner, (uuid,), claim.at)
            )
        now = time.time()
        for uuid in (*sorted(labelled), *taken):
            held.setdefault(uuid, Lease("", host.name, "", "another dev container", (uuid,), now))
        return leasable_units(inventory), {u: seen_by(lease, viewer) for u, lease in held.items()}

    def would_lease(
        self, host: Host, wanted: GPURequest, inventory: Inventory, *, viewer: str | None
    ) -> tuple[str, ...]:
        """The GPUs a lease would take now, nothing leased or claimed (a start's plan);
        ``NoFreeGPU`` when too few are free, its holders as ``viewer`` may see them (``None``:
        an administrator)."""
        held = self.ledger.holders(host.name)
        for uuid, claim in self.claims(host).live().items():
            held.setdefault(uuid, Lease("", host.name, claim.holder_name, "", (uuid,), 0))
        seen = {uuid: seen_by(lease, viewer) for uuid, lease in held.items()}
        return would_lease(host.name, wanted, leasable_units(inventory), seen)

    def hold(
        self,
        host: Host,
        name: str,
        owner: str,
        *,
        wanted: GPURequest | None,
        inventory: Inventory | None,
        optional: bool,
        leasable: Callable[[Inventory, set[str]], Leasable],
        create: Callable[[Lease | None, Inventory | None], Container],
        admit: Admit,
        shown_to: str | None,
        notes: list[str],
        say: Progress,
    ) -> tuple[Container, Lease | None]:
        """Lease GPUs, create the container (``create``: not started) and claim them on its
        engine.

        The engine's claims decide between servers and host entries (``claims.py``): a GPU
        claimed by someone else meanwhile is left out (``leasable``'s ``taken``) and the GPUs
        chosen again, with the container made anew. ``optional``: with no GPU free (or none
        within the owner's limit) the container is made without one, and ``notes`` says so.
        Nothing is left behind on failure."""
        taken: set[str] = set()
        for _attempt in range(8):
            lease: Lease | None = None
            if wanted is not None and inventory is not None:
                try:
                    units, held = leasable(inventory, taken)
                    lease = self.ledger.acquire(
                        host.name,
                        name,
                        owner,
                        wanted,
                        units,
                        held_elsewhere=held,
                        shown_to=shown_to,
                        admit=admit,
                    )
                except (NoFreeGPU, LimitReached) as err:
                    if not optional:
                        raise
                    why = err.message if isinstance(err, LimitReached) else "no free GPU"
                    notes.append(f"{why} on host {host.name!r}: started without a GPU")
                    say({"stage": "lease", "message": notes[-1]})
                    inventory = None
            container: Container | None = None
            try:
                if lease is not None:
                    say({"stage": "lease", "message": f"leased {', '.join(lease.gpu_uuids)}"})
                container = create(lease, inventory)
                if lease is not None:
                    self.claims(host).claim(
                        lease.gpu_uuids,
                        holder_id=str(container.id),
                        holder_name=name,
                        owner=owner,
                    )
            except GPUTaken as lost:
                self.undo(container, lease, host)
                taken.add(lost.taken.uuid)
                if wanted is not None and wanted.uuids:
                    raise _held_elsewhere(host, wanted, lost) from None
                continue
            except BaseException as exc:
                self.undo(container, lease, host)
                if isinstance(exc, ENGINE_FAILURES):
                    raise engine_error(f"Creating {name!r}", exc, self.log) from exc
                raise
            return container, lease
        raise NoFreeGPU(
            f"The GPUs of host {host.name!r} were taken by other starts while this one chose; "
            "try again",
            details={"host": host.name},
        )

    def hold_again(
        self,
        host: Host,
        container: Container,
        *,
        name: str,
        owner: str,
        leasable: Leasable,
        admit: Admit,
        shown_to: str | None,
    ) -> Lease:
        """Lease and claim the GPUs a stopped ``container`` was created with, before it starts
        again: they are part of it (its DeviceRequest), so only those will do. The same two
        steps as a start: this ledger, then the engine's claims."""
        uuids = labelled_gpus(container.labels)
        wanted = GPURequest(uuids=uuids)
        units, held = leasable
        lease = self.ledger.acquire(
            host.name,
            name,
            owner,
            wanted,
            units,
            held_elsewhere=held,
            shown_to=shown_to,
            admit=admit,
        )
        try:
            self.claims(host).claim(
                uuids, holder_id=str(container.id), holder_name=name, owner=owner
            )
        except GPUTaken as lost:
            self.ledger.release(lease.lease_id)
            raise _held_elsewhere(host, wanted, lost) from None
        except BaseException:
            self.ledger.release(lease.lease_id)
            raise
        return lease

    def undo(
        self,
        container: Container | None,
        lease: Lease | None,
        host: Host | None = None,
        *,
        patience: float = 0.0,
    ) -> None:
        """After a failed start: remove the container, then free its lease and claims.
        ``patience``: seconds to try the removal again while it fails (an engine restarting
        does not answer for a while)."""
        if container is not None:
            deadline = time.monotonic() + patience
            while True:
                try:
                    container.remove(force=True, v=True)  # its anonymous volumes too
                    break
                except docker.errors.NotFound:
                    break  # gone already
                except FAILURES:
                    if time.monotonic() < deadline:
                        time.sleep(0.5)
                        continue
                    self.log.exception("Could not remove %s after a failed start", container.name)
                    return  # keep the lease: the container may still hold the GPUs
        if lease is not None:
            self.ledger.release(lease.lease_id)
            if container is not None and host is not None:
                try:
                    self.claims(host).release(str(container.id))
                except GPUDevError:  # stale now (its holder is gone): swept later
                    self.log.exception("Could not release the claims of %s", container.name)

    def release(self, host: Host, container: Container) -> None:
        """Free the lease and claims of ``container``, which has stopped or is gone."""
        # By container, not by the label's lease id: a resumed container holds a newer lease.
        self.ledger.release_container(host.name, container.labels.get(L_NAME, ""))
        if labelled_gpus(container.labels):
            self.claims(host).release(str(container.id))


def _held_elsewhere(host: Host, wanted: GPURequest, lost: GPUTaken) -> NoFreeGPU:
    return NoFreeGPU(
        f"{wanted.wanted} GPU{'' if wanted.wanted == 1 else 's'} requested on host "
        f"{host.name!r} by UUID: {lost.taken.uuid} is held by another dev container",
        details={"host": host.name, "uuid": lost.taken.uuid},
    )
