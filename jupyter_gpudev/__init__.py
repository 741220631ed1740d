"""jupyter-gpudev: dev containers on GPU hosts, from JupyterLab."""

from __future__ import annotations

from typing import Any

from ._version import __version__

__all__ = ["__version__"]


def _jupyter_labextension_paths() -> list[dict[str, str]]:
    return [{"src": "labextension", "dest": "jupyter-gpudev"}]


def _jupyter_server_extension_points() -> list[dict[str, Any]]:
    from .app import GPUDevApp  # noqa: PLC0415 - the server imports this lazily, on purpose

    return [{"module": "jupyter_gpudev", "app": GPUDevApp}]
