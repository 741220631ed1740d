"""The packages of a dev container, read as data: no program of the container is run.

A dev container is the user's: whatever runs in it (a kernel, a pip install, a setup.py) can
replace its programs and interpreters, plant a virtual environment whose ``bin/python`` is a
script, or set ``PATH``/``LD_PRELOAD``/``PYTHON*`` in its environment. gpudev therefore never
executes anything inside a dev container to learn its packages. Its package state is computed
from three things:

1. the state of its **image** (``ChangeCapture.probe_image``): the probe script, run once per
   image in a throwaway container of it (no network, no GPU, no mounts, removed after). That is
   the one place a probe runs code, and it is safe to: the image is the one the administrator
   or the environment allows, and the sandbox shares nothing with the host or the dev
   container; the probe still runs its programs by absolute path with a fixed ``PATH``, the
   image's ``LD_*``/``PYTHON*`` variables emptied and Python in isolated mode (``-I``);
2. the container's ``docker diff`` against that image: every path added, changed or deleted;
3. package metadata files the diff names, read as data through the engine's archive API
   (``ContainerReader``: the engine serves them without running anything in the container,
   stopped containers included): dpkg's status file and ``info/PKG.list``, apt's
   extended_states, conda histories and ``.condarc``, and for each Python distribution whose
   ``.dist-info``/``.egg-info`` folder changed its METADATA (PKG-INFO), RECORD and
   ``direct_url.json``; a new virtual environment from its ``pyvenv.cfg``.

``current_state`` is a pure function of the three (a ``read`` callback stands for the
engine), so it is tested without one. Everything read is hostile: names and versions are
checked whole, bad entries are skipped and reported in ``Derived.problems``, a file over its
size limit or that is not a regular file is reported, never read; nothing raises.

Known limits of reading data rather than asking the interpreter: a distribution deleted from
one folder of an environment while the image also has it in another folder of the same
environment (shadowed) is reported as removed; dpkg's unmerged journal
(``/var/lib/dpkg/updates``, left by an interrupted dpkg) is not read.
"""

from __future__ import annotations

import base64
import csv
import io
import json
import os
import re
import tarfile
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field, replace
from typing import Any

from . import accounts as user_accounts
from . import model, names, probe, tools

#: Size limits of what is read (past them a file is reported, not read).
STATUS_LIMIT = 64 << 20
LIST_LIMIT = 16 << 20
RECORD_LIMIT = 16 << 20
METADATA_LIMIT = 1 << 20

#: Diff kinds (``docker diff``).
CHANGED, ADDED, DELETED = 0, 1, 2

#: Where venvs are looked for, and how deep (``pyvenv.cfg`` at most this many levels down).
VENV_ROOTS = ("/opt", "/root", "/home", "/usr/local", "/srv")
VENV_DEPTH = 4
#: Interpreters that are not venvs: path -> prefix.
SYSTEM_PYTHONS = {
    "/usr/bin/python3": "/usr",
    "/usr/local/bin/python3": "/usr/local",
    "/opt/conda/bin/python": "/opt/conda",
}
CONDA_ROOT = "/opt/conda"
CONDARC_FILES = ("/opt/conda/.condarc", "/root/.condarc", "/etc/conda/.condarc")
DPKG_STATUS = "/var/lib/dpkg/status"
APT_EXTENDED_STATES = "/var/lib/apt/extended_states"

_SITE_RE = re.compile(r"(?P<site>/.*/(?:site|dist)-packages)/(?P<dist>[^/]+\.(?:dist|egg)-info)")
_LIB_PYTHON_RE = re.compile(r"/lib/python(?P<v>[23]\.[0-9]{1,3})(?:/|\Z)")
_USER_SITE_RE = re.compile(r"/(?:root|home/[^/]+)/\.local/lib/python(?P<v>[0-9.]+)/site-packages")


class Unreadable(Exception):
    """A file that is not read: over its size limit, or not a single regular file."""


#: ``read(path, limit)``: a file's content, ``None`` when it does not exist; raises
#: ``Unreadable`` (over ``limit`` bytes, not a regular file).
Reader = Callable[[str, int], "bytes | None"]


@dataclass
class Derived:
    """The packages of a container now, with the files of the ones changed since its image
    (what ``changes.file_changes`` leaves out), and what could not be read."""

    result: model.ProbeResult
    problems: list[str] = field(default_factory=list)


@dataclass
class _Context:
    read: Reader
    problems: list[str]

    def text(self, path: str, limit: int) -> str | None:
        try:
            data = self.read(path, limit)
        except Unreadable as exc:
            self.problems.append(f"{path}: not read ({exc})")
            return None
        return None if data is None else data.decode("utf-8", "replace")


def current_state(
    image: model.PackageState,
    diff: Iterable[Mapping[str, Any]],
    read: Reader,
) -> Derived:
    """The packages of a container whose image has the packages ``image`` and whose
    ``docker diff`` against it is ``diff``; ``read`` reads a file of the container."""
    entries: dict[str, int] = {}
    for item in diff:
        path, kind = item.get("Path"), item.get("Kind")
        if isinstance(path, str) and path.startswith("/") and kind in (CHANGED, ADDED, DELETED):
            entries[os.path.normpath(path)] = int(kind)
    ctx = _Context(read, [])
    dpkg, auto, unrequired = _dpkg(image, entries, ctx)
    python, py_owned = _python(image, entries, ctx)
    conda = _conda(image, entries, ctx)
    accounts = _accounts(image, entries, ctx)
    npm, cargo, tools_owned = tools.current_tools(
        image.npm,
        image.cargo,
        entries,
        present=lambda path: _present(path, entries),
        read=ctx.text,
        problems=ctx.problems,
    )
    state = model.PackageState(dpkg, auto, python, conda, unrequired, accounts, npm, cargo)
    owned = _dpkg_owned(image, state, ctx) | py_owned | tools_owned
    return Derived(model.ProbeResult(state, owned), ctx.problems)


def _deleted(path: str, entries: Mapping[str, int]) -> bool:
    """Whether ``path`` or a folder it is in is deleted (the diff lists the top one only)."""
    while path not in ("/", ""):
        if entries.get(path) == DELETED:
            return True
        path = os.path.dirname(path)
    return False


def _present(path: str, entries: Mapping[str, int]) -> bool:
    """Whether the diff has ``path`` added or changed (and no folder of it deleted)."""
    return entries.get(path) in (ADDED, CHANGED) and not _deleted(path, entries)


# -- dpkg -----------------------------------------------------------------------------------


def _dpkg(
    image: model.PackageState, entries: Mapping[str, int], ctx: _Context
) -> tuple[dict[str, str], frozenset[str], frozenset[str]]:
    """dpkg's packages, the automatic ones, and the automatic ones nothing depends on."""
    dpkg = dict(image.dpkg)
    status: str | None = None
    if _present(DPKG_STATUS, entries):
        status = ctx.text(DPKG_STATUS, STATUS_LIMIT)
        if status is not None:
            dpkg = parse_dpkg_status(status, ctx.problems)
    elif _deleted(DPKG_STATUS, entries):
        dpkg = {}
    if _present(APT_EXTENDED_STATES, entries):
        text = ctx.text(APT_EXTENDED_STATES, STATUS_LIMIT)
        marks = probe.parse_apt_auto(text or "")
        auto = frozenset(p for p in dpkg if p in marks or p.split(":")[0] in marks)
    else:
        auto = frozenset(p for p in dpkg if p in image.dpkg_auto)
    unrequired = unrequired_packages(status, auto) if status is not None else frozenset()
    return dpkg, auto, unrequired


def _stanzas(text: str) -> Iterable[dict[str, str]]:
    """The paragraphs of a deb822 file (continuation lines dropped: no field read here has
    them)."""
    fields: dict[str, str] = {}
    for line in [*text.splitlines(), ""]:
        if not line.strip():
            if fields:
                yield fields
            fields = {}
        elif not line[0].isspace() and ":" in line:
            key, _, value = line.partition(":")
            fields[key.strip()] = value.strip()


def parse_dpkg_status(text: str, problems: list[str]) -> dict[str, str]:
    """Installed packages (``install``/``hold`` wanted, ``ok``, ``installed``) in dpkg's status
    file, named as ``dpkg-query -W -f '${binary:Package}'`` names them: ``name:arch`` for a
    ``Multi-Arch: same`` package or one of a foreign architecture (the native one is that of
    the ``dpkg`` package)."""
    stanzas = list(_stanzas(text))
    native = next((s.get("Architecture", "") for s in stanzas if s.get("Package") == "dpkg"), "")
    installed: dict[str, str] = {}
    for stanza in stanzas:
        want, _, rest = stanza.get("Status", "").partition(" ")
        if want not in ("install", "hold") or rest != "ok installed":
            continue
        name, version = stanza.get("Package", ""), stanza.get("Version", "")
        arch = stanza.get("Architecture", "")
        if not (
            names.DPKG_NAME.fullmatch(name)
            and names.DPKG_VERSION.fullmatch(version)
            and (not arch or names.DPKG_ARCH.fullmatch(arch))
        ):
            problems.append(f"{DPKG_STATUS}: a package entry skipped ({name[:80]!r})")
            continue
        foreign = arch not in ("", "all", native)
        if arch and (stanza.get("Multi-Arch") == "same" or foreign):
            name = f"{name}:{arch}"
        installed[name] = version
    return installed


_RELATION_RE = re.compile(r"\s*([a-z0-9][a-z0-9+.-]*)")


def _installed_stanzas(text: str) -> Iterable[dict[str, str]]:
    for stanza in _stanzas(text):
        want, _, rest = stanza.get("Status", "").partition(" ")
        if want in ("install", "hold") and rest == "ok installed":
            yield stanza


def unrequired_packages(status: str, auto: frozenset[str]) -> frozenset[str]:
    """The ``auto`` packages that no installed package (in dpkg's ``status`` text) depends on
    (``Depends``/``Pre-Depends``; of alternatives, the first one installed, by name or by a
    package that ``Provides`` it): apt installed them because something recommends them."""
    stanzas = list(_installed_stanzas(status))
    providers: dict[str, set[str]] = {}
    for stanza in stanzas:
        name = stanza.get("Package", "")
        providers.setdefault(name, set()).add(name)
        for provided in stanza.get("Provides", "").split(","):
            match = _RELATION_RE.match(provided)
            if match:
                providers.setdefault(match[1], set()).add(name)
    required: set[str] = set()
    for stanza in stanzas:
        groups = ",".join(stanza.get(f, "") for f in ("Pre-Depends", "Depends")).split(",")
        for group in groups:
            for alternative in group.split("|"):
                match = _RELATION_RE.match(alternative)
                if match and match[1] in providers:
                    required |= providers[match[1]]
                    break
    return frozenset(p for p in auto if p.split(":")[0] not in required)


def _dpkg_owned(image: model.PackageState, state: model.PackageState, ctx: _Context) -> set[str]:
    owned: set[str] = set()
    changed = [n for n, v in sorted(state.dpkg.items()) if image.dpkg.get(n) != v]
    for name in changed:
        text = ctx.text(f"/var/lib/dpkg/info/{name}.list", LIST_LIMIT)
        lines = (text or "").splitlines()
        owned.update(os.path.normpath(line) for line in lines if line.startswith("/"))
    return owned


def _accounts(
    image: model.PackageState, entries: Mapping[str, int], ctx: _Context
) -> user_accounts.Accounts | None:
    """The image's users and groups, or the container's when it changed their files (read as
    data; ``None`` when one cannot be read: then no account change is reported)."""
    if not any(path in entries for path in (user_accounts.PASSWD, user_accounts.GROUP)):
        return image.accounts
    passwd = ctx.text(user_accounts.PASSWD, user_accounts.ACCOUNTS_LIMIT)
    group = ctx.text(user_accounts.GROUP, user_accounts.ACCOUNTS_LIMIT)
    if passwd is None or group is None:
        ctx.problems.append("the users and groups could not be read; their changes are not shown")
        return None
    return user_accounts.parse_accounts(passwd, group, ctx.problems)


# -- Python ---------------------------------------------------------------------------------


def _site_dirs(env: model.PythonEnv) -> list[str]:
    """The folders an environment's distributions are in, first the one that wins."""
    prefix, version = env.prefix.rstrip("/") or "/", env.version
    dirs = []
    if prefix == "/usr":  # Debian's: pip's own folder first, then the distribution's
        dirs += [f"/usr/local/lib/python{version}/dist-packages", "/usr/lib/python3/dist-packages"]
    dirs += [f"{prefix}/lib/python{version}/site-packages"]
    dirs += [f"{prefix}/lib/python{version}/dist-packages"]
    return dirs


@dataclass
class _DistChange:
    site: str
    folder: str
    key: str
    deleted: bool


def _dist_key(folder: str) -> str:
    """The normalized name of a ``NAME-VERSION.dist-info`` / ``NAME[-...].egg-info`` folder."""
    stem = folder.rsplit(".", 1)[0]
    return model.normalize(stem.split("-", 1)[0])


def _dist_changes(entries: Mapping[str, int]) -> list[_DistChange]:
    """The distribution folders the diff adds, changes or deletes, once each."""
    found: dict[str, _DistChange] = {}
    for path in entries:
        match = _SITE_RE.match(path)
        if match is None:
            continue
        site, dist = match["site"], match["dist"]
        folder = f"{site}/{dist}"
        deleted = _deleted(folder, entries)
        if folder in found and not deleted:
            continue
        found[folder] = _DistChange(site, folder, _dist_key(dist), deleted)
    return sorted(found.values(), key=lambda c: c.folder)


def _headers(text: str) -> dict[str, str]:
    """The first value of each header of a METADATA / PKG-INFO text (RFC 822 style)."""
    headers: dict[str, str] = {}
    for line in text.splitlines():
        if not line.strip():
            break
        if line[0].isspace() or ":" not in line:
            continue
        key, _, value = line.partition(":")
        headers.setdefault(key.strip().lower(), value.strip())
    return headers


def _read_dist(
    change: _DistChange, entries: Mapping[str, int], ctx: _Context
) -> model.PyDist | None:
    """A distribution from its folder (METADATA or PKG-INFO, direct_url.json)."""
    folder = change.folder
    if folder.endswith(".dist-info"):
        text = ctx.text(f"{folder}/METADATA", METADATA_LIMIT)
    else:  # an egg-info folder, or a file
        text = ctx.text(f"{folder}/PKG-INFO", METADATA_LIMIT)
        if text is None:
            try:
                data = ctx.read(folder, METADATA_LIMIT)
            except Unreadable:
                data = None  # a folder: it has no PKG-INFO
            text = None if data is None else data.decode("utf-8", "replace")
    if text is None:
        return None
    headers = _headers(text)
    name, version = headers.get("name", ""), headers.get("version", "")
    if not names.PY_NAME.fullmatch(name) or not names.PY_VERSION.fullmatch(version):
        ctx.problems.append(f"{folder}: no valid name and version, skipped")
        return None
    direct = None
    # A new folder has the files the diff lists; an older one may have its image's.
    if folder.endswith(".dist-info") and (
        entries.get(folder) != ADDED or f"{folder}/direct_url.json" in entries
    ):
        direct = ctx.text(f"{folder}/direct_url.json", METADATA_LIMIT)
    return model.PyDist.parse(name, version, direct)


def _record(change: _DistChange, ctx: _Context) -> set[str]:
    """The files a distribution installed (RECORD, relative to its site folder; an
    egg-info's installed-files.txt, relative to itself)."""
    if change.folder.endswith(".dist-info"):
        base, text = change.site, ctx.text(f"{change.folder}/RECORD", RECORD_LIMIT)
        rows = [row[0] for row in csv.reader(io.StringIO(text or "")) if row]
    else:
        base = change.folder
        text = ctx.text(f"{change.folder}/installed-files.txt", RECORD_LIMIT)
        rows = (text or "").splitlines()
    return {os.path.normpath(os.path.join(base, row)) for row in rows if row and "\0" not in row}


def _read_cfg(text: str) -> dict[str, str]:
    values: dict[str, str] = {}
    for line in text.splitlines():
        key, sep, value = line.partition("=")
        if sep:
            values[key.strip().lower()] = value.strip()
    return values


def _new_envs(
    image: model.PackageState, entries: Mapping[str, int], ctx: _Context
) -> dict[str, tuple[model.PythonEnv, bool]]:
    """Environments the diff adds: venvs (an added ``pyvenv.cfg`` with a ``bin/python``),
    interpreters and conda environments the image lacks. -> prefix: (env, system site)."""
    found: dict[str, tuple[model.PythonEnv, bool]] = {}

    def version_in(prefix: str) -> str:
        for path in entries:
            if path.startswith(prefix + "/lib/python"):
                match = _LIB_PYTHON_RE.search(path[len(prefix) :])
                if match:
                    return match["v"]
        return ""

    for path, kind in sorted(entries.items()):
        if kind != ADDED or _deleted(path, entries):
            continue
        prefix = ""
        if path.endswith("/pyvenv.cfg"):
            prefix = os.path.dirname(path)
            depth = next(
                (path.count("/") - r.count("/") for r in VENV_ROOTS if path.startswith(r + "/")),
                0,
            )
            if not 0 < depth <= VENV_DEPTH or not _present(f"{prefix}/bin/python", entries):
                continue
            cfg = _read_cfg(ctx.text(path, METADATA_LIMIT) or "")
            home = cfg.get("home", "")
            minor = ".".join(cfg.get("version", cfg.get("version_info", "")).split(".")[:2])
            minor = minor if names.PY_MINOR.fullmatch(minor) else version_in(prefix)
            base_prefix = os.path.dirname(home.rstrip("/")) if home.startswith("/") else ""
            if not minor or not base_prefix or prefix in image.python:
                continue
            base = image.python.get(base_prefix)
            env = model.PythonEnv(
                python=f"{prefix}/bin/python",
                prefix=prefix,
                base_prefix=base_prefix,
                version=minor,
                externally_managed=bool(base and base.externally_managed),
            )
            system = cfg.get("include-system-site-packages", "").lower() == "true"
            found[prefix] = (env, system)
            continue
        python_prefix = SYSTEM_PYTHONS.get(path)
        if python_prefix is None and path.startswith(f"{CONDA_ROOT}/envs/"):
            rest = path[len(CONDA_ROOT) + 6 :]
            if rest.count("/") == 2 and rest.endswith("/bin/python"):
                python_prefix = f"{CONDA_ROOT}/envs/{rest.split('/')[0]}"
        if python_prefix and python_prefix not in image.python:
            minor = version_in(python_prefix)
            if minor:
                env = model.PythonEnv(path, python_prefix, python_prefix, minor, False)
                found.setdefault(python_prefix, (env, False))
    return found


def _environments(
    image: model.PackageState, entries: Mapping[str, int], ctx: _Context
) -> tuple[dict[str, model.PythonEnv], dict[str, list[str]]]:
    """The container's Python environments (the image's still there, the new ones) and the
    folders of each one's distributions, first the one that wins."""
    envs: dict[str, model.PythonEnv] = {}
    sites: dict[str, list[str]] = {}
    for prefix, env in image.python.items():
        gone = _deleted(env.python, entries) or (
            env.is_venv and _deleted(f"{prefix}/pyvenv.cfg", entries)
        )
        if not gone:
            envs[prefix], sites[prefix] = env, _site_dirs(env)
    for prefix, (env, system) in _new_envs(image, entries, ctx).items():
        envs[prefix], sites[prefix] = env, _site_dirs(env)
        base = image.python.get(env.base_prefix)
        if system and base is not None:
            sites[prefix] += _site_dirs(base)
    user_sites = sorted({m.group(0) for p in entries if (m := _USER_SITE_RE.match(p))})
    for prefix, env in envs.items():
        if not env.is_venv:  # user sites belong to the system interpreters, last
            ending = f"/python{env.version}/site-packages"
            sites[prefix] += [s for s in user_sites if s.endswith(ending)]
    return envs, sites


def _python(
    image: model.PackageState, entries: Mapping[str, int], ctx: _Context
) -> tuple[dict[str, model.PythonEnv], set[str]]:
    envs, sites = _environments(image, entries, ctx)
    changes = _dist_changes(entries)
    read: dict[str, model.PyDist | None] = {}
    owned: set[str] = set()
    for prefix, env in list(envs.items()):
        order = sites[prefix]
        dists = dict(env.dists) if prefix in image.python else {}
        mine = [c for c in changes if c.site in order]
        # Lowest precedence first: a folder earlier in the order wins.
        mine.sort(key=lambda c: (-order.index(c.site), not c.deleted))
        for change in [c for c in mine if c.deleted]:
            dists.pop(change.key, None)
        for change in [c for c in mine if not c.deleted]:
            if change.folder not in read:
                read[change.folder] = _read_dist(change, entries, ctx)
            dist = read[change.folder]
            if dist is None:
                continue
            key = model.normalize(dist.name)
            dists[key] = dist
            old = image.python.get(prefix)
            if old is None or old.dists.get(key) != dist:
                owned |= _record(change, ctx)
        for link, dist in _egg_links(order, entries, ctx):
            dists[model.normalize(dist.name)] = dist
            owned.add(link)
        envs[prefix] = replace(env, dists=dists)
    return envs, owned


def _egg_links(
    sites: list[str], entries: Mapping[str, int], ctx: _Context
) -> Iterable[tuple[str, model.PyDist]]:
    """Legacy editable installs (``setup.py develop``, or pip's for a project without
    ``pyproject.toml``) in ``sites``: a ``NAME.egg-link`` naming the project's folder, whose
    ``NAME.egg-info/PKG-INFO`` has its version, and no PEP 610 ``direct_url.json``."""
    for path in sorted(entries):
        if not path.endswith(".egg-link") or os.path.dirname(path) not in sites:
            continue
        if not _present(path, entries):
            continue
        stem = os.path.basename(path).removesuffix(".egg-link")
        first = (ctx.text(path, METADATA_LIMIT) or "").split("\n", 1)[0].strip()
        target = os.path.normpath(first) if first.startswith("/") else ""
        if not names.PY_NAME.fullmatch(stem) or not target or not model.safe_text(target):
            ctx.problems.append(f"{path}: not an egg-link naming a project folder, skipped")
            continue
        headers = _headers(ctx.text(f"{target}/{stem}.egg-info/PKG-INFO", METADATA_LIMIT) or "")
        name, version = headers.get("name", stem), headers.get("version", "")
        if not names.PY_NAME.fullmatch(name) or not names.PY_VERSION.fullmatch(version):
            name, version = stem, "0"
        yield path, model.PyDist(name, version, "editable", f"file://{target}")


# -- conda ----------------------------------------------------------------------------------


def _conda(
    image: model.PackageState,
    entries: Mapping[str, int],
    ctx: _Context,
) -> dict[str, model.CondaEnv]:
    histories = {p: e.requested for p, e in image.conda.items()}
    for prefix in list(histories):
        if _deleted(f"{prefix}/conda-meta/history", entries):
            del histories[prefix]
    for path in sorted(entries):
        prefix = path.removesuffix("/conda-meta/history")
        conda_env = prefix == CONDA_ROOT or (
            prefix.startswith(f"{CONDA_ROOT}/envs/") and prefix.count("/") == 4
        )
        if prefix != path and conda_env and _present(path, entries):
            histories[prefix] = probe.parse_conda_history(ctx.text(path, STATUS_LIMIT) or "")
    if not histories:
        return {}
    channels: tuple[str, ...] = ()
    touched = any(path in entries for path in CONDARC_FILES)
    if touched:
        for path in CONDARC_FILES:
            if not _deleted(path, entries):
                channels = channels or probe.parse_condarc_channels(
                    ctx.text(path, METADATA_LIMIT) or ""
                )
    else:
        channels = next((e.channels for e in image.conda.values() if e.channels), ())
    return {p: model.CondaEnv(p, specs, channels) for p, specs in histories.items()}


# -- the engine -----------------------------------------------------------------------------

#: Go's ``os.FileMode`` type bits (the engine's path stat): none set is a regular file.
_GO_MODE_TYPE = (1 << 31) | (1 << 27) | (1 << 26) | (1 << 25) | (1 << 24) | (1 << 21) | (1 << 19)


class ChunkStream(io.RawIOBase):
    """A readable stream over an iterator of byte chunks (a streamed HTTP body), for
    ``tarfile`` to read an archive the engine streams without holding it whole."""

    def __init__(self, chunks: Iterable[bytes]) -> None:
        self._chunks = iter(chunks)
        self._left = memoryview(b"")

    def readable(self) -> bool:
        return True

    def readinto(self, buffer: Any) -> int:
        while not self._left:
            chunk = next(self._chunks, None)
            if chunk is None:
                return 0
            self._left = memoryview(chunk)
        size = min(len(buffer), len(self._left))
        buffer[:size] = self._left[:size]
        self._left = self._left[size:]
        return size


class ContainerReader:
    """Reads one regular file of a container (running or stopped) through the engine's
    archive API: the engine serves it, nothing runs in the container. ``None`` when the file
    does not exist; ``Unreadable`` when it is over the limit or not a single regular file
    (checked from the engine's stat of the path before any content is read)."""

    def __init__(self, container: Any) -> None:
        self.container = container

    def __call__(self, path: str, limit: int) -> bytes | None:
        api = self.container.client.api
        url = api._url("/containers/{0}/archive", str(self.container.id))
        response = api.get(
            url,
            params={"path": path},
            stream=True,
            timeout=api.timeout,
            headers={"Accept-Encoding": "identity"},
        )
        try:  # the path's type and size come in a header, before its content is read
            if response.status_code == 404:
                return None
            api._raise_for_status(response)
            try:
                header = response.headers["X-Docker-Container-Path-Stat"]
                stat = json.loads(base64.b64decode(header))
                mode, size = int(stat["mode"]), int(stat["size"])
            except (KeyError, TypeError, ValueError) as exc:
                raise Unreadable("the engine said nothing of its type") from exc
            if mode & _GO_MODE_TYPE:
                raise Unreadable("not a regular file")
            if size > limit:
                raise Unreadable(f"{size} bytes, over the limit of {limit}")
            return read_single_file(
                ChunkStream(response.iter_content(64 << 10)), os.path.basename(path), limit
            )
        finally:
            response.close()  # what is left unread is not read


class SourceReader:
    """``ContainerReader``'s reads from an ``export.ArchiveSource`` (a container's own layer,
    ``layer_diff.LayerFiles``, which asks the engine for what its layer does not hold): the
    same answers, the same checks."""

    def __init__(self, source: Any) -> None:
        self.source = source

    def __call__(self, path: str, limit: int) -> bytes | None:
        found = self.source.get(path)
        if found is None:
            return None
        chunks, stat = found
        try:
            size = stat.get("size")
            if isinstance(size, int) and size > limit:
                raise Unreadable(f"{size} bytes, over the limit of {limit}")
            return read_single_file(ChunkStream(chunks), os.path.basename(path), limit)
        finally:
            close = getattr(chunks, "close", None)
            if close is not None:
                close()


def read_single_file(stream: io.IOBase, name: str, limit: int) -> bytes:
    """The content of the one regular file an archive of ``name`` holds (``Unreadable``:
    anything else, or over ``limit`` bytes)."""
    with tarfile.open(fileobj=stream, mode="r|") as archive:
        member = archive.next()
        if member is None or not member.isfile() or member.name.removeprefix("./") != name:
            raise Unreadable("not a regular file")
        if member.size > limit:
            raise Unreadable(f"{member.size} bytes, over the limit of {limit}")
        extracted = archive.extractfile(member)
        data = extracted.read(limit + 1) if extracted is not None else b""
        if len(data) > limit:
            raise Unreadable(f"over the limit of {limit} bytes")
        if archive.next() is not None:
            raise Unreadable("not a single file")
        return data
