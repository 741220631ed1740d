"""``jupyter gpudev envs/start/ls/stop/rm/logs`` as a user runs them, on the real engine."""

from __future__ import annotations

import json
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from subprocess import CompletedProcess

import docker
import pytest
from traitlets.config import Config

from jupyter_gpudev.changes.tracker import track_changes
from jupyter_gpudev.containers import DevContainers
from jupyter_gpudev.engine import HostPool
from jupyter_gpudev.labels import L_MANAGED, L_WORKSPACE
from tests.integration.test_cli import gpudev
from tests.k8s_api import TOKEN, APIServer, FakeCluster

pytestmark = pytest.mark.integration

Run = Callable[..., CompletedProcess[str]]


@pytest.fixture
def cli(tmp_path: Path, docker_client: docker.DockerClient) -> Iterator[Run]:
    root = tmp_path / "work"
    root.mkdir()
    base_env = {"JUPYTER_CONFIG_DIR": str(tmp_path / "config"), "JUPYTER_CONFIG_PATH": ""}

    def run(*args: str, env: dict[str, str] | None = None) -> CompletedProcess[str]:
        return gpudev(
            *args,
            f"--root-dir={root}",
            f"--DevContainers.state_dir={tmp_path / 'state'}",
            "--DevContainers.stop_timeout=2",
            env={**base_env, **(env or {})},
        )

    yield run
    for container in docker_client.containers.list(
        all=True, filters={"label": [f"{L_MANAGED}=1", f"{L_WORKSPACE}={root.resolve()}"]}
    ):
        container.remove(force=True)


def names(result: CompletedProcess[str]) -> list[str]:
    """Container names in ``ls --json`` output (other tests' containers may be listed too)."""
    assert result.returncode == 0, result.stderr
    return [c["name"] for c in json.loads(result.stdout)["containers"]]


def test_envs_start_ls_logs_stop_rm(cli: Run) -> None:
    # The default environment is listed
    envs = cli("envs", "--json")
    assert envs.returncode == 0, envs.stderr
    assert "default" in [e["name"] for e in json.loads(envs.stdout)["environments"]]
    # start prints progress on stderr and the container on stdout
    started = cli("start", "default", "--name=cli-one", "--json")
    assert started.returncode == 0, started.stderr
    assert "[create]" in started.stderr
    assert json.loads(started.stdout)["state"] == "running"
    # ls shows it; logs works
    listed = cli("ls", "--json")
    assert "cli-one" in names(listed)
    assert cli("logs", "cli-one").returncode == 0
    # stop keeps it (ls --all still shows it, plain ls does not)
    stopped = cli("stop", "cli-one", "--json")
    assert json.loads(stopped.stdout)["state"] == "exited"
    assert "cli-one" not in names(cli("ls", "--json"))
    assert "cli-one" in names(cli("ls", "--all", "--json"))
    # rm removes it
    removed = cli("rm", "cli-one")
    assert removed.returncode == 0, removed.stderr
    assert "cli-one" not in names(cli("ls", "--all", "--json"))


def test_more_gpus_than_exist_exits_5_saying_so(cli: Run) -> None:
    # The fake inventory (MIG layout) has four leasable units: 3 MIG instances and 1 GPU
    result = cli("start", "default", "--name=greedy", "--gpus=5")
    assert result.returncode == 5
    assert "5 GPUs requested" in result.stderr
    assert "Traceback" not in result.stderr


def test_unknown_environment_and_missing_name(cli: Run) -> None:
    unknown = cli("start", "nope")
    assert unknown.returncode == 2
    assert "nope" in unknown.stderr
    usage = cli("stop")
    assert usage.returncode == 2
    assert "usage: jupyter gpudev stop NAME" in usage.stderr


@pytest.mark.parametrize(
    ("options", "expected"),
    [
        (["--gpus", "-3"], "error: --gpus expects a whole number, 0 or more; got '-3'"),
        (["--gpus=abc"], "error: --gpus expects a whole number, 0 or more; got 'abc'"),
        (["--gpus"], "error: --gpus expects a whole number, 0 or more; got nothing"),
        (
            ["--no-such-option=1"],
            "error: --no-such-option is not an option of jupyter gpudev start",
        ),
        (["--gpus=1", "--gpu=GPU-0"], "error: --gpus and --gpu cannot be given together"),
    ],
)
def test_a_bad_option_is_a_usage_error_and_starts_nothing(
    cli: Run,
    tmp_path: Path,
    docker_client: docker.DockerClient,
    options: list[str],
    expected: str,
) -> None:
    # When a start is asked for with a bad option
    name = f"bad-{uuid.uuid4().hex[:8]}"
    result = cli("start", "default", f"--name={name}", *options)
    # Then it is a usage error: the option as typed, what it takes, the value; the usage
    assert result.returncode == 2, result.stderr
    assert result.stderr.splitlines() == [
        expected,
        "usage: jupyter gpudev start ENV [--gpus N | --gpu UUID ...] [--host H] [--name NAME] "
        "[--dry-run] [--json] (--help lists the options)",
    ]
    assert result.stdout == ""
    # And nothing was created: no container of this workspace, none of that name
    workspace = (tmp_path / "work").resolve()
    assert (
        docker_client.containers.list(all=True, filters={"label": [f"{L_WORKSPACE}={workspace}"]})
        == []
    )
    assert docker_client.containers.list(all=True, filters={"name": name}) == []


def test_pin_unpin_and_a_cli_container_survives_the_orphan_sweep(
    cli: Run, tmp_path: Path, docker_client: docker.DockerClient
) -> None:
    # Given an image that carries gpudev's own labels (bootstrap images once did: containers
    # inherit them), and a dev container of it started from the command line, whose process
    # has exited
    folder = tmp_path / "work" / ".devcontainer" / "labelled"
    folder.mkdir(parents=True)
    (folder / "Dockerfile").write_text(
        "FROM gpudev-python:bookworm\n"
        'LABEL org.jupyter.gpudev.kernel="ipykernel" org.jupyter.gpudev.lease="bogus"\n'
    )
    (folder / "devcontainer.json").write_text(json.dumps({"build": {"dockerfile": "Dockerfile"}}))
    started = cli("start", "labelled", "--name=cli-shared", "--json")
    assert started.returncode == 0, started.stderr
    assert json.loads(started.stdout)["kernel_id"] is None
    # When it is pinned and listed
    pinned = cli("pin", "cli-shared", "--json")
    assert pinned.returncode == 0, pinned.stderr
    assert json.loads(pinned.stdout)["pinned"] is True
    assert "(pinned)" in cli("ls").stdout
    unpinned = cli("unpin", "cli-shared", "--json")
    assert json.loads(unpinned.stdout)["pinned"] is False
    # And a server starting on the same ledger sweeps the orphan kernel containers
    config = Config()
    config.DevContainers.state_dir = str(tmp_path / "state")
    manager = DevContainers(
        root_dir=tmp_path / "work", host_pool=HostPool(config=config), config=config
    )
    track_changes(manager)
    try:
        assert "cli-shared" not in manager.stop_orphan_kernels()
    finally:
        manager.host_pool.close()
    # Then the container (made for no kernel) is left running
    assert docker_client.containers.get("gpudev-cli-shared").status == "running"
    # And an unknown container cannot be pinned: a message, not a traceback
    missing = cli("pin", "no-such-box")
    assert missing.returncode != 0
    assert "No dev container named 'no-such-box'" in missing.stderr


def test_a_dry_run_creates_nothing_and_shows_what_a_start_creates(
    cli: Run, docker_client: docker.DockerClient
) -> None:
    networks = {n.id for n in docker_client.networks.list()}
    # When a start of a GPU container is only planned
    planned = cli("start", "default", "--name=dry-one", "--gpus=1", "--dry-run", "--json")
    assert planned.returncode == 0, planned.stderr
    plan = json.loads(planned.stdout)
    # Then it names the engine's arguments and the GPU a lease would take now
    assert plan["kind"] == "docker"
    assert plan["create"]["name"] == "gpudev-dry-one"
    assert len(plan["gpus"]) == 1
    assert plan["create"]["device_requests"][0]["DeviceIDs"] == plan["gpus"]
    # And nothing was created or leased: no container, no new network, the GPU still free
    assert docker_client.containers.list(all=True, filters={"name": "gpudev-dry-one"}) == []
    assert {n.id for n in docker_client.networks.list()} <= networks | {
        n.id for n in docker_client.networks.list(names=["gpudev"])
    }
    again = cli("start", "default", "--name=dry-one", "--gpus=1", "--dry-run", "--json")
    assert json.loads(again.stdout)["gpus"] == plan["gpus"]
    # And --json has the whole seccomp profile, while a person reads it summarised
    (profile,) = [o for o in plan["create"]["security_opt"] if o.startswith("seccomp=")]
    assert json.loads(profile.removeprefix("seccomp="))["defaultAction"] == "SCMP_ACT_ERRNO"
    text = cli("start", "default", "--name=dry-one", "--gpus=1", "--dry-run")
    assert text.returncode == 0, text.stderr
    assert "  seccomp: gpudev default (Docker's default, no setuid/setgid bits)" in text.stdout
    assert "  no-new-privileges: yes" in text.stdout
    assert f"  GPUs: {plan['gpus'][0]} (free now; the start leases again)" in text.stdout
    assert "SCMP_ACT" not in text.stdout
    assert len(text.stdout) < len(profile)
    # When a CPU start is planned and then made
    planned = json.loads(cli("start", "default", "--name=dry-two", "--dry-run", "--json").stdout)
    started = cli("start", "default", "--name=dry-two", "--json")
    assert started.returncode == 0, started.stderr
    # Then the container has what the plan said: labels, variables, mounts, confinement
    attrs = docker_client.containers.get("gpudev-dry-two").attrs
    create = planned["create"]
    made = attrs["Config"]["Labels"]
    for key, value in create["labels"].items():
        if not key.endswith((".created", ".process", ".server")):
            assert made[key] == value, key
    assert set(attrs["Config"]["Env"]) >= {f"{k}={v}" for k, v in create["environment"].items()}
    assert sorted(m["Target"] for m in create["mounts"]) == sorted(
        m["Destination"] for m in attrs["Mounts"]
    )
    assert attrs["HostConfig"]["SecurityOpt"] == create["security_opt"]
    # And planning a name that exists is refused, as the start would be
    taken = cli("start", "default", "--name=dry-two", "--dry-run")
    assert taken.returncode != 0
    assert "already exists" in taken.stderr


def test_a_dry_run_on_a_kubernetes_host_prints_manifests_that_validate(
    cli: Run, tmp_path: Path
) -> None:
    import kubernetes_validate  # noqa: PLC0415 - a test dependency

    cluster = '--HostPool.hosts={"cluster": "k8s://kind-dev/team-ml"}'
    # When a start with two GPUs on a Kubernetes host is planned
    planned = cli("start", "default", "--host=cluster", "--gpus=2", "--dry-run", "--json", cluster)
    assert planned.returncode == 0, planned.stderr
    plan = json.loads(planned.stdout)
    # Then it holds the workspace claim, the pod's NetworkPolicy, the pod and its service,
    # each valid for the schemas
    assert plan["kind"] == "kubernetes"
    assert (plan["context"], plan["namespace"]) == ("kind-dev", "team-ml")
    assert [o["kind"] for o in plan["objects"]] == [
        "PersistentVolumeClaim",
        "NetworkPolicy",
        "Pod",
        "Service",
    ]
    for manifest in plan["objects"]:
        assert manifest["metadata"]["namespace"] == "team-ml"
        kubernetes_validate.validate(manifest, "1.34.0", strict=True)
    pod = plan["objects"][2]
    assert pod["spec"]["containers"][0]["resources"]["limits"]["nvidia.com/gpu"] == "2"
    # And without --json it prints one List for `kubectl apply -f -`, the notes on stderr
    text = cli("start", "default", "--host=cluster", "--dry-run", cluster)
    assert text.returncode == 0, text.stderr
    listed = json.loads(text.stdout)
    assert (listed["kind"], len(listed["items"])) == ("List", 4)
    assert "note: " in text.stderr
    # When it is started for real without a kubeconfig for that context, it says so
    refused = cli("start", "default", "--host=cluster", cluster)
    assert refused.returncode != 0
    assert "no usable kubeconfig context 'kind-dev'" in refused.stderr
    # And the RBAC it needs is printed for kubectl, valid for the schemas
    rbac = gpudev("hosts", "rbac", "team-ml", "--account=gpudev-svc")
    assert rbac.returncode == 0, rbac.stderr
    items = json.loads(rbac.stdout)["items"]
    assert [i["kind"] for i in items][:3] == ["ServiceAccount", "Role", "RoleBinding"]
    for manifest in items:
        kubernetes_validate.validate(manifest, "1.34.0", strict=True)
    assert items[0]["metadata"]["name"] == "gpudev-svc"
    # And a cluster cannot be added at run time (it would use the server's kubeconfig)
    added = gpudev(
        "hosts",
        "add",
        "k8s-added",
        "k8s://kind-dev/team-ml",
        f"--HostPool.hosts_file={tmp_path / 'hosts.json'}",
        env={"JUPYTER_CONFIG_DIR": str(tmp_path / "config"), "JUPYTER_CONFIG_PATH": ""},
    )
    assert added.returncode != 0
    assert "kubeconfig" in added.stderr


def test_a_pod_is_started_listed_and_removed_from_the_command_line(
    cli: Run, tmp_path: Path
) -> None:
    # A cluster's API server (tests/k8s_api.py: no control plane can run here)
    state = FakeCluster(scheduler="slow")
    server = APIServer(state)
    kubeconfig = server.kubeconfig(tmp_path / "kubeconfig")
    cluster = '--HostPool.hosts={"cluster": "k8s://lab-ml/team-ml"}'
    env_file = {"KUBECONFIG": str(kubeconfig)}
    try:
        # When a user starts a dev container there, the start says why it waits, then runs
        started = cli(
            "start", "default", "--host=cluster", "--name=on-k8s", "--json", cluster, env=env_file
        )
        assert started.returncode == 0, started.stderr
        assert "[pod] gpudev-on-k8s: Pending" in started.stderr
        info = json.loads(started.stdout)
        assert (info["host"], info["state"], info["status"]) == (
            "cluster",
            "running",
            "Running on node gpu-a100-1",
        )
        assert TOKEN not in started.stdout + started.stderr
        # ls shows the pod next to the Docker host's containers
        assert "on-k8s" in names(cli("ls", "--json", cluster, env=env_file))
        table = cli("ls", "--host=cluster", cluster, env=env_file)
        assert "on-k8s  cluster  default      Running on node gpu-a100-1" in table.stdout
        # Its output is read; its changes cannot be, as its files were not listed at its start
        # (this API server runs no pods)
        state.outputs["gpudev-on-k8s"] = b"pod says hi\n"
        logs = cli("logs", "on-k8s", cluster, env=env_file)
        assert (logs.returncode, logs.stdout) == (0, "pod says hi\n")
        diff = cli("diff", "on-k8s", cluster, env=env_file)
        assert diff.returncode != 0
        assert "runs in a pod on host 'cluster' whose files were not listed" in diff.stderr
        # rm asks for --force (the pod's changes cannot be read), then deletes the pod
        # and keeps the workspace claim
        kept = cli("rm", "on-k8s", cluster, env=env_file)
        assert kept.returncode != 0
        assert "were not listed when it started" in kept.stderr
        removed = cli("rm", "on-k8s", "--force", cluster, env=env_file)
        assert removed.returncode == 0, removed.stderr
        assert state.names("pods") == []
        assert state.names("persistentvolumeclaims") == ["gpudev-ws-on-k8s"]
    finally:
        server.close()


def test_logs_shows_a_containers_control_sequences_instead_of_running_them(
    cli: Run, docker_client: docker.DockerClient
) -> None:
    # Given a dev container whose output carries terminal control sequences: one that writes
    # to the clipboard (OSC 52), one that clears the screen (CSI), an 8-bit CSI (C1 0x9b) and a
    # carriage return that would hide what came before it on the line
    started = cli("start", "default", "--name=cli-hostile")
    assert started.returncode == 0, started.stderr
    hostile = "\x1b]52;c;cm0gLXJmIH4=\x07\x1b[2J\u009b31mred\rhidden\nplain text, été\tok\n"
    container = docker_client.containers.get("gpudev-cli-hostile")
    wrote = container.exec_run(
        ["sh", "-c", 'printf "%s" "$OUT" > /proc/1/fd/1'], environment={"OUT": hostile}
    )
    assert wrote.exit_code == 0, wrote.output
    # When its output is printed
    logs = cli("logs", "cli-hostile")
    # Then every control sequence is shown escaped, and the text around them as it was
    assert logs.returncode == 0, logs.stderr
    assert logs.stdout == (
        "\\x1b]52;c;cm0gLXJmIH4=\\x07\\x1b[2J\\x9b31mred\\rhidden\nplain text, été\tok\n"
    )
    # And --raw writes it as it came, for a file or a pipe
    raw = cli("logs", "cli-hostile", "--raw")
    assert raw.returncode == 0, raw.stderr
    assert "\x1b]52;c;cm0gLXJmIH4=\x07\x1b[2J\u009b31mred" in raw.stdout


def test_what_gpudev_does_not_do_of_a_file_is_said_by_envs_a_dry_run_and_a_start(
    cli: Run, tmp_path: Path
) -> None:
    # Given an environment whose devcontainer.json asks for portsAttributes and remoteEnv
    folder = tmp_path / "work" / ".devcontainer" / "noted"
    folder.mkdir(parents=True)
    (folder / "devcontainer.json").write_text(
        json.dumps(
            {
                "image": "gpudev-python:bookworm",
                "portsAttributes": {"8888": {"label": "lab"}},
                "remoteEnv": {"A": "1"},
            }
        )
    )
    said = ("'portsAttributes' is ignored", "'remoteEnv' is ignored")
    # Then the listing says both
    envs = cli("envs")
    assert envs.returncode == 0, envs.stderr
    assert all(words in envs.stdout for words in said)
    # And a dry run prints both as notes
    plan = cli("start", "noted", "--name=noted-dry", "--dry-run", "--json")
    assert plan.returncode == 0, plan.stderr
    notes = json.loads(plan.stdout)["notes"]
    assert all(any(words in note for note in notes) for words in said)
    # And a start reports them among its warnings
    started = cli("start", "noted", "--name=noted-one", "--json")
    assert started.returncode == 0, started.stderr
    warnings = json.loads(started.stdout)["warnings"]
    assert all(any(words in warning for warning in warnings) for words in said)
