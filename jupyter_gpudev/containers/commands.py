"""Commands gpudev runs in a dev container: the environment's lifecycle commands, and those of
its Dev Container Features (each before the environment's own of the same step, in install
order; recorded on the features' image, ``labels.L_FEATURE_COMMANDS``), bounded in time and in
the output kept, and closing the engine's streams."""

from __future__ import annotations

import contextlib
import re
import threading
import time
from collections import deque
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import replace
from typing import Any

import docker.errors
from docker.models.containers import Container
from docker.utils import socket as docker_socket

from ..engine import Progress
from ..environments import Environment
from ..environments.features import read_commands_record
from ..errors import ENGINE_FAILURES, BadRequest, EngineError, GPUDevError
from ..labels import L_FEATURE_COMMANDS, L_REMOTE_USER


def run_lifecycle_commands(
    container: Container, env: Environment, say: Progress, *, timeout: float, log: Any
) -> tuple[str, ...]:
    """Run the lifecycle commands of the environment and of its features
    (``lifecycle_steps``) in ``container`` (each bounded by ``timeout`` seconds, its last lines
    reported); returns the warnings."""
    warnings: list[str] = []
    try:
        features = feature_commands(container, env)
    except BadRequest as err:
        features = []
        warnings.append(f"the features' lifecycle commands were not run: {err.message}")
    for stage, label, argv in lifecycle_steps(env, features):
        say({"stage": stage, "message": " ".join(argv)})
        try:
            code, lines = _run_bounded(
                container,
                argv,
                workdir=env.workspace_folder,
                environment=dict(env.container_env),
                timeout=timeout,
            )
        except (docker.errors.DockerException, GPUDevError) as exc:
            log.warning("%s of %s failed: %r", stage, container.name, exc)
            code, lines = -1, []
        for line in lines:
            say({"stage": stage, "message": line})
        if code is None:
            warnings.append(
                f"{stage}{label} was still running after {timeout:g} s; "
                "it goes on in the container, unwatched"
            )
        elif code != 0:
            warnings.append(f"{stage}{label} exited with {code}")
    return tuple(warnings)


_USER_RE = re.compile(r"^[A-Za-z0-9_][A-Za-z0-9_.-]{0,31}(?::[A-Za-z0-9_][A-Za-z0-9_.-]{0,31})?\Z")


def exec_user(container: Any) -> str:
    """Who gpudev's execs in ``container`` (kernels, terminals, lifecycle commands) run as: the
    user its create recorded (``labels.L_REMOTE_USER``, set on every container gpudev creates,
    so an image's label of that name is never the one read; see ``targets.exec_user``); ``""``
    (the container's own user) when none or not a user's name. A container object without its
    configuration (made from an id) is inspected first."""
    attrs = getattr(container, "attrs", None) or {}
    if "Config" not in attrs:
        with contextlib.suppress(*ENGINE_FAILURES):
            container.reload()
        attrs = getattr(container, "attrs", None) or {}
    labels = (attrs.get("Config") or {}).get("Labels") or {}
    value = str(labels.get(L_REMOTE_USER) or "")
    return value if _USER_RE.match(value) else ""


def close_stream(stream: Any) -> None:
    """Close what docker-py handed out as a stream or socket (``socket=True``, a log stream):
    the object itself, the HTTP response it keeps alive and the connection's socket (closing
    the first alone leaves the connection open)."""
    for part in (stream, getattr(stream, "_response", None), getattr(stream, "_sock", None)):
        close = getattr(part, "close", None)
        if close is not None:
            # (already closed by another part; or docker-py's stream over an ssh:// host,
            # which refuses to close itself: its response, next, is closed)
            with contextlib.suppress(OSError, ValueError, docker.errors.DockerException):
                close()


#: A lifecycle command's last lines reported, and the most characters of each.
_LAST_LINES = 20


_LINE_CHARS = 2000


def _run_bounded(
    container: Container,
    argv: list[str],
    *,
    workdir: str,
    environment: dict[str, str],
    timeout: float,
) -> tuple[int | None, list[str]]:
    """Run ``argv`` in ``container`` and return its exit code (``None``: still running after
    ``timeout`` seconds; it goes on, read to its end by a background thread) and its last
    ``_LAST_LINES`` lines of output, each cut at ``_LINE_CHARS``: whatever it prints, only
    that much is ever held."""
    if container.client is None:
        raise EngineError(f"No engine client for {container.name}")
    api = container.client.api
    exec_id = api.exec_create(
        str(container.id),
        argv,
        workdir=workdir,
        environment=environment,
        user=exec_user(container),
    )["Id"]
    last: deque[str] = deque(maxlen=_LAST_LINES)
    partial = [""]

    def read() -> None:
        # A read can time out on a command silent for long (the client's timeout): the exit
        # is then waited for below.
        with contextlib.suppress(*ENGINE_FAILURES, OSError):
            sock = api.exec_start(exec_id, socket=True)
            try:
                frames = docker_socket.frames_iter(sock, tty=False)  # type: ignore[no-untyped-call]
                for _, chunk in frames:
                    text = partial[0] + chunk.decode(errors="replace")
                    *whole, rest = text.split("\n")
                    last.extend(line[:_LINE_CHARS] for line in whole)
                    partial[0] = rest[-_LINE_CHARS:]
            finally:
                close_stream(sock)

    deadline = time.monotonic() + timeout
    reader = threading.Thread(target=read, name="gpudev-lifecycle", daemon=True)
    reader.start()
    reader.join(timeout)
    state = api.exec_inspect(exec_id)
    while state.get("Running") and time.monotonic() < deadline:
        time.sleep(0.5)
        state = api.exec_inspect(exec_id)
    if state.get("Running"):
        return None, list(last)
    reader.join(5.0)
    if partial[0]:
        last.append(partial[0])
    code = state.get("ExitCode")
    return (code if isinstance(code, int) else -1), list(last)


#: The steps that run at every start; the others run once, after the container is created.
_EVERY_START = ("postStartCommand", "postAttachCommand")


def feature_commands(container: Container, env: Environment) -> list[tuple[str, dict[str, Any]]]:
    """The lifecycle commands of ``env``'s features, as recorded on the image ``container``
    runs (its labels include its image's): (reference, {step: command}) in install order.
    Read only for an environment with features, whose features build always sets the label;
    ``BadRequest`` when the record is not one."""
    if not env.features:
        return []
    text = (container.labels or {}).get(L_FEATURE_COMMANDS)
    return [] if not text else read_commands_record(str(text))


def lifecycle_steps(
    env: Environment, features: Sequence[tuple[str, Mapping[str, Any]]] = ()
) -> Iterator[tuple[str, str, list[str]]]:
    """The lifecycle commands in the specification's order: (stage, label, argv); per step,
    each feature's (``features``: (reference, {step: command}) in install order) before the
    environment's own. The first three steps run once, after the container is created; the
    last two at each start (a start is when kernels and terminals may attach: gpudev has no
    attach of its own). At a restart (``at_restart``) only the last two."""
    for stage, command in (
        ("onCreateCommand", env.on_create_command),
        ("updateContentCommand", env.update_content_command),
        ("postCreateCommand", env.post_create_command),
        ("postStartCommand", env.post_start_command),
        ("postAttachCommand", env.post_attach_command),
    ):
        if env.restarting and stage not in _EVERY_START:
            continue
        for reference, steps in features:
            for label, argv in lifecycle_argvs(steps.get(stage)):
                yield stage, f" of the feature {reference!r}{label}", argv
        for label, argv in lifecycle_argvs(command):
            yield stage, label, argv


def has_lifecycle_commands(env: Environment) -> bool:
    """Whether a first start of ``env`` may run a lifecycle command (with features: those
    may have some, known once they are fetched)."""
    return bool(env.features) or next(lifecycle_steps(env), None) is not None


def at_restart(env: Environment) -> Environment:
    """``env`` as a second start runs it: without the commands that run once (its features'
    too)."""
    return replace(
        env,
        on_create_command=None,
        update_content_command=None,
        post_create_command=None,
        restarting=True,
    )


def lifecycle_argvs(command: Any) -> Iterator[tuple[str, list[str]]]:
    """Lifecycle commands as argv lists: a string runs under ``sh -c`` inside the container."""
    if command is None:
        return
    if isinstance(command, str):
        yield "", ["/bin/sh", "-c", command]
    elif isinstance(command, list):
        yield "", [str(part) for part in command]
    elif isinstance(command, dict):
        for key in sorted(command):
            for _, argv in lifecycle_argvs(command[key]):
                yield f" ({key})", argv
