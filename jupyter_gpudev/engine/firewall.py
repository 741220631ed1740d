"""The host's firewall in front of dev containers' ports: the server's account reaches them,
no other account of the machine does.

Kernels listen on every address of their container, and web apps on the ports they choose;
the container's bridge is reachable from the host, so without a rule any local account could
connect to a kernel's ports (and read its code and outputs on iopub: signing does not hide
published messages) or open an app around Jupyter's login. Containers cannot reach each
other (the bridge has inter-container traffic off); what is left is the host's own processes.

So gpudev keeps one iptables chain, ``GPUDEV-PORTS``, on the output path to the dev
containers' network: new connections there are accepted from root, from the server's own
account and, to one container's address, from that container's owner's account (the shared
service's users' servers connect to their own kernels); anything else is refused. The chain
is written whole (``iptables-restore --noflush``) from the containers running now, at each
start, resume, stop and removal, so a stopped container's address, when the engine gives it
to another, carries no old rule. A new container is closed until its rule is written.

Only on this machine's engine, and only where gpudev may change the firewall (root, or
CAP_NET_ADMIN, and ``iptables`` installed); elsewhere it says once, in the log, that the
ports are reachable by local accounts.
"""

from __future__ import annotations

import ipaddress
import os
import shutil
import subprocess
import threading
from collections.abc import Iterable, Mapping
from typing import Any

CHAIN = "GPUDEV-PORTS"

#: Seconds iptables may take (it waits for the xtables lock meanwhile).
TIMEOUT = 20.0


def _network(value: str) -> str:
    return str(ipaddress.ip_network(value, strict=False))


def chain_rules(allowed: Iterable[int], owners: Mapping[str, Iterable[int]]) -> str:
    """``iptables-restore`` input that writes the whole chain: replies to connections the
    containers opened pass; new connections from the ``allowed`` accounts pass, and to each
    container address of ``owners`` from its accounts; everything else is refused."""
    lines = [
        "*filter",
        f":{CHAIN} - [0:0]",
        f"-A {CHAIN} -m conntrack --ctstate ESTABLISHED,RELATED -j RETURN",
    ]
    lines += [
        f"-A {CHAIN} -m owner --uid-owner {int(uid)} -j RETURN" for uid in sorted(set(allowed))
    ]
    for address in sorted(owners):
        host = ipaddress.ip_address(address)  # a container's address: nothing else gets here
        lines += [
            f"-A {CHAIN} -d {host}/32 -m owner --uid-owner {int(uid)} -j RETURN"
            for uid in sorted(set(owners[address]))
        ]
    lines += [
        f"-A {CHAIN} -p tcp -j REJECT --reject-with tcp-reset",
        f"-A {CHAIN} -j REJECT",
        "COMMIT",
        "",
    ]
    return "\n".join(lines)


class PortGuard:
    """Writes ``GPUDEV-PORTS`` for one engine's dev container network (see the module)."""

    def __init__(self, log: Any) -> None:
        self.log = log
        self._lock = threading.Lock()
        self._hooked: set[str] = set()
        self._warned = False

    @property
    def hooked(self) -> bool:
        """Whether this process has hooked the chain to a network (then it filters)."""
        return bool(self._hooked)

    def available(self) -> bool:
        """Whether gpudev can change this machine's firewall (it says why not once)."""
        if shutil.which("iptables-restore") and shutil.which("iptables") and _may_admin():
            return True
        if not self._warned:
            self._warned = True
            self.log.warning(
                "gpudev: the ports of dev containers (kernels, web apps) are reachable by every "
                "account of this machine: gpudev needs root (or CAP_NET_ADMIN) and iptables to "
                "close them to all but this server (c.DevContainers.port_guard)"
            )
        return False

    def write(
        self,
        subnets: Iterable[str],
        allowed: Iterable[int],
        owners: Mapping[str, Iterable[int]],
    ) -> None:
        """The chain for the containers running now, and its hook for each of ``subnets``."""
        networks = sorted({_network(subnet) for subnet in subnets})
        rules = chain_rules(allowed, owners)
        with self._lock:
            _run(["iptables-restore", "--noflush", "-w"], rules)
            for network in networks:
                if network in self._hooked:
                    continue
                hook = ["OUTPUT", "-d", network, "-j", CHAIN]
                if _run(["iptables", "-w", "-C", *hook], check=False) != 0:
                    _run(["iptables", "-w", "-I", *hook])
                self._hooked.add(network)


_GUARD: PortGuard | None = None
_GUARD_LOCK = threading.Lock()


def port_guard(log: Any) -> PortGuard:
    """The process's one ``PortGuard`` (its servers and views share the chain)."""
    global _GUARD  # noqa: PLW0603 (one per process, made on first use)
    with _GUARD_LOCK:
        if _GUARD is None:
            _GUARD = PortGuard(log)
        return _GUARD


def _may_admin() -> bool:
    if os.geteuid() == 0:
        return True
    try:
        with open("/proc/self/status") as status:
            for line in status:
                if line.startswith("CapEff:"):
                    return bool(int(line.split()[1], 16) & (1 << 12))  # CAP_NET_ADMIN
    except OSError:
        pass
    return False


def _run(argv: list[str], text: str | None = None, *, check: bool = True) -> int:
    """Run iptables (fixed arguments and numbers only, never a user's string)."""
    done = subprocess.run(
        argv,
        input=text,
        capture_output=True,
        text=True,
        timeout=TIMEOUT,
        check=False,
    )
    if check and done.returncode != 0:
        raise RuntimeError(f"{argv[0]} failed ({done.returncode}): {done.stderr.strip()[:500]}")
    return done.returncode
