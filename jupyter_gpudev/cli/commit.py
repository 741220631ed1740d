"""``jupyter gpudev commit`` and ``jupyter gpudev diff``: a container's changes as a Dockerfile
diff, written, verified, snapshotted and pushed."""

from __future__ import annotations

import json
import sys
from typing import TYPE_CHECKING, Any

from traitlets import Bool, List, Unicode

from ..changes.commit import CommitOptions

if TYPE_CHECKING:
    from ..changes.capture import Captured
    from ..changes.commit import CommitResult
from .base import ContainerCommand, GPUDevSubcommand


class CommitApp(ContainerCommand):
    """Turn a dev container's changes into its environment's Dockerfile."""

    name = "jupyter-gpudev-commit"
    description = (
        "Show a dev container's changes as a Dockerfile diff: jupyter gpudev commit NAME "
        "[--write] [--verify] [--snapshot TAG] [--push] [-m MESSAGE] [--exclude ID ...] "
        "[--expect DIGEST] [--json]. --exclude leaves the change ID (as `jupyter gpudev diff` "
        "lists them) out of the commit: it stays uncommitted; --expect refuses the commit "
        "(exit 6) unless its diff has this digest (`diff --json`'s). --verify builds "
        "the patched Dockerfile and compares its packages with the container's; --snapshot "
        "commits the container as the image TAG (driver files left out, labelled with the "
        "environment, base image digest and diff hash); --push pushes it with your Docker "
        "credentials; --write applies the diff: the changed files are copied into the build "
        "context (gpudev-context/NAME/), the Dockerfile is written (the previous one kept as "
        "Dockerfile.prev; devcontainer.json is pointed at a new Dockerfile) and the "
        "container's baseline moves forward, so a diff right after is empty. The workspace is "
        "written last: a failed verify or push writes nothing."
    )
    usage = (
        "jupyter gpudev commit NAME [--write] [--verify] [--snapshot TAG] [--push] "
        "[-m MESSAGE] [--exclude ID ...] [--expect DIGEST] [--host H] [--json]"
    )
    write = Bool(False, help="Apply the diff to the Dockerfile.").tag(config=True)
    verify = Bool(
        False, help="Build the patched Dockerfile and compare its packages with the container's."
    ).tag(config=True)
    snapshot = Unicode(
        "", help="Commit the container as this image tag ([REGISTRY/]NAME[:TAG])."
    ).tag(config=True)
    push = Bool(False, help="Push the --snapshot image to the registry its tag names.").tag(
        config=True
    )
    message = Unicode("", help="A message: a comment in the Dockerfile, the image's label.").tag(
        config=True
    )
    exclude = List(
        Unicode(),
        help="Ids of changes to leave out of the commit (repeat --exclude ID; `jupyter gpudev "
        "diff NAME` lists the ids): they stay uncommitted.",
    ).tag(config=True)
    expect = Unicode(
        "",
        help="Commit only if the diff's digest (`jupyter gpudev diff NAME --json`) is this one.",
    ).tag(config=True)
    aliases: dict[str, Any] = {
        **ContainerCommand.aliases,
        "snapshot": "CommitApp.snapshot",
        "m": "CommitApp.message",
        "message": "CommitApp.message",
        "exclude": "CommitApp.exclude",
        "expect": "CommitApp.expect",
    }
    flags: dict[str, Any] = {
        **GPUDevSubcommand.flags,
        "write": ({"CommitApp": {"write": True}}, "Apply the diff to the Dockerfile."),
        "verify": (
            {"CommitApp": {"verify": True}},
            "Build the patched Dockerfile and compare its packages with the container's.",
        ),
        "push": ({"CommitApp": {"push": True}}, "Push the --snapshot image."),
    }

    def options(self) -> CommitOptions:
        return CommitOptions(
            write=self.write,
            verify=self.verify,
            snapshot=self.snapshot or None,
            push=self.push,
            message=self.message or None,
            exclude=tuple(self.exclude),
            expect=self.expect or None,
        )

    def run(self) -> None:
        name = self.name_arg()
        options = self.options()
        if self.service_url():
            self.run_remote(name, options)
            return
        committer = self.services().committer
        quiet = self.json_output or options == CommitOptions(
            message=options.message, exclude=options.exclude, expect=options.expect
        )
        outcome = committer.commit(
            name, options, self.host or None, None if quiet else self.progress
        )
        if self._bar is not None:
            self._bar.close()
        result = outcome.to_json()
        if self.json_output:
            print(json.dumps(result))
            return
        print_outcome(name, outcome, result)

    def run_remote(self, name: str, options: CommitOptions) -> None:
        """The commit (or the diff) made by the shared service; the same output, from its
        JSON (which is what ``--json`` prints in both modes)."""
        body = {
            "write": options.write,
            "verify": options.verify,
            "snapshot": options.snapshot,
            "push": options.push,
            "message": options.message,
            "exclude": list(options.exclude),
            "expect": options.expect,
        }
        quiet = self.json_output or not (options.write or options.verify or options.snapshot)
        result = self.remote().commit(name, body, None if quiet else self.progress)
        if self._bar is not None:
            self._bar.close()
        if self.json_output:
            print(json.dumps(result))
            return
        print_result(name, result if isinstance(result, dict) else {})


def print_result(name: str, result: dict[str, Any]) -> None:
    """A commit's human output from its JSON (client mode): the diff on stdout, the rest on
    stderr, as ``print_outcome`` writes it."""
    for line in result.get("reported") or []:
        print(f"note: {line}", file=sys.stderr)
    if result.get("diff"):
        sys.stdout.write(str(result["diff"]))
        sys.stdout.flush()
    elif result.get("held"):
        print(f"Every change of {name} is left out: nothing to commit.", file=sys.stderr)
    else:
        print(f"No changes in {name} since its baseline.", file=sys.stderr)
    items = [i for i in result.get("items") or [] if isinstance(i, dict)]
    held = set(result.get("excluded") or [])
    if items:
        print("changes (leave one out with --exclude ID):", file=sys.stderr)
        for item in items[:LISTED_ITEMS]:
            kind = item.get("kind")
            label = "" if kind in ("file", "delete") else f"  ({item.get('label')})"
            line = f"  {'-' if item.get('id') in held else '+'} {item.get('id')}{label}"
            print("".join(c if c.isprintable() else "?" for c in line), file=sys.stderr)
        if len(items) > LISTED_ITEMS:
            more = len(items) - LISTED_ITEMS
            print(f"  ... and {more} more (--json lists them all)", file=sys.stderr)
    for unknown in result.get("excluded_unknown") or []:
        print(f"note: --exclude {unknown}: no such change now", file=sys.stderr)
    verify = result.get("verify")
    if isinstance(verify, dict):
        print(
            "verified: the rebuilt image has the container's packages "
            f"({verify.get('seconds', 0):.1f} s)",
            file=sys.stderr,
        )
    snapshot = result.get("snapshot")
    if isinstance(snapshot, dict):
        line = f"snapshot: {snapshot.get('reference')} ({_image_id(snapshot.get('image_id'))})"
        if snapshot.get("digest"):
            line += f", pushed {snapshot['digest']}"
        print(line, file=sys.stderr)
    if result.get("written"):
        print(f"wrote {result['written']}", file=sys.stderr)


def print_outcome(name: str, outcome: CommitResult, result: dict[str, Any]) -> None:
    """A commit's human output: the diff on stdout, the rest on stderr."""
    rendered = outcome.prepared.rendered
    captured = outcome.prepared.captured
    for line in rendered.reported:
        print(f"note: {line}", file=sys.stderr)
    if rendered.diff:
        sys.stdout.write(rendered.diff)
        sys.stdout.flush()
    elif captured.held:
        print(f"Every change of {name} is left out: nothing to commit.", file=sys.stderr)
    else:
        print(f"No changes in {name} since its baseline.", file=sys.stderr)
    print_items(captured)
    ignored = captured.changes.files.ignored
    if ignored and rendered.diff:
        left = ", ".join(f"{count} {why}" for why, count in sorted(ignored.items()))
        print(f"left out: {left}", file=sys.stderr)
    if outcome.verify is not None:
        print(
            f"verified: the rebuilt image has the container's packages "
            f"({outcome.verify.seconds:.1f} s)",
            file=sys.stderr,
        )
    if outcome.snapshot is not None:
        snap = outcome.snapshot
        line = f"snapshot: {snap.reference} ({_image_id(snap.image_id)})"
        if snap.pushed_digest is not None:
            line += f", pushed {snap.pushed_digest}".rstrip()
        print(line, file=sys.stderr)
    if result.get("written"):
        print(f"wrote {result['written']}", file=sys.stderr)
        for key in ("backup", "devcontainer", "context_folder"):
            if result.get(key):
                print(f"  {key.replace('_', ' ')}: {result[key]}", file=sys.stderr)
    if outcome.written is not None and captured.held:
        print(
            f"left out, still uncommitted: {', '.join(captured.held)}",
            file=sys.stderr,
        )


#: How many changes the human output of diff and commit lists (``--json`` lists them all).
LISTED_ITEMS = 40


def print_items(captured: Captured) -> None:
    """The changes with their ids (for ``--exclude``), on stderr: ``+`` carried, ``-`` left
    out; then the ``--exclude`` ids that match no change."""
    held = set(captured.held)
    items = captured.items
    if items:
        print("changes (leave one out with --exclude ID):", file=sys.stderr)
        for item in items[:LISTED_ITEMS]:
            label = "" if item.kind in ("file", "delete") else f"  ({item.label})"
            line = f"  {'-' if item.id in held else '+'} {item.id}{label}"
            print("".join(c if c.isprintable() else "?" for c in line), file=sys.stderr)
        if len(items) > LISTED_ITEMS:
            more = len(items) - LISTED_ITEMS
            print(f"  ... and {more} more (--json lists them all)", file=sys.stderr)
    for unknown in captured.excluded_unknown:
        print(f"note: --exclude {unknown}: no such change now", file=sys.stderr)


class DiffApp(CommitApp):
    """Print a dev container's changes as a Dockerfile diff."""

    name = "jupyter-gpudev-diff"
    description = (
        "Print what changed inside a dev container (apt and Python packages, conda, files, "
        "environment variables) as a unified diff of its environment's Dockerfile. Nothing is "
        "written. Credentials and installs a Dockerfile cannot repeat are listed on stderr, "
        "and each change with its id: --exclude ID (repeatable) shows the diff without it."
    )
    usage = "jupyter gpudev diff NAME [--exclude ID ...] [--host H] [--json]"
    flags: dict[str, Any] = dict(GPUDevSubcommand.flags)

    aliases: dict[str, Any] = {**ContainerCommand.aliases, "exclude": "DiffApp.exclude"}

    def options(self) -> CommitOptions:
        # Nothing but the diff, whatever else c.CommitApp says; --exclude leaves changes out.
        return CommitOptions(exclude=tuple(self.exclude))


def _image_id(image_id: object) -> str:
    """A snapshot's image id as shown (a pod's has none here: its cluster built it)."""
    return str(image_id)[:19] if image_id else "built in the cluster"
