"""Dev containers as pods on a Kubernetes host: the objects of a plan created in
order, the start waited for while saying why the pod is not running yet (the scheduler's and
the kubelet's words), a start that cannot finish cleaned up, pods listed and deleted, and a
pod's output (``pod_output``).

On a cluster the scheduler is the authority on GPUs: no lease is written, the pod holds them
while it exists. A start that gives up deletes what it created (a workspace claim it did not
create is kept: it may hold the user's work). A pod is never stopped and kept: deleting it
frees its GPUs and loses what changed outside the workspace claim, so ``DevContainers``
asks for ``force`` first. Its NetworkPolicy (only gpudev's server gets in) is made before it
and then owned by it: the cluster deletes it with the pod, never while the pod still runs.

What the API server answers is read as data (``k8s/status.py``, ``pod_info``): every field
checked, messages cleaned.
"""

from __future__ import annotations

import codecs
import ipaddress
import os
import re
import time
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ..engine import Host, Progress
from ..engine.cluster import Cluster, cluster_of
from ..environments import Environment
from ..errors import Conflict, EngineError, GPUDevError, ImageError
from ..k8s import objects as k8s
from ..k8s.listing import LISTING_ARGV, compare_listings, parse_listing
from ..k8s.settings import KubernetesHosts
from ..k8s.status import PodState, pod_state
from ..labels import A_CREATED, A_ENV, A_IMAGE, A_NAME, A_OWNER, A_PORTS, K_KERNEL, K_MANAGED
from ..untrusted import as_dict, clean
from .commands import lifecycle_steps
from .logs import cut_note
from .model import DevContainerInfo, engine_time, given_name

#: The states of a pod as the container listing says them (Docker's words where they exist).
STATES = {
    "running": "running",
    "starting": "created",
    "unschedulable": "pending",
    "failed": "exited",
    "gone": "removing",
}
#: Reasons a pod fails with that are the image's (``ImageError``, not the cluster's).
IMAGE_REASONS = ("ErrImagePull", "ImagePullBackOff", "InvalidImageName")
#: The most bytes of a pod's file listing read (a bigger one is not recorded).
MAX_LISTING = 64 << 20
#: Seconds a file listing of a pod may take.
LISTING_TIMEOUT = 300.0
#: The last lines of a lifecycle command's output reported, and their length.
LAST_LINES, LINE_CHARS = 20, 2000
_UID_RE = re.compile(r"^[0-9a-f-]{8,64}\Z")


def annotation(manifest: Any, key: str) -> str:
    """One annotation of an object the API server sent, as text (``""`` when odd)."""
    value = as_dict(as_dict(as_dict(manifest).get("metadata")).get("annotations")).get(key)
    return clean(value) if isinstance(value, str) else ""


def is_managed(manifest: Any) -> bool:
    """Labelled as gpudev's (anyone allowed to write in the namespace can label; gpudev's
    Role is the namespace's, so the namespace is the boundary, as for the allocations)."""
    return as_dict(as_dict(as_dict(manifest).get("metadata")).get("labels")).get(K_MANAGED) == "1"


def _ports(text: str) -> tuple[int, ...]:
    found = []
    for part in text.split(","):
        if part.isdigit() and 0 < int(part) < 65536:
            found.append(int(part))
    return tuple(found)


def pod_info(
    pod: dict[str, Any],
    host: str,
    events: Any = None,
    added_ports: Iterable[int] = (),
    *,
    pinned: bool = False,
) -> DevContainerInfo:
    """A dev container's pod as the listing reports it (``added_ports``: web ports added at
    run time; ``pinned``: kept after its last kernel). The GPUs are the device plugin's (not
    named by UUID to gpudev); no lease exists on a cluster."""
    state = pod_state(pod, events)
    status = as_dict(pod.get("status"))
    node = clean(as_dict(pod.get("spec")).get("nodeName"))
    if state.state == "running":
        text = f"Running on node {node}" if node else "Running"
    else:
        text = ": ".join(p for p in (state.reason, state.message) if p) or state.state
    started = engine_time(status.get("startTime")) if state.state == "running" else None
    return DevContainerInfo(
        name=annotation(pod, A_NAME),
        key=annotation(pod, A_NAME),
        container_id=clean(as_dict(pod.get("metadata")).get("uid")),
        host=host,
        environment=annotation(pod, A_ENV),
        owner=annotation(pod, A_OWNER),
        image=annotation(pod, A_IMAGE),
        state=STATES[state.state],
        status=text,
        created=annotation(pod, A_CREATED),
        gpu_uuids=(),
        lease_id=None,
        ports={},
        web_ports=tuple(sorted({*_ports(annotation(pod, A_PORTS)), *added_ports})),
        forward_ports=_ports(annotation(pod, A_PORTS)),
        started_at=started,
        pod=True,
        kernel_id=pod_kernel(pod),
        pinned=pinned,
    )


def pod_kernel(pod: dict[str, Any]) -> str | None:
    """The kernel a pod was made for (its ``K_KERNEL`` label), or ``None``: kernels share it."""
    value = as_dict(as_dict(pod.get("metadata")).get("labels")).get(K_KERNEL)
    return clean(value) if isinstance(value, str) and value else None


def pod_uid(pod: dict[str, Any]) -> str:
    """The pod's uid (what ports added at run time and its file listing are kept by)."""
    return clean(as_dict(pod.get("metadata")).get("uid"))


def pod_address(pod: dict[str, Any]) -> str:
    """The pod's IP as its status says, checked: the API server's answer is data, and an
    address of this machine itself (loopback, link-local, unspecified, multicast) is never
    one the proxy or a kernel connection is sent to."""
    text = as_dict(pod.get("status")).get("podIP")
    try:
        address = ipaddress.ip_address(str(text))
    except ValueError:
        raise EngineError("The pod has no IP address yet (is it running?)") from None
    if (
        address.is_loopback
        or address.is_link_local
        or address.is_unspecified
        or address.is_multicast
    ):
        raise EngineError(f"The pod's address {address} is not one gpudev connects to")
    return str(address)


def mount_paths(pod: dict[str, Any]) -> tuple[str, ...]:
    """Where volumes are mounted in the dev container (their files are not the pod's own
    changes: the workspace claim, ``/dev/shm``)."""
    found = []
    for container in as_dict(pod.get("spec")).get("containers") or []:
        for mount in as_dict(container).get("volumeMounts") or []:
            path = as_dict(mount).get("mountPath")
            if isinstance(path, str) and path.startswith("/"):
                found.append(path.rstrip("/") or "/")
    return tuple(found)


def pod_changes(before: bytes, now: bytes, pod: dict[str, Any]) -> tuple[list[str], list[str]]:
    """What changed in a pod between two file listings (paths, ``docker diff``'s order) and
    what of the listings could not be read."""
    first, second = parse_listing(before), parse_listing(now)
    changes = compare_listings(first.entries, second.entries, skip=mount_paths(pod))
    return [str(c["Path"]) for c in changes], [*first.problems, *second.problems]


class PodListings:
    """The file listing of each pod taken when it started (what its changes are counted
    against: a cluster has no ``docker diff``), in gpudev's state folder, by pod uid."""

    def __init__(self, folder: str | Path) -> None:
        self.folder = Path(folder)

    def _path(self, host: str, uid: str) -> Path | None:
        if not _UID_RE.match(uid) or not re.match(r"^[A-Za-z0-9_.-]{1,64}\Z", host):
            return None
        return self.folder / host / uid

    def save(self, host: str, uid: str, data: bytes) -> bool:
        path = self._path(host, uid)
        if path is None:
            return False
        path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
        part = path.with_name(f".{path.name}.part")
        with open(part, "wb", opener=lambda p, f: os.open(p, f | os.O_NOFOLLOW, 0o600)) as out:
            out.write(data)
        os.replace(part, path)
        return True

    def load(self, host: str, uid: str) -> bytes | None:
        path = self._path(host, uid)
        if path is None or not path.is_file():
            return None
        return path.read_bytes()

    def forget(self, host: str, uid: str) -> None:
        path = self._path(host, uid)
        if path is not None:
            path.unlink(missing_ok=True)


@dataclass(frozen=True)
class Created:
    """An object a start made (deleted again if the start gives up)."""

    api_version: str
    kind: str
    name: str


def _ref(manifest: dict[str, Any]) -> Created:
    return Created(
        str(manifest["apiVersion"]), str(manifest["kind"]), str(manifest["metadata"]["name"])
    )


def pods_of(host: Host, settings: KubernetesHosts, log: Any) -> Pods:
    """The dev container pods of ``host``, a Kubernetes host (``settings``: how long a start
    waits, how often a pod is read, whether listings are watched)."""
    return Pods(
        cluster_of(host),
        timeout=settings.start_timeout,
        poll=settings.poll_interval,
        log=log,
        watch=settings.watch,
    )


class Pods:
    """The dev containers of one cluster host. ``timeout``: how long a start waits for its pod
    to run (the scheduler, the image pull); ``poll``: seconds between two reads of the pod."""

    def __init__(
        self,
        cluster: Cluster,
        *,
        timeout: float,
        poll: float,
        log: Any,
        clock: Callable[[], float] = time.monotonic,
        sleep: Callable[[float], None] = time.sleep,
        watch: bool = False,
    ) -> None:
        self.cluster = cluster
        self.timeout = timeout
        self.poll = poll
        self.log = log
        #: Listings from the cluster's watched pods (``Cluster.watched``), not a LIST each.
        self.watch = watch
        self._clock = clock
        self._sleep = sleep

    @property
    def host(self) -> str:
        return self.cluster.spec.name

    def managed(self) -> list[dict[str, Any]]:
        """Every dev container pod of the host's namespace (from the watched listing with
        ``watch``)."""
        labels = f"{K_MANAGED}=1"
        pods = (
            self.cluster.watched("v1", "Pod", labels).items()
            if self.watch
            else self.cluster.items("v1", "Pod", labels=labels)
        )
        return [p for p in pods if annotation(p, A_NAME)]

    def find(self, name: str) -> dict[str, Any] | None:
        """The dev container pod gpudev calls ``name``, or ``None``."""
        pod = self.cluster.read("v1", "Pod", k8s.k8s_name(name))
        if pod is None or not is_managed(pod) or annotation(pod, A_NAME) != name:
            return None
        return pod

    def start(
        self, plan: k8s.Plan, target: k8s.PodTarget, say: Progress
    ) -> tuple[dict[str, Any], list[str]]:
        """Create ``plan``'s objects and wait until its pod runs: the pod and notes. A start
        that cannot finish deletes what it created and says why."""
        made: list[Created] = []
        notes: list[str] = []
        pod_name = k8s.k8s_name(target.name)
        try:
            for manifest in plan.objects:
                kind, name = str(manifest["kind"]), str(manifest["metadata"]["name"])
                say({"stage": "create", "message": f"creating {kind} {name}"})
                if kind == "Pod":
                    try:
                        created = self.cluster.create(manifest)
                    except Conflict:
                        taken = given_name(target.name)
                        raise Conflict(
                            f"A dev container named {taken!r} already exists on host {self.host!r}"
                        ) from None
                    made.append(_ref(manifest))
                    self._owned_by(plan, created)
                    continue
                if self._kept(manifest, target):
                    if kind == "PersistentVolumeClaim":
                        notes.append(f"the workspace claim {name} was kept from before")
                    continue
                made.append(_ref(manifest))
            return self._wait(pod_name, target, say), notes
        except BaseException as exc:
            left = self._undo(made)
            if left and isinstance(exc, GPUDevError):
                exc.message += f" (left in the cluster, delete them by hand: {', '.join(left)})"
                exc.args = (exc.message,)
            raise

    def _owned_by(self, plan: k8s.Plan, pod: dict[str, Any]) -> None:
        """Make the plan's NetworkPolicy (made before the pod, so that the pod is never
        reachable without it) the pod's: the cluster deletes it with the pod, once the pod
        is gone. One kept from before gets the plan's rules too (the peers may have changed)."""
        meta = as_dict(pod.get("metadata"))
        uid, name = meta.get("uid"), meta.get("name")
        if not isinstance(uid, str) or not uid or not isinstance(name, str):
            raise EngineError("The cluster answered the pod's creation without its uid")
        owner = [{"apiVersion": "v1", "kind": "Pod", "name": name, "uid": uid}]
        for manifest in plan.objects:
            if manifest["kind"] == "NetworkPolicy":
                self.cluster.patch(
                    str(manifest["apiVersion"]),
                    "NetworkPolicy",
                    str(manifest["metadata"]["name"]),
                    {"metadata": {"ownerReferences": owner}, "spec": manifest["spec"]},
                )

    def _kept(self, manifest: dict[str, Any], target: k8s.PodTarget) -> bool:
        """Create ``manifest``, or find the user's own object of that name from before
        (``True``: a workspace claim with their files, a Service a deleted pod left). Another
        user's object of that name is a conflict: never mounted, never replaced."""
        kind, name = str(manifest["kind"]), str(manifest["metadata"]["name"])
        try:
            self.cluster.create(manifest)
        except Conflict:
            found = self.cluster.read(str(manifest["apiVersion"]), kind, name)
            if is_managed(found) and annotation(found, A_OWNER) == target.owner:
                if as_dict(as_dict(found).get("metadata")).get("deletionTimestamp"):
                    raise Conflict(
                        f"The {kind} {name} of {target.name!r} is being deleted: start it "
                        "again in a moment"
                    ) from None
                return True
            raise Conflict(
                f"A {kind} named {name!r} exists in namespace {target.namespace!r} and is not "
                f"{target.owner!r}'s: choose another container name"
            ) from None
        return False

    def _wait(self, pod_name: str, target: k8s.PodTarget, say: Progress) -> dict[str, Any]:
        deadline = self._clock() + self.timeout
        said: PodState | None = None
        while True:
            pod = self.cluster.read("v1", "Pod", pod_name)
            state = pod_state(pod)
            if state.state == "unschedulable" and not state.message:
                state = pod_state(pod, self.cluster.events_of("Pod", pod_name))
            if state.state == "running" and pod is not None:
                return pod
            if state.state in ("failed", "gone"):
                raise self._failed(target, state)
            if state != said:
                said = state
                words = ": ".join(p for p in (state.reason, state.message) if p)
                stage = "schedule" if state.state == "unschedulable" else "pod"
                say({"stage": stage, "message": f"{pod_name}: {words or state.state}"})
            if self._clock() >= deadline:
                if state.state == "unschedulable":
                    raise Conflict(
                        f"The cluster could not place {target.name!r} in {self.timeout:.0f} s "
                        f"({state.message or state.reason}); nothing was kept running"
                    )
                raise EngineError(
                    f"{target.name!r} was not running after {self.timeout:.0f} s "
                    f"({state.reason or state.state}); nothing was kept running"
                )
            self._sleep(self.poll)

    def _failed(self, target: k8s.PodTarget, state: PodState) -> GPUDevError:
        words = ": ".join(p for p in (state.reason, state.message) if p) or state.state
        if state.state == "gone":
            return EngineError(f"The pod of {target.name!r} was deleted while it started")
        if state.reason in IMAGE_REASONS:
            return ImageError(f"The cluster cannot pull {target.image} ({words})")
        return EngineError(f"The pod of {target.name!r} did not start ({words})")

    def _undo(self, made: list[Created]) -> list[str]:
        """Delete what a start made, newest first; what could not be deleted."""
        left = []
        for ref in reversed(made):
            try:
                self.cluster.delete(ref.api_version, ref.kind, ref.name, grace=0)
            except GPUDevError as err:
                self.log.warning("gpudev: could not delete %s %s: %s", ref.kind, ref.name, err)
                left.append(f"{ref.kind} {ref.name}")
        return left

    def listing(self, pod_name: str) -> bytes:
        """The pod's files listed by exec (``LISTING_ARGV``, as the pod's user): find's exit
        1 (a folder it may not read) still lists the rest, the same way each time."""
        result = self.cluster.exec(
            pod_name, LISTING_ARGV, timeout=LISTING_TIMEOUT, limit=MAX_LISTING
        )
        if result.cut:
            raise EngineError(f"The file listing of {pod_name} is over {MAX_LISTING} bytes")
        if result.exit_code not in (0, 1):
            raise EngineError(f"Listing the files of {pod_name} failed (exit {result.exit_code})")
        return result.stdout

    def run_lifecycle(
        self, pod_name: str, env: Environment, say: Progress, *, timeout: float
    ) -> list[str]:
        """The environment's lifecycle commands (``lifecycle_steps``) run by exec in the pod
        (its working folder and variables are the pod's: the workspace and containerEnv), each
        bounded by ``timeout``; their last lines said; the warnings."""
        warnings: list[str] = []
        for stage, label, argv in lifecycle_steps(env):
            say({"stage": stage, "message": " ".join(argv)})
            try:
                result = self.cluster.exec(pod_name, argv, timeout=timeout, limit=1 << 20)
            except GPUDevError as err:
                warnings.append(f"{stage}{label} did not finish: {err.message}")
                continue
            text = (result.stdout + result.stderr).decode(errors="replace")
            for line in text.splitlines()[-LAST_LINES:]:
                say({"stage": stage, "message": clean(line[:LINE_CHARS])})
            if result.cut:
                warnings.append(f"{stage}{label} printed over 1 MiB; it was left running")
            elif result.exit_code:
                warnings.append(f"{stage}{label} exited with {result.exit_code}")
        return warnings

    def delete(self, pod: dict[str, Any]) -> list[str]:
        """Delete a dev container's pod, its Service and GPU claim (the GPUs are free once
        the pod is gone; its NetworkPolicy, which it owns, goes with it); its workspace claim
        is kept. Notes for the user."""
        name = annotation(pod, A_NAME)
        self.cluster.delete("v1", "Pod", k8s.k8s_name(name), grace=10, uid=pod_uid(pod) or None)
        self.cluster.delete("v1", "Service", k8s.k8s_name(name))
        for claim in as_dict(pod.get("spec")).get("resourceClaims") or []:
            claim_name = as_dict(claim).get("resourceClaimName")
            if isinstance(claim_name, str) and claim_name == k8s.k8s_name(name, "gpudev-gpus-"):
                self._delete_resource_claim(claim_name)
        workspace = k8s.k8s_name(name, "gpudev-ws-")
        return [
            f"the workspace claim {workspace} is kept (kubectl delete pvc {workspace} "
            f"-n {self.cluster.spec.namespace} deletes it and its files)"
        ]

    def _delete_resource_claim(self, name: str) -> None:
        for version in k8s.DRA_API_VERSIONS:
            try:
                self.cluster.delete(version, "ResourceClaim", name)
            except GPUDevError:
                continue  # a version the cluster does not serve
            return


def pod_output(
    cluster: Cluster, pod: str, *, follow: bool, tail: int | None, limit: int
) -> Iterator[str]:
    """The output of ``pod``'s dev container (``follow``: as it comes, until the pod ends or
    the reader stops reading)."""
    if follow:
        decoder = codecs.getincrementaldecoder("utf-8")(errors="replace")
        chunks = cluster.follow_output(pod, tail=tail)
        try:
            for chunk in chunks:
                yield decoder.decode(chunk)
        finally:
            chunks.close()
        return
    data = cluster.output(pod, tail=tail, limit=limit)
    yield data[:limit].decode(errors="replace")
    if len(data) > limit:
        yield cut_note(limit)
