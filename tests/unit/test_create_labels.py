"""A dev container's labels override every gpudev label an image may carry (no engine)."""

from __future__ import annotations

from jupyter_gpudev.containers.create import Confinement, create_args
from jupyter_gpudev.labels import L_CLAIM, L_CLAIM_AT, L_CLAIM_HOLDER, L_MANAGED, L_PROBE
from jupyter_gpudev.leasing.claims import Claim
from tests.unit.test_create_args import environment, target


def test_a_dev_container_is_labelled_neither_a_claim_nor_a_probe() -> None:
    # (an image's labels are inherited by its containers: an image's claim labels would make
    # the claim sweep take the dev container for a stale claim)
    labels = create_args(environment(), target(), Confinement())["labels"]
    assert labels[L_MANAGED] == "1"
    for label in (L_CLAIM, L_CLAIM_HOLDER, L_CLAIM_AT, L_PROBE):
        assert labels[label] == "", label
    assert Claim.from_labels("id", labels) is None
