"""Per-user limits (``c.UserLimits``): what applies to whom, what a refusal says, the memory and
CPUs of a new container, and the lease ledger counting a user's GPUs in its transaction (no
engine)."""

from __future__ import annotations

import threading
from dataclasses import replace
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
from traitlets import TraitError
from traitlets.config import Config

from jupyter_gpudev.containers import DevContainers
from jupyter_gpudev.containers.limits import (
    Limit,
    UserLimits,
    Whose,
    admit_gpus,
    check_count,
    check_gpus,
    check_room,
    container_resources,
    owner_lock,
    room,
)
from jupyter_gpudev.engine import GPU, HostPool, Inventory
from jupyter_gpudev.environments import Environment
from jupyter_gpudev.environments.model import RunOptions
from jupyter_gpudev.errors import LimitReached
from jupyter_gpudev.leasing import GPURequest, Lease, LeaseLedger, NoFreeGPU, leasable_units
from jupyter_gpudev.services import CLASSES
from jupyter_gpudev.shared.service_api import error_from

GIB = 1 << 30


class Grouped(UserLimits):
    """Limits whose users are in the groups given (instead of their accounts')."""

    member_of: frozenset[str] = frozenset()

    def groups_of(self, name: str) -> frozenset[str]:
        return self.member_of if name else frozenset()


def grouped(member_of: set[str], **traits: Any) -> UserLimits:
    limits = Grouped(**traits)
    limits.member_of = frozenset(member_of)
    return limits


# -- what applies to whom -------------------------------------------------------------------


def test_single_user_mode_has_no_limit_unless_configured() -> None:
    # Given no configuration, in single-user mode
    limits = UserLimits().for_user("alice", shared=False)
    # Then nothing is limited: no count, no memory or CPU limit, no default
    assert (limits.gpus.value, limits.running.value, limits.pinned.value) == (0, 0, 0)
    assert (limits.memory.value, limits.cpus.value) == (0, 0)
    assert (limits.memory_default, limits.cpus_default) == (0, 0)
    assert (limits.kernels.value, limits.containers.value) == (0, 0)


def test_the_shared_service_limits_memory_and_cpus_unless_configured_otherwise() -> None:
    # Given no configuration, in the shared service
    limits = UserLimits().for_user("alice", shared=True)
    # Then each container gets 32g and 8 CPUs at most, and that by default; counts are open
    assert limits.memory == Limit(32 * GIB, "c.UserLimits.memory")
    assert limits.cpus == Limit(8 * 10**9, "c.UserLimits.cpus")
    assert (limits.memory_default, limits.cpus_default) == (32 * GIB, 8 * 10**9)
    assert (limits.gpus.value, limits.running.value, limits.pinned.value) == (0, 0, 0)
    # And an administrator turns them off with '' and 0
    off = UserLimits(memory="", cpus=0.0).for_user("alice", shared=True)
    assert (off.memory.value, off.cpus.value, off.memory_default, off.cpus_default) == (0, 0, 0, 0)


def test_the_shared_service_limits_kernels_and_kept_containers_unless_configured() -> None:
    # Given no configuration, in the shared service
    limits = UserLimits().for_user("alice", shared=True)
    # Then a user runs 32 kernels in its service at most, and keeps 16 containers
    assert limits.kernels == Limit(32, "c.UserLimits.kernels")
    assert limits.containers == Limit(16, "c.UserLimits.containers")
    # And an administrator sets them, or turns them off with 0
    set_ = UserLimits(kernels=4, containers=2).for_user("alice", shared=True)
    assert (set_.kernels.value, set_.containers.value) == (4, 2)
    off = UserLimits(kernels=0, containers=0).for_user("alice", shared=True)
    assert (off.kernels.value, off.containers.value) == (0, 0)
    # And a group gets its own
    heavy = grouped({"big"}, groups={"big": {"kernels": 64, "containers": 0}})
    mine = heavy.for_user("alice", shared=True)
    assert mine.kernels == Limit(64, "c.UserLimits.groups['big']['kernels']")
    assert mine.containers == Limit(0, "c.UserLimits.groups['big']['containers']")


def test_a_default_is_never_more_than_the_most_a_container_may_use() -> None:
    # Given a default above the most allowed, and one below
    over = UserLimits(memory="1g", memory_default="2g", cpus=2.0, cpus_default=4.0)
    under = UserLimits(memory="4g", memory_default="1g", cpus=4.0, cpus_default=0.5)
    # Then the first gives the most allowed by default, the second its default
    assert over.for_user("a", shared=True).memory_default == GIB
    assert over.for_user("a", shared=True).cpus_default == 2 * 10**9
    assert under.for_user("a", shared=True).memory_default == GIB
    assert under.for_user("a", shared=True).cpus_default == 5 * 10**8


def test_a_groups_limit_replaces_the_default_one_and_says_where_it_comes_from() -> None:
    # Given one GPU for everyone, eight for the group "gpu-heavy"
    config = {"gpu-heavy": {"gpus": 8, "memory": "256g"}, "other": {"gpus": 1}}
    # When a member of gpu-heavy asks, and someone in no listed group
    heavy = grouped({"gpu-heavy", "users"}, gpus=1, groups=config).for_user("a", shared=True)
    plain = grouped({"users"}, gpus=1, groups=config).for_user("b", shared=True)
    # Then the member gets the group's, and the setting named is the group's
    assert heavy.gpus == Limit(8, "c.UserLimits.groups['gpu-heavy']['gpus']")
    assert heavy.memory == Limit(256 * GIB, "c.UserLimits.groups['gpu-heavy']['memory']")
    # And what the group does not set is the default
    assert heavy.running == Limit(0, "c.UserLimits.running")
    assert plain.gpus == Limit(1, "c.UserLimits.gpus")


def test_in_several_groups_the_largest_limit_applies_and_no_limit_is_the_largest() -> None:
    # Given a user in three groups
    config = {"a": {"running": 2, "pinned": 3}, "b": {"running": 5, "pinned": 0}, "c": {}}
    limits = grouped({"a", "b", "c"}, running=1, groups=config).for_user("x", shared=True)
    # Then each key gets the most generous of them
    assert limits.running == Limit(5, "c.UserLimits.groups['b']['running']")
    assert limits.pinned == Limit(0, "c.UserLimits.groups['b']['pinned']")


def test_groups_are_those_of_the_users_account_on_this_machine() -> None:
    # Given the real account gpudev-alice (in its own group), and a name with no account
    limits = UserLimits(groups={"gpudev-alice": {"gpus": 4}}, gpus=1)
    # Then alice is a member of her group, and the other name of none
    assert "gpudev-alice" in limits.groups_of("gpudev-alice")
    assert limits.groups_of("no-such-account-here") == frozenset()
    assert limits.for_user("gpudev-alice", shared=True).gpus.value == 4
    assert limits.for_user("gpudev-bob", shared=True).gpus.value == 1


@pytest.mark.parametrize(
    ("traits", "words"),
    [
        ({"groups": {"g": {"gpu": 1}}}, "groups['g']['gpu']: not a limit"),
        ({"groups": {"g": {"gpus": -1}}}, "groups['g']['gpus']: a whole number"),
        ({"groups": {"g": {"running": 1.5}}}, "groups['g']['running']: a whole number"),
        ({"groups": {"g": {"kernels": -1}}}, "groups['g']['kernels']: a whole number"),
        ({"groups": {"g": {"containers": "2"}}}, "groups['g']['containers']: a whole number"),
        ({"groups": {"g": {"memory": "lots"}}}, "groups['g']['memory']"),
        ({"groups": {"g": {"cpus": "4"}}}, "groups['g']['cpus']: a number of CPUs"),
        ({"memory": "lots"}, "c.UserLimits.memory"),
        ({"memory_default": "five"}, "c.UserLimits.memory_default"),
    ],
)
def test_a_setting_that_is_not_a_limit_is_refused_when_configured(
    traits: dict[str, Any], words: str
) -> None:
    with pytest.raises(TraitError, match=words.replace("[", r"\[").replace("]", r"\]")):
        UserLimits(**traits)


def test_user_limits_are_configured_like_every_part(tmp_path: Path) -> None:
    # Given c.UserLimits in a configuration
    config = Config()
    config.UserLimits.running = 3
    # Then it is listed for --help-all, and a dev container manager reads it
    assert UserLimits in CLASSES
    manager = DevContainers(root_dir=tmp_path, host_pool=HostPool(config=config), config=config)
    assert manager.limits.running == 3


# -- what a refusal says --------------------------------------------------------------------

ME = Whose("alice", "alice")


def lease(container: str, *uuids: str, owner: str = "alice", host: str = "local") -> Lease:
    return Lease(f"id-{container}", host, container, owner, uuids, 0.0)


def refusal(action: Any) -> LimitReached:
    with pytest.raises(LimitReached) as caught:
        action()
    assert (caught.value.status, caught.value.code) == (409, "limit_reached")
    return caught.value


def test_a_user_at_their_gpu_limit_is_told_which_containers_to_stop() -> None:
    limit = Limit(2, "c.UserLimits.gpus")
    held = [lease("a", "GPU-1"), lease("b", "GPU-2")]
    refused = refusal(lambda: check_gpus(limit, held, 1, ME))
    assert refused.message == (
        "You hold 2 of 2 GPUs allowed to you (c.UserLimits.gpus): stop one of 'a', 'b' first"
    )
    assert refused.details["held"] == ["a", "b"]


def test_a_request_over_what_is_left_or_over_the_limit_itself_says_so() -> None:
    limit = Limit(2, "c.UserLimits.gpus")
    more = refusal(lambda: check_gpus(limit, [lease("a", "GPU-1")], 2, ME))
    assert more.message == (
        "You hold 1 of 2 GPUs allowed to you (c.UserLimits.gpus), and this needs 2 more: "
        "stop 'a' first, or ask for fewer"
    )
    too_many = refusal(lambda: check_gpus(limit, [], 3, ME))
    assert too_many.message == (
        "This needs 3 GPUs, more than the 2 GPUs allowed to you at once (c.UserLimits.gpus): "
        "ask for fewer"
    )
    # And within the limit, or with none, nothing is refused
    check_gpus(limit, [lease("a", "GPU-1")], 1, ME)
    check_gpus(Limit(0, "c.UserLimits.gpus"), [lease("a", "GPU-1")], 8, ME)


def test_an_administrator_acting_on_a_users_container_is_told_it_is_that_users_limit() -> None:
    limit = Limit(1, "c.UserLimits.groups['students']['running']")
    refused = refusal(
        lambda: check_count(
            limit, ["box"], Whose("alice", "root"), what="running dev container", undo="stop"
        )
    )
    assert refused.message == (
        "alice has 1 of 1 running dev container allowed to alice "
        "(c.UserLimits.groups['students']['running']): stop 'box' first"
    )


def test_a_long_list_of_containers_is_cut_short() -> None:
    names = [f"box-{n:02}" for n in range(14)]
    refused = refusal(
        lambda: check_count(
            Limit(14, "c.UserLimits.pinned"), names, ME, what="pinned dev container", undo="unpin"
        )
    )
    assert refused.message.startswith(
        "You have 14 of 14 pinned dev containers allowed to you (c.UserLimits.pinned): "
        "unpin one of 'box-00', "
    )
    assert refused.message.endswith("'box-09' and 4 more first")


# -- containers kept, in any state ----------------------------------------------------------


def lookup_of(states: dict[str, str]) -> Any:
    """A ``ContainerLookup`` whose one host holds alice's containers in ``states``."""
    backend = SimpleNamespace(owned=lambda owner: dict(states) if owner == "alice" else {})
    return SimpleNamespace(
        host_pool=SimpleNamespace(names=lambda: ["local"], get=lambda name: name),
        backend=lambda _host: backend,
        ledger=SimpleNamespace(pinned=lambda _host: set(), active=list),
        ledger_id="ledger-kept",
        log=None,
    )


KEPT = {"a": "exited", "b": "exited", "c": "running"}


def test_a_start_beyond_the_containers_a_user_keeps_is_refused_stopped_ones_counted() -> None:
    # Given three containers of alice's, two of them stopped, and three allowed
    limits = UserLimits(containers=3).for_user("alice", shared=True)
    # When she starts a new one
    refused = refusal(lambda: check_room(lookup_of(KEPT), limits, ME, running=True))
    # Then it is refused, naming the setting, her containers and what to do
    assert refused.message == (
        "You have 3 of 3 dev containers allowed to you (c.UserLimits.containers): remove "
        "(or commit and remove) one of 'a', 'b', 'c' first"
    )
    assert refused.details["held"] == ["a", "b", "c"]
    # And resuming one she keeps adds none: not refused by it
    check_room(lookup_of(KEPT), limits, ME, running="a")
    # And below the limit, or with none, a start passes
    check_room(lookup_of({"a": "exited"}), limits, ME, running=True)
    check_room(lookup_of(KEPT), UserLimits().for_user("alice", shared=False), ME, running=True)


def test_the_containers_limit_alone_holds_the_owners_lock_while_a_start_is_made() -> None:
    # Given only a containers limit (no running one)
    limits = UserLimits(containers=5, running=0).for_user("alice", shared=True)
    lock = owner_lock("ledger-kept", "alice")
    # Then the start's room holds alice's lock (the next start counts the one made)
    with room(lookup_of(KEPT), limits, ME, running=True):
        assert lock.locked()
    assert not lock.locked()
    # And is refused under it at the limit
    full = UserLimits(containers=3).for_user("alice", shared=True)
    with pytest.raises(LimitReached), room(lookup_of(KEPT), full, ME, running=True):
        pass


# -- memory and CPUs of a new container -----------------------------------------------------


def env(memory: int | None = None, cpus: int | None = None) -> Environment:
    base = Environment(name="train", display_name="Train", source="test", image="python:3.12")
    return replace(base, run_options=RunOptions(memory_bytes=memory, nano_cpus=cpus))


SHARED = UserLimits(memory="8g", memory_default="2g", cpus=4.0, cpus_default=2.0).for_user(
    "alice", shared=True
)


def test_a_container_asking_nothing_gets_the_default_cpus_no_more_than_its_host_has() -> None:
    assert container_resources(SHARED, env(), ME, lambda: 16) == (2 * GIB, 2 * 10**9)
    assert container_resources(SHARED, env(), ME, lambda: 1) == (2 * GIB, 10**9)
    # And a host that does not say how many it has gets the default
    assert container_resources(SHARED, env(), ME, lambda: 0) == (2 * GIB, 2 * 10**9)


def test_a_container_asking_within_the_limits_gets_what_it_asks() -> None:
    asked = env(memory=6 * GIB, cpus=3 * 10**9)
    assert container_resources(SHARED, asked, ME, lambda: 16) == (6 * GIB, 3 * 10**9)


@pytest.mark.parametrize(
    ("asked", "words"),
    [
        (
            env(memory=16 * GIB),
            "The environment 'train' asks for 16g (customizations.gpudev.memory), more than "
            "the 8g each dev container allowed to you may use (c.UserLimits.memory): ask for "
            "less",
        ),
        (
            env(cpus=4_500_000_000),
            "The environment 'train' asks for 4.5 CPUs (customizations.gpudev.cpus), more "
            "than the 4 CPUs each dev container allowed to you may use (c.UserLimits.cpus): "
            "ask for less",
        ),
    ],
)
def test_a_container_asking_for_more_than_allowed_is_refused(
    asked: Environment, words: str
) -> None:
    refused = refusal(lambda: container_resources(SHARED, asked, ME, lambda: 16))
    assert refused.message == words


def test_on_a_kubernetes_host_no_default_is_set_but_the_most_still_holds() -> None:
    # (its scheduler would reserve a default limit as a request)
    assert container_resources(SHARED, env(), ME, None) == (None, None)
    refusal(lambda: container_resources(SHARED, env(memory=16 * GIB), ME, None))


def test_without_limits_a_container_gets_what_it_asks_and_nothing_else() -> None:
    none = UserLimits().for_user("alice", shared=False)
    assert container_resources(none, env(), ME, lambda: 16) == (None, None)
    assert container_resources(none, env(memory=GIB), ME, lambda: 16) == (GIB, None)


# -- the ledger counts a user's GPUs in its transaction -------------------------------------


def pool(count: int) -> list[Any]:
    gpus = tuple(
        GPU(
            uuid=f"GPU-{n:08}",
            index=n,
            name="NVIDIA A100",
            memory_total_mib=81920,
            memory_used_mib=0,
            mig_enabled=False,
            mig_devices=(),
        )
        for n in range(count)
    )
    return leasable_units(Inventory(source="nvml", gpus=gpus))


def test_the_ledger_admits_a_lease_with_the_owners_leases_on_every_host(tmp_path: Path) -> None:
    # Given alice's leases on two hosts, and bob's
    ledger = LeaseLedger(tmp_path / "leases.db")
    ledger.acquire("one", "a1", "alice", GPURequest(count=1), pool(4))
    ledger.acquire("two", "a2", "alice", GPURequest(count=2), pool(4))
    ledger.acquire("one", "b1", "bob", GPURequest(count=1), pool(4))
    seen: list[list[str]] = []
    # When alice asks for another
    ledger.acquire(
        "one",
        "a3",
        "alice",
        GPURequest(count=1),
        pool(4),
        admit=lambda leases: seen.append(sorted(lease.container for lease in leases)),
    )
    # Then the check saw her two leases, on both hosts, and not bob's
    assert seen == [["a1", "a2"]]


def test_a_lease_the_limit_refuses_is_not_taken(tmp_path: Path) -> None:
    # Given alice holding one GPU of two, with one allowed
    ledger = LeaseLedger(tmp_path / "leases.db")
    ledger.acquire("one", "a1", "alice", GPURequest(count=1), pool(2))
    admit = admit_gpus(Limit(1, "c.UserLimits.gpus"), 1, ME)
    # When she asks for the other
    refused = refusal(
        lambda: ledger.acquire("one", "a2", "alice", GPURequest(count=1), pool(2), admit=admit)
    )
    # Then it is refused by the limit, and nothing was leased
    assert "a1" in refused.message
    assert [lease.container for lease in ledger.active()] == ["a1"]
    assert admit_gpus(Limit(0, "c.UserLimits.gpus"), 1, ME) is None


def test_concurrent_leases_of_one_user_pass_a_limit_of_one_once(tmp_path: Path) -> None:
    # Given eight free GPUs, one allowed to alice, and eight threads asking at once
    ledger = LeaseLedger(tmp_path / "leases.db")
    admit = admit_gpus(Limit(1, "c.UserLimits.gpus"), 1, ME)
    barrier = threading.Barrier(8)
    outcomes: list[str] = []

    def grab(n: int) -> None:
        barrier.wait()
        try:
            ledger.acquire("one", f"c{n}", "alice", GPURequest(count=1), pool(8), admit=admit)
        except LimitReached:
            outcomes.append("refused")
        except NoFreeGPU:
            outcomes.append("no free GPU")
        else:
            outcomes.append("leased")

    threads = [threading.Thread(target=grab, args=(n,)) for n in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=60)
    # Then exactly one got a GPU, and every other was refused by the limit
    assert sorted(outcomes) == ["leased"] + ["refused"] * 7
    assert len(ledger.active()) == 1


def test_one_lock_per_user_of_a_ledger() -> None:
    assert owner_lock("ledger", "alice") is owner_lock("ledger", "alice")
    assert owner_lock("ledger", "alice") is not owner_lock("ledger", "bob")
    assert owner_lock("ledger", "alice") is not owner_lock("other", "alice")


# -- the error ------------------------------------------------------------------------------


def test_a_limit_refusal_comes_back_through_the_service_as_itself() -> None:
    body = {"error": "limit_reached", "message": "You hold 1 of 1 GPU allowed to you"}
    err = error_from(409, body)
    assert isinstance(err, LimitReached)
    assert (err.status, err.exit_code, err.message) == (409, 6, body["message"])
