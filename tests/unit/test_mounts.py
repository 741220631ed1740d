"""Mount policy on real folders and real symbolic links, and on a remote host's through a runner
that stands in for it, without an engine."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path
from typing import Any

import pytest

from jupyter_gpudev.environments import (
    CA_BUNDLE_ENV_VARS,
    DeclaredMount,
    MountNotAllowed,
    MountPolicy,
    RemotePaths,
    ResolvedMount,
)
from jupyter_gpudev.errors import BadRequest, ConfigError, GPUDevError


@pytest.fixture
def tree(tmp_path: Path) -> Path:
    """tmp/data (an allowed root) with a file, a folder and links; tmp/data-secret beside it."""
    data = tmp_path / "data"
    (data / "sets" / "imagenet").mkdir(parents=True)
    (data / "readme.txt").write_text("hi")
    secret = tmp_path / "data-secret"
    secret.mkdir()
    (secret / "keys").write_text("secret")
    (data / "escape").symlink_to(secret)
    (data / "inside").symlink_to(data / "sets")
    return tmp_path


def policy(*roots: Any, **traits: Any) -> MountPolicy:
    return MountPolicy(allowed_roots=list(roots), **traits)


def refused(mounts: MountPolicy, source: str, target: str = "/mnt/x", **kwargs: Any) -> str:
    with pytest.raises(GPUDevError) as caught:
        mounts.resolve(source, target, **kwargs)
    assert isinstance(caught.value, (BadRequest, MountNotAllowed))
    assert 400 <= caught.value.status < 500
    return caught.value.message


def test_a_folder_under_a_root_is_mounted_read_only(tree: Path) -> None:
    # Given /data is an allowed (read-only) root
    mounts = policy(str(tree / "data"))
    # When a folder under it is mounted
    mount = mounts.resolve(str(tree / "data" / "sets"), "/data/sets/")
    # Then the source is the real path, the target normalized, and it is read-only
    assert mount == ResolvedMount(str((tree / "data" / "sets").resolve()), "/data/sets", True)
    # And Docker gets a bind mount
    docker_mount = mount.to_docker()
    assert docker_mount["Type"] == "bind"
    assert docker_mount["Source"] == mount.source
    assert docker_mount["Target"] == "/data/sets"
    assert docker_mount["ReadOnly"] is True


def test_writable_roots(tree: Path) -> None:
    mounts = policy({"path": str(tree / "data"), "writable": True})
    assert mounts.resolve(str(tree / "data"), "/data").read_only is False
    assert mounts.resolve(str(tree / "data"), "/data", read_only=True).read_only is True
    assert mounts.resolve(str(tree / "data"), "/data", read_only=False).read_only is False


def test_read_write_under_a_read_only_root_is_refused(tree: Path) -> None:
    message = refused(policy(str(tree / "data")), str(tree / "data" / "sets"), read_only=False)
    assert "its root" in message
    assert "is read-only" in message


def test_the_most_specific_root_decides(tree: Path) -> None:
    # Given /data read-only and /data/sets writable
    mounts = policy(str(tree / "data"), {"path": str(tree / "data" / "sets"), "writable": True})
    # Then a folder under /data/sets is writable, the rest of /data is not
    assert mounts.resolve(str(tree / "data" / "sets" / "imagenet"), "/i").read_only is False
    assert mounts.resolve(str(tree / "data" / "readme.txt"), "/r").read_only is True


def test_a_link_inside_a_root_to_inside_it_resolves(tree: Path) -> None:
    mount = policy(str(tree / "data")).resolve(str(tree / "data" / "inside"), "/sets")
    assert mount.source == str((tree / "data" / "sets").resolve())


def test_a_link_pointing_outside_the_root_is_refused(tree: Path) -> None:
    # Given a symlink under /data that points to /data-secret
    mounts = policy(str(tree / "data"))
    # When it is mounted, directly or through a path below it
    for source in (tree / "data" / "escape", tree / "data" / "escape" / "keys"):
        message = refused(mounts, str(source))
        # Then it is refused, naming the path, where it leads and the rule
        assert str(source) in message
        assert "data-secret" in message
        assert "outside the folders of this machine that may be mounted" in message


def test_a_root_that_is_itself_a_link_is_resolved(tree: Path) -> None:
    (tree / "data-link").symlink_to(tree / "data")
    mounts = policy(str(tree / "data-link"))
    assert mounts.resolve(str(tree / "data" / "sets"), "/s").source.endswith("/data/sets")
    assert "outside" in refused(mounts, str(tree / "data-secret"))


def test_a_name_that_only_starts_like_the_root_is_outside_it(tree: Path) -> None:
    message = refused(policy(str(tree / "data")), str(tree / "data-secret"))
    assert "outside the folders of this machine that may be mounted" in message


@pytest.mark.parametrize(
    ("source", "target", "message"),
    [
        ("{data}/../data-secret", "/mnt/x", "contains '..'"),
        ("{data}/sets/..", "/mnt/x", "contains '..'"),
        ("{data}/sets", "/mnt/../etc", "contains '..'"),
        ("data/sets", "/mnt/x", "must be an absolute path"),
        ("", "/mnt/x", "must be a host path"),
        ("{data}/missing", "/mnt/x", "does not exist"),
        ("{data}/sets", "mnt/x", "must be an absolute path"),
        ("{data}/sets", "", "must be a path inside the container"),
    ],
)
def test_malformed_mounts_are_refused(tree: Path, source: str, target: str, message: str) -> None:
    source = source.format(data=tree / "data")
    text = refused(policy(str(tree / "data")), source, target)
    assert message in text


def test_a_missing_path_outside_the_roots_is_not_probed(tree: Path) -> None:
    # A path outside the roots is refused for that, whether it exists or not
    assert "outside" in refused(policy(str(tree / "data")), "/no/such/folder")


@pytest.mark.parametrize(
    "target",
    [
        "/",
        "//",
        "/etc",
        "/etc/ssl/certs",
        "//etc",
        "/usr/local/lib",
        "/proc/1",
        "/sys",
        "/dev/shm",
        "/bin",
        "/sbin",
        "/lib",
        "/lib64/x",
        "/boot",
        "/run/secrets",
        "/var/run/nvidia-container-devices/all",  # the runtime's GPU list, where it reads mounts
        "/var/run",
    ],
)
def test_system_targets_are_refused(tree: Path, target: str) -> None:
    with pytest.raises(MountNotAllowed) as caught:
        policy(str(tree / "data")).resolve(str(tree / "data"), target)
    assert caught.value.status == 403
    assert caught.value.code == "mount_not_allowed"


def test_nothing_is_mounted_without_roots(tree: Path) -> None:
    message = refused(policy(), str(tree / "data"))
    assert "c.MountPolicy.allowed_roots is empty" in message


@pytest.mark.parametrize(
    ("entry", "message"),
    [
        ("relative/path", "absolute path"),
        ({"path": "/data", "writable": "yes"}, "'writable' must be"),
        ({"path": "/data", "colour": "red"}, "unknown keys"),
        ({"writable": True}, "absolute path"),
        ("/data/../etc", "without '..'"),
    ],
)
def test_bad_roots_are_config_errors(entry: Any, message: str) -> None:
    with pytest.raises(ConfigError, match=message) as caught:
        policy(entry).roots()
    assert "c.MountPolicy.allowed_roots[0]" in caught.value.message


def test_workspace_mount(tmp_path: Path) -> None:
    # Given a Jupyter root reached through a link
    (tmp_path / "project").mkdir()
    (tmp_path / "root-link").symlink_to(tmp_path / "project")
    mounts = policy()
    # When it is mounted as the workspace
    mount = mounts.workspace(tmp_path / "root-link", "/workspaces/project")
    # Then it is the real folder, read-write, even without allowed roots
    assert mount == ResolvedMount(
        str((tmp_path / "project").resolve()), "/workspaces/project", False
    )
    # And its target follows the same rules as any mount
    with pytest.raises(MountNotAllowed, match="system path"):
        mounts.workspace(tmp_path / "project", "/usr/src")
    with pytest.raises(BadRequest, match=r"'\.\.'"):
        mounts.workspace(tmp_path / "project", "/workspaces/../etc")


def test_ca_bundle(tmp_path: Path) -> None:
    bundle = tmp_path / "ca.pem"
    bundle.write_text("-----BEGIN CERTIFICATE-----\n")
    # Off by default
    assert policy(ca_bundle_path=str(bundle)).ca_bundle() == (None, {})
    # On: a read-only mount at the same path, and every tool pointed at it
    mount, env = policy(mount_ca_bundle=True, ca_bundle_path=str(bundle)).ca_bundle()
    assert mount == ResolvedMount(str(bundle.resolve()), str(bundle), True)
    assert env == dict.fromkeys(CA_BUNDLE_ENV_VARS, str(bundle))
    assert {"PIP_CERT", "REQUESTS_CA_BUNDLE", "SSL_CERT_FILE", "CURL_CA_BUNDLE"} <= set(env)
    assert {"CONDA_SSL_VERIFY", "NODE_EXTRA_CA_CERTS"} <= set(env)
    # On, but the file is missing: nothing
    missing = policy(mount_ca_bundle=True, ca_bundle_path=str(tmp_path / "none.pem"))
    assert missing.ca_bundle() == (None, {})
    # A relative path is an administrator's mistake
    with pytest.raises(ConfigError, match="ca_bundle_path"):
        policy(mount_ca_bundle=True, ca_bundle_path="ca.pem").ca_bundle()


def test_the_default_ca_bundle_is_mounted_over_the_image_one(tmp_path: Path) -> None:
    mounts = MountPolicy(mount_ca_bundle=True)
    mount, env = mounts.ca_bundle()
    if mount is None:
        pytest.skip("this host has no /etc/ssl/certs/ca-certificates.crt")
    assert mount.target == "/etc/ssl/certs/ca-certificates.crt"
    assert env["SSL_CERT_FILE"] == mount.target


def test_declared_mounts(tree: Path) -> None:
    # Given a read-only root and an environment's mounts
    mounts = policy(str(tree / "data"), {"path": str(tree / "data" / "sets"), "writable": True})
    declared = [
        DeclaredMount(str(tree / "data" / "readme.txt"), "/readme.txt", False, "bind"),
        DeclaredMount(str(tree / "data" / "sets"), "/sets", False, "bind"),
        DeclaredMount(str(tree / "data" / "sets"), "/sets-ro", True, "bind"),
    ]
    # Then each is resolved; without "readonly" a mount follows its root
    assert [(m.target, m.read_only) for m in mounts.resolve_declared(declared)] == [
        ("/readme.txt", True),
        ("/sets", False),
        ("/sets-ro", True),
    ]
    # And an escaping one or a named volume is refused
    with pytest.raises(MountNotAllowed, match="escape"):
        mounts.resolve_declared([DeclaredMount(str(tree / "data" / "escape"), "/x")])
    with pytest.raises(BadRequest, match="named volumes are not supported yet"):
        mounts.resolve_declared([DeclaredMount("pip-cache", "/root/.cache/pip", False, "volume")])


def test_a_read_only_root_inside_a_writable_one_stays_read_only(tmp_path: Path) -> None:
    # Given /data is writable but /data/secret is declared read-only
    data = tmp_path / "data"
    (data / "secret").mkdir(parents=True)
    policy = MountPolicy(
        allowed_roots=[{"path": str(data), "writable": True}, str(data / "secret")]
    )
    # When /data is mounted without saying, it is read-only (else /data/secret would be writable)
    assert policy.resolve(str(data), "/mnt/data").read_only is True
    # And asking for a writable /data is refused, naming the nested root
    with pytest.raises(MountNotAllowed, match="contains the read-only root"):
        policy.resolve(str(data), "/mnt/data", read_only=False)
    # While a sibling folder of the secret one is writable as before
    (data / "scratch").mkdir()
    assert policy.resolve(str(data / "scratch"), "/mnt/scratch").read_only is False


# --------------------------------------------------------------------------------------------
# The workspace guard: no container gets SSH keys, registry credentials or gpudev's state
# --------------------------------------------------------------------------------------------


@pytest.fixture
def home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A home folder with SSH keys and Docker credentials, and the Jupyter folders in it."""
    home = tmp_path / "home" / "ada"
    (home / ".ssh").mkdir(parents=True)
    (home / ".ssh" / "id_ed25519").write_text("private key")
    (home / ".docker").mkdir()
    (home / "projects" / "thesis").mkdir(parents=True)
    monkeypatch.setenv("HOME", str(home))
    for variable in ("JUPYTER_CONFIG_DIR", "JUPYTER_DATA_DIR", "JUPYTER_RUNTIME_DIR"):
        monkeypatch.delenv(variable, raising=False)
    return home


def test_a_workspace_that_contains_ssh_keys_is_refused_with_what_to_do(home: Path) -> None:
    with pytest.raises(MountNotAllowed) as caught:
        MountPolicy().workspace(home, "/workspace")
    message = caught.value.message
    assert f"contains {home / '.ssh'}" in message
    assert "--ServerApp.root_dir" in message
    assert "c.MountPolicy.allow_protected" in message
    assert caught.value.status == 403


def test_a_linked_workspace_that_leads_to_the_home_is_refused_too(home: Path) -> None:
    link = home.parent / "work-link"
    link.symlink_to(home)
    with pytest.raises(MountNotAllowed, match=r"\.ssh"):
        MountPolicy().workspace(link, "/workspace")


def test_a_project_folder_is_mounted(home: Path) -> None:
    mount = MountPolicy().workspace(home / "projects" / "thesis", "/workspace")
    assert mount.source == str(home / "projects" / "thesis")


def test_the_jupyter_folders_are_protected_wherever_they_are(
    home: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    config = tmp_path / "site" / "jupyter-config"
    config.mkdir(parents=True)
    monkeypatch.setenv("JUPYTER_CONFIG_DIR", str(config))
    with pytest.raises(MountNotAllowed, match="jupyter-config"):
        MountPolicy().workspace(tmp_path / "site", "/workspace")


def test_gpudev_state_is_protected_even_when_others_are_allowed(home: Path) -> None:
    project = home / "projects" / "thesis"
    state = project / ".gpudev-state"
    with pytest.raises(MountNotAllowed, match="state_dir"):
        MountPolicy(allow_protected=True).workspace(project, "/workspace", state=(str(state),))
    # allow_protected lets the home through, as the administrator chose
    assert MountPolicy(allow_protected=True).workspace(home, "/workspace").source == str(home)


def test_a_declared_mount_that_contains_a_protected_folder_is_refused(home: Path) -> None:
    mounts = MountPolicy(allowed_roots=[str(home.parent)])
    with pytest.raises(MountNotAllowed, match=r"\.ssh, .*: mount a folder that does not"):
        mounts.resolve(str(home), "/mnt/home")
    assert mounts.resolve(str(home / "projects"), "/mnt/p").read_only


# --------------------------------------------------------------------------------------------
# paths resolved on a remote host, through a runner
# --------------------------------------------------------------------------------------------


#: Folders of the remote host; none of these exists on this machine.
REMOTE_ROOT = "/gpudev-remote/srv/data"


class RemoteTree:
    """A runner emulating ``realpath -m -- P`` and ``test -e/-d P`` on a remote file system
    held in memory: folders, files and symbolic links (absolute or relative targets)."""

    def __init__(
        self, dirs: set[str], files: set[str], links: dict[str, str], broken: bool = False
    ) -> None:
        self.dirs, self.files, self.links, self.broken = dirs, files, links, broken
        self.calls: list[list[str]] = []

    def resolve(self, path: str) -> str:
        todo = [part for part in path.split("/") if part]
        done: list[str] = []
        hops = 0
        while todo:
            part = todo.pop(0)
            if part == ".":
                continue
            if part == "..":
                if done:
                    done.pop()
                continue
            target = self.links.get("/" + "/".join([*done, part]))
            if target is None:
                done.append(part)
                continue
            hops += 1
            assert hops < 40, f"link loop at {path}"
            if target.startswith("/"):
                done = []
            todo = [p for p in target.split("/") if p] + todo
        return "/" + "/".join(done)

    def __call__(self, argv: list[str], timeout: float) -> subprocess.CompletedProcess[str]:
        self.calls.append(argv)
        assert timeout == 10.0
        match argv:
            case ["realpath", "-m", "--", path]:
                if self.broken:
                    return subprocess.CompletedProcess(argv, 1, "", "realpath: invalid option")
                return subprocess.CompletedProcess(argv, 0, self.resolve(path) + "\n", "")
            case ["test", "-e", path]:
                real = self.resolve(path)
                return subprocess.CompletedProcess(argv, int(real not in self.dirs | self.files))
            case ["test", "-d", path]:
                return subprocess.CompletedProcess(argv, int(self.resolve(path) not in self.dirs))
        return subprocess.CompletedProcess(argv, 127, "", f"{argv[0]}: command not found")


@pytest.fixture
def far() -> RemoteTree:
    """On host 'far': /srv/data with sets/imagenet and readme.txt, a link that escapes to
    /srv/secret, one that stays inside, /data linking to /srv/data, and a home folder."""
    srv = "/gpudev-remote/srv"
    tree = RemoteTree(
        dirs={
            srv,
            REMOTE_ROOT,
            f"{REMOTE_ROOT}/sets",
            f"{REMOTE_ROOT}/sets/imagenet",
            f"{srv}/secret",
            "/gpudev-remote/home/gpu/work",
        },
        files={f"{REMOTE_ROOT}/readme.txt", f"{srv}/secret/keys"},
        links={
            f"{REMOTE_ROOT}/escape": "../secret",
            f"{REMOTE_ROOT}/inside": f"{REMOTE_ROOT}/sets",
            "/gpudev-remote/data": "srv/data",
        },
    )
    assert not os.path.exists("/gpudev-remote"), "the remote tree must not exist here"
    return tree


TRAIT = "c.HostPool.hosts['far']['mount_roots']"


def on_far(tree: RemoteTree, *roots: Any) -> tuple[list[Any], RemotePaths, str]:
    return list(roots), RemotePaths(tree, "host 'far'"), TRAIT


def test_a_folder_under_a_remote_root_is_mounted_read_only(far: RemoteTree) -> None:
    # When a folder under the remote root is mounted
    mount = MountPolicy().resolve(
        f"{REMOTE_ROOT}/sets/", "/data/sets", site=on_far(far, REMOTE_ROOT)
    )
    # Then it is checked there and is read-only by default
    assert mount == ResolvedMount(f"{REMOTE_ROOT}/sets", "/data/sets", True)
    assert ["realpath", "-m", "--", f"{REMOTE_ROOT}/sets/"] in far.calls
    assert ["test", "-e", f"{REMOTE_ROOT}/sets"] in far.calls


def test_a_link_is_followed_on_the_remote_host(far: RemoteTree) -> None:
    # Given a link inside the root to another folder inside it
    mount = MountPolicy().resolve(
        f"{REMOTE_ROOT}/inside/imagenet", "/i", site=on_far(far, REMOTE_ROOT)
    )
    # Then the source is where the link points on that host
    assert mount.source == f"{REMOTE_ROOT}/sets/imagenet"


def test_a_remote_root_that_is_a_link_is_resolved_there(far: RemoteTree) -> None:
    # Given the root /data is a link to srv/data on that host
    mount = MountPolicy().resolve(
        "/gpudev-remote/data/readme.txt", "/r", site=on_far(far, "/gpudev-remote/data")
    )
    assert mount.source == f"{REMOTE_ROOT}/readme.txt"


def test_writable_remote_roots(far: RemoteTree) -> None:
    site = on_far(far, {"path": REMOTE_ROOT, "writable": True})
    assert MountPolicy().resolve(f"{REMOTE_ROOT}/sets", "/s", site=site).read_only is False
    assert MountPolicy().resolve(f"{REMOTE_ROOT}/sets", "/s", True, site=site).read_only is True


def test_writing_under_a_read_only_remote_root_is_refused(far: RemoteTree) -> None:
    with pytest.raises(MountNotAllowed, match=r"its root .* is read-only \(c\.HostPool"):
        MountPolicy().resolve(f"{REMOTE_ROOT}/sets", "/s", False, site=on_far(far, REMOTE_ROOT))


def test_a_link_escaping_the_remote_root_is_refused(far: RemoteTree) -> None:
    # When a link inside the root that points outside it on that host is mounted
    with pytest.raises(MountNotAllowed) as caught:
        MountPolicy().resolve(f"{REMOTE_ROOT}/escape", "/x", site=on_far(far, REMOTE_ROOT))
    # Then the refusal says where it resolves to there, on which host, under which setting
    message = caught.value.message
    assert "resolves to '/gpudev-remote/srv/secret'" in message
    assert "outside the folders of host 'far'" in message
    assert TRAIT in message
    assert caught.value.status == 403


def test_a_missing_remote_path_is_refused(far: RemoteTree) -> None:
    with pytest.raises(BadRequest, match="does not exist on host 'far'"):
        MountPolicy().resolve(f"{REMOTE_ROOT}/nope", "/n", site=on_far(far, REMOTE_ROOT))


def test_no_remote_roots_means_no_mounts(far: RemoteTree) -> None:
    with pytest.raises(MountNotAllowed, match=r"no folder of host 'far' may be mounted \(c\."):
        MountPolicy().resolve(f"{REMOTE_ROOT}/sets", "/s", site=on_far(far))


def test_a_path_that_cannot_be_resolved_remotely_is_a_bad_request(far: RemoteTree) -> None:
    far.broken = True
    with pytest.raises(BadRequest, match="could not be resolved on host 'far'"):
        MountPolicy().resolve(f"{REMOTE_ROOT}/sets", "/s", site=on_far(far, REMOTE_ROOT))


def test_the_local_allowed_roots_do_not_apply_to_a_remote_host(far: RemoteTree) -> None:
    # Given the remote root is also a local allowed root, but the remote host has none
    policy = MountPolicy(allowed_roots=[REMOTE_ROOT])
    # Then nothing is mounted on the remote host
    with pytest.raises(MountNotAllowed, match="no folder of host 'far'"):
        policy.resolve(f"{REMOTE_ROOT}/sets", "/s", site=on_far(far))


def test_the_remote_workspace_is_a_read_write_folder(far: RemoteTree) -> None:
    paths = RemotePaths(far, "host 'far'")
    mount = MountPolicy().workspace("/gpudev-remote/home/gpu/work", "/workspaces/x", paths)
    assert mount == ResolvedMount("/gpudev-remote/home/gpu/work", "/workspaces/x", False)
    assert ["test", "-d", "/gpudev-remote/home/gpu/work"] in far.calls


@pytest.mark.parametrize(
    "workspace", [f"{REMOTE_ROOT}/readme.txt", "/gpudev-remote/home/gpu/missing"]
)
def test_a_remote_workspace_that_is_not_a_folder_is_refused(
    far: RemoteTree, workspace: str
) -> None:
    paths = RemotePaths(far, "host 'far'")
    with pytest.raises(BadRequest, match=f"'{workspace}' is not a folder on host 'far'"):
        MountPolicy().workspace(workspace, "/workspaces/x", paths)


def test_a_remote_workspace_that_cannot_be_resolved_is_a_bad_request(far: RemoteTree) -> None:
    far.broken = True
    with pytest.raises(BadRequest, match="could not be resolved on host 'far'"):
        MountPolicy().workspace(
            "/gpudev-remote/home/gpu/work", "/w", RemotePaths(far, "host 'far'")
        )


def test_remote_realpath_is_asked_once_per_path(far: RemoteTree) -> None:
    paths = RemotePaths(far, "host 'far'")
    assert paths.realpath(f"{REMOTE_ROOT}/inside") == f"{REMOTE_ROOT}/sets"
    assert paths.realpath(f"{REMOTE_ROOT}/inside") == f"{REMOTE_ROOT}/sets"
    assert [c for c in far.calls if c[0] == "realpath"] == [
        ["realpath", "-m", "--", f"{REMOTE_ROOT}/inside"]
    ]
