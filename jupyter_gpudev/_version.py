"""The installed distribution's version (``0.0.0.dev0`` in a source tree never installed)."""

from __future__ import annotations

from importlib.metadata import PackageNotFoundError, version

try:
    __version__ = version("jupyter-gpudev")
except PackageNotFoundError:  # pragma: no cover - a source tree that was never installed
    __version__ = "0.0.0.dev0"
