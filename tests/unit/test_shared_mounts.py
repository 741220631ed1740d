"""Declared mounts in shared mode (issue #30): one service mounts host folders for every user,
so each user's view checks an environment's mounts with that user's rights on this machine
(the folder and every folder on the way to it, as the kernel would decide), and ``{user}`` in
``c.MountPolicy.allowed_roots`` is the caller's name.

The folders belong to the real accounts gpudev-alice and gpudev-bob (scripts/setup.sh --test),
so the tests that give folders away need root; the views are built as the shared service
builds them (``Authority.for_user``).
"""

from __future__ import annotations

import json
import logging
import os
import pwd
import shutil
import struct
import subprocess
import tempfile
from collections.abc import Callable, Iterator
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest
from traitlets.config import Config, LoggingConfigurable

from jupyter_gpudev.environments import MountNotAllowed, MountPolicy, RemotePaths
from jupyter_gpudev.environments.mounts import ResolvedMount
from jupyter_gpudev.errors import ConfigError
from jupyter_gpudev.services import Services
from jupyter_gpudev.shared.authority import Authority

ALICE, BOB = "gpudev-alice", "gpudev-bob"


def _has(name: str) -> bool:
    try:
        pwd.getpwnam(name)
    except KeyError:
        return False
    return True


needs_accounts = pytest.mark.skipif(
    os.geteuid() != 0 or not (_has(ALICE) and _has(BOB)),
    reason="giving folders to gpudev-alice and gpudev-bob needs root and those accounts "
    "(scripts/setup.sh --test)",
)


def make(path: Path, owner: str, mode: int) -> Path:
    """The folder ``path``, made, belonging to ``owner`` ("root" or an account), ``mode``."""
    path.mkdir()
    account = pwd.getpwnam(owner)
    os.chown(path, account.pw_uid, account.pw_gid)
    path.chmod(mode)
    return path


@pytest.fixture
def site() -> Iterator[Path]:
    """A folder of root's (0755) that every user may search: tmp_path's parents are root's
    only (pytest-of-root is 0700), which would refuse every mount for the test users."""
    folder = Path(tempfile.mkdtemp(prefix="gpudev-mounts-", dir="/tmp"))
    folder.chmod(0o755)
    yield folder
    shutil.rmtree(folder)


@pytest.fixture
def tree(site: Path) -> Path:
    """site/data (root's, 0755) with each user's folder (theirs, 0700) and a project folder
    in alice's; site/datasets (root's) with bob's public (0755) and private (0700) folders,
    and a folder open to all (0777) inside the private one."""
    data = make(site / "data", "root", 0o755)
    make(data / ALICE, ALICE, 0o700)
    make(data / ALICE / "project", ALICE, 0o755)
    make(data / BOB, BOB, 0o700)
    (data / BOB / "secret.txt").write_text("bob's")
    datasets = make(site / "datasets", "root", 0o755)
    make(datasets / "public", BOB, 0o755)
    make(datasets / "private", BOB, 0o700)
    make(datasets / "private" / "open", BOB, 0o777)
    return site


ViewOf = Callable[[str, list[Any]], Services]


@pytest.fixture
def view_of(tmp_path: Path) -> Iterator[ViewOf]:
    """Makes the shared service with ``c.MountPolicy.allowed_roots = roots`` and gives user
    ``name``'s view of it (``Authority.for_user``: what a request of theirs gets)."""
    made: list[Authority] = []

    def view(name: str, roots: list[Any]) -> Services:
        index = len(made)
        config = Config()
        config.DevContainers.state_dir = str(tmp_path / f"state-{index}")
        config.GPUDevService.user_root = str(tmp_path / f"users-{index}" / "{user}")
        config.MountPolicy.allowed_roots = roots
        parent = LoggingConfigurable(config=config)
        held = Authority(tmp_path, parent=parent, log=logging.getLogger("gpudev-test"))
        made.append(held)
        return held.for_user(name)

    yield view
    for held in made:
        held.close()


def policy_of(view_of: ViewOf, name: str, roots: list[Any]) -> MountPolicy:
    policy = view_of(name, roots).containers.mount_policy
    assert isinstance(policy, MountPolicy)
    return policy


def refusal(policy: MountPolicy, source: Path, read_only: bool | None = True) -> str:
    with pytest.raises(MountNotAllowed) as caught:
        policy.resolve(str(source), "/mnt/x", read_only)
    assert caught.value.status == 403
    return caught.value.message


# -- the exploit: a folder under a shared root that the caller cannot read --------------------


@needs_accounts
def test_alice_cannot_mount_bobs_private_folder_from_her_environment(
    tree: Path, view_of: ViewOf
) -> None:
    # Given /data is an allowed root, and bob's folder in it is his alone (0700)
    bobs = tree / "data" / BOB
    alice = view_of(ALICE, [str(tree / "data")])
    # And an environment in alice's folder that declares a mount of it
    folder = alice.containers.root_dir / ".devcontainer" / "steal"
    folder.mkdir(parents=True)
    mount = f"source={bobs},target=/mnt/bob,type=bind,readonly"
    (folder / "devcontainer.json").write_text(json.dumps({"image": "x", "mounts": [mount]}))
    env = alice.containers.environments.get("steal", alice.containers.root_dir)
    # When her view checks the environment's mounts
    with pytest.raises(MountNotAllowed) as caught:
        alice.containers.mount_policy.resolve_declared(env.mounts)
    # Then it is refused, saying who may not read what
    assert caught.value.status == 403
    assert f"{ALICE} may not read {bobs}" in caught.value.message
    # While bob's own view mounts it
    bob = view_of(BOB, [str(tree / "data")]).containers.mount_policy
    assert bob.resolve_declared(env.mounts)[0].source == str(bobs)


@needs_accounts
def test_user_in_a_root_is_the_callers_own_folder(tree: Path, view_of: ViewOf) -> None:
    # Given one writable root per user
    roots = [{"path": str(tree / "data" / "{user}"), "writable": True}]
    alice = policy_of(view_of, ALICE, roots)
    # When alice mounts her own folder, it is hers, read-write
    mount = alice.resolve(str(tree / "data" / ALICE), "/mnt/mine")
    assert (mount.source, mount.read_only) == (str(tree / "data" / ALICE), False)
    # And bob's folder is outside the folders she may mount (hers), whatever its modes
    (tree / "data" / BOB).chmod(0o755)
    message = refusal(alice, tree / "data" / BOB)
    assert "outside the folders of this machine that may be mounted" in message
    assert str(tree / "data" / ALICE) in message
    assert f"data/{BOB}" not in message.split("mounted:")[1]
    # And bob's view mounts his own
    bob = policy_of(view_of, BOB, roots)
    assert bob.resolve(str(tree / "data" / BOB), "/mnt/mine").source == str(tree / "data" / BOB)


@needs_accounts
def test_a_world_readable_folder_of_another_user_is_mounted_read_only_only(
    tree: Path, view_of: ViewOf
) -> None:
    # Given a writable root holding bob's world-readable (0755) folder
    public = tree / "datasets" / "public"
    alice = policy_of(view_of, ALICE, [{"path": str(tree / "datasets"), "writable": True}])
    # When alice mounts it read-only, it is mounted
    assert alice.resolve(str(public), "/mnt/p", read_only=True).read_only
    # When she asks for it writable, it is refused: she may not write it
    message = refusal(alice, public, read_only=False)
    assert f"{ALICE} may not write {public}" in message
    # And a mount that does not say follows her rights too: read-only
    assert alice.resolve(str(public), "/mnt/p").read_only
    # While bob, its owner, gets it writable
    bob = policy_of(view_of, BOB, [{"path": str(tree / "datasets"), "writable": True}])
    assert not bob.resolve(str(public), "/mnt/p").read_only


@needs_accounts
def test_a_folder_behind_one_the_caller_cannot_search_is_refused(
    tree: Path, view_of: ViewOf
) -> None:
    # Given a folder open to all (0777) inside bob's private one (0700)
    alice = policy_of(view_of, ALICE, [str(tree / "datasets")])
    # When alice mounts it
    message = refusal(alice, tree / "datasets" / "private" / "open")
    # Then it is refused, naming the folder she may not search
    assert f"{ALICE} may not search {tree / 'datasets' / 'private'}" in message


@needs_accounts
def test_a_folder_the_caller_could_swap_for_a_link_is_refused(tree: Path, view_of: ViewOf) -> None:
    # Given alice's own folder (its parent root's) and a project folder in it
    alice = policy_of(view_of, ALICE, [str(tree / "data")])
    project = tree / "data" / ALICE / "project"
    # When she mounts the project folder, which she may rename (she writes its parent) and
    # replace with a link to any folder by the time the engine mounts it (at start or resume)
    message = refusal(alice, project)
    # Then it is refused, saying why and what to mount instead
    assert f"{ALICE} may rename or replace {project}" in message
    assert f"mount {tree / 'data' / ALICE}" in message
    # While her own folder, which only root may rename, is mounted
    assert alice.resolve(str(tree / "data" / ALICE), "/mnt/me").source == str(tree / "data" / ALICE)


@needs_accounts
def test_a_path_that_is_a_link_by_the_time_it_is_checked_is_refused(
    tree: Path, view_of: ViewOf, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Given alice's folder under an allowed root
    mine = tree / "data" / ALICE
    alice = policy_of(view_of, ALICE, [str(tree / "data")])
    # When it is replaced with a link (to bob's folder) after it was resolved (a resolution
    # that saw it still as a folder: the path as it was given)
    mine.rename(tree / "data" / "moved")
    mine.symlink_to(tree / "data" / BOB)
    monkeypatch.setattr(os.path, "realpath", lambda path, **_: str(path))
    # Then the mount is refused: what was resolved is no longer what the engine would bind
    assert f"{mine} is a link now" in refusal(alice, mine)


@needs_accounts
def test_a_mount_holding_every_users_folder_is_refused(tree: Path, view_of: ViewOf) -> None:
    # Given per-user roots, and the site (which holds every user's folder) allowed too
    roots = [str(tree / "data" / "{user}"), str(tree)]
    alice = policy_of(view_of, ALICE, roots)
    # When alice mounts the folder of every user's (0755, readable by her)
    message = refusal(alice, tree / "data")
    # Then it is refused: a container running as root would read them all, whatever their modes
    assert "every user's folder" in message
    assert str(tree / "data" / ALICE) in message
    # And so is a folder above it; a folder beside it is mounted
    assert "every user's folder" in refusal(alice, tree)
    assert alice.resolve(str(tree / "datasets"), "/mnt/d").read_only


def acl(*entries: tuple[int, int, int]) -> bytes:
    """A POSIX access ACL as the kernel stores it (system.posix_acl_access)."""
    return struct.pack("<I", 2) + b"".join(struct.pack("<HHI", *entry) for entry in entries)


NO_ID = 0xFFFFFFFF
RUNUSER = shutil.which("runuser") or "/usr/sbin/runuser"


@needs_accounts
def test_an_acl_decides_over_the_mode_bits(tree: Path, view_of: ViewOf) -> None:
    # Given a folder readable by all by its mode, whose ACL gives alice nothing
    alice_uid = pwd.getpwnam(ALICE).pw_uid
    denied = make(tree / "datasets" / "denied", "root", 0o755)
    try:
        os.setxattr(
            denied,
            "system.posix_acl_access",
            acl(
                (1, 7, NO_ID), (2, 0, alice_uid), (4, 5, NO_ID), (0x10, 5, NO_ID), (0x20, 5, NO_ID)
            ),
        )
    except OSError as exc:
        pytest.skip(f"this file system keeps no ACLs: {exc}")
    # And bob's private folder whose ACL lets alice read it
    private = tree / "datasets" / "private"
    os.setxattr(
        private,
        "system.posix_acl_access",
        acl((1, 7, NO_ID), (2, 5, alice_uid), (4, 0, NO_ID), (0x10, 5, NO_ID), (0x20, 0, NO_ID)),
    )
    alice = policy_of(view_of, ALICE, [str(tree / "datasets")])
    # Then what the kernel decides for alice is what the mount check decides
    for folder, readable in ((denied, False), (private, True)):
        result = subprocess.run(
            [RUNUSER, "-u", ALICE, "--", "ls", str(folder)], check=False, capture_output=True
        )
        assert (result.returncode == 0) is readable
    assert f"{ALICE} may not read {denied}" in refusal(alice, denied)
    assert alice.resolve(str(private), "/mnt/p").read_only


@needs_accounts
def test_a_user_without_an_account_here_gets_what_everyone_may(tree: Path, view_of: ViewOf) -> None:
    # Given a Hub user who has no account on the service's machine
    carol = policy_of(view_of, "carol-no-account", [str(tree / "datasets")])
    # Then folders everyone may read are mounted, and no other
    assert carol.resolve(str(tree / "datasets" / "public"), "/mnt/p").read_only
    assert "carol-no-account may not read" in refusal(carol, tree / "datasets" / "private")


# -- what needs no other account ------------------------------------------------------------


def test_a_remote_hosts_folders_are_not_mounted_for_a_shared_services_user(
    view_of: ViewOf,
) -> None:
    # Given a user's view and a remote host whose folders the administrator allowed
    policy = policy_of(view_of, "alice", [])

    def run(argv: list[str], timeout: float) -> subprocess.CompletedProcess[str]:
        out = argv[-1] + "\n" if argv[0] == "realpath" else ""
        return subprocess.CompletedProcess(argv, 0, out, "")

    paths = RemotePaths(run, "host 'gpu1'")
    trait = "c.HostPool.hosts['gpu1']['mount_roots']"
    # When an environment mounts one of them
    with pytest.raises(MountNotAllowed) as caught:
        policy.resolve("/data/sets", "/mnt/x", True, site=(["/data"], paths, trait))
    # Then it is refused: the user's rights there cannot be checked
    assert "host 'gpu1'" in caught.value.message
    assert "rights" in caught.value.message
    # While the single-user mode's policy mounts it, as before
    single = MountPolicy().resolve("/data/sets", "/mnt/x", True, site=(["/data"], paths, trait))
    assert single.source == "/data/sets"


def test_user_in_a_root_is_the_servers_user_in_single_user_mode(tmp_path: Path) -> None:
    # Given a single-user server acting for alice, and a per-user root
    (tmp_path / "data" / "alice").mkdir(parents=True)
    (tmp_path / "data" / "bob").mkdir()
    config = Config()
    config.Access.user = "alice"
    config.MountPolicy.allowed_roots = [str(tmp_path / "data" / "{user}")]
    policy = MountPolicy(config=config)
    # Then the root is alice's folder
    assert [root.path for root in policy.roots()] == [str(tmp_path / "data" / "alice")]
    assert policy.resolve(str(tmp_path / "data" / "alice"), "/mnt/x").read_only
    # And bob's is outside it
    with pytest.raises(MountNotAllowed, match="outside the folders"):
        policy.resolve(str(tmp_path / "data" / "bob"), "/mnt/x")


@pytest.mark.parametrize("name", ["..", "a/b", ".", ""])
def test_a_user_name_that_cannot_name_a_folder_is_refused(name: str) -> None:
    config = Config()
    config.Access.user = name
    config.MountPolicy.allowed_roots = ["/data/{user}"]
    with pytest.raises(ConfigError, match=r"c\.MountPolicy\.allowed_roots\[0\]: \{user\}"):
        MountPolicy(config=config).roots()


@needs_accounts
def test_single_user_mode_checks_no_ones_rights(tree: Path) -> None:
    # Given a single-user server's policy (nothing changes there: its user runs the engine)
    policy = MountPolicy(allowed_roots=[str(tree / "data")])
    # Then bob's private folder and alice's project folder are mounted as before
    assert policy.resolve(str(tree / "data" / BOB), "/mnt/b").source == str(tree / "data" / BOB)
    assert policy.resolve(str(tree / "data" / ALICE / "project"), "/mnt/p").read_only


# -- folders on the way that an owner could open again, or another user could swap ----------


def as_user(name: str, *argv: str) -> subprocess.CompletedProcess[str]:
    """``argv`` run as the account ``name`` (its own uid and groups)."""
    return subprocess.run(
        [RUNUSER, "-u", name, "--", *argv], check=False, capture_output=True, text=True
    )


@needs_accounts
def test_a_folder_the_caller_owns_on_the_way_is_one_they_could_swap_whatever_its_mode(
    tree: Path, view_of: ViewOf
) -> None:
    # Given alice's folder and a folder in it, both hers with their write bits off (0555)
    mine = tree / "data" / ALICE
    inner = make(mine / "a", ALICE, 0o755)
    pub = make(inner / "pub", ALICE, 0o755)
    mine.chmod(0o555)
    inner.chmod(0o555)
    alice = policy_of(view_of, ALICE, [str(tree / "data" / "{user}")])
    # When she mounts the folder inside them
    message = refusal(alice, pub)
    # Then it is refused: she owns the folders, so she may turn their write bits on again and
    # swap a part for a link by the time the engine mounts it again (at a resume)
    assert f"{ALICE} may rename or replace {inner} (they own {mine})" in message
    # As the kernel agrees: she turns the bit on and renames the part
    assert as_user(ALICE, "chmod", "755", str(mine)).returncode == 0
    assert as_user(ALICE, "mv", str(inner), str(mine / "moved")).returncode == 0


@needs_accounts
def test_a_folder_another_user_owns_on_the_way_is_refused(tree: Path, view_of: ViewOf) -> None:
    # Given a root shared by everyone, holding bob's folder (0755), and a folder of root's in it
    # that everyone may read
    public = tree / "datasets" / "public"
    shared = make(public / "shared", "root", 0o755)
    roots = [str(tree / "datasets")]
    alice = policy_of(view_of, ALICE, roots)
    # When alice mounts that folder
    message = refusal(alice, shared)
    # Then it is refused: bob could swap it for a link (to a folder only alice may not read,
    # or one that only root may), whoever owns the folder itself
    assert f"{BOB} may rename or replace {shared} (they own {public})" in message
    assert as_user(BOB, "mv", str(shared), str(public / "moved")).returncode == 0
    # And bob's own view refuses it too: he owns the folder above it
    (public / "moved").rename(shared)
    assert f"{BOB} may rename or replace {shared}" in refusal(
        policy_of(view_of, BOB, roots), shared
    )


@needs_accounts
def test_a_folder_others_may_write_on_the_way_is_refused(tree: Path, view_of: ViewOf) -> None:
    # Given, in a root shared by everyone, a folder of root's that bob's group may write, one
    # that everyone may write, and a sticky one (1777), each holding a folder of root's
    bobs_group = pwd.getpwnam(BOB).pw_gid
    team = make(tree / "datasets" / "team", "root", 0o775)
    os.chown(team, 0, bobs_group)
    open_ = make(tree / "datasets" / "open", "root", 0o777)
    sticky = make(tree / "datasets" / "sticky", "root", 0o1777)
    for folder in (team, open_, sticky):
        make(folder / "x", "root", 0o755)
    # And, in the sticky one, a folder of bob's
    make(sticky / "bobs", BOB, 0o755)
    alice = policy_of(view_of, ALICE, [str(tree / "datasets")])
    # Then what bob's group may rename is refused, naming him
    assert f"{BOB} may rename or replace {team / 'x'} (they may write {team})" in refusal(
        alice, team / "x"
    )
    # And what everyone may rename
    assert f"may rename or replace {open_ / 'x'}" in refusal(alice, open_ / "x")
    # And bob's folder in the sticky one, which he may rename there
    assert f"{BOB} may rename or replace {sticky / 'bobs'}" in refusal(alice, sticky / "bobs")
    # While root's folder in the sticky one, which only root may rename, is mounted
    assert alice.resolve(str(sticky / "x"), "/mnt/x").source == str(sticky / "x")


# -- a stopped container's mounts, checked again before it starts again -----------------------


@needs_accounts
def test_a_stopped_containers_mounts_are_checked_again_with_its_owners_rights(
    tree: Path, view_of: ViewOf
) -> None:
    # Given alice's mount of her folder, checked when her container was made
    mine = tree / "data" / ALICE
    roots: list[Any] = [{"path": str(tree / "data" / "{user}"), "writable": True}]
    alice = policy_of(view_of, ALICE, roots)
    mount = alice.resolve(str(mine), "/mnt/mine", read_only=False)
    state = ("/nonexistent/state",)
    # Then, nothing changed, it passes again, for her and for an administrator acting for her
    alice.check_again(ALICE, [mount], state=state)
    policy_of(view_of, "gpudev-admin-view", roots).check_again(ALICE, [mount], state=state)
    # And a folder of the workspace's, or one outside every root (the CA bundle, the driver's
    # files), is not a declared mount: it is not checked
    alice.check_again(ALICE, [ResolvedMount("/usr/lib", "/usr/lib/x", True)], skip=(), state=state)
    # When her folder is a link by the time the container starts again (to bob's)
    mine.rename(tree / "data" / "moved")
    mine.symlink_to(tree / "data" / BOB)
    # Then it is refused, naming the mount and why, for her and for an administrator
    for policy in (alice, policy_of(view_of, "gpudev-admin-view", roots)):
        with pytest.raises(MountNotAllowed) as caught:
            policy.check_again(ALICE, [mount], state=state)
        assert caught.value.status == 403
        assert f"mount of {mine} at /mnt/mine" in caught.value.message
        assert f"{mine} is a link now" in caught.value.message
    # When it is a folder again, but one she owns the parent of (she could swap it again)
    mine.unlink()
    (tree / "data" / "moved").rename(mine)
    os.chown(tree / "data", pwd.getpwnam(ALICE).pw_uid, 0)
    with pytest.raises(MountNotAllowed, match=f"{ALICE} may rename or replace {mine}"):
        alice.check_again(ALICE, [mount], state=state)
    # And a mount she may no longer write (bob's now) is refused as writable
    os.chown(tree / "data", 0, 0)
    os.chown(mine, pwd.getpwnam(BOB).pw_uid, 0)
    mine.chmod(0o755)
    with pytest.raises(MountNotAllowed, match=f"{ALICE} may not write"):
        alice.check_again(ALICE, [mount], state=state)
    alice.check_again(ALICE, [replace(mount, read_only=True)], state=state)


@needs_accounts
def test_a_folder_a_group_without_listed_members_may_write_is_refused(
    tree: Path, view_of: ViewOf
) -> None:
    # Given, in a root shared by everyone, a folder of root's that a group may write whose
    # members this machine cannot list (a directory service without enumeration: no account
    # here names it), holding a folder of root's
    unlisted = 54_321
    assert all(account.pw_gid != unlisted for account in pwd.getpwall())
    team = make(tree / "datasets" / "team", "root", 0o775)
    os.chown(team, 0, unlisted)
    make(team / "x", "root", 0o755)
    alice = policy_of(view_of, ALICE, [str(tree / "datasets")])
    # Then it is refused: any member could rename it
    assert f"members of group {unlisted} may rename or replace {team / 'x'}" in refusal(
        alice, team / "x"
    )
