"""``jupyter gpudev top``: what each GPU is doing, by dev container and owner, refreshed."""

from __future__ import annotations

import sys
import time
from typing import Any
from urllib.parse import urlencode

from traitlets import Bool, Float

from ..containers.usage import GPUUse
from ..shared.kernel_table import KernelTable, RecordedKernels
from ..untrusted import as_dict, as_list, escape_unprintable
from .base import ContainerCommand, GPUDevSubcommand


def _mib(value: Any) -> str:
    return f"{value / 1024:.1f} GiB" if isinstance(value, int) else "?"


def _percent(value: Any) -> str:
    return f"{value}%" if isinstance(value, int) else "-"


def _text(value: Any) -> str:
    """A value from the server (whose names came from users and containers) as one line
    shown whole: a line break or a bidirectional override in a name forges no row."""
    return escape_unprintable(str(value)) if value is not None else "-"


def _idle(seconds: Any) -> str:
    """An idle time, rounded for people (``""``: not known)."""
    if not isinstance(seconds, (int, float)) or isinstance(seconds, bool) or seconds < 0:
        return ""
    minutes = int(seconds // 60)
    if minutes < 1:
        return f", idle {int(seconds)} s"
    if minutes < 120:
        return f", idle {minutes} min"
    return f", idle {minutes // 60} h {minutes % 60:02d} min"


def _short(kernel: Any) -> str:
    """A kernel id as ``top`` shows it: its first 8 characters (``--json`` has it whole)."""
    return escape_unprintable(kernel)[:8] if isinstance(kernel, str) else ""


def _idle_by(host: dict[str, Any]) -> tuple[dict[str, Any], dict[str, Any]]:
    """Each kernel's idle seconds, and each container's (the least among its kernels)."""
    kernels: dict[str, Any] = {}
    containers: dict[str, Any] = {}
    for kernel in map(as_dict, as_list(host.get("kernels"))):
        idle = kernel.get("idle_seconds")
        if not isinstance(idle, (int, float)) or isinstance(idle, bool):
            continue
        kernels[str(kernel.get("kernel"))] = idle
        container = str(kernel.get("container"))
        containers[container] = min(idle, containers.get(container, idle))
    return kernels, containers


def _who(process: dict[str, Any], idle: tuple[dict[str, Any], dict[str, Any]]) -> tuple[str, str]:
    """Whose a process is with its KERNEL (short id); its kernel's (or container's) idle time."""
    kind = str(process.get("kind"))
    left = " left behind (no live kernel)" if process.get("orphan") is True else ""
    if kind == "another user":
        return f"another user's dev container{left}", ""
    if kind != "gpudev":
        return "not a dev container", ""
    container = process.get("container")
    who = f"{_text(container)} ({_text(process.get('owner'))})"
    kernel = process.get("kernel")
    if isinstance(kernel, str) and kernel:
        return f"{who} kernel {_short(kernel)}", _idle(idle[0].get(kernel))
    return f"{who}{left}", _idle(idle[1].get(str(container)))


def format_usage(hosts: list[Any]) -> str:
    """The ``usage`` answer as a table: a line per GPU, a line per process under it (its
    container and owner, its KERNEL, idle time, PID, memory and SM share)."""
    lines: list[str] = []
    for host in hosts:
        host = as_dict(host)  # noqa: PLW2901 - the server's JSON, checked as read
        name = _text(host.get("host"))
        idle = _idle_by(host)
        gpus = as_list(host.get("gpus"))
        if not gpus:
            lines.append(f"{name}: no GPU ({_text(host.get('reason'))})")
            continue
        if host.get("reason"):
            lines.append(f"{name}: {_text(host.get('reason'))}")
        for gpu in map(as_dict, gpus):
            used, total = gpu.get("memory_used_mib"), gpu.get("memory_total_mib")
            lines.append(
                f"{name} GPU {_text(gpu.get('index'))} {_text(gpu.get('name'))} "
                f"{_text(gpu.get('uuid'))}: {_mib(used)} of {_mib(total)}, "
                f"{_percent(gpu.get('utilization_percent'))} busy"
            )
            processes = [as_dict(p) for p in as_list(gpu.get("processes"))]
            if not gpu.get("processes_listed", True):
                lines.append("  (its processes cannot be listed)")
            for process in processes:
                who, idle_text = _who(process, idle)
                pid = f" pid {process['pid']}" if isinstance(process.get("pid"), int) else ""
                uid = f" uid {process['uid']}" if isinstance(process.get("uid"), int) else ""
                lines.append(
                    f"  {who}{pid}{uid}: {_mib(process.get('memory_used_mib'))}, "
                    f"SM {_percent(process.get('sm_percent'))}{idle_text}"
                )
    return "\n".join(lines) if lines else "No hosts."


class TopApp(ContainerCommand):
    """What each GPU is doing, by dev container and owner."""

    name = "jupyter-gpudev-top"
    description = """What each GPU is doing: its memory and utilization, and the processes
    on it with their dev container and owner (another user's shown as such), the gpudev
    kernel that holds each (KERNEL, a short id), its idle time, and processes left behind by
    kernels that ended. Refreshes every --interval seconds until interrupted; --once (or
    --json, the full data) prints it once."""

    once = Bool(False, help="Print once and exit.").tag(config=True)
    interval = Float(2.0, min=0.2, help="Seconds between two refreshes (0.2 or more).").tag(
        config=True
    )
    flags: dict[str, Any] = {
        **GPUDevSubcommand.flags,
        "once": ({"TopApp": {"once": True}}, "Print once and exit."),
    }
    aliases: dict[str, Any] = {**ContainerCommand.aliases, "interval": "TopApp.interval"}

    def read(self) -> list[Any]:
        """The hosts' GPU use: this machine's engines', or in client mode the service's."""
        host = self.host or None
        if self.service_url():
            query = f"?{urlencode({'host': host})}" if host else ""
            return as_list(as_dict(self.remote().api.call("GET", f"usage{query}")).get("hosts"))
        return [usage.to_json() for usage in self.gpu_use().usage(host)]

    def gpu_use(self) -> GPUUse:
        """GPU use on this machine's hosts. Run as the shared service's account with its state
        folder, the kernels its table records (``shared.kernel_table``) are told by their host
        PIDs, in shared containers too; else only a container made for one kernel is."""
        services = self.services()
        use = services.usage
        if use.kernels is None:
            table = KernelTable(services.containers.state_dir, log=self.log)
            use.kernels = RecordedKernels(table, services.host_pool.local_name)
            use.kernels_complete = False
        return use

    def run(self) -> None:
        self.no_args()
        if self.once or self.json_output:
            hosts = self.read()
            self.emit({"hosts": hosts}, format_usage(hosts))
            return
        try:
            while True:
                text = format_usage(self.read())
                sys.stdout.write("\x1b[H\x1b[2J" + text + "\n")
                sys.stdout.flush()
                time.sleep(self.interval)
        except KeyboardInterrupt:
            pass
