"""One image namespace per user in shared mode (issue #30, item 3): which images a Dockerfile
names, which names a user may not use, the records of whose build an image is, and the digest
of a build context. The real engine's side is in tests/integration/test_shared_builds.py."""

from __future__ import annotations

import io
import os
import tarfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, cast

import docker
import docker.errors
import pytest
import requests

from jupyter_gpudev.containers import features
from jupyter_gpudev.containers.namespace import (
    BuildRecords,
    SnapshotRecords,
    UserImages,
    build_digest,
    build_reference,
    context_digest,
)
from jupyter_gpudev.containers.references import (
    images,
    remote_sources,
    shared_mounts,
    trigger_images,
)
from jupyter_gpudev.engine.context import folder_context
from jupyter_gpudev.environments import ImageNotAllowed
from jupyter_gpudev.errors import BadRequest, ConfigError

ALICE, BOB = "gpudev-alice", "gpudev-bob"
THEIRS = f"localhost/gpudev/{ALICE}/x:1"
MINE = f"localhost/gpudev/{BOB}/x:1"
IMAGE = "sha256:" + "ab" * 32
OTHER = "sha256:" + "cd" * 32


def named(text: str, args: dict[str, str] | None = None) -> list[tuple[str | None, str]]:
    """What ``images`` finds: (resolved name, prefix) of each."""
    return [(n.resolved, n.prefix) for n in images(text, args or {})]


# -- the images a Dockerfile names ----------------------------------------------------------


@pytest.mark.parametrize(
    ("dockerfile", "expected"),
    [
        ("FROM python:3\n", ["python:3"]),
        ("from --platform=linux/amd64 python:3 as build\n", ["python:3"]),
        ("FROM a AS build\nFROM build\nCOPY --from=build /x /y\n", ["a"]),
        ("FROM a AS Build\nFROM b\nCOPY --from=build /x /y\nCOPY --from=0 /x /y\n", ["a", "b"]),
        ("FROM a\nCOPY --from=img:1 /x /y\n", ["a", "img:1"]),
        ("FROM a\nCOPY --chown=1 --from img:1 /x /y\n", ["a", "img:1"]),
        ("FROM a\nCOPY --from=later /x /y\nFROM b AS later\n", ["a", "later", "b"]),
        ("FROM a\nCOPY --from=1 /x /y\n", ["a", "1"]),
        ("FROM a\nRUN --mount=type=bind,from=img:2,target=/m true\n", ["a", "img:2"]),
        ('FROM a\nRUN --mount="type=cache,FROM=img:3,target=/c" true\n', ["a", "img:3"]),
        ("FROM a\nONBUILD COPY --from=img:4 /x /y\n", ["a", "img:4"]),
        ("# syntax=img/frontend:1\nFROM a\n", ["img/frontend:1", "a"]),
        ("FROM a\n# COPY --from=img:5 /x /y\n", ["a"]),
        ("FROM \\\n  a \\\n  AS b\nCOPY \\\n# a comment\n  --from=img:6 /x /y\n", ["a", "img:6"]),
        ("# escape=`\nFROM a `\n  AS b\nCOPY `\n  --from=img:7 /x /y\n", ["a", "img:7"]),
        ("FROM a\r\nCOPY --from=img:8 /x /y\r\n", ["a", "img:8"]),
    ],
)
def test_the_images_a_dockerfile_names(dockerfile: str, expected: list[str]) -> None:
    # Given a Dockerfile, When its images are listed, Then they are the images it reads
    # (its own stages, by name or index, read none)
    assert [resolved for resolved, _ in named(dockerfile)] == expected


def test_a_heredoc_body_counts_both_as_lines_and_as_text() -> None:
    # Given a Dockerfile whose heredoc holds lines that look like instructions
    dockerfile = "FROM a\nRUN <<EOF\nFROM hidden AS st\nEOF\nCOPY --from=st /x /y\n"
    # When its images are listed, Then both builders' readings count: the classic builder's
    # (no heredocs: FROM hidden is a stage) and BuildKit's (st is no stage: an image)
    assert [resolved for resolved, _ in named(dockerfile)] == ["a", "hidden", "st"]


@pytest.mark.parametrize(
    ("dockerfile", "args", "expected"),
    [
        ("ARG B=img:1\nFROM $B\n", {}, ("img:1", "img:1")),
        ("ARG B=img:1\nFROM ${B}\n", {"B": "img:2"}, ("img:2", "img:2")),
        ('ARG B="img:1"\nFROM ${B}\n', {}, ("img:1", "img:1")),
        ("ARG B\nFROM ${B:-img:3}\n", {}, ("img:3", "img:3")),
        ("ARG B=x\nFROM img${B:+-y}:1\n", {}, ("img-y:1", "img-y:1")),
        (
            "ARG R=reg.io/team\nARG T=1\nFROM $R/img:$T\n",
            {},
            ("reg.io/team/img:1", "reg.io/team/img:1"),
        ),
        ("FROM img:${TARGETARCH}\n", {}, (None, "img:")),
        ("FROM ${BASE}\n", {"BASE": "img:1"}, (None, "")),
        ("ARG B=img:1\nFROM ${B#img}\n", {}, (None, "")),
        ("FROM a\nARG S=img:4\nCOPY --from=$S /x /y\n", {}, ("img:4", "img:4")),
        ("FROM a\nENV S=img:5\nCOPY --from=${S} /x /y\n", {}, ("img:5", "img:5")),
        ("FROM a\nCOPY --from=$FROM_BASE_IMAGE /x /y\n", {}, (None, "")),
    ],
)
def test_variables_are_resolved_as_the_builder_would_and_never_guessed(
    dockerfile: str, args: dict[str, str], expected: tuple[str | None, str]
) -> None:
    # Given a Dockerfile naming an image through variables, and the build's arguments
    # When its images are listed
    found = named(dockerfile, args)
    # Then the name is resolved from ARG, ENV and the arguments (an argument no ARG declares
    # is not seen), or known only up to the variable gpudev has no value for
    assert found[-1] == expected


def test_the_triggers_of_a_base_image_name_images() -> None:
    # Given a base image's ONBUILD triggers, When their images are listed
    found = trigger_images(["COPY --from=img:1 /x /y", "RUN echo hi", "COPY --from=0 /a /b"], "b:1")
    # Then every --from is an image (no stage of the later build is known)
    assert [(n.resolved, n.where) for n in found] == [
        ("img:1", "ONBUILD of b:1 line 1, COPY --from"),
        ("0", "ONBUILD of b:1 line 3, COPY --from"),
    ]


# -- which names a user may use -------------------------------------------------------------


@dataclass
class FakeImage:
    id: str
    tags: list[str] = field(default_factory=list)
    attrs: dict[str, Any] = field(default_factory=dict)


class FakeImages:
    def __init__(self, known: dict[str, FakeImage]) -> None:
        self.known = known

    def get(self, reference: str) -> FakeImage:
        # (as the engine: by a name first, a tag or a repository digest, then by id: the
        # whole id, with or without sha256:, or any unique prefix of it of 2 hex or more)
        for image in self.known.values():
            digests = image.attrs.get("RepoDigests") or []
            if reference in (*image.tags, *digests) or f"{reference}:latest" in image.tags:
                return image
        hexadecimal = reference.removeprefix("sha256:")
        if len(hexadecimal) >= 2 and all(c in "0123456789abcdef" for c in hexadecimal):
            found = [i for i in self.known.values() if i.id[7:].startswith(hexadecimal)]
            if len(found) == 1:
                return found[0]
        if reference.startswith("$"):
            invalid = requests.Response()
            invalid.status_code = 400
            raise docker.errors.APIError("invalid reference format", response=invalid)
        raise docker.errors.ImageNotFound(reference)


class FakeClient:
    def __init__(self, *known: FakeImage) -> None:
        self.images = FakeImages({image.id: image for image in known})


def engine(*known: FakeImage) -> docker.DockerClient:
    """An engine with the images ``known`` (found by id, short id and tags)."""
    return cast("docker.DockerClient", FakeClient(*known))


@pytest.fixture
def bob(tmp_path: Path) -> UserImages:
    """Bob's images; the state folder records IMAGE as alice's snapshot."""
    SnapshotRecords(tmp_path).record(IMAGE, ALICE, THEIRS)
    return UserImages(BOB, tmp_path)


@pytest.mark.parametrize(
    "reference",
    [
        THEIRS,
        f"localhost/gpudev/{ALICE}/x",
        f"localhost/gpudev/{ALICE}/x@sha256:{'0' * 64}",
        f"LOCALHOST/gpudev/{ALICE}/x:1",
        "localhost/gpudev/x:1",
        "localhost/gpudev:1",
        "gpudev-env-web:0123456789ab",
        "docker.io/library/gpudev-env-web:0123456789ab",
        # what a verify build of another user's environment with features is named meanwhile
        "gpudev-verify-web:0123456789ab",
        "gpudev-features-web:0123456789ab",
    ],
)
def test_another_users_repository_cannot_be_named(bob: UserImages, reference: str) -> None:
    # When bob names an image under another user's repository, or a single-user build
    with pytest.raises(ImageNotAllowed) as refused:
        bob.check(None, reference, "The environment 'x'")
    # Then it is refused, saying where and why, and how it could be allowed
    assert refused.value.status == 403
    assert refused.value.message.startswith(f"The environment 'x' names {reference}")
    assert "c.EnvironmentManager.allowed_images" in refused.value.message


@pytest.mark.parametrize(
    "reference", [MINE, f"localhost/gpudev/{BOB}/team/env:v1", "python:3", "gpudev-python:bookworm"]
)
def test_a_users_own_images_and_others_are_named_freely(bob: UserImages, reference: str) -> None:
    # When bob names his own image or an image that is no one's, Then nothing is refused
    bob.check(engine(), reference, "The environment 'x'")


@pytest.mark.parametrize("named_as", [IMAGE, IMAGE[7:19], "python:stolen", MINE])
def test_an_image_made_for_another_user_is_refused_by_whatever_name(
    bob: UserImages, named_as: str
) -> None:
    # Given an engine whose image IMAGE is alice's snapshot, also tagged otherwise
    client = engine(FakeImage(IMAGE, [THEIRS, "python:stolen", MINE]))
    # When bob names it by its id, its short id, or another tag
    with pytest.raises(ImageNotAllowed, match="an image gpudev made for another user"):
        bob.check(client, named_as, "The environment 'x'")


def test_an_image_built_for_both_users_is_each_ones(bob: UserImages, tmp_path: Path) -> None:
    # Given an image gpudev built for alice and for bob (the same Dockerfile and files)
    for user in (ALICE, BOB):
        BuildRecords(tmp_path).record(
            OTHER, user, environment="web", digest="d", reference=f"localhost/gpudev/{user}/w:1"
        )
    client = engine(FakeImage(OTHER, [f"localhost/gpudev/{BOB}/w:1"]))
    # When bob names it, Then it is his
    bob.check(client, OTHER, "The environment 'x'")
    # And so it is by his name when it has alice's too (the engine tagged it for both)
    both = [f"localhost/gpudev/{BOB}/w:1", f"localhost/gpudev/{ALICE}/w:1"]
    bob.check(engine(FakeImage(OTHER, both)), f"localhost/gpudev/{BOB}/w:1", "The environment")


#: An image of no one's that gpudev knows of: a step of a classic build, an unowned build.
STEP = "sha256:" + "5e" * 32


def by_id(image_id: str) -> list[str]:
    """The ways to name an image by its id: whole, without sha256:, short ids of 12 and 2 hex,
    a short id with sha256:."""
    bare = image_id.removeprefix("sha256:")
    return [image_id, bare, bare[:12], bare[:2], f"sha256:{bare[:6]}"]


@pytest.mark.parametrize("named_as", by_id(STEP))
def test_an_untagged_image_cannot_be_named_by_its_id(bob: UserImages, named_as: str) -> None:
    # Given an engine with an image of no tag that gpudev recorded for no one (the COPY step
    # of alice's classic build, holding her build context: her final image's parent)
    client = engine(FakeImage(STEP), FakeImage(OTHER, ["python:3"]))
    # When bob names it by its id or a short id, as his environment's image or in a Dockerfile
    # Then it is refused, saying images are named by name in shared mode
    with pytest.raises(ImageNotAllowed, match="by name, not by id") as refused:
        bob.check(client, named_as, "The environment 'x'")
    assert refused.value.message.startswith(f"The environment 'x' names {named_as}")
    for dockerfile in (f"FROM {named_as}\n", f"FROM python:3\nCOPY --from={named_as} /x /y\n"):
        with pytest.raises(ImageNotAllowed, match="by name, not by id"):
            bob.check_dockerfile(client, dockerfile, {}, "The Dockerfile of 'web'")


@pytest.mark.parametrize(
    "tag",
    [
        "gpudev-env-web:0123456789ab",
        "gpudev-verify-web:0123456789ab",
        "gpudev-features-web:0123456789ab",
        f"localhost/gpudev/{ALICE}/x:1",
    ],
)
@pytest.mark.parametrize("named_as", [*by_id(STEP)[1:3], "python:alias"])
def test_an_image_refused_by_one_name_is_refused_by_its_id_and_its_other_names(
    bob: UserImages, tag: str, named_as: str
) -> None:
    # Given an image named as gpudev's unowned builds are, or under alice's repository (that
    # gpudev has no record of), also tagged python:alias
    client = engine(FakeImage(STEP, [tag, "python:alias"]))
    # When bob names it by its id, a short id, or its other name, Then it is refused
    with pytest.raises(ImageNotAllowed):
        bob.check(client, named_as, "The environment 'x'")


def test_an_image_is_refused_by_the_repository_of_its_digest(bob: UserImages) -> None:
    # Given an image with a public tag whose repository digest is under alice's repository
    digests = {"RepoDigests": [f"localhost/gpudev/{ALICE}/x@sha256:{'1' * 64}"]}
    client = engine(FakeImage(STEP, ["python:alias"], digests))
    # When bob names it by its tag, Then it is refused
    with pytest.raises(ImageNotAllowed, match=f"localhost/gpudev/{ALICE}/x@"):
        bob.check(client, "python:alias", "The environment 'x'")


@pytest.mark.parametrize("named_as", by_id(OTHER)[1:3])
def test_a_public_image_is_named_by_its_name_not_its_id(bob: UserImages, named_as: str) -> None:
    client = engine(FakeImage(OTHER, ["python:3"]))
    bob.check(client, "python:3", "The environment 'x'")
    with pytest.raises(ImageNotAllowed, match="by name, not by id"):
        bob.check(client, named_as, "The environment 'x'")


def test_a_name_that_looks_like_an_id_is_a_name(bob: UserImages) -> None:
    # Given an image named deadbeef (docker.io/library/deadbeef:latest), its id starting so
    client = engine(FakeImage("sha256:deadbeef" + "0" * 56, ["deadbeef:latest"]))
    # When bob names it, Then the engine finds it by its name: it is not refused
    bob.check(client, "deadbeef", "The environment 'x'")


@pytest.mark.parametrize("record", ["build", "snapshot"])
def test_ones_own_images_may_be_named_by_id(tmp_path: Path, record: str) -> None:
    # Given an image of no tag that gpudev recorded as bob's build or snapshot
    if record == "build":
        BuildRecords(tmp_path).record(STEP, BOB, environment="w", digest="d", reference=MINE)
    else:
        SnapshotRecords(tmp_path).record(STEP, BOB, MINE)
    bob, alice = UserImages(BOB, tmp_path), UserImages(ALICE, tmp_path)
    client = engine(FakeImage(STEP))
    # When bob names it by its id, Then it is his; not alice's
    for named_as in by_id(STEP):
        bob.check(client, named_as, "The environment 'x'")
        bob.check(None, named_as, "The environment 'x'")  # a plan without the engine
        with pytest.raises(ImageNotAllowed):
            alice.check(client, named_as, "The environment 'x'")
    # And without the engine, a whole id is known for alice's not hers
    for named_as in by_id(STEP)[:2]:
        with pytest.raises(ImageNotAllowed):
            alice.check(None, named_as, "The environment 'x'")


def test_the_allow_list_shares_an_image_named_by_id_by_one_of_its_tags(tmp_path: Path) -> None:
    client = engine(FakeImage(STEP, ["gpudev-env-web:1"]), FakeImage(OTHER))
    shared = UserImages(BOB, tmp_path, ["gpudev-env-web:*"])
    shared.check(client, by_id(STEP)[2], "The environment 'x'")
    # (an image with no tag, named by id, is refused)
    with pytest.raises(ImageNotAllowed, match="by name, not by id"):
        shared.check(client, by_id(OTHER)[2], "The environment 'x'")


def test_a_features_builds_temporary_base_name_refuses_nothing_else(bob: UserImages) -> None:
    # Given a public image that a features build (of any user's) names meanwhile
    temporary = f"{features.BASE_REPOSITORY}:1700000000-{'0' * 32}"
    client = engine(FakeImage(OTHER, ["python:3", temporary]))
    # When bob names it by its name, Then it is not refused; by that temporary name, it is
    bob.check(client, "python:3", "The environment 'x'")
    with pytest.raises(ImageNotAllowed):
        bob.check(client, temporary, "The environment 'x'")


def test_the_allow_list_shares_a_users_image_only_with_a_pattern_naming_it(tmp_path: Path) -> None:
    SnapshotRecords(tmp_path).record(IMAGE, ALICE, THEIRS)
    client = engine(FakeImage(IMAGE, [THEIRS]))
    # Given an allow-list whose patterns match everything, but none names users' images
    broad = UserImages(BOB, tmp_path, ["*", "localhost/*", "*/gpudev/*"])
    # Then alice's image is refused to bob
    with pytest.raises(ImageNotAllowed):
        broad.check(client, THEIRS, "The environment 'x'")
    # Given a pattern naming it
    shared = UserImages(BOB, tmp_path, [f"localhost/gpudev/{ALICE}/x:*"])
    # Then bob may name it, by its tag or by its id
    shared.check(client, THEIRS, "The environment 'x'")
    shared.check(client, IMAGE, "The environment 'x'")


@pytest.mark.parametrize(
    "dockerfile",
    [
        f"FROM {THEIRS}\n",
        f"FROM python:3\nCOPY --from={THEIRS} /etc /x\n",
        f"ARG BASE={THEIRS}\nFROM $BASE AS mine\n",
        f"FROM {THEIRS} AS stolen\nFROM python:3\nCOPY --from=stolen /x /y\n",
        f"FROM python:3\nRUN --mount=type=bind,from={THEIRS},target=/m cat /m/x\n",
        f"FROM python:3\nONBUILD COPY --from={THEIRS} /x /y\n",
        f"# syntax={THEIRS}\nFROM python:3\n",
        f"ARG WHO={ALICE}\nFROM localhost/gpudev/$WHO/x:1\n",
        "FROM ${UNKNOWN}\n",
        "FROM localhost/gpudev/${WHO}/x:1\n",
        f"FROM {IMAGE}\n",
        "FROM python:3\nCOPY --from=python:stolen /x /y\n",
    ],
)
def test_a_dockerfile_naming_another_users_image_is_refused(
    bob: UserImages, dockerfile: str
) -> None:
    client = engine(FakeImage(IMAGE, [THEIRS, "python:stolen"]), FakeImage(OTHER, ["python:3"]))
    # When bob's Dockerfile names alice's image, or one gpudev cannot tell, Then it is refused
    with pytest.raises(ImageNotAllowed, match=r"^The Dockerfile of 'web', "):
        bob.check_dockerfile(client, dockerfile, {}, "The Dockerfile of 'web'")


def test_a_base_image_whose_triggers_name_another_users_image_is_refused(bob: UserImages) -> None:
    # Given a base image with an ONBUILD trigger reading alice's image
    trigger = {"Config": {"OnBuild": [f"COPY --from={THEIRS} /x /y"]}}
    client = engine(FakeImage(IMAGE, [THEIRS]), FakeImage(OTHER, ["evil:1"], trigger))
    # When bob's Dockerfile is built from it, Then it is refused, naming the trigger
    with pytest.raises(ImageNotAllowed, match="ONBUILD of evil:1"):
        bob.check_dockerfile(client, "FROM evil:1\n", {}, "The Dockerfile of 'web'")


@pytest.mark.parametrize(
    "dockerfile",
    [
        "FROM python:3 AS build\nFROM build\nCOPY --from=build /x /y\nCOPY --from=0 /x /y\n",
        f"FROM {MINE}\nCOPY --from=localhost/gpudev/{BOB}/y:2 /x /y\n",
        "ARG VERSION\nFROM nvcr.io/nvidia/pytorch:${VERSION}-py3\n",
        "FROM --platform=$BUILDPLATFORM python:3.${MINOR}\n",
        "ARG BASE=python:3\nFROM ${BASE}\n",
    ],
)
def test_a_dockerfile_of_ones_own_and_public_images_is_built(
    bob: UserImages, dockerfile: str
) -> None:
    # When bob's Dockerfile names only stages, his own images, public ones (maybe with a
    # variable tag), Then nothing is refused
    bob.check_dockerfile(engine(), dockerfile, {"BASE": "python:3.12"}, "The Dockerfile of 'web'")


# -- whose build an image is ----------------------------------------------------------------


def test_build_records_say_for_whom_and_from_what_gpudev_built_an_image(tmp_path: Path) -> None:
    records = BuildRecords(tmp_path / "state")
    # Then an image is no one's build until recorded (nor a malformed id)
    assert records.digest(IMAGE, BOB) is None
    assert records.users(IMAGE) == set()
    assert records.digest("../../etc/passwd", BOB) is None
    # When it is recorded as bob's build from a digest
    records.record(IMAGE, BOB, environment="web", digest="d1", reference=MINE)
    # Then it is his, from that digest, also for another reader of the folder
    assert BuildRecords(tmp_path / "state").digest(IMAGE, BOB) == "d1"
    assert records.users(IMAGE) == {BOB}
    # And it is not alice's, nor is another image bob's
    assert records.digest(IMAGE, ALICE) is None
    assert records.digest(OTHER, BOB) is None
    # And the folder is the service's alone
    assert (tmp_path / "state" / "builds").stat().st_mode & 0o777 == 0o700


def test_a_build_is_reused_only_when_recorded_for_that_user_and_digest(tmp_path: Path) -> None:
    # Given an image under bob's build tag, built for him from digest d1
    BuildRecords(tmp_path).record(IMAGE, BOB, environment="web", digest="d1", reference=MINE)
    client = engine(FakeImage(IMAGE, [MINE]))
    bob, alice = UserImages(BOB, tmp_path), UserImages(ALICE, tmp_path)
    # Then it is reused for him from d1, never from another digest nor for alice
    assert bob.reusable(client, MINE, "d1") == IMAGE
    assert bob.reusable(client, MINE, "d2") is None
    assert alice.reusable(client, MINE, "d1") is None
    # And an image gpudev did not record is never reused, whatever its tag
    assert bob.reusable(engine(FakeImage(OTHER, [MINE])), MINE, "d1") is None


def test_a_build_record_that_cannot_be_written_is_a_config_error(tmp_path: Path) -> None:
    (tmp_path / "state").write_text("")
    with pytest.raises(ConfigError, match=r"c\.DevContainers\.state_dir"):
        BuildRecords(tmp_path / "state").record(
            IMAGE, BOB, environment="web", digest="d", reference=MINE
        )


def test_a_build_is_tagged_under_its_users_repository() -> None:
    digest = build_digest({}, None, "c" * 64)
    # Then the tag holds the user, the environment and the digest
    assert build_reference("web", BOB, digest) == f"localhost/gpudev/{BOB}/env-web:{digest[:16]}"
    assert build_reference("web", "Bob@Example", digest).startswith("localhost/gpudev/bob-example-")
    # And another user's, another context's, arguments' or target's differs
    assert build_reference("web", ALICE, digest) != build_reference("web", BOB, digest)
    assert build_digest({}, None, "d" * 64) != digest
    assert build_digest({"A": "1"}, None, "c" * 64) != digest
    assert build_digest({}, "dev", "c" * 64) != digest


# -- the digest of a build context ----------------------------------------------------------


def context(tmp_path: Path, files: dict[str, str], name: str = "ctx") -> Path:
    root = tmp_path / name
    for path, text in files.items():
        (root / path).parent.mkdir(parents=True, exist_ok=True)
        (root / path).write_text(text)
    return root.resolve()


def digest_of(root: Path, dockerfile: str = "Dockerfile") -> str:
    archive, name = folder_context(root, dockerfile)
    with archive:
        return context_digest(archive, name)


def test_a_context_digest_covers_every_file_sent_and_nothing_else(tmp_path: Path) -> None:
    files = {"Dockerfile": "FROM a\nCOPY . /x\n", "requirements.txt": "requests\n", "d/e": "1"}
    root = context(tmp_path, files)
    first = digest_of(root)
    # When nothing but times change, Then the digest is the same
    os.utime(root / "requirements.txt", (0, 0))
    assert digest_of(root) == first
    # When a file's content, mode or name changes, or a link is added, Then it differs
    (root / "requirements.txt").write_text("requests\nevil\n")
    assert digest_of(root) != first
    (root / "requirements.txt").write_text("requests\n")
    assert digest_of(root) == first
    (root / "d" / "e").chmod(0o755)
    assert digest_of(root) != first
    (root / "d" / "e").chmod(0o644)
    (root / "d" / "e").rename(root / "d" / "f")
    assert digest_of(root) != first
    (root / "d" / "f").rename(root / "d" / "e")
    assert digest_of(root) == first
    (root / "link").symlink_to("d/e")
    assert digest_of(root) != first
    # When an ignored file changes, Then the digest is the same (it is not sent)
    (root / "link").unlink()
    (root / ".dockerignore").write_text("secret\n")
    ignored = digest_of(root)
    (root / "secret").write_text("changes every time")
    assert digest_of(root) == ignored


def test_a_dockerfile_from_outside_the_context_counts_by_its_content(tmp_path: Path) -> None:
    # Given a context and a Dockerfile outside it (added under a random name when packed)
    root = context(tmp_path, {"a.txt": "a"})
    outside = context(tmp_path, {"Dockerfile": "FROM a\n"}, "df") / "Dockerfile"
    # Then its digest is stable, and changes with the Dockerfile
    first = digest_of(root, str(outside))
    assert digest_of(root, str(outside)) == first
    outside.write_text("FROM b\n")
    assert digest_of(root, str(outside)) != first


def test_a_context_digest_reads_the_archive_from_its_start_and_leaves_it_there() -> None:
    archive = io.BytesIO()
    with tarfile.open(fileobj=archive, mode="w") as tar:
        info = tarfile.TarInfo("Dockerfile")
        info.size = 7
        tar.addfile(info, io.BytesIO(b"FROM a\n"))
    archive.seek(100)
    digest = context_digest(archive, "Dockerfile")
    assert archive.tell() == 0
    assert context_digest(archive, "Dockerfile") == digest


@pytest.mark.parametrize("name", ["http_proxy", "HTTPS_PROXY", "no_proxy", "ALL_PROXY"])
def test_a_build_through_a_users_proxy_is_refused(bob: UserImages, name: str) -> None:
    # The engine leaves the proxy arguments out of its build cache: a step run through bob's
    # proxy would be the cached step of the next user's build of the same lines
    with pytest.raises(BadRequest) as refused:
        bob.check_build_args({name: "http://bob.example:3128", "VERSION": "1"}, "The build")
    assert name in refused.value.message
    assert "cache" in refused.value.message
    bob.check_build_args({"VERSION": "1", "proxy": "x"}, "The build")  # other names are taken


# -- what BuildKit keeps between builds ------------------------------------------------------


@pytest.mark.parametrize(
    ("dockerfile", "expected"),
    [
        ("FROM a\nRUN --mount=type=cache,target=/root/.cache/pip pip install x\n", ["line 2"]),
        ('FROM a\nRUN --mount="TYPE=Cache,id=pip,target=/c" true\n', ["line 2"]),
        ("FROM a\nRUN --network=none --mount type=cache,target=/c true\n", ["line 2"]),
        ("FROM a\nRUN --mount=type=${KIND},target=/c true\n", ["line 2"]),
        ("FROM a\nRUN --mount=${SPEC} true\n", ["line 2"]),
        ("FROM a\nONBUILD RUN --mount=type=cache,target=/c true\n", ["ONBUILD line 2"]),
        ("FROM a\nCOPY <<EOF /x\nRUN --mount=type=cache,target=/c true\nEOF\n", ["line 3"]),
        ("FROM a\nrun \\\n  --mount=type=cache,target=/c true\n", ["line 2"]),
        ("FROM a\nRUN --mount=type=bind,target=/m true\n", []),
        ("FROM a\nRUN --mount=target=/m true\n", []),
        ("FROM a\nRUN --mount=type=secret,id=x --mount=type=tmpfs,target=/t true\n", []),
        ("FROM a\nRUN echo --mount=type=cache,target=/c\n", []),
        ("FROM a\n# RUN --mount=type=cache,target=/c true\n", []),
    ],
)
def test_the_build_caches_a_dockerfile_mounts(dockerfile: str, expected: list[str]) -> None:
    # Given a Dockerfile, When the mounts BuildKit keeps between builds are listed, Then they
    # are its cache mounts (and those whose type gpudev cannot read), in lines, ONBUILD
    # triggers and what a heredoc holds
    assert [where.split(",")[0] for where in shared_mounts(dockerfile)] == expected


def test_a_build_cache_mount_is_refused_in_shared_mode(bob: UserImages) -> None:
    # BuildKit keeps a cache mount's files between builds, every user's builds alike, keyed
    # by its id (the target when no id): bob's build would read what alice's left there
    dockerfile = "FROM python:3\nRUN --mount=type=cache,target=/root/.cache/pip pip install x\n"
    with pytest.raises(BadRequest) as refused:
        bob.check_dockerfile(engine(), dockerfile, {}, "The Dockerfile of 'web'")
    assert refused.value.message.startswith("The Dockerfile of 'web', line 2, ")
    assert "type=cache" in refused.value.message


def test_a_base_image_whose_triggers_mount_a_build_cache_is_refused(bob: UserImages) -> None:
    trigger = {"Config": {"OnBuild": ["RUN --mount=type=cache,target=/c true"]}}
    client = engine(FakeImage(OTHER, ["evil:1"], trigger))
    with pytest.raises(BadRequest, match="ONBUILD of evil:1"):
        bob.check_dockerfile(client, "FROM evil:1\n", {}, "The Dockerfile of 'web'")


@pytest.mark.parametrize(
    ("dockerfile", "expected"),
    [
        ("FROM a\nADD http://169.254.169.254/latest/meta-data/ /m\n", ["line 2"]),
        ("FROM a\nadd --chown=1 HTTPS://x.example/a.tgz b.txt /opt/\n", ["line 2"]),
        ('FROM a\nADD ["ftp://x.example/a", "/a"]\n', ["line 2"]),
        ("FROM a\nADD git@github.com:o/r.git /r\n", ["line 2"]),
        ("FROM a\nARG URL=http://10.0.0.1/x\nADD $URL /x\n", ["line 3"]),
        ("FROM a\nADD ${UNKNOWN} /x\n", ["line 2"]),
        ("FROM a\nONBUILD ADD http://x.example/a /a\n", ["ONBUILD line 2"]),
        ("FROM a\nRUN <<EOF\nADD http://x.example/a /a\nEOF\n", ["line 3"]),
        ("FROM a\nADD pkg.tar.gz /opt/\n", []),
        ("FROM a\nARG V=1\nADD pkg-${V}.tar.gz /opt/http://x\n", []),
        ('FROM a\nADD ["a b.txt", "/c"]\n', []),
        ("FROM a\nCOPY http://x.example/a /a\nRUN curl http://x.example/a\n", []),
        ("FROM a\nADD <<EOF /x\nhttp://x.example/a\nEOF\n", []),
    ],
)
def test_the_sources_a_dockerfile_has_the_engine_fetch(
    dockerfile: str, expected: list[str]
) -> None:
    # Given a Dockerfile, When the ADD sources the engine itself would fetch (a URL, a git
    # remote, one gpudev cannot resolve) are listed, Then they are those
    assert [where.split(",")[0] for where in remote_sources(dockerfile, {})] == expected


def test_an_add_from_a_url_is_refused_in_shared_mode(bob: UserImages) -> None:
    # The engine fetches an ADD's URL itself, as root, from the host's network: another user's
    # container ports (which GPUDEV-PORTS keeps other accounts from) and the host's loopback
    dockerfile = "FROM python:3\nADD http://172.17.0.5:8888/notes /stolen\n"
    with pytest.raises(BadRequest) as refused:
        bob.check_dockerfile(engine(), dockerfile, {}, "The Dockerfile of 'web'")
    assert refused.value.message.startswith("The Dockerfile of 'web', line 2, ADD http://")
    trigger = {"Config": {"OnBuild": ["ADD http://x.example/a /a"]}}
    with pytest.raises(BadRequest, match="ONBUILD of evil:1"):
        bob.check_dockerfile(
            engine(FakeImage(OTHER, ["evil:1"], trigger)), "FROM evil:1\n", {}, "The Dockerfile"
        )


@pytest.mark.parametrize(
    "dockerfile",
    [
        "FROM a\nADD http:\\/\\/127.0.0.1:8765/x /d\n",
        "FROM a\nADD http:''//127.0.0.1:8765/x /d\n",
        'FROM a\nADD "http://127.0.0.1:8765/x" /d\n',
        "FROM a\nADD h\\ttp://127.0.0.1/x /d\n",
        "FROM a\nADD foo@10.0.0.1:repo /d\n",
        "FROM a\nADD git@10.0.0.1:repo.git /d\n",
    ],
)
def test_an_add_url_written_with_escapes_or_quotes_is_still_one(dockerfile: str) -> None:
    # The builders take escapes and quotes out of an ADD's source before they read it
    assert [where.split(",")[0] for where in remote_sources(dockerfile, {})] == ["line 2"]


@pytest.mark.parametrize(
    "mount",
    [
        "type=ca\\che,id=x,target=/c",
        'type="cache",target=/c',
        "type='cache',target=/c",
        "ty\\pe=cache,target=/c",
    ],
)
def test_a_cache_mount_written_with_escapes_or_quotes_is_still_one(mount: str) -> None:
    # BuildKit reads each field of a --mount through the shell's rules first
    dockerfile = f"FROM a\nRUN --mount={mount} true\n"
    assert [where.split(",")[0] for where in shared_mounts(dockerfile)] == ["line 2"]


def test_a_mount_from_an_image_written_with_escapes_is_still_that_image() -> None:
    found = named("FROM a\nRUN --mount=type=bind,from=im\\g:2,target=/m true\n")
    assert [resolved for resolved, _ in found] == ["a", "img:2"]
