"""Names of dev containers: per user in shared mode (``containers.model``)."""

from __future__ import annotations

import re

import pytest

from jupyter_gpudev.containers.model import (
    PREFIX,
    container_key,
    docker_name,
    given_name,
    keys_meant,
    owner_part,
)

#: What the engine accepts as a container name.
ENGINE_NAME = re.compile(r"[a-zA-Z0-9][a-zA-Z0-9_.-]+\Z")


def test_in_single_user_mode_the_key_is_the_name() -> None:
    assert container_key("train", None) == "train"
    assert docker_name(container_key("train", None)) == "gpudev-train"
    assert given_name("train") == "train"
    assert keys_meant("train", None) == ("train",)


def test_in_shared_mode_each_owner_has_their_own_key_for_a_name() -> None:
    alice, bob = container_key("train", "alice"), container_key("train", "bob")
    assert (alice, bob) == ("gpudev-alice.train", "gpudev-bob.train")
    # The key is the engine's name: one namespace on the engine, one per user above it
    assert docker_name(alice) == alice
    assert given_name(alice) == given_name(bob) == "train"


@pytest.mark.parametrize(
    "owner",
    ["alice", "bob-smith", "Alice", "alice@example.com", "a.b", "a_b", "x+y", "9lives", "a" * 64],
)
def test_every_hub_user_name_gives_an_engine_name(owner: str) -> None:
    key = container_key("my.env_1-x", owner)
    assert ENGINE_NAME.match(key), key
    assert given_name(key) == "my.env_1-x"
    assert "." not in owner_part(owner)


def test_no_owner_can_take_another_owners_part() -> None:
    # A plain name is its own part; any other name gets a hash after an underscore, which no
    # plain name holds: a user cannot pick a name whose part is another user's
    hashed = owner_part("Alice@Example.com")
    assert re.fullmatch(r"alice-example-com_[0-9a-f]{16}", hashed)
    assert owner_part(hashed) != hashed
    parts = {owner_part(o) for o in ["alice", "Alice", "ALICE", "alice.", "alice-", "a.lice"]}
    assert len(parts) == 6


def test_a_name_with_dots_cannot_reach_another_owners_container() -> None:
    # alice's "b.x" and the owner "alice.b"'s "x" are different containers
    assert container_key("b.x", "alice") != container_key("x", "alice.b")


def test_a_caller_means_their_own_container_then_one_named_before_names_were_per_user() -> None:
    assert keys_meant("train", "alice") == ("gpudev-alice.train", "train")
    # A name with gpudev's prefix is a key already: how an administrator names another's
    assert keys_meant("gpudev-bob.train", "admin") == ("gpudev-bob.train", "bob.train")
    assert keys_meant("gpudev-train", None) == ("gpudev-train", "train")


def test_the_given_name_of_an_engine_name_from_before_is_the_engine_name() -> None:
    assert given_name(PREFIX + "train") == PREFIX + "train"
