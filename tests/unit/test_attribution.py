"""Attribution of GPU processes to containers: cgroup files of every layout, NSpid, and the two
readers of /proc (here, and the awk program a remote host runs), over folders shaped like /proc
and over this machine's real one."""

from __future__ import annotations

import logging
import os
import socket
import subprocess
from collections.abc import Callable, Iterable
from dataclasses import replace
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from jupyter_gpudev.engine import (
    CommandProcReader,
    EngineInfo,
    GPUProcess,
    GPUProcesses,
    Host,
    HostSpec,
    LocalProcReader,
    ProbeUnavailable,
    ProcReader,
    ProcSnapshot,
    ProcStatus,
    attribute,
    container_id,
    host_pid,
    parse_proc_output,
    parse_status,
)
from jupyter_gpudev.engine.attribution import MAX_DEPTH
from jupyter_gpudev.errors import EngineError, EngineUnreachable

ID = "f61150f336b5b32b33516903e55f83249d6d60a738b5289a3b990e1d32c25a5f"
OTHER_ID = "0b6c3e2a9d41f8e7c5b3a1d9f7e5c3b1a9d7f5e3c1b9a7d5f3e1c9b7a5d3f1e9"
POD = "3f2a9c41-7b3e-4c55-9d0a-2e6f1b7c3d90"
#: A static pod's UID: a hash of its manifest, not a UUID.
STATIC_POD = "6f1b7c3d903f2a9c417b3e4c559d0a2e"
GPU_0 = "GPU-5d5ba0d6-d33d-2b2c-524d-9e3d8d2b8a77"
GPU_1 = "GPU-8f2a9c41-7b3e-4c55-9d0a-2e6f1b7c3d90"

V1_HIERARCHIES = ("name=systemd", "pids", "blkio", "freezer", "devices", "memory", "cpuset")


def v1(path: str, *, unified: str | None = None) -> str:
    """A cgroup v1 file (as seen on a Docker host with the cgroupfs driver), every hierarchy
    at ``path``, and the unified line at ``unified`` (default: ``path``)."""
    lines = [f"{9 - i}:{name}:{path}" for i, name in enumerate(V1_HIERARCHIES)]
    return "\n".join([*lines, f"0::{path if unified is None else unified}"]) + "\n"


# --------------------------------------------------------------------------------------------
# container_id: each layout
# --------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("cgroup", "expected"),
    [
        pytest.param(v1(f"/docker/{ID}"), ID, id="v1-cgroupfs"),
        pytest.param(v1(f"/system.slice/docker-{ID}.scope"), ID, id="v1-systemd"),
        pytest.param(v1(f"/docker/{ID}", unified="/"), ID, id="v1-hybrid-unified-root"),
        pytest.param(f"0::/docker/{ID}\n", ID, id="v2-cgroupfs"),
        pytest.param(f"0::/system.slice/docker-{ID}.scope\n", ID, id="v2-systemd"),
        pytest.param(f"0::/system.slice/docker-{ID}.scope/init.scope\n", ID, id="v2-sub-cgroup"),
        pytest.param(
            "0::/kubepods.slice/kubepods-burstable.slice/"
            f"kubepods-burstable-pod{POD.replace('-', '_')}.slice/cri-containerd-{ID}.scope\n",
            ID,
            id="v2-containerd-cri-systemd",
        ),
        pytest.param(
            f"0::/kubepods.slice/kubepods-pod{POD.replace('-', '_')}.slice/crio-{ID}.scope\n",
            ID,
            id="v2-crio",
        ),
        pytest.param(v1(f"/kubepods/burstable/pod{POD}/{ID}"), ID, id="v1-kubepods-cgroupfs"),
        pytest.param(f"0::/kubepods/pod{POD}/{ID}\n", ID, id="v2-kubepods-guaranteed"),
        pytest.param(f"0::/kubepods/besteffort/pod{STATIC_POD}/{ID}\n", ID, id="static-pod"),
        pytest.param(
            f"0::/kubepods.slice/kubepods-besteffort.slice/"
            f"kubepods-besteffort-pod{POD.replace('-', '_')}.slice/docker-{ID}.scope\n",
            ID,
            id="v2-cri-dockerd-besteffort",
        ),
        pytest.param(f"0::/kubepods/pod{POD}/{ID}/sub\n", ID, id="kubepods-sub-cgroup"),
        pytest.param(v1(f"/docker/{ID}/docker/{OTHER_ID}"), ID, id="nested-engine-outermost"),
        pytest.param(
            f"0::/system.slice/docker-{ID}.scope/kubelet.slice/x.slice/crio-{OTHER_ID}.scope\n",
            ID,
            id="kubelet-in-a-container-outermost",
        ),
        pytest.param(f"0::/docker/{ID}", ID, id="no-final-newline"),
    ],
)
def test_each_cgroup_layout_names_its_container(cgroup: str, expected: str) -> None:
    assert container_id(cgroup) == expected


@pytest.mark.parametrize(
    "cgroup",
    [
        pytest.param(v1("/"), id="v1-host"),
        pytest.param("0::/user.slice/user-1000.slice/session-3.scope\n", id="v2-session"),
        pytest.param("0::/system.slice/docker.service\n", id="the-engine-itself"),
        pytest.param("0::/init.scope\n", id="init"),
        pytest.param(f"0::/default/{ID}\n", id="containerd-without-cri"),
        pytest.param(f"0::/system.slice/{ID}\n", id="bare-id-elsewhere"),
        pytest.param(f"0::/pod{POD}/{ID}\n", id="pod-outside-kubepods"),
        pytest.param("", id="empty"),
        pytest.param(f"0::/docker/{ID[:63]}\n", id="id-63"),
        pytest.param(f"0::/docker/{ID}0\n", id="id-65"),
        pytest.param(f"0::/docker/{ID.upper()}\n", id="id-upper-case"),
        pytest.param(f"0::/docker/{ID[:63]}g\n", id="id-not-hex"),
        pytest.param(f"0::/system.slice/docker-{ID[:40]}.scope\n", id="scope-short-id"),
        pytest.param(f"0::/system.slice/docker-{ID}.scope.evil\n", id="scope-suffix"),
        pytest.param(f"0::/docker/../docker/{ID}\n", id="traversal-before"),
        pytest.param(f"0::/docker/{ID}/../../x\n", id="traversal-after"),
        pytest.param(f"0::/../docker/{ID}\n", id="traversal-up"),
        pytest.param(f"0::/docker/./{ID}\n", id="dot"),
        pytest.param(f"0::/docker//{ID}\n", id="empty-part"),
        pytest.param(f"0::docker/{ID}\n", id="relative"),
        pytest.param(f"0::/\x00/docker/{ID}\n", id="nul"),
        pytest.param(f"0::/docker/{ID}\x1b[2J\n", id="escape"),
        pytest.param(f"x::/docker/{ID}\n", id="hierarchy-not-a-number"),
        pytest.param(f"/docker/{ID}\n", id="no-fields"),
        pytest.param(f"0::/docker/{ID}\n1:pids:/docker/{OTHER_ID}\n", id="two-containers"),
        pytest.param(f"0::/docker/{ID}\n" * 70, id="too-many-lines"),
        pytest.param(f"0::/docker/{ID}\n0::/{'a' * 5000}\n", id="too-long-a-line"),
        pytest.param(f"0::/docker/{ID}\n" + "x" * (1 << 20), id="huge"),
    ],
)
def test_anything_else_is_no_container(cgroup: str) -> None:
    assert container_id(cgroup) is None


USER = "/user.slice/user-1000.slice/user@1000.service"
POD_ = POD.replace("-", "_")


@pytest.mark.parametrize(
    "cgroup",
    [
        # what a local account can make in the cgroup subtree systemd delegates to it
        # (systemd-run --user --scope --unit=docker-<id>, or mkdir): never a container
        pytest.param(f"0::{USER}/app.slice/docker-{ID}.scope\n", id="user-scope"),
        pytest.param(f"0::{USER}/user.slice/docker-{ID}.scope\n", id="user-rootless-shape"),
        pytest.param(f"0::{USER}/docker/{ID}\n", id="user-cgroupfs-shape"),
        pytest.param(f"0::{USER}/kubepods/pod{POD}/{ID}\n", id="user-kubepods-shape"),
        pytest.param(
            f"0::{USER}/kubepods.slice/kubepods-pod{POD_}.slice/cri-containerd-{ID}.scope\n",
            id="user-kubepods-slice-shape",
        ),
        pytest.param(f"0::{USER}/system.slice/docker-{ID}.scope\n", id="user-system-slice"),
        pytest.param(
            "".join(
                f"{9 - i}:{name}:{USER}/app.slice/docker-{ID}.scope\n"
                if name == "name=systemd"
                else f"{9 - i}:{name}:/user.slice\n"
                for i, name in enumerate(V1_HIERARCHIES)
            ),
            id="v1-user-named-hierarchy",
        ),
        # a container's id part anywhere but where the engine or the kubelet puts it
        pytest.param(f"0::/docker-{ID}.scope\n", id="scope-at-root"),
        pytest.param(f"0::/machine.slice/docker-{ID}.scope\n", id="scope-in-another-slice"),
        pytest.param(f"0::/system.slice/x.slice/docker-{ID}.scope\n", id="scope-too-deep"),
        pytest.param(f"0::/system.slice/cri-containerd-{ID}.scope\n", id="cri-scope-no-pod"),
        pytest.param(f"0::/system.slice/crio-{ID}.scope\n", id="crio-scope-no-pod"),
        pytest.param(f"0::/x/docker/{ID}\n", id="cgroupfs-too-deep"),
        pytest.param(f"0::/docker/x/{ID}\n", id="cgroupfs-id-too-deep"),
        pytest.param(f"0::/x/kubepods/pod{POD}/{ID}\n", id="kubepods-not-at-root"),
        pytest.param(f"0::/kubepods/guaranteed/pod{POD}/{ID}\n", id="kubepods-unknown-qos"),
        pytest.param(f"0::/kubepods/burstable/x/pod{POD}/{ID}\n", id="kubepods-pod-too-deep"),
        pytest.param(f"0::/kubepods/burstable/pod{POD}/x/{ID}\n", id="kubepods-id-too-deep"),
        pytest.param(f"0::/kubepods/{ID}\n", id="kubepods-no-pod"),
        pytest.param(f"0::/kubepods/burstable/pod{POD.upper()}/{ID}\n", id="kubepods-pod-case"),
        pytest.param(f"0::/kubepods.slice/docker-{ID}.scope\n", id="kubepods-slice-no-pod"),
        pytest.param(
            f"0::/kubepods.slice/kubepods-burstable.slice/cri-containerd-{ID}.scope\n",
            id="kubepods-slice-qos-no-pod",
        ),
        pytest.param(
            f"0::/kubepods.slice/kubepods-burstable.slice/"
            f"kubepods-besteffort-pod{POD_}.slice/cri-containerd-{ID}.scope\n",
            id="kubepods-slice-qos-mismatch",
        ),
        pytest.param(
            f"0::/kubepods.slice/kubepods-burstable.slice/"
            f"kubepods-burstable-pod{POD_}.slice/x.slice/cri-containerd-{ID}.scope\n",
            id="kubepods-slice-scope-too-deep",
        ),
        pytest.param(
            f"0::/kubepods.slice/kubepods-pod{POD_}.slice/containerd-{ID}.scope\n",
            id="kubepods-slice-unknown-runtime",
        ),
        pytest.param(
            f"0::/x.slice/kubepods.slice/kubepods-pod{POD_}.slice/crio-{ID}.scope\n",
            id="kubepods-slice-not-at-root",
        ),
    ],
)
def test_a_container_path_elsewhere_is_no_container(cgroup: str) -> None:
    assert container_id(cgroup) is None


def test_binary_content_is_no_container() -> None:
    raw = b"\xff\xfe0::/docker/" + ID.encode() + b"\x00\n\x80\x81"
    assert container_id(raw.decode(errors="replace")) is None


@given(st.text())
def test_container_id_never_raises(text: str) -> None:
    found = container_id(text)
    assert found is None or (len(found) == 64 and found in text)


# --------------------------------------------------------------------------------------------
# status and NSpid
# --------------------------------------------------------------------------------------------


def status_text(pid: int, ppid: int, ns: Iterable[int] | None = None, uid: int = 1000) -> str:
    """A /proc/PID/status as Linux 6.x writes it (the fields around the ones read)."""
    ns_line = "" if ns is None else "NSpid:\t" + "\t".join(str(n) for n in ns) + "\n"
    return (
        "Name:\tpython\nUmask:\t0022\nState:\tS (sleeping)\n"
        f"Tgid:\t{pid}\nNgid:\t0\nPid:\t{pid}\nPPid:\t{ppid}\nTracerPid:\t0\n"
        f"Uid:\t{uid}\t{uid}\t{uid}\t{uid}\nGid:\t{uid}\t{uid}\t{uid}\t{uid}\n"
        f"FDSize:\t64\nGroups:\t\nNStgid:\t{pid}\n{ns_line}NSpgid:\t{pid}\nNSsid:\t{pid}\n"
        "VmPeak:\t  123 kB\nThreads:\t1\n"
    )


def test_status_gives_parent_user_and_namespace_pids() -> None:
    status = parse_status(29503, status_text(29503, 29457, (29503, 7), uid=0))
    assert status == ProcStatus(pid=29503, ppid=29457, uid=0, ns_pids=(29503, 7))
    assert status.in_container
    assert status.container_pid == 7


def test_a_host_process_has_one_namespace_pid() -> None:
    status = parse_status(42, status_text(42, 1, (42,)))
    assert status is not None
    assert (status.in_container, status.container_pid) == (False, None)


@pytest.mark.parametrize(
    "ns_line",
    ["NSpid:\t12\tabc", "NSpid:\t12\t-3", "NSpid:\t12\t0", "NSpid:\t" + "\t".join(["5"] * 40)],
)
def test_a_garbled_nspid_is_unknown(ns_line: str) -> None:
    text = status_text(12, 1).replace("NStgid:\t12\n", f"NStgid:\t12\n{ns_line}\n")
    status = parse_status(12, text)
    assert status is not None
    assert status.ns_pids == ()


@pytest.mark.parametrize("text", ["", "Name:\tx\n", "PPid:\t-1\n", "PPid:\t1 2\n", "\x00" * 99])
def test_without_a_valid_parent_it_is_not_a_status(text: str) -> None:
    assert parse_status(5, text) is None


@given(st.text())
def test_parse_status_never_raises(text: str) -> None:
    parse_status(1, text)


def test_host_pid_maps_a_container_pid_among_the_containers_processes() -> None:
    # Given three processes of one container: its init, a kernel and a worker of the kernel
    statuses = [
        ProcStatus(101, 100, 0, (101, 1)),
        ProcStatus(105, 101, 1000, (105, 7)),
        ProcStatus(110, 105, 1000, (110, 12)),
    ]
    # Then the kernel's PID file's PID maps to its host PID, and an unknown one to nothing
    assert host_pid(7, statuses) == 105
    assert host_pid(1, statuses) == 101
    assert host_pid(8, statuses) is None
    # And a host process (one namespace) never matches, nor an ambiguous list
    assert host_pid(42, [ProcStatus(42, 1, 0, (42,))]) is None
    assert host_pid(7, [*statuses, ProcStatus(205, 201, 0, (205, 7))]) is None


# --------------------------------------------------------------------------------------------
# The readers, over a folder shaped like /proc
# --------------------------------------------------------------------------------------------


class FakeProc:
    """A folder shaped like /proc: ``add`` writes a process's status and cgroup files."""

    def __init__(self, root: Path) -> None:
        self.root = root

    def add(
        self,
        pid: int,
        ppid: int,
        ns: Iterable[int] | None = None,
        cgroup: str | bytes = "0::/\n",
        *,
        uid: int = 1000,
        status: str | None = None,
    ) -> None:
        folder = self.root / str(pid)
        folder.mkdir(parents=True)
        text = status if status is not None else status_text(pid, ppid, ns or (pid,), uid)
        (folder / "status").write_text(text)
        raw = cgroup if isinstance(cgroup, bytes) else cgroup.encode()
        (folder / "cgroup").write_bytes(raw)

    def container(self, shim: int, init: int, cid: str, cgroup: str | None = None) -> None:
        """A container's shim (a host process) and init (PID 1 in the container)."""
        self.add(shim, 1, (shim,), "0::/system.slice/containerd.service\n", uid=0)
        self.add(init, shim, (init, 1), cgroup or v1(f"/docker/{cid}"), uid=0)


def run_here(argv: list[str], timeout: float) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        argv, capture_output=True, text=True, errors="replace", timeout=timeout, check=False
    )


READERS: dict[str, Callable[[Path], ProcReader]] = {
    "local": LocalProcReader,
    "awk": lambda root: CommandProcReader(run_here, 10.0, root=str(root)),
}


@pytest.fixture(params=sorted(READERS))
def reader_kind(request: pytest.FixtureRequest) -> str:
    return str(request.param)


@pytest.fixture
def proc(tmp_path: Path) -> FakeProc:
    return FakeProc(tmp_path / "proc")


def reader(kind: str, proc: FakeProc) -> ProcReader:
    return READERS[kind](proc.root)


def test_a_gpu_process_in_a_container_maps_to_it_with_its_ancestors(
    proc: FakeProc, reader_kind: str
) -> None:
    # Given a container (shim 100, init 101) whose kernel (107, PID 7 inside) started a worker
    # (110, PID 12 inside) that holds a GPU
    proc.container(100, 101, ID)
    proc.add(107, 101, (107, 7), v1(f"/docker/{ID}"))
    proc.add(110, 107, (110, 12), v1(f"/docker/{ID}"))
    # When the worker's PID is read
    snapshot = reader(reader_kind, proc).read([110])
    # Then its container is known, and its lineage inside the container reaches the init
    assert snapshot.containers == {110: ID}
    assert [s.pid for s in snapshot.lineage(110)] == [110, 107, 101]
    lineage = snapshot.lineage(110)
    # And the kernel's PID file's PID (7) maps to its host PID through NSpid
    assert host_pid(7, lineage) == 107
    assert host_pid(1, lineage) == 101


def test_a_host_process_and_a_vanished_pid(proc: FakeProc, reader_kind: str) -> None:
    # Given a host process, and a PID that is gone
    proc.add(42, 1, (42,), "0::/user.slice/user-1000.slice/session-3.scope\n")
    # When both are read
    snapshot = reader(reader_kind, proc).read([42, 4343])
    # Then the host process has no container, the gone one is absent
    assert snapshot.containers == {42: None}
    assert [s.pid for s in snapshot.lineage(42)] == [42]
    assert 4343 not in snapshot.statuses
    assert snapshot.lineage(4343) == ()


@pytest.mark.parametrize(
    "cgroup",
    [
        pytest.param(f"0::/docker/{ID}\n".encode() * 70, id="too-many-lines"),
        pytest.param(f"0::/docker/{ID}\n".encode() + b"y" * (1 << 20), id="huge"),
        pytest.param(b"\xff\xfe\x00" + f"0::/docker/{ID}\n".encode() + b"\x00" * 99, id="binary"),
        pytest.param(f"0::/docker/{ID}/../{OTHER_ID}\n".encode(), id="traversal"),
        pytest.param(f"0::/docker/{ID}aa\n".encode(), id="wrong-length"),
    ],
)
def test_a_hostile_cgroup_file_is_no_container(
    proc: FakeProc, reader_kind: str, cgroup: bytes
) -> None:
    # Given a process whose cgroup file is hostile, and another process 300
    proc.add(200, 1, (200, 5), cgroup)
    proc.add(300, 1, (300,))
    # When the first is read, then it has no container, and nothing else was made up
    snapshot = reader(reader_kind, proc).read([200])
    assert snapshot.containers == {200: None}
    assert set(snapshot.statuses) == {200}


def test_a_process_in_a_users_own_cgroup_is_not_a_container_named_there(
    proc: FakeProc, reader_kind: str
) -> None:
    # Given a container, and a local account's process in a scope it made in its own cgroup
    # subtree, named after that container (systemd-run --user --scope --unit=docker-<id>)
    proc.container(100, 101, ID, f"0::/system.slice/docker-{ID}.scope\n")
    proc.add(500, 1, (500,), f"0::{USER}/app.slice/docker-{ID}.scope\n", uid=1000)
    # When both are read, then only the container's process is the container's
    snapshot = reader(reader_kind, proc).read([101, 500])
    assert snapshot.containers == {101: ID, 500: None}


# --------------------------------------------------------------------------------------------
# A rootless engine's containers: in its owner's systemd user slice, for that owner only
# --------------------------------------------------------------------------------------------

#: Where a rootless engine (systemd driver, cgroup v2) owned by account 1000 puts a container.
ROOTLESS = f"{USER}/user.slice/docker-{ID}.scope"


@pytest.mark.parametrize(
    "cgroup",
    [
        pytest.param(f"0::{ROOTLESS}\n", id="v2-rootless-systemd"),
        pytest.param(f"0::{ROOTLESS}/init.scope\n", id="v2-rootless-sub-cgroup"),
        pytest.param(f"0::{ROOTLESS}\n1:name=systemd:{ROOTLESS}\n", id="two-lines-agree"),
    ],
)
def test_a_rootless_engines_container_is_its_owners_user_slice(cgroup: str) -> None:
    # Given the account that owns the rootless engine, its containers are known
    assert container_id(cgroup, rootless_uid=1000) == ID
    # And for another account, or none (an engine that is not rootless), they are not
    assert container_id(cgroup, rootless_uid=1001) is None
    assert container_id(cgroup, rootless_uid=0) is None
    assert container_id(cgroup) is None
    assert container_id(cgroup, rootless_uid=None) is None


@pytest.mark.parametrize(
    "cgroup",
    [
        # the owner's other cgroups, or the layout under another account's or a mixed slice
        pytest.param(f"0::{USER}/app.slice/docker-{ID}.scope\n", id="owner-app-slice"),
        pytest.param(f"0::{USER}/docker/{ID}\n", id="owner-cgroupfs-shape"),
        pytest.param(f"0::{USER}/user.slice/x.slice/docker-{ID}.scope\n", id="scope-too-deep"),
        pytest.param(f"0::{USER}/user.slice/crio-{ID}.scope\n", id="other-runtime-scope"),
        pytest.param(f"0::{USER}/user.slice\n", id="no-scope"),
        pytest.param(
            f"0::/user.slice/user-1000.slice/user@1001.service/user.slice/docker-{ID}.scope\n",
            id="slice-and-service-disagree",
        ),
        pytest.param(
            f"0::/user.slice/user-1001.slice/user@1001.service/user.slice/docker-{ID}.scope\n",
            id="another-account",
        ),
        pytest.param(
            f"0::/user.slice/user-01000.slice/user@01000.service/user.slice/docker-{ID}.scope\n",
            id="uid-spelled-otherwise",
        ),
        pytest.param(f"0::/x/{ROOTLESS}\n", id="not-at-root"),
        pytest.param(f"0::{ROOTLESS}\n1:pids:/docker/{OTHER_ID}\n", id="two-containers"),
        pytest.param(f"0::{ROOTLESS}/../docker-{OTHER_ID}.scope\n", id="traversal"),
    ],
)
def test_only_the_rootless_layout_of_the_owner_is_a_container(cgroup: str) -> None:
    assert container_id(cgroup, rootless_uid=1000) is None


def test_the_owner_of_a_rootless_engine_changes_nothing_else() -> None:
    # Given the rootless owner, the engine's and kubelet's paths at the root are still read
    assert container_id(f"0::/docker/{ID}\n", rootless_uid=1000) == ID
    assert container_id(f"0::/system.slice/docker-{ID}.scope\n", rootless_uid=1000) == ID
    # And a rootless owner read once is not remembered for a read without one (the cache)
    assert container_id(f"0::{ROOTLESS}\n", rootless_uid=1000) == ID
    assert container_id(f"0::{ROOTLESS}\n") is None


ROOTLESS_READERS: dict[str, Callable[[Path, int | None], ProcReader]] = {
    "local": lambda root, uid: LocalProcReader(root, rootless_uid=uid),
    "awk": lambda root, uid: CommandProcReader(run_here, 10.0, root=str(root), rootless_uid=uid),
}


def test_both_readers_read_a_rootless_engines_containers_for_its_owner_only(
    proc: FakeProc, reader_kind: str
) -> None:
    # Given a rootless engine's container (account 1000), its kernel (PID 7 inside), and
    # account 1001's process in its own slice, named after a container of the same shape
    proc.add(100, 1, (100,), f"0::{USER}/user.slice/docker.service\n")
    proc.add(101, 100, (101, 1), f"0::{ROOTLESS}\n")
    proc.add(107, 101, (107, 7), f"0::{ROOTLESS}\n")
    other = "/user.slice/user-1001.slice/user@1001.service/user.slice"
    proc.add(500, 1, (500,), f"0::{other}/docker-{OTHER_ID}.scope\n", uid=1001)
    # When they are read for the engine's owner
    snapshot = ROOTLESS_READERS[reader_kind](proc.root, 1000).read([107, 500])
    # Then the container's kernel is the container's, with its lineage; the other is none
    assert snapshot.containers == {107: ID, 500: None}
    assert host_pid(7, snapshot.lineage(107)) == 107
    # And read for the other account (its own engine's), only its slice is; for none, neither
    found = ROOTLESS_READERS[reader_kind](proc.root, 1001).read([107, 500])
    assert found.containers == {107: None, 500: OTHER_ID}
    found = ROOTLESS_READERS[reader_kind](proc.root, None).read([107, 500])
    assert found.containers == {107: None, 500: None}


def test_parse_proc_output_reads_the_rootless_owners_containers() -> None:
    text = f"=p 107\nc 0::{ROOTLESS}\ns PPid:\t101\ns NSpid:\t107\t7\n"
    assert parse_proc_output(text, rootless_uid=1000).containers == {107: ID}
    assert parse_proc_output(text, rootless_uid=1001).containers == {107: None}
    assert parse_proc_output(text).containers == {107: None}


def test_a_cgroup_file_cannot_forge_records(proc: FakeProc, reader_kind: str) -> None:
    # Given a cgroup file with lines shaped like the awk program's records
    forged = f"0::/docker/{ID}\n=p 300\nc 0::/docker/{OTHER_ID}\ns PPid:\t1\n=a 300\n"
    proc.add(200, 1, (200, 5), forged)
    proc.add(300, 1, (300,), f"0::/docker/{OTHER_ID}\n")
    # When it is read, then only its real lines count: no record of 300 was made up
    snapshot = reader(reader_kind, proc).read([200])
    assert snapshot.containers == {200: ID}
    assert set(snapshot.statuses) == {200}


def test_a_hostile_status_file_is_read_as_gone(proc: FakeProc, reader_kind: str) -> None:
    proc.add(200, 1, status="PPid:\tnope\nNSpid:\t200\t1\n", cgroup=f"0::/docker/{ID}\n")
    proc.add(201, 1, status=("Name:\tx\n" * 10_000) + "PPid:\t1\n", cgroup=f"0::/docker/{ID}\n")
    snapshot = reader(reader_kind, proc).read([200, 201])
    assert snapshot == ProcSnapshot()


def test_a_loop_of_parents_ends(proc: FakeProc, reader_kind: str) -> None:
    # Given two processes that name each other as parent (a hostile /proc)
    proc.add(300, 301, (300, 3), f"0::/docker/{ID}\n")
    proc.add(301, 300, (301, 4), f"0::/docker/{ID}\n")
    snapshot = reader(reader_kind, proc).read([300])
    assert [s.pid for s in snapshot.lineage(300)] == [300, 301]


def test_a_deep_chain_of_ancestors_is_walked_a_bounded_way(
    proc: FakeProc, reader_kind: str
) -> None:
    # Given a process with 100 ancestors inside its container
    for pid in range(1000, 1101):
        proc.add(pid, pid - 1, (pid, pid - 990), f"0::/docker/{ID}\n")
    snapshot = reader(reader_kind, proc).read([1100])
    # Then at most MAX_DEPTH of them are read
    assert len(snapshot.statuses) == MAX_DEPTH + 1
    assert len(snapshot.lineage(1100)) == MAX_DEPTH + 1


def test_both_readers_read_the_same(proc: FakeProc) -> None:
    # Given two containers with shared ancestors and processes of all kinds
    proc.container(100, 101, ID)
    proc.container(200, 201, OTHER_ID, f"0::/system.slice/docker-{OTHER_ID}.scope\n")
    proc.add(107, 101, (107, 7), v1(f"/docker/{ID}"))
    proc.add(110, 107, (110, 12), v1(f"/docker/{ID}"))
    proc.add(111, 107, (111, 13), v1(f"/docker/{ID}"))
    proc.add(207, 201, (207, 7), f"0::/system.slice/docker-{OTHER_ID}.scope\n")
    proc.add(42, 1, (42,), "0::/\n")
    proc.add(43, 1, None, "0::/\n", status="PPid:\t1\nUid:\t0\t0\t0\t0\n")  # no NSpid
    pids = [110, 111, 207, 107, 42, 43, 9999, 110]
    # When both readers read the same PIDs
    here = READERS["local"](proc.root).read(pids)
    there = READERS["awk"](proc.root).read(pids)
    # Then they agree on every container and status
    assert dict(here.containers) == dict(there.containers)
    assert dict(here.statuses) == dict(there.statuses)
    assert here.containers == {110: ID, 111: ID, 207: OTHER_ID, 107: ID, 42: None, 43: None}
    assert here.statuses[43].ns_pids == ()


def test_the_real_proc_reads_this_process(reader_kind: str) -> None:
    # When this test's own PID is read from the real /proc, here and by the awk program
    read = (LocalProcReader() if reader_kind == "local" else CommandProcReader(run_here)).read(
        [os.getpid()]
    )
    # Then its parent is this process's parent, and NSpid starts with its PID
    status = read.statuses[os.getpid()]
    assert status.ppid == os.getppid()
    assert status.uid == os.getuid()
    assert status.ns_pids[:1] == (os.getpid(),)
    assert os.getpid() in read.containers


def test_the_command_passes_pids_as_checked_arguments() -> None:
    # Given PIDs of every kind a caller could pass by mistake
    argv = CommandProcReader(run_here).argv([12, True, -3, 0, 5_000_000, 12, 77, "9; reboot"])  # type: ignore[list-item]
    # Then the command is awk, a fixed program, the /proc folder and the integer PIDs only
    assert argv[0] == "awk"
    assert argv[2:] == ["/proc", "12", "77"]
    assert argv[1] == CommandProcReader(run_here).argv([1])[1]


@pytest.mark.parametrize("root", ["proc", "/proc\n", "/tmp/a=b"])
def test_the_proc_folder_must_be_a_plain_absolute_path(root: str) -> None:
    with pytest.raises(ValueError, match="not a /proc folder"):
        CommandProcReader(run_here, root=root)


def test_no_pid_runs_no_command() -> None:
    def never(argv: list[str], timeout: float) -> subprocess.CompletedProcess[str]:
        raise AssertionError("no command for no PID")

    assert CommandProcReader(never).read([]) == ProcSnapshot()


@pytest.mark.parametrize(
    ("answer", "message"),
    [
        (
            subprocess.CompletedProcess([], 127, "", "awk: not found"),
            "awk was not found on host 'x'",
        ),
        (
            subprocess.CompletedProcess([], 2, "", "boom"),
            "reading /proc on host 'x' failed (exit 2)",
        ),
        (subprocess.TimeoutExpired("awk", 3.0), "reading /proc on host 'x' took more than 3 s"),
    ],
)
def test_a_host_whose_proc_cannot_be_read_says_why(answer: object, message: str) -> None:
    def runner(argv: list[str], timeout: float) -> subprocess.CompletedProcess[str]:
        if isinstance(answer, BaseException):
            raise answer
        assert isinstance(answer, subprocess.CompletedProcess)
        return answer

    with pytest.raises(ProbeUnavailable) as caught:
        CommandProcReader(runner, 3.0, where="host 'x'").read([12])
    assert str(caught.value) == message


@given(st.text())
def test_parse_proc_output_never_raises(text: str) -> None:
    snapshot = parse_proc_output(text)
    assert all(pid > 0 for pid in snapshot.statuses)


def test_parse_proc_output_ignores_what_is_not_a_record() -> None:
    text = (
        "garbage\n=x 5\nc 0::/docker/" + ID + "\n=p -1\n=p 12345678901\n"
        "=p 7\nc 0::/docker/" + ID + "\ns PPid:\t1\ns NSpid:\t7\t1\nx stray\n"
        "=a 1\nc 0::/docker/" + OTHER_ID + "\ns PPid:\t0\ns NSpid:\t1\n"
    )
    snapshot = parse_proc_output(text)
    assert snapshot.containers == {7: ID}
    assert set(snapshot.statuses) == {7, 1}


# --------------------------------------------------------------------------------------------
# attribute: GPU processes by GPU, with their containers
# --------------------------------------------------------------------------------------------


def test_attribute_gives_each_gpus_processes_with_their_containers(proc: FakeProc) -> None:
    # Given a container's kernel on GPU 0, a host process on both GPUs, a process that ended,
    # and a third GPU whose driver would not list its processes
    proc.container(100, 101, ID)
    proc.add(107, 101, (107, 7), v1(f"/docker/{ID}"), uid=1000)
    proc.add(42, 1, (42,), "0::/user.slice\n", uid=0)
    processes = GPUProcesses(
        source="nvml",
        processes=(
            GPUProcess(GPU_0, 107, 4096, "C", 70, 20),
            GPUProcess(GPU_0, 42, 100),
            GPUProcess(GPU_1, 42, 100),
            GPUProcess(GPU_1, 4343, 5),
        ),
        listed=(GPU_0, GPU_1),
        unknown=("GPU-cccc",),
        sampled=(GPU_0,),
    )
    # When they are attributed
    result = attribute(processes, LocalProcReader(proc.root))
    # Then each GPU lists its processes with their containers ("other": None)
    assert [g.uuid for g in result.gpus] == [GPU_0, GPU_1, "GPU-cccc"]
    gpu_0, gpu_1, gpu_c = result.gpus
    kernel, host = gpu_0.processes
    assert (kernel.pid, kernel.container_id, kernel.memory_used_mib) == (107, ID, 4096)
    assert (kernel.sm_percent, kernel.memory_percent, kernel.uid) == (70, 20, 1000)
    assert kernel.held_by(7)
    assert not kernel.held_by(8)
    assert (host.pid, host.container_id, host.uid) == (42, None, 0)
    assert [(p.pid, p.container_id, p.uid) for p in gpu_1.processes] == [
        (42, None, 0),
        (4343, None, None),
    ]
    assert (gpu_0.sampled, gpu_1.sampled) == (True, False)
    assert (gpu_c.listed, gpu_c.processes) == (False, ())
    assert (result.reason, result.proc_reason) == (None, None)
    assert result.gpu(GPU_1) is gpu_1
    assert result.to_json()["gpus"][0]["processes"][0]["container_id"] == ID


def test_attribute_without_processes_reads_nothing() -> None:
    class Never:
        def read(self, pids: Iterable[int]) -> ProcSnapshot:
            raise AssertionError(f"nothing to read, asked for {list(pids)}")

    result = attribute(GPUProcesses(source="nvml", listed=(GPU_0,)), Never())
    assert [(g.uuid, g.processes) for g in result.gpus] == [(GPU_0, ())]


def test_attribute_says_when_proc_could_not_be_read() -> None:
    def unreachable(argv: list[str], timeout: float) -> subprocess.CompletedProcess[str]:
        raise ProbeUnavailable("the host is unreachable")

    processes = GPUProcesses(source="nvidia-smi", processes=(GPUProcess(GPU_0, 12, 1),))
    result = attribute(processes, CommandProcReader(unreachable))
    assert result.proc_reason == "the host is unreachable"
    assert [p.container_id for p in result.gpus[0].processes] == [None]


def test_attribute_passes_on_why_processes_could_not_be_read() -> None:
    result = attribute(GPUProcesses(source="none", reason="nvidia-smi: gone"), LocalProcReader())
    assert (result.reason, result.gpus) == ("nvidia-smi: gone", ())


# --------------------------------------------------------------------------------------------
# Where the rootless owner comes from: the host (hosts.DockerEngine.proc_reader)
# --------------------------------------------------------------------------------------------

ENGINE_INFO = EngineInfo(
    version="27.1.1",
    api_version="1.46",
    os="linux",
    arch="x86_64",
    kernel_version=None,
    operating_system=None,
    cgroup_driver="systemd",
    cgroup_version="2",
    runtimes=("runc",),
    default_runtime="runc",
    nvidia_runtime=False,
    nvidia_hook=None,
    cdi=False,
    cdi_spec_dirs=(),
    security_options=("name=seccomp,profile=builtin", "name=rootless", "name=cgroupns"),
)
ROOTFUL_INFO = replace(ENGINE_INFO, security_options=("name=seccomp,profile=builtin",))


def _engine_answering(host: Host, monkeypatch: pytest.MonkeyPatch, info: EngineInfo) -> list[int]:
    """``host``'s engine answering ``info``; the list of times it was asked."""
    asked: list[int] = []

    def engine_info(max_age: float = 0.0) -> EngineInfo:
        asked.append(1)
        return info

    monkeypatch.setattr(host, "engine_info", engine_info)
    return asked


def _local_socket(tmp_path: Path, owner: int | None) -> str:
    """A unix socket owned by ``owner`` (this process's user where ``None`` or not root)."""
    path = tmp_path / "d.sock"
    listener = socket.socket(socket.AF_UNIX)
    listener.bind(str(path))
    listener.close()
    if owner is not None and os.getuid() == 0:
        os.chown(path, owner, -1)
    return str(path)


def _reader_uid(host: Host) -> int | None:
    reader = host.proc_reader()
    assert isinstance(reader, LocalProcReader | CommandProcReader)
    return reader.rootless_uid


@pytest.mark.skipif(not hasattr(os, "getuid"), reason="unix sockets and uids")
def test_a_local_rootless_engines_owner_is_its_sockets(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Given the local engine's socket, owned by an account (1000, where this test may chown)
    path = _local_socket(tmp_path, 1000)
    owner = os.stat(path).st_uid
    host = Host(
        HostSpec.parse("local", f"unix://{path}", is_local=True),
        timeout=1.0,
        gpu_inventory=None,
        log=logging.getLogger("tests.attribution"),
    )
    try:
        # When the engine says it is rootless, then /proc is read for the socket's owner
        _engine_answering(host, monkeypatch, ENGINE_INFO)
        assert _reader_uid(host) == (owner or None)
        # And when it does not say so, for no one
        _engine_answering(host, monkeypatch, ROOTFUL_INFO)
        assert _reader_uid(host) is None

        # And when it does not answer, for no one
        def unreachable(max_age: float = 0.0) -> EngineInfo:
            raise EngineUnreachable("gone")

        monkeypatch.setattr(host, "engine_info", unreachable)
        assert _reader_uid(host) is None
    finally:
        host.close()


@pytest.mark.skipif(not hasattr(os, "getuid") or os.getuid() != 0, reason="chown to root")
def test_a_root_owned_socket_is_no_rootless_engine_and_the_engine_is_not_asked(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = _local_socket(tmp_path, 0)
    host = Host(
        HostSpec.parse("local", f"unix://{path}", is_local=True),
        timeout=1.0,
        gpu_inventory=None,
        log=logging.getLogger("tests.attribution"),
    )
    try:
        asked = _engine_answering(host, monkeypatch, ENGINE_INFO)
        assert _reader_uid(host) is None
        assert asked == []
    finally:
        host.close()


def test_a_missing_socket_is_no_rootless_engine(monkeypatch: pytest.MonkeyPatch) -> None:
    host = Host(
        HostSpec.parse("local", "unix:///nonexistent/gpudev/docker.sock", is_local=True),
        timeout=1.0,
        gpu_inventory=None,
        log=logging.getLogger("tests.attribution"),
    )
    try:
        _engine_answering(host, monkeypatch, ENGINE_INFO)
        assert _reader_uid(host) is None
    finally:
        host.close()


@pytest.mark.parametrize(
    ("info", "user", "expected"),
    [
        pytest.param(ENGINE_INFO, "1000:1000", 1000, id="rootless-ssh-user"),
        pytest.param(ROOTFUL_INFO, "1000:1000", None, id="rootful"),
        pytest.param(ENGINE_INFO, "0:0", None, id="rootless-as-root"),
    ],
)
def test_an_ssh_hosts_rootless_engines_owner_is_the_ssh_user(
    monkeypatch: pytest.MonkeyPatch, info: EngineInfo, user: str, expected: int | None
) -> None:
    # Given an ssh:// host whose engine answers, and whose SSH user is ``user``: a rootless
    # engine's socket is in its owner's runtime folder (mode 0700), so an account other than
    # root that reaches it owns it
    host = Host(
        HostSpec.parse("box", "ssh://gpudev@box.example"),
        timeout=1.0,
        gpu_inventory=None,
        log=logging.getLogger("tests.attribution"),
    )
    asked: list[str] = []

    def user_ids() -> str:
        asked.append(user)
        return user

    try:
        _engine_answering(host, monkeypatch, info)
        monkeypatch.setattr(host, "user_ids", user_ids)
        assert _reader_uid(host) == expected
        # And the SSH user is asked only of a rootless engine's host
        assert asked == ([user] if info.rootless else [])
    finally:
        host.close()


def test_an_ssh_user_that_cannot_be_read_is_no_rootless_owner(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    host = Host(
        HostSpec.parse("box", "ssh://gpudev@box.example"),
        timeout=1.0,
        gpu_inventory=None,
        log=logging.getLogger("tests.attribution"),
    )

    def unreadable() -> str:
        raise EngineError("Could not read the SSH user's uid/gid")

    try:
        _engine_answering(host, monkeypatch, ENGINE_INFO)
        monkeypatch.setattr(host, "user_ids", unreadable)
        assert _reader_uid(host) is None
    finally:
        host.close()


@pytest.mark.parametrize(
    ("options", "rootless"),
    [
        pytest.param(("name=rootless",), True, id="alone"),
        pytest.param(("name=seccomp,profile=builtin", "name=rootless,x=y"), True, id="with-fields"),
        pytest.param(("name=seccomp,profile=name=rootless",), False, id="a-fields-value"),
        pytest.param(("name=rootlessx", "name=userns"), False, id="other-names"),
        pytest.param((), False, id="none"),
    ],
)
def test_an_engine_is_rootless_where_its_security_options_say_so(
    options: tuple[str, ...], rootless: bool
) -> None:
    assert replace(ENGINE_INFO, security_options=options).rootless is rootless
