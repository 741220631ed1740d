"""GPU processes told by kernel (``containers.usage.kernel_of``, pure): the live kernel whose
host PID (the engine's, not the container's word) is the process or an ancestor of it inside
its container; the kernel a container was made for; left behind ("orphan") when no live kernel
holds it and an ended kernel did, or its parent ended (re-parented to the container's init).
And what another user sees of it: no kernel."""

from __future__ import annotations

from datetime import datetime, timedelta, timezone

from jupyter_gpudev.access import ANOTHER_USER, Caller
from jupyter_gpudev.containers.hooks import LiveKernel
from jupyter_gpudev.containers.model import DevContainerInfo
from jupyter_gpudev.containers.usage import (
    GPUUsage,
    ProcessUse,
    _kernels,
    _process,
    kernel_gpus,
    kernel_of,
)
from jupyter_gpudev.engine.attribution import AttributedProcess, ProcStatus

CID = "f61150f336b5b32b33516903e55f83249d6d60a738b5289a3b990e1d32c25a5f"
SHIM = 900  # the engine's shim: the exec'd kernel's parent, outside the container


def info(
    key: str = "box", *, kernel_id: str | None = None, owner: str = "alice"
) -> DevContainerInfo:
    return DevContainerInfo(
        name=key,
        container_id=CID,
        host="local",
        environment="default",
        owner=owner,
        image="img",
        state="running",
        status="Up",
        created="",
        gpu_uuids=("GPU-1",),
        lease_id=None,
        ports={},
        kernel_id=kernel_id,
        key=key,
    )


def status(pid: int, ppid: int, container_pid: int) -> ProcStatus:
    return ProcStatus(pid=pid, ppid=ppid, uid=1000, ns_pids=(pid, container_pid))


def gpu_process(*lineage: ProcStatus) -> AttributedProcess:
    return AttributedProcess(
        pid=lineage[0].pid,
        memory_used_mib=4096,
        sm_percent=None,
        memory_percent=None,
        type="C",
        container_id=CID,
        lineage=lineage,
    )


#: The container's init (PID 1 inside), a kernel exec'd under the shim, its child, and a
#: terminal's shell with a python under it.
INIT = status(100, SHIM, 1)
KERNEL = status(200, SHIM, 40)
CHILD = status(201, 200, 41)
SHELL = status(300, SHIM, 50)
PYTHON = status(301, 300, 51)
ORPHAN = status(202, 100, 42)  # its parent (a kernel) ended: re-parented to init


def live(kernel_id: str, host_pid: int | None, container: str = "box") -> LiveKernel:
    return LiveKernel(kernel_id, "local", container, host_pid)


def test_the_kernels_own_process_and_its_child_are_the_kernels() -> None:
    kernels = [live("k-1", KERNEL.pid), live("k-2", SHELL.pid + 1000)]
    assert kernel_of(gpu_process(KERNEL), info(), kernels) == ("k-1", False)
    assert kernel_of(gpu_process(CHILD, KERNEL), info(), kernels) == ("k-1", False)


def test_a_kernel_of_another_container_or_without_a_pid_claims_nothing() -> None:
    # The same host PID recorded for a kernel of another container (or none recorded)
    kernels = [live("k-other", KERNEL.pid, container="elsewhere"), live("k-none", None)]
    assert kernel_of(gpu_process(CHILD, KERNEL), info(), kernels) == (None, False)


def test_a_terminals_process_is_the_containers_not_a_kernels_nor_left_behind() -> None:
    kernels = [live("k-1", KERNEL.pid)]
    assert kernel_of(gpu_process(PYTHON, SHELL), info(), kernels) == (None, False)


def test_a_process_re_parented_to_init_in_a_container_with_kernels_is_left_behind() -> None:
    kernels = [live("k-1", KERNEL.pid)]
    assert kernel_of(gpu_process(ORPHAN, INIT), info(), kernels) == (None, True)
    # But not in a container no kernel ever ran in (as far as is known)
    assert kernel_of(gpu_process(ORPHAN, INIT), info(), []) == (None, False)
    # And the container's init itself is not
    assert kernel_of(gpu_process(INIT), info(), kernels) == (None, False)


def test_a_process_still_under_an_ended_kernel_is_left_behind() -> None:
    ended = LiveKernel("k-gone", "local", "box", KERNEL.pid, ended=True)
    assert kernel_of(gpu_process(CHILD, KERNEL), info(), [ended]) == (None, True)
    # A live kernel with the same PID (reused) wins
    assert kernel_of(gpu_process(CHILD, KERNEL), info(), [ended, live("k-new", KERNEL.pid)]) == (
        "k-new",
        False,
    )


def test_a_kernels_own_container_is_that_kernels_while_it_lives() -> None:
    own = info("kernel-k-9", kernel_id="k-9")
    process = gpu_process(PYTHON, SHELL)
    # Not in its tree, but its container was made for it, and it lives
    assert kernel_of(process, own, [live("k-9", KERNEL.pid, "kernel-k-9")]) == ("k-9", False)
    # Known to have ended (the server tracks kernels, and has none there)
    assert kernel_of(process, own, []) == (None, False)
    # Outside a server (the CLI), the container's label says
    assert kernel_of(process, own, [], tracked=False) == ("k-9", False)
    # Left behind there: re-parented to its init
    assert kernel_of(gpu_process(ORPHAN, INIT), own, [], tracked=False) == (None, True)


def test_another_user_sees_no_kernel_and_the_owner_does() -> None:
    containers = {CID: info()}
    kernels = [live("k-1", KERNEL.pid)]
    process = gpu_process(CHILD, KERNEL)
    mine = _process(process, containers, Caller("alice"), {"box": kernels}, True)
    theirs = _process(process, containers, Caller("bob"), {"box": kernels}, True)
    assert (mine.kind, mine.kernel, mine.pid) == ("gpudev", "k-1", CHILD.pid)
    assert theirs == ProcessUse("another user", 4096, None, None, owner=ANOTHER_USER)


def test_another_user_is_not_told_what_a_users_kernel_left_behind() -> None:
    # Given a process an ended kernel of alice's left behind, holding GPU memory
    containers = {CID: info()}
    ended = [LiveKernel("k-gone", "local", "box", KERNEL.pid, ended=True)]
    process = gpu_process(CHILD, KERNEL)
    mine = _process(process, containers, Caller("alice"), {"box": ended}, True)
    theirs = _process(process, containers, Caller("bob"), {"box": ended}, True)
    # Then alice (and administrators) see it left behind; bob sees only another user's memory
    assert mine.orphan
    assert _process(process, containers, Caller("root", admin=True), {"box": ended}, True).orphan
    assert theirs == ProcessUse("another user", 4096, None, None, owner=ANOTHER_USER)


def test_kernels_listed_with_their_idle_time_for_those_who_may_see_them() -> None:
    an_hour_ago = datetime.now(timezone.utc) - timedelta(hours=1)
    kernels = [
        LiveKernel("k-1", "local", "box", KERNEL.pid, an_hour_ago),
        LiveKernel("k-gone", "local", "box", KERNEL.pid, ended=True),
        LiveKernel("k-2", "local", "theirs", None),
    ]
    containers = [info(), info("theirs", owner="bob")]
    (seen,) = _kernels(kernels, containers, Caller("alice"))
    assert (seen.kernel, seen.container, seen.owner) == ("k-1", "box", "alice")
    assert seen.idle_seconds is not None
    assert 3590 < seen.idle_seconds < 3700
    assert [k.kernel for k in _kernels(kernels, containers, Caller("root", admin=True))] == [
        "k-1",
        "k-2",
    ]


def test_a_kernels_gpus_sum_its_processes_and_keep_the_whole_gpus_figures() -> None:
    def use(kernel: str | None, mib: int, sm: int | None) -> ProcessUse:
        return ProcessUse("gpudev", mib, sm, None, container="box", owner="alice", kernel=kernel)

    gpus = [
        GPUUsage("GPU-1", 0, "A100", 40960, 9000, 55, (use("k-1", 1000, 20), use("k-1", 500, 5))),
        GPUUsage("GPU-2", 1, "A100", 40960, 100, 0, (use("k-2", 100, None),)),
        GPUUsage("GPU-3", 2, "A100", 40960, 0, 0, ()),
    ]
    found = kernel_gpus("k-1", gpus, leased=("GPU-3",))
    assert [(g.uuid, g.memory_used_mib, g.sm_percent, g.memory_percent) for g in found] == [
        ("GPU-1", 1500, 25, None),
        ("GPU-3", 0, None, None),
    ]
    assert (found[0].gpu_memory_used_mib, found[0].gpu_utilization_percent) == (9000, 55)


def test_where_processes_are_not_known_a_kernels_memory_is_unknown_not_zero() -> None:
    gpus = [
        GPUUsage("GPU-1", 0, "A100", 40960, 9000, 55, (), processes_listed=False),
        GPUUsage("GPU-2", 1, "A100", 40960, 100, 0, ()),
    ]
    listed = kernel_gpus("k-1", gpus, leased=("GPU-1", "GPU-2"))
    assert [g.memory_used_mib for g in listed] == [None, 0]
    unknown = kernel_gpus("k-1", gpus, leased=("GPU-1", "GPU-2"), known=False)
    assert [g.memory_used_mib for g in unknown] == [None, None]


def test_a_first_kernel_under_its_launcher_is_its_containers_kernel_outside_a_server() -> None:
    # A dedicated container's first kernel (kernels.first) runs under the container's own
    # command, the launcher, a child of init: it was not re-parented
    own = info("kernel-k-9", kernel_id="k-9")
    init = status(4000, SHIM, 1)
    launcher = status(4007, 4000, 7)
    kernel = status(4008, 4007, 8)
    assert kernel_of(gpu_process(kernel, launcher, init), own, [], tracked=False) == (
        "k-9",
        False,
    )
    child = status(4010, 4008, 10)
    assert kernel_of(gpu_process(child, kernel, launcher, init), own, [], tracked=False) == (
        "k-9",
        False,
    )
    # In a server, which knows the kernel's host PID, it is that kernel's too
    kernels = [live("k-9", kernel.pid, "kernel-k-9")]
    assert kernel_of(gpu_process(kernel, launcher, init), own, kernels) == ("k-9", False)
    # And a process of it left behind after it ended is re-parented to init
    orphan = status(4010, 4000, 10)
    assert kernel_of(gpu_process(orphan, init), own, [], tracked=False) == (None, True)
