"""Why a host's GPUs are missing from the hosts listing (``ContainerLookup.describe_hosts``,
``/gpudev/api/hosts``), as each caller may read it: where the inventory ran on another machine
and failed, its reason is the connection's words (``Host.smi_runner``), which name the
service's SSH account, the host's address and port and its key files; a user of the shared
service who is not an administrator is told the hosts listing's words in their place, as GPU
use tells them (``containers.usage``). Reasons that name nothing of the setup are kept.

The host is ``test_usage_reasons``'s real ``ssh://`` ``Host`` whose connection is refused,
here with an engine that answers (its ``engine_info`` is a fake), in a real host pool and a
real ``ContainerLookup`` with its own lease ledger."""

from __future__ import annotations

import json
import logging
from pathlib import Path
from typing import Any

import pytest

from jupyter_gpudev.access import Access, Caller
from jupyter_gpudev.containers.lookup import ContainerLookup
from jupyter_gpudev.containers.reports import HOST_FAILURE, hosts_seen
from jupyter_gpudev.engine import Host, HostInfo, HostPool
from jupyter_gpudev.engine.gpus import Inventory
from jupyter_gpudev.engine.info import EngineInfo
from tests.unit.test_usage_reasons import ADMIN, BOB, SETUP, ssh_host

LOG = logging.getLogger("test_hosts_reasons")
#: What a user must not read: the setup as a refused SSH key's message names it
#: (``SETUP``), and the host's address as configured.
HIDDEN = (*SETUP, "gpudev@10.1.2.3:2222")

ENGINE = EngineInfo(
    version="27.1.1",
    api_version="1.46",
    os="linux",
    arch="x86_64",
    kernel_version=None,
    operating_system=None,
    cgroup_driver=None,
    cgroup_version=None,
    runtimes=("runc",),
    default_runtime="runc",
    nvidia_runtime=False,
    nvidia_hook=None,
    cdi=False,
    cdi_spec_dirs=(),
)


def answering(monkeypatch: pytest.MonkeyPatch, **options: Any) -> Host:
    """The ``ssh://`` host whose connection is refused (GPU inventory included), its engine
    answering all the same."""
    host = ssh_host(monkeypatch, **options)
    monkeypatch.setattr(host, "engine_info", lambda max_age=0.0: ENGINE)  # noqa: ARG005
    return host


def lookup_for(
    host: Host, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, *, shared: bool = True
) -> ContainerLookup:
    pool = HostPool(log=LOG)
    monkeypatch.setattr(pool, "get", lambda name: host if name == host.name else None)
    access = Access(user="bob", admin_users={"alice"}, single_user=not shared, log=LOG)
    return ContainerLookup(
        tmp_path / "root", host_pool=pool, access=access, state_dir=str(tmp_path), log=LOG
    )


def listing(lookup: ContainerLookup, caller: Caller | None) -> str:
    """The JSON the hosts listing answers with for ``caller``."""
    return json.dumps([info.to_json() for info in lookup.describe_hosts("gpu1", caller=caller)])


def test_a_user_reads_the_hosts_listing_words_not_the_gpu_probes_failure(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Given a shared service whose ssh:// host's engine answers but whose GPU inventory, run
    # over the host's connection, is refused
    lookup = lookup_for(answering(monkeypatch), tmp_path, monkeypatch)
    (full,) = lookup.describe_hosts("gpu1", caller=ADMIN)
    assert full.reachable
    assert full.gpus.source == "none"
    assert full.gpus.reason is not None
    for word in SETUP:
        assert word in full.gpus.reason
    # When a user who is not an administrator lists the hosts
    seen = listing(lookup, BOB)
    # Then nothing of the account, address, port or key is in the answer
    for word in HIDDEN:
        assert word not in seen, seen
    # And the GPUs' reason is the hosts listing's words, the engine still reported
    (info,) = lookup.describe_hosts("gpu1", caller=BOB)
    assert info.reachable
    assert info.reason is None
    assert info.gpus.reason == HOST_FAILURE
    assert info.engine == ENGINE
    # And the view's own user (no caller given) reads the same
    for word in HIDDEN:
        assert word not in listing(lookup, None)


def test_administrators_and_single_user_mode_read_the_gpu_probes_failure(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    host = answering(monkeypatch)
    # An administrator of the shared service reads the failure's words
    admin = listing(lookup_for(host, tmp_path / "shared", monkeypatch), ADMIN)
    # And so does the user of a single-user server
    alone = listing(lookup_for(host, tmp_path / "alone", monkeypatch, shared=False), BOB)
    for word in SETUP:
        assert word in admin, admin
        assert word in alone, alone


def test_gpu_reasons_that_name_nothing_of_the_setup_are_kept() -> None:
    # Given hosts whose GPUs are missing for reasons that are not a failure over a connection:
    # a driver that answered, an inventory off or not read over tcp://, this machine's probe,
    # a Kubernetes cluster
    def host(name: str, transport: Any, source: Any, reason: str) -> HostInfo:
        url = {"local": "unix:///var/run/docker.sock", "k8s": "k8s://"}.get(
            transport, f"{transport}://gpudev@10.1.2.3:2222"
        )
        gpus = Inventory(source=source, reason=reason)
        return HostInfo(name, url, transport, transport == "local", True, gpus=gpus)

    infos = [
        host("none", "ssh", "nvidia-smi", "nvidia-smi reports no GPU"),
        host("unread", "ssh", "nvidia-smi", "nvidia-smi output could not be read"),
        host("tcp", "tcp", "none", "GPU inventory over tcp:// is not supported (use ssh://)"),
        host("off", "local", "none", "GPU inventory is disabled by configuration"),
        host("here", "local", "none", "NVML: the nvidia-ml-py package is not installed"),
        host("k8s", "k8s", "none", "a Kubernetes cluster: its GPUs are listed by node"),
    ]
    # When a user who is not an administrator lists them
    seen = hosts_seen(infos, [], BOB, shown_name=lambda key, _owner: key, hidden=True)
    # Then each says why, as it does to an administrator
    assert [info.gpus.reason for info in seen] == [info.gpus.reason for info in infos]
    # While a failure of the probe run over an ssh:// host's connection is not told
    (failed,) = hosts_seen(
        [host("ssh", "ssh", "none", "nvidia-smi: could not reach the host")],
        [],
        BOB,
        shown_name=lambda key, _owner: key,
        hidden=True,
    )
    assert failed.gpus.reason == HOST_FAILURE
