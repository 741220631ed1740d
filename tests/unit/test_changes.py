"""Change sets: parsing the probe, package and file changes, credentials, Dockerfile lines."""

from __future__ import annotations

import json

import pytest

from jupyter_gpudev.changes import classify, compare, model
from jupyter_gpudev.changes import probe as image_probe
from jupyter_gpudev.changes.dockerfile import RenderedDiff, render
from jupyter_gpudev.changes.export import digest_differences
from jupyter_gpudev.errors import BadRequest, EngineError

PY = json.dumps(
    {
        "executable": "/usr/bin/python3",
        "prefix": "/usr",
        "base_prefix": "/usr",
        "version": "3.11",
        "externally_managed": True,
        "dists": [
            ["six", "1.16.0", None],
            ["Requests", "2.31.0", None],
            [
                "mylib",
                "0.1",
                json.dumps({"url": "file:///src/mylib", "dir_info": {"editable": True}}),
            ],
            [
                "tool",
                "1.0",
                json.dumps(
                    {
                        "url": "https://github.com/x/tool",
                        "vcs_info": {"vcs": "git", "commit_id": "abc123"},
                    }
                ),
            ],
        ],
        "owned_files": ["/usr/local/lib/python3.11/dist-packages/../../../bin/req"],
    }
)

PROBE = f"""@@gpudev dpkg
bash\t5.2.15-2+b2\tii
cowsay\t3.03+dfsg2-8\tii
perl\t5.36.0-7\tii
old\t1.0\trc
@@gpudev apt-auto
Package: perl
Architecture: amd64
Auto-Installed: 1

@@gpudev dpkg-files cowsay
/usr/games/cowsay
/etc/cowsay
@@gpudev python /usr/bin/python3
{PY}
@@gpudev end
"""


def test_parse_probe_reads_every_section() -> None:
    result = image_probe.parse_probe(PROBE)
    state = result.state
    # Then installed packages (not the config-only "rc" one) and the auto marks are read
    assert state.dpkg == {"bash": "5.2.15-2+b2", "cowsay": "3.03+dfsg2-8", "perl": "5.36.0-7"}
    assert state.dpkg_manual() == {"bash", "cowsay"}
    # And the Python environment with its distributions, by normalized name
    env = state.python["/usr"]
    assert env.externally_managed
    assert not env.is_venv
    assert env.dists["requests"].version == "2.31.0"
    assert env.dists["mylib"].source == "editable"
    assert env.dists["tool"].requirement() == "tool @ git+https://github.com/x/tool@abc123"
    # And owned files, normalized
    assert "/usr/games/cowsay" in result.owned_files
    assert "/usr/local/bin/req" in result.owned_files


def test_a_probe_that_stopped_early_is_an_error() -> None:
    with pytest.raises(EngineError, match="stopped before its end"):
        image_probe.parse_probe("@@gpudev dpkg\nbash\t1\tii\n")


def test_state_round_trips_through_json() -> None:
    state = image_probe.parse_probe(PROBE).state
    assert model.PackageState.from_json(json.loads(json.dumps(state.to_json()))) == state


def state(
    dpkg: dict[str, str], dists: dict[str, str], auto: frozenset[str] = frozenset()
) -> model.PackageState:
    env = model.PythonEnv(
        python="/usr/bin/python3",
        prefix="/usr",
        base_prefix="/usr",
        version="3.11",
        externally_managed=True,
        dists={model.normalize(n): model.PyDist(n, v) for n, v in dists.items()},
    )
    return model.PackageState(dpkg=dpkg, dpkg_auto=auto, python={"/usr": env})


def test_package_changes_added_removed_upgraded_in_a_stable_order() -> None:
    before = state({"bash": "5", "vim": "9", "libx": "1"}, {"six": "1.16", "packaging": "23.0"})
    after = state(
        {"bash": "5", "zsh": "5.9", "cowsay": "3", "libx": "2", "libdep": "1"},
        {"packaging": "24.1", "iniconfig": "2.0.0"},
        auto=frozenset({"libdep", "libx"}),
    )
    changes = compare.package_changes(before, after)
    # Manual packages only: automatic dependencies follow them
    assert changes.apt.added == [("cowsay", "3"), ("zsh", "5.9")]
    assert changes.apt.removed == [("vim", "9")]
    assert changes.apt.upgraded == []  # libx changed, but it is automatic now
    py = changes.python[0]
    assert [d.name for d in py.added] == ["iniconfig"]
    assert [d.name for d in py.removed] == ["six"]
    assert [(a.version, b.version) for a, b in py.upgraded] == [("23.0", "24.1")]
    # And the packages whose files are package files: new or changed, automatic ones too
    dpkg, dists = compare.changed_packages(before, after)
    assert dpkg == ["cowsay", "libdep", "libx", "zsh"]
    assert dists == ["iniconfig", "packaging"]


DIFF = [
    {"Path": "/etc", "Kind": 0},
    {"Path": "/etc/motd", "Kind": 0},
    {"Path": "/etc/issue", "Kind": 2},
    {"Path": "/etc/old", "Kind": 2},
    {"Path": "/etc/old/a.conf", "Kind": 2},
    {"Path": "/root", "Kind": 0},
    {"Path": "/root/.config", "Kind": 1},
    {"Path": "/root/.config/app", "Kind": 1},
    {"Path": "/root/.config/app/settings.toml", "Kind": 1},
    {"Path": "/root/.cache/pip/x", "Kind": 1},
    {"Path": "/root/.ipython/profile_default/history.sqlite", "Kind": 1},
    {"Path": "/root/.ssh/id_ed25519", "Kind": 1},
    {"Path": "/root/.bash_history", "Kind": 1},
    {"Path": "/tmp/x", "Kind": 1},
    {"Path": "/var/lib/dpkg/status", "Kind": 0},
    {"Path": "/var/log/apt/history.log", "Kind": 0},
    {"Path": "/usr/games/cowsay", "Kind": 1},
    {"Path": "/usr/local/lib/python3.11/dist-packages/six.py", "Kind": 1},
    {"Path": "/srv/app/__pycache__/m.cpython-311.pyc", "Kind": 1},
    {"Path": "/usr/lib/x86_64-linux-gnu/libcuda.so.535.104.05", "Kind": 1},
    {"Path": "/usr/bin/nvidia-smi", "Kind": 1},
    {"Path": "/workspaces/proj/notebook.ipynb", "Kind": 1},
    {"Path": "/workspaces", "Kind": 1},
    {"Path": "/opt/venv/bin/python", "Kind": 1},
]


def test_file_changes_keep_what_a_user_changed_and_filter_the_rest() -> None:
    files = classify.file_changes(DIFF, ["/workspaces/proj"], {"/usr/games/cowsay"}, ["/opt/venv"])
    # Then an edited /etc file and a new ~/.config file are kept; folders are not listed
    assert files.kept == ["/etc/motd", "/root/.config/app/settings.toml"]
    # And a deleted file, and a deleted folder once (not its content)
    assert files.deleted == ["/etc/issue", "/etc/old"]
    # And a private key is reported, never kept
    assert files.secrets == ["/root/.ssh/id_ed25519"]
    # And each filter is counted
    assert files.ignored == {
        "temporary, cache or runtime state": 7,
        "mounts": 2,
        "NVIDIA driver files": 2,
        "package files": 3,
    }


def test_env_changes_leave_out_runtime_variables_and_report_credentials() -> None:
    changes = model.ChangeSet()
    classify.env_changes(
        [
            "PATH=/usr/bin",
            "LANG=C.UTF-8",
            "MY_SETTING=on",
            "HF_TOKEN=hf_abcdefghijklmnopqrstuvwxyz0123456789",
            "NVIDIA_VISIBLE_DEVICES=GPU-1",
            "NOTE=contains ghp_abcdefghijklmnopqrstuvwxyz0123456789AB",
        ],
        ["PATH=/usr/local/bin:/usr/bin", "LANG=C.UTF-8", "GONE=1"],
        None,
        changes,
    )
    assert changes.env == {"MY_SETTING": "on"}
    assert changes.env_secrets == ["HF_TOKEN", "NOTE"]
    assert changes.env_removed == ["GONE"]


def test_conda_history_and_channels() -> None:
    history = """==> 2024-01-01 00:00:00 <==
# cmd: /opt/conda/bin/conda create -p /opt/conda python=3.11
# conda version: 23.1.0
+defaults/linux-64::python-3.11.0-h7a1cb2a_3
# update specs: ['python=3.11']
==> 2024-02-01 00:00:00 <==
# cmd: /opt/conda/bin/conda install -y numpy scipy
# update specs: ['numpy', 'scipy']
==> 2024-02-02 00:00:00 <==
# cmd: /opt/conda/bin/conda remove -y scipy
# remove specs: ['scipy']
"""
    assert image_probe.parse_conda_history(history) == ("python=3.11", "numpy")
    assert image_probe.parse_condarc_channels(
        "channels:\n  - conda-forge\n  - defaults\nx: 1\n"
    ) == (
        "conda-forge",
        "defaults",
    )
    assert image_probe.parse_condarc_channels("channels: [conda-forge, nvidia]\n") == (
        "conda-forge",
        "nvidia",
    )


def full_changes() -> model.ChangeSet:
    before = state({"bash": "5", "vim": "9"}, {"six": "1.16", "packaging": "23.0", "gone": "1"})
    after = state(
        {"bash": "5", "cowsay": "3.03+dfsg2-8"},
        {"six": "1.16", "packaging": "24.1", "iniconfig": "2.0.0"},
    )
    changes = compare.package_changes(before, after)
    changes.files = classify.file_changes(
        DIFF, ["/workspaces/proj"], {"/usr/games/cowsay"}, ["/opt/venv"]
    )
    classify.env_changes(["MY_SETTING=on", "API_KEY=x"], [], None, changes)
    return changes


def render_box(
    changes: model.ChangeSet,
    environment: str,
    dockerfile: str,
    old_text: str | None,
    image: str | None,
    *,
    context_folder: str = "gpudev-context/box",
) -> RenderedDiff:
    return render(
        changes,
        container="box",
        environment=environment,
        dockerfile=dockerfile,
        old_text=old_text,
        image=image,
        context_folder=context_folder,
    )


def test_render_appends_one_layer_per_kind_in_a_stable_order() -> None:
    old = "FROM gpudev-python:bookworm\nUSER jovyan\n"
    rendered = render_box(full_changes(), "gpu", ".devcontainer/gpu/Dockerfile", old, None)
    assert (
        rendered.new_text
        == old
        + "\n"
        + "\n".join(
            [
                "# --- gpudev: changes of dev container box (environment gpu) ---",
                "USER root",
                "RUN apt-get update \\",
                " && apt-get install -y --no-install-recommends \\",
                "      cowsay=3.03+dfsg2-8 \\",
                " && rm -rf /var/lib/apt/lists/*",
                "RUN apt-get purge -y vim",
                "RUN /usr/bin/python3 -m pip install --no-cache-dir --break-system-packages \\",
                "      iniconfig==2.0.0 \\",
                "      packaging==24.1",
                "RUN /usr/bin/python3 -m pip uninstall -y --break-system-packages gone",
                "# 2 file(s): /etc/motd, /root/.config/app/settings.toml",
                "COPY gpudev-context/box/files/ /",
                'RUN ["rm", "-rf", "--", "/etc/issue", "/etc/old"]',
                'ENV MY_SETTING="on"',
                "USER jovyan",
            ]
        )
        + "\n"
    )
    assert rendered.diff.startswith("--- a/.devcontainer/gpu/Dockerfile\n+++ b/")
    assert "API_KEY" not in rendered.new_text
    assert "environment variable API_KEY: looks like a credential, not written" in rendered.reported
    assert "/root/.ssh/id_ed25519: looks like a credential, not copied" in rendered.reported
    # The same changes give the same diff
    again = render_box(full_changes(), "gpu", ".devcontainer/gpu/Dockerfile", old, None)
    assert again.diff == rendered.diff
    assert again.digest == rendered.digest


@pytest.mark.parametrize("directive", ["# escape=`", "#ESCAPE = `", "# syntax=x\n# escape=`"])
def test_a_dockerfile_whose_escape_is_a_backtick_is_not_patched(directive: str) -> None:
    # Given a Dockerfile whose parser directive makes the backtick its escape character (the
    # lines gpudev writes continue and quote with backslashes: they would read otherwise)
    old = f"{directive}\nFROM gpudev-python:bookworm\nUSER jovyan\n"
    # When its container's changes are rendered, then it is refused, saying why
    with pytest.raises(BadRequest, match="escape"):
        render_box(full_changes(), "gpu", ".devcontainer/gpu/Dockerfile", old, None)


def test_a_backslash_escape_or_a_late_directive_like_comment_is_patched() -> None:
    for old in (
        "# escape=\\\nFROM gpudev-python:bookworm\n",
        "FROM gpudev-python:bookworm\n# escape=`\n",
    ):
        assert render_box(full_changes(), "gpu", "Dockerfile", old, None).diff


def test_render_a_new_dockerfile_from_an_image_and_nothing_for_no_changes() -> None:
    rendered = render_box(
        full_changes(),
        "default",
        ".devcontainer/default/Dockerfile",
        None,
        "gpudev-python:bookworm",
    )
    assert rendered.created
    assert rendered.diff.startswith("--- /dev/null\n+++ b/.devcontainer/default/Dockerfile\n")
    assert "+FROM gpudev-python:bookworm\n" in rendered.diff
    empty = render_box(
        model.ChangeSet(), "default", "Dockerfile", "FROM x\n", None, context_folder="c"
    )
    assert empty.diff == ""


def test_values_from_the_container_are_validated_or_quoted() -> None:
    changes = model.ChangeSet()
    changes.apt.added = [("evil;rm", "1"), ("ok", "1;reboot")]
    env = model.PythonEnv("/usr/bin/python3", "/usr", "/usr", "3.11", False)
    changes.python = [model.PythonChanges(env, added=[model.PyDist("x", "1 ; rm -rf /")])]
    changes.env = {"BAD NAME": "1", "GOOD": 'a"b$c'}
    rendered = render_box(changes, "e", "Dockerfile", "FROM x\n", None, context_folder="c")
    assert "evil" not in rendered.new_text
    assert "reboot" not in rendered.new_text
    assert "rm -rf" not in rendered.new_text  # not a version: reported, not written
    assert any("'1 ; rm -rf /'" in r for r in rendered.reported)
    assert 'ENV GOOD="a\\"b\\$c"' in rendered.new_text  # as Docker's ENV reads it back
    assert any("BAD NAME" in r for r in rendered.reported)


def test_an_empty_working_folder_the_engine_made_is_not_a_change_but_files_in_it_are() -> None:
    # Given a container whose working folder the engine created (no workspace mount)
    attrs = {"Config": {"WorkingDir": "/workspaces/work"}, "Mounts": []}
    made = classify.engine_made(attrs)
    assert made == ["/workspaces/work", "/workspaces"]
    empty = [{"Path": "/workspaces", "Kind": 1}, {"Path": "/workspaces/work", "Kind": 1}]
    # Then while it is empty, removing the container loses nothing
    assert classify.uncommitted(empty, classify.mount_targets(attrs), {}, made=made) == []
    # But a file written there is a change, and so is another new folder
    written = [*empty, {"Path": "/workspaces/work/notes.txt", "Kind": 1}]
    assert classify.uncommitted(written, [], {}, made=made) == ["/workspaces/work/notes.txt"]
    assert classify.uncommitted([{"Path": "/srv/new", "Kind": 1}], [], {}, made=made) == [
        "/srv/new"
    ]


def test_kept_files_are_compared_by_content_link_target_and_kind() -> None:
    container = {"/etc/a": "sha256:1", "/etc/b": "link a", "/etc/c": "sha256:2", "/etc/d": "folder"}
    rebuilt = {"/etc/a": "sha256:1", "/etc/b": "link x", "/etc/d": "sha256:3"}
    assert digest_differences(container, rebuilt) == [
        "file /etc/b: what it is differs between the container and the rebuild",
        "file /etc/c: in the container, missing from the rebuild",
        "file /etc/d: what it is differs between the container and the rebuild",
    ]
    assert digest_differences(container, container) == []


def test_a_file_the_baseline_had_is_uncommitted_again_once_edited() -> None:
    diff = [{"Path": "/etc/motd", "Kind": 0}, {"Path": "/etc/old", "Kind": 1}]
    baseline_files = {"/etc/motd": 0, "/etc/old": 1}
    assert classify.uncommitted(diff, [], baseline_files) == []
    assert classify.uncommitted(diff, [], baseline_files, edited=["/etc/motd"]) == ["/etc/motd"]
