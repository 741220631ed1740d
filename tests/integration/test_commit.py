"""``jupyter gpudev commit``: --verify rebuilds the patched Dockerfile, --snapshot and --push to a
real registry with htpasswd authentication, and the pushed image started by an environment.

Python packages come from a package index served here over plain HTTP on the Docker bridge
(a private index, as air-gapped GPU clusters have): the container's /etc/pip.conf points at it,
and the rendered Dockerfile copies that file before its pip install, so the verify build
installs from the same index.
"""

from __future__ import annotations

import functools
import http.server
import json
import subprocess
import sys
import threading
from collections.abc import Iterator
from pathlib import Path

import docker
import pytest

from jupyter_gpudev.changes.capture import ChangeCapture, DiffChanged
from jupyter_gpudev.changes.commit import CommitOptions, Committer, VerifyFailed
from jupyter_gpudev.containers import DevContainers, StartRequest
from jupyter_gpudev.engine import RegistryError, bridge_address
from jupyter_gpudev.errors import BadRequest, Conflict, ImageError
from jupyter_gpudev.labels import L_SNAPSHOT_DIFF, L_SNAPSHOT_ENV
from jupyter_gpudev.labels import OCI_BASE_DIGEST as L_BASE_DIGEST
from tests.integration.conftest import A100_0
from tests.integration.test_cli import gpudev
from tests.integration.test_diff import sh, write_environment
from tests.registry import Registry

pytestmark = pytest.mark.integration

WHEELS = ("iniconfig==2.0.0", "packaging==24.1")


class QuietHandler(http.server.SimpleHTTPRequestHandler):
    def log_message(self, format: str, *args: object) -> None:
        pass


@pytest.fixture(scope="session")
def package_index(
    tmp_path_factory: pytest.TempPathFactory, docker_client: docker.DockerClient
) -> Iterator[str]:
    """A PEP 503 index of two wheels on the Docker bridge's host address: its URL."""
    folder = tmp_path_factory.mktemp("index")
    files = folder / "files"
    subprocess.run(
        [sys.executable, "-m", "pip", "download", "-q", "--no-deps", "-d", str(files), *WHEELS],
        check=True,
    )
    for wheel in files.glob("*.whl"):
        project = wheel.name.split("-")[0].lower().replace("_", "-")
        page = folder / "simple" / project
        page.mkdir(parents=True, exist_ok=True)
        (page / "index.html").write_text(f'<a href="../../files/{wheel.name}">{wheel.name}</a>\n')
    gateway = bridge_address(docker_client)
    handler = functools.partial(QuietHandler, directory=str(folder))
    server = http.server.ThreadingHTTPServer((gateway, 0), handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield f"http://{gateway}:{server.server_address[1]}/simple"
    server.shutdown()
    server.server_close()


@pytest.fixture
def manager(manager: DevContainers) -> DevContainers:
    """conftest's ``manager``, with the environment ``verify`` (``test_diff.write_environment``)."""
    write_environment(manager.root_dir, "verify")
    return manager


def changes(index: str) -> str:
    host = index.split("//", 1)[1].split(":", 1)[0]
    return f"""
set -e
apt-get update -qq
DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends cowsay >/dev/null
printf '[global]\\nindex-url = {index}\\ntrusted-host = {host}\\n' > /etc/pip.conf
python3 -m pip install -q --no-cache-dir --break-system-packages iniconfig==2.0.0 packaging==24.1
python3 -m pip uninstall -y -q --break-system-packages gpudevbase
echo "Welcome to the GPU box" >> /etc/motd
rm /etc/issue
"""


def test_verify_rebuilds_the_patched_dockerfile_with_every_kind_of_change(
    manager: DevContainers, docker_client: docker.DockerClient, package_index: str
) -> None:
    # Given a container with an apt install, a pip install and upgrade from a private index,
    # a pip uninstall of a base package, an edited /etc file, a deleted file, and a variable
    manager.start(StartRequest(environment="verify", name="vbox"))
    sh(docker_client, "vbox", changes(package_index))
    committer = Committer(ChangeCapture(manager), manager.registries)
    events: list[dict[str, object]] = []
    # When it is committed with --verify --write
    result = committer.commit("vbox", CommitOptions(verify=True, write=True), None, events.append)
    # Then the rebuilt image has exactly the container's packages, and the diff was written
    assert result.verify is not None
    assert result.verify.differences == []
    lines = result.prepared.rendered.new_text.splitlines()
    # (the pip configuration is copied before the pip install, so the build used the index)
    copy = lines.index("COPY gpudev-context/vbox/sources/ /")
    assert copy < next(i for i, line in enumerate(lines) if i > 3 and "-m pip install" in line)
    assert result.written is not None
    assert "verify" in {e["stage"] for e in events}
    # And the verified image is the environment's image now: the next start builds nothing
    env = manager.environments.get("verify", manager.root_dir)
    verified = docker_client.images.get(env.image_ref())
    assert verified.id == result.verify.image_id
    # (with the variable as an ENV line of the image, not only from devcontainer.json)
    assert "MY_SETTING=on" in verified.attrs["Config"]["Env"]
    events.clear()
    manager.start(StartRequest(environment="verify", name="vbox2"), progress=events.append)
    assert "build" not in {e["stage"] for e in events}
    check = (
        "dpkg-query -W cowsay && python3 -c 'import iniconfig, packaging; "
        "print(packaging.__version__)' && ! python3 -c 'import gpudevbase' 2>/dev/null && "
        "grep -c 'GPU box' /etc/motd && ! test -e /etc/issue && echo $MY_SETTING"
    )
    out = sh(docker_client, "vbox2", check)
    assert "24.1" in out
    assert out.strip().endswith("on")

    # When something a Dockerfile cannot repeat is added (a local-path install)
    sh(
        docker_client,
        "vbox",
        "mkdir -p /opt/localpkg/localpkg && cd /opt/localpkg && "
        'printf \'from setuptools import setup\\nsetup(name="localpkg", version="1.0", '
        'packages=["localpkg"])\\n\' > setup.py && touch localpkg/__init__.py && '
        "python3 -m pip install -q --no-index --no-build-isolation --break-system-packages .",
    )
    dockerfile = manager.root_dir / ".devcontainer" / "verify" / "Dockerfile"
    before = dockerfile.read_text()
    # Then verify reports the difference and nothing is written
    with pytest.raises(VerifyFailed) as failed:
        committer.commit("vbox", CommitOptions(verify=True, write=True))
    assert any("localpkg" in d for d in failed.value.details["differences"])
    assert "in the container, missing from the rebuild" in failed.value.message
    assert dockerfile.read_text() == before
    # And the change is still there to commit (the baseline did not move)
    _, rendered = ChangeCapture(manager).diff("vbox")
    assert any("localpkg" in line for line in rendered.reported)


def test_snapshot_push_and_pull_back_with_real_registry_credentials(  # noqa: PLR0917
    manager: DevContainers,
    docker_client: docker.DockerClient,
    registry: Registry,
    gpu_engine: None,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # Given a GPU dev container (the runtime put driver files into it) with a change, and the
    # user's Docker credentials for the registry, as `docker login` writes them
    monkeypatch.setenv("DOCKER_CONFIG", str(registry.docker_config(tmp_path / "docker")))
    manager.start(
        StartRequest(environment="verify", name="sbox", gpu_uuids=(A100_0,)),
    )
    sh(docker_client, "sbox", "test -e /usr/bin/nvidia-smi && echo tuned > /etc/gpu-tuning")
    tag = f"{registry.address}/team/verify:v1"
    committer = Committer(ChangeCapture(manager), manager.registries)
    events: list[dict[str, object]] = []
    images = {i.id for i in docker_client.images.list(all=True)}
    # When it is committed as a snapshot and pushed
    result = committer.commit(
        "sbox",
        CommitOptions(snapshot=tag, push=True, message="tuned the GPU box"),
        None,
        events.append,
    )
    # Then the image is labelled, has the change, lacks the driver files, and has no lease
    # or runtime variables
    assert result.snapshot is not None
    assert str(result.snapshot.pushed_digest).startswith("sha256:")
    assert "/usr/bin/nvidia-smi" in result.snapshot.removed_driver_files
    image = docker_client.images.get(tag)
    # (and no image made on the way is left)
    assert {i.id for i in docker_client.images.list(all=True)} == {*images, image.id}
    labels = image.labels
    assert labels[L_SNAPSHOT_ENV] == "verify"
    assert labels[L_SNAPSHOT_DIFF].startswith("sha256:")
    assert labels[L_BASE_DIGEST].startswith("sha256:")
    assert labels["org.opencontainers.image.description"] == "tuned the GPU box"
    env = image.attrs["Config"]["Env"]
    assert "MY_SETTING=on" in env
    assert not [e for e in env if e.startswith(("NVIDIA_VISIBLE_DEVICES=", "GPUDEV_"))]
    # And push progress came with byte counts
    assert any(e["stage"] == "push" and e.get("total") for e in events)
    # When the local copy is removed and the image pulled back with the same credentials
    docker_client.images.remove(tag)
    manager.registries.pull(docker_client, tag, lambda _e: None)
    out = docker_client.containers.run(
        tag,
        [
            "sh",
            "-c",
            "cat /etc/gpu-tuning; for p in /usr/bin/nvidia-smi /var/log/gpudev "
            "/usr/local/lib/gpudev; do test -e $p && echo has $p; done; true",
        ],
        remove=True,
    ).decode()
    # Then it has the change, and neither the driver placeholder nor gpudev's command log
    assert out == "tuned\n"

    # Given an environment (on another host: here, with no local copy) declaring the image
    folder = manager.root_dir / ".devcontainer" / "pushed"
    folder.mkdir(parents=True)
    (folder / "devcontainer.json").write_text(json.dumps({"image": tag}))
    docker_client.images.remove(tag)
    # When it is started with wrong credentials, it fails saying the registry refused them
    monkeypatch.setenv("DOCKER_CONFIG", str(registry.docker_config(tmp_path / "bad", "nope")))
    with pytest.raises(ImageError) as refused:
        manager.start(StartRequest(environment="pushed", name="pbox-bad"))
    assert f"The registry {registry.address} refused the pull" in refused.value.message
    assert docker_client.containers.list(all=True, filters={"name": "gpudev-pbox-bad"}) == []
    # When it is started with the user's credentials, the image is pulled and runs
    monkeypatch.setenv("DOCKER_CONFIG", str(tmp_path / "docker"))
    stages: list[dict[str, object]] = []
    manager.start(StartRequest(environment="pushed", name="pbox"), progress=stages.append)
    assert "pull" in {e["stage"] for e in stages}
    assert sh(docker_client, "pbox", "cat /etc/gpu-tuning") == "tuned\n"


def test_wrong_password_fails_clearly_leaves_nothing_and_never_shows_the_password(
    manager: DevContainers,
    docker_client: docker.DockerClient,
    registry: Registry,
    tmp_path: Path,
) -> None:
    # Given credentials with a wrong password, from the command line's own configuration
    wrong = "not-" + registry.password
    config = registry.docker_config(tmp_path / "docker", password=wrong)
    manager.start(StartRequest(environment="verify", name="wbox"))
    sh(docker_client, "wbox", "echo changed > /etc/motd.d-wbox")
    tag = f"{registry.address}/team/wrong:v1"
    dockerfile = manager.root_dir / ".devcontainer" / "verify" / "Dockerfile"
    before = dockerfile.read_text()
    # When `jupyter gpudev commit --write --snapshot --push` runs
    result = gpudev(
        "commit",
        "wbox",
        "--write",
        f"--snapshot={tag}",
        "--push",
        f"--root-dir={manager.root_dir}",
        f"--DevContainers.state_dir={manager.state_dir}",
        "--debug",
        env={"DOCKER_CONFIG": str(config)},
    )
    # Then it fails with a message naming the registry and the credentials' source
    assert result.returncode == RegistryError.exit_code, result.stderr
    assert f"The registry {registry.address} refused the push" in result.stderr
    assert "Docker client configuration" in result.stderr
    # And nothing is half-done: no local tag, no Dockerfile change, the change still pending
    with pytest.raises(docker.errors.ImageNotFound):
        docker_client.images.get(tag)
    assert dockerfile.read_text() == before
    assert not dockerfile.with_name("Dockerfile.prev").exists()
    _, rendered = ChangeCapture(manager).diff("wbox")
    assert "/etc/motd.d-wbox" in rendered.new_text
    # And neither password appears in the output, even with --debug logging
    for secret in (wrong, registry.password):
        assert secret not in result.stdout
        assert secret not in result.stderr


def test_a_snapshot_with_a_credential_in_it_is_not_pushed(
    manager: DevContainers, docker_client: docker.DockerClient, registry: Registry
) -> None:
    # Given a container where a private key was written (under a name that does not say so)
    manager.start(StartRequest(environment="verify", name="kbox"))
    sh(
        docker_client,
        "kbox",
        "printf -- '-----BEGIN OPENSSH PRIVATE KEY-----\\nb3Blbn\\n' > /etc/x",
    )
    # and a token that a login left in a cache folder (no Dockerfile line: still in a commit)
    token = "hf_" + "A1b2C3d4" * 5
    sh(docker_client, "kbox", f"mkdir -p /root/.cache/hub && echo {token} > /root/.cache/hub/t")
    tag = f"{registry.address}/team/keys:v1"
    committer = Committer(ChangeCapture(manager), manager.registries)
    images = {i.id for i in docker_client.images.list(all=True)}
    # When it is committed as a snapshot to push, it is refused, and no image it made is left
    # (the commit starts while the changes are read)
    with pytest.raises(BadRequest) as refused:
        committer.commit("kbox", CommitOptions(snapshot=tag, push=True))
    assert {i.id for i in docker_client.images.list(all=True)} == images
    assert "/etc/x" in refused.value.message
    assert "/root/.cache/hub/t" in refused.value.message
    assert token not in refused.value.message
    assert "look like credentials" in refused.value.message
    with pytest.raises(docker.errors.ImageNotFound):
        docker_client.images.get(tag)
    # And the check reads the files through the engine (nothing runs in the container) and
    # looks at their content here
    container = docker_client.containers.get("gpudev-kbox")
    sh(docker_client, "kbox", "echo hello > /etc/y")
    found = ChangeCapture(manager).scan_credentials(
        container, ["/etc/x", "/etc/y", "/etc/none"], list(container.diff())
    )
    assert found == {"/etc/x"}


def test_a_commit_carries_only_the_changes_the_user_picked(
    manager: DevContainers, docker_client: docker.DockerClient, package_index: str
) -> None:
    # Given a container with a pip install from the private index, two new /etc files, and
    # the environment's variable (the image lacks it)
    manager.start(StartRequest(environment="verify", name="pickbox"))
    host = package_index.split("//", 1)[1].split(":", 1)[0]
    sh(
        docker_client,
        "pickbox",
        f"printf '[global]\\nindex-url = {package_index}\\ntrusted-host = {host}\\n' "
        "> /etc/pip.conf && "
        "python3 -m pip install -q --no-cache-dir --break-system-packages iniconfig==2.0.0 && "
        "echo picked > /etc/picked.conf && echo later > /etc/left-out.conf",
    )
    capture = ChangeCapture(manager)
    left_out = ("python:/usr:iniconfig", "file:/etc/left-out.conf")
    # When its diff leaves the pip install and one file out
    captured, rendered = capture.diff("pickbox", exclude=left_out)
    # Then every change is an item, the left-out ones too, and the diff lacks them
    ids = [item.id for item in captured.items]
    assert ids == [
        "file:/etc/pip.conf",
        "python:/usr:iniconfig",
        "file:/etc/left-out.conf",
        "file:/etc/picked.conf",
        "env:MY_SETTING",
    ]
    assert captured.selection_json()["excluded"] == list(left_out)
    assert "iniconfig" not in rendered.new_text
    assert "left-out.conf" not in rendered.new_text
    assert "/etc/picked.conf" in rendered.new_text
    # When it is committed with the same exclusions, verified, and the digest of that diff
    dockerfile = manager.root_dir / ".devcontainer" / "verify" / "Dockerfile"
    committer = Committer(capture, manager.registries)
    result = committer.commit(
        "pickbox",
        CommitOptions(write=True, verify=True, exclude=left_out, expect=rendered.digest),
    )
    # Then the rebuilt image matched the container less the left-out install
    assert result.verify is not None
    assert result.verify.differences == []
    assert result.to_json()["held"] == list(left_out)
    # And only the picked changes were written
    written = dockerfile.read_text()
    assert "/etc/picked.conf" in written
    assert "iniconfig" not in written
    assert "left-out.conf" not in written
    files = dockerfile.parent / "gpudev-context" / "pickbox" / "files" / "etc"
    assert (files / "picked.conf").read_text() == "picked\n"
    assert not (files / "left-out.conf").exists()
    # And the next diff shows the left-out changes again, and only them
    again, rendered_again = capture.diff("pickbox")
    assert [item.id for item in again.items] == list(left_out)
    assert "iniconfig==2.0.0" in rendered_again.new_text

    # Given the diff a user reviewed, then a change made in the container after it
    _, reviewed = capture.diff("pickbox")
    sh(docker_client, "pickbox", "echo sneaked > /etc/sneaked.conf")
    # When that diff's digest is committed, it is refused and nothing is written
    with pytest.raises(DiffChanged) as stale:
        committer.commit("pickbox", CommitOptions(write=True, expect=reviewed.digest))
    assert stale.value.status == 409
    assert stale.value.code == "diff_changed"
    assert "Review the diff again" in stale.value.message
    assert dockerfile.read_text() == written
    assert not (files / "sneaked.conf").exists()
    # And the container (stopped first) cannot be removed without force: the changes left out
    # are not committed (the package's files are in the baseline: it is held by its id)
    with pytest.raises(Conflict) as refused:
        manager.remove("pickbox")
    assert "python:/usr:iniconfig" in refused.value.details["changes"]
    assert "/etc/left-out.conf" in refused.value.details["changes"]
    # When the fresh diff is committed whole, everything is committed and it can be removed
    _, fresh = capture.diff("pickbox")
    committer.commit("pickbox", CommitOptions(write=True, expect=fresh.digest))
    assert "iniconfig==2.0.0" in dockerfile.read_text()
    manager.remove("pickbox")


def test_a_snapshot_leaves_out_the_command_log_and_no_image_made_on_the_way(
    manager: DevContainers, docker_client: docker.DockerClient
) -> None:
    # Given a CPU dev container (no driver files) whose user ran a logged pip and edited a file
    manager.start(StartRequest(environment="verify", name="lbox"))
    sh(docker_client, "lbox", "pip --version >/dev/null; echo lean > /etc/lean.conf")
    assert "pip --version" in sh(docker_client, "lbox", "cat /var/log/gpudev/commands.log")
    images = {i.id for i in docker_client.images.list(all=True)}
    # When it is committed as a snapshot (committed while its changes are read)
    result = Committer(ChangeCapture(manager), manager.registries).commit(
        "lbox", CommitOptions(snapshot="gpudev-test/lean:v1")
    )
    # Then the image has the change and none of gpudev's files
    assert result.snapshot is not None
    out = docker_client.containers.run(
        "gpudev-test/lean:v1",
        [
            "sh",
            "-c",
            "cat /etc/lean.conf; for p in /var/log/gpudev /usr/local/lib/gpudev; do "
            "test -e $p && echo has $p; done; true",
        ],
        remove=True,
    ).decode()
    assert out == "lean\n"
    # And only the snapshot is new among the engine's images
    snapshot = docker_client.images.get("gpudev-test/lean:v1")
    assert {i.id for i in docker_client.images.list(all=True)} == {*images, snapshot.id}
    docker_client.images.remove("gpudev-test/lean:v1")
