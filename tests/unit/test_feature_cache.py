"""The features' shared-mode bounds (``containers/features.py``): the fetch cache's eviction is
fair between users, and the features installs in flight (each holding up to
``MAX_FEATURES_BYTES`` in memory) are bounded per user and in the whole process."""

from __future__ import annotations

import json
import tarfile
import tempfile
import threading
import time
from collections.abc import Callable
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from jupyter_gpudev.containers import feature_build
from jupyter_gpudev.containers import features as features_module
from jupyter_gpudev.containers.features import Features
from jupyter_gpudev.environments import EnvironmentManager
from jupyter_gpudev.environments import features as spec
from jupyter_gpudev.errors import Conflict


def held_by(cache: features_module._Cache, scope: str) -> int:
    return sum(len(data) for (owner, _), data in cache.items.items() if owner == scope)


def test_one_user_fetching_much_does_not_evict_another_users_features() -> None:
    # Given alice's two features in a cache of 100 bytes
    cache = features_module._Cache(100)
    cache.put("gpudev-alice", "sha256:a1", b"a" * 20)
    cache.put("gpudev-alice", "sha256:a2", b"a" * 20)
    # When bob fetches many big features, more than the whole cache together
    for number in range(10):
        cache.put("gpudev-bob", f"sha256:b{number}", b"b" * 30)
    # Then alice's are kept (bob holds more than she does: his own oldest go)
    assert cache.get("gpudev-alice", "sha256:a1") == b"a" * 20
    assert cache.get("gpudev-alice", "sha256:a2") == b"a" * 20
    # And bob keeps his newest within what is left
    assert cache.get("gpudev-bob", "sha256:b9") == b"b" * 30
    assert cache.get("gpudev-bob", "sha256:b0") is None
    assert held_by(cache, "gpudev-bob") == 60
    # And the sizes are accounted
    assert cache.size == sum(len(data) for data in cache.items.values()) == 100


def test_a_user_holding_more_than_another_is_the_one_evicted() -> None:
    # Given alice holding most of the cache
    cache = features_module._Cache(100)
    for number in range(4):
        cache.put("gpudev-alice", f"sha256:a{number}", b"a" * 20)
    # When bob fetches (the cache over its limit): alice's oldest goes, until they are even
    cache.put("gpudev-bob", "sha256:b0", b"b" * 30)
    assert cache.get("gpudev-alice", "sha256:a0") is None
    assert cache.get("gpudev-alice", "sha256:a1") == b"a" * 20
    assert cache.get("gpudev-bob", "sha256:b0") == b"b" * 30
    cache.put("gpudev-bob", "sha256:b1", b"b" * 30)
    # (alice 60, bob 60: over the limit, a tie goes against the one fetching)
    assert cache.get("gpudev-bob", "sha256:b0") is None
    assert (held_by(cache, "gpudev-alice"), held_by(cache, "gpudev-bob")) == (60, 30)
    assert cache.size == sum(len(data) for data in cache.items.values()) == 90


def test_a_user_alone_evicts_their_own_least_recently_used() -> None:
    cache = features_module._Cache(10)
    cache.put("", "a", b"1234")
    cache.put("", "b", b"5678")
    assert cache.get("", "a") == b"1234"  # now the newest
    cache.put("", "c", b"90ab")
    assert (cache.get("", "a"), cache.get("", "b"), cache.get("", "c")) == (b"1234", None, b"90ab")
    cache.put("", "a", b"12")  # replaced: its size accounted again
    assert cache.size == sum(len(data) for data in cache.items.values()) == 6
    cache.put("", "big", b"x" * 11)
    assert cache.get("", "big") is None
    assert cache.size == 6


# -- installs in flight -----------------------------------------------------------------------


class _Stop(Exception):
    """Raised by the stand-in fetch once released: the install ends there."""


def test_features_installs_are_bounded_per_user_and_in_the_process(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Given an environment with a feature, and a fetch that holds until released
    folder = tmp_path / ".devcontainer"
    folder.mkdir()
    (folder / "devcontainer.json").write_text(
        json.dumps({"name": "e", "image": "python:3.12", "features": {"ghcr.io/a/b/f:1": {}}})
    )
    env = EnvironmentManager().get("e", tmp_path)
    release = threading.Event()
    lock = threading.Lock()
    inside: dict[str, int] = {}
    most = {"all": 0, "gpudev-alice": 0}
    entered: list[str] = []

    def fetch(
        request: spec.FeatureRequest, settings: Any, registries: Any, *_: Any, **__: Any
    ) -> Any:
        user = str(registries.user)
        with lock:
            entered.append(user)
            inside[user] = inside.get(user, 0) + 1
            most["all"] = max(most["all"], sum(inside.values()))
            most["gpudev-alice"] = max(most["gpudev-alice"], inside.get("gpudev-alice", 0))
        try:
            release.wait(30)
        finally:
            with lock:
                inside[user] -= 1
        raise _Stop

    monkeypatch.setattr(features_module, "_fetch", fetch)
    said: dict[str, list[str]] = {}

    def install(user: str, key: str) -> None:
        messages = said.setdefault(key, [])
        with pytest.raises(_Stop):
            features_module.install_features(
                None,  # type: ignore[arg-type]
                env,
                "python:3.12",
                registries=SimpleNamespace(user=user),  # type: ignore[arg-type]
                say=lambda event: messages.append(str(event.get("message", ""))),
                log=None,
                settings=Features(),
            )

    def waiting(key: str) -> list[str]:
        return [m for m in said.get(key, []) if m.startswith("waiting for")]

    def until(done: Callable[[], bool]) -> None:
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline:
            with lock:
                if done():
                    break
            time.sleep(0.01)
        time.sleep(0.2)  # (and no more get in)

    threads: list[threading.Thread] = []

    def begin(user: str, key: str) -> None:
        thread = threading.Thread(target=install, args=(user, key), daemon=True)
        threads.append(thread)
        thread.start()

    limit = features_module.MAX_FEATURES_INSTALLS
    try:
        # When alice starts twice: her second start waits for her first
        begin("gpudev-alice", "alice-1")
        until(lambda: len(entered) == 1)
        begin("gpudev-alice", "alice-2")
        until(lambda: len(entered) > 1 or bool(waiting("alice-2")))
        assert entered == ["gpudev-alice"]
        # And other users start, more than the process allows at once
        users = [f"user{number}" for number in range(limit + 1)]
        for user in users:
            begin(f"gpudev-{user}", user)
        until(lambda: len(entered) > limit or sum(bool(waiting(u)) for u in users) == 2)
        # Then only so many are in flight, one of alice's
        assert len(entered) == limit
        assert most == {"all": limit, "gpudev-alice": 1}
    finally:
        release.set()
        for thread in threads:
            thread.join(10)
    # And every start ran in the end, each waiting one saying so once
    assert len(entered) == limit + 3
    assert most == {"all": limit, "gpudev-alice": 1}
    assert waiting("alice-1") == []
    assert len(waiting("alice-2")) == 1
    assert "your other start" in waiting("alice-2")[0]
    others = [waiting(user) for user in users]
    assert sorted(len(found) for found in others) == [0] * (limit - 1) + [1] * 2
    assert all("other starts" in found[0] for found in others if found)


def test_a_start_waiting_too_long_for_a_features_slot_is_refused(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # Given every features slot of the process held (slow registries of other users' features)
    monkeypatch.setattr(features_module, "SLOT_WAIT", 0.2)
    slots = features_module._Slots(2)
    said: list[str] = []
    with slots.held("a", said.append), slots.held("b", said.append):  # type: ignore[arg-type]
        # When another user's install asks for one
        began = time.monotonic()
        with (
            pytest.raises(Conflict, match="try again later"),
            slots.held("c", said.append),  # type: ignore[arg-type]
        ):
            pass
        # Then it is refused after the wait, having said it waits, and holds nothing
        assert 0.2 <= time.monotonic() - began < 5
    assert len(said) == 1
    assert slots.users == set()


def test_a_build_context_is_closed_when_it_cannot_be_written(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # Given a temporary file that fills up as the context is written (a full disk)
    opened: list[Any] = []
    real = tempfile.TemporaryFile

    def temporary() -> Any:
        opened.append(real())
        return opened[-1]

    def full(*_: Any, **__: Any) -> None:
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(tempfile, "TemporaryFile", temporary)
    monkeypatch.setattr(tarfile.TarFile, "addfile", full)
    # When the context is made, then the error reaches the caller and the file is closed
    with pytest.raises(OSError, match="No space"):
        feature_build.context_tar("FROM x\n", [])
    assert len(opened) == 1
    assert opened[0].closed
