"""One kernel process inside a dev container: started by one exec, found again by its runtime
files (``RUNTIME_DIR/<runtime id>.{json,pid,log}``), signalled through its pid file.

Used by the provisioner (a kernel of the server) and by the warm pool (a kernel started ahead,
handed to the provisioner later, runtime files and all).
"""

from __future__ import annotations

import json
import shlex
from typing import Any

#: Where a kernel's connection file and pid file live inside the container.
RUNTIME_DIR = "/tmp/.gpudev"  # noqa: S108 - inside the container, owned by the kernel's user
DEFAULT_ARGV = ["python3", "-m", "ipykernel_launcher", "-f", "{connection_file}"]
IMAGE_KERNELSPECS = (
    "/usr/local/share/jupyter/kernels/python3/kernel.json",
    "/usr/share/jupyter/kernels/python3/kernel.json",
    "/opt/conda/share/jupyter/kernels/python3/kernel.json",
)
PORT_NAMES = ("shell_port", "iopub_port", "stdin_port", "control_port", "hb_port")


def runtime_files(runtime_id: str) -> tuple[str, str, str]:
    """The kernel's connection, pid and log files inside the container."""
    kernel_file, pid_file, log_file = (
        f"{RUNTIME_DIR}/{runtime_id}.{ext}" for ext in ("json", "pid", "log")
    )
    return kernel_file, pid_file, log_file


def kernelspec_argv(data: Any) -> list[str] | None:
    """The argv of a kernel.json read from an image (hostile input: only a list of strings)."""
    if not isinstance(data, bytes):
        return None
    try:
        argv = json.loads(data)["argv"]
    except (ValueError, KeyError, TypeError):
        return None
    if isinstance(argv, list) and argv and all(isinstance(a, str) for a in argv):
        return list(argv)
    return None


def image_argv(container: Any) -> list[str]:
    """The image's own python3 kernelspec argv if it has one, else the ipykernel default."""
    for path in IMAGE_KERNELSPECS:
        code, output = container.exec_run(["cat", path])
        argv = kernelspec_argv(output) if code == 0 else None
        if argv is not None:
            return argv
    return list(DEFAULT_ARGV)


def start(
    api: Any,
    container_id: str,
    *,
    argv: list[str],
    runtime_id: str,
    connection: dict[str, Any],
    workdir: str,
    environment: dict[str, str],
) -> str:
    """Start the kernel: one exec writes its private connection file (the key leaves the
    environment before the kernel starts), records its pid for signals, then becomes the
    kernel, output to its log file. ``argv``'s ``{connection_file}`` is that file. Returns the
    exec id (polled for the kernel's exit)."""
    kernel_file, pid_file, log_file = runtime_files(runtime_id)
    argv = [kernel_file if arg == "{connection_file}" else arg for arg in argv]
    script = (
        f"umask 077; mkdir -p {RUNTIME_DIR}; "
        f'printf "%s" "$GPUDEV_CONNECTION" > {shlex.quote(kernel_file)}; '
        "unset GPUDEV_CONNECTION; "
        f"echo $$ > {shlex.quote(pid_file)}; "
        f'exec "$@" >> {shlex.quote(log_file)} 2>&1'
    )
    exec_id = str(
        api.exec_create(
            container_id,
            ["/bin/sh", "-c", script, "kernel", *argv],
            workdir=workdir,
            environment={**environment, "GPUDEV_CONNECTION": json.dumps(connection)},
        )["Id"]
    )
    api.exec_start(exec_id, detach=True)
    return exec_id


def signal_argv(runtime_id: str, signum: int) -> list[str]:
    """The command that sends ``signum`` to the kernel (its pid file names it)."""
    _, pid_file, _ = runtime_files(runtime_id)
    return ["/bin/sh", "-c", f'kill -{int(signum)} "$(cat {shlex.quote(pid_file)})"']


def send_signal(api: Any, container_id: str, runtime_id: str, signum: int) -> None:
    """Signal the kernel through a detached exec: its effect is what the kernel does next,
    which the caller watches; waiting for the ``kill`` itself would add a round trip."""
    exec_id = api.exec_create(container_id, signal_argv(runtime_id, signum))["Id"]
    api.exec_start(exec_id, detach=True)
