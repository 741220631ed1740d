"""``runArgs``, default-deny: the few docker run flags an environment may use, typed; every
other flag is refused with the reason and what to use instead."""

from __future__ import annotations

import re
from collections.abc import Collection
from typing import Any

from ..errors import BadRequest
from .capabilities import allowed_capabilities
from .model import RunOptions, parse_docker_size

ULIMIT_NAMES = frozenset({"memlock", "stack", "nofile", "core", "nproc"})


IPC_MODES = ("host", "private", "shareable")


_INT_RE = re.compile(r"^-?\d+\Z")


_MOUNTS_INSTEAD = (
    "declare host folders in 'mounts' instead; they are checked against c.MountPolicy.allowed_roots"
)


_NAMESPACE = "it shares or changes a namespace of the host"


_REFUSED_RUN_ARGS: dict[str, str] = {
    "--privileged": "it gives the container every device and capability of the host",
    "--device": (
        "it passes host devices through; request GPUs with hostRequirements.gpu or "
        "customizations.gpudev.gpus"
    ),
    "--security-opt": "it weakens the container's confinement",
    "-v": _MOUNTS_INSTEAD,
    "--volume": _MOUNTS_INSTEAD,
    "--mount": _MOUNTS_INSTEAD,
    "--volumes-from": _MOUNTS_INSTEAD,
    "--userns": _NAMESPACE,
    "--cgroupns": _NAMESPACE,
    "--uts": _NAMESPACE,
    "-u": "use 'remoteUser' instead",
    "--user": "use 'remoteUser' instead",
    "--runtime": "jupyter-gpudev chooses the container runtime",
    "-e": "use 'containerEnv' instead",
    "--env": "use 'containerEnv' instead",
    "--env-file": "use 'containerEnv' instead",
    "-p": "use 'forwardPorts' instead",
    "--publish": "use 'forwardPorts' instead",
    "-P": "use 'forwardPorts' instead",
    "--publish-all": "use 'forwardPorts' instead",
}


_VALUE_RUN_ARGS = frozenset(
    {"--gpus", "--shm-size", "--ipc", "--ulimit", "--network", "--net", "--pid", "--cap-add"}
)


_ALLOWED_RUN_ARGS = (
    "--gpus, --shm-size, --ipc, --ulimit and --init; --network=host, --pid=host, --ipc=host "
    "and --cap-add=NAME where the administrator enables them"
)


def _gpu_count_from_flag(value: str) -> int:
    if value == "all":
        return 1
    if value.startswith("device="):
        return len([part for part in value[len("device=") :].split(",") if part])
    return int(value)


def parse_run_args(
    args: Any,
    *,
    where: str,
    allow_host_network: bool = False,
    allow_host_pid: bool = False,
    allow_host_ipc: bool = False,
    allowed_caps: Collection[str] = (),
) -> tuple[RunOptions, list[str]]:
    """Typed options from ``runArgs``; default-deny. Returns the options and warnings.
    ``--cap-add=NAME`` only for a capability ``allowed_caps`` names."""
    if not isinstance(args, list) or not all(isinstance(arg, str) for arg in args):
        raise BadRequest(f"{where}: 'runArgs' must be a list of strings")
    notes: list[str] = []
    options: dict[str, Any] = {}
    ulimits: list[tuple[str, int, int]] = []
    caps: list[str] = []
    i = 0
    while i < len(args):
        flag, has_value, inline = _split_run_arg(args[i].strip(), where)
        i += 1
        if flag == "--init":
            if has_value and inline not in ("true", "false"):
                raise BadRequest(f"{where}: runArgs: --init takes no value (or true/false)")
            options["init"] = inline != "false"
            continue
        if has_value:
            value = inline
        elif i < len(args):
            value = args[i].strip()
            i += 1
        else:
            raise BadRequest(f"{where}: runArgs: {flag} needs a value")
        if flag == "--ulimit":
            ulimits.append(_parse_ulimit(value, where))
        elif flag == "--cap-add":
            what = f"{where}: runArgs: --cap-add"
            caps += [c for c in allowed_capabilities([value], allowed_caps, what) if c not in caps]
        else:
            key, parsed = _run_arg_option(
                flag,
                value,
                where,
                notes,
                allow_host_network=allow_host_network,
                allow_host_pid=allow_host_pid,
                allow_host_ipc=allow_host_ipc,
            )
            options[key] = parsed
    return RunOptions(ulimits=tuple(ulimits), cap_add=tuple(caps), **options), notes


def _split_run_arg(token: str, where: str) -> tuple[str, bool, str]:
    """(flag, whether "=value" was attached, that value) for an allowed option; else refused."""
    if not token.startswith("-"):
        raise BadRequest(
            f"{where}: runArgs: unexpected argument {token!r}; allowed options are "
            f"{_ALLOWED_RUN_ARGS}"
        )
    if token.startswith("--"):
        flag, equals, inline = token.partition("=")
    else:  # short options: "-v", "-v=x", "-vx" all start with the two-character flag
        flag, equals, inline = token[:2], "", ""
    if flag in _REFUSED_RUN_ARGS:
        raise BadRequest(
            f"{where}: runArgs: {flag} is not allowed: {_REFUSED_RUN_ARGS[flag]}",
            details={"argument": flag},
        )
    if flag != "--init" and flag not in _VALUE_RUN_ARGS:
        raise BadRequest(
            f"{where}: runArgs: {flag} is not allowed; allowed options are {_ALLOWED_RUN_ARGS}",
            details={"argument": flag},
        )
    return flag, bool(equals), inline


def _run_arg_option(
    flag: str,
    value: str,
    where: str,
    notes: list[str],
    *,
    allow_host_network: bool,
    allow_host_pid: bool,
    allow_host_ipc: bool = False,
) -> tuple[str, Any]:
    """The RunOptions field and value for one option that takes a value (not --ulimit)."""
    if flag == "--gpus":
        return "gpus", _parse_gpus_flag(value, where, notes)
    if flag == "--shm-size":
        try:
            return "shm_size_bytes", parse_docker_size(value)
        except ValueError as exc:
            raise BadRequest(f"{where}: runArgs: --shm-size: {exc}") from None
    if flag == "--ipc":
        if value not in IPC_MODES:
            raise BadRequest(
                f"{where}: runArgs: --ipc={value} is not allowed; use one of {', '.join(IPC_MODES)}"
            )
        if value == "host":
            # the host's IPC namespace: its shared memory (/dev/shm), semaphores, queues
            return "ipc_mode", _host_only(flag, value, where, allow_host_ipc, "allow_host_ipc")
        return "ipc_mode", value
    if flag in ("--network", "--net"):
        return "network_mode", _host_only(
            flag, value, where, allow_host_network, "allow_host_network"
        )
    return "pid_mode", _host_only(flag, value, where, allow_host_pid, "allow_host_pid")


def _parse_gpus_flag(value: str, where: str, notes: list[str]) -> str:
    value = value.strip().strip("\"'")
    if value == "all":
        return value
    if value.isdigit() and int(value) > 0:
        return value
    if value.startswith("device=") and _gpu_count_from_flag(value) > 0:
        notes.append(
            f"{where}: runArgs: --gpus {value} names devices; jupyter-gpudev leases free GPUs "
            f"by UUID, so only the count ({_gpu_count_from_flag(value)}) is used"
        )
        return value
    raise BadRequest(
        f"{where}: runArgs: --gpus {value!r} is not understood; use 'all', a count, or "
        "'device=ID,...'"
    )


def _parse_ulimit(value: str, where: str) -> tuple[str, int, int]:
    name, has_limits, limits = value.partition("=")
    name = name.strip()
    if name not in ULIMIT_NAMES:
        raise BadRequest(
            f"{where}: runArgs: --ulimit {name!r} is not allowed; use one of "
            f"{', '.join(sorted(ULIMIT_NAMES))}"
        )
    soft_text, _, hard_text = limits.partition(":")
    hard_text = hard_text or soft_text
    if not has_limits or not _INT_RE.match(soft_text) or not _INT_RE.match(hard_text):
        raise BadRequest(f"{where}: runArgs: --ulimit {value!r} is not NAME=SOFT[:HARD]")
    soft, hard = int(soft_text), int(hard_text)
    if soft < -1 or hard < -1:
        raise BadRequest(f"{where}: runArgs: --ulimit {value!r}: limits are -1 or more")
    if hard != -1 and (soft == -1 or soft > hard):
        raise BadRequest(f"{where}: runArgs: --ulimit {value!r}: the soft limit exceeds the hard")
    return name, soft, hard


def _host_only(flag: str, value: str, where: str, allowed: bool, trait: str) -> str:
    if value != "host":
        raise BadRequest(f"{where}: runArgs: {flag}={value} is not allowed; only {flag}=host is")
    if not allowed:
        raise BadRequest(
            f"{where}: runArgs: {flag}=host is not allowed here; the administrator can enable "
            f"it with c.EnvironmentManager.{trait} = True",
            details={"argument": flag, "trait": trait},
        )
    return value
