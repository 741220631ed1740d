"""Kernel picker entries: one ``gpudev-<environment>`` kernelspec per environment (a kernel in
a new container of its own), and one ``gpudev--<container>`` per running shared dev container
(a kernel in that container, next to its other kernels).

``GPUDevKernelSpecManager`` adds them to the ordinary kernelspecs, computed each time the list
is asked for, so adding, changing or removing a devcontainer.json, or starting a dev container,
shows in the picker without restarting the server. The extension makes it the server's
``kernel_spec_manager_class`` when it is linked.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

from jupyter_client.kernelspec import KernelSpec, KernelSpecManager, NoSuchKernel
from traitlets import Bool, Unicode

from ..containers import DevContainerInfo
from ..environments import Environment, EnvironmentManager
from ..errors import GPUDevError, NotFound
from .placements import PLACEMENTS
from .process import DEFAULT_ARGV
from .provisioner import current_manager
from .remote import SERVICE_PROVISIONER

PREFIX = "gpudev-"
#: Environment names start with a letter or digit, so this never names an environment.
SHARED_PREFIX = "gpudev--"
RESOURCES = str(Path(__file__).with_name("kernelspec_resources"))


@dataclass(frozen=True)
class EnvironmentEntry:
    """What the picker shows of an environment (``Environment``'s, or the service's JSON)."""

    name: str
    display_name: str
    gpu_mode: str
    gpu_count: int

    @classmethod
    def of(cls, env: Environment) -> EnvironmentEntry:
        return cls(env.name, env.display_name, env.gpu.mode, env.gpu.count)

    @classmethod
    def from_json(cls, data: Any) -> EnvironmentEntry | None:
        """An entry of ``GET /gpudev/api/environments`` (``None`` if malformed)."""
        try:
            gpu = data["gpu"]
            entry = cls(
                str(data["name"]), str(data["display_name"]), str(gpu["mode"]), int(gpu["count"])
            )
        except (KeyError, TypeError, ValueError):
            return None
        return entry


@dataclass(frozen=True)
class SharedEntry:
    """What the picker shows of a running shared container (``DevContainerInfo`` or JSON)."""

    name: str
    environment: str
    host: str
    gpu_count: int

    @classmethod
    def of(cls, info: DevContainerInfo) -> SharedEntry:
        return cls(info.name, info.environment, info.host, len(info.gpu_uuids))

    @classmethod
    def from_json(cls, data: Any) -> SharedEntry | None:
        """A running container of ``GET /gpudev/api/containers`` kernels may share."""
        try:
            if data.get("kernel_id") is not None or data.get("state") != "running":
                return None
            return cls(
                str(data["name"]),
                str(data["environment"]),
                str(data["host"]),
                len(data["gpu_uuids"]),
            )
        except (AttributeError, KeyError, TypeError):
            return None


Entry = TypeVar("Entry", EnvironmentEntry, SharedEntry)


def display_name(env: Environment | EnvironmentEntry) -> str:
    entry = env if isinstance(env, EnvironmentEntry) else EnvironmentEntry.of(env)
    if entry.gpu_mode == "none" or entry.gpu_count == 0:
        gpus = "CPU"
    else:
        plural = "s" if entry.gpu_count != 1 else ""
        optional = " optional" if entry.gpu_mode == "optional" else ""
        gpus = f"{entry.gpu_count} GPU{plural}{optional}"
    return f"{entry.display_name} ({gpus}) · gpudev"


def _provisioner() -> str:
    """``gpudev``, or in client mode the provisioner that asks the shared service."""
    return SERVICE_PROVISIONER if PLACEMENTS.service is not None else "gpudev"


def _gpudev_spec(display: str, config: dict[str, Any], gpudev: dict[str, Any]) -> KernelSpec:
    """A kernelspec launched by the gpudev provisioner with ``config``."""
    return KernelSpec(
        argv=list(DEFAULT_ARGV),
        display_name=display,
        language="python",
        interrupt_mode="signal",
        resource_dir=RESOURCES,
        metadata={
            "kernel_provisioner": {"provisioner_name": _provisioner(), "config": config},
            "gpudev": gpudev,
        },
    )


def kernelspec_for(env: Environment | EnvironmentEntry) -> KernelSpec:
    """A kernel in a new container of its own, of environment ``env``."""
    entry = env if isinstance(env, EnvironmentEntry) else EnvironmentEntry.of(env)
    return _gpudev_spec(
        display_name(entry),
        {"environment": entry.name},
        {"environment": entry.name, "gpus": entry.gpu_count, "mode": entry.gpu_mode},
    )


def shared_kernelspec_for(info: DevContainerInfo | SharedEntry) -> KernelSpec:
    """A kernel in a running dev container that kernels share (``info``)."""
    info = info if isinstance(info, SharedEntry) else SharedEntry.of(info)
    count = info.gpu_count
    gpus = f"{count} GPU{'s' if count != 1 else ''}" if count else "CPU"
    where = {"environment": info.environment, "container": info.name, "host": info.host}
    return _gpudev_spec(
        f"{info.environment} in {info.name} ({gpus}, shared) · gpudev",
        where,
        {**where, "gpus": count},
    )


class GPUDevKernelSpecManager(KernelSpecManager):
    """The usual kernelspecs plus one per gpudev environment."""

    gpudev_kernels = Bool(
        True, help="Offer a kernel for each gpudev environment in the picker."
    ).tag(config=True)

    root_dir = Unicode(
        "",
        help="Where environments are searched; default: the server's root_dir, else the cwd.",
    ).tag(config=True)

    def _environments(self) -> list[EnvironmentEntry]:
        if not self.gpudev_kernels:
            return []
        service = PLACEMENTS.service
        if service is not None:
            return self._from_service("environments", service.environments, EnvironmentEntry)
        # The server's own environment manager and root (the ones kernels start with).
        containers = current_manager()
        manager = containers.environments if containers else EnvironmentManager(parent=self)
        default_root = containers.root_dir if containers else getattr(self.parent, "root_dir", "")
        root = self.root_dir or default_root or "."
        try:
            return [EnvironmentEntry.of(env) for env in manager.list(Path(root)).environments]
        except GPUDevError as err:
            self.log.warning("gpudev: environments could not be listed: %s", err.message)
            return []

    def _from_service(
        self, what: str, fetch: Callable[[], list[dict[str, Any]]], entry: type[Entry]
    ) -> list[Entry]:
        """Client mode: the service's ``what`` as picker entries (none if it cannot answer:
        the picker shows the other kernels meanwhile)."""
        try:
            listed = fetch()
        except Exception as err:
            self.log.warning("gpudev: the service's %s could not be listed: %s", what, err)
            return []
        return [e for e in map(entry.from_json, listed) if e is not None]

    def _shared_containers(self) -> list[SharedEntry]:
        """Running dev containers that kernels can share (not those made for one kernel)."""
        service = PLACEMENTS.service
        if service is not None and self.gpudev_kernels:
            return self._from_service("containers", service.containers, SharedEntry)
        manager = current_manager()
        if not self.gpudev_kernels or manager is None:
            return []
        try:
            infos = manager.list(all_states=False)
        except GPUDevError as err:
            self.log.warning("gpudev: dev containers could not be listed: %s", err.message)
            return []
        return [SharedEntry.of(i) for i in infos if i.kernel_id is None and i.state == "running"]

    def find_kernel_specs(self) -> dict[str, str]:
        specs: dict[str, str] = super().find_kernel_specs()
        for env in self._environments():
            specs[PREFIX + env.name] = RESOURCES
        for info in self._shared_containers():
            specs[SHARED_PREFIX + info.name] = RESOURCES
        return specs

    def get_kernel_spec(self, kernel_name: str) -> KernelSpec:
        if kernel_name.startswith(SHARED_PREFIX) and PLACEMENTS.service is not None:
            wanted = kernel_name.removeprefix(SHARED_PREFIX)
            for entry in self._shared_containers():
                if entry.name == wanted:
                    return shared_kernelspec_for(entry)
            raise NoSuchKernel(kernel_name)
        if kernel_name.startswith(SHARED_PREFIX):
            manager = current_manager()
            if manager is None:
                raise NoSuchKernel(kernel_name)
            try:
                # Any state: a kernel started in a stopped shared container starts it again.
                info = manager.get(kernel_name.removeprefix(SHARED_PREFIX))
            except NotFound:
                raise NoSuchKernel(kernel_name) from None
            return shared_kernelspec_for(info)
        if kernel_name.startswith(PREFIX):
            wanted = kernel_name.removeprefix(PREFIX)
            for env in self._environments():
                if env.name == wanted:
                    return kernelspec_for(env)
            raise NoSuchKernel(kernel_name)
        spec: KernelSpec = super().get_kernel_spec(kernel_name)
        return spec

    async def get_all_specs(self) -> dict[str, Any]:  # type: ignore[override]
        """Every spec, computed off the event loop (it reads devcontainer files and asks the
        engines for their containers); the server awaits it (as for the gateway's)."""
        return await asyncio.get_running_loop().run_in_executor(None, self._all_specs)

    def _all_specs(self) -> dict[str, Any]:
        result: dict[str, Any] = {}
        base = super().find_kernel_specs()
        for name in base:
            try:
                result[name] = {
                    "resource_dir": base[name],
                    "spec": super().get_kernel_spec(name).to_dict(),
                }
            except NoSuchKernel:
                continue
        for env in self._environments():
            result[PREFIX + env.name] = {
                "resource_dir": RESOURCES,
                "spec": kernelspec_for(env).to_dict(),
            }
        for info in self._shared_containers():
            result[SHARED_PREFIX + info.name] = {
                "resource_dir": RESOURCES,
                "spec": shared_kernelspec_for(info).to_dict(),
            }
        return result
