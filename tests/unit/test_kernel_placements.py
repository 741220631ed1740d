"""What the gpudev kernels of one process agree on about shared containers (no engine)."""

from __future__ import annotations

import threading

import pytest

from jupyter_gpudev.errors import Conflict
from jupyter_gpudev.kernels.placements import KernelPlacements

KEY = ("cluster", "spod")


def test_no_kernel_joins_a_shared_container_while_it_is_ended_after_its_last_kernel() -> None:
    placements = KernelPlacements()
    # Given a kernel in the shared container: it is not ended
    placements.join(KEY, "k1")
    with placements.closing(KEY) as free:
        assert not free
    # When its last kernel left and it is being ended (a pod listed, then deleted)
    assert placements.leave(KEY, "k1")
    with placements.closing(KEY) as free:
        assert free
        # Then a kernel that would join it is refused with what to do, and no second end
        # starts meanwhile
        with pytest.raises(Conflict, match="start the kernel again in a moment"):
            placements.join(KEY, "k2")
        assert placements.kernels_in(KEY) == frozenset()
        with placements.closing(KEY) as again:
            assert not again
    # And once that is over, kernels join it again (a kept pod)
    placements.join(KEY, "k2")
    assert placements.kernels_in(KEY) == {"k2"}


def test_ports_reserved_for_a_kernel_reached_again_are_given_to_no_other(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # Given a kernel reached again after a restart, which keeps its ports in "box"
    placements = KernelPlacements()
    placements.reserve_ports("box", (40001, 40002))
    # When another kernel of the container is given ports (the draw would pick them first)
    draws = iter([40001, 40002, 40003, 40004])
    monkeypatch.setattr("random.SystemRandom.randint", lambda _self, _a, _b: next(draws))
    # Then it gets others
    assert placements.choose_ports("box", 2) == (40003, 40004)
    # And once released, they can be given again
    placements.release_ports("box", (40001, 40002))
    again = iter([40001, 40003, 40002])
    monkeypatch.setattr("random.SystemRandom.randint", lambda _self, _a, _b: next(again))
    assert placements.choose_ports("box", 2) == (40001, 40002)


def chosen(placements: KernelPlacements, container: str, count: int) -> object:
    """``choose_ports``' answer or error, in a thread given 5 s (a spin fails, not hangs)."""
    outcome: list[object] = []

    def choose() -> None:
        try:
            outcome.append(placements.choose_ports(container, count))
        except Conflict as err:
            outcome.append(err)

    worker = threading.Thread(target=choose, daemon=True)
    worker.start()
    worker.join(5)
    assert not worker.is_alive(), "choose_ports spins when too few ports are free"
    return outcome[0]


def test_a_container_without_free_ports_refuses_at_once() -> None:
    # Given every kernel port of one container taken (4000 kernels of 5 ports each)
    placements = KernelPlacements()
    placements.reserve_ports("spod", tuple(range(40000, 60000)))
    # When one more kernel of it asks for ports
    refused = chosen(placements, "spod", 5)
    # Then it is refused at once, with a 409 saying why
    assert isinstance(refused, Conflict)
    assert (refused.status, refused.code) == (409, "no_free_ports")
    assert "no free kernel ports" in refused.message
    # And another container's kernel is given ports
    assert len(placements.choose_ports("other", 5)) == 5


def test_the_last_free_ports_of_a_container_are_found_then_refused() -> None:
    # Given a container with three free ports left
    placements = KernelPlacements()
    placements.reserve_ports("spod", tuple(p for p in range(40000, 60000) if p % 7000))
    free = {p for p in range(40000, 60000) if not p % 7000}
    assert len(free) == 3
    # Then a kernel asking for three gets exactly them
    got = chosen(placements, "spod", 3)
    assert isinstance(got, tuple)
    assert set(got) == free
    # And one more asking is refused
    refused = chosen(placements, "spod", 1)
    assert isinstance(refused, Conflict)
    assert "no free kernel ports" in refused.message
