"""One image namespace per user in shared mode (issue #30, item 3): an environment's image is
built for its user from their own build context, and no user names another's images.

Two users' views of one service are built in-process (``Authority.for_user``, with the real
accounts gpudev-alice and gpudev-bob); their builds and dev containers run on the real engine.
Every environment and image name a test makes holds the test's own random part, so that nothing
of another test (or of another engineer's run on the same engine) is touched.
"""

from __future__ import annotations

import http.server
import io
import json
import socket
import threading
from collections.abc import Iterator
from pathlib import Path

import docker
import pytest

from jupyter_gpudev.changes.commit import CommitOptions
from jupyter_gpudev.containers import StartRequest
from jupyter_gpudev.containers.model import container_key
from jupyter_gpudev.environments import ImageNotAllowed
from jupyter_gpudev.errors import BadRequest
from jupyter_gpudev.services import Services
from jupyter_gpudev.shared.authority import Authority
from tests.integration.shared_views import Names, close, names, new_service, service_config
from tests.integration.test_diff import sh
from tests.integration.test_shared_images import ALICE, BOB, PYTHON, attempt, hand_over
from tests.leaks import Baseline, assert_nothing_leaked

pytestmark = pytest.mark.integration

__all__ = ["names"]  # the fixture, shared with the other shared-mode tests

#: The Dockerfile both users' environment "web" has: the same text, so the same tag today.
WEB_DOCKERFILE = f"FROM {PYTHON}\nCOPY requirements.txt /r.txt\n"
TROJAN = "evil-package==6.6.6  # planted by alice\n"
CLEAN = "requests==2.31.0\n"


@pytest.fixture
def authority(
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    docker_client: docker.DockerClient,
    names: Names,
) -> Iterator[Authority]:
    """The shared service's views (its state in the test's folder); their containers are
    removed afterwards, before this test's images."""
    held = new_service(tmp_path, service_config(tmp_path, monkeypatch))
    yield held
    close(held, docker_client)


def environment(view: Services, name: str, spec: dict[str, object], **files: str) -> None:
    """The environment ``name`` of ``view``'s user: ``spec`` its devcontainer.json, ``files``
    beside it; everything in their folder made theirs."""
    folder = view.containers.root_dir / ".devcontainer" / name
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "devcontainer.json").write_text(json.dumps(spec))
    for file_name, text in files.items():
        (folder / file_name.replace("__", ".")).write_text(text)
    hand_over(view)


def built(view: Services, name: str, dockerfile: str, **files: str) -> None:
    environment(view, name, {"build": {"dockerfile": "Dockerfile"}}, Dockerfile=dockerfile, **files)


def image_of(docker_client: docker.DockerClient, box: str, owner: str) -> tuple[str, str]:
    """The image reference a dev container was created from, and its id."""
    attrs = docker_client.containers.get(container_key(box, owner)).attrs
    return str(attrs["Config"]["Image"]), str(attrs["Image"])


def alices_snapshot(authority: Authority, names: Names, docker_client: docker.DockerClient) -> str:
    """A snapshot of alice's (her container of the base image, with a file of hers): its tag."""
    alice = authority.for_user(ALICE)
    environment(alice, "py", {"image": PYTHON})
    box = f"abox-{names.part}"
    alice.containers.start(StartRequest(environment="py", name=box))
    sh(docker_client, box, f"echo {ALICE} > /etc/who-made-me", owner=ALICE)
    snapshot = alice.committer.commit(box, CommitOptions(snapshot=f"x-{names.part}:1")).snapshot
    assert snapshot is not None
    assert snapshot.reference == f"localhost/gpudev/{ALICE}/x-{names.part}:1"
    return snapshot.reference


@pytest.mark.parametrize("buildkit", [False, True], ids=["classic", "buildkit"])
def test_a_users_build_context_never_reaches_another_users_container(
    authority: Authority, names: Names, docker_client: docker.DockerClient, buildkit: bool
) -> None:
    # Given alice's environment "web" whose Dockerfile copies her requirements.txt, trojaned
    # (built by the engine's classic builder, or by BuildKit: its RUN steps trusting the CA
    # bundle)
    web = f"web-{names.part}"
    alice, bob = authority.for_user(ALICE), authority.for_user(BOB)
    for view in (alice, bob):
        view.containers.mount_policy.mount_ca_bundle = buildkit
    built(alice, web, WEB_DOCKERFILE, requirements__txt=TROJAN)
    # and bob's environment of the same name and Dockerfile, with a clean requirements.txt
    built(bob, web, WEB_DOCKERFILE, requirements__txt=CLEAN)
    # When alice starts hers first, then bob his
    alice.containers.start(StartRequest(environment=web, name=f"a-{names.part}"))
    bob.containers.start(StartRequest(environment=web, name=f"b-{names.part}"))
    # Then bob's container has his own file, not alice's
    assert sh(docker_client, f"b-{names.part}", "cat /r.txt", owner=BOB) == CLEAN
    assert sh(docker_client, f"a-{names.part}", "cat /r.txt", owner=ALICE) == TROJAN
    # And each runs an image built for its user, under that user's repository
    alices, bobs = (
        image_of(docker_client, f"a-{names.part}", ALICE),
        image_of(docker_client, f"b-{names.part}", BOB),
    )
    assert alices[1] != bobs[1]
    assert alices[0].startswith(f"localhost/gpudev/{ALICE}/env-{web}:")
    assert bobs[0].startswith(f"localhost/gpudev/{BOB}/env-{web}:")


def test_a_build_is_reused_for_its_user_until_their_context_changes(
    authority: Authority, names: Names, docker_client: docker.DockerClient
) -> None:
    # Given bob's environment, started once
    web = f"web-{names.part}"
    bob = authority.for_user(BOB)
    built(bob, web, WEB_DOCKERFILE, requirements__txt=CLEAN)
    bob.containers.start(StartRequest(environment=web, name=f"b1-{names.part}"))
    first = image_of(docker_client, f"b1-{names.part}", BOB)
    # When he starts it again with nothing changed
    bob.containers.start(StartRequest(environment=web, name=f"b2-{names.part}"))
    # Then the same image runs (it was not built again)
    assert image_of(docker_client, f"b2-{names.part}", BOB) == first
    # When he changes a file of the context (not the Dockerfile) and starts it again
    built(bob, web, WEB_DOCKERFILE, requirements__txt="numpy==2.0.0\n")
    bob.containers.start(StartRequest(environment=web, name=f"b3-{names.part}"))
    # Then the image is built again from the new context, under another tag
    third = image_of(docker_client, f"b3-{names.part}", BOB)
    assert third[0] != first[0]
    assert third[1] != first[1]
    assert sh(docker_client, f"b3-{names.part}", "cat /r.txt", owner=BOB) == "numpy==2.0.0\n"


def test_an_image_under_a_users_build_tag_that_gpudev_did_not_build_for_them_is_not_run(
    authority: Authority, names: Names, docker_client: docker.DockerClient
) -> None:
    # Given bob's environment, started once (his image built and recorded)
    web = f"web-{names.part}"
    bob = authority.for_user(BOB)
    built(bob, web, WEB_DOCKERFILE, requirements__txt=CLEAN)
    bob.containers.start(StartRequest(environment=web, name=f"b1-{names.part}"))
    tag, _ = image_of(docker_client, f"b1-{names.part}", BOB)
    # and another image put under that very tag behind gpudev's back (labels say nothing)
    planted = f"FROM {PYTHON}\nRUN echo evil-package > /r.txt\n"
    forged, _ = docker_client.images.build(fileobj=io.BytesIO(planted.encode()), tag=tag, rm=True)
    # When bob starts his environment again
    bob.containers.start(StartRequest(environment=web, name=f"b2-{names.part}"))
    # Then it runs his own build again, not the image found under the tag
    assert image_of(docker_client, f"b2-{names.part}", BOB)[1] != forged.id
    assert sh(docker_client, f"b2-{names.part}", "cat /r.txt", owner=BOB) == CLEAN


def test_another_users_snapshot_cannot_be_an_environments_image(
    authority: Authority, names: Names, docker_client: docker.DockerClient
) -> None:
    # Given alice's snapshot
    snapshot = alices_snapshot(authority, names, docker_client)
    snapshot_id = str(docker_client.images.get(snapshot).id)
    bob = authority.for_user(BOB)
    for named in (snapshot, snapshot_id, snapshot_id.removeprefix("sha256:")[:12]):
        # When bob's environment names it (by tag, by id, by short id) and he starts it
        environment(bob, "theirs", {"image": named})
        refused = attempt(
            lambda: bob.containers.start(StartRequest(environment="theirs", name=f"b-{names.part}"))
        )
        # Then it is refused, saying why, and no container of his was made
        assert isinstance(refused, ImageNotAllowed), (named, refused)
        assert "another user" in refused.message
        assert not docker_client.containers.list(all=True, filters={"name": f"b-{names.part}"})
        # And the same for a dry run, and for a start naming it as the image to run
        planned = attempt(lambda: bob.containers.plan(StartRequest(environment="theirs")))
        assert isinstance(planned, ImageNotAllowed), (named, planned)
        refused = attempt(
            lambda: bob.containers.start(
                StartRequest(environment="default", name=f"b-{names.part}", image=named)  # noqa: B023
            )
        )
        assert isinstance(refused, ImageNotAllowed), (named, refused)


def test_a_step_of_another_users_build_cannot_be_named_by_its_id(
    authority: Authority, names: Names, docker_client: docker.DockerClient, tmp_path: Path
) -> None:
    baseline = Baseline.take(docker_client, tmp_path / "state")
    # Given alice's environment built by the classic builder, whose COPY step copies a file of
    # hers: the engine keeps that step's image, untagged, as her image's parent
    web, secret = f"web-{names.part}", f"alices-secret-{names.part}\n"
    alice, bob = authority.for_user(ALICE), authority.for_user(BOB)
    steps = f"FROM {PYTHON}\nCOPY secret.txt /secret.txt\nRUN echo step2 > /step2\n"
    built(alice, web, steps, secret__txt=secret)
    alices = f"a-{names.part}"
    alice.containers.start(StartRequest(environment=web, name=alices))
    step = str(docker_client.images.get(image_of(docker_client, alices, ALICE)[1]).attrs["Parent"])
    assert docker_client.images.get(step).tags == []
    bare, box = step.removeprefix("sha256:"), f"b-{names.part}"
    for named in (bare[:12], step, f"sha256:{bare[:12]}"):
        # When bob's environment names it by a short id or its id and he starts it
        environment(bob, "theirs", {"image": named})
        refused = attempt(
            lambda: bob.containers.start(StartRequest(environment="theirs", name=box))
        )
        # Then it is refused, saying images are named by name, and no container of his was made
        assert isinstance(refused, ImageNotAllowed), (named, refused)
        assert "by name, not by id" in refused.message
        assert not docker_client.containers.list(all=True, filters={"name": box})
        # And the same for a Dockerfile copying from it
        built(bob, f"steal-{names.part}", f"FROM {PYTHON}\nCOPY --from={named} /secret.txt /x\n")
        refused = attempt(
            lambda: bob.containers.start(StartRequest(environment=f"steal-{names.part}", name=box))
        )
        assert isinstance(refused, ImageNotAllowed), (named, refused)
        assert not docker_client.containers.list(all=True, filters={"name": box})
    alice.containers.remove(alices, force=True)
    assert_nothing_leaked(
        docker_client,
        baseline,
        state=tmp_path / "state",
        server_id=authority.service.containers.server_id,
    )


@pytest.mark.parametrize(
    "dockerfile",
    [
        "FROM {theirs}\n",
        f"FROM {PYTHON}\nCOPY --from={{theirs}} /etc/who-made-me /stolen\n",
        "ARG BASE={theirs}\nFROM $BASE AS mine\nRUN true\n",
        f"FROM {{theirs}} AS stolen\nFROM {PYTHON}\nCOPY --from=stolen /etc/who-made-me /x\n",
    ],
    ids=["from", "copy-from", "from-arg", "from-stage"],
)
def test_another_users_snapshot_cannot_be_named_in_a_dockerfile(
    authority: Authority, names: Names, docker_client: docker.DockerClient, dockerfile: str
) -> None:
    # Given alice's snapshot, and bob's environment whose Dockerfile names it
    snapshot = alices_snapshot(authority, names, docker_client)
    bob = authority.for_user(BOB)
    built(bob, f"steal-{names.part}", dockerfile.format(theirs=snapshot))
    # When bob starts it
    refused = attempt(
        lambda: bob.containers.start(
            StartRequest(environment=f"steal-{names.part}", name=f"b-{names.part}")
        )
    )
    # Then it is refused, saying why, and nothing of alice's reached an image of his
    assert isinstance(refused, ImageNotAllowed), refused
    assert "another user" in refused.message
    assert not docker_client.containers.list(all=True, filters={"name": f"b-{names.part}"})


def test_the_administrators_allow_list_may_share_a_users_image(
    authority: Authority, names: Names, docker_client: docker.DockerClient
) -> None:
    # Given alice's snapshot, allowed to everyone by the administrator
    snapshot = alices_snapshot(authority, names, docker_client)
    bob = authority.for_user(BOB)
    bob.containers.environments.allowed_images = [f"localhost/gpudev/{ALICE}/x-{names.part}:*"]
    # When bob's environment names it and he starts it
    environment(bob, "shared", {"image": snapshot})
    bob.containers.start(StartRequest(environment="shared", name=f"b-{names.part}"))
    # Then his container runs it
    assert sh(docker_client, f"b-{names.part}", "cat /etc/who-made-me", owner=BOB).strip() == ALICE


def test_a_build_cache_mount_is_refused_before_anything_is_built(
    authority: Authority, names: Names, docker_client: docker.DockerClient
) -> None:
    # Given alice's environment whose Dockerfile leaves a file in a BuildKit cache mount, and
    # bob's whose Dockerfile reads the same cache (pip's own cache would do: same target, no
    # id), both built with BuildKit (RUN steps trusting the CA bundle); the engine keeps a cache
    # mount's files between builds, whoever runs them
    web, cache = f"web-{names.part}", f"gpudev-test-{names.part}"
    alice, bob = authority.for_user(ALICE), authority.for_user(BOB)
    for view in (alice, bob):
        view.containers.mount_policy.mount_ca_bundle = True
    mount = f"RUN --mount=type=cache,id={cache},target=/c"
    built(alice, web, f"FROM {PYTHON}\n{mount} sh -c 'echo {ALICE} > /c/wheel'\n")
    built(bob, web, f"FROM {PYTHON}\n{mount} sh -c 'cat /c/wheel > /seen 2>&1; true'\n")
    # When alice starts hers, then bob his, Then each is refused before a build: bob's image
    # never holds what alice's build left in the cache
    for view, owner, box in ((alice, ALICE, f"a-{names.part}"), (bob, BOB, f"b-{names.part}")):
        with pytest.raises(BadRequest, match=r"line 2, RUN --mount=type=cache,.*cache mounts"):
            view.containers.start(StartRequest(environment=web, name=box))
        with pytest.raises(docker.errors.NotFound):
            docker_client.containers.get(container_key(box, owner))


def test_a_build_cannot_fetch_another_users_web_port_through_the_engine(
    authority: Authority, names: Names, docker_client: docker.DockerClient
) -> None:
    # Given bob's dev container serving a file on a port of its address, which the host's
    # accounts other than root and the service's cannot reach (GPUDEV-PORTS)
    alice, bob = authority.for_user(ALICE), authority.for_user(BOB)
    environment(bob, "py", {"image": PYTHON})
    box = f"b-{names.part}"
    bob.containers.start(StartRequest(environment="py", name=box))
    secret = f"bobs-secret-{names.part}"
    sh(docker_client, box, f"mkdir -p /srv && echo {secret} > /srv/notes", owner=BOB)
    container = docker_client.containers.get(container_key(box, BOB))
    container.exec_run(["python3", "-m", "http.server", "8765", "-d", "/srv"], detach=True)
    container.reload()
    address = next(iter(container.attrs["NetworkSettings"]["Networks"].values()))["IPAddress"]
    sh(docker_client, box, "sleep 1", owner=BOB)
    # and alice's environment whose Dockerfile ADDs from that port: the engine fetches an ADD's
    # URL itself, from the host, as root
    web = f"web-{names.part}"
    built(alice, web, f"FROM {PYTHON}\nADD http://{address}:8765/notes /stolen\n")
    # When alice starts it, Then it is refused before a build: her image never holds bob's file
    with pytest.raises(BadRequest, match=r"line 2, ADD http://.*fetches"):
        alice.containers.start(StartRequest(environment=web, name=f"a-{names.part}"))
    with pytest.raises(docker.errors.NotFound):
        docker_client.containers.get(container_key(f"a-{names.part}", ALICE))


@pytest.mark.parametrize(
    "base",
    [
        "127.0.0.1:{port}/x:1",
        "127.0.0.1:{port}/x:${{NOPE:-1}}",  # a tag gpudev cannot resolve; the builder can
        "127.0.0.1:{port}/x@${{DIGEST:-sha256:" + "0" * 64 + "}}",
        # a Docker Hub name and tag, to gpudev: a host (this machine's name: its loopback,
        # on Debian) and port once the builder expands the variable gpudev cannot resolve
        "{host}:${{NOPE:-{port}/x:1}}",
        # not a build: the environment's image itself
        "image 127.0.0.1:{port}/x:1",
    ],
)
def test_a_build_cannot_have_the_engine_reach_the_hosts_loopback_through_a_pull(
    authority: Authority, names: Names, docker_client: docker.DockerClient, base: str
) -> None:
    # Given a service on the host's loopback (an HTTP server noting what it is asked)
    asked: list[str] = []

    class Noting(http.server.BaseHTTPRequestHandler):
        def do_GET(self) -> None:  # the engine's pull asks GET /v2/ first
            asked.append(self.path)
            self.send_error(404)

        do_HEAD = do_GET

        def log_message(self, *args: object) -> None:
            pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Noting)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        # and alice's environment built FROM an image named at that address
        web = f"web-{names.part}"
        port = server.server_address[1]
        named = base.format(port=port, host=socket.gethostname())
        if named.startswith("image "):
            environment(authority.for_user(ALICE), web, {"image": named.split(" ", 1)[1]})
        else:
            built(authority.for_user(ALICE), web, f"FROM {named}\n")
        # When she starts it, Then it is refused, and the engine never connected there
        with pytest.raises(BadRequest, match=r"not at a public address|a variable"):
            authority.for_user(ALICE).containers.start(
                StartRequest(environment=web, name=f"a-{names.part}")
            )
        assert asked == []
    finally:
        server.shutdown()
        server.server_close()
