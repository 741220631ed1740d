"""The wall clock jumping a day forward or back (NTP, a suspended VM, an administrator): an
interval (idle time, cache age, grace) is measured on the monotonic clock, a timestamp stored
or shown stays wall time. Each test drives two fake clocks apart; none needs faketime."""

from __future__ import annotations

import datetime
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from jupyter_gpudev.engine import GPU, GPUInventory, Inventory
from jupyter_gpudev.kernels.culler import GPUCuller
from jupyter_gpudev.leasing import GPURequest, LeaseLedger, leasable_units
from jupyter_gpudev.leasing.claims import Claim, Holder, is_live
from jupyter_gpudev.shared import identity
from jupyter_gpudev.shared.identity import HubIdentityProvider
from tests.unit.test_culler import Kernel, KernelManager, Provisioner

DAY = 86_400.0
T0 = 1_800_000_000.0  # wall
M0 = 5_000.0  # monotonic (seconds since boot)
GPU0 = "GPU-5d5ba0d6-d33d-2b2c-524d-9e3d8d2b8a00"


@dataclass
class Clocks:
    """A wall clock and a monotonic one; ``pass_`` moves both, ``jump`` the wall one only."""

    wall: float = T0
    mono: float = M0

    def pass_(self, seconds: float) -> None:
        self.wall += seconds
        self.mono += seconds

    def jump(self, seconds: float) -> None:
        self.wall += seconds

    def time(self) -> float:
        return self.wall

    def monotonic(self) -> float:
        return self.mono

    def stamp(self) -> datetime.datetime:
        """Now on the wall clock, as jupyter_server stamps a kernel's last activity."""
        return datetime.datetime.fromtimestamp(self.wall, tz=datetime.timezone.utc)


def culler(km: KernelManager, clocks: Clocks, **traits: Any) -> GPUCuller:
    return GPUCuller(
        km,
        clock=clocks.time,
        monotonic=clocks.monotonic,
        idle_timeout=600,
        warning_seconds=60,
        **traits,
    )


@pytest.fixture
def clocks() -> Clocks:
    return Clocks()


# -- the idle reclaim of GPU kernels ---------------------------------------------------------


@pytest.mark.parametrize("jump", [DAY, -DAY])
async def test_a_kernel_used_just_before_a_jump_is_not_reclaimed(
    clocks: Clocks, jump: float
) -> None:
    km = KernelManager({"k": Kernel(Provisioner((GPU0,)), clocks.stamp())})
    gpus = culler(km, clocks)
    clocks.pass_(30)
    assert gpus.pending() == []
    # When the wall clock jumps a day, then a minute passes
    clocks.jump(jump)
    clocks.pass_(60)
    # Then the kernel has been idle 90 s, not a day (nor less than nothing)
    assert gpus.pending() == []
    assert await gpus.check() == []
    clocks.pass_(600 - 90 - 30)
    (warned,) = gpus.pending()
    assert warned.idle_seconds == pytest.approx(570)
    # And the time it is reclaimed at is shown on the (new) wall clock
    assert warned.reclaim_at == pytest.approx(clocks.wall + 30)


@pytest.mark.parametrize("jump", [DAY, -DAY])
async def test_an_idle_kernel_is_reclaimed_after_its_timeout_whatever_the_wall_clock(
    clocks: Clocks, jump: float
) -> None:
    km = KernelManager({"k": Kernel(Provisioner((GPU0,)), clocks.stamp())})
    gpus = culler(km, clocks)
    clocks.pass_(30)
    assert await gpus.check() == []
    clocks.jump(jump)
    clocks.pass_(569)
    assert await gpus.check() == []
    clocks.pass_(1)
    assert await gpus.check() == ["k"]


async def test_activity_after_a_jump_back_counts(clocks: Clocks) -> None:
    kernel = Kernel(Provisioner((GPU0,)), clocks.stamp())
    gpus = culler(KernelManager({"k": kernel}), clocks)
    clocks.pass_(500)
    assert gpus.pending() == []
    # When the wall clock goes back a day and the kernel is used (its stamp is now older)
    clocks.jump(-DAY)
    clocks.pass_(5)
    kernel.last_activity = clocks.stamp()
    clocks.pass_(5)
    # Then its idle time starts again from that use
    clocks.pass_(500)
    assert gpus.pending() == []
    assert await gpus.check() == []


async def test_activity_before_a_jump_forward_seen_after_it_is_not_a_day_old(
    clocks: Clocks,
) -> None:
    kernel = Kernel(Provisioner((GPU0,)), clocks.stamp())
    gpus = culler(KernelManager({"k": kernel}), clocks)
    clocks.pass_(20)
    assert gpus.pending() == []
    # Used, then the wall clock jumps a day forward before the next look
    clocks.pass_(5)
    kernel.last_activity = clocks.stamp()
    clocks.jump(DAY)
    clocks.pass_(25)
    # Then it is at most as idle as the time since the last look
    assert gpus.pending() == []
    assert await gpus.check() == []


async def test_keep_counts_on_the_monotonic_clock(clocks: Clocks) -> None:
    km = KernelManager({"k": Kernel(Provisioner((GPU0,)), clocks.stamp())})
    gpus = culler(km, clocks)
    clocks.pass_(590)
    assert len(gpus.pending()) == 1
    gpus.keep("k")
    clocks.jump(-DAY)
    clocks.pass_(599)
    assert await gpus.check() == []
    clocks.pass_(1)
    assert await gpus.check() == ["k"]


# -- a Hub identity cached for cache_seconds -------------------------------------------------


async def test_a_cached_identity_expires_after_cache_seconds_even_if_the_clock_goes_back(
    clocks: Clocks, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(identity, "time", clocks)
    provider = HubIdentityProvider(cache_seconds=60)
    asked: list[str] = []

    async def ask_hub(token: str) -> tuple[str | None, float]:
        asked.append(token)
        return None, float("inf")  # not a valid token (a revoked one, say)

    monkeypatch.setattr(provider, "_ask_hub", ask_hub)
    assert await provider.user_for_token("t") is None
    assert await provider.user_for_token("t") is None
    assert asked == ["t"]  # cached
    # When the wall clock goes back a day and cache_seconds pass, the Hub is asked again
    clocks.jump(-DAY)
    clocks.pass_(61)
    await provider.user_for_token("t")
    assert asked == ["t", "t"]
    # And a jump forward does not throw away a fresh answer
    clocks.jump(DAY)
    await provider.user_for_token("t")
    assert asked == ["t", "t"]


# -- the GPU inventory's cache ---------------------------------------------------------------


def test_the_gpu_inventory_cache_ignores_the_wall_clock(
    clocks: Clocks, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr("jupyter_gpudev.engine.gpus.time", clocks)
    inventory = GPUInventory(cache_seconds=10)
    probes: list[float] = []

    def probe() -> Inventory:
        probes.append(clocks.mono)
        return Inventory(source="nvml", gpus=())

    monkeypatch.setattr(inventory, "_probe", probe)
    inventory.probe()
    clocks.jump(DAY)
    inventory.probe()
    clocks.jump(-2 * DAY)
    inventory.probe()
    assert len(probes) == 1
    clocks.pass_(10)
    inventory.probe()
    assert len(probes) == 2


# -- the grace of a claim, and of a lease, stored as wall time -------------------------------


@pytest.mark.parametrize(
    ("age", "live"),
    [(10.0, True), (-10.0, True), (DAY, False), (-DAY, False)],
)
def test_a_stopped_holders_claim_is_live_only_within_grace_either_way(
    age: float, live: bool
) -> None:
    # A claim stored with the wall time it was made; the clock since went on (age > 0) or back
    claim = Claim(uuid=GPU0, claim_id="x", holder_id="h", holder_name="c", owner="o", at=T0)
    stopped = Holder(status="exited", gpu_uuids=(GPU0,))
    assert is_live(claim, stopped, T0 + age, grace=120.0) is live


def test_a_lease_dated_a_day_ahead_is_not_a_start_in_flight(tmp_path: Path) -> None:
    # Given a lease taken, then the wall clock went back a day, and its container is gone
    now = [T0]
    ledger = LeaseLedger(tmp_path / "leases.db", clock=lambda: now[0])
    gpu = GPU(
        uuid=GPU0,
        index=0,
        name="NVIDIA A100",
        memory_total_mib=81920,
        memory_used_mib=0,
        mig_enabled=False,
        mig_devices=(),
    )
    units = leasable_units(Inventory(source="nvml", gpus=(gpu,)))
    ledger.acquire("local", "gone", "alice", GPURequest(uuids=(GPU0,)), units)
    now[0] = T0 - DAY
    # When the ledger is reconciled (a 120 s grace for starts in flight)
    ledger.reconcile("local", {}, created_before=now[0] - 120)
    # Then its lease is freed: a start in flight is not a day in the future
    assert ledger.active("local") == []
    # While one taken just now is left alone
    ledger.acquire("local", "starting", "alice", GPURequest(uuids=(GPU0,)), units)
    ledger.reconcile("local", {}, created_before=now[0] - 120)
    assert [lease.container for lease in ledger.active("local")] == ["starting"]
