"""A restarted shared service reaches first kernels (``kernels.first``) again despite processes
of their users that call themselves the launcher (decoys): a kernel whose record pins its
launcher is seen ended, and no kernel's lookup waits for a fork that happened long ago (every
user's kernel calls wait for the restore)."""

from __future__ import annotations

import asyncio
import secrets
import time
import uuid
from collections.abc import Callable
from typing import Any

import docker
import docker.errors
import pytest

from jupyter_gpudev.containers import docker_name
from jupyter_gpudev.kernels import process
from jupyter_gpudev.kernels.process import first_launcher
from jupyter_gpudev.shared.kernel_table import KernelRecord, KernelTable
from jupyter_gpudev.shared.kernels import KernelProcesses
from tests.integration.test_first_kernel import DECOY
from tests.integration.test_kernels import run
from tests.integration.test_shared_restart import (
    ALICE,
    LOG,
    Service,
    connected,
    launch_body,
    services,
)
from tests.leaks import Baseline, assert_nothing_leaked

pytestmark = pytest.mark.integration

__all__ = ["services"]  # the fixture


async def ended_with_a_decoy(processes: KernelProcesses, answer: dict[str, Any], key: str) -> None:
    """The kernel of ``answer`` starts a decoy, then exits (7); seen ended by the service."""
    async with connected(answer["connection"], key) as client:
        _, reply = await run(client, DECOY)
        assert reply["status"] == "ok", reply
        client.execute("import os; os._exit(7)")
        kernel_id = answer["kernel_id"]
        deadline = time.monotonic() + 10
        while await processes.poll(ALICE, kernel_id) is None:
            assert time.monotonic() < deadline, "the decoy kept the ended kernel alive"
            await asyncio.sleep(0.1)
        assert await processes.poll(ALICE, kernel_id) == 7


async def test_a_restore_sees_pinned_first_kernels_ended_and_waits_for_no_fork(
    services: Callable[[], Service],
    docker_client: docker.DockerClient,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # A wait for a fork would show: far longer than the restore takes
    monkeypatch.setattr(process, "FIRST_FORK_WAIT", 30.0)
    baseline = Baseline.take(docker_client, ignore_removed=True)
    first, processes = services()
    view = first.for_user(ALICE)
    # Given the image's kernel command known (a first kernel of it started by an exec)
    learn = str(uuid.uuid4())
    await processes.launch(view, ALICE, launch_body(learn, secrets.token_hex(32)))
    await processes.cleanup(ALICE, learn, {})
    # And two kernels of alice's that started with their containers, each with a decoy of
    # hers left after it exited
    answers: dict[str, dict[str, Any]] = {}
    for _ in range(2):
        kernel_id, key = str(uuid.uuid4()), secrets.token_hex(32)
        answer = await processes.launch(view, ALICE, launch_body(kernel_id, key))
        answers[kernel_id] = {**answer, "kernel_id": kernel_id}
        await ended_with_a_decoy(processes, answers[kernel_id], key)
    pinned, earlier = answers
    table = KernelTable(first.service.containers.state_dir, log=LOG)
    records = {record.kernel_id: record for record in table.load()}
    assert first_launcher(str(records[pinned].info["exec_id"])) is not None
    assert first_launcher(str(records[earlier].info["exec_id"])) is not None
    # And one of them as an earlier version wrote it: its launcher not pinned
    old = records[earlier]
    table.save(KernelRecord(old.owner, old.kernel_id, old.admin, {**old.info, "exec_id": "first"}))
    # When the service restarts
    first.close()
    second, again = services()
    started = time.monotonic()
    kept, forgotten = await again.restore()
    took = time.monotonic() - started
    LOG.info("restored in %.3f s", took)
    # Then no kernel's host PID was waited for
    assert took < 10
    # And the pinned kernel is seen ended despite the decoy: released, its container removed
    assert (kept, forgotten) == (1, 1)
    with pytest.raises(docker.errors.NotFound):
        docker_client.containers.get(docker_name(answers[pinned]["container"]))
    # And the earlier version's record is read by the old rule (the decoy tells it runs)
    assert await again.poll(ALICE, earlier) is None
    await again.cleanup(ALICE, earlier, {})
    assert table.load() == []
    for held in (first, second):
        assert_nothing_leaked(docker_client, baseline, server_id=held.service.containers.server_id)
