"""The kernel registry's host PIDs (``kernels.live``): what GPU use tells kernels' processes by,
the ended ones remembered a while (a process they left holds leaked GPU memory); and the
engine's exec record as the one source of a kernel's host PID (``process.exec_pid``)."""

from __future__ import annotations

from jupyter_gpudev.containers.hooks import LiveKernel
from jupyter_gpudev.kernels import live
from jupyter_gpudev.kernels.live import KernelPlacement, KernelRegistry
from jupyter_gpudev.kernels.process import exec_pid


def placement(kernel_id: str, host_pid: int | None, host: str = "local") -> KernelPlacement:
    return KernelPlacement(kernel_id, host, "box", dedicated=False, host_pid=host_pid)


def test_live_and_ended_kernels_with_their_host_pids_per_host() -> None:
    registry = KernelRegistry()
    registry.add(placement("k-1", 200))
    registry.add(placement("k-2", 300, host="far"))
    registry.add(placement("k-3", None))
    registry.remove("k-3")  # no PID known: nothing to remember
    assert registry.processes("local") == [LiveKernel("k-1", "local", "box", 200)]
    registry.remove("k-1")
    assert registry.processes("local") == [LiveKernel("k-1", "local", "box", 200, ended=True)]
    assert [k.kernel_id for k in registry.processes("far")] == ["k-2"]


def test_a_restart_ends_the_former_process_and_records_the_new_one() -> None:
    registry = KernelRegistry()
    registry.add(placement("k-1", 200))
    registry.add(placement("k-1", 250))
    assert registry.processes("local") == [
        LiveKernel("k-1", "local", "box", 250),
        LiveKernel("k-1", "local", "box", 200, ended=True),
    ]


def test_ended_kernels_are_bounded() -> None:
    registry = KernelRegistry()
    for n in range(live.ENDED_KEPT + 10):
        registry.add(placement(f"k-{n}", 1000 + n))
        registry.remove(f"k-{n}")
    ended = registry.processes("local")
    assert len(ended) == live.ENDED_KEPT
    assert ended[0].kernel_id == "k-10"


def test_the_host_pid_is_the_engines_for_a_running_exec_only() -> None:
    assert exec_pid({"Running": True, "Pid": 4242}) == 4242
    assert exec_pid({"Running": False, "Pid": 4242}) is None
    assert exec_pid({"Running": True, "Pid": 0}) is None
    assert exec_pid({"Running": True, "Pid": "4242"}) is None
    assert exec_pid({"Running": True, "Pid": True}) is None
    assert exec_pid({"Running": True, "Pid": 1 << 40}) is None
    assert exec_pid(None) is None


def test_the_shared_services_views_find_their_owners_kernels_and_count_everyones() -> None:
    # Given the shared service's registry, alice's and bob's views, each with a kernel of the
    # same id (ids are their servers'), bob's in a container of his on another host
    kernels = KernelRegistry()
    alice, bob = kernels.scoped("alice"), kernels.scoped("bob")
    alice.add(placement("k-1", 200))
    bob.add(KernelPlacement("k-1", "far", "his", dedicated=True, host_pid=300))
    # Then each finds their own by its id, and nobody else's
    assert (alice.get("k-1") or placement("?", None)).host_pid == 200
    assert (bob.get("k-1") or placement("?", None)).host_pid == 300
    assert kernels.scoped("carol").get("k-1") is None
    assert not kernels.scoped("carol").exists("k-1")
    # And every view tells every owner's processes, and counts a container's kernels
    assert kernels.scoped("carol").processes("far") == [LiveKernel("k-1", "far", "his", 300)]
    assert bob.usage("local", "box").count == 1
    # When bob's ends, alice's lives on
    bob.remove("k-1")
    assert alice.get("k-1") is not None
    assert alice.processes("far") == [LiveKernel("k-1", "far", "his", 300, ended=True)]
