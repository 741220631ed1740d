"""A dedicated kernel's start cancelled while its container is being started
(``GPUDevProvisioner.pre_launch``): the container the start makes is removed once the start's
thread ends, its lease freed with it, and its ports released; a second cancellation gives up
waiting instead of hanging the kernel's task."""

from __future__ import annotations

import asyncio
import logging
import threading
from collections.abc import Iterator
from types import SimpleNamespace
from typing import Any, cast

import pytest
from jupyter_client.kernelspec import KernelSpec
from jupyter_client.manager import AsyncKernelManager

from jupyter_gpudev.containers import DevContainers, StartRequest
from jupyter_gpudev.errors import NotFound
from jupyter_gpudev.kernels.placements import PLACEMENTS
from jupyter_gpudev.kernels.provisioner import GPUDevProvisioner, set_manager

KERNEL = "0c1d2e3f"
NAME = f"kernel-{KERNEL}"


class Manager:
    """The few things of ``DevContainers`` a dedicated kernel's start and cleanup ask for: its
    start blocks until ``release`` is set, then returns the container it made."""

    def __init__(self) -> None:
        self.entered = threading.Event()
        self.release = threading.Event()
        self.started: list[StartRequest] = []
        self.removed: list[tuple[str, str | None]] = []
        self.stopped: list[tuple[str, str | None]] = []
        self.kernels = None
        host = SimpleNamespace(
            name="local", backend=SimpleNamespace(kind="docker"), spec=SimpleNamespace()
        )
        self.host_pool = SimpleNamespace(get=lambda _name: host, local_name="local")

    def start(self, request: StartRequest, _progress: Any) -> Any:
        self.entered.set()
        assert self.release.wait(10), "the test never let the start finish"
        self.started.append(request)
        return SimpleNamespace(key=request.name, host="local", pod=False)

    def find(self, name: str, _host: str) -> tuple[Any, Any]:
        raise NotFound(f"no container {name!r}")

    def remove(self, name: str, host: str | None, **_kwargs: Any) -> None:
        self.removed.append((name, host))

    def stop(self, name: str, host: str | None) -> None:
        self.stopped.append((name, host))


@pytest.fixture
def manager() -> Iterator[Manager]:
    made = Manager()
    set_manager(cast(DevContainers, made))
    yield made
    made.release.set()  # a start still blocked (a failed test) ends
    set_manager(None)


def provisioner() -> GPUDevProvisioner:
    spec = KernelSpec(argv=["python3"], display_name="gpudev", language="python")
    km = AsyncKernelManager(kernel_name="gpudev-default")
    return GPUDevProvisioner(kernel_id=KERNEL, kernel_spec=spec, parent=km)


async def cancel_while_starting(manager: Manager, gpudev: GPUDevProvisioner) -> asyncio.Task[Any]:
    """A kernel's ``pre_launch`` cancelled while its container's start runs in its thread."""
    task = asyncio.ensure_future(gpudev.pre_launch(env={}))
    assert await asyncio.to_thread(manager.entered.wait, 10)
    # (its first kernel's ports were chosen, in its name, before the start)
    assert gpudev._ports
    assert PLACEMENTS._ports_in_use[NAME] == set(gpudev._ports)
    task.cancel()
    await asyncio.sleep(0.05)
    return task


def test_a_start_cancelled_midway_removes_the_container_it_made(manager: Manager) -> None:
    gpudev = provisioner()

    async def scenario() -> None:
        task = await cancel_while_starting(manager, gpudev)
        # When the start ends, having made the container
        manager.release.set()
        # Then the cancellation goes on
        with pytest.raises(asyncio.CancelledError):
            await task

    asyncio.run(scenario())
    # And the container it made is removed (its lease freed with it)
    assert [request.name for request in manager.started] == [NAME]
    assert manager.removed == [(NAME, "local")]
    # And no port of its first kernel is still held, in its name or its key's
    assert NAME not in PLACEMENTS._ports_in_use


def test_a_second_cancellation_gives_up_waiting_and_says_so(
    manager: Manager, caplog: pytest.LogCaptureFixture
) -> None:
    gpudev = provisioner()
    gpudev.log = logging.getLogger("test_provisioner_cancel")

    async def scenario() -> None:
        task = await cancel_while_starting(manager, gpudev)
        assert not task.done()
        # When it is cancelled again while it waits for the start
        task.cancel()
        # Then it ends at once, without the start having ended
        with pytest.raises(asyncio.CancelledError):
            await asyncio.wait_for(task, 5)
        assert not manager.release.is_set()
        manager.release.set()

    with caplog.at_level(logging.WARNING, logger="test_provisioner_cancel"):
        asyncio.run(scenario())
    # And it said that the container may be left for the orphan sweep
    warnings = [r for r in caplog.records if r.levelno == logging.WARNING]
    assert any("orphan" in r.getMessage() for r in warnings), warnings
    assert NAME not in PLACEMENTS._ports_in_use


def test_a_start_that_is_not_cancelled_keeps_its_container_and_ports(
    manager: Manager, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Given a start that ends before anything cancels it (the usual path)
    gpudev = provisioner()
    manager.release.set()
    manager.environments = SimpleNamespace(  # type: ignore[attr-defined]
        get=lambda *_args: SimpleNamespace(idle_timeout=None)
    )
    manager.root_dir = "/"  # type: ignore[attr-defined]
    monkeypatch.setattr(GPUDevProvisioner, "_kernel_argv", lambda _self: ["python3"])
    # When its kernel's pre_launch runs
    kwargs = asyncio.run(gpudev.pre_launch(env={}))
    # Then the container is the kernel's, kept, its first kernel's ports held in its key
    assert kwargs["cmd"] == ["python3"]
    assert (gpudev.container_name, gpudev.host, gpudev._dedicated) == (NAME, "local", True)
    assert manager.removed == []
    assert PLACEMENTS._ports_in_use[NAME] == set(gpudev._ports)
    # And its cleanup removes it and releases them
    asyncio.run(gpudev.cleanup())
    assert manager.removed == [(NAME, "local")]
    assert NAME not in PLACEMENTS._ports_in_use
