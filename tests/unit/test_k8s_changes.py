"""A pod's changes without ``docker diff`` (``k8s/listing.py``) and why a pod does not run
(``k8s/status.py``), without a cluster: listings of real ``find`` runs on this machine, crafted
hostile listings, and pod answers in the API's shape."""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest

from jupyter_gpudev.changes import classify
from jupyter_gpudev.k8s.listing import (
    ADDED,
    CHANGED,
    DELETED,
    LISTING_ARGV,
    compare_listings,
    parse_listing,
)
from jupyter_gpudev.k8s.status import pod_state
from jupyter_gpudev.untrusted import MAX_MESSAGE


def record(kind: str, path: str, size: int = 0, mtime: str = "1.5", mode: str = "644") -> bytes:
    target = "/target" if kind == "l" else ""
    return b"\0".join(x.encode() for x in (kind, str(size), mtime, mode, path, target)) + b"\0"


# -- listings -----------------------------------------------------------------------------------


def test_a_listing_reads_names_no_other_format_could() -> None:
    data = (
        record("d", "/", mode="755")
        + record("f", "/etc/motd", 12)
        + record("f", "/data/a name\nwith a newline", 3)
        + record("l", "/usr/bin/python")
    )
    listing = parse_listing(data)
    assert listing.problems == []
    assert set(listing.entries) == {
        "/",
        "/etc/motd",
        "/data/a name\nwith a newline",
        "/usr/bin/python",
    }
    assert listing.entries["/usr/bin/python"].target == "/target"
    assert listing.entries["/etc/motd"].mode == 0o644


@pytest.mark.parametrize(
    "bad",
    [
        record("f", "relative/path"),
        record("f", "/a/../etc/shadow"),
        record("f", "//etc/passwd"),
        record("f", "/x", mode="9999"),
        record("ff", "/x"),
        b"f\0-1\x001.0\x00644\x00/x\0\0",
        b"f\x001.5\x001.0\x00644\x00/x\0\0",
        b"f\x000\x001.0\x00644\x00/\xff\xfe\0\0",
        record("f", "/" + "a" * 5000),
    ],
)
def test_a_record_that_does_not_parse_is_reported_and_skipped(bad: bytes) -> None:
    listing = parse_listing(record("f", "/ok") + bad + record("f", "/also-ok"))
    assert set(listing.entries) == {"/ok", "/also-ok"}
    assert len(listing.problems) == 1


def test_a_listing_cut_in_a_record_says_so() -> None:
    listing = parse_listing(record("f", "/ok") + b"f\x0012\x00")
    assert set(listing.entries) == {"/ok"}
    assert "middle of a record" in listing.problems[0]


# -- comparing listings -------------------------------------------------------------------------


def test_changes_are_what_docker_diff_would_say() -> None:
    image = parse_listing(
        record("d", "/etc", mode="755", mtime="1")
        + record("f", "/etc/motd", 10)
        + record("f", "/etc/old.conf", 5)
        + record("d", "/opt/tool", mode="755")
        + record("f", "/opt/tool/bin", 100)
        + record("d", "/opt/tool/lib", mode="755")
        + record("f", "/opt/tool/lib/x.so", 100)
        + record("l", "/usr/bin/python")
        + record("f", "/usr/bin/run", 9, mode="755")
        + record("d", "/proc", mode="555")
        + record("f", "/etc/hostname", 4)
    ).entries
    pod = parse_listing(
        record("d", "/etc", mode="755", mtime="2")  # an entry was added: the folder changed
        + record("f", "/etc/motd", 11)  # edited
        + record("f", "/etc/new.conf", 1)  # added
        + record("l", "/usr/bin/python")
        + record("f", "/usr/bin/run", 9, mode="700")  # chmod
        + record("d", "/proc", mode="555")
        + record("f", "/proc/1/status", 0)  # the runtime's
        + record("f", "/etc/hostname", 9)  # the kubelet's
        + record("d", "/workspace", mode="777")
        + record("f", "/workspace/nb.ipynb", 99)  # the workspace claim
    ).entries
    changes = {c["Path"]: c["Kind"] for c in compare_listings(image, pod, skip=["/workspace"])}
    assert changes == {
        "/etc": CHANGED,
        "/etc/motd": CHANGED,
        "/etc/new.conf": ADDED,
        "/etc/old.conf": DELETED,
        "/opt/tool": DELETED,  # the folder, not what was in it
        "/usr/bin/run": CHANGED,
    }


def test_the_changes_feed_the_same_classification_as_docker_diff() -> None:
    image = parse_listing(record("d", "/etc", mtime="1") + record("f", "/etc/motd", 1)).entries
    pod = parse_listing(
        record("d", "/etc", mtime="2")
        + record("f", "/etc/motd", 2)
        + record("f", "/etc/app.conf", 2)
        + record("d", "/root/.cache", mode="700")
        + record("f", "/root/.cache/pip/x", 2)
        + record("f", "/root/.ssh/id_ed25519", 400, mode="600")
    ).entries
    files = classify.file_changes(compare_listings(image, pod), mounts=[], owned=set())
    assert sorted(files.kept) == ["/etc/app.conf", "/etc/motd"]
    assert files.secrets == ["/root/.ssh/id_ed25519"]
    assert "/root/.cache/pip/x" in files.transient


@pytest.mark.skipif(shutil.which("find") is None, reason="no find")
def test_the_listing_format_is_what_gnu_find_prints(tmp_path: Path) -> None:
    # Given a tree listed by the real find, with the listing's own format
    root = tmp_path / "root"
    (root / "etc").mkdir(parents=True)
    (root / "etc" / "motd").write_text("hello\n")
    (root / "etc" / "gone.conf").write_text("x")
    (root / "odd name\nhere").write_text("x")
    (root / "link").symlink_to("etc/motd")
    printf = LISTING_ARGV[-1]

    def listing() -> dict[str, Any]:
        find = shutil.which("find") or "find"
        out = subprocess.run(
            [find, str(root), "-xdev", "-printf", printf], capture_output=True, check=True
        ).stdout
        parsed = parse_listing(out)
        assert parsed.problems == []
        prefix = str(root)
        return {p[len(prefix) :] or "/": e for p, e in parsed.entries.items()}

    before = listing()
    assert before["/link"].target == "etc/motd"
    assert before["/odd name\nhere"].kind == "file"
    # When a file is edited, one added, one removed
    (root / "etc" / "motd").write_text("hello, changed\n")
    (root / "etc" / "new.conf").write_text("y")
    (root / "etc" / "gone.conf").unlink()
    os.utime(root / "etc", (1, 1))  # a folder's time moves with its entries
    changes = {c["Path"]: c["Kind"] for c in compare_listings(before, listing())}
    # Then the comparison says so
    assert changes == {
        "/etc": CHANGED,
        "/etc/motd": CHANGED,
        "/etc/new.conf": ADDED,
        "/etc/gone.conf": DELETED,
    }


# -- why a pod does not run -------------------------------------------------------------------


def pod(phase: str, **status: Any) -> dict[str, Any]:
    return {"metadata": {"name": "gpudev-x"}, "status": {"phase": phase, **status}}


def test_an_unschedulable_pod_says_the_schedulers_words() -> None:
    words = (
        "0/12 nodes are available: 4 Insufficient nvidia.com/gpu, 8 node(s) had untolerated taint."
    )
    state = pod_state(
        pod(
            "Pending",
            conditions=[
                {
                    "type": "PodScheduled",
                    "status": "False",
                    "reason": "Unschedulable",
                    "message": words,
                }
            ],
        )
    )
    assert (state.state, state.reason, state.message) == ("unschedulable", "Unschedulable", words)


def test_without_a_condition_message_the_newest_scheduling_event_is_said() -> None:
    events = {
        "items": [
            {
                "reason": "FailedScheduling",
                "message": "older",
                "lastTimestamp": "2026-11-25T08:00:00Z",
            },
            {"reason": "Scheduled", "message": "no", "lastTimestamp": "2026-11-25T08:02:00Z"},
            {
                "reason": "FailedScheduling",
                "message": "newer",
                "lastTimestamp": "2026-11-25T08:01:00Z",
            },
        ]
    }
    unscheduled = pod("Pending", conditions=[{"type": "PodScheduled", "status": "False"}])
    assert pod_state(unscheduled, events).message == "newer"


@pytest.mark.parametrize(
    ("answer", "state", "reason"),
    [
        (
            pod(
                "Pending",
                containerStatuses=[
                    {
                        "state": {
                            "waiting": {
                                "reason": "ImagePullBackOff",
                                "message": "pull access denied",
                            }
                        }
                    }
                ],
            ),
            "failed",
            "ImagePullBackOff",
        ),
        (
            pod("Running", containerStatuses=[{"state": {"running": {"startedAt": "x"}}}]),
            "running",
            "",
        ),
        (
            pod(
                "Pending",
                conditions=[{"type": "PodScheduled", "status": "True"}],
                containerStatuses=[{"state": {"waiting": {"reason": "ContainerCreating"}}}],
            ),
            "starting",
            "Pending",
        ),
        (
            pod(
                "Running",
                containerStatuses=[
                    {"state": {"terminated": {"reason": "OOMKilled", "exitCode": 137}}}
                ],
            ),
            "failed",
            "OOMKilled",
        ),
        (
            pod("Failed", reason="Evicted", message="The node was low on memory."),
            "failed",
            "Evicted",
        ),
        ({}, "gone", ""),
        (None, "gone", ""),
        ({"status": "odd"}, "starting", "Pending"),
    ],
)
def test_a_pods_state(answer: Any, state: str, reason: str) -> None:
    found = pod_state(answer)
    assert (found.state, found.reason) == (state, reason)


def test_messages_from_the_cluster_are_cleaned_and_cut() -> None:
    hostile = "\x1b[2J\x1b]0;owned\x07" + "x" * 2000
    state = pod_state(
        pod("Pending", conditions=[{"type": "PodScheduled", "status": "False", "message": hostile}])
    )
    assert "\x1b" not in state.message
    assert "\x07" not in state.message
    assert len(state.message) == MAX_MESSAGE
