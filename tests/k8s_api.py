"""A Kubernetes API server for the client layer's HTTP seam (issue #20).

This machine has no Kubernetes control plane and none can be installed, so the pod lifecycle
is tested against this stand-in, reached through the real ``kubernetes`` client, a real
kubeconfig and real HTTP. It keeps objects in memory, answers as the API reference says
(``Status`` bodies, 201 on create, 409 AlreadyExists, 404, 401 without the token, 403 with an
admission message where a test forbids a call) and checks every object it is sent against the
official OpenAPI schema of Kubernetes 1.34 (``kubernetes-validate``, strict: an unknown field is
a 422). Pods are "scheduled" as ``scheduler`` says: what never ran is a real scheduler, kubelet
or admission chain. Answers are written from the API reference, not recorded.
"""

from __future__ import annotations

import base64
import contextlib
import hashlib
import json
import logging
import re
import socket
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, parse_qsl, urlsplit

import kubernetes_validate
from docker.utils.socket import consume_socket_output, frames_iter

from jupyter_gpudev.containers import close_stream

SCHEMA_VERSION = "1.34.0"
TOKEN = "k8s-token-5f2c8e0b"  # noqa: S105 - a test credential, checked never to be shown
_PATH_RE = re.compile(
    r"^/(?P<root>api/v1|apis/[a-z0-9.-]+/v[0-9a-z]+)/namespaces/(?P<ns>[a-z0-9-]+)"
    r"/(?P<plural>[a-z]+)(?:/(?P<name>[a-z0-9.-]+))?\Z"
)
#: Why the scheduler cannot place a pod, in its own words.
UNSCHEDULABLE = (
    "0/3 nodes are available: 1 node(s) were unschedulable, 2 Insufficient nvidia.com/gpu. "
    "preemption: 0/3 nodes are available: 3 No preemption victims found for incoming pod."
)


def _status(code: int, reason: str, message: str) -> dict[str, Any]:
    return {
        "kind": "Status",
        "apiVersion": "v1",
        "status": "Failure",
        "message": message,
        "reason": reason,
        "code": code,
    }


def merge_patch(target: Any, patch: Any) -> Any:
    """``target`` with the JSON merge patch ``patch`` applied (RFC 7386): objects merged key by
    key, ``null`` removing a key, anything else replacing the value."""
    if not isinstance(patch, dict):
        return json.loads(json.dumps(patch))
    merged = dict(target) if isinstance(target, dict) else {}
    for key, value in patch.items():
        if value is None:
            merged.pop(key, None)
        else:
            merged[key] = merge_patch(merged.get(key), value)
    return merged


@dataclass(frozen=True)
class Watch:
    """A watch request: what it selects (its events are streamed by the HTTP handler)."""

    plural: str
    namespace: str
    query: dict[str, str]


def selected(item: dict[str, Any], query: dict[str, str]) -> bool:
    """Whether ``item`` matches the label and field selectors of ``query``."""
    wanted = dict(
        term.split("=", 1) for term in query.get("labelSelector", "").split(",") if "=" in term
    )
    fields = dict(
        term.split("=", 1) for term in query.get("fieldSelector", "").split(",") if "=" in term
    )
    labels = item.get("metadata", {}).get("labels") or {}
    if any(labels.get(k) != v for k, v in wanted.items()):
        return False
    involved = item.get("involvedObject") or {}
    return not any(involved.get(k.split(".", 1)[1]) != v for k, v in fields.items())


@dataclass(frozen=True)
class JobEnd:
    """How the one pod of a Job ended: ``failed``, the step (container) that failed with
    ``exit_code`` (``None``: every step ended well); ``message``, the push step's termination
    message; ``output``, the failed step's (or the push step's) output."""

    message: str = ""
    output: bytes = b""
    failed: str | None = None
    exit_code: int = 1

    def statuses(self, spec: dict[str, Any]) -> dict[str, Any]:
        """The pod's ``initContainerStatuses`` and ``containerStatuses``, in the kubelet's
        order: init containers one after another (those after a failed one never ran), then
        the containers."""

        def state(name: str, ran: bool) -> dict[str, Any]:
            if not ran:
                return {"name": name, "state": {"waiting": {"reason": "PodInitializing"}}}
            failed = name == self.failed
            ended: dict[str, Any] = {"exitCode": self.exit_code if failed else 0}
            if not failed and self.message and name == "push":
                ended["message"] = self.message
            return {"name": name, "state": {"terminated": ended}}

        steps = [c["name"] for c in spec.get("initContainers") or []]
        ran = steps.index(self.failed) + 1 if self.failed in steps else len(steps)
        return {
            "initContainerStatuses": [state(n, i < ran) for i, n in enumerate(steps)],
            "containerStatuses": [
                state(c["name"], self.failed not in steps) for c in spec["containers"]
            ],
        }


@dataclass
class FakeCluster:
    """The API server's state. ``scheduler``: what happens to a new pod: ``run`` (scheduled
    on ``node`` and running), ``unschedulable`` (Pending with the scheduler's reason and a
    FailedScheduling event), ``bad-image`` (its image cannot be pulled), ``slow`` (Pending,
    pulling, running once it has been read ``reads_to_run`` times)."""

    namespace: str = "team-ml"
    scheduler: str = "run"
    node: str = "gpu-a100-1"
    reads_to_run: int = 3
    #: (method, plural) -> the admission message a 403 answers with.
    forbid: dict[tuple[str, str], str] = field(default_factory=dict)
    objects: dict[tuple[str, str, str], dict[str, Any]] = field(default_factory=dict)
    requests: list[tuple[str, str]] = field(default_factory=list)
    reads: dict[str, int] = field(default_factory=dict)
    #: What an exec in a pod runs: (pod, argv) -> (exit code, stdout, stderr); raise
    #: FileNotFoundError for a program the container does not have.
    exec_handler: Callable[..., tuple[int, bytes, bytes]] | None = None
    execs: list[tuple[str, list[str]]] = field(default_factory=list)
    #: The size of each frame of exec input received.
    stdin_frames: list[int] = field(default_factory=list)
    #: Runs the pods for real (``DockerKubelet``): created, exec'd into, deleted.
    kubelet: Any = None
    #: Each pod's output (without a kubelet).
    outputs: dict[str, bytes] = field(default_factory=dict)
    #: Where a port-forward connects without a kubelet (a test's own server).
    forward_address: str = "127.0.0.1"
    forwards: list[tuple[str, int]] = field(default_factory=list)
    #: What the Job controller and the builder do with a Job (``None``: it never ends):
    #: job -> how its pod ended (``JobEnd``). Run in a thread; the Job's pod is then made,
    #: ended, each step's status as the kubelet says it, with that output.
    job_runner: Callable[[dict[str, Any]], JobEnd] | None = None
    lock: threading.Lock = field(default_factory=threading.Lock)
    #: Watches of pods: every change ``observe`` sees is an event at a new resource version
    #: (the server's etcd revision). Nothing is compacted: no watch is told 410 Gone here.
    version: int = 0
    history: list[tuple[int, str, dict[str, Any]]] = field(default_factory=list)
    seen: dict[tuple[str, str, str], str] = field(default_factory=dict)

    def observe(self) -> int:
        """Turn what changed in the pods since the last look (whoever changed them, in place
        or not) into watch events; the resource version now. Called under ``lock``."""
        now = {k: json.dumps(o, sort_keys=True) for k, o in self.objects.items() if k[0] == "pods"}
        changed = [(k, t, "MODIFIED" if k in self.seen else "ADDED") for k, t in now.items()]
        changed += [(k, self.seen[k], "DELETED") for k in self.seen if k not in now]
        for key, text, kind in sorted(changed):
            if kind != "DELETED" and self.seen.get(key) == text:
                continue
            self.version += 1
            item = json.loads(text)
            item["metadata"]["resourceVersion"] = str(self.version)
            self.history.append((self.version, kind, item))
        self.seen = now
        return self.version

    def names(self, plural: str) -> list[str]:
        return sorted(n for p, _ns, n in self.objects if p == plural)

    def writes(self) -> list[tuple[str, str]]:
        """The requests that changed something, as (method, path without the query)."""
        return [
            (m, p.split("?", 1)[0]) for m, p in self.requests if m in ("POST", "PATCH", "DELETE")
        ]

    # -- what the server does --------------------------------------------------------------

    def handle(self, method: str, url: str, body: Any) -> tuple[int, Any]:  # noqa: PLR0911, PLR0912 - one answer per route
        parts = urlsplit(url)
        query = {k: v[-1] for k, v in parse_qs(parts.query).items()}
        if parts.path == "/version":
            return 200, {"major": "1", "minor": "34", "gitVersion": "v1.34.2"}
        if parts.path == "/api/v1/nodes":
            return 200, {"kind": "NodeList", "items": []}
        if parts.path == "/api/v1/pods":
            with self.lock:
                pods = [o for (p, _ns, _n), o in self.objects.items() if p == "pods"]
            return 200, {"kind": "PodList", "items": pods}
        if method == "GET" and parts.path.endswith("/log"):
            return self._output(parts.path.removesuffix("/log"), query)
        match = _PATH_RE.match(parts.path)
        if match is None:
            return 404, _status(404, "NotFound", f"the server could not find {parts.path}")
        plural, name, namespace = match["plural"], match["name"], match["ns"]
        refused = self.forbid.get((method, plural))
        if refused is not None:
            return 403, _status(403, "Forbidden", refused)
        with self.lock:
            if method == "POST" and name is None:
                return self._create(plural, namespace, body)
            if method == "GET" and name is None and query.get("watch") in ("true", "1"):
                return 200, Watch(plural, namespace, query)
            if method == "GET" and name is None:
                items = self._select(plural, namespace, query)
                version = str(self.observe()) if plural == "pods" else "1"
                return 200, {
                    "kind": "List",
                    "metadata": {"resourceVersion": version},
                    "items": items,
                }
            key = (plural, namespace, name or "")
            found = self.objects.get(key)
            if found is None:
                return 404, _status(404, "NotFound", f'{plural} "{name}" not found')
            if method == "GET":
                if plural == "pods":
                    self._advance(found)
                return 200, found
            if method == "PATCH":
                return self._patch(key, found, body)
            if method == "DELETE":
                wanted = ((body or {}).get("preconditions") or {}).get("uid")
                if wanted is not None and wanted != found["metadata"].get("uid"):
                    return 409, _status(
                        409,
                        "Conflict",
                        f"Precondition failed: UID in precondition: {wanted}, UID in object "
                        f"meta: {found['metadata'].get('uid')}",
                    )
                self._collect(key, found)
                return 200, found
        return 405, _status(405, "MethodNotAllowed", "the server does not allow this method")

    def _collect(self, key: tuple[str, str, str], found: dict[str, Any]) -> None:
        """Delete an object and, as the garbage collector does, what it owns (its
        ``ownerReferences`` name its uid): a Job's pods, a Job's Secret and NetworkPolicy, a
        pod's NetworkPolicy. Called under ``lock``."""
        plural, namespace, name = key
        del self.objects[key]
        if plural == "pods" and self.kubelet is not None:
            self.kubelet.delete(found)
        owned = [
            k
            for k, o in self.objects.items()
            if k[1] == namespace
            and any(
                r.get("uid") == found["metadata"]["uid"]
                for r in o["metadata"].get("ownerReferences") or []
            )
        ]
        if plural == "jobs":  # its pods are labelled with its name
            owned += [
                ("pods", namespace, p["metadata"]["name"])
                for p in self._select("pods", namespace, {"labelSelector": f"job-name={name}"})
            ]
        for dependent in dict.fromkeys(owned):
            if dependent in self.objects:
                self._collect(dependent, self.objects[dependent])

    def _patch(
        self, key: tuple[str, str, str], found: dict[str, Any], body: Any
    ) -> tuple[int, Any]:
        """A JSON merge patch (RFC 7386) of an object, the result checked as a create is."""
        if not isinstance(body, dict):
            return 400, _status(400, "BadRequest", "the body is not an object")
        patched = merge_patch(found, body)
        try:
            kubernetes_validate.validate(patched, SCHEMA_VERSION, strict=True)
        except kubernetes_validate.ValidationError as exc:
            return 422, _status(422, "Invalid", f"invalid object: {exc.message}")
        if patched["metadata"].get("uid") != found["metadata"].get("uid"):
            return 422, _status(422, "Invalid", "metadata.uid: field is immutable")
        self.objects[key] = patched
        return 200, patched

    def _output(self, path: str, query: dict[str, str]) -> tuple[int, Any]:
        match = _PATH_RE.match(path)
        pod = self.objects.get(("pods", match["ns"], match["name"] or "")) if match else None
        if match is None or pod is None:
            return 404, _status(404, "NotFound", "pods not found")
        if match["name"] in self.outputs or self.kubelet is None:
            data = self.outputs.get(match["name"] or "", b"")
        else:
            data = self.kubelet.output(pod)
        if "tailLines" in query:
            lines = data.splitlines(keepends=True)
            data = b"".join(lines[len(lines) - int(query["tailLines"]) :])
        return 200, data[: int(query.get("limitBytes", len(data)))]

    def _create(self, plural: str, namespace: str, body: Any) -> tuple[int, Any]:
        if not isinstance(body, dict):
            return 400, _status(400, "BadRequest", "the body is not an object")
        try:
            kubernetes_validate.validate(body, SCHEMA_VERSION, strict=True)
        except kubernetes_validate.ValidationError as exc:
            return 422, _status(422, "Invalid", f"invalid object: {exc.message}")
        meta = body.get("metadata") or {}
        name = meta.get("name", "")
        if meta.get("namespace", namespace) != namespace:
            return 400, _status(400, "BadRequest", "the namespace of the object does not match")
        key = (plural, namespace, name)
        if key in self.objects:
            return 409, _status(409, "AlreadyExists", f'{plural} "{name}" already exists')
        made = json.loads(json.dumps(body))
        made["metadata"].update(
            {"uid": str(uuid.uuid4()), "creationTimestamp": "2026-11-25T10:00:00Z"}
        )
        if plural == "pods":
            made["status"] = {"phase": "Pending"}
            self.reads[name] = 0
            if self.kubelet is not None:
                self.kubelet.create(made)
            self._schedule(made)
        self.objects[key] = made
        if plural == "jobs" and self.job_runner is not None:
            threading.Thread(target=self._run_job, args=(made,), daemon=True).start()
        return 201, made

    def _run_job(self, job: dict[str, Any]) -> None:
        """The Job controller and its one pod: run, ended, the Job's status set."""
        assert self.job_runner is not None
        name, namespace = job["metadata"]["name"], job["metadata"]["namespace"]
        # As a kubelet does: the pod starts once the Secrets its volumes name exist.
        wanted = [
            ("secrets", namespace, v["secret"]["secretName"])
            for v in job["spec"]["template"]["spec"].get("volumes") or []
            if "secret" in v
        ]
        deadline = time.monotonic() + 60
        while any(key not in self.objects for key in wanted) and time.monotonic() < deadline:
            time.sleep(0.05)
        try:
            end = self.job_runner(job)
        except Exception as exc:
            end = JobEnd(failed="build", output=f"{exc!r}\n".encode())
        spec = job["spec"]["template"]["spec"]
        pod_name = f"{name}-{uuid.uuid4().hex[:5]}"
        pod = {
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {
                "name": pod_name,
                "namespace": namespace,
                "uid": str(uuid.uuid4()),
                "labels": {"job-name": name},
            },
            "spec": spec,
            "status": {
                "phase": "Failed" if end.failed else "Succeeded",
                **end.statuses(spec),
            },
        }
        succeeded, output = end.failed is None, end.output
        with self.lock:
            if ("jobs", namespace, name) not in self.objects:
                return
            self.objects[("pods", namespace, pod_name)] = pod
            self.outputs[pod_name] = output
            job["status"] = (
                {"succeeded": 1}
                if succeeded
                else {
                    "failed": 1,
                    "conditions": [
                        {"type": "Failed", "status": "True", "reason": "BackoffLimitExceeded"}
                    ],
                }
            )

    def _select(self, plural: str, namespace: str, query: dict[str, str]) -> list[Any]:
        return [
            item
            for (p, ns, _name), item in sorted(self.objects.items())
            if p == plural and ns == namespace and selected(item, query)
        ]

    def watch_events(self, watch: Watch, since: int) -> list[tuple[int, dict[str, Any]]]:
        """The events of ``watch`` after resource version ``since``, each with its version."""
        with self.lock:
            self.observe()
            return [
                (version, {"type": kind, "object": item})
                for version, kind, item in self.history
                if version > since
                and watch.plural == "pods"
                and item["metadata"].get("namespace", self.namespace) == watch.namespace
                and selected(item, watch.query)
            ]

    def _schedule(self, pod: dict[str, Any]) -> None:
        name = pod["metadata"]["name"]
        if self.scheduler == "run":
            self._run(pod)
        elif self.scheduler == "unschedulable":
            pod["status"]["conditions"] = [
                {
                    "type": "PodScheduled",
                    "status": "False",
                    "reason": "Unschedulable",
                    "message": UNSCHEDULABLE,
                }
            ]
            event = {
                "metadata": {"name": f"{name}.1", "namespace": self.namespace},
                "involvedObject": {"kind": "Pod", "name": name},
                "reason": "FailedScheduling",
                "message": UNSCHEDULABLE,
                "lastTimestamp": "2026-11-25T10:00:01Z",
            }
            self.objects[("events", self.namespace, f"{name}.1")] = event
        elif self.scheduler == "bad-image":
            pod["spec"]["nodeName"] = self.node
            pod["status"]["containerStatuses"] = [
                {
                    "name": "dev",
                    "ready": False,
                    "state": {
                        "waiting": {
                            "reason": "ErrImagePull",
                            "message": 'failed to pull "nowhere.invalid/x:1": not found',
                        }
                    },
                }
            ]
        elif self.scheduler == "slow":
            pod["spec"]["nodeName"] = self.node
            pod["status"]["containerStatuses"] = [
                {"name": "dev", "ready": False, "state": {"waiting": {"reason": "Pulling"}}}
            ]

    def _run(self, pod: dict[str, Any]) -> None:
        pod["spec"]["nodeName"] = self.node
        address = self.kubelet.address(pod) if self.kubelet is not None else "10.244.1.17"
        pod["status"] = {
            "phase": "Running",
            "podIP": address,
            "startTime": "2026-11-25T10:00:02Z",
            "conditions": [{"type": "PodScheduled", "status": "True"}],
            "containerStatuses": [
                {
                    "name": "dev",
                    "ready": True,
                    "state": {"running": {"startedAt": "2026-11-25T10:00:03Z"}},
                }
            ],
        }

    def _advance(self, pod: dict[str, Any]) -> None:
        name = pod["metadata"]["name"]
        self.reads[name] = self.reads.get(name, 0) + 1
        if self.scheduler == "slow" and self.reads[name] >= self.reads_to_run:
            self._run(pod)


_WS_GUID = "258EAFA5-E914-47DA-95CA-C5AB0DC85B11"
_EXEC_RE = re.compile(r"^/api/v1/namespaces/(?P<ns>[a-z0-9-]+)/pods/(?P<name>[a-z0-9.-]+)/exec\Z")
_FORWARD_RE = re.compile(
    r"^/api/v1/namespaces/(?P<ns>[a-z0-9-]+)/pods/(?P<name>[a-z0-9.-]+)/portforward\Z"
)


#: The largest frame the API server's websocket library (x/net/websocket) reads.
STDIN_FRAME_LIMIT = 32 << 20


def ws_frame(payload: bytes, opcode: int = 0x2) -> bytes:
    """One unmasked websocket frame from the server (RFC 6455)."""
    size = len(payload)
    if size < 126:
        head = bytes([0x80 | opcode, size])
    elif size < 1 << 16:
        head = bytes([0x80 | opcode, 126]) + size.to_bytes(2, "big")
    else:
        head = bytes([0x80 | opcode, 127]) + size.to_bytes(8, "big")
    return head + payload


def exec_status(code: int | None, argv: list[str]) -> dict[str, Any]:
    """The ``Status`` an API server sends on the exec's error channel."""
    if code == 0:
        return {"metadata": {}, "status": "Success"}
    if code is None:
        return {
            "metadata": {},
            "status": "Failure",
            "message": f'exec: "{argv[0]}": executable file not found in $PATH',
            "reason": "InternalError",
        }
    return {
        "metadata": {},
        "status": "Failure",
        "message": f"command terminated with non-zero exit code: exit status {code}",
        "reason": "NonZeroExitCode",
        "details": {"causes": [{"reason": "ExitCode", "message": str(code)}]},
    }


class _Handler(BaseHTTPRequestHandler):
    cluster: FakeCluster

    def frame_writer(self) -> Callable[..., None]:
        """Sends one frame to the client; safe from several threads, quiet once it is gone."""
        lock = threading.Lock()

        def send(data: bytes, opcode: int = 0x2) -> None:
            with lock, contextlib.suppress(OSError, ValueError):
                self.wfile.write(ws_frame(data, opcode))
                self.wfile.flush()

        return send

    def _upgrade(self) -> None:
        key = self.headers.get("Sec-WebSocket-Key", "")
        accept = base64.b64encode(hashlib.sha1((key + _WS_GUID).encode()).digest()).decode()  # noqa: S324 - the protocol's
        self.send_response(101)
        self.send_header("Upgrade", "websocket")
        self.send_header("Connection", "Upgrade")
        self.send_header("Sec-WebSocket-Accept", accept)
        self.send_header("Sec-WebSocket-Protocol", "v4.channel.k8s.io")
        self.end_headers()
        self.wfile.flush()
        self.close_connection = True

    def _forward(self, cluster: FakeCluster) -> bool:
        """A port-forward over a websocket: channel 0 carries one TCP connection to the pod's
        port, each channel first sending the port number (two bytes, little endian)."""
        parts = urlsplit(self.path)
        match = _FORWARD_RE.match(parts.path)
        if match is None or self.headers.get("Upgrade", "").lower() != "websocket":
            return False
        pod = cluster.objects.get(("pods", match["ns"], match["name"]))
        if pod is None:
            return False
        port = int(dict(parse_qsl(parts.query))["ports"])
        cluster.forwards.append((match["name"], port))
        address = (
            cluster.kubelet.address(pod) if cluster.kubelet is not None else cluster.forward_address
        )
        self._upgrade()
        send = self.frame_writer()
        announce = port.to_bytes(2, "little")
        send(b"\0" + announce)
        send(b"\1" + announce)
        try:
            target = socket.create_connection((address, port), timeout=5)
        except OSError as exc:
            send(b"\1" + str(exc).encode())
            send(b"\x03\xe8", opcode=0x8)
            return True

        def back() -> None:
            while True:
                try:
                    chunk = target.recv(1 << 16)
                except OSError:
                    break
                if not chunk:
                    break
                send(b"\0" + chunk)
            send(b"\x03\xe8", opcode=0x8)

        reader = threading.Thread(target=back, daemon=True)
        reader.start()
        while True:
            opcode, data = self.read_any_frame()
            if opcode == 0x8:
                break
            if data[:1] == b"\0" and len(data) > 1:
                target.sendall(data[1:])
        with contextlib.suppress(OSError):
            target.shutdown(socket.SHUT_RDWR)
        target.close()
        reader.join(5)
        return True

    def _exec(self, cluster: FakeCluster) -> bool:
        """An exec over a websocket (v4.channel.k8s.io), when this request is one."""
        parts = urlsplit(self.path)
        match = _EXEC_RE.match(parts.path)
        if match is None or self.headers.get("Upgrade", "").lower() != "websocket":
            return False
        pod = cluster.objects.get(("pods", match["ns"], match["name"]))
        handler = cluster.kubelet.exec if cluster.kubelet is not None else cluster.exec_handler
        if pod is None or handler is None:
            return False  # answered as a plain request: 404
        argv = [v for k, v in parse_qsl(parts.query) if k == "command"]
        cluster.execs.append((match["name"], argv))
        self._upgrade()
        if ("tty", "true") in parse_qsl(parts.query) and cluster.kubelet is not None:
            cluster.kubelet.terminal(pod, argv, self)
            return True
        given = self._read_stdin(cluster) if ("stdin", "true") in parse_qsl(parts.query) else None
        try:
            code, out, err = handler(pod, argv) if given is None else handler(pod, argv, given)
        except FileNotFoundError:
            code, out, err = None, b"", b""
        for channel, data in ((1, out), (2, err)):
            for start in range(0, len(data), 32 << 10):
                self.wfile.write(ws_frame(bytes([channel]) + data[start : start + (32 << 10)]))
        status = json.dumps(exec_status(code, argv)).encode()
        self.wfile.write(ws_frame(bytes([3]) + status))
        self.wfile.write(ws_frame(b"\x03\xe8", opcode=0x8))
        self.wfile.flush()
        self.close_connection = True
        return True

    def _read_stdin(self, cluster: FakeCluster) -> bytes:
        """The exec's standard input: its frames until the client sends no more for a moment
        (the protocol has no end of input), each at most 32 MiB, as the API server's websocket
        library takes."""
        data = self._read_frame()
        cluster.stdin_frames.append(len(data))
        self.connection.settimeout(0.5)
        try:
            while True:
                frame = self._read_frame()
                cluster.stdin_frames.append(len(frame))
                data += frame
        except (TimeoutError, OSError):
            pass
        finally:
            self.connection.settimeout(None)
        return data

    def _read_frame(self) -> bytes:
        """One masked frame from the client: the exec's standard input (channel 0)."""
        opcode, data = self.read_any_frame()
        assert opcode == 0x2, "stdin comes as a binary frame"
        assert data[:1] == b"\0", "on channel 0"
        return data[1:]

    def read_any_frame(self) -> tuple[int, bytes]:
        """One frame from the client: its opcode and its unmasked payload."""
        head = self.rfile.read(2)
        if len(head) < 2:
            return 0x8, b""
        first, second = head
        size = second & 0x7F
        if size == 126:
            size = int.from_bytes(self.rfile.read(2), "big")
        elif size == 127:
            size = int.from_bytes(self.rfile.read(8), "big")
        assert size <= STDIN_FRAME_LIMIT, "over the API server's websocket frame limit"
        mask = self.rfile.read(4) if second & 0x80 else b"\0\0\0\0"
        data = bytes(b ^ mask[i % 4] for i, b in enumerate(self.rfile.read(size)))
        return first & 0x0F, data

    def _answer(self) -> None:
        cluster = self.server.cluster  # type: ignore[attr-defined]
        cluster.requests.append((self.command, self.path))
        if self.headers.get("Authorization") == f"Bearer {TOKEN}" and (
            self._exec(cluster) or self._forward(cluster)
        ):
            return
        body: Any
        if self.headers.get("Authorization") != f"Bearer {TOKEN}":
            code, body = 401, _status(401, "Unauthorized", "Unauthorized")
        else:
            length = int(self.headers.get("Content-Length") or 0)
            raw = self.rfile.read(length) if length else b""
            try:
                sent = json.loads(raw) if raw else None
            except ValueError:
                sent = None
            code, body = cluster.handle(self.command, self.path, sent)
            if isinstance(body, Watch):
                self._stream_watch(cluster, body)
                return
        data = body if isinstance(body, bytes) else json.dumps(body).encode()
        self.send_response(code)
        kind = "text/plain" if isinstance(body, bytes) else "application/json"
        self.send_header("Content-Type", kind)
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def _stream_watch(self, cluster: FakeCluster, watch: Watch) -> None:
        """One JSON event a line (a chunk each), from the asked resource version on, until
        the asked timeout, the client going or this server stopping."""
        self.protocol_version = "HTTP/1.1"  # chunked, as the API server streams a watch
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Transfer-Encoding", "chunked")
        self.end_headers()
        self.close_connection = True
        try:
            self._watch_chunks(cluster, watch)
            self.wfile.write(b"0\r\n\r\n")
        except OSError:
            return

    def _watch_chunks(self, cluster: FakeCluster, watch: Watch) -> None:
        since = int(watch.query.get("resourceVersion") or 0)
        deadline = time.monotonic() + float(watch.query.get("timeoutSeconds") or 1800)
        stopping = self.server.stopping  # type: ignore[attr-defined]
        while not stopping.is_set() and time.monotonic() < deadline:
            for version, event in cluster.watch_events(watch, since):
                line = json.dumps(event).encode() + b"\n"
                self.wfile.write(b"%x\r\n%s\r\n" % (len(line), line))
                self.wfile.flush()
                since = version
            time.sleep(0.02)

    do_GET = do_POST = do_PATCH = do_DELETE = _answer

    def log_message(self, *_args: Any) -> None:
        pass


class APIServer:
    """``FakeCluster`` served on a loopback port in a thread."""

    def __init__(self, cluster: FakeCluster) -> None:
        self.cluster = cluster
        self._server = ThreadingHTTPServer(("127.0.0.1", 0), _Handler)
        self._server.cluster = cluster  # type: ignore[attr-defined]
        #: Set when this server stops: its open watches end.
        self._server.stopping = threading.Event()  # type: ignore[attr-defined]
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)
        self._thread.start()

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self._server.server_port}"

    def kubeconfig(self, path: Path, context: str = "lab-ml") -> Path:
        """A kubeconfig whose ``context`` reaches this server with ``TOKEN``."""
        path.write_text(
            json.dumps(
                {
                    "apiVersion": "v1",
                    "kind": "Config",
                    "clusters": [{"name": "lab", "cluster": {"server": self.url}}],
                    "users": [{"name": "gpudev", "user": {"token": TOKEN}}],
                    "contexts": [
                        {"name": context, "context": {"cluster": "lab", "user": "gpudev"}}
                    ],
                    "current-context": context,
                }
            )
        )
        return path

    def close(self) -> None:
        self._server.stopping.set()  # type: ignore[attr-defined]
        self._server.shutdown()
        self._server.server_close()


class DockerKubelet:
    """The pods of a ``FakeCluster`` run as real containers of the Docker engine: the pod's
    image, command, user and group, working folder and variables, each volume mount a folder
    of the test (the workspace claim's files), no network. An exec is a ``docker exec`` as the
    pod's user. So what gpudev runs in a pod (lifecycle commands, find's listing) runs for real
    in the real image; what a kubelet does beyond that (cgroups, the device plugin, claims bound
    to volumes, fsGroup) does not."""

    def __init__(self, client: Any, folder: Path, label: str) -> None:
        self.client = client
        self.folder = folder
        self.label = label
        self.containers: dict[str, Any] = {}

    def create(self, pod: dict[str, Any]) -> None:
        spec = pod["spec"]
        container = spec["containers"][0]
        security = spec.get("securityContext") or {}
        volumes = {}
        for mount in container.get("volumeMounts") or []:
            host = self.folder / f"{pod['metadata']['name']}-{mount['name']}"
            host.mkdir(parents=True, exist_ok=True)
            host.chmod(0o777)
            volumes[str(host)] = {"bind": mount["mountPath"], "mode": "rw"}
        self.containers[pod["metadata"]["name"]] = self.client.containers.run(
            container["image"],
            container["command"],
            user=f"{security.get('runAsUser', 0)}:{security.get('runAsGroup', 0)}",
            working_dir=container.get("workingDir"),
            environment={e["name"]: e["value"] for e in container.get("env") or []},
            volumes=volumes,
            init=True,  # a pod shares its process namespace: the pause container reaps
            labels={self.label: "1"},
            detach=True,
        )

    def address(self, pod: dict[str, Any]) -> str:
        """The pod's IP: its container's on the engine's bridge (this machine reaches it)."""
        container = self.containers[pod["metadata"]["name"]]
        container.reload()
        return str(container.attrs["NetworkSettings"]["IPAddress"])

    def exec(
        self, pod: dict[str, Any], argv: list[str], stdin: bytes | None = None
    ) -> tuple[int, bytes, bytes]:
        container = self.containers[pod["metadata"]["name"]]
        security = pod["spec"].get("securityContext") or {}
        user = f"{security.get('runAsUser', 0)}:{security.get('runAsGroup', 0)}"
        if stdin is None:
            code, (out, err) = container.exec_run(argv, user=user, demux=True)
            return int(code), out or b"", err or b""
        api = self.client.api
        exec_id = api.exec_create(container.id, argv, stdin=True, user=user)["Id"]
        stream = api.exec_start(exec_id, socket=True)
        raw = getattr(stream, "_sock", stream)
        raw.sendall(stdin)
        raw.shutdown(socket.SHUT_WR)
        frames = frames_iter(stream, tty=False)  # type: ignore[no-untyped-call]
        out, err = consume_socket_output(frames, demux=True)
        close_stream(stream)
        return int(api.exec_inspect(exec_id)["ExitCode"] or 0), out or b"", err or b""

    def terminal(self, pod: dict[str, Any], argv: list[str], handler: Any) -> None:
        """An exec with a tty, as kubectl exec -it makes: the client's input (channel 0) and
        window sizes (channel 4) to a ``docker exec -it``, its output back on channel 1, its
        exit code in the status channel."""
        container = self.containers[pod["metadata"]["name"]]
        security = pod["spec"].get("securityContext") or {}
        user = f"{security.get('runAsUser', 0)}:{security.get('runAsGroup', 0)}"
        api = self.client.api
        exec_id = api.exec_create(container.id, argv, stdin=True, tty=True, user=user)["Id"]
        stream = api.exec_start(exec_id, socket=True, tty=True)
        raw = getattr(stream, "_sock", stream)
        send = handler.frame_writer()

        def output() -> None:
            while True:
                try:
                    chunk = raw.recv(1 << 16)
                except OSError:
                    break
                if not chunk:
                    break
                send(b"\1" + chunk)
            code = api.exec_inspect(exec_id).get("ExitCode")
            send(b"\3" + json.dumps(exec_status(int(code or 0), argv)).encode())
            send(b"\x03\xe8", opcode=0x8)

        reader = threading.Thread(target=output, daemon=True)
        reader.start()
        while reader.is_alive():
            opcode, data = handler.read_any_frame()
            if opcode == 0x8:
                break
            if data[:1] == b"\0":
                raw.sendall(data[1:])
            elif data[:1] == b"\4":
                size = json.loads(data[1:])
                api.exec_resize(exec_id, height=size["Height"], width=size["Width"])
        reader.join(5)
        close_stream(stream)

    def output(self, pod: dict[str, Any]) -> bytes:
        return bytes(self.containers[pod["metadata"]["name"]].logs())

    def delete(self, pod: dict[str, Any]) -> None:
        container = self.containers.pop(pod["metadata"]["name"], None)
        if container is not None:
            container.remove(force=True)

    def close(self) -> None:
        for container in self.client.containers.list(
            all=True, filters={"label": f"{self.label}=1"}
        ):
            container.remove(force=True)


@contextlib.contextmanager
def cluster_manager(
    cluster: FakeCluster,
    folder: Path,
    monkeypatch: Any,
    *,
    host: dict[str, Any] | None = None,
    **traits: Any,
) -> Iterator[Any]:
    """A ``DevContainers`` whose one host, ``cluster`` (``k8s://lab-ml/team-ml``), is
    ``cluster`` served by ``APIServer`` and reached through a kubeconfig in ``folder``; kernels
    and web ports at pod IPs; ``host``: more keys of its entry in ``c.HostPool.hosts``;
    ``traits``: more ``c.DevContainers`` settings."""
    from traitlets.config import Config  # noqa: PLC0415 - a helper of the tests only

    from jupyter_gpudev.containers import DevContainers  # noqa: PLC0415
    from jupyter_gpudev.engine import HostPool  # noqa: PLC0415
    from jupyter_gpudev.k8s.settings import RENAMED  # noqa: PLC0415

    server = APIServer(cluster)
    monkeypatch.setenv("KUBECONFIG", str(server.kubeconfig(folder / "kubeconfig")))
    monkeypatch.delenv("KUBERNETES_SERVICE_HOST", raising=False)
    config = Config()
    config.HostPool.include_local = False
    config.HostPool.hosts = {"cluster": {"url": "k8s://lab-ml/team-ml", **(host or {})}}
    config.HostPool.hosts_file = str(folder / "hosts.json")
    config.GPUInventory.backend = "none"
    config.DevContainers.state_dir = str(folder / "state")
    config.KubernetesHosts.port_forward = "never"  # at the pod's IP (forwards: their test)
    config.KubernetesHosts.poll_interval = 0.02
    for name, value in traits.items():
        if name in RENAMED:  # pod_watch=True: c.KubernetesHosts.watch
            setattr(config.KubernetesHosts, RENAMED[name], value)
        else:
            setattr(config.DevContainers, name, value)
    config.Access.admin_users = {"admin"}
    root = folder / "work"
    root.mkdir()
    pool = HostPool(config=config, log=logging.getLogger("test"))
    try:
        yield DevContainers(root_dir=root, host_pool=pool, config=config)
    finally:
        pool.close()
        server.close()
