"""Each user's folder in shared mode, laid out so that no user can point it anywhere else.

The service mounts a user's folder read-write into their dev containers, and the engine finds
a bind mount's source by its path again at every start and resume. A user who can write the
folder's parent can swap the folder for a link (to ``/etc``, another user's home) between any
check and that use, so no check of the folder alone is enough. The layout closes it instead:

- a user's folder is the last part of ``c.GPUDevService.user_root``; every folder above it
  belongs to root or to the service's account and is writable by them only (a folder further
  up may be a sticky one such as ``/tmp``, whose entries only their owners may rename), so
  only the service can rename or replace the user's folder;
- a layout where a user owns a folder above theirs (``{home}/projects``: they can rename
  ``projects``) is refused when the service starts;
- each request walks the path again, a folder at a time, without following links, and the
  user's folder must be a real folder owned by that user; the service makes it (mode 0700,
  theirs) when it is missing.
"""

from __future__ import annotations

import errno
import os
import pwd
import stat
from contextlib import suppress
from dataclasses import dataclass
from pathlib import Path

from ..errors import ConfigError, Forbidden

_DIR_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC
TRAIT = "c.GPUDevService.user_root"


@dataclass(frozen=True)
class Layout:
    """``user_root`` taken apart: the folder above every user's (``parent``; ``None`` for
    ``{home}``, whose parent is each home's) and the pattern of a user's folder in it."""

    template: str
    parent: str | None
    leaf: str

    @classmethod
    def parse(cls, template: str) -> Layout:
        """The layout of ``template``; ``ConfigError`` for one that users could redirect."""
        if template == "{home}":
            return cls(template, None, "{home}")
        if "{home}" in template:
            raise ConfigError(
                f"{TRAIT} = {template!r}: users can write their home folder, so they could "
                "replace their gpudev folder in it with a link to any folder on this machine "
                "(another user's, /etc), which the service would mount for them as root. Use "
                "a folder under one only root writes, such as /srv/gpudev/users/{user} (the "
                "default), or {home} itself"
            )
        if not template.startswith("/"):
            raise ConfigError(f"{TRAIT} must give an absolute folder, not {template!r}")
        parts = template.strip("/").split("/")
        if any(part in ("", ".", "..") for part in parts):
            raise ConfigError(f"{TRAIT} ({template!r}) must be a plain path: no '.', '..' or '//'")
        *above, leaf = parts
        if any("{" in part or "}" in part for part in above):
            raise ConfigError(
                f"{TRAIT} = {template!r}: only the last folder may name the user ({{user}}); "
                "a user owning a folder above theirs could replace theirs with a link"
            )
        if "{user}" not in leaf or leaf.replace("{user}", "").count("{"):
            raise ConfigError(
                f"{TRAIT} = {template!r}: its last folder must contain {{user}} (and no other "
                "placeholder), or every user would share one folder"
            )
        return cls(template, "/" + "/".join(above), leaf)

    def path_of(self, name: str, account: pwd.struct_passwd | None) -> Path:
        """User ``name``'s folder (``account``: theirs on this machine, if any)."""
        if self.parent is None:
            if account is None:
                raise Forbidden(
                    f"User {name!r} has no account on the gpudev service's machine, so no "
                    f"home folder (ask an administrator to set {TRAIT})"
                )
            return Path(os.path.normpath(account.pw_dir))
        return Path(self.parent) / self.leaf.replace("{user}", name)


class UserFolders:
    """Finds (and makes) each user's folder under a ``Layout`` that users cannot redirect.

    ``trusted``: the accounts that may own the folders above users' (root and the
    service's own)."""

    def __init__(self, template: str, trusted: frozenset[int] | None = None) -> None:
        self.layout = Layout.parse(template)
        self.trusted = trusted if trusted is not None else frozenset({0, os.geteuid()})

    def check(self) -> None:
        """At start-up: the folders above users' exist (made, mode 0755, when missing) and
        only trusted accounts can write them; ``ConfigError`` saying which one is not so."""
        if self.layout.parent is None:
            return  # {home}: each home's parent is checked at each request
        fd = self._walk(self.layout.parent, create=True, problem=ConfigError)
        os.close(fd)

    def folder_of(self, name: str, account: pwd.struct_passwd | None) -> Path:
        """User ``name``'s folder, checked now (made when missing); ``Forbidden`` when the
        layout does not hold for it. ``account``: theirs on this machine, if they have one
        (without one, the service's account owns the folder: no one else can reach it)."""
        path = self.layout.path_of(name, account)
        parent = self._walk(str(path.parent), create=False, problem=Forbidden)
        try:
            owner = (account.pw_uid, account.pw_gid) if account is not None else None
            self._leaf(parent, path, owner)
        finally:
            os.close(parent)
        return path

    def _leaf(self, parent: int, path: Path, owner: tuple[int, int] | None) -> None:
        try:
            fd = os.open(path.name, _DIR_FLAGS, dir_fd=parent)
        except FileNotFoundError:
            fd = self._make_leaf(parent, path, owner)
        except OSError as err:
            if err.errno in (errno.ELOOP, errno.ENOTDIR):
                raise Forbidden(
                    f"Your gpudev folder {path} is a link or not a folder: the service mounts "
                    "only a real folder there (ask an administrator to remove what is there)"
                ) from None
            raise Forbidden(
                f"Your gpudev folder {path} cannot be opened ({err.strerror})"
            ) from None
        try:
            info = os.fstat(fd)
        finally:
            os.close(fd)
        uid = owner[0] if owner is not None else os.geteuid()
        if info.st_uid != uid:
            raise Forbidden(
                f"Your gpudev folder {path} belongs to another account (uid {info.st_uid}): "
                "the service mounts only a folder of yours there (ask an administrator)"
            )

    def _make_leaf(self, parent: int, path: Path, owner: tuple[int, int] | None) -> int:
        with suppress(FileExistsError):  # made meanwhile: opened and checked as any other
            os.mkdir(path.name, 0o700, dir_fd=parent)
        fd = os.open(path.name, _DIR_FLAGS, dir_fd=parent)
        if owner is not None and os.fstat(fd).st_uid != owner[0]:
            try:
                os.fchown(fd, *owner)
            except PermissionError:
                os.close(fd)
                with suppress(OSError):
                    os.rmdir(path.name, dir_fd=parent)
                raise Forbidden(
                    f"The gpudev service cannot make {path} yours (its account cannot change "
                    "owners): ask an administrator to create it for you"
                ) from None
        return fd

    def _walk(self, folder: str, *, create: bool, problem: type[ConfigError | Forbidden]) -> int:
        """An open handle of ``folder``, reached from ``/`` a folder at a time without
        following links; each folder on the way is checked (``problem`` raised otherwise)."""
        fd = os.open("/", _DIR_FLAGS)
        parts = [part for part in folder.split("/") if part]
        try:
            self._check(fd, "/", last=not parts, problem=problem)
            for index, part in enumerate(parts):
                shown = "/" + "/".join(parts[: index + 1])
                try:
                    child = os.open(part, _DIR_FLAGS, dir_fd=fd)
                except FileNotFoundError:
                    if not create:
                        raise problem(
                            f"{shown} is missing: the gpudev service cannot find users' folders "
                            f"({TRAIT}; an administrator restarts the service to make it)"
                        ) from None
                    with suppress(FileExistsError):
                        os.mkdir(part, 0o755, dir_fd=fd)
                    child = os.open(part, _DIR_FLAGS, dir_fd=fd)
                except OSError as err:
                    if err.errno in (errno.ELOOP, errno.ENOTDIR):
                        raise problem(
                            f"{shown} is a link or not a folder: {TRAIT} must name users' "
                            "folders by their real path, with no link on the way"
                        ) from None
                    raise
                os.close(fd)
                fd = child
                self._check(fd, shown, last=index == len(parts) - 1, problem=problem)
        except BaseException:
            os.close(fd)
            raise
        return fd

    def _check(
        self, fd: int, shown: str, *, last: bool, problem: type[ConfigError | Forbidden]
    ) -> None:
        info = os.fstat(fd)
        writable = info.st_mode & (stat.S_IWGRP | stat.S_IWOTH)
        sticky = info.st_mode & stat.S_ISVTX
        if info.st_uid not in self.trusted:
            raise problem(
                f"{shown} belongs to uid {info.st_uid}, who could replace the users' folders "
                f"under it ({TRAIT}): it must belong to root or to the gpudev service's account"
            )
        if writable and (last or not sticky):
            raise problem(
                f"{shown} is writable by its group or by everyone, who could replace the users' "
                f"folders under it ({TRAIT}): make it writable by its owner only (chmod go-w)"
            )
