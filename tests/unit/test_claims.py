"""GPU claims on the engine: names, and when a claim still holds its GPU (pure parts; the
engine's side runs in tests/integration/test_claims.py)."""

from __future__ import annotations

import re

import pytest

from jupyter_gpudev.labels import L_CLAIM, L_CLAIM_AT, L_CLAIM_HOLDER, L_MANAGED, L_NAME, L_OWNER
from jupyter_gpudev.leasing import Claim, claim_name
from jupyter_gpudev.leasing.claims import CLAIM_COMMAND, Holder, is_claim, is_live

UUID = "GPU-5d5ba0d6-d33d-2b2c-524d-9e3d8d2b8a77"
#: The engine's rule for container names.
ENGINE_NAME = re.compile(r"[a-zA-Z0-9][a-zA-Z0-9_.-]+\Z")


def claim(at: float = 1000.0, uuid: str = UUID) -> Claim:
    return Claim(uuid, "c1", "holder-id", "train", "alice", at)


def test_a_gpu_uuid_is_its_claim_name_as_it_is() -> None:
    assert claim_name(UUID) == f"gpudev-gpu-{UUID}"


@pytest.mark.parametrize(
    "uuid",
    [
        "MIG-GPU-5d5ba0d6-d33d-2b2c-524d-9e3d8d2b8a77/1/0",
        "MIG-c0ffee00-0000-5000-8000-000000000000",
        "weird id with spaces",
        "",
    ],
)
def test_every_uuid_has_a_valid_engine_name(uuid: str) -> None:
    assert ENGINE_NAME.match(claim_name(uuid))


def test_uuids_made_the_same_when_made_safe_still_have_different_names() -> None:
    assert claim_name("MIG-a/1/0") != claim_name("MIG-a_1_0")
    assert claim_name("MIG-a/1/0") != claim_name("MIG-a_1/0")


def test_a_running_holder_that_names_the_gpu_keeps_it_however_old() -> None:
    assert is_live(claim(at=0), Holder("running", (UUID,)), now=10**9, grace=120)
    assert is_live(claim(at=0), Holder("created", (UUID,)), now=10**9, grace=120)


def test_a_missing_holder_frees_the_gpu_at_once() -> None:
    assert not is_live(claim(at=1000), None, now=1000, grace=120)


def test_a_holder_that_does_not_name_the_gpu_frees_it() -> None:
    assert not is_live(claim(), Holder("running", ("GPU-other",)), now=1000, grace=120)


def test_a_stopped_holder_keeps_it_only_within_the_grace() -> None:
    # A resume claims for its stopped container just before starting it
    assert is_live(claim(at=1000), Holder("exited", (UUID,)), now=1100, grace=120)
    assert not is_live(claim(at=1000), Holder("exited", (UUID,)), now=1121, grace=120)
    assert not is_live(claim(at=1000), Holder("dead", (UUID,)), now=1121, grace=120)


def test_labels_without_a_gpu_or_a_holder_are_not_a_claim() -> None:
    assert Claim.from_labels("x", {L_CLAIM: UUID}) is None
    assert Claim.from_labels("x", {L_CLAIM_HOLDER: "h"}) is None
    read = Claim.from_labels(
        "x",
        {L_CLAIM: UUID, L_CLAIM_HOLDER: "h", L_NAME: "n", L_OWNER: "o", L_CLAIM_AT: "oops"},
    )
    # A time that is not a number counts as long ago (stale as soon as the holder stops)
    assert read == Claim(UUID, "x", "h", "n", "o", 0.0)


def test_empty_claim_labels_are_not_a_claim() -> None:
    # (what every dev container carries: ``containers.create.labels``)
    assert Claim.from_labels("x", {L_CLAIM: "", L_CLAIM_HOLDER: "", L_CLAIM_AT: ""}) is None


def test_only_a_container_made_as_a_claim_is_one_whatever_its_labels() -> None:
    name = f"/{claim_name(UUID)}"
    labels = {L_CLAIM: UUID, L_CLAIM_HOLDER: "h"}
    assert is_claim([name], CLAIM_COMMAND, labels)
    # A dev container (managed), whatever its name, command or image's labels
    assert not is_claim([name], CLAIM_COMMAND, {**labels, L_MANAGED: "1"})
    # Another name, or another command (the claim image's file and nothing else)
    assert not is_claim(["/gpudev-train"], CLAIM_COMMAND, labels)
    assert not is_claim([], CLAIM_COMMAND, labels)
    assert not is_claim([name], "sleep infinity", labels)
    assert not is_claim([name], f"{CLAIM_COMMAND} sleep infinity", labels)
