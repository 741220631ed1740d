"""One kernel process in a pod on a Kubernetes host: started by one exec, found
again by its runtime files (the same ``RUNTIME_DIR/<runtime id>.{json,pid,log}`` as in a Docker
container, ``kernels.process``), checked and signalled by exec.

The connection file (with the kernel's key) is sent as the exec's input, never as an argument:
an exec's command is in its URL, which the API server's audit log may keep. The kernel runs as
the pod's user, detached from the exec; the pod's pause container (``shareProcessNamespace``)
reaps it when it ends. Its ports are the pod's own: the server reaches them at the pod's IP
from inside the cluster, else through port-forwards (``DevContainers.pod_reach``).

``PodProcesses`` is ``KernelProcesses`` (``kernels.runtime``) for a pod.
"""

from __future__ import annotations

import json
import shlex
import socket
import time
from collections.abc import Callable
from typing import Any, ClassVar

from ..containers import DevContainers
from ..engine import Host
from ..engine.cluster import Cluster, ExecResult, cluster_of
from ..errors import EngineError, EngineUnreachable, GPUDevError, NotFound
from ..k8s.objects import k8s_name
from ..untrusted import clean
from .process import (
    DEFAULT_ARGV,
    IMAGE_KERNELSPECS,
    PORT_NAMES,
    RUNTIME_DIR,
    kernelspec_argv,
    runtime_files,
    signal_argv,
)

#: Seconds one exec of the kernel's (start, check, signal) may take.
EXEC_TIMEOUT = 30.0
#: How a kernel's handle (the provisioner's ``exec_id``, kept in its provisioner info) names a
#: kernel in a pod: ``pod:`` and the pod's name (a Docker exec id is hexadecimal).
POD_HANDLE = "pod:"


class PodProcesses:
    """The kernel processes of one pod (``kernels.runtime.KernelProcesses``): each started,
    checked and signalled by an exec through the cluster's API server; a kernel's exit code is
    not known there, only that its process is gone."""

    keeps_warm: ClassVar[bool] = False
    exit_codes: ClassVar[bool] = False
    stopped_and_kept: ClassVar[bool] = False
    #: No working folder is given: a kernel starts in the exec's (the pod's).
    working_dir: ClassVar[str | None] = None

    def __init__(self, manager: DevContainers, host: Host, cluster: Cluster, pod: str) -> None:
        self.manager = manager
        self.host = host
        self.cluster = cluster
        self.pod = pod
        #: Its kernel's heartbeat port at the pod's IP, once reached there: while it accepts a
        #: connection the kernel runs, and a poll costs no exec (no request to the API server).
        self._heartbeat: tuple[str, int] | None = None

    @classmethod
    def of(cls, manager: DevContainers, host: Host, name: str, handle: str = "") -> PodProcesses:
        """The processes of the dev container ``name``'s pod on ``host`` (nothing is asked of
        the cluster); ``handle``, a kernel's, names its pod."""
        cluster = cluster_of(host)
        if handle.startswith(POD_HANDLE):
            return cls(manager, host, cluster, handle.removeprefix(POD_HANDLE))
        return cls(manager, host, cluster, k8s_name(name))

    @property
    def instance(self) -> str:
        """The pod's name (no warm kernel is kept in a pod: nothing compares it)."""
        return self.pod

    def _exec(self, argv: list[str], limit: int, stdin: bytes | None = None) -> ExecResult:
        return self.cluster.exec(self.pod, argv, timeout=EXEC_TIMEOUT, limit=limit, stdin=stdin)

    def kernel_argv(self) -> list[str]:
        """The image's own python3 kernelspec argv if it has one, else the ipykernel default."""
        for path in IMAGE_KERNELSPECS:
            found = self._exec(["cat", path], 64 << 10)
            argv = kernelspec_argv(found.stdout) if found.exit_code == 0 else None
            if argv is not None:
                return argv
        return list(DEFAULT_ARGV)

    def reach(self, ports: tuple[int, ...]) -> list[tuple[str, int]]:
        """The pod's IP, or local port-forwards (``DevContainers.pod_reach``)."""
        found = self.cluster.read("v1", "Pod", self.pod) or {}
        reached = [self.manager.pod_reach(self.host, found, port) for port in ports]
        heartbeat = reached[PORT_NAMES.index("hb_port")]
        # At the pod's IP (not a local forward's end, which always accepts)
        pod_ip = str((found.get("status") or {}).get("podIP") or "")
        self._heartbeat = heartbeat if pod_ip and heartbeat[0] == pod_ip else None
        return reached

    def close_forwards(self, ports: tuple[int, ...]) -> None:
        self.manager.close_pod_forwards(self.host.name, self.pod, ports)

    def start(
        self,
        *,
        argv: list[str],
        runtime_id: str,
        connection: dict[str, Any],
        workdir: str | None,  # noqa: ARG002 - the exec's own (the pod's working folder)
        environment: dict[str, str],
    ) -> str:
        """Start the kernel: one exec writes its private connection file from its input,
        starts the kernel detached (output to its log file) and records its pid. ``argv``'s
        ``{connection_file}`` is that file. Returns the kernel's handle (``POD_HANDLE``)."""
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
        ran = self._exec(command, 64 << 10, stdin=data)
        if ran.exit_code != 0:
            said = clean(ran.stderr.decode(errors="replace")[-500:])
            raise EngineError(
                f"The kernel could not be started in {self.pod} ({said or ran.exit_code})"
            )
        return POD_HANDLE + self.pod

    def exit_code(self, handle: str, runtime_id: str) -> int | None:  # noqa: ARG002
        """``None`` while its heartbeat port at the pod's IP accepts a connection, or else
        while its pid is still there; 1 when it is gone (its code is not known), the pod too.
        A failed exec says nothing of the kernel: ``EngineUnreachable`` (the caller's grace)."""
        if self._heartbeat is not None and _accepts(self._heartbeat):
            return None
        _, pid_file, _ = runtime_files(runtime_id)
        check = f'kill -0 "$(cat {shlex.quote(pid_file)})" 2>/dev/null'
        try:
            found = self._exec(["/bin/sh", "-c", check], 1024)
        except NotFound:
            return 1  # the pod is gone, and the kernel with it
        except GPUDevError as err:
            raise EngineUnreachable(err.message) from None
        return None if found.exit_code == 0 else 1

    def watch_start(self, poll: Callable[[], int | None], seconds: float) -> int | None:
        """Checked once, after ``seconds``: each check is an exec."""
        time.sleep(seconds)
        return poll()

    def host_pid(self, handle: str) -> int | None:  # noqa: ARG002
        """Not known: a cluster's nodes give gpudev no per-process attribution."""
        return None

    def send_signal(self, runtime_id: str, signum: int) -> None:
        self._exec(signal_argv(runtime_id, signum), 1024)

    def log_tail(self, runtime_id: str) -> list[str]:
        """The kernel's last 20 lines of output, each made safe to show."""
        _, _, log_file = runtime_files(runtime_id)
        found = self._exec(["tail", "-n", "20", log_file], 64 << 10)
        lines = found.stdout.decode(errors="replace").strip().splitlines()
        return [clean(line) for line in lines]

    def remove_files(self, runtime_id: str) -> None:
        self._exec(["rm", "-f", *runtime_files(runtime_id)], 1024)


def _accepts(address: tuple[str, int]) -> bool:
    """Whether something listens at ``address`` (a kernel's port at its pod's IP)."""
    try:
        with socket.create_connection(address, timeout=1.0):
            return True
    except OSError:
        return False
