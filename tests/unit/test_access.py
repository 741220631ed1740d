"""Who sees which dev container (the pure rules of ``access.py``)."""

from __future__ import annotations

import os

import pytest
from traitlets.config import Config

from jupyter_gpudev.access import Access, Caller
from jupyter_gpudev.labels import L_LEDGER, L_OWNER
from jupyter_gpudev.leasing import Lease, seen_by


def test_a_user_sees_their_own_and_an_administrator_everyones() -> None:
    access = Access(config=Config({"Access": {"user": "alice", "admin_users": {"root"}}}))
    alice, bob, root = Caller("alice"), Caller("bob"), Caller("root", admin=True)
    labels = {L_OWNER: "alice", L_LEDGER: "other"}
    assert access.may_see(alice, labels, "mine")
    assert not access.may_see(bob, labels, "mine")
    assert access.may_see(root, labels, "mine")
    assert not access.may_see(bob, {}, "mine")


def test_the_single_user_sees_what_its_own_ledger_made_before_owners_counted() -> None:
    # Containers started from the panel by older versions carry a login's random name
    access = Access(config=Config({"Access": {"user": "alice"}}))
    legacy = {L_OWNER: "3f1c0d9e8b7a", L_LEDGER: "mine"}
    assert access.may_see(access.local(), legacy, "mine")
    assert not access.may_see(access.local(), legacy, "another-ledger")
    assert not access.may_see(Caller("bob"), legacy, "mine")
    assert not access.may_see(access.local(), {L_OWNER: "x"}, "")


def test_the_user_defaults_to_the_hub_user_then_the_account(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("JUPYTERHUB_USER", "ada")
    assert Access().local() == Caller("ada")
    monkeypatch.delenv("JUPYTERHUB_USER")
    monkeypatch.setattr("getpass.getuser", lambda: "account")
    assert Access().local() == Caller("account")
    assert Access(config=Config({"Access": {"admin_users": {"account"}}})).local().admin


def test_another_users_lease_is_seen_without_its_container() -> None:
    lease = Lease("id1", "local", "bobs-train", "bob", ("GPU-1",), 0.0)
    assert seen_by(lease, "bob") == lease
    assert seen_by(lease, None) == lease
    hidden = seen_by(lease, "alice")
    assert (hidden.lease_id, hidden.container, hidden.owner) == ("", "", "another user")
    assert hidden.gpu_uuids == ("GPU-1",)


def test_an_account_without_a_name_is_its_uid(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("JUPYTERHUB_USER", raising=False)

    def nameless() -> str:
        raise KeyError("getpwuid(): uid not found")

    monkeypatch.setattr("getpass.getuser", nameless)
    assert Access().local().name == f"uid-{os.getuid()}"
