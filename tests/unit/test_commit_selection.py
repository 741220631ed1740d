"""Choosing what a commit carries: change ids, ``exclude``, the baseline a commit leaves behind,
the expected packages of a verify build."""

from __future__ import annotations

import json
from pathlib import Path
from types import SimpleNamespace
from typing import Any, cast

import pytest

from jupyter_gpudev.changes import classify, compare, model
from jupyter_gpudev.changes.baselines import Baseline, Baselines
from jupyter_gpudev.changes.capture import Captured
from jupyter_gpudev.changes.commit import CommitOptions
from jupyter_gpudev.changes.dockerfile import RenderedDiff, change_items, render
from jupyter_gpudev.errors import BadRequest
from jupyter_gpudev.handlers.api import _commit_options


def env(prefix: str, dists: dict[str, str], *, venv: bool = False) -> model.PythonEnv:
    return model.PythonEnv(
        python=f"{prefix}/bin/python3",
        prefix=prefix,
        base_prefix="/usr" if venv else prefix,
        version="3.11",
        externally_managed=not venv,
        dists={model.normalize(n): model.PyDist(n, v) for n, v in dists.items()},
    )


def state(
    dpkg: dict[str, str],
    dists: dict[str, str],
    auto: frozenset[str] = frozenset(),
    *,
    venv: dict[str, str] | None = None,
    conda: tuple[str, ...] | None = None,
) -> model.PackageState:
    python = {"/usr": env("/usr", dists)}
    if venv is not None:
        python["/opt/venv"] = env("/opt/venv", venv, venv=True)
    return model.PackageState(
        dpkg=dpkg,
        dpkg_auto=auto,
        python=python,
        conda={} if conda is None else {"/opt/conda": model.CondaEnv("/opt/conda", conda)},
    )


BEFORE = state(
    {"bash": "5", "vim": "9", "curl": "7.88", "libold": "1"},
    {"six": "1.16", "packaging": "23.0", "gone": "1"},
    frozenset({"libold"}),
    conda=("python=3.11", "scipy"),
)
AFTER = state(
    {"bash": "5", "curl": "7.89", "cowsay": "3.03", "libcow": "2", "libold": "2"},
    {"six": "1.16", "packaging": "24.1", "Iniconfig": "2.0.0"},
    frozenset({"libcow", "libold"}),
    venv={"pip": "24.0", "torch": "2.3.0"},
    conda=("python=3.11", "numpy=1.26"),
)


def changes_of(
    before: model.PackageState = BEFORE, after: model.PackageState = AFTER
) -> model.ChangeSet:
    changes = compare.package_changes(before, after)
    changes.files = model.FileChanges(
        kept=["/etc/motd", "/etc/pip.conf", "/root/.config/app.toml"],
        deleted=["/etc/issue"],
        secrets=["/root/.ssh/id_ed25519"],
    )
    changes.env = {"MY_SETTING": "on"}
    changes.env_secrets = ["HF_TOKEN"]
    return changes


def render_it(changes: model.ChangeSet) -> str:
    return render(
        changes,
        container="box",
        environment="gpu",
        dockerfile="Dockerfile",
        old_text="FROM x\n",
        image=None,
        context_folder="gpudev-context/box",
    ).new_text


# -- ids ----------------------------------------------------------------------------------------


def test_every_change_has_a_stable_id_in_the_order_the_dockerfile_renders_it() -> None:
    # Given a change set of every kind
    items = change_items(changes_of())
    # Then each change is one item, in the Dockerfile's order (package sources first)
    assert [i.id for i in items] == [
        "file:/etc/pip.conf",
        "apt:cowsay",
        "apt:curl",
        "apt:vim",
        "conda:/opt/conda:numpy=1.26",
        "conda:/opt/conda:scipy",
        "python:/opt/venv:pip",
        "python:/opt/venv:torch",
        "python:/usr:iniconfig",
        "python:/usr:packaging",
        "python:/usr:gone",
        "file:/etc/motd",
        "file:/root/.config/app.toml",
        "delete:/etc/issue",
        "env:MY_SETTING",
    ]
    # And credentials and automatic dependencies are not items
    assert not [i for i in items if "ssh" in i.id or "HF_TOKEN" in i.id or "libcow" in i.id]
    # And each says what it is in words
    by_id = {i.id: i for i in items}
    assert by_id["apt:cowsay"].to_json() == {
        "id": "apt:cowsay",
        "kind": "apt",
        "label": "cowsay 3.03",
        "detail": "apt package, added",
    }
    assert by_id["apt:curl"].label == "curl 7.88→7.89"
    assert by_id["apt:vim"].label == "remove vim"
    assert by_id["python:/usr:packaging"].detail == "pip in /usr, upgraded from 23.0"
    assert by_id["python:/opt/venv:torch"].detail == "pip in the new venv /opt/venv, added"
    assert by_id["conda:/opt/conda:scipy"].kind == "conda"
    assert by_id["delete:/etc/issue"].kind == "delete"
    assert by_id["env:MY_SETTING"].label == "MY_SETTING=on"
    # And the same changes give the same items
    assert change_items(changes_of()) == items


def test_python_ids_use_the_normalized_distribution_name() -> None:
    items = change_items(changes_of())
    assert "python:/usr:iniconfig" in [i.id for i in items]
    assert model.check_change_ids(["python:/usr:Iniconfig", "python:/usr:iniconfig"]) == (
        "python:/usr:iniconfig",
    )


@pytest.mark.parametrize(
    "bad",
    [
        "cowsay",
        "apt:",
        "pip:requests",
        "python:requests",
        "python:usr:requests",
        "conda:numpy",
        "file:etc/motd",
        "delete:",
        "env:A=B",
        "apt:a\nb",
        3,
        None,
    ],
)
def test_an_id_that_is_not_one_is_a_bad_request_naming_it(bad: object) -> None:
    with pytest.raises(BadRequest) as caught:
        model.check_change_ids(["apt:curl", bad])
    assert repr(bad) in caught.value.message
    assert "apt:NAME" in caught.value.message


def test_commit_options_check_the_ids_and_the_expected_digest() -> None:
    with pytest.raises(BadRequest, match="'nope'"):
        CommitOptions(exclude=("nope",)).check()
    with pytest.raises(BadRequest, match="not a diff's digest"):
        CommitOptions(expect="abc").check()
    CommitOptions(exclude=("file:/etc/motd", "env:X"), expect="0" * 64).check()


def test_the_commit_body_takes_exclude_and_expect() -> None:
    body = {"write": True, "exclude": ["apt:curl", "apt:curl"], "expect": "a" * 64}
    options = _commit_options(json.dumps(body).encode())
    assert options.exclude == ("apt:curl",)
    assert options.expect == "a" * 64
    with pytest.raises(BadRequest, match="'curl'"):
        _commit_options(json.dumps({"exclude": ["curl"]}).encode())
    with pytest.raises(BadRequest, match='"exclude" must be a list'):
        _commit_options(json.dumps({"exclude": "apt:curl"}).encode())
    with pytest.raises(BadRequest, match='"expect" must be a string'):
        _commit_options(json.dumps({"expect": 3}).encode())


# -- exclude --------------------------------------------------------------------------------------


def test_excluded_changes_are_not_rendered_and_the_rest_are() -> None:
    # Given a change set, when an apt install, a file, a deletion and a variable are left out
    changes = changes_of()
    excluded = {"apt:cowsay", "file:/etc/motd", "delete:/etc/issue", "env:MY_SETTING"}
    text = render_it(changes.without(excluded))
    # Then their lines are gone
    assert "cowsay" not in text
    assert "/etc/motd" not in text
    assert "/etc/issue" not in text
    assert "MY_SETTING" not in text
    # And the others are still there
    assert "curl=7.89" in text
    assert "apt-get purge -y vim" in text
    assert "/root/.config/app.toml" in text
    assert "Iniconfig==2.0.0" in text
    # And the change set itself is untouched
    assert render_it(changes) != text
    assert "cowsay=3.03" in render_it(changes)


def test_excluding_every_item_renders_an_empty_diff() -> None:
    changes = changes_of()
    everything = {i.id for i in change_items(changes)}
    rest = changes.without(everything)
    assert rest.is_empty()
    assert change_items(rest) == []
    rendered = render(
        rest,
        container="box",
        environment="gpu",
        dockerfile="Dockerfile",
        old_text="FROM x\n",
        image=None,
        context_folder="c",
    )
    assert rendered.diff == ""
    # And credentials are still reported
    assert "/root/.ssh/id_ed25519: looks like a credential, not copied" in rendered.reported


def test_a_new_venv_whose_every_dist_is_excluded_gets_no_venv_line() -> None:
    changes = changes_of()
    assert "-m venv /opt/venv" in render_it(changes)
    # When one of its distributions is left out, the venv is still created
    one = render_it(changes.without({"python:/opt/venv:torch"}))
    assert "-m venv /opt/venv" in one
    assert "torch" not in one
    # When all are left out, nothing is rendered for it
    none = render_it(changes.without({"python:/opt/venv:torch", "python:/opt/venv:pip"}))
    assert "/opt/venv" not in none
    assert "Iniconfig==2.0.0" in none


def test_the_note_of_an_excluded_local_install_goes_with_it() -> None:
    before = state({}, {})
    after = state({}, {})
    after.python["/usr"].dists["mylib"] = model.PyDist("mylib", "0.1", "editable", "file:///src")
    changes = compare.package_changes(before, after)
    assert any("mylib" in n for n in changes.notes)
    assert [i.id for i in change_items(changes)] == ["python:/usr:mylib"]
    assert "a Dockerfile cannot repeat" in change_items(changes)[0].detail
    assert not any("mylib" in n for n in changes.without({"python:/usr:mylib"}).notes)


# -- what a written commit leaves behind ----------------------------------------------------------


def test_the_baseline_keeps_the_excluded_package_changes_as_they_were() -> None:
    # Given a commit that leaves out an apt install, an apt upgrade, an apt removal, a pip
    # upgrade, a pip removal, a conda request and a whole new venv
    excluded = {
        "apt:cowsay",
        "apt:curl",
        "apt:vim",
        "python:/usr:packaging",
        "python:/usr:gone",
        "conda:/opt/conda:numpy=1.26",
        "python:/opt/venv:pip",
        "python:/opt/venv:torch",
    }
    # When the baseline is moved forward without them
    moved = compare.revert_excluded(BEFORE, AFTER, excluded)
    # Then the next change set has exactly them again
    again = {i.id for i in change_items(compare.package_changes(moved, AFTER))}
    assert again == excluded
    # And the ones the commit carried are in the baseline now
    assert moved.python["/usr"].dists["iniconfig"].version == "2.0.0"
    assert "numpy=1.26" not in moved.conda["/opt/conda"].requested
    assert "scipy" not in moved.conda["/opt/conda"].requested
    assert moved.dpkg["libcow"] == "2"  # an automatic dependency: absorbed
    # And with nothing left out, the baseline is the container's packages
    assert compare.revert_excluded(BEFORE, AFTER, set()) is AFTER


class FakeContainer:
    """What ``Captured.as_baseline`` reads of a container: its configured environment."""

    def __init__(self) -> None:
        self.attrs = {"Config": {"Env": ["PATH=/usr/bin", "MY_SETTING=on", "LANG=C"]}}


def captured(excluded: tuple[str, ...], base: Baseline) -> Captured:
    changes = changes_of()
    diff = [
        {"Path": "/etc", "Kind": 0},
        {"Path": "/etc/motd", "Kind": 0},
        {"Path": "/etc/pip.conf", "Kind": 1},
        {"Path": "/etc/issue", "Kind": 2},
        {"Path": "/root/.config/app.toml", "Kind": 1},
        {"Path": "/root/.ssh/id_ed25519", "Kind": 1},
        {"Path": "/usr/games/cowsay", "Kind": 1},
    ]
    result = Captured(
        cast(Any, SimpleNamespace(name="box")),
        cast(Any, None),
        changes,
        cast(Any, FakeContainer()),
        AFTER,
        diff,
        cast(Any, None),
        base=base,
        before_env={"PATH": "/usr/bin", "LANG": "C", "MY_SETTING": "off"},
        items=change_items(changes),
        excluded=excluded,
    )
    result.changes = changes.without(set(result.held))
    return result


def test_a_written_commit_holds_what_it_left_out_and_its_baseline_does_not_absorb_it() -> None:
    # Given a capture with a file, a deletion, a variable and a package left out, one id of
    # which matches no change
    base = Baseline(BEFORE, None, {"/etc/issue": 0})
    excluded = ("file:/etc/motd", "delete:/etc/issue", "env:MY_SETTING", "apt:cowsay", "apt:zzz")
    capture = captured(excluded, base)
    assert capture.held == ["apt:cowsay", "file:/etc/motd", "delete:/etc/issue", "env:MY_SETTING"]
    assert capture.excluded_unknown == ["apt:zzz"]
    selection = capture.selection_json()
    assert selection["excluded"] == list(excluded)
    assert selection["excluded_unknown"] == ["apt:zzz"]
    assert [i["id"] for i in selection["items"]] == [i.id for i in change_items(changes_of())]
    # When the baseline moves forward
    moved = capture.as_baseline()
    # Then it holds the left-out ids (for the removal check)
    assert moved.held == capture.held
    # And the left-out file is not in its file map, the deleted one as the old baseline had it
    assert "/etc/motd" not in moved.files
    assert moved.files["/etc/issue"] == 0
    assert moved.files["/root/.config/app.toml"] == 1
    # And credentials stay out, as before
    assert "/root/.ssh/id_ed25519" not in moved.files
    # And the variable keeps its old value, the package its old state
    assert moved.env is not None
    assert moved.env["MY_SETTING"] == "off"
    assert "cowsay" not in moved.packages.dpkg
    assert moved.packages.dpkg["curl"] == "7.89"


def test_baselines_persist_held_and_read_old_files_without_it(tmp_path: Path) -> None:
    baselines = Baselines(tmp_path)
    baselines.save_container("abc123", Baseline(BEFORE, {"A": "1"}, {"/etc/x": 1}, [], ["env:A"]))
    loaded = baselines.container("abc123")
    assert loaded is not None
    assert loaded.held == ["env:A"]
    # Given a baseline file written before ``held`` existed
    path = tmp_path / "baselines" / "container-abc123.json"
    data = json.loads(path.read_text())
    del data["held"]
    path.write_text(json.dumps(data))
    old = baselines.container("abc123")
    assert old is not None
    assert old.held == []


def test_held_changes_are_uncommitted_even_when_their_files_are_in_the_baseline() -> None:
    diff = [{"Path": "/usr/games/cowsay", "Kind": 1}, {"Path": "/etc/new", "Kind": 1}]
    baseline_files = {"/usr/games/cowsay": 1}
    assert classify.uncommitted(diff, [], baseline_files) == ["/etc/new"]
    assert classify.uncommitted(diff, [], baseline_files, held=["apt:cowsay"]) == [
        "/etc/new",
        "apt:cowsay",
    ]
    assert classify.uncommitted([], [], {}, held=["env:X"]) == ["env:X"]
    # And a held file is listed once, by its path
    assert classify.uncommitted(diff, [], baseline_files, held=["file:/etc/new", "env:X"]) == [
        "/etc/new",
        "env:X",
    ]


# -- verify --------------------------------------------------------------------------------------


def test_a_verify_build_expects_the_container_less_the_excluded_package_changes() -> None:
    # Given a commit leaving out the cowsay install (with its automatic dependency libcow, and
    # an automatic upgrade of libold) and the pip upgrade of packaging
    excluded = {"apt:cowsay", "python:/usr:packaging"}
    expected, loose = compare.expected_state(BEFORE, AFTER, excluded)
    # Then the expected packages lack them
    assert "cowsay" not in expected.dpkg
    assert expected.python["/usr"].dists["packaging"].version == "23.0"
    # And an image rebuilt without them (nor what they pulled in) has no difference
    rebuilt = compare.revert_excluded(BEFORE, AFTER, excluded)
    rebuilt = model.PackageState(
        {k: v for k, v in rebuilt.dpkg.items() if k != "libcow"} | {"libold": "1"},
        rebuilt.dpkg_auto,
        rebuilt.python,
        rebuilt.conda,
    )
    assert compare.package_differences(expected, rebuilt, loose) == []
    # But the container itself would differ (the check without exclusions)
    assert compare.package_differences(AFTER, rebuilt) != []
    # And a real difference is still one: a carried package missing from the rebuild
    broken = model.PackageState(
        {k: v for k, v in rebuilt.dpkg.items() if k != "curl"},
        rebuilt.dpkg_auto,
        rebuilt.python,
        rebuilt.conda,
    )
    assert compare.package_differences(expected, broken, loose) == [
        "apt curl 7.89: in the container, missing from the rebuild"
    ]


def test_without_exclusions_the_expected_state_is_the_container() -> None:
    expected, loose = compare.expected_state(BEFORE, AFTER, set())
    assert expected is AFTER
    assert loose == {}


def test_the_reviewed_digest_covers_every_copied_file() -> None:
    # Given two diffs with the same Dockerfile text (its comment names only the first files)
    same_text = "FROM img\n# 11 file(s): ...\nCOPY ctx/files/ /\n"
    first = RenderedDiff("Dockerfile", True, "", same_text, "diff", "ctx", ["/a", "/b"])
    second = RenderedDiff("Dockerfile", True, "", same_text, "diff", "ctx", ["/a", "/c"])
    # Then their Dockerfile digests are equal, but not what the user reviewed
    assert first.dockerfile_digest == second.dockerfile_digest
    assert first.digest != second.digest
    # And the order the files were listed in does not matter
    reordered = RenderedDiff("Dockerfile", True, "", same_text, "diff", "ctx", ["/b", "/a"])
    assert reordered.digest == first.digest
