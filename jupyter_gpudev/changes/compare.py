"""Two package states compared: what a container added, removed or changed, what a rebuild from
the written Dockerfile is expected to have, and what reverting excluded changes gives."""

from __future__ import annotations

import os
from collections.abc import Collection, Mapping
from dataclasses import replace

from . import accounts as user_accounts
from . import tools
from .model import (
    ChangeSet,
    CondaChanges,
    CondaEnv,
    PackageState,
    PythonChanges,
    PythonEnv,
    _not_reproducible,
    apt_id,
    conda_id,
    python_id,
)


def package_changes(baseline: PackageState, now: PackageState) -> ChangeSet:
    """The package part of a change set (sorted: the same changes, the same order)."""
    changes = ChangeSet()
    before_manual, now_manual = baseline.dpkg_manual(), now.dpkg_manual()
    for name in sorted(now_manual):
        if name not in baseline.dpkg:
            changes.apt.added.append((name, now.dpkg[name]))
        elif baseline.dpkg[name] != now.dpkg[name]:
            changes.apt.upgraded.append((name, baseline.dpkg[name], now.dpkg[name]))
    for name in sorted(before_manual):
        if name not in now.dpkg:
            changes.apt.removed.append((name, baseline.dpkg[name]))
    for name in sorted(now.dpkg_unrequired & now.dpkg_auto):
        if name not in baseline.dpkg and name in now.dpkg:
            changes.apt.recommended.append((name, now.dpkg[name]))
    changes.accounts = user_accounts.account_changes(baseline.accounts, now.accounts)
    changes.tools = tools.tool_changes(baseline.npm, now.npm, baseline.cargo, now.cargo)
    changes.notes.extend(tools.tool_notes(changes.tools))
    for prefix in sorted(now.python):
        changes.python.append(_python_changes(baseline.python.get(prefix), now.python[prefix]))
        changes.notes.extend(_not_reproducible(changes.python[-1]))
    for prefix in sorted(set(baseline.python) - set(now.python)):
        changes.notes.append(f"the Python environment {prefix} was deleted (see the files)")
    for prefix in sorted(now.conda):
        conda_now = now.conda[prefix]
        conda_before = baseline.conda.get(prefix, CondaEnv(prefix))
        added = [s for s in conda_now.requested if s not in conda_before.requested]
        removed = [s for s in conda_before.requested if s not in conda_now.requested]
        changes.conda.append(CondaChanges(prefix, added, removed, conda_now.channels))
    return changes


def package_differences(
    container: PackageState,
    rebuilt: PackageState,
    loose_dpkg: Mapping[str, str | None] | None = None,
) -> list[str]:
    """Every package that differs between a container and an image rebuilt from its
    Dockerfile (dpkg, each Python environment, conda requests), one sentence each.
    ``loose_dpkg``: dpkg packages the rebuild may also have at this other version (``None``:
    not at all), see ``expected_state``."""
    out: list[str] = []
    loose = loose_dpkg or {}

    def versions(kind: str, a: Mapping[str, str], b: Mapping[str, str]) -> None:
        for name in sorted(set(a) | set(b)):
            was, now = a.get(name), b.get(name)
            if was == now or (kind == "apt" and name in loose and loose[name] == now):
                continue
            if now is None:
                out.append(f"{kind} {name} {was}: in the container, missing from the rebuild")
            elif was is None:
                out.append(f"{kind} {name} {now}: in the rebuild, not in the container")
            else:
                out.append(f"{kind} {name}: {was} in the container, {now} in the rebuild")

    versions("apt", container.dpkg, rebuilt.dpkg)
    for prefix in sorted(set(container.python) | set(rebuilt.python)):
        ours, theirs = container.python.get(prefix), rebuilt.python.get(prefix)
        if ours is None or theirs is None:
            where = "the container" if theirs is None else "the rebuild"
            out.append(f"python environment {prefix}: only in {where}")
            continue
        versions(
            f"python ({prefix})",
            {key: d.version for key, d in ours.dists.items()},
            {key: d.version for key, d in theirs.dists.items()},
        )
    versions("npm", container.npm, rebuilt.npm)
    versions(
        "cargo",
        {k: c.version for k, c in container.cargo.items()},
        {k: c.version for k, c in rebuilt.cargo.items()},
    )
    if container.accounts is not None and rebuilt.accounts is not None:
        versions(
            "account",
            user_accounts.describe(container.accounts),
            user_accounts.describe(rebuilt.accounts),
        )
    for prefix in sorted(set(container.conda) | set(rebuilt.conda)):
        a = set(container.conda[prefix].requested) if prefix in container.conda else set()
        b = set(rebuilt.conda[prefix].requested) if prefix in rebuilt.conda else set()
        out.extend(f"conda ({prefix}) {s}: in the container only" for s in sorted(a - b))
        out.extend(f"conda ({prefix}) {s}: in the rebuild only" for s in sorted(b - a))
    return out


def revert_excluded(
    baseline: PackageState, now: PackageState, excluded: Collection[str]
) -> PackageState:
    """The packages ``now`` with the ``excluded`` package changes (their ids) put back as the
    baseline had them: what a commit that leaves them out carries, and the baseline it
    leaves behind (so that they are still changes afterwards)."""
    if not excluded:
        return now
    dpkg, auto = dict(now.dpkg), set(now.dpkg_auto)
    for name in set(now.dpkg) | set(baseline.dpkg):
        if apt_id(name) not in excluded:
            continue
        auto.discard(name)
        dpkg.pop(name, None)
        if name in baseline.dpkg:
            dpkg[name] = baseline.dpkg[name]
            if name in baseline.dpkg_auto:
                auto.add(name)
    python: dict[str, PythonEnv] = {}
    for prefix, env in now.python.items():
        reverted = _revert_python(baseline.python.get(prefix), env, excluded)
        if reverted is not None:
            python[prefix] = reverted
    conda: dict[str, CondaEnv] = {}
    for prefix, env_now in now.conda.items():
        was = baseline.conda.get(prefix, CondaEnv(prefix)).requested
        requested = [
            s for s in env_now.requested if s in was or conda_id(prefix, s) not in excluded
        ]
        requested += [
            s for s in was if s not in env_now.requested and conda_id(prefix, s) in excluded
        ]
        conda[prefix] = replace(env_now, requested=tuple(requested))
    accounts = user_accounts.reverted(baseline.accounts, now.accounts, set(excluded))
    npm, cargo = tools.reverted(baseline.npm, now.npm, baseline.cargo, now.cargo, excluded)
    return PackageState(
        dpkg, frozenset(auto), python, conda, now.dpkg_unrequired, accounts, npm, cargo
    )


def _revert_python(
    before: PythonEnv | None, env: PythonEnv, excluded: Collection[str]
) -> PythonEnv | None:
    """``env`` with its excluded distributions as ``before`` had them; ``None`` for a new
    environment all of whose distributions are excluded (it stays new)."""
    old = before.dists if before is not None else {}
    dists = dict(env.dists)
    for key in set(env.dists) | set(old):
        if python_id(env.prefix, key) in excluded:
            dists.pop(key, None)
            if key in old:
                dists[key] = old[key]
    if before is None and env.dists and not dists:
        return None
    return replace(env, dists=dists)


def expected_state(
    baseline: PackageState, now: PackageState, excluded: Collection[str]
) -> tuple[PackageState, dict[str, str | None]]:
    """What an image rebuilt from a commit that leaves the ``excluded`` changes out has:
    the container's packages with those put back as in the baseline, and (when apt changes
    are left out) the automatic dpkg packages changed since the baseline with their baseline
    version (``None``: absent), which the rebuild may have instead (they may be what a
    left-out package pulled in: nothing says which package needed them)."""
    expected = revert_excluded(baseline, now, excluded)
    if not any(i.startswith("apt:") for i in excluded):
        return expected, {}
    loose = {
        name: baseline.dpkg.get(name)
        for name in now.dpkg_auto | baseline.dpkg_auto
        if baseline.dpkg.get(name) != now.dpkg.get(name)
    }
    return expected, loose


def changed_packages(baseline: PackageState, now: PackageState) -> tuple[list[str], list[str]]:
    """dpkg packages and Python distributions new or changed since the baseline, automatic
    dependencies included: the packages whose files are not file changes."""
    dpkg = [p for p, v in now.dpkg.items() if baseline.dpkg.get(p) != v]
    dists: set[str] = set()
    for prefix, env in now.python.items():
        old = baseline.python.get(prefix)
        dists.update(d.name for k, d in env.dists.items() if old is None or old.dists.get(k) != d)
    return sorted(dpkg), sorted(dists)


def _has_ancestor_in(path: str, paths: set[str]) -> bool:
    parent = os.path.dirname(path)
    while parent not in ("/", ""):
        if parent in paths:
            return True
        parent = os.path.dirname(parent)
    return False


def _python_changes(before: PythonEnv | None, env: PythonEnv) -> PythonChanges:
    py = PythonChanges(env=env, new_env=before is None)
    old = before.dists if before else {}
    for key in sorted(env.dists):
        dist = env.dists[key]
        if key not in old:
            py.added.append(dist)
        elif (old[key].version, old[key].source, old[key].url) != (
            dist.version,
            dist.source,
            dist.url,
        ):
            py.upgraded.append((old[key], dist))
    py.removed = [old[key] for key in sorted(old) if key not in env.dists]
    return py
