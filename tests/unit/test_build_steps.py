"""The images a classic build's steps made, read from its log (``engine.images._StepImages``):
what a build cut by its engine removes (``remove_cut_steps``)."""

from __future__ import annotations

import time
from typing import Any

import pytest

from jupyter_gpudev.engine.images import MAX_STEP_IDS, _read_classic, _remove_steps, _StepImages
from jupyter_gpudev.errors import ImageError

LOG = """Step 1/5 : FROM gpudev-python:bookworm
 ---> 1111111111aa
Step 2/5 : RUN echo cached > /cached
 ---> Using cache
 ---> 2222222222bb
Step 3/5 : RUN echo new > /new
 ---> Running in abcdefabcdef
Removing intermediate container abcdefabcdef
 ---> 3333333333cc
Step 4/5 : from other AS second
 ---> 4444444444dd
Step 5/5 : LABEL org.jupyter.gpudev.environment=env
 ---> Running in 0123456789ab
Removing intermediate container 0123456789ab
 ---> 5555555555ee
Successfully built 5555555555ee
"""


def read(text: str) -> list[str]:
    steps = _StepImages()
    for line in text.splitlines():
        steps.read(line)
    return list(steps.ids)


def test_only_the_images_the_build_made_are_its_own() -> None:
    # A FROM step names an image it did not make; a cached step names another build's
    assert read(LOG) == ["3333333333cc", "5555555555ee"]


def test_a_line_that_only_looks_like_a_step_image_is_not_one() -> None:
    assert read(" ---> 12345\n --> 3333333333cc\n ---> 3333333333CC\n ---> 3333333333ccdd") == []


class _Engine:
    """The two calls ``_remove_steps`` makes, on a fixed image list."""

    def __init__(self, images: list[dict[str, object]]) -> None:
        self.listed = images
        self.removed: list[str] = []
        self.api = self

    def images(self, filters: dict[str, object]) -> list[dict[str, object]]:
        assert filters == {"dangling": True}
        return self.listed

    def remove_image(self, image: str, force: bool, noprune: bool) -> None:
        assert not force
        assert not noprune
        self.removed.append(image)


def image(
    short: str, created: float, parent: str = "", digests: list[str] | None = None
) -> dict[str, object]:
    return {
        "Id": f"sha256:{short}{'0' * 52}",
        "ParentId": f"sha256:{parent}{'0' * 52}" if parent else "",
        "Created": int(created),
        "RepoTags": None,
        "RepoDigests": digests if digests is not None else ["<none>@<none>"],
    }


def test_only_the_builds_own_nameless_images_are_removed() -> None:
    now = time.time()
    engine = _Engine(
        [
            image("3333333333cc", now),  # the build's finished step, left dangling
            image("4444444444dd", now, parent="3333333333cc"),  # made on it, never logged
            # ids a step's output forged in the log:
            image("5555555555ee", now - 86400 * 400),  # an old nameless image of the engine
            image("6666666666ff", now, digests=["nvidia/cuda@sha256:" + "1" * 64]),  # by digest
            image("7777777777aa", now - 86400 * 400, parent="5555555555ee"),
        ]
    )
    made = {"3333333333cc", "5555555555ee", "6666666666ff"}
    assert _remove_steps(engine, made, since=now - 5)  # type: ignore[arg-type]
    assert [r[7:19] for r in engine.removed] == ["3333333333cc", "4444444444dd"]


def test_a_log_of_forged_step_lines_is_kept_bounded() -> None:
    steps = _StepImages()
    steps.read("Step 2/3 : RUN yes")
    for n in range(100_000):
        steps.read(f" ---> {n:012x}")
    assert len(steps.ids) <= MAX_STEP_IDS


def _failed_with(code: int) -> tuple[str, list[str]]:
    """A classic build whose third step ends with ``code``: its error, and what is left
    to remove of the images its steps made."""
    made = _StepImages()
    events: list[dict[str, Any]] = [
        {"stream": "Step 2/3 : RUN echo one > /one\n"},
        {"stream": " ---> 3333333333cc\n"},
        {"stream": "Step 3/3 : RUN ./train\n"},
        {
            "error": "x",
            "errorDetail": {
                "message": f"The command '/bin/sh -c ./train' returned a non-zero code: {code}"
            },
        },
    ]
    with pytest.raises(ImageError) as failed:
        _read_classic(iter(events), "env", lambda _event: None, made, [])
    return failed.value.message, list(made.ids)


def test_a_step_killed_by_a_signal_counts_as_cut_and_its_own_failure_keeps_the_cache() -> None:
    # The engine stopping kills a running step (SIGKILL: 137): cut, its steps' images removed
    message, left = _failed_with(137)
    assert "killed by signal 9" in message
    assert left == ["3333333333cc"]
    # A command that exits with its own code (200 is no signal's) failed of itself: its
    # finished steps stay the engine's cache
    for code in (1, 127, 200, 255):
        message, left = _failed_with(code)
        assert "signal" not in message
        assert left == []
