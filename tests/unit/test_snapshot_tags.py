"""Where a snapshot is tagged and pushed (single-user and shared mode), and the record of which
images gpudev made as whose snapshot."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from jupyter_gpudev.changes.snapshots import (
    SnapshotRecords,
    SnapshotTags,
    snapshot_tags,
    user_repository,
)
from jupyter_gpudev.engine import Reference
from jupyter_gpudev.errors import BadRequest, ConfigError, Conflict

IMAGE = "sha256:" + "ab" * 32


@pytest.mark.parametrize(
    ("tag", "push", "expected"),
    [
        ("myenv:v1", False, SnapshotTags("myenv:v1")),
        ("myenv", False, SnapshotTags("myenv")),
        ("gpudev-python:bookworm", False, SnapshotTags("gpudev-python:bookworm")),
        (
            "127.0.0.1:5000/team/x:1",
            True,
            SnapshotTags("127.0.0.1:5000/team/x:1", "127.0.0.1:5000/team/x:1"),
        ),
    ],
)
def test_in_single_user_mode_the_tag_is_the_users_own(
    tag: str, push: bool, expected: SnapshotTags
) -> None:
    # Given single-user mode (no user: the engine is theirs), When a tag is mapped
    # Then it is the engine's tag as given, and the push target with --push
    assert snapshot_tags(tag, None, push=push) == expected


@pytest.mark.parametrize(
    ("tag", "push", "expected"),
    [
        ("myenv:v1", False, SnapshotTags("localhost/gpudev/alice/myenv:v1")),
        ("myenv", False, SnapshotTags("localhost/gpudev/alice/myenv:latest")),
        ("team/env:v1", False, SnapshotTags("localhost/gpudev/alice/team/env:v1")),
        (
            "gpudev-python:bookworm",
            False,
            SnapshotTags("localhost/gpudev/alice/gpudev-python:bookworm"),
        ),
        (
            "127.0.0.1:5000/alice/x:1",
            True,
            SnapshotTags("localhost/gpudev/alice/alice/x:1", "127.0.0.1:5000/alice/x:1"),
        ),
        ("127.0.0.1:5000/alice/x:1", False, SnapshotTags("localhost/gpudev/alice/alice/x:1")),
        (
            "registry.example.com/team/env:v2",
            True,
            SnapshotTags("localhost/gpudev/alice/team/env:v2", "registry.example.com/team/env:v2"),
        ),
        ("docker.io/team/env:v1", False, SnapshotTags("localhost/gpudev/alice/team/env:v1")),
        ("localhost:5000/env:v1", False, SnapshotTags("localhost/gpudev/alice/env:v1")),
        ("localhost/other/env:v1", False, SnapshotTags("localhost/gpudev/alice/other/env:v1")),
        ("localhost/gpudev/alice/env:v1", False, SnapshotTags("localhost/gpudev/alice/env:v1")),
        ("localhost/gpudev/alice/env", False, SnapshotTags("localhost/gpudev/alice/env:latest")),
    ],
)
def test_in_shared_mode_the_local_tag_is_under_the_users_repository(
    tag: str, push: bool, expected: SnapshotTags
) -> None:
    # Given shared mode, user alice, When her tag is mapped
    tags = snapshot_tags(tag, "alice", push=push)
    # Then the engine's tag is under her repository, TAG (with --push) is only pushed to
    assert tags == expected
    assert tags.local.startswith("localhost/gpudev/alice/")
    assert Reference.parse(tags.local).registry == "localhost"


@pytest.mark.parametrize(
    "tag",
    [
        "localhost/gpudev/bob/env:v1",
        "localhost/gpudev/alicex/env:v1",
        "localhost/gpudev/env:v1",
        "localhost/gpudev:v1",
    ],
)
def test_in_shared_mode_another_users_repository_is_refused(tag: str) -> None:
    # Given shared mode, When alice names a tag under gpudev's repository that is not hers
    # Then it is a conflict that says where hers go
    with pytest.raises(Conflict, match="localhost/gpudev/alice/"):
        snapshot_tags(tag, "alice", push=False)


def test_in_shared_mode_the_users_local_tag_cannot_be_pushed() -> None:
    # Given shared mode, When alice pushes to her own local tag, Then it is refused
    with pytest.raises(BadRequest, match="not a registry's"):
        snapshot_tags("localhost/gpudev/alice/env:v1", "alice", push=True)


def test_a_tag_too_long_under_the_users_repository_is_refused() -> None:
    # Given a valid tag of 250 characters, When it is mapped in shared mode
    tag = "a" * 240 + ":v1"
    assert snapshot_tags(tag, None, push=False).local == tag
    # Then it is refused: under alice's repository it would be longer than the engine takes
    with pytest.raises(BadRequest, match="too long"):
        snapshot_tags(tag, "alice", push=False)


def test_a_tag_that_is_no_reference_is_refused() -> None:
    with pytest.raises(BadRequest, match="not an image reference"):
        snapshot_tags("Not A Tag", "alice", push=False)


@pytest.mark.parametrize(
    ("user", "repository"),
    [
        ("alice", "localhost/gpudev/alice"),
        ("gpudev-bob", "localhost/gpudev/gpudev-bob"),
        ("a.b_c", "localhost/gpudev/a.b_c"),
    ],
)
def test_a_user_name_that_is_a_repository_component_is_used_as_it_is(
    user: str, repository: str
) -> None:
    assert user_repository(user) == repository


@pytest.mark.parametrize(
    ("user", "readable"),
    [
        ("Alice", "alice"),
        ("alice@example.com", "alice-example-com"),
        ("alice+x", "alice-x"),
        ("bob-", "bob"),
        ("a..b", "a-b"),
    ],
)
def test_another_user_name_is_readable_and_hashed(user: str, readable: str) -> None:
    # Given a name that is no repository component, When its repository is made
    repository = user_repository(user)
    # Then it is its lower-case letters and digits, '-' between, and a hash of the whole name
    assert re.fullmatch(rf"localhost/gpudev/{readable}-[0-9a-f]{{8}}", repository)
    assert Reference.parse(f"{repository}/env:v1").registry == "localhost"


def test_names_differing_only_in_case_get_different_repositories() -> None:
    assert len({user_repository(u) for u in ("alice", "Alice", "ALICE", "alice@x", "alice+x")}) == 5


def test_records_say_who_gpudev_made_a_snapshot_for(tmp_path: Path) -> None:
    # Given the records of a state folder
    records = SnapshotRecords(tmp_path / "state")
    # Then an image is no one's snapshot until recorded (nor a malformed id)
    assert records.owner(IMAGE) is None
    assert records.owner("../../etc/passwd") is None
    # When alice's snapshot is recorded
    records.record(IMAGE, "alice", "localhost/gpudev/alice/env:v1")
    # Then it is hers, also for another reader of the folder (the CLI beside the server)
    assert SnapshotRecords(tmp_path / "state").owner(IMAGE) == "alice"
    assert records.owner("sha256:" + "cd" * 32) is None
    # And the folder is the service's alone
    assert (tmp_path / "state" / "snapshots").stat().st_mode & 0o777 == 0o700


def test_a_record_that_cannot_be_read_says_no_one(tmp_path: Path) -> None:
    # Given a record file that is not a record
    records = SnapshotRecords(tmp_path)
    records.record(IMAGE, "alice", "x:1")
    (tmp_path / "snapshots" / f"{IMAGE[7:]}.json").write_text('{"user": 1}')
    # Then the image is no one's snapshot
    assert records.owner(IMAGE) is None


def test_a_record_that_cannot_be_written_is_a_config_error(tmp_path: Path) -> None:
    # Given a state folder that cannot be made (a file is in its place)
    (tmp_path / "state").write_text("")
    # When a snapshot is recorded, Then the error names the state folder's trait
    with pytest.raises(ConfigError, match=r"c\.DevContainers\.state_dir"):
        SnapshotRecords(tmp_path / "state").record(IMAGE, "alice", "x:1")
