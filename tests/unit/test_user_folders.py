"""Users' folders in shared mode (``shared/folders.py``): a layout no user can redirect."""

from __future__ import annotations

import os
import pwd
import stat
from pathlib import Path

import pytest

from jupyter_gpudev.errors import ConfigError, Forbidden
from jupyter_gpudev.shared.folders import Layout, UserFolders

ME = pwd.getpwuid(os.getuid())


@pytest.mark.parametrize(
    ("template", "parent", "leaf"),
    [
        ("/srv/gpudev/users/{user}", "/srv/gpudev/users", "{user}"),
        ("/data/{user}-work", "/data", "{user}-work"),
        ("{home}", None, "{home}"),
    ],
)
def test_a_layout_names_the_folder_above_users_and_their_folder(
    template: str, parent: str | None, leaf: str
) -> None:
    assert Layout.parse(template) == Layout(template, parent, leaf)


@pytest.mark.parametrize(
    ("template", "says"),
    [
        ("{home}/projects", "users can write their home folder"),
        ("/srv/{user}/projects", "only the last folder may name the user"),
        ("/srv/projects", "must contain {user}"),
        ("/srv/{user}{home}", "users can write their home folder"),
        ("/srv/{user}-{x}", "no other placeholder"),
        ("projects/{user}", "absolute"),
        ("/srv/../etc/{user}", "plain path"),
        ("/srv//{user}", "plain path"),
    ],
)
def test_a_layout_that_users_could_redirect_is_refused(template: str, says: str) -> None:
    with pytest.raises(ConfigError, match=says.replace("{", r"\{").replace("}", r"\}")):
        Layout.parse(template)


def test_the_folders_above_users_are_made_writable_by_their_owner_only(tmp_path: Path) -> None:
    # Given a layout whose folders above users' do not exist yet
    folders = UserFolders(str(tmp_path / "gpudev" / "users" / "{user}"))
    # When the service starts
    folders.check()
    # Then they exist, the service's, mode 0755
    made = tmp_path / "gpudev" / "users"
    assert stat.S_IMODE(made.stat().st_mode) == 0o755
    assert made.stat().st_uid == os.geteuid()


@pytest.mark.parametrize("mode", [0o775, 0o757, 0o1777])
def test_a_folder_above_users_that_others_can_write_is_refused(tmp_path: Path, mode: int) -> None:
    users = tmp_path / "users"
    users.mkdir()
    users.chmod(mode)
    with pytest.raises(ConfigError, match="writable by its group or by everyone"):
        UserFolders(str(users / "{user}")).check()


def test_a_sticky_folder_further_up_is_allowed(tmp_path: Path) -> None:
    # (/tmp: only an entry's owner may rename it, and the folders below are the service's)
    shared = tmp_path / "tmp"
    shared.mkdir()
    shared.chmod(0o1777)
    UserFolders(str(shared / "gpudev" / "{user}")).check()


def test_a_folder_above_users_owned_by_another_account_is_refused(tmp_path: Path) -> None:
    users = tmp_path / "users"
    users.mkdir()
    os.chown(users, 65534, 65534)
    with pytest.raises(ConfigError, match="belongs to uid 65534"):
        UserFolders(str(users / "{user}")).check()


def test_a_link_on_the_way_is_refused(tmp_path: Path) -> None:
    (tmp_path / "real").mkdir()
    (tmp_path / "link").symlink_to(tmp_path / "real")
    with pytest.raises(ConfigError, match="link"):
        UserFolders(str(tmp_path / "link" / "{user}")).check()


def test_a_users_folder_is_made_theirs_and_private(tmp_path: Path) -> None:
    # Given the layout and a user with an account here
    alice = pwd.getpwnam("gpudev-alice") if _has("gpudev-alice") else ME
    folders = UserFolders(str(tmp_path / "users" / "{user}"))
    folders.check()
    # When their folder is asked for the first time
    path = folders.folder_of(alice.pw_name, alice)
    # Then it is made, theirs, mode 0700; asked again, it is the same
    info = path.stat()
    assert (info.st_uid, info.st_gid) == (alice.pw_uid, alice.pw_gid)
    assert stat.S_IMODE(info.st_mode) == 0o700
    assert folders.folder_of(alice.pw_name, alice) == path == tmp_path / "users" / alice.pw_name


def test_a_user_without_an_account_gets_a_folder_of_the_services(tmp_path: Path) -> None:
    folders = UserFolders(str(tmp_path / "users" / "{user}"))
    folders.check()
    path = folders.folder_of("carol", None)
    assert path.stat().st_uid == os.geteuid()


def test_a_users_folder_that_became_a_link_is_refused(tmp_path: Path) -> None:
    # Given alice's folder replaced with a link to a folder of hers elsewhere
    folders = UserFolders(str(tmp_path / "users" / "{user}"))
    folders.check()
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    (tmp_path / "users" / "alice").symlink_to(elsewhere)
    # When it is asked for, then it is refused, saying so
    with pytest.raises(Forbidden, match="is a link or not a folder"):
        folders.folder_of("alice", None)


def test_a_users_folder_owned_by_another_account_is_refused(tmp_path: Path) -> None:
    folders = UserFolders(str(tmp_path / "users" / "{user}"))
    folders.check()
    taken = tmp_path / "users" / "alice"
    taken.mkdir()
    os.chown(taken, 65534, 65534)
    with pytest.raises(Forbidden, match="belongs to another account"):
        folders.folder_of("alice", None)


def test_a_folder_above_users_made_writable_later_is_refused_at_the_next_request(
    tmp_path: Path,
) -> None:
    folders = UserFolders(str(tmp_path / "users" / "{user}"))
    folders.check()
    (tmp_path / "users").chmod(0o777)
    with pytest.raises(Forbidden, match="writable by its group or by everyone"):
        folders.folder_of("alice", None)


def test_a_home_layout_checks_the_homes_parent(tmp_path: Path) -> None:
    # Given {home}, and a user whose home's parent anyone may write
    homes = tmp_path / "homes"
    homes.mkdir()
    homes.chmod(0o777)
    (homes / "dave").mkdir()
    dave = pwd.struct_passwd(("dave", "x", os.geteuid(), 0, "", str(homes / "dave"), "/bin/sh"))
    folders = UserFolders("{home}")
    folders.check()
    with pytest.raises(Forbidden, match="writable by its group or by everyone"):
        folders.folder_of("dave", dave)
    homes.chmod(0o755)
    assert folders.folder_of("dave", dave) == homes / "dave"
    with pytest.raises(Forbidden, match="no account"):
        folders.folder_of("erin", None)


def _has(name: str) -> bool:
    try:
        pwd.getpwnam(name)
    except KeyError:
        return False
    return True
