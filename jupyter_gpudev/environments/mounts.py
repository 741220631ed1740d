"""Mount policy: which host folders a dev container sees, where, and whether it may write.

The Jupyter root directory is always mounted read-write as the workspace. Any other host
folder must lie inside one of ``c.MountPolicy.allowed_roots`` (none by default), and is
read-only unless its root is marked writable.

Paths are compared after following symbolic links, by whole path components (``/data-secret``
is not inside ``/data``), and the resolved path is what Docker receives: a link inside an
allowed root that points elsewhere is refused, and replacing that link afterwards does not
change what was mounted. (Someone who can write inside an allowed root can still swap a folder
for a link between the check and the container's creation; only trusted roots should be
writable.)

In the shared service (``caller`` set: one service mounts for every user, as root), a mount is
also checked with the caller's rights on this machine, as the kernel would decide them (their
uid, primary and supplementary groups against the mode bits, or the access ACL, of the source
and of every folder on the way to it): they must be able to search every folder above it and
read it (and write it, for a writable mount); a mount that does not say becomes read-only
where they may not write. A source with a part that anyone but root and the service's own
account could rename is refused: the caller (they own its parent, whatever its mode, which
they may change back; or they may write it, and it is not a sticky folder that keeps the
part), the parent's owner, or another account that may write the parent (a member of a group
it lets write, a named user of its ACL, every user; in a sticky folder, the part's owner).
The engine finds a bind mount's source by its path again at every start and resume, so they
could swap that part for a link to any folder (as ``shared.folders`` lays out users' folders
so that no user can); so a stopped container's mounts are checked again, with its owner's
rights, before it starts again (``check_again``). Each part is read without following links,
and one that is a link by then is refused: the path checked is the resolved path the engine
gets. The check covers the source and the way to
it, not its contents: a dev container running as root (``c.DevContainers.allow_root``, a
single-user server's) reads everything inside a mount whatever its files' modes, so an allowed
root without ``{user}`` should hold only what every user may read, and a mount holding every
user's folder of a ``{user}`` root is refused. A remote host's
folders are not mounted for a shared service's user (their rights there cannot be checked).

Mounts carry no ``nosuid``: Engine 20.10 takes none on a bind mount (nor through a ``local``
volume's ``o=bind,nosuid``, measured: the container's mount had no ``nosuid``), and it would not
help the host anyway, where a setuid bit is part of the file. Root in a container cannot set one
at all: ``jupyter_gpudev.seccomp`` refuses setuid and setgid modes, and ``no-new-privileges``
makes any that exist useless inside the container.
"""

from __future__ import annotations

import contextlib
import errno
import grp
import os
import posixpath
import pwd
import stat
import struct
import subprocess
from collections.abc import Callable, Mapping, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import docker.types
from jupyter_core.paths import jupyter_config_dir, jupyter_data_dir, jupyter_runtime_dir
from traitlets import Bool, Dict, List, Unicode, default
from traitlets import Union as UnionTrait
from traitlets.config import LoggingConfigurable

from ..access import Access
from ..engine.buildkit import BUNDLE_LIMIT, BuildTrust
from ..errors import BadRequest, ConfigError, GPUDevError
from .model import DeclaredMount

#: Container paths nothing may be mounted over (nor under).
SYSTEM_TARGETS = (
    "/proc",
    "/sys",
    "/dev",
    "/etc",
    "/usr",
    "/bin",
    "/sbin",
    "/lib",
    "/lib64",
    "/boot",
    "/run",
    "/var/run",  # where a runtime may read the GPU list from mounts (NVIDIA's volume-mounts mode)
)
#: Variables that make pip, requests, OpenSSL, curl, conda, Node.js and git trust a CA bundle.
CA_BUNDLE_ENV_VARS = (
    "PIP_CERT",
    "REQUESTS_CA_BUNDLE",
    "SSL_CERT_FILE",
    "CURL_CA_BUNDLE",
    "CONDA_SSL_VERIFY",
    "NODE_EXTRA_CA_CERTS",
    "GIT_SSL_CAINFO",
    "CARGO_HTTP_CAINFO",
)
ROOTS_TRAIT = "c.MountPolicy.allowed_roots"
#: What an allowed root names the caller's name with (shared mode), or the server's user.
USER = "{user}"


class MountNotAllowed(GPUDevError):
    """A mount the policy refuses: outside the allowed roots, over a system path, or writable
    where the root is read-only."""

    status = 403
    exit_code = 2
    code = "mount_not_allowed"


@dataclass(frozen=True)
class ResolvedMount:
    """A checked bind mount: ``source`` is the host path with every link resolved."""

    source: str
    target: str
    read_only: bool

    def to_docker(self) -> docker.types.Mount:
        return docker.types.Mount(
            target=self.target, source=self.source, type="bind", read_only=self.read_only
        )

    def to_json(self) -> dict[str, Any]:
        return asdict(self)


@dataclass(frozen=True)
class AllowedRoot:
    """One entry of ``allowed_roots``: ``path`` as configured (``{user}`` replaced), ``real``
    with links resolved; ``users``: for a per-user root (``/data/{user}``), the folder holding
    every user's (``/data``), resolved, else ``""``."""

    path: str
    real: str
    writable: bool
    users: str = ""


_READ, _WRITE, _SEARCH = 4, 2, 1
_ACL_XATTR = "system.posix_acl_access"
_ACL_USER_OBJ, _ACL_USER, _ACL_GROUP_OBJ, _ACL_GROUP, _ACL_MASK, _ACL_OTHER = (
    0x01,
    0x02,
    0x04,
    0x08,
    0x10,
    0x20,
)


def _access_acl(path: str) -> list[tuple[int, int, int]] | None:
    """The access ACL of ``path`` (not followed) as (tag, permissions, id) entries, or ``None``
    for none (its mode bits decide). ``OSError``/``ValueError`` when it cannot be read."""
    try:
        raw = os.getxattr(path, _ACL_XATTR, follow_symlinks=False)
    except OSError as exc:
        if exc.errno in (errno.ENODATA, errno.ENOTSUP, errno.EOPNOTSUPP):
            return None
        raise
    if len(raw) < 4 or (len(raw) - 4) % 8 or struct.unpack_from("<I", raw)[0] != 2:
        raise ValueError(f"{path} has an access ACL of an unknown form")
    return [struct.unpack_from("<HHI", raw, offset) for offset in range(4, len(raw), 8)]


@dataclass(frozen=True)
class Rights:
    """What user ``name`` may do with this machine's files: their account's uid and groups
    (``uid`` ``None``: no account here, so only what everyone may)."""

    name: str
    uid: int | None
    groups: frozenset[int]

    @classmethod
    def of(cls, name: str) -> Rights:
        """``name``'s rights now (their account and groups looked up at each check)."""
        try:
            account = pwd.getpwnam(name)
        except KeyError:
            return cls(name, None, frozenset())
        return cls(name, account.pw_uid, frozenset(os.getgrouplist(name, account.pw_gid)))

    def may(self, path: str, info: os.stat_result, want: int) -> bool:
        """Whether they may ``want`` (read 4, write 2, search 1, or'ed) on ``path`` (``info``
        its ``lstat``), as the kernel decides: the ACL where it has one, else the mode bits."""
        if self.uid == 0:
            return True
        entries = _access_acl(path)
        if entries is None:
            if self.uid == info.st_uid:
                bits = info.st_mode >> 6
            elif info.st_gid in self.groups:
                bits = info.st_mode >> 3
            else:
                bits = info.st_mode
            return bits & want == want
        return self._acl_allows(entries, info, want)

    def _acl_allows(
        self, entries: list[tuple[int, int, int]], info: os.stat_result, want: int
    ) -> bool:
        """The kernel's ``posix_acl_permission``: owner, named user, groups (any matching
        entry that grants it, else refused), other; the mask bounds all but owner and other."""
        mask = next((perm for tag, perm, _ in entries if tag == _ACL_MASK), 7)
        by_tag = {tag: perm for tag, perm, _ in entries if tag in (_ACL_USER_OBJ, _ACL_OTHER)}
        if self.uid is not None and self.uid == info.st_uid:
            return by_tag.get(_ACL_USER_OBJ, 0) & want == want
        for tag, perm, ident in entries:
            if tag == _ACL_USER and ident == self.uid:
                return perm & mask & want == want
        in_group = False
        for tag, perm, ident in entries:
            if (tag == _ACL_GROUP_OBJ and info.st_gid in self.groups) or (
                tag == _ACL_GROUP and ident in self.groups
            ):
                if perm & mask & want == want:
                    return True
                in_group = True
        return not in_group and by_tag.get(_ACL_OTHER, 0) & want == want

    @classmethod
    def of_uid(cls, uid: int) -> Rights:
        """The rights of the account ``uid`` (named ``uid N`` where no account has it)."""
        try:
            account = pwd.getpwuid(uid)
        except KeyError:
            return cls(f"uid {uid}", uid, frozenset())
        groups = frozenset(os.getgrouplist(account.pw_name, account.pw_gid))
        return cls(account.pw_name, uid, groups)

    def could_replace(self, parent: str, above: os.stat_result, info: os.stat_result) -> bool:
        """Whether they could rename (and so replace) an entry (``info``) of the folder
        ``parent`` (``above``): they own it (whatever its mode or ACL, which they may change
        back), or they may write and search it and it is not a sticky folder that keeps the
        entries of others (``/tmp``) or the entry is theirs."""
        if self.uid is not None and self.uid == above.st_uid:
            return True
        if not self.may(parent, above, _WRITE | _SEARCH):
            return False
        sticky = bool(above.st_mode & stat.S_ISVTX)
        return not sticky or self.uid == info.st_uid


#: What says that everyone may replace a part (its folder is writable by all).
EVERYONE = "every user"


def _trusted_uids() -> frozenset[int]:
    """The accounts whose folders on the way to a mount are trusted not to swap a part of it:
    root and the service's own account (the one running it)."""
    return frozenset({0, os.geteuid()})


def _writers(parent: str, above: os.stat_result) -> tuple[set[int], set[int]]:
    """The groups and the named users an entry may give write on ``parent`` (``above``): its
    group (mode bits or ACL) and the ACL's named groups, and its named users; whether each of
    their accounts really may is for ``Rights.may`` to say."""
    entries = _access_acl(parent)
    gids: set[int] = set()
    uids: set[int] = set()
    if entries is None:
        if above.st_mode & (_WRITE << 3):
            gids.add(above.st_gid)
    else:
        for tag, perm, ident in entries:
            if not perm & _WRITE:
                continue
            if tag == _ACL_GROUP_OBJ:
                gids.add(above.st_gid)
            elif tag == _ACL_GROUP:
                gids.add(ident)
            elif tag == _ACL_USER:
                uids.add(ident)
    return gids, uids


def _members(gids: set[int]) -> set[int]:
    """The uids of the accounts in any of the groups ``gids`` (listed, or their own group)."""
    if not gids:
        return set()
    uids = {account.pw_uid for account in pwd.getpwall() if account.pw_gid in gids}
    for gid in gids:
        try:
            names = grp.getgrgid(gid).gr_mem
        except KeyError:
            continue
        for name in names:
            with contextlib.suppress(KeyError):
                uids.add(pwd.getpwnam(name).pw_uid)
    return uids


def replacer(
    rights: Rights, parent: str, above: os.stat_result, info: os.stat_result
) -> tuple[str, str] | None:
    """Who could rename (and so replace) the entry ``info`` of the folder ``parent``
    (``above``), and why, as (name, reason); ``None`` when only trusted accounts (root, the
    service's own) could. The caller first (``rights``); then the folder's owner, whatever its
    mode (they may change it back); then another account it lets write it (a group's member,
    a named user of its ACL, every user where all may write it), where it is not sticky, or
    the entry's owner where it is."""
    why_own, why_write = f"they own {parent}", f"they may write {parent}"
    if rights.could_replace(parent, above, info):
        return rights.name, why_own if rights.uid == above.st_uid else why_write
    trusted = _trusted_uids() | ({rights.uid} if rights.uid is not None else set())
    if above.st_uid not in trusted:
        return Rights.of_uid(above.st_uid).name, why_own
    return _other_writer(parent, above, info, trusted)


def _other_writer(
    parent: str, above: os.stat_result, info: os.stat_result, trusted: frozenset[int] | set[int]
) -> tuple[str, str] | None:
    """An account other than ``trusted`` that the folder ``parent`` (``above``) lets rename its
    entry ``info``: where it is sticky, the entry's owner, if they may write it; else anyone
    who may write it (every user, a member of a group it lets write, a named user)."""
    want, why = _WRITE | _SEARCH, f"they may write {parent}"
    if above.st_mode & stat.S_ISVTX:
        owner = None if info.st_uid in trusted else Rights.of_uid(info.st_uid)
        return (owner.name, why) if owner and owner.may(parent, above, want) else None
    if Rights("", None, frozenset()).may(parent, above, want):
        return EVERYONE, f"every user may write {parent}"
    gids, uids = _writers(parent, above)
    for uid in sorted((uids | _members(gids)) - trusted):
        other = Rights.of_uid(uid)
        if other.may(parent, above, want):
            return other.name, why
    # A group's members a directory service does not list here (no enumeration) may too:
    # any group but root's and the service's own counts, where its entry lets it search.
    group_search = above.st_mode & (_SEARCH << 3) if _access_acl(parent) is None else True
    for gid in sorted(gids - {0, os.getegid()}):
        if group_search:
            return f"members of group {_group_name(gid)}", why
    return None


def _group_name(gid: int) -> str:
    try:
        return grp.getgrgid(gid).gr_name
    except KeyError:
        return str(gid)


class LocalPaths:
    """Paths of this machine (the local host)."""

    where = "this machine"

    def realpath(self, path: str) -> str:
        return os.path.realpath(path)

    def exists(self, path: str) -> bool:
        return os.path.exists(path)

    def isdir(self, path: str) -> bool:
        return os.path.isdir(path)


class RemotePaths:
    """Paths of a remote host, resolved there (``realpath -m``, ``test``) through ``run``:
    a link on that host is followed on that host."""

    def __init__(
        self, run: Callable[[list[str], float], subprocess.CompletedProcess[str]], where: str
    ) -> None:
        self.run = run
        self.where = where
        self._real: dict[str, str] = {}

    def realpath(self, path: str) -> str:
        if path not in self._real:
            result = self.run(["realpath", "-m", "--", path], 10.0)
            lines = result.stdout.splitlines()
            if result.returncode != 0 or not lines or not lines[0].startswith("/"):
                raise BadRequest(f"The path {path!r} could not be resolved on {self.where}")
            self._real[path] = lines[0]
        return self._real[path]

    def exists(self, path: str) -> bool:
        return self.run(["test", "-e", path], 10.0).returncode == 0

    def isdir(self, path: str) -> bool:
        return self.run(["test", "-d", path], 10.0).returncode == 0


LOCAL_PATHS = LocalPaths()
PathSystem = LocalPaths | RemotePaths


def _has_dotdot(path: str) -> bool:
    return ".." in path.replace("\\", "/").split("/")


def check_target(target: Any, what: str = "mount target") -> str:
    """The normalized container path, or ``BadRequest``/``MountNotAllowed`` naming the rule."""
    if not isinstance(target, str) or not target or "\0" in target:
        raise BadRequest(f"The {what} must be a path inside the container")
    if _has_dotdot(target):
        raise BadRequest(f"The {what} {target!r} contains '..'; write the path without it")
    if not target.startswith("/"):
        raise BadRequest(f"The {what} {target!r} must be an absolute path")
    normal = "/" + posixpath.normpath(target).lstrip("/")
    if normal == "/":
        raise MountNotAllowed(f"The {what} cannot be '/' (it would hide the whole image)")
    for system in SYSTEM_TARGETS:
        if normal == system or normal.startswith(system + "/"):
            raise MountNotAllowed(
                f"The {what} {target!r} is a system path ({system}); mount somewhere else, "
                "such as /mnt or /data"
            )
    return normal


def _is_within(path: str, folder: str) -> bool:
    """Whether ``path`` is ``folder`` or inside it, by whole path components."""
    try:
        return os.path.commonpath([path, folder]) == folder
    except ValueError:
        return False


def _read_regular(path: str, limit: int) -> bytes | None:
    """At most ``limit`` bytes of the regular file ``path`` (links followed), or ``None``."""
    try:
        with open(path, "rb") as handle:
            if stat.S_ISREG(os.fstat(handle.fileno()).st_mode):
                return handle.read(limit)
    except OSError:
        pass
    return None


class MountPolicy(LoggingConfigurable):
    """Which host folders may be mounted into dev containers. ``c.MountPolicy.*``."""

    allowed_roots = List(
        UnionTrait([Unicode(), Dict()]),
        default_value=[],
        help="""Host folders whose contents environments may mount (devcontainer.json
        'mounts'), as absolute paths, or dicts {"path": "/data", "writable": true}. Mounts are
        read-only unless their root is writable; the most specific root containing a path
        decides. Empty (the default): no host folder other than the workspace is mounted.
        {user} in a path is a user's name: in the shared service (jupyter gpudev serve) the
        caller's, so that "/data/{user}" gives each user their own folder; in a single-user
        server c.Access.user, the user it acts for. A mount holding every user's folder
        ("/data" there) is refused. In the shared service each mount is also checked with the
        caller's rights on this machine (their account and groups against the modes and ACLs
        of the folder and of every folder on the way): they must be able to search the way,
        read it, and write it for a writable mount (one that does not say is read-only where
        they cannot), and no folder of its path may be one that anyone but root (and the
        service's own account) could rename: one in a folder they or another user owns, or
        may write (it could be swapped for a link); they are checked again when a stopped
        container starts again. A remote host's folders are not mounted for them. A container
        running as root reads everything inside a mount whatever its files' modes: a root
        without {user} should hold only what every user may read.""",
    ).tag(config=True)

    mount_ca_bundle = Bool(
        False,
        help="""Mount the host's CA bundle (ca_bundle_path) read-only into every dev container,
        at the same path, and point pip, requests, curl, conda, Node.js and git at it: for
        networks whose TLS is intercepted by a proxy with its own certificate authority. The
        RUN steps of the builds gpudev runs (environment images, commit --verify) trust it
        too: they are built with the engine's BuildKit, the bundle mounted as a build secret
        (never in a layer) from this machine's ca_bundle_path.""",
    ).tag(config=True)

    ca_bundle_path = Unicode(
        "/etc/ssl/certs/ca-certificates.crt",
        help="The host's CA bundle (PEM) that mount_ca_bundle mounts.",
    ).tag(config=True)

    protected_paths = List(
        Unicode(),
        help="""Folders of this machine that no dev container may get: a workspace or mount
        that is (or contains) one is refused. Default: ~/.ssh, ~/.docker, ~/.gnupg, ~/.aws,
        ~/.kube, and the Jupyter config, data and runtime folders. gpudev's own state
        (c.DevContainers.state_dir, the hosts file) is always protected.""",
    ).tag(config=True)

    allow_protected = Bool(
        False,
        help="""Mount a workspace or folder even though it contains a protected folder
        (protected_paths): every dev container then reads and writes those files (SSH keys,
        registry credentials, Jupyter's configuration). Prefer serving a project folder.""",
    ).tag(config=True)

    caller = Unicode(
        None,
        allow_none=True,
        help="""Not configurable: in the shared service, the user whose environments this
        policy checks ({user} in allowed_roots; mounts checked with their rights on this
        machine). None: a single-user server, whose user runs the engine.""",
    )

    #: What the message refusing a workspace says to do (the shared service says its own).
    workspace_hint = Unicode(
        "serve a project folder instead (jupyter lab --ServerApp.root_dir=~/projects/NAME, "
        "or start Jupyter in it), or allow it with c.MountPolicy.allow_protected = True"
    )

    @default("protected_paths")
    def _default_protected_paths(self) -> list[str]:
        home = os.path.expanduser("~")
        own = [os.path.join(home, name) for name in (".ssh", ".docker", ".gnupg", ".aws", ".kube")]
        return [*own, jupyter_config_dir(), jupyter_data_dir(), jupyter_runtime_dir()]

    def check_unprotected(self, source: str, what: str, state: Sequence[str] = ()) -> None:
        """Refuse to mount ``source`` (a resolved path of this machine) when it is, or
        contains, a protected folder or gpudev's ``state``; the message says what to do."""
        for protected in (*state, *([] if self.allow_protected else self.protected_paths)):
            real = os.path.realpath(os.path.expanduser(protected))
            if _is_within(real, source):
                if protected in state:
                    hint = (
                        "keep c.DevContainers.state_dir and the hosts file outside every "
                        "mounted folder"
                    )
                elif what == "The workspace":
                    hint = self.workspace_hint
                else:
                    hint = (
                        "mount a folder that does not contain it, or allow it with "
                        "c.MountPolicy.allow_protected = True"
                    )
                raise MountNotAllowed(
                    f"{what} {source} contains {real}, which dev containers must not get "
                    f"(they would read and write it): {hint}",
                    details={"source": source, "protected": real},
                )

    def user_name(self, where: str) -> str:
        """What ``{user}`` in a root is: the caller (shared service), else ``c.Access.user``;
        ``ConfigError`` for a name that is not one folder's."""
        name = self.caller if self.caller is not None else Access(parent=self).user
        if name in ("", ".", "..") or "/" in name or "\0" in name:
            raise ConfigError(f"{where}: {USER} cannot be {name!r}, which is not a folder name")
        return name

    def roots(
        self,
        entries: Sequence[Any] | None = None,
        paths: PathSystem = LOCAL_PATHS,
        trait: str = ROOTS_TRAIT,
    ) -> list[AllowedRoot]:
        """The allowed roots (``allowed_roots``, or a remote host's ``entries`` resolved on
        that host), validated, ``{user}`` replaced (``user_name``); ``ConfigError`` names the
        bad entry."""
        roots: list[AllowedRoot] = []
        for index, entry in enumerate(self.allowed_roots if entries is None else entries):
            where = f"{trait}[{index}]"
            path: Any
            if isinstance(entry, str):
                path, writable = entry, False
            elif isinstance(entry, dict):
                unknown = set(entry) - {"path", "writable"}
                if unknown:
                    raise ConfigError(f"{where}: unknown keys {sorted(unknown)}")
                path, writable = entry.get("path"), entry.get("writable", False)
                if not isinstance(writable, bool):
                    raise ConfigError(f"{where}: 'writable' must be true or false")
            else:
                raise ConfigError(f"{where}: expected a path or a dict with 'path'")
            if not isinstance(path, str) or not os.path.isabs(path):
                raise ConfigError(f"{where}: the root must be an absolute path")
            if _has_dotdot(path):
                raise ConfigError(f"{where}: write the root without '..'")
            users = ""
            if USER in path:
                # The folder above the part naming the user holds every user's folder.
                users = paths.realpath(path.split(USER, 1)[0].rsplit("/", 1)[0] or "/")
                path = path.replace(USER, self.user_name(where))
            real = paths.realpath(path)
            roots.append(AllowedRoot(path=path, real=real, writable=writable, users=users))
        return roots

    @staticmethod
    def _root_for(roots: list[AllowedRoot], real: str) -> AllowedRoot | None:
        """The most specific allowed root that contains ``real``, by path components."""
        matches = [root for root in roots if os.path.commonpath([root.real, real]) == root.real]
        return max(matches, key=lambda root: len(root.real), default=None)

    def resolve(
        self,
        source: str,
        target: str,
        read_only: bool | None = None,
        *,
        site: tuple[Sequence[Any], PathSystem, str] | None = None,
        state: Sequence[str] = (),
    ) -> ResolvedMount:
        """Check one bind mount of host ``source`` at container ``target``.

        ``read_only=None`` follows the root: read-write under a writable root, else read-only
        (and, for a ``caller``, read-only where they may not write it).
        ``site``: a remote host's (roots, paths, trait name); default this machine's
        ``allowed_roots``. Malformed paths are ``BadRequest``; refusals ``MountNotAllowed`` (403).
        """
        entries, paths, trait = site or (None, LOCAL_PATHS, ROOTS_TRAIT)
        self._check_site(source, paths, trait)
        if not isinstance(source, str) or not source or "\0" in source:
            raise BadRequest("A mount source must be a host path")
        if _has_dotdot(source):
            raise BadRequest(f"The mount source {source!r} contains '..'; write it without")
        if not os.path.isabs(source):
            raise BadRequest(f"The mount source {source!r} must be an absolute path")
        normal_target = check_target(target)
        roots = self.roots(entries, paths, trait)
        if not roots:
            raise MountNotAllowed(
                f"The mount source {source!r} is refused: no folder of {paths.where} may be "
                f"mounted ({trait} is empty)"
            )
        real = paths.realpath(source)
        root = self._root_for(roots, real)
        if root is None:
            via = f" (it resolves to {real!r})" if real != os.path.normpath(source) else ""
            raise MountNotAllowed(
                f"The mount source {source!r}{via} is outside the folders of {paths.where} that "
                f"may be mounted: {', '.join(r.path for r in roots)} ({trait})"
            )
        if not paths.exists(real):
            raise BadRequest(f"The mount source {source!r} does not exist on {paths.where}")
        if paths is LOCAL_PATHS:
            self.check_unprotected(real, "The mount source", state)
        self._check_users(source, real, roots, trait)
        if read_only is False and not root.writable:
            raise MountNotAllowed(
                f"The mount source {source!r} cannot be writable: its root {root.path!r} is "
                f"read-only ({trait}: mark it {{'path': ..., 'writable': true}})"
            )
        effective = read_only if read_only is not None else not root.writable
        if not effective:
            # A read-only root nested inside this writable mount would be writable through it.
            nested = [
                r.path
                for r in roots
                if not r.writable and r.path != real and _is_within(r.path, real)
            ]
            if nested and read_only is False:
                raise MountNotAllowed(
                    f"The mount source {source!r} cannot be writable: it contains the read-only "
                    f"root {nested[0]!r} ({trait})"
                )
            effective = bool(nested)
        if self.caller is not None:
            effective = self._for_caller(source, real, root, read_only, effective)
        return ResolvedMount(source=real, target=normal_target, read_only=effective)

    def _check_site(self, source: str, paths: PathSystem, trait: str) -> None:
        """Refuse a remote host's folder to a shared service's user: their rights there (an
        account of another machine) cannot be checked."""
        if self.caller is not None and paths is not LOCAL_PATHS:
            raise MountNotAllowed(
                f"The mount source {source!r} is refused: the gpudev service mounts no folder "
                f"of {paths.where} for its users, whose rights there it cannot check ({trait}); "
                "use a folder of the service's own machine"
            )

    @staticmethod
    def _check_users(source: str, real: str, roots: list[AllowedRoot], trait: str) -> None:
        """Refuse ``real`` when it holds every user's folder of a per-user root: root in a
        container reads all that it mounts, whatever the files' modes."""
        for other in roots:
            if other.users and _is_within(other.users, real):
                raise MountNotAllowed(
                    f"The mount source {source!r} holds every user's folder of {other.users} "
                    f"({trait}): a dev container running as root would read them all, whatever "
                    f"their modes; mount your own, {other.path}"
                )

    def _for_caller(
        self, source: str, real: str, root: AllowedRoot, read_only: bool | None, effective: bool
    ) -> bool:
        """Whether the mount is read-only (``effective``: as the roots decide) with the
        caller's rights: refused where they may not have it as asked."""
        may_write = self._check_caller(source, real, root)
        if effective or may_write:
            return effective
        if read_only is False:
            raise MountNotAllowed(
                f"The mount source {source!r} cannot be writable: {self.caller} may not write "
                f'{real}; mount it read-only ("readonly": true)'
            )
        return True

    def _check_caller(self, source: str, real: str, root: AllowedRoot) -> bool:
        """Refuse ``real`` (``source`` resolved, under ``root``) unless the caller may search
        every folder on the way, read it, and not rename any part of it; whether they may
        write it too. Each part is read without following links (one that is a link now is
        not what was resolved)."""
        rights = Rights.of(self.caller or "")
        if rights.uid == 0:
            return True
        who = rights.name

        def refuse(why: str) -> MountNotAllowed:
            return MountNotAllowed(
                f"The mount source {source!r} is refused: {why}",
                details={"source": source, "user": who},
            )

        folder = "/"
        try:
            above = os.lstat(folder)
            swappable: tuple[str, str, str, str] | None = None
            info = above
            for part in [part for part in real.split("/") if part]:
                if not rights.may(folder, above, _SEARCH):
                    raise refuse(f"{who} may not search {folder}, a folder on the way to it")
                path = os.path.join(folder, part)
                info = os.lstat(path)
                if stat.S_ISLNK(info.st_mode):
                    raise refuse(f"{path} is a link now, not the folder it was; try again")
                if swappable is None:
                    found = replacer(rights, folder, above, info)
                    if found is not None:
                        swappable = (path, folder, *found)
                folder, above = path, info
            search = _SEARCH if stat.S_ISDIR(info.st_mode) else 0
            if not rights.may(real, info, _READ | search):
                raise refuse(f"{who} may not read {real}")
            if swappable is not None:
                path, parent, by, why = swappable
                instead = (
                    f"mount {parent}, or a folder in it that only root may rename, instead"
                    if by == who and _is_within(parent, root.real)
                    else f"ask an administrator to make {parent} root's, writable by root only"
                )
                raise refuse(
                    f"{by} may rename or replace {path} ({why}), so it could be a link to "
                    f"another folder by the time the engine mounts it; {instead}"
                )
            return rights.may(real, info, _READ | _WRITE | search)
        except (OSError, ValueError) as exc:
            raise refuse(f"its access for {who} could not be checked ({exc})") from None

    def workspace(
        self,
        root_dir: Path | str,
        workspace_folder: str,
        paths: PathSystem = LOCAL_PATHS,
        state: Sequence[str] = (),
    ) -> ResolvedMount:
        """The workspace folder of the host (the Jupyter root directory on this machine, a
        configured folder on a remote host), read-write, at the environment's workspace
        folder. On this machine it may not contain a protected folder or gpudev's ``state``
        (``check_unprotected``)."""
        real = paths.realpath(str(root_dir))
        if not paths.isdir(real):
            raise BadRequest(f"The workspace {str(root_dir)!r} is not a folder on {paths.where}")
        if paths is LOCAL_PATHS:
            self.check_unprotected(real, "The workspace", state)
        target = check_target(workspace_folder, "workspace folder")
        return ResolvedMount(source=real, target=target, read_only=False)

    def ca_bundle(self) -> tuple[ResolvedMount | None, dict[str, str]]:
        """The host CA bundle mount and the variables pointing at it, or ``(None, {})``."""
        if not self.mount_ca_bundle:
            return None, {}
        path = self.ca_bundle_path
        if not os.path.isabs(path) or _has_dotdot(path):
            raise ConfigError("c.MountPolicy.ca_bundle_path must be an absolute path")
        if not os.path.isfile(path):
            self.log.warning("mount_ca_bundle is on but %s is not a file; not mounting it", path)
            return None, {}
        # Admin-configured and read-only: the system-path rule for targets does not apply.
        target = "/" + posixpath.normpath(path).lstrip("/")
        mount = ResolvedMount(source=os.path.realpath(path), target=target, read_only=True)
        return mount, dict.fromkeys(CA_BUNDLE_ENV_VARS, target)

    def build_trust(self) -> BuildTrust | None:
        """The CA bundle the ``RUN`` steps of gpudev's builds trust (environment images, verify
        builds) when ``mount_ca_bundle`` is on, or ``None``: read here, on this machine, and
        handed to the engine through a BuildKit session, never copied into an image."""
        if not self.mount_ca_bundle:
            return None
        path = self.ca_bundle_path
        if not os.path.isabs(path) or _has_dotdot(path):
            raise ConfigError("c.MountPolicy.ca_bundle_path must be an absolute path")
        pem = _read_regular(path, BUNDLE_LIMIT + 1)
        if pem is None:
            self.log.warning("mount_ca_bundle is on but %s is not a readable file", path)
            return None
        if len(pem) > BUNDLE_LIMIT or b"-----BEGIN CERTIFICATE-----" not in pem:
            raise ConfigError(
                f"c.MountPolicy.ca_bundle_path ({path}) is not a PEM bundle of at most 8 MiB"
            )
        return BuildTrust(pem, CA_BUNDLE_ENV_VARS)

    def resolve_declared(
        self,
        mounts: Sequence[DeclaredMount],
        site: tuple[Sequence[Any], PathSystem, str] | None = None,
        state: Sequence[str] = (),
    ) -> list[ResolvedMount]:
        """Check an environment's mounts (on ``site``, a remote host, when given). A mount
        without ``readonly`` follows its root."""
        resolved: list[ResolvedMount] = []
        for mount in mounts:
            if mount.type != "bind":
                raise BadRequest(
                    f"The mount at {mount.target!r} is a {mount.type}: named volumes are not "
                    "supported yet; use a bind mount of a folder under an allowed root"
                )
            resolved.append(
                self.resolve(
                    mount.source,
                    mount.target,
                    True if mount.read_only else None,
                    site=site,
                    state=state,
                )
            )
        return resolved

    def check_again(
        self,
        owner: str,
        mounts: Sequence[ResolvedMount],
        *,
        skip: Sequence[str] = (),
        state: Sequence[str] = (),
    ) -> None:
        """Check again, with ``owner``'s rights now, the bind mounts of a stopped container of
        theirs (``mounts``, as the engine has them: ``engine_binds``) before it starts again in
        the shared service: the engine finds each source by its path again, as root, following
        links. Each one in an allowed root of theirs is checked as ``resolve`` checked it when
        the container was made, and must still be the folder it was (no part of it a link);
        ``skip``: sources that are not declared mounts (the workspace), and the CA bundle and
        folders outside every allowed root (the driver's files) are the service's own.
        ``MountNotAllowed`` names the mount and why. Nothing in a single-user server."""
        if self.caller is None:
            return
        policy = self if owner == self.caller else self._acting_for(owner)
        roots = policy.roots()
        bundle = "/" + posixpath.normpath(self.ca_bundle_path).lstrip("/")
        for mount in mounts:
            if mount.source in skip or (self.mount_ca_bundle and mount.target == bundle):
                continue
            if not any(
                _is_within(mount.source, r.path) or _is_within(mount.source, r.real) for r in roots
            ):
                continue
            why = policy._why_not_again(mount, state)
            if why is not None:
                raise MountNotAllowed(
                    f"The mount of {mount.source} at {mount.target} is refused now: {why}",
                    details={"source": mount.source, "target": mount.target, "user": owner},
                )

    def _why_not_again(self, mount: ResolvedMount, state: Sequence[str]) -> str | None:
        """Why ``mount`` (checked when its container was made) is refused now, or ``None``."""
        link = _first_link(mount.source)
        if link is not None:
            return f"{link} is a link now, not the folder it was when the container was made"
        try:
            again = self.resolve(mount.source, mount.target, mount.read_only, state=state)
        except (MountNotAllowed, BadRequest) as exc:
            return exc.message
        if again.source != mount.source:
            return f"it resolves to {again.source} now"
        return None

    def _acting_for(self, owner: str) -> MountPolicy:
        """This policy (its configuration) with ``owner`` as its caller."""
        traits = {name: getattr(self, name) for name in self.trait_names(config=True)}
        return MountPolicy(log=self.log, caller=owner, **traits)


def _first_link(path: str) -> str | None:
    """The first part of ``path`` (absolute) that is a symbolic link, or ``None``."""
    folder = "/"
    for part in [part for part in path.split("/") if part]:
        folder = os.path.join(folder, part)
        if os.path.islink(folder):
            return folder
    return None


def engine_binds(host_config: Mapping[str, Any]) -> list[ResolvedMount]:
    """The bind mounts of a container's ``HostConfig`` (its ``Mounts``, and ``Binds``
    written ``source:target[:options]``), as the engine makes them at each start."""
    found: list[ResolvedMount] = []
    for mount in host_config.get("Mounts") or []:
        if mount.get("Type") == "bind":
            found.append(
                ResolvedMount(
                    str(mount.get("Source", "")),
                    str(mount.get("Target", "")),
                    bool(mount.get("ReadOnly", False)),
                )
            )
    for bind in host_config.get("Binds") or []:
        source, _, rest = str(bind).partition(":")
        target, _, options = rest.partition(":")
        if source.startswith("/"):
            found.append(ResolvedMount(source, target, "ro" in options.split(",")))
    return found
