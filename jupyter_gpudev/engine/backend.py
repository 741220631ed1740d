"""What kind of host one is: ``HostBackend``, the part of a ``Host`` that only its kind knows.

Every host has one (``Host.backend``): ``hosts.DockerEngine`` for a Docker engine (local,
``ssh://`` or ``tcp://``), ``cluster.Cluster`` for a Kubernetes cluster (``k8s://``);
``hosts.HOST_KINDS`` says which a host's URL gets. The parts above pick their own side of a
host by its ``kind`` in a table of theirs (``containers.lifecycle.backend_type``,
``kernels.runtime.processes_type``, ``changes.kinds.source_type``), never by testing what the
host is; a part of one kind reaches its own backend through a typed accessor
(``cluster.cluster_of``).
"""

from __future__ import annotations

from typing import Protocol

from .attribution import ProcReader
from .info import HostInfo


class HostBackend(Protocol):
    """One host's kind and what differs by it at the engine level."""

    @property
    def kind(self) -> str:
        """The kind's name, what the parts above key their tables by (``"docker"``,
        ``"kubernetes"``)."""

    def report(self, origin: str) -> HostInfo:
        """The host's report (``Host.describe``); one that does not answer is reported so,
        not raised. ``origin``: where the host comes from (``HostInfo.origin``)."""

    def no_engine(self) -> str | None:
        """Why the host has no Docker engine API to connect to (``None``: it has one)."""

    def proc_reader(self) -> ProcReader | None:
        """How the host's ``/proc`` is read to attribute GPU processes (``None``: it cannot
        be, or its GPU processes are not the host's)."""

    def close(self) -> None:
        """Close what the kind holds open (the host closes its own connections)."""
