"""Who is asking, and which dev containers they may see and act on.

Every dev container belongs to the user who started it: gpudev writes that user's name in its
owner label when it creates it (never from the image or the request). A user sees and acts only
on their own containers; the administrators (``c.Access.admin_users``) on every one. Anything
else is answered as if it did not exist (404, not 403), so names of other users' containers do
not leak, and a GPU another user holds is "held by another user".

In single-user mode (a server for one person) the caller is always the user the server acts
for, ``c.Access.user``: the JupyterHub user the server was spawned for, otherwise the account
it runs as. Who logged in to the server with its token does not change that (anyone who has the
token is that person).
"""

from __future__ import annotations

import getpass
import os
from collections.abc import Mapping
from dataclasses import dataclass

from traitlets import Bool, Set, Unicode, default
from traitlets.config import LoggingConfigurable

from .labels import L_LEDGER, L_OWNER

#: What a non-administrator is told of a GPU holder who is someone else.
ANOTHER_USER = "another user"


@dataclass(frozen=True)
class Caller:
    """The user a request acts for; ``admin`` sees and acts on everyone's containers."""

    name: str
    admin: bool = False

    def sees_owner(self, owner: str) -> bool:
        """Whether this caller may see what ``owner`` holds (their own, or any if admin)."""
        return self.admin or owner == self.name


class Access(LoggingConfigurable):
    """The owners of dev containers and the administrators. Configure with ``c.Access.*``."""

    user = Unicode(
        help="""The user this server acts for in single-user mode: it owns the dev containers
        the server starts and sees only those (unless it is an administrator). Default: the
        JupyterHub user the server was spawned for (JUPYTERHUB_USER), else the account the
        server runs as.""",
    ).tag(config=True)

    admin_users = Set(
        Unicode(),
        help="""Users who see and act on every user's dev containers (stop, remove, logs,
        terminals, commits) and see who holds each GPU. Empty by default: everyone sees only
        their own.""",
    ).tag(config=True)

    single_user = Bool(
        True,
        help="""Not configurable: False in the shared service, where the lease ledger is the
        service's and not one user's (so it grants no one the ledger's old containers).""",
    )

    @default("user")
    def _default_user(self) -> str:
        hub_user = os.environ.get("JUPYTERHUB_USER")
        if hub_user:
            return hub_user
        try:
            return getpass.getuser()
        except (KeyError, OSError):  # no USER variable and no passwd entry (some containers)
            return f"uid-{os.getuid()}"

    def local(self) -> Caller:
        """The caller in single-user mode: ``user``."""
        return Caller(self.user, admin=self.user in self.admin_users)

    def resolve(self, caller: Caller | None) -> Caller:
        """``caller``, or the single-user mode's caller when there is none."""
        return caller if caller is not None else self.local()

    def may_see(self, caller: Caller, labels: Mapping[str, str], ledger_id: str) -> bool:
        """Whether ``caller`` may see a container with these labels.

        A container this server's own lease ledger made before owners were enforced (its owner
        then was a login's random name) belongs to the single-user mode's user too: the ledger
        is in that user's data folder.
        """
        if caller.sees_owner(labels.get(L_OWNER, "")):
            return True
        return (
            self.single_user
            and caller.name == self.user
            and bool(ledger_id)
            and labels.get(L_LEDGER) == ledger_id
        )
