"""Whether a host could lease a GPU request now (``check_fit``, what placement asks each host):
the request passes, or the refusal says why. Leasing itself: tests/unit/test_leases.py."""

from __future__ import annotations

import pytest

from jupyter_gpudev.errors import BadRequest, GPUDevError
from jupyter_gpudev.leasing import GPURequest, LeasableGPU, Lease, NoFreeGPU, check_fit

A100 = "NVIDIA A100-SXM4-80GB"


def unit(index: int, name: str = A100, total: int = 81920) -> LeasableGPU:
    return LeasableGPU(
        uuid=f"GPU-0000000{index}-aaaa-bbbb-cccc-dddddddddddd",
        name=name,
        index=index,
        memory_total_mib=total,
        memory_used_mib=0,
    )


def held_by(container: str, *units: LeasableGPU) -> dict[str, Lease]:
    lease = Lease("lease-1", "far", container, "alice", tuple(u.uuid for u in units), 0.0)
    return {u.uuid: lease for u in units}


def test_a_request_that_fits_passes() -> None:
    gpus = [unit(0), unit(1), unit(2, "NVIDIA T4", 15360)]
    held = held_by("busy", gpus[0])
    check_fit("far", GPURequest(count=1), gpus, held)
    check_fit("far", GPURequest(count=2), gpus, held)
    check_fit("far", GPURequest(uuids=(gpus[1].uuid,)), gpus, held)
    check_fit("far", GPURequest(count=1, model="a100"), gpus, held)


def test_too_few_free_gpus_is_no_free_gpu_with_counts_and_holders() -> None:
    # Given two A100s, one held
    gpus = [unit(0), unit(1)]
    held = held_by("busy", gpus[0])
    # When two are asked for
    with pytest.raises(NoFreeGPU) as caught:
        check_fit("far", GPURequest(count=2), gpus, held)
    # Then it says how many are free, who holds the other, and counts in the details
    error = caught.value
    assert error.message.startswith("2 GPUs requested on host 'far', 1 free. Held: GPU 0")
    assert "by container busy for alice" in error.message
    assert (error.details["requested"], error.details["matching"], error.details["free"]) == (
        2,
        2,
        1,
    )
    assert error.status == 409


def test_a_filter_nothing_matches_is_no_free_gpu_with_zero_matches() -> None:
    with pytest.raises(NoFreeGPU, match=r"with model containing 'H100': 0 match, 0 free\."):
        check_fit("far", GPURequest(count=1, model="H100"), [unit(0)], {})


def test_a_held_gpu_asked_for_by_uuid_is_no_free_gpu() -> None:
    gpus = [unit(0), unit(1)]
    with pytest.raises(NoFreeGPU, match="1 GPU requested on host 'far' by UUID, 0 free"):
        check_fit("far", GPURequest(uuids=(gpus[0].uuid,)), gpus, held_by("busy", gpus[0]))


def test_an_unknown_uuid_is_a_bad_request_naming_the_host() -> None:
    with pytest.raises(BadRequest) as caught:
        check_fit("far", GPURequest(uuids=("GPU-nope",)), [unit(0)], {})
    assert caught.value.message == "There is no GPU with UUID GPU-nope on host 'far'"
    assert caught.value.details == {"host": "far", "uuid": "GPU-nope"}
    assert not isinstance(caught.value, NoFreeGPU)


def test_a_uuid_that_misses_the_filter_is_a_bad_request() -> None:
    gpus = [unit(0, "NVIDIA T4", 15360)]
    with pytest.raises(GPUDevError, match="does not have at least 40000 MiB") as caught:
        check_fit("far", GPURequest(uuids=(gpus[0].uuid,), min_memory_mib=40000), gpus, {})
    assert isinstance(caught.value, BadRequest)
