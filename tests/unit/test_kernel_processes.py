"""A kernel's process through one interface (``kernels.runtime.KernelProcesses``), in a Docker
container or in a pod, with fake engines: which one a dev container gets, and kernels whose
provisioner info an earlier server saved found again by it (no server, no engine)."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from dataclasses import dataclass, field
from types import SimpleNamespace
from typing import Any, cast

import pytest
from traitlets import TraitError

from jupyter_gpudev.containers import DevContainers
from jupyter_gpudev.engine.cluster import ExecResult
from jupyter_gpudev.errors import EngineError, EngineUnreachable, NotFound
from jupyter_gpudev.kernels.pods import PodProcesses
from jupyter_gpudev.kernels.process import ContainerProcesses
from jupyter_gpudev.kernels.provisioner import GPUDevProvisioner, set_manager
from jupyter_gpudev.kernels.runtime import kernel_processes, processes_type


@dataclass
class Cluster:
    """A cluster's exec: each command's exit code, in turn (an exception: raised)."""

    answers: list[int | Exception] = field(default_factory=list)
    execs: list[tuple[str, list[str]]] = field(default_factory=list)
    kind = "kubernetes"

    def exec(self, pod: str, argv: list[str], **_kwargs: Any) -> ExecResult:
        self.execs.append((pod, list(argv)))
        answer = self.answers.pop(0) if self.answers else 0
        if isinstance(answer, Exception):
            raise answer
        return ExecResult(answer, b"", b"")


@dataclass
class Api:
    """A Docker engine's exec API: each exec's state, by id."""

    states: dict[str, dict[str, Any]] = field(default_factory=dict)
    inspected: list[str] = field(default_factory=list)

    def exec_inspect(self, exec_id: str) -> dict[str, Any]:
        self.inspected.append(exec_id)
        return self.states[exec_id]


def docker_host(api: Api) -> Any:
    container = SimpleNamespace(id="c0ffee", client=SimpleNamespace(api=api), attrs={})
    host = SimpleNamespace(
        name="local", backend=SimpleNamespace(kind="docker"), spec=SimpleNamespace(is_local=True)
    )
    host.container = container
    return host


def cluster_host(cluster: Cluster) -> Any:
    return SimpleNamespace(name="lab", backend=cluster, spec=SimpleNamespace(is_local=False))


class Manager:
    """The few things of ``DevContainers`` the kernel processes ask for."""

    def __init__(self, *hosts: Any) -> None:
        self.hosts = {host.name: host for host in hosts}
        self.found: list[tuple[str, str]] = []
        self.host_pool = SimpleNamespace(get=self.hosts.__getitem__, local_name="local")

    def find(self, name: str, host: str) -> tuple[Any, Any]:
        self.found.append((name, host))
        return self.hosts[host], self.hosts[host].container

    def address_of(self, _container: Any) -> str:
        return "172.18.0.5"


@pytest.fixture
def manager() -> Iterator[Manager]:
    made = Manager(docker_host(Api()), cluster_host(Cluster()))
    set_manager(cast(DevContainers, made))
    yield made
    set_manager(None)


def test_a_host_gives_its_dev_containers_one_kind_of_kernel_processes() -> None:
    # Given a Docker host and a Kubernetes host
    docker, cluster = docker_host(Api()), cluster_host(Cluster())
    # Then a container's kernels are kept warm and it is stopped and kept at their end, and
    # its kernels' exit codes are known; a pod's none of these
    assert processes_type(docker) is ContainerProcesses
    assert processes_type(cluster) is PodProcesses
    assert (ContainerProcesses.keeps_warm, PodProcesses.keeps_warm) == (True, False)
    assert (ContainerProcesses.stopped_and_kept, PodProcesses.stopped_and_kept) == (True, False)
    assert (ContainerProcesses.exit_codes, PodProcesses.exit_codes) == (True, False)


def test_a_pod_is_named_by_its_kernels_handle_and_never_looked_up(manager: Manager) -> None:
    host = manager.hosts["lab"]
    # When the processes of a dev container's pod are asked for, with a kernel's handle or not
    handled = kernel_processes(cast(DevContainers, manager), host, "train", "pod:gpudev-old")
    named = kernel_processes(cast(DevContainers, manager), host, "train")
    # Then the handle names the pod, else the container's name does; nothing was looked up
    assert isinstance(handled, PodProcesses)
    assert isinstance(named, PodProcesses)
    assert (handled.pod, named.pod) == ("gpudev-old", "gpudev-train")
    assert manager.found == []


def test_a_pod_kernels_exit_is_its_pid_gone_and_a_failed_exec_is_unreachable() -> None:
    # Given a pod whose checks answer: running, gone, the pod gone, an exec that failed
    cluster = Cluster([0, 1, NotFound("no pod"), EngineError("refused")])
    processes = PodProcesses(cast(Any, None), cluster_host(cluster), cast(Any, cluster), "p")
    # Then the kernel runs, then ended (its code unknown: 1), twice, and then the failed
    # exec says nothing of the kernel
    assert processes.exit_code("pod:p", "kernel-k") is None
    assert processes.exit_code("pod:p", "kernel-k") == 1
    assert processes.exit_code("pod:p", "kernel-k") == 1
    with pytest.raises(EngineUnreachable, match="refused"):
        processes.exit_code("pod:p", "kernel-k")
    # Each check was one exec in the pod, of the kernel's pid file
    assert cluster.execs[0] == (
        "p",
        ["/bin/sh", "-c", 'kill -0 "$(cat /tmp/.gpudev/kernel-k.pid)" 2>/dev/null'],
    )


def test_a_container_kernels_exit_is_its_execs() -> None:
    api = Api({"e1": {"Running": True}, "e2": {"Running": False, "ExitCode": 3}})
    host = docker_host(api)
    processes = ContainerProcesses(host, host.container)
    assert processes.exit_code("e1", "kernel-k") is None
    assert processes.exit_code("e2", "kernel-k") == 3


def saved(**info: Any) -> GPUDevProvisioner:
    """A provisioner of a kernel that an earlier server started, loaded from its info."""
    provisioner = GPUDevProvisioner(kernel_id="", kernel_spec=None)
    asyncio.run(
        provisioner.load_provisioner_info({"kernel_id": "k", "connection_info": {}, **info})
    )
    return provisioner


def test_a_kernel_in_a_pod_saved_by_an_earlier_server_is_polled_in_its_pod(
    manager: Manager,
) -> None:
    # Given the provisioner info of a kernel in a pod, as servers before this one saved it
    cluster = manager.hosts["lab"].backend
    cluster.answers = [0, 1]
    provisioner = saved(
        host="lab",
        container="train",
        dedicated=True,
        pod_gpus=1,
        exec_id="pod:gpudev-train",
        runtime_id="kernel-k",
        ports=[5000, 5001, 5002, 5003, 5004],
    )
    # When this server polls it, then its pid is checked in that pod, until it is gone
    assert asyncio.run(provisioner.poll()) is None
    assert asyncio.run(provisioner.poll()) == 1
    assert [pod for pod, _ in cluster.execs] == ["gpudev-train", "gpudev-train"]
    assert manager.found == []
    # And its handle is saved again as it was
    info = asyncio.run(provisioner.get_provisioner_info())
    assert (info["exec_id"], info["runtime_id"], info["pod_gpus"]) == (
        "pod:gpudev-train",
        "kernel-k",
        1,
    )


def test_a_kernel_in_a_container_saved_by_an_earlier_server_is_polled_by_its_exec(
    manager: Manager,
) -> None:
    # Given the provisioner info of a kernel in a Docker container
    api = manager.hosts["local"].container.client.api
    api.states = {"f00d": {"Running": True}}
    provisioner = saved(
        host="local", container="box", exec_id="f00d", runtime_id="kernel-k", ports=[1]
    )
    # When this server polls it twice, then its exec is inspected each time, the container
    # looked up once
    assert asyncio.run(provisioner.poll()) is None
    api.states["f00d"] = {"Running": False, "ExitCode": 0}
    assert asyncio.run(provisioner.poll()) == 0
    assert api.inspected == ["f00d", "f00d"]
    assert manager.found == [("box", "local")]


def test_a_kernelspecs_gpus_of_minus_1_is_the_environments_count_and_less_is_refused() -> None:
    # Given kernelspec metadata (and config) that say -1: not given, the environment's count
    assert GPUDevProvisioner(kernel_id="k", kernel_spec=None, gpus=-1).gpus == -1
    assert GPUDevProvisioner(kernel_id="k", kernel_spec=None, gpus=0).gpus == 0
    # Then a count below it means nothing and is refused, as is a shutdown poll of 0 s (a
    # loop that never rests); a start watched 0 s is one look
    with pytest.raises(TraitError, match=r"'gpus' trait .* not be less than -1"):
        GPUDevProvisioner(kernel_id="k", kernel_spec=None, gpus=-2)
    with pytest.raises(TraitError, match=r"'exit_poll_seconds' trait .* should be more than 0"):
        GPUDevProvisioner(kernel_id="k", kernel_spec=None, exit_poll_seconds=0)
    for name in ("startup_check_seconds", "unreachable_grace"):
        assert getattr(GPUDevProvisioner(kernel_id="k", kernel_spec=None, **{name: 0}), name) == 0
        with pytest.raises(TraitError, match=rf"'{name}' trait .* not be less than 0"):
            GPUDevProvisioner(kernel_id="k", kernel_spec=None, **{name: -1})
