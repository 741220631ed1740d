"""``jupyter gpudev ...``: the command line. Every subcommand takes ``--json``.

The CLI reads the same configuration as the server (``jupyter_server_config.*`` and
``jupyter_gpudev_config.*`` in the Jupyter config path, ``c.HostPool.*`` and so on), so a host
configured for the server is the same host here.
"""

from __future__ import annotations

import json
import os
import sys
from typing import TYPE_CHECKING, Any

from jupyter_core.application import JupyterApp, base_aliases, base_flags
from traitlets import Bool, Int, List, Unicode
from traitlets.config import Configurable

from .._version import __version__
from ..changes.commit import CommitOptions
from ..containers import DevContainerInfo, DevContainers, StartRequest
from ..engine import HostInfo, ImageBootstrapper, Inventory, unreachable_summary
from ..errors import BadRequest, GPUDevError, engine_errors
from ..services import CLASSES, Services

if TYPE_CHECKING:
    from ..changes.capture import Captured
    from ..changes.commit import CommitResult

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

    classes: list[type[Configurable]] = [*CLASSES]
    flags: dict[str, Any] = {**base_flags, **_json_flag}
    aliases: dict[str, Any] = {**base_aliases}

    _services: Services | None = None

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
            with engine_errors("The command", self.log):
                self.run()
        except GPUDevError as err:
            self.fail(err)
        finally:
            self.close()

    def workspace_root(self) -> str:
        """The workspace root: c.ServerApp.root_dir if configured, else the current folder."""
        return str(self.config.get("ServerApp", {}).get("root_dir") or os.getcwd())

    def services(self) -> Services:
        """gpudev's managers, built once from this command's config; ``close`` closes them."""
        if self._services is None:
            self._services = Services(self.workspace_root(), parent=self, log=self.log)
        return self._services

    def close(self) -> None:
        """Release what ``run`` opened (engine connections, NVML)."""
        if self._services is not None:
            self._services.close()

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

    subcommands: dict[str, Any] = {}  # filled in below: add, remove

    def start(self) -> None:
        if self.subapp is not None:
            self.subapp.start()
            return
        super().start()

    def run(self) -> None:
        if self.extra_args:
            raise BadRequest(
                f"Unknown hosts subcommand {self.extra_args[0]!r}: use `hosts`, `hosts add "
                "NAME URL` or `hosts remove NAME`"
            )
        infos = self.services().host_pool.describe_all()
        error = unreachable_summary(infos)
        if error is not None:
            error.details["hosts"] = [info.to_json() for info in infos]
            self.fail(error)
        self.emit({"hosts": [info.to_json() for info in infos]}, format_hosts(infos))


class HostsAddApp(GPUDevSubcommand):
    """Add a host at run time."""

    name = "jupyter-gpudev-hosts-add"
    description = """Add a host: `jupyter gpudev hosts add NAME URL` with URL
    ssh://user@host[:port] (key authentication; the host key must be in known_hosts) or
    tcp://host:port (TLS client certificates). The host must answer first (--no-check: add it
    anyway). It is kept in c.HostPool.hosts_file, and the server sees it at once."""

    identity_file = Unicode("", help="ssh://: the private key to use.").tag(config=True)
    known_hosts = Unicode("", help="ssh://: the known_hosts file to check the host key in.").tag(
        config=True
    )
    workspace = Unicode(
        "", help="A folder of that host mounted as the workspace of its containers."
    ).tag(config=True)
    mount_roots = List(
        Unicode(), help="Folders of that host environments may mount (read-only)."
    ).tag(config=True)
    nvidia_smi = Unicode("", help="The nvidia-smi command on that host.").tag(config=True)
    tls_ca_cert = Unicode("", help="tcp://: the CA certificate file.").tag(config=True)
    tls_client_cert = Unicode("", help="tcp://: the client certificate file.").tag(config=True)
    tls_client_key = Unicode("", help="tcp://: the client key file.").tag(config=True)
    check = Bool(True, help="Connect to the host before adding it.").tag(config=True)

    flags: dict[str, Any] = {
        **GPUDevSubcommand.flags,
        "no-check": ({"HostsAddApp": {"check": False}}, "Add the host without connecting."),
    }
    aliases: dict[str, Any] = {
        **GPUDevSubcommand.aliases,
        "identity-file": "HostsAddApp.identity_file",
        "known-hosts": "HostsAddApp.known_hosts",
        "workspace": "HostsAddApp.workspace",
        "mount-root": "HostsAddApp.mount_roots",
        "nvidia-smi": "HostsAddApp.nvidia_smi",
        "tls-ca-cert": "HostsAddApp.tls_ca_cert",
        "tls-client-cert": "HostsAddApp.tls_client_cert",
        "tls-client-key": "HostsAddApp.tls_client_key",
    }

    def run(self) -> None:
        if len(self.extra_args) != 2:
            raise BadRequest("usage: jupyter gpudev hosts add NAME URL [--identity-file=...]")
        name, url = (str(arg) for arg in self.extra_args)
        options: dict[str, Any] = {
            key: value
            for key in (
                "identity_file",
                "known_hosts",
                "workspace",
                "nvidia_smi",
                "tls_ca_cert",
                "tls_client_cert",
                "tls_client_key",
            )
            if (value := getattr(self, key))
        }
        if self.mount_roots:
            options["mount_roots"] = list(self.mount_roots)
        info = self.services().host_pool.add(name, url, options, check=self.check)
        self.emit(info.to_json(), f"added {name}\n{format_hosts([info])}")


class HostsRemoveApp(GPUDevSubcommand):
    """Remove a host added at run time."""

    name = "jupyter-gpudev-hosts-remove"
    description = """Remove a host added with `hosts add` (not one of c.HostPool.hosts). A
    host that still has dev containers is kept: remove or commit them first."""

    def run(self) -> None:
        if len(self.extra_args) != 1:
            raise BadRequest("usage: jupyter gpudev hosts remove NAME")
        name = str(self.extra_args[0])
        self.services().containers.remove_host(name)
        self.emit({"removed": name}, f"removed {name}")


HostsApp.subcommands = {
    "add": (HostsAddApp, "Add a host (ssh:// or tcp://) at run time."),
    "remove": (HostsRemoveApp, "Remove a host added at run time."),
}


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
        pool = self.services().host_pool
        host = pool.get(self.host or pool.local_name)
        bootstrapper = ImageBootstrapper(parent=self, log=self.log)
        result = bootstrapper.run(host.client(), force=self.force, progress=self._progress)
        verb = "built" if result.created else "already present"
        self.emit(
            result.to_json(),
            f"{result.image} {verb} ({result.image_id[:19]}, {result.seconds:.1f} s)",
        )


class ContainerCommand(GPUDevSubcommand):
    """Shared by the container subcommands: the manager, the root dir, progress output."""

    root_dir = Unicode(
        "",
        help="""The workspace root (mounted into containers, searched for .devcontainer).
        Default: c.ServerApp.root_dir if configured, else the current directory.""",
    ).tag(config=True)
    host = Unicode("", help="The host to use (default: the local engine).").tag(config=True)

    aliases: dict[str, Any] = {
        **GPUDevSubcommand.aliases,
        "root-dir": "ContainerCommand.root_dir",
        "host": "ContainerCommand.host",
    }

    def workspace_root(self) -> str:
        return self.root_dir or super().workspace_root()

    def manager(self) -> DevContainers:
        return self.services().containers

    def close(self) -> None:
        if self._bar is not None:
            self._bar.close()
        super().close()

    def name_arg(self) -> str:
        if len(self.extra_args) != 1:
            raise BadRequest(f"usage: jupyter gpudev {self.name.rsplit('-', 1)[-1]} NAME")
        return str(self.extra_args[0])

    _bar: ProgressBar | None = None

    def progress(self, event: dict[str, Any]) -> None:
        if self._bar is None:
            self._bar = ProgressBar()
        self._bar.update(event)


def _size(count: int) -> str:
    value = float(count)
    for unit in ("B", "kB", "MB", "GB"):
        if value < 1000 or unit == "GB":
            return f"{value:.0f} {unit}" if unit == "B" else f"{value:.1f} {unit}"
        value /= 1000
    return f"{count} B"  # pragma: no cover - the loop returns


class ProgressBar:
    """Progress events on stderr. On a terminal, per-layer and byte progress redraws one line
    in place with a bar; elsewhere (a log, CI) that progress prints at most every 10 %. Other
    messages (stages, build output) print as lines."""

    WIDTH = 30

    def __init__(self, stream: Any = None) -> None:
        self.stream = stream or sys.stderr
        self.tty = bool(getattr(self.stream, "isatty", lambda: False)())
        self.drawn = False
        self.stage = ""
        self.printed_pct = -10

    def update(self, event: dict[str, Any]) -> None:
        stage = str(event.get("stage") or "")
        message = str(event.get("message") or "")
        current, total = event.get("current"), event.get("total")
        if stage != self.stage:
            self.stage, self.printed_pct = stage, -10
        if isinstance(current, int) and isinstance(total, int) and total > 0:
            pct = min(100, 100 * current // total)
            done = self.WIDTH * pct // 100
            bar = "#" * done + "." * (self.WIDTH - done)
            text = f"[{stage}] [{bar}] {pct:3d}% {_size(current)} of {_size(total)}"
            if self.tty:
                self._redraw(f"{text} {message}")
            elif pct >= self.printed_pct + 10 or (pct == 100 and self.printed_pct < 100):
                self.printed_pct = pct
                self._line(text)
            return
        if event.get("transient"):
            if self.tty:
                self._redraw(f"[{stage}] {message}")
            return
        self._line(f"[{stage}] {message}")

    def _redraw(self, text: str) -> None:
        width = 120
        self.stream.write("\r\x1b[2K" + text[:width])
        self.stream.flush()
        self.drawn = True

    def _line(self, text: str) -> None:
        if self.drawn:
            self.stream.write("\r\x1b[2K")
            self.drawn = False
        self.stream.write(text + "\n")
        self.stream.flush()

    def close(self) -> None:
        if self.drawn:
            self.stream.write("\n")
            self.stream.flush()
            self.drawn = False


def format_containers(infos: list[DevContainerInfo]) -> str:
    if not infos:
        return "No dev containers."
    rows = [("NAME", "HOST", "ENVIRONMENT", "STATE", "GPUS", "OWNER", "PORTS")]
    for info in infos:
        ports = ",".join(f"{c}->127.0.0.1:{h}" for c, h in info.ports.items())
        rows.append(
            (
                info.name,
                info.host,
                info.environment,
                info.status + (" (pinned)" if info.pinned else ""),
                ",".join(info.gpu_uuids) or "-",
                info.owner,
                ports or "-",
            )
        )
    widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]))]
    return "\n".join(
        "  ".join(c.ljust(w) for c, w in zip(row, widths, strict=True)) for row in rows
    )


class EnvsApp(ContainerCommand):
    """List the environments that can be started."""

    name = "jupyter-gpudev-envs"
    description = "List the environments (.devcontainer files, admin config, the default)."

    def run(self) -> None:
        containers = self.manager()
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


class StartApp(ContainerCommand):
    """Start a dev container of an environment, with its GPUs leased."""

    name = "jupyter-gpudev-start"
    description = """Start a dev container: jupyter gpudev start ENV [--gpus N | --gpu UUID ...]
    [--host H] [--name NAME]. Prints the container; exit 5 when no GPU is free."""

    gpus = Int(-1, help="How many GPUs to lease (default: what the environment asks).").tag(
        config=True
    )
    gpu = List(Unicode(), help="A GPU UUID to lease (repeat for more).").tag(config=True)
    container_name = Unicode("", help="The container's name (default: generated).").tag(config=True)

    aliases: dict[str, Any] = {
        **ContainerCommand.aliases,
        "gpus": "StartApp.gpus",
        "gpu": "StartApp.gpu",
        "name": "StartApp.container_name",
    }

    def run(self) -> None:
        environment = self.name_arg()
        request = StartRequest(
            environment=environment,
            host=self.host or None,
            name=self.container_name or None,
            gpus=None if self.gpus < 0 else self.gpus,
            gpu_uuids=tuple(self.gpu),
        )
        info = self.manager().start(request, progress=self.progress)
        self.emit(info.to_json(), format_containers([info]))


class LsApp(ContainerCommand):
    """List dev containers."""

    name = "jupyter-gpudev-ls"
    description = "List running dev containers (--all: stopped ones too)."
    all_states = Bool(False, help="Also list stopped containers.").tag(config=True)
    flags: dict[str, Any] = {
        **GPUDevSubcommand.flags,
        "all": ({"LsApp": {"all_states": True}}, "Also list stopped containers."),
    }

    def run(self) -> None:
        infos = self.manager().list(all_states=self.all_states, host=self.host or None)
        self.emit({"containers": [i.to_json() for i in infos]}, format_containers(infos))


class StopApp(ContainerCommand):
    """Stop a dev container and release its GPUs."""

    name = "jupyter-gpudev-stop"
    description = "Stop a dev container (kept, with its changes) and release its GPU lease."

    def run(self) -> None:
        info = self.manager().stop(self.name_arg(), host=self.host or None)
        self.emit(info.to_json(), format_containers([info]))


class ResumeApp(ContainerCommand):
    """Start a stopped dev container again."""

    name = "jupyter-gpudev-resume"
    description = "Start a stopped dev container again, with the same GPUs (exit 5 if taken)."

    def run(self) -> None:
        info = self.manager().resume(self.name_arg(), host=self.host or None)
        self.emit(info.to_json(), format_containers([info]))


class PinApp(ContainerCommand):
    """Pin a shared dev container."""

    name = "jupyter-gpudev-pin"
    description = (
        "Pin a shared dev container: it keeps running, with its GPUs, after its last kernel "
        "ends (unpinned ones stop then, after c.DevContainers.linger seconds)."
    )
    pinned = True

    def run(self) -> None:
        info = self.manager().pin(self.name_arg(), host=self.host or None, pinned=self.pinned)
        self.emit(info.to_json(), format_containers([info]))


class UnpinApp(PinApp):
    """Unpin a dev container."""

    name = "jupyter-gpudev-unpin"
    description = "Unpin a dev container: it stops when its last kernel ends."
    pinned = False


class RmApp(ContainerCommand):
    """Remove a dev container."""

    name = "jupyter-gpudev-rm"
    description = "Remove a dev container; one with uncommitted changes needs --force."
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
    description = "Print a dev container's output (-f: follow it)."
    follow = Bool(False, help="Keep printing new output.").tag(config=True)
    flags: dict[str, Any] = {
        **GPUDevSubcommand.flags,
        "f": ({"LogsApp": {"follow": True}}, "Keep printing new output."),
        "follow": ({"LogsApp": {"follow": True}}, "Keep printing new output."),
    }

    def run(self) -> None:
        chunks = self.manager().logs(self.name_arg(), host=self.host or None, follow=self.follow)
        if self.json_output and not self.follow:
            print(json.dumps({"logs": "".join(chunks)}))
            return
        for chunk in chunks:
            sys.stdout.write(chunk)
            sys.stdout.flush()


class CommitApp(ContainerCommand):
    """Turn a dev container's changes into its environment's Dockerfile."""

    name = "jupyter-gpudev-commit"
    description = (
        "Show a dev container's changes as a Dockerfile diff: jupyter gpudev commit NAME "
        "[--write] [--verify] [--snapshot TAG] [--push] [-m MESSAGE] [--exclude ID ...] "
        "[--expect DIGEST] [--json]. --exclude leaves the change ID (as `jupyter gpudev diff` "
        "lists them) out of the commit: it stays uncommitted; --expect refuses the commit "
        "(exit 6) unless its diff has this digest (`diff --json`'s). --verify builds "
        "the patched Dockerfile and compares its packages with the container's; --snapshot "
        "commits the container as the image TAG (driver files left out, labelled with the "
        "environment, base image digest and diff hash); --push pushes it with your Docker "
        "credentials; --write applies the diff: the changed files are copied into the build "
        "context (gpudev-context/NAME/), the Dockerfile is written (the previous one kept as "
        "Dockerfile.prev; devcontainer.json is pointed at a new Dockerfile) and the "
        "container's baseline moves forward, so a diff right after is empty. The workspace is "
        "written last: a failed verify or push writes nothing."
    )
    write = Bool(False, help="Apply the diff to the Dockerfile.").tag(config=True)
    verify = Bool(
        False, help="Build the patched Dockerfile and compare its packages with the container's."
    ).tag(config=True)
    snapshot = Unicode(
        "", help="Commit the container as this image tag ([REGISTRY/]NAME[:TAG])."
    ).tag(config=True)
    push = Bool(False, help="Push the --snapshot image to the registry its tag names.").tag(
        config=True
    )
    message = Unicode("", help="A message: a comment in the Dockerfile, the image's label.").tag(
        config=True
    )
    exclude = List(
        Unicode(),
        help="Ids of changes to leave out of the commit (repeat --exclude ID; `jupyter gpudev "
        "diff NAME` lists the ids): they stay uncommitted.",
    ).tag(config=True)
    expect = Unicode(
        "",
        help="Commit only if the diff's digest (`jupyter gpudev diff NAME --json`) is this one.",
    ).tag(config=True)
    aliases: dict[str, Any] = {
        **ContainerCommand.aliases,
        "snapshot": "CommitApp.snapshot",
        "m": "CommitApp.message",
        "message": "CommitApp.message",
        "exclude": "CommitApp.exclude",
        "expect": "CommitApp.expect",
    }
    flags: dict[str, Any] = {
        **GPUDevSubcommand.flags,
        "write": ({"CommitApp": {"write": True}}, "Apply the diff to the Dockerfile."),
        "verify": (
            {"CommitApp": {"verify": True}},
            "Build the patched Dockerfile and compare its packages with the container's.",
        ),
        "push": ({"CommitApp": {"push": True}}, "Push the --snapshot image."),
    }

    def options(self) -> CommitOptions:
        return CommitOptions(
            write=self.write,
            verify=self.verify,
            snapshot=self.snapshot or None,
            push=self.push,
            message=self.message or None,
            exclude=tuple(self.exclude),
            expect=self.expect or None,
        )

    def run(self) -> None:
        name = self.name_arg()
        committer = self.services().committer
        options = self.options()
        quiet = self.json_output or options == CommitOptions(
            message=options.message, exclude=options.exclude, expect=options.expect
        )
        outcome = committer.commit(
            name, options, self.host or None, None if quiet else self.progress
        )
        if self._bar is not None:
            self._bar.close()
        result = outcome.to_json()
        if self.json_output:
            print(json.dumps(result))
            return
        print_outcome(name, outcome, result)


def print_outcome(name: str, outcome: CommitResult, result: dict[str, Any]) -> None:
    """A commit's human output: the diff on stdout, the rest on stderr."""
    rendered = outcome.prepared.rendered
    captured = outcome.prepared.captured
    for line in rendered.reported:
        print(f"note: {line}", file=sys.stderr)
    if rendered.diff:
        sys.stdout.write(rendered.diff)
        sys.stdout.flush()
    elif captured.held:
        print(f"Every change of {name} is left out: nothing to commit.", file=sys.stderr)
    else:
        print(f"No changes in {name} since its baseline.", file=sys.stderr)
    print_items(captured)
    ignored = captured.changes.files.ignored
    if ignored and rendered.diff:
        left = ", ".join(f"{count} {why}" for why, count in sorted(ignored.items()))
        print(f"left out: {left}", file=sys.stderr)
    if outcome.verify is not None:
        print(
            f"verified: the rebuilt image has the container's packages "
            f"({outcome.verify.seconds:.1f} s)",
            file=sys.stderr,
        )
    if outcome.snapshot is not None:
        snap = outcome.snapshot
        line = f"snapshot: {snap.reference} ({snap.image_id[:19]})"
        if snap.pushed_digest is not None:
            line += f", pushed {snap.pushed_digest}".rstrip()
        print(line, file=sys.stderr)
    if result.get("written"):
        print(f"wrote {result['written']}", file=sys.stderr)
        for key in ("backup", "devcontainer", "context_folder"):
            if result.get(key):
                print(f"  {key.replace('_', ' ')}: {result[key]}", file=sys.stderr)
    if outcome.written is not None and captured.held:
        print(
            f"left out, still uncommitted: {', '.join(captured.held)}",
            file=sys.stderr,
        )


#: How many changes the human output of diff and commit lists (``--json`` lists them all).
LISTED_ITEMS = 40


def print_items(captured: Captured) -> None:
    """The changes with their ids (for ``--exclude``), on stderr: ``+`` carried, ``-`` left
    out; then the ``--exclude`` ids that match no change."""
    held = set(captured.held)
    items = captured.items
    if items:
        print("changes (leave one out with --exclude ID):", file=sys.stderr)
        for item in items[:LISTED_ITEMS]:
            label = "" if item.kind in ("file", "delete") else f"  ({item.label})"
            line = f"  {'-' if item.id in held else '+'} {item.id}{label}"
            print("".join(c if c.isprintable() else "?" for c in line), file=sys.stderr)
        if len(items) > LISTED_ITEMS:
            more = len(items) - LISTED_ITEMS
            print(f"  ... and {more} more (--json lists them all)", file=sys.stderr)
    for unknown in captured.excluded_unknown:
        print(f"note: --exclude {unknown}: no such change now", file=sys.stderr)


class DiffApp(CommitApp):
    """Print a dev container's changes as a Dockerfile diff."""

    name = "jupyter-gpudev-diff"
    description = (
        "Print what changed inside a dev container (apt and Python packages, conda, files, "
        "environment variables) as a unified diff of its environment's Dockerfile. Nothing is "
        "written. Credentials and installs a Dockerfile cannot repeat are listed on stderr, "
        "and each change with its id: --exclude ID (repeatable) shows the diff without it."
    )
    flags: dict[str, Any] = dict(GPUDevSubcommand.flags)

    aliases: dict[str, Any] = {**ContainerCommand.aliases, "exclude": "DiffApp.exclude"}

    def options(self) -> CommitOptions:
        # Nothing but the diff, whatever else c.CommitApp says; --exclude leaves changes out.
        return CommitOptions(exclude=tuple(self.exclude))


class PortsApp(ContainerCommand):
    """Serve a web port of a dev container through the server's proxy, or stop serving it."""

    name = "jupyter-gpudev-ports"
    description = """`jupyter gpudev ports add NAME PORT` serves a port of a dev container (a
    TensorBoard started by hand, say) at /gpudev/proxy/NAME/PORT/ on the Jupyter server, like
    the environment's forwardPorts; `ports remove NAME PORT` stops serving it."""

    def run(self) -> None:
        usage = "usage: jupyter gpudev ports add|remove NAME PORT"
        if len(self.extra_args) != 3 or self.extra_args[0] not in ("add", "remove"):
            raise BadRequest(usage)
        action, name, port = self.extra_args
        if not str(port).isdigit():
            raise BadRequest(f"Not a port number: {port!r}; {usage}")
        info = self.manager().set_web_port(
            str(name), int(port), host=self.host or None, add=action == "add"
        )
        ports = ", ".join(str(p) for p in info.web_ports) or "none"
        self.emit(info.to_json(), f"{info.name}: web ports {ports}")


class ImageApp(JupyterApp):
    """Images: ``jupyter gpudev image bootstrap``."""

    name = "jupyter-gpudev-image"
    version = __version__
    description = "Manage the images jupyter-gpudev starts."
    classes: list[type[Configurable]] = [*CLASSES]
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
    classes: list[type[Configurable]] = [*CLASSES]
    subcommands: dict[str, Any] = {
        "hosts": (HostsApp, "List hosts, their Docker engines and GPUs."),
        "envs": (EnvsApp, "List the environments that can be started."),
        "start": (StartApp, "Start a dev container with its GPUs leased."),
        "ls": (LsApp, "List dev containers."),
        "stop": (StopApp, "Stop a dev container and release its GPUs."),
        "resume": (ResumeApp, "Start a stopped dev container again."),
        "rm": (RmApp, "Remove a dev container."),
        "pin": (PinApp, "Keep a shared dev container running after its last kernel."),
        "unpin": (UnpinApp, "Let a shared dev container stop after its last kernel."),
        "logs": (LogsApp, "Print a dev container's output."),
        "ports": (PortsApp, "Serve a dev container's web port through the server's proxy."),
        "diff": (DiffApp, "Print a dev container's changes as a Dockerfile diff."),
        "commit": (CommitApp, "Write a dev container's changes into its Dockerfile."),
        "image": (ImageApp, "Manage images (bootstrap a base image without a registry)."),
    }

    def start(self) -> None:
        if self.subapp is None:
            self.print_subcommands()
            self.exit(2)
        super().start()


main = GPUDevCLI.launch_instance
