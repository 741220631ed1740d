"""The shared service's object graph: one engine connection per host, one lease ledger, and a
view of them for each user (``Services`` whose caller is that user).

A user's view finds environments in, and mounts as the workspace, that user's folder
(``c.GPUDevService.user_root``); it sees only that user's dev containers unless the user is
an administrator (a JupyterHub admin, or in ``c.Access.admin_users``). The lease decision
stays in one place: the views share the ledger, and the engine's claims arbitrate between
this service and anything else on the engine.
"""

from __future__ import annotations

import os
import pwd
import threading
from pathlib import Path
from typing import Any

from traitlets import Float, Int, Unicode
from traitlets.config import Configurable, LoggingConfigurable

from ..access import Access
from ..errors import Forbidden
from ..kernels.live import KernelRegistry
from ..services import Services, SharedParts
from .folders import UserFolders
from .identity import USER_NAME

#: The folders of a user's home that no dev container gets (besides c.MountPolicy's).
PRIVATE_IN_HOME = (".ssh", ".docker", ".gnupg", ".aws", ".kube", ".jupyter", ".local/share/jupyter")

#: The single-user mode's caller name the service's own view acts as (reconcile, sweeps).
SERVICE_USER = "gpudev-service"


class GPUDevService(LoggingConfigurable):
    """The shared service (``jupyter gpudev serve``): ``c.GPUDevService.*``."""

    user_root = Unicode(
        "/srv/gpudev/users/{user}",
        help="""Each user's project folder: where the service finds that user's environments
        (.devcontainer) and which it mounts, read-write, as their dev containers' workspace.
        {user} is the user's name; the last folder must contain it, and every folder above
        it must be writable by root (or the service's account) only, so that no user can
        replace their folder with a link: the service checks this when it starts (making the
        folders above when missing) and refuses to start otherwise. It makes a user's folder
        (mode 0700, owned by their account on this machine) on their first request, and
        checks it, without following links, at every request. "{home}" alone (each user's
        home folder) is allowed, but a home holds ~/.ssh and the like, which are never
        mounted (c.MountPolicy): a folder inside the home ("{home}/projects") is refused,
        as the user could rename it.""",
    ).tag(config=True)

    terminals_per_user = Int(
        16,
        min=0,
        help="""The most terminals into dev containers one user may have open at once in the
        service (each a `docker exec -it` in a pseudo-terminal of the service's machine, whose
        file descriptors and ptys every user and login shares): one more is refused (429)
        until one of theirs is closed (0 or more; 0: no limit). Administrators are limited
        like everyone else.""",
    ).tag(config=True)

    terminals_total = Int(
        256,
        min=0,
        help="""The most terminals into dev containers the service has open at once, every
        user's together: one more is refused (429) until one is closed (0 or more; 0: no
        limit). Keep it below the service's open-file limit (each takes a few file
        descriptors) and the host's ptys (/proc/sys/kernel/pty/max).""",
    ).tag(config=True)

    terminal_input_buffer = Int(
        1024 * 1024,
        min=1,
        help="""The most input, in bytes, the service holds for one terminal into a dev
        container while the container does not read it (its input is written to the
        pseudo-terminal without waiting): past it the terminal is closed, the websocket's
        close reason naming this setting (1 or more; a websocket message is at most 64 KiB
        in any case).""",
    ).tag(config=True)

    terminal_output_buffer = Int(
        4 * 1024 * 1024,
        min=1,
        help="""The most output, in bytes, the service holds unsent for one terminal into a
        dev container whose client reads it slower than it comes: past it the service stops
        reading the terminal (its process waits) until the client has taken it (1 or
        more).""",
    ).tag(config=True)

    operations_per_user = Int(
        4,
        min=0,
        help="""The most blocking operations one user may have running at once in the service:
        requests other than reads (starts, stops, removals, commits, pushes, port changes,
        each seconds to minutes in workers every user shares) and kernel launches. One more is
        refused (409, "try again once one has ended") rather than queued behind them, where
        every other user's would wait too (0 or more; 0: no limit). Administrators are
        limited like everyone else.""",
    ).tag(config=True)

    reads_per_user = Int(
        8,
        min=0,
        help="""The most reads of one user's the service runs at once (listings, diffs, logs,
        GPU use: each holds one of the workers every user's reads share, a diff of a container
        with many changes for seconds). More wait for theirs to end, not for the workers, so
        that one user's many reads never hold them all; never more than half the read
        workers (the machine's CPUs + 4, at most 32) unless 0 (0 or more; 0: no limit at
        all). Administrators are limited like everyone else.""",
    ).tag(config=True)

    abandoned_kernel_timeout = Float(
        900.0,
        min=0.0,
        help="""Seconds a kernel the service runs for a user's server goes on once no server
        asks after it (a running server asks every few seconds, at least every minute): its
        server was killed, or its machine is gone. It is then ended as a shutdown would end
        it: its dedicated container removed, or stopped and kept with its changes, its GPUs
        freed (0 or more; 0: it runs until its owner ends it).""",
    ).tag(config=True)

    def folders(self) -> UserFolders:
        """Users' folders under ``user_root``; ``ConfigError`` for a layout users could
        redirect."""
        return UserFolders(self.user_root)

    def root_of(self, name: str, folders: UserFolders | None = None) -> Path:
        """User ``name``'s folder, checked now (and made if missing); ``Forbidden`` when it
        cannot be used."""
        if not USER_NAME.fullmatch(name) or name == SERVICE_USER:  # the service's own view's
            raise Forbidden("This user name cannot be given a folder on the GPU hosts")
        return (folders or self.folders()).folder_of(name, _account_of(name))


class Authority:
    """What ``GPUDevApp`` holds in the shared service: ``for_user`` gives each caller a view."""

    def __init__(self, root_dir: str | Path, *, parent: Configurable, log: Any) -> None:
        self._parent = parent
        self._log = log
        self.settings = GPUDevService(parent=parent, log=log)
        #: Users' folders, their layout checked (and the folders above them made) now.
        self.folders = self.settings.folders()
        self.folders.check()
        #: ``c.Access.admin_users``: administrators besides the Hub's.
        self.admin_users = set(Access(parent=parent, log=log).admin_users)
        #: The kernels the service runs for clients (``shared.kernels``), each under its owner:
        #: each view adds and finds its user's, and sees every owner's GPU processes by them.
        self.kernels = KernelRegistry()
        #: The view reconciling and sweeping runs as: an administrator, owning nothing.
        self.service = Services(
            root_dir, parent=parent, log=log, kernels=self.kernels.scoped(SERVICE_USER)
        )
        self.service.containers.access = self._access(SERVICE_USER, admin=True)
        self.service.containers.registries.user = SERVICE_USER
        containers = self.service.containers
        if not containers.limits.gpus:  # its default; not changed, to break no deployment
            log.warning(
                "gpudev: c.UserLimits.gpus is 0 (no limit): one user may hold every GPU; "
                "set it (and c.UserLimits.groups for more to some) to share them"
            )
        self.host_pool = self.service.host_pool
        #: The service's credentials are never sent with a build (``engine.registries``).
        self.host_pool.withhold_build_credentials()
        self._parts = (self.host_pool, containers.ledger, containers.server_id)
        self._views: dict[tuple[str, bool], Services] = {}
        self._lock = threading.Lock()

    def _access(self, name: str, *, admin: bool) -> Access:
        admins = self.admin_users | ({name} if admin else set())
        return Access(
            parent=self._parent, log=self._log, user=name, admin_users=admins, single_user=False
        )

    @property
    def operations_per_user(self) -> int:
        """``c.GPUDevService.operations_per_user`` (``handlers.base.OperationCount``)."""
        return int(self.settings.operations_per_user)

    @property
    def abandoned_kernel_timeout(self) -> float:
        """``c.GPUDevService.abandoned_kernel_timeout`` (``shared.kernels``)."""
        return float(self.settings.abandoned_kernel_timeout)

    @property
    def reads_per_user(self) -> int:
        """``c.GPUDevService.reads_per_user`` (``handlers.base.ReadQueue``)."""
        return int(self.settings.reads_per_user)

    def for_user(self, name: str, *, hub_admin: bool = False) -> Services:
        """User ``name``'s view (``hub_admin``: the Hub says they are an administrator). Their
        folder is checked again at each call: a view is kept only while it is the same."""
        admin = hub_admin or name in self.admin_users
        key = (name, admin)
        root = self.settings.root_of(name, self.folders)
        with self._lock:
            view = self._views.get(key)
        if view is not None and view.containers.root_dir == root:
            return view
        view = self._view(name, admin, root)
        with self._lock:
            kept = self._views.get(key)
            if kept is not None and kept.containers.root_dir == root:
                return kept
            self._views[key] = view
            return view

    def _view(self, name: str, admin: bool, root: Path) -> Services:
        host_pool, ledger, server_id = self._parts
        parts = SharedParts(
            host_pool,
            ledger,
            server_id,
            self._access(name, admin=admin),
            idle_notes=self.service.containers.idle_notes,
        )
        kernels = self.kernels.scoped(name)
        view = Services(root, parent=self._parent, log=self._log, shared=parts, kernels=kernels)
        account = _account_of(name)
        if account is not None:  # what a commit writes in their folder is theirs
            view.containers.workspace_owner = (account.pw_uid, account.pw_gid)
        # the service's registry credentials act for them as c.Registries allows (engine.registries)
        view.containers.registries.user = name
        policy = view.containers.mount_policy
        policy.caller = name  # {user} in allowed roots, and mounts checked with their rights
        policy.workspace_hint = (
            f"keep your projects in {root} (the folder the gpudev service mounts for you), or "
            "ask an administrator to change c.GPUDevService.user_root"
        )
        home = account.pw_dir if account is not None else ""
        if home:
            own = [os.path.join(home, sub) for sub in PRIVATE_IN_HOME]
            policy.protected_paths = [*policy.protected_paths, *own]
        return view

    def close(self) -> None:
        self.service.close()


def _account_of(name: str) -> pwd.struct_passwd | None:
    try:
        return pwd.getpwnam(name)
    except KeyError:
        return None
