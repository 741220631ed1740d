"""Users and groups, read as data from ``/etc/passwd`` and ``/etc/group`` and compared.

A ``useradd`` in a dev container rewrites the account files (``passwd``, ``shadow``, ``group``,
``gshadow``, ``subuid``, ``subgid`` and their ``-`` backups). Copying them into an image would
carry password hashes into the build context and overwrite the base image's own accounts
wholesale (wrong as soon as the base changes). So the account files are never kept: the users
and groups the container added, removed or changed are rendered as ``groupadd``, ``useradd``,
``usermod``, ``userdel`` and ``groupdel`` lines instead (no password: a rebuilt account is
locked, as ``useradd`` makes it). Everything read is hostile: an entry whose name, id, home or
shell is not one is skipped and reported.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from . import names

#: The files ``useradd``/``groupadd`` write: left out of every commit (rendered as lines).
ACCOUNT_FILES = frozenset(
    f"/etc/{name}{suffix}"
    for name in ("passwd", "shadow", "group", "gshadow", "subuid", "subgid")
    for suffix in ("", "-")
) | {"/etc/.pwd.lock"}
PASSWD, GROUP = "/etc/passwd", "/etc/group"
#: The most an account file may weigh to be read.
ACCOUNTS_LIMIT = 4 << 20

NAME, ID, PATH = names.ACCOUNT_NAME, names.ACCOUNT_ID, names.ACCOUNT_PATH
MAX_ID = (1 << 31) - 1


@dataclass(frozen=True)
class User:
    uid: int
    gid: int
    home: str
    shell: str


@dataclass(frozen=True)
class Group:
    gid: int
    members: tuple[str, ...] = ()


@dataclass(frozen=True)
class Accounts:
    users: Mapping[str, User] = field(default_factory=dict)
    groups: Mapping[str, Group] = field(default_factory=dict)

    def groups_of(self, user: str) -> tuple[str, ...]:
        """The groups ``user`` is a listed member of (supplementary groups), sorted."""
        return tuple(sorted(g for g, group in self.groups.items() if user in group.members))

    def to_json(self) -> dict[str, Any]:
        return {
            "users": {n: [u.uid, u.gid, u.home, u.shell] for n, u in sorted(self.users.items())},
            "groups": {n: [g.gid, list(g.members)] for n, g in sorted(self.groups.items())},
        }

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> Accounts:
        return cls(
            users={
                n: User(int(u[0]), int(u[1]), str(u[2]), str(u[3]))
                for n, u in data["users"].items()
            },
            groups={n: Group(int(g[0]), tuple(g[1])) for n, g in data["groups"].items()},
        )


def _id(text: str) -> int | None:
    return int(text) if ID.fullmatch(text) and int(text) <= MAX_ID else None


def parse_accounts(passwd: str, group: str, problems: list[str]) -> Accounts:
    """The users of a ``passwd`` text and the groups of a ``group`` text; a bad entry is
    skipped and named in ``problems``."""
    users: dict[str, User] = {}
    for line in passwd.split("\n"):
        if not line.strip() or line.startswith("#"):
            continue
        fields = line.split(":")
        uid, gid = (_id(fields[2]), _id(fields[3])) if len(fields) == 7 else (None, None)
        if (
            uid is None
            or gid is None
            or not NAME.fullmatch(fields[0])
            or not PATH.fullmatch(fields[5])
            or not PATH.fullmatch(fields[6])
        ):
            problems.append(f"{PASSWD}: an entry skipped ({line.split(':', 1)[0][:40]!r})")
            continue
        users.setdefault(fields[0], User(uid, gid, fields[5], fields[6]))
    groups: dict[str, Group] = {}
    for line in group.split("\n"):
        if not line.strip() or line.startswith("#"):
            continue
        fields = line.split(":")
        gid = _id(fields[2]) if len(fields) == 4 else None
        members = tuple(m for m in fields[3].split(",") if m) if len(fields) == 4 else ()
        if gid is None or not NAME.fullmatch(fields[0]) or not all(map(NAME.fullmatch, members)):
            problems.append(f"{GROUP}: an entry skipped ({line.split(':', 1)[0][:40]!r})")
            continue
        groups.setdefault(fields[0], Group(gid, tuple(sorted(set(members)))))
    return Accounts(users, groups)


@dataclass
class AccountChanges:
    """Users and groups added, changed and removed since the baseline."""

    groups_added: list[tuple[str, Group]] = field(default_factory=list)
    users_added: list[tuple[str, User, tuple[str, ...]]] = field(default_factory=list)
    #: Users of the baseline whose home, shell or groups changed: name, user, groups joined.
    users_changed: list[tuple[str, User, tuple[str, ...]]] = field(default_factory=list)
    users_removed: list[str] = field(default_factory=list)
    groups_removed: list[str] = field(default_factory=list)

    def __bool__(self) -> bool:
        return bool(
            self.groups_added
            or self.users_added
            or self.users_changed
            or self.users_removed
            or self.groups_removed
        )

    def to_json(self) -> dict[str, Any]:
        return {
            "groups_added": [{"name": n, "gid": g.gid} for n, g in self.groups_added],
            "users_added": [
                {
                    "name": n,
                    "uid": u.uid,
                    "gid": u.gid,
                    "home": u.home,
                    "shell": u.shell,
                    "groups": list(groups),
                }
                for n, u, groups in self.users_added
            ],
            "users_changed": [
                {"name": n, "home": u.home, "shell": u.shell, "joined": list(joined)}
                for n, u, joined in self.users_changed
            ],
            "users_removed": list(self.users_removed),
            "groups_removed": list(self.groups_removed),
        }

    def without(self, excluded: set[str] | frozenset[str]) -> AccountChanges:
        return AccountChanges(
            [(n, g) for n, g in self.groups_added if group_id(n) not in excluded],
            [(n, u, gs) for n, u, gs in self.users_added if user_id(n) not in excluded],
            [(n, u, gs) for n, u, gs in self.users_changed if user_id(n) not in excluded],
            [n for n in self.users_removed if user_id(n) not in excluded],
            [n for n in self.groups_removed if group_id(n) not in excluded],
        )


def user_id(name: str) -> str:
    return f"user:{name}"


def group_id(name: str) -> str:
    return f"group:{name}"


def account_changes(before: Accounts | None, now: Accounts | None) -> AccountChanges:
    """What changed from ``before`` to ``now`` (nothing when either is unknown)."""
    changes = AccountChanges()
    if before is None or now is None:
        return changes
    for name in sorted(set(now.groups) - set(before.groups)):
        changes.groups_added.append((name, now.groups[name]))
    for name in sorted(set(now.users) - set(before.users)):
        changes.users_added.append((name, now.users[name], now.groups_of(name)))
    for name in sorted(set(now.users) & set(before.users)):
        was, user = before.users[name], now.users[name]
        joined = tuple(g for g in now.groups_of(name) if g not in before.groups_of(name))
        if (was.home, was.shell) != (user.home, user.shell) or joined:
            changes.users_changed.append((name, user, joined))
    changes.users_removed = sorted(set(before.users) - set(now.users))
    changes.groups_removed = sorted(set(before.groups) - set(now.groups))
    return changes


def reverted(before: Accounts | None, now: Accounts | None, excluded: set[str]) -> Accounts | None:
    """``now`` with the excluded users and groups as ``before`` had them."""
    if before is None or now is None or not excluded:
        return now
    users, groups = dict(now.users), dict(now.groups)
    for kind, mine, theirs in (("user", users, before.users), ("group", groups, before.groups)):
        for name in set(mine) | set(theirs):
            if f"{kind}:{name}" in excluded:
                mine.pop(name, None)
                if name in theirs:
                    mine[name] = theirs[name]  # type: ignore[assignment]
    return Accounts(users, groups)


def describe(accounts: Accounts | None) -> dict[str, str]:
    """Each user and group in words, for comparing a container with a rebuild."""
    if accounts is None:
        return {}
    out = {}
    for name, user in accounts.users.items():
        groups = ",".join(accounts.groups_of(name))
        text = f"uid {user.uid} gid {user.gid} home {user.home} shell {user.shell}"
        out[f"user {name}"] = text + (f" groups {groups}" if groups else "")
    out.update({f"group {n}": f"gid {g.gid}" for n, g in accounts.groups.items()})
    return out
