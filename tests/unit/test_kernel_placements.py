"""What the gpudev kernels of one process agree on about shared containers (no engine)."""

from __future__ import annotations

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
