"""Dev Container Features (``environments/features.py``, ``engine/oci.py``,
``containers/features.py``): references, options, install order, hostile archives, the
lockfile and the generated Dockerfile, without an engine or a registry."""

from __future__ import annotations

import io
import json
import tarfile
from dataclasses import replace
from pathlib import Path
from typing import Any, ClassVar

import pytest
from traitlets import TraitError

from jupyter_gpudev.access import Caller
from jupyter_gpudev.containers import StartRequest
from jupyter_gpudev.containers import feature_build as build
from jupyter_gpudev.containers import features as features_module
from jupyter_gpudev.containers.commands import at_restart, lifecycle_steps
from jupyter_gpudev.containers.create import Confinement, Target, create_args
from jupyter_gpudev.containers.features import Features
from jupyter_gpudev.engine import Registries
from jupyter_gpudev.engine.oci import OCIClient, OCIError
from jupyter_gpudev.environments import Environment, EnvironmentManager
from jupyter_gpudev.environments import feature_archives as archives
from jupyter_gpudev.environments import features as spec
from jupyter_gpudev.environments.model import RunOptions
from jupyter_gpudev.errors import BadRequest

DIGEST = "sha256:" + "ab" * 32


# -- references ---------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("written", "registry", "repository", "reference"),
    [
        ("ghcr.io/devcontainers/features/go:1", "ghcr.io", "devcontainers/features/go", "1"),
        ("ghcr.io/devcontainers/features/go:1.2", "ghcr.io", "devcontainers/features/go", "1.2"),
        ("ghcr.io/devcontainers/features/go", "ghcr.io", "devcontainers/features/go", "latest"),
        (f"127.0.0.1:5000/features/go@{DIGEST}", "127.0.0.1:5000", "features/go", DIGEST),
        ("localhost/a/b:2.0.1", "localhost", "a/b", "2.0.1"),
    ],
)
def test_oci_references_are_split(
    written: str, registry: str, repository: str, reference: str
) -> None:
    ref = spec.parse_oci(written)
    assert ref is not None
    assert (ref.registry, ref.repository, ref.reference) == (registry, repository, reference)
    assert ref.id == repository.rsplit("/", 1)[-1]


@pytest.mark.parametrize(
    "written",
    [
        "go",  # no registry
        "devcontainers/features/go:1",  # a first part that is no host
        "ghcr.io/go:1",  # no namespace
        "ghcr.io/Dev/go:1",  # upper case path
        "ghcr.io/a/go@sha256:1234",  # short digest
        "ghcr.io/a/go:1;rm -rf /",
    ],
)
def test_what_is_no_oci_reference_is_refused(written: str) -> None:
    assert spec.parse_oci(written) is None
    with pytest.raises(BadRequest, match="is not a feature reference"):
        spec.read_requests({written: {}}, "f.json")


def test_tarball_urls_are_fetched_only_where_allowed() -> None:
    # Given a tarball URL (read as one), and URLs that are none gpudev fetches
    (request,) = spec.read_requests({"https://example.com/devcontainer-feature-go.tgz": {}}, "f")
    assert (request.ref.kind, request.ref.id) == ("url", "go")
    for bad in ("https://user:pw@example.com/x.tgz", "https:///x.tgz", "https://e.com/x#y"):
        with pytest.raises(BadRequest, match="not a tarball URL gpudev fetches"):
            spec.read_requests({bad: {}}, "f")
    # When no administrator allows it: refused, saying who can
    with pytest.raises(BadRequest, match=r"c\.Features\.allowed_urls"):
        features_module._fetch_url(request, Features(), lambda _e: None)
    # And a plain-HTTP URL to a public host is refused even when allowed
    (plain,) = spec.read_requests({"http://example.com/x.tgz": {}}, "f")
    allowed = Features(allowed_urls=["http://example.com/*"])
    with pytest.raises(OCIError, match=r"https://example\.com/ is where"):
        features_module._fetch_url(plain, allowed, lambda _e: None)


def test_a_string_is_the_version_option_and_options_must_be_strings_or_booleans() -> None:
    (request,) = spec.read_requests({"ghcr.io/a/b/go:1": "1.22"}, "f.json")
    assert request.options == {"version": "1.22"}
    with pytest.raises(BadRequest, match="strings or booleans"):
        spec.read_requests({"ghcr.io/a/b/go:1": {"n": 3}}, "f.json")


def test_identities_drop_tags_and_digests() -> None:
    assert spec.identity("ghcr.io/A/b/go:1") == "ghcr.io/a/b/go"
    assert spec.identity(f"127.0.0.1:5000/b/go@{DIGEST}") == "127.0.0.1:5000/b/go"
    assert spec.identity("127.0.0.1:5000/b/go") == "127.0.0.1:5000/b/go"
    assert spec.identity("./local/") == "local"


def write_env(root: Path, data: dict[str, Any]) -> None:
    folder = root / ".devcontainer"
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "devcontainer.json").write_text(json.dumps({"name": "e", **data}))


def test_the_reader_keeps_features_order_and_the_folder(tmp_path: Path) -> None:
    # Given a devcontainer.json with an OCI and a local feature and an install order
    (tmp_path / ".devcontainer" / "mine").mkdir(parents=True)
    write_env(
        tmp_path,
        {
            "image": "python:3.12",
            "features": {"ghcr.io/a/b/go:1": {"version": "1.22"}, "./mine": {}},
            "overrideFeatureInstallOrder": ["./mine"],
        },
    )
    # When it is read
    listing = EnvironmentManager().list(tmp_path)
    (env,) = [e for e in listing.environments if e.name == "e"]
    # Then both features are kept, the local one by its real path, with no note
    assert [f.ref.kind for f in env.features] == ["oci", "local"]
    assert env.features[1].ref.path == str((tmp_path / ".devcontainer" / "mine").resolve())
    assert env.feature_order == ("./mine",)
    assert env.config_dir == str(tmp_path / ".devcontainer")
    assert not [p for p in listing.problems if "features" in p["message"]]


@pytest.mark.parametrize("where", ["../outside", "./"])
def test_a_local_feature_outside_devcontainer_is_refused(tmp_path: Path, where: str) -> None:
    (tmp_path / "outside").mkdir()
    write_env(tmp_path, {"image": "python:3.12", "features": {where: {}}})
    listing = EnvironmentManager().list(tmp_path)
    assert "e" not in listing.names()
    assert any("must be a folder under .devcontainer/" in p["message"] for p in listing.problems)


def test_a_local_feature_through_a_link_out_is_refused(tmp_path: Path) -> None:
    (tmp_path / "outside").mkdir()
    (tmp_path / ".devcontainer").mkdir()
    (tmp_path / ".devcontainer" / "linked").symlink_to(tmp_path / "outside")
    write_env(tmp_path, {"image": "python:3.12", "features": {"./linked": {}}})
    listing = EnvironmentManager().list(tmp_path)
    assert any("must be a folder under .devcontainer/" in p["message"] for p in listing.problems)


def test_a_devcontainer_folder_linked_out_of_the_workspace_reaches_no_other_users_feature(
    tmp_path: Path,
) -> None:
    # Given bob's local feature in his folder, and alice's folder beside it, where alice made
    # .devcontainer a link to the folder of every user's (shared mode's user_root)
    users = tmp_path / "users"
    secret = users / "bob" / ".devcontainer" / "env" / "secretfeat"
    secret.mkdir(parents=True)
    (secret / "devcontainer-feature.json").write_text('{"id": "secretfeat", "version": "1"}')
    (secret / "install.sh").write_text("TOKEN=bob-secret\n")
    alice = users / "alice"
    alice.mkdir()
    (alice / ".devcontainer").symlink_to(users)
    (alice / "devcontainer.json").write_text(
        json.dumps(
            {"image": "python:3.12", "features": {"../bob/.devcontainer/env/secretfeat": {}}}
        )
    )
    # When alice's environments are listed
    listing = EnvironmentManager().list(alice)
    # Then none of them names bob's folder as a feature, and no file of his is listed
    for env in listing.environments:
        for feature in env.features:
            assert "bob" not in feature.ref.path, feature
    assert not [p for p in listing.problems if "bob" in p["file"]], listing.problems
    # And alice is told why her .devcontainer is not read
    assert any("links to a folder outside" in p["message"] for p in listing.problems)


def test_configuration_environments_cannot_name_local_features(tmp_path: Path) -> None:
    manager = EnvironmentManager(
        environments={"c": {"image": "python:3.12", "features": {"./x": {}}}}
    )
    with pytest.raises(Exception, match="names features by OCI reference"):
        manager.list(tmp_path)


# -- devcontainer-feature.json and options ------------------------------------------------


def meta(**data: Any) -> spec.FeatureMeta:
    return spec.read_meta(json.dumps({"id": "go", "version": "1.0.0", **data}).encode(), "go")


def test_options_reach_install_sh_as_the_specification_names_them() -> None:
    # Given options of both types, an enum and proposals
    feature = meta(
        options={
            "version": {"type": "string", "default": "latest", "proposals": ["1.21"]},
            "install-tools": {"type": "boolean", "default": True},
            "9lives.x": {"type": "string", "default": ""},
            "flavour": {"type": "string", "enum": ["a", "b"], "default": "a"},
        }
    )
    # When values are given for some (a proposal is free)
    values = spec.option_values(feature, {"version": "1.19; $(id)", "install-tools": False}, "go")
    # Then names are upper-cased, non-word characters and leading digits become '_'
    assert values == {
        "VERSION": "1.19; $(id)",
        "INSTALL_TOOLS": "false",
        "_LIVES_X": "",
        "FLAVOUR": "a",
    }
    # And an enum is checked, an unknown option named
    with pytest.raises(BadRequest, match="one of a, b, not 'c'"):
        spec.option_values(feature, {"flavour": "c"}, "go")
    with pytest.raises(BadRequest, match="has no option 'colour'"):
        spec.option_values(feature, {"colour": "red"}, "go")
    assert spec.option_values(feature, {"install-tools": "TRUE"}, "go")["INSTALL_TOOLS"] == "true"


@pytest.mark.parametrize(
    ("ask", "value"),
    [
        ("privileged", True),
        ("capAdd", ["SYS_ADMIN"]),
        ("securityOpt", ["seccomp=unconfined"]),
        ("entrypoint", "/usr/local/share/docker-init.sh"),
        ("mounts", [{"source": "dind", "target": "/var/lib/docker", "type": "volume"}]),
    ],
)
def test_what_a_feature_asks_of_the_container_is_refused_naming_it(ask: str, value: Any) -> None:
    with pytest.raises(BadRequest, match=f"the feature 'x' asks for '{ask}'"):
        spec.read_meta(json.dumps({"id": "x", ask: value}).encode(), "the feature 'x'")


def test_init_and_empty_asks_are_accepted() -> None:
    feature = meta(init=True, privileged=False, capAdd=[], onCreateCommand="echo")
    assert feature.commands == ("onCreateCommand",)


@pytest.mark.parametrize(
    "data",
    [
        {"id": "../x"},
        {"id": "x", "options": {"a": {"type": "number", "default": 1}}},
        {"id": "x", "containerEnv": {"A B": "1"}},
        {"id": "x", "containerEnv": {"A": "1\nRUN evil"}},
        {"id": "x", "installsAfter": "y"},
    ],
)
def test_bad_metadata_is_refused(data: dict[str, Any]) -> None:
    with pytest.raises(BadRequest):
        spec.read_meta(json.dumps(data).encode(), "x")


# -- install order ------------------------------------------------------------------------


def resolved(written: str, **data: Any) -> spec.Resolved:
    ident = written.rstrip("/").rsplit("/", 1)[-1].split(":")[0]
    ref = spec.parse_oci(written) or spec.FeatureRef(written, "local", path="/x/" + ident)
    feature = spec.read_meta(json.dumps({"id": ident, **data}).encode(), written)
    return spec.Resolved(spec.FeatureRequest(ref), feature, archives.Archive((), ""))


def order(features: list[spec.Resolved], override: tuple[str, ...] = ()) -> list[str]:
    return [f.request.ref.written for f in spec.install_order(features, override)]


def test_installs_after_and_depends_on_come_first() -> None:
    a = resolved("ghcr.io/n/f/a:1", installsAfter=["ghcr.io/n/f/c"])
    b = resolved("ghcr.io/n/f/b:2", dependsOn={"ghcr.io/n/f/a:1": {}})
    c = resolved("ghcr.io/n/f/c:1")
    assert order([a, b, c]) == ["ghcr.io/n/f/c:1", "ghcr.io/n/f/a:1", "ghcr.io/n/f/b:2"]
    # installsAfter of a feature that is not there is ignored
    assert order([a, b]) == ["ghcr.io/n/f/a:1", "ghcr.io/n/f/b:2"]


def test_depends_on_a_feature_not_listed_is_an_error() -> None:
    b = resolved("ghcr.io/n/f/b:2", dependsOn={"ghcr.io/n/f/a:1": {}})
    with pytest.raises(BadRequest, match=r"depends on 'ghcr\.io/n/f/a:1'"):
        spec.install_order([b], ())


def test_override_order_goes_first_and_names_must_be_there() -> None:
    a = resolved("ghcr.io/n/f/a:1", installsAfter=["ghcr.io/n/f/c"])
    c = resolved("ghcr.io/n/f/c:1")
    local = resolved("./mine")
    assert order([a, c, local], ("./mine", "ghcr.io/n/f/a")) == [
        "./mine",
        "ghcr.io/n/f/a:1",
        "ghcr.io/n/f/c:1",
    ]
    with pytest.raises(BadRequest, match=r"names 'ghcr\.io/n/f/zz'"):
        spec.install_order([a, c], ("ghcr.io/n/f/zz",))


def test_a_cycle_is_an_error_naming_its_features() -> None:
    a = resolved("ghcr.io/n/f/a:1", installsAfter=["ghcr.io/n/f/b"])
    b = resolved("ghcr.io/n/f/b:1", dependsOn={"ghcr.io/n/f/a": {}})
    c = resolved("ghcr.io/n/f/c:1")
    with pytest.raises(BadRequest, match=r"cycle .*: ghcr.io/n/f/a:1, ghcr.io/n/f/b:1") as err:
        spec.install_order([c, a, b], ())
    assert "c:1" not in err.value.message


def test_legacy_ids_are_matched() -> None:
    a = resolved("ghcr.io/n/f/new:1", legacyIds=["old"])
    b = resolved("ghcr.io/n/f/b:1", installsAfter=["ghcr.io/n/f/old"])
    assert order([b, a]) == ["ghcr.io/n/f/new:1", "ghcr.io/n/f/b:1"]


# -- hostile archives ---------------------------------------------------------------------


def archive(*members: tuple[str, str, Any]) -> io.BytesIO:
    out = io.BytesIO()
    with tarfile.open(fileobj=out, mode="w", format=tarfile.GNU_FORMAT) as tar:
        for name, kind, value in members:
            info = tarfile.TarInfo(name)
            if kind == "file":
                data = value if isinstance(value, bytes) else str(value).encode()
                info.size, info.mode = len(data), 0o755
                tar.addfile(info, io.BytesIO(data))
                continue
            info.type = {
                "dir": tarfile.DIRTYPE,
                "sym": tarfile.SYMTYPE,
                "hard": tarfile.LNKTYPE,
                "chr": tarfile.CHRTYPE,
                "fifo": tarfile.FIFOTYPE,
            }[kind]
            info.linkname = str(value or "")
            tar.addfile(info)
    out.seek(0)
    return out


GOOD = (
    ("./", "dir", None),
    ("./devcontainer-feature.json", "file", json.dumps({"id": "x", "version": "1"})),
    ("./install.sh", "file", "#!/bin/sh\necho hi\n"),
    ("./lib", "dir", None),
    ("./lib/link", "sym", "../install.sh"),
)


def test_a_good_archive_is_read_with_its_digest() -> None:
    read = archives.read_archive(archive(*GOOD), "x")
    assert [m.name for m in read.members] == [
        "devcontainer-feature.json",
        "install.sh",
        "lib",
        "lib/link",
    ]
    assert spec.meta_of(read, "x").id == "x"
    again = archives.read_archive(archive(*GOOD), "x")
    assert again.digest == read.digest
    changed = archives.read_archive(archive(*GOOD[:2], ("./install.sh", "file", "echo 2")), "x")
    assert changed.digest != read.digest


@pytest.mark.parametrize(
    ("member", "why"),
    [
        (("/etc/passwd", "file", "x"), "absolute name, climbs"),
        (("../x", "file", "x"), "absolute name, climbs"),
        (("a/../../x", "file", "x"), "absolute name, climbs"),
        (("a\nb", "file", "x"), "control characters"),
        (("out", "sym", "/etc/shadow"), "points out of the feature"),
        (("out", "sym", "../../etc"), "points out of the feature"),
        (("hard", "hard", "install.sh"), "is a hard link"),
        (("dev", "chr", None), "device, FIFO"),
        (("fifo", "fifo", None), "device, FIFO"),
        (("lib/link/x", "file", "x"), "under a file or a link"),
        (("install.sh", "file", "again"), "appears twice"),
    ],
)
def test_a_hostile_archive_is_refused(member: tuple[str, str, Any], why: str) -> None:
    with pytest.raises(BadRequest, match=f"x: its archive is refused: .*{why}"):
        archives.read_archive(archive(*GOOD, member), "x")


def test_archive_bounds(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(archives, "MAX_MEMBERS", 3)
    with pytest.raises(BadRequest, match="more than 3 members"):
        archives.read_archive(archive(*GOOD), "x")
    monkeypatch.setattr(archives, "MAX_MEMBERS", 100)
    monkeypatch.setattr(archives, "MAX_MEMBER_BYTES", 10)
    with pytest.raises(BadRequest, match="over 0 MiB"):
        archives.read_archive(archive(*GOOD), "x")
    monkeypatch.setattr(archives, "MAX_MEMBER_BYTES", 1 << 20)
    monkeypatch.setattr(archives, "MAX_TOTAL_BYTES", 40)
    with pytest.raises(BadRequest, match="in all"):
        archives.read_archive(archive(*GOOD), "x")
    with pytest.raises(BadRequest, match="not a tar archive"):
        archives.read_archive(io.BytesIO(b"\x1f\x8b not a plain tar" * 40), "x")


def test_an_archive_without_install_sh_is_refused() -> None:
    with pytest.raises(BadRequest, match=r"has no install\.sh"):
        spec.meta_of(archives.read_archive(archive(*GOOD[:2]), "x"), "x")


# -- the generated Dockerfile and context -------------------------------------------------


def test_the_dockerfile_passes_values_as_words_never_as_code() -> None:
    # Given a feature with an option, a containerEnv and a value with shell and quote text
    read = archives.read_archive(archive(*GOOD), "x")
    feature = spec.read_meta(
        json.dumps(
            {
                "id": "x",
                "options": {"greeting": {"type": "string", "default": "hi"}},
                "containerEnv": {"X_HOME": '/opt/x "q" \\', "PATH": "/opt/x/bin:${PATH}"},
            }
        ).encode(),
        "x",
    )
    request = spec.FeatureRequest(spec.FeatureRef("./x", "local"), {"greeting": "a'b\"$(id)`"})
    one = spec.Resolved(request, feature, read)
    # When the Dockerfile is made
    text = build.dockerfile("base:1", [one], remote_user="alice", container_user="root",
                           image_user="1000:1000")  # fmt: skip
    lines = text.splitlines()
    # Then the options are arguments of an exec-form RUN (JSON), the script fixed
    assert lines[:3] == ["FROM base:1", "USER root", "COPY features/1 /tmp/gpudev-features/1"]
    assert lines[3] == 'ENV X_HOME="/opt/x \\"q\\" \\\\"'
    assert lines[4] == 'ENV PATH="/opt/x/bin:${PATH}"'
    argv = json.loads(lines[5].removeprefix("RUN "))
    assert argv[:2] == ["/bin/sh", "-c"]
    assert "GREETING=a'b\"$(id)`" in argv
    assert {"_REMOTE_USER=alice", "_CONTAINER_USER=root"} <= set(argv)
    assert "$(id)" not in argv[2]
    assert lines[-1] == "USER 1000:1000"
    # And the context holds the Dockerfile and the feature's files under their number
    with build.context_tar(text, [one]) as context, tarfile.open(fileobj=context) as tar:
        names = tar.getnames()
    assert names[0] == "Dockerfile"
    assert "features/1/install.sh" in names
    assert "features/1/lib/link" in names


def test_user_names_are_checked() -> None:
    assert build.check_user("vscode", "x") == "vscode"
    with pytest.raises(BadRequest):
        build.check_user("a b", "x")


# -- lockfile and mirrors -----------------------------------------------------------------


def test_the_lockfile_round_trips() -> None:
    ref = spec.parse_oci("ghcr.io/n/f/go:1")
    assert ref is not None
    feature = spec.Resolved(
        spec.FeatureRequest(ref),
        meta(),
        archives.Archive((), ""),
        manifest_digest=DIGEST,
        layer_digest="sha256:" + "cd" * 32,
    )
    local = resolved("./mine")
    pins = spec.read_lockfile(spec.render_lockfile([feature, local]), "lock")
    assert pins == {
        "ghcr.io/n/f/go:1": spec.Pin("1.0.0", f"ghcr.io/n/f/go@{DIGEST}", "sha256:" + "cd" * 32)
    }
    with pytest.raises(BadRequest, match="resolved must be"):
        spec.read_lockfile(b'{"features": {"x": {"resolved": "ghcr.io/n/f/go:1"}}}', "lock")


def test_registry_mirrors_map_the_longest_prefix() -> None:
    features = Features(
        registry_mirrors={
            "ghcr.io/devcontainers": "mirror.example.com/all",
            "ghcr.io/devcontainers/features": "127.0.0.1:5000/features",
        }
    )
    assert features.mirrored("ghcr.io", "devcontainers/features/go") == (
        "127.0.0.1:5000",
        "features/go",
    )
    assert features.mirrored("ghcr.io", "devcontainers/other/x") == (
        "mirror.example.com",
        "all/other/x",
    )
    assert features.mirrored("ghcr.io", "devcontainersx/y") == ("ghcr.io", "devcontainersx/y")
    with pytest.raises(TraitError):
        Features(registry_mirrors={"ghcr.io/x": "http://evil/"})


# -- the registry client's redirects ------------------------------------------------------


@pytest.mark.parametrize(
    "url",
    [
        "http://127.0.0.2:5000/blob",
        "https://10.0.0.1/blob",
        "https://169.254.169.254/latest/meta-data",
        "https://localhost/blob",
        "http://example.com/blob",
        "file:///etc/passwd",
    ],
)
def test_redirects_to_private_addresses_are_refused(url: str) -> None:
    client = OCIClient("ghcr.io", {}, what="the feature 'x'")
    with pytest.raises(OCIError, match="refused"):
        client._check_target(url)
    client.close()


def test_the_registrys_own_address_is_allowed() -> None:
    client = OCIClient("127.0.0.1:5000", {"username": "u", "password": "p"}, what="x")
    assert client.scheme == "http"
    client._check_target("http://127.0.0.1:5000/v2/x/blobs/sha256:00")
    client.close()
    assert OCIClient("ghcr.io", {}, what="x").scheme == "https"


# -- hosts that do not install features yet -----------------------------------------------


def test_a_start_on_a_kubernetes_host_refuses_features(
    cluster: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from tests.k8s_api import cluster_manager  # noqa: PLC0415 - only this test loads it

    with cluster_manager(cluster, tmp_path, monkeypatch, pod_start_timeout=0.5) as manager:
        # Given an environment with a feature, on the cluster
        image = manager.environments.get("default", manager.root_dir).image
        write_env(manager.root_dir, {"image": image, "features": {"ghcr.io/a/b/go:1": {}}})
        # When it starts there: refused, saying why, and no pod is made
        with pytest.raises(BadRequest, match="Features, which gpudev installs only on a Docker"):
            manager.start(StartRequest("e", host="cluster", name="f"), None, caller=Caller("a"))
        assert cluster.names("pods") == []


def test_the_fetch_cache_keeps_each_users_fetches_apart() -> None:
    # What the service's credentials fetched for one user is not served to another by digest
    cache = features_module._Cache(100)
    cache.put("gpudev-alice", "sha256:1", b"private")
    assert cache.get("gpudev-alice", "sha256:1") == b"private"
    assert cache.get("gpudev-bob", "sha256:1") is None
    assert cache.get("", "sha256:1") is None


def test_the_fetch_cache_is_bounded_oldest_first() -> None:
    cache = features_module._Cache(10)
    cache.put("", "a", b"1234")
    cache.put("", "b", b"5678")
    assert cache.get("", "a") == b"1234"  # now the newest
    cache.put("", "c", b"90ab")
    assert (cache.get("", "a"), cache.get("", "b"), cache.get("", "c")) == (b"1234", None, b"90ab")
    cache.put("", "big", b"x" * 11)
    assert cache.get("", "big") is None
    assert cache.size == 8


def test_a_features_lifecycle_commands_are_read_in_the_specifications_order() -> None:
    feature = meta(
        postStartCommand=["echo", "b"],
        onCreateCommand={"x": "echo a", "y": ["echo", "c"]},
        postAttachCommand="",
    )
    assert feature.lifecycle == (
        ("onCreateCommand", {"x": "echo a", "y": ["echo", "c"]}),
        ("postStartCommand", ["echo", "b"]),
    )
    assert feature.commands == ("onCreateCommand", "postStartCommand")
    with pytest.raises(BadRequest, match="'postCreateCommand' must be a string"):
        meta(postCreateCommand=["echo", 1])


def test_the_commands_record_round_trips_and_a_hostile_one_is_refused() -> None:
    one = resolved("./one", postStartCommand="echo one")
    two = resolved("./two", postCreateCommand=["echo", "two"])
    plain = resolved("./three")
    record = spec.commands_record([two, plain, one])
    assert spec.read_commands_record(record) == [
        ("./two", {"postCreateCommand": ["echo", "two"]}),
        ("./one", {"postStartCommand": "echo one"}),
    ]
    for hostile in (
        "{}",
        "not json",
        '[["./x", {"initializeCommand": "echo"}]]',
        '[["./x", {"postStartCommand": 3}]]',
        '[["./x"]]',
        "[" + "0," * (spec.MAX_COMMANDS_BYTES // 2) + "0]",
    ):
        with pytest.raises(BadRequest):
            spec.read_commands_record(hostile)


def test_features_commands_come_before_the_environments_and_once_only_at_the_first_start() -> None:
    env = Environment(
        "e",
        "e",
        "x",
        image="i",
        post_create_command="env-create",
        post_start_command="env-start",
    )
    features: list[tuple[str, dict[str, Any]]] = [
        ("./two", {"postCreateCommand": "two-create", "postStartCommand": ["two", "start"]}),
        ("./one", {"postStartCommand": {"k": "one-start"}}),
    ]
    steps = [(stage, label, argv[-1]) for stage, label, argv in lifecycle_steps(env, features)]
    assert steps == [
        ("postCreateCommand", " of the feature './two'", "two-create"),
        ("postCreateCommand", "", "env-create"),
        ("postStartCommand", " of the feature './two'", "start"),
        ("postStartCommand", " of the feature './one' (k)", "one-start"),
        ("postStartCommand", "", "env-start"),
    ]
    again = [argv[-1] for _, _, argv in lifecycle_steps(at_restart(env), features)]
    assert again == ["start", "one-start", "env-start"]


def test_a_features_capabilities_are_those_the_administrator_allows() -> None:
    # Given a feature adding SYS_PTRACE
    text = json.dumps({"id": "dbg", "capAdd": ["SYS_PTRACE"]}).encode()
    # Then it is refused by default, and read where SYS_PTRACE is allowed
    with pytest.raises(BadRequest, match=r"SYS_PTRACE is not allowed.*allowed_capabilities"):
        spec.read_meta(text, "the feature 'dbg'")
    assert spec.read_meta(text, "dbg", allowed_caps=("SYS_PTRACE",)).cap_add == ("SYS_PTRACE",)
    # And one more it names is still refused
    wider = json.dumps({"id": "dbg", "capAdd": ["SYS_PTRACE", "SYS_ADMIN"]}).encode()
    with pytest.raises(BadRequest, match="SYS_ADMIN is not allowed"):
        spec.read_meta(wider, "dbg", allowed_caps=("SYS_PTRACE",))


def test_the_create_arguments_add_only_allowed_capabilities() -> None:
    # Given an environment adding NET_RAW (dropped by default) and a target whose features
    # add SYS_PTRACE and, recorded before the administrator changed their mind, SYS_ADMIN
    env = Environment(
        "e",
        "e",
        "x",
        image="i",
        run_options=RunOptions(cap_add=("NET_RAW",)),
        allowed_caps=("NET_RAW", "SYS_PTRACE"),
    )
    target = Target(
        name="n",
        owner="o",
        host="h",
        image="i",
        workspace="",
        mounts=(),
        command=("sleep",),
        server_id="s",
        ledger_id="l",
        process="p",
        created="c",
        cap_add=("SYS_PTRACE", "SYS_ADMIN"),
    )
    args = create_args(env, target, Confinement(cap_drop=("MKNOD", "NET_RAW")))
    # Then the allowed ones are added (and no longer dropped), the other is not
    assert args["cap_add"] == ["NET_RAW", "SYS_PTRACE"]
    assert args["cap_drop"] == ["MKNOD"]
    # And without any, nothing is added
    plain = create_args(
        replace(env, run_options=RunOptions()), replace(target, cap_add=()), Confinement()
    )
    assert "cap_add" not in plain


class _Stop(Exception):
    """Raised by the stand-in registry client: what it was made with is all the test needs."""


def test_the_services_credentials_are_checked_against_the_registry_fetched_from(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # Given a shared service mirroring ghcr.io to its registry, its credentials allowed for
    # what it fetches from ghcr.io/* (written names) but not for its mirror's bob/ repository
    features = Features(registry_mirrors={"ghcr.io": "registry.example.com"})
    asked: list[str] = []
    made: list[dict[str, str]] = []

    class Registries:
        user = "gpudev-alice"
        credentials: ClassVar[dict[str, Any]] = {}

        def pulls_with_credentials(self, ref: str) -> bool:
            asked.append(ref)
            return ref.startswith(("ghcr.io/", "registry.example.com/public/"))

        def auth_for(self, registry: str) -> tuple[dict[str, str], str]:
            assert registry == "registry.example.com"  # the mirror's, where the fetch goes
            return {"username": "service", "password": "s3cret"}, "configured"

    def client(registry: str, auth: dict[str, str], **_: Any) -> Any:
        made.append(dict(auth))
        raise _Stop

    monkeypatch.setattr(features_module, "OCIClient", client)
    ref = spec.parse_oci("ghcr.io/bob/private-feature:1")
    assert ref is not None
    # When alice names ghcr.io/bob/private-feature (fetched from registry.example.com/bob/...)
    with pytest.raises(_Stop):
        features_module._fetch_oci(ref, "1", features, Registries(), lambda _e: None)  # type: ignore[arg-type]
    # Then the rule is asked of the name fetched, and no credentials go with it
    assert asked == ["registry.example.com/bob/private-feature:1"]
    assert made == [{}]
    # But a feature the mirror serves from an allowed repository is fetched with them
    public = spec.parse_oci("ghcr.io/public/tool:1")
    assert public is not None
    with pytest.raises(_Stop):
        features_module._fetch_oci(public, "1", features, Registries(), lambda _e: None)  # type: ignore[arg-type]
    assert made[-1] == {"username": "service", "password": "s3cret"}


@pytest.mark.parametrize(
    "written", ["127.0.0.1:2375/x/feature:1", "10.0.0.7/x/feature:1", "localhost:5000/x/f:1"]
)
def test_the_shared_service_fetches_no_feature_from_a_private_address_it_was_not_given(
    monkeypatch: pytest.MonkeyPatch, written: str
) -> None:
    # Given the shared service, and a registry at a loopback or private address that its
    # administrator configured nowhere (the service's own ports, the machine's network)
    made: list[str] = []

    class Registries:
        user = "gpudev-alice"
        credentials: ClassVar[dict[str, Any]] = {"registry.internal:5000": {}}

        def pulls_with_credentials(self, _ref: str) -> bool:
            return False

    def client(registry: str, auth: dict[str, str], **_: Any) -> Any:
        made.append(registry)
        raise _Stop

    monkeypatch.setattr(features_module, "OCIClient", client)
    ref = spec.parse_oci(written)
    assert ref is not None
    # When alice names a feature there: refused before any request
    with pytest.raises(BadRequest, match="not a public address"):
        features_module._fetch_oci(ref, "1", Features(), Registries(), lambda _e: None)  # type: ignore[arg-type]
    assert made == []
    # But a registry the administrator configured (credentials, a mirror) is asked
    mirrored = Features(registry_mirrors={ref.registry: "registry.internal:5000"})
    with pytest.raises(_Stop):
        features_module._fetch_oci(ref, "1", mirrored, Registries(), lambda _e: None)  # type: ignore[arg-type]
    assert made == ["registry.internal:5000"]


def test_a_local_feature_is_bounded_as_it_is_packed(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Given a local feature holding a sparse file of 1 TiB (no disk used, read as zeros)
    folder = tmp_path / ".devcontainer" / "huge"
    folder.mkdir(parents=True)
    (folder / "devcontainer-feature.json").write_text('{"id": "huge", "version": "1"}')
    with (folder / "blob").open("wb") as blob:
        blob.truncate(1 << 40)
    ref = spec.FeatureRef("./huge", "local", path=str(folder))
    request = spec.FeatureRequest(ref, {})
    packed: list[int] = []
    real = features_module.pack_context  # type: ignore[attr-defined]

    def watched(*args: Any, **kwargs: Any) -> Any:
        archive = real(*args, **kwargs)
        packed.append(archive.seek(0, 2))
        archive.seek(0)
        return archive

    monkeypatch.setattr(features_module, "pack_context", watched)
    # When it is fetched: refused while packing, before the temporary file grows past the limit
    with pytest.raises(BadRequest, match="over"):
        features_module._fetch(request, Features(), None, {}, lambda _e: None, caps=())  # type: ignore[arg-type]
    assert packed == []


def test_the_features_of_an_environment_are_bounded_together(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Given an environment of three features of 60 MiB each (each under its own limit)
    write_env(
        tmp_path,
        {"image": "python:3.12", "features": {f"ghcr.io/a/b/f{i}:1": {} for i in range(3)}},
    )
    env = EnvironmentManager().get("e", tmp_path)
    big = archives.Archive((archives.Member("install.sh", "file", 0o755, b"x" * (60 << 20)),), "d")
    fetched: list[str] = []

    def fetch(request: spec.FeatureRequest, *_: Any, **__: Any) -> spec.Resolved:
        fetched.append(request.ref.written)
        return spec.Resolved(request, spec.FeatureMeta(request.ref.id, "1", {}, {}), big)

    monkeypatch.setattr(features_module, "_fetch", fetch)
    # When their image is made: refused once they hold more than the limit, before the third
    with pytest.raises(BadRequest, match="more than 128 MiB"):
        features_module.install_features(
            None,  # type: ignore[arg-type]
            env,
            "python:3.12",
            registries=Registries(),
            say=lambda _e: None,
            log=None,
            settings=Features(),
        )
    assert len(fetched) == 3


@pytest.mark.parametrize(
    ("base", "is_id"),
    [
        ("sha256:" + "ab" * 32, True),
        ("ab" * 6, True),
        ("sha256:" + "ab" * 6, True),
        ("abab", False),  # too short to be an id
        ("cd" * 6, False),  # another image's
        ("python:3.12", False),
        ("gpudev-env-x:" + "ab" * 6, False),
    ],
)
def test_a_features_base_written_as_its_id_is_built_from_as_it_is(base: str, is_id: bool) -> None:
    # An id cannot move: the build is FROM it, without a temporary name (which, as the last
    # name of a nameless image, would take the image with it when removed)
    assert features_module._is_id(base, "sha256:" + "ab" * 32) is is_id
