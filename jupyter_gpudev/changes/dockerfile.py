"""A change set rendered as a Dockerfile diff: the lines that rebuild what changed.

The new lines go at the end of the environment's Dockerfile (its last stage), or into a new
Dockerfile ``FROM`` the environment's image when it only had an image. One layer per kind of
change, always in the same order and sorted inside, so the same changes give the same diff:

1. package-manager sources, keys and configuration (apt sources, pip.conf, .condarc: one
   ``COPY``), then ``apt-get update && apt-get install`` with pinned
   versions and the list cleanup in one ``RUN``; removals with ``apt-get purge``;
2. conda installs and removals per environment;
3. per Python environment: a new venv is created, then ``pip install`` of pinned
   requirements, then ``pip uninstall``;
4. kept files: one ``COPY`` of the generated build-context folder onto ``/``;
5. deleted files: ``RUN ["rm", "-rf", "--", ...]`` (exec form: no shell);
6. ``ENV`` lines.

Values that come from the container (package names, versions, paths) are validated or quoted:
nothing read from a container is pasted into a shell line as is. Credentials are never
written: they are listed in the report only.
"""

from __future__ import annotations

import difflib
import hashlib
import json
import re
import shlex
from dataclasses import dataclass, field, replace
from typing import Any

from ..containers.references import escape_character
from ..errors import BadRequest
from ..untrusted import escape_unprintable
from . import accounts as user_accounts
from . import model, names
from . import tools as tool_state
from .model import ChangeItem, ChangeSet, PyDist, PythonChanges

MARK = "# --- gpudev:"
# Values from a container are checked whole (``fullmatch``: ``$`` would let a final newline
# through) before they reach a Dockerfile line.
#: A ``pip install`` URL (``name @ URL``): printable ASCII, no spaces.
_PIP_URL_RE = re.compile(r"[A-Za-z][A-Za-z0-9+.-]{0,20}:[!-~]{1,4200}")
_USER_RE = re.compile(r"^\s*USER\s+(\S+)", re.IGNORECASE)
#: Package-manager sources, keys and configuration (apt sources and keys, pip.conf, .condarc):
#: copied before the packages are installed, so the installs use them (a private index, an
#: added apt repository).
SOURCE_PREFIXES = (
    "/etc/apt/",
    "/usr/share/keyrings/",
    "/etc/pip.conf",
    "/etc/xdg/pip/",
    "/etc/conda/",
    "/opt/conda/.condarc",
)
_SOURCE_HOME_RE = re.compile(
    r"^/(?:root|home/[^/]+)/(?:\.pip/|\.config/pip/|\.condarc\Z|\.config/conda/)"
)


def _is_path(value: str) -> bool:
    return model.safe_text(value) and value.startswith("/")


def _env_quoted(value: str) -> str:
    """A value in double quotes as Docker's ``ENV`` reads it back: ``\\``, ``"`` and ``$``
    escaped (a ``$`` would expand); the value has no control character (``writable``)."""
    escaped = value.replace("\\", "\\\\").replace('"', '\\"').replace("$", "\\$")
    return f'"{escaped}"'


def _dist_ok(dist: PyDist) -> bool:
    if not (names.PY_NAME.fullmatch(dist.name) and names.PY_VERSION.fullmatch(dist.version)):
        return False
    return dist.source not in ("vcs", "archive") or bool(_PIP_URL_RE.fullmatch(dist.url))


def writable(changes: ChangeSet, reported: list[str]) -> ChangeSet:
    """The part of a change set a Dockerfile can hold: every value read from the container
    checked whole (names and versions against their syntax, paths and values without control
    characters or line separators, bounded). What is left out is put in ``reported``, shown
    escaped: it stays a change, never a line of the Dockerfile."""
    return ChangeSet(
        apt=_writable_apt(changes.apt, reported),
        python=[k for py in changes.python if (k := _writable_python(py, reported)) is not None],
        conda=[w for c in changes.conda if (w := _writable_conda(c, reported)) is not None],
        files=_writable_files(changes.files, reported),
        env=_writable_env(changes.env, reported),
        env_removed=changes.env_removed,
        env_secrets=changes.env_secrets,
        notes=changes.notes,
        accounts=_writable_accounts(changes.accounts, reported),
        tools=changes.tools,
        commands=changes.commands,
    )


def _writable_accounts(
    changes: user_accounts.AccountChanges, reported: list[str]
) -> user_accounts.AccountChanges:
    """Users and groups whose every value is one (checked again: they go into a shell line)."""

    def name_ok(name: str) -> bool:
        if user_accounts.NAME.fullmatch(name):
            return True
        reported.append(f"user or group {model.shown(name)}: not a valid name, not written")
        return False

    def user_ok(name: str, user: user_accounts.User, groups: tuple[str, ...]) -> bool:
        paths = (user.home, user.shell)
        if all(user_accounts.PATH.fullmatch(p) for p in paths) and all(
            map(user_accounts.NAME.fullmatch, groups)
        ):
            return name_ok(name)
        reported.append(f"user {model.shown(name)}: a home, shell or group that is not one")
        return False

    return user_accounts.AccountChanges(
        [(n, g) for n, g in changes.groups_added if name_ok(n)],
        [(n, u, gs) for n, u, gs in changes.users_added if user_ok(n, u, gs)],
        [(n, u, gs) for n, u, gs in changes.users_changed if user_ok(n, u, gs)],
        [n for n in changes.users_removed if name_ok(n)],
        [n for n in changes.groups_removed if name_ok(n)],
    )


def _account_lines(changes: ChangeSet) -> list[str]:
    """``groupadd``/``useradd``/``usermod``/``userdel``/``groupdel`` in one ``RUN`` (values
    checked by ``writable``). An account that a package of the rebuild already made is left
    as the package made it."""
    accounts = changes.accounts
    steps = [
        f"(getent group {n} >/dev/null || groupadd --gid {g.gid} {n})"
        for n, g in accounts.groups_added
    ]
    for name, user, groups in accounts.users_added:
        options = f"--uid {user.uid} --gid {user.gid} --home-dir {user.home} --shell {user.shell}"
        if user.home.startswith("/home/"):
            options += " --create-home"
        if groups:
            options += f" --groups {','.join(groups)}"
        steps.append(f"(id -u {name} >/dev/null 2>&1 || useradd --no-log-init {options} {name})")
    for name, user, joined in accounts.users_changed:
        options = f"--home {user.home} --shell {user.shell}"
        if joined:
            options += f" --append --groups {','.join(joined)}"
        steps.append(f"usermod {options} {name}")
    steps += [f"userdel {n}" for n in accounts.users_removed]
    steps += [f"groupdel {n}" for n in accounts.groups_removed]
    if not steps:
        return []
    return ["RUN " + " \\\n && ".join(steps)]


def _tool_items(tools: tool_state.ToolChanges) -> list[ChangeItem]:
    items = [
        ChangeItem(tool_state.npm_id(n), "npm", f"{n} {v}", "npm package, installed globally")
        for n, v in tools.npm_added
    ]
    items += [
        ChangeItem(
            tool_state.npm_id(n), "npm", f"{n} {a}→{b}", f"npm package, version changed from {a}"
        )
        for n, a, b in tools.npm_upgraded
    ]
    items += [
        ChangeItem(tool_state.npm_id(n), "npm", f"remove {n}", f"npm package {v}, removed")
        for n, v in tools.npm_removed
    ]
    items += [
        ChangeItem(
            tool_state.cargo_id(c.name),
            "cargo",
            f"{c.name} {c.version}",
            f"cargo install ({c.home})",
        )
        for c in tools.cargo_added
    ]
    items += [
        ChangeItem(
            tool_state.cargo_id(c.name),
            "cargo",
            f"remove {c.name}",
            f"cargo crate {c.version}, removed",
        )
        for c in tools.cargo_removed
    ]
    return items


def _account_items(accounts: user_accounts.AccountChanges) -> list[ChangeItem]:
    items = [
        ChangeItem(user_accounts.group_id(n), "group", f"group {n}", f"group added (gid {g.gid})")
        for n, g in accounts.groups_added
    ]
    for name, user, groups in accounts.users_added:
        detail = f"user added (uid {user.uid}, gid {user.gid}, home {user.home}, {user.shell}"
        detail += f", groups {', '.join(groups)})" if groups else ")"
        items.append(ChangeItem(user_accounts.user_id(name), "user", f"user {name}", detail))
    for name, user, joined in accounts.users_changed:
        detail = f"user changed (home {user.home}, {user.shell}"
        detail += f", joined {', '.join(joined)})" if joined else ")"
        items.append(ChangeItem(user_accounts.user_id(name), "user", f"user {name}", detail))
    items += [
        ChangeItem(user_accounts.user_id(n), "user", f"remove user {n}", "user removed")
        for n in accounts.users_removed
    ]
    items += [
        ChangeItem(user_accounts.group_id(n), "group", f"remove group {n}", "group removed")
        for n in accounts.groups_removed
    ]
    return items


def _writable_apt(apt: model.AptChanges, reported: list[str]) -> model.AptChanges:
    out = model.AptChanges()
    show = model.shown
    for name, version in apt.added:
        if names.DPKG_PACKAGE.fullmatch(name) and names.DPKG_VERSION.fullmatch(version):
            out.added.append((name, version))
        else:
            reported.append(f"apt package {show(name)} {show(version)}: not a valid name/version")
    for name, was, version in apt.upgraded:
        if names.DPKG_PACKAGE.fullmatch(name) and names.DPKG_VERSION.fullmatch(version):
            out.upgraded.append((name, was, version))
        else:
            reported.append(f"apt package {show(name)} {show(version)}: not a valid name/version")
    for name, version in apt.recommended:
        if names.DPKG_PACKAGE.fullmatch(name) and names.DPKG_VERSION.fullmatch(version):
            out.recommended.append((name, version))
        else:
            reported.append(f"apt package {show(name)} {show(version)}: not a valid name/version")
    for name, version in apt.removed:
        if names.DPKG_PACKAGE.fullmatch(name):
            out.removed.append((name, version))
        else:
            reported.append(f"apt package {show(name)}: not a valid name, its removal not written")
    return out


def _writable_conda(conda: model.CondaChanges, reported: list[str]) -> model.CondaChanges | None:
    show = model.shown
    if not _is_path(conda.prefix):
        if conda.added or conda.removed:
            reported.append(f"conda environment {show(conda.prefix)}: not a valid path")
        return None
    where = f"conda in {conda.prefix}"
    added = [s for s in conda.added if names.CONDA_SPEC.fullmatch(s)]
    reported += [f"{where}: {show(s)} is not a valid spec" for s in conda.added if s not in added]
    bad = [c for c in conda.channels if not names.CONDA_CHANNEL.fullmatch(c)]
    if bad and added:
        reported.append(f"{where}: channel {show(bad[0])} is not valid, installs not written")
        added = []
    removed: list[str] = []
    for spec in conda.removed:
        name = re.split(r"[<>=!~ ]", spec, maxsplit=1)[0]
        if names.CONDA_SPEC.fullmatch(name):
            removed.append(name)
        else:
            reported.append(f"{where}: {show(spec)} is not a valid spec, removal not written")
    return model.CondaChanges(conda.prefix, added, removed, conda.channels if added else ())


def _writable_python(py: PythonChanges, reported: list[str]) -> PythonChanges | None:
    env = py.env
    if not (
        _is_path(env.python)
        and _is_path(env.prefix)
        and _is_path(env.base_prefix)
        and names.PY_MINOR.fullmatch(env.version)
    ):
        if py:
            reported.append(
                f"Python environment {model.shown(env.prefix)} ({model.shown(env.python)}): not a "
                "valid interpreter path or version, its changes not written"
            )
        return None
    kept = PythonChanges(env, py.new_env)
    for dist in py.added:
        if _dist_ok(dist):
            kept.added.append(dist)
        else:
            reported.append(_bad_dist(env, dist))
    for old, dist in py.upgraded:
        if _dist_ok(dist):
            kept.upgraded.append((old, dist))
        else:
            reported.append(_bad_dist(env, dist))
    for dist in py.removed:
        if names.PY_NAME.fullmatch(dist.name):
            kept.removed.append(dist)
        else:
            reported.append(_bad_dist(env, dist))
    return kept


def _writable_files(files: model.FileChanges, reported: list[str]) -> model.FileChanges:
    out = replace(
        files,
        kept=[p for p in files.kept if _is_path(p)],
        deleted=[p for p in files.deleted if _is_path(p)],
        links={p: t for p, t in files.links.items() if _is_path(p) and model.safe_text(t)},
        unsafe=[],
        owners={p: o for p, o in files.owners.items() if _is_path(p) and _OWNER.fullmatch(o)},
    )
    unsafe = [
        *files.unsafe,
        *(p for p in [*files.kept, *files.deleted] if not _is_path(p)),
        *(f"{p} -> {t}" for p, t in files.links.items() if p not in out.links),
    ]
    reported += [
        f"{model.shown(p)}: a Dockerfile cannot name this path (control characters), not written"
        for p in sorted(set(unsafe))
    ]
    return out


_OWNER = re.compile(r"[0-9]{1,10}:[0-9]{1,10}")


def _chown_lines(files: model.FileChanges) -> list[str]:
    """One exec-form ``chown`` per owner, giving the copied paths in users' homes back to
    them (no shell: the paths go as they are)."""
    by_owner: dict[str, list[str]] = {}
    for path, owner in files.owners.items():
        by_owner.setdefault(owner, []).append(path)
    return [
        "RUN " + json.dumps(["chown", "-h", owner, "--", *sorted(paths)])
        for owner, paths in sorted(by_owner.items())
    ]


def _writable_env(env: dict[str, str], reported: list[str]) -> dict[str, str]:
    out: dict[str, str] = {}
    for name, value in env.items():
        if not names.ENV_NAME.fullmatch(name):
            reported.append(f"environment variable {model.shown(name)}: not a valid name")
        elif value == "" or model.safe_text(value):
            out[name] = value
        else:
            reported.append(
                f"environment variable {name}: its value {model.shown(value)} cannot be written"
            )
    return out


def _bad_dist(env: model.PythonEnv, dist: PyDist) -> str:
    return (
        f"pip package {model.shown(dist.name)} {model.shown(dist.version)} in {env.prefix}: "
        "not a valid name, version or URL, not written"
    )


def is_source_path(path: str) -> bool:
    """Whether a kept file configures a package manager (see ``SOURCE_PREFIXES``)."""
    return path.startswith(SOURCE_PREFIXES) or _SOURCE_HOME_RE.match(path) is not None


#: How many kept paths the Dockerfile comment names.
LISTED_FILES = 10


@dataclass
class RenderedDiff:
    """A Dockerfile diff: the old and new Dockerfile, the unified diff, what was left out."""

    dockerfile: str
    created: bool
    old_text: str
    new_text: str
    diff: str
    #: The build-context folder (relative to the build context) the COPY line reads.
    context_folder: str
    #: Files to put into the context folder (container paths).
    files: list[str] = field(default_factory=list)
    #: What was not written (credentials, installs a Dockerfile cannot repeat), one per line.
    reported: list[str] = field(default_factory=list)

    @property
    def dockerfile_digest(self) -> str:
        """sha256 of the new Dockerfile: the same changes give the same digest."""
        return hashlib.sha256(self.new_text.encode()).hexdigest()

    @property
    def digest(self) -> str:
        """What a user reviews: the new Dockerfile and every file it copies (its comment names
        only the first few). A commit that names it (``expect``) carries exactly that."""
        reviewed = self.new_text + "\0" + "\n".join(sorted(self.files))
        return hashlib.sha256(reviewed.encode()).hexdigest()

    def to_json(self) -> dict[str, Any]:
        return {
            "dockerfile": self.dockerfile,
            "created": self.created,
            "diff": self.diff,
            "context_folder": self.context_folder,
            "files": list(self.files),
            "reported": list(self.reported),
            "digest": self.digest,
            "empty": not self.diff,
        }


def _continued(head: str, items: list[str], tail: str = "") -> list[str]:
    """``head \\`` then one item per line, indented, then an optional tail."""
    lines = [f"{head} \\"]
    for i, item in enumerate(items):
        last = i == len(items) - 1 and not tail
        lines.append(f"      {item}" + ("" if last else " \\"))
    if tail:
        lines.append(f" {tail}")
    return lines


def _apt_lines(changes: ChangeSet) -> list[str]:
    """apt lines of a ``writable`` change set."""
    lines: list[str] = []
    apt = changes.apt
    install = [
        f"{name}={version}"
        for name, version in [*apt.added, *((n, v) for n, _, v in apt.upgraded), *apt.recommended]
    ]
    if install:
        # What apt installed because a package recommends it is named (pinned, as the rest),
        # then marked automatic again, as it was in the container.
        recommended = sorted(name for name, _ in apt.recommended)
        mark = f"&& apt-mark auto {' '.join(recommended)} >/dev/null \\\n " if recommended else ""
        lines += _continued(
            "RUN apt-get update \\\n && apt-get install -y --no-install-recommends",
            sorted(install),
            f"{mark}&& rm -rf /var/lib/apt/lists/*",
        )
    remove = sorted(n for n, _ in changes.apt.removed)
    if remove:
        lines.append("RUN apt-get purge -y " + " ".join(remove))
    return lines


def _conda_lines(changes: ChangeSet) -> list[str]:
    """conda lines of a ``writable`` change set (removals are names already)."""
    lines: list[str] = []
    for conda in changes.conda:
        prefix = shlex.quote(conda.prefix)
        if conda.added:
            channels = " ".join(f"-c {shlex.quote(c)}" for c in conda.channels)
            quoted = " ".join(shlex.quote(s) for s in conda.added)
            lines.append(f"RUN conda install -y -p {prefix} {channels} {quoted}".replace("  ", " "))
        if conda.removed:
            removed = " ".join(shlex.quote(r) for r in conda.removed)
            lines.append(f"RUN conda remove -y -p {prefix} {removed}")
    return lines


def _python_lines(changes: ChangeSet) -> list[str]:
    """pip lines of a ``writable`` change set."""
    lines: list[str] = []
    for py in changes.python:
        if not py:
            continue
        env = py.env
        python = shlex.quote(env.python)
        flags = "--break-system-packages " if env.externally_managed else ""
        if py.new_env and env.is_venv:
            base = shlex.quote(f"{env.base_prefix}/bin/python{env.version}")
            lines.append(f"RUN {base} -m venv {shlex.quote(env.prefix)}")
        wanted = [*py.added, *(b for _, b in py.upgraded)]
        if py.new_env and env.is_venv:
            # A fresh venv has pip and setuptools of its own: only what was added on top.
            wanted = [d for d in wanted if d.name.lower() not in ("pip", "setuptools", "wheel")]
        requirements = sorted(
            shlex.quote(d.requirement()) for d in wanted if d.source not in model.NOT_REPRODUCIBLE
        )
        if requirements:
            lines += _continued(
                f"RUN {python} -m pip install --no-cache-dir {flags}".rstrip(), requirements
            )
        removed = sorted(shlex.quote(d.name) for d in py.removed)
        if removed:
            lines.append(f"RUN {python} -m pip uninstall -y {flags}" + " ".join(removed))
    return lines


def _env_lines(changes: ChangeSet, reported: list[str]) -> list[str]:
    """``ENV`` lines of a ``writable`` change set; credentials and unset variables reported."""
    lines = [f"ENV {name}={_env_quoted(changes.env[name])}" for name in sorted(changes.env)]
    reported.extend(
        f"environment variable {escape_unprintable(name)}: looks like a credential, not written"
        for name in changes.env_secrets
    )
    reported.extend(
        f"environment variable {escape_unprintable(name)}: unset in the container (a Dockerfile "
        "cannot unset it)"
        for name in changes.env_removed
    )
    return lines


_FRESH_VENV_DISTS = ("pip", "setuptools", "wheel")


def change_items(changes: ChangeSet) -> list[ChangeItem]:
    """Every change a commit can carry or leave out (``ChangeSet.without``), in the order the
    Dockerfile renders them; credentials, unset variables and notes are not items (they are
    never written), nor values a Dockerfile cannot hold (``writable``: reported). Installs a
    Dockerfile cannot repeat are items too: left out, a verify build no longer fails on
    them. Labels and details are printable (unprintable characters escaped)."""
    changes = writable(changes, [])
    files = changes.files
    items = [
        ChangeItem(model.file_id(p), "file", p, "package-manager configuration file, copied first")
        for p in sorted(p for p in files.kept if is_source_path(p))
    ]
    apt: list[tuple[str, ChangeItem]] = []
    for name, version in changes.apt.added:
        item = ChangeItem(model.apt_id(name), "apt", f"{name} {version}", "apt package, added")
        apt.append((f"{name}={version}", item))
    for name, was, version in changes.apt.upgraded:
        detail = f"apt package, version changed from {was}"
        apt.append(
            (
                f"{name}={version}",
                ChangeItem(model.apt_id(name), "apt", f"{name} {was}→{version}", detail),
            )
        )
    for name, version in changes.apt.recommended:
        detail = "apt package, added automatically: a package recommends it"
        apt.append(
            (
                f"{name}={version}",
                ChangeItem(model.apt_id(name), "apt", f"{name} {version}", detail),
            )
        )
    items += [item for _, item in sorted(apt, key=lambda pair: pair[0])]
    items += [
        ChangeItem(model.apt_id(n), "apt", f"remove {n}", f"apt package {v}, removed")
        for n, v in sorted(changes.apt.removed)
    ]
    for conda in changes.conda:
        where = f"conda in {conda.prefix}"
        items += [
            ChangeItem(model.conda_id(conda.prefix, s), "conda", s, f"{where}, install requested")
            for s in conda.added
        ]
        items += [
            ChangeItem(model.conda_id(conda.prefix, s), "conda", f"remove {s}", f"{where}, removed")
            for s in conda.removed
        ]
    for py in changes.python:
        items += _python_items(py)
    items += _tool_items(changes.tools)
    items += _account_items(changes.accounts)
    items += [
        ChangeItem(model.file_id(p), "file", p, "file added or changed, copied into the image")
        for p in sorted(p for p in files.kept if not is_source_path(p))
    ]
    items += [
        ChangeItem(model.delete_id(p), "delete", f"delete {p}", "deleted from the image")
        for p in sorted(files.deleted)
    ]
    for name in sorted(changes.env):
        value = changes.env[name]
        shown = value if len(value) <= 60 else value[:57] + "..."
        items.append(
            ChangeItem(model.env_id(name), "env", f"{name}={shown}", "environment variable")
        )
    return [
        ChangeItem(i.id, i.kind, escape_unprintable(i.label), escape_unprintable(i.detail))
        if not (i.label.isprintable() and i.detail.isprintable())
        else i
        for i in items
    ]


def _python_items(py: PythonChanges) -> list[ChangeItem]:
    env = py.env
    where = f"pip in the new venv {env.prefix}" if py.new_env else f"pip in {env.prefix}"

    def item(dist: PyDist, label: str, detail: str) -> ChangeItem:
        if dist.source in model.NOT_REPRODUCIBLE:
            detail += f" ({dist.source} install: a Dockerfile cannot repeat it, see the notes)"
        return ChangeItem(model.python_id(env.prefix, dist.name), "python", label, detail)

    fresh = [d for d in py.added if py.new_env and d.name.lower() in _FRESH_VENV_DISTS]
    installs = [
        (d, item(d, f"{d.name} {d.version}", f"{where}, added")) for d in py.added if d not in fresh
    ]
    installs += [
        (b, item(b, f"{b.name} {a.version}→{b.version}", f"{where}, upgraded from {a.version}"))
        for a, b in py.upgraded
    ]
    installs.sort(key=lambda pair: shlex.quote(pair[0].requirement()))
    return [
        *(item(d, f"{d.name} {d.version}", f"{where}, comes with the venv") for d in fresh),
        *(i for _, i in installs),
        *(
            item(d, f"remove {d.name}", f"{where}, removed (was {d.version})")
            for d in sorted(py.removed, key=lambda d: shlex.quote(d.name))
        ),
    ]


def _last_user(text: str) -> str | None:
    user = None
    for line in text.splitlines():
        match = _USER_RE.match(line)
        if match:
            user = match.group(1)
        elif line.strip().upper().startswith("FROM "):
            user = None  # a new stage starts as root
    return user


def comment_lines(message: str | None) -> list[str]:
    """A commit message as Dockerfile comment lines (control characters dropped)."""
    if not message:
        return []
    lines = []
    for line in message.strip().splitlines():
        clean = "".join(c for c in line if c.isprintable()).rstrip()
        lines.append(f"# {clean}" if clean else "#")
    return lines


#: The most logged commands a diff shows (the latest).
SHOWN_COMMANDS = 50


def command_lines(commands: list[str]) -> list[str]:
    """The package-manager commands run since the last commit, as comments (escaped: the log
    is the container's, so anything may be in it)."""
    if not commands:
        return []
    lines = ["# commands run since the last commit (gpudev's command log, for reference):"]
    if len(commands) > SHOWN_COMMANDS:
        lines.append(f"#   ... {len(commands) - SHOWN_COMMANDS} earlier")
    for command in commands[-SHOWN_COMMANDS:]:
        shown = escape_unprintable(command).rstrip("\\`")  # a comment continues nothing
        lines.append(f"#   {shown if len(shown) <= 300 else shown[:297] + '...'}")
    return lines


def link_lines(links: dict[str, str], reported: list[str]) -> list[str]:
    """``RUN ["ln", "-sfn", "--", TARGET, PATH]`` (exec form: no shell) for each kept symbolic
    link not made in the build context (``FileChanges.links``); a path that is not absolute,
    or a path or target with control characters, is reported instead."""
    lines: list[str] = []
    for path, target in sorted(links.items()):
        if (
            not path.startswith("/")
            or not target
            or any(ord(c) < 0x20 or ord(c) == 0x7F for c in path + target)
        ):
            reported.append(f"symbolic link {path!r} -> {target!r}: not a valid link, not made")
            continue
        lines.append("RUN " + json.dumps(["ln", "-sfn", "--", target, path]))
    return lines


def change_lines(
    changes: ChangeSet,
    container: str,
    environment: str,
    context_folder: str,
    user: str | None,
    *,
    message: str | None = None,
) -> tuple[list[str], list[str], list[str]]:
    """The Dockerfile lines for a change set; also the files to copy and what is reported
    (values from the container that a Dockerfile cannot hold are left out: ``writable``)."""
    reported: list[str] = []
    changes = writable(changes, reported)
    left_out = len(reported)
    files = changes.files
    source_files = sorted(p for p in files.kept if is_source_path(p))
    other_files = sorted(p for p in files.kept if not is_source_path(p))
    body: list[str] = []
    if source_files:
        shown = ", ".join(source_files[:LISTED_FILES])
        body.append(f"# package sources and configuration: {shown}")
        body.append(f"COPY {context_folder}/sources/ /")
    body += _apt_lines(changes)
    body += _conda_lines(changes)
    body += _python_lines(changes)
    body += tool_state.tool_lines(changes.tools)
    body += _account_lines(changes)
    reported.extend(changes.notes)
    if other_files:
        shown = ", ".join(other_files[:LISTED_FILES])
        more = len(other_files) - LISTED_FILES
        body.append(
            f"# {len(other_files)} file(s): {shown}" + (f" and {more} more" if more > 0 else "")
        )
        body.append(f"COPY {context_folder}/files/ /")
    body += _chown_lines(files)
    body += link_lines(files.links, reported)
    if files.deleted:
        body.append("RUN " + json.dumps(["rm", "-rf", "--", *sorted(files.deleted)]))
    body += _env_lines(changes, reported)
    reported.extend(f"{path}: looks like a credential, not copied" for path in files.secrets)
    reported = [escape_unprintable(r) for r in reported]
    if not body:
        return [], [], reported
    where = escape_unprintable(f"{container} (environment {environment})")
    lines = [f"{MARK} changes of dev container {where} ---"]
    lines += comment_lines(message)
    lines += command_lines(changes.commands)
    if left_out:
        lines.append(
            f"# {left_out} change(s) not written: a Dockerfile cannot hold them (see the notes)"
        )
    if user not in (None, "root", "0", "0:0"):
        lines.append("USER root")
    lines += body
    if user not in (None, "root", "0", "0:0"):
        lines.append(f"USER {user}")
    return lines, [*source_files, *other_files], reported


def render(
    changes: ChangeSet,
    *,
    container: str,
    environment: str,
    dockerfile: str,
    old_text: str | None,
    image: str | None,
    context_folder: str,
    message: str | None = None,
) -> RenderedDiff:
    """The Dockerfile diff of ``changes``: appended to ``old_text`` (the environment's
    Dockerfile), or a new Dockerfile ``FROM image`` when ``old_text`` is ``None``."""
    created = old_text is None
    if old_text is not None and escape_character(old_text) != "\\":
        raise BadRequest(
            f"{dockerfile} sets its escape character to a backtick (# escape=`): the lines "
            "gpudev adds continue and quote with backslashes, so they cannot be appended to it. "
            "Remove the directive (or write the changes into another Dockerfile)",
            details={"dockerfile": dockerfile},
        )
    base = old_text if old_text is not None else f"FROM {image}\n"
    lines, files, reported = change_lines(
        changes, container, environment, context_folder, _last_user(base), message=message
    )
    if not lines:
        return RenderedDiff(dockerfile, False, base, base, "", context_folder, [], reported)
    new_text = base if base.endswith("\n") else base + "\n"
    new_text += "\n" + "\n".join(lines) + "\n"
    diff = "".join(
        difflib.unified_diff(
            [] if created else base.splitlines(keepends=True),
            new_text.splitlines(keepends=True),
            fromfile="/dev/null" if created else f"a/{dockerfile}",
            tofile=f"b/{dockerfile}",
        )
    )
    return RenderedDiff(
        dockerfile,
        created,
        "" if created else base,
        new_text,
        diff,
        context_folder,
        files,
        reported,
    )
