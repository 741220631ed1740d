"""``jupyter gpudev serve``: the shared service's server (``shared.server.GPUDevServer``) with
its command line read as every gpudev command reads it (``usage.UsageLoader``): an unknown
option, a value of the wrong type or out of its bounds (``--port`` among them) is one
``error:`` line and the usage, exit status 2, before anything is started; not traitlets'
"CRITICAL | Bad config", a traceback, or a service started with the option ignored."""

from __future__ import annotations

import sys
from typing import Any

from jupyter_server.serverapp import ServerApp
from traitlets import TraitError, validate
from traitlets.config import Configurable
from traitlets.config.loader import KVArgParseConfigLoader

from ..configcheck import error_line
from ..shared.server import GPUDevServer
from .usage import UsageError, UsageLoader, got

USAGE = "jupyter gpudev serve [options]"


class ServeApp(GPUDevServer):
    """``jupyter gpudev serve``."""

    @validate("port")
    def _valid_port(self, proposal: Any) -> int:
        port = int(proposal["value"])
        if not 0 <= port <= 65535:
            raise TraitError("a TCP port is a number from 0 to 65535")
        return port

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
            command="jupyter gpudev serve",
            classes=list(classes or ()),
            log=self.log,
            subcommands=self.subcommands,
        )

    def parse_command_line(self, argv: list[str] | None = None) -> None:
        """Options only: the Jupyter server's own reading takes an argument for a notebook
        file or folder to open (``CRITICAL | No such file``, exit 1); the service serves none."""
        try:
            super(ServerApp, self).parse_command_line(argv)
        except UsageError as err:
            self.refuse(err)
        if self.extra_args:
            args = [str(arg) for arg in self.extra_args]
            self.refuse(UsageError(f"jupyter gpudev serve takes no arguments; got {got(args)}"))

    def refuse(self, err: UsageError) -> None:
        """The error on one line, the usage after it; exit 2."""
        print(f"error: {error_line(err.message)}", file=sys.stderr)
        print(f"usage: {USAGE} (--help lists the options)", file=sys.stderr)
        self.exit(err.exit_code)
