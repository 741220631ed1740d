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
``jupyter_gpudev.packages``): they are its image's, probed once in a throwaway container of the
image by ``PROBE_SCRIPT`` (a constant script; programs by absolute path, a fixed ``PATH``, the
image's ``LD_*``/``PYTHON*`` variables emptied, Python isolated; the only variable input,
package names, validated and passed in the environment, never in a command line), plus what
its ``docker diff`` and the package metadata files it names, read as data, say.
"""

from __future__ import annotations

import fnmatch
import json
import os
import re
import unicodedata
from collections.abc import Collection, Iterable, Mapping
from dataclasses import asdict, dataclass, field, replace
from typing import Any, Literal

from ..environments import CA_BUNDLE_ENV_VARS
from ..errors import BadRequest, EngineError
from . import names

#: Markers between the sections of the probe's output.
_SECTION = "@@gpudev "

#: Python side of the probe: one JSON object per interpreter (standard library only, 3.8+).
PY_PROBE = r"""
import json, os, sys, sysconfig
try:
    from importlib import metadata
except ImportError:
    metadata = None
out = {"executable": sys.executable, "prefix": sys.prefix, "base_prefix": sys.base_prefix,
       "version": "%d.%d" % sys.version_info[:2], "dists": [],
       "externally_managed": os.path.exists(
           os.path.join(sysconfig.get_paths()["stdlib"], "EXTERNALLY-MANAGED"))}
owned = set(json.loads(os.environ.get("GPUDEV_OWNED_DISTS") or "[]"))
files = []
seen = set()
import glob
site = "/.local/lib/python%d.%d/site-packages" % sys.version_info[:2]
user_sites = sorted(glob.glob("/home/*" + site) + glob.glob("/root" + site))
found = list(metadata.distributions()) if metadata else []
if metadata and sys.prefix == sys.base_prefix:  # user sites belong to the system interpreter
    found += list(metadata.distributions(path=[p for p in user_sites if p not in sys.path]))
for dist in found:
    name = dist.metadata["Name"] or ""
    key = name.lower().replace("_", "-").replace(".", "-")
    if not name or key in seen:
        continue
    seen.add(key)
    try:
        direct = dist.read_text("direct_url.json")
    except Exception:
        direct = None
    out["dists"].append([name, dist.version, direct])
    if key in owned:
        for f in dist.files or []:
            try:
                files.append(str(f.locate()))
            except Exception:
                pass
out["owned_files"] = files
print(json.dumps(out))
"""

#: Shell side of the probe: dpkg, apt marks, conda histories and channels, then each Python.
PROBE_SCRIPT = r"""
set +e
PATH=/usr/sbin:/usr/bin:/sbin:/bin
export PATH
echo "@@gpudev dpkg"
/usr/bin/dpkg-query -W -f '${binary:Package}\t${Version}\t${db:Status-Abbrev}\n' 2>/dev/null
echo "@@gpudev apt-auto"
/bin/cat /var/lib/apt/extended_states 2>/dev/null
for h in /opt/conda/conda-meta/history /opt/conda/envs/*/conda-meta/history; do
  [ -f "$h" ] && { echo "@@gpudev conda-history $h"; /bin/cat "$h"; }
done
for c in /opt/conda/.condarc /root/.condarc /etc/conda/.condarc; do
  [ -f "$c" ] && { echo "@@gpudev condarc $c"; /bin/cat "$c"; }
done
for p in $GPUDEV_OWNED_DPKG; do
  echo "@@gpudev dpkg-files $p"
  /bin/cat "/var/lib/dpkg/info/$p.list" 2>/dev/null
done
{
  for py in /usr/bin/python3 /usr/local/bin/python3 /opt/conda/bin/python \
            /opt/conda/envs/*/bin/python; do
    [ -x "$py" ] && echo "$py"
  done
  /usr/bin/find /opt /root /home /usr/local /srv -maxdepth 4 -name pyvenv.cfg 2>/dev/null |
    while IFS= read -r cfg; do
      d=${cfg%/pyvenv.cfg}
      [ -x "$d/bin/python" ] && echo "$d/bin/python"
    done
} | /usr/bin/sort -u | while IFS= read -r py; do
  echo "@@gpudev python $py"
  "$py" -I -c "$GPUDEV_PY_PROBE" 2>/dev/null
done
echo "@@gpudev end"
"""

#: The only ``PATH`` the probe runs with.
PROBE_PATH = "/usr/sbin:/usr/bin:/sbin:/bin"


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
PACKAGE_FILES = "package files"
TRANSIENT = "temporary, cache or runtime state"
#: Package install folders: their content is covered by the package changes.
_SITE_DIRS = ("site-packages", "dist-packages")

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
    return bool(_SECRET_VALUE_RE.search(data[:1_000_000].decode("utf-8", "replace")))


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


# ----------------------------------------------------------------------------------------------
# Package state
# ----------------------------------------------------------------------------------------------

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

    def dpkg_manual(self) -> set[str]:
        return set(self.dpkg) - self.dpkg_auto

    def to_json(self) -> dict[str, Any]:
        return {
            "dpkg": dict(sorted(self.dpkg.items())),
            "dpkg_auto": sorted(self.dpkg_auto),
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
        )


@dataclass
class ProbeResult:
    state: PackageState
    #: Files owned by the packages named in the probe's request (dpkg lists, pip RECORDs).
    owned_files: set[str] = field(default_factory=set)
    #: What the probe's output held that could not be read (skipped), one sentence each.
    problems: list[str] = field(default_factory=list)


def parse_apt_auto(text: str) -> set[str]:
    """Package names marked ``Auto-Installed: 1`` in apt's extended_states."""
    auto: set[str] = set()
    package, arch = "", ""
    for line in [*text.splitlines(), ""]:
        key, _, value = line.partition(":")
        key, value = key.strip(), value.strip()
        if not line.strip():
            package, arch = "", ""
        elif key == "Package":
            package = value
        elif key == "Architecture":
            arch = value
        elif key == "Auto-Installed" and value == "1" and package:
            auto.add(package)
            if arch:
                auto.add(f"{package}:{arch}")
    return auto


def parse_conda_history(text: str, problems: list[str] | None = None) -> tuple[str, ...]:
    """The specs of ``conda install``/``create`` requests still standing in a history file
    (later ``remove`` requests take them out), in the order first asked for. A spec that is
    not a printable string of at most 1000 characters is skipped (and put in ``problems``)."""
    requested: dict[str, str] = {}
    skipped: list[str] = []
    for raw in text.splitlines():
        line = raw.strip()
        if not line.startswith("# update specs:") and not line.startswith("# remove specs:"):
            continue
        removing = line.startswith("# remove")
        specs_text = line.split(":", 1)[1].strip()
        try:
            specs = json.loads(specs_text.replace("'", '"'))
        except ValueError:
            continue
        for spec in specs if isinstance(specs, list) else []:
            if not safe_text(spec, 1000):
                skipped.append(shown(spec, 60))
                continue
            name = re.split(r"[<>=!~ \[]", spec, maxsplit=1)[0].split("::")[-1]
            if removing:
                requested.pop(name, None)
            else:
                requested[name] = spec
    if skipped and problems is not None:
        problems.append(f"conda history: spec(s) {', '.join(skipped[:5])} not readable, skipped")
    return tuple(requested.values())


#: A conda channel: a name or a URL (printable, no spaces).


def parse_condarc_channels(text: str) -> tuple[str, ...]:
    """The ``channels:`` list of a .condarc (the plain YAML list form); a channel that is not
    a name or URL (``names.CONDA_CHANNEL``) is skipped."""
    channels: list[str] = []
    inside = False
    for line in text.split("\n"):
        if re.match(r"channels\s*:", line):
            inside = True
            rest = line.split(":", 1)[1].strip()
            if rest.startswith("["):
                found = [c.strip(" '\"") for c in rest.strip("[]").split(",")]
                return tuple(c for c in found if names.CONDA_CHANNEL.fullmatch(c))
            continue
        if inside:
            match = re.match(r"[ \t]*-[ \t]*(\S+)", line)
            if match:
                channel = match.group(1).strip("'\"")
                if names.CONDA_CHANNEL.fullmatch(channel):
                    channels.append(channel)
            elif line.strip() and not line.startswith(" "):
                inside = False
    return tuple(channels)


def parse_probe(text: str) -> ProbeResult:
    """Read the output of ``PROBE_SCRIPT``."""
    sections: list[tuple[str, str, list[str]]] = []
    for line in text.splitlines():
        if line.startswith(_SECTION):
            kind, _, arg = line[len(_SECTION) :].partition(" ")
            sections.append((kind, arg, []))
        elif sections:
            sections[-1][2].append(line)
    if not sections or sections[-1][0] != "end":
        raise EngineError("The package probe in the container stopped before its end")
    dpkg: dict[str, str] = {}
    auto: set[str] = set()
    python: dict[str, PythonEnv] = {}
    histories: dict[str, tuple[str, ...]] = {}
    channels: tuple[str, ...] = ()
    owned: set[str] = set()
    problems: list[str] = []
    for kind, arg, lines in sections:
        if kind == "dpkg":
            dpkg.update(_parse_dpkg(lines, problems))
        elif kind == "apt-auto":
            auto |= parse_apt_auto("\n".join(lines))
        elif kind == "conda-history":
            _conda_section(arg.removesuffix("/conda-meta/history"), lines, histories, problems)
        elif kind == "condarc":
            channels = channels or parse_condarc_channels("\n".join(lines))
        elif kind == "dpkg-files":
            owned.update(os.path.normpath(line) for line in lines if _is_path(line))
        elif kind == "python":
            env, files = _parse_python(arg, lines, problems)
            if env is not None and env.prefix not in python:
                python[env.prefix] = env
            owned.update(files)
    # dpkg-query names multi-arch packages "name:arch"; apt's marks use the bare name too.
    state = PackageState(
        dpkg=dpkg,
        dpkg_auto=frozenset(p for p in dpkg if p in auto or p.split(":")[0] in auto),
        python=python,
        conda={p: CondaEnv(p, specs, channels) for p, specs in histories.items()},
    )
    return ProbeResult(state, owned, problems)


def _conda_section(
    prefix: str, lines: list[str], histories: dict[str, tuple[str, ...]], problems: list[str]
) -> None:
    if _is_path(prefix):
        histories[prefix] = parse_conda_history("\n".join(lines), problems)
    else:
        problems.append(f"conda environment {shown(prefix)}: not a valid path, skipped")


def _is_path(value: object) -> bool:
    return safe_text(value) and str(value).startswith("/")


def _parse_dpkg(lines: list[str], problems: list[str] | None = None) -> dict[str, str]:
    """``dpkg-query`` lines: installed packages (status ``ii``/``hi``) and their versions; a
    line with a name or version that is not one is skipped (and put in ``problems``)."""
    installed: dict[str, str] = {}
    bad: list[str] = []
    for line in lines:
        parts = line.split("\t")
        if len(parts) != 3:
            if line.strip():
                bad.append(shown(line, 60))
        elif parts[2].strip() not in ("ii", "hi"):
            continue
        elif names.DPKG_PACKAGE.fullmatch(parts[0]) and names.DPKG_VERSION.fullmatch(parts[1]):
            installed[parts[0]] = parts[1]
        else:
            bad.append(shown(parts[0], 60))
    if bad and problems is not None:
        problems.extend(f"dpkg package {b}: not a valid name and version, skipped" for b in bad)
    return installed


def _parse_python(
    python: str, lines: list[str], problems: list[str] | None = None
) -> tuple[PythonEnv | None, list[str]]:
    """The probe's JSON object for one interpreter: an environment with its distributions
    and the files of the owned ones. Anything of the wrong type or shape is skipped (a
    whole environment when its paths or version are not valid) and put in ``problems``."""
    said = problems if problems is not None else []
    where = shown(python, 100)
    for line in lines:
        try:
            data = json.loads(line)
        except (ValueError, RecursionError):
            continue
        if not isinstance(data, dict):
            said.append(f"python {where}: the probe's output is not an object, skipped")
            return None, []
        fields = [data.get(k) for k in ("prefix", "base_prefix", "version")]
        if not (
            _is_path(python)
            and _is_path(fields[0])
            and _is_path(fields[1])
            and isinstance(fields[2], str)
            and names.PY_MINOR.fullmatch(fields[2])
        ):
            said.append(f"python {where}: no valid prefix and version, skipped")
            return None, []
        entries = data.get("dists")
        dists = {}
        for entry in entries if isinstance(entries, list) else []:
            if not (isinstance(entry, list) and len(entry) == 3):
                said.append(f"python {where}: distribution {shown(entry, 60)} skipped")
                continue
            name, version, direct = entry
            if not (
                isinstance(name, str)
                and isinstance(version, str)
                and names.PY_NAME.fullmatch(name)
                and names.PY_VERSION.fullmatch(version)
                and (direct is None or isinstance(direct, str))
            ):
                said.append(f"python {where}: distribution {shown(name, 60)} skipped")
                continue
            dist = PyDist.parse(name, version, direct)
            dists[normalize(dist.name)] = dist
        if entries is not None and not isinstance(entries, list):
            said.append(f"python {where}: its distributions are not a list, skipped")
        env = PythonEnv(
            python=python,
            prefix=str(fields[0]),
            base_prefix=str(fields[1]),
            version=str(fields[2]),
            externally_managed=data.get("externally_managed") is True,
            dists=dists,
        )
        files = data.get("owned_files")
        if files is not None and not isinstance(files, list):
            said.append(f"python {where}: its owned files are not a list, skipped")
            files = []
        owned = [os.path.normpath(f) for f in files or [] if _is_path(f)]
        if files and len(owned) < len(files):
            said.append(f"python {where}: {len(files) - len(owned)} owned file(s) skipped")
        return env, owned
    return None, []


def probe_environment(
    owned_dpkg: Iterable[str] = (),
    owned_dists: Iterable[str] = (),
    image_env: Iterable[str] = (),
) -> dict[str, str]:
    """The environment ``PROBE_SCRIPT`` runs with in a throwaway container of an image: a
    fixed ``PATH``, every ``LD_*``/``PYTHON*`` variable of the image's ``image_env``
    (``Config.Env``) emptied (an image's variables can be overridden, not unset), and its
    only variable input, validated: ``owned_*``, the packages whose files it lists too."""
    emptied = {
        name: ""
        for name in env_dict(image_env)
        if name.startswith(("LD_", "PYTHON")) or name in ("BASH_ENV", "ENV")
    }
    return {
        **emptied,
        "PATH": PROBE_PATH,
        "GPUDEV_PY_PROBE": PY_PROBE,
        "GPUDEV_OWNED_DPKG": " ".join(
            sorted(p for p in owned_dpkg if names.DPKG_PACKAGE.fullmatch(p))
        ),
        "GPUDEV_OWNED_DISTS": json.dumps(
            sorted(normalize(d) for d in owned_dists if names.PY_NAME.fullmatch(d))
        ),
    }


def env_dict(items: Iterable[str]) -> dict[str, str]:
    """``["NAME=value", ...]`` (a container's or image's ``Config.Env``) as a dict."""
    return dict(item.split("=", 1) for item in items if "=" in item)


# ----------------------------------------------------------------------------------------------
# Change set
# ----------------------------------------------------------------------------------------------


@dataclass
class AptChanges:
    added: list[tuple[str, str]] = field(default_factory=list)
    removed: list[tuple[str, str]] = field(default_factory=list)
    upgraded: list[tuple[str, str, str]] = field(default_factory=list)

    def __bool__(self) -> bool:
        return bool(self.added or self.removed or self.upgraded)


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

    def is_empty(self) -> bool:
        return not (
            self.apt
            or any(self.python)
            or any(c.added or c.removed for c in self.conda)
            or self.files.kept
            or self.files.deleted
            or self.env
            or self.env_removed
        )

    def to_json(self) -> dict[str, Any]:
        return {
            "apt": {
                "added": [{"name": n, "version": v} for n, v in self.apt.added],
                "removed": [{"name": n, "version": v} for n, v in self.apt.removed],
                "upgraded": [{"name": n, "from": a, "to": b} for n, a, b in self.apt.upgraded],
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
            ),
            env={k: v for k, v in self.env.items() if env_id(k) not in excluded},
            env_removed=list(self.env_removed),
            env_secrets=list(self.env_secrets),
            notes=notes,
        )


# ----------------------------------------------------------------------------------------------
# Change ids: what a commit carries, chosen change by change
# ----------------------------------------------------------------------------------------------

#: The kinds of change a commit can leave out (each id starts with its kind and a colon).
CHANGE_KINDS = ("apt", "python", "conda", "file", "delete", "env")
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
    ``file:/PATH``, ``delete:/PATH``, ``env:NAME``."""
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
                "python:PREFIX:NAME, conda:PREFIX:SPEC, file:PATH, delete:PATH or env:NAME",
                details={"id": shown},
            )
        ids[canonical] = None
        if len(ids) > _MAX_IDS:
            raise BadRequest(f"More than {_MAX_IDS} change ids to leave out")
    return tuple(ids)


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
    return PackageState(dpkg, frozenset(auto), python, conda)


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
                f"{name} {version} is a {dist.source} install from {url} "
                f"({python}): a Dockerfile cannot install it from there; add its source to "
                "the build context and install it in the Dockerfile"
            )
    return notes


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
    made: Iterable[str] = (),
    held: Iterable[str] = (),
) -> list[str]:
    """What removing a container would lose: the file changes a commit carries (credentials
    included) and, as the packages are not probed here, every changed package file; then
    ``held``, the ids of the changes the last commit left out (``Baseline.held``: their files
    may be in the baseline already). Noise, mounts, driver files, empty folders the engine
    made and what the baseline already had are not."""
    entries = _diff_entries(diff)
    fresh = [{"Path": p, "Kind": k} for p, k in entries.items() if baseline_files.get(p) != k]
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
