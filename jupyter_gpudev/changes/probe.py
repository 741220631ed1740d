"""The package probe of an image (run in a confined, bounded helper container of the image:
``helpers.run_probe``; never in a dev container) and the parsing of its output and of
package-manager files, all hostile input."""

from __future__ import annotations

import json
import os
import re
from collections.abc import Iterable

from ..errors import EngineError
from . import names, tools
from .accounts import parse_accounts
from .model import (
    CondaEnv,
    PackageState,
    ProbeResult,
    PyDist,
    PythonEnv,
    env_dict,
    normalize,
    safe_text,
    shown,
)

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
echo "@@gpudev passwd"
/bin/cat /etc/passwd 2>/dev/null
echo "@@gpudev group"
/bin/cat /etc/group 2>/dev/null
for p in /usr/local/lib/node_modules/*/package.json /usr/local/lib/node_modules/@*/*/package.json \
         /usr/lib/node_modules/*/package.json /usr/lib/node_modules/@*/*/package.json; do
  [ -f "$p" ] && { echo "@@gpudev npm"; /usr/bin/head -c 1048576 "$p"; echo; }
done
for c in /usr/local/cargo /root/.cargo /home/*/.cargo; do
  [ -f "$c/.crates2.json" ] || continue
  echo "@@gpudev cargo $c"; /usr/bin/head -c 1048576 "$c/.crates2.json"; echo
done
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


def _sections(text: str) -> list[tuple[str, str, list[str]]]:
    """The probe's output cut at its markers: kind, argument, lines."""
    sections: list[tuple[str, str, list[str]]] = []
    for line in text.splitlines():
        if line.startswith(_SECTION):
            kind, _, arg = line[len(_SECTION) :].partition(" ")
            sections.append((kind, arg, []))
        elif sections:
            sections[-1][2].append(line)
    if not sections or sections[-1][0] != "end":
        raise EngineError("The package probe in the container stopped before its end")
    return sections


def parse_probe(text: str) -> ProbeResult:
    """Read the output of ``PROBE_SCRIPT``."""
    sections = _sections(text)
    dpkg: dict[str, str] = {}
    auto: set[str] = set()
    python: dict[str, PythonEnv] = {}
    histories: dict[str, tuple[str, ...]] = {}
    channels: tuple[str, ...] = ()
    owned: set[str] = set()
    problems: list[str] = []
    account_files = {"passwd": "", "group": ""}
    npm: dict[str, str] = {}
    cargo: dict[str, tools.Crate] = {}
    for kind, arg, lines in sections:
        if kind in account_files:
            account_files[kind] = "\n".join(lines)
        elif kind == "npm":
            package = tools.probe_npm(lines, problems)
            if package is not None:
                npm.setdefault(*package)
        elif kind == "cargo" and tools.CARGO_HOME_RE.fullmatch(arg):
            cargo.update(tools.parse_crates(arg, "\n".join(lines), problems))
        elif kind == "dpkg":
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
        accounts=parse_accounts(account_files["passwd"], account_files["group"], problems),
        npm=npm,
        cargo=cargo,
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
