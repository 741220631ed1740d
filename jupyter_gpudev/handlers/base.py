"""The base of every gpudev handler and the one place that maps errors to HTTP answers.

Every method of a gpudev handler is ``@web.authenticated`` and ``@authorized`` against the
``gpudev`` resource. Domain errors become JSON with their status; engine failures are logged
and answered with a generic message that echoes nothing from the engine.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import json
import os
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from typing import Any, Protocol, TypeVar, cast, runtime_checkable

from jupyter_server.auth.decorator import authorized
from jupyter_server.base.handlers import APIHandler
from tornado import web

from ..errors import Forbidden, GPUDevError, LimitReached, engine_errors
from ..kernels.culler import GPUCuller
from ..services import Services

#: Where ``GPUDevApp`` puts its ``Services`` in the server's settings.
SETTINGS_KEY = "gpudev"
#: Where ``GPUDevApp`` puts the reclaimer of a client-mode server's kernels.
CULLER_KEY = "gpudev_culler"
#: Where the shared service keeps its ``OperationCount`` (its web application's settings).
OPERATIONS_KEY = "gpudev_operations"
#: And its ``ReadQueue``.
READS_KEY = "gpudev_reads"

T = TypeVar("T")

#: Workers for the calls of reading requests (GET, HEAD) and of the rest (starts, stops,
#: commits: seconds each), apart: a listing never queues behind starts (measured in
#: benchmarks/results/load.md: 50 users' polls waited up to seconds behind 16 users' starts
#: in one shared pool of 6 workers). Each as many as Python's default pool would be.
_WORKERS = min(32, (os.cpu_count() or 1) + 4)
_READS = ThreadPoolExecutor(max_workers=_WORKERS, thread_name_prefix="gpudev-reads")
_WRITES = ThreadPoolExecutor(max_workers=_WORKERS, thread_name_prefix="gpudev-writes")


def executor_for(method: str) -> ThreadPoolExecutor:
    """The workers a request's blocking calls run in: reads apart from everything else."""
    return _READS if method.upper() in ("GET", "HEAD") else _WRITES


F = TypeVar("F", bound=Callable[..., Awaitable[None]])


C = TypeVar("C")


def kept_in(settings: dict[str, Any], key: str, kind: Callable[[], C]) -> C:
    """The one ``kind()`` of the web application whose ``settings`` these are, under ``key``
    (made at the first ask)."""
    kept = settings.get(key)
    if kept is None:
        kept = settings[key] = kind()
    return cast(C, kept)


@runtime_checkable
class UserViews(Protocol):
    """What the shared service holds instead of one ``Services``: each user's view of them
    (``shared.authority.Authority``; ``GPUDevApp`` puts it in the settings)."""

    def for_user(self, name: str, *, hub_admin: bool = False) -> Services: ...

    @property
    def operations_per_user(self) -> int:
        """``c.GPUDevService.operations_per_user`` (0: no limit)."""
        ...

    @property
    def reads_per_user(self) -> int:
        """``c.GPUDevService.reads_per_user`` (0: no limit)."""
        ...


class OperationCount:
    """The blocking operations the shared service runs for each user now: requests other
    than reads (starts, stops, commits, removals: seconds to minutes each, in workers every
    user shares) and kernel launches. One more than ``c.GPUDevService.operations_per_user``
    of a user's is refused at once (``LimitReached``), not queued behind theirs for the
    workers others wait for. Only the event loop uses it: no lock."""

    def __init__(self) -> None:
        self.by_user: dict[str, int] = {}

    @classmethod
    def of(cls, settings: dict[str, Any]) -> OperationCount:
        """The count of the web application whose ``settings`` these are."""
        return kept_in(settings, OPERATIONS_KEY, cls)

    @contextlib.contextmanager
    def held(self, user: str, limit: int) -> Iterator[None]:
        """One operation of ``user``'s while the block runs; ``LimitReached`` when they have
        ``limit`` running already (0: no limit)."""
        running = self.by_user.get(user, 0)
        if limit and running >= limit:
            raise LimitReached(
                f"You have {running} operations running in the gpudev service, the most one "
                "user may at once (c.GPUDevService.operations_per_user): try again once one "
                "has ended",
                details={"limit": "operations_per_user", "running": running},
            )
        self.by_user[user] = running + 1
        try:
            yield
        finally:
            left = self.by_user.get(user, 0) - 1
            if left > 0:
                self.by_user[user] = left
            else:
                self.by_user.pop(user, None)


class ReadQueue:
    """The reads (GET, HEAD) the shared service runs for each user now: a listing, a diff or
    a log holds one of the workers every user's reads share (a diff of a container with many
    changes, seconds). At most ``c.GPUDevService.reads_per_user`` of a user's run at once;
    more wait for theirs (not for the workers), so one user's many reads never hold every
    worker, and the panel's parallel polls are never refused. Only the event loop uses it."""

    def __init__(self) -> None:
        #: Per user with reads running or waiting: their semaphore and how many there are.
        self.by_user: dict[str, tuple[asyncio.Semaphore, int]] = {}

    @classmethod
    def of(cls, settings: dict[str, Any]) -> ReadQueue:
        """The queue of the web application whose ``settings`` these are."""
        return kept_in(settings, READS_KEY, cls)

    @contextlib.asynccontextmanager
    async def held(self, user: str, limit: int) -> AsyncIterator[None]:
        """One read of ``user``'s while the block runs, once fewer than ``limit`` of theirs
        run (0: no limit)."""
        if not limit:
            yield
            return
        semaphore, waiting = self.by_user.get(user) or (asyncio.Semaphore(limit), 0)
        self.by_user[user] = (semaphore, waiting + 1)
        try:
            async with semaphore:
                yield
        finally:
            semaphore, waiting = self.by_user[user]
            if waiting > 1:
                self.by_user[user] = (semaphore, waiting - 1)
            else:
                del self.by_user[user]


@runtime_checkable
class AdminStatus(Protocol):
    """An identity provider that says whether a user is an administrator now, without their
    token (``shared.identity.HubIdentityProvider``): rights granted earlier are checked
    again when they are used."""

    async def is_admin(self, name: str) -> bool: ...


def authorized_to_execute(method: F) -> F:
    """``@authorized`` for the ``execute`` action: starting a container runs code in it."""
    return cast(F, authorized("execute")(method))


def maps_errors(
    method: Callable[..., Awaitable[None]],
) -> Callable[..., Awaitable[None]]:
    """Answer a ``GPUDevError`` with its status and JSON body (the one place that does); an
    engine failure no manager converted becomes one here, without the engine's words."""

    @functools.wraps(method)
    async def wrapper(self: GPUDevHandler, *args: Any, **kwargs: Any) -> None:
        try:
            with engine_errors(f"{self.request.method} {self.logged_path}", self.log):
                await method(self, *args, **kwargs)
        except GPUDevError as err:
            self.log.info(
                "gpudev %s %s -> %s: %s",
                self.request.method,
                self.logged_path,
                err.status,
                err.message,
            )
            self.set_status(err.status)
            self.finish(json.dumps(err.to_json()))

    return wrapper


class GPUDevHandler(APIHandler):
    """Base of every gpudev handler."""

    auth_resource = SETTINGS_KEY

    @property
    def logged_path(self) -> str:
        """The request's path as gpudev's log lines write it (a handler whose path holds a
        secret, the proxy's capability, writes it without)."""
        return self.request.path

    @property
    def gpudev(self) -> Services:
        """The managers ``GPUDevApp.initialize_settings`` built (``services.Services``); in
        the shared service, the view of them of the user this request acts for."""
        user = self.current_user
        if user is None:  # only routes with a grant of their own (see ``gpudev_of``)
            raise web.HTTPError(403)
        return self.gpudev_of(user.username, admin=getattr(user, "admin", False) is True)

    @property
    def culler(self) -> GPUCuller:
        """The idle GPU kernel reclaimer of this server's kernels (in client mode its own:
        the kernels are this server's, their containers the service's)."""
        own = self.settings.get(CULLER_KEY)
        return own if isinstance(own, GPUCuller) else self.gpudev.culler

    def gpudev_of(self, name: str, *, admin: bool) -> Services:
        """The managers as user ``name`` sees them in the shared service (``admin``: the Hub
        says so); in a single-user server, its managers, whoever ``name`` is."""
        held = self.settings[SETTINGS_KEY]
        if isinstance(held, Services):
            return held
        return cast(UserViews, held).for_user(name, hub_admin=admin)

    def check_may_change_hosts(self) -> None:
        """In the shared service only administrators add and remove hosts: every user's
        containers would run there, with the service's engine rights."""
        access = self.gpudev.containers.access
        if not access.single_user and not access.local().admin:
            raise Forbidden("Only administrators add or remove hosts of the shared gpudev service")

    async def blocking(self, func: Callable[..., T], *args: Any) -> T:
        """Run a blocking call (Docker SDK, NVML, nvidia-smi) off the event loop, in the
        workers of its kind of request (``executor_for``); in the shared service, one of the
        caller's reads (``ReadQueue``) or operations (``OperationCount``)."""
        method = self.request.method or "GET"
        run = asyncio.get_running_loop().run_in_executor
        held = self.settings.get(SETTINGS_KEY)
        # Only the shared service counts: a single-user server's handlers (the proxy's among
        # them: their user is not asked for, which a capability's request has none of) and
        # a client-mode server's own (its kernels' reclaim; no view there) are not.
        if not isinstance(held, UserViews):
            return await run(executor_for(method), func, *args)
        user = self.current_user
        if user is None:
            return await run(executor_for(method), func, *args)
        if method.upper() in ("GET", "HEAD"):
            # at most half the read workers for one user, whatever the setting
            limit = min(held.reads_per_user, max(1, _WORKERS // 2)) or held.reads_per_user
            async with ReadQueue.of(self.settings).held(user.username, limit):
                return await run(executor_for(method), func, *args)
        with OperationCount.of(self.settings).held(user.username, held.operations_per_user):
            return await run(executor_for(method), func, *args)

    def wants_events(self) -> bool:
        return "text/event-stream" in self.request.headers.get("Accept", "")

    async def stream_events(self, what: str, func: Callable[..., Any], *args: Any) -> None:
        """Run ``func(*args, progress)`` in a worker thread and answer with server-sent
        events: ``progress`` events while it runs, then one ``result`` (its ``to_json()``) or
        ``error`` event (a ``GPUDevError``'s body with its status; anything else is logged and
        answered with a generic message). A client that goes away does not stop the work."""
        loop = asyncio.get_running_loop()
        queue: asyncio.Queue[tuple[str, dict[str, Any]]] = asyncio.Queue()

        def progress(event: dict[str, Any]) -> None:
            loop.call_soon_threadsafe(queue.put_nowait, ("progress", event))

        async def run() -> None:
            try:
                with engine_errors(what, self.log):
                    result = await self.blocking(func, *args, progress)
            except GPUDevError as err:
                await queue.put(("error", {"status": err.status, **err.to_json()}))
            except Exception:
                self.log.exception("gpudev: %s failed", what)
                failed = {"status": 500, "error": "internal"}
                await queue.put(
                    ("error", {**failed, "message": f"{what} failed (see the server log)"})
                )
            else:
                await queue.put(("result", result.to_json()))

        self.set_header("Content-Type", "text/event-stream")
        self.set_header("Cache-Control", "no-cache")
        task = asyncio.ensure_future(run())
        while True:
            kind, data = await queue.get()
            self.write(f"event: {kind}\ndata: {json.dumps(data)}\n\n")
            try:
                await self.flush()
            except Exception:  # the client went away; the work still finishes
                self.log.info("gpudev: progress stream closed by the client")
            if kind in ("result", "error"):
                break
        await task
        self.finish()
