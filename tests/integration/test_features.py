"""Dev Container Features on the real engine and the real registry (with authentication):
features published in the specification's OCI layout (manifest and layer media types) with
plain HTTP calls, a local feature in the workspace, installed by ``DevContainers.start``."""

from __future__ import annotations

import contextlib
import gzip
import hashlib
import http.server
import io
import json
import secrets
import tarfile
import threading
import time
import urllib.parse
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import docker
import pytest
import requests
from traitlets.config import Config

from jupyter_gpudev.changes.capture import ChangeCapture
from jupyter_gpudev.changes.commit import CommitOptions, Committer
from jupyter_gpudev.containers import DevContainers, StartRequest
from jupyter_gpudev.containers.commands import exec_user
from jupyter_gpudev.environments import features as spec
from jupyter_gpudev.errors import BadRequest, GPUDevError
from tests.integration.test_diff import sh
from tests.leaks import Baseline, assert_nothing_leaked
from tests.registry import Registry

pytestmark = pytest.mark.integration

BASE = "gpudev-base:bookworm"
#: The public features' example and the offline stand-ins of common-utils, node and python.
EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "features-offline"
MIRRORED = "ghcr.io/gpudev-test/features"
LOG = "/opt/features.log"


def layer(files: dict[str, str], extra: tuple[tarfile.TarInfo, ...] = ()) -> bytes:
    out = io.BytesIO()
    with tarfile.open(fileobj=out, mode="w") as tar:
        top = tarfile.TarInfo("./")
        top.type, top.mode = tarfile.DIRTYPE, 0o755
        tar.addfile(top)
        for name, text in files.items():
            data = text.encode()
            info = tarfile.TarInfo(f"./{name}")
            info.size, info.mode = len(data), 0o755
            tar.addfile(info, io.BytesIO(data))
        for info in extra:
            tar.addfile(info, io.BytesIO(b"x" * info.size) if info.isreg() else None)
    return out.getvalue()


def publish(
    registry: Registry,
    name: str,
    tag: str,
    files: dict[str, str],
    namespace: str = "features",
    **more: Any,
) -> tuple[str, str]:
    """Push a feature as the features-distribution specification lays it out: a config blob,
    one layer of type application/vnd.devcontainers.layer.v1+tar, an OCI manifest, as
    ``namespace/name:tag``; returns (manifest digest, layer digest)."""
    session = requests.Session()
    session.auth = (registry.username, registry.password)
    root = f"http://{registry.address}"

    def blob(data: bytes) -> dict[str, Any]:
        digest = "sha256:" + hashlib.sha256(data).hexdigest()
        started = session.post(f"{root}/v2/{namespace}/{name}/blobs/uploads/", timeout=10)
        assert started.status_code == 202, started.text
        location = urllib.parse.urljoin(root, started.headers["Location"])
        glue = "&" if "?" in location else "?"
        done = session.put(
            f"{location}{glue}digest={digest}",
            data=data,
            headers={"Content-Type": "application/octet-stream"},
            timeout=10,
        )
        assert done.status_code == 201, done.text
        return {"digest": digest, "size": len(data)}

    data = layer(files, more.get("extra", ()))
    config = {"mediaType": "application/vnd.devcontainers", **blob(b"{}")}
    layer_desc = {
        "mediaType": spec.LAYER_TYPE,
        **blob(data),
        "annotations": {"org.opencontainers.image.title": f"devcontainer-feature-{name}.tgz"},
    }
    manifest = json.dumps(
        {
            "schemaVersion": 2,
            "mediaType": spec.MANIFEST_TYPE,
            "config": config,
            "layers": [layer_desc],
        }
    ).encode()
    put = session.put(
        f"{root}/v2/{namespace}/{name}/manifests/{tag}",
        data=manifest,
        headers={"Content-Type": spec.MANIFEST_TYPE},
        timeout=10,
    )
    assert put.status_code == 201, put.text
    return "sha256:" + hashlib.sha256(manifest).hexdigest(), str(layer_desc["digest"])


def feature_json(ident: str, **data: Any) -> str:
    return json.dumps({"id": ident, "version": "1.0.0", **data})


def features_config(registry: Registry) -> Config:
    """Registry credentials and a feature mirror naming the test registry; builds trusting the
    CA bundle (BuildKit); no GPUs."""
    config = Config()
    config.GPUInventory.backend = "none"
    config.Registries.credentials = {
        registry.address: {"username": registry.username, "password": registry.password}
    }
    config.Features.registry_mirrors = {MIRRORED: f"{registry.address}/features"}
    config.MountPolicy.mount_ca_bundle = True
    return config


@pytest.fixture
def features_manager(
    tmp_path: Path,
    registry: Registry,
    dev_containers: Callable[..., DevContainers],
    docker_client: docker.DockerClient,
) -> Iterator[tuple[DevContainers, Path, str]]:
    """A manager of ``features_config``: (manager, workspace, a fresh environment name). The
    features images of that environment are removed after the test."""
    root = tmp_path / "work"
    manager = dev_containers(root, features_config(registry))
    name = f"feat{secrets.token_hex(4)}"
    yield manager, root, name
    for image in docker_client.images.list(name=f"gpudev-features-{name}"):
        docker_client.images.remove(str(image.id), force=True)


def write_env(root: Path, name: str, data: dict[str, Any]) -> Path:
    folder = root / ".devcontainer" / name
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "devcontainer.json").write_text(json.dumps({"image": BASE, **data}))
    return folder


def leaked_nothing(
    client: docker.DockerClient, baseline: Baseline, manager: DevContainers, env: str
) -> None:
    """``assert_nothing_leaked`` for this test's manager: its containers, its ledger's GPU
    claims, its environment's dangling images (other tests run beside it)."""
    assert_nothing_leaked(
        client,
        baseline,
        server_id=manager.server_id,
        ledger_id=manager.ledger_id,
        environments=[env],
    )


def start(
    manager: DevContainers, client: docker.DockerClient, env: str, name: str
) -> tuple[list[str], str, float]:
    """Start, read the features' log in it, remove it: (progress messages, log, seconds)."""
    events: list[dict[str, Any]] = []
    began = time.monotonic()
    info = manager.start(StartRequest(environment=env, name=name), events.append)
    took = time.monotonic() - began
    try:
        container = client.containers.get(info.container_id)
        code, out = container.exec_run(["sh", "-c", f"cat {LOG}; echo BETA_HOME=$BETA_HOME"])
        assert code == 0, out
    finally:
        manager.remove(name, force=True)
    assert isinstance(out, bytes)
    return [str(e.get("message", "")) for e in events], out.decode(), took


def test_features_install_in_order_with_options_cached_and_pinned(
    features_manager: tuple[DevContainers, Path, str],
    docker_client: docker.DockerClient,
    registry: Registry,
    capsys: pytest.CaptureFixture[str],
) -> None:
    manager, root, env = features_manager
    baseline = Baseline.take(docker_client, ignore_removed=True)
    nonce = secrets.token_hex(8)  # this run's features are new to the engine
    # Given alpha (options, installs after beta) and beta (containerEnv) in the registry
    alpha_v1, alpha_layer = publish(
        registry,
        "alpha",
        "1",
        {
            "devcontainer-feature.json": feature_json(
                "alpha",
                options={
                    "greeting": {"type": "string", "default": "hi", "proposals": ["hello"]},
                    "loud": {"type": "boolean", "default": False},
                    "flavour": {"type": "string", "enum": ["mild", "hot"], "default": "mild"},
                },
                installsAfter=[f"{MIRRORED}/beta"],
            ),
            "install.sh": f"#!/bin/sh\n# {nonce}\n"
            f'echo "alpha-v1 [$GREETING] $LOUD $FLAVOUR $_REMOTE_USER $_REMOTE_USER_HOME"'
            f" >> {LOG}\n",
        },
    )
    publish(
        registry,
        "beta",
        "1",
        {
            "devcontainer-feature.json": feature_json(
                "beta", containerEnv={"BETA_HOME": "/opt/beta"}
            ),
            "install.sh": f"#!/bin/sh\n# {nonce}\necho beta $BETA_HOME >> {LOG}\n",
        },
    )
    # And a local feature in the workspace, named first by overrideFeatureInstallOrder
    folder = write_env(
        root,
        env,
        {
            "features": {
                f"{MIRRORED}/alpha:1": {"greeting": "a 'b' \"c\" $(id) `x`", "loud": True},
                f"{MIRRORED}/beta:1": {},
                "./gamma": {},
            },
            "overrideFeatureInstallOrder": ["./gamma"],
        },
    )
    (folder / "gamma").mkdir()
    (folder / "gamma" / "devcontainer-feature.json").write_text(feature_json("gamma"))
    (folder / "gamma" / "install.sh").write_text(f"#!/bin/sh\n# {nonce}\necho gamma >> {LOG}\n")

    # When a start is planned, the plan names the features it installs
    planned = manager.plan(StartRequest(environment=env, name=f"{env}-plan"))
    assert any(
        note.startswith("Dev Container Features installed on the image at the start: ")
        and "./gamma" in note
        for note in planned["notes"]
    )
    # When a container of it starts
    said, log, first = start(manager, docker_client, env, f"{env}-1")
    # Then each install.sh ran, in order, with its options as given (no shell read them)
    assert log.splitlines() == [
        "gamma",
        "beta /opt/beta",
        "alpha-v1 [a 'b' \"c\" $(id) `x`] true mild root /root",
        "BETA_HOME=/opt/beta",
    ]
    assert any("installing the features" in m for m in said)
    assert any("BuildKit" in m for m in said)
    # And the lockfile pins what was fetched, by the names as written
    lock = json.loads((folder / spec.LOCKFILE).read_text())
    assert lock["features"][f"{MIRRORED}/alpha:1"] == {
        "version": "1.0.0",
        "resolved": f"{MIRRORED}/alpha@{alpha_v1}",
        "integrity": alpha_layer,
    }
    assert "./gamma" not in lock["features"]

    # When it starts again, unchanged, while the registry is away: no fetch, no build
    registry.stop()
    try:
        said, log, cached = start(manager, docker_client, env, f"{env}-2")
    finally:
        registry.start()
    assert any(f"({alpha_v1}): fetched before" in m for m in said)
    assert any("features unchanged" in m for m in said)
    assert not any("installing the features" in m for m in said)

    # When alpha's tag 1 moves to a new version, the lockfile still pins the first
    publish(
        registry,
        "alpha",
        "1",
        {
            "devcontainer-feature.json": feature_json(
                "alpha", options={"greeting": {"type": "string", "default": ""}}
            ),
            "install.sh": f"#!/bin/sh\n# {nonce}\necho alpha-v2 >> {LOG}\n",
        },
    )
    said, log, _ = start(manager, docker_client, env, f"{env}-3")
    assert any(f"({alpha_v1})" in m for m in said)  # fetched by the pinned digest
    assert any("features unchanged" in m for m in said)
    assert "alpha-v1" in log

    # When the lockfile is removed, the tag's new version is fetched and built
    (folder / spec.LOCKFILE).unlink()
    (folder / "devcontainer.json").write_text(
        (folder / "devcontainer.json").read_text().replace(', "loud": true', "")
    )
    said, log, _ = start(manager, docker_client, env, f"{env}-4")
    assert any("installing the features" in m for m in said)
    assert "alpha-v2" in log
    assert "alpha-v1" not in log
    lock = json.loads((folder / spec.LOCKFILE).read_text())
    assert lock["features"][f"{MIRRORED}/alpha:1"]["resolved"] != f"{MIRRORED}/alpha@{alpha_v1}"
    with capsys.disabled():
        print(f"\nfeatures: first start (fetch + build) {first:.2f} s, cached {cached:.2f} s")
    leaked_nothing(docker_client, baseline, manager, env)


def test_a_feature_asking_for_privileged_is_refused(
    features_manager: tuple[DevContainers, Path, str],
    docker_client: docker.DockerClient,
    registry: Registry,
) -> None:
    manager, root, env = features_manager
    baseline = Baseline.take(docker_client, ignore_removed=True)
    # Given a feature that asks for a privileged container
    publish(
        registry,
        "dind",
        "2",
        {
            "devcontainer-feature.json": feature_json("dind", privileged=True),
            "install.sh": "#!/bin/sh\ntouch /opt/dind\n",
        },
    )
    write_env(root, env, {"features": {f"{MIRRORED}/dind:2": {}}})
    # When a container of it starts: refused, naming the feature, nothing left
    with pytest.raises(BadRequest, match=rf"feature '{MIRRORED}/dind:2' asks for 'privileged'"):
        manager.start(StartRequest(environment=env, name=f"{env}-p"), lambda _e: None)
    assert not docker_client.images.list(name=f"gpudev-features-{env}")
    leaked_nothing(docker_client, baseline, manager, env)


def test_a_hostile_archive_is_refused(
    features_manager: tuple[DevContainers, Path, str],
    docker_client: docker.DockerClient,
    registry: Registry,
) -> None:
    manager, root, env = features_manager
    baseline = Baseline.take(docker_client, ignore_removed=True)
    # Given a feature whose archive writes above itself
    escape = tarfile.TarInfo("../../etc/cron.d/evil")
    escape.size = 4
    publish(
        registry,
        "evil",
        "1",
        {"devcontainer-feature.json": feature_json("evil"), "install.sh": "#!/bin/sh\n"},
        extra=(escape,),
    )
    write_env(root, env, {"features": {f"{MIRRORED}/evil:1": {}}})
    # When a container of it starts: refused with what is wrong
    with pytest.raises(BadRequest, match=r"its archive is refused: .*climbs out with '\.\.'"):
        manager.start(StartRequest(environment=env, name=f"{env}-e"), lambda _e: None)
    # And a wrong password is said as such
    manager.registries.credentials = {
        registry.address: {"username": registry.username, "password": "wrong"}
    }
    with pytest.raises(GPUDevError, match="refused the credentials"):
        manager.start(StartRequest(environment=env, name=f"{env}-w"), lambda _e: None)
    leaked_nothing(docker_client, baseline, manager, env)


@contextlib.contextmanager
def serve(files: dict[str, bytes]) -> Iterator[str]:
    """An HTTP server on loopback serving ``files`` by path; yields its base URL."""

    class Handler(http.server.BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            body = files.get(self.path)
            self.send_response(200 if body is not None else 404)
            self.send_header("Content-Length", str(len(body or b"")))
            self.end_headers()
            self.wfile.write(body or b"")

        def log_message(self, *_args: Any) -> None:
            return

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()
        thread.join(timeout=10)


def test_a_tarball_url_feature_installs_only_where_allowed(
    features_manager: tuple[DevContainers, Path, str],
    docker_client: docker.DockerClient,
    registry: Registry,
    dev_containers: Callable[..., DevContainers],
) -> None:
    manager, root, env = features_manager
    baseline = Baseline.take(docker_client, ignore_removed=True)
    nonce = secrets.token_hex(8)
    # Given a feature as a .tgz behind a URL
    files = {
        "devcontainer-feature.json": feature_json("tarred"),
        "install.sh": f"#!/bin/sh\n# {nonce}\necho tarred >> {LOG}\n",
    }
    tgz = gzip.compress(layer(files))
    with serve({"/devcontainer-feature-tarred.tgz": tgz}) as base:
        url = f"{base}/devcontainer-feature-tarred.tgz"
        write_env(root, env, {"features": {url: {}}})
        # When no administrator allows it: refused, naming the setting
        with pytest.raises(BadRequest, match=r"c\.Features\.allowed_urls"):
            manager.start(StartRequest(environment=env, name=f"{env}-u"), lambda _e: None)
        # When an administrator allows it, it is fetched and installed
        config = features_config(registry)
        config.Features.allowed_urls = [f"{base}/*.tgz"]
        allowed = dev_containers(root, config)
        said, log, _ = start(allowed, docker_client, env, f"{env}-v")
    assert log.splitlines()[0] == "tarred"
    assert any(f"fetching {url}" in m for m in said)
    for made in (manager, allowed):
        leaked_nothing(docker_client, baseline, made, env)


def test_features_lifecycle_commands_run_before_the_environments_in_install_order(
    features_manager: tuple[DevContainers, Path, str],
    docker_client: docker.DockerClient,
) -> None:
    manager, root, env = features_manager
    baseline = Baseline.take(docker_client, ignore_removed=True)
    out = "/tmp/lifecycle.log"

    def echo(word: str) -> str:
        return f"echo {word} >> {out}"

    # Given two local features, 'two' installed first, with lifecycle commands in each form
    folder = write_env(
        root,
        env,
        {
            "features": {"./one": {}, "./two": {}},
            "overrideFeatureInstallOrder": ["./two"],
            "onCreateCommand": echo("env-onCreate"),
            "postCreateCommand": echo("env-postCreate"),
            "postStartCommand": ["sh", "-c", echo("env-postStart")],
        },
    )
    features: dict[str, dict[str, Any]] = {
        "one": {
            "onCreateCommand": {"a": echo("one-onCreate")},
            "postStartCommand": ["sh", "-c", echo("one-postStart")],
        },
        "two": {"postCreateCommand": echo("two-postCreate"), "postStartCommand": echo("two-start")},
    }
    for ident, commands in features.items():
        (folder / ident).mkdir()
        (folder / ident / "devcontainer-feature.json").write_text(feature_json(ident, **commands))
        (folder / ident / "install.sh").write_text("#!/bin/sh\ntrue\n")
    name = f"{env}-l"
    events: list[dict[str, Any]] = []
    try:
        # When a container of it starts
        info = manager.start(StartRequest(environment=env, name=name), events.append)
        container = docker_client.containers.get(info.container_id)
        code, log = container.exec_run(["cat", out])
        assert isinstance(log, bytes)
        # Then each step ran the features' commands first, in install order, then the
        # environment's; nothing said they are not run
        assert code == 0, log
        first = [
            "one-onCreate",
            "env-onCreate",
            "two-postCreate",
            "env-postCreate",
            "two-start",
            "one-postStart",
            "env-postStart",
        ]
        assert log.decode().splitlines() == first
        assert not info.warnings
        assert not any("not run" in str(e.get("message")) for e in events)
        assert any(
            e.get("stage") == "postCreateCommand" and "two-postCreate" in str(e.get("message"))
            for e in events
        )
        # When it is stopped and started again: only the steps of every start, same order
        manager.stop(name)
        manager.resume(name)
        code, log = container.exec_run(["cat", out])
        assert code == 0, log
        assert isinstance(log, bytes)
        assert log.decode().splitlines() == [*first, "two-start", "one-postStart", "env-postStart"]
    finally:
        with contextlib.suppress(GPUDevError):
            manager.remove(name, force=True)
    leaked_nothing(docker_client, baseline, manager, env)


def test_verify_installs_the_features_on_the_rebuilt_image_as_a_start_does(
    features_manager: tuple[DevContainers, Path, str],
    docker_client: docker.DockerClient,
) -> None:
    manager, root, env = features_manager
    baseline = Baseline.take(docker_client, ignore_removed=True)
    # Given an environment built from a Dockerfile, with a local feature adding an account
    folder = root / ".devcontainer" / env
    (folder / "svc").mkdir(parents=True)
    (folder / "Dockerfile").write_text(f"FROM {BASE}\n")
    (folder / "devcontainer.json").write_text(
        json.dumps({"build": {"dockerfile": "Dockerfile"}, "features": {"./svc": {}}})
    )
    (folder / "svc" / "devcontainer-feature.json").write_text(feature_json("svc"))
    (folder / "svc" / "install.sh").write_text(
        "#!/bin/sh\nset -e\nuseradd --system --no-create-home featsvc\n"
    )
    name = f"{env}-v"
    events: list[dict[str, Any]] = []
    try:
        manager.start(StartRequest(environment=env, name=name))
        # And a change in its container
        sh(docker_client, name, "echo 'Welcome to the feature box' >> /etc/motd")
        # When it is committed with --verify --write
        committer = Committer(ChangeCapture(manager), manager.registries)
        result = committer.commit(name, CommitOptions(verify=True, write=True), None, events.append)
        # Then the rebuild has the feature's account, as the container has: no difference
        assert result.verify is not None
        assert result.verify.differences == []
        assert result.verify.features_image_id
        said = [str(e.get("message")) for e in events if e.get("stage") == "verify"]
        assert "installing the features on the rebuilt image" in said
        # And the features image the verify built is removed; the verified image is the
        # environment's, from which the next start installs the features again
        with pytest.raises(docker.errors.ImageNotFound):
            docker_client.images.get(result.verify.features_image_id)
        adopted = manager.environments.get(env, manager.root_dir)
        assert docker_client.images.get(adopted.image_ref()).id == result.verify.image_id
    finally:
        with contextlib.suppress(GPUDevError):
            manager.remove(name, force=True)
        for image in docker_client.images.list(name=f"gpudev-env-{env}"):
            docker_client.images.remove(str(image.id), force=True)
    leaked_nothing(docker_client, baseline, manager, env)


def test_the_public_features_example_works_offline_from_the_local_registry(
    tmp_path: Path,
    registry: Registry,
    dev_containers: Callable[..., DevContainers],
    docker_client: docker.DockerClient,
) -> None:
    # Given the stand-ins of common-utils:2, node:1 and python:1 in the local registry, where
    # the public features' namespace is mirrored (no registry on the internet is reached)
    for name, tag in (("common-utils", "2"), ("node", "1"), ("python", "1")):
        folder = EXAMPLE / "features" / name
        files = {entry.name: entry.read_text() for entry in sorted(folder.iterdir())}
        publish(registry, name, tag, files, namespace="devcontainers/features")
    config = features_config(registry)
    config.Features.registry_mirrors = {
        "ghcr.io/devcontainers/features": f"{registry.address}/devcontainers/features"
    }
    config.DevContainers.run_as_server_user = False  # remoteUser used, as other tools use it
    root = tmp_path / "work"
    manager = dev_containers(root, config)
    env = f"example{secrets.token_hex(4)}"
    (root / ".devcontainer" / env).mkdir(parents=True)
    example = (EXAMPLE / ".devcontainer" / "devcontainer.json").read_text()
    (root / ".devcontainer" / env / "devcontainer.json").write_text(example)
    baseline = Baseline.take(docker_client, ignore_removed=True)
    try:
        # When the example's environment starts, as written
        events: list[dict[str, Any]] = []
        info = manager.start(StartRequest(environment=env, name=env), events.append)
        container = docker_client.containers.get(info.container_id)

        def run(*argv: str, user: str = "") -> str:
            code, out = container.exec_run(list(argv), user=user)
            assert code == 0, (argv, out)
            assert isinstance(out, bytes)
            return out.decode().strip()

        # Then every feature is installed with the options it was given
        assert run("node", "--version").startswith("v18.")
        assert run("npm", "--version")
        assert run("python3", "-m", "venv", "--help").startswith("usage")
        assert run("pipx", "--version")
        assert run("flake8", "--version")
        assert run("getent", "passwd", "vscode").endswith(":/home/vscode:/bin/zsh")
        assert run("cat", "/etc/sudoers.d/vscode") == "vscode ALL=(root) NOPASSWD:ALL"
        # But sudo does not make the user root: the container runs with no-new-privileges
        code, out = container.exec_run(["sudo", "-n", "id", "-u"], user="vscode")
        assert code != 0
        assert b"no new privileges" in out, out
        # And the environment runs as its remoteUser, its postCreateCommand saw the tools
        assert run("id", "-un", user=exec_user(container)) == "vscode"
        messages = [str(e.get("message", "")) for e in events]
        assert any(m.startswith("v18.") for m in messages), messages
        # And nothing in it was ignored without a note
        assert not [e for e in events if e.get("stage") == "environment"], events
    finally:
        manager.remove(env, force=True)
        for image in docker_client.images.list(name=f"gpudev-features-{env}"):
            docker_client.images.remove(str(image.id), force=True)
    leaked_nothing(docker_client, baseline, manager, env)
