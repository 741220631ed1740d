"""Jupyter server configuration for the Galata UI tests.

The GPU inventory reads a fake nvidia-smi that prints two recorded A100 GPUs, so the
tests see the same GPUs on any machine; their processes are the lines a test writes in
``gpu-processes.csv`` of the served folder (none unless it does). Dev containers keep their
GPU lease ledger, and the hosts added at run time their file, in a fresh folder per server,
so a test run never sees another run's leases or hosts.

The served folder gets a ``gpu`` environment (one GPU, the kernel image), a ``web``
environment (no GPU, the kernel image, port 8000 in forwardPorts: served by the web port
proxy) and the GPU culler short timeouts, so a test can watch an idle GPU kernel be warned
about and released within seconds.

Outputs of gpudev kernels render untrusted (``c.GPUDevApp.untrusted_kernel_outputs``, on by
default in shared mode only): untrusted-outputs.spec.ts runs hostile outputs in an ``outputs``
environment (no GPU, the kernel image).
"""

import json
import os
import tempfile
from pathlib import Path

from jupyterlab.galata import configure_jupyter_server

REPO_ROOT = Path(__file__).resolve().parents[2]
FIXTURES = REPO_ROOT / "tests" / "fixtures"

configure_jupyter_server(c)  # noqa: F821
# CI and the development machines run as root; this server only ever serves the tests.
c.ServerApp.allow_root = True  # noqa: F821

c.GPUInventory.backend = "nvidia-smi"  # noqa: F821
c.GPUInventory.nvidia_smi_path = str(FIXTURES / "fake-nvidia-smi")  # noqa: F821
os.environ["FAKE_NVIDIA_SMI_DIR"] = str(FIXTURES / "smi" / "two-a100")

# The GPUs' processes (--query-compute-apps) are those a test writes in this file of the served
# folder (usage.spec.ts: the host PID of a real container's process); empty, there are none.
GPU_PROCESSES = Path(c.ServerApp.root_dir) / "gpu-processes.csv"  # noqa: F821
GPU_PROCESSES.parent.mkdir(parents=True, exist_ok=True)
GPU_PROCESSES.write_text("")
os.environ["FAKE_NVIDIA_SMI_APPS"] = str(GPU_PROCESSES)

c.DevContainers.state_dir = tempfile.mkdtemp(prefix="gpudev-ui-tests-")  # noqa: F821
# Hosts added from the panel go to a fresh file too, never to the user's Jupyter data dir.
c.HostPool.hosts_file = str(Path(c.DevContainers.state_dir) / "hosts.json")  # noqa: F821
c.DevContainers.stop_timeout = 2  # noqa: F821
# The user this server acts for: it owns what the tests start, whoever logs in with the token.
c.Access.user = "galata"  # noqa: F821
# What every host added at run time gets (the panel's Add host form cannot choose it).
c.HostPool.runtime_host_settings = {"workspace": "/srv/work"}  # noqa: F821

# Outputs of gpudev kernels render untrusted, as in shared mode (untrusted-outputs.spec.ts).
c.GPUDevApp.untrusted_kernel_outputs = True  # noqa: F821

# An idle GPU kernel is listed 5 s after its last activity and released 15 s later.
c.GPUCuller.idle_timeout = 20  # noqa: F821
c.GPUCuller.warning_seconds = 15  # noqa: F821
c.GPUCuller.check_interval = 1  # noqa: F821

# The galata root dir is a fresh folder per server (or JUPYTERLAB_GALATA_ROOT_DIR).
GPU_ENVIRONMENT = (
    Path(c.ServerApp.root_dir) / ".devcontainer" / "gpu" / "devcontainer.json"  # noqa: F821
)
GPU_ENVIRONMENT.parent.mkdir(parents=True, exist_ok=True)
GPU_ENVIRONMENT.write_text(
    json.dumps({"image": "gpudev-python:bookworm", "hostRequirements": {"gpu": True}}, indent=2)
    + "\n"
)

# A CPU environment whose port 8000 the server's proxy serves (remote.spec.ts). Written here:
# the contents API does not write hidden folders such as .devcontainer.
WEB_ENVIRONMENT = (
    Path(c.ServerApp.root_dir) / ".devcontainer" / "web" / "devcontainer.json"  # noqa: F821
)
WEB_ENVIRONMENT.parent.mkdir(parents=True, exist_ok=True)
WEB_ENVIRONMENT.write_text(
    json.dumps({"image": "gpudev-python:bookworm", "forwardPorts": [8000]}, indent=2) + "\n"
)

# The whole-flow spec (flow.spec.ts): its own GPU environment, as its commit writes a Dockerfile
# for it (a retry then builds that Dockerfile instead of using the image as is).
FLOW_ENVIRONMENT = (
    Path(c.ServerApp.root_dir) / ".devcontainer" / "flow" / "devcontainer.json"  # noqa: F821
)
FLOW_ENVIRONMENT.parent.mkdir(parents=True, exist_ok=True)
FLOW_ENVIRONMENT.write_text(
    json.dumps({"image": "gpudev-python:bookworm", "hostRequirements": {"gpu": True}}, indent=2)
    + "\n"
)

# Hostile outputs of a gpudev kernel (untrusted-outputs.spec.ts): a CPU environment of its own.
OUTPUTS_ENVIRONMENT = (
    Path(c.ServerApp.root_dir) / ".devcontainer" / "outputs" / "devcontainer.json"  # noqa: F821
)
OUTPUTS_ENVIRONMENT.parent.mkdir(parents=True, exist_ok=True)
OUTPUTS_ENVIRONMENT.write_text(json.dumps({"image": "gpudev-python:bookworm"}, indent=2) + "\n")

# An environment asking for what gpudev does not do (gpudev.spec.ts): remoteEnv (not applied)
# and a misspelt lifecycle command; its row lists both notes.
NOTED_ENVIRONMENT = (
    Path(c.ServerApp.root_dir) / ".devcontainer" / "noted" / "devcontainer.json"  # noqa: F821
)
NOTED_ENVIRONMENT.parent.mkdir(parents=True, exist_ok=True)
NOTED_ENVIRONMENT.write_text(
    json.dumps(
        {
            "image": "gpudev-python:bookworm",
            "remoteEnv": {"NODE_OPTIONS": "--max-old-space-size=4096"},
            "postCreateComand": "npm install",
        },
        indent=2,
    )
    + "\n"
)
