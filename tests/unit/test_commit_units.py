"""Commit's pure parts, without an engine: image references, registry credentials and errors,
layer progress, commit options, package differences, Dockerfile comments and the progress bar."""

from __future__ import annotations

import base64
import io
import json
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from jupyter_gpudev.changes import classify, compare, model
from jupyter_gpudev.changes.commit import MAX_MESSAGE, CommitOptions
from jupyter_gpudev.changes.dockerfile import MARK, comment_lines, is_source_path, render
from jupyter_gpudev.cli.base import ProgressBar
from jupyter_gpudev.engine import Reference, Registries, RegistryError
from jupyter_gpudev.engine.registries import _LayerProgress
from jupyter_gpudev.errors import BadRequest, ConfigError

# -- Reference.parse ---------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("ref", "registry", "repository", "tag"),
    [
        ("team/x:v1", "docker.io", "team/x", "v1"),
        ("x", "docker.io", "x", "latest"),
        ("127.0.0.1:5000/team/x", "127.0.0.1:5000", "127.0.0.1:5000/team/x", "latest"),
        ("127.0.0.1:5000/team/x:v2", "127.0.0.1:5000", "127.0.0.1:5000/team/x", "v2"),
        ("localhost/x:1", "localhost", "localhost/x", "1"),
        ("reg.example/a/b:c", "reg.example", "reg.example/a/b", "c"),
    ],
)
def test_reference_parse_splits_registry_repository_and_tag(
    ref: str, registry: str, repository: str, tag: str
) -> None:
    parsed = Reference.parse(ref)
    assert (parsed.registry, parsed.repository, parsed.tag) == (registry, repository, tag)
    assert parsed.name == f"{repository}:{tag}"


@pytest.mark.parametrize(
    "ref",
    ["", "a b", "Team/X:1", "Team/x:1", "LOCALHOST/x", "UPPER", "x:", "x:bad tag", "a" * 256],
)
def test_reference_parse_rejects_what_is_not_a_reference(ref: str) -> None:
    with pytest.raises(BadRequest, match=r"is not an image reference: expected \[REGISTRY/\]NAME"):
        Reference.parse(ref)


# -- Registries.auth_for -----------------------------------------------------------------------


def registries(credentials: dict[str, Any]) -> Registries:
    return Registries(credentials=credentials)


def test_auth_for_reads_the_configured_password_file(tmp_path: Path) -> None:
    secret = tmp_path / "registry-password"
    secret.write_text("s3cret\n")
    entry = {"username": "ci", "password_file": str(secret)}
    auth, source = registries({"reg.example:5000": entry}).auth_for("reg.example:5000")
    assert auth == {"username": "ci", "password": "s3cret", "serveraddress": "reg.example:5000"}
    assert source == "c.Registries.credentials"


def test_auth_for_takes_a_configured_password_or_identity_token() -> None:
    configured = registries(
        {
            "a.example": {"username": "ci", "password": "pw"},
            "b.example": {"identity_token": "tok"},
        }
    )
    assert configured.auth_for("a.example")[0] == {
        "username": "ci",
        "password": "pw",
        "serveraddress": "a.example",
    }
    assert configured.auth_for("b.example")[0] == {"identitytoken": "tok"}


def test_auth_for_a_configured_entry_without_username_is_a_config_error() -> None:
    configured = registries({"a.example": {"password": "pw"}})
    with pytest.raises(ConfigError, match=r"needs username and password_file") as raised:
        configured.auth_for("a.example")
    assert "pw" not in raised.value.message


def test_auth_for_an_unreadable_password_file_is_a_config_error(tmp_path: Path) -> None:
    entry = {"username": "ci", "password_file": str(tmp_path / "missing")}
    with pytest.raises(ConfigError, match=r"Reading the password file for a.example failed"):
        registries({"a.example": entry}).auth_for("a.example")


def test_auth_for_falls_back_to_the_docker_client_configuration(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Given a docker login for reg.example:5000 in $DOCKER_CONFIG, and no configured entry
    token = base64.b64encode(b"u:p").decode()
    config = {"auths": {"reg.example:5000": {"auth": token}}}
    (tmp_path / "config.json").write_text(json.dumps(config))
    monkeypatch.setenv("DOCKER_CONFIG", str(tmp_path))
    monkeypatch.setenv("HOME", str(tmp_path))
    # When the credentials for that registry are asked for
    auth, source = registries({"other.example": {"identity_token": "t"}}).auth_for(
        "reg.example:5000"
    )
    # Then the client configuration's login comes back, and says where it came from
    assert (auth["username"], auth["password"]) == ("u", "p")
    assert source == "the Docker client configuration"


def test_auth_for_without_any_credentials_is_empty(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("DOCKER_CONFIG", str(tmp_path))
    monkeypatch.setenv("HOME", str(tmp_path))
    assert registries({}).auth_for("reg.example:5000") == ({}, "none")


# -- Registries._refused -----------------------------------------------------------------------


def refused(words: str, source: str) -> RegistryError:
    event = {"errorDetail": {"message": words}, "error": words}
    return registries({})._refused(
        "push", "reg.example:5000/team/x:v1", "reg.example:5000", event, source
    )


def test_refused_for_authentication_without_credentials_hints_docker_login() -> None:
    error = refused("unauthorized: authentication required", "none")
    assert error.message.startswith(
        "The registry reg.example:5000 refused the push of reg.example:5000/team/x:v1: "
        "unauthorized: authentication required; "
    )
    assert "`docker login reg.example:5000`" in error.message
    assert "no credentials are known for reg.example:5000" in error.message
    assert error.details["credentials"] == "none"


def test_refused_with_credentials_names_where_they_came_from() -> None:
    error = refused(
        "denied: requested access to the resource is denied", "c.Registries.credentials"
    )
    assert "refused the push" in error.message
    assert "check the credentials for reg.example:5000 in c.Registries.credentials" in (
        error.message
    )
    assert "no credentials are known" not in error.message


def test_refused_for_other_errors_says_the_push_failed() -> None:
    error = refused("blob upload unknown", "the Docker client configuration")
    assert error.message == (
        "The push of reg.example:5000/team/x:v1 to reg.example:5000 failed: blob upload unknown"
    )
    assert "docker login" not in error.message
    assert "credentials" not in error.details


def test_refused_messages_carry_no_password(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Given a registry whose configured password is known to the server
    monkeypatch.setenv("DOCKER_CONFIG", str(tmp_path))
    configured = registries({"reg.example:5000": {"username": "ci", "password": "hunter2-pw"}})
    auth, source = configured.auth_for("reg.example:5000")
    assert "hunter2-pw" in auth.values()
    # When the registry refuses a push, for authentication or another reason
    errors = [refused(words, source) for words in ("401 Unauthorized", "manifest invalid")]
    # Then neither the message nor the details name the password
    for error in errors:
        assert "hunter2-pw" not in error.message
        assert "hunter2-pw" not in json.dumps(error.to_json())


# -- _LayerProgress ----------------------------------------------------------------------------


def test_layer_progress_sums_layers_and_counts_pushed_layers_complete() -> None:
    events: list[dict[str, Any]] = []
    layers = _LayerProgress("push", events.append)
    layers.update({"id": "a", "status": "Pushing", "progressDetail": {"current": 10, "total": 100}})
    layers.update({"id": "b", "status": "Pushing", "progressDetail": {"current": 5, "total": 50}})
    assert (events[-1]["current"], events[-1]["total"]) == (15, 150)
    # A layer's newer figure replaces its older one (not added to it)
    layers.update({"id": "a", "status": "Pushing", "progressDetail": {"current": 60, "total": 100}})
    assert (events[-1]["current"], events[-1]["total"]) == (65, 150)
    # "Pushed" and "Layer already exists" complete a known layer
    layers.update({"id": "a", "status": "Pushed", "progressDetail": {}})
    assert (events[-1]["current"], events[-1]["total"]) == (105, 150)
    layers.update({"id": "b", "status": "Layer already exists"})
    assert (events[-1]["current"], events[-1]["total"]) == (150, 150)
    assert events[-1]["message"] == "b Layer already exists"
    assert all(e["stage"] == "push" and e["transient"] is True for e in events)


def test_layer_progress_without_byte_counts_reports_none() -> None:
    events: list[dict[str, Any]] = []
    layers = _LayerProgress("pull", events.append)
    layers.update({"status": "Pulling from team/x", "id": "v1"})
    layers.update({"id": "c", "status": "Layer already exists"})
    assert [(e["current"], e["total"]) for e in events] == [(None, None), (None, None)]
    assert events[0] == {
        "stage": "pull",
        "message": "v1 Pulling from team/x",
        "current": None,
        "total": None,
        "transient": True,
    }


def test_layer_progress_caps_a_layer_at_its_total() -> None:
    events: list[dict[str, Any]] = []
    layers = _LayerProgress("push", events.append)
    layers.update({"id": "a", "progressDetail": {"current": 130, "total": 100}})
    assert (events[-1]["current"], events[-1]["total"]) == (100, 100)


# -- CommitOptions.check -----------------------------------------------------------------------


def test_commit_options_push_needs_a_snapshot() -> None:
    with pytest.raises(BadRequest, match=r"--push needs --snapshot TAG"):
        CommitOptions(push=True).check()


@pytest.mark.parametrize("tag", ["myimage:1", "myimage"])
def test_commit_options_push_to_a_bare_name_is_refused(tag: str) -> None:
    with pytest.raises(BadRequest, match=r"names no registry or account"):
        CommitOptions(snapshot=tag, push=True).check()


def test_commit_options_a_bad_snapshot_tag_is_refused() -> None:
    with pytest.raises(BadRequest, match=r"is not an image reference"):
        CommitOptions(snapshot="Not A Tag").check()


def test_commit_options_a_too_long_message_is_refused() -> None:
    CommitOptions(message="m" * MAX_MESSAGE).check()
    with pytest.raises(BadRequest, match=rf"longer than {MAX_MESSAGE} characters"):
        CommitOptions(message="m" * (MAX_MESSAGE + 1)).check()


@pytest.mark.parametrize(
    "options",
    [
        CommitOptions(),
        CommitOptions(write=True, verify=True, message="why"),
        CommitOptions(snapshot="myimage:1"),
        CommitOptions(snapshot="127.0.0.1:5000/team/env:v1", push=True),
        CommitOptions(snapshot="localhost/env:v1", push=True),
        CommitOptions(snapshot="team/env:v1", push=True),
    ],
)
def test_commit_options_valid_combinations_pass(options: CommitOptions) -> None:
    options.check()


# -- package_differences and is_driver_path ----------------------------------------------------


def python_env(prefix: str, dists: dict[str, str]) -> model.PythonEnv:
    return model.PythonEnv(
        python=f"{prefix}/bin/python3",
        prefix=prefix,
        base_prefix="/usr",
        version="3.11",
        externally_managed=False,
        dists={model.normalize(n): model.PyDist(n, v) for n, v in dists.items()},
    )


def test_package_differences_of_the_same_state_are_none() -> None:
    state = model.PackageState(
        dpkg={"bash": "5.2", "cowsay": "3.03"},
        python={"/opt/venv": python_env("/opt/venv", {"six": "1.16"})},
        conda={"/opt/conda": model.CondaEnv("/opt/conda", ("numpy",), ("conda-forge",))},
    )
    assert compare.package_differences(state, state) == []


def test_package_differences_name_each_dpkg_difference() -> None:
    container = model.PackageState(dpkg={"bash": "5.2", "cowsay": "3.03", "vim": "9.0"})
    rebuilt = model.PackageState(dpkg={"bash": "5.2", "vim": "9.1", "curl": "7.88"})
    assert compare.package_differences(container, rebuilt) == [
        "apt cowsay 3.03: in the container, missing from the rebuild",
        "apt curl 7.88: in the rebuild, not in the container",
        "apt vim: 9.0 in the container, 9.1 in the rebuild",
    ]


def test_package_differences_of_python_environments() -> None:
    container = model.PackageState(
        python={
            "/opt/venv": python_env("/opt/venv", {"six": "1.16", "numpy": "2.0.0"}),
            "/opt/only-here": python_env("/opt/only-here", {}),
        }
    )
    rebuilt = model.PackageState(
        python={
            "/opt/venv": python_env("/opt/venv", {"six": "1.16", "numpy": "2.1.0"}),
            "/opt/only-there": python_env("/opt/only-there", {}),
        }
    )
    assert compare.package_differences(container, rebuilt) == [
        "python environment /opt/only-here: only in the container",
        "python environment /opt/only-there: only in the rebuild",
        "python (/opt/venv) numpy: 2.0.0 in the container, 2.1.0 in the rebuild",
    ]


def test_package_differences_match_python_names_as_pip_does() -> None:
    # The same distribution spelt differently by its metadata is not a difference
    container = model.PackageState(
        python={"/opt/venv": python_env("/opt/venv", {"Pillow": "10.0"})}
    )
    rebuilt = model.PackageState(python={"/opt/venv": python_env("/opt/venv", {"pillow": "10.0"})})
    assert compare.package_differences(container, rebuilt) == []


def test_package_differences_of_conda_requested_specs() -> None:
    container = model.PackageState(
        conda={"/opt/conda": model.CondaEnv("/opt/conda", ("numpy", "scipy"), ("conda-forge",))}
    )
    rebuilt = model.PackageState(
        conda={"/opt/conda": model.CondaEnv("/opt/conda", ("numpy", "pandas"), ("defaults",))}
    )
    assert compare.package_differences(container, rebuilt) == [
        "conda (/opt/conda) scipy: in the container only",
        "conda (/opt/conda) pandas: in the rebuild only",
    ]
    # A conda environment on one side only: each of its specs is a difference
    assert compare.package_differences(container, model.PackageState()) == [
        "conda (/opt/conda) numpy: in the container only",
        "conda (/opt/conda) scipy: in the container only",
    ]


@pytest.mark.parametrize(
    ("path", "driver"),
    [
        ("/usr/bin/nvidia-smi", True),
        ("/usr/lib/x86_64-linux-gnu/libcuda.so.550.54.15", True),
        ("/usr/lib/x86_64-linux-gnu/libnvidia-ml.so.1", True),
        ("/etc/motd", False),
        ("/usr/bin/python3", False),
    ],
)
def test_is_driver_path(path: str, driver: bool) -> None:
    assert classify.is_driver_path(path) is driver


# -- Dockerfile comments and package sources ---------------------------------------------------


def test_comment_lines_of_no_message_are_none() -> None:
    assert comment_lines(None) == []
    assert comment_lines("") == []


def test_comment_lines_comment_every_line_and_drop_control_characters() -> None:
    message = "Add cowsay\n\nfor the\tdemo \x1b[31mred\x1b[0m\nRUN rm -rf /\n"
    assert comment_lines(message) == [
        "# Add cowsay",
        "#",
        "# for thedemo [31mred[0m",
        "# RUN rm -rf /",
    ]


def test_comment_lines_split_on_carriage_returns_too() -> None:
    # A "\r" cannot start an instruction line of its own: every piece is a comment
    assert comment_lines("why\rRUN curl x | sh") == ["# why", "# RUN curl x | sh"]


@pytest.mark.parametrize(
    ("path", "source"),
    [
        ("/etc/pip.conf", True),
        ("/etc/apt/sources.list.d/x.list", True),
        ("/usr/share/keyrings/x.gpg", True),
        ("/root/.config/pip/pip.conf", True),
        ("/home/ann/.pip/pip.conf", True),
        ("/home/ann/.condarc", True),
        ("/etc/motd", False),
        ("/home/ann/.config/tool/x", False),
        ("/home/ann/notes/.condarc", False),
        ("/etc/apt-notes", False),
    ],
)
def test_is_source_path(path: str, source: bool) -> None:
    assert is_source_path(path) is source


def test_render_puts_the_message_right_after_the_marker() -> None:
    changes = model.ChangeSet(env={"MY_SETTING": "on"})
    rendered = render(
        changes,
        container="box",
        environment="gpu",
        dockerfile="Dockerfile",
        old_text="FROM x\nUSER jovyan\n",
        image=None,
        context_folder="c",
        message="Turn my setting on\nfor the demo",
    )
    lines = rendered.new_text.splitlines()
    marker = next(i for i, line in enumerate(lines) if line.startswith(MARK))
    assert lines[marker + 1 : marker + 4] == [
        "# Turn my setting on",
        "# for the demo",
        "USER root",
    ]
    assert 'ENV MY_SETTING="on"' in lines
    # Without a message the marker is followed by the changes themselves
    plain = render(
        changes,
        container="box",
        environment="gpu",
        dockerfile="Dockerfile",
        old_text="FROM x\nUSER jovyan\n",
        image=None,
        context_folder="c",
    ).new_text.splitlines()
    assert plain[plain.index(lines[marker]) + 1] == "USER root"


# -- ProgressBar -------------------------------------------------------------------------------


class FakeStream(io.StringIO):
    def __init__(self, tty: bool) -> None:
        super().__init__()
        self.tty = tty

    def isatty(self) -> bool:
        return self.tty


def test_progress_bar_off_a_terminal_prints_bytes_every_ten_percent() -> None:
    stream = FakeStream(tty=False)
    bar = ProgressBar(stream)
    for pct in range(101):
        bar.update(
            {"stage": "push", "message": "a Pushing", "current": pct * 1000, "total": 100_000}
        )
    bar.update({"stage": "push", "message": "a Pushed", "current": 100_000, "total": 100_000})
    bar.close()
    lines = stream.getvalue().splitlines()
    assert [line.split("]")[-1].split("%")[0].strip() for line in lines] == [
        str(p) for p in range(0, 101, 10)
    ]
    assert lines[-1] == "[push] [" + "#" * 30 + "] 100% 100.0 kB of 100.0 kB"
    assert "\x1b" not in stream.getvalue()


def test_progress_bar_off_a_terminal_skips_transient_events_and_prints_messages() -> None:
    stream = FakeStream(tty=False)
    bar = ProgressBar(stream)
    bar.update({"stage": "push", "message": "a Preparing", "transient": True})
    bar.update({"stage": "push", "message": "pushing x to reg.example"})
    bar.update({"stage": "snapshot", "message": "committed box"})
    bar.close()
    assert stream.getvalue() == "[push] pushing x to reg.example\n[snapshot] committed box\n"


def test_progress_bar_restarts_its_steps_for_a_new_stage() -> None:
    stream = FakeStream(tty=False)
    bar = ProgressBar(stream)
    bar.update({"stage": "pull", "current": 100, "total": 100})
    bar.update({"stage": "push", "current": 5, "total": 100})
    assert len(stream.getvalue().splitlines()) == 2


def test_progress_bar_on_a_terminal_redraws_one_line() -> None:
    stream = FakeStream(tty=True)
    bar = ProgressBar(stream)
    bar.update({"stage": "push", "message": "a Pushing", "current": 50, "total": 100})
    bar.update({"stage": "push", "message": "a Preparing", "transient": True})
    assert stream.getvalue() == (
        "\r\x1b[2K[push] [" + "#" * 15 + "." * 15 + "]  50% 50 B of 100 B a Pushing"
        "\r\x1b[2K[push] a Preparing"
    )
    assert "\n" not in stream.getvalue()
    # An ordinary message clears the drawn line, then prints as a line of its own
    bar.update({"stage": "push", "message": "pushed x"})
    assert stream.getvalue().endswith("\r\x1b[2K[push] pushed x\n")
    bar.update({"stage": "push", "current": 100, "total": 100})
    bar.close()
    assert stream.getvalue().endswith("100 B of 100 B \n")
    # Closing twice ends the line once
    bar.close()
    assert stream.getvalue().count("\n") == 2


# -- credential content check ------------------------------------------------------------------

_TOKENS = [
    b"-----BEGIN OPENSSH PRIVATE KEY-----",
    b"-----BEGIN PRIVATE KEY-----",
    b"ghp_" + b"a1" * 18,
    b"gho_" + b"B" * 30,
    b"ghu_" + b"c" * 31,
    b"ghs_" + b"D" * 40,
    b"ghr_" + b"e" * 30,
    b"xoxb-123",
    b"AKIA" + b"ABCDEFGHIJ123456",
    b"hf_" + b"x" * 34,
    b"glpat-" + b"a_b-" * 5,
    b"sk-" + b"Z" * 48,
]


@pytest.mark.parametrize("token", _TOKENS)
def test_a_token_is_found_among_binary_bytes(token: bytes) -> None:
    # Given a token between bytes that are not UTF-8 (a database, a core file, a pickle)
    data = b"\xff\xfe\x00\x80" * 1000 + b" " + token + b" " + b"\xc3\x28\x00" * 500
    # Then its content looks like a credential, and the same bytes without it do not
    assert classify.looks_secret_content(data)
    assert not classify.looks_secret_content(data.replace(token, b"-" * len(token)))


_PIECES = st.sampled_from(
    [b"\xff", b"\xc3", b"\x80", b" ", b"_", b"-", b"a", b"Z", b"0", b"\n", *_TOKENS]
    + [t[: len(t) // 2] for t in _TOKENS]
    + [t[len(t) // 2 :] for t in _TOKENS]
)


@given(st.lists(_PIECES | st.binary(max_size=8), max_size=40))
@settings(max_examples=400, deadline=None)
def test_the_literal_check_never_changes_the_answer(parts: list[bytes]) -> None:
    # Given any bytes made of tokens, halves of tokens and non-UTF-8 bytes
    data = b"".join(parts)
    # Then the quick check answers what the expression answers on the decoded text
    expected = bool(classify._SECRET_VALUE_RE.search(data.decode("utf-8", "replace")))
    assert classify.looks_secret_content(data) == expected
