"""Thin REST handlers: parse, authorise, call a manager in a worker thread, map errors.

Every route lives under ``/gpudev/api/``; every method is ``@web.authenticated`` and
``@authorized`` against the ``gpudev`` resource. Domain errors become JSON with their status;
anything else is logged and answered with a generic 500 that echoes nothing from the engine.
"""

from __future__ import annotations

import asyncio
import functools
import json
from collections.abc import Awaitable, Callable
from typing import Any, TypeVar

from jupyter_server.auth.decorator import authorized
from jupyter_server.base.handlers import APIHandler
from tornado import web

from .errors import GPUDevError
from .hosts import unreachable_summary

SETTINGS_KEY = "gpudev"
API = "/gpudev/api"

T = TypeVar("T")
Handler = TypeVar("Handler", bound="GPUDevHandler")


def maps_errors(
    method: Callable[..., Awaitable[None]],
) -> Callable[..., Awaitable[None]]:
    """Answer a ``GPUDevError`` with its status and JSON body (the one place that does)."""

    @functools.wraps(method)
    async def wrapper(self: GPUDevHandler, *args: Any, **kwargs: Any) -> None:
        try:
            await method(self, *args, **kwargs)
        except GPUDevError as err:
            self.log.info(
                "gpudev %s %s -> %s: %s",
                self.request.method,
                self.request.path,
                err.status,
                err.message,
            )
            self.set_status(err.status)
            self.finish(json.dumps(err.to_json()))

    return wrapper


class GPUDevHandler(APIHandler):
    """Base of every gpudev handler."""

    auth_resource = SETTINGS_KEY

    @property
    def gpudev(self) -> Any:
        """The ``GPUDevContext`` built by ``GPUDevApp.initialize_settings``."""
        return self.settings[SETTINGS_KEY]

    async def blocking(self, func: Callable[..., T], *args: Any) -> T:
        """Run a blocking call (Docker SDK, NVML, nvidia-smi) off the event loop."""
        return await asyncio.get_running_loop().run_in_executor(None, func, *args)


class HostsHandler(GPUDevHandler):
    """``GET /gpudev/api/hosts``: every host with its engine and GPUs.

    503 when no host at all is reachable (the body still lists them, with reasons).
    """

    @web.authenticated
    @authorized
    @maps_errors
    async def get(self) -> None:
        infos = await self.blocking(self.gpudev.host_pool.describe_all)
        hosts = [info.to_json() for info in infos]
        error = unreachable_summary(infos)
        if error is not None:
            error.details["hosts"] = hosts
            raise error
        self.finish(json.dumps({"hosts": hosts}))


class HostHandler(GPUDevHandler):
    """``GET /gpudev/api/hosts/NAME``: one host; 404 if unknown, 503 if its engine is down."""

    @web.authenticated
    @authorized
    @maps_errors
    async def get(self, name: str) -> None:
        info = await self.blocking(self.gpudev.host_pool.describe, name)
        error = unreachable_summary([info])
        if error is not None:
            error.details["hosts"] = [info.to_json()]
            raise error
        self.finish(json.dumps(info.to_json()))


def handlers() -> list[tuple[str, type[GPUDevHandler]]]:
    return [
        (rf"{API}/hosts", HostsHandler),
        (rf"{API}/hosts/(?P<name>[^/]+)", HostHandler),
    ]
