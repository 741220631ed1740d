"""The ``gpudev`` kernel provisioner's public dotted path, and its wiring outside a server.

The entry point ``jupyter_gpudev.provisioner:GPUDevProvisioner`` (and kernelspecs written
before the code moved into :mod:`jupyter_gpudev.kernels`) name this module. Loading it also
tells the kernels how to build their own services where no Jupyter server gave them a manager
(``jupyter console --kernel gpudev-...``): the kernels layer never imports the services builder.
"""

from __future__ import annotations

import os
from typing import Any

from traitlets.config import Config

from .containers import DevContainers
from .kernels.placements import PLACEMENTS
from .kernels.provisioner import GPUDevProvisioner
from .services import Services

__all__ = ["GPUDevProvisioner"]


def standalone_manager(config: Any) -> DevContainers:
    """A manager of our own, for the kernels of a process that is not a gpudev server."""
    return Services(
        os.getcwd(), config=config if isinstance(config, Config) else Config()
    ).containers


PLACEMENTS.standalone = standalone_manager
