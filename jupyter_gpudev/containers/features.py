"""Dev Container Features installed into an environment's image (``environments.features``
reads them, ``engine.oci`` fetches them).

On a start, after the environment's image is pulled or built (``images.ensure_image``): each
feature is fetched (an OCI one from its registry, through ``c.Features.registry_mirrors``,
with the credentials of image pulls; a local one packed from the workspace without following
a link) and its archive read as hostile input; the install order is worked out; a build
context is generated (the image as ``FROM``, then per feature one ``COPY`` and one ``RUN`` of
its ``install.sh``) and built as a Dockerfile is (BuildKit, ``RUN`` steps trusting the CA
bundle where configured), tagged ``gpudev-features-<env>:<digest>`` where the digest covers
the base image's id, the Dockerfile, the labels and every feature's files: an unchanged
environment is not built again. The features' lifecycle commands are recorded on that image
(``labels.L_FEATURE_COMMANDS``), where every start of its containers reads them
(``commands.run_lifecycle_commands``).

``devcontainer-lock.json`` next to the devcontainer.json pins each OCI feature to a manifest
digest: a pinned one is fetched by that digest (and its layer checked against the pin's
``integrity``); the file is written, when missing, through the workspace's no-follow writes.
"""

from __future__ import annotations

import contextlib
import fnmatch
import io
import json
import os
import re
import secrets
import threading
import time
import urllib.parse
from collections import OrderedDict
from collections.abc import Iterator, Mapping
from typing import Any

import docker
import docker.errors
import requests
from traitlets import Dict, List, TraitError, Unicode, validate
from traitlets.config import LoggingConfigurable

from .. import safefs
from ..engine import BuildTrust, Progress, Registries, stream_build
from ..engine.context import pack_context
from ..engine.oci import OCIClient, public_host
from ..environments import Environment
from ..environments import feature_archives as archives
from ..environments import features as spec
from ..errors import BadRequest, Conflict, ImageError, engine_errors
from ..labels import L_BUILD_BASES, L_ENV, L_FEATURE_CAPS, L_FEATURE_COMMANDS
from . import feature_build as build
from .namespace import UserImages, build_reference

#: The most bytes of files all the features of one environment hold together (each is read
#: whole into memory, up to ``feature_archives.MAX_TOTAL_BYTES``).
MAX_FEATURES_BYTES = 128 << 20
#: The most features installs holding their files in memory at once in this process (from
#: the first fetch until the build context is written to a temporary file); one per user.
MAX_FEATURES_INSTALLS = 4
#: The repository of the temporary names a features build's base has during the build (a
#: random tag each, removed after): the build is ``FROM`` the very image read, not from
#: whatever the base's name is by then. Users cannot name it (``namespace.UNOWNED_BUILDS``).
#: (Two dashes: no environment's features image, ``gpudev-features-NAME``, is named so.) A
#: tag is ``SECONDS-RANDOM``: one a killed server left is removed by a later build after a day.
BASE_REPOSITORY = "gpudev-features--base"
#: Seconds after which a temporary base name is taken for left behind.
BASE_NAME_STALE = 86400.0
#: Seconds a features install waits for a slot (``MAX_FEATURES_INSTALLS``) before it is refused.
SLOT_WAIT = 600.0
_PREFIX_RE = re.compile(r"^[A-Za-z0-9.-]+(?::[0-9]{1,5})?(?:/[a-z0-9._-]+)*\Z")


class Features(LoggingConfigurable):
    """Dev Container Features: where they are fetched from (``c.Features.*``)."""

    registry_mirrors = Dict(
        per_key_traits=None,
        value_trait=Unicode(),
        default_value={},
        help="""Registries features are fetched from instead of the ones their references
        name: a registry/namespace prefix -> another, e.g.
        {"ghcr.io/devcontainers/features": "registry.example.com/mirror/features"}. The
        longest matching prefix wins; the mirror's credentials are those of image pulls
        (c.Registries.credentials or docker login). devcontainer-lock.json keeps the names
        as written.""",
    ).tag(config=True)

    allowed_urls = List(
        Unicode(),
        default_value=[],
        help="""Tarball URLs a devcontainer.json may name as features, as fnmatch patterns,
        e.g. ["https://features.example.com/*.tgz"]. A tarball has no digest to pin and is
        fetched from wherever the URL says: none is allowed by default (features come from
        OCI registries or the workspace). HTTPS only, but to a loopback address; a redirect
        to a non-public address is refused.""",
    ).tag(config=True)

    @validate("registry_mirrors")
    def _valid_mirrors(self, proposal: Any) -> dict[str, str]:
        value = dict(proposal["value"])
        for key, target in value.items():
            if not _PREFIX_RE.match(str(key)) or not _PREFIX_RE.match(str(target)):
                raise TraitError(
                    "c.Features.registry_mirrors maps REGISTRY[/NAMESPACE] to "
                    f"REGISTRY[/NAMESPACE], not {key!r}: {target!r}"
                )
        return value

    def mirrored(self, registry: str, repository: str) -> tuple[str, str]:
        """(registry, repository) to fetch ``registry/repository`` from."""
        full = f"{registry}/{repository}"
        best = ""
        for prefix in self.registry_mirrors:
            trimmed = prefix.rstrip("/")
            if (full == trimmed or full.startswith(trimmed + "/")) and len(trimmed) > len(best):
                best = trimmed
        if not best:
            return registry, repository
        moved = self.registry_mirrors[best].rstrip("/") + full[len(best) :]
        host, _, path = moved.partition("/")
        return host.lower(), path


def install_features(
    client: docker.DockerClient,
    env: Environment,
    base: str,
    *,
    registries: Registries,
    say: Progress,
    log: Any,
    trust: BuildTrust | None = None,
    settings: Features | None = None,
    mine: UserImages | None = None,
    owner: tuple[int, int] | None = None,
    timeout: float | None = None,
) -> str:
    """The image of ``env`` with its features installed on ``base`` (built when missing);
    returns its reference. ``mine``: shared mode's user, whose own repository the image is
    tagged in (``namespace.build_reference``) and who reuses only an image built for them from
    the same digest (``UserImages.reusable``); ``owner``: who a lockfile written in the
    workspace belongs to (the user's uid and gid in shared mode); ``timeout``: the build's
    limit (``c.DevContainers.build_timeout``).

    The features' files are held in memory from their fetch until the build context is
    written to a temporary file: by one install per user and ``MAX_FEATURES_INSTALLS`` in the
    process at once (``_INSTALLS``; a start waiting for that says so). The build is ``FROM``
    the very image read as ``base`` (whose id the digest and the labels name), under a
    temporary name of its own (``BASE_REPOSITORY``): not from whatever ``base`` names by
    then."""
    settings = settings if settings is not None else Features(parent=registries)
    user = mine.user if mine is not None else (registries.user or "")
    with _INSTALLS.held(user, say):
        pins = _read_pins(env)
        fetched: list[spec.Resolved] = []
        held = 0  # bytes of the features' files, held in memory until the build context
        for request in env.features:
            fetched.append(_fetch(request, settings, registries, pins, say, caps=env.allowed_caps))
            held += sum(len(member.data) for member in fetched[-1].archive.members)
            if held > MAX_FEATURES_BYTES:
                raise BadRequest(
                    f"The features of {env.name!r} hold more than {MAX_FEATURES_BYTES >> 20} "
                    "MiB of files together: not installed",
                    details={"environment": env.name},
                )
        ordered = spec.install_order(fetched, env.feature_order)
        commands = spec.commands_record(ordered)
        caps = ",".join(dict.fromkeys(cap for f in ordered for cap in f.meta.cap_add))
        try:
            image = client.images.get(base)
        except docker.errors.ImageNotFound:
            raise ImageError(f"The image {base} to install features on is missing") from None
        config = image.attrs.get("Config") or {}
        image_user = str(config.get("User") or "")
        if image_user:
            build.check_user(image_user, f"The image {base}")
        container_user = image_user.split(":", 1)[0] or "root"
        users = {
            "remote_user": build.check_user(
                env.remote_user or container_user, f"The environment {env.name!r}"
            ),
            "container_user": container_user,
            "image_user": image_user,
        }
        # (the digest is of the Dockerfile naming ``base``: an unchanged environment is reused)
        text = build.dockerfile(base, ordered, **users)
        digest = build.build_digest(str(image.id), text, ordered, labels=f"{commands}\0{caps}")
        if mine is None:
            repository = re.sub(r"[_.-]{2,}", "-", env.name).strip("_.-") or "unnamed"
            ref = f"gpudev-features-{repository}:{digest[:12]}"
            built = _present(client, ref)
        else:
            ref = build_reference(f"features-{env.name}", mine.user, digest)
            built = mine.reusable(client, ref, digest) is not None
        _write_lockfile(env, fetched, pins, say, owner)
        if built:
            say({"stage": "features", "message": f"features unchanged: using {ref}"})
            return ref
        names = ", ".join(f.request.ref.written for f in ordered)
        # (built FROM that image: ``base`` if it is its id, else a temporary name of it)
        temporary = f"{BASE_REPOSITORY}:{int(time.time())}-{secrets.token_hex(16)}"
        if _is_id(base, str(image.id)):
            temporary = ""
        pinned = build.dockerfile(temporary or base, ordered, **users)
        context = build.context_tar(pinned, ordered)
        del fetched, ordered  # (their files are in the temporary file now)
    with context, engine_errors(f"Installing the features of {env.name!r}", log):
        say({"stage": "build", "message": f"installing the features {names} into {ref}"})
        with _named(client, str(image.id), temporary, log):
            stream_build(
                client,
                f"the features of {env.name!r}",
                say,
                trust,
                timeout=timeout,
                fileobj=context,
                custom_context=True,
                dockerfile="Dockerfile",
                tag=ref,
                # (the commands' label always set: one a base image carries is not taken)
                labels={
                    L_ENV: env.name,
                    L_BUILD_BASES: f"{base}@{image.id}",
                    L_FEATURE_COMMANDS: commands,
                    L_FEATURE_CAPS: caps,
                },
            )
        if mine is not None:
            image_id = str(client.images.get(ref).id)
            mine.builds.record(
                image_id, mine.user, environment=env.name, digest=digest, reference=ref
            )
    return ref


@contextlib.contextmanager
def _named(client: docker.DockerClient, image_id: str, reference: str, log: Any) -> Iterator[None]:
    """``image_id`` tagged ``reference`` for the time of the block (none when ``""``), the tag
    removed after. (Where it is the image's last name, its other names moved meanwhile, the
    engine removes the image with it unless a container or a child image uses it, as it
    would prune that dangling image; where a container uses it, the engine keeps the tag.)"""
    if not reference:
        yield
        return
    _remove_stale_names(client, log)
    repository, tag = reference.rsplit(":", 1)
    client.api.tag(image_id, repository, tag)
    try:
        yield
    finally:
        _untag(client, reference, log)


def _untag(client: docker.DockerClient, reference: str, log: Any) -> None:
    """``reference`` removed, never the image it names while anything uses it (``noprune``, no
    force); a failure is logged, never raised over what the caller raises."""
    try:
        client.api.remove_image(reference, noprune=True)
    except docker.errors.NotFound:
        pass
    except (docker.errors.DockerException, requests.RequestException) as exc:
        if log is not None:
            log.warning("Removing the temporary name %s failed: %s", reference, exc)


def _remove_stale_names(client: docker.DockerClient, log: Any) -> None:
    """The temporary base names older than ``BASE_NAME_STALE`` removed (a server killed during
    a features build left them)."""
    try:
        listed = client.api.images(name=BASE_REPOSITORY)
    except (docker.errors.DockerException, requests.RequestException):
        return
    oldest = time.time() - BASE_NAME_STALE
    for image in listed if isinstance(listed, list) else []:
        tags = image.get("RepoTags") if isinstance(image, dict) else None
        for reference in tags if isinstance(tags, list) else []:
            repository, _, tag = str(reference).rpartition(":")
            seconds = tag.split("-", 1)[0]
            if repository == BASE_REPOSITORY and seconds.isdecimal() and int(seconds) < oldest:
                _untag(client, str(reference), log)


def _is_id(base: str, image_id: str) -> bool:
    """Whether ``base`` is ``image_id`` (in full or shortened, with or without its ``sha256:``):
    an id always names the same image, and may have no name to keep."""
    written = base.removeprefix("sha256:")
    return bool(re.fullmatch(r"[0-9a-f]{12,64}", written)) and image_id.removeprefix(
        "sha256:"
    ).startswith(written)


def _present(client: docker.DockerClient, ref: str) -> bool:
    try:
        client.images.get(ref)
    except docker.errors.ImageNotFound:
        return False
    return True


def _fetch(
    request: spec.FeatureRequest,
    settings: Features,
    registries: Registries,
    pins: Mapping[str, spec.Pin],
    say: Progress,
    *,
    caps: tuple[str, ...],
) -> spec.Resolved:
    """``request`` fetched and read; its capAdd may name only ``caps`` (the administrator's)."""
    ref = request.ref
    what = f"the feature {ref.written!r}"
    if ref.kind == "local":
        limits = (archives.MAX_TOTAL_BYTES, archives.MAX_MEMBERS)
        with pack_context(ref.path, limits=limits) as packed:
            archive = archives.read_archive(packed, what)
        return spec.Resolved(request, spec.meta_of(archive, what, allowed_caps=caps), archive)
    if ref.kind == "url":
        return _fetch_url(request, settings, say, caps, shared=registries.user is not None)
    pin = pins.get(ref.written)
    reference, integrity = ref.reference, ""
    if pin is not None:
        pinned = spec.parse_oci(pin.resolved)
        if pinned is None or pinned.resource.lower() != ref.resource.lower():
            raise BadRequest(f"devcontainer-lock.json pins {what} to another feature")
        reference, integrity = pinned.digest, pin.integrity
    manifest_digest, layer_digest, data = _fetch_oci(ref, reference, settings, registries, say)
    if integrity and integrity != layer_digest:
        raise BadRequest(
            f"{what}: its layer is not the one devcontainer-lock.json pins ({integrity})"
        )
    archive = archives.read_archive(io.BytesIO(data), what)
    meta = spec.meta_of(archive, what, allowed_caps=caps)
    if meta.id != ref.id and ref.id not in meta.legacy_ids:
        raise BadRequest(f"{what}: its devcontainer-feature.json names the id {meta.id!r}")
    return spec.Resolved(request, meta, archive, manifest_digest, layer_digest)


def _fetch_oci(
    ref: spec.FeatureRef,
    reference: str,
    settings: Features,
    registries: Registries,
    say: Progress,
) -> tuple[str, str, bytes]:
    """The manifest's and the layer's digests and the layer's bytes of ``ref`` at
    ``reference`` (a tag or a digest): from ``_CACHE`` for a digest fetched before, else
    from its registry (mirrored) with the credentials of image pulls."""
    what = f"the feature {ref.written!r}"
    scope = registries.user or ""  # in shared mode, what one user fetched is not another's
    if reference.startswith("sha256:"):
        manifest = _CACHE.get(scope, reference)
        layer_digest = _layer(manifest, what) if manifest is not None else ""
        layer = _CACHE.get(scope, layer_digest) if layer_digest else None
        if layer is not None:
            say({"stage": "features", "message": f"{ref.written} ({reference}): fetched before"})
            return reference, layer_digest, layer
    registry, repository = settings.mirrored(ref.registry, ref.repository)
    # shared mode: no request to the service's own network (the client connects only to the
    # public addresses it checked, never to what the name resolves to later)
    public_only = registries.user is not None and _check_reachable(
        registry, settings, registries, what
    )
    auth: dict[str, str] = {}
    withheld = ""
    # The rule is asked of what is fetched (a mirror's name), whose registry the credentials
    # are for: not of the name as written
    fetched_name = f"{registry}/{repository}{'@' if ':' in reference else ':'}{reference}"
    if registries.pulls_with_credentials(fetched_name):
        auth, _ = registries.auth_for(registry)
    else:
        withheld = (
            "the gpudev service's credentials fetch only what c.Registries.shared_pull_images "
            "names for you"
        )
    say({"stage": "features", "message": f"fetching {ref.written} ({reference})"})
    oci = OCIClient(registry, auth, what=what, withheld=withheld, public_only=public_only)
    try:
        fetched = oci.manifest(repository, reference, spec.MANIFEST_TYPE)
        layer_digest = _layer(fetched.data, what)
        blob = oci.blob(repository, layer_digest, archives.MAX_TOTAL_BYTES + (1 << 20))
    finally:
        oci.close()
    _CACHE.put(scope, fetched.digest, fetched.data)
    _CACHE.put(scope, blob.digest, blob.data)
    return fetched.digest, layer_digest, blob.data


def _check_reachable(registry: str, settings: Features, registries: Registries, what: str) -> bool:
    """In shared mode, a feature's registry is one the administrator configured (a mirror's,
    one with credentials) or at public addresses only: a user's reference must not make the
    service (root, on the engine's machine) send requests to its loopback or private network.
    Whether it must be public (not configured): its client is then made ``public_only``,
    which resolves the name once more, checks those addresses and connects to them only (a
    name resolved again by the connection could answer a loopback address: DNS rebinding);
    this check refuses early, with what to configure."""
    configured = {target.split("/", 1)[0].lower() for target in settings.registry_mirrors.values()}
    configured |= {str(name).lower() for name in registries.credentials}
    if registry.lower() in configured:
        return False
    host = urllib.parse.urlsplit(f"//{registry}").hostname or registry
    if not public_host(host):
        raise BadRequest(
            f"{what}: its registry {registry} is not a public address, and the gpudev "
            "service's administrator has not configured it (c.Features.registry_mirrors, "
            "c.Registries.credentials)",
            details={"registry": registry},
        )
    return True


class _Cache:
    """Manifests and layers by their digests, as fetched (and checked against them): a feature
    pinned by digest (as devcontainer-lock.json pins them) is not fetched again by this
    process, so an unchanged environment starts while its registry is away. Each entry is one
    user's (``scope``: their name in shared mode, where the service's credentials may fetch
    for one user what another may not read; "" in single-user mode): a digest another user
    fetched is fetched again, with this user's rights. Bounded, fairly between users: over the
    limit, the least recently used entry of the scope holding the most bytes goes (on a tie,
    the one putting's own), so a user evicts another's entries only while that other holds
    more, and one fetching much evicts their own."""

    def __init__(self, limit: int) -> None:
        self.limit = limit
        self.scopes: dict[str, OrderedDict[str, bytes]] = {}
        self.held: dict[str, int] = {}  # bytes per scope
        self.size = 0
        self.lock = threading.Lock()

    @property
    def items(self) -> dict[tuple[str, str], bytes]:
        """Every entry, by (scope, digest)."""
        with self.lock:
            return {
                (scope, digest): data
                for scope, entries in self.scopes.items()
                for digest, data in entries.items()
            }

    def get(self, scope: str, digest: str) -> bytes | None:
        with self.lock:
            entries = self.scopes.get(scope)
            data = entries.get(digest) if entries is not None else None
            if entries is not None and data is not None:
                entries.move_to_end(digest)
            return data

    def put(self, scope: str, digest: str, data: bytes) -> None:
        if len(data) > self.limit:
            return
        with self.lock:
            entries = self.scopes.setdefault(scope, OrderedDict())
            old = entries.pop(digest, None)
            change = len(data) - (len(old) if old is not None else 0)
            entries[digest] = data
            self.held[scope] = self.held.get(scope, 0) + change
            self.size += change
            while self.size > self.limit:
                fullest = max(self.held, key=lambda s: (self.held[s], s == scope))
                _, dropped = self.scopes[fullest].popitem(last=False)
                self.held[fullest] -= len(dropped)
                self.size -= len(dropped)
                if not self.scopes[fullest]:
                    del self.scopes[fullest], self.held[fullest]


_CACHE = _Cache(256 << 20)


class _Slots:
    """Features installs in flight: one per user (``""`` in single-user mode) and at most
    ``limit`` in the process."""

    def __init__(self, limit: int) -> None:
        self.limit = limit
        self.users: set[str] = set()
        self.changed = threading.Condition()

    @contextlib.contextmanager
    def held(self, user: str, say: Progress) -> Iterator[None]:
        """Waits (saying so, once) until ``user`` may install, then holds a slot for the block;
        ``Conflict`` after ``SLOT_WAIT`` seconds (slow registries of others' features hold
        the slots: this start is refused, not left waiting)."""
        with self.changed:
            busy = self._busy(user)
            if not busy:
                self.users.add(user)
        if busy:
            say({"stage": "features", "message": f"waiting for {busy}"})
            with self.changed:
                if not self.changed.wait_for(lambda: not self._busy(user), timeout=SLOT_WAIT):
                    raise Conflict(
                        f"Installing features waited {SLOT_WAIT / 60:g} minutes for {busy}: "
                        "not started; try again later"
                    )
                self.users.add(user)
        try:
            yield
        finally:
            with self.changed:
                self.users.discard(user)
                self.changed.notify_all()

    def _busy(self, user: str) -> str:
        """What ``user``'s install waits for (held lock), or ``""``."""
        if user in self.users:
            return "your other start's features install to finish"
        if len(self.users) >= self.limit:
            return (
                "other starts' features installs to finish "
                f"(at most {self.limit} at once on this service)"
            )
        return ""


_INSTALLS = _Slots(MAX_FEATURES_INSTALLS)


def url_allowed(url: str, pattern: str) -> bool:
    """Whether ``url`` matches the allow-list entry ``pattern``: the same scheme and host
    (``*.example.com`` matches a subdomain, never another host whose path holds the name),
    and the path matching the pattern's path (fnmatch)."""
    given, allowed = urllib.parse.urlsplit(url), urllib.parse.urlsplit(pattern)
    if given.scheme != allowed.scheme or given.username or given.password:
        return False
    host, wanted = (given.netloc or "").lower(), (allowed.netloc or "").lower()
    if wanted.startswith("*."):
        if not host.endswith(wanted[1:]) or "/" in host:
            return False
    elif host != wanted:
        return False
    return fnmatch.fnmatchcase(given.path, allowed.path or "/")


def _fetch_url(
    request: spec.FeatureRequest,
    settings: Features,
    say: Progress,
    caps: tuple[str, ...] = (),
    *,
    shared: bool = False,
) -> spec.Resolved:
    """A feature from a tarball URL ``c.Features.allowed_urls`` allows. In shared mode, a URL
    only a wildcard entry allows (``https://*.example.org/...``: the user chose the host) is
    fetched from public addresses only, those checked (as a registry no administrator
    configured); a host the administrator named is fetched as configured."""
    ref = request.ref
    what = f"the feature {ref.written!r}"
    if not any(url_allowed(ref.written, pattern) for pattern in settings.allowed_urls):
        raise BadRequest(
            f"{what}: features from tarball URLs are fetched only where an administrator allows "
            "them (c.Features.allowed_urls); publish it to an OCI registry, or copy it under "
            ".devcontainer/ and name it './folder'",
            details={"feature": ref.written, "trait": "c.Features.allowed_urls"},
        )
    netloc = urllib.parse.urlsplit(ref.written).netloc
    named = any(
        url_allowed(ref.written, pattern)
        for pattern in settings.allowed_urls
        if not urllib.parse.urlsplit(pattern).netloc.startswith("*.")
    )
    say({"stage": "features", "message": f"fetching {ref.written}"})
    client = OCIClient(netloc, {}, what=what, public_only=shared and not named)
    try:
        data = client.download(ref.written, archives.MAX_TOTAL_BYTES + (1 << 20))
    finally:
        client.close()
    archive = archives.read_archive(io.BytesIO(data), what, compressed=True)
    return spec.Resolved(request, spec.meta_of(archive, what, allowed_caps=caps), archive)


def _layer(data: bytes, what: str) -> str:
    try:
        manifest = json.loads(data)
    except ValueError:
        raise BadRequest(f"{what}: the registry's manifest is not JSON") from None
    layers = manifest.get("layers") if isinstance(manifest, dict) else None
    found = [
        layer
        for layer in layers or []
        if isinstance(layer, dict) and layer.get("mediaType") == spec.LAYER_TYPE
    ]
    if len(found) != 1 or not isinstance(found[0].get("digest"), str):
        raise BadRequest(
            f"{what}: the registry's manifest has no one layer of type {spec.LAYER_TYPE}: is it "
            "a feature (the features-distribution specification)?"
        )
    digest = str(found[0]["digest"])
    if not re.match(r"^sha256:[a-f0-9]{64}\Z", digest):
        raise BadRequest(f"{what}: the layer's digest {digest[:80]!r} is not a sha256 digest")
    return digest


def _read_pins(env: Environment) -> dict[str, spec.Pin]:
    if env.config_dir is None:
        return {}
    where = os.path.join(env.source.rsplit("/", 1)[0], spec.LOCKFILE)
    with safefs.Folder.open_checked(env.config_dir) as folder:
        try:
            data = folder.read_bytes(spec.LOCKFILE, spec.MAX_METADATA_BYTES)
        except ValueError:
            raise BadRequest(f"{where} is over 1 MiB") from None
    return {} if data is None else spec.read_lockfile(data, where)


def _write_lockfile(
    env: Environment,
    fetched: list[spec.Resolved],
    pins: Mapping[str, spec.Pin],
    say: Progress,
    owner: tuple[int, int] | None = None,
) -> None:
    """Write the lockfile when there is none and some feature came from a registry (given to
    ``owner``, the workspace's user, where the shared service writes it)."""
    if env.config_dir is None or pins or not any(f.manifest_digest for f in fetched):
        return
    with safefs.Folder.open_checked(env.config_dir, owner) as folder:
        if folder.kind(spec.LOCKFILE) is not None:
            return
        try:
            folder.write_new(spec.LOCKFILE, [spec.render_lockfile(fetched)])
        except FileExistsError:
            return
    say({"stage": "features", "message": f"wrote {spec.LOCKFILE}: the features' digests pinned"})
