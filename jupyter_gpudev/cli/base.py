"""What every ``jupyter gpudev`` subcommand shares: the base app with ``--json`` and one error
mapping, the command line read by ``usage.UsageLoader`` (a bad option or value is a usage
error: the option as typed, what it expects, the value given, the usage, exit status 2), the
container commands' manager and root folder, the progress bar and formatting (what a
container wrote is shown through ``untrusted.printable``)."""

from __future__ import annotations

import difflib
import json
import os
import sys
from typing import Any

from jupyter_core.application import JupyterApp, base_aliases, base_flags
from traitlets import Bool, TraitError, Unicode
from traitlets.config import Config, Configurable
from traitlets.config.loader import KVArgParseConfigLoader

from .._version import __version__
from ..configcheck import check_config, error_line, one_line, shown
from ..containers import DevContainers
from ..errors import BadRequest, ConfigError, GPUDevError, engine_errors
from ..services import CLASSES, Services
from ..shared.service_api import ServiceAPI
from ..untrusted import printable
from .remote import RemoteContainers
from .usage import UsageError, UsageLoader, got

_json_flag = {
    "json": (
        {"GPUDevSubcommand": {"json_output": True}},
        "Print the result as JSON on stdout (progress and messages go to stderr).",
    )
}


class GPUDevApplication(JupyterApp):
    """What ``jupyter gpudev`` and each subcommand share: the command line read by
    ``UsageLoader``, and a usage error answered with its one line, the usage, exit 2; each
    config file's values checked as read (``usage.check_config``), a bad one answered with
    its one line, exit 2."""

    #: The usage line (after ``usage: ``); "" = the command and ``[options]``.
    usage = ""

    def command(self) -> str:
        """``jupyter gpudev start`` for ``jupyter-gpudev-start``."""
        return self.name.replace("-", " ")

    def usage_line(self) -> str:
        return self.usage or f"{self.command()} [options]"

    def _create_loader(
        self,
        argv: list[str] | None,
        aliases: dict[str, Any],
        flags: dict[str, Any],
        classes: list[type[Configurable]] | None,
    ) -> KVArgParseConfigLoader:
        return UsageLoader(
            self,
            argv,
            aliases,
            flags,
            command=self.command(),
            classes=list(classes or ()),
            log=self.log,
            subcommands=self.subcommands,
        )

    def load_config_file(self, suppress_errors: bool = True) -> None:  # type: ignore[override]
        """jupyter_core's, except that a bad value (``check_config``) is a ``ConfigError``
        that stops the command; a file that fails to run is still only warned of."""
        try:
            super().load_config_file(suppress_errors=False)
        except ConfigError:
            raise
        except Exception:
            if not suppress_errors or self.raise_config_file_errors:
                raise
            self.log.warning("Error loading config file: %s", self.config_file_name, exc_info=True)

    def update_config(self, config: Config) -> None:
        """Every value checked before it is taken (a config file's too; the command line's
        were checked as read), so that a bad one is refused before anything is built."""
        check_config(config, self, self.classes, self.loaded_config_files)
        super().update_config(config)

    def initialize(self, argv: Any = None) -> None:
        try:
            super().initialize(argv)
        except (UsageError, ConfigError) as err:
            args = [str(a) for a in (sys.argv[1:] if argv is None else argv)]
            args = args[: args.index("--")] if "--" in args else args
            self.report(err, as_json="json" in self.flags and "--json" in args)
            self.exit(err.exit_code)

    def start_subcommand(self) -> None:
        """Start the subcommand given; a word that names none is a usage error (with the
        closest name), and no word at all lists them; both exit 2."""
        if self.subapp is None and self.extra_args:
            word = str(self.extra_args[0])
            close = difflib.get_close_matches(word, list(self.subcommands), n=1, cutoff=0.6)
            hint = f"did you mean {close[0]}?" if close else f"`{self.command()}` lists them"
            self.report(
                UsageError(f"{shown(word)} is not a subcommand of {self.command()} ({hint})"),
                as_json=False,
            )
            self.exit(2)
        if self.subapp is None:
            self.print_subcommands()
            self.exit(2)
        super().start()

    def report(self, err: GPUDevError, *, as_json: bool) -> None:
        """An error on stderr (and as JSON on stdout with ``--json``); a usage error with
        the command's usage after it."""
        if isinstance(err, UsageError):
            err.usage = err.usage or self.usage_line()
            err.details["usage"] = err.usage
        if as_json:
            print(json.dumps(err.to_json(), indent=2))
        print(f"error: {error_line(err.message)}", file=sys.stderr)
        if isinstance(err, UsageError):
            print(f"usage: {err.usage} (--help lists the options)", file=sys.stderr)


class GPUDevSubcommand(GPUDevApplication):
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
        self.report(err, as_json=self.json_output)
        self.exit(err.exit_code)

    #: Works in client mode, through the shared service's REST API (``cli.remote``).
    through_service = False

    def service_url(self) -> str:
        """The shared service this machine's Jupyter servers use (client mode), if any."""
        configured = self.config.get("GPUDevApp", {}).get("service_url")
        return str(configured or os.environ.get("GPUDEV_SERVICE_URL", ""))

    def start(self) -> None:
        try:
            if self.service_url() and not self.through_service:
                # Not the engine behind the service's back (which this account should not
                # be able to reach anyway): say so, instead of a socket permission error.
                command = self.name.removeprefix("jupyter-gpudev-")
                raise BadRequest(
                    f"This server uses the shared gpudev service ({self.service_url()}): "
                    f"`jupyter gpudev {command}` is for its administrators, on its machine"
                )
            with engine_errors("The command", self.log):
                self.run()
        except GPUDevError as err:
            self.fail(err)
        except TraitError as err:
            # A value a part refused when it was built (the command line's and the config
            # files' were checked as read; a part's own checks may need more): the trait's
            # words, on one line.
            self.fail(ConfigError(f"Bad configuration: {one_line(str(err), 400)}"))
        finally:
            self.close()

    def no_args(self) -> None:
        """Refuse arguments, for a subcommand that takes none."""
        if self.extra_args:
            args = [str(a) for a in self.extra_args]
            raise UsageError(f"{self.command()} takes no arguments; got {got(args)}")

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

    through_service = True

    def manager(self) -> DevContainers | RemoteContainers:
        """The containers: this machine's engines, or in client mode the shared service's."""
        if self.service_url():
            return self.remote()
        return self.services().containers

    def remote(self) -> RemoteContainers:
        """The shared service's containers (client mode), as this server's user."""
        return RemoteContainers(ServiceAPI(self.service_url()))

    def close(self) -> None:
        if self._bar is not None:
            self._bar.close()
        super().close()

    def name_arg(self) -> str:
        if len(self.extra_args) != 1:
            args = [str(a) for a in self.extra_args]
            raise UsageError(f"{self.command()} expects one NAME; got {got(args)}")
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
                self._redraw(f"[{stage}] {printable(message)}")
            return
        self._line(f"[{stage}] {printable(message)}")

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
