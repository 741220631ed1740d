"""One kernel process in a pod on a Kubernetes host: started by one exec, found
again by its runtime files (the same ``RUNTIME_DIR/<runtime id>.{json,pid,log}`` as in a Docker
container, ``kernels.process``), checked and signalled by exec.

The connection file (with the kernel's key) is sent as the exec's input, never as an argument:
an exec's command is in its URL, which the API server's audit log may keep. The kernel runs as
the pod's user, detached from the exec; the pod's pause container (``shareProcessNamespace``)
reaps it when it ends. Its ports are the pod's own: the server reaches them at the pod's IP
from inside the cluster, else through port-forwards (``DevContainers.pod_reach``).
"""

from __future__ import annotations

import json
import shlex
from typing import Any

from ..engine.cluster import Cluster
from ..errors import EngineError
from ..untrusted import clean
from .process import (
    DEFAULT_ARGV,
    IMAGE_KERNELSPECS,
    RUNTIME_DIR,
    kernelspec_argv,
    runtime_files,
    signal_argv,
)

#: Seconds one exec of the kernel's (start, check, signal) may take.
EXEC_TIMEOUT = 30.0


def image_argv(cluster: Cluster, pod: str) -> list[str]:
    """The image's own python3 kernelspec argv if it has one, else the ipykernel default."""
    for path in IMAGE_KERNELSPECS:
        found = cluster.exec(pod, ["cat", path], timeout=EXEC_TIMEOUT, limit=64 << 10)
        argv = kernelspec_argv(found.stdout) if found.exit_code == 0 else None
        if argv is not None:
            return argv
    return list(DEFAULT_ARGV)


def start(
    cluster: Cluster,
    pod: str,
    *,
    argv: list[str],
    runtime_id: str,
    connection: dict[str, Any],
    environment: dict[str, str],
) -> str:
    """Start the kernel: one exec writes its private connection file from its input, starts
    the kernel detached (output to its log file) and records its pid. ``argv``'s
    ``{connection_file}`` is that file. Returns its log file."""
    kernel_file, pid_file, log_file = runtime_files(runtime_id)
    argv = [kernel_file if arg == "{connection_file}" else arg for arg in argv]
    data = json.dumps(connection).encode()
    script = (
        f"umask 077; mkdir -p {RUNTIME_DIR}; "
        f"head -c {len(data)} > {shlex.quote(kernel_file)}; "
        f'nohup "$@" >> {shlex.quote(log_file)} 2>&1 < /dev/null & '
        f"echo $! > {shlex.quote(pid_file)}"
    )
    variables = [f"{k}={v}" for k, v in sorted(environment.items())]
    command = ["/bin/sh", "-c", script, "kernel", "env", *variables, *argv]
    ran = cluster.exec(pod, command, timeout=EXEC_TIMEOUT, limit=64 << 10, stdin=data)
    if ran.exit_code != 0:
        said = clean(ran.stderr.decode(errors="replace")[-500:])
        raise EngineError(f"The kernel could not be started in {pod} ({said or ran.exit_code})")
    return log_file


def alive(cluster: Cluster, pod: str, runtime_id: str) -> bool:
    """Whether the kernel's process is still there."""
    _, pid_file, _ = runtime_files(runtime_id)
    check = f'kill -0 "$(cat {shlex.quote(pid_file)})" 2>/dev/null'
    found = cluster.exec(pod, ["/bin/sh", "-c", check], timeout=EXEC_TIMEOUT, limit=1024)
    return found.exit_code == 0


def send_signal(cluster: Cluster, pod: str, runtime_id: str, signum: int) -> None:
    cluster.exec(pod, signal_argv(runtime_id, signum), timeout=EXEC_TIMEOUT, limit=1024)


def log_tail(cluster: Cluster, pod: str, log_file: str) -> list[str]:
    """The kernel's last 20 lines of output."""
    found = cluster.exec(pod, ["tail", "-n", "20", log_file], timeout=EXEC_TIMEOUT, limit=64 << 10)
    return found.stdout.decode(errors="replace").strip().splitlines()


def remove_files(cluster: Cluster, pod: str, runtime_id: str) -> None:
    cluster.exec(pod, ["rm", "-f", *runtime_files(runtime_id)], timeout=EXEC_TIMEOUT, limit=1024)
