"""What a client's terminal sends the service: its input in messages within the service's
64 KiB a message (``shared.terminals.MAX_MESSAGE``), whole characters, all of it."""

from __future__ import annotations

import asyncio
import json
import os
import sys
from typing import Any, cast

import pytest

from jupyter_gpudev.shared import attach
from jupyter_gpudev.shared.terminals import MAX_MESSAGE


class FakeSocket:
    """What ``_relay`` uses of a websocket: what it sends is kept; it reads nothing until
    the input has ended (then the service closes)."""

    def __init__(self) -> None:
        self.sent: list[str] = []
        self.closed = asyncio.Event()

    def write_message(self, message: str) -> None:
        self.sent.append(message)

    def close(self) -> None:
        self.closed.set()

    async def read_message(self) -> str | None:
        await self.closed.wait()
        return None


def test_piped_input_goes_in_messages_the_service_takes(monkeypatch: pytest.MonkeyPatch) -> None:
    # Given input piped to the terminal: control bytes (escaped 6 to 1 in JSON) and
    # characters of several bytes, more than one read
    text = ("\x01\x02é€😀" * 40_000)[:150_000]
    reading, writing = os.pipe()
    os.set_blocking(writing, True)
    data = text.encode()
    piped = os.fdopen(reading, "rb", buffering=0)
    monkeypatch.setattr(sys, "stdin", piped)

    def feed() -> None:
        os.write(writing, data)
        os.close(writing)

    async def relay() -> FakeSocket:
        socket = FakeSocket()
        loop = asyncio.get_running_loop()
        feeding = loop.run_in_executor(None, feed)
        await asyncio.wait_for(attach._relay(cast(Any, socket)), 30)
        await feeding
        return socket

    with piped:
        socket = asyncio.run(relay())
    # Then every message is within the service's bound, and the input arrives whole
    stdin = [json.loads(m) for m in socket.sent if json.loads(m)[0] == "stdin"]
    assert max(len(m) for m in socket.sent) <= MAX_MESSAGE
    assert "".join(message[1] for message in stdin) == text
