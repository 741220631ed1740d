"""Why a host's GPU use is missing (``containers.usage``), as each caller may read it: in the
shared service a user who is not an administrator is told "This host cannot be reached now"
(the hosts listing's words) where the reason is a failure to reach or read a host, whose words
name the service's SSH account, the host's address and port and its key files; administrators
and single-user mode read the full reason. Reasons that name nothing of the service's setup
(no GPU, inventory off, a kind of host gpudev cannot run commands on) are kept.

The host is a real ``ssh://`` ``Host`` whose connection fails as a refused key does
(``describe_ssh_error``'s sentence), read by the ``GPUInventory`` the host pool gives such a
host; the container lookup is a fake (no engine)."""

from __future__ import annotations

import json
import logging
import subprocess
from collections.abc import Sequence
from types import SimpleNamespace
from typing import Any, cast

import paramiko
import pytest

from jupyter_gpudev.access import Access, Caller
from jupyter_gpudev.containers.lookup import ContainerLookup
from jupyter_gpudev.containers.model import DevContainerInfo
from jupyter_gpudev.containers.reports import hosts_seen
from jupyter_gpudev.containers.usage import NO_PROCESSES, GPUUse
from jupyter_gpudev.engine import Host, HostInfo
from jupyter_gpudev.engine.gpus import GPU, GPUInventory, Inventory
from jupyter_gpudev.engine.spec import HostSpec
from jupyter_gpudev.errors import EngineUnreachable

LOG = logging.getLogger("test_usage_reasons")
UUID = "GPU-5d0e8c1a-3b7f-4e2a-9c61-0f4b2d7e8a13"
GPU_LINE = (
    f"0, {UUID}, NVIDIA A100-SXM4-80GB, 81920, 1024, 3, 550.90.07, 00000000:07:00.0, Disabled\n"
)
#: What the service's setup is made of, as a refused SSH key's message names it.
SETUP = ("as gpudev on", "10.1.2.3", "2222", "/root/.ssh/id_ed25519")

BOB = Caller("bob")
ADMIN = Caller("alice", admin=True)


def hosts_listing_words() -> str:
    """What the hosts listing tells a user in place of a host's failure."""
    info = HostInfo("gpu1", "ssh://gpudev@10.1.2.3:2222", "ssh", False, False, reason="no")
    (seen,) = hosts_seen([info], [], BOB, shown_name=lambda key, _owner: key, hidden=True)
    assert seen.reason is not None
    return seen.reason


def ssh_host(
    monkeypatch: pytest.MonkeyPatch, *, gpus: bool = False, apps: bool = False, none: bool = False
) -> Host:
    """``ssh://gpudev@10.1.2.3:2222`` with its key, its GPU inventory as the host pool makes
    it, and a connection that is refused; ``gpus``/``apps``: nvidia-smi's GPU list/process
    list answer all the same (the command for them does not go through the connection);
    ``none``: nvidia-smi answers that there is no GPU."""
    spec = HostSpec(
        name="gpu1",
        url="ssh://gpudev@10.1.2.3:2222",
        identity_file="/root/.ssh/id_ed25519",
        known_hosts="/srv/gpudev/known_hosts",
    )
    host = Host(spec, timeout=1.0, gpu_inventory=None, log=LOG)
    assert host.ssh is not None

    def refused() -> paramiko.SSHClient:
        raise paramiko.AuthenticationException("Authentication failed.")

    monkeypatch.setattr(host.ssh, "_open", refused)

    def run(argv: list[str], timeout: float) -> subprocess.CompletedProcess[str]:
        line = " ".join(argv)
        if (gpus or none) and "--query-gpu=" in line:
            return subprocess.CompletedProcess(argv, 0, "" if none else GPU_LINE, "")
        if (gpus or none) and "-q" in argv:
            return subprocess.CompletedProcess(argv, 0, "CUDA Version : 12.4\n", "")
        if apps and "--query-compute-apps=" in line:
            return subprocess.CompletedProcess(argv, 0, f"{UUID}, 4242, 2048\n", "")
        return host.smi_runner(argv, timeout)  # through the refused connection

    host.gpu_inventory = GPUInventory(
        backend="nvidia-smi", runner=run, where="host 'gpu1'", cache_seconds=0.0, log=LOG
    )
    return host


class Pool:
    def __init__(self, *hosts: Any) -> None:
        self.hosts = {host.name: host for host in hosts}

    def names(self) -> list[str]:
        return list(self.hosts)

    def get(self, name: str) -> Any:
        return self.hosts[name]


class Lookup:
    """What ``GPUUse`` reads of ``ContainerLookup``: access, hosts, the dev containers of a
    host (``failing``: listing them goes through the host's refused connection), a kernel."""

    def __init__(self, access: Access, *hosts: Any, failing: bool = False) -> None:
        self.access = access
        self.host_pool = Pool(*hosts)
        self.failing = failing
        self.log = LOG

    def list(
        self,
        *,
        all_states: bool,  # noqa: ARG002
        host: str,
        caller: Caller,  # noqa: ARG002
    ) -> Sequence[DevContainerInfo]:
        if self.failing:
            self.host_pool.get(host).ssh.transport()
        return []

    def kernel(self, kernel_id: str) -> Any:  # noqa: ARG002
        return SimpleNamespace(host="gpu1", container="box", gpu_uuids=(UUID,))


def use_for(*hosts: Any, shared: bool = True, failing: bool = False) -> GPUUse:
    access = Access(user="bob", admin_users={"alice"}, single_user=not shared, log=LOG)
    return GPUUse(cast(ContainerLookup, Lookup(access, *hosts, failing=failing)))


def reasons(use: GPUUse, caller: Caller | None) -> str:
    return json.dumps([host.to_json() for host in use.usage(caller=caller)])


def assert_hidden(text: str) -> None:
    for word in SETUP:
        assert word not in text, text


def assert_full(text: str) -> None:
    for word in SETUP:
        assert word in text, text


# Each way a host's failure reaches the answer: its GPUs cannot be read, its processes cannot,
# its /proc cannot, its dev containers cannot be listed.
FAILURES = {
    "inventory": {},
    "processes": {"gpus": True},
    "proc": {"gpus": True, "apps": True},
    "listing": {"gpus": True, "apps": True, "failing": True},
}


@pytest.mark.parametrize("failure", FAILURES)
def test_a_user_reads_the_hosts_listing_words_not_the_failure(
    failure: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Given a shared service whose ssh:// host's connection is refused at one step
    options = dict(FAILURES[failure])
    failing = bool(options.pop("failing", False))
    host = ssh_host(monkeypatch, **options)
    use = use_for(host, failing=failing)
    # When a user who is not an administrator asks what the GPUs are doing
    seen = reasons(use, BOB)
    # Then nothing of the account, address, port or key is in the answer: the host's reason
    # is the hosts listing's
    assert_hidden(seen)
    (usage,) = use.usage(caller=BOB)
    assert usage.reason == hosts_listing_words()
    # And the view's own user (no caller given) reads the same
    assert_hidden(reasons(use, None))


@pytest.mark.parametrize("failure", FAILURES)
def test_administrators_and_single_user_mode_read_the_full_reason(
    failure: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    options = dict(FAILURES[failure])
    failing = bool(options.pop("failing", False))
    host = ssh_host(monkeypatch, **options)
    # An administrator of the shared service reads the failure's words
    assert_full(reasons(use_for(host, failing=failing), ADMIN))
    # And so does the user of a single-user server
    assert_full(reasons(use_for(host, shared=False, failing=failing), BOB))


def test_one_host_asked_for_and_a_kernel_are_told_the_same(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # Given a host whose GPUs cannot be read, and one whose dev containers cannot be listed
    unread = use_for(ssh_host(monkeypatch))
    unlisted = use_for(ssh_host(monkeypatch, gpus=True, apps=True), failing=True)
    # When the user asks for that host by name: the first is answered with the hosts
    # listing's words, the second's error (the API's answer) says only that much
    (usage,) = unread.usage("gpu1", caller=BOB)
    assert usage.reason == hosts_listing_words()
    with pytest.raises(EngineUnreachable) as listing:
        unlisted.usage("gpu1", caller=BOB)
    assert listing.value.to_json() == {
        "error": "engine_unreachable",
        "message": hosts_listing_words(),
    }
    # And so for their kernel's use there
    kernel = unread.kernel_usage("k-1")
    assert kernel.reason == hosts_listing_words()
    assert_hidden(json.dumps(kernel.to_json()))
    with pytest.raises(EngineUnreachable) as raised:
        unlisted.kernel_usage("k-1")
    assert_hidden(json.dumps(raised.value.to_json()))
    # And an administrator asking the same reads the failure
    with pytest.raises(EngineUnreachable) as full:
        use_for(ssh_host(monkeypatch, gpus=True, apps=True), failing=True).usage(
            "gpu1", caller=ADMIN
        )
    assert_full(full.value.message)


class Fixed:
    """A host whose inventory is given (``runner``: read on another machine) and whose
    processes cannot be listed here."""

    def __init__(self, name: str, inventory: Inventory, *, backend: str = "nvidia-smi") -> None:
        self.name = name
        self.inventory = inventory
        self.gpu_inventory: Any = SimpleNamespace(backend=backend, runner=print)

    def gpus(self) -> Inventory:
        return self.inventory

    def proc_reader(self) -> None:
        return None


class Local(Fixed):
    """This machine without the NVML bindings: its inventory read by NVML here."""

    def __init__(self) -> None:
        def no_nvml() -> Any:
            raise ImportError("pynvml")

        self.name = "local"
        self.gpu_inventory = GPUInventory(backend="nvml", nvml_loader=no_nvml, log=LOG)

    def gpus(self) -> Inventory:
        return cast(Inventory, self.gpu_inventory.probe())


def test_reasons_that_name_nothing_of_the_setup_are_kept(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # Given hosts without GPU use for reasons that are not failures
    no_gpu = ssh_host(monkeypatch, none=True)
    tcp = Host(
        HostSpec(name="tcp1", url="tcp://10.1.2.3:2376"), timeout=1.0, gpu_inventory=None, log=LOG
    )
    off = Fixed("off", GPUInventory(backend="none", log=LOG).probe(), backend="none")
    gpu = GPU(uuid=UUID, index=0, name="NVIDIA A100-SXM4-80GB")
    unlisted = Fixed("gpus", Inventory(source="nvidia-smi", gpus=(gpu,)))
    use = use_for(no_gpu, tcp, off, unlisted, Local())
    # When a user who is not an administrator asks
    found = {usage.host: usage.reason for usage in use.usage(caller=BOB)}
    # Then each says why, as it does to an administrator
    assert found == {
        "gpu1": "nvidia-smi reports no GPU",
        "tcp1": "GPU inventory over tcp:// is not supported (use ssh://)",
        "off": "GPU inventory is disabled by configuration",
        "gpus": NO_PROCESSES,
        "local": "NVML: the nvidia-ml-py package is not installed",
    }
    assert found == {usage.host: usage.reason for usage in use.usage(caller=ADMIN)}
