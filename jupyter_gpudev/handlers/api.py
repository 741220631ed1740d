"""Thin REST handlers under ``/gpudev/api/``: parse, authorise, call a manager in a worker
thread; errors are mapped by ``base.maps_errors``."""

from __future__ import annotations

import asyncio
import functools
import json
import re
from typing import Any

from jupyter_server.auth.decorator import allow_unauthenticated, authorized
from prometheus_client import CONTENT_TYPE_LATEST, REGISTRY, generate_latest
from tornado import web

from ..changes.commit import CommitOptions
from ..changes.model import check_change_ids
from ..containers import StartRequest
from ..engine import unreachable_summary
from ..errors import BadRequest, EngineError, Forbidden
from ..kernels.placements import PLACEMENTS
from ..services import Services
from .base import SETTINGS_KEY, GPUDevHandler, authorized_to_execute, maps_errors


class UsageHandler(GPUDevHandler):
    """``GET /gpudev/api/usage[?host=NAME]``: what each GPU is doing, by dev container and
    owner (``containers.usage``): ``{"hosts": [{"host", "reason", "gpus": [{"uuid", "index",
    "name", "memory_total_mib", "memory_used_mib", "utilization_percent", "processes_listed",
    "processes": [{"kind", "container", "owner", "pid", "uid", "kernel", "orphan",
    "memory_used_mib", "sm_percent", "memory_percent"}]}], "kernels": [{"kernel",
    "container", "owner", "idle_seconds"}]}]}``. Another user's processes are "another user",
    without container, PID or kernel; a process of no dev container is "other" (its PID and
    user id for administrators only). ``kernel``: the live gpudev kernel whose process tree
    holds it; ``orphan``: left behind by a kernel that ended (leaked GPU memory). 404 for an
    unknown ``host``.

    ``GET /gpudev/api/usage?kernel=ID`` (also ``GET /gpudev/api/kernels/ID/usage``): what one
    kernel of the caller's holds, for the notebook's badge: ``{"kernel": {"id", "host",
    "container", "gpus": [{"uuid", "index", "name", "memory_used_mib", "sm_percent",
    "memory_percent", "gpu_memory_used_mib", "gpu_memory_total_mib",
    "gpu_utilization_percent"}], "reason"}}``: each GPU its processes are on or its container
    leased, ``memory_used_mib`` the sum of its processes' (``sm_percent`` and
    ``memory_percent`` theirs, ``null`` when not sampled), the ``gpu_*`` the whole GPU's;
    ``reason``: why its processes are not known (``null``: they are). 404, with one message,
    for a kernel that is unknown, ended, not a gpudev one or another user's."""

    @web.authenticated
    @authorized
    @maps_errors
    async def get(self) -> None:
        kernel_id = self.get_argument("kernel", None)
        if kernel_id is not None:
            await self.finish_kernel(kernel_id)
            return
        host = self.get_argument("host", None) or None
        hosts = await self.blocking(self.gpudev.usage.usage, host)
        self.finish(json.dumps({"hosts": [usage.to_json() for usage in hosts]}))

    async def finish_kernel(self, kernel_id: str) -> None:
        if not re.fullmatch(r"[0-9a-f-]{1,64}", kernel_id):
            raise BadRequest('"kernel" must be a kernel id')
        usage = await self.blocking(self.gpudev.usage.kernel_usage, kernel_id)
        self.finish(json.dumps({"kernel": usage.to_json()}))


class KernelUsageHandler(UsageHandler):
    """``GET /gpudev/api/kernels/ID/usage``: ``GET /gpudev/api/usage?kernel=ID``."""

    @web.authenticated
    @authorized
    @maps_errors
    async def get(self, kernel_id: str) -> None:
        await self.finish_kernel(kernel_id)


class MetricsHandler(GPUDevHandler):
    """``GET /metrics``, in place of the Jupyter server's own: the same Prometheus metrics
    (prometheus_client's default registry, gpudev's gauges among them: ``containers.metrics``),
    gathered off the event loop (a scrape reads the GPUs and the hosts' ``/proc``). A
    single-user server answers as its own would (``c.ServerApp.authenticate_prometheus``: a
    logged-in user, else 403); the shared service, which every Hub user may log in to, only
    its administrators (403 for anyone else)."""

    @allow_unauthenticated
    @maps_errors
    async def get(self) -> None:
        if isinstance(self.settings[SETTINGS_KEY], Services):
            if self.settings.get("authenticate_prometheus", True) and not self.logged_in:
                raise web.HTTPError(403)
        elif self.current_user is None or not self.gpudev.containers.access.local().admin:
            raise Forbidden("The gpudev service's metrics are for its administrators")
        data = await self.blocking(generate_latest, REGISTRY)
        self.set_header("Content-Type", CONTENT_TYPE_LATEST)
        # Not APIHandler.finish: it would answer JSON's content type.
        web.RequestHandler.finish(self, data)


class HostsHandler(GPUDevHandler):
    """``GET /gpudev/api/hosts``: every host with its engine, GPUs and active GPU ``leases``
    (``lease_id``, ``container``, ``owner``, ``gpu_uuids``, ``since``).

    503 when no host at all is reachable (the body still lists them, with reasons).
    """

    @web.authenticated
    @authorized
    @maps_errors
    async def get(self) -> None:
        infos = await self.blocking(self.gpudev.containers.describe_hosts)
        hosts = [info.to_json() for info in infos]
        error = unreachable_summary(infos)
        if error is not None:
            error.details["hosts"] = hosts
            raise error
        self.finish(json.dumps({"hosts": hosts}))

    @web.authenticated
    @authorized_to_execute
    @maps_errors
    async def post(self) -> None:
        """Add a host at run time: ``{"name", "url", ...options, "check"?}``; 201 with it.
        Needs ``execute``: the server will run containers, and commands, on it."""
        try:
            body = json.loads(self.request.body or b"{}")
        except ValueError as exc:
            raise BadRequest('The body must be JSON: {"name": ..., "url": ...}') from exc
        if not isinstance(body, dict):
            raise BadRequest('The body must be a JSON object: {"name": ..., "url": ...}')
        name, url, check = body.pop("name", None), body.pop("url", None), body.pop("check", True)
        if not isinstance(name, str) or not isinstance(url, str):
            raise BadRequest('"name" and "url" are required strings')
        if not isinstance(check, bool):
            raise BadRequest('"check" must be true or false')
        self.check_may_change_hosts()
        add = functools.partial(
            self.gpudev.host_pool.add,
            check=check,
            detailed=self.gpudev.containers.access.local().admin,
        )
        info = await self.blocking(add, name, url, body)
        self.set_status(201)
        self.finish(json.dumps(info.to_json()))


class HostHandler(GPUDevHandler):
    """``GET /gpudev/api/hosts/NAME``: one host, with its leases; 404 if unknown, 503 if its
    engine is down."""

    @web.authenticated
    @authorized
    @maps_errors
    async def get(self, name: str) -> None:
        (info,) = await self.blocking(self.gpudev.containers.describe_hosts, name)
        error = unreachable_summary([info])
        if error is not None:
            error.details["hosts"] = [info.to_json()]
            raise error
        self.finish(json.dumps(info.to_json()))

    @web.authenticated
    @authorized_to_execute
    @maps_errors
    async def delete(self, name: str) -> None:
        """Remove a host added at run time; 409 while dev containers remain on it."""
        self.check_may_change_hosts()
        await self.blocking(self.gpudev.containers.remove_host, name)
        self.set_status(204)
        self.finish()


def _flag(value: str | None) -> bool:
    return (value or "").lower() in ("1", "true", "yes")


class EnvironmentsHandler(GPUDevHandler):
    """``GET /gpudev/api/environments``: the environments a user can start, and broken files."""

    @web.authenticated
    @authorized
    @maps_errors
    async def get(self) -> None:
        manager = self.gpudev.containers
        listing = await self.blocking(manager.environments.list, manager.root_dir)
        self.finish(
            json.dumps(
                {
                    "environments": [env.to_json() for env in listing.environments],
                    "problems": listing.problems,
                }
            )
        )


def _shown(value: Any) -> str:
    """A value of a request's body for a message: as JSON, cut short."""
    text = json.dumps(value, allow_nan=True)
    return text if len(text) <= 60 else text[:60] + "..."


def _start_request(body: Any) -> StartRequest:
    """Validate a start request's JSON body; every problem is a 400 naming the field."""
    if not isinstance(body, dict):
        raise BadRequest("The body must be a JSON object")
    unknown = set(body) - {"environment", "host", "name", "gpus", "gpu_uuids", "image"}
    if unknown:
        raise BadRequest(f"Unknown fields: {', '.join(sorted(unknown))}")
    environment = body.get("environment")
    if not isinstance(environment, str) or not environment:
        raise BadRequest("'environment' (a name from /gpudev/api/environments) is required")
    for key in ("host", "name", "image"):
        if body.get(key) is not None and not isinstance(body[key], str):
            raise BadRequest(f"'{key}' must be a string")
    gpus = body.get("gpus")
    if gpus is not None and (not isinstance(gpus, int) or isinstance(gpus, bool) or gpus < 0):
        raise BadRequest(f"'gpus' must be a whole number, 0 or more; got {_shown(gpus)}")
    uuids = body.get("gpu_uuids")
    uuids = [] if uuids is None else uuids  # false, 0, "" are not "none asked for"
    if not isinstance(uuids, list) or not all(isinstance(u, str) for u in uuids):
        raise BadRequest("'gpu_uuids' must be a list of GPU UUIDs")
    return StartRequest(
        environment=environment,
        host=body.get("host"),
        name=body.get("name"),
        gpus=gpus,
        gpu_uuids=tuple(uuids),
        image=body.get("image"),
    )


class ContainersHandler(GPUDevHandler):
    """``GET /gpudev/api/containers[?all=1]`` lists (with ``uncommitted`` counted, kept a
    while: see ``ChangeCounts``); ``POST`` starts one.

    A POST with ``Accept: text/event-stream`` streams the progress (pull, build, lease, create,
    start, lifecycle commands) as server-sent events, ending with a ``result`` or ``error``
    event; otherwise it answers 201 with the container once it runs.
    """

    @web.authenticated
    @authorized
    @maps_errors
    async def get(self) -> None:
        all_states = _flag(self.get_argument("all", "1"))
        listing = functools.partial(self.gpudev.containers.list, count_changes=True)
        infos = await self.blocking(listing, all_states)
        self.finish(json.dumps({"containers": [info.to_json() for info in infos]}))

    @web.authenticated
    @authorized_to_execute  # starting runs the environment's lifecycle commands
    @maps_errors
    async def post(self) -> None:
        try:
            body = json.loads(self.request.body or b"{}")
        except ValueError as exc:
            raise BadRequest("The body is not valid JSON") from exc
        # The owner is the user this server acts for (c.Access.user), whoever logged in.
        request = _start_request(body)
        if self.wants_events():
            await self.stream_events(
                "Starting the container", self.gpudev.containers.start, request
            )
            return
        info = await self.blocking(self.gpudev.containers.start, request)
        self.set_status(201)
        self.finish(json.dumps(info.to_json()))


class ContainerHandler(GPUDevHandler):
    """``GET /gpudev/api/containers/NAME``; ``DELETE`` removes it (``?force=1`` with changes)."""

    @web.authenticated
    @authorized
    @maps_errors
    async def get(self, name: str) -> None:
        get = functools.partial(self.gpudev.containers.get, count_changes=True)
        info = await self.blocking(get, name)
        self.finish(json.dumps(info.to_json()))

    @web.authenticated
    @authorized
    @maps_errors
    async def delete(self, name: str) -> None:
        force = _flag(self.get_argument("force", "0"))
        await self.blocking(self.gpudev.containers.remove, name, None, force)
        self.set_status(204)
        self.finish()


class ContainerStopHandler(GPUDevHandler):
    """``POST /gpudev/api/containers/NAME/stop``: stops it; the lease is freed once stopped."""

    @web.authenticated
    @authorized
    @maps_errors
    async def post(self, name: str) -> None:
        info = await self.blocking(self.gpudev.containers.stop, name)
        self.finish(json.dumps(info.to_json()))


class ContainerStartHandler(GPUDevHandler):
    """``POST /gpudev/api/containers/NAME/start``: starts a stopped one with its same GPUs."""

    @web.authenticated
    @authorized_to_execute
    @maps_errors
    async def post(self, name: str) -> None:
        info = await self.blocking(self.gpudev.containers.resume, name)
        self.finish(json.dumps(info.to_json()))


class ContainerPinHandler(GPUDevHandler):
    """``PUT /gpudev/api/containers/NAME/pin`` pins a shared dev container (it keeps running
    after its last kernel ends); ``DELETE`` unpins it. Both answer the container."""

    @web.authenticated
    @authorized
    @maps_errors
    async def put(self, name: str) -> None:
        info = await self.blocking(self.gpudev.containers.pin, name, None, True)
        if PLACEMENTS.warm is not None:  # a pinned container is kept for kernels: warm some
            PLACEMENTS.warm.fill(self.gpudev.containers, (info.host, info.name))
        self.finish(json.dumps(info.to_json()))

    @web.authenticated
    @authorized
    @maps_errors
    async def delete(self, name: str) -> None:
        info = await self.blocking(self.gpudev.containers.pin, name, None, False)
        self.finish(json.dumps(info.to_json()))


class ContainerDiffHandler(GPUDevHandler):
    """``GET /gpudev/api/containers/NAME/diff[?exclude=ID&exclude=ID]``: its changes as a
    Dockerfile diff (``jupyter gpudev diff NAME --json``): ``diff``, ``dockerfile``,
    ``created``, ``files``, ``reported``, ``digest``, ``empty``, the change set rendered under
    ``changes``, every change as ``items`` (``id``, ``kind``, ``label``, ``detail``) and the
    ``excluded`` ids (those matching no change also in ``excluded_unknown``). 400 for an
    ``exclude`` that is not a change id."""

    @web.authenticated
    @authorized
    @maps_errors
    async def get(self, name: str) -> None:
        exclude = _change_ids(self.get_arguments("exclude"))
        diff = functools.partial(self.gpudev.capture.diff, exclude=exclude)
        captured, rendered = await self.blocking(diff, name)
        self.finish(
            json.dumps(
                {
                    **rendered.to_json(),
                    "changes": captured.changes.to_json(),
                    **captured.selection_json(),
                }
            )
        )


class ContainerCommitHandler(GPUDevHandler):
    """``POST /gpudev/api/containers/NAME/commit``: ``jupyter gpudev commit NAME`` with a JSON
    body of options: ``write``, ``verify``, ``push`` (booleans), ``snapshot`` (an image tag),
    ``message``, ``exclude`` (change ids of the diff's ``items`` to leave out) and ``expect``
    (the diff's ``digest`` the user reviewed: 409 ``diff_changed``, nothing written, when the
    diff is another one now). Answers the diff, what was written, the verify report, the
    snapshot, ``items``, ``excluded``, ``excluded_unknown`` (and ``held`` once written); with
    ``Accept: text/event-stream``, progress events first (capture, verify build, snapshot,
    push), then the ``result`` or ``error`` event. All options false only renders the diff.
    Needs the ``execute`` permission: a verify build runs the Dockerfile's commands."""

    @web.authenticated
    @authorized_to_execute
    @maps_errors
    async def post(self, name: str) -> None:
        options = _commit_options(self.request.body)
        options.check()
        if self.wants_events():
            await self.stream_events(
                f"Committing {name}", self.gpudev.committer.commit, name, options, None
            )
            return
        result = await self.blocking(self.gpudev.committer.commit, name, options)
        self.finish(json.dumps(result.to_json()))


def _commit_options(raw: bytes | None) -> CommitOptions:
    try:
        body = json.loads(raw or b"{}")
    except ValueError as exc:
        raise BadRequest('The body must be JSON, e.g. {"write": true}') from exc
    if not isinstance(body, dict):
        raise BadRequest('The body must be a JSON object, e.g. {"write": true}')
    known = {"write", "verify", "push", "snapshot", "message", "exclude", "expect"}
    unknown = sorted(set(body) - known)
    if unknown:
        raise BadRequest(f"Unknown commit option(s): {', '.join(unknown)}")
    for key in ("write", "verify", "push"):
        if not isinstance(body.get(key, False), bool):
            raise BadRequest(f'"{key}" must be true or false')
    for key in ("snapshot", "message", "expect"):
        if body.get(key) is not None and not isinstance(body[key], str):
            raise BadRequest(f'"{key}" must be a string')
    if body.get("expect") == "":
        raise BadRequest('"expect" is empty: leave it out, or give the diff\'s "digest"')
    exclude = body.get("exclude", [])
    if exclude is None:
        exclude = []
    if not isinstance(exclude, list):
        raise BadRequest('"exclude" must be a list of change ids (the diff\'s "items")')
    return CommitOptions(
        write=body.get("write", False),
        verify=body.get("verify", False),
        snapshot=body.get("snapshot") or None,
        push=body.get("push", False),
        message=body.get("message") or None,
        exclude=_change_ids(exclude),
        expect=body.get("expect") or None,
    )


def _change_ids(values: list[Any]) -> tuple[str, ...]:
    """``exclude``'s change ids; a bad one is a 400 that names ``exclude`` and the value."""
    try:
        return check_change_ids(values)
    except BadRequest as err:
        raise BadRequest(f'"exclude": {err.message}', details=err.details) from None


class ContainerTerminalHandler(GPUDevHandler):
    """``POST /gpudev/api/containers/NAME/terminal``: a Jupyter terminal whose shell runs in the
    container; answers the terminal's model (``{"name": ...}``, open it with terminal:open)."""

    #: Seconds the new shell is given to fail (a refused ``docker exec`` ends within ~0.1 s).
    TERMINAL_SETTLE = 0.3

    @web.authenticated
    @authorized_to_execute
    @maps_errors
    async def post(self, name: str) -> None:
        argv = await self.blocking(self.gpudev.containers.terminal_command, name)
        manager = self.settings.get("terminal_manager")
        if manager is None:
            if not self.gpudev.containers.access.single_user:
                raise EngineError(
                    "The shared gpudev service opens no Jupyter terminals of its own: open the "
                    "terminal from your Jupyter server (it attaches to .../containers/NAME/tty)"
                )
            raise EngineError("Terminals are disabled on this Jupyter server")
        model = manager.create(shell_command=argv)
        # A shell that ends at once (the container stopped meanwhile, the engine refused the
        # exec) must be reported here: JupyterLab's terminal:open would otherwise start a
        # shell on the server under the same name, which the user would take for the
        # container's.
        await asyncio.sleep(self.TERMINAL_SETTLE)
        if not terminal_alive(manager, str(model.get("name", ""))):
            raise EngineError(
                f"The shell in {name!r} ended as soon as it started: is the container still "
                "running? See its logs, then try again."
            )
        self.set_status(201)
        self.finish(json.dumps(model))


class ContainerLogsHandler(GPUDevHandler):
    """``GET /gpudev/api/containers/NAME/logs[?tail=N]``: ``{"logs": TEXT}``, the container's
    output (its last N lines with ``tail``, 1-100000)."""

    @web.authenticated
    @authorized
    @maps_errors
    async def get(self, name: str) -> None:
        raw = self.get_argument("tail", "")
        # ASCII digits only: "¹" is a digit to str.isdigit, not to int (a 500 once).
        if raw and not (raw.isascii() and raw.isdigit() and 1 <= int(raw) <= 100_000):
            raise BadRequest(
                f'"tail" must be a number of lines from 1 to 100000; got {_shown(raw)}'
            )
        tail = int(raw) if raw else None

        def read() -> str:
            return "".join(self.gpudev.containers.logs(name, tail=tail))

        text = await self.blocking(read)
        self.finish(json.dumps({"logs": text}))


class ReclaimsHandler(GPUDevHandler):
    """``GET /gpudev/api/reclaims``: GPU kernels about to be reclaimed for idleness."""

    @web.authenticated
    @authorized
    @maps_errors
    async def get(self) -> None:
        culler = self.culler
        pending = await self.blocking(culler.pending)
        self.finish(
            json.dumps(
                {
                    "reclaims": [r.to_json() for r in pending],
                    "idle_timeout": culler.idle_timeout,
                    "warning_seconds": culler.warning_seconds,
                }
            )
        )


class KernelKeepHandler(GPUDevHandler):
    """``POST /gpudev/api/kernels/ID/keep``: the user keeps an idle GPU kernel (for now)."""

    @web.authenticated
    @authorized
    @maps_errors
    async def post(self, kernel_id: str) -> None:
        await self.blocking(self.culler.keep, kernel_id)
        self.set_status(204)
        self.finish()


class KernelReleaseHandler(GPUDevHandler):
    """``POST /gpudev/api/kernels/ID/release``: shut an idle GPU kernel down now; its
    container is stopped and kept, its GPUs freed."""

    @web.authenticated
    @authorized
    @maps_errors
    async def post(self, kernel_id: str) -> None:
        await self.culler.release(kernel_id)
        self.set_status(204)
        self.finish()


class ContainerPortsHandler(GPUDevHandler):
    """``POST /gpudev/api/containers/NAME/ports`` with ``{"port": N}``: serve one more web port
    of the container through ``/gpudev/proxy/NAME/N/`` (kept across restarts of the server);
    answers the container, its ``web_ports`` included. Needs ``execute``: it opens a way in."""

    @web.authenticated
    @authorized_to_execute
    @maps_errors
    async def post(self, name: str) -> None:
        port = self.port_from_body(self.request.body)
        add = functools.partial(self.gpudev.containers.set_web_port, add=True)
        info = await self.blocking(add, name, port)
        self.finish(json.dumps(info.to_json()))

    @staticmethod
    def port_from_body(raw: bytes | None) -> int:
        try:
            body = json.loads(raw or b"{}")
        except ValueError as exc:
            raise BadRequest('The body must be JSON, e.g. {"port": 6006}') from exc
        port = body.get("port") if isinstance(body, dict) else None
        if not isinstance(port, int) or isinstance(port, bool) or not 1 <= port <= 65535:
            raise BadRequest('"port" must be a TCP port number (1-65535), e.g. {"port": 6006}')
        return port


class ContainerPortHandler(GPUDevHandler):
    """``DELETE /gpudev/api/containers/NAME/ports/PORT``: stop serving a port added with
    ``POST .../ports`` (the environment's forwardPorts stay); answers the container."""

    @web.authenticated
    @authorized_to_execute
    @maps_errors
    async def delete(self, name: str, port: str) -> None:
        remove = functools.partial(self.gpudev.containers.set_web_port, add=False)
        info = await self.blocking(remove, name, int(port))
        self.finish(json.dumps(info.to_json()))


class KernelHandler(GPUDevHandler):
    """``GET /gpudev/api/kernels/ID``: where a gpudev kernel of this server runs:
    ``kernel_id``, ``container``, ``host``, ``environment``, ``gpu_uuids``, ``shared``, the
    container's ``state`` and ``pod`` (it is a pod on a Kubernetes host). 404 for an unknown
    kernel and for one not in a dev container."""

    @web.authenticated
    @authorized
    @maps_errors
    async def get(self, kernel_id: str) -> None:
        info = await self.blocking(self.gpudev.containers.kernel, kernel_id)
        self.finish(json.dumps(info.to_json()))


def terminal_alive(manager: Any, name: str) -> bool:
    """Whether the Jupyter terminal ``name`` still has a live process (terminado forgets a
    terminal whose process ended)."""
    term = getattr(manager, "terminals", {}).get(name)
    process = getattr(term, "ptyproc", None)
    return process is not None and bool(process.isalive())
