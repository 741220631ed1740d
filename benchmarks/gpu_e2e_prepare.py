"""The carried folder of the GPU end-to-end run (``scripts/gpu-e2e.sh prepare``), made here.

The GPU machine has no Docker engine and no network. What it needs comes along in ``.gpu-e2e/``
(ignored by git), within the 64 MiB that may travel with the repository:

- ``engine.tar.xz``: Debian 12's ``dockerd``, ``docker-proxy``, ``containerd``,
  ``containerd-shim-runc-v2``, ``runc``, ``tini-static`` (as ``docker-init``) and
  ``libdevmapper.so.1.02.1`` (dockerd does not start without it), taken from the packages
  that ``apt-get download`` fetches by name, nothing else of them;
- ``wheels/``: the project's wheel, and (``--no-deps``, CPython 3.12 manylinux) the wheels of
  its server-side dependencies and of ``ipykernel`` (for the kernel image) that the GPU
  machine's Python lacks (``PRESENT``), jupyterlab and debugpy left out (the run needs neither);
- ``manifest.json``: the package versions, so that a second prepare reuses the engine.

Standard library only; ``apt-get``, ``dpkg-deb``, ``tar``, ``xz`` and pip are run with argument
lists, never through a shell.
"""

from __future__ import annotations

import argparse
import json
import re
import shutil
import subprocess
import sys
import tempfile
from importlib import metadata
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
CARRIED = ROOT / ".gpu-e2e"
LIMIT_MIB = 64

#: Each Debian package and the files taken from it: path in the package -> name in the folder.
ENGINE_FILES: dict[str, dict[str, str]] = {
    "docker.io": {"usr/sbin/dockerd": "dockerd", "usr/sbin/docker-proxy": "docker-proxy"},
    "containerd": {
        "usr/bin/containerd": "containerd",
        "usr/bin/containerd-shim-runc-v2": "containerd-shim-runc-v2",
    },
    "runc": {"usr/sbin/runc": "runc"},
    "tini": {"usr/bin/tini-static": "docker-init"},
    "libdevmapper1.02.1": {
        "lib/x86_64-linux-gnu/libdevmapper.so.1.02.1": "lib/libdevmapper.so.1.02.1"
    },
}

#: What the GPU machine's Python 3.12 (/opt/torch/.venv) already holds (the device tool's
#: KINDS.md, read 2026-11-17; platformdirs is not there, though jupyter_core needs it): such a
#: dependency is not carried.
PRESENT = frozenset(
    {
        "anyio",
        "attrs",
        "certifi",
        "charset-normalizer",
        "click",
        "filelock",
        "fsspec",
        "h11",
        "httpcore",
        "httpx",
        "idna",
        "jinja2",
        "markupsafe",
        "nvidia-ml-py",
        "packaging",
        "pip",
        "prometheus-client",
        "psutil",
        "pygments",
        "python-dateutil",
        "pyyaml",
        "requests",
        "setuptools",
        "six",
        "typing-extensions",
        "urllib3",
        "wheel",
    }
)
#: Never carried: the run starts no Lab and no debugger.
SKIPPED = frozenset({"jupyterlab", "debugpy"})
#: The kernel image's packages (installed into it at run time).
KERNEL_PACKAGES = ("ipykernel",)
PLATFORMS = (
    "manylinux_2_34_x86_64",
    "manylinux_2_28_x86_64",
    "manylinux_2_27_x86_64",
    "manylinux_2_26_x86_64",
    "manylinux_2_24_x86_64",
    "manylinux_2_17_x86_64",
    "manylinux2014_x86_64",
    "manylinux_2_12_x86_64",
    "manylinux2010_x86_64",
    "manylinux_2_5_x86_64",
    "manylinux1_x86_64",
)


def tool(name: str) -> str:
    """The path of a program this needs (apt-get, dpkg-deb, tar, xz, git)."""
    path = shutil.which(name)
    if path is None:
        raise SystemExit(f"{name} is not on PATH")
    return path


def normalize(name: str) -> str:
    """A distribution's name as PEP 503 compares them."""
    return re.sub(r"[-_.]+", "-", name).lower()


def server_requirements() -> list[str]:
    """The project's own run-time requirements (no extras), jupyterlab left out."""
    requires = metadata.requires("jupyter-gpudev") or []
    kept = []
    for line in requires:
        if "extra ==" in line:
            continue
        name = re.split(r"[<>=!~;\[ ]", line, maxsplit=1)[0]
        if normalize(name) not in SKIPPED:
            kept.append(line.split(";")[0].strip())
    return kept


def to_carry(resolved: dict[str, str]) -> dict[str, str]:
    """Of a resolution (name -> version), what the GPU machine lacks."""
    return {
        name: version
        for name, version in sorted(resolved.items())
        if normalize(name) not in PRESENT | SKIPPED | {"jupyter-gpudev"}
    }


def _target_options() -> list[str]:
    options = ["--only-binary=:all:", "--python-version", "3.12", "--implementation", "cp"]
    options += ["--abi", "cp312"]
    for platform in PLATFORMS:
        options += ["--platform", platform]
    return options


def resolve(requirements: list[str]) -> dict[str, str]:
    """Name -> version of everything ``requirements`` need on CPython 3.12 manylinux."""
    with tempfile.TemporaryDirectory() as tmp:
        report = Path(tmp) / "report.json"
        subprocess.run(
            [
                *(sys.executable, "-m", "pip", "install", "--quiet", "--dry-run"),
                *("--ignore-installed", "--target", str(Path(tmp) / "target")),
                *("--report", str(report), *_target_options(), *requirements),
            ],
            check=True,
        )
        data = json.loads(report.read_text())
    return {
        str(item["metadata"]["name"]): str(item["metadata"]["version"]) for item in data["install"]
    }


def apt_download(names: list[str], into: Path) -> list[Path]:
    """``apt-get download`` of each package (``apt-get update`` first if it is not known)."""
    command = [tool("apt-get"), "-q", "-o", "APT::Sandbox::User=root", "download", *names]
    if subprocess.run(command, cwd=into, check=False).returncode != 0:
        subprocess.run([tool("apt-get"), "-q", "update"], check=True)
        subprocess.run(command, cwd=into, check=True)
    return sorted(into.glob("*.deb"))


def deb_version(deb: Path) -> str:
    out = subprocess.run(
        [tool("dpkg-deb"), "--show", "--showformat=${Package} ${Version}", str(deb)],
        capture_output=True,
        text=True,
        check=True,
    )
    return out.stdout.strip()


def prepare_engine(manifest: dict[str, object]) -> None:
    """``engine.tar.xz`` from the Debian packages, unless the same versions are there."""
    target = CARRIED / "engine.tar.xz"
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        debs = apt_download(sorted(ENGINE_FILES), work)
        versions = sorted(deb_version(deb) for deb in debs)
        if target.exists() and manifest.get("engine") == versions:
            print(f"engine: {target.name} is up to date ({', '.join(versions)})")
            return
        out = work / "out"
        for deb in debs:
            package = deb_version(deb).split()[0]
            unpacked = work / package
            subprocess.run([tool("dpkg-deb"), "-x", str(deb), str(unpacked)], check=True)
            for inside, name in ENGINE_FILES[package].items():
                source = unpacked / inside
                if not source.is_file():
                    raise SystemExit(f"{package} has no {inside}")
                (out / name).parent.mkdir(parents=True, exist_ok=True)
                shutil.copy2(source, out / name)
        packed = work / "engine.tar.xz"
        with packed.open("wb") as sink:
            tar = subprocess.Popen(
                [tool("tar"), "-C", str(out), "-cf", "-", "."], stdout=subprocess.PIPE
            )
            subprocess.run(
                [tool("xz"), "-T0", "-6", "-c"], stdin=tar.stdout, stdout=sink, check=True
            )
            if tar.wait() != 0:
                raise SystemExit("tar failed")
        CARRIED.mkdir(exist_ok=True)
        shutil.move(str(packed), target)
        manifest["engine"] = versions
        print(f"engine: {', '.join(versions)} -> {target.name}")


def prepare_wheels(manifest: dict[str, object]) -> None:
    """The project's wheel, and the wheels of what the GPU machine lacks (``--no-deps``)."""
    wheels = CARRIED / "wheels"
    wheels.mkdir(parents=True, exist_ok=True)
    for old in wheels.glob("jupyter_gpudev-*.whl"):
        old.unlink()
    subprocess.run(
        [
            sys.executable,
            "-m",
            "pip",
            "wheel",
            "--quiet",
            "--no-deps",
            "-w",
            str(wheels),
            str(ROOT),
        ],
        check=True,
    )
    wanted = to_carry(resolve(server_requirements() + list(KERNEL_PACKAGES)))
    names = {f"{normalize(name)}=={version}" for name, version in wanted.items()}
    if manifest.get("wheels") != sorted(names):
        for old in wheels.glob("*.whl"):
            if not old.name.startswith("jupyter_gpudev-"):
                old.unlink()
        subprocess.run(
            [
                *(sys.executable, "-m", "pip", "download", "--quiet", "--no-deps"),
                *("-d", str(wheels), *_target_options(), *sorted(names)),
            ],
            check=True,
        )
        manifest["wheels"] = sorted(names)
    print(f"wheels: the project's and {len(names)} dependencies ({', '.join(sorted(wanted))})")


def tracked_bytes() -> int:
    """The size of the repository's tracked files (what travels besides the carried folder)."""
    listed = subprocess.run(
        [tool("git"), "-C", str(ROOT), "ls-files", "-z"], capture_output=True, check=True
    ).stdout
    total = 0
    for name in filter(None, listed.split(b"\0")):
        path = ROOT / name.decode()
        if path.is_file() and not path.is_symlink():
            total += path.stat().st_size
    return total


def folder_bytes(folder: Path) -> int:
    return sum(p.stat().st_size for p in folder.rglob("*") if p.is_file() and not p.is_symlink())


def report_size() -> bool:
    """Print the carried size and whether it fits the limit with the repository."""
    carried = folder_bytes(CARRIED)
    repo = tracked_bytes()
    total = (carried + repo) / 2**20
    print(
        f"carried: {carried / 2**20:.1f} MiB in {CARRIED.name}/, repository {repo / 2**20:.1f} "
        f"MiB: {total:.1f} MiB of {LIMIT_MIB} MiB"
    )
    return total <= LIMIT_MIB


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.parse_args()
    CARRIED.mkdir(exist_ok=True)
    manifest_path = CARRIED / "manifest.json"
    manifest: dict[str, object] = (
        json.loads(manifest_path.read_text()) if manifest_path.exists() else {}
    )
    prepare_engine(manifest)
    prepare_wheels(manifest)
    manifest_path.write_text(json.dumps(manifest, indent=1) + "\n")
    if not report_size():
        raise SystemExit(f"the carried folder and the repository exceed {LIMIT_MIB} MiB")


if __name__ == "__main__":
    main()
