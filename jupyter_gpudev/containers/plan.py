"""What a start would create, without creating it (``jupyter gpudev start ... --dry-run``).

``DevContainers.plan`` reads (the environment, the host, its GPUs and leases, the image) and
these functions shape the answer on a Docker host: the engine's create arguments as
``containers/create.py`` builds them (a Kubernetes host's plan, its manifests, is
``pod_plan.py``'s). Nothing here creates, leases, pulls or builds.

A Docker plan is also written for a person (``plan_text``): what would be created, its security
options in a few lines (``security_summary``), then the create arguments with the seccomp
profile (some 10 KB of JSON) named instead of printed; ``--json`` keeps every byte.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping
from typing import Any

from . import seccomp


def docker_plan(
    *,
    host: str,
    name: str,
    image: str,
    gpu_uuids: tuple[str, ...],
    create: Mapping[str, Any],
    notes: list[str],
) -> dict[str, Any]:
    """The answer of a dry run on a Docker host: the engine's create arguments (what
    ``client.containers.create(image, **create)`` would be given) and the GPUs a lease would
    take now (the start decides again)."""
    return {
        "kind": "docker",
        "host": host,
        "name": name,
        "image": image,
        "gpus": list(gpu_uuids),
        "create": dict(create),
        "notes": list(notes),
    }


def as_kubectl_list(plan: Mapping[str, Any]) -> dict[str, Any]:
    """A Kubernetes plan's objects as one ``v1`` ``List`` (``kubectl apply -f -``)."""
    return {"apiVersion": "v1", "kind": "List", "items": list(plan.get("objects") or [])}


# What a person reads of a Docker plan (``start --dry-run`` without ``--json``).

#: What the gpudev seccomp profile is, in a few words.
GPUDEV_SECCOMP = "gpudev default (Docker's default, no setuid/setgid bits)"
_NNP = "no-new-privileges"


def plan_text(plan: Mapping[str, Any]) -> str:
    """A Docker plan for a person: the container, its image and GPUs, the security summary,
    then the create arguments with the seccomp profile named, not printed (``--json`` has it).
    """
    create: Mapping[str, Any] = plan.get("create") or {}
    gpus = list(plan.get("gpus") or [])
    lines = [
        "Dry run: nothing was created, leased, pulled or built. A start would create:",
        f"  dev container: {plan.get('name')} on host {plan.get('host')} (Docker)",
        f"  image: {plan.get('image')}",
        "  GPUs: " + (", ".join(gpus) + " (free now; the start leases again)" if gpus else "none"),
        "Security:",
        *(f"  {line}" for line in security_summary(create)),
        "Create arguments (the seccomp profile summarised above; --json shows it whole):",
        json.dumps(readable_create(create), indent=2, default=str),
    ]
    return "\n".join(lines)


def security_summary(create: Mapping[str, Any]) -> list[str]:
    """The security options of create arguments in a few lines: the seccomp profile, no new
    privileges, capabilities, who it runs as, limits, mounts, host devices and namespaces."""
    options = [str(option) for option in create.get("security_opt") or []]
    profile = next((o for o in options if o.startswith("seccomp=")), None)
    others = [o for o in options if o != profile and not o.startswith(_NNP)]
    lines = [
        f"seccomp: {describe_seccomp(profile)}",
        f"{_NNP}: "
        + ("yes" if _no_new_privileges(options) else "no (setuid programs inside give privileges)"),
    ]
    if others:
        lines.append("other security options: " + ", ".join(others))
    if create.get("privileged"):
        lines.append("privileged: YES (every device and capability of the host)")
    dropped = ", ".join(create.get("cap_drop") or []) or "none"
    added = ", ".join(create.get("cap_add") or []) or "none"
    lines.append(f"capabilities: Docker's default set; dropped: {dropped}; added: {added}")
    lines.append(f"user: {_user(create)}")
    lines.append(f"limits: {_limits(create)}")
    lines.extend(_mounts(create))
    devices = [str(device).partition(":")[0] for device in create.get("devices") or []]
    if devices:
        # Driver injection (c.LegacyGPUInjection) passes the GPUs' device nodes themselves.
        lines.append("host devices: " + ", ".join(devices))
    shared = [
        kind
        for kind, key in (("network", "network_mode"), ("IPC", "ipc_mode"), ("PID", "pid_mode"))
        if create.get(key) == "host"
    ]
    lines.append("host namespaces shared: " + (", ".join(shared) or "none"))
    return lines


def describe_seccomp(option: str | None) -> str:
    """What a ``seccomp=`` security option is: the engine's default (none given),
    ``unconfined``, gpudev's profile, or another profile (named by the SHA-256 of its text:
    of the file ``c.DevContainers.seccomp_profile`` names, as read)."""
    if option is None:
        return "the engine's default profile"
    value = option.removeprefix("seccomp=")
    if value == "unconfined":
        return "unconfined (no system call filter)"
    try:
        parsed = json.loads(value)
    except ValueError:
        parsed = None
    if parsed == seccomp.profile():
        return GPUDEV_SECCOMP
    facts = f"{len(value):,} bytes, sha256 {hashlib.sha256(value.encode()).hexdigest()[:12]}"
    if not isinstance(parsed, dict):
        return f"custom, not JSON ({facts})"
    rules = parsed.get("syscalls") or []
    default = parsed.get("defaultAction")
    return f"custom profile (default action {default}, {len(rules)} rules, {facts})"


def readable_create(create: Mapping[str, Any]) -> dict[str, Any]:
    """The create arguments with a seccomp profile named instead of printed."""
    shown = dict(create)
    if create.get("security_opt"):
        shown["security_opt"] = [_short_option(str(o)) for o in create["security_opt"]]
    return shown


def _short_option(option: str) -> str:
    if not option.startswith("seccomp=") or option == "seccomp=unconfined":
        return option
    value = option.removeprefix("seccomp=")
    what = describe_seccomp(option)
    name = "gpudev default profile" if what == GPUDEV_SECCOMP else what.partition(" (")[0]
    return f"seccomp=<{name}, {len(value):,} bytes>"


def _no_new_privileges(options: list[str]) -> bool:
    """Whether the options set no-new-privileges (``no-new-privileges``, ``...:true`` or
    ``...=true``; the last one given counts, as with the engine)."""
    on = False
    for option in options:
        if option == _NNP:
            on = True
        elif option.startswith((f"{_NNP}:", f"{_NNP}=")):
            on = option[len(_NNP) + 1 :].lower() == "true"
    return on


def _user(create: Mapping[str, Any]) -> str:
    user = create.get("user")
    if user is None:
        return "the image's user"
    text = str(user)
    if text.partition(":")[0] in ("0", "root"):
        text += " (root)"
    groups = create.get("group_add") or []
    return text + (f", groups {', '.join(str(g) for g in groups)}" if groups else "")


def _limits(create: Mapping[str, Any]) -> str:
    pids = create.get("pids_limit")
    memory = create.get("mem_limit")
    nano_cpus = create.get("nano_cpus")
    return "; ".join(
        [
            f"{pids:,} processes" if pids and pids > 0 else "processes: no limit",
            f"memory {_bytes(memory)}" if memory else "memory: no limit",
            f"{nano_cpus / 1e9:g} CPUs" if nano_cpus else "CPUs: no limit",
        ]
    )


def _bytes(count: int) -> str:
    for unit, size in (("TiB", 1 << 40), ("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10)):
        if count >= size:
            return f"{count / size:.4g} {unit}"
    return f"{count} bytes"


def _mounts(create: Mapping[str, Any]) -> list[str]:
    """The bind mounts, read-write ones apart: what content inside can change on the host."""
    writable: list[str] = []
    read_only: list[str] = []
    for mount in create.get("mounts") or []:
        where = f"{mount.get('Source')} -> {mount.get('Target')}"
        (read_only if mount.get("ReadOnly") else writable).append(where)
    return [
        "read-write mounts: " + ("; ".join(writable) or "none"),
        "read-only mounts: " + ("; ".join(read_only) or "none"),
    ]
