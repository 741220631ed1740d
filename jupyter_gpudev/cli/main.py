"""``jupyter gpudev ...``: the command line. Every subcommand takes ``--json``.

The CLI reads the same configuration as the server (``jupyter_server_config.*`` and
``jupyter_gpudev_config.*`` in the Jupyter config path, ``c.HostPool.*`` and so on), so a host
configured for the server is the same host here."""

from __future__ import annotations

import os
import signal
import sys
from typing import Any

from traitlets.config import Configurable

from .._version import __version__
from ..services import CLASSES
from ..shared.authority import GPUDevService
from .base import GPUDevApplication
from .commit import CommitApp, DiffApp
from .containers import (
    EnvsApp,
    LogsApp,
    LsApp,
    PinApp,
    PortsApp,
    ResumeApp,
    RmApp,
    StartApp,
    StopApp,
    UnpinApp,
)
from .hosts import HostsApp, ImageApp
from .top import TopApp


class GPUDevCLI(GPUDevApplication):
    """``jupyter gpudev``: dev containers on GPU hosts."""

    name = "jupyter-gpudev"
    usage = "jupyter gpudev SUBCOMMAND [options]"
    version = __version__
    description = "Dev containers on GPU hosts: hosts, GPUs and images."
    classes: list[type[Configurable]] = [*CLASSES, GPUDevService]
    subcommands: dict[str, Any] = {
        "hosts": (HostsApp, "List hosts, their Docker engines and GPUs."),
        "envs": (EnvsApp, "List the environments that can be started."),
        "start": (StartApp, "Start a dev container with its GPUs leased."),
        "ls": (LsApp, "List dev containers."),
        "top": (TopApp, "What each GPU is doing, by dev container and owner."),
        "stop": (StopApp, "Stop a dev container and release its GPUs."),
        "resume": (ResumeApp, "Start a stopped dev container again."),
        "rm": (RmApp, "Remove a dev container."),
        "pin": (PinApp, "Keep a shared dev container running after its last kernel."),
        "unpin": (
            UnpinApp,
            "Let a shared dev container end (stop; a pod: deleted) after its last kernel.",
        ),
        "logs": (LogsApp, "Print a dev container's output."),
        "ports": (PortsApp, "Serve a dev container's web port through the server's proxy."),
        "diff": (DiffApp, "Print a dev container's changes as a Dockerfile diff."),
        "commit": (CommitApp, "Write a dev container's changes into its Dockerfile."),
        "image": (ImageApp, "Manage images (bootstrap a base image without a registry)."),
        "serve": (
            # By name: importing the server (jupyter_server's app) costs every other
            # subcommand about 1.8 s of start-up.
            "jupyter_gpudev.cli.serve.ServeApp",
            "Run the shared gpudev service (the engines, leases and policies of many users).",
        ),
    }

    def start(self) -> None:
        self.start_subcommand()


def main(argv: list[str] | None = None) -> None:
    """``jupyter gpudev``. A reader that stops early (``| head``) ends it quietly, with the
    status a shell reports for a program ended by SIGPIPE, as other Unix tools do."""
    try:
        GPUDevCLI.launch_instance(argv)
        sys.stdout.flush()
    except BrokenPipeError:
        # Python flushes standard output again at exit: /dev/null takes what is left.
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        sys.exit(128 + signal.SIGPIPE)
