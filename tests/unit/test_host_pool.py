"""The host pool (``engine/pool.py``): the configured hosts (the local engine first, at
``DOCKER_HOST`` unless ``local_url`` says otherwise), unreachable hosts summed up, and hosts added
at run time (``jupyter gpudev hosts add``, the REST API): what a user may add, the hosts file
they are kept in, and pools in other processes that read it again. No engine: the hosts are
addresses where nothing listens."""

from __future__ import annotations

import json
import logging
import os
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from traitlets import TraitError
from traitlets.config import Config

from jupyter_gpudev.engine import DEFAULT_LOCAL_URL, HostInfo, HostPool, unreachable_summary
from jupyter_gpudev.errors import (
    BadRequest,
    ConfigError,
    Conflict,
    EngineUnreachable,
    GPUDevError,
    NotFound,
)

LOG = logging.getLogger("tests.host_pool")


@pytest.fixture
def make_pool(tmp_path: Path) -> Iterator[Callable[..., HostPool]]:
    """Pools without the local engine, on tmp/hosts.json; closed after the test."""
    made: list[HostPool] = []

    def make(**traits: Any) -> HostPool:
        config = Config()
        config.HostPool.include_local = False
        config.HostPool.hosts_file = str(tmp_path / "hosts.json")
        for key, value in traits.items():
            setattr(config.HostPool, key, value)
        config.GPUInventory.backend = "none"
        made.append(HostPool(config=config, log=LOG))
        return made[-1]

    yield make
    for pool in made:
        pool.close()


def engine_url(tmp_path: Path, name: str = "engine") -> str:
    """An ssh:// engine where nothing listens (port 1 of a loopback address of its own: an
    added host may not share a configured one's address): describing it is instant and
    offline. (A unix:// engine cannot be added at run time.)"""
    return f"ssh://{name}@127.{len(name)}.{ord(name[0])}.{ord(name[-1])}:1"


#: The key a host added at run time logs in with (its own; never checked here).
KEY = {"identity_file": "/nonexistent/id_for_tests"}


def hosts_file(tmp_path: Path) -> dict[str, Any]:
    data: dict[str, Any] = json.loads((tmp_path / "hosts.json").read_text())
    return data


# --------------------------------------------------------------------------------------------
# adding and removing
# --------------------------------------------------------------------------------------------


def test_an_added_host_is_persisted_and_listed(
    make_pool: Callable[..., HostPool], tmp_path: Path
) -> None:
    # Given a pool with one configured host, and the administrator's settings for added ones
    pool = make_pool(
        hosts={"conf": engine_url(tmp_path, "conf")},
        runtime_host_settings={"workspace": "/home/gpu/work", "mount_roots": ["/srv/data"]},
    )
    # When an ssh:// host is added without checking it (its key file does not exist)
    info = pool.add(
        "gpu-a",
        "ssh://gpu@127.0.0.1:1",
        {
            "identity_file": str(tmp_path / "id_gone"),
            "known_hosts": str(tmp_path / "known_hosts"),
        },
        check=False,
    )
    # Then it is in the hosts file with what the user chose only
    assert hosts_file(tmp_path) == {
        "hosts": {
            "gpu-a": {
                "url": "ssh://gpu@127.0.0.1:1",
                "identity_file": str(tmp_path / "id_gone"),
                "known_hosts": str(tmp_path / "known_hosts"),
            }
        }
    }
    assert pool.get("gpu-a").spec.mount_roots == ("/srv/data",)
    # And listed after the configured one, as "added", with why it cannot be reached
    assert pool.names() == ["conf", "gpu-a"]
    assert (info.name, info.origin, info.transport, info.reachable) == (
        "gpu-a",
        "added",
        "ssh",
        False,
    )
    assert info.workspace == "/home/gpu/work"
    assert info.reason is not None
    assert "id_gone" in info.reason
    assert "does not exist" in info.reason
    assert pool.get("gpu-a").origin == "added"
    assert pool.get("conf").origin == "config"


def test_adding_a_configured_or_added_name_is_a_conflict(
    make_pool: Callable[..., HostPool], tmp_path: Path
) -> None:
    pool = make_pool(hosts={"conf": engine_url(tmp_path, "conf")})
    pool.add("mine", engine_url(tmp_path, "mine"), KEY, check=False)
    before = hosts_file(tmp_path)
    for name in ("conf", "mine"):
        with pytest.raises(Conflict, match=f"A host named '{name}' exists already"):
            pool.add(name, engine_url(tmp_path, "other"), KEY, check=False)
    assert hosts_file(tmp_path) == before


@pytest.mark.parametrize(
    ("url", "options", "message"),
    [
        ("http://box", {}, "unsupported URL"),
        ("ssh://me:pw@box", {}, "do not put a password in the URL"),
        ("ssh://me@box", {"tls_verify": False}, "do not apply to a ssh:// host"),
        ("ssh://me@box", {"workspace": "/srv"}, "the administrator chooses these"),
        ("ssh://me@box", {"nvidia_smi": "/tmp/x"}, "the administrator chooses these"),
        ("ssh://me@box", {}, "a key of its own (identity_file)"),
        ("ssh://me@box", {"colour": "red"}, "unknown keys"),
    ],
)
def test_a_bad_added_host_is_a_bad_request_in_the_words_of_hosts_add(
    make_pool: Callable[..., HostPool],
    tmp_path: Path,
    url: str,
    options: dict[str, Any],
    message: str,
) -> None:
    pool = make_pool()
    with pytest.raises(BadRequest) as caught:
        pool.add("far", url, options, check=False)
    assert message in caught.value.message
    assert caught.value.message.startswith("hosts add['far']: ")
    assert "c.HostPool.hosts" not in caught.value.message
    assert not (tmp_path / "hosts.json").exists()


@pytest.mark.parametrize(
    ("url", "options", "text"),
    [
        ("unix:///var/run/docker.sock", {}, "unix:// engine cannot be added"),
        ("tcp://box:2376", {}, "needs mutual TLS"),
        (
            "tcp://box:2376",
            {
                "tls_ca_cert": "/ca",
                "tls_client_cert": "/c",
                "tls_client_key": "/k",
                "workspace": "/srv",
            },
            "the administrator chooses these",
        ),
        ("ssh://me@box", {"workspace": "/", **KEY}, "the administrator chooses these"),
        ("ssh://me@box", {"mount_roots": ["/"], **KEY}, "the administrator chooses these"),
        ("ssh://me@box", {"nvidia_smi": "/bin/sh", **KEY}, "the administrator chooses these"),
        ("ssh://me@box", {}, "never with the server's SSH agent or keys"),
    ],
)
def test_hosts_a_user_may_not_add_at_run_time(
    make_pool: Callable[..., HostPool], url: str, options: dict[str, Any], text: str
) -> None:
    pool = make_pool()
    with pytest.raises(BadRequest, match=text):
        pool.add("x", url, options, check=False)
    assert pool.names() == []


def test_a_configured_host_cannot_be_added_again_under_another_name(
    make_pool: Callable[..., HostPool], tmp_path: Path
) -> None:
    key = tmp_path / "admin_key"
    pool = make_pool(
        hosts={"conf": {"url": "ssh://admin@gpu-box.example.org", "identity_file": str(key)}}
    )
    # Its address, under any user or port, and in any case
    for url in ("ssh://me@gpu-box.example.org", "ssh://me@GPU-BOX.example.org:2222"):
        with pytest.raises(BadRequest, match="address of the configured host 'conf'"):
            pool.add("mine", url, KEY, check=False)
    # Its key, for another address
    with pytest.raises(BadRequest, match="the one of the configured host 'conf'"):
        pool.add("mine", "ssh://me@other.example.org", {"identity_file": str(key)}, check=False)
    assert pool.names() == ["conf"]


def test_why_a_host_could_not_be_added_is_told_to_administrators_only(
    make_pool: Callable[..., HostPool], tmp_path: Path
) -> None:
    # Nothing listens there (a refused connection): a non-administrator cannot tell that from
    # a name that does not resolve or a key that was refused
    pool = make_pool()
    key = tmp_path / "id"
    key.write_text("not a key")
    told = []
    for url in (engine_url(tmp_path, "closed"), "ssh://me@no-such-host.invalid"):
        with pytest.raises(GPUDevError) as caught:
            pool.add("far", url, {"identity_file": str(key)}, check=True)
        told.append(caught.value.message.replace(url, "URL"))
        assert caught.value.status == 503
    assert told[0] == told[1]
    assert "server log" in told[0]
    # An administrator is told why
    with pytest.raises(GPUDevError) as detailed:
        pool.add("far", engine_url(tmp_path, "closed"), {"identity_file": str(key)}, detailed=True)
    assert detailed.value.message.replace(engine_url(tmp_path, "closed"), "URL") != told[0]
    assert pool.names() == []


def test_runtime_hosts_can_be_switched_off(
    make_pool: Callable[..., HostPool], tmp_path: Path
) -> None:
    # Given a hosts file that holds one host
    (tmp_path / "hosts.json").write_text(
        json.dumps({"hosts": {"old": {"url": engine_url(tmp_path), **KEY}}})
    )
    assert make_pool().names() == ["old"]
    # When runtime hosts are off
    pool = make_pool(allow_runtime_hosts=False)
    # Then the file is not read and adding is refused, saying where to configure instead
    assert pool.names() == []
    with pytest.raises(BadRequest, match=r"allow_runtime_hosts.*c\.HostPool\.hosts"):
        pool.add("new", engine_url(tmp_path, "new"), KEY, check=False)
    assert set(hosts_file(tmp_path)["hosts"]) == {"old"}


def test_removing_an_added_host_drops_it_from_the_file(
    make_pool: Callable[..., HostPool], tmp_path: Path
) -> None:
    pool = make_pool()
    pool.add("one", engine_url(tmp_path, "one"), KEY, check=False)
    pool.add("two", engine_url(tmp_path, "two"), KEY, check=False)
    pool.remove("one")
    assert set(hosts_file(tmp_path)["hosts"]) == {"two"}
    assert pool.names() == ["two"]
    with pytest.raises(NotFound):
        pool.get("one")


def test_configured_hosts_cannot_be_removed(
    make_pool: Callable[..., HostPool], tmp_path: Path
) -> None:
    pool = make_pool(hosts={"conf": engine_url(tmp_path, "conf")})
    with pytest.raises(BadRequest, match=r"'conf' comes from the configuration \(config\)"):
        pool.remove("conf")
    assert pool.names() == ["conf"]
    with pytest.raises(NotFound):
        pool.remove("nope")


def test_adding_a_host_with_a_bad_port_leaves_the_pool_usable(
    make_pool: Callable[..., HostPool], tmp_path: Path
) -> None:
    pool = make_pool(hosts={"conf": engine_url(tmp_path, "conf")})
    with pytest.raises(BadRequest, match="port"):
        pool.add("far", "ssh://me@box:abc", check=False)
    assert pool.names() == ["conf"]


# --------------------------------------------------------------------------------------------
# the hosts file, shared with other processes
# --------------------------------------------------------------------------------------------


def test_a_second_pool_sees_changes_without_a_restart(
    make_pool: Callable[..., HostPool], tmp_path: Path
) -> None:
    # Given two pools on one hosts file (the server and the CLI), the second already loaded
    server, cli = make_pool(), make_pool()
    assert server.names() == []
    # When the CLI adds a host
    cli.add("gpu-a", engine_url(tmp_path, "a"), KEY, check=False)
    # Then the server lists it, as added, without a restart
    assert server.names() == ["gpu-a"]
    assert server.get("gpu-a").origin == "added"
    # And when the CLI removes it, the server drops it (and closes it)
    cli.remove("gpu-a")
    assert server.names() == []


def test_an_unchanged_host_keeps_its_object_across_reloads(
    make_pool: Callable[..., HostPool], tmp_path: Path
) -> None:
    # Given a server that holds an added host (its SSH connection, its tunnels)
    server, cli = make_pool(), make_pool()
    cli.add("a", engine_url(tmp_path, "a"), KEY, check=False)
    held = server.get("a")
    # When another host is added
    cli.add("b", engine_url(tmp_path, "b"), KEY, check=False)
    # Then the first one is the same object (its connection is not reopened)
    assert server.get("a") is held
    assert server.names() == ["a", "b"]


def test_a_same_size_change_in_the_same_timestamp_tick_is_seen(
    make_pool: Callable[..., HostPool], tmp_path: Path
) -> None:
    # Given a server that has read a hosts file with host "aa"
    server, cli = make_pool(), make_pool()
    cli.add("aa", engine_url(tmp_path, "x"), KEY, check=False)
    assert server.names() == ["aa"]
    stamp = os.stat(tmp_path / "hosts.json").st_mtime_ns
    size = os.stat(tmp_path / "hosts.json").st_size
    # When the CLI swaps it for "bb" (same size) within the same timestamp tick
    cli.remove("aa")
    cli.add("bb", engine_url(tmp_path, "x"), KEY, check=False)
    assert os.stat(tmp_path / "hosts.json").st_size == size
    os.utime(tmp_path / "hosts.json", ns=(stamp, stamp))  # a file system with coarse timestamps
    # Then the server sees "bb"
    assert server.names() == ["bb"]


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("{not json", "cannot be read"),
        ('["a list"]', "has no 'hosts' object"),
        ('{"hosts": ["a"]}', "has no 'hosts' object"),
    ],
)
def test_a_corrupt_hosts_file_is_a_config_error_naming_it(
    make_pool: Callable[..., HostPool], tmp_path: Path, text: str, message: str
) -> None:
    (tmp_path / "hosts.json").write_text(text)
    with pytest.raises(ConfigError) as caught:
        make_pool().names()
    assert f"The hosts file {tmp_path / 'hosts.json'} " in caught.value.message
    assert message in caught.value.message


def test_an_invalid_entry_is_skipped_and_logged_and_the_others_kept(
    make_pool: Callable[..., HostPool], tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    # Given a hosts file with a good host, a bad one and one that clashes with the config
    (tmp_path / "hosts.json").write_text(
        json.dumps(
            {
                "hosts": {
                    "good": {"url": engine_url(tmp_path, "good"), **KEY},
                    "bad": {"url": "http://box"},
                    "conf": {"url": engine_url(tmp_path, "clash")},
                }
            }
        )
    )
    # When the pool reads it
    with caplog.at_level(logging.WARNING, logger=LOG.name):
        names = make_pool(hosts={"conf": engine_url(tmp_path, "conf")}).names()
    # Then the good one is listed, the others skipped with a warning each
    assert names == ["conf", "good"]
    warnings = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert any("host 'bad' of" in w and "ignored: unsupported URL" in w for w in warnings)
    assert any("'conf' is also configured; ignored" in w for w in warnings)


def test_an_entry_written_as_a_url_string_is_not_erased_by_the_next_add(
    make_pool: Callable[..., HostPool], tmp_path: Path
) -> None:
    # Given a hosts file edited by hand, with an entry in the c.HostPool.hosts string form
    (tmp_path / "hosts.json").write_text(json.dumps({"hosts": {"box": "ssh://me@box"}}))
    # When another host is added
    make_pool().add("other", engine_url(tmp_path, "other"), KEY, check=False)
    # Then the hand-written entry is still in the file
    assert "box" in hosts_file(tmp_path)["hosts"]


def test_the_hosts_file_cannot_widen_a_host_either(
    make_pool: Callable[..., HostPool], tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    # Given a hosts file (written by an older version, or by hand) that gives a host "/"
    entry = {"url": engine_url(tmp_path, "old"), "workspace": "/", "mount_roots": ["/"], **KEY}
    keyless = {"url": engine_url(tmp_path, "agent")}
    (tmp_path / "hosts.json").write_text(json.dumps({"hosts": {"old": entry, "agent": keyless}}))
    # When the pool reads it
    with caplog.at_level(logging.WARNING, logger=LOG.name):
        pool = make_pool(runtime_host_settings={"workspace": "/srv/shared"})
        names = pool.names()
    # Then the administrator's settings apply, and a host without a key of its own is skipped
    assert names == ["old"]
    assert pool.get("old").spec.workspace == "/srv/shared"
    assert pool.get("old").spec.mount_roots == ()
    warnings = " ".join(r.getMessage() for r in caplog.records)
    assert "mount_roots, workspace of host 'old' ignored" in warnings
    assert "'agent'" in warnings


def pool(**hostpool: Any) -> HostPool:
    config = Config()
    for key, value in hostpool.items():
        setattr(config.HostPool, key, value)
    config.GPUInventory.backend = "none"
    return HostPool(config=config)


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


@pytest.mark.parametrize("name", ["timeout", "api_timeout"])
def test_timeouts_must_be_more_than_0(name: str) -> None:
    # A wait of 0 s would call every engine unreachable (or fail every operation)
    with pytest.raises(TraitError, match=f"'{name}' trait of a HostPool instance should be more"):
        HostPool(**{name: 0})
    assert getattr(HostPool(**{name: 0.5}), name) == 0.5


def test_closing_a_pool_does_not_build_the_gpu_inventory_it_never_built() -> None:
    # Given a pool whose GPU inventory's config is bad (a config file read before checks, or
    # code), and nothing built yet
    config = Config()
    config.GPUInventory.timeout = -1
    pool = HostPool(config=config)
    # When it is closed (after the part that refused the value stopped the command)
    pool.close()
    # Then it does not build the inventory to close it, which would refuse the value again
    assert not pool.trait_has_value("gpu_inventory")
    with pytest.raises(TraitError, match="'timeout' trait of a GPUInventory instance"):
        _ = pool.gpu_inventory


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


def test_summary_is_none_when_any_host_answers() -> None:
    up = HostInfo(name="a", url="u", transport="local", is_local=True, reachable=True)
    down = HostInfo(name="b", url="v", transport="tcp", is_local=False, reachable=False)
    assert unreachable_summary([up, down]) is None
    assert unreachable_summary([]) is None
    assert unreachable_summary([down]) is not None
