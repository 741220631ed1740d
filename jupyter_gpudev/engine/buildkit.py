"""Builds that trust the host's CA bundle, without baking it into any image.

Behind a TLS-intercepting proxy, ``pip install`` in a ``RUN`` step fails unless the build
trusts the proxy's authority, and a dev container that needed ``c.MountPolicy.mount_ca_bundle``
needs it in its builds just as much. Copying the bundle into the build would leave it in a
layer of the user's image (a later ``rm`` does not remove it from the layer below), and the
classic builder cannot mount a file into a ``RUN``. So a trusted build goes through the
engine's BuildKit (Engine 18.09 and later, 20.10 included, without any daemon setting):

- the Dockerfile is built from a copy (``trusting_dockerfile``, never written anywhere) whose
  ``RUN`` steps mount the bundle as a *secret*, which BuildKit keeps out of every layer, and
  whose stages declare build arguments (``ARG``, not ``ENV``: they do not reach the image's
  configuration) pointing pip, requests, OpenSSL, curl, conda, Node.js and git at it;
- the secret's bytes come from this process over a BuildKit *session*: the engine's
  ``POST /session`` upgraded to HTTP/2, on which this process answers the engine's gRPC calls
  (``SecretSession``; docker-py has no sessions). Only the one secret is served; any other
  call is answered "unimplemented".

The image's history names the mount and the variables' path (``/run/gpudev-build-ca.pem``),
never the certificates.
"""

from __future__ import annotations

import base64
import contextlib
import io
import json
import os
import re
import secrets
import struct
import tarfile
import tempfile
import threading
import urllib.parse
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any

import docker
import docker.errors
import h2.config
import h2.connection
import h2.events
import h2.exceptions

from .. import safefs
from ..errors import EngineError, ImageError
from .context import pack_context, read_checked
from .deadline import BuildDeadline

#: Progress events: ``{"stage": str, "message": str}``; the CLI prints them, the API streams them.
Progress = Callable[[dict[str, Any]], None]

#: The secret's id and where a ``RUN`` step finds it (a file in ``/run``, a tmpfs-like folder
#: every image has; BuildKit removes what it mounts there).
SECRET_ID = "gpudev-ca"  # noqa: S105 - a name, not a password
CA_TARGET = "/run/gpudev-build-ca.pem"
#: The name of the Dockerfile copy in the build context.
TRUST_DOCKERFILE = ".gpudev-trust.Dockerfile"
#: The most a CA bundle may weigh.
BUNDLE_LIMIT = 8 << 20

_SESSION_METHODS = (
    "/grpc.health.v1.Health/Check",
    "/moby.buildkit.secrets.v1.Secrets/GetSecret",
)
_GRPC_OK, _GRPC_NOT_FOUND, _GRPC_UNIMPLEMENTED = "0", "5", "12"


@dataclass(frozen=True)
class BuildTrust:
    """A CA bundle (PEM bytes) that ``RUN`` steps trust, and the variables pointing at it."""

    pem: bytes
    variables: tuple[str, ...]


# -- the Dockerfile copy --------------------------------------------------------------------

_DIRECTIVE_RE = re.compile(r"^#\s*([a-zA-Z][a-zA-Z0-9]*)\s*=\s*(.*?)\s*$")


def trusting_dockerfile(text: str, variables: tuple[str, ...]) -> str:
    """``text`` with every ``RUN`` step mounting the bundle and every stage declaring
    ``variables`` (as build arguments) set to its path. The parser directives stay, but for
    ``syntax``: it names a frontend image to pull from a registry, which a classic build never
    needed (the engine's own frontend reads the Dockerfile)."""
    lines = text.splitlines(keepends=True)
    escape = "\\"
    out: list[str] = []
    index = 0
    # Parser directives: comment lines at the very top, before any other line.
    while index < len(lines):
        match = _DIRECTIVE_RE.match(lines[index].strip())
        if match is None:
            break
        key, value = match[1].lower(), match[2]
        if key == "escape" and value in ("\\", "`"):
            escape = value
        if key != "syntax":
            out.append(lines[index])
        index += 1
    mount = f" --mount=type=secret,id={SECRET_ID},target={CA_TARGET}"
    args = "".join(f"ARG {name}={CA_TARGET}\n" for name in variables)
    continuing, instruction = False, ""
    for line in lines[index:]:
        stripped = line.strip()
        if not continuing:
            if not stripped or stripped.startswith("#"):
                out.append(line)
                continue
            lead = line[: len(line) - len(line.lstrip())]
            word = stripped.split(None, 1)[0]
            instruction = word.upper()
            if instruction == "RUN":
                out.append(f"{lead}{word}{mount}{line.lstrip()[len(word) :]}")
                continuing = line.rstrip("\r\n").rstrip().endswith(escape)
                continue
        elif not stripped or stripped.startswith("#"):
            out.append(line)  # comments and blank lines inside a continued instruction
            continue
        out.append(line)
        body = line.rstrip("\r\n").rstrip()
        continuing = body.endswith(escape)
        if not continuing and instruction == "FROM":
            if not line.endswith(("\n", "\r")):
                out.append("\n")
            out.append(args)
            instruction = ""
    return "".join(out)


# -- the build context ----------------------------------------------------------------------


def trusted_folder_context(folder: Path, dockerfile: Path, trust: BuildTrust) -> IO[bytes]:
    """The tar of a build context folder (``context.pack_context``: its ``.dockerignore``
    applied, no link followed out of it) with the trusting copy of ``dockerfile`` (in the
    folder or not, read without following a link either) added."""
    text = read_checked(dockerfile, BUNDLE_LIMIT).decode("utf-8", "replace")
    inside = safefs.relative_inside(Path(os.path.normpath(dockerfile)), folder)
    with pack_context(folder, inside or "Dockerfile") as archive:
        return _repacked(archive, text, trust)


def trusted_tar_context(archive: IO[bytes] | None, dockerfile: str, trust: BuildTrust) -> IO[bytes]:
    """A copy of the context tar ``archive`` with the trusting copy of its ``dockerfile``
    added; ``archive`` ``None`` and ``dockerfile`` the text: a context of the Dockerfile
    alone."""
    if archive is None:
        return _repacked(None, dockerfile, trust)
    return _repacked(archive, _member_text(archive, dockerfile), trust)


def _repacked(archive: IO[bytes] | None, text: str, trust: BuildTrust) -> IO[bytes]:
    """A new tar: the trusting copy of ``text`` first, then the members of ``archive``. The
    engine tells a tar context from a bare Dockerfile by reading its first header alone, so
    that one is a plain one, and no member needs an extended (PAX) header. ``.dockerignore``
    was applied when ``archive`` was made and is left out: BuildKit would apply it again, to
    what was added after (a verify build's staged files), which the classic builder does not."""
    copy = tempfile.TemporaryFile()  # noqa: SIM115 - the caller closes it
    with tarfile.open(fileobj=copy, mode="w", format=tarfile.GNU_FORMAT) as out:
        data = trusting_dockerfile(text, trust.variables).encode()
        info = tarfile.TarInfo(TRUST_DOCKERFILE)
        info.size, info.mode = len(data), 0o644
        out.addfile(info, io.BytesIO(data))
        if archive is not None:
            archive.seek(0)
            with tarfile.open(fileobj=archive, mode="r") as source:
                for member in source:
                    if os.path.normpath(member.name) in (TRUST_DOCKERFILE, ".dockerignore"):
                        continue
                    member.mtime = int(member.mtime)
                    member.pax_headers = {}
                    out.addfile(member, source.extractfile(member) if member.isreg() else None)
    copy.seek(0)
    return copy


def _member_text(archive: IO[bytes], name: str) -> str:
    archive.seek(0)
    with tarfile.open(fileobj=archive, mode="r") as tar:
        for member in tar:
            if os.path.normpath(member.name) == os.path.normpath(name) and member.isreg():
                if member.size > BUNDLE_LIMIT:
                    break
                data = tar.extractfile(member)
                if data is not None:
                    return data.read().decode("utf-8", "replace")
    raise ImageError(f"The build context has no Dockerfile {name!r}")


# -- protobuf, as little as the session and the build's progress need -----------------------


def _varint(value: int) -> bytes:
    out = bytearray()
    while True:
        low, value = value & 0x7F, value >> 7
        out.append(low | (0x80 if value else 0))
        if not value:
            return bytes(out)


def pb_bytes(number: int, data: bytes) -> bytes:
    """One length-delimited field."""
    return _varint((number << 3) | 2) + _varint(len(data)) + data


def pb_fields(data: bytes) -> dict[int, list[int | bytes]]:
    """The fields of a protobuf message (varints and length-delimited ones; fixed-width ones
    skipped); ``ValueError`` for a malformed one."""
    fields: dict[int, list[int | bytes]] = {}
    index = 0

    def varint() -> int:
        nonlocal index
        value = shift = 0
        while True:
            if index >= len(data) or shift > 63:
                raise ValueError("truncated varint")
            byte = data[index]
            index += 1
            value |= (byte & 0x7F) << shift
            shift += 7
            if not byte & 0x80:
                return value

    while index < len(data):
        key = varint()
        number, kind = key >> 3, key & 7
        if kind == 0:
            fields.setdefault(number, []).append(varint())
        elif kind == 2:
            size = varint()
            if index + size > len(data):
                raise ValueError("truncated field")
            fields.setdefault(number, []).append(data[index : index + size])
            index += size
        elif kind in (1, 5):
            index += 8 if kind == 1 else 4
        else:
            raise ValueError(f"wire type {kind}")
    return fields


def _first_bytes(fields: Mapping[int, list[int | bytes]], number: int) -> bytes:
    value = fields.get(number, [b""])[0]
    return value if isinstance(value, bytes) else b""


# -- the session ----------------------------------------------------------------------------


@dataclass
class _Stream:
    path: str = ""
    body: bytearray = field(default_factory=bytearray)
    reply: bytes = b""
    status: str = _GRPC_OK


class SessionServer:
    """The gRPC side of a BuildKit session on one HTTP/2 connection: answers the engine's
    health checks and its requests for the secrets given, nothing else. ``feed`` takes bytes
    from the engine and returns the bytes to send back (no I/O here: tested without one)."""

    def __init__(self, secrets_by_id: Mapping[str, bytes]) -> None:
        self.secrets = dict(secrets_by_id)
        self.asked: list[str] = []
        config = h2.config.H2Configuration(client_side=False, header_encoding="utf-8")
        self.conn = h2.connection.H2Connection(config=config)
        self.streams: dict[int, _Stream] = {}
        self.sending: dict[int, _Stream] = {}

    def start(self) -> bytes:
        self.conn.initiate_connection()
        return self.conn.data_to_send()

    def feed(self, data: bytes) -> bytes:
        for event in self.conn.receive_data(data):
            if isinstance(event, h2.events.RequestReceived):
                headers: dict[Any, Any] = dict(event.headers or [])
                self.streams[event.stream_id] = _Stream(path=str(headers.get(":path", "")))
            elif isinstance(event, h2.events.DataReceived):
                stream = self.streams.get(event.stream_id)
                if stream is not None and len(stream.body) < 1 << 16:
                    stream.body += event.data
                self.conn.acknowledge_received_data(event.flow_controlled_length, event.stream_id)
            elif isinstance(event, h2.events.StreamEnded):
                stream = self.streams.pop(event.stream_id, None)
                if stream is not None:
                    self._answer(event.stream_id, stream)
            elif isinstance(event, h2.events.StreamReset):
                self.streams.pop(event.stream_id, None)
                self.sending.pop(event.stream_id, None)
        self._flush()
        return self.conn.data_to_send()

    def _answer(self, stream_id: int, stream: _Stream) -> None:
        message = bytes(stream.body[5:])  # the gRPC frame: a flag byte, a length, a message
        if stream.path == _SESSION_METHODS[0]:
            stream.reply = b"\x08\x01"  # HealthCheckResponse: status SERVING
        elif stream.path == _SESSION_METHODS[1]:
            try:
                wanted = _first_bytes(pb_fields(message), 1).decode("utf-8", "replace")
            except ValueError:
                wanted = ""
            self.asked.append(wanted)
            if wanted in self.secrets:
                stream.reply = pb_bytes(1, self.secrets[wanted])
            else:
                stream.status = _GRPC_NOT_FOUND
        else:
            stream.status = _GRPC_UNIMPLEMENTED
        if stream.status != _GRPC_OK:
            self.conn.send_headers(
                stream_id,
                [
                    (":status", "200"),
                    ("content-type", "application/grpc"),
                    ("grpc-status", stream.status),
                ],
                end_stream=True,
            )
            return
        headers = [(":status", "200"), ("content-type", "application/grpc")]
        self.conn.send_headers(stream_id, headers)
        stream.reply = b"\x00" + struct.pack(">I", len(stream.reply)) + stream.reply
        self.sending[stream_id] = stream

    def _flush(self) -> None:
        """Send what each stream's flow-control window allows; trailers once all is sent."""
        for stream_id, stream in list(self.sending.items()):
            while stream.reply:
                size = min(
                    len(stream.reply),
                    self.conn.max_outbound_frame_size,
                    self.conn.local_flow_control_window(stream_id),
                )
                if size <= 0:
                    break
                self.conn.send_data(stream_id, stream.reply[:size])
                stream.reply = stream.reply[size:]
            if not stream.reply:
                self.conn.send_headers(stream_id, [("grpc-status", _GRPC_OK)], end_stream=True)
                del self.sending[stream_id]


class SecretSession:
    """A BuildKit session with the engine of ``api`` (any transport docker-py or gpudev's SSH
    adapter connects with), serving ``secrets_by_id`` until closed."""

    def __init__(self, api: Any, secrets_by_id: Mapping[str, bytes]) -> None:
        self.id = secrets.token_hex(16)
        self.server = SessionServer(secrets_by_id)
        url = api._url("/session")
        connection = api.get_adapter(url).get_connection(url)._new_conn()
        connection.connect()
        self.sock: Any = connection.sock
        self.closed = threading.Event()
        path = urllib.parse.urlsplit(url).path
        try:
            self._upgrade(path)
        except BaseException:
            self._close_socket()
            raise
        self.thread = threading.Thread(target=self._serve, name="gpudev-build-session")
        self.thread.daemon = True
        self.thread.start()

    def _upgrade(self, path: str) -> None:
        """``POST /session``, upgraded to HTTP/2 (``101``), then this side's settings."""
        request = [
            f"POST {path} HTTP/1.1",
            "Host: docker",
            "Upgrade: h2c",
            "Connection: Upgrade",
            f"X-Docker-Expose-Session-Uuid: {self.id}",
            "X-Docker-Expose-Session-Name: gpudev",
            f"X-Docker-Expose-Session-Sharedkey: {self.id}",
            *(f"X-Docker-Expose-Session-Grpc-Method: {m}" for m in _SESSION_METHODS),
        ]
        self.sock.settimeout(30)
        self.sock.sendall(("\r\n".join(request) + "\r\n\r\n").encode())
        first = self._read_head().split(b"\r\n", 1)[0]
        if first.split(b" ")[1:2] != [b"101"]:
            answer = first[:80].decode("latin-1")
            raise EngineError(
                f"The engine did not open a BuildKit session (it answered {answer!r}): "
                "builds that trust the CA bundle need BuildKit (Engine 18.09 or later)"
            )
        self.sock.settimeout(1.0)
        self.sock.sendall(self.server.start())

    def _read_head(self) -> bytes:
        """The response's status line and headers, read a byte at a time: nothing after them
        (the engine's first HTTP/2 bytes) may be taken into a buffer."""
        head = b""
        while not head.endswith(b"\r\n\r\n"):
            byte = self.sock.recv(1)
            if not byte or len(head) > 16384:
                raise EngineError("The engine closed the BuildKit session while opening it")
            head += byte
        return head

    def _serve(self) -> None:
        while not self.closed.is_set():
            try:
                data = self.sock.recv(65536)
            except TimeoutError:
                continue
            except OSError:
                return
            if not data:
                return
            try:
                reply = self.server.feed(data)
                if reply:
                    self.sock.sendall(reply)
            except (h2.exceptions.ProtocolError, OSError):
                return

    def _close_socket(self) -> None:
        with contextlib.suppress(OSError):
            self.sock.close()

    def close(self) -> None:
        self.closed.set()
        self._close_socket()
        if hasattr(self, "thread"):
            self.thread.join(timeout=5)


# -- the build ------------------------------------------------------------------------------


class _Progress:
    """BuildKit's progress (``moby.buildkit.trace``: protobuf ``StatusResponse`` messages) as
    the same events and log tail the classic build gives."""

    def __init__(self, say: Progress) -> None:
        self.say = say
        self.tail: list[str] = []
        self.named: set[bytes] = set()
        self.partial: dict[bytes, str] = {}

    def line(self, text: str) -> None:
        text = text.rstrip()
        if text:
            self.tail = [*self.tail[-29:], text]
            self.say({"stage": "build", "message": text})

    def trace(self, encoded: str) -> None:
        try:
            status = pb_fields(base64.b64decode(encoded, validate=True))
            for raw in status.get(1, []):  # vertexes: digest 1, name 3, started 5, error 7
                vertex = pb_fields(raw) if isinstance(raw, bytes) else {}
                digest = _first_bytes(vertex, 1)
                name = _first_bytes(vertex, 3).decode("utf-8", "replace")
                if name and 5 in vertex and digest not in self.named:
                    self.named.add(digest)
                    self.line(name)
                error = _first_bytes(vertex, 7).decode("utf-8", "replace")
                if error:
                    self.line(f"{name}: {error}" if name else error)
            for raw in status.get(3, []):  # logs: vertex 1, message 4
                log = pb_fields(raw) if isinstance(raw, bytes) else {}
                digest = _first_bytes(log, 1)
                text = self.partial.pop(digest, "") + _first_bytes(log, 4).decode(
                    "utf-8", "replace"
                )
                *done, rest = text.split("\n")
                for piece in done:
                    self.line(piece)
                if rest:
                    self.partial[digest] = rest[-4096:]
        except ValueError:
            return  # progress only: a message this does not understand is skipped


def buildkit_build(
    client: docker.DockerClient,
    what: str,
    say: Progress,
    context: IO[bytes],
    trust: BuildTrust,
    *,
    tag: str | None = None,
    buildargs: Mapping[str, str] | None = None,
    target: str | None = None,
    labels: Mapping[str, str] | None = None,
    timeout: float | None = None,
) -> str | None:
    """Build the context tar ``context`` (made by ``trusted_folder_context`` or
    ``trusted_tar_context``) with BuildKit, its ``RUN`` steps trusting ``trust``; returns the
    image id. Errors and ``timeout`` as ``stream_build``."""
    api: Any = client.api  # docker-py's build() has no BuildKit version or session
    progress = _Progress(say)
    image_id: str | None = None
    with context as body:
        session = SecretSession(api, {SECRET_ID: trust.pem})
        try:
            params: dict[str, Any] = {
                "version": "2",
                "session": session.id,
                "dockerfile": TRUST_DOCKERFILE,
                "rm": "1",
                "forcerm": "1",
            }
            if tag:
                params["t"] = tag
            if target:
                params["target"] = target
            if buildargs:
                params["buildargs"] = _json(buildargs)
            if labels:
                params["labels"] = _json(labels)
            response = api._post(
                api._url("/build"),
                params=params,
                data=body,
                headers={"Content-Type": "application/x-tar"},
                stream=True,
                timeout=None,
            )
            api._raise_for_status(response)
            with BuildDeadline(timeout, api, response) as deadline:
                try:
                    image_id = _read_events(api, response, what, progress)
                except Exception as exc:
                    if deadline.cut:
                        raise ImageError(
                            deadline.message(what), details={"log": progress.tail}
                        ) from exc
                    raise
            if deadline.cut:
                raise ImageError(deadline.message(what), details={"log": progress.tail})
        finally:
            session.close()
    return image_id


def _read_events(api: Any, response: Any, what: str, progress: _Progress) -> str | None:
    """Read a BuildKit build's stream to its end; the image id it named."""
    image_id: str | None = None
    for event in api._stream_helper(response, decode=True):
        if event.get("id") == "moby.buildkit.trace" and isinstance(event.get("aux"), str):
            progress.trace(event["aux"])
            continue
        aux = event.get("aux")
        if isinstance(aux, dict) and aux.get("ID"):
            image_id = str(aux["ID"])
        if "error" in event or "errorDetail" in event:
            detail = (event.get("errorDetail") or {}).get("message") or event["error"]
            raise ImageError(
                f"Building {what} failed: {str(detail).strip()}",
                details={"log": progress.tail},
            )
        text = str(event.get("stream") or "")
        for piece in text.splitlines():
            progress.line(piece)
    return image_id


def _json(value: Mapping[str, str]) -> str:
    return json.dumps(dict(value))
