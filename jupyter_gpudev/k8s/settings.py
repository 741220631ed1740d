"""How this server works with its Kubernetes hosts (``k8s://CONTEXT/NAMESPACE``):
``c.KubernetesHosts.*``. Before, these were ``c.ContainerLookup.pod_*`` (and so
``c.DevContainers.pod_*``); those names still work, with a warning (``RENAMED``)."""

from __future__ import annotations

from traitlets import Bool, Enum
from traitlets.config import LoggingConfigurable

from ..traits import PositiveFloat

#: The options that moved here: their old name on ``ContainerLookup`` -> their name here.
RENAMED = {
    "pod_start_timeout": "start_timeout",
    "pod_port_forward": "port_forward",
    "pod_poll_interval": "poll_interval",
    "pod_watch": "watch",
}


class KubernetesHosts(LoggingConfigurable):
    """Dev containers as pods on Kubernetes hosts. Configure with ``c.KubernetesHosts.*``."""

    start_timeout = PositiveFloat(
        600.0,
        help="""Seconds a start on a Kubernetes host waits for its pod to run (the scheduler
        placing it, the node pulling the image; more than 0). Meanwhile the start reports
        why the pod is not running yet; past it, what the start created is deleted (a
        workspace claim from before is kept) and the scheduler's last reason is the error.""",
    ).tag(config=True)

    port_forward = Enum(
        ("auto", "always", "never"),
        "auto",
        help="""How this server reaches kernels and web ports in pods of a Kubernetes host:
        through the API server's port-forward ("always"), at the pod's IP ("never": the
        server must be in the cluster, or on a network that routes pod IPs), or "auto": at the
        pod's IP when the host uses the service account of the pod this server runs in (an
        empty context inside a cluster), else forwarded.""",
    ).tag(config=True)

    poll_interval = PositiveFloat(
        1.0,
        help="""Seconds between two reads of a starting pod on a Kubernetes host (more than
        0).""",
    ).tag(config=True)

    watch = Bool(
        False,
        help="""Answer listings of a Kubernetes host's pods (`ls`, each panel's poll) from one
        LIST and a WATCH of the namespace's dev container pods, kept by this server, instead of
        one LIST per listing: for a shared service that many users' panels poll. While no
        watch is open a listing is a LIST again; this server's own writes are seen at once,
        others' as soon as the watch says (usually well under a second).""",
    ).tag(config=True)
