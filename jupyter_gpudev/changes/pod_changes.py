"""The changes of the dev containers of a Kubernetes host, as pods (``source.ChangeSource``).

A pod has no engine to ask: its ``docker diff`` is two file listings compared (the one taken
when it started and one now, ``k8s.listing``), its files are read by ``tar`` run in it as its
user, and its packages at the start were probed in it then (``podfiles.py``). Its commit writes
the Dockerfile diff; its snapshot is built and pushed by its cluster (``podbuild.py``), from the
patched Dockerfile and the kept files staged for it; a verify build (it needs a Docker engine) is
refused.
"""

from __future__ import annotations

from typing import Any

from ..containers.pods import annotation, mount_paths, pod_info, pod_uid
from ..engine import Host, Progress
from ..errors import BadRequest, Conflict, EngineError
from ..k8s.listing import compare_listings, parse_listing
from ..labels import A_NAME
from ..untrusted import clean
from . import classify, compare, packages
from .baselines import Baseline
from .dockerfile import change_items
from .podbuild import PodBuild
from .podfiles import PodArchives, PodReader, PodSource, pod_key, probe_pod
from .snapshots import SnapshotTags
from .source import (
    Captured,
    CaptureParts,
    CommitAsk,
    EarlyCommit,
    Prepared,
    Prune,
    Snapshot,
    Snapshots,
)


class PodChanges:
    """The changes of the pods of one Kubernetes host (``source.ChangeSource``)."""

    stages_snapshot = True

    def __init__(self, parts: CaptureParts, host: Host) -> None:
        self.parts = parts
        self.host = host

    def record_baseline(self, native: dict[str, Any]) -> None:
        """The packages of a pod that just ran its lifecycle commands, probed in it (see
        ``podfiles.probe_pod``): what its changes are counted against, kept as the pod's
        "image" (its start) and as its own baseline (moved forward by commits)."""
        pod, containers, baselines = native, self.parts.containers, self.parts.baselines
        cluster = containers.pods(self.host).cluster
        name = str(pod["metadata"]["name"])
        probed = probe_pod(cluster, name, annotation(pod, A_NAME) or name)
        for problem in probed.problems[:20]:
            containers.log.info("gpudev: baseline of %s: %s", name, clean(problem))
        key = pod_key(pod_uid(pod))
        baselines.save_image(key, probed.state)
        baselines.save_container(key, Baseline(probed.state, _pod_env(pod), {}))

    def diff(self, pod: dict[str, Any]) -> tuple[list[dict[str, Any]], list[str]]:
        """A pod's changes since it started, in ``docker diff``'s shape (its listing then
        compared with one now), and what of the listings could not be read. A ``Conflict``
        when it was not listed when it started."""
        host, containers = self.host, self.parts.containers
        name = annotation(pod, A_NAME) or str(pod["metadata"]["name"])
        before = containers.pod_listings.load(host.name, pod_uid(pod))
        if before is None:
            raise Conflict(
                f"{name!r} runs in a pod on host {host.name!r} whose files were not listed when "
                "it started, so its changes cannot be told from its image's files"
            )
        now = containers.pods(host).listing(str(pod["metadata"]["name"]))
        first, second = parse_listing(before), parse_listing(now)
        diff = compare_listings(first.entries, second.entries, skip=mount_paths(pod))
        return diff, [*first.problems, *second.problems]

    def archives(self, pod: dict[str, Any]) -> PodArchives:
        """Its files, read by ``tar`` run in it as its user."""
        name = annotation(pod, A_NAME) or str(pod["metadata"]["name"])
        cluster = self.parts.containers.pods(self.host).cluster
        return PodArchives(cluster, str(pod["metadata"]["name"]), name)

    def capture(
        self,
        native: dict[str, Any],
        name: str,  # noqa: ARG002 - a pod is named by its annotation
        excluded: tuple[str, ...],
    ) -> Captured:
        """A pod's change set: its listings compared instead of ``docker diff``, its files
        read by ``tar`` in it, its packages derived from its start's probe as a container's
        are from its image's. A pod's variables are its spec's: they do not change."""
        host, pod, baselines = self.host, native, self.parts.baselines
        manager = self.parts.containers
        info = pod_info(pod, host.name)
        whole_diff, problems = self.diff(pod)  # first: says when it was not listed
        key = pod_key(pod_uid(pod))
        start = baselines.image(key)
        base = baselines.container(key)
        if start is None or base is None:
            raise Conflict(
                f"The packages of {info.name!r} were not probed when its pod started, so its "
                "changes cannot be read: start a new pod of the environment to commit from"
            )
        environment = manager.environments.get(info.environment, manager.root_dir)
        archives = self.archives(pod)
        diff = [d for d in whole_diff if base.files.get(str(d["Path"])) != int(d["Kind"])]
        diff += self.parts.edited(archives, base, whole_diff)
        derived = packages.current_state(start, whole_diff, PodReader(archives))
        current = derived.result
        result = compare.package_changes(base.packages, current.state)
        result.notes.extend(derived.problems)
        result.notes.extend(clean(p) for p in problems[:20])
        new_envs = [p.env.prefix for p in result.python if p.new_env]
        result.files = classify.file_changes(diff, mount_paths(pod), current.owned_files, new_envs)
        known = set(base.secrets)
        result.files.secrets = sorted(
            {*result.files.secrets, *known.intersection(result.files.kept)}
        )
        result.files.kept = [p for p in result.files.kept if p not in known]
        result.files.owners = classify.home_owners(result.files.kept, current.state.accounts)
        env = _pod_env(pod)
        captured = Captured(
            info,
            environment,
            result,
            None,
            current.state,
            whole_diff,
            None,
            base=base,
            before_env=dict(base.env) if base.env is not None else env,
            items=change_items(result),
            excluded=excluded,
            origin=PodSource(
                host.name, pod_uid(pod), archives, [f"{k}={v}" for k, v in env.items()]
            ),
        )
        captured.changes = result.without(set(captured.held))
        return captured

    def uncommitted(
        self,
        native: dict[str, Any],
        name: str,  # noqa: ARG002 - a pod is named by its annotation
        prune: Prune,
    ) -> list[str]:
        """What deleting a pod would lose (the rule a container's removal applies): its
        changes since it started less what its last commit wrote, files a commit wrote and
        edited since, and the changes a commit left out (``prune``). A ``Conflict`` when its
        files were not listed when it started."""
        pod, parts = native, self.parts
        diff, problems = self.diff(pod)
        for problem in problems[:5]:
            parts.containers.log.info("gpudev: listing of a pod: %s", clean(problem))
        key = pod_key(pod_uid(pod))
        baseline = parts.baselines.container(key)
        if baseline is not None and baseline.held:  # a change left out and undone since
            baseline = prune(annotation(pod, A_NAME), self.host.name, key, baseline)
        edited = parts.edited(self.archives(pod), baseline, diff) if baseline is not None else []
        return classify.uncommitted(
            diff,
            mount_paths(pod),
            baseline.files if baseline else {},
            held=baseline.held if baseline else (),
            edited=[str(d["Path"]) for d in edited],
        )

    # -- a pod's commit: its snapshot built in its cluster ------------------------------------

    def check_commit(self, name: str, options: CommitAsk) -> None:
        """A pod's commit: no verify build (it needs a Docker engine), and a snapshot only
        with its push (the cluster builds and pushes it)."""
        if options.verify:
            raise BadRequest(
                f"{name} is a pod on a Kubernetes host: a verify build needs a Docker engine; "
                "commit it without verify (--snapshot TAG --push builds it in the cluster)"
            )
        if options.snapshot and not options.push:
            raise BadRequest(
                f"{name} is a pod on a Kubernetes host: its snapshot is built and pushed by "
                "the cluster, so --snapshot needs --push"
            )

    def early_commit(self, native: dict[str, Any], commits: Snapshots) -> None:  # noqa: ARG002
        """None: its snapshot is its cluster's build."""
        return

    def check_prepared(self, prepared: Prepared, options: CommitAsk) -> None:
        """The options it allows, and its kept files staged for a build."""
        name = prepared.captured.info.name
        self.check_commit(name, options)
        if options.snapshot and prepared.staging is None and prepared.rendered.files:
            raise EngineError(f"The files of {name} were not copied out for its build: try again")

    def snapshot(
        self,
        commits: Snapshots,
        prepared: Prepared,
        *,
        options: CommitAsk,
        tags: SnapshotTags,  # noqa: ARG002 - the build pushes to the tag asked for
        say: Progress,
        early: EarlyCommit | None,  # noqa: ARG002 - none: nothing is committed early
    ) -> Snapshot:
        """Built and pushed by its cluster (``podbuild.PodBuild``)."""
        return commits.built_snapshot(
            prepared, options, say, PodBuild(self.parts, commits.registries).run
        )


def _pod_env(pod: dict[str, Any]) -> dict[str, str]:
    """The variables the dev container of a pod's spec sets (values only: a reference to a
    Secret or a field is not a value gpudev knows)."""
    env: dict[str, str] = {}
    containers = (pod.get("spec") or {}).get("containers") or []
    for container in containers[:1]:
        for item in (container or {}).get("env") or []:
            if isinstance(item, dict) and isinstance(item.get("name"), str):
                value = item.get("value")
                if isinstance(value, str):
                    env[item["name"]] = value
    return env
