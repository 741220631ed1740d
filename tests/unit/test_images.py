"""Mirror detection and input checks of the image bootstrapper, without an engine."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from jupyter_gpudev.containers.images import base_refs
from jupyter_gpudev.engine import ImageBootstrapper, detect_mirror, mirror_from_sources
from jupyter_gpudev.errors import BadRequest

DEB822 = """\
Types: deb
# http://snapshot.debian.org/archive/debian/20250520T000000Z
URIs: http://deb.debian.org/debian
Suites: bookworm bookworm-updates
Components: main
Signed-By: /usr/share/keyrings/debian-archive-keyring.gpg

Types: deb
URIs: http://deb.debian.org/debian-security
Suites: bookworm-security
Components: main
"""

ONE_LINE = """\
# deb http://old.example.org/debian bookworm main
deb-src http://src.example.org/debian bookworm main
deb [arch=amd64 signed-by=/k.gpg] http://mirror.example.org/debian bookworm main contrib
deb http://security.example.org/debian-security bookworm-security main
"""


def test_deb822_sources() -> None:
    assert mirror_from_sources(DEB822, "bookworm") == "http://deb.debian.org/debian"
    assert mirror_from_sources(DEB822, "bookworm-security") == (
        "http://deb.debian.org/debian-security"
    )
    assert mirror_from_sources(DEB822, "trixie") is None


def test_one_line_sources_skip_comments_sources_and_options() -> None:
    assert mirror_from_sources(ONE_LINE, "bookworm") == "http://mirror.example.org/debian"
    assert mirror_from_sources(ONE_LINE, "trixie") is None


def test_deb_src_only_stanza_is_not_a_mirror() -> None:
    text = "Types: deb-src\nURIs: http://src.example.org/debian\nSuites: bookworm\n"
    assert mirror_from_sources(text, "bookworm") is None


def test_detect_mirror_reads_the_first_file_that_has_one(tmp_path: Path) -> None:
    empty = tmp_path / "empty.sources"
    empty.write_text("")
    one = tmp_path / "sources.list"
    one.write_text(ONE_LINE)
    missing = tmp_path / "missing"
    assert detect_mirror("bookworm", [str(missing), str(empty), str(one)]) == (
        "http://mirror.example.org/debian"
    )
    assert detect_mirror("bookworm", [str(missing)]) is None


@pytest.mark.parametrize(
    ("trait", "value", "message"),
    [
        ("suite", "Bookworm; rm -rf /", "Not a Debian suite"),
        ("image_tag", "UPPER case", "Not an image tag"),
        ("packages", ["python3", "--allow-unauthenticated"], "Not a Debian package"),
    ],
)
def test_inputs_are_checked_before_anything_runs(trait: str, value: Any, message: str) -> None:
    bootstrapper = ImageBootstrapper(**{trait: value})
    with pytest.raises(BadRequest, match=message):
        bootstrapper._check_inputs("http://deb.debian.org/debian")


def test_mirror_must_be_a_url() -> None:
    with pytest.raises(BadRequest, match="Not a mirror URL"):
        ImageBootstrapper()._check_inputs("deb.debian.org/debian --keyring=/tmp/x")


def test_dockerfile_installs_sorted_packages_in_one_layer() -> None:
    text = ImageBootstrapper(
        packages=["python3-pip", "python3-ipykernel"], pip_packages=[]
    ).dockerfile()
    assert text.startswith("FROM gpudev-base:bookworm\n")
    assert "apt-get install -y --no-install-recommends python3-ipykernel python3-pip" in text
    assert text.count("RUN ") == 1
    assert "rm -rf /var/lib/apt/lists/*" in text


def test_dockerfile_installs_a_current_ipykernel_over_debians_and_keeps_debians_without_index() -> (
    None
):
    text = ImageBootstrapper(pip_packages=["ipykernel>=6.29,<8"]).dockerfile()
    pip_step = text.split("RUN ")[2]
    # Quoted for the shell: ">" and "<" are no redirections
    assert "--upgrade 'ipykernel>=6.29,<8'" in pip_step
    # The kernelspec is written again for python3, and a failure keeps Debian's packages
    assert "python3 -m ipykernel install --prefix /usr/local" in pip_step
    assert "|| echo" in pip_step


@pytest.mark.parametrize(
    "requirement",
    ["ipykernel; rm -rf /", "x$(id)", "--index-url=http://evil.example", "a b", "", "../x"],
)
def test_pip_requirements_are_checked_before_any_work(requirement: str) -> None:
    with pytest.raises(BadRequest, match="Not a pip requirement"):
        ImageBootstrapper(pip_packages=[requirement])._check_inputs("http://deb.debian.org/debian")


def test_the_bases_of_a_dockerfile_are_its_from_images_not_its_stages(tmp_path: Path) -> None:
    dockerfile = tmp_path / "Dockerfile"
    dockerfile.write_text(
        "ARG BASE=x\n"
        "FROM --platform=linux/amd64 gpudev-python:bookworm AS builder\n"
        "RUN true\n"
        "from registry.example/team/cuda:12.4 as cuda\n"
        "FROM builder\n"
        "FROM ${BASE}\n"
        "FROM scratch\n"
    )
    assert base_refs(dockerfile) == ["gpudev-python:bookworm", "registry.example/team/cuda:12.4"]
    assert base_refs(tmp_path / "missing") == []
