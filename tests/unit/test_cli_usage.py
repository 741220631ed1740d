"""A bad value on the command line is a usage error: one line naming the option as it was
typed, what it expects and the value given (escaped, capped), then the subcommand's usage, exit
status 2, and nothing built or started (no traceback, no traitlets "CRITICAL | Bad config")."""

from __future__ import annotations

import json
import math
import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from traitlets import Float, Int, TraitError
from traitlets.config import Application

from jupyter_gpudev.cli.base import ContainerCommand, GPUDevSubcommand
from jupyter_gpudev.cli.containers import LsApp, StartApp
from jupyter_gpudev.cli.main import GPUDevCLI, main
from jupyter_gpudev.configcheck import expects
from jupyter_gpudev.services import CLASSES


def _app_classes() -> list[type[Application]]:
    """Every application class the command line can make (their singletons are reset)."""
    found: list[type[Application]] = [GPUDevCLI]
    todo: list[type[Application]] = [GPUDevCLI]
    while todo:
        table = todo.pop().subcommands
        for value in table.values() if isinstance(table, dict) else ():
            cls = value[0]
            if isinstance(cls, type) and cls not in found:
                found.append(cls)
                todo.append(cls)
    return found


class Untouched(AssertionError):
    pass


@pytest.fixture(autouse=True)
def isolated(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[list[str]]:
    """No config files of this machine; no manager, engine or service may be reached: a bad
    option must be refused before anything is built. Yields the runs that got as far."""
    monkeypatch.setenv("JUPYTER_CONFIG_DIR", str(tmp_path / "config"))
    monkeypatch.setenv("JUPYTER_CONFIG_PATH", "")
    monkeypatch.delenv("GPUDEV_SERVICE_URL", raising=False)
    reached: list[str] = []

    def refuse(self: GPUDevSubcommand, *args: Any, **kwargs: Any) -> Any:
        reached.append(self.name)
        raise Untouched(f"{self.name} built its managers")

    monkeypatch.setattr(GPUDevSubcommand, "services", refuse)
    monkeypatch.setattr(ContainerCommand, "remote", refuse)
    yield reached
    for cls in _app_classes():
        cls.clear_instance()


def gpudev(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    """``jupyter gpudev ARGV`` in this process: its exit status, stdout and stderr."""
    try:
        with pytest.raises(SystemExit) as exited:
            main(list(argv))
    finally:
        for cls in _app_classes():
            cls.clear_instance()
    out, err = capsys.readouterr()
    code = exited.value.code
    return (code if isinstance(code, int) else 1), out, err


def assert_usage_error(err: str, *, usage: str) -> str:
    """Two lines: the error, then the subcommand's usage; the error line is returned."""
    assert "Traceback" not in err
    assert "] CRITICAL |" not in err  # traitlets' "[App] CRITICAL | Bad config ..."
    assert "Bad config" not in err
    lines = err.strip().splitlines()
    assert len(lines) == 2, err
    assert lines[0].startswith("error: "), err
    assert lines[1].startswith(f"usage: {usage}"), err
    return lines[0]


def test_a_negative_gpu_count_is_refused_naming_the_option(
    capsys: pytest.CaptureFixture[str], isolated: list[str]
) -> None:
    # When a user asks for -3 GPUs
    code, out, err = gpudev(capsys, "start", "default", "--gpus", "-3")
    # Then the option, what it takes and the value are on one line, the usage after it
    assert code == 2
    line = assert_usage_error(err, usage="jupyter gpudev start ENV")
    assert line == "error: --gpus expects a whole number, 0 or more; got '-3'"
    assert out == ""
    # And nothing was built, so nothing was started
    assert isolated == []


def test_a_gpu_count_that_is_not_a_number_is_a_usage_error(
    capsys: pytest.CaptureFixture[str], isolated: list[str]
) -> None:
    code, _, err = gpudev(capsys, "start", "default", "--gpus=abc")
    assert code == 2
    line = assert_usage_error(err, usage="jupyter gpudev start ENV")
    assert line == "error: --gpus expects a whole number, 0 or more; got 'abc'"
    assert isolated == []


def test_the_value_is_shown_escaped_and_capped(
    capsys: pytest.CaptureFixture[str], isolated: list[str]
) -> None:
    # Given a value with terminal sequences, a newline and 500 characters
    value = "\x1b]52;c;aGk=\x07\x1b[31m\n" + "x" * 500
    code, _, err = gpudev(capsys, "start", "default", f"--gpus={value}")
    assert code == 2
    line = assert_usage_error(err, usage="jupyter gpudev start ENV")
    # Then no control character reaches the terminal, and the line stays short
    assert "\x1b" not in err
    assert "\x07" not in err
    assert "\\x1b]52" in line
    assert len(line) < 200
    assert line.endswith("...")


def test_a_missing_value_is_a_usage_error(capsys: pytest.CaptureFixture[str]) -> None:
    code, _, err = gpudev(capsys, "start", "default", "--gpus")
    assert code == 2
    line = assert_usage_error(err, usage="jupyter gpudev start ENV")
    assert line == "error: --gpus expects a whole number, 0 or more; got nothing"


def test_an_option_given_twice_is_a_usage_error(capsys: pytest.CaptureFixture[str]) -> None:
    code, _, err = gpudev(capsys, "start", "default", "--gpus=1", "--gpus=2")
    assert code == 2
    line = assert_usage_error(err, usage="jupyter gpudev start ENV")
    assert line.startswith("error: --gpus expects one value")
    assert "'1', '2'" in line


@pytest.mark.parametrize(
    ("argv", "expected"),
    [
        (["--bogus", "3"], "error: --bogus is not an option of jupyter gpudev start"),
        (["--bogus"], "error: --bogus is not an option of jupyter gpudev start"),
        (["-x"], "error: -x is not an option of jupyter gpudev start"),
        (
            ["--gpuss", "2"],
            "error: --gpuss is not an option of jupyter gpudev start (did you mean --gpus?)",
        ),
        (
            ["--StartApp.gpuss=2"],
            "error: --StartApp.gpuss is not an option of jupyter gpudev start "
            "(did you mean --StartApp.gpus?)",
        ),
        (
            ["--\x1b[2J\x1b]0;pwned\x07=1"],
            "error: --\\x1b[2J\\x1b]0;pwned\\x07 is not an option of jupyter gpudev start",
        ),
        (["-\u202ex", "1"], "error: -\\u202ex is not an option of jupyter gpudev start"),
        (
            ["--DevContainer.stop_timeout=2"],
            "error: --DevContainer.stop_timeout is not an option of jupyter gpudev start "
            "(did you mean --DevContainers.stop_timeout?)",
        ),
    ],
)
def test_an_unknown_option_is_a_usage_error_not_a_warning(
    capsys: pytest.CaptureFixture[str], isolated: list[str], argv: list[str], expected: str
) -> None:
    code, _, err = gpudev(capsys, "start", "default", *argv)
    assert code == 2
    assert "WARNING" not in err
    assert assert_usage_error(err, usage="jupyter gpudev start ENV") == expected
    assert isolated == []


def test_an_unknown_enum_value_lists_the_allowed_ones(capsys: pytest.CaptureFixture[str]) -> None:
    code, _, err = gpudev(capsys, "hosts", "--GPUInventory.backend=bogus")
    assert code == 2
    line = assert_usage_error(err, usage="jupyter gpudev hosts")
    assert line == (
        "error: --GPUInventory.backend expects one of auto, nvml, nvidia-smi, none; got 'bogus'"
    )


def test_a_manager_option_of_the_wrong_type_is_a_usage_error(
    capsys: pytest.CaptureFixture[str], isolated: list[str]
) -> None:
    code, _, err = gpudev(capsys, "start", "default", "--DevContainers.stop_timeout=abc")
    assert code == 2
    line = assert_usage_error(err, usage="jupyter gpudev start ENV")
    assert line.startswith("error: --DevContainers.stop_timeout expects a whole number")
    assert line.endswith("got 'abc'")
    assert isolated == []


def test_a_parts_own_validation_answers_as_a_usage_error(
    capsys: pytest.CaptureFixture[str], isolated: list[str]
) -> None:
    # Given a part whose trait has a @validate handler (c.UserLimits.memory: a Docker size)
    code, _, err = gpudev(capsys, "hosts", "--UserLimits.memory=lots")
    # Then its message is the answer (the option named once), before the part is built
    assert code == 2
    line = assert_usage_error(err, usage="jupyter gpudev hosts")
    assert line == (
        "error: --UserLimits.memory: 'lots' is not a size like '64m', '2g' or '1gb'; got 'lots'"
    )
    assert isolated == []


#: A value each bounded option of the parts refuses, and what the option takes: a count or a
#: limit where 0 means none or off is 0 or more; a wait or an interval more than 0.
BOUNDS = [
    ("--DevContainers.stop_timeout", "-5", "a whole number, 0 or more"),
    ("--DevContainers.pids_limit", "-1", "a whole number, 0 or more"),
    ("--DevContainers.linger", "-1", "a finite number, 0 or more"),
    ("--DevContainers.lifecycle_timeout", "0", "a finite number, more than 0"),
    ("--DevContainers.cpu_limit", "-0.5", "a finite number, 0 or more"),
    ("--DevContainers.reconcile_grace", "-1", "a finite number, 0 or more"),
    ("--ContainerLookup.max_log_bytes", "0", "a whole number, 1 or more"),
    ("--ContainerLookup.pod_start_timeout", "0", "a finite number, more than 0"),
    ("--ContainerLookup.pod_poll_interval", "-1", "a finite number, more than 0"),
    ("--KubernetesHosts.start_timeout", "-600", "a finite number, more than 0"),
    ("--KubernetesHosts.poll_interval", "0", "a finite number, more than 0"),
    ("--GPUInventory.timeout", "0", "a finite number, more than 0"),
    ("--GPUInventory.cache_seconds", "-1", "a finite number, 0 or more"),
    ("--HostPool.timeout", "0", "a finite number, more than 0"),
    ("--HostPool.api_timeout", "-1", "a finite number, more than 0"),
    ("--GPUCuller.idle_timeout", "-5", "a finite number, 0 or more"),
    ("--GPUCuller.warning_seconds", "-1", "a finite number, 0 or more"),
    ("--GPUCuller.check_interval", "0", "a finite number, more than 0"),
    ("--GPUCuller.gpu_idle_timeout", "-1", "a finite number, 0 or more"),
    ("--WarmKernels.count", "-1", "a whole number, 0 or more"),
    ("--WarmKernels.ready_timeout", "0", "a finite number, more than 0"),
    ("--GPUDevProvisioner.gpus", "-2", "a whole number, -1 or more"),
    ("--GPUDevProvisioner.startup_check_seconds", "-1", "a finite number, 0 or more"),
    ("--GPUDevProvisioner.unreachable_grace", "-1", "a finite number, 0 or more"),
    ("--GPUDevProvisioner.exit_poll_seconds", "0", "a finite number, more than 0"),
]


@pytest.mark.parametrize(("option", "value", "takes"), BOUNDS, ids=[b[0] for b in BOUNDS])
def test_a_value_out_of_an_options_bounds_is_a_usage_error_saying_them(
    capsys: pytest.CaptureFixture[str], isolated: list[str], option: str, value: str, takes: str
) -> None:
    # When a part's option is given a value its meaning rules out
    code, _, err = gpudev(capsys, "ls", f"{option}={value}")
    # Then the answer names the option, what it takes and the value, before anything is built
    assert code == 2
    line = assert_usage_error(err, usage="jupyter gpudev ls")
    assert line == f"error: {option} expects {takes}; got '{value}'"
    assert isolated == []


#: Number options left without bounds, and why.
UNBOUNDED = {
    # kernels/remote.py: a client's kernels (another change is under way there); -1 is "not
    # given", as GPUDevProvisioner.gpus's
    "ServiceKernelProvisioner.gpus",
    "ServiceKernelProvisioner.unreachable_grace",
}


def _number_options() -> list[tuple[str, Int[Any, Any] | Float[Any, Any]]]:
    """Every whole or real number option of the parts and of the commands, once each."""
    found: dict[str, Int[Any, Any] | Float[Any, Any]] = {}
    for cls in (*CLASSES, *_app_classes()):
        for name, trait in cls.class_own_traits(config=True).items():
            if isinstance(trait, Int | Float):
                found[f"{cls.__name__}.{name}"] = trait
    return sorted(found.items())


def test_every_number_option_has_its_bounds_and_its_help_says_them() -> None:
    for name, trait in _number_options():
        if name in UNBOUNDED:
            continue
        # Then each has a lower bound (a count, a limit, a number of seconds) ...
        assert trait.min is not None, name
        assert not math.isinf(trait.min), name
        # ... its default is within it ...
        assert trait.default_value is None or trait.default_value >= trait.min, name
        # ... and its help says it, in the words of a usage error ("0 or more")
        bounds = expects(trait).partition(", ")[2]
        assert bounds in " ".join(trait.help.split()), (name, bounds)
    # And what the sweep above gives bad values to is bounded
    assert {option.removeprefix("--") for option, _, _ in BOUNDS} <= {
        name for name, _ in _number_options()
    }


def write_config(text: str) -> Path:
    """A ``jupyter_gpudev_config.py`` in this test's config folder (``isolated``)."""
    folder = Path(os.environ["JUPYTER_CONFIG_DIR"])
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / "jupyter_gpudev_config.py"
    path.write_text(text, encoding="utf-8")
    return path


@pytest.mark.parametrize(
    ("line", "expected"),
    [
        (
            "c.GPUCuller.idle_timeout = -5",
            "c.GPUCuller.idle_timeout expects a finite number, 0 or more; got '-5'",
        ),
        (
            "c.KubernetesHosts.poll_interval = 0",
            "c.KubernetesHosts.poll_interval expects a finite number, more than 0; got '0'",
        ),
        (
            "c.DevContainers.stop_timeout = 'soon'",
            "c.DevContainers.stop_timeout expects a whole number, 0 or more; got 'soon'",
        ),
        (
            "c.UserLimits.memory = 'lots'",
            "c.UserLimits.memory: 'lots' is not a size like '64m', '2g' or '1gb'; got 'lots'",
        ),
        (
            "c.LsApp.json_output = 'maybe'",
            "c.LsApp.json_output expects true or false; got 'maybe'",
        ),
    ],
)
def test_a_config_files_bad_value_is_one_line_naming_it_and_the_file(
    capsys: pytest.CaptureFixture[str], isolated: list[str], line: str, expected: str
) -> None:
    # Given a config file with a value its option's bounds or type rule out (of a part this
    # command builds, of one it does not, of the command itself)
    path = write_config(line + "\n")
    # When a command reads it
    code, out, err = gpudev(capsys, "ls")
    # Then it stops with one line naming the option, what it takes, the value and the file,
    # before anything is built: no traceback, no traitlets "CRITICAL"
    assert code == 2
    assert out == ""
    assert err == f"error: Bad configuration: {expected} (in {path})\n"
    assert isolated == []


def test_a_config_files_values_at_the_bounds_are_taken_and_one_past_them_is_not(
    capsys: pytest.CaptureFixture[str], isolated: list[str]
) -> None:
    # Given a config file with values at the bounds (0: off, killed at once; -1: the
    # environment's count) and a lazy one
    good = (
        "c.GPUCuller.idle_timeout = 0\n"
        "c.DevContainers.stop_timeout = 0\n"
        "c.GPUDevProvisioner.gpus = -1\n"
        "c.HostPool.timeout = 0.5\n"
        "c.DevContainers.cap_drop.append('NET_ADMIN')\n"
    )
    write_config(good)
    # When a command reads it, it takes them
    app = LsApp()
    app.initialize([])
    assert app.config.GPUCuller.idle_timeout == 0
    assert app.config.GPUDevProvisioner.gpus == -1
    assert app.config.HostPool.timeout == 0.5
    LsApp.clear_instance()
    # But one past a bound is refused, naming it
    path = write_config(good + "c.GPUDevProvisioner.gpus = -2\n")
    code, _, err = gpudev(capsys, "ls")
    assert code == 2
    assert err == (
        "error: Bad configuration: c.GPUDevProvisioner.gpus expects a whole number, -1 or more; "
        f"got '-2' (in {path})\n"
    )
    assert isolated == []


@pytest.mark.parametrize("value", ["nan", "inf", "-inf", "soon", "-1", "0.1"])
def test_an_interval_must_be_a_finite_number(
    capsys: pytest.CaptureFixture[str], value: str
) -> None:
    code, _, err = gpudev(capsys, "top", "--once", f"--interval={value}")
    assert code == 2
    line = assert_usage_error(err, usage="jupyter gpudev top")
    assert line.startswith("error: --interval expects a finite number")
    assert line.endswith(f"got {value!r}")


@pytest.mark.parametrize(
    ("argv", "expected"),
    [
        (["add", "box", "99999"], "error: PORT expects a port number, 1 to 65535; got '99999'"),
        (["add", "box", "0"], "error: PORT expects a port number, 1 to 65535; got '0'"),
        (["add", "box", "\u00b2"], "error: PORT expects a port number, 1 to 65535; got '\u00b2'"),
        (["add", "box", "-1"], "error: PORT expects a port number, 1 to 65535; got '-1'"),
        (["open", "box", "80"], "error: ACTION expects one of add, remove; got 'open'"),
    ],
)
def test_a_bad_port_is_a_usage_error(
    capsys: pytest.CaptureFixture[str], isolated: list[str], argv: list[str], expected: str
) -> None:
    code, _, err = gpudev(capsys, "ports", *argv)
    assert code == 2
    assert assert_usage_error(err, usage="jupyter gpudev ports add|remove NAME PORT") == expected
    assert isolated == []


def test_a_count_and_named_gpus_together_are_refused_before_anything_starts(
    capsys: pytest.CaptureFixture[str], isolated: list[str]
) -> None:
    code, _, err = gpudev(capsys, "start", "default", "--gpus=1", "--gpu=GPU-1234")
    assert code == 2
    line = assert_usage_error(err, usage="jupyter gpudev start ENV")
    assert line == "error: --gpus and --gpu cannot be given together"
    assert isolated == []


def test_with_json_the_usage_error_is_on_stdout_too(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, err = gpudev(capsys, "start", "default", "--json", "--gpus=-3")
    assert code == 2
    assert_usage_error(err, usage="jupyter gpudev start ENV")
    answer = json.loads(out)
    assert answer["error"] == "bad_request"
    assert answer["message"] == "--gpus expects a whole number, 0 or more; got '-3'"
    assert answer["details"]["option"] == "--gpus"
    assert answer["details"]["value"] == "-3"
    assert answer["details"]["usage"].startswith("jupyter gpudev start ENV")


def test_an_unknown_subcommand_and_an_unknown_top_level_option(
    capsys: pytest.CaptureFixture[str],
) -> None:
    code, _, err = gpudev(capsys, "strat", "default")
    assert code == 2
    line = assert_usage_error(err, usage="jupyter gpudev SUBCOMMAND")
    assert line.startswith("error: 'strat' is not a subcommand of jupyter gpudev")
    assert "did you mean start?" in line
    code, _, err = gpudev(capsys, "--bogus=1")
    assert code == 2
    line = assert_usage_error(err, usage="jupyter gpudev SUBCOMMAND")
    assert line == "error: --bogus is not an option of jupyter gpudev"


def test_a_subcommand_that_takes_no_arguments_refuses_them(
    capsys: pytest.CaptureFixture[str],
) -> None:
    code, _, err = gpudev(capsys, "ls", "everything")
    assert code == 2
    line = assert_usage_error(err, usage="jupyter gpudev ls")
    assert line == "error: jupyter gpudev ls takes no arguments; got 'everything'"


def test_an_argument_after_the_options_is_a_usage_error(
    capsys: pytest.CaptureFixture[str],
) -> None:
    code, _, err = gpudev(capsys, "stop", "box", "--json", "other")
    assert code == 2
    line = assert_usage_error(err, usage="jupyter gpudev stop NAME")
    assert line == (
        "error: jupyter gpudev stop takes its arguments before the options; got 'other' after them"
    )


def test_a_missing_name_is_a_usage_error(capsys: pytest.CaptureFixture[str]) -> None:
    code, _, err = gpudev(capsys, "stop")
    assert code == 2
    line = assert_usage_error(err, usage="jupyter gpudev stop NAME")
    assert line == "error: jupyter gpudev stop expects one NAME; got none"
    code, _, err = gpudev(capsys, "rm", "a", "b")
    assert code == 2
    line = assert_usage_error(err, usage="jupyter gpudev rm NAME")
    assert line == "error: jupyter gpudev rm expects one NAME; got 2: 'a', 'b'"


SUBCOMMANDS = [
    ["hosts"],
    ["hosts", "add"],
    ["hosts", "remove"],
    ["hosts", "rbac"],
    ["envs"],
    ["start"],
    ["ls"],
    ["top"],
    ["stop"],
    ["resume"],
    ["rm"],
    ["pin"],
    ["unpin"],
    ["logs"],
    ["ports"],
    ["diff"],
    ["commit"],
    ["image"],
    ["image", "bootstrap"],
]


@pytest.mark.parametrize("path", SUBCOMMANDS, ids=" ".join)
def test_every_subcommand_refuses_an_unknown_option(
    capsys: pytest.CaptureFixture[str], isolated: list[str], path: list[str]
) -> None:
    code, _, err = gpudev(capsys, *path, "--no-such-option=1")
    assert code == 2
    line = assert_usage_error(err, usage=f"jupyter gpudev {' '.join(path)}")
    assert line.startswith("error: --no-such-option is not an option of jupyter gpudev")
    assert isolated == []


@pytest.mark.parametrize(
    ("argv", "expected"),
    [
        (
            ["--log-level=x"],
            "error: --log-level expects one of 0, 10, 20, 30, 40, 50, DEBUG, INFO, WARN, ERROR, "
            "CRITICAL; got 'x'",
        ),
        (["--bogus=1"], "error: --bogus is not an option of jupyter gpudev image"),
        (
            ["bootstap"],
            "error: 'bootstap' is not a subcommand of jupyter gpudev image "
            "(did you mean bootstrap?)",
        ),
    ],
    ids=["log-level", "unknown option", "unknown subcommand"],
)
def test_the_image_group_answers_as_every_command_does(
    capsys: pytest.CaptureFixture[str], argv: list[str], expected: str
) -> None:
    code, _, err = gpudev(capsys, "image", *argv)
    assert code == 2
    assert assert_usage_error(err, usage="jupyter gpudev image SUBCOMMAND") == expected


def test_every_subcommand_is_in_the_sweep() -> None:
    # The list above covers the table (serve is the shared service's server: jupyter_server's
    # own options)
    table = set(GPUDevCLI.subcommands) - {"serve"}
    assert table <= {path[0] for path in SUBCOMMANDS}


def test_good_values_still_parse(tmp_path: Path) -> None:
    # Given the options the integration tests and the docs use
    app = StartApp()
    app.initialize(
        [
            "default",
            "--gpus",
            "0",
            "--name=box",
            "--GPUInventory.backend=nvidia-smi",
            "--DevContainers.stop_timeout=2",
            f"--DevContainers.state_dir={tmp_path}",
            "--HostPool.hosts=gpu1=tcp://x:1",
            f"--ServerApp.root_dir={tmp_path}",
        ]
    )
    # Then they are taken: 0 GPUs is a count (no GPU), not "what the environment asks"
    assert app.gpus == 0
    assert app.container_name == "box"
    assert app.extra_args == ["default"]
    assert app.config.DevContainers.stop_timeout == 2
    assert app.config.GPUInventory.backend == "nvidia-smi"
    assert app.config.HostPool.hosts == {"gpu1": "tcp://x:1"}
    assert app.config.ServerApp.root_dir == str(tmp_path)
    StartApp.clear_instance()


def test_no_gpus_option_means_the_environments_own_count() -> None:
    app = StartApp()
    app.initialize(["default"])
    assert app.gpus is None
    StartApp.clear_instance()


def test_a_value_a_part_refuses_when_built_is_a_message_not_a_traceback(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    # Given a part that refuses a config file's value when it is built (after parsing)
    def build(self: StartApp) -> None:
        raise TraitError("The 'backend' trait of a GPUInventory instance expected any of [...]")

    monkeypatch.setattr(StartApp, "run", build)
    code, _, err = gpudev(capsys, "start", "default")
    # Then it is one line naming the trait, exit 2
    assert code == 2
    assert err == (
        "error: Bad configuration: The 'backend' trait of a GPUInventory instance expected "
        "any of [...]\n"
    )
