"""A snapshot of a pod, built from its patched Dockerfile and pushed by its cluster.

A cluster has no ``docker commit``: ``commit --snapshot TAG --push`` of a pod builds the image
the commit's Dockerfile describes, in the cluster, and pushes it. In order:

1. the build context (the environment's, the patched Dockerfile and the staged kept files:
   what a verify build reads), as gpudev's own tar archive, is written to
   ``.gpudev-build/ID/context.tar`` of the pod's workspace claim by ``head`` run in the pod as
   its user; gpudev keeps the archive's digest;
2. a Job (``k8s.make_builder_job``: on the pod's node for a ``ReadWriteOnce`` claim, no token,
   no retry) whose first step, in an image of gpudev's choosing, copies the archive out of the
   claim into a volume of the build pod's own and compares the copy's digest with gpudev's:
   the pod, which can write its claim at any time, cannot change what is built (a changed
   archive ends the build, ``Conflict``); kaniko then builds from the checked copy and crane
   pushes; its pod's termination message is the pushed digest;
3. the build pod's NetworkPolicy (owned by the Job): the cluster's DNS and the host's
   ``build_egress`` only;
4. a Secret holds the registry credentials as ``config.json`` (never logged, never in an
   argument), for the push step only (kaniko pulls the base images without credentials); the
   build pod waits for it, so it never runs before its NetworkPolicy exists. In shared mode
   they are the service's, and the push goes only under the user's prefix
   (``Registries.check_push``);
5. whatever happens, the Secret, the Job (with its pod), its NetworkPolicy and the archive are
   deleted.

The image holds what the Dockerfile installs and the kept files, not the pod's whole file
system: a file the commit leaves out (a credential, one over the size limit) is not in it.
"""

from __future__ import annotations

import base64
import hashlib
import json
import re
import secrets
import time
from collections.abc import Callable, Mapping
from datetime import datetime, timezone
from typing import IO, TYPE_CHECKING, Any, cast

from ..containers.pods import IMAGE_REASONS
from ..engine import Progress, Reference, Registries
from ..engine.cluster import Cluster
from ..errors import BadRequest, Conflict, EngineError, GPUDevError
from ..k8s import objects as k8s
from ..k8s.status import pod_state
from ..untrusted import as_dict, clean

if TYPE_CHECKING:
    from .podfiles import PodSource
    from .source import CaptureParts, Prepared

#: Where build contexts are written in the workspace claim (removed after each build).
BUILD_FOLDER = ".gpudev-build"
#: The name of gpudev's archive of a build context there.
CONTEXT_FILE = "context.tar"
#: The largest build context sent to a cluster (it travels as one exec's input).
MAX_CONTEXT = 256 << 20
#: The last lines of a failed build's output shown.
LOG_LINES = 20
#: Seconds a build's pod may wait to be made and placed before the build fails.
PLACE_TIMEOUT = 300
_DIGEST_RE = re.compile(r"^sha256:[0-9a-f]{64}\Z")
#: What a builder says when it could not connect (its pod's egress is limited).
_UNREACHED = (
    "dial tcp",
    "i/o timeout",
    "no such host",
    "connection refused",
    "network is unreachable",
    "temporary failure in name resolution",
    "could not resolve",
)


def registry_config(registry: str, auth: Mapping[str, str]) -> bytes:
    """``config.json`` for the builder (what ``docker login`` writes) from an auth config of
    ``Registries.auth_for``: a user and password, or an identity token; none: anonymous."""
    key = "https://index.docker.io/v1/" if registry == "docker.io" else registry
    entry: dict[str, str] = {}
    if auth.get("identitytoken"):
        entry = {"identitytoken": auth["identitytoken"]}
    elif auth.get("username") and auth.get("password"):
        pair = f"{auth['username']}:{auth['password']}".encode()
        entry = {"auth": base64.b64encode(pair).decode()}
    return json.dumps({"auths": {key: entry} if entry else {}}).encode()


def workspace_of(pod: dict[str, Any]) -> tuple[str, str]:
    """Where the dev container mounts its workspace claim, and the claim's name."""
    spec = as_dict(pod.get("spec"))
    claims = {
        as_dict(v).get("name"): as_dict(as_dict(v).get("persistentVolumeClaim")).get("claimName")
        for v in spec.get("volumes") or []
    }
    for container in (spec.get("containers") or [])[:1]:
        for mount in as_dict(container).get("volumeMounts") or []:
            name, path = as_dict(mount).get("name"), as_dict(mount).get("mountPath")
            claim = claims.get(name)
            if isinstance(claim, str) and isinstance(path, str) and path.startswith("/"):
                return path.rstrip("/") or "/", claim
    raise Conflict("The pod has no workspace claim to build from")


def run_as_of(pod: dict[str, Any]) -> tuple[int, int]:
    """The user and group the dev container runs as: what the build reads its claim as."""
    security = as_dict(as_dict(pod.get("spec")).get("securityContext"))
    uid, gid = security.get("runAsUser"), security.get("runAsGroup", 0)
    if type(uid) is int and uid > 0 and type(gid) is int and gid >= 0:
        return uid, gid
    raise Conflict("The pod does not run as a user other than root: gpudev does not build it")


class PodBuild:
    """Builds and pushes the snapshot of a pod in its cluster (see the module)."""

    def __init__(
        self,
        capture: CaptureParts,
        registries: Registries,
        *,
        poll: float = 2.0,
        clock: Callable[[], float] = time.monotonic,
        sleep: Callable[[float], None] = time.sleep,
    ) -> None:
        self.capture = capture
        self.registries = registries
        self.log = capture.containers.log
        self.poll = poll
        self._clock = clock
        self._sleep = sleep

    def run(
        self,
        prepared: Prepared,
        tag: str,
        labels: Mapping[str, str],
        say: Progress,
        *,
        context: IO[bytes],
        dockerfile: str,
        deadline: int = 3600,
    ) -> str:
        """Build ``prepared``'s patched Dockerfile in the pod's cluster and push it as
        ``tag``; the pushed digest. ``context``: the build context as a tar file, with the
        patched Dockerfile at ``dockerfile``."""
        captured = prepared.captured
        if captured.pod is None:
            raise BadRequest(f"{captured.info.name} is not a pod")
        origin = cast("PodSource", captured.pod)
        self.registries.check_push(tag)  # in shared mode, only under the user's prefix
        manager = self.capture.containers
        host = manager.host_pool.get(origin.host)
        pods = manager.pods(host)
        pod = pods.find(captured.info.name)
        if pod is None or str(as_dict(pod.get("metadata")).get("uid")) != origin.uid:
            raise Conflict(f"The pod of {captured.info.name!r} changed meanwhile: try again")
        mount, claim = workspace_of(pod)
        run_as = run_as_of(pod)
        node = as_dict(pod.get("spec")).get("nodeName")
        reference = Reference.parse(tag)
        archive = context.read(MAX_CONTEXT + 1)
        if len(archive) > MAX_CONTEXT:
            raise BadRequest(
                f"The build context of {captured.info.name} is over {MAX_CONTEXT >> 20} MiB: "
                "too large to send to the cluster"
            )
        digest_sent = "sha256:" + hashlib.sha256(archive).hexdigest()
        build_id = secrets.token_hex(4)
        folder = f"{BUILD_FOLDER}/{build_id}"
        build_name = f"{captured.info.name}-{build_id}"
        created = datetime.now(timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")
        cluster = pods.cluster
        pod_name = str(pod["metadata"]["name"])
        made: list[tuple[str, str, str]] = []
        try:
            say({"stage": "snapshot", "message": f"sending the build context ({len(archive)} B)"})
            self._send(cluster, pod_name, f"{mount}/{folder}", archive)
            auth, source = self.registries.auth_for(reference.registry)
            secret_name = k8s.k8s_name(build_name, "gpudev-registry-")
            target = k8s.BuildTarget(
                name=build_name,
                owner=captured.info.owner,
                namespace=cluster.spec.namespace,
                workspace_claim=claim,
                context_archive=f"{folder}/{CONTEXT_FILE}",
                context_digest=digest_sent,
                context_size=len(archive),
                dockerfile=dockerfile,
                destination=tag,
                registry_config=secret_name,
                created=created,
                deadline_seconds=deadline,
                run_as=run_as,
                node=node if isinstance(node, str) and node else None,
                labels=labels,
                egress=host.spec.build_egress or (),
            )
            job = k8s.make_builder_job(target)
            job_name = str(job["metadata"]["name"])
            say({"stage": "snapshot", "message": f"building {tag} in the cluster ({job_name})"})
            # Listed before they are made: a create that times out may still have made it.
            # Deleted in the reverse order: the Secret, the Job, then its NetworkPolicy.
            made.append(("networking.k8s.io/v1", "NetworkPolicy", job_name))
            made.append(("batch/v1", "Job", job_name))
            job_uid = str(as_dict(cluster.create(job).get("metadata")).get("uid") or "")
            owner = (job_name, job_uid) if job_uid else None
            # The NetworkPolicy and the Secret after the Job, owned by it: the cluster deletes
            # them with the Job (whose TTL ends it) if gpudev cannot. The pod waits for the
            # Secret, made last: it never runs without its NetworkPolicy.
            cluster.create(k8s.make_build_network_policy(target, job=owner))
            made.append(("v1", "Secret", secret_name))
            cluster.create(
                k8s.make_registry_secret(
                    build_name,
                    cluster.spec.namespace,
                    captured.info.owner,
                    registry_config(reference.registry, auth),
                    created,
                    job=owner,
                )
            )
            digest = self._wait(
                cluster,
                job_name,
                tag,
                source=source,
                deadline=deadline,
                name=captured.info.name,
                host=host.spec.name,
            )
        finally:
            self._clean(cluster, pod_name, f"{mount}/{BUILD_FOLDER}", build_id, made)
        say({"stage": "push", "message": f"pushed {tag} {digest}"})
        return digest

    @staticmethod
    def _send(cluster: Cluster, pod: str, folder: str, context: bytes) -> None:
        """Write gpudev's archive of the build context as ``folder/CONTEXT_FILE`` of the pod's
        workspace, as the pod's user (what the build reads is checked against its digest)."""
        script = 'umask 077 && mkdir -p -- "$1" && head -c "$2" > "$1/$3"'
        result = cluster.exec(
            pod,
            ["sh", "-c", script, "sh", folder, str(len(context)), CONTEXT_FILE],
            timeout=600,
            limit=1 << 16,
            stdin=context,
        )
        if result.exit_code != 0:
            words = clean(result.stderr.decode("utf-8", "replace").strip()[-300:])
            raise EngineError(f"Writing the build context in {pod} failed ({words})")

    def _wait(
        self,
        cluster: Cluster,
        job: str,
        tag: str,
        *,
        source: str,
        deadline: int,
        name: str = "",
        host: str = "",
    ) -> str:
        """Wait for the Job; the digest its pod pushed, or the build's failure in its words
        (``name``, ``host``: the dev container's, for the messages)."""
        start = self._clock()
        end = start + deadline + 60
        while True:
            found = cluster.read("batch/v1", "Job", job)
            if found is None:
                raise EngineError(f"The build Job {job} was deleted while it ran")
            status = as_dict(found.get("status"))
            failed = any(
                as_dict(c).get("type") == "Failed" and as_dict(c).get("status") == "True"
                for c in status.get("conditions") or []
            )
            if status.get("succeeded") or failed or status.get("failed"):
                break
            if self._clock() >= end:
                raise EngineError(f"The build of {tag} did not end in {deadline} s ({job})")
            self._stuck(cluster, job, tag, self._clock() - start)
            self._sleep(self.poll)
        builders = cluster.items("v1", "Pod", labels=f"job-name={job}")
        builder = as_dict(builders[-1]) if builders else {}
        if status.get("succeeded"):
            digest = _termination_message(builder)
            if not _DIGEST_RE.match(digest):
                raise EngineError(f"The build of {tag} ended without saying the pushed digest")
            return digest
        step, code = _failed_step(builder)
        if step == "context" and code == k8s.CONTEXT_CHANGED:
            raise Conflict(
                f"The build context of {name or tag} changed in the pod's workspace claim after "
                "gpudev wrote it: what the build would read is not the one gpudev wrote (its "
                "digest differs), so nothing was built or pushed. Something in the pod rewrites "
                f"{BUILD_FOLDER}; commit again"
            )
        lines = self._last_lines(cluster, builder, step)
        refused = "UNAUTHORIZED" in lines or "authentication required" in lines
        why = (
            f"The registry {Reference.parse(tag).registry} refused the push of {tag} "
            f"(credentials from {source})"
            if refused
            else f"The build of {tag} in the cluster failed"
        )
        hint = ""
        if any(words in lines.lower() for words in _UNREACHED):
            where = f"c.HostPool.hosts[{host!r}]['build_egress']" if host else "build_egress"
            hint = f" (the build pod reaches only the cluster's DNS and what {where} allows)"
        raise GPUDevError(f"{why}: {lines or 'it said nothing'}{hint}")

    def _stuck(self, cluster: Cluster, job: str, tag: str, waited: float) -> None:
        """Fail at once when the build cannot start: its image cannot be pulled, its pod
        failed or was not placed for ``PLACE_TIMEOUT`` s, or after as long the Job has no
        pod at all (e.g. refused by the namespace's Pod Security level), in the cluster's
        words."""
        builders = cluster.items("v1", "Pod", labels=f"job-name={job}")
        if not builders:
            if waited < PLACE_TIMEOUT:
                return
            said = [
                clean(str(as_dict(e).get("message") or ""))
                for e in cluster.events_of("Job", job).get("items") or []
                if as_dict(e).get("type") == "Warning"
            ]
            raise EngineError(
                f"The build of {tag} did not start: the cluster made no pod for {job}"
                + (f" ({said[-1]})" if said else "")
            )
        state = pod_state(as_dict(builders[-1]))
        words = ": ".join(p for p in (state.reason, state.message) if p) or state.state
        if state.reason in IMAGE_REASONS:
            raise EngineError(
                f"The build of {tag} did not start: its image cannot be pulled ({words})"
            )
        if state.state == "unschedulable" and waited >= PLACE_TIMEOUT:
            raise EngineError(f"The build of {tag} was not placed in {PLACE_TIMEOUT} s ({words})")

    def _last_lines(self, cluster: Cluster, builder: dict[str, Any], step: str) -> str:
        name = as_dict(builder.get("metadata")).get("name")
        if not isinstance(name, str):
            return ""
        try:
            data = cluster.output(name, tail=LOG_LINES, limit=64 << 10, container=step)
        except GPUDevError as err:
            return f"(its output could not be read: {err.message})"
        return clean(data.decode("utf-8", "replace").strip())

    def _clean(
        self,
        cluster: Cluster,
        pod: str,
        builds: str,
        build_id: str,
        made: list[tuple[str, str, str]],
    ) -> None:
        for api_version, kind, name in reversed(made):  # the Secret, the Job, its policy
            try:
                cluster.delete(api_version, kind, name)
            except Exception as exc:
                self.log.warning("gpudev: could not delete %s %s: %s", kind, name, exc)
        try:
            cluster.exec(
                pod,
                ["rm", "-rf", "--", f"{builds}/{build_id}"],
                timeout=120,
                limit=1 << 16,
            )
            cluster.exec(pod, ["rmdir", "--", builds], timeout=60, limit=1 << 16)
        except Exception as exc:
            self.log.info("gpudev: the build context in %s was not removed: %s", pod, exc)


def _failed_step(pod: dict[str, Any]) -> tuple[str, int | None]:
    """Which step of a failed build pod failed, and its exit code: the first init container
    (``context``, ``build``) that did not end well, else ``push``."""
    for status in as_dict(pod.get("status")).get("initContainerStatuses") or []:
        terminated = as_dict(as_dict(as_dict(status).get("state")).get("terminated"))
        if terminated.get("exitCode") != 0:
            code = terminated.get("exitCode")
            step = as_dict(status).get("name")
            return (step if step in ("context", "build") else "build"), (
                code if type(code) is int else None
            )
    return "push", None


def _termination_message(pod: dict[str, Any]) -> str:
    """The digest the push step wrote (crane says ``REFERENCE@sha256:...``), else ``""``."""
    for status in as_dict(pod.get("status")).get("containerStatuses") or []:
        terminated = as_dict(as_dict(as_dict(status).get("state")).get("terminated"))
        message = terminated.get("message")
        if isinstance(message, str) and message.strip():
            return message.strip().rsplit("@", 1)[-1]
    return ""
