"""Capabilities of proxied web apps: signed, expiring, bound to a container, port and user."""

from __future__ import annotations

from dataclasses import replace

import pytest

from jupyter_gpudev.errors import NotFound
from jupyter_gpudev.handlers.capabilities import LIFETIME, AppCapability

KEY = b"k" * 32
NOW = 1_800_000_000.0


def grant() -> AppCapability:
    return AppCapability.grant("train", "local", 6006, "ada", admin=False, now=NOW)


def test_a_capability_reads_back_as_it_was_granted_until_it_expires() -> None:
    token = grant().mint(KEY)
    assert AppCapability.verify(token, KEY, now=NOW) == grant()
    assert AppCapability.verify(token, KEY, now=NOW + LIFETIME - 1) == grant()
    with pytest.raises(NotFound):
        AppCapability.verify(token, KEY, now=NOW + LIFETIME)


@pytest.mark.parametrize(
    "change",
    [
        {"port": 22},
        {"name": "other"},
        {"user": "mallory"},
        {"admin": True},
        {"expires": int(NOW) + 10 * LIFETIME},
    ],
)
def test_any_change_to_the_payload_breaks_the_signature(change: dict[str, object]) -> None:
    signature = grant().mint(KEY).split(".")[1]
    payload = replace(grant(), **change).mint(KEY).split(".")[0]  # type: ignore[arg-type]
    with pytest.raises(NotFound):
        AppCapability.verify(f"{payload}.{signature}", KEY, now=NOW)


def test_another_servers_key_or_garbage_is_refused() -> None:
    with pytest.raises(NotFound):
        AppCapability.verify(grant().mint(b"x" * 32), KEY, now=NOW)
    for junk in ("", ".", "abc", "abc.def", "e30.AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA"):
        with pytest.raises(NotFound):
            AppCapability.verify(junk, KEY, now=NOW)
