"""Host specs (``c.HostPool.hosts`` entries): their transports and checks (the error names the
trait and the problem, never a password), a Kubernetes host's context and namespace, and the
keys of remote hosts: checked, kept, written back as the hosts file holds them."""

from __future__ import annotations

import json
from typing import Any

import pytest

from jupyter_gpudev.engine import HostSpec
from jupyter_gpudev.errors import ConfigError

SSH = "ssh://gpu@box:2222"


@pytest.mark.parametrize(
    ("value", "message"),
    [
        (
            {"url": "tcp://box:2376", "identity_file": "/k"},
            "['identity_file'] do not apply to a tcp",
        ),
        ({"url": "unix:///d.sock", "known_hosts": "/kh"}, "['known_hosts'] do not apply to a unix"),
        ({"url": SSH, "tls_verify": False}, "['tls_verify'] do not apply to a ssh"),
        ({"url": SSH, "tls_ca_cert": "/ca.pem"}, "['tls_ca_cert'] do not apply to a ssh"),
        ({"url": "unix:///d.sock", "tls_client_cert": "/c", "tls_client_key": "/k"}, "unix"),
        ({"url": SSH, "identity_file": 42}, "'identity_file' must be a file path"),
        ({"url": SSH, "known_hosts": ["/kh"]}, "'known_hosts' must be a string"),
        ({"url": SSH, "nvidia_smi": 1}, "'nvidia_smi' must be a string"),
        ({"url": SSH, "workspace": 7}, "'workspace' must be a string"),
        ({"url": SSH, "workspace": "work"}, "'workspace' must be an absolute path"),
        ({"url": SSH, "workspace": "/home/gpu/../root"}, "'workspace' must be an absolute path"),
        ({"url": SSH, "mount_roots": "/srv/data"}, "'mount_roots' must be a list"),
        ({"url": SSH, "mount_roots": {"path": "/srv"}}, "'mount_roots' must be a list"),
    ],
)
def test_remote_keys_are_checked_and_the_error_names_the_host(
    value: dict[str, Any], message: str
) -> None:
    with pytest.raises(ConfigError) as caught:
        HostSpec.parse("gpu-a", value)
    assert message in caught.value.message
    assert caught.value.message.startswith("c.HostPool.hosts['gpu-a']: ")


@pytest.mark.parametrize(
    ("key", "value"),
    [("nvidia_smi", "/usr/bin/nvidia-smi"), ("workspace", "/w"), ("mount_roots", ["/srv"])],
)
def test_remote_keys_are_refused_for_the_local_host(key: str, value: Any) -> None:
    # Given the local engine (its folders are the Jupyter root and c.MountPolicy)
    entry = {"url": "unix:///var/run/docker.sock", key: value}
    # Then a remote-host key is refused for it, but accepted for a remote host
    with pytest.raises(ConfigError, match=rf"\['{key}'\] do not apply to a unix:// host"):
        HostSpec.parse("local", entry, is_local=True)
    assert getattr(HostSpec.parse("far", {**entry, "url": SSH}), key) in (value, tuple(value))


def test_remote_keys_are_kept() -> None:
    spec = HostSpec.parse(
        "far",
        {
            "url": SSH,
            "identity_file": "~/.ssh/id_far",
            "known_hosts": "/etc/gpudev/known_hosts",
            "nvidia_smi": "/opt/nvidia/bin/nvidia-smi",
            "workspace": "/home/gpu/work",
            "mount_roots": ["/srv/data", {"path": "/scratch", "writable": True}],
        },
    )
    assert spec.transport == "ssh"
    assert spec.identity_file == "~/.ssh/id_far"
    assert spec.known_hosts == "/etc/gpudev/known_hosts"
    assert spec.nvidia_smi == "/opt/nvidia/bin/nvidia-smi"
    assert spec.workspace == "/home/gpu/work"
    assert spec.mount_roots == ("/srv/data", {"path": "/scratch", "writable": True})


def test_defaults_of_the_remote_keys() -> None:
    spec = HostSpec.parse("far", SSH)
    assert (spec.nvidia_smi, spec.workspace, spec.mount_roots) == ("nvidia-smi", None, ())
    assert (spec.identity_file, spec.known_hosts) == (None, None)


@pytest.mark.parametrize("url", ["ssh://me@box:abc", "ssh://me@box:99999"])
def test_an_ssh_url_with_a_bad_port_is_a_config_error(url: str) -> None:
    with pytest.raises(ConfigError, match="port"):
        HostSpec.parse("far", url)


@pytest.mark.parametrize(
    "url", ["ssh://$(id)@box", "ssh://me@bo`x`", "ssh://-oProxyCommand=x@box", "tcp://a;b:1"]
)
def test_user_and_host_names_with_shell_or_option_characters_are_refused(url: str) -> None:
    with pytest.raises(ConfigError, match="letters, digits"):
        HostSpec.parse("far", url)


@pytest.mark.parametrize(
    ("name", "entry", "is_local"),
    [
        ("far", SSH, False),
        (
            "far",
            {
                "url": SSH,
                "identity_file": "~/.ssh/id_far",
                "known_hosts": "/etc/gpudev/known_hosts",
                "nvidia_smi": "/opt/nvidia/bin/nvidia-smi",
                "workspace": "/home/gpu/work",
                "mount_roots": ["/srv/data", {"path": "/scratch", "writable": True}],
            },
            False,
        ),
        (
            "tls",
            {
                "url": "tcp://box:2376",
                "tls_ca_cert": "/ca.pem",
                "tls_client_cert": "/cert.pem",
                "tls_client_key": "/key.pem",
                "tls_verify": False,
            },
            False,
        ),
        ("plain", {"url": "tcp://box:2375", "tls_verify": True}, False),
        ("local", "unix:///var/run/docker.sock", True),
        ("local", {"url": "tcp://127.0.0.1:2376", "tls_verify": False}, True),
    ],
)
def test_to_config_round_trips_through_json(
    name: str, entry: str | dict[str, Any], is_local: bool
) -> None:
    # Given a spec
    spec = HostSpec.parse(name, entry, is_local=is_local)
    # When it is written as the hosts file holds it, and read back
    config = json.loads(json.dumps(spec.to_config()))
    # Then it is the same spec
    assert HostSpec.parse(name, config, is_local=is_local) == spec


def test_to_config_holds_only_the_keys_that_are_set() -> None:
    assert HostSpec.parse("far", SSH).to_config() == {"url": SSH}
    assert HostSpec.parse("plain", "tcp://box:2375").to_config() == {"url": "tcp://box:2375"}
    assert HostSpec.parse("far", {"url": SSH, "workspace": "/w"}).to_config() == {
        "url": SSH,
        "workspace": "/w",
    }


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
