"""Capture and ``commit --verify`` of hard-to-rebuild changes, in one run: a pip
install of a new package, a pip upgrade and a venv with a pip install (from the real package
index, through this machine's TLS-intercepting proxy: the dev containers run with
``c.MountPolicy.mount_ca_bundle`` and the verify builds trust the bundle through BuildKit), an
apt install of a downloaded ``.deb`` with its Recommends, and a legacy editable install.

For each: capture + render (``ChangeCapture.diff``, median of BENCH_RUNS) against its floor,
``docker diff`` plus ``dpkg-query -W`` of the same container (as in bench_capture.py); then
``commit --verify`` twice: cold (the engine's build cache emptied first: the build runs every
step, pip and apt downloads included) and warm (BuildKit's cache holds the steps: what is left is
the session, the image probe and the package and file comparisons). There is no floor for
the verify build itself: no other tool here builds a Dockerfile whose ``RUN pip install`` goes
through the proxy without copying its CA into the image.

Run: ``.venv/bin/python benchmarks/bench_verify.py`` (engine + kernel image + network).
"""

from __future__ import annotations

import json
import os
import sys
import tempfile
import time
from pathlib import Path

import docker
from floor import median_ms
from traitlets.config import Config

from jupyter_gpudev.changes.capture import ChangeCapture
from jupyter_gpudev.changes.commit import CommitOptions, Committer, VerifyFailed
from jupyter_gpudev.changes.tracker import track_changes
from jupyter_gpudev.containers import DevContainers, StartRequest, docker_name
from jupyter_gpudev.engine import HostPool

RUNS = int(os.environ.get("BENCH_RUNS", "5"))
IMAGE = "gpudev-python:bookworm"
PIP = "python3 -m pip install -q --no-cache-dir --break-system-packages"
SETUP = 'from setuptools import setup\\nsetup(name="mypkg", version="0.1", packages=["mypkg"])\\n'
CASES = {
    "pip install (new)": f"{PIP} iniconfig==2.0.0",
    "pip install -U": f"{PIP} -U 'packaging>=24'",
    "venv + pip install": "python3 -m venv /opt/tools && /opt/tools/bin/pip install -q iniconfig",
    "apt install ./x.deb (Recommends)": (
        "apt-get update -qq && cd /tmp && apt-get download -qq cowsay && "
        "DEBIAN_FRONTEND=noninteractive apt-get install -y -qq ./cowsay_*.deb >/dev/null && "
        "rm -f /tmp/cowsay_*.deb"
    ),
    "legacy editable (egg-link)": (
        "mkdir -p /root/mypkg/mypkg && touch /root/mypkg/mypkg/__init__.py && "
        f"printf '{SETUP}' > /root/mypkg/setup.py && {PIP} --no-build-isolation -e /root/mypkg"
    ),
}


def verify_seconds(committer: Committer, name: str) -> tuple[float, str]:
    started = time.perf_counter()
    try:
        committer.commit(name, CommitOptions(verify=True))
        verdict = "verified"
    except VerifyFailed as failed:
        verdict = f"{len(failed.details['differences'])} difference(s), as designed"
    return time.perf_counter() - started, verdict


def main() -> None:
    engine = docker.from_env()
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp) / "work"
        (work / ".devcontainer" / "bench").mkdir(parents=True)
        (work / ".devcontainer" / "bench" / "devcontainer.json").write_text(
            json.dumps({"image": IMAGE})
        )
        config = Config()
        config.DevContainers.state_dir = str(Path(tmp) / "state")
        config.MountPolicy.mount_ca_bundle = True
        config.EnvironmentManager.allowed_images = [IMAGE]
        manager = DevContainers(root_dir=work, host_pool=HostPool(config=config), config=config)
        capture = track_changes(manager)
        committer = Committer(ChangeCapture(manager), manager.registries)
        try:
            for index, (case, script) in enumerate(CASES.items()):
                name = f"bench-verify-{index}"
                manager.start(StartRequest(environment="bench", name=name))
                container = engine.containers.get(docker_name(name))
                code, out = container.exec_run(["/bin/sh", "-c", script], user="0")
                assert code == 0, out
                capture.diff(name)  # warm-up: the image's probe is cached after it
                ours = median_ms(lambda name=name: capture.diff(name), RUNS)  # type: ignore[misc]

                def floor(container: object = container) -> None:
                    container.diff()  # type: ignore[attr-defined]
                    container.exec_run(["dpkg-query", "-W"])  # type: ignore[attr-defined]

                floor_ms = median_ms(floor, RUNS)
                engine.api.prune_builds(all=True)  # a cold build: no step in BuildKit's cache
                cold, verdict = verify_seconds(committer, name)
                warm, _ = verify_seconds(committer, name)
                rows.append((case, ours, floor_ms, cold, warm, verdict))
                manager.remove(name, force=True)
        finally:
            for container in engine.containers.list(
                all=True, filters={"name": docker_name("bench-verify-")}
            ):
                container.remove(force=True)
            manager.host_pool.close()
    print(f"{RUNS} runs of each capture, medians in ms; verify in s (one cold, one warm run)\n")
    print(
        "| change | capture + render | docker diff + dpkg-query | ratio "
        "| verify, cold | verify, warm | verify says |"
    )
    print("| --- | --- | --- | --- | --- | --- | --- |")
    for case, ours, floor_ms, cold, warm, verdict in rows:
        print(
            f"| {case} | {ours:.0f} | {floor_ms:.0f} | {ours / floor_ms:.2f} "
            f"| {cold:.1f} | {warm:.1f} | {verdict} |"
        )
    sys.stdout.flush()


if __name__ == "__main__":
    main()
