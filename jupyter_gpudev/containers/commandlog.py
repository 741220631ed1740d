"""The package-manager command log of a dev container (``c.DevContainers.command_log``).

What a user typed (``pip install -r requirements.txt``, ``apt-get install ./x.deb``, ``conda
install``...) says more than the packages it left: the diff shows those commands as comments.
Before a dev container starts, small wrappers named like the package managers are put into it
(``SHIMS``, first on its ``PATH``); each one appends the time and its command line to ``LOG``,
then runs the real program of that name (the next one on ``PATH``).

The wrappers and the log are in the container and the user can change both: the log is read as
data, shown only as escaped comment lines, and never used for anything outside the container.
``python -m pip`` does not go through a wrapper, and a login shell that sets ``PATH`` anew
(Debian's ``/etc/profile`` does for root) leaves them out.
"""

from __future__ import annotations

import io
import tarfile

SHIMS = "/usr/local/lib/gpudev/shims"
LOG_DIR = "/var/log/gpudev"
LOG = f"{LOG_DIR}/commands.log"
#: What is gpudev's in the container (never a change, left out of snapshots).
OWN_PATHS = ("/usr/local/lib/gpudev", LOG_DIR)
TOOLS = ("pip", "pip3", "apt", "apt-get", "conda", "mamba", "micromamba", "npm", "cargo")
#: Where the log is read up to (larger: its end is not shown).
LOG_LIMIT = 1 << 20
DEFAULT_PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"

WRAPPER = f"""#!/bin/sh
# gpudev: notes this command in {LOG} (`jupyter gpudev diff` shows it as a comment), then runs
# the program of this name that comes next on PATH.
tool=${{0##*/}}
{{ printf '%s %s' "$(date -u +%Y-%m-%dT%H:%M:%SZ 2>/dev/null)" "$tool"; printf ' %s' "$@"; \\
  printf '\\n'; }} >>{LOG} 2>/dev/null
real=
IFS=:
for dir in $PATH; do
  [ "$dir" = {SHIMS} ] && continue
  [ -x "$dir/$tool" ] && {{ real="$dir/$tool"; break; }}
done
unset IFS
[ -n "$real" ] || {{ echo "$tool: command not found" >&2; exit 127; }}
exec "$real" "$@"
"""


def path_with_shims(image_env: list[str]) -> str:
    """The container's ``PATH``: the wrappers first, then its image's."""
    path = next((e.split("=", 1)[1] for e in image_env if e.startswith("PATH=")), DEFAULT_PATH)
    return f"{SHIMS}:{path}"


def archive() -> bytes:
    """The wrappers and an empty log anyone in the container may append to, as a tar for the
    engine's archive API (extracted at ``/``)."""
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w", format=tarfile.GNU_FORMAT) as tar:
        for folder, mode in ((SHIMS, 0o755), (LOG_DIR, 0o1777)):
            info = tarfile.TarInfo(folder.lstrip("/"))
            info.type, info.mode = tarfile.DIRTYPE, mode
            tar.addfile(info)
        script = WRAPPER.encode()
        for tool in TOOLS:
            info = tarfile.TarInfo(f"{SHIMS.lstrip('/')}/{tool}")
            info.size, info.mode = len(script), 0o755
            tar.addfile(info, io.BytesIO(script))
        info = tarfile.TarInfo(LOG.lstrip("/"))
        info.mode = 0o666
        tar.addfile(info, io.BytesIO(b""))
    return buffer.getvalue()


def commands(text: str) -> list[str]:
    """The command lines of a log's text (its time stamps dropped), oldest first."""
    out = []
    for line in text.split("\n"):
        command = line.partition(" ")[2].strip()
        if command:
            out.append(command)
    return out
