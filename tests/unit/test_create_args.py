"""The pure builder of a dev container's create arguments (no engine)."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

import pytest
from docker.types import Mount

from jupyter_gpudev.containers.create import (
    HELPER_MEMORY,
    HELPER_PIDS,
    Confinement,
    Target,
    create_args,
    helper_args,
    tightest,
)
from jupyter_gpudev.engine.driver import Injection
from jupyter_gpudev.environments import Environment, ResolvedMount
from jupyter_gpudev.environments.model import RunOptions
from jupyter_gpudev.labels import L_GPUS, L_KERNEL, L_LEASE, L_MANAGED, L_NAME, L_PORTS, L_PROBE

GPU_A = "GPU-aaaaaaaa-0000-0000-0000-000000000001"
GPU_B = "GPU-bbbbbbbb-0000-0000-0000-000000000002"


def environment(**changes: Any) -> Environment:
    env = Environment(
        name="train",
        display_name="Train",
        source="test",
        image="python:3.12",
        container_env={"FOO": "bar"},
        forward_ports=(8888,),
    )
    return replace(env, **changes)


def target(**changes: Any) -> Target:
    base = Target(
        name="train-ann-1a2b",
        owner="ann",
        host="local",
        image="python:3.12",
        workspace="/home/ann/project",
        mounts=(ResolvedMount("/home/ann/project", "/workspace", read_only=False),),
        command=("sleep", "infinity"),
        server_id="s1",
        ledger_id="l1",
        process="box:42",
        created="2026-11-24T00:00:00+00:00",
    )
    return replace(base, **changes)


def test_gpus_are_requested_by_uuid_and_named_in_the_environment() -> None:
    # Given a target holding two leased GPUs
    args = create_args(
        environment(), target(gpu_uuids=(GPU_A, GPU_B), lease_id="L7"), Confinement()
    )
    # Then the engine is asked for exactly those UUIDs, never a count
    (request,) = args["device_requests"]
    assert request["DeviceIDs"] == [GPU_A, GPU_B]
    assert request["Count"] is None or request["Count"] == 0
    assert args["environment"]["NVIDIA_VISIBLE_DEVICES"] == f"{GPU_A},{GPU_B}"
    assert args["labels"][L_GPUS] == f"{GPU_A},{GPU_B}"
    assert args["labels"][L_LEASE] == "L7"


def test_a_cpu_container_sees_no_gpu() -> None:
    # Given no lease
    args = create_args(environment(), target(), Confinement())
    # Then no device is requested and the NVIDIA variable hides every GPU (CUDA images
    # default it to "all")
    assert "device_requests" not in args
    assert "devices" not in args
    assert args["environment"]["NVIDIA_VISIBLE_DEVICES"] == "void"
    assert args["labels"][L_GPUS] == ""


def test_driver_injection_replaces_the_device_request() -> None:
    # Given a legacy injection plan for one leased GPU
    injected = Injection(
        devices=("/dev/nvidia0:/dev/nvidia0:rwm",),
        mounts=(Mount("/usr/lib/libcuda.so.1", "/usr/lib/libcuda.so.1", type="bind"),),
        environment=(("LD_LIBRARY_PATH", "/usr/local/nvidia/lib64"),),
    )
    args = create_args(environment(), target(gpu_uuids=(GPU_A,), injection=injected), Confinement())
    # Then devices and mounts are passed and no hook request is made
    assert "device_requests" not in args
    assert args["devices"] == ["/dev/nvidia0:/dev/nvidia0:rwm"]
    assert args["mounts"][-1]["Source"] == "/usr/lib/libcuda.so.1"
    assert args["environment"]["LD_LIBRARY_PATH"] == "/usr/local/nvidia/lib64"


def test_mounts_keep_their_mode() -> None:
    mounts = (
        ResolvedMount("/srv/data", "/data", read_only=True),
        ResolvedMount("/home/ann/project", "/workspace", read_only=False),
    )
    args = create_args(environment(), target(mounts=mounts), Confinement())
    assert [(m["Source"], m["Target"], m["ReadOnly"]) for m in args["mounts"]] == [
        ("/srv/data", "/data", True),
        ("/home/ann/project", "/workspace", False),
    ]


def test_only_the_environments_variables_reach_the_container(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # Given a server whose own environment holds a secret
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "hunter2")
    args = create_args(
        environment(), target(extra_env={"SSL_CERT_FILE": "/etc/gpudev/ca.pem"}), Confinement()
    )
    # Then the container gets containerEnv, the CA variables and the NVIDIA ones, nothing else
    assert args["environment"] == {
        "FOO": "bar",
        "SSL_CERT_FILE": "/etc/gpudev/ca.pem",
        "NVIDIA_VISIBLE_DEVICES": "void",
        "CUDA_DEVICE_ORDER": "PCI_BUS_ID",
    }


def test_every_label_is_set_even_empty() -> None:
    # An image's labels are inherited by its containers: ours are always overwritten
    args = create_args(environment(forward_ports=(8888, 6006)), target(), Confinement())
    assert args["labels"][L_MANAGED] == "1"
    assert args["labels"][L_NAME] == "train-ann-1a2b"
    assert args["labels"][L_KERNEL] == ""
    assert args["labels"][L_PORTS] == "8888,6006"
    assert args["name"] == "gpudev-train-ann-1a2b"


def test_forwarded_ports_are_not_published_unless_the_administrator_says_so() -> None:
    env = environment(forward_ports=(8888, 6006))
    assert create_args(env, target(), Confinement())["ports"] == {}
    published = create_args(env, target(publish_ports=True), Confinement())
    assert published["ports"] == {
        "8888/tcp": ("127.0.0.1", None),
        "6006/tcp": ("127.0.0.1", None),
    }


def test_host_network_publishes_nothing_and_a_named_network_is_joined() -> None:
    host_mode = environment(run_options=RunOptions(network_mode="host"))
    args = create_args(host_mode, target(network="gpudev"), Confinement())
    assert args["network_mode"] == "host"
    assert "ports" not in args
    assert "network" not in args
    assert create_args(environment(), target(network="gpudev"), Confinement())["network"] == (
        "gpudev"
    )


def test_the_environment_can_tighten_limits_but_never_loosen_them() -> None:
    # Given an administrator's 8 GiB / 4 CPUs and an environment asking 16 GiB / 1 CPU
    admin = Confinement(
        security_opt=("no-new-privileges",),
        cap_drop=("NET_RAW",),
        pids_limit=4096,
        memory_bytes=8 << 30,
        nano_cpus=4_000_000_000,
    )
    env = environment(run_options=RunOptions(memory_bytes=16 << 30, nano_cpus=1_000_000_000))
    args = create_args(env, target(), admin)
    # Then the tighter of each applies
    assert args["mem_limit"] == 8 << 30
    assert args["nano_cpus"] == 1_000_000_000
    assert args["security_opt"] == ["no-new-privileges"]
    assert args["cap_drop"] == ["NET_RAW"]
    assert args["pids_limit"] == 4096


def test_no_limit_is_set_when_none_is_asked() -> None:
    args = create_args(environment(), target(), Confinement())
    for key in ("mem_limit", "nano_cpus", "pids_limit", "security_opt", "cap_drop", "user"):
        assert key not in args


def test_run_options_pass_through() -> None:
    options = RunOptions(
        shm_size_bytes=1 << 30, ipc_mode="private", ulimits=(("memlock", -1, -1),), pid_mode=None
    )
    args = create_args(environment(run_options=options), target(user="1000:1000"), Confinement())
    assert args["shm_size"] == 1 << 30
    assert args["ipc_mode"] == "private"
    assert [(u.name, u.soft, u.hard) for u in args["ulimits"]] == [("memlock", -1, -1)]
    assert args["user"] == "1000:1000"


@pytest.mark.parametrize(
    ("limits", "expected"), [((None, None), None), ((5, None), 5), ((None, 3), 3), ((5, 3), 3)]
)
def test_tightest(limits: tuple[int | None, ...], expected: int | None) -> None:
    assert tightest(*limits) == expected


def test_a_helper_container_is_confined_as_a_dev_container_and_more() -> None:
    # Given the administrator's confinement: a seccomp profile, no-new-privileges turned off
    # (for sudo in dev containers), a few capabilities dropped, generous limits
    admin = Confinement(
        security_opt=("no-new-privileges:false", "seccomp={}"),
        cap_drop=("NET_RAW",),
        pids_limit=4096,
        memory_bytes=64 << 30,
        nano_cpus=2_000_000_000,
    )
    # When the create arguments of a helper container (the probe, a file read) are made
    args = helper_args(admin)
    # Then it has the administrator's seccomp profile, and no new privileges whatever they say
    assert args["security_opt"] == ["seccomp={}", "no-new-privileges"]
    # And no capability, a read-only root, no network, no log kept by the engine
    assert args["cap_drop"] == ["ALL"]
    assert args["read_only"] is True
    assert args["network_disabled"] is True
    assert args["network_mode"] == "none"
    assert args["log_config"]["Type"] == "none"
    # And no health check of the image's (a program of the container's, run by the engine)
    assert args["healthcheck"] == {"test": ["NONE"]}
    # And the helper's own limits where they are tighter, the administrator's CPU limit
    assert args["pids_limit"] == HELPER_PIDS
    assert args["mem_limit"] == HELPER_MEMORY
    assert args["nano_cpus"] == 2_000_000_000
    # And it is a probe, never taken for a dev container (whatever labels its image carries)
    assert args["labels"] == {L_PROBE: "1", L_MANAGED: ""}
    assert "mounts" not in args
    assert "user" not in args


def test_a_helper_container_takes_the_administrators_tighter_limits() -> None:
    # Given an administrator's limits below a helper's own
    args = helper_args(Confinement(pids_limit=64, memory_bytes=512 << 20))
    # Then those apply, with no-new-privileges even when none is configured
    assert (args["pids_limit"], args["mem_limit"]) == (64, 512 << 20)
    assert args["security_opt"] == ["no-new-privileges"]
    assert "nano_cpus" not in args
    # And with no administrator limit at all, the helper's own apply
    args = helper_args(Confinement())
    assert (args["pids_limit"], args["mem_limit"]) == (HELPER_PIDS, HELPER_MEMORY)


@pytest.mark.parametrize("driver", ["json-file", "local"])
def test_the_log_the_engine_keeps_is_capped_on_a_driver_that_keeps_it_on_disk(driver: str) -> None:
    # Given an engine whose default logging driver keeps a container's output in files, and
    # the administrator's cap (c.DevContainers.log_max_size, log_max_files)
    confinement = Confinement(log_max_size="10m", log_max_files=2, log_driver=driver)
    # When a dev container's arguments are built
    args = create_args(environment(), target(), confinement)
    # Then its log is that driver's, rotated at the cap
    assert args["log_config"] == {
        "Type": driver,
        "Config": {"max-size": "10m", "max-file": "2"},
    }


@pytest.mark.parametrize(
    ("size", "driver"),
    [
        ("10m", "journald"),  # the administrator's driver is left alone
        ("10m", "syslog"),
        ("10m", ""),  # the engine's driver not known
        ("", "json-file"),  # no cap asked: the engine's default
    ],
)
def test_the_log_is_left_to_the_engine_without_a_cap_or_on_another_driver(
    size: str, driver: str
) -> None:
    confinement = Confinement(log_max_size=size, log_max_files=2, log_driver=driver)
    args = create_args(environment(), target(), confinement)
    assert "log_config" not in args
