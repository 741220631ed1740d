"""Dev Container Features (containers.dev ``features`` and ``features-distribution``): what an
environment asks (``FeatureRequest``, read by ``reader.py``), the references it names, a
feature's ``devcontainer-feature.json`` (``FeatureMeta``), its options as the environment of
its ``install.sh``, the install order and the lockfile. Everything here is pure: a feature's
archive is read by ``feature_archives.py``, fetched by ``engine/oci.py``, built by
``containers/feature_build.py`` and ``containers/features.py``.
"""

from __future__ import annotations

import json
import posixpath
import re
import urllib.parse
from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

from ..errors import BadRequest
from .capabilities import allowed_capabilities
from .feature_archives import Archive
from .jsonc import load_jsonc

#: The media types of the specification's OCI distribution.
MANIFEST_TYPE = "application/vnd.oci.image.manifest.v1+json"
LAYER_TYPE = "application/vnd.devcontainers.layer.v1+tar"

#: The most a feature's devcontainer-feature.json, or a lockfile, may weigh.
MAX_METADATA_BYTES = 1 << 20

LOCKFILE = "devcontainer-lock.json"

#: What a feature may ask of the container that gpudev does not give; ``init`` is not among
#: them: gpudev always runs an init process. (``capAdd``: only the capabilities
#: c.EnvironmentManager.allowed_capabilities names, see ``read_meta``.)
REFUSED_ASKS = ("privileged", "securityOpt", "entrypoint", "mounts")
#: Lifecycle commands a feature may carry, in the order a first start runs them: each runs
#: before the environment's own command of the same step, features in install order
#: (``containers.commands``).
FEATURE_COMMANDS = (
    "onCreateCommand",
    "updateContentCommand",
    "postCreateCommand",
    "postStartCommand",
    "postAttachCommand",
)

_COMPONENT = r"[a-z0-9]+(?:(?:[._]|__|-+)[a-z0-9]+)*"
_OCI_RE = re.compile(
    rf"^(?P<registry>(?:[a-zA-Z0-9-]+\.)*[a-zA-Z0-9-]+(?::[0-9]{{1,5}})?)"
    rf"/(?P<path>{_COMPONENT}(?:/{_COMPONENT})*)"
    r"(?::(?P<tag>[A-Za-z0-9_][A-Za-z0-9_.-]{0,127})|@(?P<digest>sha256:[a-f0-9]{64}))?\Z"
)
_DIGEST_RE = re.compile(r"^sha256:[a-f0-9]{64}\Z")
_ID_RE = re.compile(r"^[A-Za-z0-9_][A-Za-z0-9_.-]{0,127}\Z")
_OPTION_RE = re.compile(r"^[A-Za-z0-9_][A-Za-z0-9_.-]{0,127}\Z")
_ENV_NAME_RE = re.compile(r"^[A-Za-z_][A-Za-z0-9_]{0,127}\Z")

Kind = Literal["oci", "local", "url"]


def _printable(text: str) -> bool:
    return not any(ord(c) < 0x20 or ord(c) == 0x7F for c in text)


@dataclass(frozen=True)
class FeatureRef:
    """A feature's reference: an OCI one (``registry/namespace/id[:tag|@sha256:...]``), a
    local folder (``./path`` under ``.devcontainer/``, ``path`` its real path) or a tarball's
    URL (``https://...``, fetched only where ``c.Features.allowed_urls`` allows)."""

    written: str
    kind: Kind
    registry: str = ""
    repository: str = ""
    tag: str = ""
    digest: str = ""
    path: str = ""

    @property
    def id(self) -> str:
        if self.kind == "url":  # devcontainer-feature-<id>.tgz, as the specification names it
            last = urllib.parse.urlsplit(self.written).path.rsplit("/", 1)[-1]
            return re.sub(r"\.(tgz|tar\.gz|tar)$", "", last).removeprefix("devcontainer-feature-")
        name = self.repository if self.kind == "oci" else self.path
        return name.rstrip("/").rsplit("/", 1)[-1]

    @property
    def resource(self) -> str:
        """``registry/repository`` (no tag or digest), or the local path as written."""
        if self.kind == "oci":
            return f"{self.registry}/{self.repository}"
        return self.written

    @property
    def reference(self) -> str:
        """What a registry's manifest URL ends with: the digest, else the tag."""
        return self.digest or self.tag or "latest"


def parse_oci(written: str) -> FeatureRef | None:
    """An OCI reference, or ``None`` when ``written`` is not one."""
    match = _OCI_RE.match(written)
    if match is None:
        return None
    registry = match.group("registry")
    if "." not in registry and ":" not in registry and registry != "localhost":
        return None
    path = match.group("path")
    if "/" not in path:  # registry/namespace/id: a namespace is required
        return None
    return FeatureRef(
        written,
        "oci",
        registry=registry.lower(),
        repository=path,
        tag=match.group("tag") or ("" if match.group("digest") else "latest"),
        digest=match.group("digest") or "",
    )


def identity(text: str) -> str:
    """The name ``installsAfter``, ``dependsOn`` and ``overrideFeatureInstallOrder`` match on:
    the reference without its tag or digest, lower case (a local path as written)."""
    text = text.strip()
    if text.startswith(("http://", "https://")):
        return text
    if text.startswith("."):
        return posixpath.normpath(text) if text not in (".", "./") else text
    if "@" in text:
        text = text.split("@", 1)[0]
    last = text.rsplit("/", 1)[-1]
    if ":" in last:
        text = text[: len(text) - len(last)] + last.split(":", 1)[0]
    return text.lower()


@dataclass(frozen=True)
class FeatureRequest:
    """One entry of ``features``: the reference as written, what it names, the options."""

    ref: FeatureRef
    options: Mapping[str, str | bool] = field(default_factory=dict)

    def to_json(self) -> dict[str, Any]:
        return {"ref": self.ref.written, "options": dict(self.options)}


#: The most features one environment may name (each is fetched and held while it builds).
MAX_FEATURES = 32


def read_requests(
    value: Any,
    where: str,
    *,
    local_path: Any = None,
) -> tuple[FeatureRequest, ...]:
    """``features`` of a devcontainer.json: ``{reference: options}``, options an object of
    strings and booleans, or a string (the ``version`` option). ``local_path``: turns a
    ``./path`` into its checked real path (``None``: local features are refused)."""
    if value is None:
        return ()
    if not isinstance(value, dict):
        raise BadRequest(f"{where}: 'features' must be an object", details={"file": where})
    if len(value) > MAX_FEATURES:
        raise BadRequest(
            f"{where}: 'features' names {len(value)} features; at most {MAX_FEATURES}",
            details={"file": where},
        )
    found: list[FeatureRequest] = []
    for written, given in value.items():
        key = f"features[{written!r}]"
        if not isinstance(written, str) or not written or not _printable(written):
            raise BadRequest(f"{where}: {key} is not a feature reference")
        ref = _reference(written, where, key, local_path)
        options: Any = given
        if isinstance(given, str):
            options = {"version": given}
        elif given is True or given is None:
            options = {}
        if not isinstance(options, dict) or not all(
            isinstance(k, str) and isinstance(v, (str, bool)) for k, v in options.items()
        ):
            raise BadRequest(
                f"{where}: {key} must map option names to strings or booleans",
                details={"file": where, "feature": written},
            )
        found.append(FeatureRequest(ref, dict(options)))
    return tuple(found)


def _reference(written: str, where: str, key: str, local_path: Any) -> FeatureRef:
    if written.startswith(("./", "../")):
        if local_path is None:
            raise BadRequest(
                f"{where}: {key}: a local feature is read from a devcontainer.json's folder; "
                "an environment of the configuration names features by OCI reference",
                details={"file": where, "feature": written},
            )
        return FeatureRef(written, "local", path=str(local_path(written, key)))
    if written.startswith(("http://", "https://")):
        parts = urllib.parse.urlsplit(written)
        if not parts.hostname or parts.username or parts.password or parts.fragment:
            raise BadRequest(
                f"{where}: {key} is not a tarball URL gpudev fetches (a host, no credentials "
                "in it, no fragment)",
                details={"file": where, "feature": written},
            )
        return FeatureRef(written, "url")
    ref = parse_oci(written)
    if ref is None:
        raise BadRequest(
            f"{where}: {key} is not a feature reference: expected "
            "REGISTRY/NAMESPACE/ID[:VERSION] or ...@sha256:DIGEST (e.g. "
            "ghcr.io/devcontainers/features/go:1), or ./folder under .devcontainer/",
            details={"file": where, "feature": written},
        )
    return ref


def read_order(value: Any, where: str) -> tuple[str, ...]:
    """``overrideFeatureInstallOrder``: a list of feature references."""
    if value is None:
        return ()
    if not isinstance(value, list) or not all(isinstance(v, str) and v for v in value):
        raise BadRequest(
            f"{where}: 'overrideFeatureInstallOrder' must be a list of feature references",
            details={"file": where},
        )
    return tuple(value)


# -- devcontainer-feature.json --------------------------------------------------------------


@dataclass(frozen=True)
class Option:
    name: str
    type: Literal["string", "boolean"]
    default: str | bool
    enum: tuple[str, ...] | None = None


@dataclass(frozen=True)
class FeatureMeta:
    """What gpudev reads of a ``devcontainer-feature.json``."""

    id: str
    version: str
    options: Mapping[str, Option]
    container_env: Mapping[str, str]
    installs_after: tuple[str, ...] = ()
    depends_on: tuple[str, ...] = ()
    legacy_ids: tuple[str, ...] = ()
    #: Its lifecycle commands: (step, command) in ``FEATURE_COMMANDS``' order; ``commands``
    #: the steps alone.
    lifecycle: tuple[tuple[str, Any], ...] = ()
    #: The capabilities it adds (``capAdd``), each one the administrator allows.
    cap_add: tuple[str, ...] = ()

    @property
    def commands(self) -> tuple[str, ...]:
        return tuple(step for step, _ in self.lifecycle)


def read_meta(text: bytes, what: str, *, allowed_caps: Collection[str] = ()) -> FeatureMeta:
    """Parse a ``devcontainer-feature.json`` (``what``: the feature, for messages); a feature
    asking for what gpudev refuses (``REFUSED_ASKS``, a capability ``allowed_caps`` does not
    name) is a ``BadRequest`` naming it."""
    try:
        data = load_jsonc(text.decode("utf-8"), f"{what}: devcontainer-feature.json")
    except UnicodeDecodeError:
        raise BadRequest(f"{what}: devcontainer-feature.json is not UTF-8 text") from None
    if not isinstance(data, dict):
        raise BadRequest(f"{what}: devcontainer-feature.json must hold an object")

    def fail(message: str) -> BadRequest:
        return BadRequest(
            f"{what}: devcontainer-feature.json: {message}", details={"feature": what}
        )

    for ask in REFUSED_ASKS:
        value = data.get(ask)
        if value not in (None, False, [], {}, ""):
            raise BadRequest(
                f"{what} asks for '{ask}', which gpudev does not give a dev container (it would "
                "weaken its confinement, or gpudev runs its own entrypoint); remove the feature "
                "or install what it installs in a Dockerfile",
                details={"feature": what, "property": ask},
            )
    cap_add: tuple[str, ...] = ()
    if data.get("capAdd"):
        cap_add = allowed_capabilities(data["capAdd"], allowed_caps, f"{what} asks for 'capAdd'")
    ident, version = data.get("id"), data.get("version", "")
    if not isinstance(ident, str) or not _ID_RE.match(ident):
        raise fail("'id' must be a feature id (letters, digits, '_', '.', '-')")
    if not isinstance(version, str) or not _printable(version):
        raise fail("'version' must be a string")
    return FeatureMeta(
        id=ident,
        version=version,
        options=_options(data.get("options"), fail),
        container_env=_env(data.get("containerEnv"), fail),
        installs_after=_names(data.get("installsAfter"), "installsAfter", fail),
        depends_on=_names(
            list(data["dependsOn"]) if isinstance(data.get("dependsOn"), dict) else None,
            "dependsOn",
            fail,
        ),
        legacy_ids=_names(data.get("legacyIds"), "legacyIds", fail),
        cap_add=cap_add,
        lifecycle=tuple(
            (step, read_command(data[step], step, fail))
            for step in FEATURE_COMMANDS
            if data.get(step)
        ),
    )


def read_command(value: Any, key: str, fail: Any) -> Any:
    """A lifecycle command as the specification writes it: a string, a list of strings, or an
    object of those (named steps); anything else is ``fail(message)``."""
    if isinstance(value, str):
        return value
    if isinstance(value, list) and all(isinstance(arg, str) for arg in value):
        return list(value)
    if isinstance(value, dict) and all(
        isinstance(name, str)
        and (
            isinstance(step, str)
            or (isinstance(step, list) and all(isinstance(a, str) for a in step))
        )
        for name, step in value.items()
    ):
        return {str(k): (v if isinstance(v, str) else list(v)) for k, v in value.items()}
    raise fail(f"'{key}' must be a string, a list of strings, or an object of those (named steps)")


def _options(value: Any, fail: Any) -> dict[str, Option]:
    if value is None:
        return {}
    if not isinstance(value, dict):
        raise fail("'options' must be an object")
    found: dict[str, Option] = {}
    for name, spec in value.items():
        if not isinstance(name, str) or not _OPTION_RE.match(name) or not isinstance(spec, dict):
            raise fail(f"option {name!r} must be a name with an object")
        kind = spec.get("type")
        default = spec.get("default", False if kind == "boolean" else "")
        if kind == "boolean" and isinstance(default, bool):
            found[name] = Option(name, "boolean", default)
            continue
        if kind != "string" or not isinstance(default, str):
            raise fail(f"option {name!r}: type must be 'string' or 'boolean' with a default of it")
        enum = spec.get("enum")
        if enum is not None and (
            not isinstance(enum, list) or not all(isinstance(e, str) for e in enum)
        ):
            raise fail(f"option {name!r}: 'enum' must be a list of strings")
        found[name] = Option(name, "string", default, tuple(enum) if enum is not None else None)
    return found


def _env(value: Any, fail: Any) -> dict[str, str]:
    if value is None:
        return {}
    if not isinstance(value, dict):
        raise fail("'containerEnv' must be an object of strings")
    for name, item in value.items():
        if not isinstance(name, str) or not _ENV_NAME_RE.match(name):
            raise fail(f"containerEnv: {name!r} is not a variable name")
        if not isinstance(item, str) or not _printable(item):
            raise fail(f"containerEnv.{name} must be a one-line string")
    return dict(value)


def _names(value: Any, key: str, fail: Any) -> tuple[str, ...]:
    if value is None:
        return ()
    if not isinstance(value, list) or not all(isinstance(v, str) and v for v in value):
        raise fail(f"'{key}' must be a list of feature references")
    return tuple(value)


def env_name(option: str) -> str:
    """The variable an option reaches ``install.sh`` as (the specification's rule: non-word
    characters to ``_``, leading digits and underscores to one ``_``, upper case)."""
    name = re.sub(r"[^\w]", "_", option, flags=re.ASCII)
    name = re.sub(r"^[\d_]+", "_", name)
    return name.upper()


def option_values(meta: FeatureMeta, asked: Mapping[str, str | bool], what: str) -> dict[str, str]:
    """The variables of ``install.sh``: every option's value (``asked``, else its default),
    an ``enum`` checked (``proposals`` are suggestions, free)."""
    unknown = sorted(set(asked) - set(meta.options))
    if unknown:
        known = ", ".join(sorted(meta.options)) or "none"
        raise BadRequest(
            f"{what} has no option {unknown[0]!r} (its options: {known})",
            details={"feature": what, "option": unknown[0]},
        )
    values: dict[str, str] = {}
    for name, option in meta.options.items():
        value = asked.get(name, option.default)
        if option.type == "boolean" and isinstance(value, str):
            if value.lower() not in ("true", "false"):
                raise BadRequest(f"{what}: option {name!r} is true or false, not {value!r}")
            value = value.lower() == "true"
        text = ("true" if value else "false") if isinstance(value, bool) else value
        if option.enum is not None and text not in option.enum:
            raise BadRequest(
                f"{what}: option {name!r} is one of {', '.join(option.enum)}, not {text!r}",
                details={"feature": what, "option": name},
            )
        if "\0" in text:
            raise BadRequest(f"{what}: option {name!r} holds a NUL character")
        values[env_name(name)] = text
    return values


# -- the install order ----------------------------------------------------------------------


@dataclass(frozen=True)
class Resolved:
    """A feature fetched: what was asked, its metadata, its files (``Archive``) and, for an OCI
    one, the manifest and layer digests it was fetched by."""

    request: FeatureRequest
    meta: FeatureMeta
    archive: Archive
    manifest_digest: str = ""
    layer_digest: str = ""

    @property
    def what(self) -> str:
        return f"the feature {self.request.ref.written!r}"

    def names(self) -> set[str]:
        """The identities it answers to: its reference, its legacy ids, a local one's id."""
        ref = self.request.ref
        found = {identity(ref.written)}
        if ref.kind == "oci":
            parent = identity(ref.written).rsplit("/", 1)[0]
            found |= {f"{parent}/{legacy}".lower() for legacy in self.meta.legacy_ids}
        else:
            found.add(self.meta.id.lower())
        return found


def install_order(features: Sequence[Resolved], override: Sequence[str]) -> list[Resolved]:
    """The features in the order they install: ``dependsOn`` (which must be among them) and
    ``installsAfter`` (ignored for an absent feature, and for one named in ``override``)
    before, then ``override``'s order, then the order written. A cycle is a ``BadRequest``
    naming its features."""
    by_name: dict[str, int] = {}
    for index, feature in enumerate(features):
        for name in feature.names():
            by_name[name] = index
    rank: dict[int, int] = {}
    for position, written in enumerate(override):
        named = by_name.get(identity(written))
        if named is None:
            raise BadRequest(
                f"overrideFeatureInstallOrder names {written!r}, which is not among the features",
                details={"feature": written},
            )
        rank.setdefault(named, position)
    after: dict[int, set[int]] = {i: set() for i in range(len(features))}
    for index, feature in enumerate(features):
        for needed in feature.meta.depends_on:
            found = by_name.get(identity(needed))
            if found is None:
                raise BadRequest(
                    f"{feature.what} depends on {needed!r}, which is not among the features: "
                    "gpudev does not add a dependency by itself yet; add it to 'features'",
                    details={"feature": feature.request.ref.written, "dependsOn": needed},
                )
            after[index].add(found)
        if index in rank:
            continue
        for soft in feature.meta.installs_after:
            found = by_name.get(identity(soft))
            if found is not None:
                after[index].add(found)
    order: list[int] = []
    remaining = set(range(len(features)))
    while remaining:
        ready = [i for i in remaining if not (after[i] - {i}) & remaining]
        if not ready:
            names = ", ".join(features[i].request.ref.written for i in sorted(remaining))
            raise BadRequest(
                f"The features' install order has a cycle (installsAfter, dependsOn or "
                f"overrideFeatureInstallOrder): {names}",
                details={"features": [features[i].request.ref.written for i in remaining]},
            )
        chosen = min(ready, key=lambda i: (rank.get(i, len(override)), i))
        order.append(chosen)
        remaining.remove(chosen)
    return [features[i] for i in order]


def meta_of(archive: Archive, what: str, *, allowed_caps: Collection[str] = ()) -> FeatureMeta:
    """The archive's ``devcontainer-feature.json``, read (``read_meta``); it must have an
    ``install.sh``."""
    text = archive.file("devcontainer-feature.json")
    if text is None or len(text) > MAX_METADATA_BYTES:
        raise BadRequest(f"{what} has no devcontainer-feature.json (of at most 1 MiB)")
    if archive.file("install.sh") is None:
        raise BadRequest(f"{what} has no install.sh")
    return read_meta(text, what, allowed_caps=allowed_caps)


# -- the lifecycle commands recorded on the features' image ---------------------------------

#: The most the record of the features' lifecycle commands may weigh, read back.
MAX_COMMANDS_BYTES = 256 << 10


def commands_record(ordered: Sequence[Resolved]) -> str:
    """The features' lifecycle commands in install order, as the JSON the features' image
    carries (``labels.L_FEATURE_COMMANDS``): ``[[reference, {step: command}], ...]``, only the
    features that have some."""
    found = [
        [feature.request.ref.written, dict(feature.meta.lifecycle)]
        for feature in ordered
        if feature.meta.lifecycle
    ]
    return json.dumps(found, separators=(",", ":"), sort_keys=True)


def read_commands_record(text: str) -> list[tuple[str, dict[str, Any]]]:
    """``commands_record``'s JSON read back as hostile input: (reference, {step: command})
    in install order; ``BadRequest`` when it is not that."""

    def fail(message: str) -> BadRequest:
        return BadRequest(f"The features' recorded lifecycle commands: {message}")

    if len(text) > MAX_COMMANDS_BYTES:
        raise fail("over 256 KiB")
    try:
        data = json.loads(text)
    except ValueError:
        raise fail("not JSON") from None
    if not isinstance(data, list):
        raise fail("not a list")
    found: list[tuple[str, dict[str, Any]]] = []
    for entry in data:
        if (
            not isinstance(entry, list)
            or len(entry) != 2
            or not isinstance(entry[0], str)
            or not _printable(entry[0])
            or not isinstance(entry[1], dict)
        ):
            raise fail("an entry is not [reference, {step: command}]")
        steps: dict[str, Any] = {}
        for step in FEATURE_COMMANDS:
            if step in entry[1]:
                steps[step] = read_command(entry[1][step], step, fail)
        if set(entry[1]) - set(steps):
            raise fail(f"{entry[0]!r} names a step that is not a lifecycle command")
        found.append((entry[0], steps))
    return found


# -- devcontainer-lock.json -----------------------------------------------------------------


@dataclass(frozen=True)
class Pin:
    version: str
    resolved: str
    integrity: str


def read_lockfile(text: bytes, where: str) -> dict[str, Pin]:
    """The pins of a ``devcontainer-lock.json``: reference as written -> ``Pin``."""
    try:
        data = load_jsonc(text.decode("utf-8"), where)
    except UnicodeDecodeError:
        raise BadRequest(f"{where}: not UTF-8 text") from None
    features = data.get("features") if isinstance(data, dict) else None
    if not isinstance(features, dict):
        raise BadRequest(f"{where}: must hold an object with 'features'", details={"file": where})
    pins: dict[str, Pin] = {}
    for written, entry in features.items():
        if not isinstance(entry, dict):
            raise BadRequest(f"{where}: features[{written!r}] must be an object")
        resolved, integrity = entry.get("resolved"), entry.get("integrity", "")
        ref = parse_oci(resolved) if isinstance(resolved, str) else None
        if ref is None or not ref.digest:
            raise BadRequest(
                f"{where}: features[{written!r}].resolved must be REGISTRY/NAMESPACE/ID@sha256:..."
            )
        if integrity and (not isinstance(integrity, str) or not _DIGEST_RE.match(integrity)):
            raise BadRequest(f"{where}: features[{written!r}].integrity must be sha256:<64 hex>")
        version = entry.get("version", "")
        pins[written] = Pin(str(version), ref.written, str(integrity or ""))
    return pins


def render_lockfile(features: Sequence[Resolved]) -> bytes:
    """A ``devcontainer-lock.json`` pinning each OCI feature to what was fetched."""
    entries: dict[str, Any] = {}
    for feature in sorted(features, key=lambda f: f.request.ref.written):
        ref = feature.request.ref
        if ref.kind != "oci":
            continue
        entries[ref.written] = {
            "version": feature.meta.version,
            "resolved": f"{ref.resource}@{feature.manifest_digest}",
            "integrity": feature.layer_digest,
        }
    return (json.dumps({"features": entries}, indent=2) + "\n").encode()
