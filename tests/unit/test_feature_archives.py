"""A feature's archive against the tricks a security review found (``environments/
feature_archives.py``): a member written through a link listed after it, a chain of links
climbing out, and a gzip that grows without bound as it is decompressed."""

from __future__ import annotations

import bz2
import gzip
import io
import tarfile

import pytest

from jupyter_gpudev.containers.features import url_allowed
from jupyter_gpudev.environments.feature_archives import MAX_DECOMPRESSED_BYTES, read_archive
from jupyter_gpudev.environments.features import MAX_FEATURES, read_requests
from jupyter_gpudev.errors import BadRequest


def archive(*members: tuple[str, str, str]) -> io.BytesIO:
    """A tar of (name, kind, data or link target), in the order given."""
    out = io.BytesIO()
    with tarfile.open(fileobj=out, mode="w") as tar:
        for name, kind, value in members:
            info = tarfile.TarInfo(name)
            if kind == "dir":
                info.type = tarfile.DIRTYPE
                tar.addfile(info)
            elif kind == "link":
                info.type = tarfile.SYMTYPE
                info.linkname = value
                tar.addfile(info)
            else:
                data = value.encode()
                info.size = len(data)
                tar.addfile(info, io.BytesIO(data))
    out.seek(0)
    return out


def test_a_member_listed_before_the_link_above_it_is_refused() -> None:
    # Given z/Dockerfile listed first, then z as a link (the build context would be written
    # through it, replacing the generated Dockerfile)
    tricked = archive(
        ("install.sh", "file", "true"),
        ("z/Dockerfile", "file", "FROM scratch\n"),
        ("z", "link", "."),
    )
    with pytest.raises(BadRequest, match=r"is under a file or a link"):
        read_archive(tricked, "feature x")


def test_a_chain_of_links_cannot_climb_out() -> None:
    # Given 0/c -> . and z -> 0/c/c/c/../../.. (each inside when read alone)
    chained = archive(
        ("0", "dir", ""),
        ("0/c", "link", "."),
        ("z", "link", "0/c/c/c/../../.."),
    )
    with pytest.raises(BadRequest, match=r"leads out of the feature"):
        read_archive(chained, "feature x")


def test_links_that_stay_inside_are_kept_even_through_other_links() -> None:
    kept = read_archive(
        archive(
            ("bin", "dir", ""),
            ("bin/tool", "file", "x"),
            ("lib", "dir", ""),
            ("lib/here", "link", "."),
            ("lib/tool", "link", "here/here/../bin/tool"),
        ),
        "feature x",
    )
    assert [m.name for m in kept.members] == ["bin", "bin/tool", "lib", "lib/here", "lib/tool"]


def test_a_gzip_that_grows_past_the_bound_is_refused_without_growing() -> None:
    # Given a small gzip of a huge run of zeros (a tar header declaring a long name, or any)
    bomb = io.BytesIO(gzip.compress(b"\0" * (MAX_DECOMPRESSED_BYTES + 1024), compresslevel=9))
    assert len(bomb.getvalue()) < 1 << 20
    with pytest.raises(BadRequest, match=r"decompresses to over"):
        read_archive(bomb, "feature x", compressed=True)


def test_other_compressions_are_refused_and_gzip_is_read() -> None:
    plain = archive(("install.sh", "file", "echo hi")).getvalue()
    with pytest.raises(BadRequest, match=r"only gzip"):
        read_archive(io.BytesIO(bz2.compress(plain)), "feature x", compressed=True)
    read = read_archive(io.BytesIO(gzip.compress(plain)), "feature x", compressed=True)
    assert read.file("install.sh") == b"echo hi"


@pytest.mark.parametrize(
    ("url", "pattern", "allowed"),
    [
        ("https://features.example.com/a.tgz", "https://features.example.com/*.tgz", True),
        ("https://cdn.example.com/a.tgz", "https://*.example.com/*", True),
        # The pattern's host appears in another host's path: not that host
        ("https://evil.com/x.example.com/a.tgz", "https://*.example.com/*", False),
        ("https://evil.com/features.example.com/a.tgz", "https://features.example.com*", False),
        ("http://features.example.com/a.tgz", "https://features.example.com/*", False),
        ("https://user:pw@features.example.com/a.tgz", "https://features.example.com/*", False),
        ("https://features.example.com.evil.com/a.tgz", "https://features.example.com/*", False),
    ],
)
def test_an_allowed_url_pattern_matches_its_host_only(
    url: str, pattern: str, allowed: bool
) -> None:
    assert url_allowed(url, pattern) is allowed


def test_an_environment_names_at_most_so_many_features() -> None:
    many: dict[str, object] = {
        f"ghcr.io/example/features/f{n}:1": {} for n in range(MAX_FEATURES + 1)
    }
    with pytest.raises(BadRequest, match=rf"at most {MAX_FEATURES}"):
        read_requests(many, "devcontainer.json")
    assert len(read_requests(dict(list(many.items())[:MAX_FEATURES]), "x")) == MAX_FEATURES
