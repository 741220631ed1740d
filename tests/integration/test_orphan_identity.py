"""The orphan sweep on the real engine tells a server process by its PID, its start time and
the boot: a kernel container whose label names a live PID with another start time (the server
that made it died, and another process got its PID) is swept and its GPU lease freed; one
labelled with this process as it is stays."""

from __future__ import annotations

import os
import socket
from pathlib import Path

import docker
import pytest

from jupyter_gpudev.containers import DevContainers, StartRequest, docker_name
from jupyter_gpudev.labels import L_PROCESS
from tests.leaks import Baseline, assert_nothing_leaked

pytestmark = [
    pytest.mark.integration,
    pytest.mark.skipif(
        not Path("/proc/self/stat").is_file(), reason="process start times are read in /proc"
    ),
]


@pytest.mark.usefixtures("gpu_engine")
def test_a_reused_pid_does_not_keep_a_dead_servers_kernel_container(
    manager: DevContainers,
    docker_client: docker.DockerClient,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    state = tmp_path / "state"
    baseline = Baseline.take(docker_client, state)
    machine, pid = socket.gethostname(), os.getpid()
    stat = Path(f"/proc/{pid}/stat").read_text()
    start = int(stat[stat.rindex(")") + 1 :].split()[19])  # field 22, after the name
    boot = Path("/proc/sys/kernel/random/boot_id").read_text().split("-")[0]
    mine = f"{machine}:{pid}:{start}:{boot}"
    # Given a GPU kernel container made by a server process that had this process's PID
    # before this one (another start time: that server died, this process got its PID)...
    earlier = f"{machine}:{pid}:{start - 1}:{boot}"
    # (made by an earlier version, this assignment changes nothing: the label is then this
    # process's "machine:pid")
    monkeypatch.setattr(
        "jupyter_gpudev.containers.targets.process_identity", lambda: earlier, raising=False
    )
    manager.start(StartRequest(environment="default", name="kernel-reused", gpus=1, kernel_id="k1"))
    monkeypatch.undo()
    # ...and one made by this process as it is
    manager.start(StartRequest(environment="default", name="kernel-mine", gpus=1, kernel_id="k2"))
    labels = {
        name: docker_client.containers.get(docker_name(name)).labels[L_PROCESS]
        for name in ("kernel-reused", "kernel-mine")
    }
    assert {lease.container for lease in manager.ledger.active("local")} == {
        "kernel-reused",
        "kernel-mine",
    }
    # When the orphan sweep runs (a server's start-up)
    stopped = manager.stop_orphan_kernels()
    # Then the dead server's container is swept (removed: nothing changed in it) and its
    # lease freed, while this process's own is kept, running, with its lease
    assert stopped == ["kernel-reused"]
    swept = docker_client.containers.list(all=True, filters={"name": docker_name("kernel-reused")})
    assert swept == []
    assert docker_client.containers.get(docker_name("kernel-mine")).status == "running"
    assert [lease.container for lease in manager.ledger.active("local")] == ["kernel-mine"]
    # (the labels: the process as it is, the earlier one)
    assert labels == {"kernel-reused": earlier, "kernel-mine": mine}
    manager.remove("kernel-mine", "local")
    assert manager.ledger.active("local") == []
    assert_nothing_leaked(docker_client, baseline, state=state, server_id=manager.server_id)
