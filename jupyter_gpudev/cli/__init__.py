"""``jupyter gpudev ...``: the command line (the console script is ``jupyter_gpudev.cli:main``)."""

from .main import GPUDevCLI, main

__all__ = ["GPUDevCLI", "main"]
