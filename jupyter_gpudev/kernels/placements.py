"""What the gpudev kernels of one process share: one object, not module globals.

Every ``GPUDevProvisioner`` of a process (a Jupyter server, or ``jupyter console``) uses the
same ``DevContainers`` and must agree on which kernels run in each shared container (the last
one to end stops it, after the linger), which ports each container already gives out, and the
kernel command each image declares. ``PLACEMENTS`` holds that; nothing here talks to an engine.
"""

from __future__ import annotations

import asyncio
import contextlib
import random
import threading
from collections.abc import Callable, Iterator
from datetime import datetime
from typing import Any, Protocol

from ..containers import DevContainers
from ..errors import Conflict

#: ``(host, container name)`` of a shared container.
Key = tuple[str, str]

#: The ports a kernel's five are drawn from, in its container.
FIRST_PORT, LAST_PORT = 40000, 59999
PORT_COUNT = LAST_PORT - FIRST_PORT + 1


class NoFreePorts(Conflict):
    """A container's kernels hold all the ports its kernels are given (``choose_ports``)."""

    code = "no_free_ports"


class KernelService(Protocol):
    """What a client-mode server asks the shared service about kernels (``shared.client``)."""

    def environments(self) -> list[dict[str, Any]]:
        """The environments the user can start (``GET /gpudev/api/environments``)."""

    def containers(self) -> list[dict[str, Any]]:
        """The user's dev containers (``GET /gpudev/api/containers``)."""

    async def launch(self, request: dict[str, Any]) -> dict[str, Any]:
        """Place and start a kernel; its connection (ip, ports), container, host, GPUs."""

    async def poll(self, kernel_id: str) -> int | None:
        """The kernel's exit code, ``None`` while it runs."""

    async def signal(self, kernel_id: str, signum: int) -> None: ...

    async def activity(self, kernel_id: str, last_activity: datetime) -> None:
        """The kernel's last activity as this server saw it (the service sees none)."""

    async def cleanup(self, kernel_id: str, *, restart: bool, keep_container: bool) -> None: ...


class KernelPlacements:
    """The manager, the kernels of each shared container, lingering stops, ports, argv."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._manager: DevContainers | None = None
        #: Client mode: the shared service that runs this server's gpudev kernels
        #: (``kernels.remote``); set by the server extension.
        self.service: KernelService | None = None
        #: Builds a manager where no server gave one (``jupyter console``): set by the face
        #: module ``jupyter_gpudev.provisioner``, which the entry point loads.
        self.standalone: Callable[[Any], DevContainers] | None = None
        #: The server's warm kernels (``kernels.warm.WarmKernels``), set by the server
        #: extension in single-user mode; ``None``: every kernel is started when asked for.
        self.warm: Any = None
        self._kernels_in: dict[Key, set[str]] = {}
        self._lingering: dict[Key, asyncio.TimerHandle] = {}
        #: Shared containers being ended after their last kernel (a pod being deleted): no
        #: kernel may join them meanwhile.
        self._closing: set[Key] = set()
        self._ports_in_use: dict[str, set[int]] = {}
        self._argv_by_image: dict[str, list[str]] = {}

    # -- the manager ----------------------------------------------------------------------------

    def set_manager(self, manager: DevContainers | None) -> None:
        """The server's ``DevContainers`` (set by ``GPUDevApp``), shared by every kernel."""
        with self._lock:
            self._manager = manager

    def current_manager(self) -> DevContainers | None:
        with self._lock:
            return self._manager

    def manager_for(self, config: Any) -> DevContainers:
        """The server's manager, or (outside a server) one built once by ``standalone``."""
        with self._lock:
            if self._manager is None:
                if self.standalone is None:
                    raise RuntimeError(
                        "gpudev kernels need a dev-container manager: load the provisioner "
                        "through jupyter_gpudev.provisioner (its entry point) or a server"
                    )
                self._manager = self.standalone(config)
            return self._manager

    # -- shared containers ----------------------------------------------------------------------

    def join(self, key: Key, kernel_id: str) -> None:
        """A kernel runs in the shared container ``key`` (a pending stop is called off);
        ``Conflict`` while it is being ended (see ``closing``)."""
        with self._lock:
            if key in self._closing:
                raise Conflict(
                    f"{key[1]!r} is being deleted now that its last kernel ended (unless it "
                    "has changes): start the kernel again in a moment, or from its environment"
                )
            self._kernels_in.setdefault(key, set()).add(kernel_id)
            waiting = self._lingering.pop(key, None)
        if waiting is not None:
            waiting.cancel()

    def leave(self, key: Key, kernel_id: str) -> bool:
        """A kernel ended; ``True`` when it was the container's last."""
        with self._lock:
            kernels = self._kernels_in.get(key, set())
            kernels.discard(kernel_id)
            if kernels:
                return False
            self._kernels_in.pop(key, None)
            return True

    def kernels_in(self, key: Key) -> frozenset[str]:
        """The kernels of this process that run in the shared container ``key``."""
        with self._lock:
            return frozenset(self._kernels_in.get(key, ()))

    def linger(self, key: Key, handle: asyncio.TimerHandle) -> None:
        with self._lock:
            self._lingering[key] = handle

    def unused(self, key: Key) -> bool:
        """The linger is over: ``True`` when no kernel joined the container since."""
        with self._lock:
            self._lingering.pop(key, None)
            return not self._kernels_in.get(key)

    @contextlib.contextmanager
    def closing(self, key: Key) -> Iterator[bool]:
        """While the shared container ``key`` is ended after its last kernel: yields ``True``
        when no kernel is in it (and no other end is under way), and then refuses every
        ``join`` until the block is left; else yields ``False`` and changes nothing."""
        with self._lock:
            free = not self._kernels_in.get(key) and key not in self._closing
            if free:
                self._closing.add(key)
        try:
            yield free
        finally:
            if free:
                with self._lock:
                    self._closing.discard(key)

    # -- ports and kernel commands --------------------------------------------------------------

    def choose_ports(self, container: str, count: int) -> tuple[int, ...]:
        """``count`` ports no other kernel of this process uses in ``container``;
        ``NoFreePorts`` when fewer are free (its kernels hold every one)."""
        with self._lock:
            used = self._ports_in_use.setdefault(container, set())
            taken = sum(1 for port in used if FIRST_PORT <= port <= LAST_PORT)
            free = PORT_COUNT - taken
            if free < count:
                if not used:
                    del self._ports_in_use[container]
                raise NoFreePorts(
                    f"{container!r} has no free kernel ports: its kernels hold {taken} of "
                    f"its {PORT_COUNT} ports and a kernel needs {count}: shut down some of "
                    "its kernels, or start this one in another dev container",
                    details={"container": container, "free": free, "wanted": count},
                )
            rng = random.SystemRandom()
            ports: list[int] = []
            if taken > PORT_COUNT // 2:  # few left: drawn from those, not by trial
                left = [p for p in range(FIRST_PORT, LAST_PORT + 1) if p not in used]
                ports = rng.sample(left, count)
            while len(ports) < count:
                port = rng.randint(FIRST_PORT, LAST_PORT)
                if port not in used and port not in ports:
                    ports.append(port)
            used.update(ports)
            return tuple(ports)

    def reserve_ports(self, container: str, ports: tuple[int, ...]) -> None:
        """``ports`` are taken in ``container`` (a kernel reached again after a restart keeps
        its own): ``choose_ports`` gives them to no other kernel until they are released."""
        with self._lock:
            self._ports_in_use.setdefault(container, set()).update(ports)

    def release_ports(self, container: str, ports: tuple[int, ...]) -> None:
        with self._lock:
            used = self._ports_in_use.get(container)
            if used is not None:
                used.difference_update(ports)
                if not used:  # a container gone is not kept
                    del self._ports_in_use[container]

    def argv(self, key: str) -> list[str] | None:
        """The image kernel argv remembered under ``key`` (``process.argv_key``: an image and
        an owner)."""
        with self._lock:
            cached = self._argv_by_image.get(key)
        return list(cached) if cached is not None else None

    def remember_argv(self, key: str, argv: list[str]) -> None:
        with self._lock:
            self._argv_by_image[key] = list(argv)


#: The one per process.
PLACEMENTS = KernelPlacements()
