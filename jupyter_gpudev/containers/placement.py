"""Where a start goes: the GPU request, the host that can take it, and the CUDA check.

``place`` asks each host what it needs (reachable? GPUs free now? a driver new enough for the
image?) and returns a ``Placement``; ``DevContainers.start`` consumes it without asking again.
The decisions themselves are pure functions here, tested without an engine
(``tests/unit/test_placement.py``).
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass

from ..engine import Host, HostPool, Inventory, Progress
from ..engine.info import EngineInfo
from ..environments import Environment, HostNeeds
from ..errors import FAILURES, BadRequest, GPUDevError
from ..leasing import GPURequest, Leasable, check_fit
from .model import StartRequest

_CUDA_REQ_RE = re.compile(r"cuda>=\s*([0-9]+(?:\.[0-9]+)?)")
_CUDA_VER_RE = re.compile(r"^([0-9]+)\.([0-9]+)")


class CudaMismatch(GPUDevError):
    """The image needs a newer CUDA than the host's driver supports."""

    status = 409
    exit_code = 5
    code = "cuda_mismatch"


class NoHostFits(GPUDevError):
    """No host can take a start request now; ``details['hosts']`` says why, for each."""

    status = 409
    exit_code = 5
    code = "no_host"


@dataclass(frozen=True)
class Placement:
    """Where a start goes, with what was learnt choosing it."""

    host: Host
    #: The GPUs to lease (``None``: a CPU container).
    gpu_request: GPURequest | None
    #: The host's GPUs when GPUs are asked for (``None`` otherwise).
    inventory: Inventory | None


@dataclass(frozen=True)
class HostReport:
    """One host, as placement saw it: ``reason`` why it cannot take the request (``None``:
    it can); ``reachable`` false when its engine did not answer."""

    name: str
    reachable: bool
    reason: str | None


def gpu_request(env: Environment, request: StartRequest) -> GPURequest | None:
    """The GPUs a start leases: the request's count or UUIDs, else the environment's."""
    if request.gpus is not None and request.gpu_uuids:
        raise BadRequest("Ask for a number of GPUs or for named GPUs, not both")
    if request.gpus is not None and request.gpus < 0:
        raise BadRequest("The number of GPUs cannot be negative")
    if request.gpu_uuids:
        return GPURequest(uuids=tuple(request.gpu_uuids))
    count = request.gpus if request.gpus is not None else env.gpu.count
    if env.gpu.mode == "none" and request.gpus is None:
        count = 0
    if count == 0:
        if env.gpu.mode == "required" and request.gpus == 0:
            raise BadRequest(f"The environment {env.name!r} requires a GPU")
        return None
    return GPURequest(count=count, min_memory_mib=env.gpu.min_memory_mib, model=env.gpu.model)


def gpus_optional(env: Environment, request: StartRequest) -> bool:
    """hostRequirements.gpu "optional" and no GPUs asked for by hand: run on the CPU rather
    than not at all when no GPU can be leased."""
    return env.gpu.mode == "optional" and request.gpus is None and not request.gpu_uuids


def choose(reports: Iterable[HostReport], env_name: str, *, fallback: bool) -> str:
    """The first host that can take the request (``reports`` is read lazily, so hosts after
    it are not asked). None can: with ``fallback`` (GPUs optional) the first reachable one,
    else ``NoHostFits`` with each host's reason."""
    reasons: dict[str, str] = {}
    first_reachable: str | None = None
    for report in reports:
        if report.reachable and first_reachable is None:
            first_reachable = report.name
        if report.reason is None:
            return report.name
        reasons[report.name] = report.reason
    if fallback and first_reachable is not None:
        return first_reachable
    raise NoHostFits(
        f"No host can start a container of {env_name!r}: "
        + "; ".join(f"{name}: {reason.rstrip('.')}" for name, reason in reasons.items())
        + ".",
        details={"hosts": reasons},
    )


def _cuda_tuple(text: str) -> tuple[int, int] | None:
    match = _CUDA_VER_RE.match(text.strip())
    return (int(match.group(1)), int(match.group(2))) if match else None


def required_cuda(image_env: list[str]) -> str | None:
    """The CUDA version an image needs, from ``NVIDIA_REQUIRE_CUDA`` or ``CUDA_VERSION``."""
    values = dict(item.split("=", 1) for item in image_env if "=" in item)
    if values.get("NVIDIA_DISABLE_REQUIRE", "").lower() in ("1", "true"):
        return None
    requirement = values.get("NVIDIA_REQUIRE_CUDA", "")
    match = _CUDA_REQ_RE.search(requirement)
    if match:
        return match.group(1)
    version = _cuda_tuple(values.get("CUDA_VERSION", ""))
    return f"{version[0]}.{version[1]}" if version else None


def check_cuda(image: str, image_env: list[str], host: str, inventory: Inventory) -> None:
    """Refuse, with what to do, when the host driver's CUDA is older than the image needs."""
    needed = required_cuda(image_env)
    have = inventory.cuda_version
    if needed is None or have is None:
        return
    need_t, have_t = _cuda_tuple(needed), _cuda_tuple(have)
    if need_t is not None and have_t is not None and need_t > have_t:
        raise CudaMismatch(
            f"The image {image} needs CUDA >= {needed}, but the NVIDIA driver "
            f"{inventory.driver_version or ''} on host {host!r} supports CUDA up to {have}. "
            f"Upgrade the host's driver to one that supports CUDA {needed}, or use an image "
            f"built for CUDA {have} or older.",
            details={"image": image, "needs": needed, "driver_cuda": have, "host": host},
        )


def host_short(
    name: str, needs: HostNeeds, info: EngineInfo, free_storage_mib: int | None
) -> tuple[str | None, list[str]]:
    """What host ``name`` lacks of ``needs`` (``hostRequirements.cpus``, ``memory``,
    ``storage``; ``None``: nothing) from what its engine said, and what could not be checked
    (the engine or the host did not say). Memory is the machine's, storage what is free where
    the engine keeps containers' files: a container may still find less when others use them."""
    short: list[str] = []
    unchecked: list[str] = []
    checks = (
        ("cpus", needs.cpus, info.cpus, "CPUs"),
        ("memory", needs.memory_mib, info.memory_mib, "MiB of memory"),
        ("storage", needs.storage_mib, free_storage_mib, "MiB free for containers"),
    )
    for key, wanted, has, unit in checks:
        if wanted is None:
            continue
        if has is None:
            unchecked.append(
                f"hostRequirements.{key} was not checked: host {name!r} does not say how much "
                "it has"
            )
        elif has < wanted:
            short.append(
                f"{has:,} {unit}, the environment needs {wanted:,} (hostRequirements.{key})"
            )
    return ("has " + "; ".join(short) if short else None), unchecked


def _needs_of(
    host: Host, needs: HostNeeds, info: EngineInfo | None = None
) -> tuple[str | None, list[str]]:
    """``host_short`` for ``host`` (its engine's ``info`` when already read), asking it only
    what ``needs`` asks."""
    if not needs:
        return None, []
    info = info if info is not None else host.engine_info()
    free = None
    if needs.storage_mib is not None and info.data_root:
        free = host.free_storage_mib(info.data_root)
    return host_short(host.name, needs, info, free)


class HostTooSmall(GPUDevError):
    """The host has fewer CPUs, less memory or less free storage than the environment's
    ``hostRequirements`` ask for."""

    status = 409
    exit_code = 5
    code = "host_too_small"


def place(
    pool: HostPool,
    env: Environment,
    request: StartRequest,
    say: Progress,
    *,
    leasable: Callable[[Host, Inventory], Leasable],
    passed_over: Callable[[Host], str | None],
) -> Placement:
    """Where a start goes: the host asked for, else the first host of ``pool`` (local first,
    then configured, then added ones) that is reachable and can lease the GPUs asked for now
    (``leasable``: its units and who holds them), with a driver new enough for the image when
    the image is there (``choose``: when none can, ``NoHostFits`` says why for each; a host
    ``passed_over`` gives a reason for is not asked). The GPU request and the host's inventory
    come with it: ``start`` does not ask for them again."""
    wanted = gpu_request(env, request)
    optional = gpus_optional(env, request)
    names = pool.names()
    if request.host or len(names) == 1:
        host = pool.get(request.host or names[0])
        short, unchecked = _needs_of(host, env.needs)
        if short is not None:
            raise HostTooSmall(
                f"Host {host.name!r} cannot start a container of {env.name!r}: it {short}",
                details={"host": host.name, "reason": short},
            )
        for note in unchecked:
            say({"stage": "place", "message": note})
        inventory = host.gpus() if wanted is not None else None
    else:
        seen: dict[str, Inventory | None] = {}

        def reports() -> Iterator[HostReport]:
            for name in names:
                candidate = pool.get(name)
                passed = passed_over(candidate)
                if passed is not None:
                    yield HostReport(name, reachable=False, reason=passed)
                    continue
                try:
                    short, unchecked = _needs_of(candidate, env.needs, candidate.engine_info())
                except GPUDevError as err:
                    yield HostReport(name, reachable=False, reason=err.message)
                    continue
                if short is not None:
                    yield HostReport(name, reachable=True, reason=short)
                    continue
                for note in unchecked:
                    say({"stage": "place", "message": note})
                seen[name] = candidate.gpus() if wanted is not None else None
                reason = _cannot_place(candidate, env, wanted, seen[name], leasable)
                yield HostReport(name, reachable=True, reason=reason)

        chosen = choose(reports(), env.name, fallback=wanted is not None and optional)
        say({"stage": "place", "message": f"placed on host {chosen!r}"})
        host, inventory = pool.get(chosen), seen.get(chosen)
    if inventory is not None and not inventory.gpus and not optional:
        raise BadRequest(
            f"GPUs were asked for, but host {host.name!r} has none: {inventory.reason}",
            details={"host": host.name, "reason": inventory.reason},
        )
    return Placement(host, wanted, inventory)


def _cannot_place(
    host: Host,
    env: Environment,
    wanted: GPURequest | None,
    inventory: Inventory | None,
    leasable: Callable[[Host, Inventory], Leasable],
) -> str | None:
    """Why ``host`` cannot take the request now, or ``None``."""
    if wanted is None or inventory is None:
        return None
    if not inventory.gpus:
        return f"no GPU ({inventory.reason or 'none found'})"
    try:
        units, held = leasable(host, inventory)  # EngineUnreachable: a reason
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
