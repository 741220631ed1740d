"""A pod's files and packages for a commit: what ``docker diff``, the engine's
archive API and the image probe give for a Docker container, read through the API server's
exec instead, as the pod's own (non-root) user.

- Files: ``tar`` run in the pod writes an archive of one path to its output
  (``PodArchives``); the archive is read exactly as an engine's is (``changes/export.py``):
  hostile input, members checked one by one, nothing trusted but the paths asked for.
- Packages: the probe script (``changes/probe.py``) runs in the pod when it starts, after its
  lifecycle commands, with an emptied environment and a fixed ``PATH`` (``probe_pod``): what
  the pod's changes are counted against, as an image's probe is for a container.

A cluster has no engine that reads a pod's files for gpudev: what runs here are the pod's
own programs, as the pod's user, so they can only read what that user can, and their output
is the pod's word on its own files. A user who replaces ``tar`` or ``python3`` in their own
pod can only mislead their own commit, which they review before it is written.
"""

from __future__ import annotations

import io
import posixpath
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import docker

from ..engine.cluster import Cluster
from ..errors import BadRequest, EngineError, GPUDevError
from ..untrusted import clean
from . import packages
from . import probe as image_probe
from .baselines import uid_key
from .model import ProbeResult

#: The name a pod's baselines are kept under (its uid's hex digits: a pod uid is a UUID).
pod_key = uid_key

#: The largest file read out of a pod: an exec's output is held in memory, so this is lower
#: than a Docker container's (``export.FILE_SIZE_LIMIT``); a larger file is reported, not
#: copied.
POD_FILE_LIMIT = 64 << 20
#: What a tar archive adds to a file (headers, padding, the end blocks), at most.
_TAR_SLACK = 64 << 10
#: Seconds one read (or the probe) may take.
EXEC_TIMEOUT = 120.0
#: The most bytes of probe output read.
PROBE_LIMIT = 32 << 20


class PodArchives:
    """One path of a pod as a tar archive, made by ``tar`` run in the pod (``ArchiveSource``).
    GNU tar archives a symbolic link as a link and never follows one."""

    def __init__(self, cluster: Cluster, pod: str, name: str, limit: int = POD_FILE_LIMIT):
        self.cluster = cluster
        self.pod = pod
        self.name = name
        self.limit = limit

    def get(self, path: str) -> tuple[Iterator[bytes], dict[str, Any]] | None:
        parent, base = posixpath.split(posixpath.normpath(path))
        if not path.startswith("/") or not base or base in (".", ".."):
            return None
        argv = ("tar", "-C", parent or "/", "-cf", "-", "--", base)
        try:
            result = self.cluster.exec(
                self.pod, argv, timeout=EXEC_TIMEOUT, limit=self.limit + _TAR_SLACK
            )
        except GPUDevError as err:  # the API server's words when the program is missing
            if "not found" in err.message or "no such file" in err.message.lower():
                raise EngineError(
                    f"Reading the files of {self.name} needs tar in its image, and it has none"
                ) from None
            raise
        # Cut: the archive ends early and its reader says so (the file is reported). Exit 1:
        # a file changed while read; 2 with members: some could not be read (e.g. one
        # unreadable file of a folder), the rest is there and is taken path by path.
        has_member = bool(result.stdout[:512].strip(b"\0"))
        if result.cut or result.exit_code in (0, 1) or has_member:
            return iter([result.stdout]), {}
        words = result.stderr.decode("utf-8", "replace")
        if "No such file" in words:
            return None
        last = clean(words.strip().splitlines()[-1][:300]) if words.strip() else ""
        raise EngineError(
            f"Reading {clean(path)} in {self.name} failed (tar exited with "
            f"{result.exit_code}{': ' + last if last else ''})"
        )


class PodReader:
    """One regular file of a pod (``packages.Reader``): ``None`` when it does not exist,
    ``Unreadable`` when it is not a single regular file or is over the limit."""

    def __init__(self, archives: PodArchives) -> None:
        self.archives = archives

    def __call__(self, path: str, limit: int) -> bytes | None:
        got = self.archives.get(path)
        if got is None:
            return None
        data = b"".join(got[0])
        try:
            return packages.read_single_file(io.BytesIO(data), posixpath.basename(path), limit)
        except packages.Unreadable:
            raise
        except Exception as exc:  # a truncated or malformed archive is the pod's
            raise packages.Unreadable(f"its archive cannot be read ({exc})") from None


def probe_pod(cluster: Cluster, pod: str, name: str) -> ProbeResult:
    """The packages, users and tools of a running pod, by the probe script run in it as its
    user with only the probe's variables (``env -i``: none of the pod's ``LD_*`` or
    ``PYTHON*``), its output parsed as hostile input."""
    env = image_probe.probe_environment()
    argv = (
        "/usr/bin/env",
        "-i",
        *(f"{key}={value}" for key, value in sorted(env.items())),
        "/bin/sh",
        "-c",
        image_probe.PROBE_SCRIPT,
    )
    result = cluster.exec(pod, argv, timeout=EXEC_TIMEOUT, limit=PROBE_LIMIT)
    if result.cut:
        raise EngineError(f"The package probe of {name} printed over {PROBE_LIMIT} bytes")
    if result.exit_code:
        raise EngineError(f"The package probe of {name} exited with {result.exit_code}")
    return image_probe.parse_probe(result.stdout.decode("utf-8", "replace"))


@dataclass
class PodSource:
    """A pod whose changes were captured (``source.ChangeOrigin``): its host, uid, files
    (``PodArchives``) and variables."""

    host: str
    uid: str
    archives: PodArchives
    env: list[str]

    @property
    def key(self) -> str:
        return pod_key(self.uid)

    @property
    def files(self) -> PodArchives:
        return self.archives

    def variables(self) -> list[str]:
        """Its spec's: a pod's variables do not change."""
        return list(self.env)

    def engine(self, name: str) -> tuple[docker.DockerClient, Any]:
        raise BadRequest(
            f"{name} is a pod on a Kubernetes host: it has no Docker engine "
            "(its snapshot is built and pushed by the cluster)"
        )
