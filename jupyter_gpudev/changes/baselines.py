"""Baselines: what a container or an image started from (packages, variables, files, the
changes a commit left out), kept in gpudev's state folder by image and container id."""

from __future__ import annotations

import json
import os
import re
import threading
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from .. import safefs
from ..errors import EngineError
from . import model

if TYPE_CHECKING:
    pass

_SAFE_ID = re.compile(r"(?:sha256:)?[0-9a-f]+\Z")


def _check_id(value: str) -> str:
    if not _SAFE_ID.match(value):
        raise EngineError(f"Unexpected image or container id {value!r}")
    return value.replace("sha256:", "")


def uid_key(uid: str) -> str:
    """The name the baselines of something named by a UUID (a pod's uid) are kept under: its
    hex digits."""
    key = uid.replace("-", "").lower()
    if len(key) != 32 or any(c not in "0123456789abcdef" for c in key):
        raise EngineError(f"Unexpected pod uid {uid[:80]!r}")
    return key


class Baselines:
    """Baselines on disk: per image (what a container of it starts from) and per container
    (one probed after its lifecycle commands, or moved forward by ``commit --write``)."""

    def __init__(self, state_dir: str | os.PathLike[str]) -> None:
        self.folder = Path(state_dir) / "baselines"
        self._lock = threading.Lock()
        #: Container baselines as last read, by file (with its inode, size and time): the
        #: panel's listing reads every container's at each poll, and they rarely change.
        self._read_containers: dict[Path, tuple[tuple[int, int, int], Baseline]] = {}

    def _read(self, path: Path) -> dict[str, Any] | None:
        try:
            data = json.loads(path.read_text())
        except (OSError, ValueError):
            return None
        return data if isinstance(data, dict) else None

    def _write(self, path: Path, data: dict[str, Any]) -> None:
        with self._lock:
            self.folder.mkdir(mode=0o700, parents=True, exist_ok=True)
            atomic_write(path, json.dumps(data, sort_keys=True))

    def image(self, image_id: str) -> model.PackageState | None:
        data = self._read(self.folder / f"image-{_check_id(image_id)}.json")
        # An image probed before users, groups and tools were read is probed again.
        fresh = data is not None and "accounts" in data and "npm" in data
        return model.PackageState.from_json(data) if data and fresh else None

    def save_image(self, image_id: str, state: model.PackageState) -> None:
        self._write(self.folder / f"image-{_check_id(image_id)}.json", state.to_json())

    def container(self, container_id: str) -> Baseline | None:
        path = self.folder / f"container-{_check_id(container_id)}.json"
        try:
            stat = path.stat()
        except OSError:
            return None
        stamp = (stat.st_ino, stat.st_size, stat.st_mtime_ns)
        with self._lock:
            kept = self._read_containers.get(path)
        if kept is not None and kept[0] == stamp:
            return kept[1]
        data = self._read(path)
        baseline = _container_baseline(data) if data else None
        with self._lock:
            if baseline is None:
                self._read_containers.pop(path, None)
            else:
                self._read_containers[path] = (stamp, baseline)
        return baseline

    def save_container(self, container_id: str, baseline: Baseline) -> None:
        self._write(
            self.folder / f"container-{_check_id(container_id)}.json",
            {
                "packages": baseline.packages.to_json(),
                "env": baseline.env,
                "files": baseline.files,
                "secrets": baseline.secrets,
                "held": baseline.held,
                "digests": baseline.digests,
                "log_lines": baseline.log_lines,
            },
        )

    def forget(self, container_id: str) -> None:
        path = self.folder / f"container-{_check_id(container_id)}.json"
        path.unlink(missing_ok=True)
        with self._lock:
            self._read_containers.pop(path, None)

    def forget_image(self, image_id: str) -> None:
        (self.folder / f"image-{_check_id(image_id)}.json").unlink(missing_ok=True)


#: The most kept files whose content a baseline records (reading them is part of every diff
#: and change count): past it, the first ones in path order.
DIGESTED_FILES = 2000


@dataclass
class Baseline:
    """What a container started from: its packages, its environment variables (``None``: its
    image's) and the file changes it already had (``docker diff`` path -> kind)."""

    packages: model.PackageState
    env: dict[str, str] | None = None
    files: dict[str, int] = field(default_factory=dict)
    #: Changed files a commit left out because their content holds a credential: still
    #: changes (kept from a removal without force), reported, never copied.
    secrets: list[str] = field(default_factory=list)
    #: The ids of the changes the last written commit left out (``exclude``): still changes,
    #: kept from a removal without force.
    held: list[str] = field(default_factory=list)
    #: What the kept files the baseline already had were then (``Exported.digests``: at most
    #: ``DIGESTED_FILES`` of them): one edited since, same path and kind, is a change again.
    digests: dict[str, str] = field(default_factory=dict)
    #: How many lines of the command log (``containers.commandlog``) were there then.
    log_lines: int = 0
    _fingerprint: int | None = field(default=None, init=False, repr=False, compare=False)

    def fingerprint(self) -> int:
        """A hash of the files and left-out changes (what a kept change count depends on),
        computed once: baselines are read again only when their file changes."""
        if self._fingerprint is None:
            self._fingerprint = hash((frozenset(self.files.items()), tuple(self.held)))
        return self._fingerprint


def _container_baseline(data: dict[str, Any]) -> Baseline:
    env = data.get("env")
    files = data.get("files")
    return Baseline(
        model.PackageState.from_json(data["packages"]),
        dict(env) if isinstance(env, dict) else None,
        {str(k): int(v) for k, v in files.items()} if isinstance(files, dict) else {},
        [str(p) for p in data.get("secrets") or []],
        [str(i) for i in data.get("held") or []],
        {str(k): str(v) for k, v in dict(data.get("digests") or {}).items()},
        int(data.get("log_lines") or 0),
    )


def atomic_write(path: Path, text: str) -> None:
    """Replace ``path`` (in a trusted folder: the state folder) atomically, no link followed
    at its name, through a uniquely named temporary file."""
    with safefs.Folder.open(path.parent) as folder:
        folder.replace(path.name, text.encode(), 0o600)
