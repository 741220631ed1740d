"""Placement decisions without an engine: the GPU request, the host chosen, the CUDA check."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import replace

import pytest

from jupyter_gpudev.containers import StartRequest
from jupyter_gpudev.containers.placement import (
    CudaMismatch,
    HostReport,
    NoHostFits,
    check_cuda,
    choose,
    gpu_request,
    gpus_optional,
    host_short,
    required_cuda,
)
from jupyter_gpudev.engine import Inventory
from jupyter_gpudev.engine.info import EngineInfo
from jupyter_gpudev.environments import Environment, GPURequirement, HostNeeds
from jupyter_gpudev.errors import BadRequest
from jupyter_gpudev.leasing import GPURequest

ENV = Environment(name="train", display_name="Train", source="test", image="python:3.12")


def with_gpu(mode: str, count: int = 1, **more: object) -> Environment:
    return replace(ENV, gpu=GPURequirement(mode=mode, count=count, **more))  # type: ignore[arg-type]


def test_the_environment_decides_unless_the_request_says() -> None:
    env = with_gpu("required", 2, min_memory_mib=40_000, model="A100")
    # The environment's count, memory and model
    assert gpu_request(env, StartRequest("train")) == GPURequest(
        count=2, min_memory_mib=40_000, model="A100"
    )
    # A count or named GPUs in the request win
    assert gpu_request(env, StartRequest("train", gpus=1)) == GPURequest(
        count=1, min_memory_mib=40_000, model="A100"
    )
    assert gpu_request(env, StartRequest("train", gpu_uuids=("GPU-1",))) == GPURequest(
        uuids=("GPU-1",)
    )


def test_no_gpu_environments_and_zero_gpus_make_a_cpu_container() -> None:
    assert gpu_request(with_gpu("none", 0), StartRequest("train")) is None
    assert gpu_request(with_gpu("optional"), StartRequest("train", gpus=0)) is None


@pytest.mark.parametrize(
    ("env", "request_", "message"),
    [
        (with_gpu("required"), StartRequest("t", gpus=0), "requires a GPU"),
        (ENV, StartRequest("t", gpus=-1), "cannot be negative"),
        (ENV, StartRequest("t", gpus=1, gpu_uuids=("GPU-1",)), "not both"),
    ],
)
def test_bad_gpu_requests_are_refused(
    env: Environment, request_: StartRequest, message: str
) -> None:
    with pytest.raises(BadRequest, match=message):
        gpu_request(env, request_)


def test_gpus_are_optional_only_when_nobody_asked_for_them() -> None:
    optional = with_gpu("optional")
    assert gpus_optional(optional, StartRequest("t"))
    assert not gpus_optional(optional, StartRequest("t", gpus=1))
    assert not gpus_optional(optional, StartRequest("t", gpu_uuids=("GPU-1",)))
    assert not gpus_optional(with_gpu("required"), StartRequest("t"))


def test_the_first_host_that_fits_is_chosen_and_later_hosts_are_not_asked() -> None:
    asked: list[str] = []

    def reports() -> Iterator[HostReport]:
        for report in (
            HostReport("a", reachable=False, reason="engine unreachable"),
            HostReport("b", reachable=True, reason=None),
            HostReport("c", reachable=True, reason=None),
        ):
            asked.append(report.name)
            yield report

    assert choose(reports(), "train", fallback=False) == "b"
    assert asked == ["a", "b"]


def test_when_no_host_fits_each_reason_is_given() -> None:
    reports = [
        HostReport("a", reachable=False, reason="engine unreachable."),
        HostReport("b", reachable=True, reason="no free GPU"),
    ]
    with pytest.raises(NoHostFits) as caught:
        choose(reports, "train", fallback=False)
    assert caught.value.details["hosts"] == {"a": "engine unreachable.", "b": "no free GPU"}
    assert "a: engine unreachable; b: no free GPU." in caught.value.message
    # Optional GPUs: the first host that answered, without a GPU
    assert choose(reports, "train", fallback=True) == "b"


def test_an_image_newer_than_the_driver_is_refused_with_what_to_do() -> None:
    inventory = Inventory(source="nvidia-smi", cuda_version="12.2", driver_version="535.1")
    image_env = ["NVIDIA_REQUIRE_CUDA=cuda>=12.4 brand=tesla", "CUDA_VERSION=12.4.1"]
    assert required_cuda(image_env) == "12.4"
    with pytest.raises(CudaMismatch, match="Upgrade the host's driver"):
        check_cuda("img", image_env, "local", inventory)
    # Same or older CUDA, or the check disabled by the image: accepted
    check_cuda("img", ["CUDA_VERSION=12.2.0"], "local", inventory)
    check_cuda("img", [*image_env, "NVIDIA_DISABLE_REQUIRE=1"], "local", inventory)


def engine(cpus: int | None, memory_mib: int | None) -> EngineInfo:
    return EngineInfo(
        version="27",
        api_version="1.47",
        os="linux",
        arch="x86_64",
        kernel_version=None,
        operating_system=None,
        cgroup_driver=None,
        cgroup_version=None,
        runtimes=(),
        default_runtime=None,
        nvidia_runtime=False,
        nvidia_hook=None,
        cdi=False,
        cdi_spec_dirs=(),
        cpus=cpus,
        memory_mib=memory_mib,
    )


def test_host_requirements_say_what_is_short_and_what_was_not_checked() -> None:
    needs = HostNeeds(cpus=8, memory_mib=65536, storage_mib=1000)
    # A host with enough of each: nothing short, everything checked
    assert host_short("big", needs, engine(64, 512000), 50000) == (None, [])
    # A host short of CPUs and storage: both named, with what it has and what is needed
    short, unchecked = host_short("small", needs, engine(2, 512000), 10)
    assert short == (
        "has 2 CPUs, the environment needs 8 (hostRequirements.cpus); "
        "10 MiB free for containers, the environment needs 1,000 (hostRequirements.storage)"
    )
    assert unchecked == []
    # A host that does not say (a tcp:// engine's storage): not checked, and said so
    short, unchecked = host_short("far", needs, engine(64, None), None)
    assert short is None
    assert unchecked == [
        "hostRequirements.memory was not checked: host 'far' does not say how much it has",
        "hostRequirements.storage was not checked: host 'far' does not say how much it has",
    ]
    # Nothing asked: nothing checked
    assert host_short("any", HostNeeds(), engine(None, None), None) == (None, [])
    assert not HostNeeds()
