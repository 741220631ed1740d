"""The images a classic build's steps made, read from its log (``engine.images._StepImages``):
what a build cut by its engine removes (``remove_cut_steps``)."""

from __future__ import annotations

from jupyter_gpudev.engine.images import _StepImages

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
    return steps.ids


def test_only_the_images_the_build_made_are_its_own() -> None:
    # A FROM step names an image it did not make; a cached step names another build's
    assert read(LOG) == ["3333333333cc", "5555555555ee"]


def test_a_line_that_only_looks_like_a_step_image_is_not_one() -> None:
    assert read(" ---> 12345\n --> 3333333333cc\n ---> 3333333333CC\n ---> 3333333333ccdd") == []
