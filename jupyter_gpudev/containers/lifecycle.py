"""Dev containers' lifecycle (``DevContainers``): start, resume, stop, remove, pin, plan, and
reconcile with the lease ledger; finding and reading them is its base's (``lookup.py``).

Invariants kept here, whatever fails:
- no container holds GPUs without an active lease, and no lease outlives its container;
- a lease is released only after its container has really stopped;
- a stopped container is kept (its changes are not lost) until it is removed, and removing one
  with changes needs ``force``;
- nothing of the server's own environment reaches a container: only the environment's
  ``containerEnv``, the NVIDIA variables and (opt-in) the CA bundle variables.

What differs between a Docker engine and a Kubernetes cluster is each host's backend
(``backend.py``; ``backend_type`` below looks it up by the host's kind in ``BACKENDS``): a Docker
engine's containers (``docker_backend.py``; their start is this module's own: placed, leased and
claimed) or pods (``pod_lifecycle.py``). Each concern it wires in has a module of its own: where
a start goes (``placement.py``), the new container's name, target and confinement
(``targets.py``), its GPUs leased and claimed around its creation (``leasing/holding.py``),
per-user limits (``limits.py``), the ports' firewall (``ports.py``), reconciliation and the
orphan sweep (``reconcile.py``), the options (``options.py``).

Every method here blocks (Docker SDK calls): the server runs them in worker threads.
"""

from __future__ import annotations

import builtins
import contextlib
import functools
import os
from collections.abc import Callable, Collection, Iterable, Iterator
from dataclasses import replace
from typing import Any

import docker
import docker.errors
from docker.models.containers import Container
from traitlets import Instance, default

from ..access import Caller
from ..engine import Host, Inventory, LegacyGPUInjection, Progress, Registries
from ..environments import Environment, EnvironmentManager, MountNotAllowed, MountPolicy
from ..environments.mounts import engine_binds
from ..errors import (
    ENGINE_FAILURES,
    BadRequest,
    EngineError,
    GPUDevError,
    engine_error,
    engine_errors,
)
from ..labels import L_ENV, L_NAME, L_OWNER, L_WORKSPACE, labelled_gpus
from ..leasing import Admit, GPUHolding, Leasable, Lease
from . import options
from .backend import DevContainerBackend, Starting
from .commands import at_restart, has_lifecycle_commands, run_lifecycle_commands
from .create import Confinement
from .docker_backend import DockerBackend
from .images import ensure_image
from .limits import Limits, UserLimits, Whose, admit_gpus, check_room, room
from .lookup import ContainerLookup
from .model import (
    DevContainerInfo,
    FirstProcess,
    StartRequest,
    docker_name,
    given_name,
    user_name,
)
from .namespace import user_images
from .placement import Placement, check_cuda, gpus_optional, place
from .pod_lifecycle import PodBackend
from .ports import guard_ports
from .reconcile import reconcile_host, stop_orphan_kernels
from .targets import (
    Targets,
    admin_confinement,
    attach_input,
    check_free,
    confinement_for,
    new_name,
)

#: What keeps a container's input from being attached (docker-py's socket of another shape).
_ATTACH_FAILURES: tuple[type[Exception], ...] = (*ENGINE_FAILURES, AttributeError, OSError)

#: Each kind of host's ``DevContainerBackend``, by its backend's kind (``Host.backend.kind``):
#: a Docker engine's containers, pods on a Kubernetes host.
BACKENDS: dict[str, type[DockerBackend] | type[PodBackend]] = {
    "docker": DockerBackend,
    "kubernetes": PodBackend,
}
#: Seconds (beyond the stop timeout) a failed start keeps trying to remove its container while
#: the engine does not answer (one restarting), before it leaves it to the next reconcile.
UNDO_PATIENCE = 30.0
#: The kind whose start and plan a request that names no host gets: placement chooses among
#: the hosts of that kind (it passes over the others).
PLACED_KIND = "docker"


def backend_type(host: Host | None) -> type[DockerBackend] | type[PodBackend]:
    """Which ``DevContainerBackend`` the dev containers of ``host`` have (``BACKENDS``);
    ``None`` (a start or plan that names no host): ``PLACED_KIND``'s."""
    return BACKENDS[host.backend.kind if host is not None else PLACED_KIND]


class KernelKept(GPUDevError):
    """An orphan sweep's container left alone: its kernel was reached again (``keep``)."""

    status = 409
    code = "conflict"


class DevContainers(ContainerLookup):
    """Dev containers on the hosts of a ``HostPool``. Configure with ``c.DevContainers.*``."""

    # The options (``c.DevContainers.*``), their help texts in ``options.py``.
    lifecycle_timeout = options.LIFECYCLE_TIMEOUT
    stop_timeout = options.STOP_TIMEOUT
    run_as_server_user = options.RUN_AS_SERVER_USER
    port_guard = options.PORT_GUARD
    allow_root = options.ALLOW_ROOT
    publish_ports = options.PUBLISH_PORTS
    reconcile_grace = options.RECONCILE_GRACE
    linger = options.LINGER
    command_log = options.COMMAND_LOG
    keep_alive_command = options.KEEP_ALIVE_COMMAND
    security_opt = options.SECURITY_OPT
    seccomp_profile = options.SECCOMP_PROFILE
    cap_drop = options.CAP_DROP
    pids_limit = options.PIDS_LIMIT
    memory_limit = options.MEMORY_LIMIT
    cpu_limit = options.CPU_LIMIT
    log_max_size = options.LOG_MAX_SIZE
    log_max_files = options.LOG_MAX_FILES
    build_timeout = options.BUILD_TIMEOUT

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
        manager = EnvironmentManager(parent=self)

        def user_notes(env: Environment) -> list[str]:  # this configuration's, when listed
            return self._targets.user_notes(env)

        manager.user_notes = user_notes
        return manager

    @default("mount_policy")
    def _default_mount_policy(self) -> MountPolicy:
        return MountPolicy(parent=self)

    @default("limits")
    def _default_limits(self) -> UserLimits:
        return UserLimits(parent=self)

    def backend(self, host: Host) -> DevContainerBackend:
        """What the dev containers of ``host`` are (``backend_type``)."""
        return backend_type(host)(self, host)

    # -- Start, resume, plan -----------------------------------------------------------------------

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
        env, request = self._environment(request)
        named = self._host(request.host) if request.host else None
        return backend_type(named).start(self, named, self._starting(env, request, who, say))

    def start_on_engine(self, starting: Starting) -> DevContainerInfo:
        """``start`` on a Docker engine (``DockerBackend.start``): placed, its GPUs leased by
        UUID and claimed on the engine around its creation."""
        env, request, who, say = starting.env, starting.request, starting.who, starting.say
        owner = who.name
        placement = self._place(env, request, who, say)
        host, inventory = placement.host, placement.inventory
        # Refused before an image is pulled or built; counted again below, under the lock.
        wanted = None if gpus_optional(env, request) else placement.gpu_request
        check_room(
            self,
            self._limits_of(owner),
            Whose(owner, who.name),
            running=True,
            gpus=wanted.wanted if wanted else 0,
        )
        starting.confinement(host)
        client = host.client()
        name = starting.name()
        with engine_errors(f"Starting {given_name(name)!r}", self.log):
            check_free(self, client, name, who, host)
        trust = self.mount_policy.build_trust()
        mine = user_images(self.access, self.state_dir, self.environments.allowed_images)
        image, image_env = ensure_image(
            client,
            env,
            self.registries,
            say,
            self.log,
            trust=trust,
            mine=mine,
            owner=self.workspace_owner,
            timeout=self.build_timeout or None,
        )
        if inventory is not None:
            check_cuda(image, image_env, host.name, inventory)
        notes: list[str] = list(env.notes)
        for note in env.notes:  # what of its file gpudev does not do, said as it starts
            say({"stage": "environment", "message": note})
        holding, gpus = self._holding, placement.gpu_request
        first = self._first_process(env, request, client, image)
        create = functools.partial(
            self._targets.create,
            host=host,
            env=env,
            name=name,
            owner=owner,
            image=image,
            kernel_id=request.kernel_id,
            confinement=lambda: starting.confinement(host),
            say=say,
            first=first,
        )
        with starting.room():  # until it runs, counted by the next
            container, lease = holding.hold(  # nothing left behind on failure
                host,
                name,
                owner,
                wanted=gpus,
                inventory=inventory,
                optional=gpus_optional(env, request),
                leasable=lambda found, taken: self._leasable_now(host, found, who, taken),
                create=create,
                admit=None if gpus is None else self._admit_gpus(who, owner, gpus.wanted),
                shown_to=None if who.admin else owner,
                notes=notes,
                say=say,
            )
            # A pin left by a container of that name removed behind gpudev's back is not
            # this one's.
            self.ledger.set_pinned(host.name, name, False)
            try:
                say({"stage": "start", "message": f"starting {docker_name(name)}"})
                self._guard_ports(host, unless_hooked=True)  # closed before it runs
                self._start_and_check(name, container, first, host)
                self._guard_ports(host)
            except BaseException as exc:
                holding.undo(container, lease, host)
                if isinstance(exc, GPUDevError):
                    raise
                if isinstance(exc, ENGINE_FAILURES):
                    raise engine_error(f"Starting {name!r}", exc, self.log) from exc
                raise
        try:
            warnings = (
                *notes,
                *run_lifecycle_commands(
                    container, env, say, timeout=starting.timeout, log=self.log
                ),
            )
            self._check_still_running(name, container)
        except BaseException as exc:  # the engine restarted (or the container died) meanwhile
            holding.undo(container, lease, host, patience=self.stop_timeout + UNDO_PATIENCE)
            if isinstance(exc, GPUDevError):
                raise
            if isinstance(exc, ENGINE_FAILURES):
                raise engine_error(
                    f"Running the lifecycle commands (postCreateCommand, postStartCommand) of "
                    f"{given_name(name)!r}",
                    exc,
                    self.log,
                ) from exc
            raise
        if has_lifecycle_commands(env):
            warnings += self._record_baseline(container, say)
        say({"stage": "ready", "message": f"{given_name(name)} is running"})
        return self.describe(host, container, warnings=warnings)

    def _starting(
        self, env: Environment, request: StartRequest, who: Caller, say: Progress
    ) -> Starting:
        """A start of ``env`` as ``request`` asks, by ``who``, as backends take it."""
        owner = who.name
        return Starting(
            env,
            request,
            who,
            say,
            name=lambda: self._new_name(env, request, owner),
            command=tuple(self.keep_alive_command.split()),
            confinement=lambda host: self._confinement_for(env, owner, host),
            room=lambda: self._room(who, owner, running=True),
            timeout=self.lifecycle_timeout,
        )

    def _environment(self, request: StartRequest) -> tuple[Environment, StartRequest]:
        """The environment a start asks for (its image replaced by the request's), allowed;
        and the request, going to the environment's own host unless it names one."""
        env = self.environments.get(request.environment, self.root_dir)
        if request.image:  # a snapshot of one of its containers: its features are in it
            env = replace(env, image=request.image, build=None, features=())
        self.environments.check_image_allowed(env, self.root_dir)
        if request.host is None and env.host:
            request = replace(request, host=env.host)
        return env, request

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
    def _check_still_running(name: str, container: Container) -> None:
        """After its lifecycle commands: one that no longer runs (the engine restarted, its
        command exited) is a failed start, not a running container."""
        container.reload()
        if container.status != "running":
            raise EngineError(
                f"{given_name(name)!r} stopped while its lifecycle commands (postCreateCommand, "
                "postStartCommand) ran (was the Docker engine restarted?); it was removed"
            )

    def _first_process(
        self, env: Environment, request: StartRequest, client: docker.DockerClient, image: str
    ) -> FirstProcess | None:
        """``request``'s first process where this start can give it its input: none where
        lifecycle commands run first (they run before any kernel), where kernels run as
        another user than the container's (``exec_user``), over SSH, or where the image has
        an ENTRYPOINT (it may read the input, or run the command late or never)."""
        first = request.first_process
        if first is None or has_lifecycle_commands(env) or self._targets.exec_user(env):
            return None
        if str(client.api.base_url).startswith("http+docker://ssh"):
            return None
        config = client.images.get(image).attrs.get("Config") or {}
        return None if config.get("Entrypoint") else first

    def _start_and_check(
        self,
        name: str,
        container: Container,
        first: FirstProcess | None = None,
        host: Host | None = None,
    ) -> None:
        """Start the container; one that exits at once is an error, with its last output.
        With ``first``, its input is attached before and ``first``'s instructions written to it
        after; where it cannot be attached, its command waits on it and only keeps the
        container up (the kernel is then exec'd, as in any container). A container made with
        a first process that starts again (``resume``) is told nothing: its command only keeps
        it up."""
        given = None
        if first is not None or (container.attrs.get("Config") or {}).get("OpenStdin"):
            try:
                given = attach_input(container)
            except _ATTACH_FAILURES as exc:
                self.log.info("gpudev: %s: no input to attach (%r): no first process", name, exc)
        try:
            container.start()
        except BaseException:
            if given is not None:
                given.close()
            raise
        if given is not None:
            data = b""
            try:
                data = first.instructions(host, container) if first is not None else b""
            finally:
                given.deliver(data)
            if data and first is not None:
                first.delivered()
        if first is not None:  # while its first process starts, not before
            self._targets.put_wrappers(container)
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
        self._check_mounts_again(found_host, container, owner, user)
        with self._room(who, owner, running=user):
            if uuids:  # the GPUs it was created with, leased and claimed again
                lease = self._holding.hold_again(
                    found_host,
                    container,
                    name=user,
                    owner=owner,
                    leasable=self._leasable_now(found_host, found_host.gpus(), who),
                    admit=self._admit_gpus(who, owner, len(uuids)),
                    shown_to=None if who.admin else who.name,
                )
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

    def _check_mounts_again(self, host: Host, container: Container, owner: str, name: str) -> None:
        """In the shared service, a stopped container's declared mounts checked again with its
        owner's rights before the engine starts it again (it finds each bind mount's source by
        its path again, as root, following links): ``MountNotAllowed`` naming the mount and
        why, nothing started. The start's check (``MountPolicy.check_again``)."""
        if self.mount_policy.caller is None or not host.spec.is_local:
            return
        workspace = container.labels.get(L_WORKSPACE, "")
        skip = (workspace, os.path.realpath(workspace)) if workspace else ()
        state = (self.state_dir, self.host_pool.hosts_file)
        mounts = engine_binds(container.attrs.get("HostConfig") or {})
        try:
            self.mount_policy.check_again(owner, mounts, skip=skip, state=state)
        except MountNotAllowed as exc:
            raise MountNotAllowed(
                f"{name!r} was not started again: {exc.message}", details=exc.details
            ) from None

    def _post_start(self, container: Container, say: Progress) -> tuple[str, ...]:
        """postStartCommand and postAttachCommand run at every start (onCreateCommand,
        updateContentCommand and postCreateCommand only at the first)."""
        try:
            env = self.environments.get(container.labels.get(L_ENV, ""), self.root_dir)
        except GPUDevError as err:
            return (f"postStartCommand not run: {err.message}",)
        return run_lifecycle_commands(
            container,
            at_restart(env),
            say,
            timeout=self.lifecycle_timeout,
            log=self.log,
        )

    def plan(self, request: StartRequest, *, caller: Caller | None = None) -> dict[str, Any]:
        """What ``start`` would create, as JSON, with nothing created, leased, pulled or
        built (``--dry-run``): the engine's create arguments and the GPUs a lease would take
        now, or on a Kubernetes host the manifests of the pod and its objects."""
        who = self.access.resolve(caller)
        env, request = self._environment(request)
        name = self._new_name(env, request, who.name)
        named = self._host(request.host) if request.host else None
        starting = replace(
            self._starting(env, request, who, lambda _event: None), name=lambda: name
        )
        return backend_type(named).plan(self, named, starting)

    def plan_on_engine(self, starting: Starting) -> dict[str, Any]:
        """``plan`` on a Docker engine (``DockerBackend.plan``)."""
        env, request, who = starting.env, starting.request, starting.who
        name = starting.name()
        placement = self._place(env, request, who, starting.say)
        return self._targets.plan(
            placement,
            env,
            request,
            name=name,
            who=who,
            holding=self._holding,
            mine=user_images(self.access, self.state_dir, self.environments.allowed_images),
            confinement=lambda: starting.confinement(placement.host),
        )

    def confinement(self) -> Confinement:
        """The administrator's confinement, resolved (the seccomp profile read and checked):
        what helper containers of an image (``changes/``: the package probe, file reads) get
        too (``create.helper_args``)."""
        return admin_confinement(
            security_opt=self.security_opt,
            seccomp_profile=self.seccomp_profile,
            cap_drop=self.cap_drop,
            pids_limit=self.pids_limit,
            memory_limit=self.memory_limit,
            cpu_limit=self.cpu_limit,
        )

    # -- Stop, remove, pin -------------------------------------------------------------------------

    def stop(
        self, name: str, host: str | None = None, *, caller: Caller | None = None
    ) -> DevContainerInfo:
        """Stop a container; its lease is released only once it has really stopped."""
        located = self.locate(name, host, caller=caller)
        located.stop(name, timeout=self.stop_timeout, release=self._release_for)
        return located.report()

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
        self.locate(name, host, caller=caller).remove(
            name, force=force, keep=keep, timeout=self.stop_timeout, release=self._release_for
        )

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
        located = self.locate(name, host, caller=who)
        if located.kernel_id():
            raise BadRequest(
                f"{user_name(name)!r} belongs to one kernel and ends with it; pin a dev "
                "container that kernels share instead"
            )
        owner = located.owner()
        self._set_pinned(located.host, located.key(name), pinned, who, owner)
        return located.report()

    def _set_pinned(self, host: Host, name: str, pinned: bool, who: Caller, owner: str) -> None:
        """Pin (``pinned``) or unpin ``name``; a new pin only within ``owner``'s limit."""
        if not pinned or name in self.ledger.pinned(host.name):
            self.ledger.set_pinned(host.name, name, pinned)
            return
        with self._room(who, owner, pinning=name):
            self.ledger.set_pinned(host.name, name, True)

    # -- Reconcile ---------------------------------------------------------------------------------

    def stop_orphan_kernels(self, keep: Collection[tuple[str, str]] = ()) -> builtins.list[str]:
        """Stop the kernel containers (delete the kernel pods) a dead server left running, so
        they free their GPUs (``reconcile.stop_orphan_kernels``); ones with changes are kept,
        stopped (a pod: running), until committed or removed. ``keep``: ``(host, container)``
        of those left alone (the shared service's kernels it reached again after a restart:
        the process that made them is gone, they are not)."""
        kept = frozenset(keep)

        def remove(name: str, host: str) -> None:
            if (host, name) in kept:
                raise KernelKept("kept: its kernel was reached again after a restart")
            self.remove(name, host)

        return stop_orphan_kernels(
            self._hosts(None), backend=self.backend, ledger_id=self.ledger_id, remove=remove
        )

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
            claims=self._holding.claims(host),
            grace=self.reconcile_grace,
            log=self.log,
        )

    # -- The concerns wired in, each in a module of its own ----------------------------------------

    def _new_name(self, env: Environment, request: StartRequest, owner: str) -> str:
        """The key of a new container of ``owner``'s (``targets.new_name``)."""
        return new_name(env, request, owner, shared=not self.access.single_user)

    def _place(
        self, env: Environment, request: StartRequest, who: Caller, say: Progress
    ) -> Placement:
        """Where a start goes (``placement.place``), GPUs held counted as ``who`` sees them."""
        return place(
            self.host_pool,
            env,
            request,
            say,
            leasable=lambda host, inventory: self._leasable_now(host, inventory, who),
            passed_over=lambda host: self.backend(host).passed_over(),
        )

    @property
    def _targets(self) -> Targets:
        """Where new containers go, resolved from this configuration (``targets.py``)."""
        return Targets(
            self,
            mount_policy=self.mount_policy,
            legacy_gpus=self.legacy_gpus,
            command=tuple(self.keep_alive_command.split()),
            command_log=self.command_log,
            publish_ports=self.publish_ports,
            run_as_server_user=self.run_as_server_user,
            allow_root=self.allow_root,
        )

    def _confinement_for(self, env: Environment, owner: str, host: Host) -> Confinement:
        """The confinement of a new container of ``owner``'s on ``host``: the administrator's,
        within ``owner``'s limits (``c.UserLimits``, ``targets.confinement_for``)."""
        confinement = self.confinement()
        limits = self._limits_of(owner)
        cpus = self.backend(host).host_cpus()
        return confinement_for(confinement, limits, env=env, owner=owner, cpus=cpus)

    @property
    def _holding(self) -> GPUHolding:
        """This ledger's leases and the engines' GPU claims (``leasing/holding.py``)."""
        return GPUHolding(
            self.ledger, ledger_id=self.ledger_id, grace=self.reconcile_grace, log=self.log
        )

    def _leasable_now(
        self, host: Host, inventory: Inventory, who: Caller, taken: Iterable[str] = ()
    ) -> Leasable:
        """The host's units and who holds which, as ``who`` may see them (``GPUHolding``'s
        ``leasable``), once the leases of containers that died and stale claims are freed."""
        _, labelled = self._reconcile_host(host)
        viewer = None if who.admin else who.name
        return self._holding.leasable(
            host, inventory, labelled=labelled, taken=taken, viewer=viewer
        )

    def _release_for(self, host: Host, container: Container) -> None:
        """Free the lease and claims of a container that stopped or is gone, its address no
        one's way in any more (``_guard_ports``)."""
        self._guard_ports(host)
        self._holding.release(host, container)

    def _guard_ports(self, host: Host, *, unless_hooked: bool = False) -> None:
        """Write the firewall in front of the dev containers' ports of a local host
        (``c.DevContainers.port_guard``; ``ports.guard_ports`` says who reaches them)."""
        if self.port_guard and self.network and host.spec.is_local:
            guard_ports(host, self.network, self.log, unless_hooked=unless_hooked)

    def _limits_of(self, owner: str) -> Limits:
        """``owner``'s limits (``c.UserLimits``)."""
        return self.limits.for_user(owner, shared=not self.access.single_user)

    @contextlib.contextmanager
    def _room(
        self, who: Caller, owner: str, *, running: str | bool = False, pinning: str = ""
    ) -> Iterator[None]:
        """Room for one more running or pinned container of ``owner``'s, counted and held
        while it is started, resumed or pinned (``limits.room``)."""
        whose = Whose(owner, who.name)
        with room(self, self._limits_of(owner), whose, running=running, pinning=pinning):
            yield

    def _admit_gpus(self, who: Caller, owner: str, wanted: int) -> Admit:
        """The ledger's check of ``owner``'s GPU limit for a lease of ``wanted`` more."""
        return admit_gpus(self._limits_of(owner).gpus, wanted, Whose(owner, who.name))
