"""Every change a user makes rebuilds (issue #18), on this machine's network: its HTTPS goes
through a TLS-intercepting proxy whose authority is only in the host's CA bundle, so the
dev containers here run with ``c.MountPolicy.mount_ca_bundle`` and reach the real Python
package index through it, as users behind corporate proxies do.

Each change is made in a fresh container of an image-only environment, then committed with
``--verify --write``, and the environment is started again from the written Dockerfile.
"""

from __future__ import annotations

import contextlib
import io
import json
from collections.abc import Callable
from pathlib import Path

import docker
import docker.errors
import pytest
from traitlets.config import Config

from jupyter_gpudev.changes import packages
from jupyter_gpudev.changes.capture import ChangeCapture, Prepared
from jupyter_gpudev.changes.commit import CommitOptions, CommitResult, Committer, VerifyFailed
from jupyter_gpudev.containers import DevContainers, StartRequest, commandlog
from jupyter_gpudev.engine import stream_build
from jupyter_gpudev.engine.buildkit import CA_TARGET
from jupyter_gpudev.environments import MountPolicy
from jupyter_gpudev.errors import Conflict
from tests.integration.test_diff import sh
from tests.integration.test_remote_hosts import make_manager
from tests.sshd import SSHServer

pytestmark = pytest.mark.integration

IMAGE = "gpudev-python:bookworm"
PIP = "python3 -m pip install -q --no-cache-dir --break-system-packages"


@pytest.fixture
def allowed_image_manager(
    tmp_path: Path, dev_containers: Callable[..., DevContainers]
) -> DevContainers:
    """A manager of the environment ``repro``, of ``IMAGE``, the one image allowed, with the host
    CA bundle mounted; GPUs as this machine has them."""
    root = tmp_path / "work"
    folder = root / ".devcontainer" / "repro"
    folder.mkdir(parents=True)
    (folder / "devcontainer.json").write_text(json.dumps({"image": IMAGE}))
    config = Config()
    config.MountPolicy.mount_ca_bundle = True
    config.EnvironmentManager.allowed_images = [IMAGE]
    return dev_containers(root, config)


def commit_and_restart(
    manager: DevContainers, docker_client: docker.DockerClient, name: str
) -> tuple[CommitResult, str]:
    """``commit --verify --write`` of ``name``, then a new container of the environment from
    the written Dockerfile (``name``-again): the result and that container's name."""
    committer = Committer(ChangeCapture(manager), manager.registries)
    result = committer.commit(name, CommitOptions(verify=True, write=True))
    assert result.verify is not None
    assert result.verify.differences == []
    assert result.written is not None
    docker_client.containers.get(f"gpudev-{name}").remove(force=True)
    manager.start(StartRequest(environment="repro", name=f"{name}-again"))
    return result, f"{name}-again"


def assert_no_ca_in(docker_client: docker.DockerClient, image: str, written: str) -> None:
    """Neither the written Dockerfile nor the image (its layers, history, configuration) holds
    the bundle, its path or the build's trust."""
    bundle = Path("/etc/ssl/certs/ca-certificates.crt").read_text()
    proxy_ca = bundle.split("-----END CERTIFICATE-----")[-2].strip().splitlines()[-1]
    assert "gpudev-ca" not in written
    assert "BEGIN CERTIFICATE" not in written
    attrs = docker_client.images.get(image).attrs
    assert not [e for e in attrs["Config"].get("Env") or [] if CA_TARGET in e]
    history = json.dumps(docker_client.api.history(image))  # type: ignore[no-untyped-call]
    assert "BEGIN CERTIFICATE" not in history
    assert proxy_ca not in history
    found = docker_client.containers.run(
        image, ["/bin/sh", "-c", f"ls {CA_TARGET} 2>&1; true"], remove=True
    )
    assert b"No such file" in found


PIP_CHANGES = {
    "new package": (f"{PIP} iniconfig==2.0.0", "python3 -c 'import iniconfig'"),
    "upgrade": (
        f"{PIP} -U 'packaging>=24'",
        "python3 -c 'import packaging, sys; sys.exit(packaging.__version__ < \"24\")'",
    ),
    "venv": (
        "python3 -m venv /opt/tools && /opt/tools/bin/pip install -q iniconfig==2.0.0",
        "/opt/tools/bin/python -c 'import iniconfig'",
    ),
}


@pytest.mark.parametrize("change", sorted(PIP_CHANGES))
def test_pip_changes_verify_and_rebuild_behind_the_intercepting_proxy(
    allowed_image_manager: DevContainers, docker_client: docker.DockerClient, change: str
) -> None:
    # Given a pip change that reached the package index through the host's CA bundle
    script, check = PIP_CHANGES[change]
    allowed_image_manager.start(StartRequest(environment="repro", name="pipbox"))
    sh(docker_client, "pipbox", script)
    # When it is committed with --verify --write (the verify build pip-installs too)
    result, again = commit_and_restart(allowed_image_manager, docker_client, "pipbox")
    # Then the rebuild has the change, and the proxy's CA is nowhere in what was written
    sh(docker_client, again, check)
    image = docker_client.containers.get(f"gpudev-{again}").image
    assert image is not None
    assert_no_ca_in(docker_client, str(image.id), result.prepared.rendered.new_text)


def test_an_environment_whose_dockerfile_pip_installs_builds_behind_the_proxy(
    allowed_image_manager: DevContainers, docker_client: docker.DockerClient
) -> None:
    # Given an environment whose Dockerfile installs from the package index
    folder = allowed_image_manager.root_dir / ".devcontainer" / "repro"
    dockerfile = f"FROM {IMAGE}\nRUN {PIP} iniconfig==2.0.0\n"
    (folder / "Dockerfile").write_text(dockerfile)
    (folder / "devcontainer.json").write_text(json.dumps({"build": {"dockerfile": "Dockerfile"}}))
    ref = allowed_image_manager.environments.get(
        "repro", allowed_image_manager.root_dir
    ).image_ref()
    with contextlib.suppress(docker.errors.ImageNotFound):
        docker_client.images.remove(ref, force=True)  # built by an earlier run
    events: list[dict[str, object]] = []
    # When a container of it starts (and builds its image)
    allowed_image_manager.start(StartRequest(environment="repro", name="built"), events.append)
    # Then the build trusted the bundle and the package is there; the image does not hold it
    sh(docker_client, "built", "python3 -c 'import iniconfig'")
    assert any("BuildKit" in str(e["message"]) for e in events)
    image = docker_client.containers.get("gpudev-built").image
    assert image is not None
    assert_no_ca_in(docker_client, str(image.id), dockerfile)


def test_a_package_file_installed_with_its_recommends_rebuilds_with_them(
    allowed_image_manager: DevContainers, docker_client: docker.DockerClient
) -> None:
    # Given `apt-get install ./cowsay_*.deb`: apt's default installs what cowsay's
    # dependencies recommend (netbase), marked automatic
    allowed_image_manager.start(StartRequest(environment="repro", name="debbox"))
    sh(
        docker_client,
        "debbox",
        "set -e; apt-get update -qq; cd /tmp; apt-get download -qq cowsay; "
        "DEBIAN_FRONTEND=noninteractive apt-get install -y -qq ./cowsay_*.deb >/dev/null; "
        "rm -f /tmp/cowsay_*.deb; apt-mark showauto | grep -qx netbase",
    )
    # When it is committed with --verify --write and started again
    result, again = commit_and_restart(allowed_image_manager, docker_client, "debbox")
    # Then netbase is in the diff, and the rebuild has it, automatic as it was
    assert "apt:netbase" in [item.id for item in result.prepared.captured.items]
    sh(docker_client, again, "/usr/games/cowsay hi; apt-mark showauto | grep -qx netbase")


SETUP_PY = 'from setuptools import setup\nsetup(name="mypkg", version="0.1", packages=["mypkg"])\n'


def test_a_legacy_editable_install_is_reported_as_one(
    allowed_image_manager: DevContainers, docker_client: docker.DockerClient
) -> None:
    # Given `pip install -e` of a setup.py project (an egg-link, no PEP 610 direct_url.json)
    allowed_image_manager.start(StartRequest(environment="repro", name="edbox"))
    sh(
        docker_client,
        "edbox",
        "set -e; mkdir -p /root/mypkg/mypkg; touch /root/mypkg/mypkg/__init__.py; "
        f"printf '{SETUP_PY}' > /root/mypkg/setup.py; "
        f"{PIP} --no-build-isolation -e /root/mypkg",
    )
    # When its diff is taken and it is committed with --verify
    prepared = ChangeCapture(allowed_image_manager).prepare("edbox", stage=False)
    try:
        text, notes = prepared.rendered.new_text, prepared.captured.changes.notes
    finally:
        prepared.discard()
    committer = Committer(ChangeCapture(allowed_image_manager), allowed_image_manager.registries)
    with pytest.raises(VerifyFailed) as failed:
        committer.commit("edbox", CommitOptions(verify=True))
    # Then it is an editable install from its folder, as PEP 610 ones are: noted, never a
    # `pip install mypkg==0.1` that no index can serve, and verify names it
    assert "mypkg==" not in text
    assert any("mypkg 0.1 is an editable install from file:///root/mypkg" in n for n in notes)
    assert failed.value.details["differences"] == [
        "python (/usr) mypkg 0.1: in the container, missing from the rebuild"
    ]


def test_a_build_on_a_remote_engine_gets_the_bundle_over_its_ssh_connection(
    tmp_path: Path,
    ssh_server: SSHServer,
    remote_smi: Path,
    docker_client: docker.DockerClient,
) -> None:
    # Given a host reached over SSH (a real sshd; the engine's API over `dial-stdio`)
    manager = make_manager(tmp_path, ssh_server, remote_smi, local=False)
    config = Config()
    config.MountPolicy.mount_ca_bundle = True
    trust = MountPolicy(config=config).build_trust()
    tag = "gpudev-test-remote-trust:1"
    dockerfile = f"FROM {IMAGE}\nRUN {PIP} iniconfig==2.0.0\n"
    try:
        # When a Dockerfile that pip-installs is built there with the bundle
        image_id = stream_build(
            manager.host_pool.get("far").client(),
            "a test image",
            lambda _event: None,
            trust,
            fileobj=io.BytesIO(dockerfile.encode()),
            tag=tag,
        )
        # Then the session went over the same SSH connection and the build reached the index
        assert image_id is not None
        docker_client.containers.run(image_id, ["python3", "-c", "import iniconfig"], remove=True)
    finally:
        manager.host_pool.close()
        with contextlib.suppress(docker.errors.ImageNotFound):
            docker_client.images.remove(tag, force=True)


def test_a_new_user_rebuilds_as_useradd_lines_with_their_files_theirs(
    allowed_image_manager: DevContainers, docker_client: docker.DockerClient
) -> None:
    # Given a new user with a password, a new group they joined, and a file in their home
    allowed_image_manager.start(StartRequest(environment="repro", name="userbox"))
    sh(
        docker_client,
        "userbox",
        "set -e; useradd -m -s /bin/bash someone; echo 'someone:S3cret-pass' | chpasswd; "
        "groupadd -g 2345 team; usermod -aG team someone; "
        "echo notes > /home/someone/notes.txt; chown someone: /home/someone/notes.txt",
    )
    password_hash = sh(docker_client, "userbox", "getent shadow someone | cut -d: -f2").strip()
    assert password_hash.startswith("$")
    # When it is committed with --verify --write and started again
    result, again = commit_and_restart(allowed_image_manager, docker_client, "userbox")
    # Then the user and group are lines, no account file was copied, no hash written
    text = result.prepared.rendered.new_text
    assert "useradd --no-log-init --uid 1000 --gid 1000 --home-dir /home/someone" in text
    assert "groupadd --gid 2345 team" in text
    assert "--groups team someone" in text
    assert not [p for p in result.prepared.captured.changes.files.kept if p.startswith("/etc/")]
    context = result.prepared.folder
    assert not list(context.rglob("shadow*"))
    assert not list(context.rglob("passwd*"))
    written = [text, *(p.read_text(errors="replace") for p in context.rglob("*") if p.is_file())]
    assert not [w for w in written if password_hash in w]
    # And the rebuilt user has their groups, a locked password, and their files
    out = sh(
        docker_client,
        again,
        "id someone; getent shadow someone | cut -d: -f2; "
        "stat -c '%U:%G %n' /home/someone /home/someone/notes.txt /home/someone/.bashrc; "
        "cat /home/someone/notes.txt",
    )
    lines = out.splitlines()
    assert lines[0].startswith(
        "uid=1000(someone) gid=1000(someone) groups=1000(someone),2345(team)"
    )
    assert lines[1] in ("!", "*", "!*")
    assert lines[2:5] == [
        "someone:someone /home/someone",
        "someone:someone /home/someone/notes.txt",
        "someone:someone /home/someone/.bashrc",
    ]
    assert lines[5] == "notes"


def test_verify_compares_the_kept_files_too(
    allowed_image_manager: DevContainers,
    docker_client: docker.DockerClient,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # Given a container with a new /etc file and a link
    allowed_image_manager.start(StartRequest(environment="repro", name="filebox"))
    sh(docker_client, "filebox", "echo hello > /etc/gpudev-note; ln -s gpudev-note /etc/gpudev-ln")
    # When its commit's copy of the file differs from the container's (altered once staged)
    capture = ChangeCapture(allowed_image_manager)
    prepare = capture.prepare

    def altered(*args: object, **kwargs: object) -> Prepared:
        prepared = prepare(*args, **kwargs)  # type: ignore[arg-type]
        assert prepared.staging is not None
        (prepared.staging / "files" / "etc" / "gpudev-note").write_text("changed on the way\n")
        return prepared

    monkeypatch.setattr(capture, "prepare", altered)
    with pytest.raises(VerifyFailed) as failed:
        Committer(capture, allowed_image_manager.registries).commit(
            "filebox", CommitOptions(verify=True)
        )
    # Then verify names the file, and only it
    assert failed.value.details["differences"] == [
        "file /etc/gpudev-note: its content differs between the container and the rebuild"
    ]
    # And the same commit unaltered verifies, file and link compared
    committer = Committer(ChangeCapture(allowed_image_manager), allowed_image_manager.registries)
    result = committer.commit("filebox", CommitOptions(verify=True))
    assert result.verify is not None
    assert result.verify.differences == []
    assert result.prepared.digests["/etc/gpudev-ln"] == "link gpudev-note"


def test_a_global_npm_package_rebuilds_as_an_npm_line(
    allowed_image_manager: DevContainers, docker_client: docker.DockerClient
) -> None:
    # Given npm from Debian, and a package installed globally from the npm registry (through
    # the proxy: Node.js trusts the bundle through NODE_EXTRA_CA_CERTS)
    allowed_image_manager.start(StartRequest(environment="repro", name="npmbox"))
    sh(
        docker_client,
        "npmbox",
        "set -e; apt-get update -qq; DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "
        "--no-install-recommends npm >/dev/null 2>&1; npm install -g --no-fund semver@7.6.3",
    )
    # When it is committed with --verify --write and started again
    result, again = commit_and_restart(allowed_image_manager, docker_client, "npmbox")
    # Then it is an npm line, not copied files, and the rebuild has the package and command
    text = result.prepared.rendered.new_text
    assert "RUN npm install -g --no-audit --no-fund semver@7.6.3" in text
    kept = result.prepared.captured.changes.files.kept
    assert not [p for p in kept if "node_modules" in p or p == "/usr/local/bin/semver"]
    assert "npm:semver" in [item.id for item in result.prepared.captured.items]
    assert sh(docker_client, again, "semver 1.2.3 -r '>=1.0'").strip() == "1.2.3"


def test_edits_to_files_the_baseline_had_are_changes(
    allowed_image_manager: DevContainers, docker_client: docker.DockerClient
) -> None:
    # Given an environment whose lifecycle command writes a file (part of the baseline)
    folder = allowed_image_manager.root_dir / ".devcontainer" / "repro"
    (folder / "devcontainer.json").write_text(
        json.dumps({"image": IMAGE, "postCreateCommand": "echo made > /etc/lifecycle.conf"})
    )
    allowed_image_manager.start(StartRequest(environment="repro", name="lifebox"))
    capture = ChangeCapture(allowed_image_manager)
    assert capture.capture("lifebox").items == []
    # When the user edits it, and edits a file, commits it, and edits it again
    sh(docker_client, "lifebox", "echo mine >> /etc/lifecycle.conf; echo one > /etc/motd")
    items = [item.id for item in capture.capture("lifebox").items]
    assert items == ["file:/etc/lifecycle.conf", "file:/etc/motd"]
    Committer(capture, allowed_image_manager.registries).commit(
        "lifebox", CommitOptions(write=True, exclude=("file:/etc/lifecycle.conf",))
    )
    assert [i.id for i in capture.capture("lifebox").items] == ["file:/etc/lifecycle.conf"]
    sh(docker_client, "lifebox", "echo two >> /etc/motd")
    # Then each edit is a change the diff shows, and removing without force refuses
    assert [i.id for i in capture.capture("lifebox").items] == [
        "file:/etc/lifecycle.conf",
        "file:/etc/motd",
    ]
    allowed_image_manager.stop("lifebox")
    with pytest.raises(Conflict) as refused:
        allowed_image_manager.remove("lifebox")
    assert refused.value.details["changes"] == ["/etc/lifecycle.conf", "/etc/motd"]


def test_the_package_manager_commands_run_are_shown_as_comments(
    allowed_image_manager: DevContainers, docker_client: docker.DockerClient
) -> None:
    # Given package-manager commands run in a container (as its user types them), and a line
    # forged into the log with a terminal escape
    allowed_image_manager.start(StartRequest(environment="repro", name="logbox"))
    sh(
        docker_client,
        "logbox",
        "set -e; pip install -q --break-system-packages iniconfig==2.0.0; apt-get update -qq; "
        "apt-get -o Acquire::http::Proxy=http://bob:s3cret@127.0.0.1:9/ --version >/dev/null; "
        r"printf '2026 forged \033]0;x\007\n' >> /var/log/gpudev/commands.log",
    )
    # When the diff is taken
    capture = ChangeCapture(allowed_image_manager)
    captured = capture.capture("logbox")
    text = capture.diff("logbox")[1].new_text
    # Then the commands are comments, the forged one escaped; the log and wrappers are no change
    assert captured.changes.commands == [
        "pip install -q --break-system-packages iniconfig==2.0.0",
        "apt-get update -qq",
        "apt-get -o Acquire::http::Proxy=http://***@127.0.0.1:9/ --version",
        "forged \x1b]0;x\x07",
    ]
    assert "s3cret" not in text
    assert "#   pip install -q --break-system-packages iniconfig==2.0.0\n" in text
    assert "#   apt-get update -qq\n" in text
    assert "#   forged \\x1b]0;x\\x07\n" in text
    assert [i.id for i in captured.items] == ["python:/usr:iniconfig"]
    # And after a written commit, only the commands run since are shown
    Committer(capture, allowed_image_manager.registries).commit("logbox", CommitOptions(write=True))
    sh(docker_client, "logbox", "pip uninstall -q -y --break-system-packages iniconfig")
    assert capture.capture("logbox").changes.commands == [
        "pip uninstall -q -y --break-system-packages iniconfig"
    ]


def test_the_command_log_is_read_from_the_containers_own_layer_and_never_through_a_link(
    allowed_image_manager: DevContainers,
    docker_client: docker.DockerClient,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # Given a command run in a container (this server reads the containers' own layers)
    allowed_image_manager.start(StartRequest(environment="repro", name="loglayer"))
    sh(docker_client, "loglayer", "pip --version >/dev/null")
    asked: list[str] = []
    real = packages.ContainerReader.__call__

    def through_engine(self: packages.ContainerReader, path: str, limit: int) -> bytes | None:
        asked.append(path)
        return real(self, path, limit)

    monkeypatch.setattr(packages.ContainerReader, "__call__", through_engine)
    capture = ChangeCapture(allowed_image_manager)
    # When its changes are counted, then the log is read without asking the engine for it
    assert capture.capture("loglayer").changes.commands == ["pip --version"]
    assert commandlog.LOG not in asked
    # When the user swaps the log for a link to a host-looking file
    sh(docker_client, "loglayer", f"ln -sf /etc/shadow {commandlog.LOG}")
    # Then no command is read through it
    assert capture.capture("loglayer").changes.commands == []
