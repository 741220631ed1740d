"""jupyter-gpudev: dev containers on GPU hosts, from JupyterLab."""

from __future__ import annotations

from importlib.metadata import PackageNotFoundError, version
from typing import Any

try:
    __version__ = version("jupyter-gpudev")
except PackageNotFoundError:  # pragma: no cover - a source tree that was never installed
    __version__ = "0.0.0.dev0"

__all__ = ["__version__"]


def _jupyter_labextension_paths() -> list[dict[str, str]]:
    return [{"src": "labextension", "dest": "jupyter-gpudev"}]


def _jupyter_server_extension_points() -> list[dict[str, Any]]:
    from .app import GPUDevApp  # noqa: PLC0415 - the server imports this lazily, on purpose

    return [{"module": "jupyter_gpudev", "app": GPUDevApp}]
