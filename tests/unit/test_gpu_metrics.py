"""gpudev's Prometheus gauges (``containers.metrics``): read once per scrape as an
administrator, their text parsed back as Prometheus reads it; label values one bounded
printable line, series capped; a failed read leaves gauges out, never fails the scrape; one
collector per process."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any, cast

import pytest
from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.parser import text_string_to_metric_families

from jupyter_gpudev.access import Caller
from jupyter_gpudev.containers import metrics
from jupyter_gpudev.containers.metrics import MAX_LABEL, MAX_SERIES, GPUMetrics
from jupyter_gpudev.containers.usage import GPUUsage, GPUUse, HostUsage, KernelUse, ProcessUse


class FakeUse:
    """What the collector reads of ``GPUUse``: its hosts' use, its ledger, its access."""

    def __init__(self, hosts: list[HostUsage], owners: list[str]) -> None:
        self.hosts = hosts
        self.reads: list[Caller | None] = []
        leases = [SimpleNamespace(owner=owner) for owner in owners]
        self.containers = SimpleNamespace(
            access=SimpleNamespace(local=lambda: Caller("alice")),
            ledger=SimpleNamespace(active=lambda: leases),
        )

    def usage(self, host: str | None = None, *, caller: Caller | None = None) -> list[HostUsage]:
        assert host is None  # every host
        self.reads.append(caller)
        return self.hosts


def scrape(use: Any) -> dict[str, list[tuple[dict[str, str], float]]]:
    registry = CollectorRegistry()
    registry.register(GPUMetrics(cast(GPUUse, use)))
    text = generate_latest(registry).decode()
    return {
        family.name: [(sample.labels, sample.value) for sample in family.samples]
        for family in text_string_to_metric_families(text)
    }


def gpudev(container: str, owner: str, mib: int | None) -> ProcessUse:
    return ProcessUse("gpudev", mib, None, None, container=container, owner=owner)


HOST = HostUsage(
    "local",
    (
        GPUUsage(
            "GPU-1",
            0,
            "A100",
            40960,
            9000,
            71,
            (
                gpudev("train", "alice", 4096),
                gpudev("train", "alice", 1024),
                gpudev("eval", "bob", 2048),
                ProcessUse("other", 512, None, None),
            ),
        ),
        GPUUsage("GPU-2", 1, "A100", 40960, None, None, ()),
    ),
    kernels=(KernelUse("k-1", "train", "alice", 125.0), KernelUse("k-2", "eval", "bob", None)),
)


def test_leases_memory_by_container_and_owner_utilization_and_idle_kernels() -> None:
    # Given a host whose GPU 0 two dev containers use, and three leases of two users
    use = FakeUse([HOST], ["alice", "bob", "alice"])
    # When Prometheus scrapes
    found = scrape(use)
    # Then each gauge says it, by its labels
    assert sorted(found["gpudev_gpu_leases"], key=str) == [
        ({"user": "alice"}, 2.0),
        ({"user": "bob"}, 1.0),
    ]
    assert found["gpudev_gpu_memory_used_mib"] == [
        ({"host": "local", "gpu": "GPU-1", "container": "eval", "owner": "bob"}, 2048.0),
        ({"host": "local", "gpu": "GPU-1", "container": "train", "owner": "alice"}, 5120.0),
    ]
    assert found["gpudev_gpu_utilization_percent"] == [({"host": "local", "gpu": "GPU-1"}, 71.0)]
    assert found["gpudev_kernel_idle_seconds"] == [({"kernel": "k-1", "owner": "alice"}, 125.0)]
    assert found["gpudev_metrics_series_dropped"] == [({}, 0.0)]
    # And it was read once, as an administrator
    assert use.reads == [Caller("alice", admin=True)]


def test_label_values_are_one_bounded_printable_line_and_series_are_capped() -> None:
    hostile = 'x"\n\x1b[2J}' + "y" * 1000
    processes = tuple(gpudev(f"c{n}", "alice", 1) for n in range(MAX_SERIES + 5))
    host = HostUsage(
        "local",
        (GPUUsage("GPU-1", 0, "A100", 1, 1, 1, (gpudev(hostile, hostile, 1), *processes)),),
    )
    found = scrape(FakeUse([host], []))
    memory = found["gpudev_gpu_memory_used_mib"]
    assert len(memory) == MAX_SERIES
    assert found["gpudev_metrics_series_dropped"] == [({}, 6.0)]
    for labels, _ in memory:
        for value in labels.values():
            assert len(value) <= MAX_LABEL
            assert value.isprintable()


def test_a_failed_read_leaves_its_gauges_empty_and_the_scrape_answers() -> None:
    class Broken(FakeUse):
        def usage(self, host: str | None = None, *, caller: Caller | None = None) -> list[Any]:
            raise RuntimeError(f"the engine is gone ({host}, {caller})")

    found = scrape(Broken([], ["alice"]))
    assert found["gpudev_gpu_leases"] == [({"user": "alice"}, 1.0)]
    assert found["gpudev_gpu_memory_used_mib"] == []


def test_registering_reads_nothing_and_a_second_install_replaces_the_first() -> None:
    registry = CollectorRegistry()
    first, second = FakeUse([HOST], []), FakeUse([HOST], [])
    metrics.install(GPUMetrics(cast(GPUUse, first)), registry)
    metrics.install(GPUMetrics(cast(GPUUse, second)), registry)
    assert first.reads == second.reads == []
    generate_latest(registry)
    assert (len(first.reads), len(second.reads)) == (0, 1)
    metrics.uninstall()
    generate_latest(registry)
    assert len(second.reads) == 1
    with pytest.raises(KeyError):
        registry.unregister(GPUMetrics(cast(GPUUse, first)))


def test_one_owner_past_the_cap_leaves_every_other_owner_their_series() -> None:
    # Given alice's containers alone make more memory series and idle kernels than the cap,
    # and bob has two of each
    many = tuple(gpudev(f"a{n}", "alice", 1) for n in range(MAX_SERIES + 5))
    host = HostUsage(
        "local",
        (GPUUsage("GPU-1", 0, "A100", 1, 1, 1, (*many, gpudev("b1", "bob", 7))),),
        kernels=(
            *(KernelUse(f"ka{n}", f"a{n}", "alice", 1.0) for n in range(MAX_SERIES + 5)),
            KernelUse("kb1", "b1", "bob", 2.0),
            KernelUse("kb2", "b1", "bob", 3.0),
        ),
    )
    # When Prometheus scrapes
    found = scrape(FakeUse([host], []))
    # Then bob's series are there, the cap still holds, and what was left out is alice's
    memory = found["gpudev_gpu_memory_used_mib"]
    idle = found["gpudev_kernel_idle_seconds"]
    assert len(memory) == len(idle) == MAX_SERIES
    assert ({"host": "local", "gpu": "GPU-1", "container": "b1", "owner": "bob"}, 7.0) in memory
    assert [labels["kernel"] for labels, _ in idle if labels["owner"] == "bob"] == ["kb1", "kb2"]
    assert found["gpudev_metrics_series_dropped"] == [({}, 6.0 + 7.0)]
