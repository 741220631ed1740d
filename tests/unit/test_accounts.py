"""Users and groups: read from account files as hostile data, compared, rendered as lines, left
out by id, and their homes' files given back to them after a copy."""

from __future__ import annotations

import json
from pathlib import Path

from jupyter_gpudev.changes import accounts as user_accounts
from jupyter_gpudev.changes import classify, compare, dockerfile, model, packages
from jupyter_gpudev.changes.baselines import Baselines
from tests.unit.test_packages import diff, reader

USERS_TEXT = """root:x:0:0:root:/root:/bin/bash
daemon:x:1:1:daemon:/usr/sbin:/usr/sbin/nologin
jovyan:x:1000:100::/home/jovyan:/bin/bash
"""
GROUP = """root:x:0:
users:x:100:
sudo:x:27:
"""
NOW_USERS = USERS_TEXT.replace("/home/jovyan:/bin/bash", "/home/jovyan:/bin/zsh") + (
    "someone:x:1001:1001:Some One,,,:/home/someone:/bin/bash\n"
    "evil;rm -rf /:x:5:5::/tmp:/bin/sh\n"
    "bad:x:6:6::relative/home:/bin/sh\n"
    "toolong:x:99999999999:6::/home/x:/bin/sh\n"
)
NOW_GROUPS = GROUP.replace("sudo:x:27:", "sudo:x:27:jovyan") + (
    "someone:x:1001:\nteam:x:2345:someone,jovyan\nweird:x:9:a b\n"
)


def base() -> model.PackageState:
    return model.PackageState(accounts=user_accounts.parse_accounts(USERS_TEXT, GROUP, []))


def test_account_files_are_read_as_data_and_bad_entries_skipped() -> None:
    problems: list[str] = []
    accounts = user_accounts.parse_accounts(NOW_USERS, NOW_GROUPS, problems)
    assert accounts.users["someone"] == user_accounts.User(1001, 1001, "/home/someone", "/bin/bash")
    assert set(accounts.users) == {"root", "daemon", "jovyan", "someone"}
    assert accounts.groups_of("jovyan") == ("sudo", "team")
    assert problems == [
        "/etc/passwd: an entry skipped ('evil;rm -rf /')",
        "/etc/passwd: an entry skipped ('bad')",
        "/etc/passwd: an entry skipped ('toolong')",
        "/etc/group: an entry skipped ('weird')",
    ]
    assert user_accounts.Accounts.from_json(json.loads(json.dumps(accounts.to_json()))) == accounts


def test_users_and_groups_are_lines_and_account_files_are_never_kept() -> None:
    # Given a container that added a user and a group, changed a shell and joined groups
    files = {"/etc/passwd": NOW_USERS, "/etc/group": NOW_GROUPS}
    entries = diff(*((path, packages.CHANGED) for path in sorted(user_accounts.ACCOUNT_FILES)))
    state = packages.current_state(base(), entries, reader(files)).result.state
    changes = compare.package_changes(base(), state)
    # Then the account files are left out, and the changes are lines, groups first
    kept = classify.file_changes(entries, [], set())
    assert kept.kept == []
    assert kept.ignored == {classify.ACCOUNTS: len(user_accounts.ACCOUNT_FILES)}
    lines = dockerfile.change_lines(changes, "box", "env", "ctx", None)[0]
    assert lines[1:] == [
        "RUN (getent group someone >/dev/null || groupadd --gid 1001 someone) \\\n"
        " && (getent group team >/dev/null || groupadd --gid 2345 team) \\\n"
        " && (id -u someone >/dev/null 2>&1 || useradd --no-log-init --uid 1001 --gid 1001 "
        "--home-dir /home/someone --shell /bin/bash --create-home --groups team someone) \\\n"
        " && usermod --home /home/jovyan --shell /bin/zsh --append --groups sudo,team jovyan"
    ]
    ids = [item.id for item in dockerfile.change_items(changes)]
    assert ids == ["group:someone", "group:team", "user:someone", "user:jovyan"]
    # And a user or group can be left out by its id
    assert model.check_change_ids(["user:someone", "group:team"]) == ("user:someone", "group:team")
    left = changes.without({"user:someone", "group:someone"})
    assert [n for n, *_ in left.accounts.users_added] == []
    assert [n for n, _ in left.accounts.groups_added] == ["team"]
    reverted = compare.revert_excluded(base(), state, {"user:someone"})
    assert reverted.accounts is not None
    assert "someone" not in reverted.accounts.users


def test_removed_users_and_groups_are_deleted_and_an_unknown_baseline_shows_nothing() -> None:
    now = model.PackageState(
        accounts=user_accounts.parse_accounts(USERS_TEXT.replace("jovyan", "x1"), "", [])
    )
    changes = compare.package_changes(base(), now)
    assert changes.accounts.users_removed == ["jovyan"]
    assert changes.accounts.groups_removed == ["root", "sudo", "users"]
    assert not compare.package_changes(model.PackageState(), now).accounts  # baseline not known


def test_a_rebuild_is_compared_with_the_container_user_by_user() -> None:
    container = base()
    rebuilt = model.PackageState(
        accounts=user_accounts.parse_accounts(USERS_TEXT.replace(":100:", ":101:"), GROUP, [])
    )
    assert compare.package_differences(container, rebuilt) == [
        "account user jovyan: uid 1000 gid 100 home /home/jovyan shell /bin/bash in the "
        "container, uid 1000 gid 101 home /home/jovyan shell /bin/bash in the rebuild"
    ]


def test_files_in_a_users_home_are_given_back_to_them_after_the_copy() -> None:
    accounts = user_accounts.parse_accounts(NOW_USERS, NOW_GROUPS, [])
    kept = ["/home/someone/notes.txt", "/home/someone/.config/app/x.toml", "/etc/motd", "/root/.x"]
    owners = classify.home_owners(kept, accounts)
    assert owners == dict.fromkeys(
        [
            "/home/someone",
            "/home/someone/notes.txt",
            "/home/someone/.config",
            "/home/someone/.config/app",
            "/home/someone/.config/app/x.toml",
        ],
        "1001:1001",
    )
    changes = model.ChangeSet(files=model.FileChanges(kept=kept, owners=owners))
    lines = dockerfile.change_lines(changes, "box", "env", "ctx", None)[0]
    assert lines[-1] == (
        'RUN ["chown", "-h", "1001:1001", "--", "/home/someone", "/home/someone/.config", '
        '"/home/someone/.config/app", "/home/someone/.config/app/x.toml", '
        '"/home/someone/notes.txt"]'
    )
    # (a file left out is not chowned, nor the folders only it needed)
    left = changes.without({"file:/home/someone/.config/app/x.toml"})
    assert set(left.files.owners) == {"/home/someone", "/home/someone/notes.txt"}


def test_an_image_probed_before_accounts_were_read_is_probed_again(tmp_path: Path) -> None:
    baselines = Baselines(tmp_path)
    baselines.save_image("sha256:" + "a" * 64, model.PackageState(dpkg={"x": "1"}))
    assert baselines.image("sha256:" + "a" * 64) is None
    baselines.save_image("sha256:" + "a" * 64, base())
    assert baselines.image("sha256:" + "a" * 64) == base()
