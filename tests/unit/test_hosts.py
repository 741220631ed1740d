"""Hosts (``engine/hosts.py``), without an engine: their GPU inventory, commands and addresses,
and the address containers reach the host at. Host specs: tests/unit/test_host_spec.py; the
host pool: tests/unit/test_host_pool.py."""

from __future__ import annotations

import logging
import os
from typing import Any

import pytest
from traitlets.config import Config

from jupyter_gpudev.engine import (
    Host,
    HostPool,
    HostSpec,
    address_for_containers,
)
from jupyter_gpudev.errors import (
    BadRequest,
)

LOG = logging.getLogger("tests.hosts")


def pool(**hostpool: Any) -> HostPool:
    config = Config()
    for key, value in hostpool.items():
        setattr(config.HostPool, key, value)
    config.GPUInventory.backend = "none"
    return HostPool(config=config)


def test_tcp_hosts_say_their_gpu_inventory_needs_ssh() -> None:
    hosts = pool(include_local=False, hosts={"box": "tcp://127.0.0.1:1"}, timeout=0.5)
    inventory = hosts.get("box").gpus()
    assert inventory.gpus == ()
    assert inventory.reason == "GPU inventory over tcp:// is not supported (use ssh://)"


@pytest.mark.parametrize(
    ("ipam", "expected"),
    [
        # Given an engine created fresh (Debian's 20.10): the subnet only, no Gateway key
        ({"Config": [{"Subnet": "172.17.0.0/16"}]}, "172.17.0.1"),
        # Given an engine that reports the gateway (with or without a prefix length)
        ({"Config": [{"Subnet": "172.18.0.0/16", "Gateway": "172.18.0.254"}]}, "172.18.0.254"),
        ({"Config": [{"Subnet": "10.9.0.0/24", "Gateway": "10.9.0.1/24"}]}, "10.9.0.1"),
        # Given an IPv6 entry first: the IPv4 one is used
        (
            {"Config": [{"Subnet": "fd00::/64", "Gateway": "fd00::1"}, {"Subnet": "10.0.0.0/8"}]},
            "10.0.0.1",
        ),
        # Given nothing usable: no address (the caller falls back to host-gateway)
        ({"Config": [{"Subnet": "not a subnet", "Gateway": ""}]}, None),
        ({"Config": [{"Subnet": "10.0.0.7/32"}]}, None),
        ({"Config": None}, None),
        (None, None),
    ],
)
def test_address_for_containers(ipam: dict[str, Any] | None, expected: str | None) -> None:
    # When the host's address for containers is read from the network's inspect answer
    # Then it is the gateway where reported, else the subnet's first address
    assert address_for_containers({"Name": "bridge", "IPAM": ipam}) == expected


# --------------------------------------------------------------------------------------------


# Host: commands and addresses


# --------------------------------------------------------------------------------------------


def make_host(spec: HostSpec) -> Host:
    return Host(spec, timeout=1.0, gpu_inventory=None, log=LOG)


def test_the_local_host_reaches_containers_at_their_own_address() -> None:
    host = make_host(HostSpec.parse("local", "unix:///var/run/docker.sock", is_local=True))
    try:
        assert host.reach("172.17.0.5", 8888) == ("172.17.0.5", 8888)
        assert host.tunnels is None
    finally:
        host.close()


def test_commands_cannot_run_on_a_tcp_host() -> None:
    host = make_host(HostSpec.parse("tls", "tcp://box:2376"))
    try:
        with pytest.raises(BadRequest, match=r"'tls' is a tcp:// engine.*use ssh://"):
            host.run(["id", "-u"])
    finally:
        host.close()


def test_commands_run_on_the_local_host_here() -> None:
    host = make_host(HostSpec.parse("local", "unix:///var/run/docker.sock", is_local=True))
    try:
        result = host.run(["id", "-u"])
        assert (result.returncode, result.stdout.strip()) == (0, str(os.getuid()))
    finally:
        host.close()


def test_a_second_unix_host_is_not_called_tcp() -> None:
    host = make_host(HostSpec.parse("rootless", "unix:///run/user/1000/docker.sock"))
    try:
        with pytest.raises(BadRequest) as caught:
            host.run(["id", "-u"])
        assert "tcp://" not in caught.value.message
        reason = host.gpus().reason
        assert reason is not None
        assert "local://" not in reason
    finally:
        host.close()


class _CountingEngine:
    """The two calls ``engine_info`` makes, counted."""

    def __init__(self) -> None:
        self.calls = 0

    def version(self) -> dict[str, str]:
        self.calls += 1
        return {"Version": "20.10.24", "ApiVersion": "1.41"}

    def info(self) -> dict[str, Any]:
        return {"DockerRootDir": "/var/lib/docker", "SecurityOptions": ["name=seccomp"]}


def test_engine_info_is_asked_again_only_when_older_than_the_caller_accepts(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # Given a host whose engine answers and counts
    host = make_host(HostSpec.parse("local", "unix:///var/run/docker.sock", is_local=True))
    engine = _CountingEngine()
    monkeypatch.setattr(host, "_connected", lambda **_: engine)
    clock = [100.0]
    monkeypatch.setattr("jupyter_gpudev.engine.hosts.time.monotonic", lambda: clock[0])
    try:
        # When a capture asks for it many times within its max_age
        first = host.engine_info(max_age=10.0)
        for _ in range(40):
            assert host.engine_info(max_age=10.0) == first
        # Then the engine was asked once
        assert engine.calls == 1
        assert first.data_root == "/var/lib/docker"
        # And a caller that accepts no age (the default) asks the engine
        host.engine_info()
        assert engine.calls == 2
        # And once older than max_age, it is asked again
        clock[0] += 10.5
        host.engine_info(max_age=10.0)
        assert engine.calls == 3
    finally:
        host.close()
