"""Builds that trust the CA bundle: the Dockerfile copy, the session's gRPC answers (driven by a
real HTTP/2 client), the progress decoding and the policy that hands the bundle over."""

from __future__ import annotations

import base64
import io
import struct
import tarfile
from pathlib import Path

import h2.config
import h2.connection
import h2.events
import pytest
from traitlets.config import Config

from jupyter_gpudev.engine.buildkit import (
    CA_TARGET,
    SECRET_ID,
    TRUST_DOCKERFILE,
    BuildTrust,
    SessionServer,
    _Progress,
    pb_bytes,
    pb_fields,
    trusted_tar_context,
    trusting_dockerfile,
)
from jupyter_gpudev.environments import CA_BUNDLE_ENV_VARS, MountPolicy
from jupyter_gpudev.errors import ConfigError

MOUNT = f"--mount=type=secret,id={SECRET_ID},target={CA_TARGET}"
VARS = ("PIP_CERT", "SSL_CERT_FILE")
ARGS = f"ARG PIP_CERT={CA_TARGET}\nARG SSL_CERT_FILE={CA_TARGET}\n"


def test_every_run_step_mounts_the_bundle_and_every_stage_declares_the_variables() -> None:
    text = (
        "# escape=\\\n"
        "FROM gpudev-python:bookworm AS base\n"
        "RUN pip install a \\\n"
        "    # a comment inside the instruction\n"
        "\n"
        "    b\n"
        'run ["pip", "install", "c"]\n'
        "ONBUILD RUN echo later\n"
        "FROM base\n"
        "  RUN echo indented\n"
        "COPY RUN /RUN\n"
    )
    assert trusting_dockerfile(text, VARS) == (
        "# escape=\\\n"
        "FROM gpudev-python:bookworm AS base\n"
        f"{ARGS}"
        f"RUN {MOUNT} pip install a \\\n"
        "    # a comment inside the instruction\n"
        "\n"
        "    b\n"
        f'run {MOUNT} ["pip", "install", "c"]\n'
        "ONBUILD RUN echo later\n"
        "FROM base\n"
        f"{ARGS}"
        f"  RUN {MOUNT} echo indented\n"
        "COPY RUN /RUN\n"
    )


def test_the_escape_directive_decides_what_continues_an_instruction() -> None:
    text = "# escape=`\nFROM img\nRUN echo a `\n  RUN-not-an-instruction\nRUN echo b \\\n"
    out = trusting_dockerfile(text, ())
    assert out.splitlines() == [
        "# escape=`",
        "FROM img",
        f"RUN {MOUNT} echo a `",
        "  RUN-not-an-instruction",
        f"RUN {MOUNT} echo b \\",
    ]


def test_a_syntax_directive_is_dropped_and_a_from_without_newline_still_gets_its_args() -> None:
    out = trusting_dockerfile("# syntax=docker/dockerfile:1\r\nFROM img", VARS)
    assert out == f"FROM img\n{ARGS}"
    assert "syntax" not in out


def test_a_continued_from_gets_its_args_after_its_last_line() -> None:
    out = trusting_dockerfile("FROM \\\n  img AS x\nRUN true\n", ("PIP_CERT",))
    assert out == f"FROM \\\n  img AS x\nARG PIP_CERT={CA_TARGET}\nRUN {MOUNT} true\n"


def test_the_trusted_context_starts_with_a_plain_header_and_keeps_every_member() -> None:
    # The engine tells a context tar from a bare Dockerfile by its first header alone.
    source = io.BytesIO()
    with tarfile.open(fileobj=source, mode="w", format=tarfile.PAX_FORMAT) as tar:
        members = (("Dockerfile", b"FROM img\nRUN true\n"), (".dockerignore", b"*"), ("é/f", b"x"))
        for name, data in members:
            info = tarfile.TarInfo(name)
            info.size, info.mtime = len(data), 1.5
            tar.addfile(info, io.BytesIO(data))
    trust = BuildTrust(b"PEM", ("PIP_CERT",))
    with trusted_tar_context(source, "Dockerfile", trust) as context:
        first = context.read(512)
        assert first.startswith(TRUST_DOCKERFILE.encode())
        assert first[156:157] == b"0"  # a regular file, not an extended header
        context.seek(0)
        with tarfile.open(fileobj=context) as tar:
            names = tar.getnames()
            trusted = tar.extractfile(TRUST_DOCKERFILE)
            assert trusted is not None
            assert MOUNT.encode() in trusted.read()
    assert names == [TRUST_DOCKERFILE, "Dockerfile", "é/f"]  # .dockerignore applied already
    with trusted_tar_context(None, "FROM img\n", trust) as alone, tarfile.open(fileobj=alone) as t:
        assert t.getnames() == [TRUST_DOCKERFILE]


# -- the session ----------------------------------------------------------------------------


def _call(server: SessionServer, path: str, message: bytes) -> tuple[bytes, dict[str, str]]:
    """One gRPC call from a real HTTP/2 client to ``server``: the reply's bytes and trailers."""
    client = h2.connection.H2Connection(h2.config.H2Configuration(header_encoding="utf-8"))
    client.initiate_connection()
    to_server = client.data_to_send()
    to_client = server.start()
    stream = client.get_next_available_stream_id()
    headers = [
        (":method", "POST"),
        (":scheme", "http"),
        (":authority", "docker"),
        (":path", path),
        ("content-type", "application/grpc"),
    ]
    client.send_headers(stream, headers)
    client.send_data(stream, b"\x00" + struct.pack(">I", len(message)) + message, end_stream=True)
    to_server += client.data_to_send()
    body, ended = b"", False
    trailers: dict[str, str] = {}
    for _ in range(1000):
        to_client += server.feed(to_server)
        to_server = b""
        for event in client.receive_data(to_client):
            if isinstance(event, h2.events.DataReceived):
                body += event.data
                client.acknowledge_received_data(event.flow_controlled_length, stream)
            elif isinstance(event, (h2.events.TrailersReceived, h2.events.ResponseReceived)):
                trailers.update({str(k): str(v) for k, v in event.headers or []})
            elif isinstance(event, h2.events.StreamEnded):
                ended = True
        to_client = b""
        to_server = client.data_to_send()
        if ended:
            break
    assert ended
    return body, trailers


def test_the_session_serves_its_secret_past_the_flow_control_window() -> None:
    secret = bytes(range(256)) * 1200  # 300 KiB: more than one window of 64 KiB
    server = SessionServer({SECRET_ID: secret})
    body, trailers = _call(
        server, "/moby.buildkit.secrets.v1.Secrets/GetSecret", pb_bytes(1, SECRET_ID.encode())
    )
    assert trailers["grpc-status"] == "0"
    assert body[0] == 0
    assert struct.unpack(">I", body[1:5])[0] == len(body) - 5
    assert pb_fields(body[5:])[1] == [secret]
    assert server.asked == [SECRET_ID]


def test_the_session_answers_nothing_else() -> None:
    secrets = {SECRET_ID: b"PEM"}
    body, trailers = _call(
        SessionServer(secrets),
        "/moby.buildkit.secrets.v1.Secrets/GetSecret",
        pb_bytes(1, b"/etc/shadow"),
    )
    assert (body, trailers["grpc-status"]) == (b"", "5")  # not found
    body, trailers = _call(SessionServer(secrets), "/moby.filesync.v1.FileSync/DiffCopy", b"")
    assert (body, trailers["grpc-status"]) == (b"", "12")  # unimplemented
    body, trailers = _call(SessionServer(secrets), "/grpc.health.v1.Health/Check", b"")
    assert pb_fields(body[5:]) == {1: [1]}  # SERVING
    assert trailers["grpc-status"] == "0"


def test_malformed_protobuf_is_refused() -> None:
    with pytest.raises(ValueError, match="truncated"):
        pb_fields(b"\x0a\x05ab")
    with pytest.raises(ValueError, match="truncated varint"):
        pb_fields(b"\x08\xff")


def test_buildkit_progress_becomes_lines_once_per_step() -> None:
    said: list[str] = []
    progress = _Progress(lambda event: said.append(str(event["message"])))
    vertex = pb_bytes(1, b"sha256:a") + pb_bytes(3, b"[2/3] RUN pip install x") + pb_bytes(5, b"t")
    logs = [pb_bytes(1, b"sha256:a") + pb_bytes(4, piece) for piece in (b"Collec", b"ting x\nok\n")]
    failed = pb_bytes(1, b"sha256:a") + pb_bytes(3, b"[2/3] RUN pip") + pb_bytes(7, b"exit 1")
    for message in (pb_bytes(1, vertex), pb_bytes(1, vertex), *(pb_bytes(3, x) for x in logs)):
        progress.trace(base64.b64encode(message).decode())
    progress.trace(base64.b64encode(pb_bytes(1, failed)).decode())
    progress.trace("not base64 !")
    assert said == ["[2/3] RUN pip install x", "Collecting x", "ok", "[2/3] RUN pip: exit 1"]
    assert progress.tail == said


# -- the policy -----------------------------------------------------------------------------


def _policy(tmp_path: Path, on: bool, bundle: bytes | None) -> MountPolicy:
    path = tmp_path / "bundle.pem"
    if bundle is not None:
        path.write_bytes(bundle)
    config = Config()
    config.MountPolicy.mount_ca_bundle = on
    config.MountPolicy.ca_bundle_path = str(path)
    return MountPolicy(config=config)


def test_builds_trust_the_bundle_only_when_mount_ca_bundle_is_on(tmp_path: Path) -> None:
    pem = b"-----BEGIN CERTIFICATE-----\nMIIB\n-----END CERTIFICATE-----\n"
    assert _policy(tmp_path, False, pem).build_trust() is None
    trust = _policy(tmp_path, True, pem).build_trust()
    assert trust == BuildTrust(pem, CA_BUNDLE_ENV_VARS)


def test_a_bundle_that_is_no_pem_is_a_configuration_error(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="not a PEM bundle"):
        _policy(tmp_path, True, b"hello").build_trust()
    missing = tmp_path / "missing"
    missing.mkdir()
    assert _policy(missing, True, None).build_trust() is None  # warned, not trusted
