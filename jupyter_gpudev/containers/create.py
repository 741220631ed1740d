"""The engine's create arguments of a dev container, built from plain values.

``create_args`` is a pure function: from the environment, where the container goes (``Target``:
its name, host, GPUs, mounts, ...) and the administrator's confinement (``Confinement``) to the
keyword arguments of ``client.containers.create``. No engine call, no configuration object, no
file read: ``DevContainers`` resolves those first (mounts checked on their host, the network
created, the seccomp profile read) and the builder decides only what goes into the request, so
every rule about it is tested without an engine (``tests/unit/test_create_args.py``).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from docker.types import DeviceRequest, LogConfig, Ulimit

from ..engine.driver import Injection
from ..environments import Environment, ResolvedMount
from ..labels import (
    L_CLAIM,
    L_CLAIM_AT,
    L_CLAIM_HOLDER,
    L_CREATED,
    L_ENV,
    L_GPUS,
    L_HOST,
    L_IMAGE,
    L_KERNEL,
    L_LEASE,
    L_LEDGER,
    L_MANAGED,
    L_NAME,
    L_OWNER,
    L_PORTS,
    L_PROBE,
    L_PROCESS,
    L_REMOTE_USER,
    L_SERVER,
    L_WORKSPACE,
)
from .model import docker_name, given_name


@dataclass(frozen=True)
class Confinement:
    """What content inside a container may do to the host: the administrator's settings,
    resolved (``security_opt`` with the seccomp profile's text), and their limits."""

    security_opt: tuple[str, ...] = ()
    cap_drop: tuple[str, ...] = ()
    #: 0 or less: no limit.
    pids_limit: int = 0
    memory_bytes: int | None = None
    nano_cpus: int | None = None
    #: The cap on the log the engine keeps of a container's output (``c.DevContainers``'
    #: ``log_max_size``, a Docker size, '': none; ``log_max_files``), set only where
    #: ``log_driver`` keeps it in files (``CAPPED_LOG_DRIVERS``).
    log_max_size: str = ""
    log_max_files: int = 0
    #: The engine's default logging driver ('': not known).
    log_driver: str = ""


#: The logging drivers that keep a container's output in files on the engine's disk, rotated
#: at ``max-size`` into ``max-file`` files; any other (journald, syslog, ...) is the
#: administrator's choice, left alone.
CAPPED_LOG_DRIVERS = ("json-file", "local")


@dataclass(frozen=True)
class Target:
    """One container to create: who, where, with which GPUs and mounts."""

    name: str
    owner: str
    host: str
    image: str
    #: The host folder mounted as the workspace ('' for none): a label, for the listing.
    workspace: str
    #: Every bind mount, checked on its host (workspace, declared, CA bundle).
    mounts: tuple[ResolvedMount, ...]
    #: The command that keeps the container up (kernels and terminals are exec'd into it).
    command: tuple[str, ...]
    server_id: str
    ledger_id: str
    #: ``"<machine>:<pid>"`` of the server process.
    process: str
    #: ISO 8601 UTC.
    created: str
    lease_id: str = ""
    gpu_uuids: tuple[str, ...] = ()
    kernel_id: str | None = None
    #: ``"uid:gid"`` to run as (``None``: the image's user).
    user: str | None = None
    #: Supplementary group ids of that user (the shared service runs a user's containers
    #: with their groups, as a login would).
    groups: tuple[int, ...] = ()
    #: The network to join unless the environment names a network mode (``None``: default).
    network: str | None = None
    #: Variables added to the environment's ``containerEnv`` (the CA bundle's).
    extra_env: Mapping[str, str] = field(default_factory=dict)
    #: Driver injection instead of the NVIDIA hook (``c.LegacyGPUInjection``).
    injection: Injection | None = None
    #: Publish the environment's forwardPorts on the host's loopback (``c.DevContainers``).
    publish_ports: bool = False
    #: Capabilities its image's Dev Container Features add (capAdd), each one allowed.
    cap_add: tuple[str, ...] = ()
    #: Who kernels, terminals and lifecycle commands run as ('': the container's user).
    remote_user: str = ""


#: A helper container's own limits (``helper_args``): far more than reading an image's
#: packages or files needs.
HELPER_PIDS = 256
HELPER_MEMORY = 2 << 30


def tightest(*limits: int | None) -> int | None:
    """The smallest of the limits that are set (``None``: none is)."""
    given = [limit for limit in limits if limit is not None]
    return min(given) if given else None


def labels(env: Environment, target: Target) -> dict[str, str]:
    """gpudev's labels of the container: always every one, even empty, since an image's
    own labels are inherited by its containers and an image may carry ours (a dev container
    that kept an image's claim labels would be taken for a stale GPU claim and removed)."""
    return {
        L_MANAGED: "1",
        L_NAME: target.name,
        L_OWNER: target.owner,
        L_ENV: env.name,
        L_HOST: target.host,
        L_LEASE: target.lease_id,
        L_GPUS: ",".join(target.gpu_uuids),
        L_SERVER: target.server_id,
        L_IMAGE: target.image,
        L_CREATED: target.created,
        L_WORKSPACE: target.workspace,
        L_PROCESS: target.process,
        L_LEDGER: target.ledger_id,
        L_KERNEL: target.kernel_id or "",
        L_PORTS: ",".join(str(port) for port in env.forward_ports),
        L_REMOTE_USER: target.remote_user,
        # Not a GPU claim (``leasing/claims.py``), not a probe helper.
        L_CLAIM: "",
        L_CLAIM_HOLDER: "",
        L_CLAIM_AT: "",
        L_PROBE: "",
    }


def create_args(env: Environment, target: Target, confinement: Confinement) -> dict[str, Any]:
    """The keyword arguments of ``client.containers.create(target.image, **args)``.

    Nothing of the server's own environment goes in: the variables are the environment's
    ``containerEnv``, ``target.extra_env`` and the NVIDIA ones, set explicitly (CUDA images
    default ``NVIDIA_VISIBLE_DEVICES`` to ``all``). GPUs are requested by UUID, never by a count
    (the engine maps a count to "the first N GPUs"). Forwarded ports are published only when
    ``target.publish_ports``, on the host's loopback only (the proxy reaches them without).
    """
    environment = dict(env.container_env)
    environment.update(target.extra_env)
    uuids = target.gpu_uuids
    environment["NVIDIA_VISIBLE_DEVICES"] = ",".join(uuids) if uuids else "void"
    environment["CUDA_DEVICE_ORDER"] = "PCI_BUS_ID"
    mounts: list[Any] = [mount.to_docker() for mount in target.mounts]
    args: dict[str, Any] = {
        "name": docker_name(target.name),
        "hostname": given_name(target.name)[:63],
        "command": list(target.command),
        "detach": True,
        "init": True,
        "labels": labels(env, target),
        "environment": environment,
        "mounts": mounts,
        "working_dir": env.workspace_folder,
        "restart_policy": {"Name": "no"},
        "stop_signal": "SIGTERM",
        "ports": (
            {f"{port}/tcp": ("127.0.0.1", None) for port in env.forward_ports}
            if target.publish_ports
            else {}
        ),
    }
    if target.user is not None:
        args["user"] = target.user
        if target.groups:
            args["group_add"] = [str(group) for group in target.groups]
    if uuids and target.injection is not None:
        args["devices"] = list(target.injection.devices)
        mounts.extend(target.injection.mounts)
        environment.update(dict(target.injection.environment))
    elif uuids:
        args["device_requests"] = [
            DeviceRequest(driver="nvidia", device_ids=list(uuids), capabilities=[["gpu"]])
        ]
    _run_options(args, env, target.network)
    _confine(args, env, confinement)
    _capabilities(args, env, target)
    _log(args, confinement)
    return args


def _log(args: dict[str, Any], confinement: Confinement) -> None:
    """The cap on the log the engine keeps of the container's output, where the engine's
    default driver keeps it in files (json-file's own default keeps all of it)."""
    if not confinement.log_max_size or confinement.log_driver not in CAPPED_LOG_DRIVERS:
        return
    config = {"max-size": confinement.log_max_size}
    if confinement.log_max_files > 0:
        config["max-file"] = str(confinement.log_max_files)
    args["log_config"] = LogConfig(type=confinement.log_driver, config=config)


def _capabilities(args: dict[str, Any], env: Environment, target: Target) -> None:
    """The capabilities the environment and its features add: each one the administrator
    allows (c.EnvironmentManager.allowed_capabilities, checked as they were read); any other
    is left out here too. An added one is taken off the dropped ones."""
    asked = dict.fromkeys((*env.run_options.cap_add, *target.cap_add))
    added = [c for c in asked if c in env.allowed_caps]
    if not added:
        return
    args["cap_add"] = added
    if "cap_drop" in args:
        args["cap_drop"] = [c for c in args["cap_drop"] if c not in added]


def _run_options(args: dict[str, Any], env: Environment, network: str | None) -> None:
    """The accepted runArgs, and the given network unless the environment names one."""
    options = env.run_options
    if options.shm_size_bytes:
        args["shm_size"] = options.shm_size_bytes
    if options.ipc_mode:
        args["ipc_mode"] = options.ipc_mode
    if options.network_mode:
        args["network_mode"] = options.network_mode
        if options.network_mode == "host":
            args.pop("ports", None)
    elif network:
        args["network"] = network
    if options.pid_mode:
        args["pid_mode"] = options.pid_mode
    if options.ulimits:
        args["ulimits"] = [Ulimit(name=n, soft=s, hard=h) for n, s, h in options.ulimits]


def _confine(args: dict[str, Any], env: Environment, confinement: Confinement) -> None:
    """The administrator's confinement, and the environment's memory and CPU limits where
    they are tighter (an environment never loosens them)."""
    if confinement.security_opt:
        args["security_opt"] = list(confinement.security_opt)
    if confinement.cap_drop:
        args["cap_drop"] = list(confinement.cap_drop)
    if confinement.pids_limit > 0:
        args["pids_limit"] = confinement.pids_limit
    memory = tightest(env.run_options.memory_bytes, confinement.memory_bytes)
    if memory is not None:
        args["mem_limit"] = memory
    nano_cpus = tightest(env.run_options.nano_cpus, confinement.nano_cpus)
    if nano_cpus is not None:
        args["nano_cpus"] = nano_cpus


def helper_args(confinement: Confinement) -> dict[str, Any]:
    """The create arguments of a helper container gpudev makes of an image (the package probe,
    the containers whose files the engine reads), but for the image and its command: a dev
    container's confinement and more. The administrator's security options (the seccomp
    profile) with no-new-privileges always; no capability; a read-only root; no network, no
    mount, no log kept by the engine (gpudev reads what it needs as it comes), no health check
    (the image's would be a program of the container's run by the engine); the tighter of
    the administrator's and ``HELPER_PIDS``/``HELPER_MEMORY`` limits, the administrator's CPU
    limit. Labelled a probe, and not managed (an image may carry gpudev's labels: its helper is
    never taken for a dev container)."""
    security = [o for o in confinement.security_opt if not o.startswith("no-new-privileges")]
    pids = confinement.pids_limit if confinement.pids_limit > 0 else None
    args: dict[str, Any] = {
        "labels": {L_PROBE: "1", L_MANAGED: ""},
        "security_opt": [*security, "no-new-privileges"],
        "cap_drop": ["ALL"],
        "read_only": True,
        "network_disabled": True,
        "network_mode": "none",
        "log_config": LogConfig(type=LogConfig.types.NONE),
        "pids_limit": tightest(pids, HELPER_PIDS),
        "mem_limit": tightest(confinement.memory_bytes, HELPER_MEMORY),
        # (an image's HEALTHCHECK would have the engine exec the image's program in it)
        "healthcheck": {"test": ["NONE"]},
    }
    if confinement.nano_cpus is not None:
        args["nano_cpus"] = confinement.nano_cpus
    return args
