"""What the shared service's registry credentials do for a user (issue #30, item 4): pushes only
under the user's own prefix of each registry (``c.Registries.push_prefix``), pulls with them
only of the images ``c.Registries.shared_pull_images`` names; single-user mode as before."""

from __future__ import annotations

import pytest
from traitlets import TraitError
from traitlets.config import Config

from jupyter_gpudev.containers.images import fetch_named
from jupyter_gpudev.containers.namespace import user_repository
from jupyter_gpudev.engine import Registries
from jupyter_gpudev.engine.registries import repository_component
from jupyter_gpudev.errors import BadRequest, Forbidden

ALICE = "gpudev-alice"
R = "registry.example.com"


def acting_for(user: str | None, **settings: object) -> Registries:
    """The registries of a view acting for ``user`` (``None``: single-user mode), with
    ``c.Registries`` ``settings``."""
    config = Config()
    for name, value in settings.items():
        setattr(config.Registries, name, value)
    registries = Registries(config=config)
    registries.user = user
    return registries


@pytest.mark.parametrize(
    "ref",
    [
        f"{R}/{ALICE}/x:1",
        f"{R}/{ALICE}/team/x:1",
        f"127.0.0.1:5000/{ALICE}/x",
        f"{ALICE}/x:1",  # Docker Hub
        f"docker.io/{ALICE}/x:1",
    ],
)
def test_a_user_pushes_under_their_own_prefix(ref: str) -> None:
    # Given the shared service's registries acting for alice (the default prefix)
    registries = acting_for(ALICE)
    # When she pushes under REGISTRY/gpudev-alice/, then nothing stops it
    registries.check_push(ref)


@pytest.mark.parametrize(
    "ref",
    [
        f"{R}/gpudev-bob/x:1",
        f"{R}/library/base:1",
        f"{R}/{ALICE}x/y:1",  # a name that only starts like hers
        f"{R}/{ALICE}:1",  # her name as the whole repository
        f"{R}/team/{ALICE}/x:1",
        "base:1",  # Docker Hub's library/base
        f"docker.io/library/{ALICE}:1",
    ],
)
def test_a_push_outside_the_users_prefix_is_forbidden_naming_it(ref: str) -> None:
    # Given the shared service's registries acting for alice
    registries = acting_for(ALICE)
    # When she pushes outside REGISTRY/gpudev-alice/
    with pytest.raises(Forbidden) as refused:
        registries.check_push(ref)
    # Then it is refused (403), saying where she may push and which setting says so
    assert refused.value.status == 403
    assert f"/{ALICE}/" in refused.value.message
    assert "c.Registries.push_prefix" in refused.value.message
    assert refused.value.details["reference"] == ref


def test_the_prefix_is_the_users_name_as_a_repository_component() -> None:
    # Given a user whose name is not a repository component, and a prefix of the registry's
    user = "Alice@Example.com"
    registries = acting_for(user, push_prefix="gpudev/{user}/")
    component = repository_component(user)
    # Then the prefix holds the same component as their local image repository
    assert user_repository(user) == f"localhost/gpudev/{component}"
    assert component.startswith("alice-example-com-")
    assert registries.user_prefix() == f"gpudev/{component}/"
    registries.check_push(f"{R}/gpudev/{component}/x:1")
    with pytest.raises(Forbidden, match=f"{R}/gpudev/{component}/"):
        registries.check_push(f"{R}/{component}/x:1")
    # And another user's name never gives the same prefix
    assert repository_component("alice@example.com") != component


def test_in_single_user_mode_any_push_goes() -> None:
    registries = acting_for(None)
    for ref in (f"{R}/gpudev-bob/x:1", "base:1", f"{R}/library/base:1"):
        registries.check_push(ref)
    assert registries.user_prefix() == ""


@pytest.mark.parametrize("prefix", ["", "/", "{user}", "team/", "Team/{user}/", "{user}x/"])
def test_a_prefix_that_users_could_share_is_refused(prefix: str) -> None:
    with pytest.raises(TraitError, match="one of them"):
        acting_for(ALICE, push_prefix=prefix)


@pytest.mark.parametrize(
    ("ref", "allowed"),
    [
        ("nvcr.io/nvidia/pytorch:24.01-py3", True),
        ("nvcr.io/nvidia/pytorch@sha256:" + "ab" * 32, True),
        ("nvcr.io/nvidian/secret:1", False),
        (f"{R}/{ALICE}/env:1", True),
        (f"{R}/gpudev-bob/env:1", False),
        (f"{R}/private/thing:1", False),
        ("python:3.12", True),
        ("docker.io/library/python:3.12", True),
        ("python", True),  # python:latest
        ("pythonista:1", False),
    ],
)
def test_the_services_credentials_fetch_only_what_the_allow_list_names(
    ref: str, allowed: bool
) -> None:
    # Given the administrator's allow-list, {user} in it, and the registries acting for alice
    patterns = ["nvcr.io/nvidia/*", f"{R}/{{user}}/*", "python:*"]
    registries = acting_for(ALICE, shared_pull_images=patterns)
    # Then a pull carries the service's credentials only for what it names
    assert registries.pulls_with_credentials(ref) is allowed


def test_without_an_allow_list_the_services_credentials_fetch_nothing() -> None:
    registries = acting_for(ALICE)
    assert registries.shared_pull_images == []
    assert not registries.pulls_with_credentials(f"{R}/{ALICE}/env:1")
    assert not registries.pulls_with_credentials("python:3.12")


def test_in_single_user_mode_every_pull_has_the_users_credentials() -> None:
    registries = acting_for(None, shared_pull_images=["nvcr.io/nvidia/*"])
    assert registries.pulls_with_credentials(f"{R}/private/thing:1")


@pytest.mark.parametrize(
    "ref",
    [
        "127.0.0.1:6543/x:1",
        "localhost:6543/x",
        "10.1.2.3/team/x:1",
        "169.254.169.254/x@sha256:" + "0" * 64,
        "[::1]:6543/x:1",
        # IPv6 forms of a loopback or private IPv4 address, which a tunnel or a translator
        # (6to4, NAT64 on an IPv6-only network, Teredo, SIIT) takes there
        "[2002:7f00:1::]:6543/x:1",  # 6to4 of 127.0.0.1
        "[2002:a01:203::1]/x:1",  # 6to4 of 10.1.2.3
        "[64:ff9b::7f00:1]:6543/x:1",  # NAT64 (well-known prefix) of 127.0.0.1
        "[64:ff9b::a9fe:a9fe]/x:1",  # NAT64 of 169.254.169.254, the cloud metadata address
        "[64:ff9b:1::a01:203]/x:1",  # NAT64 (local-use prefix) of 10.1.2.3
        "[::ffff:0:7f00:1]:6543/x:1",  # IPv4-translated (SIIT) 127.0.0.1
        "[::7f00:1]:6543/x:1",  # IPv4-compatible 127.0.0.1
        "[2001:0:4136:e378:8000:63bf:80fe:fdfc]/x:1",  # Teredo whose client is 127.1.2.3
    ],
)
def test_a_user_cannot_have_the_engine_pull_or_push_at_a_private_address(ref: str) -> None:
    # Given the shared service's registries acting for alice, which the administrator
    # configured for no registry there
    registries = acting_for(ALICE)
    # When her Dockerfile or push names a registry at a loopback, private or link-local
    # address, Then it is refused before the engine (root, on the host) connects there
    with pytest.raises(BadRequest, match="not at a public address") as refused:
        registries.check_reachable(ref)
    assert "c.Registries.credentials" in refused.value.message


@pytest.mark.parametrize(
    "settings",
    [
        {"credentials": {"127.0.0.1:6543": {"username": "u", "password": "p"}}},
        {"shared_pull_images": ["127.0.0.1:6543/x:*"]},
    ],
)
def test_a_private_registry_the_administrator_configured_is_reached(
    settings: dict[str, object],
) -> None:
    acting_for(ALICE, **settings).check_reachable("127.0.0.1:6543/x:1")


def test_the_usual_registries_and_single_user_mode_are_left_to_the_engine() -> None:
    for ref in (
        "python:3.12",
        "docker.io/library/python:3.12",
        "nvcr.io/nvidia/pytorch:24.05-py3",
        "ghcr.io/team/tool:1",
        "quay.io/org/x@sha256:" + "0" * 64,
    ):
        acting_for(ALICE).check_reachable(ref)
    acting_for(None).check_reachable("127.0.0.1:6543/x:1")
    acting_for(None).check_reachable("registry.attacker.example/x:1")


@pytest.mark.parametrize(
    "ref",
    [
        "registry.attacker.example/x:1",
        "8.8.8.8:5000/x:1",
        "[2606:4700:4700::1111]/x:1",
        "no-such-host.invalid/x:1",
    ],
)
def test_a_registry_the_administrator_did_not_list_is_refused_in_shared_mode(ref: str) -> None:
    # Given the shared service's default list of registries users may reach, When alice's
    # environment, Dockerfile or push names a registry not on it (one that could answer the
    # engine with a redirect to the host's loopback, or a name that resolves there later)
    with pytest.raises(BadRequest, match=r"c\.Registries\.shared_registries") as refused:
        acting_for(ALICE).check_reachable(ref)
    # Then it is refused before the engine connects there, naming what to ask for
    assert refused.value.details["registry"] in ref
    # And the administrator may add it
    registry = refused.value.details["registry"]
    if registry not in ("8.8.8.8:5000", "[2606:4700:4700::1111]", "no-such-host.invalid"):
        acting_for(ALICE, shared_registries=[registry]).check_reachable(ref)


@pytest.mark.parametrize(
    "ref",
    [
        "LOCALHOST/x@sha256:" + "0" * 64,
        "IP6-LOCALHOST/x@sha256:" + "0" * 64,
        "Metadata/x@sha256:" + "0" * 64,
    ],
)
def test_a_host_in_upper_case_is_a_host_not_a_docker_hub_path(ref: str) -> None:
    # Newer engines (reference v0.5, Docker 25) read a first component with an upper-case
    # letter as the registry: so does the check, which read it as Docker Hub's
    assert Registries.registry_of(ref) == ref.split("/", 1)[0]
    with pytest.raises(BadRequest):
        acting_for(ALICE).check_reachable(ref)


class NoEngine:
    """A Docker client whose engine has every image looked for, and must not pull any."""

    class images:  # (docker-py's attribute)
        @staticmethod
        def get(_ref: str) -> object:
            return object()

    @property
    def api(self) -> object:
        raise AssertionError("the engine was asked to pull")


@pytest.mark.parametrize(
    "ref", ["127.0.0.1:6543/x:1", "[::1]:5000/x:1", "registry.attacker.example/x:1"]
)
def test_an_environments_image_is_pulled_only_from_a_registry_users_may_reach(ref: str) -> None:
    # Given the shared service's registries acting for alice, When her environment's
    # devcontainer.json (or a start request) names an image at a registry she may not reach,
    # Then its pull is refused before the engine (root, on the host) connects there
    with pytest.raises(BadRequest, match="registry"):
        acting_for(ALICE).pull(NoEngine(), ref, lambda _event: None)  # type: ignore[arg-type]


@pytest.mark.parametrize(
    "dockerfile",
    [
        "FROM metadata:${NOPE:-80/x}\n",  # the builder reads metadata:80/x: a host and port
        "FROM metadata:8${NOPE:-0/x}\n",
        "FROM ${NOPE:-127.0.0.1:5000/x}\n",
        "FROM local${NOPE:-host:5000/x}\n",
        "FROM python:3.12\nCOPY --from=gitlab:${NOPE:-80/x} /a /b\n",
        "FROM [::1]:${NOPE:-5000/x:1}\n",
        "FROM [::1]${NOPE:-:5000/x:1}\n",
        "FROM metadata:${TARGETARCH}\n",  # a platform ARG: BuildKit sets it
    ],
)
def test_a_name_whose_registry_a_variable_decides_is_refused_in_shared_mode(
    dockerfile: str,
) -> None:
    # Given alice's Dockerfile naming an image whose registry gpudev cannot tell (a variable
    # it has no value for, which the builder expands, comes before the name's first '/')
    # When its images are fetched for her, Then it is refused before the builder pulls it
    with pytest.raises(BadRequest, match="registry") as refused:
        fetch_named(NoEngine(), acting_for(ALICE), dockerfile, {}, say=print, what="W")  # type: ignore[arg-type]
    assert refused.value.message.startswith("W, line ")
    # And in single-user mode the builder is left to it
    fetch_named(NoEngine(), acting_for(None), dockerfile, {}, say=print, what="W")  # type: ignore[arg-type]


@pytest.mark.parametrize(
    "dockerfile",
    [
        "FROM python:3.12-${NOPE}\n",  # a tag: Docker Hub's
        "FROM docker.io/library/python:${NOPE}\n",
        "FROM nvidia/cuda:12.4-${NOPE}\n",
        "FROM python@${NOPE}\n",  # the name is whole before its digest
        "FROM python:${PY:-3.12}-slim\n",  # no ARG: the builder takes the default
        "FROM --platform=$BUILDPLATFORM golang:1.22\n",
        "FROM nvcr.io/nvidia/pytorch:${TAG}\n",
    ],
)
def test_a_name_whose_registry_is_known_up_to_a_variable_is_left_to_the_builder(
    dockerfile: str,
) -> None:
    fetch_named(NoEngine(), acting_for(ALICE), dockerfile, {}, say=print, what="W")  # type: ignore[arg-type]
