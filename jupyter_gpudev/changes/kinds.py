"""Which ``source.ChangeSource`` the dev containers of a host have: the table of the change
side's implementations by the kind of host (``Host.backend.kind``). A new kind of host adds its
entry here and its module next to ``docker_changes.py`` and ``pod_changes.py``."""

from __future__ import annotations

from ..engine import Host
from .docker_changes import DockerChanges
from .pod_changes import PodChanges

#: Each kind of host's ``ChangeSource``, by its backend's kind: a Docker engine's containers,
#: pods on a Kubernetes host.
SOURCES: dict[str, type[DockerChanges] | type[PodChanges]] = {
    "docker": DockerChanges,
    "kubernetes": PodChanges,
}


def source_type(host: Host) -> type[DockerChanges] | type[PodChanges]:
    """The ``ChangeSource`` of the dev containers of ``host`` (``SOURCES``)."""
    return SOURCES[host.backend.kind]
