"""Blocking operations per user in the shared service (``handlers.base.OperationCount``): at
most ``c.GPUDevService.operations_per_user`` of one user's at once, one more refused at once
(never queued for the workers every user shares); given back however they end."""

from __future__ import annotations

from typing import Any

import pytest

from jupyter_gpudev.errors import LimitReached
from jupyter_gpudev.handlers.base import OperationCount


def test_one_operation_past_a_users_limit_is_refused_and_others_are_not() -> None:
    count = OperationCount()
    with count.held("alice", 2), count.held("alice", 2):
        with pytest.raises(LimitReached) as refused, count.held("alice", 2):
            pass
        assert "c.GPUDevService.operations_per_user" in refused.value.message
        assert "2 operations" in refused.value.message
        with count.held("bob", 2):  # another user's are their own
            pass
    with count.held("alice", 2):  # given back
        pass
    assert count.by_user == {}


def test_an_operation_that_fails_is_given_back_and_zero_is_no_limit() -> None:
    count = OperationCount()
    with pytest.raises(RuntimeError), count.held("alice", 1):
        raise RuntimeError("the engine went away")
    with count.held("alice", 1):
        pass
    held = [count.held("alice", 0) for _ in range(50)]
    for operation in held:
        operation.__enter__()
    assert count.by_user == {"alice": 50}
    for operation in held:
        operation.__exit__(None, None, None)
    assert count.by_user == {}


def test_the_count_is_one_per_application() -> None:
    settings: dict[str, Any] = {}
    assert OperationCount.of(settings) is OperationCount.of(settings)
    assert OperationCount.of({}) is not OperationCount.of(settings)
