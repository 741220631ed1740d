"""Prometheus gauges of GPU leases and use, on the Jupyter server's ``/metrics``.

jupyter_server serves prometheus_client's default registry at ``/metrics``; ``install`` adds
``GPUMetrics`` to it (once per process: a second server's replaces the first's, and
``uninstall`` takes it out). On each scrape it reads, once, what an administrator sees
(``usage.GPUUse``: the inventory's cached read, shared with every other viewer, and one read of
``/proc``) and the lease ledger, and yields:

- ``gpudev_gpu_leases{user}``: the GPU leases each user holds;
- ``gpudev_gpu_memory_used_mib{host,gpu,container,owner}``: the GPU memory each dev container's
  processes hold on each GPU (``gpu``: its UUID);
- ``gpudev_gpu_utilization_percent{host,gpu}``: each GPU's utilization;
- ``gpudev_kernel_idle_seconds{kernel,owner}``: each live kernel's time since its last activity
  (inside a server that runs kernels).

Label values come from users and containers: each is made one printable line of at most
``MAX_LABEL`` characters (prometheus_client escapes the rest), and each family has at most
``MAX_SERIES`` series, handed out to owners in turns (one user's many containers or kernels
never crowd out another's series); how many were left out is
``gpudev_metrics_series_dropped``. A scrape never fails for gpudev: what cannot be read is left
out, and logged.
"""

from __future__ import annotations

import contextlib
import logging
import threading
from collections import Counter
from collections.abc import Iterable, Iterator
from typing import Any

from prometheus_client.core import GaugeMetricFamily, Metric
from prometheus_client.registry import REGISTRY, Collector, CollectorRegistry

from ..access import Caller
from ..untrusted import clean
from .usage import GPUUse, HostUsage

#: The most characters of one label value, and series of one family.
MAX_LABEL = 128
MAX_SERIES = 1000

_log = logging.getLogger(__name__)


def label(value: Any) -> str:
    """A label value: one printable line, at most ``MAX_LABEL`` characters."""
    return clean(str(value) if value is not None else "", limit=MAX_LABEL)


class _Family:
    """One gauge family, its series capped at ``MAX_SERIES``: gathered by owner, then taken
    one owner's at a time in turns, so the cap falls on whoever has the most."""

    def __init__(self, name: str, documentation: str, labels: list[str]) -> None:
        self.gauge = GaugeMetricFamily(name, documentation, labels=labels)
        self.pending: list[tuple[str, list[str], float]] = []
        self.dropped = 0

    def add(self, values: Iterable[Any], value: float, *, owner: str = "") -> None:
        self.pending.append((owner, [label(v) for v in values], value))

    def finish(self) -> GaugeMetricFamily:
        """The gauge with at most ``MAX_SERIES`` of the series added, in the order added."""
        taken = _in_turns([owner for owner, _, _ in self.pending], MAX_SERIES)
        for index, (_, labels, value) in enumerate(self.pending):
            if index in taken:
                self.gauge.add_metric(labels, value)
        self.dropped = len(self.pending) - len(taken)
        self.pending = []
        return self.gauge


def _in_turns(owners: list[str], limit: int) -> set[int]:
    """The indexes of at most ``limit`` entries, each owner's first one, then each's second..."""
    queues: dict[str, list[int]] = {}
    for index, owner in enumerate(owners):
        queues.setdefault(owner, []).append(index)
    taken: set[int] = set()
    depth = 0
    while len(taken) < limit and queues:
        for owner in list(queues):
            indexes = queues[owner]
            if depth >= len(indexes):
                del queues[owner]
                continue
            if len(taken) == limit:
                break
            taken.add(indexes[depth])
        depth += 1
    return taken


def _families() -> dict[str, _Family]:
    return {
        "leases": _Family("gpudev_gpu_leases", "GPU leases held, by user.", ["user"]),
        "memory": _Family(
            "gpudev_gpu_memory_used_mib",
            "GPU memory (MiB) held by each dev container's processes on each GPU.",
            ["host", "gpu", "container", "owner"],
        ),
        "utilization": _Family(
            "gpudev_gpu_utilization_percent", "Each GPU's utilization (%).", ["host", "gpu"]
        ),
        "idle": _Family(
            "gpudev_kernel_idle_seconds",
            "Seconds since each live gpudev kernel's last activity.",
            ["kernel", "owner"],
        ),
    }


class GPUMetrics(Collector):
    """The gauges of ``usage``'s hosts and ledger, read on each scrape as an administrator."""

    def __init__(self, usage: GPUUse, log: logging.Logger | logging.LoggerAdapter[Any] = _log):
        self.usage = usage
        self.log = log

    def describe(self) -> list[Metric]:
        """The families without reading anything (``register`` asks)."""
        return [family.gauge for family in _families().values()]

    def collect(self) -> Iterator[Metric]:
        families = _families()
        try:
            self._leases(families["leases"])
        except Exception:
            self.log.exception("gpudev: /metrics: reading the GPU leases failed")
        try:
            self._usage(families)
        except Exception:
            self.log.exception("gpudev: /metrics: reading the GPU use failed")
        yield from (family.finish() for family in families.values())
        dropped = GaugeMetricFamily(
            "gpudev_metrics_series_dropped",
            f"Series left out of the gpudev gauges (at most {MAX_SERIES} per gauge).",
        )
        dropped.add_metric([], sum(family.dropped for family in families.values()))
        yield dropped

    def _leases(self, family: _Family) -> None:
        held = Counter(lease.owner for lease in self.usage.containers.ledger.active())
        for user, count in sorted(held.items()):
            family.add([user], count, owner=user)

    def _usage(self, families: dict[str, _Family]) -> None:
        access = self.usage.containers.access
        admin = Caller(access.local().name, admin=True)
        for host in self.usage.usage(caller=admin):
            self._host(host, families)

    @staticmethod
    def _host(host: HostUsage, families: dict[str, _Family]) -> None:
        for gpu in host.gpus:
            if gpu.utilization_percent is not None:
                families["utilization"].add([host.host, gpu.uuid], gpu.utilization_percent)
            held: dict[tuple[str, str], int] = {}
            for process in gpu.processes:
                if process.kind != "gpudev" or process.memory_used_mib is None:
                    continue
                key = (process.container or "", process.owner or "")
                held[key] = held.get(key, 0) + process.memory_used_mib
            for (container, owner), mib in sorted(held.items()):
                families["memory"].add([host.host, gpu.uuid, container, owner], mib, owner=owner)
        for kernel in host.kernels:
            if kernel.idle_seconds is not None:
                families["idle"].add(
                    [kernel.kernel, kernel.owner], kernel.idle_seconds, owner=kernel.owner
                )


_lock = threading.Lock()
_installed: list[tuple[CollectorRegistry, Collector]] = []


def install(collector: Collector, registry: CollectorRegistry = REGISTRY) -> None:
    """Serve ``collector``'s gauges on ``/metrics`` (the default registry's): the one gpudev
    collector of this process, replacing one a former server installed."""
    with _lock:
        _remove_all()
        registry.register(collector)
        _installed.append((registry, collector))


def uninstall(collector: Collector | None = None) -> None:
    """Take ``collector`` (or whichever is installed) off ``/metrics``."""
    with _lock:
        if collector is None:
            _remove_all()
            return
        for entry in [e for e in _installed if e[1] is collector]:
            _installed.remove(entry)
            entry[0].unregister(entry[1])


def _remove_all() -> None:
    while _installed:
        registry, collector = _installed.pop()
        with contextlib.suppress(KeyError):
            registry.unregister(collector)
