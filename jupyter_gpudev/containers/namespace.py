"""Each user's images on the shared service's engine: where gpudev tags what it
makes for them, which images it made for whom, and which images a user may name.

The engine is everyone's in shared mode, so what gpudev makes for a user is tagged under their
own repository, ``localhost/gpudev/USER/`` (``user_repository``): their snapshots
(``changes/snapshots.py``) and their environments' builds, ``localhost/gpudev/USER/env-NAME:
DIGEST``, DIGEST covering the Dockerfile, the build arguments and target, and every file of the
build context as the engine gets it (``build_digest``). A build found under that tag is used
only when gpudev's records say it built that very image for that user from that digest
(``BuildRecords``); otherwise it builds again. Whose an image is comes from gpudev's own state,
by image id (``<state_dir>/snapshots``, ``<state_dir>/builds``), never from labels (a LABEL
line or a pulled image can say anything).

No user names another's images (``UserImages.check``): not as an environment's ``image``, nor
in a Dockerfile (``FROM``, ``COPY --from``, ``RUN --mount=from=``, ``# syntax=``, ``ONBUILD``:
``references.py``). Refused, unless an administrator's ``c.EnvironmentManager.allowed_images``
pattern naming that namespace literally (starting with ``localhost/gpudev/`` or
``gpudev-env-``; a ``*`` allows no user's image) matches:

- a name under ``localhost/gpudev/`` but outside the user's own repository;
- an image the engine has (by whatever name, its id or a short id) that gpudev made for
  other users and not for this one;
- an image named by its id or a short id of it (hex digits, with or without ``sha256:``)
  that gpudev's records do not say is this user's (and with no tag an allow-list pattern
  matches): the records hold final images only, and an id also names the untagged images of
  another user's build steps (a classic build's ``COPY`` step holds their build context);
- an image one of whose other names (a tag, a repository digest's repository) is refused
  here, unless the records say it is this user's (the engine tags one build made for two
  users under both repositories); a features build's temporary name of its base
  (``features.BASE_REPOSITORY``), which any user's base has meanwhile, does not count;
- ``gpudev-env-*``: single-user mode's builds (and those of the service before this), whose
  owner is not known;
- a name gpudev cannot resolve (a variable it has no value for) before its repository is
  fixed: ``FROM ${BASE}`` is refused, ``FROM nvcr.io/nvidia/pytorch:${VERSION}`` checked as
  that repository.

In single-user mode none of this applies (``user_images`` is ``None``): the engine's images
are the user's own, and builds keep their tag ``gpudev-env-NAME:DIGEST`` (Dockerfile,
arguments and target only) and are reused when present.
"""

from __future__ import annotations

import fnmatch
import functools
import hashlib
import json
import os
import re
import tarfile
from collections.abc import Mapping, Sequence
from datetime import datetime, timezone
from pathlib import Path
from typing import IO, TYPE_CHECKING, Any

import docker
import docker.errors

from .. import safefs
from ..engine.context import read_checked_text
from ..engine.registries import repository_component
from ..environments import Environment, ImageNotAllowed, normalize_image_ref
from ..errors import BadRequest, ConfigError
from . import references
from .references import Named

if TYPE_CHECKING:
    from ..access import Access

#: Every user's images are tagged under ``LOCAL_ROOT/USER/`` in shared mode.
LOCAL_ROOT = "localhost/gpudev"
#: The repositories of single-user mode's environment builds (``gpudev-env-NAME``).
SINGLE_USER_BUILDS = "gpudev-env-"
#: The repositories of images gpudev makes outside users' own: single-user builds, features
#: images of single-user mode, and the name a verify build's image has while features are
#: installed on it (``changes.commit``), whose user is not in the name.
UNOWNED_BUILDS = (SINGLE_USER_BUILDS, "gpudev-features-", "gpudev-verify-")
#: The build arguments the engine predefines and leaves out of its build cache (lower case).
PROXY_ARGS = frozenset(f"{scheme}_proxy" for scheme in ("http", "https", "ftp", "no", "all"))
_IMAGE_ID_RE = re.compile(r"sha256:([0-9a-f]{64})\Z")
#: What the engine may read as an image's id or a short id of it (when no image has it as a
#: name): hex digits, with or without ``sha256:``.
_ID_LIKE_RE = re.compile(r"(?:sha256:)?([0-9a-f]+)\Z", re.IGNORECASE)
#: The temporary names of a features build's base (``features.BASE_REPOSITORY``), normalized:
#: a name the image read as the base has for the time of that build, whoever's build it is,
#: which says nothing of whose the image is (the name itself cannot be named: ``UNOWNED_BUILDS``).
_FEATURES_BASE_NAMES = "gpudev-features--base:"
#: The name a build's Dockerfile has in a context digest (a Dockerfile added to the context
#: from outside it has a random name there); no file in a context can have it.
_DOCKERFILE_MARK = "\0dockerfile"
#: The most of a ``.dockerignore`` read for a digest.
_IGNORE_LIMIT = 8 << 20
_CHUNK = 1 << 20


def user_repository(user: str) -> str:
    """``localhost/gpudev/USER``: the repository of ``user``'s images in shared mode. USER is
    the name when it is a valid repository component (lower case, ``alice``, ``gpudev-bob``),
    else its lower-case letters and digits with a short hash of the whole name
    (``engine.registries.repository_component``, as in the prefix a user pushes under)."""
    return f"{LOCAL_ROOT}/{repository_component(user)}"


def build_reference(environment: str, user: str, digest: str) -> str:
    """The tag of ``user``'s build of ``environment`` from ``digest`` (``build_digest``)."""
    repository = re.sub(r"[_.-]{2,}", "-", environment).strip("_.-") or "unnamed"
    return f"{user_repository(user)}/env-{repository}:{digest[:16]}"


def build_digest(args: dict[str, str], target: str | None, context: str) -> str:
    """sha256 over a build's arguments, its target and its context's digest
    (``context_digest``: the Dockerfile is in the context)."""
    what = {"args": dict(sorted(args.items())), "target": target or "", "context": context}
    return hashlib.sha256(json.dumps(what, sort_keys=True).encode()).hexdigest()


def context_digest(archive: IO[bytes], dockerfile: str) -> str:
    """A stable sha256 of the build context tar ``archive`` (as it is sent to the engine):
    each member's name, type, mode, link target and content, in name order; not its owner
    or times. ``dockerfile`` (the Dockerfile's name in it) counts under a name of its own.
    ``archive`` is left at its start."""
    archive.seek(0)
    entries: list[tuple[str, str, int, str, str]] = []
    with tarfile.open(fileobj=archive, mode="r:") as tar:
        for member in tar:
            content = ""
            data = tar.extractfile(member) if member.isreg() else None
            if data is not None:
                with data:
                    if member.name == ".dockerignore":
                        content = _ignore_digest(data.read(_IGNORE_LIMIT + 1), dockerfile)
                    else:
                        hasher = hashlib.sha256()
                        for chunk in iter(functools.partial(data.read, _CHUNK), b""):
                            hasher.update(chunk)
                        content = hasher.hexdigest()
            name = _DOCKERFILE_MARK if member.name == dockerfile else member.name
            kind = member.type.decode("ascii", "replace")
            entries.append((name, kind, member.mode & 0o7777, member.linkname, content))
    archive.seek(0)
    hasher = hashlib.sha256()
    for entry in sorted(entries):
        hasher.update(json.dumps(entry).encode() + b"\n")
    return hasher.hexdigest()


def _ignore_digest(data: bytes, dockerfile: str) -> str:
    """A ``.dockerignore``'s digest, a line naming the Dockerfile counted as the mark (a
    Dockerfile from outside the context is named there, with its random name)."""
    lines = data.decode("utf-8", "replace").split("\n")
    marked = [_DOCKERFILE_MARK if line.strip() == dockerfile else line for line in lines]
    return hashlib.sha256("\n".join(marked).encode()).hexdigest()


def _made() -> str:
    return datetime.now(timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")


def _write(folder: Path, relative: str, name: str, body: dict[str, str], what: str) -> None:
    """``body`` as JSON in ``folder/relative/name``, atomically (the state folder is trusted;
    nothing below it is followed); ``ConfigError`` naming the state folder when it cannot."""
    try:
        folder.mkdir(mode=0o700, parents=True, exist_ok=True)
        with safefs.Folder.open(folder) as top, top.folder(relative, create=True, mode=0o700) as at:
            at.replace(name, json.dumps(body).encode(), 0o600)
    except OSError as exc:
        raise ConfigError(
            f"Recording {what} in c.DevContainers.state_dir ({folder}) failed: "
            f"{exc.strerror or exc}"
        ) from exc


def _read(path: Path) -> dict[str, Any] | None:
    try:
        data = json.loads(path.read_text())
    except (OSError, ValueError):
        return None
    return data if isinstance(data, dict) else None


class SnapshotRecords:
    """The images gpudev made as snapshots, and for whom: one file per image id in
    ``<state_dir>/snapshots``, each written atomically (the server and the CLI share the
    folder). Image ids are digests of the image's configuration, so no other image has the id
    of one recorded here."""

    def __init__(self, state_dir: str | os.PathLike[str]) -> None:
        self.folder = Path(state_dir) / "snapshots"

    def _path(self, image_id: str) -> Path | None:
        found = _IMAGE_ID_RE.match(image_id)
        return self.folder / f"{found.group(1)}.json" if found else None

    def record(self, image_id: str, user: str, tag: str) -> None:
        """Keep that gpudev made ``image_id`` as ``user``'s snapshot, tagged ``tag``."""
        path = self._path(image_id)
        if path is None:
            raise ValueError(f"Not an image id: {image_id!r}")
        body = {"user": user, "tag": tag, "made": _made()}
        _write(self.folder, "", path.name, body, f"the snapshot {tag}")

    def owner(self, image_id: str) -> str | None:
        """The user gpudev made ``image_id`` for as a snapshot; ``None`` if it did not."""
        path = self._path(image_id)
        data = _read(path) if path is not None else None
        user = data.get("user") if data is not None else None
        return user if isinstance(user, str) else None


class BuildRecords:
    """The environment images gpudev built, for whom and from what: a folder per image id in
    ``<state_dir>/builds``, a file per user in it (two users' builds from the same Dockerfile
    and files can be the same image)."""

    def __init__(self, state_dir: str | os.PathLike[str]) -> None:
        self.folder = Path(state_dir) / "builds"

    @staticmethod
    def _names(image_id: str, user: str) -> tuple[str, str] | None:
        found = _IMAGE_ID_RE.match(image_id)
        if found is None:
            return None
        return found.group(1), hashlib.sha256(user.encode()).hexdigest()[:32] + ".json"

    def record(
        self, image_id: str, user: str, *, environment: str, digest: str, reference: str
    ) -> None:
        """Keep that gpudev built ``image_id`` for ``user`` as ``reference``, their
        environment ``environment`` from ``digest`` (``build_digest``)."""
        names = self._names(image_id, user)
        if names is None:
            raise ValueError(f"Not an image id: {image_id!r}")
        body = {
            "user": user,
            "environment": environment,
            "digest": digest,
            "reference": reference,
            "made": _made(),
        }
        _write(self.folder, names[0], names[1], body, f"the build {reference}")

    def digest(self, image_id: str, user: str) -> str | None:
        """What gpudev built ``image_id`` from for ``user`` (``build_digest``); ``None`` if it
        did not build it for them."""
        names = self._names(image_id, user)
        data = _read(self.folder / names[0] / names[1]) if names is not None else None
        if data is None or data.get("user") != user:
            return None
        digest = data.get("digest")
        return digest if isinstance(digest, str) else None

    def users(self, image_id: str) -> set[str]:
        """Everyone gpudev built ``image_id`` for."""
        found = _IMAGE_ID_RE.match(image_id)
        if found is None:
            return set()
        try:
            paths = list((self.folder / found.group(1)).glob("*.json"))
        except OSError:
            return set()
        users = {(_read(path) or {}).get("user") for path in paths}
        return {user for user in users if isinstance(user, str)}


class UserImages:
    """One user's images in shared mode: their builds' tags and records, and the check that
    an image they name is not another user's (see the module)."""

    def __init__(
        self, user: str, state_dir: str | os.PathLike[str], allowed: Sequence[str] = ()
    ) -> None:
        self.user = user
        self.repository = user_repository(user)
        self.snapshots = SnapshotRecords(state_dir)
        self.builds = BuildRecords(state_dir)
        #: The patterns of ``c.EnvironmentManager.allowed_images`` that name users' images.
        self.allowed = tuple(
            p for p in allowed if p.startswith((f"{LOCAL_ROOT}/", SINGLE_USER_BUILDS))
        )

    def owners(self, image_id: str) -> set[str]:
        """The users gpudev made ``image_id`` for (snapshots and builds)."""
        owner = self.snapshots.owner(image_id)
        return self.builds.users(image_id) | ({owner} if owner else set())

    def reusable(self, client: docker.DockerClient, reference: str, digest: str) -> str | None:
        """The id of the image the engine has as ``reference`` when gpudev built it for this
        user from ``digest``; ``None`` (build it) otherwise."""
        image_id = _image_id(client, reference)
        if image_id is None or self.builds.digest(image_id, self.user) != digest:
            return None
        return image_id

    def check(self, client: docker.DockerClient | None, reference: str, what: str) -> None:
        """``ImageNotAllowed`` when ``reference`` (named by ``what``) is another user's image
        (see the module); with ``client``, the image the engine has by that name counts."""
        self.check_named(client, Named(reference, reference, reference, what))

    def check_environment(self, client: docker.DockerClient | None, env: Environment) -> None:
        """``check`` for the image ``env`` names, or the images its Dockerfile names (read
        now, no link followed; the build checks the Dockerfile it sends again)."""
        if env.build is None:
            self.check(client, env.image_ref(), f"The environment {env.name!r}")
            return
        text = read_checked_text(env.build.dockerfile)
        what = f"The Dockerfile of {env.name!r}"
        self.check_dockerfile(client, text, dict(env.build.args), what)

    def check_build_args(self, args: Mapping[str, str], what: str) -> None:
        """``BadRequest`` for a proxy build argument: the engine leaves those out of its build
        cache (classic and BuildKit), so a step run through one user's proxy would be the
        cached step of another user's build of the same lines."""
        proxies = sorted(name for name in args if name.lower() in PROXY_ARGS)
        if proxies:
            raise BadRequest(
                f"{what} sets {proxies[0]}: the gpudev service does not take proxy build "
                "arguments, which the engine leaves out of its build cache (a step through your "
                "proxy would be the cached step of another user's build). Ask the administrator "
                "for the engine's proxy",
                details={"argument": proxies[0]},
            )

    def check_dockerfile(
        self, client: docker.DockerClient | None, text: str, args: dict[str, str], what: str
    ) -> None:
        """``ImageNotAllowed`` when the Dockerfile ``text`` (``what``: whose), built with
        ``args``, names another user's image, or one whose name it leaves to a variable gpudev
        cannot resolve; ``BadRequest`` when it mounts a build cache (``shared_mount``) or
        has the engine fetch a source (``engine_fetch``); the ``ONBUILD`` triggers of its
        base images the engine has count."""
        for where in references.shared_mounts(text):
            raise shared_mount(f"{what}, {where}")
        for where in references.remote_sources(text, args):
            raise engine_fetch(f"{what}, {where}")
        for named in references.images(text, args):
            self.check_named(client, replace_where(named, f"{what}, {named.where}"))

    def check_named(self, client: docker.DockerClient | None, named: Named) -> None:
        """``check`` for one name of a Dockerfile (``references.Named``)."""
        if named.resolved is None:
            self._check_unresolved(named)
            return
        reference = named.resolved.strip()
        image = _image(client, reference) if client is not None else None
        tags = [str(tag) for tag in (image.tags if image is not None else [])]
        if self._allowed([reference, *tags]):
            return
        self._check_name(reference, named.where)
        if image is None:
            whole = _whole_id(reference)  # (no engine, or it has none: known from the records)
            if whole is not None and self.user not in self.owners(whole):
                raise self._by_id(named.where, reference)
            return
        owners = self.owners(str(image.id))
        if owners and self.user not in owners:
            raise self._refused(
                named.where,
                f"{reference}, an image gpudev made for another user",
                {"image": reference},
            )
        if self.user not in owners:
            self._check_names_of(image, reference, tags, named.where)
        if named.base:
            triggers = (image.attrs.get("Config") or {}).get("OnBuild") or []
            written = [str(trigger) for trigger in triggers]
            for where in references.trigger_shared_mounts(written, reference):
                raise shared_mount(f"{named.where}: {where}")
            for where in references.trigger_remote_sources(written, reference):
                raise engine_fetch(f"{named.where}: {where}")
            for trigger in references.trigger_images([str(t) for t in triggers], reference):
                self.check_named(client, replace_where(trigger, f"{named.where}: {trigger.where}"))

    def _check_names_of(self, image: Any, reference: str, tags: list[str], where: str) -> None:
        """Refuse ``image`` (not this user's; named ``reference``, tagged ``tags``) when it is
        named by its id or a short id, or when another of its names is refused (a tag, the
        repository of a digest): the name written is not all that says whose an image is."""
        if _by_id(reference, tags):
            raise self._by_id(where, reference)
        digests = [str(digest) for digest in image.attrs.get("RepoDigests") or []]
        for name in [*tags, *digests]:
            if not normalize_image_ref(name).startswith(_FEATURES_BASE_NAMES):
                self._check_name(name, where, written=reference)

    def _allowed(self, names: list[str]) -> bool:
        """Whether a pattern of the allow-list naming users' images matches one of ``names``."""
        return any(
            fnmatch.fnmatchcase(candidate, pattern)
            for name in names
            for candidate in {name, normalize_image_ref(name)}
            for pattern in self.allowed
        )

    def _check_name(self, reference: str, where: str, written: str | None = None) -> None:
        """Refuse a name under another user's repository, or of single-user mode's builds;
        ``written``: the name the user wrote, when ``reference`` is another name of the image
        it names."""
        shown = reference if written is None else f"{written} (an image also named {reference})"
        details = {"image": reference if written is None else written}
        name = normalize_image_ref(reference).lower()
        repository = name.split("@", 1)[0]
        if ":" in repository.rsplit("/", 1)[-1]:
            repository = repository.rsplit(":", 1)[0]
        if repository == LOCAL_ROOT or repository.startswith(f"{LOCAL_ROOT}/"):
            if not repository.startswith(f"{self.repository}/"):
                raise self._refused(
                    where,
                    f"{shown}, an image of another user ({LOCAL_ROOT}/ holds each user's "
                    f"images; yours are under {self.repository}/)",
                    details,
                )
        elif repository.startswith(UNOWNED_BUILDS):
            raise self._refused(
                where,
                f"{shown}, an image gpudev built outside users' own repositories (a "
                "single-user server's environment or features build, or a verify build in "
                "progress): whose it is is not known, and it may be another user's. Build your "
                "environment from its Dockerfile instead",
                details,
            )

    def _check_unresolved(self, named: Named) -> None:
        """A name known only up to a variable: checked as its repository when that is fixed
        (a tag or digest follows it), refused otherwise."""
        prefix = named.prefix.strip()
        last = prefix.rsplit("/", 1)[-1]
        if "@" in prefix or ":" in last:
            repository = prefix.split("@", 1)[0].rsplit(":", 1)[0]
            self._check_name(f"{repository}:x", named.where)
            return
        raise self._refused(
            named.where,
            f"{named.written}, whose name gpudev cannot tell (it has no value for a variable "
            "in it, and it could be another user's image): write the image's name, or give "
            "the variable a value with an ARG default or the build's args",
            {"image": named.written},
        )

    def _by_id(self, where: str, reference: str) -> ImageNotAllowed:
        """The refusal of an image named by its id or a short id that is not this user's."""
        return self._refused(
            where,
            f"{reference}, an image id: in shared mode images are named by name, not by id "
            "(an id can name another user's image, or a step of their build, which no name "
            f"does). Name the image by its name; yours are under {self.repository}/, and your "
            "own builds and snapshots may be named by id too",
            {"image": reference},
        )

    @staticmethod
    def _refused(where: str, why: str, details: dict[str, str]) -> ImageNotAllowed:
        return ImageNotAllowed(
            f"{where} names {why}. One user's images cannot be used by another unless an "
            f"administrator allows them in c.EnvironmentManager.allowed_images (with a "
            f"pattern starting with {LOCAL_ROOT}/)",
            details=details,
        )


def shared_mount(where: str) -> BadRequest:
    """The refusal of a build cache mount (``where``: which line): BuildKit keeps a cache
    mount's files between builds, every user's builds on the engine alike, under the mount's
    id (its target when it has none), so one user's build would read what another's left."""
    return BadRequest(
        f"{where}: the gpudev service does not take build cache mounts (RUN "
        "--mount=type=cache): the engine keeps their files for every user's builds alike, so "
        "another user's build could put files in yours. Leave the mount out (a type written "
        "with a variable counts as one)",
        details={"mount": "cache"},
    )


def engine_fetch(where: str) -> BadRequest:
    """The refusal of an ``ADD`` the engine would fetch itself (``where``: which line): it
    connects from the host's network, as root, to whatever the URL names: another user's
    container ports (which ``GPUDEV-PORTS`` keeps other accounts from), the host's loopback."""
    return BadRequest(
        f"{where}: the gpudev service does not take ADD from a URL or a git remote (or a "
        "source it cannot resolve): the engine fetches it itself, from the host's network as "
        "root, where your containers cannot reach. Download it in a RUN step instead (RUN "
        "curl ..., or pip, git)",
        details={"instruction": "ADD"},
    )


def replace_where(named: Named, where: str) -> Named:
    """``named``, said to be ``where``."""
    return Named(named.written, named.resolved, named.prefix, where, named.base)


def user_images(access: Access, state_dir: str, allowed: Sequence[str]) -> UserImages | None:
    """The images of ``access``'s user in shared mode; ``None`` in single-user mode."""
    return None if access.single_user else UserImages(access.user, state_dir, allowed)


def planned_image(
    client: docker.DockerClient | None, env: Environment, mine: UserImages | None
) -> str:
    """The image a plan (``--dry-run``) names for ``env``, checked first in shared mode."""
    if mine is not None:
        mine.check_environment(client, env)
    return env.image_ref()


def _image(client: docker.DockerClient, reference: str) -> Any:
    """The image the engine has as ``reference`` (a name, an id or a short id), or ``None``
    (also for a name the engine cannot read as one: it has no image by it)."""
    try:
        return client.images.get(reference)
    except (docker.errors.ImageNotFound, docker.errors.NullResource):
        return None
    except docker.errors.APIError as exc:
        if exc.status_code == 400:
            return None
        raise


def _whole_id(reference: str) -> str | None:
    """``sha256:HEX``, when ``reference`` is an image's whole id (with or without ``sha256:``),
    which the engine reads as an id only."""
    found = _ID_LIKE_RE.match(reference.strip())
    hexadecimal = found.group(1).lower() if found else ""
    return f"sha256:{hexadecimal}" if len(hexadecimal) == 64 else None


def _by_id(reference: str, tags: Sequence[str]) -> bool:
    """Whether the engine found the image tagged ``tags`` by its id or a short id of it as
    ``reference``, not by a name of it (a name may look like a short id: ``deadbeef``, which
    the engine reads as a name first; ``sha256:...`` and 64 hex digits are ids only)."""
    found = _ID_LIKE_RE.match(reference.strip())
    if found is None:
        return False
    if len(found.group(1)) == 64 or reference.strip().lower().startswith("sha256:"):
        return True
    normalized = normalize_image_ref(reference).lower()
    return normalized not in {normalize_image_ref(tag).lower() for tag in tags}


def _image_id(client: docker.DockerClient, reference: str) -> str | None:
    image = _image(client, reference)
    return str(image.id) if image is not None else None
