"""``jupyter gpudev ...``: the command line. Every subcommand takes ``--json``.

The CLI reads the same configuration as the server (``jupyter_server_config.*`` and
``jupyter_gpudev_config.*`` in the Jupyter config path, ``c.HostPool.*`` and so on), so a host
configured for the server is the same host here.
"""

from __future__ import annotations

import json
import sys
from typing import Any

from jupyter_core.application import JupyterApp, base_aliases, base_flags
from traitlets import Bool, Unicode

from . import __version__
from .errors import GPUDevError
from .gpus import Inventory
from .hosts import HostInfo, HostPool, unreachable_summary
from .images import ImageBootstrapper

_json_flag = {
    "json": (
        {"GPUDevSubcommand": {"json_output": True}},
        "Print the result as JSON on stdout (progress and messages go to stderr).",
    )
}


class GPUDevSubcommand(JupyterApp):
    """Shared plumbing: config loading, --json, and one place that maps errors to exit codes."""

    version = __version__
    json_output = Bool(False, help="Print the result as JSON.").tag(config=True)

    flags: dict[str, Any] = {**base_flags, **_json_flag}
    aliases: dict[str, Any] = {**base_aliases}

    def load_config_file(self, suppress_errors: bool = True) -> None:  # type: ignore[override]
        """Read the server's config files too, so both see the same ``c.HostPool`` & co."""
        for name in ("jupyter_server_config", "jupyter_gpudev_config"):
            self.config_file_name = name
            super().load_config_file(suppress_errors=suppress_errors)

    def emit(self, payload: Any, text: str) -> None:
        if self.json_output:
            print(json.dumps(payload, indent=2))
        else:
            print(text)

    def fail(self, err: GPUDevError) -> None:
        if self.json_output:
            print(json.dumps(err.to_json(), indent=2))
        print(f"error: {err.message}", file=sys.stderr)
        self.exit(err.exit_code)

    def start(self) -> None:
        try:
            self.run()
        except GPUDevError as err:
            self.fail(err)

    def run(self) -> None:
        raise NotImplementedError


def _format_gpus(inventory: Inventory) -> list[str]:
    if not inventory.gpus:
        return [f"    GPUs: none ({inventory.reason or 'no GPU found'})"]
    lines = [
        f"    GPUs ({inventory.source}; driver {inventory.driver_version or '?'}, "
        f"CUDA {inventory.cuda_version or '?'}):"
    ]
    for gpu in inventory.gpus:
        memory = (
            f"{gpu.memory_used_mib or 0}/{gpu.memory_total_mib} MiB"
            if gpu.memory_total_mib is not None
            else "memory ?"
        )
        util = f"{gpu.utilization_percent}%" if gpu.utilization_percent is not None else "?"
        lines.append(f"      [{gpu.index}] {gpu.name}  {memory}  util {util}  {gpu.uuid}")
        lines.extend(
            f"          MIG {mig.profile} [{mig.index}] {mig.uuid}" for mig in gpu.mig_devices
        )
    return lines


def format_hosts(infos: list[HostInfo]) -> str:
    lines: list[str] = []
    for info in infos:
        if info.reachable and info.engine is not None:
            engine = info.engine
            lines.append(
                f"{info.name}  {info.url}  Docker {engine.version} (API {engine.api_version}, "
                f"{engine.os}/{engine.arch}, cgroup {engine.cgroup_driver or '?'}"
                f"{' v' + engine.cgroup_version if engine.cgroup_version else ''})"
            )
            nvidia = "yes" if engine.nvidia_runtime else "no"
            hook = {True: "yes", False: "no", None: "unknown"}[engine.nvidia_hook]
            lines.append(
                f"    NVIDIA runtime: {nvidia}; NVIDIA hook: {hook}; "
                f"CDI: {'yes' if engine.cdi else 'no'}"
            )
        else:
            lines.append(f"{info.name}  {info.url}  UNREACHABLE")
            lines.append(f"    {info.reason}")
        lines.extend(_format_gpus(info.gpus))
    return "\n".join(lines)


class HostsApp(GPUDevSubcommand):
    """List the hosts, their Docker engines and their GPUs."""

    name = "jupyter-gpudev-hosts"
    description = """List every configured host: its Docker engine (version, API, OS/arch,
    cgroup driver, NVIDIA runtime, CDI) and its GPUs by UUID. Exits 3 when no engine answers."""

    def run(self) -> None:
        pool = HostPool(parent=self, log=self.log)
        try:
            infos = pool.describe_all()
        finally:
            pool.close()
        error = unreachable_summary(infos)
        if error is not None:
            error.details["hosts"] = [info.to_json() for info in infos]
            self.fail(error)
        self.emit({"hosts": [info.to_json() for info in infos]}, format_hosts(infos))


class ImageBootstrapApp(GPUDevSubcommand):
    """Build the kernel-capable base image from the host's Debian mirror, without a registry."""

    name = "jupyter-gpudev-image-bootstrap"
    description = """Build a Debian image with debootstrap from this host's package mirror,
    import it into the local Docker engine, and build a Python + ipykernel image on top.
    For machines that reach a package mirror but no container registry. Needs root."""

    force = Bool(False, help="Rebuild even if the image exists.").tag(config=True)
    host = Unicode("", help="The host whose engine receives the image (default: local).").tag(
        config=True
    )

    flags: dict[str, Any] = {
        **GPUDevSubcommand.flags,
        "force": ({"ImageBootstrapApp": {"force": True}}, "Rebuild even if the image exists."),
    }
    aliases: dict[str, Any] = {
        **GPUDevSubcommand.aliases,
        "mirror": "ImageBootstrapper.mirror",
        "suite": "ImageBootstrapper.suite",
        "tag": "ImageBootstrapper.image_tag",
        "base-tag": "ImageBootstrapper.base_tag",
        "host": "ImageBootstrapApp.host",
    }

    def _progress(self, event: dict[str, Any]) -> None:
        print(f"[{event['stage']}] {event['message']}", file=sys.stderr, flush=True)

    def run(self) -> None:
        pool = HostPool(parent=self, log=self.log)
        try:
            host = pool.get(self.host or pool.local_name)
            bootstrapper = ImageBootstrapper(parent=self, log=self.log)
            result = bootstrapper.run(host.client(), force=self.force, progress=self._progress)
        finally:
            pool.close()
        verb = "built" if result.created else "already present"
        self.emit(
            result.to_json(),
            f"{result.image} {verb} ({result.image_id[:19]}, {result.seconds:.1f} s)",
        )


class ImageApp(JupyterApp):
    """Images: ``jupyter gpudev image bootstrap``."""

    name = "jupyter-gpudev-image"
    version = __version__
    description = "Manage the images jupyter-gpudev starts."
    subcommands: dict[str, Any] = {
        "bootstrap": (ImageBootstrapApp, ImageBootstrapApp.description.splitlines()[0]),
    }

    def start(self) -> None:
        if self.subapp is None:
            self.print_subcommands()
            self.exit(2)
        super().start()


class GPUDevCLI(JupyterApp):
    """``jupyter gpudev``: dev containers on GPU hosts."""

    name = "jupyter-gpudev"
    version = __version__
    description = "Dev containers on GPU hosts: hosts, GPUs and images."
    subcommands: dict[str, Any] = {
        "hosts": (HostsApp, "List hosts, their Docker engines and GPUs."),
        "image": (ImageApp, "Manage images (bootstrap a base image without a registry)."),
    }

    def start(self) -> None:
        if self.subapp is None:
            self.print_subcommands()
            self.exit(2)
        super().start()


main = GPUDevCLI.launch_instance
