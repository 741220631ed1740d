"""Which changed paths and variables are changes worth a commit: noise (caches, temporary files,
logs), package-manager state, driver files the runtime injects, mounts, secrets (never copied);
and what removing a container would lose."""

from __future__ import annotations

import fnmatch
import os
import re
from collections.abc import Iterable, Mapping
from typing import Any

from ..containers import commandlog
from ..environments import CA_BUNDLE_ENV_VARS
from .accounts import ACCOUNT_FILES, Accounts
from .compare import _has_ancestor_in
from .model import (
    _SITE_DIRS,
    PACKAGE_FILES,
    TRANSIENT,
    ChangeSet,
    FileChanges,
    env_dict,
    safe_text,
    shown,
)

#: Environment variables gpudev or the engine set: never part of a change set.
RUNTIME_ENV = frozenset(
    {
        "PATH",
        "HOSTNAME",
        "HOME",
        "NVIDIA_VISIBLE_DEVICES",
        "NVIDIA_DRIVER_CAPABILITIES",
        "CUDA_DEVICE_ORDER",
        *CA_BUNDLE_ENV_VARS,
    }
)


#: Paths that are never changes: temporary, caches, logs, runtime state, the engine's own.
NOISE_PREFIXES = (
    "/tmp",  # noqa: S108 - paths inside the container
    "/var/tmp",  # noqa: S108
    "/run",
    "/var/run",
    "/var/log",
    "/var/cache",
    "/var/lib/apt",
    "/var/lib/dpkg",
    "/var/lib/ucf",
    "/var/lib/systemd",
    "/var/backups",
    "/proc",
    "/sys",
    "/dev",
    "/sbin/docker-init",
    "/usr/sbin/docker-init",
    "/opt/conda/pkgs",
    "/opt/conda/conda-meta",
)


NOISE_FILES = frozenset(
    {
        "/.dockerenv",
        "/etc/hostname",
        "/etc/hosts",
        "/etc/resolv.conf",
        "/etc/mtab",
        "/etc/ld.so.cache",
    }
)


#: Basename patterns that are noise anywhere.
NOISE_NAMES = (
    "__pycache__",
    "*.pyc",
    "*.pyo",
    "*.log",
    "*.swp",
    "*~",
    ".bash_history",
    ".python_history",
    ".lesshst",
    ".viminfo",
    ".wget-hsts",
    ".sudo_as_admin_successful",
    ".ipynb_checkpoints",
)


#: Under a home folder: caches and Jupyter/IPython runtime state.
NOISE_HOME = (".cache", ".ipython", ".local/share/jupyter", ".jupyter/lab/workspaces", ".npm")


#: What the NVIDIA container runtime (or gpudev's driver injection) puts into a container.
DRIVER_PATTERNS = (
    "*/libcuda.so*",
    "*/libcudadebugger.so*",
    "*/libnvidia-*.so*",
    "*/libnvcuvid.so*",
    "*/libnvoptix.so*",
    "*/libEGL_nvidia.so*",
    "*/libGLESv1_CM_nvidia.so*",
    "*/libGLESv2_nvidia.so*",
    "*/libGLX_nvidia.so*",
    "/usr/bin/nvidia-*",
    "/usr/lib/firmware/nvidia*",
    "/lib/firmware/nvidia*",
    "/etc/vulkan/icd.d/nvidia*",
    "/usr/share/glvnd/egl_vendor.d/*nvidia*",
    "/usr/share/egl/egl_external_platform.d/*nvidia*",
    "/usr/local/nvidia*",
    "/usr/local/gpudev-driver*",
)


#: File names and paths that hold credentials: reported, never emitted.
SECRET_PATTERNS = (
    "*.pem",
    "*.key",
    "*.p12",
    "*.pfx",
    "*id_rsa*",
    "*id_ecdsa*",
    "*id_ed25519*",
    "*id_dsa*",
    "*/.ssh/*",
    "*/.netrc",
    "*/.pypirc",
    "*/.git-credentials",
    "*/.docker/config.json",
    "*/.aws/credentials",
    "*/.kube/config",
    "*/.config/gcloud/*",
    "*token*",
    "*secret*",
    "*credential*",
    "*password*",
    "*/.npmrc",
    "*/.condarc.token*",
)


_SECRET_ENV_RE = re.compile(
    r"(TOKEN|SECRET|PASSW(OR)?D|PASSPHRASE|API_?KEY|ACCESS_?KEY|PRIVATE|CREDENTIAL|AUTH)",
    re.IGNORECASE,
)


_SECRET_VALUE_RE = re.compile(
    r"(-----BEGIN [A-Z ]*PRIVATE KEY-----|\bgh[pousr]_[A-Za-z0-9]{30,}|\bxox[abpr]-|"
    r"\bAKIA[0-9A-Z]{16}\b|\bhf_[A-Za-z0-9]{30,}|\bglpat-[A-Za-z0-9_-]{20,}|\bsk-[A-Za-z0-9]{32,})"
)


#: A literal every match of ``_SECRET_VALUE_RE`` holds: content without any of them is not
#: searched (finding a literal in a megabyte costs well under a millisecond; the expression
#: costs about 200 ms there).
_SECRET_VALUE_LITERALS = (
    b"PRIVATE KEY-----",
    *(f"gh{c}_".encode() for c in "pousr"),
    b"xox",
    b"AKIA",
    b"hf_",
    b"glpat-",
    b"sk-",
)


_URL_USERINFO_RE = re.compile(r"(?P<scheme>\b[A-Za-z][A-Za-z0-9+.-]*://)[^/\s@]+@")
_SECRET_OPTION_RE = re.compile(
    r"(?i)(?P<option>--?[A-Za-z-]*(?:password|passwd|token|secret|api-key)[A-Za-z-]*[= ])\S+"
)


def redact_command(command: str) -> str:
    """A logged command line without what looks like a credential: a URL's user and password,
    the value of a ``--password``/``--token``-like option, known token formats (``***``)."""
    text = _URL_USERINFO_RE.sub(r"\g<scheme>***@", command)
    text = _SECRET_OPTION_RE.sub(r"\g<option>***", text)
    return _SECRET_VALUE_RE.sub("***", text)


def _any_of(patterns: Iterable[str]) -> re.Pattern[str]:
    """One compiled regular expression for several shell patterns (thousands of paths are
    checked: one match per path, not one per pattern)."""
    return re.compile("|".join(f"(?:{fnmatch.translate(p)})" for p in patterns))


_SECRET_PATH_RE = _any_of(SECRET_PATTERNS)


_DRIVER_RE = _any_of(DRIVER_PATTERNS)


_NOISE_NAME_RE = _any_of(NOISE_NAMES)


_NOISE_PREFIX_RE = re.compile(
    "^(?:" + "|".join(re.escape(p) for p in NOISE_PREFIXES) + ")(?:/|\\Z)"
)


def is_driver_path(path: str) -> bool:
    """Whether a path is one of the NVIDIA driver files a GPU runtime injects."""
    return _DRIVER_RE.match(path) is not None


def looks_secret_path(path: str) -> bool:
    return _SECRET_PATH_RE.match(path.lower()) is not None


def looks_secret_env(name: str, value: str) -> bool:
    return bool(_SECRET_ENV_RE.search(name) or _SECRET_VALUE_RE.search(value))


def looks_secret_content(data: bytes) -> bool:
    head = data[:1_000_000]
    # ASCII bytes decode to themselves (never part of a replaced sequence): a literal is in
    # the decoded text exactly when it is in the bytes.
    if not any(literal in head for literal in _SECRET_VALUE_LITERALS):
        return False
    return bool(_SECRET_VALUE_RE.search(head.decode("utf-8", "replace")))


def _under(path: str, prefix: str) -> bool:
    return path == prefix or path.startswith(prefix.rstrip("/") + "/")


def _home_relative(path: str) -> str | None:
    parts = path.split("/")
    if len(parts) > 3 and parts[1] == "home":
        return "/".join(parts[3:])
    if len(parts) > 2 and parts[1] == "root":
        return "/".join(parts[2:])
    return None


def _is_noise(path: str) -> bool:
    if path in NOISE_FILES or _NOISE_PREFIX_RE.match(path):
        return True
    if any(_NOISE_NAME_RE.match(part) for part in path.split("/")):
        return True
    home = _home_relative(path)
    if home is None or not any(home == n or home.startswith(n + "/") for n in NOISE_HOME):
        return False
    # IPython startup scripts are the user's own, not runtime state.
    return not (
        home.startswith(".ipython/") and "/startup/" in home and not home.endswith("README")
    )


#: Why gpudev's command log and its wrappers are left out (see ``containers.commandlog``).
COMMAND_LOG = "gpudev's command log"

#: Why account files are left out: the users and groups are rendered as lines instead.
ACCOUNTS = "account files (users and groups are written as useradd/groupadd lines)"


def classify_path(
    path: str, mounts: Iterable[str], owned: set[str], owned_dirs: Iterable[str] = ()
) -> str | None:
    """Why a changed path is left out of a change set (``None``: it is kept). ``owned``: files
    of changed packages; ``owned_dirs``: whole folders they made (new virtual environments)."""
    reason: str | None = None
    if _is_noise(path):
        reason = TRANSIENT
    elif any(_under(path, m) or m.startswith(path.rstrip("/") + "/") for m in mounts):
        reason = "mounts"
    elif _DRIVER_RE.match(path):
        reason = "NVIDIA driver files"
    elif path in ACCOUNT_FILES:
        reason = ACCOUNTS
    elif any(_under(path, own) for own in commandlog.OWN_PATHS):
        reason = COMMAND_LOG
    elif (
        path in owned
        or any(part in _SITE_DIRS for part in path.split("/"))
        or any(_under(path, d) for d in owned_dirs)
    ):
        reason = PACKAGE_FILES
    return reason


def file_changes(
    diff: Iterable[Mapping[str, Any]],
    mounts: Iterable[str],
    owned: set[str],
    owned_dirs: Iterable[str] = (),
    made: Iterable[str] = (),
) -> FileChanges:
    """Filter ``docker diff`` (``[{"Path", "Kind"}]``, Kind 0 changed, 1 added, 2 deleted).
    ``made``: folders the engine created (see ``engine_made``), not changes while empty."""
    made = set(made)
    mounts = [m for m in mounts if m]
    entries = _diff_entries(diff)
    result = FileChanges()
    # A folder is listed as changed when something inside changed: only the leaves are
    # changes (a folder that is itself added or deleted is its own leaf once its content is
    # filtered).
    parents = {os.path.dirname(p) for p in entries}
    deleted = {p for p, kind in entries.items() if kind == 2}
    for path in sorted(deleted):
        if _has_ancestor_in(path, deleted):
            continue  # inside a deleted folder: its removal covers it
        reason = classify_path(path, mounts, owned, owned_dirs)
        if reason is not None:
            result.ignore(path, reason, deleted=True)
        elif not safe_text(path):
            result.unsafe.append(path)
        else:
            result.deleted.append(path)
    for path in sorted(entries):
        kind = entries[path]
        if kind == 2 or path in parents:
            continue
        reason = "made by the engine" if path in made else None
        reason = reason or classify_path(path, mounts, owned, owned_dirs)
        if reason is not None:
            result.ignore(path, reason)
        elif not safe_text(path):
            result.unsafe.append(path)
        elif looks_secret_path(path):
            result.secrets.append(path)
        else:
            result.kept.append(path)
    return result


def home_owners(kept: Iterable[str], accounts: Accounts | None) -> dict[str, str]:
    """The kept paths in the home folder of a user other than root, and the folders between
    that home and them (the home included): path -> ``uid:gid`` of that user. A copy into an
    image makes all of them root's."""
    homes = {
        user.home: f"{user.uid}:{user.gid}"
        for user in (accounts.users.values() if accounts is not None else ())
        if user.uid != 0 and user.home.count("/") >= 2 and not user.home.startswith("/root")
    }
    owners: dict[str, str] = {}
    for path in kept:
        home = next((h for h in homes if path.startswith(h + "/")), None)
        if home is None:
            continue
        inside = path
        while inside != home and inside not in owners:
            owners[inside] = homes[home]
            inside = os.path.dirname(inside)
        owners[home] = homes[home]
    return owners


def _diff_entries(diff: Iterable[object]) -> dict[str, int]:
    """``docker diff`` entries as path -> kind; one that is not a mapping with an absolute
    path and a known kind (0, 1, 2) is skipped."""
    entries: dict[str, int] = {}
    for item in diff:
        if not isinstance(item, Mapping):
            continue
        path, kind = item.get("Path"), item.get("Kind")
        if (
            isinstance(path, str)
            and path.startswith("/")
            and isinstance(kind, int)
            and not isinstance(kind, bool)
            and kind in (0, 1, 2)
        ):
            entries[path] = kind
    return entries


def mount_targets(attrs: Mapping[str, Any]) -> list[str]:
    """Where a container (its inspect ``attrs``) has mounts: never changes."""
    return [str(m.get("Destination", "")) for m in attrs.get("Mounts") or []]


def engine_made(attrs: Mapping[str, Any]) -> list[str]:
    """Folders the engine made in a container (its inspect ``attrs``): the working folder and
    its parents, created when the image lacks them (a remote host without a workspace mount).
    Empty, they are not changes; what is written in them is."""
    workdir = str(attrs.get("Config", {}).get("WorkingDir") or "").rstrip("/")
    made: list[str] = []
    while workdir:
        made.append(workdir)
        workdir = os.path.dirname(workdir).rstrip("/")
    return made


def uncommitted(
    diff: Iterable[Mapping[str, Any]],
    mounts: Iterable[str],
    baseline_files: Mapping[str, int],
    *,
    made: Iterable[str] = (),
    held: Iterable[str] = (),
    edited: Iterable[str] = (),
) -> list[str]:
    """What removing a container would lose: the file changes a commit carries (credentials
    included) and, as the packages are not probed here, every changed package file; then
    ``held``, the ids of the changes the last commit left out (``Baseline.held``: their files
    may be in the baseline already). Noise, mounts, driver files, empty folders the engine
    made and what the baseline already had are not, unless ``edited`` since (its content)."""
    entries = _diff_entries(diff)
    again = set(edited)
    fresh = [
        {"Path": p, "Kind": k}
        for p, k in entries.items()
        if baseline_files.get(p) != k or p in again
    ]
    files = file_changes(fresh, mounts, set(), made=made)
    every = {*files.kept, *files.deleted, *files.secrets, *files.packaged, *files.unsafe}
    # Paths with control characters are lost too: shown escaped (messages print them).
    changed = sorted(p if safe_text(p) else shown(p) for p in every)
    listed = set(changed)

    def already(change_id: str) -> bool:  # a held file change is listed by its path
        kind, _, path = change_id.partition(":")
        return kind in ("file", "delete") and path in listed

    return [*changed, *(i for i in dict.fromkeys(held) if not already(i))]


def env_changes(
    container_env: Iterable[str],
    image_env: Iterable[str],
    baseline_env: Mapping[str, str] | None,
    changes: ChangeSet,
) -> None:
    """Environment variables of the container that its image (or the baseline) has not."""
    now = env_dict(container_env)
    before = dict(baseline_env) if baseline_env is not None else env_dict(image_env)
    for name in sorted(now):
        if name in RUNTIME_ENV or name.startswith("GPUDEV_") or before.get(name) == now[name]:
            continue
        if looks_secret_env(name, now[name]):
            changes.env_secrets.append(name)
        else:
            changes.env[name] = now[name]
    changes.env_removed = sorted(n for n in before if n not in now and n not in RUNTIME_ENV)
