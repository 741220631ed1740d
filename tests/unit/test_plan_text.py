"""What a person reads of a Docker plan (``jupyter gpudev start ENV --dry-run``): the security
options in a few lines, the seccomp profile named instead of printed; ``--json`` keeps it all."""

from __future__ import annotations

import hashlib
import json
from dataclasses import replace
from pathlib import Path
from typing import Any
from unittest import mock

import pytest

from jupyter_gpudev.cli.containers import StartApp
from jupyter_gpudev.containers import DevContainers, seccomp
from jupyter_gpudev.containers.create import Confinement, Target, create_args
from jupyter_gpudev.containers.plan import (
    describe_seccomp,
    docker_plan,
    plan_text,
    readable_create,
    security_summary,
)
from jupyter_gpudev.environments import Environment, ResolvedMount
from jupyter_gpudev.environments.model import RunOptions

GPU_A = "GPU-aaaaaaaa-0000-0000-0000-000000000001"
#: What ``c.DevContainers`` resolves by default (``_confinement``), with limits.
DEFAULT_CONFINEMENT = Confinement(
    security_opt=("no-new-privileges", seccomp.security_opt()),
    cap_drop=("MKNOD", "SETFCAP", "FSETID", "NET_RAW", "SETPCAP", "AUDIT_WRITE"),
    pids_limit=4096,
    memory_bytes=16 << 30,
    nano_cpus=2_500_000_000,
)


def environment(**changes: Any) -> Environment:
    env = Environment(name="train", display_name="Train", source="test", image="python:3.12")
    return replace(env, **changes)


def target(**changes: Any) -> Target:
    base = Target(
        name="train-ann-1a2b",
        owner="ann",
        host="local",
        image="python:3.12",
        workspace="/home/ann/project",
        mounts=(
            ResolvedMount("/home/ann/project", "/workspace", read_only=False),
            ResolvedMount("/srv/datasets", "/data", read_only=True),
        ),
        command=("sleep", "infinity"),
        server_id="s1",
        ledger_id="l1",
        process="box:42",
        created="2026-11-24T00:00:00+00:00",
        user="1000:1000",
        gpu_uuids=(GPU_A,),
    )
    return replace(base, **changes)


def plan_of(
    confinement: Confinement = DEFAULT_CONFINEMENT,
    env: Environment | None = None,
    **changes: Any,
) -> dict[str, Any]:
    """The plan ``DevContainers.plan`` returns for these create arguments."""
    create = create_args(env or environment(), target(**changes), confinement)
    return docker_plan(
        host="local",
        name="train-ann-1a2b",
        image="python:3.12",
        gpu_uuids=tuple(changes.get("gpu_uuids", (GPU_A,))),
        create=create,
        notes=[],
    )


def test_the_human_plan_summarises_security_and_leaves_the_profile_out() -> None:
    # Given the plan of a GPU container under the default confinement, with limits
    plan = plan_of()
    # When it is written for a person
    text = plan_text(plan)
    # Then it says what would be made, where, of which image, with which GPU
    assert text.startswith("Dry run: nothing was created, leased, pulled or built.")
    assert "  dev container: train-ann-1a2b on host local (Docker)" in text
    assert "  image: python:3.12" in text
    assert f"  GPUs: {GPU_A} (free now; the start leases again)" in text
    # And its security options in a few lines
    lines = text.splitlines()
    security = lines[lines.index("Security:") + 1 : lines.index("Security:") + 10]
    assert security == [
        "  seccomp: gpudev default (Docker's default, no setuid/setgid bits)",
        "  no-new-privileges: yes",
        "  capabilities: Docker's default set; dropped: MKNOD, SETFCAP, FSETID, NET_RAW, "
        "SETPCAP, AUDIT_WRITE; added: none",
        "  user: 1000:1000",
        "  limits: 4,096 processes; memory 16 GiB; 2.5 CPUs",
        "  read-write mounts: /home/ann/project -> /workspace",
        "  read-only mounts: /srv/datasets -> /data",
        "  host namespaces shared: none",
        "Create arguments (the seccomp profile summarised above; --json shows it whole):",
    ]
    # And the profile is named in the create arguments, never printed
    profile = seccomp.security_opt().removeprefix("seccomp=")
    assert profile not in text
    assert "SCMP_ACT_ERRNO" not in text
    assert "defaultAction" not in text
    assert f'"seccomp=<gpudev default profile, {len(profile):,} bytes>"' in text
    assert len(text) < 4000 < len(profile)
    # While the rest of the create arguments are there as they are
    shown = json.loads(text[text.index("\n{") :])
    assert shown["security_opt"][0] == "no-new-privileges"
    assert {k: v for k, v in shown.items() if k != "security_opt"} == json.loads(
        json.dumps({k: v for k, v in plan["create"].items() if k != "security_opt"})
    )


def test_the_plan_itself_keeps_the_whole_profile() -> None:
    # Given a plan, and its create arguments made readable
    plan = plan_of()
    before = json.dumps(plan)
    readable_create(plan["create"])
    plan_text(plan)
    # Then the plan (what --json prints) is unchanged, profile included
    assert json.dumps(plan) == before
    assert seccomp.security_opt() in plan["create"]["security_opt"]


def test_the_engine_default_unconfined_and_custom_profiles_are_told_apart() -> None:
    assert describe_seccomp(None) == "the engine's default profile"
    assert describe_seccomp("seccomp=unconfined") == "unconfined (no system call filter)"
    assert describe_seccomp(seccomp.security_opt()) == (
        "gpudev default (Docker's default, no setuid/setgid bits)"
    )
    # A profile of the administrator's (c.DevContainers.seccomp_profile: its text, as read)
    # is named by the SHA-256 of that text, so that it can be checked against the file
    custom = json.dumps({"defaultAction": "SCMP_ACT_LOG", "syscalls": [{}, {}]})
    digest = hashlib.sha256(custom.encode()).hexdigest()[:12]
    assert describe_seccomp(f"seccomp={custom}") == (
        f"custom profile (default action SCMP_ACT_LOG, 2 rules, {len(custom)} bytes, "
        f"sha256 {digest})"
    )
    # And the gpudev profile with one rule less is no longer gpudev's
    changed = seccomp.profile()
    changed["syscalls"] = changed["syscalls"][:-1]
    described = describe_seccomp("seccomp=" + json.dumps(changed))
    assert described.startswith("custom profile (default action SCMP_ACT_ERRNO, ")


def test_an_unconfined_or_custom_profile_shows_as_such() -> None:
    # Given a container without a system call filter, nor no-new-privileges
    unconfined = plan_text(plan_of(Confinement(security_opt=("seccomp=unconfined",))))
    assert "  seccomp: unconfined (no system call filter)" in unconfined
    assert "  no-new-privileges: no (setuid programs inside give privileges)" in unconfined
    assert '"seccomp=unconfined"' in unconfined
    # Given the engine's own profile (seccomp_profile '') and no limits
    engine = plan_text(plan_of(Confinement(security_opt=("no-new-privileges",))))
    assert "  seccomp: the engine's default profile" in engine
    assert "  limits: processes: no limit; memory: no limit; CPUs: no limit" in engine
    assert "  capabilities: Docker's default set; dropped: none; added: none" in engine
    # Given a profile of the administrator's
    custom = "seccomp=" + json.dumps({"defaultAction": "SCMP_ACT_ERRNO", "syscalls": []})
    text = plan_text(plan_of(Confinement(security_opt=(custom,))))
    assert "  seccomp: custom profile (default action SCMP_ACT_ERRNO, 0 rules, " in text
    assert custom not in text
    assert f'"seccomp=<custom profile, {len(custom) - len("seccomp="):,} bytes>"' in text


@pytest.mark.parametrize(
    ("options", "said"),
    [
        (("no-new-privileges",), "yes"),
        (("no-new-privileges:true",), "yes"),
        (("no-new-privileges=true",), "yes"),
        (("no-new-privileges:false",), "no (setuid programs inside give privileges)"),
        (
            ("no-new-privileges", "no-new-privileges=false"),
            "no (setuid programs inside give privileges)",
        ),
        ((), "no (setuid programs inside give privileges)"),
    ],
)
def test_no_new_privileges_is_read_as_the_engine_reads_it(
    options: tuple[str, ...], said: str
) -> None:
    assert f"no-new-privileges: {said}" in security_summary({"security_opt": list(options)})


def test_what_loosens_a_container_is_said() -> None:
    # Given create arguments sharing the host's namespaces, privileged, with capabilities
    # added, other security options, a host device, running as root in extra groups
    env = environment(run_options=RunOptions(network_mode="host", ipc_mode="host", pid_mode="host"))
    create = create_args(env, target(user="0:0", groups=(27, 44)), DEFAULT_CONFINEMENT)
    create.update(privileged=True, cap_add=["SYS_ADMIN"], devices=["/dev/nvidia0:/dev/nvidia0:rwm"])
    create["security_opt"] = [*create["security_opt"], "apparmor=unconfined"]
    # Then the summary says each
    summary = security_summary(create)
    assert "host namespaces shared: network, IPC, PID" in summary
    assert "privileged: YES (every device and capability of the host)" in summary
    assert "other security options: apparmor=unconfined" in summary
    assert any(line.endswith("; added: SYS_ADMIN") for line in summary)
    assert "user: 0:0 (root), groups 27, 44" in summary
    assert "host devices: /dev/nvidia0" in summary
    # And an image's own user is said to be that
    assert "user: the image's user" in security_summary({})


def test_the_cli_prints_the_summary_and_json_prints_the_whole_plan(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    # Given the manager's plan of a start (the engine's part: tests/integration/
    # test_cli_containers.py)
    monkeypatch.setenv("JUPYTER_CONFIG_DIR", str(tmp_path / "config"))
    monkeypatch.setenv("JUPYTER_CONFIG_PATH", "")
    plan = plan_of()
    plan["notes"] = ["python:3.12 is not on host 'local': a start builds or pulls it"]
    manager = mock.create_autospec(DevContainers, instance=True)
    manager.plan.return_value = plan
    monkeypatch.setattr(StartApp, "manager", lambda _self: manager)

    def dry_run(*flags: str) -> str:
        app = StartApp()
        app.initialize(["train", "--dry-run", f"--root-dir={tmp_path}", *flags])
        app.start()
        out, err = capsys.readouterr()
        assert "note: python:3.12 is not on host 'local'" in err
        return out

    # When it is planned for a person
    text = dry_run()
    # Then the summary is printed, the profile is not
    assert "  seccomp: gpudev default (Docker's default, no setuid/setgid bits)" in text
    assert "  limits: 4,096 processes; memory 16 GiB; 2.5 CPUs" in text
    assert seccomp.security_opt() not in text
    assert "SCMP_ACT_ERRNO" not in text
    # When it is planned with --json
    whole = json.loads(dry_run("--json"))
    # Then the whole plan is printed, profile included, as before
    assert whole == json.loads(json.dumps(plan))
    assert seccomp.security_opt() in whole["create"]["security_opt"]
    assert manager.plan.call_args.args[0].environment == "train"
