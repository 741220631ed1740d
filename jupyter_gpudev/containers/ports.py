"""Web ports of dev containers served through the authenticated proxy: the environment's
``forwardPorts`` (labelled at creation) and ports added at run time (kept in ``ports.json`` in
gpudev's state folder, by container id)."""

from __future__ import annotations

import json
import os
import threading
from pathlib import Path
from typing import Any

from docker.models.containers import Container

from ..labels import L_PORTS

_LOCK = threading.Lock()


def declared_ports(container: Container) -> set[int]:
    """The environment's forwardPorts, as labelled at creation."""
    return {
        int(part) for part in container.labels.get(L_PORTS, "").split(",") if part.strip().isdigit()
    }


def web_ports(container: Container, added: dict[str, list[int]]) -> tuple[int, ...]:
    """Every port of ``container`` the proxy serves: declared, or in ``added``
    (``AddedPorts.read``)."""
    return tuple(sorted(declared_ports(container) | set(added.get(str(container.id), ()))))


class AddedPorts:
    """The ports added at run time, per container id, in ``<state_dir>/ports.json``."""

    def __init__(self, state_dir: str | os.PathLike[str], log: Any) -> None:
        self.path = Path(state_dir) / "ports.json"
        self.log = log

    def read(self) -> dict[str, list[int]]:
        try:
            data = json.loads(self.path.read_text())
        except FileNotFoundError:
            return {}
        except (OSError, ValueError) as exc:
            self.log.warning("gpudev: %s unreadable: %r", self.path, exc)
            return {}
        if not isinstance(data, dict):
            return {}
        return {
            str(key): [int(p) for p in value if isinstance(p, int)]
            for key, value in data.items()
            if isinstance(value, list)
        }

    def _write(self, ports: dict[str, list[int]]) -> None:
        self.path.parent.mkdir(parents=True, exist_ok=True)
        tmp = self.path.with_suffix(f".{os.getpid()}.tmp")
        tmp.write_text(json.dumps(ports, indent=1, sort_keys=True))
        os.replace(tmp, self.path)

    def web_ports(self, container: Container) -> tuple[int, ...]:
        """Every port of ``container`` the proxy serves."""
        return web_ports(container, self.read())

    def set(self, container_id: str, port: int, *, add: bool) -> None:
        """Add (or with ``add=False`` drop) one run-time port of a container."""
        with _LOCK:
            ports = self.read()
            current = set(ports.get(container_id, []))
            if add:
                current.add(port)
            else:
                current.discard(port)
            if current:
                ports[container_id] = sorted(current)
            else:
                ports.pop(container_id, None)
            self._write(ports)
