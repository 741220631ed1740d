"""Registries: image references, the credentials for a registry, push and pull with progress.

Credentials come, in this order, from ``c.Registries.credentials`` (a password file, never a
password in a log) or from the user's Docker client configuration (``$DOCKER_CONFIG`` or
``~/.docker/config.json``: ``auths`` written by ``docker login``, ``credsStore`` and
``credHelpers``), read again for every push or pull so that a ``docker login`` made after the
server started counts. They go to the engine in its ``X-Registry-Auth`` header and nowhere else:
never logged, never in an error, never in an answer.

In shared mode (``Registries.user`` is the user a view acts for) those credentials are the
service's, not the user's, so they act for a user only where an administrator says:

- a pull uses them only for an image ``shared_pull_images`` names; any other pull is made
  without credentials, and says so. (``c.EnvironmentManager.allowed_images`` says which images
  may run at all; this, which of those the service's credentials fetch.) The service's builds
  send the engine no credentials at all (``withhold_build_credentials``; docker-py would send
  the classic builder the whole Docker configuration, and gpudev's BuildKit session serves
  none): the images a build names are pulled here first, under the same rule
  (``containers.images.fetch_named``);
- a push goes only under the user's own prefix of each registry (``push_prefix``,
  ``REGISTRY/USER/...`` by default), whatever the credentials (``Forbidden`` elsewhere).

USER is the user's name as one repository path component (``repository_component``).

The engine answers a push or pull with HTTP 200 and reports failures inside the stream; each
such event is an error here (``RegistryError``), with the registry's own words and what the user
can do about it.
"""

from __future__ import annotations

import fnmatch
import hashlib
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import docker
import docker.errors
from docker import auth as docker_auth
from traitlets import Dict, List, TraitError, Unicode, validate
from traitlets.config import LoggingConfigurable

from ..errors import ENGINE_FAILURES, BadRequest, ConfigError, Forbidden, GPUDevError
from .buildkit import Progress
from .oci import private_host

#: Where the credentials of a push or pull came from, for a host added at run time: none.
ADDED_HOST = "none: a host added at run time is never sent registry credentials"


#: Where the credentials of a pull came from, in shared mode, for an image the service's
#: credentials may not fetch.
NOT_SHARED = "none: the gpudev service's credentials fetch only c.Registries.shared_pull_images"
#: What stands for the user's name in ``push_prefix`` and ``shared_pull_images``.
USER_FIELD = "{user}"


class _Nothing(docker_auth.AuthConfig):
    """An auth configuration that is never empty and resolves nothing. docker-py reloads
    ``~/.docker/config.json`` whenever a client's configuration is empty (before every build,
    for ``X-Registry-Config``, and before a pull or push without ``auth_config``)."""

    def __init__(self) -> None:
        super().__init__({"auths": {}})

    @property
    def is_empty(self) -> bool:
        return False

    def resolve_authconfig(self, registry: str | None = None) -> None:  # noqa: ARG002
        return None

    def get_all_credentials(self) -> dict[str, Any]:
        return {}


class NoCredentials(_Nothing):
    """The auth configuration of a client that must never send registry credentials (a host a
    user added at run time)."""


class NoBuildCredentials(_Nothing):
    """The auth configuration of the shared service's clients: a build sends the engine no
    registry credentials (``X-Registry-Config``); pulls and pushes carry what ``Registries``
    gives them."""


def withhold_credentials(client: docker.DockerClient) -> None:
    """Make ``client`` send no registry credentials, whatever the user running it has."""
    client.api._auth_configs = NoCredentials()  # type: ignore[attr-defined]


def withhold_build_credentials(client: docker.DockerClient) -> None:
    """Make ``client``'s builds send no registry credentials (the shared service's clients);
    a client that sends none at all stays so."""
    if sends_credentials(client):
        client.api._auth_configs = NoBuildCredentials()  # type: ignore[attr-defined]


def sends_credentials(client: docker.DockerClient) -> bool:
    """Whether pushes and pulls through ``client`` may carry registry credentials."""
    return not isinstance(getattr(client.api, "_auth_configs", None), NoCredentials)


#: The registries users of the shared service may name by default (``shared_registries``):
#: public ones whose hosts no user controls.
SHARED_REGISTRIES = (
    "docker.io",
    "index.docker.io",
    "registry-1.docker.io",
    "nvcr.io",
    "ghcr.io",
    "quay.io",
    "registry.k8s.io",
    "gcr.io",
    "*.gcr.io",
    "*.pkg.dev",
    "public.ecr.aws",
    "mcr.microsoft.com",
)

#: ``[registry/]path[:tag]``, lower-case path components as the distribution spec has them.
_REFERENCE_RE = re.compile(
    r"^(?:(?P<registry>(?:[a-zA-Z0-9-]+\.)*[a-zA-Z0-9-]+(?::[0-9]{1,5})?|\[[0-9a-fA-F:]+\](?::[0-9]{1,5})?)/)?"
    r"(?P<path>[a-z0-9]+(?:(?:[._]|__|-+)[a-z0-9]+)*(?:/[a-z0-9]+(?:(?:[._]|__|-+)[a-z0-9]+)*)*)"
    r"(?::(?P<tag>[A-Za-z0-9_][A-Za-z0-9_.-]{0,127}))?\Z"
)
_PATH_RE = re.compile(
    r"^[a-z0-9]+(?:(?:[._]|__|-+)[a-z0-9]+)*(?:/[a-z0-9]+(?:(?:[._]|__|-+)[a-z0-9]+)*)*\Z"
)
#: One repository path component.
_COMPONENT_RE = re.compile(r"[a-z0-9]+(?:(?:[._]|__|-+)[a-z0-9]+)*\Z")
_AUTH_WORDS = ("unauthorized", "authentication required", "no basic auth", "denied", "401")


def repository_component(user: str) -> str:
    """``user``'s name as one repository path component: the name itself when it is one (lower
    case, ``alice``, ``gpudev-bob``), else its lower-case letters and digits with a short hash
    of the whole name (``Alice@example.com``: ``alice-example-com-`` and 8 hex digits)."""
    if _COMPONENT_RE.match(user):
        return user
    readable = re.sub(r"[^a-z0-9]+", "-", user.lower()).strip("-") or "user"
    return f"{readable}-{hashlib.sha256(user.encode()).hexdigest()[:8]}"


def normalize_image_ref(ref: str) -> str:
    """The spelling used to compare references: ``:latest`` explicit, Docker Hub prefix dropped."""
    name, at, digest = ref.strip().partition("@")
    if not at and ":" not in name.rsplit("/", 1)[-1]:
        name += ":latest"
    for prefix in ("docker.io/", "index.docker.io/", "registry-1.docker.io/"):
        if name.startswith(prefix):
            name = name[len(prefix) :]
            break
    name = name.removeprefix("library/")
    return name + at + digest


class RegistryError(GPUDevError):
    """A push or pull that the registry or the engine refused."""

    status = 502
    exit_code = 4
    code = "registry"


@dataclass(frozen=True)
class Reference:
    """An image reference split into its registry, repository and tag."""

    registry: str
    repository: str
    tag: str

    @property
    def name(self) -> str:
        return f"{self.repository}:{self.tag}"

    @property
    def path(self) -> str:
        """The repository's path in its registry: ``team/x`` of ``127.0.0.1:5000/team/x``."""
        return self.repository.removeprefix(f"{self.registry}/")

    @classmethod
    def parse(cls, ref: str) -> Reference:
        """Parse ``[registry/]path[:tag]`` (tag ``latest`` when none); a clear error otherwise."""
        match = _REFERENCE_RE.match(ref or "")
        first = (ref or "").split("/", 1)[0]
        invalid = BadRequest(
            f"{ref!r} is not an image reference: expected [REGISTRY/]NAME[:TAG], with NAME "
            "in lower case (e.g. 127.0.0.1:5000/team/pytorch:v2)",
            details={"reference": ref},
        )
        if match is None or len(ref) > 255:
            raise invalid
        registry = match.group("registry")
        # A first component without '.', ':' or 'localhost' is a Docker Hub path, not a host.
        if registry and "." not in first and ":" not in first and first != "localhost":
            registry = None
        repository = ref.rsplit(":", 1)[0] if match.group("tag") else ref
        if registry is None and not _PATH_RE.match(repository):
            raise invalid  # a Docker Hub path: its first part is a lower-case name too
        registry_name = registry or docker_auth.INDEX_NAME
        return cls(registry_name, repository, match.group("tag") or "latest")


class Registries(LoggingConfigurable):
    """Credentials for image registries (push of snapshots, pull of environment images), and in
    shared mode what they do for each user (see the module)."""

    credentials = Dict(
        per_key_traits=None,
        default_value={},
        help="""Credentials per registry host, used instead of the Docker client
        configuration for that registry, e.g.
        {"registry.example.com": {"username": "ci", "password_file": "/run/secrets/registry"}}.
        Keys: username with password_file (read for each push or pull) or password, or
        identity_token. Registries not listed use $DOCKER_CONFIG/config.json or
        ~/.docker/config.json (docker login, credsStore, credHelpers).""",
    ).tag(config=True)

    shared_pull_images = List(
        Unicode(),
        default_value=[],
        help="""Shared mode (jupyter gpudev serve): the images the service's registry
        credentials (c.Registries.credentials and the service's Docker configuration) may
        fetch for its users, as fnmatch patterns ('*' also matches '/'), {user} standing for
        the user's name as a repository component (as in push_prefix), e.g.
        ["nvcr.io/nvidia/*", "registry.example.com/{user}/*"]. Every other pull, of an
        environment's image or of a base image a build names, is made without credentials
        (and says so when it fails): the service's builds never send the engine credentials.
        c.EnvironmentManager.allowed_images says which images may run at all; this, which of
        them the service's credentials fetch. Default: none. Single-user mode ignores it.""",
    ).tag(config=True)

    shared_registries = List(
        Unicode(),
        default_value=list(SHARED_REGISTRIES),
        help="""Shared mode: the registries (host[:port], fnmatch patterns) users' images,
        base images and pushes may name, besides those the administrator configured
        credentials for. The engine, root on the host, follows whatever redirect a registry
        answers with (to the host's loopback or private network, carrying a push's body) and
        resolves its name again itself: a registry users may name must be one no user
        controls. Default: Docker Hub, nvcr.io, ghcr.io, quay.io, registry.k8s.io, gcr.io and
        *.gcr.io, *.pkg.dev, public.ecr.aws, mcr.microsoft.com. Single-user mode ignores
        it.""",
    ).tag(config=True)

    push_prefix = Unicode(
        f"{USER_FIELD}/",
        help="""Shared mode: where in each registry a user may push (commit --push), whatever
        the credentials: a repository path starting with this, {user} standing for the user's
        name as a repository component (their name when it is one, e.g. gpudev-alice pushes to
        registry.example.com/gpudev-alice/env:1; else its lower-case letters and digits with a
        short hash of the name). Path components ending with "/", one of them {user}
        ("team/{user}/"). A push elsewhere is refused (403). Single-user mode ignores it.""",
    ).tag(config=True)

    #: The user a shared service's view acts for (``shared_pull_images`` and ``push_prefix``
    #: apply); ``None`` in single-user mode.
    user: str | None = None

    @validate("push_prefix")
    def _valid_prefix(self, proposal: Any) -> str:
        value = str(proposal["value"])
        parts = value.split("/")
        if (
            parts[-1] != ""
            or USER_FIELD not in parts
            or not all(p == USER_FIELD or _COMPONENT_RE.match(p) for p in parts[:-1])
        ):
            raise TraitError(
                f"c.Registries.push_prefix must be repository path components ending with "
                f"'/', one of them {USER_FIELD} (e.g. '{USER_FIELD}/' or 'team/{USER_FIELD}/'), "
                f"not {value!r}"
            )
        return value

    # -- what the service's credentials do for a user (shared mode) -----------------------------

    def user_prefix(self) -> str:
        """The repository path under which the user pushes (``push_prefix``); "" in
        single-user mode."""
        if self.user is None:
            return ""
        return self.push_prefix.replace(USER_FIELD, repository_component(self.user))

    def check_push(self, ref: str) -> None:
        """``Forbidden`` when, in shared mode, ``ref`` is not under the user's own prefix of
        its registry (``push_prefix``); ``BadRequest`` when it is no image reference."""
        reference = Reference.parse(ref)
        prefix = self.user_prefix()
        if self.user is None or reference.path.startswith(prefix):
            return
        where = f"{reference.registry}/{prefix}"
        raise Forbidden(
            f"{ref} is not under your own prefix {where}: the gpudev service pushes your "
            f"images only there (c.Registries.push_prefix), e.g. to "
            f"{where}{reference.path.rsplit('/', 1)[-1]}:{reference.tag}",
            details={"reference": ref, "prefix": where},
        )

    def check_reachable(self, ref: str) -> None:
        """Shared mode: ``BadRequest`` when ``ref``'s registry is at a loopback, private or
        link-local address the administrator configured nothing for (``credentials``, the
        service's Docker configuration, ``shared_pull_images``): a user's reference must not
        have the engine (root, on the host) connect into the host's own networks. A name that
        does not resolve here is left to the engine, which fails the same way."""
        if self.user is None or self.pulls_with_credentials(ref):
            return
        self.check_registry_reachable(self.registry_of(ref), ref)

    def check_registry_reachable(self, registry: str, what: str) -> None:
        """``check_reachable`` for the registry host (and port) ``registry`` of a reference
        known only up to a variable (``what``: how it is written)."""
        if self.user is None:
            return
        if registry in self.credentials or self.auth_for(registry)[1] != "none":
            return
        if private_host(registry):
            raise BadRequest(
                f"{what}: its registry {registry} is not at a public address, and the gpudev "
                "service's administrator has not configured it (c.Registries.credentials, "
                "c.Registries.shared_pull_images)",
                details={"registry": registry},
            )
        if not any(
            fnmatch.fnmatchcase(registry.lower(), p.lower()) for p in self.shared_registries
        ):
            raise BadRequest(
                f"{what}: its registry {registry} is not one the gpudev service lets its users "
                "reach: ask an administrator to add it (c.Registries.shared_registries), or "
                "use an image of a listed registry",
                details={"registry": registry},
            )

    @staticmethod
    def registry_of(ref: str) -> str:
        """The registry host (and port) of the image reference ``ref``. A first component
        with an upper-case letter is a host, as newer engines read it (a path is lower
        case)."""
        if "@" not in ref:
            return Reference.parse(ref).registry
        name = ref.split("@", 1)[0]
        first = name.split("/", 1)[0]
        if "/" in name and first != first.lower():
            return first
        return str(docker_auth.resolve_repository_name(name)[0])

    def pulls_with_credentials(self, ref: str) -> bool:
        """Whether a pull of ``ref`` may carry credentials: always in single-user mode; in
        shared mode when a ``shared_pull_images`` pattern matches it."""
        if self.user is None:
            return True
        user = repository_component(self.user)
        names = {ref.strip(), normalize_image_ref(ref)}
        return any(
            fnmatch.fnmatchcase(name, pattern.replace(USER_FIELD, user))
            for pattern in self.shared_pull_images
            for name in names
        )

    def auth_for(self, registry: str) -> tuple[dict[str, str], str]:
        """The auth config for ``registry`` and where it came from (said in errors).

        An empty dict when none is known: the engine then tries without credentials.
        """
        configured = self.credentials.get(registry)
        if configured is not None:
            return self._configured(registry, configured), "c.Registries.credentials"
        try:
            loaded = docker_auth.load_config()
            found = docker_auth.resolve_authconfig(loaded, registry)
        except (docker.errors.DockerException, OSError, ValueError) as exc:
            self.log.warning("Reading the Docker credentials for %s failed: %s", registry, exc)
            found = None
        if not found:
            return {}, "none"
        auth = {k: str(v) for k, v in found.items() if v}
        if "IdentityToken" in found:
            auth = {"identitytoken": str(found["IdentityToken"])}
        return auth, "the Docker client configuration"

    @staticmethod
    def _configured(registry: str, entry: Any) -> dict[str, str]:
        if not isinstance(entry, dict):
            raise ConfigError(f"c.Registries.credentials[{registry!r}] must be a dict")
        if entry.get("identity_token"):
            return {"identitytoken": str(entry["identity_token"])}
        username = entry.get("username")
        password = entry.get("password")
        if entry.get("password_file"):
            try:
                password = Path(str(entry["password_file"])).read_text().strip()
            except OSError as exc:
                raise ConfigError(
                    f"Reading the password file for {registry} failed: {exc.strerror}"
                ) from exc
        if not username or not password:
            raise ConfigError(
                f"c.Registries.credentials[{registry!r}] needs username and password_file "
                "(or password, or identity_token)"
            )
        return {"username": str(username), "password": str(password), "serveraddress": registry}

    # -- push and pull ------------------------------------------------------------------------

    def _auth(self, client: docker.DockerClient, registry: str) -> tuple[dict[str, str], str]:
        if not sends_credentials(client):
            return {}, ADDED_HOST
        return self.auth_for(registry)

    def push(self, client: docker.DockerClient, ref: str, say: Progress) -> str:
        """Push ``ref`` with progress; returns the pushed manifest digest ("" if not told). In
        shared mode only under the user's prefix (``check_push``), to a registry at a public
        address or one the administrator configured (``check_reachable``)."""
        self.check_push(ref)
        self.check_reachable(ref)
        reference = Reference.parse(ref)
        auth, source = self._auth(client, reference.registry)
        say({"stage": "push", "message": f"pushing {ref} to {reference.registry}"})
        layers = _LayerProgress("push", say)
        digest = ""
        try:
            events = client.api.push(
                reference.repository,
                tag=reference.tag,
                stream=True,
                decode=True,
                auth_config=auth,
            )
            for event in events:
                if "error" in event or "errorDetail" in event:
                    raise self._refused("push", ref, reference.registry, event, source)
                aux = event.get("aux") or {}
                if isinstance(aux, dict) and aux.get("Digest"):
                    digest = str(aux["Digest"])
                layers.update(event)
        except ENGINE_FAILURES as exc:
            raise self._refused(
                "push", ref, reference.registry, {"error": _explanation(exc)}, source
            ) from exc
        say({"stage": "push", "message": f"pushed {ref} {digest}".rstrip()})
        return digest

    def pull(self, client: docker.DockerClient, ref: str, say: Progress) -> None:
        """Pull ``ref`` with the registry's credentials and progress; in shared mode without
        them unless ``shared_pull_images`` allows it (``pulls_with_credentials``), and only
        from a registry users may reach (``check_reachable``: every pull a user's reference
        makes comes here, an environment's image as a Dockerfile's base)."""
        self.check_reachable(ref)
        registry = self.registry_of(ref)
        if self.pulls_with_credentials(ref):
            auth, source = self._auth(client, registry)
            say({"stage": "pull", "message": f"pulling {ref}"})
        else:
            auth, source = {}, NOT_SHARED
            say(
                {
                    "stage": "pull",
                    "message": f"pulling {ref} without the gpudev service's credentials "
                    "(c.Registries.shared_pull_images does not name it)",
                }
            )
        layers = _LayerProgress("pull", say)
        try:
            for event in client.api.pull(ref, stream=True, decode=True, auth_config=auth):
                if "error" in event or "errorDetail" in event:
                    raise self._refused("pull", ref, registry, event, source)
                layers.update(event)
        except ENGINE_FAILURES as exc:
            failed = {"error": _explanation(exc)}
            raise self._refused("pull", ref, registry, failed, source) from exc

    def _refused(
        self, verb: str, ref: str, registry: str, event: dict[str, Any], source: str
    ) -> RegistryError:
        detail = event.get("errorDetail") or {}
        words = str(detail.get("message") or event.get("error") or "unknown error").strip()
        self.log.warning("%s of %s failed: %s", verb.capitalize(), ref, words)
        lowered = words.lower()
        if any(w in lowered for w in _AUTH_WORDS):
            if source == NOT_SHARED:
                hint = (
                    "it was pulled without the gpudev service's credentials, which fetch "
                    "only the images an administrator allows (c.Registries.shared_pull_images): "
                    "ask them to allow it, or name an image that needs no credentials"
                )
            elif source == ADDED_HOST:
                hint = (
                    "a host added at run time is never sent registry credentials: push or "
                    "pull from a configured host (c.HostPool.hosts)"
                )
            elif source == "none":
                hint = (
                    f"no credentials are known for {registry}: run `docker login {registry}` "
                    "as the user running Jupyter, or set c.Registries.credentials"
                )
            else:
                hint = (
                    f"check the credentials for {registry} in {source} "
                    f"(`docker login {registry}` replaces them)"
                )
            return RegistryError(
                f"The registry {registry} refused the {verb} of {ref}: {words}; {hint}",
                details={"reference": ref, "registry": registry, "credentials": source},
            )
        unshared = (
            " (pulled without the gpudev service's credentials: "
            "c.Registries.shared_pull_images does not name it)"
            if source == NOT_SHARED
            else ""
        )
        return RegistryError(
            f"The {verb} of {ref} to {registry} failed: {words}"
            if verb == "push"
            else f"Pulling {ref} from {registry} failed: {words}{unshared}",
            details={"reference": ref, "registry": registry},
        )


def _explanation(exc: Exception) -> str:
    if isinstance(exc, docker.errors.APIError):
        return str(exc.explanation or exc)
    return str(exc)


class _LayerProgress:
    """Per-layer push/pull events summed into one progress figure (bytes done of known)."""

    def __init__(self, stage: str, say: Progress) -> None:
        self.stage = stage
        self.say = say
        self.layers: dict[str, tuple[int, int]] = {}

    def update(self, event: dict[str, Any]) -> None:
        layer = str(event.get("id") or "")
        status = str(event.get("status") or "")
        detail = event.get("progressDetail") or {}
        current, total = detail.get("current"), detail.get("total")
        if layer and isinstance(current, int) and isinstance(total, int) and total > 0:
            self.layers[layer] = (min(current, total), total)
        elif (
            layer
            and layer in self.layers
            and status.lower().startswith(
                ("pushed", "layer already exists", "pull complete", "already exists", "mounted")
            )
        ):
            total = self.layers[layer][1]
            self.layers[layer] = (total, total)
        done = sum(c for c, _ in self.layers.values())
        known = sum(t for _, t in self.layers.values())
        message = f"{layer} {status}".strip()
        self.say(
            {
                "stage": self.stage,
                "message": message,
                "current": done if known else None,
                "total": known or None,
                "transient": True,
            }
        )
