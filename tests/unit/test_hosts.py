"""Host specs, the host pool and hosts, without an engine."""

from __future__ import annotations

import errno
import logging
import os
from typing import Any

import docker.errors
import pytest
import requests.exceptions
from traitlets import TraitError
from traitlets.config import Config

from jupyter_gpudev.engine import (
    DEFAULT_LOCAL_URL,
    Host,
    HostInfo,
    HostPool,
    HostSpec,
    address_for_containers,
    unreachable_summary,
)
from jupyter_gpudev.errors import (
    BadRequest,
    ConfigError,
    EngineUnreachable,
    NotFound,
    describe_connection_error,
)

LOG = logging.getLogger("tests.hosts")


def pool(**hostpool: Any) -> HostPool:
    config = Config()
    for key, value in hostpool.items():
        setattr(config.HostPool, key, value)
    config.GPUInventory.backend = "none"
    return HostPool(config=config)


@pytest.mark.parametrize(
    ("url", "transport"),
    [
        ("unix:///var/run/docker.sock", "local"),
        ("ssh://gpu@box.example.org:2222", "ssh"),
        ("tcp://10.1.2.3:2376", "tcp"),
        ("k8s://kind-dev/team-ml", "k8s"),
        ("k8s:///team-ml", "k8s"),
    ],
)
def test_transports(url: str, transport: str) -> None:
    assert HostSpec.parse("h", url).transport == transport


@pytest.mark.parametrize(
    ("name", "value", "message"),
    [
        ("Bad Name", "unix:///x", "host name is 1-63"),
        ("h", "http://example.org", "unsupported URL"),
        ("h", "ftp://x", "unsupported URL"),
        ("h", "unix://", "needs a socket path"),
        ("h", "ssh://", "has no host name"),
        ("h", "ssh://me:secret@box", "do not put a password in the URL"),
        ("h", {"url": "tcp://box:2376", "tls_client_cert": "/c.pem"}, "go together"),
        ("h", {"url": "tcp://box:2376", "colour": "red"}, "unknown keys"),
        ("h", {"tls_verify": True}, "'url' is required"),
        ("h", 42, "expected a URL string"),
        ("h", "k8s://kind-dev", "names no namespace"),
        ("h", "k8s://kind-dev/Team_ML", "names no namespace"),
        ("h", "k8s://kind-dev/a/b", "names no namespace"),
        ("h", "k8s://kind-dev/ns?watch=1", "nothing more"),
        ("h", "k8s://me:secret@kind-dev/ns", "nothing more"),
        ("h", "k8s://bad%0Acontext/ns", "not a kubeconfig context"),
        ("h", {"url": "k8s:///ns", "identity_file": "/k"}, "do not apply"),
        ("h", {"url": "k8s:///ns", "workspace": "/w"}, "do not apply"),
    ],
)
def test_bad_host_entries_name_the_trait_and_the_problem(
    name: str, value: Any, message: str
) -> None:
    with pytest.raises(ConfigError, match=message) as caught:
        HostSpec.parse(name, value)
    assert "c.HostPool.hosts" in caught.value.message


def test_password_is_never_echoed() -> None:
    with pytest.raises(ConfigError) as caught:
        HostSpec.parse("h", "ssh://me:hunter2@box")
    assert "hunter2" not in caught.value.message


def test_local_host_comes_first_and_follows_docker_host(monkeypatch: pytest.MonkeyPatch) -> None:
    # Given DOCKER_HOST is set and one more host is configured
    monkeypatch.setenv("DOCKER_HOST", "unix:///run/user/1000/docker.sock")
    hosts = pool(hosts={"gpu-box": "ssh://me@gpu-box"})
    # Then the local engine is first, at DOCKER_HOST, and the other follows
    specs = hosts.specs()
    assert [(s.name, s.url, s.is_local) for s in specs] == [
        ("local", "unix:///run/user/1000/docker.sock", True),
        ("gpu-box", "ssh://me@gpu-box", False),
    ]


def test_local_url_trait_wins_over_docker_host(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("DOCKER_HOST", "unix:///elsewhere.sock")
    assert pool(local_url="unix:///mine.sock").specs()[0].url == "unix:///mine.sock"


def test_default_local_url(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("DOCKER_HOST", raising=False)
    assert pool().specs()[0].url == DEFAULT_LOCAL_URL


def test_duplicate_names_are_refused() -> None:
    with pytest.raises(ConfigError, match="used twice"):
        pool(hosts={"local": "tcp://box:2376"}).specs()


def test_local_can_be_left_out() -> None:
    assert [s.name for s in pool(include_local=False, hosts={"a": "tcp://a:1"}).specs()] == ["a"]


def test_unknown_host_is_not_found() -> None:
    with pytest.raises(NotFound, match="known hosts: local"):
        pool().get("nope")


def test_timeout_must_be_positive() -> None:
    with pytest.raises(TraitError, match="positive"):
        HostPool(timeout=0)


def test_unreachable_socket_is_described_with_address_and_advice(tmp_path: Any) -> None:
    # Given a pool whose local engine socket does not exist
    url = f"unix://{tmp_path}/missing.sock"
    hosts = pool(local_url=url)
    # When it is described
    (info,) = hosts.describe_all()
    # Then it is unreachable, and the reason names the address and what to do
    assert not info.reachable
    assert info.engine is None
    assert info.reason is not None
    assert url in info.reason
    assert "the socket does not exist" in info.reason
    assert "DOCKER_HOST" in info.reason
    # And the summary error for "nothing reachable" is a 503
    error = unreachable_summary([info])
    assert isinstance(error, EngineUnreachable)
    assert error.status == 503
    assert url in error.message


@pytest.mark.parametrize(
    ("exc", "text"),
    [
        (ConnectionRefusedError(errno.ECONNREFUSED, "refused"), "the connection was refused"),
        (PermissionError(errno.EACCES, "denied"), "permission denied on the socket"),
        (requests.exceptions.ReadTimeout("slow"), "did not answer in time"),
        (
            docker.errors.DockerException(
                "Error while fetching server API version: "
                "('Connection aborted.', FileNotFoundError(2, 'No such file or directory'))"
            ),
            "the engine did not answer",
        ),
    ],
)
def test_connection_errors_become_sentences(exc: BaseException, text: str) -> None:
    message = describe_connection_error("tcp://box:2376", exc)
    assert message.startswith("No Docker engine answered at tcp://box:2376: ")
    assert text in message


def test_chained_causes_are_followed() -> None:
    inner = FileNotFoundError(errno.ENOENT, "No such file")
    outer = docker.errors.DockerException("wrapped")
    outer.__cause__ = inner
    assert "the socket does not exist" in describe_connection_error("unix:///x", outer)


def test_summary_is_none_when_any_host_answers() -> None:
    up = HostInfo(name="a", url="u", transport="local", is_local=True, reachable=True)
    down = HostInfo(name="b", url="v", transport="tcp", is_local=False, reachable=False)
    assert unreachable_summary([up, down]) is None
    assert unreachable_summary([]) is None
    assert unreachable_summary([down]) is not None


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


def test_a_kubernetes_host_names_its_context_and_namespace() -> None:
    # An EKS context holds ':' and '/': percent-encoded in the URL
    spec = HostSpec.parse("eks", "k8s://arn%3Aaws%3Aeks%3Aeu-west-1%3A1%3Acluster%2Fgpu/ml")
    assert spec.is_kubernetes
    assert spec.context == "arn:aws:eks:eu-west-1:1:cluster/gpu"
    assert spec.namespace == "ml"
    # An empty context: the current one, or the cluster gpudev runs in
    assert HostSpec.parse("here", "k8s:///ml").context == ""
    assert not HostSpec.parse("d", "tcp://10.1.2.3:2376").is_kubernetes
    assert HostSpec.parse("d", "tcp://10.1.2.3:2376").namespace == ""


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
