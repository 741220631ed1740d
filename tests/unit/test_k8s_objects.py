"""The Kubernetes objects of a dev container (``jupyter_gpudev.k8s.objects``), without a
cluster: what goes into each manifest, and every manifest checked against the official
OpenAPI schemas of three Kubernetes minor versions (``kubernetes-validate``, strict: a field the
schema does not know fails)."""

from __future__ import annotations

import base64
import dataclasses
import re
from pathlib import Path
from typing import Any

import kubernetes_validate
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from jupyter_gpudev.containers import StartRequest
from jupyter_gpudev.containers import pod_plan as planning
from jupyter_gpudev.containers.create import Confinement
from jupyter_gpudev.engine import HostSpec
from jupyter_gpudev.environments import Environment
from jupyter_gpudev.environments.model import BuildSpec, DeclaredMount, GPURequirement, RunOptions
from jupyter_gpudev.errors import BadRequest, ConfigError
from jupyter_gpudev.k8s import objects as k8s
from jupyter_gpudev.labels import A_CREATED, A_OWNER, K_NAME, K_OWNER, K_ROLE

#: Cluster versions and the ResourceClaim API each serves (v1beta1 from 1.32, v1 from 1.34).
VERSIONS = {
    "1.32.0": "resource.k8s.io/v1beta1",
    "1.34.0": "resource.k8s.io/v1",
    "1.37.0": "resource.k8s.io/v1",
}
DNS_LABEL = re.compile(r"^[a-z]([-a-z0-9]{0,61}[a-z0-9])?\Z")
DIGEST = "sha256:" + "ab" * 32
#: Peers and egress rules as an administrator configures them for a host.
SERVER_IN_HUB = (
    {
        "namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": "jhub"}},
        "podSelector": {"matchLabels": {"app": "gpudev"}},
    },
    {"ipBlock": {"cidr": "10.8.0.0/16", "except": ["10.8.9.0/24"]}},
)
MIRRORS = (
    {"to": [{"ipBlock": {"cidr": "203.0.113.0/24"}}], "ports": [{"port": 443}]},
    {
        "to": [{"namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": "mirrors"}}}],
        "ports": [{"port": 5000, "protocol": "TCP"}, {"port": 8000, "endPort": 8099}],
    },
)


def environment(**changes: Any) -> Environment:
    env = Environment(
        name="gpu",
        display_name="GPU",
        source=".devcontainer/gpu/devcontainer.json",
        image="nvcr.io/nvidia/pytorch:24.08-py3",
        container_env={"HF_HOME": "/workspace/.hf", "NVIDIA_VISIBLE_DEVICES": "all"},
        run_options=RunOptions(shm_size_bytes=8 << 30, memory_bytes=64 << 30, nano_cpus=8 * 10**9),
        forward_ports=(6006, 8888),
        workspace_folder="/workspace",
    )
    return dataclasses.replace(env, **changes)


def target(**changes: Any) -> k8s.PodTarget:
    base = k8s.PodTarget(
        name="alice-gpu",
        owner="alice@example.org",
        namespace="team-ml",
        image="nvcr.io/nvidia/pytorch:24.08-py3",
        command=("sleep", "infinity"),
        server_id="3f1c",
        created="2026-11-25T08:00:00Z",
        gpus=k8s.GPUAsk(count=2, product="NVIDIA-A100-SXM4-80GB"),
        kernel_id="6f2a1c4e-9b1d-4c55-a3a0-0b5e4f1d2c3b",
        image_pull_secrets=("registry",),
    )
    return dataclasses.replace(base, **changes)


def build_target(**changes: Any) -> k8s.BuildTarget:
    base = k8s.BuildTarget(
        name="alice-gpu",
        owner="alice@example.org",
        namespace="team-ml",
        workspace_claim="gpudev-ws-alice-gpu",
        context_archive=".gpudev-build/3f1c/context.tar",
        context_digest=DIGEST,
        context_size=40960,
        dockerfile=".devcontainer/gpu/Dockerfile",
        destination="registry.example.org/team/gpu:v2",
        registry_config="gpudev-push-alice-gpu",
        created="2026-11-25T08:00:00Z",
    )
    return dataclasses.replace(base, **changes)


def valid(manifest: dict[str, Any], version: str) -> None:
    kubernetes_validate.validate(manifest, version, strict=True)


def by_kind(plan: k8s.Plan) -> dict[str, dict[str, Any]]:
    return {o["kind"]: o for o in plan.objects}


# -- every manifest against the schemas ------------------------------------------------------


@pytest.mark.parametrize("version", sorted(VERSIONS))
@pytest.mark.parametrize(
    "gpus",
    [
        k8s.GPUAsk(),
        k8s.GPUAsk(count=2, product="NVIDIA-A100-SXM4-80GB"),
        k8s.GPUAsk(count=1, resource="nvidia.com/mig-1g.10gb"),
        k8s.GPUAsk(count=4, claim=True, product="NVIDIA H100 80GB HBM3"),
    ],
    ids=["cpu", "gpus", "mig", "dra"],
)
def test_every_object_of_a_dev_container_validates(version: str, gpus: k8s.GPUAsk) -> None:
    # Given a dev container with GPUs asked each way, on a cluster of that version
    plan = k8s.dev_container_objects(
        environment(),
        target(gpus=gpus, dra_api_version=VERSIONS[version]),
        k8s.PodConfinement(memory_bytes=32 << 30),
    )
    # Then each of its objects is valid for that version, strictly
    for manifest in plan.objects:
        valid(manifest, version)
    kinds = [o["kind"] for o in plan.objects]
    assert kinds[0] == "PersistentVolumeClaim"
    assert kinds[-3:] == ["NetworkPolicy", "Pod", "Service"]
    assert ("ResourceClaim" in kinds) == gpus.claim


@pytest.mark.parametrize("version", sorted(VERSIONS))
def test_the_builder_job_and_the_rbac_validate(version: str) -> None:
    job = k8s.make_builder_job(build_target(node="gpu-a100-1", labels={"a.b/c": "d e"}))
    secret = k8s.make_registry_secret(
        "alice-gpu", "team-ml", "alice", b'{"auths": {}}', "2026-11-25T08:00:00Z", job=("j", "u")
    )
    policies = [
        k8s.make_build_network_policy(build_target(), job=("j", "u")),
        k8s.make_build_network_policy(build_target(egress=MIRRORS)),
    ]
    for manifest in [job, secret, *policies, *k8s.make_rbac("team-ml")]:
        valid(manifest, version)


@pytest.mark.parametrize("version", sorted(VERSIONS))
@pytest.mark.parametrize("peers", [None, (), SERVER_IN_HUB], ids=["default", "none", "hub"])
def test_the_dev_pods_network_policy_validates(
    version: str, peers: tuple[dict[str, Any], ...] | None
) -> None:
    valid(k8s.make_network_policy(environment(), target(ingress_from=peers)), version)


def test_an_unknown_field_fails_the_schema_check() -> None:
    # (the check above can fail: strict validation refuses what the schema does not know)
    pod = k8s.make_pod(environment(), target())
    pod["spec"]["containers"][0]["gpus"] = 2
    with pytest.raises(kubernetes_validate.ValidationError):
        valid(pod, "1.34.0")


# -- the pod -----------------------------------------------------------------------------------


def test_the_pod_is_confined_and_gets_no_api_token() -> None:
    pod = k8s.make_pod(environment(), target())
    spec = pod["spec"]
    container = spec["containers"][0]
    assert spec["automountServiceAccountToken"] is False
    assert spec["restartPolicy"] == "Never"
    assert spec["securityContext"]["runAsNonRoot"] is True
    assert spec["securityContext"]["runAsUser"] == 1000
    assert spec["securityContext"]["seccompProfile"] == {"type": "RuntimeDefault"}
    assert container["securityContext"]["allowPrivilegeEscalation"] is False
    assert container["securityContext"]["capabilities"] == {"drop": ["ALL"]}
    for forbidden in ("hostNetwork", "hostPID", "hostIPC", "serviceAccountName"):
        assert forbidden not in spec
    assert not [v for v in spec["volumes"] if "hostPath" in v]


def test_root_is_refused() -> None:
    with pytest.raises(BadRequest, match="other than root"):
        k8s.make_pod(environment(), target(run_as_user=0))


def test_gpus_are_limits_on_nodes_of_the_model_and_the_device_plugin_picks_them() -> None:
    pod = k8s.make_pod(environment(), target())
    container = pod["spec"]["containers"][0]
    assert container["resources"]["limits"]["nvidia.com/gpu"] == "2"
    assert pod["spec"]["nodeSelector"] == {k8s.PRODUCT_LABEL: "NVIDIA-A100-SXM4-80GB"}
    # The environment's NVIDIA_VISIBLE_DEVICES=all would override the plugin's choice
    names = {e["name"]: e["value"] for e in container["env"]}
    assert "NVIDIA_VISIBLE_DEVICES" not in names
    assert names["HF_HOME"] == "/workspace/.hf"
    assert names["CUDA_DEVICE_ORDER"] == "PCI_BUS_ID"


def test_a_cpu_pod_asks_for_no_gpu_and_tolerates_no_gpu_taint() -> None:
    pod = k8s.make_pod(environment(), target(gpus=k8s.GPUAsk()))
    limits = pod["spec"]["containers"][0]["resources"]["limits"]
    assert not [k for k in limits if k.startswith("nvidia.com/")]
    assert "tolerations" not in pod["spec"]
    assert "nodeSelector" not in pod["spec"]


def test_a_mig_profile_is_its_own_resource() -> None:
    pod = k8s.make_pod(
        environment(), target(gpus=k8s.GPUAsk(count=1, resource="nvidia.com/mig-3g.40gb"))
    )
    assert pod["spec"]["containers"][0]["resources"]["limits"]["nvidia.com/mig-3g.40gb"] == "1"


@pytest.mark.parametrize(
    "gpus",
    [
        k8s.GPUAsk(count=1, resource="nvidia.com/gpu; rm -rf /"),
        k8s.GPUAsk(count=1, resource="example.com/fpga"),
        k8s.GPUAsk(count=-1),
        k8s.GPUAsk(count=1, claim=True, product="A100' || true || '"),
        k8s.GPUAsk(count=1, claim=True, resource="nvidia.com/mig-1g.10gb"),
    ],
)
def test_a_bad_gpu_ask_is_refused(gpus: k8s.GPUAsk) -> None:
    with pytest.raises(BadRequest):
        k8s.dev_container_objects(environment(), target(gpus=gpus))


def test_dra_asks_with_a_claim_and_a_cel_selector_for_the_model() -> None:
    ask = k8s.GPUAsk(count=2, claim=True, product="NVIDIA H100 80GB HBM3")
    plan = by_kind(k8s.dev_container_objects(environment(), target(gpus=ask)))
    pod, claim = plan["Pod"], plan["ResourceClaim"]
    container = pod["spec"]["containers"][0]
    assert container["resources"]["claims"] == [{"name": "gpus"}]
    assert "nvidia.com/gpu" not in container["resources"]["limits"]
    assert pod["spec"]["resourceClaims"] == [
        {"name": "gpus", "resourceClaimName": claim["metadata"]["name"]}
    ]
    request = claim["spec"]["devices"]["requests"][0]["exactly"]
    assert request["count"] == 2
    assert request["selectors"] == [
        {
            "cel": {
                "expression": "device.attributes['gpu.nvidia.com'].productName == "
                "'NVIDIA H100 80GB HBM3'"
            }
        }
    ]


def test_limits_are_the_tighter_of_the_environments_and_the_administrators() -> None:
    env = environment()
    loose = k8s.make_pod(env, target(), k8s.PodConfinement(memory_bytes=128 << 30))
    tight = k8s.make_pod(
        env, target(), k8s.PodConfinement(memory_bytes=16 << 30, nano_cpus=2 * 10**9)
    )
    assert loose["spec"]["containers"][0]["resources"]["limits"]["memory"] == str(64 << 30)
    assert loose["spec"]["containers"][0]["resources"]["limits"]["cpu"] == "8000m"
    assert tight["spec"]["containers"][0]["resources"]["limits"]["memory"] == str(16 << 30)
    assert tight["spec"]["containers"][0]["resources"]["limits"]["cpu"] == "2000m"


def test_shm_size_becomes_a_memory_volume_and_the_workspace_a_claim() -> None:
    plan = by_kind(k8s.dev_container_objects(environment(), target()))
    pod, claim = plan["Pod"], plan["PersistentVolumeClaim"]
    volumes = {v["name"]: v for v in pod["spec"]["volumes"]}
    assert volumes["shm"]["emptyDir"] == {"medium": "Memory", "sizeLimit": str(8 << 30)}
    assert volumes["workspace"]["persistentVolumeClaim"]["claimName"] == claim["metadata"]["name"]
    mounts = {m["name"]: m["mountPath"] for m in pod["spec"]["containers"][0]["volumeMounts"]}
    assert mounts == {"workspace": "/workspace", "shm": "/dev/shm"}
    assert claim["spec"]["resources"]["requests"]["storage"] == "10Gi"


def test_host_namespaces_are_refused_and_what_a_cluster_lacks_is_said() -> None:
    for options in (
        RunOptions(network_mode="host"),
        RunOptions(pid_mode="host"),
        RunOptions(ipc_mode="host"),
    ):
        with pytest.raises(BadRequest, match="host's network, process or IPC"):
            k8s.dev_container_objects(environment(run_options=options), target())
    plan = k8s.dev_container_objects(
        environment(
            run_options=RunOptions(ulimits=(("memlock", -1, -1),)),
            mounts=(DeclaredMount(source="/data", target="/data"),),
        ),
        target(),
    )
    assert any("memlock" in note for note in plan.notes)
    assert any("declared mount" in note for note in plan.notes)


# -- names, labels, the service ----------------------------------------------------------------


def test_labels_hold_what_they_can_and_annotations_the_rest() -> None:
    pod = k8s.make_pod(environment(), target())
    found, notes = pod["metadata"]["labels"], pod["metadata"]["annotations"]
    # An e-mail is no label value: a stable stand-in, the real one in an annotation
    assert found[K_OWNER].startswith("h-")
    assert found[K_OWNER] == k8s.label_value("alice@example.org")
    assert notes[A_OWNER] == "alice@example.org"
    assert found[K_NAME] == "alice-gpu"
    assert notes[A_CREATED] == "2026-11-25T08:00:00Z"


def test_the_service_selects_the_pod_and_names_its_dns() -> None:
    plan = by_kind(k8s.dev_container_objects(environment(), target()))
    pod, service = plan["Pod"], plan["Service"]
    assert service["spec"]["clusterIP"] == "None"
    assert service["spec"]["selector"].items() <= pod["metadata"]["labels"].items()
    assert pod["spec"]["subdomain"] == service["metadata"]["name"]
    assert [p["port"] for p in service["spec"]["ports"]] == [6006, 8888]


@given(st.lists(st.from_regex(r"[a-z0-9][a-z0-9._-]{0,80}", fullmatch=True), unique=True))
@settings(max_examples=200, deadline=None)
def test_object_names_are_dns_labels_and_never_collide(names: list[str]) -> None:
    made = [k8s.k8s_name(name) for name in names]
    assert all(DNS_LABEL.match(m) for m in made)
    assert len(set(made)) == len(made)


def test_a_plain_name_is_kept_as_it_is() -> None:
    assert k8s.k8s_name("alice-gpu") == "gpudev-alice-gpu"
    assert k8s.k8s_name("alice.gpu") != k8s.k8s_name("alice_gpu")


# -- builds and RBAC ---------------------------------------------------------------------------


@pytest.mark.parametrize("path", ["../etc", "/etc/passwd", "a/../../b", "a//b", "$(id)", "a b"])
@pytest.mark.parametrize("field", ["context_archive", "dockerfile"])
def test_a_build_path_outside_the_workspace_is_refused(field: str, path: str) -> None:
    with pytest.raises(BadRequest, match="plain path inside the workspace"):
        k8s.make_builder_job(build_target(**{field: path}))


@pytest.mark.parametrize(
    "changes",
    [
        {"context_digest": "sha256:" + "AB" * 32},
        {"context_digest": "md5:" + "ab" * 16},
        {"context_digest": DIGEST + "; id"},
        {"context_size": 0},
        {"run_as": (0, 0)},
    ],
)
def test_a_build_without_a_digest_of_its_context_or_reading_it_as_root_is_refused(
    changes: dict[str, Any],
) -> None:
    with pytest.raises(BadRequest):
        k8s.make_builder_job(build_target(**changes))


def steps(job: dict[str, Any]) -> dict[str, dict[str, Any]]:
    spec = job["spec"]["template"]["spec"]
    return {c["name"]: c for c in [*spec["initContainers"], *spec["containers"]]}


def test_the_build_reads_only_the_context_gpudev_wrote_checked_by_its_digest() -> None:
    # Given a build of gpudev's archive of the context in the dev container's workspace claim
    job = k8s.make_builder_job(build_target(run_as=(1001, 1002)))
    spec = job["spec"]["template"]["spec"]
    # Then first a step of gpudev's own copies it out of the claim into a volume of the build
    # pod's own, checks its digest and unpacks it; then kaniko builds; then crane pushes
    assert [c["name"] for c in spec["initContainers"]] == ["context", "build"]
    assert [c["name"] for c in spec["containers"]] == ["push"]
    found = steps(job)
    context, build, push = found["context"], found["build"], found["push"]
    volumes = {v["name"]: v for v in spec["volumes"]}
    assert volumes["context"] == {
        "name": "context",
        "emptyDir": {"sizeLimit": str(2 * 40960 + (1 << 20))},
    }
    # The check runs in an image gpudev chose, its programs its own: nothing of the claim runs
    assert context["image"] == k8s.CRANE_IMAGE
    assert context["command"] == ["/busybox/sh", "-c", k8s.CONTEXT_SCRIPT]
    assert context["args"] == [
        "context",
        "/workspace/.gpudev-build/3f1c/context.tar",
        DIGEST,
        "40960",
        k8s.CONTEXT_MOUNT,
    ]
    # as the dev container's user (who can read the claim), with nothing else
    assert context["securityContext"] == {
        "runAsUser": 1001,
        "runAsGroup": 1002,
        "runAsNonRoot": True,
        "allowPrivilegeEscalation": False,
        "privileged": False,
        "readOnlyRootFilesystem": True,
        "capabilities": {"drop": ["ALL"]},
        "seccompProfile": {"type": "RuntimeDefault"},
    }
    mounts = {s: {m["name"]: m for m in found[s]["volumeMounts"]} for s in found}
    assert mounts["context"]["workspace"] == {
        "name": "workspace",
        "mountPath": "/workspace",
        "readOnly": True,
    }
    assert mounts["context"]["context"]["mountPath"] == k8s.CONTEXT_MOUNT
    # Only that step mounts the claim: kaniko reads the checked copy, read-only
    assert [s for s in mounts if "workspace" in mounts[s]] == ["context"]
    assert mounts["build"]["context"]["readOnly"] is True
    assert f"--context=dir://{k8s.CONTEXT_MOUNT}/build" in build["args"]
    assert f"--dockerfile={k8s.CONTEXT_MOUNT}/build/.devcontainer/gpu/Dockerfile" in build["args"]
    assert volumes["workspace"]["persistentVolumeClaim"]["readOnly"] is True
    # The build step (which runs the Dockerfile's commands) never sees the credentials and
    # pushes nothing; the push step, which runs nothing of the image, has them
    assert "--destination=registry.example.org/team/gpu:v2" in build["args"]
    assert "--no-push" in build["args"]
    assert [s for s in mounts if "registry" in mounts[s]] == ["push"]
    assert {m["name"]: m["readOnly"] for m in push["volumeMounts"]} == {
        "image": True,
        "registry": True,
    }
    assert push["args"] == ["push", k8s.BUILD_TARBALL, "registry.example.org/team/gpu:v2"]
    assert push["securityContext"]["runAsNonRoot"] is True
    # No API token, no retry, any node unless one is named
    assert job["spec"]["backoffLimit"] == 0
    assert spec["automountServiceAccountToken"] is False
    assert "affinity" not in spec


def test_kaniko_runs_as_root_with_only_the_capabilities_it_needs() -> None:
    spec = k8s.make_builder_job(build_target())["spec"]["template"]["spec"]
    build = steps(k8s.make_builder_job(build_target()))["build"]
    security = build["securityContext"]
    # Root in its own container (it unpacks the base image there), with the capabilities of
    # unpacking and running the Dockerfile's steps as their users, and nothing more
    assert security["runAsUser"] == 0
    assert security["capabilities"] == {
        "drop": ["ALL"],
        "add": ["CHOWN", "DAC_OVERRIDE", "FOWNER", "FSETID", "SETGID", "SETUID", "SETFCAP"],
    }
    assert set(security["capabilities"]["add"]) == set(k8s.KANIKO_CAPABILITIES)
    for never in ("SYS_ADMIN", "NET_RAW", "NET_ADMIN", "MKNOD", "SYS_CHROOT", "SYS_PTRACE"):
        assert never not in security["capabilities"]["add"]
    assert security["allowPrivilegeEscalation"] is False
    assert security["privileged"] is False
    assert security["seccompProfile"] == {"type": "RuntimeDefault"}
    assert spec["securityContext"] == {"seccompProfile": {"type": "RuntimeDefault"}}
    for field in ("hostNetwork", "hostPID", "hostIPC", "serviceAccountName"):
        assert field not in spec
    assert not [v for v in spec["volumes"] if "hostPath" in v]
    # Every step: the runtime's seccomp profile, no privilege escalation
    for step in steps(k8s.make_builder_job(build_target())).values():
        assert step["securityContext"]["seccompProfile"] == {"type": "RuntimeDefault"}
        assert step["securityContext"]["allowPrivilegeEscalation"] is False


def test_the_build_pod_reaches_dns_and_only_what_the_administrator_allows() -> None:
    # Given a build Job and its NetworkPolicy, owned by the Job
    target = build_target()
    job = k8s.make_builder_job(target)
    policy = k8s.make_build_network_policy(target, job=("gpudev-build-alice-gpu", "0b5e4f1d"))
    # Then it selects the Job's pod, and nothing else of gpudev's
    selected = policy["spec"]["podSelector"]["matchLabels"]
    assert selected.items() <= job["spec"]["template"]["metadata"]["labels"].items()
    assert selected[K_ROLE] == "build"
    assert policy["metadata"]["ownerReferences"] == [
        {
            "apiVersion": "batch/v1",
            "kind": "Job",
            "name": "gpudev-build-alice-gpu",
            "uid": "0b5e4f1d",
        }
    ]
    # And nothing reaches it; it reaches the cluster's DNS only unless more is allowed
    assert policy["spec"]["policyTypes"] == ["Ingress", "Egress"]
    assert policy["spec"]["ingress"] == []
    assert policy["spec"]["egress"] == list(k8s.DNS_EGRESS)
    (dns,) = k8s.DNS_EGRESS
    assert {(p["protocol"], p["port"]) for p in dns["ports"]} == {("UDP", 53), ("TCP", 53)}
    # When the administrator allows the registry and the package mirrors, those are added
    allowed = k8s.make_build_network_policy(build_target(egress=MIRRORS))
    assert allowed["spec"]["egress"] == [*k8s.DNS_EGRESS, *MIRRORS]
    assert "ownerReferences" not in allowed["metadata"]


def test_a_dev_pod_admits_only_gpudevs_server() -> None:
    # Given a dev container's objects
    plan = k8s.dev_container_objects(environment(), target())
    kinds = [o["kind"] for o in plan.objects]
    pod, policy = by_kind(plan)["Pod"], by_kind(plan)["NetworkPolicy"]
    # Then its NetworkPolicy is made before its pod, and selects that pod only
    assert kinds.index("NetworkPolicy") < kinds.index("Pod")
    assert policy["metadata"]["name"] == pod["metadata"]["name"]
    selected = policy["spec"]["podSelector"]["matchLabels"]
    assert selected == k8s.selector(target())
    assert selected.items() <= pod["metadata"]["labels"].items()
    # And it lets in gpudev's server only (pods labelled as it, by default), on any port
    assert policy["spec"]["policyTypes"] == ["Ingress"]
    assert policy["spec"]["ingress"] == [{"from": list(k8s.SERVER_PEERS)}]
    assert k8s.SERVER_PEERS == ({"podSelector": {"matchLabels": {K_ROLE: "server"}}},)
    assert pod["metadata"]["labels"][K_ROLE] != "server"
    # When the administrator names the server (another namespace, an address), those peers;
    # none: nothing gets in (a port-forward does not pass through the pod network)
    hub = k8s.make_network_policy(environment(), target(ingress_from=SERVER_IN_HUB))
    assert hub["spec"]["ingress"] == [{"from": list(SERVER_IN_HUB)}]
    closed = k8s.make_network_policy(environment(), target(ingress_from=()))
    assert closed["spec"]["ingress"] == []


@pytest.mark.parametrize(
    ("key", "value", "words"),
    [
        ("ingress_from", [{"podSelector": {"matchLabels": {"app": 1}}}], "label"),
        ("ingress_from", [{"ipBlock": {"cidr": "10.0.0.0/33"}}], "CIDR"),
        (
            "ingress_from",
            [{"ipBlock": {"cidr": "10.0.0.0/8", "except": ["11.0.0.0/16"]}}],
            "inside",
        ),
        (
            "ingress_from",
            [{"ipBlock": {"cidr": "10.0.0.0/8"}, "podSelector": {}}],
            "ipBlock or selectors",
        ),
        ("ingress_from", [{"hostNetwork": True}], "podSelector"),
        ("ingress_from", {"podSelector": {}}, "list"),
        (
            "build_egress",
            [{"to": [{"ipBlock": {"cidr": "0.0.0.0/0"}}], "ports": [{"port": 0}]}],
            "port",
        ),
        ("build_egress", [{"ports": [{"port": 443, "protocol": "ICMP"}]}], "protocol"),
        ("build_egress", [{"ports": [{"port": 8000, "endPort": 7000}]}], "endPort"),
        ("build_egress", [{"to": []}], "to"),
        ("build_egress", [{"from": [{"podSelector": {}}]}], "to"),
    ],
)
def test_a_bad_network_setting_of_a_cluster_is_refused_naming_it(
    key: str, value: Any, words: str
) -> None:
    with pytest.raises(ConfigError, match=words) as caught:
        HostSpec.parse("cluster", {"url": "k8s:///team-ml", key: value})
    assert f"c.HostPool.hosts['cluster']['{key}']" in caught.value.message


def test_network_settings_are_a_clusters_only_and_kept_as_configured() -> None:
    with pytest.raises(ConfigError, match="do not apply"):
        HostSpec.parse("gpu1", {"url": "ssh://me@gpu1", "ingress_from": []})
    spec = HostSpec.parse(
        "cluster",
        {
            "url": "k8s:///team-ml",
            "ingress_from": list(SERVER_IN_HUB),
            "build_egress": list(MIRRORS),
        },
    )
    assert spec.ingress_from == SERVER_IN_HUB
    assert spec.build_egress == MIRRORS
    assert HostSpec.parse("cluster", spec.to_config()) == spec
    plain = HostSpec.parse("cluster", "k8s:///team-ml")
    assert (plain.ingress_from, plain.build_egress) == (None, None)
    assert "ingress_from" not in plain.to_config()


def test_a_build_runs_on_the_node_of_the_workspace_with_the_snapshots_labels() -> None:
    job = k8s.make_builder_job(
        build_target(node="gpu-a100-1", labels={"org.opencontainers.image.description": "a b"})
    )
    spec = job["spec"]["template"]["spec"]
    terms = spec["affinity"]["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"]
    assert terms["nodeSelectorTerms"][0]["matchFields"] == [
        {"key": "metadata.name", "operator": "In", "values": ["gpu-a100-1"]}
    ]
    # a label is one argument (no shell reads it)
    args = steps(job)["build"]["args"]
    assert "--label=org.opencontainers.image.description=a b" in args


def test_the_registry_secret_holds_config_json_only_and_goes_with_its_job() -> None:
    secret = k8s.make_registry_secret(
        "alice-gpu",
        "team-ml",
        "alice",
        b'{"auths": {"r": {"auth": "eA=="}}}',
        "now",
        job=("gpudev-build-alice-gpu", "0b5e4f1d"),
    )
    assert secret["metadata"]["name"] == "gpudev-registry-alice-gpu"
    assert secret["metadata"]["ownerReferences"] == [
        {
            "apiVersion": "batch/v1",
            "kind": "Job",
            "name": "gpudev-build-alice-gpu",
            "uid": "0b5e4f1d",
        }
    ]
    assert base64.b64decode(secret["data"]["config.json"]) == b'{"auths": {"r": {"auth": "eA=="}}}'
    assert list(secret["data"]) == ["config.json"]


def test_the_role_grants_no_wildcard_and_only_reading_outside_the_namespace() -> None:
    objects = k8s.make_rbac("team-ml")
    for manifest in objects:
        for rule in manifest.get("rules", []):
            assert "*" not in rule["verbs"]
            assert "*" not in rule["resources"]
    cluster = [o for o in objects if o["kind"] == "ClusterRole"]
    assert [r["resources"] for r in cluster[0]["rules"]] == [["nodes"], ["pods"]]
    # NetworkPolicies: made, owned by their pod or Job (a patch), deleted; never listed
    (role,) = [o for o in objects if o["kind"] == "Role"]
    (policies,) = [r for r in role["rules"] if r["resources"] == ["networkpolicies"]]
    assert policies["apiGroups"] == ["networking.k8s.io"]
    assert policies["verbs"] == ["get", "create", "patch", "delete"]
    assert {v for r in cluster[0]["rules"] for v in r["verbs"]} == {"get", "list", "watch"}


# -- what a start on a Kubernetes host would create (``containers/plan.py``) -------------------


def _spec() -> HostSpec:
    return HostSpec.parse("cluster", "k8s://kind-dev/team-ml")


def _pod_target(env: Environment, request: StartRequest) -> tuple[k8s.PodTarget, list[str]]:
    return planning.pod_target(
        env,
        request,
        _spec(),
        name="alice-gpu",
        owner="alice",
        command=("sleep", "infinity"),
        server_id="3f1c",
        created="2026-11-25T08:00:00Z",
    )


def test_the_environments_gpus_become_a_count_on_nodes_of_the_model_and_memory() -> None:
    env = environment(
        gpu=GPURequirement(
            mode="required", count=1, model="NVIDIA-A100-SXM4-80GB", min_memory_mib=40960
        )
    )
    pod_target, _ = _pod_target(env, StartRequest(environment="gpu", gpus=2))
    assert pod_target.namespace == "team-ml"
    plan = planning.pod_plan(env, pod_target, Confinement(), _spec(), [])
    pod = by_kind(k8s.Plan(plan["objects"]))["Pod"]
    valid(pod, "1.34.0")
    assert pod["spec"]["containers"][0]["resources"]["limits"]["nvidia.com/gpu"] == "2"
    assert pod["spec"]["nodeSelector"] == {k8s.PRODUCT_LABEL: "NVIDIA-A100-SXM4-80GB"}
    terms = pod["spec"]["affinity"]["nodeAffinity"][
        "requiredDuringSchedulingIgnoredDuringExecution"
    ]["nodeSelectorTerms"]
    assert terms == [
        {"matchExpressions": [{"key": k8s.MEMORY_LABEL, "operator": "Gt", "values": ["40959"]}]}
    ]


def test_gpu_uuids_are_refused_on_a_cluster_and_a_built_image_is_noted() -> None:
    with pytest.raises(BadRequest, match="the scheduler picks the GPUs"):
        _pod_target(environment(), StartRequest(environment="gpu", gpu_uuids=("GPU-1",)))
    built = environment(
        image=None,
        build=BuildSpec(
            dockerfile=Path("/w/Dockerfile"), context=Path("/w"), dockerfile_sha256="0" * 64
        ),
    )
    _, notes = _pod_target(built, StartRequest(environment="gpu"))
    assert any("registry it reaches" in note for note in notes)


def test_the_hosts_peers_are_the_ones_a_dev_pod_admits() -> None:
    spec = HostSpec.parse(
        "cluster", {"url": "k8s://kind-dev/team-ml", "ingress_from": list(SERVER_IN_HUB)}
    )
    pod_target, _ = planning.pod_target(
        environment(),
        StartRequest(environment="gpu"),
        spec,
        name="alice-gpu",
        owner="alice",
        command=("sleep", "infinity"),
        server_id="3f1c",
        created="2026-11-25T08:00:00Z",
    )
    plan = planning.pod_plan(environment(), pod_target, Confinement(), spec, [])
    policy = by_kind(k8s.Plan(plan["objects"]))["NetworkPolicy"]
    assert policy["spec"]["ingress"] == [{"from": list(SERVER_IN_HUB)}]
    valid(policy, "1.34.0")


def test_a_cpu_start_asks_for_no_gpu() -> None:
    pod_target, _ = _pod_target(environment(), StartRequest(environment="gpu"))
    assert pod_target.gpus.count == 0
