"""Helper containers gpudev makes of an image, never of a dev container's own: the package
probe, the one that runs the image's programs, and containers that never start, whose files
the engine reads. The image may hold what a dev container's root wrote (a snapshot, the image
a verify build rebuilt), so each is confined as a dev container is and more
(``containers.create.helper_args``) and removed after; the probe is bounded in time and in
the output read."""

from __future__ import annotations

import contextlib
import threading
import time
from collections.abc import Iterator, Mapping
from typing import TYPE_CHECKING, Any

import docker

from ..containers.commands import close_stream
from ..containers.create import Confinement, helper_args
from ..errors import ENGINE_FAILURES, EngineError, engine_errors

if TYPE_CHECKING:
    from docker.models.containers import Container

#: How long the image probe may run (a pod's probe has as long: ``podfiles``).
PROBE_TIMEOUT = 120.0
#: The most probe output read (a pod's probe reads as much).
PROBE_OUTPUT_LIMIT = 32 << 20
#: The one capability the probe keeps: reading every file of the image as root does (another
#: user's 0700 home, its virtual environments and user site).
_PROBE_CAPS = ["DAC_OVERRIDE"]


class ProbeFailed(EngineError):
    """The package probe of an image ran past its time, printed more than its limit or
    failed: it was stopped and removed, and nothing of its output is used."""

    code = "probe_failed"


def shown(image: str) -> str:
    """An image id as people see it (``sha256:`` and 12 digits); a name as it is."""
    return image[:19] if image.startswith("sha256:") else image


def _mib(size: int) -> str:
    return f"{size / (1 << 20):g} MiB"


def run_probe(
    client: docker.DockerClient,
    image: str,
    argv: list[str],
    environment: Mapping[str, str],
    confinement: Confinement,
    *,
    timeout: float = PROBE_TIMEOUT,
    limit: int = PROBE_OUTPUT_LIMIT,
) -> bytes:
    """The standard output of ``argv`` run in a helper container of ``image``: as root (only
    root keeps a capability through exec on Docker 20.10, and it reads ``/root``) with no
    capability but ``DAC_OVERRIDE`` on a read-only root, confined (``helper_args``). Stopped
    and removed once past ``limit`` bytes or ``timeout`` seconds (``ProbeFailed``); at most
    ``limit`` bytes and a chunk are ever held. Removed after in any case."""
    what = f"The package probe of {shown(image)}"
    args = helper_args(confinement)
    with engine_errors(f"Probing the packages of {shown(image)}"):
        container = client.containers.create(
            image,
            entrypoint=argv,
            command=[],
            environment=dict(environment),
            user="0",
            cap_add=list(_PROBE_CAPS),
            **args,
        )
    expired = threading.Event()
    stream: Any = None

    def stop() -> None:
        expired.set()
        with contextlib.suppress(*ENGINE_FAILURES):
            container.kill()
        close_stream(stream)

    timer = threading.Timer(timeout, stop)
    timer.daemon = True
    deadline = time.monotonic() + timeout
    late = ProbeFailed(f"{what} was still running after {timeout:g} s: it was stopped and removed")
    try:
        try:
            with engine_errors(f"Probing the packages of {shown(image)}"):
                stream = client.api.attach(
                    str(container.id), stdout=True, stderr=False, stream=True, logs=False
                )
                timer.start()
                container.start()
                output = _read(stream, limit, what)
                code = _exit_code(container, deadline)
        except (EngineError, OSError, ValueError) as exc:
            if expired.is_set():  # whatever the engine or the socket said after the kill
                raise late from None
            if isinstance(exc, EngineError):
                raise
            raise EngineError(f"{what} could not be read ({type(exc).__name__})") from exc
        if expired.is_set():
            raise late
        if code != 0:
            raise ProbeFailed(f"{what} {_why(container, code, args)}: its output is not used")
        return output
    finally:
        timer.cancel()
        close_stream(stream)
        with contextlib.suppress(*ENGINE_FAILURES):
            container.remove(force=True, v=True)  # and the volumes its image declares


def _read(stream: Iterator[bytes], limit: int, what: str) -> bytes:
    """The output of ``stream`` to its end; ``ProbeFailed`` once past ``limit`` bytes (at
    most a chunk more is held)."""
    output = bytearray()
    for chunk in stream:
        output += chunk
        if len(output) > limit:
            raise ProbeFailed(
                f"{what} printed more than {_mib(limit)}: it was stopped and removed (an "
                "image's package state is never that large)"
            )
    return bytes(output)


def _exit_code(container: Container, deadline: float) -> int:
    """The exit code of the probe, whose output ended: waited for until ``deadline`` (a
    process of it may hold on after its output closed)."""
    # Past the deadline by a little: the time limit's kill ends the wait first.
    status = container.wait(timeout=max(deadline - time.monotonic(), 0.0) + 10.0)
    return int(status.get("StatusCode", -1))


def _why(container: Container, code: int, args: Mapping[str, object]) -> str:
    """Why the probe ended with ``code``, in words."""
    with contextlib.suppress(*ENGINE_FAILURES):
        container.reload()
        if container.attrs.get("State", {}).get("OOMKilled"):
            memory = args.get("mem_limit")
            most = f" (it may use {_mib(memory)})" if isinstance(memory, int) else ""
            return f"ran out of memory{most}"
    return f"exited with {code}"


@contextlib.contextmanager
def inert(client: docker.DockerClient, image: str, confinement: Confinement) -> Iterator[Container]:
    """A container of ``image`` that is created and never started, for the engine to read its
    files: nothing of the image runs (its entrypoint does not exist, and it is confined like
    every helper should anyone start it); removed after."""
    with engine_errors(f"Reading the files of {shown(image)}"):
        helper = client.containers.create(
            image, entrypoint=["/nonexistent"], command=[], **helper_args(confinement)
        )
    try:
        yield helper
    finally:
        remove_patiently(helper)


#: Seconds a helper container's removal keeps trying while its engine does not answer (one
#: restarting), before it is left to the next sweep.
REMOVAL_PATIENCE = 20.0


def remove_patiently(helper: Container) -> None:
    """Remove ``helper``, retrying while its engine does not answer (a restart cut what it was
    used for) for up to ``REMOVAL_PATIENCE`` seconds; one already gone is removed."""
    deadline = time.monotonic() + REMOVAL_PATIENCE
    while True:
        try:
            helper.remove(force=True, v=True)
        except docker.errors.NotFound:
            return
        except ENGINE_FAILURES:
            if time.monotonic() >= deadline:
                return
            time.sleep(0.5)
        else:
            return
