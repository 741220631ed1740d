"""The Kubernetes objects of a dev container, built from plain values.

What ``containers/create.py`` is for the engine, this is for a cluster: pure functions from the
environment (its devcontainer.json), where the dev container goes (``PodTarget``) and the
administrator's confinement to manifests (plain dicts, as ``kubectl apply`` reads them). No API
call, no configuration object, no file read, so every rule is tested without a cluster and each
manifest is checked against the Kubernetes OpenAPI schemas (``tests/unit/test_k8s_objects.py``).

- a dev container is a Pod (``make_pod``) that keeps running (kernels and terminals are started
  in it by exec), with its workspace on a PersistentVolumeClaim (``make_workspace_claim``: it
  outlives the pod, so idle reclaim deletes the pod and keeps the work) and a headless Service
  (``make_service``: a stable DNS name, and the forwarded ports by name);
- GPUs are asked of the scheduler, which is the authority: an extended resource
  (``nvidia.com/gpu`` or a MIG profile such as ``nvidia.com/mig-1g.10gb``) in the container's
  limits, or with Dynamic Resource Allocation a ResourceClaim (``make_resource_claim``) naming a
  device class and, for a model, a CEL selector;
- nothing reaches a dev container's pod but gpudev's server (``make_network_policy``: an
  ingress NetworkPolicy, made before the pod and then owned by it);
- a snapshot is built in the cluster by a Job (``make_builder_job``: gpudev's archive of the
  build context copied out of the workspace claim and checked against its digest by a step of
  gpudev's own, then kaniko with only the capabilities it needs, then crane pushing with a
  registry Secret), whose pod reaches the cluster's DNS and only the registries and mirrors
  allowed (``make_build_network_policy``);
- gpudev's server account gets a namespaced Role (``make_rbac``): what it creates and nothing
  more. A dev container never gets an API token (``automountServiceAccountToken: false``).
"""

from __future__ import annotations

import base64
import copy
import hashlib
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from ..engine.cluster import GPU_RESOURCE_RE
from ..engine.spec import egress_rule, network_peer
from ..environments import Environment
from ..errors import BadRequest
from ..labels import (
    A_CREATED,
    A_ENV,
    A_IMAGE,
    A_LEDGER,
    A_NAME,
    A_OWNER,
    A_PORTS,
    A_PROCESS,
    GPU_MEMORY_LABEL,
    GPU_PRODUCT_LABEL,
    K_ENV,
    K_KERNEL,
    K_MANAGED,
    K_NAME,
    K_OWNER,
    K_ROLE,
    K_SERVER,
)

#: The GPU resource of NVIDIA's device plugin; MIG profiles are ``nvidia.com/mig-<profile>``.
GPU_RESOURCE = "nvidia.com/gpu"
PRODUCT_LABEL = GPU_PRODUCT_LABEL
MEMORY_LABEL = GPU_MEMORY_LABEL
#: The device class NVIDIA's DRA driver serves.
DRA_DEVICE_CLASS = "gpu.nvidia.com"
#: The ResourceClaim API versions gpudev can write (the newest the cluster serves is used).
DRA_API_VERSIONS = ("resource.k8s.io/v1", "resource.k8s.io/v1beta2", "resource.k8s.io/v1beta1")
KANIKO_IMAGE = "gcr.io/kaniko-project/executor:v1.23.2"
#: What pushes the built image (a shell in ``/busybox``, and ``crane``; runs nothing of the image).
CRANE_IMAGE = "gcr.io/go-containerregistry/crane:debug"
#: Where the build step writes the image for the push step (a scratch volume of the pod).
BUILD_TARBALL = "/image/image.tar"
#: The capabilities kaniko keeps; every other is dropped. It runs as root in its own container,
#: where it unpacks the base image and runs the Dockerfile's steps, and needs: CHOWN (files get
#: the owners of the layers, of COPY --chown, of what RUN steps chown), DAC_OVERRIDE (it reads
#: and writes files whatever their modes, e.g. a 0555 folder of a layer), FOWNER (it sets the
#: modes and times of files it gave to another owner), FSETID (setuid and setgid bits survive
#: that), SETGID and SETUID (RUN steps after USER, apt's download sandbox, su), SETFCAP (the file
#: capabilities of layers, e.g. ping's). Dropped from Docker's defaults: NET_RAW,
#: NET_BIND_SERVICE, MKNOD, SYS_CHROOT, KILL, AUDIT_WRITE, SETPCAP.
KANIKO_CAPABILITIES = ("CHOWN", "DAC_OVERRIDE", "FOWNER", "FSETID", "SETGID", "SETUID", "SETFCAP")
#: Where the build pod's own volume with the checked build context is mounted: its context
#: step writes there, kaniko reads it (read-only).
CONTEXT_MOUNT = "/gpudev-context"
#: The context step's exit code when the archive in the claim is not the one gpudev wrote.
CONTEXT_CHANGED = 65
#: The context step (a POSIX shell script: busybox's shell and tools in crane's debug image;
#: its arguments: the archive in the claim, gpudev's digest of it, its size, the volume to
#: unpack into): at most SIZE bytes of the archive copied into the build pod's own volume, the
#: copy's digest compared with gpudev's (the dev container may have changed the claim's since
#: gpudev wrote it), and only then unpacked; the copy removed.
CONTEXT_SCRIPT = f"""set -eu
head -c "$3" "$1" > "$4/context.tar"
got="sha256:$(sha256sum "$4/context.tar" | cut -d ' ' -f 1)"
if [ "$got" != "$2" ]; then
  echo "gpudev: the build context in the workspace claim is not the one gpudev wrote \
($got, not $2): nothing is built" >&2
  exit {CONTEXT_CHANGED}
fi
mkdir "$4/build"
tar -x -f "$4/context.tar" -C "$4/build"
rm "$4/context.tar"
"""
#: Who reaches a dev container's pod unless the host says (``ingress_from``): pods of its
#: namespace labelled as gpudev's server.
SERVER_PEERS: tuple[dict[str, Any], ...] = ({"podSelector": {"matchLabels": {K_ROLE: "server"}}},)
#: What a build's pod always reaches: the cluster's DNS (kube-dns or CoreDNS, labelled
#: ``k8s-app=kube-dns`` in kube-system), to find its registries by name.
DNS_EGRESS: tuple[dict[str, Any], ...] = (
    {
        "to": [
            {
                "namespaceSelector": {
                    "matchLabels": {"kubernetes.io/metadata.name": "kube-system"}
                },
                "podSelector": {"matchLabels": {"k8s-app": "kube-dns"}},
            }
        ],
        "ports": [{"protocol": "UDP", "port": 53}, {"protocol": "TCP", "port": 53}],
    },
)

_LABEL_VALUE_RE = re.compile(r"^([A-Za-z0-9]([-A-Za-z0-9_.]{0,61}[A-Za-z0-9])?)?\Z")
_NAMESPACE_RE = re.compile(r"^[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?\Z")
_QUANTITY_RE = re.compile(r"^[0-9]+(\.[0-9]+)?(Ki|Mi|Gi|Ti|Pi|k|M|G|T|P)?\Z")
_CEL_STRING_RE = re.compile(r"^[A-Za-z0-9 ._()/-]{1,128}\Z")
_DIGEST_RE = re.compile(r"^sha256:[0-9a-f]{64}\Z")
_WORKSPACE_MOUNT = "workspace"


@dataclass(frozen=True)
class GPUAsk:
    """The GPUs a dev container asks the scheduler for: ``count`` of ``resource`` (an extended
    resource: whole GPUs or a MIG profile), or with ``claim`` a DRA ResourceClaim of ``count``
    devices of ``device_class``. ``product`` keeps it to nodes (or devices) of that model."""

    count: int = 0
    resource: str = GPU_RESOURCE
    product: str | None = None
    #: The least memory of each GPU, in MiB (the node's ``nvidia.com/gpu.memory`` label).
    min_memory_mib: int | None = None
    claim: bool = False
    device_class: str = DRA_DEVICE_CLASS

    def check(self) -> None:
        if self.count < 0:
            raise BadRequest(f"A GPU count cannot be negative ({self.count})")
        if not GPU_RESOURCE_RE.match(self.resource):
            raise BadRequest(
                f"{self.resource!r} is not a GPU resource: use nvidia.com/gpu or a MIG profile "
                "such as nvidia.com/mig-1g.10gb"
            )
        if self.product is not None and not _CEL_STRING_RE.match(self.product):
            raise BadRequest(
                f"{self.product[:80]!r} is not a GPU product name (letters, digits, spaces and "
                "'._()/-', as nvidia.com/gpu.product labels them)"
            )
        if self.min_memory_mib is not None and self.min_memory_mib < 0:
            raise BadRequest(f"A GPU memory cannot be negative ({self.min_memory_mib} MiB)")
        if self.claim and self.resource != GPU_RESOURCE:
            raise BadRequest("A MIG profile is asked as a resource, not with a DRA claim")


@dataclass(frozen=True)
class PodTarget:
    """One dev container to create in a cluster: who, where, with which GPUs and storage."""

    #: gpudev's name of the dev container (``k8s_name`` makes the objects' names from it).
    name: str
    owner: str
    namespace: str
    image: str
    #: What keeps the pod running (kernels and terminals are exec'd into it).
    command: tuple[str, ...]
    server_id: str
    #: ISO 8601 UTC.
    created: str
    gpus: GPUAsk = field(default_factory=GPUAsk)
    kernel_id: str | None = None
    #: ``"<machine>:<pid>"`` of the server process and its lease ledger's id (a kernel's own
    #: pod only).
    process: str = ""
    ledger: str = ""
    #: The user and group the dev container runs as (never root on a cluster).
    run_as_user: int = 1000
    run_as_group: int = 1000
    #: The workspace claim's size and storage class (``None``: the cluster's default).
    workspace_size: str = "10Gi"
    storage_class: str | None = None
    image_pull_secrets: tuple[str, ...] = ()
    #: Variables added to the environment's ``containerEnv``.
    extra_env: Mapping[str, str] = field(default_factory=dict)
    #: The ResourceClaim API version the cluster serves (``DRA_API_VERSIONS``).
    dra_api_version: str = DRA_API_VERSIONS[0]
    #: The NetworkPolicy peers its pod admits (the host's ``ingress_from``; ``None``:
    #: ``SERVER_PEERS``; empty: none).
    ingress_from: tuple[Mapping[str, Any], ...] | None = None


@dataclass(frozen=True)
class PodConfinement:
    """The administrator's limits that apply on a cluster (``c.DevContainers``' memory and CPU
    limits; the seccomp profile is the runtime's default there, capabilities are all dropped)."""

    memory_bytes: int | None = None
    nano_cpus: int | None = None


@dataclass
class Plan:
    """The objects of one dev container, in the order they are created, and what of the
    environment a cluster does not do (shown to the user, never silently dropped)."""

    objects: list[dict[str, Any]]
    notes: list[str] = field(default_factory=list)

    def to_json(self) -> dict[str, Any]:
        return {"objects": [dict(o) for o in self.objects], "notes": list(self.notes)}


def k8s_name(name: str, prefix: str = "gpudev-") -> str:
    """An object name (a DNS label: at most 63 lowercase letters, digits and '-', starting with
    a letter) for a gpudev name; two different names never give the same one (a short hash is
    added whenever the name had to be changed)."""
    plain = re.sub(r"[^a-z0-9-]+", "-", name.lower()).strip("-")
    candidate = f"{prefix}{plain}"
    if candidate == f"{prefix}{name}" and len(candidate) <= 63:
        return candidate
    digest = hashlib.sha256(name.encode()).hexdigest()[:8]
    return f"{candidate[: 63 - 9].rstrip('-')}-{digest}"


def label_value(value: str) -> str:
    """``value`` when it can be a label value, else a stable stand-in (``h-`` and a hash): the
    real value is in an annotation."""
    if _LABEL_VALUE_RE.match(value):
        return value
    return "h-" + hashlib.sha256(value.encode()).hexdigest()[:40]


def selector(target: PodTarget) -> dict[str, str]:
    """The labels that select a dev container's pod (its Service uses them)."""
    return {K_MANAGED: "1", K_NAME: label_value(target.name)}


def _metadata(target: PodTarget, env: Environment, role: str, name: str) -> dict[str, Any]:
    labels = {
        **selector(target),
        K_OWNER: label_value(target.owner),
        K_ENV: label_value(env.name),
        K_SERVER: label_value(target.server_id),
        K_ROLE: role,
    }
    if target.kernel_id:
        labels[K_KERNEL] = label_value(target.kernel_id)
    return {
        "name": name,
        "namespace": target.namespace,
        "labels": labels,
        "annotations": {
            A_NAME: target.name,
            A_OWNER: target.owner,
            A_CREATED: target.created,
            A_IMAGE: target.image,
            A_ENV: env.name,
            A_PORTS: ",".join(str(p) for p in env.forward_ports),
            **({A_PROCESS: target.process} if target.kernel_id and target.process else {}),
            **({A_LEDGER: target.ledger} if target.kernel_id and target.ledger else {}),
        },
    }


def _check_target(target: PodTarget) -> None:
    if not _NAMESPACE_RE.match(target.namespace):
        raise BadRequest(f"{target.namespace[:80]!r} is not a Kubernetes namespace name")
    if not target.command:
        raise BadRequest("A dev container needs a command that keeps it running")
    if target.run_as_user <= 0 or target.run_as_group < 0:
        raise BadRequest("A dev container on a cluster runs as a user other than root (uid > 0)")
    if not _QUANTITY_RE.match(target.workspace_size):
        raise BadRequest(f"{target.workspace_size[:40]!r} is not a storage size (e.g. 10Gi)")
    if target.dra_api_version not in DRA_API_VERSIONS:
        raise BadRequest(
            f"{target.dra_api_version!r}: gpudev writes ResourceClaims of "
            + ", ".join(DRA_API_VERSIONS)
        )
    target.gpus.check()


def _quantity_cpu(nano_cpus: int) -> str:
    return f"{max(1, nano_cpus // 1_000_000)}m"


def _limits(env: Environment, target: PodTarget, confinement: PodConfinement) -> dict[str, str]:
    """Memory and CPU limits (the tighter of the environment's and the administrator's) and
    the GPUs as an extended resource."""
    limits: dict[str, str] = {}
    memory = [m for m in (env.run_options.memory_bytes, confinement.memory_bytes) if m]
    if memory:
        limits["memory"] = str(min(memory))
    cpus = [c for c in (env.run_options.nano_cpus, confinement.nano_cpus) if c]
    if cpus:
        limits["cpu"] = _quantity_cpu(min(cpus))
    if target.gpus.count and not target.gpus.claim:
        limits[target.gpus.resource] = str(target.gpus.count)
    return limits


def make_pod(
    env: Environment, target: PodTarget, confinement: PodConfinement | None = None
) -> dict[str, Any]:
    """The dev container's Pod: one container of the environment's image running
    ``target.command``, as a non-root user, no privilege escalation, every capability dropped,
    the runtime's default seccomp profile, no API token, the workspace claim at the
    environment's workspace folder, ``/dev/shm`` sized as ``--shm-size`` says, the GPUs as
    limits (or a claim), and never restarted (a stopped dev container stays stopped)."""
    _check_target(target)
    confinement = confinement or PodConfinement()
    name = k8s_name(target.name)
    environment = dict(env.container_env)
    environment.update(target.extra_env)
    # The device plugin sets NVIDIA_VISIBLE_DEVICES to the GPUs it allocated: never overridden.
    environment.pop("NVIDIA_VISIBLE_DEVICES", None)
    environment["CUDA_DEVICE_ORDER"] = "PCI_BUS_ID"
    limits = _limits(env, target, confinement)
    resources: dict[str, Any] = {"limits": limits} if limits else {}
    container: dict[str, Any] = {
        "name": "dev",
        "image": target.image,
        "imagePullPolicy": "IfNotPresent",
        "command": list(target.command),
        "workingDir": env.workspace_folder,
        "env": [{"name": k, "value": v} for k, v in sorted(environment.items())],
        "ports": [
            {"name": f"port-{port}", "containerPort": port, "protocol": "TCP"}
            for port in env.forward_ports
        ],
        "securityContext": {
            "allowPrivilegeEscalation": False,
            "privileged": False,
            "capabilities": {"drop": ["ALL"]},
            "runAsNonRoot": True,
        },
        "volumeMounts": [{"name": _WORKSPACE_MOUNT, "mountPath": env.workspace_folder}],
    }
    volumes: list[dict[str, Any]] = [
        {
            "name": _WORKSPACE_MOUNT,
            "persistentVolumeClaim": {"claimName": workspace_claim_name(target)},
        }
    ]
    if env.run_options.shm_size_bytes:
        shm = "/dev/shm"  # noqa: S108 - the container's shared memory, sized as --shm-size
        container["volumeMounts"].append({"name": "shm", "mountPath": shm})
        volumes.append(
            {
                "name": "shm",
                "emptyDir": {"medium": "Memory", "sizeLimit": str(env.run_options.shm_size_bytes)},
            }
        )
    spec: dict[str, Any] = {
        "restartPolicy": "Never",
        "automountServiceAccountToken": False,
        "enableServiceLinks": False,
        # The pause container is PID 1: it reaps what kernels and commands leave behind (the
        # keep-alive command does not), so a kernel that ended is seen as ended.
        "shareProcessNamespace": True,
        "hostname": name,
        "subdomain": name,
        "terminationGracePeriodSeconds": 10,
        "securityContext": {
            "runAsUser": target.run_as_user,
            "runAsGroup": target.run_as_group,
            "fsGroup": target.run_as_group,
            "runAsNonRoot": True,
            "seccompProfile": {"type": "RuntimeDefault"},
        },
        "containers": [container],
        "volumes": volumes,
    }
    if target.gpus.count and target.gpus.claim:
        resources["claims"] = [{"name": "gpus"}]
        spec["resourceClaims"] = [
            {"name": "gpus", "resourceClaimName": resource_claim_name(target)}
        ]
    elif target.gpus.count and target.gpus.product:
        spec["nodeSelector"] = {PRODUCT_LABEL: target.gpus.product}
    if target.gpus.count and not target.gpus.claim and target.gpus.min_memory_mib:
        at_least = {
            "key": MEMORY_LABEL,
            "operator": "Gt",
            "values": [str(target.gpus.min_memory_mib - 1)],
        }
        spec["affinity"] = {
            "nodeAffinity": {
                "requiredDuringSchedulingIgnoredDuringExecution": {
                    "nodeSelectorTerms": [{"matchExpressions": [at_least]}]
                }
            }
        }
    if target.gpus.count and not target.gpus.claim:
        # GPU nodes are often tainted so that only pods asking for GPUs land there.
        spec["tolerations"] = [{"key": GPU_RESOURCE, "operator": "Exists", "effect": "NoSchedule"}]
    if resources:
        container["resources"] = resources
    if target.image_pull_secrets:
        spec["imagePullSecrets"] = [{"name": s} for s in target.image_pull_secrets]
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": _metadata(target, env, "dev-container", name),
        "spec": spec,
    }


def workspace_claim_name(target: PodTarget) -> str:
    return k8s_name(target.name, "gpudev-ws-")


def resource_claim_name(target: PodTarget) -> str:
    return k8s_name(target.name, "gpudev-gpus-")


def make_workspace_claim(env: Environment, target: PodTarget) -> dict[str, Any]:
    """The workspace's PersistentVolumeClaim: one writer, kept when the pod is deleted."""
    _check_target(target)
    spec: dict[str, Any] = {
        "accessModes": ["ReadWriteOnce"],
        "resources": {"requests": {"storage": target.workspace_size}},
    }
    if target.storage_class:
        spec["storageClassName"] = target.storage_class
    return {
        "apiVersion": "v1",
        "kind": "PersistentVolumeClaim",
        "metadata": _metadata(target, env, "workspace", workspace_claim_name(target)),
        "spec": spec,
    }


def make_service(env: Environment, target: PodTarget) -> dict[str, Any]:
    """A headless Service for the pod: its DNS name (``NAME.NAME.NAMESPACE.svc``) and its
    forwarded ports by name. Kernels are reached at the pod's address (their ports are chosen
    per kernel); nothing is published outside the cluster."""
    _check_target(target)
    spec: dict[str, Any] = {
        "clusterIP": "None",
        "selector": selector(target),
        "publishNotReadyAddresses": True,
    }
    if env.forward_ports:
        spec["ports"] = [
            {"name": f"port-{p}", "port": p, "targetPort": p, "protocol": "TCP"}
            for p in env.forward_ports
        ]
    return {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": _metadata(target, env, "service", k8s_name(target.name)),
        "spec": spec,
    }


def make_resource_claim(env: Environment, target: PodTarget) -> dict[str, Any]:
    """A DRA ResourceClaim of ``target.gpus.count`` devices of its device class (``product``:
    only devices whose ``productName`` attribute is that), in the API version the cluster
    serves (v1 moved a request's fields under ``exactly``)."""
    _check_target(target)
    gpus = target.gpus
    if not gpus.claim or gpus.count < 1:
        raise BadRequest("A ResourceClaim is made only for GPUs asked with a DRA claim")
    request: dict[str, Any] = {
        "deviceClassName": gpus.device_class,
        "allocationMode": "ExactCount",
        "count": gpus.count,
    }
    if gpus.product:
        expression = f"device.attributes['{gpus.device_class}'].productName == '{gpus.product}'"
        request["selectors"] = [{"cel": {"expression": expression}}]
    if target.dra_api_version == "resource.k8s.io/v1beta1":
        requests = [{"name": "gpus", **request}]
    else:
        requests = [{"name": "gpus", "exactly": request}]
    return {
        "apiVersion": target.dra_api_version,
        "kind": "ResourceClaim",
        "metadata": _metadata(target, env, "gpus", resource_claim_name(target)),
        "spec": {"devices": {"requests": requests}},
    }


def make_network_policy(env: Environment, target: PodTarget) -> dict[str, Any]:
    """The dev container pod's NetworkPolicy: nothing reaches the pod but gpudev's server
    (``target.ingress_from``, by default ``SERVER_PEERS``), on any port (a kernel's ports are
    chosen per kernel). Made before the pod, so that the pod is never reachable without it, and
    then owned by the pod (``containers/pods.py``): it goes with it. A port-forward through the
    API server does not cross the pod network: it needs no peer."""
    _check_target(target)
    if target.ingress_from is None:
        peers = copy.deepcopy(list(SERVER_PEERS))
    else:
        peers = [
            network_peer(f"ingress_from[{i}]", peer) for i, peer in enumerate(target.ingress_from)
        ]
    return {
        "apiVersion": "networking.k8s.io/v1",
        "kind": "NetworkPolicy",
        "metadata": _metadata(target, env, "network", k8s_name(target.name)),
        "spec": {
            "podSelector": {"matchLabels": selector(target)},
            "policyTypes": ["Ingress"],
            # no rule: nothing gets in (a rule with no peers would let everything in)
            "ingress": [{"from": peers}] if peers else [],
        },
    }


def dev_container_objects(
    env: Environment, target: PodTarget, confinement: PodConfinement | None = None
) -> Plan:
    """Every object of a dev container, in creation order (the claims before the pod that
    uses them), and notes on what of the environment a cluster does not do."""
    notes: list[str] = []
    options = env.run_options
    if options.network_mode == "host" or options.pid_mode == "host" or options.ipc_mode == "host":
        raise BadRequest(
            f"The environment {env.name!r} asks for the host's network, process or IPC "
            "namespace: a dev container on a cluster never gets them"
        )
    if options.ulimits:
        notes.append(
            "ulimits (" + ", ".join(n for n, _, _ in options.ulimits) + ") are the node's on a "
            "cluster: Kubernetes has no per-pod setting"
        )
    if env.mounts:
        notes.append(
            f"{len(env.mounts)} declared mount(s) of host folders are not made on a cluster "
            "(only the workspace claim is mounted)"
        )
    objects = [make_workspace_claim(env, target)]
    if target.gpus.count and target.gpus.claim:
        objects.append(make_resource_claim(env, target))
    objects.append(make_network_policy(env, target))
    objects.append(make_pod(env, target, confinement))
    objects.append(make_service(env, target))
    return Plan(objects, notes)


@dataclass(frozen=True)
class BuildTarget:
    """A snapshot build in the cluster: gpudev's archive of the build context in the dev
    container's workspace claim (``context_archive``, relative to the claim's root; its digest
    and size, which the build checks its copy against), the Dockerfile's path in that context,
    the image to push, and the Secret holding the registry credentials (``registry_config``: the
    Secret's name; its ``config.json`` key is what ``docker login`` writes)."""

    name: str
    owner: str
    namespace: str
    workspace_claim: str
    context_archive: str
    #: ``sha256:`` and the hex digest of the archive gpudev wrote.
    context_digest: str
    context_size: int
    dockerfile: str
    destination: str
    registry_config: str
    created: str
    deadline_seconds: int = 3600
    image: str = KANIKO_IMAGE
    push_image: str = CRANE_IMAGE
    #: What copies the context out of the claim and checks it: an image of gpudev's choosing
    #: with a POSIX shell, head, sha256sum, cut and tar in /busybox (crane's debug image, the
    #: push step's), never the dev container's.
    context_image: str = CRANE_IMAGE
    #: The user and group the context step reads the claim as: the dev container's (not root).
    run_as: tuple[int, int] = (1000, 1000)
    #: The node the dev container's pod runs on: a ``ReadWriteOnce`` workspace claim is
    #: mounted on one node only, so the build runs there too (``None``: any node).
    node: str | None = None
    #: Labels the pushed image carries (``--label``).
    labels: Mapping[str, str] = field(default_factory=dict)
    #: Egress rules of its pod besides the cluster's DNS (the host's ``build_egress``: the
    #: registries and package mirrors); none: DNS only.
    egress: tuple[Mapping[str, Any], ...] = ()


def _relative_path(where: str, path: str) -> str:
    """``path`` when it is ``.`` or a relative path of plain names (no ``..``, no control or
    quoting characters)."""
    if path == ".":
        return path
    parts = path.split("/")
    if (
        path.startswith("/")
        or any(p in ("", ".", "..") for p in parts)
        or not re.match(r"^[A-Za-z0-9._/@+-]{1,1024}\Z", path)
    ):
        raise BadRequest(f"{where} {path[:80]!r} must be a plain path inside the workspace")
    return path


def _build_labels(target: BuildTarget) -> dict[str, str]:
    """The labels of a build's objects and its pod (what its NetworkPolicy selects)."""
    return {
        K_MANAGED: "1",
        K_NAME: label_value(target.name),
        K_ROLE: "build",
        K_OWNER: label_value(target.owner),
    }


def _confined(**more: Any) -> dict[str, Any]:
    """A build step's security context: no privilege, the runtime's seccomp profile, every
    capability dropped unless ``more`` says."""
    return {
        "allowPrivilegeEscalation": False,
        "privileged": False,
        "capabilities": {"drop": ["ALL"]},
        "seccompProfile": {"type": "RuntimeDefault"},
        **more,
    }


def make_builder_job(target: BuildTarget) -> dict[str, Any]:
    """A Job building the patched Dockerfile and pushing the image, in three steps, none with
    an API token, no retry, removed an hour after it ends:

    1. ``context`` (an init container of gpudev's image, never one the dev container could
       have changed; as the dev container's user, no capability, read-only root): copies
       gpudev's archive of the build context out of the workspace claim (read-only) into a
       volume of the build pod's own, compares the copy's digest with gpudev's and unpacks it;
       a context the dev container changed meanwhile ends the build (``CONTEXT_CHANGED``);
    2. ``build``: kaniko builds from that checked copy (read-only; the claim is not mounted),
       writes the image as a tarball to a scratch volume, pushes nothing, holds no
       credentials. It unpacks the base image into its own container, so it runs as root
       there, with ``KANIKO_CAPABILITIES`` only, no privilege escalation, the runtime's seccomp
       profile;
    3. ``push``: crane, which runs nothing of the image, pushes that tarball with the
       credentials of the Secret and writes the pushed reference to the termination log.

    Its pod reaches the cluster's DNS and what ``target.egress`` allows only
    (``make_build_network_policy``)."""
    if not _NAMESPACE_RE.match(target.namespace):
        raise BadRequest(f"{target.namespace[:80]!r} is not a Kubernetes namespace name")
    archive = _relative_path("The build context", target.context_archive)
    dockerfile = _relative_path("The Dockerfile", target.dockerfile)
    if not _DIGEST_RE.match(target.context_digest):
        raise BadRequest("The build context's digest must be sha256: and 64 hex digits")
    if target.context_size < 1:
        raise BadRequest("The build context is empty")
    uid, gid = target.run_as
    if uid <= 0 or gid < 0:
        raise BadRequest("The build reads the workspace as the dev container's user, not root")
    name = k8s_name(target.name, "gpudev-build-")
    labels = _build_labels(target)
    built = f"{CONTEXT_MOUNT}/build"
    pod_spec: dict[str, Any] = {
        "restartPolicy": "Never",
        "automountServiceAccountToken": False,
        "enableServiceLinks": False,
        "securityContext": {"seccompProfile": {"type": "RuntimeDefault"}},
        "initContainers": [
            {
                "name": "context",
                "image": target.context_image,
                "command": ["/busybox/sh", "-c", CONTEXT_SCRIPT],
                "args": [
                    "context",
                    f"/workspace/{archive}",
                    target.context_digest,
                    str(target.context_size),
                    CONTEXT_MOUNT,
                ],
                "securityContext": _confined(
                    runAsUser=uid,
                    runAsGroup=gid,
                    runAsNonRoot=True,
                    readOnlyRootFilesystem=True,
                ),
                "volumeMounts": [
                    {"name": "workspace", "mountPath": "/workspace", "readOnly": True},
                    {"name": "context", "mountPath": CONTEXT_MOUNT},
                ],
            },
            {
                "name": "build",
                "image": target.image,
                "args": [
                    f"--context=dir://{built}",
                    f"--dockerfile={built}/{dockerfile}",
                    f"--destination={target.destination}",
                    "--no-push",
                    f"--tar-path={BUILD_TARBALL}",
                    "--snapshot-mode=redo",
                    "--single-snapshot",
                    *(f"--label={key}={value}" for key, value in sorted(target.labels.items())),
                ],
                "securityContext": _confined(
                    runAsUser=0,
                    capabilities={"drop": ["ALL"], "add": list(KANIKO_CAPABILITIES)},
                ),
                "volumeMounts": [
                    {"name": "context", "mountPath": CONTEXT_MOUNT, "readOnly": True},
                    {"name": "image", "mountPath": "/image"},
                ],
            },
        ],
        "containers": [
            {
                "name": "push",
                "image": target.push_image,
                # the pushed reference (with its digest) as the pod's termination message
                "command": ["/busybox/sh", "-c", 'crane push "$1" "$2" > /dev/termination-log'],
                "args": ["push", BUILD_TARBALL, target.destination],
                "env": [{"name": "DOCKER_CONFIG", "value": "/registry"}],
                "securityContext": _confined(runAsNonRoot=True, runAsUser=65532),
                "volumeMounts": [
                    {"name": "image", "mountPath": "/image", "readOnly": True},
                    {"name": "registry", "mountPath": "/registry", "readOnly": True},
                ],
            }
        ],
        "volumes": [
            {
                "name": "workspace",
                "persistentVolumeClaim": {"claimName": target.workspace_claim, "readOnly": True},
            },
            # the archive and its unpacked copy
            {
                "name": "context",
                "emptyDir": {"sizeLimit": str(2 * target.context_size + (1 << 20))},
            },
            {"name": "image", "emptyDir": {}},
            {
                "name": "registry",
                "secret": {
                    "secretName": target.registry_config,
                    "items": [{"key": "config.json", "path": "config.json"}],
                },
            },
        ],
    }
    if target.node:  # a ReadWriteOnce claim is mounted on one node: the dev container's
        pod_spec["affinity"] = {
            "nodeAffinity": {
                "requiredDuringSchedulingIgnoredDuringExecution": {
                    "nodeSelectorTerms": [
                        {
                            "matchFields": [
                                {"key": "metadata.name", "operator": "In", "values": [target.node]}
                            ]
                        }
                    ]
                }
            }
        }
    return {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {
            "name": name,
            "namespace": target.namespace,
            "labels": labels,
            "annotations": {A_NAME: target.name, A_OWNER: target.owner, A_CREATED: target.created},
        },
        "spec": {
            "backoffLimit": 0,
            "activeDeadlineSeconds": target.deadline_seconds,
            "ttlSecondsAfterFinished": 3600,
            "template": {"metadata": {"labels": labels}, "spec": pod_spec},
        },
    }


def make_build_network_policy(
    target: BuildTarget, *, job: tuple[str, str] | None = None
) -> dict[str, Any]:
    """The NetworkPolicy of a build's pod: nothing reaches it, and it reaches the cluster's
    DNS (``DNS_EGRESS``) and what ``target.egress`` allows (the registries it pulls from and
    pushes to, the package mirrors its ``RUN`` steps use), nothing else. ``job``: the build
    Job's name and uid, its owner (it goes with the Job). Made after the Job and before the
    registry Secret, which its pod waits for: the pod never runs without it."""
    if not _NAMESPACE_RE.match(target.namespace):
        raise BadRequest(f"{target.namespace[:80]!r} is not a Kubernetes namespace name")
    labels = _build_labels(target)
    metadata: dict[str, Any] = {
        "name": k8s_name(target.name, "gpudev-build-"),
        "namespace": target.namespace,
        "labels": labels,
        "annotations": {A_NAME: target.name, A_OWNER: target.owner, A_CREATED: target.created},
    }
    if job is not None:
        metadata["ownerReferences"] = [
            {"apiVersion": "batch/v1", "kind": "Job", "name": job[0], "uid": job[1]}
        ]
    allowed = [egress_rule(f"build_egress[{i}]", rule) for i, rule in enumerate(target.egress)]
    return {
        "apiVersion": "networking.k8s.io/v1",
        "kind": "NetworkPolicy",
        "metadata": metadata,
        "spec": {
            "podSelector": {
                "matchLabels": {key: labels[key] for key in (K_MANAGED, K_NAME, K_ROLE)}
            },
            "policyTypes": ["Ingress", "Egress"],
            "ingress": [],
            "egress": [*copy.deepcopy(list(DNS_EGRESS)), *allowed],
        },
    }


def make_registry_secret(
    name: str,
    namespace: str,
    owner: str,
    config_json: bytes,
    created: str,
    *,
    job: tuple[str, str] | None = None,
) -> dict[str, Any]:
    """The Secret a build Job's push step reads the registry credentials from: ``config.json``
    as ``docker login`` writes it, made for one build and deleted after it. ``job``: the
    build Job's name and uid, its owner: the cluster deletes the Secret with the Job (whose
    own TTL ends it) even if gpudev cannot."""
    if not _NAMESPACE_RE.match(namespace):
        raise BadRequest(f"{namespace[:80]!r} is not a Kubernetes namespace name")
    metadata: dict[str, Any] = {
        "name": k8s_name(name, "gpudev-registry-"),
        "namespace": namespace,
        "labels": {K_MANAGED: "1", K_NAME: label_value(name), K_ROLE: "build"},
        "annotations": {A_NAME: name, A_OWNER: owner, A_CREATED: created},
    }
    if job is not None:
        metadata["ownerReferences"] = [
            {"apiVersion": "batch/v1", "kind": "Job", "name": job[0], "uid": job[1]}
        ]
    return {
        "apiVersion": "v1",
        "kind": "Secret",
        "metadata": metadata,
        "type": "Opaque",
        "data": {"config.json": base64.b64encode(config_json).decode()},
    }


#: What gpudev's server does in its namespace, by API group and resource.
_RULES: tuple[tuple[str, tuple[str, ...], tuple[str, ...]], ...] = (
    (
        "",
        ("pods", "services", "persistentvolumeclaims"),
        ("get", "list", "watch", "create", "delete"),
    ),
    ("", ("pods/exec", "pods/portforward"), ("create", "get")),
    ("", ("pods/log", "events"), ("get", "list", "watch")),
    ("", ("secrets",), ("create", "delete")),
    ("networking.k8s.io", ("networkpolicies",), ("get", "create", "patch", "delete")),
    ("batch", ("jobs",), ("get", "list", "watch", "create", "delete")),
    ("resource.k8s.io", ("resourceclaims",), ("get", "list", "watch", "create", "delete")),
)


def make_rbac(namespace: str, account: str = "gpudev") -> list[dict[str, Any]]:
    """The ServiceAccount gpudev's server runs as, a Role with only what it does in the
    namespace (pods, their exec and port-forward, services, claims, build Jobs, the build's
    registry Secret, the NetworkPolicies of pods and builds, events to say why a pod is not
    scheduled) and the RoleBinding. Nothing
    cluster-wide except reading nodes (their GPU capacity and labels) and pods (which of them
    hold GPUs), which a separate ClusterRole grants: it writes nothing outside the namespace."""
    if not _NAMESPACE_RE.match(namespace) or not _NAMESPACE_RE.match(account):
        raise BadRequest("A namespace and an account name are DNS labels (a-z, 0-9, '-')")
    labels = {K_MANAGED: "1", K_ROLE: "rbac"}
    meta = {"name": account, "namespace": namespace, "labels": labels}
    return [
        {"apiVersion": "v1", "kind": "ServiceAccount", "metadata": dict(meta)},
        {
            "apiVersion": "rbac.authorization.k8s.io/v1",
            "kind": "Role",
            "metadata": dict(meta),
            "rules": [
                {"apiGroups": [group], "resources": list(resources), "verbs": list(verbs)}
                for group, resources, verbs in _RULES
            ],
        },
        {
            "apiVersion": "rbac.authorization.k8s.io/v1",
            "kind": "RoleBinding",
            "metadata": dict(meta),
            "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": account},
            "subjects": [{"kind": "ServiceAccount", "name": account, "namespace": namespace}],
        },
        {
            "apiVersion": "rbac.authorization.k8s.io/v1",
            "kind": "ClusterRole",
            "metadata": {"name": f"{account}-{namespace}-nodes", "labels": labels},
            "rules": [
                {"apiGroups": [""], "resources": ["nodes"], "verbs": ["get", "list", "watch"]},
                {"apiGroups": [""], "resources": ["pods"], "verbs": ["get", "list", "watch"]},
            ],
        },
        {
            "apiVersion": "rbac.authorization.k8s.io/v1",
            "kind": "ClusterRoleBinding",
            "metadata": {"name": f"{account}-{namespace}-nodes", "labels": labels},
            "roleRef": {
                "apiGroup": "rbac.authorization.k8s.io",
                "kind": "ClusterRole",
                "name": f"{account}-{namespace}-nodes",
            },
            "subjects": [{"kind": "ServiceAccount", "name": account, "namespace": namespace}],
        },
    ]
