"""Crafted container data: every parser skips and reports what it cannot read, never raises.

What a dev container holds is the user's (or an attacker's): package metadata, probe output
and ``docker diff`` entries may have the wrong types, miss keys, be huge or hold NUL and
newline characters. None of it may crash a diff or a removal, or reach a Dockerfile line.
"""

from __future__ import annotations

import json
from typing import Any

import pytest

from jupyter_gpudev.changes import classify, model
from jupyter_gpudev.changes import probe as image_probe

CONTROL = "a\nRUN touch /pwned"

BAD_DIRECT_URLS: list[Any] = [
    {"url": "file:///src/x", "dir_info": []},
    {"url": "file:///src/x", "dir_info": "editable"},
    {"url": "file:///src/x", "dir_info": {"editable": "yes"}},
    {"url": 5, "archive_info": {}},
    {"url": ["https://x"], "archive_info": {}},
    {"url": "https://example.org/x.tar.gz\nRUN touch /pwned", "archive_info": {}},
    {"url": "https://example.org/x.tar.gz\0", "archive_info": {}},
    {"url": "https://example.org/" + "x" * 100_000, "archive_info": {}},
    {"url": "https://github.com/x/y", "vcs_info": []},
    {"url": "https://github.com/x/y", "vcs_info": "git"},
    {"url": "https://github.com/x/y", "vcs_info": {"vcs": 1, "commit_id": {}}},
    {"url": "https://github.com/x/y", "vcs_info": {"vcs": "git", "commit_id": CONTROL}},
    {"url": "https://github.com/x/y", "vcs_info": {"vcs": "git\nRUN id", "commit_id": "abc"}},
    {"url": "https://x/y.zip", "archive_info": {}, "subdirectory": "a\nRUN id"},
    {"url": "https://x/y.zip", "archive_info": {}, "subdirectory": ["a"]},
    {"vcs_info": {"vcs": "git", "commit_id": "abc"}},
    [],
    "string",
    123,
    None,
]


@pytest.mark.parametrize("data", BAD_DIRECT_URLS, ids=lambda d: repr(d)[:60])
def test_a_crafted_direct_url_is_an_invalid_install_not_an_exception(data: Any) -> None:
    # When direct_url.json has wrong types, control characters or a huge value
    dist = model.PyDist.parse("pkg", "1.0", json.dumps(data))
    # Then the distribution is read, marked as an install a Dockerfile cannot repeat
    assert dist.name == "pkg"
    assert dist.source == "invalid"
    # And what it says about it is printable and bounded
    assert dist.url.isprintable()
    assert len(dist.url) <= 300
    assert dist.source in model.NOT_REPRODUCIBLE


def test_a_valid_direct_url_with_a_subdirectory_is_kept() -> None:
    direct = {
        "url": "https://github.com/x/y",
        "vcs_info": {"vcs": "git", "commit_id": "abc123"},
        "subdirectory": "pkgs/tool",
    }
    dist = model.PyDist.parse("tool", "1.0", json.dumps(direct))
    assert dist.requirement() == "tool @ git+https://github.com/x/y@abc123#subdirectory=pkgs/tool"
    editable = model.PyDist.parse(
        "e", "1", json.dumps({"url": "file:///src/e", "dir_info": {"editable": True}})
    )
    assert editable.source == "editable"


def test_unparseable_direct_url_text_is_invalid_too() -> None:
    for text in ["{", "\0", "x" * 10, '{"url": "\\u0000"}']:
        assert model.PyDist.parse("pkg", "1.0", text).source == "invalid"


def python_section(data: Any) -> str:
    return f"@@gpudev python /usr/bin/python3\n{json.dumps(data)}\n@@gpudev end\n"


GOOD_ENV = {"prefix": "/usr", "base_prefix": "/usr", "version": "3.11", "dists": []}

BAD_PYTHON: list[Any] = [
    [],
    "text",
    5,
    {},
    {**GOOD_ENV, "prefix": 5},
    {**GOOD_ENV, "prefix": "/usr\nRUN id"},
    {**GOOD_ENV, "version": ["3"]},
    {**GOOD_ENV, "dists": {"six": "1"}},
    {**GOOD_ENV, "dists": [["six"], "x", 5, None, ["a", "b", "c", "d"]]},
    {**GOOD_ENV, "dists": [[{"n": 1}, "1", None], ["six", ["1"], None], ["six", "1", 5]]},
    {**GOOD_ENV, "dists": [["six\nRUN id", "1", None], ["six", "1\0", None]]},
    {**GOOD_ENV, "owned_files": "not a list"},
    {**GOOD_ENV, "owned_files": [5, None, "/a\0b", "/ok"]},
]


@pytest.mark.parametrize("data", BAD_PYTHON, ids=lambda d: repr(d)[:60])
def test_crafted_python_probe_output_is_skipped_and_reported(data: Any) -> None:
    # When the probe's JSON for an interpreter has the wrong shape
    result = image_probe.parse_probe(python_section(data))
    # Then no exception; what is kept is valid, what is not is reported
    for prefix, env in result.state.python.items():
        assert prefix.isprintable()
        assert env.version.isprintable()
        assert all(d.name.isprintable() and d.version.isprintable() for d in env.dists.values())
    assert all(f.isprintable() for f in result.owned_files)
    assert result.problems


def test_a_good_python_entry_next_to_bad_ones_is_kept() -> None:
    data = {**GOOD_ENV, "dists": [["six", "1.16.0", None], ["bad\nname", "1", None], 5]}
    result = image_probe.parse_probe(python_section(data))
    assert list(result.state.python["/usr"].dists) == ["six"]
    assert any("bad" in p for p in result.problems)
    assert all(p.isprintable() for p in result.problems)


def test_crafted_dpkg_lines_are_skipped() -> None:
    probe = (
        "@@gpudev dpkg\n"
        "bash\t5.2\tii\n"
        "evil\0\t1\tii\n"
        "evil2\t1;reboot\tii\n"
        "Evil\t1\tii\n"
        f"{'x' * 100_000}\t1\tii\n"
        "only-two\tfields\n"
        "\t\t\t\n"
        "@@gpudev end\n"
    )
    result = image_probe.parse_probe(probe)
    assert result.state.dpkg == {"bash": "5.2"}
    assert len(result.problems) >= 4
    assert all(p.isprintable() and len(p) < 400 for p in result.problems)


def test_crafted_conda_history_and_condarc_are_read_without_exceptions() -> None:
    history = (
        "# update specs: [1, {'a': 1}, ['x'], 'numpy', 'evil\\nRUN id', 'ok=1.0']\n"
        "# update specs: {'not': 'a list'}\n"
        "# update specs: 'text'\n"
        "# remove specs: [null, 5]\n"
        "# update specs: ['" + "y" * 100_000 + "']\n"
    )
    specs = image_probe.parse_conda_history(history)
    assert specs == ("numpy", "ok=1.0")
    assert image_probe.parse_condarc_channels("channels: [a\x1b[2J, b, 'c d', 5]\n") == ("b", "5")
    assert image_probe.parse_condarc_channels("channels:\n  - conda-forge\n  - \x00x\n") == (
        "conda-forge",
    )


BAD_DIFF: list[Any] = [
    {"Path": "/etc/ok", "Kind": 1},
    {"Path": 5, "Kind": 1},
    {"Path": "/etc/x"},
    {"Kind": 1},
    {"Path": "/etc/y", "Kind": "one"},
    {"Path": "/etc/z", "Kind": 7},
    {"Path": ["/etc/w"], "Kind": 1},
    {"Path": "relative", "Kind": 1},
    {"Path": "/etc/n\0ul", "Kind": 1},
    "not a mapping",
    None,
]


def test_crafted_docker_diff_entries_are_skipped() -> None:
    files = classify.file_changes(BAD_DIFF, [], set())
    assert "/etc/ok" in files.kept
    assert all(isinstance(p, str) and p.startswith("/") for p in files.kept)
    assert "/etc/ok" in classify.uncommitted(BAD_DIFF, [], {})


def test_a_path_with_a_newline_is_still_a_file_change() -> None:
    # A file named with a newline is a change, one a Dockerfile cannot name (reported)
    files = classify.file_changes([{"Path": "/etc/a\nRUN touch /pwned", "Kind": 1}], [], set())
    assert files.kept == []
    assert files.unsafe == ["/etc/a\nRUN touch /pwned"]
    # And removing the container would lose it: listed, escaped
    lost = classify.uncommitted([{"Path": "/etc/a\nRUN touch /pwned", "Kind": 1}], [], {})
    assert lost == ["'/etc/a\\nRUN touch /pwned'"]


def test_trailing_newlines_do_not_pass_full_match_validation() -> None:
    env = image_probe.probe_environment(owned_dpkg=["bash\n", "bash"], owned_dists=["six\n", "six"])
    assert env["GPUDEV_OWNED_DPKG"] == "bash"
    assert json.loads(env["GPUDEV_OWNED_DISTS"]) == ["six"]
