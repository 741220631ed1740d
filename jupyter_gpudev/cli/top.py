"""``jupyter gpudev top``: what each GPU is doing, by dev container and owner, refreshed."""

from __future__ import annotations

import sys
import time
from typing import Any
from urllib.parse import urlencode

from traitlets import Bool, Float

from ..untrusted import as_dict, as_list, printable
from .base import ContainerCommand, GPUDevSubcommand


def _mib(value: Any) -> str:
    return f"{value / 1024:.1f} GiB" if isinstance(value, int) else "?"


def _percent(value: Any) -> str:
    return f"{value}%" if isinstance(value, int) else "-"


def _text(value: Any) -> str:
    """A value from the server (whose names came from users and containers), printable."""
    return printable(str(value)) if value is not None else "-"


def format_usage(hosts: list[Any]) -> str:
    """The ``usage`` answer as a table: a line per GPU, a line per process under it."""
    lines: list[str] = []
    for host in hosts:
        host = as_dict(host)  # noqa: PLW2901 - the server's JSON, checked as read
        name = _text(host.get("host"))
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
                who = {
                    "gpudev": f"{_text(process.get('container'))} ({_text(process.get('owner'))})",
                    "another user": "another user's dev container",
                }.get(str(process.get("kind")), "not a dev container")
                pid = f" pid {process['pid']}" if isinstance(process.get("pid"), int) else ""
                uid = f" uid {process['uid']}" if isinstance(process.get("uid"), int) else ""
                lines.append(
                    f"  {who}{pid}{uid}: {_mib(process.get('memory_used_mib'))}, "
                    f"SM {_percent(process.get('sm_percent'))}"
                )
    return "\n".join(lines) if lines else "No hosts."


class TopApp(ContainerCommand):
    """What each GPU is doing, by dev container and owner."""

    name = "jupyter-gpudev-top"
    description = """What each GPU is doing: its memory and utilization, and the processes
    on it with their dev container and owner (another user's shown as such). Refreshes every
    --interval seconds until interrupted; --once (or --json) prints it once."""

    once = Bool(False, help="Print once and exit.").tag(config=True)
    interval = Float(2.0, help="Seconds between two refreshes.").tag(config=True)
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
        return [usage.to_json() for usage in self.services().usage.usage(host)]

    def run(self) -> None:
        if self.once or self.json_output:
            hosts = self.read()
            self.emit({"hosts": hosts}, format_usage(hosts))
            return
        try:
            while True:
                text = format_usage(self.read())
                sys.stdout.write("\x1b[H\x1b[2J" + text + "\n")
                sys.stdout.flush()
                time.sleep(max(self.interval, 0.2))
        except KeyboardInterrupt:
            pass
