"""One Kubernetes cluster as a host (``k8s://CONTEXT/NAMESPACE``): its version, its nodes'
GPUs and who they are allocated to, read through the official ``kubernetes`` client.

The client is used for what it is good at, reaching the API server as the kubeconfig context
(or the pod's service account) says, certificates, tokens and exec plugins included; answers
are read as raw JSON by the pure ``parse_cluster`` (what an API server sends is checked, not
trusted: a missing or odd field is skipped, never an exception). On a cluster the scheduler
decides where GPUs go: gpudev reports what it allocated (``nvidia.com/gpu`` and MIG
resources, by node) and to whom, from the pods that asked for them.

Three requests per description: ``/version``, the nodes, the pods that are not finished (all
namespaces: the ClusterRole of ``k8s.objects.make_rbac`` grants listing them).
"""

from __future__ import annotations

import json
import os
import re
import threading
import time
from collections.abc import Generator
from dataclasses import dataclass
from typing import Any, Protocol, cast

import urllib3

from ..errors import (
    BadRequest,
    ConfigError,
    Conflict,
    EngineError,
    EngineUnreachable,
    NotFound,
)
from ..labels import A_NAME, A_OWNER, GPU_MEMORY_LABEL, GPU_PRODUCT_LABEL, K_MANAGED
from ..untrusted import as_dict, as_list, clean
from .clusterwatch import WatchedPods
from .gpus import Inventory
from .info import ClusterInfo, ClusterNode, GPUAllocation, HostInfo, NodeGPUs
from .spec import HostSpec


class HostLike(Protocol):
    """What ``cluster_of`` reads of a host (``hosts.Host``)."""

    @property
    def name(self) -> str: ...
    @property
    def backend(self) -> object: ...


#: Extended resources that are GPUs: whole GPUs and MIG profiles of NVIDIA's device plugin.
GPU_RESOURCE_RE = re.compile(r"^nvidia\.com/(gpu|mig-[0-9]+g\.[0-9]+gb(\.[a-z0-9]+)?)\Z")
#: Pods that hold no resources any more.
FINISHED = "status.phase!=Succeeded,status.phase!=Failed"
#: The most nodes and pods one description reads (a bigger answer is cut, and says so).
MAX_ITEMS = 20_000
_TEXT_RE = re.compile(r"^[\x20-\x7e]{1,253}\Z")
#: The plural of each kind gpudev writes, as its REST path says it.
PLURALS = {
    "Pod": "pods",
    "PersistentVolumeClaim": "persistentvolumeclaims",
    "Service": "services",
    "ResourceClaim": "resourceclaims",
    "Job": "jobs",
    "Secret": "secrets",
    "Event": "events",
    "NetworkPolicy": "networkpolicies",
}
#: How much of an API server's own message an error shows.
MAX_SAID = 400


def _text(value: Any) -> str | None:
    return value if isinstance(value, str) and _TEXT_RE.match(value) else None


def _count(value: Any) -> int | None:
    """A whole-number quantity (GPUs are counted, never fractional)."""
    if isinstance(value, int) and not isinstance(value, bool) and value >= 0:
        return value
    if isinstance(value, str) and value.isdigit() and len(value) < 10:
        return int(value)
    return None


def _items(answer: Any, warnings: list[str], what: str) -> list[dict[str, Any]]:
    items = answer.get("items") if isinstance(answer, dict) else None
    if not isinstance(items, list):
        warnings.append(f"the API server's {what} answer has no item list")
        return []
    if len(items) > MAX_ITEMS:
        warnings.append(f"only the first {MAX_ITEMS} {what} were read")
    return [i for i in items[:MAX_ITEMS] if isinstance(i, dict)]


def _gpu_resources(resources: Any) -> dict[str, int]:
    if not isinstance(resources, dict):
        return {}
    found: dict[str, int] = {}
    for key, value in resources.items():
        count = _count(value)
        if isinstance(key, str) and GPU_RESOURCE_RE.match(key) and count is not None:
            found[key] = count
    return found


def _pod_gpus(pod: dict[str, Any]) -> dict[str, int]:
    """The GPUs a pod holds: the larger of its containers' sum and any init container's
    (as the scheduler counts), from limits (extended resources have requests = limits)."""
    spec = as_dict(pod.get("spec"))

    def limits(container: Any) -> dict[str, int]:
        resources = as_dict(as_dict(container).get("resources"))
        return _gpu_resources(resources.get("limits")) or _gpu_resources(resources.get("requests"))

    total: dict[str, int] = {}
    for container in as_list(spec.get("containers")):
        for key, count in limits(container).items():
            total[key] = total.get(key, 0) + count
    for container in as_list(spec.get("initContainers")):
        for key, count in limits(container).items():
            total[key] = max(total.get(key, 0), count)
    return total


def parse_cluster(
    version: Any, nodes: Any, pods: Any, *, namespace: str = "", context: str = ""
) -> ClusterInfo:
    """A cluster's description from the API server's answers to ``/version``, the node list
    and the list of pods that are not finished."""
    warnings: list[str] = []
    git_version = _text(as_dict(version).get("gitVersion")) or "?"
    allocated: dict[tuple[str, str], int] = {}
    allocations: list[GPUAllocation] = []
    for pod in _items(pods, warnings, "pods"):
        meta = as_dict(pod.get("metadata"))
        node_name = _text(as_dict(pod.get("spec")).get("nodeName"))
        held = _pod_gpus(pod)
        if not node_name or not held:
            continue  # not scheduled yet, or no GPU
        notes = as_dict(meta.get("annotations"))
        pod_namespace = _text(meta.get("namespace")) or "?"
        # gpudev's own: in the host's namespace and labelled so (anyone may write annotations
        # in their own namespace).
        ours = (
            _text(notes.get(A_NAME))
            if pod_namespace == namespace and as_dict(meta.get("labels")).get(K_MANAGED) == "1"
            else None
        )
        for resource, count in sorted(held.items()):
            allocated[(node_name, resource)] = allocated.get((node_name, resource), 0) + count
            allocations.append(
                GPUAllocation(
                    node=node_name,
                    resource=resource,
                    count=count,
                    namespace=pod_namespace,
                    container=ours or "",
                    owner=(_text(notes.get(A_OWNER)) or "") if ours else "",
                )
            )
    parsed: list[ClusterNode] = []
    for item in _items(nodes, warnings, "nodes"):
        meta = as_dict(item.get("metadata"))
        name = _text(meta.get("name"))
        if name is None:
            continue
        status = as_dict(item.get("status"))
        labels = as_dict(meta.get("labels"))
        conditions = status.get("conditions")
        ready = isinstance(conditions, list) and any(
            as_dict(c).get("type") == "Ready" and as_dict(c).get("status") == "True"
            for c in conditions
        )
        spec = as_dict(item.get("spec"))
        capacity = _gpu_resources(status.get("capacity"))
        allocatable = _gpu_resources(status.get("allocatable"))
        gpus = tuple(
            NodeGPUs(
                resource=resource,
                capacity=capacity.get(resource, 0),
                allocatable=allocatable.get(resource, 0),
                allocated=allocated.get((name, resource), 0),
            )
            for resource in sorted({*capacity, *allocatable})
        )
        parsed.append(
            ClusterNode(
                name=name,
                ready=ready,
                schedulable=spec.get("unschedulable") is not True,
                product=_text(labels.get(GPU_PRODUCT_LABEL)),
                memory_mib=_count(labels.get(GPU_MEMORY_LABEL)),
                gpus=gpus,
            )
        )
    return ClusterInfo(
        version=git_version,
        namespace=namespace,
        context=context,
        nodes=tuple(sorted(parsed, key=lambda n: n.name)),
        allocations=tuple(allocations),
        warnings=tuple(warnings),
    )


@dataclass(frozen=True)
class ExecResult:
    """A command run in a pod: its exit code (``None``: cut at the output limit, the
    command's end was not waited for), its output as bytes (each bounded)."""

    exit_code: int | None
    stdout: bytes
    stderr: bytes
    cut: bool = False


#: The exec channels of the API server's websocket protocol (v4/v5.channel.k8s.io).
STDIN, STDOUT, STDERR, ERROR, RESIZE, CLOSE = 0, 1, 2, 3, 4, 255
#: The most bytes of an exec's input sent in one websocket frame.
STDIN_FRAME = 1 << 20
#: The most bytes of standard error an exec keeps.
MAX_STDERR = 64 << 10


def exec_status(data: bytes) -> tuple[int | None, str]:
    """The exit code from an exec's error channel (a ``Status``: ``Success``, or a failure
    with ``NonZeroExitCode`` and the code as its cause) and, when the command did not run
    (no such program, no such container), the server's words."""
    try:
        status = json.loads(data.decode("utf-8", "replace")) if data else {}
    except ValueError:
        return None, "the API server's exec status could not be read"
    if as_dict(status).get("status") == "Success":
        return 0, ""
    if as_dict(status).get("reason") == "NonZeroExitCode":
        for cause in as_list(as_dict(as_dict(status).get("details")).get("causes")):
            code = _count(as_dict(cause).get("message"))
            if as_dict(cause).get("reason") == "ExitCode" and code is not None:
                return code, ""
    return None, said(status) or "the command did not run"


def object_path(api_version: str, kind: str, namespace: str, name: str = "") -> str:
    """The REST path of the namespaced objects of ``kind`` (with ``name``: of that one)."""
    plural = PLURALS.get(kind)
    if plural is None or not re.match(r"^([a-z0-9.-]+/)?v[0-9a-z]+\Z", api_version):
        raise BadRequest(f"gpudev does not write {kind!r} objects ({api_version!r})")
    root = "/api/v1" if api_version == "v1" else f"/apis/{api_version}"
    for part in (namespace, name):
        if part and not re.match(r"^[a-z0-9]([-a-z0-9.]{0,251}[a-z0-9])?\Z", part):
            raise BadRequest(f"Not a Kubernetes object name: {part[:80]!r}")
    path = f"{root}/namespaces/{namespace}/{plural}"
    return f"{path}/{name}" if name else path


def said(answer: Any) -> str:
    """An API server's ``Status`` message, safe to show: text only, cut at ``MAX_SAID``."""
    return clean(as_dict(answer).get("message"), MAX_SAID)


def _kubernetes() -> Any:
    try:
        import kubernetes  # noqa: PLC0415 - only Kubernetes hosts need it
    except ImportError:
        raise ConfigError(
            "Kubernetes hosts need the kubernetes package: pip install 'jupyter-gpudev[k8s]'"
        ) from None
    return kubernetes


class Cluster:
    """The API server of one ``k8s://`` host, reached as its kubeconfig context says (an
    empty context: the service account of the pod gpudev runs in, else the current context).
    The ``backend.HostBackend`` of a Kubernetes host (``Host.backend``; ``cluster_of``)."""

    #: What the parts above key their tables by (``backend.HostBackend.kind``).
    kind = "kubernetes"

    def __init__(self, spec: HostSpec, *, timeout: float, log: Any) -> None:
        self.spec = spec
        self.timeout = timeout
        self.log = log
        self._api: Any = None
        self._lock = threading.Lock()
        #: Listings kept by a watch (``watched``), by (path, labels).
        self._watched: dict[tuple[str, str], WatchedPods] = {}
        self._closed = False

    def _unreachable(self, why: str) -> EngineUnreachable:
        return EngineUnreachable(
            f"Kubernetes cluster {self.spec.name} ({self.spec.url}): {why}",
            details={"host": self.spec.name},
        )

    def api(self) -> Any:
        """The API client, made on first use."""
        with self._lock:
            if self._api is not None:
                return self._api
            kubernetes = _kubernetes()
            try:
                if not self.spec.context and os.environ.get("KUBERNETES_SERVICE_HOST"):
                    configuration = kubernetes.client.Configuration()
                    kubernetes.config.load_incluster_config(client_configuration=configuration)
                    self._api = kubernetes.client.ApiClient(configuration)
                else:
                    # KUBECONFIG as it is now (the client reads it once, when imported).
                    self._api = kubernetes.config.new_client_from_config(
                        config_file=os.environ.get("KUBECONFIG") or None,
                        context=self.spec.context or None,
                        persist_config=False,
                    )
            except (kubernetes.config.ConfigException, OSError, ValueError, TypeError) as exc:
                # The kubeconfig's words, never its credentials: the exception names the
                # context or the file, not a token.
                self.log.info("gpudev: cluster %s: %s", self.spec.name, exc)
                raise self._unreachable(
                    "no usable kubeconfig context "
                    + (repr(self.spec.context) if self.spec.context else "(the current one)")
                ) from None
            return self._api

    def _get(self, call: Any, **query: Any) -> Any:
        kubernetes = _kubernetes()
        try:
            answer = call(_preload_content=False, _request_timeout=self.timeout, **query)
            return json.loads(answer.data)
        except kubernetes.client.ApiException as exc:
            status = getattr(exc, "status", None)
            self.log.info("gpudev: cluster %s answered %s: %s", self.spec.name, status, exc.reason)
            if status in (401, 403):
                raise self._unreachable(
                    f"the API server refused gpudev's credentials ({status}): see the RBAC in "
                    "docs/kubernetes.md"
                ) from None
            raise self._unreachable(f"the API server answered {status}") from None
        except (urllib3.exceptions.HTTPError, OSError, ValueError) as exc:
            self.log.info("gpudev: cluster %s: %r", self.spec.name, exc)
            raise self._unreachable("the API server did not answer") from None

    def _serialize(self, api: Any, **call: Any) -> Any:
        """The client's request, credentials included (an exec plugin or an OIDC token may be
        refreshed here: its failure is the cluster being unreachable, in words without the
        credentials)."""
        kubernetes = _kubernetes()
        try:
            return api.param_serialize(**call)
        except (kubernetes.config.ConfigException, OSError, ValueError) as exc:
            self.log.info("gpudev: cluster %s: credentials: %s", self.spec.name, type(exc).__name__)
            raise self._unreachable("the kubeconfig's credentials could not be used") from None

    def request(
        self,
        method: str,
        path: str,
        *,
        query: tuple[tuple[str, str], ...] = (),
        body: Any = None,
        missing_ok: bool = False,
        content_type: str = "application/json",
    ) -> Any:
        """One call to the API server, its answer as JSON (``None`` for a missing object with
        ``missing_ok``). Refusals keep the server's reason (an admission webhook's or a quota's
        words, cleaned), never gpudev's credentials."""
        api = self.api()
        headers = {"Accept": "application/json"}
        if body is not None:
            headers["Content-Type"] = content_type
        try:
            serialized = self._serialize(
                api,
                method=method,
                resource_path=path,
                query_params=list(query),
                header_params=headers,
                body=body,
                auth_settings=["BearerToken"],
            )
            response = api.call_api(*serialized, _request_timeout=self.timeout)
            data = response.read()
        except (urllib3.exceptions.HTTPError, OSError, ValueError) as exc:
            self.log.info("gpudev: cluster %s: %s %s: %r", self.spec.name, method, path, exc)
            raise self._unreachable("the API server did not answer") from None
        status = int(response.status)
        try:
            answer = json.loads(data) if data else {}
        except ValueError:
            answer = {}
        if 200 <= status < 300:
            return answer
        words = said(answer)
        self.log.info("gpudev: cluster %s: %s %s answered %s", self.spec.name, method, path, status)
        where = f"Kubernetes cluster {self.spec.name}"
        if status == 404:
            if missing_ok:
                return None
            raise NotFound(f"{where}: not found ({words or path})")
        if status == 401:
            raise self._unreachable(
                "the API server refused gpudev's credentials (401): see docs/kubernetes.md"
            )
        if status == 403:
            raise EngineError(
                f"{where} refused ({words or 'forbidden'}): see the RBAC in docs/kubernetes.md"
            )
        if status == 409:
            raise Conflict(f"{where}: {words or 'the object already exists'}")
        if status in (400, 422):
            raise BadRequest(f"{where} rejected the object: {words or status}")
        raise EngineError(f"{where} answered {status}{': ' + words if words else ''}")

    def create(self, manifest: dict[str, Any]) -> dict[str, Any]:
        """Create the namespaced object ``manifest`` in its namespace; its answer."""
        meta = as_dict(manifest.get("metadata"))
        kind = str(manifest.get("kind"))
        path = object_path(str(manifest.get("apiVersion")), kind, str(meta.get("namespace")))
        try:
            return as_dict(self.request("POST", path, body=manifest))
        finally:
            self._written(kind)

    def patch(
        self, api_version: str, kind: str, name: str, changes: dict[str, Any]
    ) -> dict[str, Any]:
        """Change an object of the host's namespace by a JSON merge patch (``changes``: the
        fields to set; a list is replaced whole); its answer."""
        try:
            return as_dict(
                self.request(
                    "PATCH",
                    object_path(api_version, kind, self.spec.namespace, name),
                    body=changes,
                    content_type="application/merge-patch+json",
                )
            )
        finally:
            self._written(kind)

    def watched(self, api_version: str, kind: str, labels: str) -> WatchedPods:
        """The objects of ``kind`` in the host's namespace selected by ``labels``, kept by one
        LIST and a WATCH (``clusterwatch``); made on first use, kept until ``close``."""
        path = object_path(api_version, kind, self.spec.namespace)
        with self._lock:
            found = self._watched.get((path, labels))
            if found is None:
                found = WatchedPods(self, path, labels, self.log)
                if not self._closed:
                    self._watched[(path, labels)] = found
        if self._closed:  # a host replaced meanwhile: a LIST, and no watch left behind
            found.close()
        return found

    def _written(self, kind: str) -> None:
        """gpudev wrote an object of ``kind``: the next listing of that kind asks again."""
        with self._lock:
            plural = PLURALS.get(kind, "")
            watched = [w for (path, _), w in self._watched.items() if path.endswith("/" + plural)]
        for listing in watched:
            listing.stale()

    def read(self, api_version: str, kind: str, name: str) -> dict[str, Any] | None:
        """The object of ``kind`` called ``name`` in the host's namespace, ``None`` if none."""
        found = self.request(
            "GET", object_path(api_version, kind, self.spec.namespace, name), missing_ok=True
        )
        return None if found is None else as_dict(found)

    def delete(
        self,
        api_version: str,
        kind: str,
        name: str,
        *,
        grace: int | None = None,
        uid: str | None = None,
    ) -> bool:
        """Delete an object of the host's namespace (its dependents in the background);
        whether it was there. ``uid``: only that very object (another made since under the
        same name is a ``Conflict``, untouched)."""
        query = [("propagationPolicy", "Background")]
        if grace is not None:
            query.append(("gracePeriodSeconds", str(grace)))
        body = None
        if uid is not None:
            body = {"apiVersion": "v1", "kind": "DeleteOptions", "preconditions": {"uid": uid}}
        try:
            found = self.request(
                "DELETE",
                object_path(api_version, kind, self.spec.namespace, name),
                query=tuple(query),
                body=body,
                missing_ok=True,
            )
        finally:
            self._written(kind)
        return found is not None

    def items(
        self, api_version: str, kind: str, *, labels: str = "", fields: str = ""
    ) -> list[Any]:
        """The items of ``kind`` in the host's namespace, selected by labels and fields."""
        query = tuple(
            (key, value)
            for key, value in (("labelSelector", labels), ("fieldSelector", fields))
            if value
        )
        answer = self.request(
            "GET", object_path(api_version, kind, self.spec.namespace), query=query
        )
        items = as_dict(answer).get("items")
        return (
            [i for i in items[:MAX_ITEMS] if isinstance(i, dict)] if isinstance(items, list) else []
        )

    def _log_response(
        self, pod: str, query: list[tuple[str, str]], timeout: Any, container: str
    ) -> Any:
        """The answer to a request for a pod's container's output, its body not read yet."""
        api = self.api()
        serialized = self._serialize(
            api,
            method="GET",
            resource_path=object_path("v1", "Pod", self.spec.namespace, pod) + "/log",
            query_params=[("container", container), *query],
            header_params={"Accept": "text/plain"},
            auth_settings=["BearerToken"],
        )
        try:
            response = api.call_api(*serialized, _request_timeout=timeout)
        except (urllib3.exceptions.HTTPError, OSError, ValueError) as exc:
            self.log.info("gpudev: cluster %s: log of %s: %r", self.spec.name, pod, exc)
            raise self._unreachable("the API server did not answer") from None
        if int(response.status) != 200:
            try:
                words = said(json.loads(response.read() or b"{}"))
            except (ValueError, urllib3.exceptions.HTTPError, OSError):
                words = ""
            response.response.release_conn()
            raise EngineError(
                f"Kubernetes cluster {self.spec.name}: the output of {pod} could not be read "
                f"({response.status}{': ' + words if words else ''})"
            )
        return response

    def open_watch(self, path: str, labels: str, version: str, *, timeout_seconds: int) -> Any:
        """A WATCH of the objects at ``path`` (a namespaced list) selected by ``labels``,
        from resource ``version`` on, ended by the API server after ``timeout_seconds``: the
        urllib3 response, its body (one JSON event a line) not read yet."""
        api = self.api()
        serialized = self._serialize(
            api,
            method="GET",
            resource_path=path,
            query_params=[
                ("watch", "true"),
                ("labelSelector", labels),
                ("resourceVersion", version),
                ("timeoutSeconds", str(timeout_seconds)),
            ],
            header_params={"Accept": "application/json"},
            auth_settings=["BearerToken"],
        )
        kubernetes = _kubernetes()
        try:
            # A read may wait as long as the watch lasts, not longer: a connection that went
            # quiet is noticed.
            response = api.call_api(
                *serialized, _request_timeout=(self.timeout, timeout_seconds + 15)
            )
        except (
            urllib3.exceptions.HTTPError,
            OSError,
            ValueError,
            kubernetes.client.ApiException,  # what the client makes of a TLS failure
        ) as exc:
            self.log.info("gpudev: cluster %s: watch of %s: %r", self.spec.name, path, exc)
            raise self._unreachable("the API server did not answer") from None
        if int(response.status) != 200:
            response.response.close()  # its body unread: the connection is not reused
            raise EngineError(
                f"Kubernetes cluster {self.spec.name}: no watch of {path} ({response.status})"
            )
        return response.response  # urllib3's, read as it comes

    def output(self, pod: str, *, tail: int | None, limit: int, container: str = "dev") -> bytes:
        """A pod's container's output, at most ``limit`` bytes (the API server cuts it) and
        with ``tail``: its last lines only."""
        query = [("limitBytes", str(limit + 1))]
        if tail is not None:
            query.append(("tailLines", str(max(0, tail))))
        response = self._log_response(pod, query, self.timeout, container)
        try:
            return bytes(response.read() or b"")
        except (urllib3.exceptions.HTTPError, OSError) as exc:
            self.log.info("gpudev: cluster %s: log of %s: %r", self.spec.name, pod, exc)
            raise self._unreachable("the API server did not answer") from None

    def follow_output(
        self, pod: str, *, tail: int | None, container: str = "dev"
    ) -> Generator[bytes, None, None]:
        """A pod's container's output as it comes (``kubectl logs -f``), until the pod ends or
        the caller stops reading (the connection is closed then)."""
        query = [("follow", "true")]
        if tail is not None:
            query.append(("tailLines", str(max(0, tail))))
        # No read timeout: a quiet pod is not a failure.
        raw = self._log_response(pod, query, (self.timeout, None), container).response
        try:
            yield from raw.stream(1 << 14)
        except (urllib3.exceptions.HTTPError, OSError) as exc:
            self.log.info("gpudev: cluster %s: log of %s ended: %r", self.spec.name, pod, exc)
        finally:
            raw.release_conn()
            raw.close()

    def events_of(self, kind: str, name: str) -> dict[str, Any]:
        """The events of one object of the host's namespace (``{"items": [...]}``)."""
        fields = f"involvedObject.kind={kind},involvedObject.name={name}"
        return {"items": self.items("v1", "Event", fields=fields)}

    def exec(
        self,
        pod: str,
        argv: tuple[str, ...] | list[str],
        *,
        timeout: float,
        limit: int,
        container: str = "dev",
        stdin: bytes | None = None,
    ) -> ExecResult:
        """Run ``argv`` in a pod's container (as the pod's user; no shell, no terminal) and
        read its output, at most ``limit`` bytes of it: past that the command is left and the
        result says it was cut. ``stdin``: sent as its input (in frames of ``STDIN_FRAME``),
        without an end (the protocol's v4 has none): the command reads exactly that many bytes
        (``head -c N``). Its output
        is the pod's, hostile input: the caller parses it."""
        sock = self._exec_socket(pod, argv, container, stdin=stdin is not None)
        try:
            if stdin is not None:  # in frames the API server takes (it refuses past 32 MiB)
                for start in range(0, len(stdin), STDIN_FRAME):
                    sock.send_binary(bytes([STDIN]) + stdin[start : start + STDIN_FRAME])
            result = self._read_exec(sock, timeout=timeout, limit=limit, what=f"{argv[0]} in {pod}")
        finally:
            sock.shutdown()  # the server has closed its side, or the rest is not read
        return result

    def open_port_forward(self, pod: str, port: int) -> Any:
        """A websocket carrying one connection to ``port`` of a pod (``pods/portforward``;
        ``engine/podforward.py`` moves the bytes)."""
        return self._websocket(
            object_path("v1", "Pod", self.spec.namespace, pod) + "/portforward",
            [("ports", str(int(port)))],
            what=f"a port forward to {pod}",
        )

    def open_terminal(self, pod: str, argv: list[str], container: str = "dev") -> Any:
        """A websocket to ``argv`` run in a pod with a terminal (input, a tty, output on
        channel 1, window sizes on channel 4): the caller moves the bytes."""
        return self._exec_socket(pod, argv, container, stdin=True, tty=True)

    def _exec_socket(
        self,
        pod: str,
        argv: tuple[str, ...] | list[str],
        container: str,
        *,
        stdin: bool,
        tty: bool = False,
    ) -> Any:
        """The exec's websocket."""
        query = [("command", str(a)) for a in argv]
        query += [("container", container), ("stdout", "true")]
        query += [("stderr", "false" if tty else "true"), ("stdin", "true" if stdin else "false")]
        query += [("tty", "true" if tty else "false")]
        return self._websocket(
            object_path("v1", "Pod", self.spec.namespace, pod) + "/exec",
            query,
            what=f"an exec in {pod}",
        )

    def _websocket(self, path: str, query: list[tuple[str, str]], *, what: str) -> Any:
        """A websocket to ``path``, connected as the kubeconfig says (token or certificate),
        speaking ``v4.channel.k8s.io`` (v5 only adds closing one's input, which gpudev does
        not need: input is read to a known length)."""
        from kubernetes.stream import ws_client  # noqa: PLC0415 - only Kubernetes hosts
        from websocket import WebSocketException  # noqa: PLC0415

        ws: Any = ws_client
        api = self.api()
        _method, url, headers, _body, _post = self._serialize(
            api,
            method="GET",
            resource_path=path,
            query_params=query,
            header_params={},
            auth_settings=["BearerToken"],
        )
        headers = {**headers, "sec-websocket-protocol": "v4.channel.k8s.io"}
        where = f"Kubernetes cluster {self.spec.name}"
        try:
            return ws.create_websocket(api.configuration, ws.get_websocket_url(url), headers)
        except WebSocketException as exc:
            code = getattr(exc, "status_code", None)
            self.log.info("gpudev: cluster %s: %s: %s", self.spec.name, what, code)
            if code == 401:
                raise self._unreachable(
                    "the API server refused gpudev's credentials (401)"
                ) from None
            if code == 403:
                raise EngineError(f"{where} refused {what} (see the RBAC)") from None
            if code == 404:
                raise NotFound(f"{where}: no pod for {what}") from None
            raise EngineError(f"{where}: {what} failed ({code or 'no answer'})") from None
        except (OSError, ValueError) as exc:
            self.log.info("gpudev: cluster %s: %s: %r", self.spec.name, what, exc)
            raise self._unreachable("the API server did not answer") from None

    def _read_exec(self, sock: Any, *, timeout: float, limit: int, what: str) -> ExecResult:
        """An exec's frames read one by one until the server closes (the client's own reader
        buffers without a bound)."""
        from websocket import ABNF, WebSocketException  # noqa: PLC0415 - only Kubernetes hosts

        where = f"Kubernetes cluster {self.spec.name}"
        deadline = time.monotonic() + timeout
        out, err, status = bytearray(), bytearray(), bytearray()
        while True:
            left = deadline - time.monotonic()
            if left <= 0:
                raise EngineError(f"{where}: {what} took over {timeout:.0f} s")
            sock.settimeout(left)
            try:
                opcode, frame = sock.recv_data_frame(True)
            except (WebSocketException, OSError) as exc:
                if isinstance(exc, TimeoutError) or "timed out" in str(exc):
                    continue  # the deadline check says so
                break  # the server closed the connection
            data = bytes(frame.data or b"")
            if opcode == ABNF.OPCODE_CLOSE:
                break
            if opcode not in (ABNF.OPCODE_BINARY, ABNF.OPCODE_TEXT) or not data:
                continue  # a ping (answered by the client) or an empty frame
            channel, payload = data[0], data[1:]
            if channel == STDOUT:
                out += payload
                if len(out) > limit:
                    return ExecResult(None, bytes(out[:limit]), bytes(err), cut=True)
            elif channel == STDERR:
                err += payload[: max(0, MAX_STDERR - len(err))]
            elif channel == ERROR:
                status += payload[: max(0, MAX_STDERR - len(status))]
        code, words = exec_status(bytes(status))
        if code is None:
            raise EngineError(f"{where}: {what} did not run ({words})")
        return ExecResult(code, bytes(out), bytes(err))

    def describe(self) -> ClusterInfo:
        """The cluster's version, nodes and GPU allocations; ``EngineUnreachable`` saying why
        when it cannot be read."""
        kubernetes = _kubernetes()
        api = self.api()
        version = self._get(kubernetes.client.VersionApi(api).get_code)
        core = kubernetes.client.CoreV1Api(api)
        nodes = self._get(core.list_node)
        pods = self._get(core.list_pod_for_all_namespaces, field_selector=FINISHED)
        return parse_cluster(
            version, nodes, pods, namespace=self.spec.namespace, context=self.spec.context
        )

    def report(self, origin: str) -> HostInfo:
        """A Kubernetes host's report: its API server's version, nodes and GPU allocations
        (the GPUs are per node there, not a host inventory)."""
        info: ClusterInfo | None = None
        reason: str | None = None
        try:
            info = self.describe()
        except (EngineUnreachable, ConfigError) as exc:
            reason = exc.message
        return HostInfo(
            name=self.spec.name,
            url=self.spec.url,
            transport=self.spec.transport,
            is_local=False,
            reachable=info is not None,
            reason=reason,
            gpus=Inventory(
                source="none",
                reason="a Kubernetes cluster: its GPUs are listed by node"
                if info is not None
                else "the cluster is unreachable",
            ),
            origin=origin,
            cluster=info,
        )

    def no_engine(self) -> str:
        return (
            f"Host {self.spec.name!r} is a Kubernetes cluster ({self.spec.url}), not a Docker "
            "engine: gpudev starts, lists and removes dev containers there as pods"
        )

    def proc_reader(self) -> None:
        """None: a cluster's GPU processes are its nodes', not the host's."""
        return

    def close(self) -> None:
        with self._lock:
            self._closed = True
            watched, self._watched = list(self._watched.values()), {}
        for listing in watched:
            listing.close()
        with self._lock:
            if self._api is not None:
                self._api.close()
                self._api = None


def cluster_of(host: HostLike) -> Cluster:
    """The cluster of a Kubernetes host (its ``backend``): what the parts of that kind use to
    reach it. A ``BadRequest`` saying so for a host of another kind."""
    backend = host.backend
    if getattr(backend, "kind", None) == Cluster.kind:
        return cast("Cluster", backend)
    raise BadRequest(f"Host {host.name!r} is not a Kubernetes cluster")
