"""Per-user limits: how many GPUs, running, pinned and kept dev containers and kernels one
user may hold at once, and how much memory and CPU one of their containers may use.

``UserLimits`` is the administrator's configuration (``c.UserLimits.*``, with a form per
group); ``Limits`` what applies to one user; ``holdings`` what a user's containers hold now;
the ``check_*`` functions and ``container_resources`` decide, without an engine; ``check_room``
and ``room`` count a user's containers for ``DevContainers``.

The counts are race-free: ``DevContainers`` counts a user's containers and makes the start,
resume or pin the count allows under ``owner_lock`` (``room``: one lock per user, shared by
every view of one ledger in the process: the shared service's), and the GPUs are counted again
inside the lease ledger's write transaction (``LeaseLedger.acquire``'s ``admit``), which also
decides between processes. A limit is the owner's: an administrator resuming or pinning a
user's container is counted against that user. Administrators are limited like everyone
else (give them more through ``groups``).
"""

from __future__ import annotations

import contextlib
import grp
import math
import os
import pwd
import threading
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from typing import Any

from traitlets import Dict, Float, Int, TraitError, Unicode, validate
from traitlets.config import LoggingConfigurable

from ..environments import Environment, parse_docker_size
from ..errors import GPUDevError, LimitReached
from ..labels import STOPPED
from ..leasing import Lease
from .lookup import ContainerLookup

#: The memory and CPU limits of a dev container in the shared service unless configured.
SHARED_MEMORY = "32g"
SHARED_CPUS = 8.0
#: The kernels one user may run in the shared service, and the dev containers they may keep
#: (any state), unless configured.
SHARED_KERNELS = 32
SHARED_CONTAINERS = 16

#: What ``c.UserLimits.groups`` may set for a group.
GROUP_KEYS = ("gpus", "running", "pinned", "containers", "kernels", "memory", "cpus")

#: The most container names a refusal lists.
_NAMED = 10


@dataclass(frozen=True)
class Limit:
    """One limit and the setting it comes from (named in refusals); ``value`` 0: none."""

    value: int
    setting: str


@dataclass(frozen=True)
class Limits:
    """What applies to one user: counts of GPUs and containers, and per container memory
    (bytes) and CPUs (nano-CPUs), the most and what one that asks for none gets (0: none)."""

    gpus: Limit
    running: Limit
    pinned: Limit
    memory: Limit
    cpus: Limit
    memory_default: int = 0
    cpus_default: int = 0
    #: Dev containers kept, in any state (a start of a new one beyond it is refused).
    containers: Limit = Limit(0, "c.UserLimits.containers")
    #: Kernels the shared service runs for the user at once (``shared.kernels``).
    kernels: Limit = Limit(0, "c.UserLimits.kernels")


@dataclass(frozen=True)
class Holdings:
    """A user's dev containers now, by name: running (or starting), pinned (any state), and
    every one kept (any state)."""

    running: tuple[str, ...] = ()
    pinned: tuple[str, ...] = ()
    kept: tuple[str, ...] = ()


def _count(key: str, value: Any, where: str) -> int:
    """A group's or a trait's value of ``key`` as an int (bytes, nano-CPUs); ``TraitError``."""
    if key == "memory":
        if not isinstance(value, str):
            raise TraitError(f"{where}: a Docker size like '64g', or '' for no limit")
        try:
            return parse_docker_size(value) if value else 0
        except ValueError as exc:
            raise TraitError(f"{where}: {exc}") from None
    if key == "cpus":
        if isinstance(value, bool) or not isinstance(value, (int, float)) or not value >= 0:
            raise TraitError(f"{where}: a number of CPUs (4.5), or 0 for no limit")
        return round(float(value) * 1e9)
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise TraitError(f"{where}: a whole number, or 0 for no limit")
    return value


class UserLimits(LoggingConfigurable):
    """How much each user may hold at once, and use in one dev container: ``c.UserLimits.*``.

    A refusal is a 409 naming the limit, its setting and what the user holds. Administrators
    are limited like everyone else; a limit counts against the owner of the container (an
    administrator resuming a user's container is counted as that user)."""

    gpus = Int(
        0,
        min=0,
        help="""The most GPUs one user's dev containers may hold at once (leased, on every
        Docker host together): a start or resume that would take more is refused (409), naming
        the containers that hold them (0 or more; 0: no limit). Pods on Kubernetes hosts are
        not counted (a ResourceQuota limits GPUs there).""",
    ).tag(config=True)

    running = Int(
        0,
        min=0,
        help="""The most dev containers one user may have running (or starting) at once, on
        every host together, kernels' own containers and pods included: a start or resume
        beyond it is refused (409; 0 or more; 0: no limit).""",
    ).tag(config=True)

    pinned = Int(
        0,
        min=0,
        help="""The most dev containers one user may have pinned (kept running after their
        last kernel: `jupyter gpudev pin`), stopped ones included until unpinned or removed: a
        pin beyond it is refused (409; 0 or more; 0: no limit).""",
    ).tag(config=True)

    containers = Int(
        None,
        allow_none=True,
        min=0,
        help=f"""The most dev containers one user may keep, in any state (a stopped one holds
        its engine's disk), on every host together, kernels' own containers and pods included:
        a start of a new one beyond it is refused (409) until one is removed (or committed and
        removed); resuming one is not (0 or more; 0: no limit). Default: {SHARED_CONTAINERS}
        in the shared service, no limit in single-user mode.""",
    ).tag(config=True)

    kernels = Int(
        None,
        allow_none=True,
        min=0,
        help=f"""The most kernels the shared service runs for one user at once (their
        servers' gpudev kernels, in shared and dedicated dev containers alike): a launch
        beyond it is refused (409) until one of theirs is shut down; a restart is not (0 or
        more; 0: no limit). Default: {SHARED_KERNELS}. Not applied in single-user mode, whose
        kernels are the user's own server's.""",
    ).tag(config=True)

    memory = Unicode(
        None,
        allow_none=True,
        help=f"""The most memory one of a user's dev containers may use, as a Docker size
        ('64g'): an environment asking for more (customizations.gpudev.memory) is refused
        (409). '': no limit. Default: {SHARED_MEMORY!r} in the shared service, no limit in
        single-user mode. c.DevContainers.memory_limit still caps every container.""",
    ).tag(config=True)

    memory_default = Unicode(
        None,
        allow_none=True,
        help="""The memory limit of a dev container whose environment asks for none, as a
        Docker size, never more than memory. Default (or ''): memory. Not applied on
        Kubernetes hosts (a LimitRange sets defaults there).""",
    ).tag(config=True)

    cpus = Float(
        None,
        allow_none=True,
        min=0.0,
        help=f"""The most CPUs' worth of time one of a user's dev containers may use (4.5): an
        environment asking for more (customizations.gpudev.cpus) is refused (409; 0 or more;
        0: no limit). Default: {SHARED_CPUS:g} in the shared service, no limit in single-user
        mode. c.DevContainers.cpu_limit still caps every container.""",
    ).tag(config=True)

    cpus_default = Float(
        None,
        allow_none=True,
        min=0.0,
        help="""The CPU limit of a dev container whose environment asks for none, never more
        than cpus, nor than its host has (0 or more). Default (or 0): cpus. Not applied on
        Kubernetes hosts.""",
    ).tag(config=True)

    groups = Dict(
        key_trait=Unicode(),
        value_trait=Dict(),
        help="""Other limits for the members of groups, e.g. {"gpu-heavy": {"gpus": 8,
        "running": 4, "memory": "256g"}} (keys: gpus, running, pinned, containers, kernels,
        memory, cpus; 0 or '': no limit). A user's groups are those of their account on the
        service's machine (not JupyterHub's groups). A user in several of them gets the
        largest value of each key (no limit above all); a key none of their groups sets is the
        setting above.""",
    ).tag(config=True)

    @validate("memory", "memory_default")
    def _valid_size(self, proposal: Any) -> str | None:
        value = proposal["value"]
        if value is not None:
            _count("memory", value, f"c.UserLimits.{proposal['trait'].name}")
        return value  # type: ignore[no-any-return]

    @validate("groups")
    def _valid_groups(self, proposal: Any) -> dict[str, dict[str, Any]]:
        groups: dict[str, dict[str, Any]] = proposal["value"]
        for group, entry in groups.items():
            for key, value in entry.items():
                where = f"c.UserLimits.groups[{group!r}][{key!r}]"
                if key not in GROUP_KEYS:
                    raise TraitError(f"{where}: not a limit ({', '.join(GROUP_KEYS)})")
                _count(key, value, where)
        return groups

    def groups_of(self, name: str) -> frozenset[str]:
        """The groups of ``name``'s account on this machine (none without one): the one
        place limits learn a user's groups from (another source goes here)."""
        try:
            ids = os.getgrouplist(name, pwd.getpwnam(name).pw_gid)
        except (KeyError, OSError):
            return frozenset()
        found: set[str] = set()
        for gid in ids:
            try:
                found.add(grp.getgrgid(gid).gr_name)
            except KeyError:
                continue
        return frozenset(found)

    def for_user(self, name: str, *, shared: bool) -> Limits:
        """The limits of user ``name`` (``shared``: in the shared service, whose memory and
        CPU limits are on unless configured)."""
        mine = self.groups_of(name) if self.groups else frozenset()
        entries = [(group, self.groups[group]) for group in sorted(self.groups) if group in mine]

        def pick(key: str, base: Any) -> Limit:
            given = [
                (_count(key, entry[key], ""), group) for group, entry in entries if key in entry
            ]
            if not given:
                return Limit(_count(key, base, f"c.UserLimits.{key}"), f"c.UserLimits.{key}")
            value, group = max(given, key=lambda found: found[0] or math.inf)
            return Limit(value, f"c.UserLimits.groups[{group!r}][{key!r}]")

        # Unset: on in the shared service, off in single-user mode.
        memory = pick("memory", _given(self.memory, SHARED_MEMORY if shared else ""))
        cpus = pick("cpus", _given(self.cpus, SHARED_CPUS if shared else 0.0))
        containers = pick("containers", _given(self.containers, SHARED_CONTAINERS if shared else 0))
        kernels = pick("kernels", _given(self.kernels, SHARED_KERNELS if shared else 0))
        memory_default = (
            memory.value
            if self.memory_default is None
            else _count("memory", self.memory_default, "c.UserLimits.memory_default")
        )
        cpus_default = (
            cpus.value
            if self.cpus_default is None
            else _count("cpus", self.cpus_default, "c.UserLimits.cpus_default")
        )
        return Limits(
            gpus=pick("gpus", self.gpus),
            running=pick("running", self.running),
            pinned=pick("pinned", self.pinned),
            memory=memory,
            cpus=cpus,
            memory_default=_within(memory_default, memory.value),
            cpus_default=_within(cpus_default, cpus.value),
            containers=containers,
            kernels=kernels,
        )


def _given(value: Any, unset: Any) -> Any:
    return unset if value is None else value


def _within(value: int, most: int) -> int:
    """``value`` (0: none), no more than ``most`` (0: no limit)."""
    if not most:
        return value
    return min(value, most) if value else most


# -- decisions ------------------------------------------------------------------------------


@dataclass(frozen=True)
class Whose:
    """Whose holdings a refusal speaks of: the caller's own ("You hold") or another user's,
    when an administrator acts on it ("alice holds")."""

    owner: str
    caller: str

    def says(self, verb: str) -> str:
        """'You hold' / 'alice holds' ("hold" or "have")."""
        if self.owner == self.caller:
            return f"You {verb}"
        return f"{self.owner} {'has' if verb == 'have' else verb + 's'}"

    @property
    def to(self) -> str:
        return "you" if self.owner == self.caller else self.owner


def _names(names: Sequence[str]) -> str:
    shown = ", ".join(repr(name) for name in names[:_NAMED])
    more = f" and {len(names) - _NAMED} more" if len(names) > _NAMED else ""
    return f"{'one of ' if len(names) > 1 else ''}{shown}{more}"


def _plural(count: int, noun: str) -> str:
    return noun if count == 1 else f"{noun}s"


def check_count(limit: Limit, held: Sequence[str], whose: Whose, *, what: str, undo: str) -> None:
    """Refuse one more of ``what`` ("running dev container") when ``held`` (their names)
    already reach ``limit``; ``undo`` says how one is given back ("stop", "unpin")."""
    if not limit.value or len(held) < limit.value:
        return
    raise LimitReached(
        f"{whose.says('have')} {len(held)} of {limit.value} {_plural(limit.value, what)} "
        f"allowed to {whose.to} ({limit.setting}): {undo} {_names(held)} first",
        details={"setting": limit.setting, "allowed": limit.value, "held": list(held)},
    )


def check_gpus(limit: Limit, leases: Sequence[Lease], wanted: int, whose: Whose) -> None:
    """Refuse ``wanted`` more GPUs when the owner's active ``leases`` and them would pass
    ``limit``."""
    held = sum(len(lease.gpu_uuids) for lease in leases)
    if not limit.value or held + wanted <= limit.value:
        return
    holders = sorted({lease.container for lease in leases if lease.gpu_uuids})
    allowed = f"{limit.value} {_plural(limit.value, 'GPU')} allowed to {whose.to}"
    if not held:
        message = (
            f"This needs {wanted} {_plural(wanted, 'GPU')}, more than the {allowed} at once "
            f"({limit.setting}): ask for fewer"
        )
    elif held >= limit.value:
        message = (
            f"{whose.says('hold')} {held} of {allowed} ({limit.setting}): stop "
            f"{_names(holders)} first"
        )
    else:
        message = (
            f"{whose.says('hold')} {held} of {allowed} ({limit.setting}), and this needs "
            f"{wanted} more: stop {_names(holders)} first, or ask for fewer"
        )
    details = {"setting": limit.setting, "allowed": limit.value, "held": holders}
    raise LimitReached(message, details={**details, "gpus": held, "wanted": wanted})


def admit_gpus(limit: Limit, wanted: int, whose: Whose) -> Callable[[list[Lease]], None] | None:
    """The ledger's ``admit`` for a lease of ``wanted`` GPUs (``None`` without a limit)."""
    if not limit.value:
        return None

    def admit(leases: list[Lease]) -> None:
        check_gpus(limit, leases, wanted, whose)

    return admit


def _size(count: int) -> str:
    for unit, size in (("g", 1 << 30), ("m", 1 << 20), ("k", 1 << 10)):
        if count % size == 0:
            return f"{count // size}{unit}"
    return f"{count}b"


def _cpus(nano: int) -> str:
    return f"{nano / 1e9:g} {_plural(round(nano / 1e9), 'CPU')}"


def container_resources(
    limits: Limits, env: Environment, whose: Whose, host_cpus: Callable[[], int] | None
) -> tuple[int | None, int | None]:
    """The memory (bytes) and nano-CPUs of a new dev container of ``env``: what the
    environment asks for, else the default (``host_cpus``: how many the host has, no default
    CPU limit above them; ``None``: no defaults, as on a Kubernetes host, whose scheduler would
    reserve them). ``LimitReached`` when it asks for more than the user may have."""
    asked_memory, asked_cpus = env.run_options.memory_bytes, env.run_options.nano_cpus
    for asked, limit, key, shown in (
        (asked_memory, limits.memory, "memory", _size),
        (asked_cpus, limits.cpus, "cpus", _cpus),
    ):
        if asked is not None and limit.value and asked > limit.value:
            raise LimitReached(
                f"The environment {env.name!r} asks for {shown(asked)} "
                f"(customizations.gpudev.{key}), more than the {shown(limit.value)} each dev "
                f"container allowed to {whose.to} may use ({limit.setting}): ask for less",
                details={"setting": limit.setting, "allowed": limit.value, "asked": asked},
            )
    if host_cpus is None:
        return asked_memory, asked_cpus
    memory = asked_memory if asked_memory is not None else limits.memory_default or None
    if asked_cpus is not None or not limits.cpus_default:
        return memory, asked_cpus
    has = host_cpus()
    return memory, min(limits.cpus_default, has * 10**9) if has > 0 else limits.cpus_default


# -- counting -------------------------------------------------------------------------------

_LOCKS: dict[tuple[str, str], threading.Lock] = {}
_LOCKS_LOCK = threading.Lock()


def owner_lock(ledger_id: str, owner: str) -> threading.Lock:
    """The lock under which ``owner``'s containers are counted and the change the count
    allows is made, one per user of a ledger in this process (shared by all its views)."""
    with _LOCKS_LOCK:
        return _LOCKS.setdefault((ledger_id, owner), threading.Lock())


def holdings(lookup: ContainerLookup, owner: str) -> Holdings:
    """``owner``'s dev containers on every host that answers: running (or starting: created,
    paused, a pod not yet running), pinned, and all, by name. A host that cannot be asked now
    is left out (logged)."""
    running: list[str] = []
    pinned: list[str] = []
    every: list[str] = []
    for name in lookup.host_pool.names():
        try:
            states = lookup.backend(lookup.host_pool.get(name)).owned(owner)
            kept = lookup.ledger.pinned(name)
        except GPUDevError as err:
            lookup.log.warning(
                "gpudev: the containers of %s on %s not counted: %s", owner, name, err.message
            )
            continue
        running += [container for container, state in states.items() if state not in STOPPED]
        pinned += [container for container in states if container in kept]
        every += list(states)
    return Holdings(tuple(sorted(running)), tuple(sorted(pinned)), tuple(sorted(every)))


def check_room(
    lookup: ContainerLookup,
    limits: Limits,
    whose: Whose,
    *,
    running: str | bool = False,
    pinning: str = "",
    gpus: int = 0,
) -> None:
    """Refuse (``LimitReached``) one more running (``running``: ``True``, a new container,
    also counted against the containers kept; a name, the container starting again, not
    counted) or pinned (``pinning``: its name) container of ``whose.owner``, or ``gpus``
    more GPUs, beyond their ``limits``."""
    owner = whose.owner
    if _counted(limits, running, pinning):
        held = holdings(lookup, owner)
        if running:
            others = [name for name in held.running if name != running]
            check_count(limits.running, others, whose, what="running dev container", undo="stop")
        if running is True:
            check_count(
                limits.containers,
                held.kept,
                whose,
                what="dev container",
                undo="remove (or commit and remove)",
            )
        if pinning:
            others = [name for name in held.pinned if name != pinning]
            check_count(limits.pinned, others, whose, what="pinned dev container", undo="unpin")
    if gpus and limits.gpus.value:
        leases = [lease for lease in lookup.ledger.active() if lease.owner == owner]
        check_gpus(limits.gpus, leases, gpus, whose)


def _counted(limits: Limits, running: str | bool, pinning: str) -> bool:
    """Whether a limit on the containers ``check_room`` is asked about is set."""
    return bool(
        (running and limits.running.value)
        or (running is True and limits.containers.value)
        or (pinning and limits.pinned.value)
    )


@contextlib.contextmanager
def room(
    lookup: ContainerLookup,
    limits: Limits,
    whose: Whose,
    *,
    running: str | bool = False,
    pinning: str = "",
) -> Iterator[None]:
    """Count ``whose.owner``'s containers (``check_room``) and hold their ``owner_lock``
    while the start, resume or pin the count allows is made, so that no other one passes
    the same count (only where such a limit is set); their GPUs are counted in the ledger's
    transaction (``admit_gpus``)."""
    if not _counted(limits, running, pinning):
        yield
        return
    with owner_lock(lookup.ledger_id, whose.owner):
        check_room(lookup, limits, whose, running=running, pinning=pinning)
        yield
