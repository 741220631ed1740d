"""Tools installed with ``npm install -g`` and ``cargo install``, read as data and compared.

- **npm**: the global packages are the top-level folders of the global ``node_modules``
  (``/usr/local/lib/node_modules``, npm's default prefix, and ``/usr/lib/node_modules``), each
  with its ``package.json`` (name, version, the commands it links into ``bin``);
- **cargo**: the crates ``cargo install`` installed are listed in ``.crates2.json`` of the
  cargo home (``/usr/local/cargo``, the Rust images', ``/root/.cargo`` and ``~/.cargo``); their
  commands are in its ``bin`` folder.

What they install (the package folder, the command links, the cargo home's bin, registry and
caches) is theirs, not files to copy. Everything read is hostile: a name or version that is
not one is skipped and reported, a crate from anywhere but crates.io is a note (a Dockerfile
cannot install it from the container's path or a git checkout it no longer has).
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Collection, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from . import names

NPM_ROOTS = ("/usr/local/lib/node_modules", "/usr/lib/node_modules")
#: The folder npm links a global package's commands into, for each root.
NPM_BIN = {"/usr/local/lib/node_modules": "/usr/local/bin", "/usr/lib/node_modules": "/usr/bin"}
CARGO_HOME_RE = re.compile(r"/usr/local/cargo|/root/\.cargo|/home/[A-Za-z0-9_.-]{1,32}/\.cargo")
CRATES = ".crates2.json"
CRATES_IO = "registry+https://github.com/rust-lang/crates.io-index"
#: The most a package.json or .crates2.json may weigh to be read.
LIMIT = 1 << 20

NPM_NAME, NPM_VERSION = names.NPM_NAME, names.NPM_VERSION
CRATE_NAME, CRATE_VERSION = names.CRATE_NAME, names.CRATE_VERSION
BIN_NAME = names.COMMAND_NAME
_CRATE_KEY = re.compile(r"(\S+) (\S+) \((\S+)\)")


@dataclass(frozen=True)
class Crate:
    home: str
    name: str
    version: str
    #: ``CRATES_IO``, or where else it came from (``git+...``, ``path+...``).
    source: str = CRATES_IO

    @property
    def key(self) -> str:
        return f"{self.home}:{self.name}"


@dataclass
class ToolChanges:
    npm_added: list[tuple[str, str]] = field(default_factory=list)
    npm_upgraded: list[tuple[str, str, str]] = field(default_factory=list)
    npm_removed: list[tuple[str, str]] = field(default_factory=list)
    cargo_added: list[Crate] = field(default_factory=list)
    cargo_removed: list[Crate] = field(default_factory=list)

    def __bool__(self) -> bool:
        return bool(
            self.npm_added
            or self.npm_upgraded
            or self.npm_removed
            or self.cargo_added
            or self.cargo_removed
        )

    def to_json(self) -> dict[str, Any]:
        return {
            "npm_added": [{"name": n, "version": v} for n, v in self.npm_added],
            "npm_upgraded": [{"name": n, "from": a, "to": b} for n, a, b in self.npm_upgraded],
            "npm_removed": [{"name": n, "version": v} for n, v in self.npm_removed],
            "cargo_added": [vars(c) for c in self.cargo_added],
            "cargo_removed": [vars(c) for c in self.cargo_removed],
        }

    def without(self, excluded: Iterable[str]) -> ToolChanges:
        out = set(excluded)
        return ToolChanges(
            [(n, v) for n, v in self.npm_added if npm_id(n) not in out],
            [(n, a, b) for n, a, b in self.npm_upgraded if npm_id(n) not in out],
            [(n, v) for n, v in self.npm_removed if npm_id(n) not in out],
            [c for c in self.cargo_added if cargo_id(c.name) not in out],
            [c for c in self.cargo_removed if cargo_id(c.name) not in out],
        )


def npm_id(name: str) -> str:
    return f"npm:{name}"


def cargo_id(name: str) -> str:
    return f"cargo:{name}"


# -- reading --------------------------------------------------------------------------------


def parse_package_json(text: str) -> tuple[str, str, list[str]] | None:
    """A package.json's name, version and command names, or ``None`` when they are not ones."""
    try:
        data = json.loads(text)
    except (ValueError, RecursionError):
        return None
    if not isinstance(data, dict):
        return None
    name, version, bins = data.get("name"), data.get("version"), data.get("bin")
    if not isinstance(name, str) or not isinstance(version, str):
        return None
    if not NPM_NAME.fullmatch(name) or not NPM_VERSION.fullmatch(version):
        return None
    if isinstance(bins, str):
        commands = [name.rsplit("/", 1)[-1]]
    elif isinstance(bins, dict):
        commands = [str(k) for k in bins]
    else:
        commands = []
    return name, version, [c for c in commands if BIN_NAME.fullmatch(c)]


def parse_crates(home: str, text: str, problems: list[str]) -> dict[str, Crate]:
    """The crates of a ``.crates2.json`` (``{"installs": {"NAME VERSION (SOURCE)": ...}}``)."""
    try:
        data = json.loads(text)
    except (ValueError, RecursionError):
        data = None
    installs = data.get("installs") if isinstance(data, dict) else None
    if not isinstance(installs, dict):
        problems.append(f"{home}/{CRATES}: not a list of installed crates, skipped")
        return {}
    crates: dict[str, Crate] = {}
    for key in installs:
        match = _CRATE_KEY.fullmatch(str(key))
        if (
            match is None
            or not CRATE_NAME.fullmatch(match[1])
            or not CRATE_VERSION.fullmatch(match[2])
            or not match[3].isprintable()
            or len(match[3]) > 1000
        ):
            problems.append(f"{home}/{CRATES}: an entry skipped ({str(key)[:60]!r})")
            continue
        crate = Crate(home, match[1], match[2], match[3])
        crates[crate.key] = crate
    return crates


def _npm_package(path: str) -> tuple[str, str] | None:
    """(root, package folder) of a path inside a global node_modules' top-level package."""
    for root in NPM_ROOTS:
        if path.startswith(root + "/"):
            parts = path[len(root) + 1 :].split("/")
            depth = 2 if parts[0].startswith("@") else 1
            if len(parts) >= depth:
                return root, f"{root}/{'/'.join(parts[:depth])}"
    return None


def _cargo_home(path: str) -> str | None:
    for home in ("/usr/local/cargo", "/root/.cargo"):
        if path == home or path.startswith(home + "/"):
            return home
    parts = path.split("/")
    if len(parts) >= 4 and parts[1] == "home" and parts[3] == ".cargo":
        home = "/".join(parts[:4])
        return home if CARGO_HOME_RE.fullmatch(home) else None
    return None


Present = Callable[[str], bool]
Read = Callable[[str, int], "str | None"]


def current_tools(
    npm: Mapping[str, str],
    cargo: Mapping[str, Crate],
    entries: Mapping[str, int],
    *,
    present: Present,
    read: Read,
    problems: list[str],
) -> tuple[dict[str, str], dict[str, Crate], set[str]]:
    """The global npm packages and cargo crates of a container whose image has ``npm`` and
    ``cargo`` and whose ``docker diff`` is ``entries`` (``present``: added or changed, not
    deleted; ``read``: a file's text); also the paths that are theirs."""
    npm_now, cargo_now, owned = dict(npm), dict(cargo), set()
    folders: dict[str, str] = {}
    for path in entries:
        found = _npm_package(path)
        if found is not None:
            folders.setdefault(found[1], found[0])
    by_folder = {f"{root}/{name}": name for name in npm for root in NPM_ROOTS}
    for folder, root in sorted(folders.items()):
        owned |= {p for p in entries if p == folder or p.startswith(folder + "/")}
        if not present(f"{folder}/package.json"):
            if not present(folder) and folder in by_folder:
                npm_now.pop(by_folder[folder], None)  # the package folder is gone
            continue
        parsed = parse_package_json(read(f"{folder}/package.json", LIMIT) or "")
        if parsed is None:
            problems.append(f"{folder}/package.json: no valid name and version, skipped")
            continue
        name, version, commands = parsed
        npm_now[name] = version
        owned |= {f"{NPM_BIN[root]}/{c}" for c in commands}
    homes = {h for p in entries if (h := _cargo_home(p)) is not None}
    for home in sorted(homes):
        owned |= {p for p in entries if p.startswith(home + "/")}
        if present(f"{home}/{CRATES}"):
            for key in [k for k, c in cargo_now.items() if c.home == home]:
                del cargo_now[key]
            cargo_now.update(parse_crates(home, read(f"{home}/{CRATES}", LIMIT) or "", problems))
    return npm_now, cargo_now, owned


def probe_npm(lines: list[str], problems: list[str]) -> tuple[str, str] | None:
    """One package.json the image probe printed."""
    parsed = parse_package_json("\n".join(lines))
    if parsed is None:
        problems.append("a global npm package without a valid name and version, skipped")
        return None
    return parsed[0], parsed[1]


# -- comparing and writing ------------------------------------------------------------------


def tool_changes(
    npm_before: Mapping[str, str],
    npm_now: Mapping[str, str],
    cargo_before: Mapping[str, Crate],
    cargo_now: Mapping[str, Crate],
) -> ToolChanges:
    changes = ToolChanges()
    for name in sorted(npm_now):
        if name not in npm_before:
            changes.npm_added.append((name, npm_now[name]))
        elif npm_before[name] != npm_now[name]:
            changes.npm_upgraded.append((name, npm_before[name], npm_now[name]))
    changes.npm_removed = [(n, npm_before[n]) for n in sorted(set(npm_before) - set(npm_now))]
    changes.cargo_added = [c for k, c in sorted(cargo_now.items()) if cargo_before.get(k) != c]
    changes.cargo_removed = [c for k, c in sorted(cargo_before.items()) if k not in cargo_now]
    return changes


def tool_notes(changes: ToolChanges) -> list[str]:
    return [
        f"cargo crate {c.name} {c.version} ({c.home}) comes from {c.source[:200]}: a Dockerfile "
        "cannot install it from there; add its source to the build context"
        for c in changes.cargo_added
        if c.source != CRATES_IO
    ]


def tool_lines(changes: ToolChanges) -> list[str]:
    """``npm install -g``/``uninstall -g`` and ``cargo install``/``uninstall`` lines (values
    checked again: they go into shell lines)."""
    lines: list[str] = []
    wanted = [*changes.npm_added, *((n, v) for n, _, v in changes.npm_upgraded)]
    install = sorted(
        f"{n}@{v}" for n, v in wanted if NPM_NAME.fullmatch(n) and NPM_VERSION.fullmatch(v)
    )
    if install:
        lines.append("RUN npm install -g --no-audit --no-fund " + " ".join(install))
    remove = sorted(n for n, _ in changes.npm_removed if NPM_NAME.fullmatch(n))
    if remove:
        lines.append("RUN npm uninstall -g " + " ".join(remove))
    for crate in changes.cargo_added:
        if crate.source == CRATES_IO and _crate_ok(crate):
            lines.append(
                f"RUN CARGO_HOME={crate.home} cargo install --locked --version {crate.version} "
                f"{crate.name}"
            )
    for crate in changes.cargo_removed:
        if _crate_ok(crate):
            lines.append(f"RUN CARGO_HOME={crate.home} cargo uninstall {crate.name}")
    return lines


def _crate_ok(crate: Crate) -> bool:
    return bool(
        CARGO_HOME_RE.fullmatch(crate.home)
        and CRATE_NAME.fullmatch(crate.name)
        and CRATE_VERSION.fullmatch(crate.version)
    )


def reverted(
    npm_before: Mapping[str, str],
    npm_now: Mapping[str, str],
    cargo_before: Mapping[str, Crate],
    cargo_now: Mapping[str, Crate],
    excluded: Collection[str],
) -> tuple[dict[str, str], dict[str, Crate]]:
    """The npm packages and crates now, the excluded ones as they were before."""
    npm = dict(npm_now)
    for name in set(npm_now) | set(npm_before):
        if npm_id(name) in excluded:
            npm.pop(name, None)
            if name in npm_before:
                npm[name] = npm_before[name]
    cargo = dict(cargo_now)
    for key in set(cargo_now) | set(cargo_before):
        crate = cargo_now.get(key) or cargo_before[key]
        if cargo_id(crate.name) in excluded:
            cargo.pop(key, None)
            if key in cargo_before:
                cargo[key] = cargo_before[key]
    return npm, cargo
