"""``engine_errors``: the one conversion of Docker engine failures, and the sentences a failed
connection becomes (``describe_connection_error``; no engine needed)."""

from __future__ import annotations

import errno
import logging

import docker.errors
import pytest
import requests.exceptions

from jupyter_gpudev.errors import (
    Conflict,
    EngineError,
    EngineUnreachable,
    GPUDevError,
    NotFound,
    describe_connection_error,
    engine_errors,
)

#: What an engine may say: nothing of it may reach a person through ``message``.
ENGINE_WORDS = "driver said: token=abc123 at /var/lib/docker/overlay2/xyz"


def api_error(status: int, text: str = ENGINE_WORDS) -> docker.errors.APIError:
    response = requests.models.Response()
    response.status_code = status
    return docker.errors.APIError(text, response=response, explanation=text)


@pytest.mark.parametrize(
    ("failure", "kind", "words"),
    [
        (api_error(500), EngineError, "Stopping 'x' failed: the Docker engine refused it"),
        (docker.errors.NotFound(ENGINE_WORDS), NotFound, "Stopping 'x': not found"),
        (api_error(409), Conflict, "the engine reports a conflict"),
        (requests.exceptions.ReadTimeout(ENGINE_WORDS), EngineError, "did not answer in time"),
        (requests.exceptions.ConnectionError(ENGINE_WORDS), EngineError, "connection"),
        (
            api_error(500, "could not select device driver with capabilities: [[gpu]]"),
            EngineError,
            "nvidia-container-toolkit",
        ),
    ],
)
def test_an_engine_failure_becomes_a_typed_error_without_the_engines_words(
    failure: Exception, kind: type[GPUDevError], words: str, caplog: pytest.LogCaptureFixture
) -> None:
    # When an engine call fails inside engine_errors
    log = logging.getLogger("gpudev-test")
    with (
        caplog.at_level(logging.WARNING),
        pytest.raises(kind) as caught,
        engine_errors("Stopping 'x'", log),
    ):
        raise failure
    # Then the error says what failed and what to do, never what the engine said
    assert words in caught.value.message
    assert "abc123" not in caught.value.message
    assert caught.value.__cause__ is failure
    # And the engine's words are in the log
    assert "Stopping 'x'" in caplog.text
    assert repr(failure) in caplog.text


def test_a_failed_probe_means_no_engine_answered_there() -> None:
    # When a call that only checks the engine answers fails (even below the SDK: a socket)
    url = "tcp://box:2376"
    with (
        pytest.raises(EngineUnreachable) as caught,
        engine_errors("Docker engine box", unreachable_at=url, details={"host": "box"}),
    ):
        raise ConnectionRefusedError(ENGINE_WORDS)
    # Then the error names the address and what to do, with the details given
    assert caught.value.message.startswith(f"No Docker engine answered at {url}: the connection")
    assert "abc123" not in caught.value.message
    assert caught.value.details == {"host": "box"}


def test_other_errors_pass_through() -> None:
    # Given an error of ours and a programming error inside engine_errors
    for error in (NotFound("No dev container named 'x'"), KeyError("k")):
        # Then each reaches the caller as it is
        with pytest.raises(type(error)) as caught, engine_errors("Looking up 'x'"):
            raise error
        assert caught.value is error


@pytest.mark.parametrize(
    ("exc", "text"),
    [
        (ConnectionRefusedError(errno.ECONNREFUSED, "refused"), "the connection was refused"),
        (PermissionError(errno.EACCES, "denied"), "permission denied on the socket"),
        (requests.exceptions.ReadTimeout("slow"), "did not answer in time"),
        (
            docker.errors.DockerException(
                "Error while fetching server API version: "
                "('Connection aborted.', FileNotFoundError(2, 'No such file or directory'))"
            ),
            "the engine did not answer",
        ),
    ],
)
def test_connection_errors_become_sentences(exc: BaseException, text: str) -> None:
    message = describe_connection_error("tcp://box:2376", exc)
    assert message.startswith("No Docker engine answered at tcp://box:2376: ")
    assert text in message


def test_chained_causes_are_followed() -> None:
    inner = FileNotFoundError(errno.ENOENT, "No such file")
    outer = docker.errors.DockerException("wrapped")
    outer.__cause__ = inner
    assert "the socket does not exist" in describe_connection_error("unix:///x", outer)
