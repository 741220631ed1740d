"""What a user changed inside a dev container, as a change set (the input of a Dockerfile diff).

A change set compares the container now with its **baseline**: the state it started from. The
baseline of a container whose environment ran no lifecycle command is its image's (probed once
per image in a throwaway container and kept in the state folder); one that ran
postCreateCommand/postStartCommand is probed right after them, so what the environment itself
declares is never reported as a change. ``commit --write`` moves the baseline forward.

What is captured:

- apt/dpkg: manually installed packages added, removed or changed version (automatic
  dependencies follow them); apt sources and keys come with the files;
- Python: for every interpreter, venv and conda environment found (``/usr/bin/python3``,
  ``/usr/local/bin/python3``, conda's, any ``pyvenv.cfg`` under ``/opt``, ``/root``, ``/home``,
  ``/usr/local``, ``/srv``), distributions added, removed and upgraded, with editable, VCS and
  local-path installs marked as such (PEP 610 ``direct_url.json``);
- conda: the explicit install requests of each environment's history, and its channels;
- files: ``docker diff``, without caches, temporary files, logs, mounts, package-manager state
  and files owned by the packages above, and the NVIDIA driver files the runtime injects;
- environment variables of the container that its image does not have (gpudev's own left out).

Paths and contents that look like credentials are reported and never emitted.

Nothing runs inside a dev container to learn its packages (its content is the user's, see
``changes.packages``): they are its image's, probed once in a throwaway container of the image
(``changes.probe``), plus what its ``docker diff`` and the package metadata files it names,
read as data, say.

This module holds the model (package states, change sets, change ids); ``classify`` decides
which paths and variables are changes, ``compare`` compares package states, ``probe`` reads the
image probe's output."""

from __future__ import annotations

import json
import re
import unicodedata
from collections.abc import Collection, Iterable, Mapping
from dataclasses import asdict, dataclass, field
from typing import Any, Literal

from ..errors import BadRequest
from . import names
from .accounts import NAME as ACCOUNT_NAME
from .accounts import AccountChanges, Accounts
from .tools import CRATE_NAME, NPM_NAME, Crate, ToolChanges

PACKAGE_FILES = "package files"


TRANSIENT = "temporary, cache or runtime state"


#: Package install folders: their content is covered by the package changes.
_SITE_DIRS = ("site-packages", "dist-packages")


def normalize(name: str) -> str:
    """A distribution name as pip compares them (PEP 503)."""
    return re.sub(r"[-_.]+", "-", name).lower()


#: The longest value read from a container that a Dockerfile line or a report holds.
MAX_VALUE = 4096


def safe_text(value: object, limit: int = MAX_VALUE) -> bool:
    """Whether a value read from a container can go into a Dockerfile line, a report or a
    terminal as it is: a non-empty string of at most ``limit`` characters with no control,
    format, surrogate or unassigned character and no line or paragraph separator."""
    return (
        isinstance(value, str)
        and 0 < len(value) <= limit
        and all(unicodedata.category(c)[0] != "C" and c not in "\u2028\u2029" for c in value)
    )


def shown(value: object, limit: int = 200) -> str:
    """A value read from a container as a report shows it: quoted, every unprintable
    character escaped (``repr``), at most about ``limit`` characters."""
    text = value if isinstance(value, str) else repr(value)
    return repr(text[:limit]) + ("..." if len(text) > limit else "")


PySource = Literal["index", "editable", "vcs", "local", "archive", "invalid"]


#: Installs a Dockerfile cannot repeat: editable and local-path ones, and those whose
#: ``direct_url.json`` cannot be read (``"invalid"``: its ``url`` says why).
NOT_REPRODUCIBLE: tuple[PySource, ...] = ("editable", "local", "invalid")


_VCS_RE = re.compile(r"[a-z]{1,10}")


_REVISION_RE = re.compile(r"[A-Za-z0-9._/+-]{1,200}")


_SUBDIRECTORY_RE = re.compile(r"[A-Za-z0-9._/+-]{1,500}")


_URL_RE = re.compile(r"[A-Za-z][A-Za-z0-9+.-]{0,20}:[!-~]{1,4000}")


@dataclass(frozen=True)
class PyDist:
    """A Python distribution. ``source``: from an index, or an editable / VCS / local-path /
    archive-URL install (PEP 610), or ``"invalid"`` (its ``direct_url.json`` cannot be read:
    ``url`` says why); ``url`` says from where (with the VCS commit and subdirectory)."""

    name: str
    version: str
    source: PySource = "index"
    url: str = ""

    @classmethod
    def parse(cls, name: str, version: str, direct_url: str | None) -> PyDist:
        """A distribution and its ``direct_url.json`` text (PEP 610), read as hostile data:
        wrong types, a URL, VCS name, revision or subdirectory with whitespace or control
        characters, or too long make an ``"invalid"`` install (reported, not written)."""
        if direct_url is None or direct_url == "":
            return cls(name, version)
        try:
            return cls(name, version, *_direct_url(json.loads(direct_url)))
        except (ValueError, RecursionError) as exc:
            why = str(exc) if isinstance(exc, _BadDirectUrl) else "not JSON"
            return cls(name, version, "invalid", f"direct_url.json: {why}")

    def requirement(self) -> str:
        """What ``pip install`` is given to get this again (``name @ URL`` for VCS/archives)."""
        if self.source in ("vcs", "archive"):
            return f"{self.name} @ {self.url}"
        return f"{self.name}=={self.version}"


class _BadDirectUrl(ValueError):
    """A ``direct_url.json`` that is JSON but not one (its message says why, printably)."""


def _direct_url(data: object) -> tuple[PySource, str]:
    """The source and URL a ``direct_url.json`` object names; ``_BadDirectUrl`` otherwise."""
    if not isinstance(data, dict):
        raise _BadDirectUrl("not an object")
    url = data.get("url")
    if not isinstance(url, str) or not _URL_RE.fullmatch(url):
        raise _BadDirectUrl("no valid url (printable, no spaces, at most 4000 characters)")
    subdirectory = data.get("subdirectory")
    fragment = ""
    if subdirectory is not None:
        if not isinstance(subdirectory, str) or not _SUBDIRECTORY_RE.fullmatch(subdirectory):
            raise _BadDirectUrl("subdirectory is not a valid relative path")
        fragment = f"#subdirectory={subdirectory}"
    infos = [k for k in ("dir_info", "vcs_info", "archive_info") if k in data]
    if len(infos) > 1 or any(not isinstance(data[k], dict) for k in infos):
        raise _BadDirectUrl("dir_info, vcs_info or archive_info is not one object")
    if "dir_info" in data:
        editable = data["dir_info"].get("editable", False)
        if not isinstance(editable, bool):
            raise _BadDirectUrl("dir_info.editable is not true or false")
        return ("editable" if editable else "local"), url
    if "vcs_info" in data:
        vcs = data["vcs_info"]
        kind = vcs.get("vcs", "git")
        ref = vcs.get("commit_id") or vcs.get("requested_revision") or ""
        if not isinstance(kind, str) or not _VCS_RE.fullmatch(kind):
            raise _BadDirectUrl("vcs_info.vcs is not a VCS name")
        if not isinstance(ref, str) or (ref and not _REVISION_RE.fullmatch(ref)):
            raise _BadDirectUrl("vcs_info.commit_id is not a revision")
        return "vcs", f"{kind}+{url}" + (f"@{ref}" if ref else "") + fragment
    if url.startswith("file:"):
        return "local", url
    return "archive", url + fragment


@dataclass(frozen=True)
class PythonEnv:
    """One interpreter or environment and its distributions (keyed by normalized name)."""

    python: str
    prefix: str
    base_prefix: str
    version: str
    externally_managed: bool
    dists: dict[str, PyDist] = field(default_factory=dict)

    @property
    def is_venv(self) -> bool:
        return self.prefix != self.base_prefix

    @property
    def is_conda(self) -> bool:
        return "/conda" in self.prefix or "/miniconda" in self.prefix

    def to_json(self) -> dict[str, Any]:
        data = asdict(self)
        data["dists"] = {k: asdict(v) for k, v in sorted(self.dists.items())}
        return data

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> PythonEnv:
        dists = {k: PyDist(**v) for k, v in dict(data.get("dists", {})).items()}
        fields = {k: data[k] for k in ("python", "prefix", "base_prefix", "version")}
        return cls(**fields, externally_managed=bool(data["externally_managed"]), dists=dists)


@dataclass(frozen=True)
class CondaEnv:
    """A conda environment: the specs the user asked for (its history), and its channels."""

    prefix: str
    requested: tuple[str, ...] = ()
    channels: tuple[str, ...] = ()


@dataclass(frozen=True)
class PackageState:
    """The package managers' view of a container at one moment."""

    dpkg: dict[str, str] = field(default_factory=dict)
    dpkg_auto: frozenset[str] = frozenset()
    python: dict[str, PythonEnv] = field(default_factory=dict)
    conda: dict[str, CondaEnv] = field(default_factory=dict)
    #: Automatic dpkg packages that no installed package depends on: what apt installed
    #: because a package recommends it (or left behind). Known where dpkg's status was read.
    dpkg_unrequired: frozenset[str] = frozenset()
    #: Users and groups (``None``: not known, e.g. a baseline recorded before they were read).
    accounts: Accounts | None = None
    #: Global npm packages (name -> version) and cargo-installed crates (home:name -> crate).
    npm: dict[str, str] = field(default_factory=dict)
    cargo: dict[str, Crate] = field(default_factory=dict)

    def dpkg_manual(self) -> set[str]:
        return set(self.dpkg) - self.dpkg_auto

    def to_json(self) -> dict[str, Any]:
        return {
            "dpkg": dict(sorted(self.dpkg.items())),
            "dpkg_auto": sorted(self.dpkg_auto),
            "dpkg_unrequired": sorted(self.dpkg_unrequired),
            **({"accounts": self.accounts.to_json()} if self.accounts is not None else {}),
            "npm": dict(sorted(self.npm.items())),
            "cargo": {k: vars(c) for k, c in sorted(self.cargo.items())},
            "python": {k: v.to_json() for k, v in sorted(self.python.items())},
            "conda": {
                k: {
                    "prefix": v.prefix,
                    "requested": list(v.requested),
                    "channels": list(v.channels),
                }
                for k, v in sorted(self.conda.items())
            },
        }

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> PackageState:
        return cls(
            dpkg=dict(data.get("dpkg", {})),
            dpkg_auto=frozenset(data.get("dpkg_auto", [])),
            python={k: PythonEnv.from_json(v) for k, v in dict(data.get("python", {})).items()},
            conda={
                k: CondaEnv(v["prefix"], tuple(v["requested"]), tuple(v["channels"]))
                for k, v in dict(data.get("conda", {})).items()
            },
            dpkg_unrequired=frozenset(data.get("dpkg_unrequired", [])),
            accounts=Accounts.from_json(data["accounts"]) if "accounts" in data else None,
            npm=dict(data.get("npm", {})),
            cargo={k: Crate(**v) for k, v in dict(data.get("cargo", {})).items()},
        )


@dataclass
class ProbeResult:
    state: PackageState
    #: Files owned by the packages named in the probe's request (dpkg lists, pip RECORDs).
    owned_files: set[str] = field(default_factory=set)
    #: What the probe's output held that could not be read (skipped), one sentence each.
    problems: list[str] = field(default_factory=list)


def env_dict(items: Iterable[str]) -> dict[str, str]:
    """``["NAME=value", ...]`` (a container's or image's ``Config.Env``) as a dict."""
    return dict(item.split("=", 1) for item in items if "=" in item)


@dataclass
class AptChanges:
    added: list[tuple[str, str]] = field(default_factory=list)
    removed: list[tuple[str, str]] = field(default_factory=list)
    upgraded: list[tuple[str, str, str]] = field(default_factory=list)
    #: New automatic packages nothing installed depends on (apt installed them because a
    #: package recommends them): installed by name, then marked automatic again.
    recommended: list[tuple[str, str]] = field(default_factory=list)

    def __bool__(self) -> bool:
        return bool(self.added or self.removed or self.upgraded or self.recommended)


@dataclass
class PythonChanges:
    env: PythonEnv
    #: The environment did not exist in the baseline (a new venv).
    new_env: bool = False
    added: list[PyDist] = field(default_factory=list)
    removed: list[PyDist] = field(default_factory=list)
    upgraded: list[tuple[PyDist, PyDist]] = field(default_factory=list)

    def __bool__(self) -> bool:
        return bool(self.new_env or self.added or self.removed or self.upgraded)


@dataclass
class CondaChanges:
    prefix: str
    added: list[str] = field(default_factory=list)
    removed: list[str] = field(default_factory=list)
    channels: tuple[str, ...] = ()


@dataclass
class FileChanges:
    #: Files added or changed, kept (copied into the image).
    kept: list[str] = field(default_factory=list)
    #: Files or folders deleted from the image (top-most only).
    deleted: list[str] = field(default_factory=list)
    #: Kept paths that look like credentials: reported, not copied.
    secrets: list[str] = field(default_factory=list)
    #: How many changed paths each filter left out.
    ignored: dict[str, int] = field(default_factory=dict)
    #: The paths left out as package files (the package changes cover them).
    packaged: list[str] = field(default_factory=list)
    #: Files left out as temporary, cache or runtime state: not in a Dockerfile, but in a
    #: ``docker commit`` of the container (a pushed snapshot checks them for credentials).
    transient: list[str] = field(default_factory=list)
    #: Kept symbolic links a commit does not make in the build context (their target is
    #: absolute or leaves the tree): path -> target, made by an ``ln`` line instead. Filled
    #: when the files are copied out (``ChangeCapture.prepare``).
    links: dict[str, str] = field(default_factory=dict)
    #: Kept paths a commit could not copy (a FIFO, a device, over the size limit...): path ->
    #: why. Reported; still changes. Filled when the files are copied out.
    skipped: dict[str, str] = field(default_factory=dict)
    #: Changed paths a Dockerfile cannot name (control characters, too long: see
    #: ``safe_text``): reported, neither copied nor deleted; still changes.
    unsafe: list[str] = field(default_factory=list)
    #: Kept paths in a user's home, and the folders between it and them: path -> "uid:gid" of
    #: that user (a copy into an image makes them root's; a ``chown`` line gives them back).
    owners: dict[str, str] = field(default_factory=dict)

    def ignore(self, path: str, reason: str, *, deleted: bool = False) -> None:
        self.ignored[reason] = self.ignored.get(reason, 0) + 1
        if reason == PACKAGE_FILES:
            self.packaged.append(path)
        elif reason == TRANSIENT and not deleted:
            self.transient.append(path)


@dataclass
class ChangeSet:
    apt: AptChanges = field(default_factory=AptChanges)
    python: list[PythonChanges] = field(default_factory=list)
    conda: list[CondaChanges] = field(default_factory=list)
    files: FileChanges = field(default_factory=FileChanges)
    env: dict[str, str] = field(default_factory=dict)
    env_removed: list[str] = field(default_factory=list)
    env_secrets: list[str] = field(default_factory=list)
    #: Things captured that a Dockerfile cannot reproduce (editable installs...).
    notes: list[str] = field(default_factory=list)
    accounts: AccountChanges = field(default_factory=AccountChanges)
    tools: ToolChanges = field(default_factory=ToolChanges)
    #: The package-manager commands run since the baseline (gpudev's command log, as the
    #: container holds it: shown as comments, never run).
    commands: list[str] = field(default_factory=list)

    def is_empty(self) -> bool:
        return not (
            self.apt
            or any(self.python)
            or any(c.added or c.removed for c in self.conda)
            or self.files.kept
            or self.files.deleted
            or self.env
            or self.env_removed
            or self.accounts
            or self.tools
        )

    def to_json(self) -> dict[str, Any]:
        return {
            "apt": {
                "added": [{"name": n, "version": v} for n, v in self.apt.added],
                "removed": [{"name": n, "version": v} for n, v in self.apt.removed],
                "upgraded": [{"name": n, "from": a, "to": b} for n, a, b in self.apt.upgraded],
                "recommended": [{"name": n, "version": v} for n, v in self.apt.recommended],
            },
            "python": [
                {
                    "python": p.env.python,
                    "prefix": p.env.prefix,
                    "new_env": p.new_env,
                    "added": [asdict(d) for d in p.added],
                    "removed": [asdict(d) for d in p.removed],
                    "upgraded": [
                        {"name": b.name, "from": a.version, "to": b.version, "source": b.source}
                        for a, b in p.upgraded
                    ],
                }
                for p in self.python
                if p
            ],
            "conda": [asdict(c) for c in self.conda if c.added or c.removed],
            "files": {
                k: v for k, v in asdict(self.files).items() if k not in ("packaged", "transient")
            },
            "env": dict(self.env),
            "env_removed": list(self.env_removed),
            "env_secrets": list(self.env_secrets),
            "notes": list(self.notes),
            "accounts": self.accounts.to_json(),
            "tools": self.tools.to_json(),
            "commands": list(self.commands),
            "empty": self.is_empty(),
        }

    def without(self, excluded: Collection[str]) -> ChangeSet:
        """This change set less the changes whose ids (see ``change_ids``) are ``excluded``.
        Credentials, unset variables and notes stay (they are never written), except the
        notes of left-out installs; a new venv whose every distribution is left out is not
        created either."""
        if not excluded:
            return self
        python: list[PythonChanges] = []
        notes = list(self.notes)
        for py in self.python:
            prefix = py.env.prefix
            kept = PythonChanges(
                env=py.env,
                added=[d for d in py.added if python_id(prefix, d.name) not in excluded],
                removed=[d for d in py.removed if python_id(prefix, d.name) not in excluded],
                upgraded=[
                    (a, b) for a, b in py.upgraded if python_id(prefix, b.name) not in excluded
                ],
            )
            had_dists = bool(py.added or py.removed or py.upgraded)
            kept.new_env = py.new_env and (not had_dists or bool(kept))
            dropped = set(_not_reproducible(py)) - set(_not_reproducible(kept))
            notes = [n for n in notes if n not in dropped]
            python.append(kept)
        files = self.files
        return ChangeSet(
            apt=AptChanges(
                added=[(n, v) for n, v in self.apt.added if apt_id(n) not in excluded],
                removed=[(n, v) for n, v in self.apt.removed if apt_id(n) not in excluded],
                upgraded=[(n, a, b) for n, a, b in self.apt.upgraded if apt_id(n) not in excluded],
                recommended=[(n, v) for n, v in self.apt.recommended if apt_id(n) not in excluded],
            ),
            python=python,
            conda=[
                CondaChanges(
                    c.prefix,
                    [s for s in c.added if conda_id(c.prefix, s) not in excluded],
                    [s for s in c.removed if conda_id(c.prefix, s) not in excluded],
                    c.channels,
                )
                for c in self.conda
            ],
            files=FileChanges(
                kept=[p for p in files.kept if file_id(p) not in excluded],
                deleted=[p for p in files.deleted if delete_id(p) not in excluded],
                secrets=list(files.secrets),
                ignored=dict(files.ignored),
                packaged=list(files.packaged),
                transient=list(files.transient),
                links=dict(files.links),
                skipped=dict(files.skipped),
                unsafe=list(files.unsafe),
                owners=_owners_of(
                    [p for p in files.kept if file_id(p) not in excluded], files.owners
                ),
            ),
            env={k: v for k, v in self.env.items() if env_id(k) not in excluded},
            env_removed=list(self.env_removed),
            env_secrets=list(self.env_secrets),
            notes=notes,
            accounts=self.accounts.without(frozenset(excluded)),
            tools=self.tools.without(excluded),
            commands=list(self.commands),
        )


def _owners_of(kept: list[str], owners: Mapping[str, str]) -> dict[str, str]:
    """``owners`` of the ``kept`` paths and of the folders above them that ``owners`` has."""
    out: dict[str, str] = {}
    for path in kept:
        up = path
        while up in owners and up not in out:
            out[up] = owners[up]
            up = up.rsplit("/", 1)[0]
    return out


#: The kinds of change a commit can leave out (each id starts with its kind and a colon).
CHANGE_KINDS = ("apt", "python", "conda", "npm", "cargo", "file", "delete", "env", "user", "group")


_MAX_ID = 4096


_MAX_IDS = 10_000


@dataclass(frozen=True)
class ChangeItem:
    """One change a commit can carry or leave out: its stable id, its kind, a short label and
    in words where and what (``detail``)."""

    id: str
    kind: str
    label: str
    detail: str

    def to_json(self) -> dict[str, str]:
        return asdict(self)


def apt_id(name: str) -> str:
    return f"apt:{name}"


def python_id(prefix: str, name: str) -> str:
    return f"python:{prefix}:{normalize(name)}"


def conda_id(prefix: str, spec: str) -> str:
    return f"conda:{prefix}:{spec}"


def file_id(path: str) -> str:
    return f"file:{path}"


def delete_id(path: str) -> str:
    return f"delete:{path}"


def env_id(name: str) -> str:
    return f"env:{name}"


def _no_space(text: str) -> bool:
    return bool(text) and not any(c.isspace() for c in text)


def _prefixed(rest: str, *, last: bool) -> tuple[str, str] | None:
    """``/PREFIX:NAME`` split at its last (a Python name) or first (a conda spec) colon."""
    prefix, sep, name = rest.rpartition(":") if last else rest.partition(":")
    return (prefix, name) if sep and prefix.startswith("/") and name else None


def _canonical_id(value: object) -> str | None:
    """A change id as ``change_items`` spells it (a Python name normalized), or ``None`` when
    ``value`` is not one: ``apt:NAME``, ``python:/PREFIX:NAME``, ``conda:/PREFIX:SPEC``,
    ``npm:NAME``, ``cargo:NAME``, ``file:/PATH``, ``delete:/PATH``, ``env:NAME``, ``user:NAME``,
    ``group:NAME``."""
    if not isinstance(value, str) or len(value) > _MAX_ID or not value.isprintable():
        return None
    kind, _, rest = value.partition(":")
    if kind == "python":
        parts = _prefixed(rest, last=True)
        return python_id(*parts) if parts is not None and _no_space(parts[1]) else None
    valid = {
        "apt": _no_space(rest),
        "conda": _prefixed(rest, last=False) is not None,
        "file": rest.startswith("/"),
        "delete": rest.startswith("/"),
        "env": _no_space(rest) and "=" not in rest,
        "npm": NPM_NAME.fullmatch(rest) is not None,
        "cargo": CRATE_NAME.fullmatch(rest) is not None,
        "user": ACCOUNT_NAME.fullmatch(rest) is not None,
        "group": ACCOUNT_NAME.fullmatch(rest) is not None,
    }
    return value if valid.get(kind, False) else None


def check_change_ids(values: Iterable[object]) -> tuple[str, ...]:
    """Change ids as given by a user (deduplicated, in order, Python names normalized); a
    ``BadRequest`` naming the first one that is not an id."""
    ids: dict[str, None] = {}
    for value in values:
        canonical = _canonical_id(value)
        if canonical is None:
            shown = repr(value) if len(repr(value)) <= 200 else repr(value)[:200] + "..."
            raise BadRequest(
                f"Not a change id: {shown}. Ids are those of the diff's items: apt:NAME, "
                "python:PREFIX:NAME, conda:PREFIX:SPEC, npm:NAME, cargo:NAME, file:PATH, "
                "delete:PATH, env:NAME, user:NAME or group:NAME",
                details={"id": shown},
            )
        ids[canonical] = None
        if len(ids) > _MAX_IDS:
            raise BadRequest(f"More than {_MAX_IDS} change ids to leave out")
    return tuple(ids)


def _not_reproducible(py: PythonChanges) -> list[str]:
    notes = []
    for dist in [*py.added, *(b for _, b in py.upgraded)]:
        name = dist.name if names.PY_NAME.fullmatch(dist.name) else shown(dist.name)
        version = dist.version if names.PY_VERSION.fullmatch(dist.version) else shown(dist.version)
        python = py.env.python if safe_text(py.env.python) else shown(py.env.python)
        if dist.source == "invalid":
            notes.append(
                f"{name} {version} ({python}): its {shown(dist.url, 120)[1:-1]}; a Dockerfile "
                "cannot tell where it was installed from, not written"
            )
        elif dist.source in NOT_REPRODUCIBLE:
            url = dist.url if safe_text(dist.url) else shown(dist.url)
            notes.append(
                f"{name} {version} is {'an' if dist.source == 'editable' else 'a'} "
                f"{dist.source} install from {url} "
                f"({python}): a Dockerfile cannot install it from there; add its source to "
                "the build context and install it in the Dockerfile"
            )
    return notes
