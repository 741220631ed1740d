"""Web ports of dev containers served through the authenticated proxy: the environment's
``forwardPorts`` (labelled at creation) and ports added at run time (kept in ``ports.json`` in
gpudev's state folder, by container id). And what keeps their ports to their owners: the
firewall in front of them (``guard_ports``), the SSH forwards that go with a stopping container
(``close_forwards``). And where the host reaches a container (``engine_address``)."""

from __future__ import annotations

import json
import os
import pwd
import subprocess
import threading
from pathlib import Path
from typing import Any

from docker.models.containers import Container

from ..engine import Host, firewall
from ..errors import ENGINE_FAILURES, EngineError
from ..labels import L_MANAGED, L_NAME, L_OWNER, L_PORTS
from .model import user_name

_LOCK = threading.Lock()

#: What writing the firewall may raise: the engine's failures, iptables' (``RuntimeError``).
_GUARD_FAILURES: tuple[type[BaseException], ...] = (
    *ENGINE_FAILURES,
    RuntimeError,
    OSError,
    subprocess.SubprocessError,
)


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


def guard_ports(host: Host, network: str, log: Any, *, unless_hooked: bool = False) -> None:
    """Write the firewall in front of the ports of the dev containers on ``network`` of
    ``host``'s engine (this machine's: ``engine/firewall.py``): root and this server's account
    reach them, and each running container's owner (their local account) reaches theirs: the
    shared service's users' servers connect to their own kernels. Written from the engine's
    containers, whichever process writes it (the service, a server, the command line).
    ``unless_hooked``: only if this process has not hooked the chain yet (before a start:
    once hooked, a new container is closed until the write after its start)."""
    guard = firewall.port_guard(log)
    if (unless_hooked and guard.hooked) or not guard.available():
        return
    try:
        client = host.client()
        config = client.networks.get(network).attrs.get("IPAM", {}).get("Config") or []
        subnets = [str(c["Subnet"]) for c in config if c.get("Subnet")]
        per_address: dict[str, set[int]] = {}
        running = client.containers.list(
            filters={"label": L_MANAGED, "network": network}, ignore_removed=True
        )
        for one in running:
            networks = one.attrs.get("NetworkSettings", {}).get("Networks") or {}
            address = (networks.get(network) or {}).get("IPAddress")
            uid = _uid_of(one.labels.get(L_OWNER, ""))
            if address and uid is not None:
                per_address.setdefault(str(address), set()).add(uid)
        guard.write(subnets, {0, os.geteuid()}, per_address)
    except _GUARD_FAILURES:
        log.exception("gpudev: the firewall of the dev containers' ports not written")


def _uid_of(owner: str) -> int | None:
    """The uid of the local account ``owner`` (a container's owner label), if there is one."""
    try:
        return pwd.getpwnam(owner).pw_uid if owner else None
    except KeyError:
        return None


def close_forwards(host: Host, container: Container) -> None:
    """A stopping container's SSH forwards (kernels, web ports) go with it."""
    if host.tunnels is None:
        return
    networks = container.attrs.get("NetworkSettings", {}).get("Networks") or {}
    for network in networks.values():
        if network.get("IPAddress"):
            host.unreach(str(network["IPAddress"]))


def engine_address(container: Container, network: str) -> str:
    """The IP address at which the host reaches ``container`` (on ``network`` if it is on it;
    the loopback address for one on the host's network)."""
    name = container.labels.get(L_NAME, container.name or "")
    settings = container.attrs.get("NetworkSettings", {})
    if container.attrs.get("HostConfig", {}).get("NetworkMode") == "host":
        return "127.0.0.1"
    networks = settings.get("Networks") or {}
    preferred: dict[str, Any] = networks.get(network) or next(iter(networks.values()), {})
    address = str(preferred.get("IPAddress") or settings.get("IPAddress") or "")
    if not address:
        raise EngineError(f"{user_name(name)!r} has no network address (is it running?)")
    return address
