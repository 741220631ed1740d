"""Every label gpudev sets or reads on engine objects, in one place, and the container states
read with them.

Containers, images and snapshot images carry them; they are written by gpudev only (never taken
from an image or a request) and read back to find what gpudev made.
"""

from __future__ import annotations

LABEL = "org.jupyter.gpudev"

# Dev containers.
#: Made by gpudev (``"1"``); everything gpudev lists or touches carries it.
L_MANAGED = f"{LABEL}.managed"
#: The name the user chose (the engine's name is ``gpudev-<name>``).
L_NAME = f"{LABEL}.name"
L_OWNER = f"{LABEL}.owner"
L_ENV = f"{LABEL}.environment"
#: On an environment's built image: the local images its FROM lines named, with their ids
#: then (``ref@id`` separated by spaces): a base rebuilt under the same tag rebuilds it.
L_BUILD_BASES = f"{LABEL}.build.bases"
#: On an image with Dev Container Features installed (and so on its containers): the features'
#: lifecycle commands, JSON (``environments.features.commands_record``); read back only for an
#: environment with features, whose features build always sets it.
L_FEATURE_COMMANDS = f"{LABEL}.features.commands"
#: On the same image: the capabilities its features add (capAdd), comma separated, each one
#: allowed when they were read; checked again against the setting at each create.
L_FEATURE_CAPS = f"{LABEL}.features.capabilities"
L_HOST = f"{LABEL}.host"
#: The lease id and the leased GPU UUIDs (comma separated).
L_LEASE = f"{LABEL}.lease"
L_GPUS = f"{LABEL}.gpus"
L_SERVER = f"{LABEL}.server"
L_IMAGE = f"{LABEL}.image"
L_CREATED = f"{LABEL}.created"
L_WORKSPACE = f"{LABEL}.workspace"
#: On a container dedicated to one kernel: the kernel's id.
L_KERNEL = f"{LABEL}.kernel"
#: Which server process made it: "<machine>:<pid>:<start>:<boot>" (its start time in clock
#: ticks since the boot, the boot id's first part: a PID reused later is not taken for it;
#: "<machine>:<pid>" without /proc, and from earlier versions), and which lease ledger it used.
L_PROCESS = f"{LABEL}.process"
L_LEDGER = f"{LABEL}.ledger"
#: Who kernels, terminals and lifecycle commands run as in it (``remoteUser`` where the
#: container does not run as the server's user; empty: the container's user).
L_REMOTE_USER = f"{LABEL}.remote-user"
#: The web ports the environment declared (``forwardPorts``), comma separated.
L_PORTS = f"{LABEL}.ports"

# GPU claims (``leasing/claims.py``): a container per leased GPU, created and never started.
#: The GPU UUID a claim is for.
L_CLAIM = f"{LABEL}.claim"
#: The engine id of the dev container holding the GPU, and when the claim was made (epoch s).
L_CLAIM_HOLDER = f"{L_CLAIM}.holder"
L_CLAIM_AT = f"{L_CLAIM}.at"

# Throwaway containers gpudev runs (the image probe).
L_PROBE = f"{LABEL}.probe"

# Images.
#: A base image ``jupyter gpudev image bootstrap`` made, and its kernel.
L_BOOTSTRAP = f"{LABEL}.bootstrap"
L_BOOTSTRAP_KERNEL = f"{L_BOOTSTRAP}.kernel"
#: A verify build of a commit.
L_VERIFY = f"{LABEL}.verify"
#: A snapshot image: the environment, container, change set and Dockerfile it came from.
L_SNAPSHOT_ENV = f"{LABEL}.snapshot.environment"
L_SNAPSHOT_CONTAINER = f"{LABEL}.snapshot.container"
L_SNAPSHOT_DIFF = f"{LABEL}.snapshot.diff"
L_SNAPSHOT_DOCKERFILE = f"{LABEL}.snapshot.dockerfile"

# OCI's own annotations, set on snapshot images.
OCI_BASE_NAME = "org.opencontainers.image.base.name"
OCI_BASE_DIGEST = "org.opencontainers.image.base.digest"
OCI_DESCRIPTION = "org.opencontainers.image.description"
OCI_CREATED = "org.opencontainers.image.created"

# Kubernetes objects (``k8s/objects.py`` writes them, ``engine/cluster.py`` reads them):
# label keys must be PREFIX/NAME there, and values cannot hold every name, so the real values
# are annotations.
K8S_PREFIX = "gpudev.jupyter.org"
K_MANAGED = f"{K8S_PREFIX}/managed"
K_NAME = f"{K8S_PREFIX}/name"
K_OWNER = f"{K8S_PREFIX}/owner"
K_ENV = f"{K8S_PREFIX}/environment"
K_KERNEL = f"{K8S_PREFIX}/kernel"
K_SERVER = f"{K8S_PREFIX}/server"
K_ROLE = f"{K8S_PREFIX}/role"
A_OWNER = f"{K8S_PREFIX}/owner"
A_NAME = f"{K8S_PREFIX}/name"
A_CREATED = f"{K8S_PREFIX}/created"
A_IMAGE = f"{K8S_PREFIX}/image"
A_ENV = f"{K8S_PREFIX}/environment"
A_PORTS = f"{K8S_PREFIX}/ports"
#: The server process that made a kernel's own pod, as ``L_PROCESS`` names it (orphans after
#: a crash are found by it, as containers are by ``L_PROCESS``).
A_PROCESS = f"{K8S_PREFIX}/process"
#: The lease ledger of the server that made a kernel's own pod (the orphan sweep's own only).
A_LEDGER = f"{K8S_PREFIX}/ledger"
#: The node labels NVIDIA's GPU feature discovery sets: the GPU's product name, its memory.
GPU_PRODUCT_LABEL = "nvidia.com/gpu.product"
GPU_MEMORY_LABEL = "nvidia.com/gpu.memory"


#: Engine states in which a container holds nothing (its GPUs are free again).
STOPPED = ("exited", "dead", "removing")


def labelled_gpus(labels: dict[str, str]) -> tuple[str, ...]:
    """The GPU UUIDs a container was created with (its label)."""
    return tuple(filter(None, labels.get(L_GPUS, "").split(",")))
