"""Build contexts are packed from the workspace without following a link (issue #30, item 8).

The environment's build context was checked (its real path under the Jupyter root directory)
when it was read; the workspace is its user's, who can swap a folder of the context for a link
while the context is packed. The race tests run each packer many times while a process swaps a
folder of the context for a link to a folder holding a "host secret" (standing for the
service's SSH keys) and back: no archive may ever hold the secret. The packers: the classic
Docker build (``stream_build`` with a context folder, through a fake engine on loopback that
keeps the context it receives), the BuildKit one (``trusted_folder_context``) and the verify
and pod builds' (``commit._verify_context``).
"""

from __future__ import annotations

import contextlib
import io
import json
import os
import subprocess
import sys
import tarfile
import threading
import time
import urllib.parse
from collections.abc import Callable, Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from types import SimpleNamespace
from typing import IO, Any, ClassVar, cast

import docker
import pytest
from docker.utils import build as docker_build

from jupyter_gpudev import safefs
from jupyter_gpudev.changes.commit import _verify_context
from jupyter_gpudev.engine import context as context_module
from jupyter_gpudev.engine import stream_build
from jupyter_gpudev.engine.buildkit import BuildTrust, trusted_folder_context
from jupyter_gpudev.engine.context import pack_context
from jupyter_gpudev.errors import Conflict, GPUDevError

SECRET = b"HOST-SECRET-KEY-0123456789"
#: Files in the swapped folder (and, with the secret as content, in the folder the link names).
NAMES = [f"key{i:02d}" for i in range(40)]
#: How many packs a race test tries, and for how long at most.
PACKS, SECONDS = 300, 10.0


# -- the race ---------------------------------------------------------------------------------


#: The swapping loop, run in a process of its own (no lock shared with the packer): argv is
#: the folder, the link's target and a spare folder. It swaps the folder and a link in the
#: spare folder atomically (``renameat2`` with ``RENAME_EXCHANGE``: the name is never
#: missing), and on SIGTERM prints how many swaps it made. Bounded by a count and a time,
#: whatever happens to the test.
SWAPPER = """
import ctypes, os, signal, sys, time
folder, outside, spare = (os.fsencode(a) for a in sys.argv[1:4])
link = os.path.join(spare, b"link")
os.symlink(outside, link)
libc = ctypes.CDLL(None, use_errno=True)
def exchange():
    if libc.renameat2(-100, folder, -100, link, 2) != 0:  # AT_FDCWD, RENAME_EXCHANGE
        raise OSError(ctypes.get_errno(), "renameat2")
stopped, swaps, deadline = [], 0, time.monotonic() + 30
signal.signal(signal.SIGTERM, lambda *_: stopped.append(1))
print("ready", flush=True)
while not stopped and swaps < 20_000_000 and time.monotonic() < deadline:
    exchange()  # the folder is a link to outside now
    exchange()  # and the folder again
    swaps += 1
print(swaps, flush=True)
"""


class Swapper:
    """Swaps ``folder`` for a link to ``outside`` and back in a tight loop, in a process of
    its own, while in the ``with`` block: what a user who owns the workspace can do. The
    folder and the link wait their turn in ``spare`` (outside the context)."""

    def __init__(self, folder: Path, outside: Path, spare: Path) -> None:
        self.argv = [sys.executable, "-c", SWAPPER, str(folder), str(outside), str(spare)]
        self.swaps = 0

    def __enter__(self) -> Swapper:
        self.process = subprocess.Popen(self.argv, stdout=subprocess.PIPE, text=True)
        assert self.process.stdout is not None
        assert self.process.stdout.readline().strip() == "ready"
        return self

    def __exit__(self, *_exc: object) -> None:
        self.process.terminate()
        out, _err = self.process.communicate(timeout=30)
        self.swaps = int(out.strip() or 0)


def workspace(tmp_path: Path) -> tuple[Path, Path]:
    """A build context (real path, as the reader hands it over) with a folder ``keys`` of
    harmless files, and a folder outside it holding files of the same names: the secret."""
    root = tmp_path.resolve()
    context = root / "ws" / ".devcontainer"
    (context / "keys").mkdir(parents=True)
    (context / "Dockerfile").write_text("FROM scratch\nCOPY . /ctx/\n")
    outside = root / "host-ssh"
    outside.mkdir()
    for name in NAMES:
        (context / "keys" / name).write_bytes(b"harmless\n")
        (outside / name).write_bytes(SECRET + b"\n")
    return context, outside


def secrets_in(archive: bytes) -> list[str]:
    """The members of the tar ``archive`` whose content holds the secret."""
    found = []
    with tarfile.open(fileobj=io.BytesIO(archive), mode="r") as tar:
        for member in tar:
            data = tar.extractfile(member) if member.isreg() else None
            if data is not None and SECRET in data.read():
                found.append(member.name)
    return found


def race(context: Path, outside: Path, pack: Callable[[], bytes]) -> tuple[int, int]:
    """Pack many times while ``keys`` is swapped; fails on the first archive with the secret.
    Returns (packed, refused): a pack may be refused (the context changed meanwhile)."""
    packed = refused = 0
    deadline = time.monotonic() + SECONDS
    with Swapper(context / "keys", outside, context.parent) as swapper:
        while packed + refused < PACKS and time.monotonic() < deadline:
            try:
                archive = pack()
            except (GPUDevError, OSError):
                refused += 1
                continue
            packed += 1
            leaked = secrets_in(archive)
            assert not leaked, (
                f"pack {packed + refused} put the host's secret into the build context as "
                f"{leaked[:3]}"
            )
    assert swapper.swaps > 0
    return packed, refused


# -- a fake engine that keeps the build contexts it receives -----------------------------------


class ContextEngine(BaseHTTPRequestHandler):
    """Answers the version probe and builds; keeps each build's context (the request body)."""

    contexts: ClassVar[list[bytes]] = []
    #: The Dockerfile each build named.
    dockerfiles: ClassVar[list[str]] = []

    def _answer(self, body: bytes) -> None:
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Api-Version", "1.41")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def do_GET(self) -> None:
        self._answer(json.dumps({"ApiVersion": "1.41", "Version": "20.10.24"}).encode())

    def do_POST(self) -> None:
        length = int(self.headers.get("Content-Length") or 0)
        body = b""
        if length:
            body = self.rfile.read(length)
        elif self.headers.get("Transfer-Encoding") == "chunked":
            while True:
                size = int(self.rfile.readline().strip() or b"0", 16)
                body += self.rfile.read(size + 2)[:size]
                if size == 0:
                    break
        if "/build" in self.path:
            self.contexts.append(body)
            query = urllib.parse.parse_qs(urllib.parse.urlsplit(self.path).query)
            self.dockerfiles.extend(query.get("dockerfile", []))
        self._answer(json.dumps({"aux": {"ID": "sha256:" + "0" * 64}}).encode() + b"\n")

    def log_message(self, *args: object) -> None:
        pass


@pytest.fixture
def engine() -> Iterator[docker.DockerClient]:
    ContextEngine.contexts, ContextEngine.dockerfiles = [], []
    server = ThreadingHTTPServer(("127.0.0.1", 0), ContextEngine)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    client = docker.DockerClient(
        base_url=f"tcp://127.0.0.1:{server.server_address[1]}", version="1.41"
    )
    try:
        yield client
    finally:
        client.close()
        server.shutdown()
        server.server_close()


def _read(handle: IO[bytes]) -> bytes:
    with contextlib.closing(handle):
        handle.seek(0)
        return handle.read()


# -- the exploit, on each packer ----------------------------------------------------------------


def test_a_docker_build_never_packs_a_host_file_through_a_swapped_folder(
    tmp_path: Path, engine: docker.DockerClient
) -> None:
    # Given a build context whose folder `keys` its user swaps for a link to a host folder
    context, outside = workspace(tmp_path)

    def pack() -> bytes:
        # When the environment's image is built from its context folder (the engine keeps
        # the context it is sent)
        stream_build(
            engine, "a test image", lambda _e: None, path=str(context), dockerfile="Dockerfile"
        )
        return ContextEngine.contexts.pop()

    # Then no context the engine received holds the secret
    packed, _refused = race(context, outside, pack)
    assert packed > 0


def test_a_buildkit_context_never_packs_a_host_file_through_a_swapped_folder(
    tmp_path: Path,
) -> None:
    # Given a build context whose folder `keys` its user swaps for a link to a host folder
    context, outside = workspace(tmp_path)
    trust = BuildTrust(b"PEM", ("PIP_CERT",))

    def pack() -> bytes:
        # When the context of a build trusting the CA bundle is packed
        return _read(trusted_folder_context(context, context / "Dockerfile", trust))

    # Then no archive holds the secret
    packed, _refused = race(context, outside, pack)
    assert packed > 0


def test_a_verify_or_pod_build_context_never_packs_a_host_file_through_a_swapped_folder(
    tmp_path: Path,
) -> None:
    # Given a build context whose folder `keys` its user swaps for a link to a host folder
    context, outside = workspace(tmp_path)
    prepared: Any = SimpleNamespace(
        context=context,
        rendered=SimpleNamespace(new_text="FROM scratch\nCOPY . /ctx/\n"),
        staging=None,
        folder=context / "gpudev-context" / "box",
    )

    def pack() -> bytes:
        # When the context of a verify build (or a pod's snapshot build) is packed
        with _verify_context(prepared) as handle:
            return bytes(handle.read())

    # Then no archive holds the secret
    packed, _refused = race(context, outside, pack)
    assert packed > 0


# -- what a packed context holds ----------------------------------------------------------------


def packed(
    context: Path, dockerfile: str = "Dockerfile", **kwargs: Any
) -> dict[str, tarfile.TarInfo]:
    """The members of ``context`` packed (``pack_context``), by name, with their data read into
    ``data`` on each."""
    found = {}
    with (
        pack_context(context, dockerfile, **kwargs) as archive,
        tarfile.open(fileobj=archive) as tar,
    ):
        for member in tar:
            data = tar.extractfile(member) if member.isreg() else None
            member.pax_headers = {"data": data.read().decode() if data is not None else ""}
            found[member.name] = member
    return found


def test_a_link_inside_the_context_is_stored_as_a_link(tmp_path: Path) -> None:
    # Given a context with a file, a link to it and a link to a folder of it
    context = tmp_path.resolve()
    (context / "lib").mkdir()
    (context / "lib" / "conf").write_text("setting\n")
    (context / "near").symlink_to("lib/conf")
    (context / "libs").symlink_to("lib")
    # When it is packed
    members = packed(context)
    # Then the links are links, with their targets as written, and the file is a file
    assert members["near"].issym()
    assert members["near"].linkname == "lib/conf"
    assert members["libs"].issym()
    assert members["libs"].linkname == "lib"
    assert members["lib"].isdir()
    assert members["lib/conf"].isreg()
    assert members["lib/conf"].pax_headers["data"] == "setting\n"
    assert not any(name.startswith("libs/") for name in members)


def test_a_link_out_of_the_context_is_stored_as_a_link_and_never_followed(tmp_path: Path) -> None:
    # Given a host folder with a secret, and a context with links to it and into it
    context, outside = workspace(tmp_path)
    (context / "absolute").symlink_to(outside)
    (context / "climbing").symlink_to("../../host-ssh/key00")
    (context / "keys" / "planted").symlink_to(outside / "key01")
    # When it is packed
    members = packed(context)
    # Then each link is stored as it is written, and no member holds the secret
    assert members["absolute"].issym()
    assert members["absolute"].linkname == str(outside)
    assert members["climbing"].linkname == "../../host-ssh/key00"
    assert members["keys/planted"].linkname == str(outside / "key01")
    assert not [m for m in members.values() if SECRET.decode() in m.pax_headers["data"]]
    assert not any(name.startswith("absolute/") for name in members)


def unblocked(pack: Callable[[], Any], fifo: Path) -> Any:
    """What ``pack()`` returns (or raises), run in a thread: a packer that opened ``fifo``
    would wait for a writer forever, so after 10 s it is let go and the test fails."""
    done: list[Any] = []
    failed: list[BaseException] = []

    def run() -> None:
        try:
            done.append(pack())
        except BaseException as exc:  # handed to the test's thread
            failed.append(exc)

    worker = threading.Thread(target=run, daemon=True)
    worker.start()
    worker.join(timeout=10)
    if worker.is_alive():
        os.close(os.open(fifo, os.O_WRONLY | os.O_NONBLOCK))
        worker.join(timeout=10)
        pytest.fail(f"the packer opened the FIFO {fifo} and waited on it")
    if failed:
        raise failed[0]
    return done[0]


def test_a_fifo_in_the_context_does_not_hang_the_packer_and_is_left_out(tmp_path: Path) -> None:
    # Given a context with a FIFO (nothing ever writes to it)
    context = tmp_path.resolve()
    (context / "Dockerfile").write_text("FROM scratch\n")
    os.mkfifo(context / "pipe")
    # When it is packed
    members = unblocked(lambda: packed(context), context / "pipe")
    # Then the FIFO is left out and the rest is there
    assert sorted(members) == ["Dockerfile"]


def test_dockerignore_applies_as_it_does_in_docker_py(tmp_path: Path) -> None:
    # Given a context with a .dockerignore: globs, a folder, an exception inside it, a comment,
    # and the Dockerfile itself listed
    context = tmp_path.resolve()
    ignore = "# build outputs\n*.log\nbuild\n!build/keep.txt\nDockerfile\nsecret*\n\n"
    files = {
        ".dockerignore": ignore,
        "Dockerfile": "FROM scratch\n",
        "app.py": "print()\n",
        "debug.log": "noise\n",
        "secret.env": "TOKEN=x\n",
        "build/out.bin": "binary\n",
        "build/keep.txt": "kept\n",
        "src/main.py": "main\n",
        "src/trace.log": "deeper\n",
    }
    for name, text in files.items():
        (context / name).parent.mkdir(parents=True, exist_ok=True)
        (context / name).write_text(text)
    # When it is packed
    members = packed(context)
    # Then it holds what docker-py's own packing holds (what `docker build` sent until now)
    patterns = [line for line in ignore.splitlines() if line and not line.startswith("#")]
    before = cast(
        "IO[bytes]", docker_build.tar(context, exclude=patterns, dockerfile=("Dockerfile", None))
    )
    with before, tarfile.open(fileobj=before) as tar:
        expected = sorted(tar.getnames())
    assert sorted(members) == expected
    assert "Dockerfile" in members
    assert ".dockerignore" in members
    assert "build/keep.txt" in members
    assert "src/trace.log" in members
    assert not {"debug.log", "secret.env", "build/out.bin"} & set(members)


def test_an_added_dockerfile_comes_with_a_dockerignore_naming_it(tmp_path: Path) -> None:
    # Given a context with a .dockerignore and a file of the Dockerfile's name
    context = tmp_path.resolve()
    (context / ".dockerignore").write_text("*.log\n")
    (context / "patched.Dockerfile").write_text("FROM old\n")
    # When it is packed with a patched Dockerfile added under that name
    members = packed(context, "patched.Dockerfile", added="FROM new\n")
    # Then the added one replaces it, and the .dockerignore names it (the engine drops it from
    # what COPY sees), as docker-py does
    assert members["patched.Dockerfile"].pax_headers["data"] == "FROM new\n"
    assert members[".dockerignore"].pax_headers["data"] == "*.log\npatched.Dockerfile"
    assert sorted(members) == [".dockerignore", "patched.Dockerfile"]


def test_a_dockerfile_outside_the_context_is_read_without_following_a_link(
    tmp_path: Path, engine: docker.DockerClient
) -> None:
    # Given a Dockerfile next to the context (in the workspace, under the root)
    root = tmp_path.resolve()
    (root / "ctx").mkdir()
    (root / "ctx" / "app.py").write_text("print()\n")
    (root / "docker").mkdir()
    (root / "docker" / "Dockerfile").write_text("FROM scratch\nCOPY app.py /\n")
    # When the image is built from the context with that Dockerfile
    stream_build(
        engine,
        "a test image",
        lambda _e: None,
        path=str(root / "ctx"),
        dockerfile=str(root / "docker" / "Dockerfile"),
    )
    # Then the engine got it in the context, under the name the build asks for
    (name,) = ContextEngine.dockerfiles
    with tarfile.open(fileobj=io.BytesIO(ContextEngine.contexts[0])) as tar:
        added = tar.extractfile(name)
        assert added is not None
        assert added.read() == b"FROM scratch\nCOPY app.py /\n"
        assert sorted(tar.getnames()) == sorted([".dockerignore", name, "app.py"])
    # When its folder is a link to a host folder holding a file of that name
    secret = root / "host" / "Dockerfile"
    secret.parent.mkdir()
    secret.write_bytes(SECRET)
    (root / "docker" / "Dockerfile").unlink()
    (root / "docker").rmdir()
    (root / "docker").symlink_to(root / "host")
    # Then the build is refused, naming the link, and nothing reached the engine
    with pytest.raises(safefs.LinkRefused, match=f"{root}/docker is a symbolic link"):
        stream_build(
            engine,
            "a test image",
            lambda _e: None,
            path=str(root / "ctx"),
            dockerfile=str(root / "docker" / "Dockerfile"),
        )
    assert len(ContextEngine.contexts) == 1


def test_a_context_whose_path_became_a_link_or_whose_dockerignore_is_one_is_refused(
    tmp_path: Path,
) -> None:
    # Given a context whose folder became a link to a host folder since it was checked
    context, outside = workspace(tmp_path)
    moved = context.with_name("moved")
    context.rename(moved)
    context.symlink_to(outside)
    # Then packing it is refused, naming the link
    with pytest.raises(safefs.LinkRefused, match=f"{context} is a symbolic link"):
        pack_context(context)
    # Given a context whose .dockerignore is a link to a host file
    (moved / ".dockerignore").symlink_to(outside / "key00")
    # Then packing it is refused too: the host file is never read as patterns
    with pytest.raises(safefs.LinkRefused, match=r"\.dockerignore is a symbolic link"):
        pack_context(moved)


@pytest.mark.parametrize(
    ("make", "was"),
    [
        (lambda at, outside: at.symlink_to(outside), "a folder"),
        (lambda at, outside: at.symlink_to(outside / "key00"), "a file"),
        (lambda at, _outside: os.mkfifo(at), "a file"),
    ],
    ids=["folder-to-link", "file-to-link", "file-to-fifo"],
)
def test_something_that_changes_what_it_is_while_packed_fails_the_build(
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    make: Callable[[Path, Path], None],
    was: str,
) -> None:
    # Given a context where the packer saw a folder (or a file) at `swapped`, and there is now
    # a link to a host folder (or file), or a FIFO
    context, outside = workspace(tmp_path)
    seen = (context / "keys").stat() if was == "a folder" else (context / "Dockerfile").stat()
    make(context / "swapped", outside)
    real_lstat = safefs.Folder.lstat

    def stale(folder: safefs.Folder, name: str) -> os.stat_result | None:
        return seen if name == "swapped" else real_lstat(folder, name)

    monkeypatch.setattr(safefs.Folder, "lstat", stale)
    # When it is packed, then the build fails with a typed error naming it, never having read
    # through the link, nor waited on the FIFO
    with pytest.raises(Conflict, match=rf"/swapped changed while .* packed \(it was {was}\)"):
        unblocked(lambda: pack_context(context), context / "swapped")


def test_a_file_that_shrinks_while_packed_fails_the_build(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Given a context with a file that is cut short after its size was read
    context = tmp_path.resolve()
    (context / "big").write_bytes(b"x" * 100_000)
    real_info = context_module._info

    def shrinking(path: str, st: os.stat_result, link: str | None = None) -> tarfile.TarInfo:
        info = real_info(path, st, link)
        if path == "big":
            os.truncate(context / "big", 10)
        return info

    monkeypatch.setattr(context_module, "_info", shrinking)
    # When it is packed, then the build fails naming it
    with pytest.raises(Conflict, match="big changed while the build context was packed"):
        pack_context(context)
