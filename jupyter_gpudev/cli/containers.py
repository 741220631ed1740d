"""``jupyter gpudev envs|start|ls|stop|resume|pin|unpin|rm|logs|ports``."""

from __future__ import annotations

import json
import sys
from typing import Any

from traitlets import Bool, Int, List, Unicode

from ..containers import DevContainerInfo, DevContainers, StartRequest
from ..containers.plan import as_kubectl_list, plan_text
from ..errors import BadRequest
from ..untrusted import escape_unprintable, printable
from .base import ContainerCommand, GPUDevSubcommand
from .usage import UsageError, bad_value, got


def format_containers(infos: list[DevContainerInfo]) -> str:
    if not infos:
        return "No dev containers."
    rows: list[tuple[str, ...]] = [
        ("NAME", "HOST", "ENVIRONMENT", "STATE", "GPUS", "OWNER", "PORTS")
    ]
    for info in infos:
        ports = ",".join(f"{c}->127.0.0.1:{h}" for c, h in info.ports.items())
        cells = (
            info.name,
            info.host,
            info.environment,
            info.status + (" (pinned)" if info.pinned else ""),
            ",".join(info.gpu_uuids) or "-",
            info.owner,
            ports or "-",
        )
        rows.append(tuple(map(escape_unprintable, cells)))
    widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]))]
    lines = ["  ".join(c.ljust(w) for c, w in zip(row, widths, strict=True)) for row in rows]
    lines += [
        f"{escape_unprintable(info.name)}: {escape_unprintable(warning)}"
        for info in infos
        for warning in info.warnings
    ]
    return "\n".join(lines)


class EnvsApp(ContainerCommand):
    """List the environments that can be started."""

    name = "jupyter-gpudev-envs"
    description = "List the environments (.devcontainer files, admin config, the default)."
    usage = "jupyter gpudev envs [--root-dir DIR] [--host H] [--json]"

    def run(self) -> None:
        self.no_args()
        if self.service_url():
            self.run_remote(self.remote().environments())
            return
        containers = self.services().containers
        listing = containers.environments.list(containers.root_dir)
        lines = []
        for env in listing.environments:
            gpu = "no GPU" if env.gpu.mode == "none" else f"{env.gpu.count} GPU ({env.gpu.mode})"
            image = env.image_ref()
            lines.append(f"{env.name}  {image}  {gpu}  {env.source}")
        lines.extend(f"problem: {p['file']}: {p['message']}" for p in listing.problems)
        self.emit(
            {
                "environments": [env.to_json() for env in listing.environments],
                "problems": listing.problems,
            },
            "\n".join(lines) or "No environments.",
        )

    def run_remote(self, answer: dict[str, Any]) -> None:
        """The service's environments for this user (the same fields as ``--json``)."""
        lines = []
        for env in answer.get("environments") or []:
            gpu = env.get("gpu") or {}
            mode, count = gpu.get("mode", "none"), gpu.get("count", 0)
            wants = "no GPU" if mode == "none" else f"{count} GPU ({mode})"
            lines.append(f"{env.get('name')}  {env.get('image_ref')}  {wants}  {env.get('source')}")
        problems = answer.get("problems") or []
        lines.extend(f"problem: {p.get('file')}: {p.get('message')}" for p in problems)
        self.emit(answer, "\n".join(lines) or "No environments.")


class StartApp(ContainerCommand):
    """Start a dev container of an environment, with its GPUs leased."""

    name = "jupyter-gpudev-start"
    description = """Start a dev container: jupyter gpudev start ENV [--gpus N | --gpu UUID ...]
    [--host H] [--name NAME] [--dry-run]. Prints the container; exit 5 when no GPU is free.
    --dry-run creates, leases, pulls and builds nothing: it prints what a start would create
    (the engine's create arguments, its security options summarised and the seccomp profile
    left out, or on a Kubernetes host the manifests, which `kubectl apply -f -` reads; --json
    prints the whole plan, profile and notes included)."""

    usage = (
        "jupyter gpudev start ENV [--gpus N | --gpu UUID ...] [--host H] [--name NAME] "
        "[--dry-run] [--json]"
    )

    gpus = Int(
        None,
        allow_none=True,
        min=0,
        help="""How many GPUs to lease: 0 or more (0: none; refused for an environment that
        requires a GPU). Default: what the environment asks.""",
    ).tag(config=True)
    gpu = List(Unicode(), help="A GPU UUID to lease (repeat for more).").tag(config=True)
    container_name = Unicode("", help="The container's name (default: generated).").tag(config=True)
    dry_run = Bool(False, help="Print what a start would create; create nothing.").tag(config=True)

    aliases: dict[str, Any] = {
        **ContainerCommand.aliases,
        "gpus": "StartApp.gpus",
        "gpu": "StartApp.gpu",
        "name": "StartApp.container_name",
    }
    flags: dict[str, Any] = {
        **ContainerCommand.flags,
        "dry-run": (
            {"StartApp": {"dry_run": True}},
            "Print what a start would create (create arguments or manifests); create nothing.",
        ),
    }

    def run(self) -> None:
        environment = self.name_arg()
        if self.gpus is not None and self.gpu:
            raise UsageError("--gpus and --gpu cannot be given together", option="--gpus")
        request = StartRequest(
            environment=environment,
            host=self.host or None,
            name=self.container_name or None,
            gpus=self.gpus,
            gpu_uuids=tuple(self.gpu),
        )
        manager = self.manager()
        if self.dry_run:
            if not isinstance(manager, DevContainers):
                raise BadRequest(
                    "--dry-run reads this machine's hosts; in client mode the shared service "
                    "decides, and it does not plan for others yet"
                )
            plan = manager.plan(request)
            for note in plan["notes"]:
                print(f"note: {note}", file=sys.stderr)
            if plan["kind"] == "kubernetes":
                self.emit(plan, json.dumps(as_kubectl_list(plan), indent=2))
            else:
                self.emit(plan, plan_text(plan))
            return
        info = manager.start(request, progress=self.progress)
        self.emit(info.to_json(), format_containers([info]))


class LsApp(ContainerCommand):
    """List dev containers."""

    name = "jupyter-gpudev-ls"
    description = "List running dev containers (--all: stopped ones too)."
    usage = "jupyter gpudev ls [--all] [--host H] [--json]"
    all_states = Bool(False, help="Also list stopped containers.").tag(config=True)
    flags: dict[str, Any] = {
        **GPUDevSubcommand.flags,
        "all": ({"LsApp": {"all_states": True}}, "Also list stopped containers."),
    }

    def run(self) -> None:
        self.no_args()
        infos = self.manager().list(all_states=self.all_states, host=self.host or None)
        self.emit({"containers": [i.to_json() for i in infos]}, format_containers(infos))


class StopApp(ContainerCommand):
    """Stop a dev container and release its GPUs."""

    name = "jupyter-gpudev-stop"
    description = "Stop a dev container (kept, with its changes) and release its GPU lease."
    usage = "jupyter gpudev stop NAME [--host H] [--json]"

    def run(self) -> None:
        name = self.name_arg()
        info = self.manager().stop(name, host=self.host or None)
        self.emit(info.to_json(), format_containers([info]))


class ResumeApp(ContainerCommand):
    """Start a stopped dev container again."""

    name = "jupyter-gpudev-resume"
    description = "Start a stopped dev container again, with the same GPUs (exit 5 if taken)."
    usage = "jupyter gpudev resume NAME [--host H] [--json]"

    def run(self) -> None:
        name = self.name_arg()
        info = self.manager().resume(name, host=self.host or None)
        self.emit(info.to_json(), format_containers([info]))


class PinApp(ContainerCommand):
    """Pin a shared dev container."""

    name = "jupyter-gpudev-pin"
    description = (
        "Pin a shared dev container: it keeps running, with its GPUs, after its last kernel "
        "ends (unpinned ones stop then, after c.DevContainers.linger seconds; a pod is "
        "deleted then, unless files outside its workspace changed)."
    )
    usage = "jupyter gpudev pin NAME [--host H] [--json]"
    pinned = True

    def run(self) -> None:
        name = self.name_arg()
        info = self.manager().pin(name, host=self.host or None, pinned=self.pinned)
        self.emit(info.to_json(), format_containers([info]))


class UnpinApp(PinApp):
    """Unpin a dev container."""

    name = "jupyter-gpudev-unpin"
    description = (
        "Unpin a dev container: it stops (a pod: is deleted, unless changed) when its last "
        "kernel ends."
    )
    usage = "jupyter gpudev unpin NAME [--host H] [--json]"
    pinned = False


class RmApp(ContainerCommand):
    """Remove a dev container."""

    name = "jupyter-gpudev-rm"
    description = "Remove a dev container; one with uncommitted changes needs --force."
    usage = "jupyter gpudev rm NAME [--force] [--host H] [--json]"
    force = Bool(False, help="Remove even with uncommitted changes.").tag(config=True)
    flags: dict[str, Any] = {
        **GPUDevSubcommand.flags,
        "force": ({"RmApp": {"force": True}}, "Remove even with uncommitted changes."),
    }

    def run(self) -> None:
        name = self.name_arg()
        self.manager().remove(name, host=self.host or None, force=self.force)
        self.emit({"removed": name}, f"removed {name}")


class LogsApp(ContainerCommand):
    """Print a dev container's output."""

    name = "jupyter-gpudev-logs"
    description = """Print a dev container's output (-f: follow it). Control characters in it
    are shown escaped (ESC as \\x1b), so that its terminal sequences are not run by yours;
    --raw writes it as it came (for a file, or a program that expects them)."""
    usage = "jupyter gpudev logs NAME [-f] [--raw] [--host H] [--json]"
    follow = Bool(False, help="Keep printing new output.").tag(config=True)
    raw = Bool(
        False,
        help="""Write the output as it came, terminal control sequences included (which a
        terminal runs: only for a file or a program that expects them).""",
    ).tag(config=True)
    flags: dict[str, Any] = {
        **GPUDevSubcommand.flags,
        "f": ({"LogsApp": {"follow": True}}, "Keep printing new output."),
        "follow": ({"LogsApp": {"follow": True}}, "Keep printing new output."),
        "raw": (
            {"LogsApp": {"raw": True}},
            "Write the output's control sequences as they came (not for a terminal).",
        ),
    }

    def run(self) -> None:
        name = self.name_arg()
        chunks = self.manager().logs(name, host=self.host or None, follow=self.follow)
        if self.json_output and not self.follow:
            print(json.dumps({"logs": "".join(chunks)}))  # (JSON escapes control characters)
            return
        for chunk in chunks:
            sys.stdout.write(chunk if self.raw else printable(chunk))
            sys.stdout.flush()


class PortsApp(ContainerCommand):
    """Serve a web port of a dev container through the server's proxy, or stop serving it."""

    name = "jupyter-gpudev-ports"
    description = """`jupyter gpudev ports add NAME PORT` serves a port of a dev container (a
    TensorBoard started by hand, say) at /gpudev/proxy/NAME/PORT/ on the Jupyter server, like
    the environment's forwardPorts; `ports remove NAME PORT` stops serving it."""
    usage = "jupyter gpudev ports add|remove NAME PORT [--host H] [--json]"

    def run(self) -> None:
        args = [str(arg) for arg in self.extra_args]
        if len(args) != 3:
            raise UsageError(f"{self.command()} expects ACTION NAME PORT; got {got(args)}")
        action, name, port = args
        if action not in ("add", "remove"):
            raise bad_value("ACTION", "one of add, remove", [action])
        # ASCII digits only ("²" is a digit to str.isdigit, not to int), and few of them.
        if not (port.isascii() and port.isdigit() and len(port) <= 5 and 0 < int(port) < 65536):
            raise bad_value("PORT", "a port number, 1 to 65535", [port])
        info = self.manager().set_web_port(
            name, int(port), host=self.host or None, add=action == "add"
        )
        ports = ", ".join(str(p) for p in info.web_ports) or "none"
        self.emit(info.to_json(), f"{info.name}: web ports {ports}")
