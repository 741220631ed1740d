"""A pod's files and packages read through exec (``changes/podfiles.py``), at the exec seam:
what the pod answers is hostile input (issue #20)."""

from __future__ import annotations

import io
import tarfile
from dataclasses import dataclass, field
from typing import Any

import pytest

from jupyter_gpudev import safefs
from jupyter_gpudev.changes import packages, probe
from jupyter_gpudev.changes.export import ArchiveSource, _Exporter
from jupyter_gpudev.changes.podfiles import (
    POD_FILE_LIMIT,
    PodArchives,
    PodReader,
    pod_key,
    probe_pod,
)
from jupyter_gpudev.engine.cluster import ExecResult
from jupyter_gpudev.errors import EngineError


@dataclass
class ExecCluster:
    """Answers each exec with the next scripted result, recording what was run."""

    answers: list[ExecResult | Exception]
    runs: list[tuple[str, tuple[str, ...], int]] = field(default_factory=list)

    def exec(self, pod: str, argv: Any, *, timeout: float, limit: int, **_: Any) -> ExecResult:
        assert 0 < timeout <= 300
        self.runs.append((pod, tuple(argv), limit))
        answer = self.answers.pop(0)
        if isinstance(answer, Exception):
            raise answer
        return answer


def tar_of(*members: tuple[str, bytes | str | None]) -> bytes:
    """An archive: ``bytes`` a file, ``None`` a folder, ``str`` a symbolic link's target."""
    out = io.BytesIO()
    with tarfile.open(fileobj=out, mode="w") as archive:
        for name, content in members:
            info = tarfile.TarInfo(name)
            if content is None:
                info.type = tarfile.DIRTYPE
                archive.addfile(info)
            elif isinstance(content, str):
                info.type, info.linkname = tarfile.SYMTYPE, content
                archive.addfile(info)
            else:
                info.size = len(content)
                archive.addfile(info, io.BytesIO(content))
    return out.getvalue()


def archives(*answers: ExecResult | Exception) -> tuple[PodArchives, ExecCluster]:
    cluster = ExecCluster(list(answers))
    return PodArchives(cluster, "gpudev-box", "box"), cluster  # type: ignore[arg-type]


def test_a_path_is_archived_by_tar_in_its_folder_with_no_option_from_its_name() -> None:
    source, cluster = archives(ExecResult(0, tar_of(("-rf", b"x")), b""))
    assert isinstance(source, ArchiveSource)
    got = source.get("/opt/tools/-rf")
    assert got is not None
    assert b"".join(got[0]) == tar_of(("-rf", b"x"))
    # the name comes after "--": a file named like an option is a file
    assert cluster.runs == [
        ("gpudev-box", ("tar", "-C", "/opt/tools", "-cf", "-", "--", "-rf"), POD_FILE_LIMIT + 65536)
    ]


@pytest.mark.parametrize("path", ["relative", "/", "/opt/..", ""])
def test_odd_paths_are_not_asked_for(path: str) -> None:
    source, cluster = archives()
    assert source.get(path) is None
    assert cluster.runs == []


def test_a_missing_path_is_none_and_a_failing_tar_says_why() -> None:
    missing = ExecResult(2, b"\0" * 1024, b"tar: gone: Cannot stat: No such file or directory\n")
    source, _ = archives(missing)
    assert source.get("/opt/gone") is None
    # (the API server says a program is missing as the exec's failure to run)
    missing_tar = EngineError(
        'Kubernetes cluster c: tar in gpudev-box did not run (exec: "tar": executable file '
        "not found in $PATH)"
    )
    source, _ = archives(missing_tar)
    with pytest.raises(EngineError, match="needs tar in its image"):
        source.get("/opt/x")
    # a folder with one unreadable file: the rest of its archive is taken
    partial = tar_of(("tools", None), ("tools/a", b"a"))
    source, _ = archives(ExecResult(2, partial, b"tar: tools/b: Cannot open: Permission denied"))
    got = source.get("/opt/tools")
    assert got is not None
    assert b"".join(got[0]) == partial
    source, _ = archives(ExecResult(2, b"", b"tar: x: Cannot open: Permission denied\x1b[2J\n"))
    with pytest.raises(EngineError) as caught:
        source.get("/opt/x")
    assert "Permission denied" in caught.value.message
    assert "\x1b" not in caught.value.message  # the pod's words are cleaned


def test_the_reader_takes_one_regular_file_and_nothing_else() -> None:
    read = PodReader(archives(ExecResult(0, tar_of(("status", b"Package: x\n")), b""))[0])
    assert read("/var/lib/dpkg/status", 100) == b"Package: x\n"
    # a link where a package file was, two members, an archive cut short, over the limit
    for data, words in (
        (tar_of(("status", "/etc/shadow")), "not a regular file"),
        (tar_of(("status", b"a"), ("status", b"b")), "not a single file"),
        (tar_of(("status", b"x" * 90))[:600], "cannot be read"),
        (tar_of(("status", b"x" * 200)), "over the limit"),
    ):
        read = PodReader(archives(ExecResult(0, data, b""))[0])
        with pytest.raises(packages.Unreadable, match=words):
            read("/var/lib/dpkg/status", 100)
    missing = ExecResult(2, b"", b"tar: status: Cannot stat: No such file or directory")
    assert PodReader(archives(missing)[0])("/var/lib/dpkg/status", 100) is None


def test_a_commit_copies_a_pods_files_as_hostile_archives(tmp_path: Any) -> None:
    # Given a pod whose tar answers for an added folder with a member escaping it besides
    # the two files asked for
    hostile = tar_of(
        ("tools", None),
        ("tools/a.toml", b"a = 1\n"),
        ("tools/b.toml", "/etc/shadow"),
        ("../../etc/x", b"evil"),
    )
    source, cluster = archives(ExecResult(0, hostile, b""))
    stage = tmp_path / "stage"
    stage.mkdir()
    diff = [
        {"Path": p, "Kind": 1} for p in ("/opt/tools", "/opt/tools/a.toml", "/opt/tools/b.toml")
    ]
    with safefs.Folder.open(stage) as folder:
        exporter = _Exporter(source, folder, POD_FILE_LIMIT, digests=True)
        try:
            exporter.run(["/opt/tools/a.toml", "/opt/tools/b.toml"], diff)
        finally:
            exporter.close()
    # Then the folder's one archive was asked for, and only the paths asked for are taken:
    # the file, and the link leaving the tree reported for an ``ln`` line, not made
    assert [run[1][-1] for run in cluster.runs] == ["tools"]
    assert (stage / "files/opt/tools/a.toml").read_text() == "a = 1\n"
    assert sorted(str(p.relative_to(stage)) for p in stage.rglob("*") if not p.is_dir()) == [
        "files/opt/tools/a.toml"
    ]
    assert exporter.result.links == {"/opt/tools/b.toml": "/etc/shadow"}
    assert exporter.result.digests["/opt/tools/a.toml"].startswith("sha256:")


def test_the_probe_runs_with_only_its_own_variables() -> None:
    output = "@@gpudev dpkg\nbash\t5.2\tii \n@@gpudev end\n"
    cluster = ExecCluster([ExecResult(0, output.encode(), b"")])
    result = probe_pod(cluster, "gpudev-box", "box")  # type: ignore[arg-type]
    assert result.state.dpkg == {"bash": "5.2"}
    argv = cluster.runs[0][1]
    assert argv[:2] == ("/usr/bin/env", "-i")  # none of the pod's LD_* or PYTHON*
    assert f"PATH={probe.PROBE_PATH}" in argv
    assert argv[-3:] == ("/bin/sh", "-c", probe.PROBE_SCRIPT)
    for answer, words in (
        (ExecResult(3, b"", b""), "exited with 3"),
        (ExecResult(None, b"x", b"", cut=True), "printed over"),
    ):
        with pytest.raises(EngineError, match=words):
            probe_pod(ExecCluster([answer]), "gpudev-box", "box")  # type: ignore[arg-type]


def test_a_pods_baselines_are_kept_under_its_uid() -> None:
    assert pod_key("3F72B7AD-68ee-48c6-8e3a-2e30f1bae9f7") == "3f72b7ad68ee48c68e3a2e30f1bae9f7"
    for odd in ("../../x", "3f72b7ad-68ee-48c6-8e3a", "z" * 32, ""):
        with pytest.raises(EngineError):
            pod_key(odd)
