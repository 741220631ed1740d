"""``tests.leaks`` while other tests run beside: listing every gpudev container then reading
each one races with their removal (the engine answers 404 for one removed meanwhile), so a
check that meets that is taken again, until a deadline."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import TypeVar

import docker.errors

T = TypeVar("T")


def again_if_removed(call: Callable[[], T], *, within: float = 30.0) -> T:
    """``call()``, again while a container it reads was removed meanwhile."""
    deadline = time.monotonic() + within
    while True:
        try:
            return call()
        except docker.errors.NotFound:
            if time.monotonic() > deadline:
                raise
