"""The build that installs an environment's Dev Container Features: the generated
Dockerfile and its context (pure; ``features.install_features`` builds it).

Per feature, in install order: its files copied (``COPY``) under ``INSTALL_ROOT``, its
``containerEnv`` (``ENV``), its ``install.sh`` run as root (``RUN`` in exec form: a fixed
script, the options and users as its arguments, never read by a shell as code); the image's
user restored at the end.
"""

from __future__ import annotations

import hashlib
import io
import json
import re
import tarfile
import tempfile
from collections.abc import Sequence
from typing import IO

from ..environments.features import Resolved, option_values
from ..errors import BadRequest

#: Where the features' files go in the image, one numbered folder each.
INSTALL_ROOT = "/tmp/gpudev-features"  # noqa: S108 - in the image being built, not here

_USER_RE = re.compile(r"^[A-Za-z0-9_][A-Za-z0-9_.-]{0,63}(?::[A-Za-z0-9_][A-Za-z0-9_.-]{0,63})?\Z")


#: The ``RUN`` step's script: fixed text. Options and users reach it as arguments, each
#: ``NAME=value`` exported as one word (no value is ever read by a shell as code).
_INSTALL_SCRIPT = (
    'set -e; for a in "$@"; do export "$a"; done; '
    "home() { h=$(awk -F: -v u=\"$1\" '$1==u {print $6; exit}' /etc/passwd 2>/dev/null || true); "
    'if [ -z "$h" ]; then if [ "$1" = root ]; then h=/root; else h="/home/$1"; fi; fi; '
    'echo "$h"; }; '
    'export _REMOTE_USER_HOME="$(home "$_REMOTE_USER")"; '
    'export _CONTAINER_USER_HOME="$(home "$_CONTAINER_USER")"; '
    'cd "$GPUDEV_FEATURE_DIR"; chmod +x ./install.sh; ./install.sh'
)


def check_user(user: str, what: str) -> str:
    if not _USER_RE.match(user):
        raise BadRequest(f"{what}: {user!r} is not a user name gpudev can install features for")
    return user


def _env_line(name: str, value: str) -> str:
    escaped = value.replace("\\", "\\\\").replace('"', '\\"')
    return f'ENV {name}="{escaped}"\n'


def dockerfile(
    base: str,
    ordered: Sequence[Resolved],
    *,
    remote_user: str,
    container_user: str,
    image_user: str,
) -> str:
    """The Dockerfile that installs ``ordered`` on ``base``: per feature, its files copied
    (``COPY``), its ``containerEnv`` (``ENV``) and its ``install.sh`` run (``RUN``, exec form:
    options as arguments of a fixed script); the image's user restored at the end."""
    lines = [f"FROM {base}\n", "USER root\n"]
    for number, feature in enumerate(ordered, start=1):
        folder = f"{INSTALL_ROOT}/{number}"
        lines.append(f"COPY features/{number} {folder}\n")
        for name, value in feature.meta.container_env.items():
            lines.append(_env_line(name, value))
        values = option_values(feature.meta, feature.request.options, feature.what)
        words = [f"{k}={v}" for k, v in values.items()]
        words += [
            f"_REMOTE_USER={remote_user}",
            f"_CONTAINER_USER={container_user}",
            f"GPUDEV_FEATURE_DIR={folder}",
        ]
        argv = ["/bin/sh", "-c", _INSTALL_SCRIPT, "install-feature", *words]
        lines.append(f"RUN {json.dumps(argv)}\n")
    if image_user:
        lines.append(f"USER {image_user}\n")
    return "".join(lines)


def context_tar(text: str, ordered: Sequence[Resolved]) -> IO[bytes]:
    """The build context: the Dockerfile, and each feature's members under
    ``features/<number>/`` (owned by root, modes normalised), in a temporary file (the
    caller closes it): the features' files need not stay in memory for the build."""
    out = tempfile.TemporaryFile()  # noqa: SIM115 - the caller closes it
    try:
        _pack(out, text, ordered)
    except BaseException:
        out.close()  # (a full disk: the file and its space go now)
        raise
    out.seek(0)
    return out


def _pack(out: IO[bytes], text: str, ordered: Sequence[Resolved]) -> None:
    with tarfile.open(fileobj=out, mode="w", format=tarfile.GNU_FORMAT) as tar:
        data = text.encode()
        info = tarfile.TarInfo("Dockerfile")
        info.size, info.mode = len(data), 0o644
        tar.addfile(info, io.BytesIO(data))
        for number, feature in enumerate(ordered, start=1):
            top = tarfile.TarInfo(f"features/{number}")
            top.type, top.mode = tarfile.DIRTYPE, 0o755
            tar.addfile(top)
            for member in feature.archive.members:
                info = tarfile.TarInfo(f"features/{number}/{member.name}")
                info.mode = member.mode
                if member.kind == "dir":
                    info.type = tarfile.DIRTYPE
                    tar.addfile(info)
                elif member.kind == "symlink":
                    info.type, info.linkname = tarfile.SYMTYPE, member.target
                    tar.addfile(info)
                else:
                    info.size = len(member.data)
                    tar.addfile(info, io.BytesIO(member.data))


def build_digest(base_id: str, text: str, ordered: Sequence[Resolved], *, labels: str = "") -> str:
    """sha256 over the base image's id, the Dockerfile, the labels the image gets (``labels``,
    as text) and every feature's files."""
    hasher = hashlib.sha256()
    hasher.update(f"{base_id}\0{text}\0{labels}\0".encode())
    for feature in ordered:
        hasher.update(f"{feature.archive.digest}\0".encode())
    return hasher.hexdigest()
