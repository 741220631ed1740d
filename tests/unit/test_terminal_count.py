"""The shared service's count of open terminals (``shared.terminals.TerminalCount``): a limit
per user and one in all, 0 for none, each refusal a 429 naming its setting."""

from __future__ import annotations

import pytest
from tornado import web

from jupyter_gpudev.shared.terminals import TerminalCount


def refusal(count: TerminalCount, user: str, *, per_user: int, total: int) -> web.HTTPError:
    with pytest.raises(web.HTTPError) as caught:
        count.take(user, per_user=per_user, total=total)
    return caught.value


def test_a_user_is_refused_beyond_their_limit_and_the_service_beyond_its_own() -> None:
    count = TerminalCount()
    count.take("alice", per_user=2, total=3)
    count.take("alice", per_user=2, total=3)
    error = refusal(count, "alice", per_user=2, total=3)
    assert error.status_code == 429
    assert "c.GPUDevService.terminals_per_user" in str(error.log_message)
    count.take("bob", per_user=2, total=3)
    error = refusal(count, "bob", per_user=2, total=3)
    assert error.status_code == 429
    assert "c.GPUDevService.terminals_total" in str(error.log_message)
    assert count.by_user == {"alice": 2, "bob": 1}
    assert count.total == 3


def test_what_ends_is_given_back() -> None:
    count = TerminalCount()
    count.take("alice", per_user=1, total=0)
    count.give_back("alice")
    assert (count.by_user, count.total) == ({}, 0)
    count.take("alice", per_user=1, total=0)
    assert (count.by_user, count.total) == ({"alice": 1}, 1)


def test_zero_is_no_limit() -> None:
    count = TerminalCount()
    for _ in range(1000):
        count.take("alice", per_user=0, total=0)
    assert count.total == 1000


def test_the_count_is_the_applications() -> None:
    settings: dict[str, object] = {}
    assert TerminalCount.of(settings) is TerminalCount.of(settings)
    assert TerminalCount.of({}) is not TerminalCount.of(settings)
