"""Dev containers: create, start, stop, remove, list, logs, and reconcile with the lease ledger.

Invariants kept here, whatever fails:
- no container holds GPUs without an active lease, and no lease outlives its container;
- a lease is released only after its container has really stopped;
- a stopped container is kept (its changes are not lost) until it is removed, and removing one
  with changes needs ``force``;
- nothing of the server's own environment reaches a container: only the environment's
  ``containerEnv``, the NVIDIA variables and (opt-in) the CA bundle variables.

Every method here blocks (Docker SDK calls): the server runs them in worker threads.
"""

from __future__ import annotations

import builtins
import contextlib
import json
import os
import pwd
import re
import secrets
import socket
import subprocess
import time
from collections.abc import Callable, Iterable, Iterator
from dataclasses import replace
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

import docker
import docker.errors
from docker.models.containers import Container
from traitlets import Bool, Float, Instance, Int, List, Unicode, default

from ..access import Caller
from ..engine import (
    Host,
    Inventory,
    LegacyGPUInjection,
    Progress,
    Registries,
    firewall,
)
from ..engine.driver import Injection
from ..environments import (
    Environment,
    EnvironmentManager,
    MountNotAllowed,
    MountPolicy,
    RemotePaths,
    ResolvedMount,
    check_target,
    parse_docker_size,
)
from ..errors import (
    ENGINE_FAILURES,
    FAILURES,
    BadRequest,
    ConfigError,
    Conflict,
    EngineError,
    EngineUnreachable,
    Forbidden,
    GPUDevError,
    LimitReached,
    engine_error,
    engine_errors,
)
from ..k8s.status import clean
from ..labels import (
    A_LEDGER,
    A_NAME,
    A_OWNER,
    A_PROCESS,
    L_ENV,
    L_KERNEL,
    L_MANAGED,
    L_NAME,
    L_OWNER,
    STOPPED,
    labelled_gpus,
)
from ..leasing import (
    EngineClaims,
    GPURequest,
    GPUTaken,
    LeasableGPU,
    Lease,
    NoFreeGPU,
    check_fit,
    leasable_units,
    seen_by,
    would_lease,
)
from . import commandlog, seccomp
from . import plan as planning
from .commands import run_lifecycle_commands
from .create import Confinement, Target, create_args, tightest
from .images import ensure_image
from .limits import (
    UserLimits,
    Whose,
    admit_gpus,
    check_count,
    check_gpus,
    container_resources,
    holdings,
    owner_lock,
)
from .lookup import ContainerLookup
from .model import (
    PREFIX,
    DevContainerInfo,
    StartRequest,
    container_key,
    docker_name,
    given_name,
    user_name,
)
from .namespace import planned_image, user_images
from .placement import (
    CudaMismatch,
    HostReport,
    Placement,
    check_cuda,
    choose,
    gpu_request,
    gpus_optional,
)
from .pods import Pods, annotation, pod_changes, pod_info, pod_kernel, pod_uid
from .reconcile import orphan_kernel_containers, process_alive, reconcile_host

_NAME_RE = re.compile(r"^[a-z0-9][a-z0-9_.-]{0,62}\Z")


#: What writing the firewall may raise: the engine's failures, iptables' (``RuntimeError``).
_GUARD_FAILURES: tuple[type[BaseException], ...] = (
    *ENGINE_FAILURES,
    RuntimeError,
    OSError,
    subprocess.SubprocessError,
)


def _uid_of(owner: str) -> int | None:
    """The uid of the local account ``owner`` (a container's owner label), if there is one."""
    try:
        return pwd.getpwnam(owner).pw_uid if owner else None
    except KeyError:
        return None


def _now() -> str:
    return datetime.now(timezone.utc).isoformat(timespec="seconds")


class DevContainers(ContainerLookup):
    """Dev containers on the hosts of a ``HostPool``. Configure with ``c.DevContainers.*``."""

    lifecycle_timeout = Float(
        1800.0,
        help="""Seconds a start waits for each lifecycle command (postCreateCommand,
        postStartCommand) of an environment; one still running then goes on in the container,
        unwatched, and the start reports it. Only a command's last 20 lines are kept, whatever
        it prints.""",
    ).tag(config=True)
    stop_timeout = Int(
        5, help="Seconds a container gets to stop after SIGTERM before it is killed."
    ).tag(config=True)

    run_as_server_user = Bool(
        True,
        help="""Run containers as the server user's uid:gid so that files written in the
        workspace keep their owner; in the shared service, as the calling user's uid:gid
        with their groups (on its own machine; on an ssh:// host as the SSH user). Off: the
        image's user (often root).""",
    ).tag(config=True)

    port_guard = Bool(
        True,
        help="""Close the ports of dev containers on this machine's engine (kernels, web apps)
        to every account but this server's (and root's; in the shared service, also each
        container's owner's, whose server connects to their kernels): an iptables chain,
        GPUDEV-PORTS, on the way to the containers' network (c.ContainerLookup.network),
        rewritten at each start, resume, stop and removal. It needs root (or CAP_NET_ADMIN)
        and iptables; without them the server says once that the ports are open to local
        accounts. Off: gpudev leaves the firewall alone.""",
    ).tag(config=True)

    allow_root = Bool(
        False,
        help="""The shared service: let an environment that asks for root ("remoteUser":
        "root") run as the image's user, usually root, instead of as the calling user. Root
        in a dev container can change everything in it (and what a commit pushes), and with
        a mounted folder, write files there as root. Off: such an environment is refused.
        Single-user servers run containers as their own user whatever this says.""",
    ).tag(config=True)

    publish_ports = Bool(
        False,
        help="""Also publish each environment's forwardPorts on the host's loopback address
        (127.0.0.1, a free port): anyone logged in to that machine then reaches them without
        Jupyter's login. Off: they are reached only through the authenticated proxy
        (/gpudev/proxy/NAME/PORT/).""",
    ).tag(config=True)

    reconcile_grace = Float(
        120.0,
        help="""Seconds during which a new lease is never freed by reconciliation even though
        its container is not (yet) listed: a start in flight (lease taken, container being
        created) in this or another process.""",
    ).tag(config=True)

    linger = Float(
        0.0,
        help="""Seconds a shared dev container (one that kernels were started in, not one
        dedicated to a kernel) keeps running after its last kernel ends before it is stopped
        (a pod: deleted, unless files outside its workspace changed) and its GPUs released; 0
        ends it at once. A pinned container is never ended this way (`jupyter gpudev pin
        NAME`, the panel's Pin button).""",
    ).tag(config=True)

    command_log = Bool(
        True,
        help="""Note the package-manager commands run in each dev container (pip, pip3, apt,
        apt-get, conda, mamba, micromamba, npm, cargo: small wrappers first on its PATH append
        each command line to /var/log/gpudev/commands.log, then run the real program), and
        show the ones since the last commit as comments in its diff. Read as data, never run;
        `python -m pip`, login shells that set PATH anew and environments whose containerEnv
        sets PATH are not noted.""",
    ).tag(config=True)

    keep_alive_command = Unicode(
        "sleep infinity",
        help="The container's main process: it only keeps the container up for kernels.",
    ).tag(config=True)

    security_opt = List(
        Unicode(),
        default_value=["no-new-privileges"],
        help="""Docker security options of every dev container (`docker run --security-opt`).
        The default, no-new-privileges, makes setuid programs and file capabilities inside
        the container (sudo, su) give no privileges. An environment cannot change these
        (--security-opt in runArgs is refused). The seccomp profile is seccomp_profile's.""",
    ).tag(config=True)

    seccomp_profile = Unicode(
        "gpudev",
        help="""The seccomp profile of dev containers. 'gpudev' (the default): Docker's default
        profile, except that no file may get a setuid or setgid bit (chmod, open, mknod), so
        that root in a container cannot leave a setuid-root program in a host folder it
        mounts (the workspace); packages that ship setuid programs (sudo, ...) then install
        only through the Dockerfile. '': the engine's own default. Otherwise the path of a
        profile (JSON) on the server's machine.""",
    ).tag(config=True)

    cap_drop = List(
        Unicode(),
        default_value=["MKNOD", "SETFCAP", "FSETID", "NET_RAW", "SETPCAP", "AUDIT_WRITE"],
        help="""Linux capabilities removed from Docker's default set in every dev container.
        The default keeps what package managers need as root (CHOWN, DAC_OVERRIDE, FOWNER,
        SETUID, SETGID, KILL, ...) and removes device nodes (MKNOD: a device node in the
        workspace would be a device on the host), file capabilities (SETFCAP), keeping
        setuid bits on files it writes (FSETID), raw sockets (NET_RAW), SETPCAP and
        AUDIT_WRITE. An environment cannot add capabilities (--cap-add is refused).""",
    ).tag(config=True)

    pids_limit = Int(
        4096,
        help="""The most processes (and threads) one dev container may run, against fork
        bombs; 0: no limit.""",
    ).tag(config=True)

    memory_limit = Unicode(
        "",
        help="""The most memory one dev container may use, as a Docker size ('64g'); empty:
        no limit. An environment may ask for less (customizations.gpudev.memory), never
        more: the smaller of the two applies.""",
    ).tag(config=True)

    cpu_limit = Float(
        0.0,
        help="""The most CPUs' worth of time one dev container may use (4.5); 0: no limit. An
        environment may ask for less (customizations.gpudev.cpus), never more.""",
    ).tag(config=True)

    environments = Instance(EnvironmentManager)
    limits = Instance(UserLimits, help="Each user's limits (``c.UserLimits``).")
    mount_policy = Instance(MountPolicy)
    legacy_gpus = Instance(LegacyGPUInjection)
    registries = Instance(Registries)

    @default("registries")
    def _default_registries(self) -> Registries:
        return Registries(parent=self)

    @default("legacy_gpus")
    def _default_legacy_gpus(self) -> LegacyGPUInjection:
        return LegacyGPUInjection(parent=self)

    @default("environments")
    def _default_environments(self) -> EnvironmentManager:
        return EnvironmentManager(parent=self)

    @default("mount_policy")
    def _default_mount_policy(self) -> MountPolicy:
        return MountPolicy(parent=self)

    @default("limits")
    def _default_limits(self) -> UserLimits:
        return UserLimits(parent=self)

    # ------------------------------------------------------------------------------------------
    # Plumbing
    # ------------------------------------------------------------------------------------------

    # ------------------------------------------------------------------------------------------
    # Start
    # ------------------------------------------------------------------------------------------

    def _new_name(self, env: Environment, request: StartRequest, owner: str) -> str:
        """The key (``container_key``) of a new container of ``owner``: the name asked for,
        else one made from the environment's name (and, where names are one namespace for
        everyone, the owner's)."""
        shared = not self.access.single_user
        if request.name:
            if not _NAME_RE.match(request.name) or request.name.startswith(PREFIX):
                raise BadRequest(
                    f"Not a container name: {request.name!r} (1-63 lowercase letters, digits, "
                    f"'.', '_' or '-', not starting with {PREFIX!r})"
                )
            name = request.name
        elif shared:
            name = f"{env.name}-{secrets.token_hex(2)}"[:63]
        else:
            slug = re.sub(r"[^a-z0-9_.-]+", "-", owner.lower()).strip("-.") or "user"
            name = f"{env.name}-{slug}-{secrets.token_hex(2)}"[:63]
        return container_key(name, owner if shared else None)

    def _check_free(self, client: docker.DockerClient, key: str, who: Caller, host: Host) -> None:
        """``Conflict`` when ``who`` already has a container of that name on ``host``: the key's
        own, or (in shared mode) one of theirs named the same before names were per user.
        Another user's container never makes a name taken: names are per user."""
        meant = self.keys_meant(given_name(key), who)
        for engine_name in dict.fromkeys(docker_name(k) for k in meant):
            try:
                found = client.containers.get(engine_name)
            except docker.errors.NotFound:
                continue
            if engine_name == docker_name(key) or self.access.may_see(
                who, found.labels, self.ledger_id
            ):
                raise Conflict(
                    f"A container named {given_name(key)!r} already exists on host {host.name!r}"
                )

    def _place(
        self, env: Environment, request: StartRequest, who: Caller, say: Progress
    ) -> Placement:
        """Where a start goes: the host asked for, else the first host (local first, then
        configured, then added ones) that is reachable and can lease the GPUs asked for now,
        with a driver new enough for the image when the image is there (``choose``: when none
        can, ``NoHostFits`` says why for each). The GPU request and the host's inventory come
        with it: ``start`` does not ask for them again."""
        wanted = gpu_request(env, request)
        optional = gpus_optional(env, request)
        names = self.host_pool.names()
        if request.host or len(names) == 1:
            host = self._host(request.host or names[0])
            inventory = host.gpus() if wanted is not None else None
        else:
            seen: dict[str, Inventory | None] = {}

            def reports() -> Iterator[HostReport]:
                for name in names:
                    candidate = self._host(name)
                    if candidate.spec.is_kubernetes:
                        cluster = f"a Kubernetes cluster: start there with --host {name}"
                        yield HostReport(name, reachable=False, reason=cluster)
                        continue
                    try:
                        candidate.engine_info()
                    except GPUDevError as err:
                        yield HostReport(name, reachable=False, reason=err.message)
                        continue
                    seen[name] = candidate.gpus() if wanted is not None else None
                    reason = self._cannot_place(candidate, env, wanted, seen[name], who)
                    yield HostReport(name, reachable=True, reason=reason)

            chosen = choose(reports(), env.name, fallback=wanted is not None and optional)
            say({"stage": "place", "message": f"placed on host {chosen!r}"})
            host, inventory = self._host(chosen), seen.get(chosen)
        if inventory is not None and not inventory.gpus and not optional:
            raise BadRequest(
                f"GPUs were asked for, but host {host.name!r} has none: {inventory.reason}",
                details={"host": host.name, "reason": inventory.reason},
            )
        return Placement(host, wanted, inventory)

    def _cannot_place(
        self,
        host: Host,
        env: Environment,
        wanted: GPURequest | None,
        inventory: Inventory | None,
        who: Caller,
    ) -> str | None:
        """Why ``host`` cannot take the request now, or ``None``."""
        if wanted is None or inventory is None:
            return None
        if not inventory.gpus:
            return f"no GPU ({inventory.reason or 'none found'})"
        try:
            units, held = self._leasable_now(host, inventory, who)  # EngineUnreachable: a reason
            check_fit(host.name, wanted, units, held)
        except GPUDevError as err:
            return err.message
        try:
            image = host.client().images.get(env.image_ref())
        except FAILURES:
            return None  # pulled or built at start, and checked then
        try:
            check_cuda(
                env.image_ref(),
                list(image.attrs.get("Config", {}).get("Env") or []),
                host.name,
                inventory,
            )
        except CudaMismatch as err:
            return err.message
        return None

    def start(
        self,
        request: StartRequest,
        progress: Progress | None = None,
        *,
        caller: Caller | None = None,
    ) -> DevContainerInfo:
        """Create and start a dev container holding exactly its leased GPUs, owned by
        ``caller`` (default: the single-user mode's user)."""
        say: Progress = progress or (lambda _event: None)
        who = self.access.resolve(caller)
        owner = who.name
        env = self.environments.get(request.environment, self.root_dir)
        if request.image:
            env = replace(env, image=request.image, build=None)
        self.environments.check_image_allowed(env, self.root_dir)
        if request.host is None and env.host:  # the environment's own host
            request = replace(request, host=env.host)
        if self._on_cluster(request.host):
            return self._start_pod(env, request, who, say)
        placement = self._place(env, request, who, say)
        host, inventory = placement.host, placement.inventory
        # Refused before an image is pulled or built; counted again below, under the lock.
        wanted = None if gpus_optional(env, request) else placement.gpu_request
        self._check_room(who, owner, running=True, gpus=wanted.wanted if wanted else 0)
        self._confinement_for(env, owner, host)
        client = host.client()
        name = self._new_name(env, request, owner)
        with engine_errors(f"Starting {given_name(name)!r}", self.log):
            self._check_free(client, name, who, host)
        trust = self.mount_policy.build_trust()
        mine = user_images(self.access, self.state_dir, self.environments.allowed_images)
        image, image_env = ensure_image(
            client, env, self.registries, say, self.log, trust=trust, mine=mine
        )
        if inventory is not None:
            check_cuda(image, image_env, host.name, inventory)
        notes: list[str] = []
        with self._room(who, owner, running=True):  # until it runs, counted by the next
            container, lease = self._create_holding(
                host=host,
                env=env,
                request=request,
                name=name,
                who=who,
                image=image,
                placement=placement,
                notes=notes,
                say=say,
            )
            # A pin left by a container of that name removed behind gpudev's back is not
            # this one's.
            self.ledger.set_pinned(host.name, name, False)
            try:
                say({"stage": "start", "message": f"starting {docker_name(name)}"})
                self._guard_ports(host, unless_hooked=True)  # closed before it runs
                self._start_and_check(name, container)
                self._guard_ports(host)
            except BaseException as exc:
                self._undo(container, lease, host)
                if isinstance(exc, GPUDevError):
                    raise
                if isinstance(exc, ENGINE_FAILURES):
                    raise engine_error(f"Starting {name!r}", exc, self.log) from exc
                raise
        warnings = (
            *notes,
            *run_lifecycle_commands(
                container, env, say, timeout=self.lifecycle_timeout, log=self.log
            ),
        )
        if env.post_create_command or env.post_start_command:
            warnings += self._record_baseline(container, say)
        say({"stage": "ready", "message": f"{given_name(name)} is running"})
        return self.describe(host, container, warnings=warnings)

    def _start_pod(
        self, env: Environment, request: StartRequest, who: Caller, say: Progress
    ) -> DevContainerInfo:
        """``start`` on a Kubernetes host: the plan's objects created, the pod waited for."""
        host = self._host(request.host)
        target, notes = planning.pod_target(
            env,
            request,
            host.spec,
            name=self._new_name(env, request, who.name),
            owner=who.name,
            command=tuple(self.keep_alive_command.split()),
            server_id=self.server_id,
            created=_now(),
            process=f"{socket.gethostname()}:{os.getpid()}",
            ledger=self.ledger_id,
        )
        made = planning.pod_objects(env, target, self._confinement_for(env, who.name, host))
        pods = self.pods(host)
        with self._room(who, who.name, running=True):  # a pending pod is counted
            pod, kept = pods.start(made, target, say)
            # A pin left by a pod of that name deleted behind gpudev's back (kubectl, an
            # eviction) is not this one's.
            self.ledger.set_pinned(host.name, target.name, False)
        pod_name = str(pod["metadata"]["name"])
        warnings = [*notes, *made.notes, *kept]
        warnings += pods.run_lifecycle(pod_name, env, say, timeout=self.lifecycle_timeout)
        warnings += self._record_pod_baseline(host, pod, pods, say)
        if request.kernel_id and self.pod_listings.load(host.name, pod_uid(pod)) is None:
            # Its changes could never be told, so it could never be deleted at the kernel's
            # end without force: it would hold its GPUs until someone removes it.
            pods.delete(pod)
            raise EngineError(
                f"The files of the kernel's pod {pod_name} could not be listed (gpudev needs "
                "GNU find in the image), so what it changes could not be kept: it was deleted"
            )
        say({"stage": "ready", "message": f"{given_name(target.name)} is running"})
        return replace(pod_info(pod, host.name), warnings=tuple(warnings))

    def _record_pod_baseline(
        self, host: Host, pod: dict[str, Any], pods: Pods, say: Progress
    ) -> list[str]:
        """A pod's files listed and its packages probed after its lifecycle commands: what
        its changes are counted against (a cluster has no ``docker diff``). Warnings."""
        pod_name = str(pod["metadata"]["name"])
        say({"stage": "baseline", "message": f"listing the files of {pod_name}"})
        try:
            recorded = self.pod_listings.save(host.name, pod_uid(pod), pods.listing(pod_name))
        except GPUDevError as err:
            self.log.warning("gpudev: no file listing of %s: %s", pod_name, err.message)
            recorded = False
        if not recorded:
            return [
                "its files could not be listed now, so its changes cannot be counted: removing "
                "it will need force, and it cannot be committed"
            ]
        if self.changes is None:
            return []
        say({"stage": "baseline", "message": f"probing the packages of {pod_name}"})
        try:
            self.changes.record_pod_baseline(host, pod)
        except GPUDevError as err:
            self.log.warning("gpudev: no package baseline of %s: %s", pod_name, err.message)
            return [f"its packages could not be probed ({err.message}): it cannot be committed"]
        return []

    def _record_baseline(self, container: Container, say: Progress) -> tuple[str, ...]:
        """What the lifecycle commands installed is part of the environment, not a change:
        the container's own baseline is taken after them (others use their image's)."""
        say({"stage": "baseline", "message": "recording the packages after the commands"})
        try:
            if self.changes is None:
                return ()
            self.changes.record_baseline(container)
        except (GPUDevError, docker.errors.DockerException) as exc:
            self.log.warning("gpudev: no baseline for %s: %r", container.name, exc)
            return (
                "the package baseline could not be recorded: diffs will include what the "
                "lifecycle commands installed",
            )
        return ()

    @staticmethod
    def _start_and_check(name: str, container: Container) -> None:
        """Start the container; one that exits at once is an error, with its last output."""
        container.start()
        container.reload()
        if container.status == "running":
            return
        tail = container.logs(tail=20).decode(errors="replace").strip()
        code = container.attrs.get("State", {}).get("ExitCode", "?")
        raise EngineError(
            f"{name!r} stopped right after it started (exit {code}); does the image's "
            "ENTRYPOINT run the command it is given?",
            details={"log": tail.splitlines()[-20:]},
        )

    def _create_holding(
        self,
        *,
        host: Host,
        env: Environment,
        request: StartRequest,
        name: str,
        who: Caller,
        image: str,
        placement: Placement,
        notes: builtins.list[str],
        say: Progress,
    ) -> tuple[Container, Lease | None]:
        """Lease GPUs, create the container (not started) and claim them on its engine.

        The engine's claims decide between servers and host entries (``leasing/claims.py``):
        a GPU claimed by someone else meanwhile is left out and the GPUs chosen again, with
        the container made anew. Nothing is left behind on failure."""
        inventory = placement.inventory
        wanted = placement.gpu_request
        taken: set[str] = set()
        for _attempt in range(8):
            lease: Lease | None = None
            if wanted is not None and inventory is not None:
                try:
                    units, held = self._leasable_now(host, inventory, who, taken)
                    lease = self.ledger.acquire(
                        host.name,
                        name,
                        who.name,
                        wanted,
                        units,
                        held_elsewhere=held,
                        shown_to=None if who.admin else who.name,
                        admit=self._admit_gpus(who, who.name, wanted.wanted),
                    )
                except (NoFreeGPU, LimitReached) as err:
                    if not gpus_optional(env, request):
                        raise
                    why = err.message if isinstance(err, LimitReached) else "no free GPU"
                    notes.append(f"{why} on host {host.name!r}: started without a GPU")
                    say({"stage": "lease", "message": notes[-1]})
                    inventory = None
            container: Container | None = None
            try:
                if lease is not None:
                    say({"stage": "lease", "message": f"leased {', '.join(lease.gpu_uuids)}"})
                say({"stage": "create", "message": f"creating {docker_name(name)}"})
                container = self._create(
                    client=host.client(),
                    env=env,
                    name=name,
                    owner=who.name,
                    host=host,
                    image=image,
                    lease=lease,
                    inventory=inventory,
                    kernel_id=request.kernel_id,
                )
                if lease is not None:
                    self._claims(host).claim(
                        lease.gpu_uuids,
                        holder_id=str(container.id),
                        holder_name=name,
                        owner=who.name,
                    )
            except GPUTaken as lost:
                self._undo(container, lease, host)
                taken.add(lost.taken.uuid)
                if wanted is not None and wanted.uuids:
                    raise self._held_elsewhere(host, wanted, lost) from None
                continue
            except BaseException as exc:
                self._undo(container, lease, host)
                if isinstance(exc, ENGINE_FAILURES):
                    raise engine_error(f"Creating {name!r}", exc, self.log) from exc
                raise
            return container, lease
        raise NoFreeGPU(
            f"The GPUs of host {host.name!r} were taken by other starts while this one chose; "
            "try again",
            details={"host": host.name},
        )

    @staticmethod
    def _held_elsewhere(host: Host, wanted: GPURequest, lost: GPUTaken) -> NoFreeGPU:
        return NoFreeGPU(
            f"{wanted.wanted} GPU{'' if wanted.wanted == 1 else 's'} requested on host "
            f"{host.name!r} by UUID: {lost.taken.uuid} is held by another dev container",
            details={"host": host.name, "uuid": lost.taken.uuid},
        )

    def _claims(self, host: Host) -> EngineClaims:
        """The GPU claims on ``host``'s engine (the decision between ledgers and hosts)."""
        return EngineClaims(
            host.client(), grace=self.reconcile_grace, ledger_id=self.ledger_id, log=self.log
        )

    def _leasable_now(
        self, host: Host, inventory: Inventory, who: Caller, taken: Iterable[str] = ()
    ) -> tuple[builtins.list[LeasableGPU], dict[str, Lease]]:
        """The host's units and who holds which of them: this ledger's leases, then the
        engine's claims of other servers and host entries (and GPUs a live container holds by
        label, or that a start just lost, ``taken``), as ``who`` may see them. Frees the leases
        of containers that died on their own and stale claims first."""
        _, labelled = self._reconcile_host(host)
        held = self.ledger.holders(host.name)
        for uuid, claim in self._claims(host).live().items():
            held.setdefault(
                uuid, Lease("", host.name, claim.holder_name, claim.owner, (uuid,), claim.at)
            )
        now = time.time()
        for uuid in (*sorted(labelled), *taken):
            held.setdefault(uuid, Lease("", host.name, "", "another dev container", (uuid,), now))
        viewer = None if who.admin else who.name
        return leasable_units(inventory), {u: seen_by(lease, viewer) for u, lease in held.items()}

    def resume(
        self,
        name: str,
        host: str | None = None,
        progress: Progress | None = None,
        *,
        caller: Caller | None = None,
    ) -> DevContainerInfo:
        """Start a stopped dev container again, leasing the same GPUs it was created with."""
        say: Progress = progress or (lambda _event: None)
        who = self.access.resolve(caller)
        found_host, container = self.find(name, host, caller=who)
        if container.status == "running":
            return self.describe(found_host, container)
        labels = container.labels
        user = labels.get(L_NAME, user_name(name))
        uuids = labelled_gpus(labels)
        lease: Lease | None = None
        owner = labels.get(L_OWNER, "unknown")
        with self._room(who, owner, running=user):
            if uuids:
                # The GPUs are part of the container (its DeviceRequest): only those will do. The
                # same two steps as a start: this ledger, then the engine's claims.
                wanted = GPURequest(uuids=uuids)
                inventory = found_host.gpus()
                units, held = self._leasable_now(found_host, inventory, who)
                lease = self.ledger.acquire(
                    found_host.name,
                    user,
                    owner,
                    wanted,
                    units,
                    held_elsewhere=held,
                    shown_to=None if who.admin else who.name,
                    admit=self._admit_gpus(who, owner, len(uuids)),
                )
                try:
                    self._claims(found_host).claim(
                        uuids, holder_id=str(container.id), holder_name=user, owner=owner
                    )
                except GPUTaken as lost:
                    self.ledger.release(lease.lease_id)
                    raise self._held_elsewhere(found_host, wanted, lost) from None
                except BaseException:
                    self.ledger.release(lease.lease_id)
                    raise
            try:
                self._guard_ports(found_host, unless_hooked=True)
                self._start_and_check(user, container)
                self._guard_ports(found_host)
            except BaseException as exc:
                # The lease goes only with the container stopped: it may have started after all.
                try:
                    container.stop(timeout=self.stop_timeout)
                except ENGINE_FAILURES:
                    self.log.exception("Could not stop %s after a failed start", container.name)
                else:
                    if lease is not None:
                        self._release_for(found_host, container)
                if isinstance(exc, ENGINE_FAILURES):
                    raise engine_error(f"Starting {user!r} again", exc, self.log) from exc
                raise
        return self.describe(found_host, container, warnings=self._post_start(container, say))

    def _post_start(self, container: Container, say: Progress) -> tuple[str, ...]:
        """postStartCommand runs at every start (postCreateCommand only at the first)."""
        try:
            env = self.environments.get(container.labels.get(L_ENV, ""), self.root_dir)
        except GPUDevError as err:
            return (f"postStartCommand not run: {err.message}",)
        return run_lifecycle_commands(
            container,
            replace(env, post_create_command=None),
            say,
            timeout=self.lifecycle_timeout,
            log=self.log,
        )

    def _ensure_network(self, client: docker.DockerClient) -> str:
        """The isolated bridge network of dev containers, created if missing."""
        if client.networks.list(names=[self.network]):
            return self.network
        try:
            client.networks.create(
                self.network,
                driver="bridge",
                options={"com.docker.network.bridge.enable_icc": "false"},
                labels={L_MANAGED: "1"},
            )
        except docker.errors.APIError as exc:
            if not client.networks.list(names=[self.network]):  # not a race with another start
                raise engine_error(f"Creating the network {self.network!r}", exc, self.log) from exc
        return self.network

    def _undo(
        self, container: Container | None, lease: Lease | None, host: Host | None = None
    ) -> None:
        """After a failed start: remove the container, then free its lease and claims."""
        if container is not None:
            try:
                container.remove(force=True)
            except (docker.errors.DockerException, GPUDevError):
                self.log.exception("Could not remove %s after a failed start", container.name)
                return  # keep the lease: the container may still hold the GPUs
        if lease is not None:
            self.ledger.release(lease.lease_id)
            if container is not None and host is not None:
                try:
                    self._claims(host).release(str(container.id))
                except GPUDevError:  # stale now (its holder is gone): swept later
                    self.log.exception("Could not release the claims of %s", container.name)

    def _create(
        self,
        *,
        client: docker.DockerClient,
        env: Environment,
        name: str,
        owner: str,
        host: Host,
        image: str,
        lease: Lease | None,
        inventory: Inventory | None,
        kernel_id: str | None = None,
    ) -> Container:
        target = self._target(
            client=client,
            env=env,
            name=name,
            owner=owner,
            host=host,
            image=image,
            lease_id=lease.lease_id if lease else "",
            uuids=lease.gpu_uuids if lease else (),
            inventory=inventory,
            kernel_id=kernel_id,
        )
        kwargs = create_args(env, target, self._confinement_for(env, owner, host))
        container = client.containers.create(image, **kwargs)
        if self.command_log:
            try:
                container.put_archive("/", commandlog.archive())  # raises when it fails
            except BaseException:
                with contextlib.suppress(docker.errors.DockerException):
                    container.remove(force=True)
                raise
        return container

    def _target(
        self,
        *,
        client: docker.DockerClient,
        env: Environment,
        name: str,
        owner: str,
        host: Host,
        image: str,
        lease_id: str,
        uuids: tuple[str, ...],
        inventory: Inventory | None,
        kernel_id: str | None,
        dry_run: bool = False,
    ) -> Target:
        """Where a container goes, resolved (mounts checked, the CA bundle, the wrappers'
        PATH, driver injection, the network: created here unless ``dry_run``)."""
        mounts, workspace = self._mounts(host, env)
        extra_env: dict[str, str] = {}
        if host.spec.is_local:
            ca_mount, ca_env = self.mount_policy.ca_bundle()
            if ca_mount is not None:
                mounts.append(ca_mount)
                extra_env.update(ca_env)
        if self.command_log and "PATH" not in env.container_env:  # an environment's PATH rules
            try:
                image_env = client.images.get(image).attrs.get("Config", {}).get("Env") or []
            except docker.errors.ImageNotFound:
                if not dry_run:
                    raise
                image_env = []
            extra_env["PATH"] = commandlog.path_with_shims(list(image_env))
        injection: Injection | None = None
        if uuids and self.legacy_gpus.enabled:
            if not host.spec.is_local or inventory is None:
                raise BadRequest("Driver injection (c.LegacyGPUInjection) works on the local host")
            injection = self.legacy_gpus.plan(inventory.gpus, uuids)
        network = None
        if self.network and not env.run_options.network_mode:
            network = self.network if dry_run else self._ensure_network(client)
        user, groups = self._run_as(host, env)
        return Target(
            name=name,
            owner=owner,
            host=host.name,
            image=image,
            workspace=workspace,
            mounts=tuple(mounts),
            command=tuple(self.keep_alive_command.split()),
            server_id=self.server_id,
            ledger_id=self.ledger_id,
            process=f"{socket.gethostname()}:{os.getpid()}",
            created=_now(),
            lease_id=lease_id,
            gpu_uuids=uuids,
            kernel_id=kernel_id,
            user=user,
            groups=groups,
            network=network,
            extra_env=extra_env,
            injection=injection,
            publish_ports=self.publish_ports,
        )

    def plan(self, request: StartRequest, *, caller: Caller | None = None) -> dict[str, Any]:
        """What ``start`` would create, as JSON, with nothing created, leased, pulled or
        built (``--dry-run``): the engine's create arguments and the GPUs a lease would take
        now, or on a Kubernetes host the manifests of the pod and its objects."""
        who = self.access.resolve(caller)
        env = self.environments.get(request.environment, self.root_dir)
        if request.image:
            env = replace(env, image=request.image, build=None)
        self.environments.check_image_allowed(env, self.root_dir)
        if request.host is None and env.host:
            request = replace(request, host=env.host)
        name = self._new_name(env, request, who.name)
        if request.host and self._host(request.host).spec.is_kubernetes:
            spec = self._host(request.host).spec
            pod, pod_notes = planning.pod_target(
                env,
                request,
                spec,
                name=name,
                owner=who.name,
                command=tuple(self.keep_alive_command.split()),
                server_id=self.server_id,
                created=_now(),
            )
            cluster, error = None, None
            host = self._host(request.host)
            if pod.gpus.count and host.cluster is not None:
                try:
                    cluster = host.cluster.describe()
                except (EngineUnreachable, ConfigError) as exc:
                    error = exc.message
            note = planning.cluster_note(pod.gpus, cluster, error)
            said = [*pod_notes, note] if note else pod_notes
            return planning.pod_plan(
                env, pod, self._confinement_for(env, who.name, host), spec, said
            )
        placement = self._place(env, request, who, lambda _event: None)
        host, inventory, wanted = placement.host, placement.inventory, placement.gpu_request
        client = host.client()
        with engine_errors(f"Planning {name!r}", self.log):
            self._check_free(client, name, who, host)
            image = planned_image(  # another user's image is refused here too
                client,
                env,
                user_images(self.access, self.state_dir, self.environments.allowed_images),
            )
            notes: builtins.list[str] = []
            try:
                client.images.get(image)
            except docker.errors.ImageNotFound:
                notes.append(f"{image} is not on host {host.name!r}: a start builds or pulls it")
            uuids: tuple[str, ...] = ()
            if wanted is not None and inventory is not None:
                held = self.ledger.holders(host.name)
                for uuid, claim in self._claims(host).live().items():
                    held.setdefault(uuid, Lease("", host.name, claim.holder_name, "", (uuid,), 0))
                try:
                    uuids = would_lease(host.name, wanted, leasable_units(inventory), held)
                except NoFreeGPU as err:
                    if not gpus_optional(env, request):
                        raise
                    notes.append(f"{err.message}: a start now would run without a GPU")
                    inventory = None
            target = self._target(
                client=client,
                env=env,
                name=name,
                owner=who.name,
                host=host,
                image=image,
                lease_id="",
                uuids=uuids,
                inventory=inventory,
                kernel_id=request.kernel_id,
                dry_run=True,
            )
        create = create_args(env, target, self._confinement_for(env, who.name, host))
        return planning.docker_plan(
            host=host.name, name=name, image=image, gpu_uuids=uuids, create=create, notes=notes
        )

    def _run_as(self, host: Host, env: Environment) -> tuple[str | None, tuple[int, ...]]:
        """Who a new container runs as (``uid:gid``, ``None``: the image's user) and with
        which supplementary groups. The shared service runs it as the calling user (their
        account on its machine, ``workspace_owner``), never as itself; an environment that
        asks for root gets it there only with ``allow_root``."""
        if self.workspace_owner is None or self.access.single_user:
            return (host.user_ids() if self.run_as_server_user else None), ()
        if env.remote_user in ("root", "0"):
            if not self.allow_root:
                raise Forbidden(
                    f"The environment {env.name!r} asks to run as root (remoteUser); the gpudev "
                    "service runs your containers as you unless an administrator sets "
                    "c.DevContainers.allow_root"
                )
            return None, ()
        if not host.spec.is_local or not self.run_as_server_user:
            return (host.user_ids() if self.run_as_server_user else None), ()
        uid, gid = self.workspace_owner
        name = self.access.user
        groups = tuple(sorted(set(os.getgrouplist(name, gid)) - {gid})) if name else ()
        return f"{uid}:{gid}", groups

    def _mounts(self, host: Host, env: Environment) -> tuple[builtins.list[ResolvedMount], str]:
        """The workspace and declared mounts, checked on the host they are paths of: this
        machine's Jupyter root and allowed roots, or a remote host's configured workspace and
        mount roots, resolved there. Returns them and the workspace folder ('' for none)."""
        if host.spec.is_local:
            # gpudev's own state (leases, baselines, added hosts) is in no mounted folder.
            state = (self.state_dir, self.host_pool.hosts_file)
            mounts = [self.mount_policy.workspace(self.root_dir, env.workspace_folder, state=state)]
            mounts.extend(self.mount_policy.resolve_declared(env.mounts, state=state))
            return mounts, str(self.root_dir)
        where = f"host {host.name!r}"
        trait = f"c.HostPool.hosts[{host.name!r}]['mount_roots']"
        if (
            host.origin == "added"
            and not self.run_as_server_user
            and (env.mounts or host.spec.workspace)
        ):
            # A host a user added mounts its folders only for containers running as its SSH
            # user (no more than that user can reach there anyway).
            raise MountNotAllowed(
                f"Folders of {where} (added at run time) are mounted only with "
                "c.DevContainers.run_as_server_user on"
            )
        if host.ssh is None:
            # tcp:// runs no commands: its workspace is trusted configuration, nothing else.
            if env.mounts:
                raise MountNotAllowed(
                    f"Mounts on {where} need an ssh:// host (paths are checked on the host)"
                )
            if not host.spec.workspace:
                return [], ""
            target = check_target(env.workspace_folder, "workspace folder")
            return [
                ResolvedMount(host.spec.workspace, target, read_only=False)
            ], host.spec.workspace
        paths = RemotePaths(host.run, where)
        mounts = []
        if host.spec.workspace:
            mounts.append(
                self.mount_policy.workspace(host.spec.workspace, env.workspace_folder, paths)
            )
        mounts.extend(
            self.mount_policy.resolve_declared(env.mounts, (host.spec.mount_roots, paths, trait))
        )
        return mounts, host.spec.workspace or ""

    def confinement(self) -> Confinement:
        """The administrator's confinement, resolved: what helper containers of an image
        (``changes/``: the package probe, file reads) get too (``create.helper_args``)."""
        return self._confinement()

    def _confinement(self) -> Confinement:
        """The administrator's confinement, resolved: the seccomp profile read and checked."""
        security = list(self.security_opt)
        if self.seccomp_profile == "gpudev":
            security.append(seccomp.security_opt())
        elif self.seccomp_profile:
            try:
                text = Path(self.seccomp_profile).read_text(encoding="utf-8")
                json.loads(text)
            except (OSError, ValueError) as exc:
                raise ConfigError(
                    f"c.DevContainers.seccomp_profile: {self.seccomp_profile!r} is not a "
                    f"readable JSON seccomp profile ({exc})"
                ) from None
            security.append(f"seccomp={text}")
        return Confinement(
            security_opt=tuple(security),
            cap_drop=tuple(self.cap_drop),
            pids_limit=self.pids_limit,
            memory_bytes=self._admin_memory(),
            nano_cpus=round(self.cpu_limit * 1e9) if self.cpu_limit > 0 else None,
        )

    def _confinement_for(self, env: Environment, owner: str, host: Host) -> Confinement:
        """The confinement of a new container of ``owner``'s on ``host``: the administrator's,
        with the memory and CPUs ``owner``'s limits give ``env`` (``c.UserLimits``; no
        default on a Kubernetes host); ``LimitReached`` when it asks for more than that."""
        confinement = self._confinement()
        limits = self.limits.for_user(owner, shared=not self.access.single_user)
        cpus = None if host.spec.is_kubernetes else (lambda: self._host_cpus(host))
        memory, nano_cpus = container_resources(limits, env, Whose(owner, owner), cpus)
        return replace(
            confinement,
            memory_bytes=tightest(confinement.memory_bytes, memory),
            nano_cpus=tightest(confinement.nano_cpus, nano_cpus),
        )

    def _host_cpus(self, host: Host) -> int:
        """How many CPUs ``host``'s engine has (0: it does not say)."""
        with engine_errors(f"Asking host {host.name!r} for its CPUs", self.log):
            return int(host.client().info().get("NCPU") or 0)

    def _admin_memory(self) -> int | None:
        if not self.memory_limit:
            return None
        try:
            return parse_docker_size(self.memory_limit)
        except ValueError as exc:
            raise ConfigError(f"c.DevContainers.memory_limit: {exc}") from None

    # ------------------------------------------------------------------------------------------
    # Stop, remove, list, logs
    # ------------------------------------------------------------------------------------------

    def stop(
        self, name: str, host: str | None = None, *, caller: Caller | None = None
    ) -> DevContainerInfo:
        """Stop a container; its lease is released only once it has really stopped."""
        found_host, container = self.locate(name, host, caller=caller)
        if isinstance(container, dict):
            raise Conflict(
                f"{user_name(name)!r} is a pod: a pod is not stopped and kept. Removing it "
                "(rm --force) deletes it and what changed outside its workspace claim, and "
                "frees its GPUs; the workspace claim is kept"
            )
        self._stop(found_host, container)
        return self.describe(found_host, container)

    def _stop(self, host: Host, container: Container) -> None:
        name = container.labels.get(L_NAME, user_name(container.name or ""))
        self._close_forwards(host, container)  # while it still has its address
        with engine_errors(f"Stopping {user_name(name)!r}", self.log):
            container.stop(timeout=self.stop_timeout)
            container.wait(condition="not-running", timeout=self.stop_timeout + 30)
            container.reload()
        if container.status == "running":
            raise EngineError(f"{user_name(name)!r} is still running after stop; lease kept")
        self._release_for(host, container)

    def _guard_ports(self, host: Host, *, unless_hooked: bool = False) -> None:
        """Write the firewall in front of the dev containers' ports (``c.DevContainers.
        port_guard``, ``engine/firewall.py``): root and this server's account reach them, and
        each running container's owner (their local account) reaches theirs: the shared
        service's users' servers connect to their own kernels. Written from the engine's
        containers, whichever process writes it (the service, a server, the command line).
        ``unless_hooked``: only if this process has not hooked the chain yet (before a start:
        once hooked, a new container is closed until the write after its start)."""
        if not (self.port_guard and self.network and host.spec.is_local):
            return
        guard = firewall.port_guard(self.log)
        if (unless_hooked and guard.hooked) or not guard.available():
            return
        try:
            client = host.client()
            config = client.networks.get(self.network).attrs.get("IPAM", {}).get("Config") or []
            subnets = [str(c["Subnet"]) for c in config if c.get("Subnet")]
            per_address: dict[str, set[int]] = {}
            running = client.containers.list(filters={"label": L_MANAGED, "network": self.network})
            for one in running:
                networks = one.attrs.get("NetworkSettings", {}).get("Networks") or {}
                address = (networks.get(self.network) or {}).get("IPAddress")
                uid = _uid_of(one.labels.get(L_OWNER, ""))
                if address and uid is not None:
                    per_address.setdefault(str(address), set()).add(uid)
            guard.write(subnets, {0, os.geteuid()}, per_address)
        except _GUARD_FAILURES:
            self.log.exception("gpudev: the firewall of the dev containers' ports not written")

    def _release_for(self, host: Host, container: Container) -> None:
        # By container, not by the label's lease id: a resumed container holds a newer lease.
        self._guard_ports(host)  # its address is no one's way in any more
        self.ledger.release_container(host.name, container.labels.get(L_NAME, ""))
        if labelled_gpus(container.labels):
            self._claims(host).release(str(container.id))

    def remove(
        self,
        name: str,
        host: str | None = None,
        force: bool = False,
        *,
        caller: Caller | None = None,
        keep: Callable[[], str | None] | None = None,
    ) -> None:
        """Remove a container; one with uncommitted changes needs ``force``.

        A running container is stopped first (its lease freed) and only then checked for
        changes, so nothing written while it stops is lost without ``force``. A pod is
        checked by listing its files, which takes a while: ``keep``, asked right before it is
        deleted, may then give a reason to keep it after all (a ``Conflict``).
        """
        found_host, container = self.locate(name, host, caller=caller)
        if isinstance(container, dict):
            self._remove_pod(name, found_host, container, force=force, keep=keep)
            return
        if container.status not in STOPPED:
            self._stop(found_host, container)
        # Changes a commit left out (``held``) are uncommitted too, files or not.
        with engine_errors(f"Reading the changes of {user_name(name)!r}", self.log):
            changed = self._uncommitted_changes(found_host, container)
        if changed and not force:
            raise Conflict(
                f"{user_name(name)!r} has {len(changed)} uncommitted change(s) (e.g. "
                f"{', '.join(changed[:3])}): commit them first (changes a commit left out "
                "count too), or remove it with force",
                details={"changes": changed[:50]},
            )
        with engine_errors(f"Removing {user_name(name)!r}", self.log):
            container.remove(force=True)
        self._release_for(found_host, container)
        if self.changes is not None:
            self.changes.forget(str(container.id))
        self.ledger.set_pinned(
            found_host.name, container.labels.get(L_NAME, user_name(name)), False
        )

    def _remove_pod(
        self,
        name: str,
        host: Host,
        pod: dict[str, Any],
        *,
        force: bool,
        keep: Callable[[], str | None] | None = None,
    ) -> None:
        """Delete a dev container's pod (its Service and GPU claim too; the workspace claim
        is kept). Without ``force`` only when nothing outside its workspace claim changed
        since it started or was last committed: that is lost with the pod."""
        pods = self.pods(host)
        uid = pod_uid(pod)
        if not force:
            changed = self._pod_uncommitted(name, host, pod, pods)
            again = pods.find(user_name(name))
            if again is None or pod_uid(again) != uid:
                raise Conflict(f"The pod of {user_name(name)!r} changed meanwhile: try again")
            if changed:
                shown = ", ".join(clean(path) for path in changed[:3])
                raise Conflict(
                    f"{user_name(name)!r} has {len(changed)} uncommitted change(s) outside its "
                    f"workspace claim (e.g. {shown}) that are lost with its pod: commit them "
                    "first, or remove it with force (the workspace claim is kept)",
                    details={"changes": changed[:50]},
                )
        reason = keep() if keep is not None else None
        if reason:
            raise Conflict(reason)
        for note in pods.delete(pod):
            self.log.info("gpudev: %s", note)
        self.close_pod_forwards(host.name, str(pod["metadata"]["name"]))
        self.pod_listings.forget(host.name, uid)
        if self.changes is not None:
            with contextlib.suppress(GPUDevError):  # an odd uid has no baseline
                self.changes.forget_pod(uid)
        self.ledger.set_pinned(host.name, annotation(pod, A_NAME) or user_name(name), False)

    def _pod_uncommitted(
        self, name: str, host: Host, pod: dict[str, Any], pods: Pods
    ) -> builtins.list[str]:
        """What deleting a pod would lose (see ``self.changes``; without change tracking:
        every change since it started)."""
        if self.changes is not None:
            try:
                return self.changes.uncommitted_pod(host, pod)
            except Conflict:
                pass  # not listed when it started: said below
        before = self.pod_listings.load(host.name, pod_uid(pod))
        if before is None:
            raise Conflict(
                f"{user_name(name)!r} runs in a pod on host {host.name!r} whose files were "
                "not listed when it started, so gpudev cannot tell what would be lost: "
                "remove it with force (the workspace claim is kept)"
            )
        changed, problems = pod_changes(before, pods.listing(str(pod["metadata"]["name"])), pod)
        for problem in problems[:5]:
            self.log.info("gpudev: listing of %s: %s", user_name(name), clean(problem))
        return changed

    def _uncommitted_changes(self, host: Host, container: Container) -> builtins.list[str]:
        """What removing ``container`` would lose (see ``self.changes``)."""
        if self.changes is not None:
            name = container.labels.get(L_NAME, user_name(container.name or ""))
            return self.changes.uncommitted(name, host, container)
        return sorted(str(d["Path"]) for d in container.diff() or [])

    def pin(
        self,
        name: str,
        host: str | None = None,
        pinned: bool = True,
        *,
        caller: Caller | None = None,
    ) -> DevContainerInfo:
        """Pin a shared dev container: it keeps running (and holding its GPUs) after its last
        kernel ends, until stopped (a pod: removed) by hand. ``pinned=False`` unpins it."""
        who = self.access.resolve(caller)
        found_host, found = self.locate(name, host, caller=who)
        if pod_kernel(found) if isinstance(found, dict) else found.labels.get(L_KERNEL):
            raise BadRequest(
                f"{user_name(name)!r} belongs to one kernel and ends with it; pin a dev "
                "container that kernels share instead"
            )
        if isinstance(found, dict):
            owner = annotation(found, A_OWNER)
            pod = annotation(found, A_NAME) or user_name(name)
            self._set_pinned(found_host, pod, pinned, who, owner)
            return self._pod_info(found_host, found)
        owner = found.labels.get(L_OWNER, "")
        self._set_pinned(found_host, found.labels.get(L_NAME, user_name(name)), pinned, who, owner)
        return self.describe(found_host, found)

    def _set_pinned(self, host: Host, name: str, pinned: bool, who: Caller, owner: str) -> None:
        """Pin (``pinned``) or unpin ``name``; a new pin only within ``owner``'s limit."""
        if not pinned or name in self.ledger.pinned(host.name):
            self.ledger.set_pinned(host.name, name, pinned)
            return
        with self._room(who, owner, pinning=name):
            self.ledger.set_pinned(host.name, name, True)

    # ------------------------------------------------------------------------------------------
    # Limits (``c.UserLimits``)
    # ------------------------------------------------------------------------------------------

    def _check_room(
        self,
        who: Caller,
        owner: str,
        *,
        running: str | bool = False,
        pinning: str = "",
        gpus: int = 0,
    ) -> None:
        """Refuse (``LimitReached``) one more running (``running``: a name, the container
        starting again, not counted) or pinned (``pinning``: its name) container of
        ``owner``, or ``gpus`` more GPUs, beyond their limits (``c.UserLimits``)."""
        limits = self.limits.for_user(owner, shared=not self.access.single_user)
        whose = Whose(owner, who.name)
        if (running and limits.running.value) or (pinning and limits.pinned.value):
            held = holdings(self, owner)
            if running:
                others = [name for name in held.running if name != running]
                check_count(
                    limits.running, others, whose, what="running dev container", undo="stop"
                )
            if pinning:
                others = [name for name in held.pinned if name != pinning]
                check_count(limits.pinned, others, whose, what="pinned dev container", undo="unpin")
        if gpus and limits.gpus.value:
            leases = [lease for lease in self.ledger.active() if lease.owner == owner]
            check_gpus(limits.gpus, leases, gpus, whose)

    @contextlib.contextmanager
    def _room(
        self, who: Caller, owner: str, *, running: str | bool = False, pinning: str = ""
    ) -> Iterator[None]:
        """Count ``owner``'s containers (``_check_room``) and start, resume or pin one under
        one lock per user, so that no other one passes the same count (only where such a
        limit is set); their GPUs are counted in the ledger's transaction (``_admit_gpus``)."""
        limits = self.limits.for_user(owner, shared=not self.access.single_user)
        if not (running and limits.running.value) and not (pinning and limits.pinned.value):
            yield
            return
        with owner_lock(self.ledger_id, owner):
            self._check_room(who, owner, running=running, pinning=pinning)
            yield

    def _admit_gpus(
        self, who: Caller, owner: str, wanted: int
    ) -> Callable[[builtins.list[Lease]], None] | None:
        """The ledger's check of ``owner``'s GPU limit for a lease of ``wanted`` more."""
        limits = self.limits.for_user(owner, shared=not self.access.single_user)
        return admit_gpus(limits.gpus, wanted, Whose(owner, who.name))

    # ------------------------------------------------------------------------------------------
    # Web ports (TensorBoard and the like) served through the authenticated proxy
    # ------------------------------------------------------------------------------------------

    def _close_forwards(self, host: Host, container: Container) -> None:
        """A stopping container's SSH forwards (kernels, web ports) go with it."""
        if host.tunnels is None:
            return
        networks = container.attrs.get("NetworkSettings", {}).get("Networks") or {}
        for network in networks.values():
            if network.get("IPAddress"):
                host.unreach(str(network["IPAddress"]))

    # ------------------------------------------------------------------------------------------
    # Reconcile
    # ------------------------------------------------------------------------------------------

    def stop_orphan_kernels(self) -> builtins.list[str]:
        """Stop the kernel containers a dead server left running, so they free their GPUs.

        A container dedicated to a kernel is an orphan when it was made through this same
        ledger by a server process of this machine that no longer runs (after a crash or a
        SIGKILL its kernels cannot be reached again). Unchanged ones are removed; ones with
        changes are kept, stopped, until committed or removed.
        """
        machine = socket.gethostname()
        stopped: builtins.list[str] = []
        for host in self._hosts(None):
            if host.spec.is_kubernetes:
                stopped += self._delete_orphan_kernel_pods(host, machine)
                continue
            try:
                orphans = orphan_kernel_containers(host, self.ledger_id, machine)
            except (GPUDevError, docker.errors.DockerException) as exc:
                self.log.warning("gpudev: orphan kernels on %s not checked: %r", host.name, exc)
                continue
            for container in orphans:
                name = container.labels.get(L_NAME, user_name(container.name or ""))
                try:
                    self.remove(name, host.name)
                except Conflict:
                    pass  # stopped (lease freed) and kept: it has changes
                except GPUDevError as err:
                    self.log.warning("gpudev: orphan kernel container %s: %s", name, err.message)
                    continue
                self.log.info("gpudev: stopped %s, left by a server that is gone", name)
                stopped.append(name)
        return stopped

    def _delete_orphan_kernel_pods(self, host: Host, machine: str) -> builtins.list[str]:
        """Delete the kernels' own pods a dead server process of this machine left on a
        cluster (their GPUs are the scheduler's until then); ones whose files outside the
        workspace changed keep running until committed or removed (a pod is never stopped
        and kept)."""
        try:
            pods = self.pods(host).managed()
        except GPUDevError as err:
            self.log.warning("gpudev: orphan kernels on %s not checked: %s", host.name, err)
            return []
        deleted: builtins.list[str] = []
        for pod in pods:
            where, _, pid = annotation(pod, A_PROCESS).partition(":")
            if not pod_kernel(pod) or where != machine or not pid.isdigit():
                continue
            if annotation(pod, A_LEDGER) != self.ledger_id:
                continue  # another server's (another user's) kernel pod
            if process_alive(int(pid)):
                continue
            name = annotation(pod, A_NAME)
            try:
                self.remove(name, host.name)
            except Conflict as err:
                self.log.warning("gpudev: orphan kernel pod %s kept: %s", name, err.message)
                continue
            except GPUDevError as err:
                self.log.warning("gpudev: orphan kernel pod %s: %s", name, err.message)
                continue
            self.log.info("gpudev: deleted %s, left by a server that is gone", name)
            deleted.append(name)
        return deleted

    def reconcile(self) -> dict[str, Any]:
        """Make the ledger agree with the containers that exist (after a crash, at start-up)."""
        reports: dict[str, Any] = {}
        for host_name in self.host_pool.names():
            try:
                report, _ = self._reconcile_host(self.host_pool.get(host_name))
            except GPUDevError as err:
                reports[host_name] = {"skipped": err.message}
                continue
            reports[host_name] = report
            self.log.info("gpudev: reconciled leases on %s: %s", host_name, report)
        return reports

    def _reconcile_host(self, host: Host) -> tuple[dict[str, Any], set[str]]:
        """Reconcile one host (see ``reconcile.reconcile_host``)."""
        return reconcile_host(
            host,
            ledger=self.ledger,
            ledger_id=self.ledger_id,
            claims=self._claims(host),
            grace=self.reconcile_grace,
            log=self.log,
        )
