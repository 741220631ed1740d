"""Where a new dev container goes, resolved for ``create.py``'s pure builder: its name (new,
and free), its ``Target`` (the mounts checked on their host, the CA bundle, the package-manager
wrappers' PATH, driver injection, the network, the user it runs as) and its ``Confinement``
(the administrator's, within the owner's limits).

``DevContainers`` builds a ``Targets`` from its configuration for each start or plan (on a
Docker host, ``Targets.plan``: the same resolution with nothing created); what is resolved here
reads files and asks the engine (the image's environment, the network, a remote host's paths),
and only ``create_args`` decides what goes into the engine's request.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import secrets
import socket
from collections.abc import Callable
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import docker
import docker.errors
from docker.models.containers import Container

from ..access import Caller
from ..engine import Host, Inventory, LegacyGPUInjection, Progress
from ..engine.driver import Injection
from ..environments import (
    Environment,
    MountNotAllowed,
    MountPolicy,
    RemotePaths,
    ResolvedMount,
    check_target,
    parse_docker_size,
)
from ..environments.capabilities import capability_name
from ..errors import BadRequest, ConfigError, Conflict, Forbidden, engine_error, engine_errors
from ..labels import L_FEATURE_CAPS, L_MANAGED
from ..leasing import GPUHolding, Lease, NoFreeGPU
from . import commandlog, seccomp
from . import plan as planning
from .create import Confinement, Target, create_args, tightest
from .limits import Limits, Whose, container_resources
from .lookup import ContainerLookup
from .model import (
    PREFIX,
    FirstProcess,
    StartRequest,
    container_key,
    creation_time,
    docker_name,
    given_name,
)
from .namespace import UserImages, planned_image
from .placement import Placement, gpus_optional
from .reconcile import process_identity

_NAME_RE = re.compile(r"^[a-z0-9][a-z0-9_.-]{0,62}\Z")


def new_name(env: Environment, request: StartRequest, owner: str, *, shared: bool) -> str:
    """The key (``container_key``) of a new container of ``owner``: the name asked for,
    else one made from the environment's name (and, unless names are per user: ``shared``
    mode, the owner's)."""
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


def check_free(
    lookup: ContainerLookup, client: docker.DockerClient, key: str, who: Caller, host: Host
) -> None:
    """``Conflict`` when ``who`` already has a container of that name on ``host``: the key's
    own, or (in shared mode) one of theirs named the same before names were per user.
    Another user's container never makes a name taken: names are per user."""
    meant = lookup.keys_meant(given_name(key), who)
    for engine_name in dict.fromkeys(docker_name(k) for k in meant):
        try:
            found = client.containers.get(engine_name)
        except docker.errors.NotFound:
            continue
        if engine_name == docker_name(key) or lookup.access.may_see(
            who, found.labels, lookup.ledger_id
        ):
            raise Conflict(
                f"A container named {given_name(key)!r} already exists on host {host.name!r}"
            )


def feature_caps(client: docker.DockerClient, env: Environment, image: str) -> tuple[str, ...]:
    """The capabilities the Dev Container Features installed on ``image`` add (its label, set
    by the features build: ``features.install_features``), less any the administrator does not
    allow now; none for an environment without features (an image's own label is not read)."""
    if not env.features:
        return ()
    try:
        found = client.images.get(image).labels or {}
    except docker.errors.ImageNotFound:
        return ()
    names = (capability_name(n) for n in str(found.get(L_FEATURE_CAPS) or "").split(","))
    return tuple(dict.fromkeys(n for n in names if n is not None and n in env.allowed_caps))


@dataclass(frozen=True)
class Targets:
    """Where new dev containers go, resolved from ``DevContainers``' configuration: ``lookup``
    gives the server's paths, identity, network and user (``workspace_owner``, ``access``);
    the rest are ``c.DevContainers`` options (``command``: ``keep_alive_command``, split)."""

    lookup: ContainerLookup
    mount_policy: MountPolicy
    legacy_gpus: LegacyGPUInjection
    command: tuple[str, ...]
    command_log: bool
    publish_ports: bool
    run_as_server_user: bool
    allow_root: bool

    def target(
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
        lookup = self.lookup
        mounts, workspace = self.mounts(host, env)
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
        if lookup.network and not env.run_options.network_mode:
            network = lookup.network if dry_run else self.ensure_network(client)
        user, groups = self.run_as(host, env)
        return Target(
            remote_user=self.exec_user(env),
            cap_add=feature_caps(client, env, image),
            name=name,
            owner=owner,
            host=host.name,
            image=image,
            workspace=workspace,
            mounts=tuple(mounts),
            command=self.command,
            server_id=lookup.server_id,
            ledger_id=lookup.ledger_id,
            process=process_identity(),
            created=creation_time(),
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

    def plan(
        self,
        placement: Placement,
        env: Environment,
        request: StartRequest,
        *,
        name: str,
        who: Caller,
        holding: GPUHolding,
        mine: UserImages | None,
        confinement: Callable[[], Confinement],
    ) -> dict[str, Any]:
        """``DevContainers.plan`` on a Docker host: the engine's create arguments and the GPUs
        a lease would take now (``holding``), with nothing created, leased, pulled or built;
        ``mine``: the images ``who`` may start in shared mode."""
        host, inventory, wanted = placement.host, placement.inventory, placement.gpu_request
        client = host.client()
        with engine_errors(f"Planning {name!r}", self.lookup.log):
            check_free(self.lookup, client, name, who, host)
            image = planned_image(client, env, mine)  # another user's image is refused here too
            notes: list[str] = list(env.notes)
            if env.features:
                notes.append(
                    "Dev Container Features installed on the image at the start: "
                    + ", ".join(feature.ref.written for feature in env.features)
                )
            try:
                client.images.get(image)
            except docker.errors.ImageNotFound:
                notes.append(f"{image} is not on host {host.name!r}: a start builds or pulls it")
            uuids: tuple[str, ...] = ()
            if wanted is not None and inventory is not None:
                try:
                    viewer = None if who.admin else who.name
                    uuids = holding.would_lease(host, wanted, inventory, viewer=viewer)
                except NoFreeGPU as err:
                    if not gpus_optional(env, request):
                        raise
                    notes.append(f"{err.message}: a start now would run without a GPU")
                    inventory = None
            target = self.target(
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
        create = create_args(env, target, confinement())
        return planning.docker_plan(
            host=host.name, name=name, image=image, gpu_uuids=uuids, create=create, notes=notes
        )

    def create(
        self,
        lease: Lease | None,
        inventory: Inventory | None,
        *,
        host: Host,
        env: Environment,
        name: str,
        owner: str,
        image: str,
        kernel_id: str | None,
        confinement: Callable[[], Confinement],
        say: Progress,
        first: FirstProcess | None = None,
    ) -> Container:
        """The container created (not started) with the GPUs of ``lease``, where ``target``
        says and as ``create_args`` builds it, with the package-manager wrappers put in it
        (``command_log``); removed if they cannot be. With ``first``, its command is
        ``first``'s, reading its standard input, and the wrappers are put in once it runs
        (``put_wrappers``: while its first process starts, not before)."""
        say({"stage": "create", "message": f"creating {docker_name(name)}"})
        client = host.client()
        target = self.target(
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
        args = create_args(env, target, confinement())
        if first is not None:
            args["command"] = list(first.command(target.command))
            # Attached (docker-py's ``detach`` off): its input closes when gpudev's attachment
            # does (``StdinOnce``), so the command never waits on it.
            args["stdin_open"], args["detach"] = True, False
        container = client.containers.create(image, **args)
        if self.command_log and first is None:
            try:
                self.put_wrappers(container)
            except BaseException:
                with contextlib.suppress(docker.errors.DockerException):
                    container.remove(force=True, v=True)
                raise
        return container

    def put_wrappers(self, container: Container) -> None:
        """The package-manager wrappers and the command log (``commandlog``) put in
        ``container``; raises when they cannot be."""
        if self.command_log:
            container.put_archive("/", commandlog.archive())

    def ensure_network(self, client: docker.DockerClient) -> str:
        """The isolated bridge network of dev containers, created if missing."""
        network, log = self.lookup.network, self.lookup.log
        if client.networks.list(names=[network]):
            return network
        try:
            client.networks.create(
                network,
                driver="bridge",
                options={"com.docker.network.bridge.enable_icc": "false"},
                labels={L_MANAGED: "1"},
            )
        except docker.errors.APIError as exc:
            if not client.networks.list(names=[network]):  # not a race with another start
                raise engine_error(f"Creating the network {network!r}", exc, log) from exc
        return network

    def run_as(self, host: Host, env: Environment) -> tuple[str | None, tuple[int, ...]]:
        """Who a new container runs as (``uid:gid``, ``None``: the image's user) and with
        which supplementary groups. The shared service runs it as the calling user (their
        account on its machine, ``workspace_owner``), never as itself; an environment that
        asks for root gets it there only with ``allow_root``."""
        access, workspace_owner = self.lookup.access, self.lookup.workspace_owner
        if workspace_owner is None or access.single_user:
            # containerUser only where the server's user is not imposed
            return (host.user_ids() if self.run_as_server_user else env.container_user), ()
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
        uid, gid = workspace_owner
        name = access.user
        groups = tuple(sorted(set(os.getgrouplist(name, gid)) - {gid})) if name else ()
        return f"{uid}:{gid}", groups

    def user_notes(self, env: Environment) -> list[str]:
        """What ``run_as`` and ``exec_user`` leave unused of the environment's users, in words:
        its ``containerUser`` and ``remoteUser`` where the server's user is imposed
        (``run_as_server_user``) or in shared mode (the calling user); root asked in shared
        mode is a request for root, allowed or refused at the start, not a note."""
        access, workspace_owner = self.lookup.access, self.lookup.workspace_owner
        single = workspace_owner is None or access.single_user
        if single and not self.run_as_server_user:
            return []
        why = (
            "the container runs as the server's user (c.DevContainers.run_as_server_user)"
            if single
            else "in the shared service the container runs as you"
        )
        notes = []
        if env.container_user:
            notes.append(f"'containerUser' {env.container_user} is not used: {why}")
        if env.remote_user and (single or env.remote_user not in ("root", "0")):
            notes.append(
                f"'remoteUser' {env.remote_user} is not used: {why}, and kernels, terminals "
                "and lifecycle commands with it"
            )
        return notes

    def exec_user(self, env: Environment) -> str:
        """Who kernels, terminals and lifecycle commands run as in a new container (recorded
        on it, ``labels.L_REMOTE_USER``): ``remoteUser`` where the container does not run as
        the server's user in single-user mode (``run_as_server_user`` off); else ``""``, the
        container's own user. In shared mode always ``""``: a name from a file never makes a
        process run as another account than ``run_as`` allows."""
        access, workspace_owner = self.lookup.access, self.lookup.workspace_owner
        single = workspace_owner is None or access.single_user
        if single and not self.run_as_server_user and env.remote_user:
            return env.remote_user
        return ""

    def mounts(self, host: Host, env: Environment) -> tuple[list[ResolvedMount], str]:
        """The workspace and declared mounts, checked on the host they are paths of: this
        machine's Jupyter root and allowed roots, or a remote host's configured workspace and
        mount roots, resolved there. Returns them and the workspace folder ('' for none)."""
        policy, lookup = self.mount_policy, self.lookup
        if host.spec.is_local:
            # gpudev's own state (leases, baselines, added hosts) is in no mounted folder.
            state = (lookup.state_dir, lookup.host_pool.hosts_file)
            mounts = [policy.workspace(lookup.root_dir, env.workspace_folder, state=state)]
            mounts.extend(policy.resolve_declared(env.mounts, state=state))
            return mounts, str(lookup.root_dir)
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
            mounts.append(policy.workspace(host.spec.workspace, env.workspace_folder, paths))
        mounts.extend(policy.resolve_declared(env.mounts, (host.spec.mount_roots, paths, trait)))
        return mounts, host.spec.workspace or ""


def admin_confinement(
    *,
    security_opt: list[str],
    seccomp_profile: str,
    cap_drop: list[str],
    pids_limit: int,
    memory_limit: str,
    cpu_limit: float,
) -> Confinement:
    """The administrator's confinement (``c.DevContainers``' options of those names),
    resolved: the seccomp profile read and checked, the memory limit parsed."""
    security = list(security_opt)
    if seccomp_profile == "gpudev":
        security.append(seccomp.security_opt())
    elif seccomp_profile:
        try:
            text = Path(seccomp_profile).read_text(encoding="utf-8")
            json.loads(text)
        except (OSError, ValueError) as exc:
            raise ConfigError(
                f"c.DevContainers.seccomp_profile: {seccomp_profile!r} is not a "
                f"readable JSON seccomp profile ({exc})"
            ) from None
        security.append(f"seccomp={text}")
    memory_bytes = None
    if memory_limit:
        try:
            memory_bytes = parse_docker_size(memory_limit)
        except ValueError as exc:
            raise ConfigError(f"c.DevContainers.memory_limit: {exc}") from None
    return Confinement(
        security_opt=tuple(security),
        cap_drop=tuple(cap_drop),
        pids_limit=pids_limit,
        memory_bytes=memory_bytes,
        nano_cpus=round(cpu_limit * 1e9) if cpu_limit > 0 else None,
    )


def confinement_for(
    confinement: Confinement,
    limits: Limits,
    *,
    env: Environment,
    owner: str,
    cpus: Callable[[], int] | None,
) -> Confinement:
    """The confinement of a new container of ``owner``'s: the administrator's, with the memory
    and CPUs ``owner``'s ``limits`` give ``env`` (``cpus``: how to ask its host for its CPUs;
    ``None``, on a Kubernetes host: no default); ``LimitReached`` when it asks for more."""
    memory, nano_cpus = container_resources(limits, env, Whose(owner, owner), cpus)
    return replace(
        confinement,
        memory_bytes=tightest(confinement.memory_bytes, memory),
        nano_cpus=tightest(confinement.nano_cpus, nano_cpus),
    )


class ContainerInput:
    """The write end of a container's standard input, attached through the engine's API."""

    def __init__(self, raw: Any, sock: socket.socket) -> None:
        self._raw = raw  # docker-py's object, which holds the HTTP response
        self._sock = sock

    def deliver(self, data: bytes) -> None:
        """``data`` written (an empty line for none: the container's input stays open, so
        ``data`` says where it ends), and the attachment closed."""
        try:
            self._sock.sendall(data or b"\n")
            self._sock.shutdown(socket.SHUT_WR)
        finally:
            self.close()

    def close(self) -> None:
        response = getattr(self._raw, "_response", None)
        if response is not None:  # its file is the socket's: the flush on close may fail
            with contextlib.suppress(ValueError, OSError):
                response.close()
        with contextlib.suppress(OSError):
            self._raw.close()
        with contextlib.suppress(OSError):
            self._sock.close()


def attach_input(container: Container) -> ContainerInput | None:
    """``container``'s standard input (``OpenStdin``), attached before it starts; ``None``
    where the engine's client gives no socket."""
    client = container.client
    if client is None or container.id is None:
        return None
    raw = client.api.attach_socket(container.id, params={"stdin": 1, "stream": 1})
    sock = getattr(raw, "_sock", raw)
    if isinstance(sock, socket.socket):
        return ContainerInput(raw, sock)
    with contextlib.suppress(OSError, AttributeError):
        raw.close()
    return None
