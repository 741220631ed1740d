"""A container's packages from its image's, its ``docker diff`` and files read as data."""

from __future__ import annotations

import io
import json
import tarfile
from collections.abc import Mapping

import pytest

from jupyter_gpudev.changes import compare, dockerfile, model
from jupyter_gpudev.changes import packages as package_state

A, C, D = package_state.ADDED, package_state.CHANGED, package_state.DELETED
LOCAL = "/usr/local/lib/python3.11/dist-packages"
DEBIAN = "/usr/lib/python3/dist-packages"

STATUS = """Package: dpkg
Status: install ok installed
Architecture: amd64
Version: 1.21.22

Package: libc6
Status: install ok installed
Architecture: amd64
Multi-Arch: same
Version: 2.36-9+deb12u4
Description: the C library
 with a continuation line: not a field

Package: cowsay
Status: hold ok installed
Architecture: all
Version: 3.03+dfsg2-8

Package: libfoo
Status: install ok installed
Architecture: i386
Version: 1.0

Package: removed-one
Status: deinstall ok config-files
Architecture: amd64
Version: 1.0

Package: Bad_Name;rm
Status: install ok installed
Version: 1.0
"""


def image_state() -> model.PackageState:
    system = model.PythonEnv(
        "/usr/bin/python3",
        "/usr",
        "/usr",
        "3.11",
        True,
        {
            "packaging": model.PyDist("packaging", "23.0"),
            "six": model.PyDist("six", "1.16.0"),
            "gpudevbase": model.PyDist("gpudevbase", "1.0"),
        },
    )
    venv = model.PythonEnv(
        "/opt/old/bin/python",
        "/opt/old",
        "/usr",
        "3.11",
        True,
        {"rich": model.PyDist("rich", "13")},
    )
    return model.PackageState(
        dpkg={"dpkg": "1.21.22", "libc6:amd64": "2.36-9+deb12u4", "perl": "5.36"},
        dpkg_auto=frozenset({"perl"}),
        python={"/usr": system, "/opt/old": venv},
    )


def reader(
    files: Mapping[str, bytes | str], calls: list[str] | None = None
) -> package_state.Reader:
    def read(path: str, limit: int) -> bytes | None:
        if calls is not None:
            calls.append(path)
        data = files.get(path)
        if isinstance(data, Exception):
            raise data
        if data is None:
            return None
        raw = data.encode() if isinstance(data, str) else data
        if len(raw) > limit:
            raise package_state.Unreadable(f"{len(raw)} bytes, over the limit of {limit}")
        return raw

    return read


def diff(*entries: tuple[str, int]) -> list[dict[str, object]]:
    return [{"Path": path, "Kind": kind} for path, kind in entries]


def metadata(name: str, version: str) -> str:
    return f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\n\nName: not-this\n"


def test_dpkg_status_names_packages_as_dpkg_query_does() -> None:
    problems: list[str] = []
    # When dpkg's status file is read
    installed = package_state.parse_dpkg_status(STATUS, problems)
    # Then installed and held packages are there, Multi-Arch: same and foreign ones qualified
    assert installed == {
        "dpkg": "1.21.22",
        "libc6:amd64": "2.36-9+deb12u4",
        "cowsay": "3.03+dfsg2-8",
        "libfoo:i386": "1.0",
    }
    # And the entry with a bad name is skipped and reported
    assert problems == ["/var/lib/dpkg/status: a package entry skipped ('Bad_Name;rm')"]


def test_an_unchanged_container_has_its_images_packages_and_nothing_is_read() -> None:
    calls: list[str] = []
    derived = package_state.current_state(image_state(), diff(("/etc/motd", C)), reader({}, calls))
    assert derived.result.state == image_state()
    assert derived.result.owned_files == set()
    assert calls == []


def test_apt_changes_are_read_from_dpkgs_files() -> None:
    # Given a container where apt installed cowsay (and a dependency, marked automatic)
    files = {
        package_state.DPKG_STATUS: STATUS,
        package_state.APT_EXTENDED_STATES: (
            "Package: libfoo\nArchitecture: i386\nAuto-Installed: 1\n"
        ),
        "/var/lib/dpkg/info/cowsay.list": "/.\n/usr/games/cowsay\n/usr/share/cowsay/../x\n",
        "/var/lib/dpkg/info/libfoo:i386.list": "/usr/lib/libfoo.so\n",
    }
    entries = diff(
        (package_state.DPKG_STATUS, C),
        (package_state.APT_EXTENDED_STATES, C),
        ("/usr/games/cowsay", A),
    )
    derived = package_state.current_state(image_state(), entries, reader(files))
    state = derived.result.state
    # Then the packages are the status file's, perl gone, the marks apt's
    assert state.dpkg["cowsay"] == "3.03+dfsg2-8"
    assert "perl" not in state.dpkg
    assert state.dpkg_auto == {"libfoo:i386"}
    assert compare.package_changes(image_state(), state).apt.added == [("cowsay", "3.03+dfsg2-8")]
    # And the files of the changed packages are theirs, normalized
    assert {"/usr/games/cowsay", "/usr/share/x", "/usr/lib/libfoo.so"} <= derived.result.owned_files
    assert "libc6:amd64" in state.dpkg  # unchanged: its list is not read
    assert derived.problems == ["/var/lib/dpkg/status: a package entry skipped ('Bad_Name;rm')"]


def test_pip_installs_upgrades_and_uninstalls_come_from_the_dist_info_folders() -> None:
    # Given pip installed iniconfig (editable), upgraded packaging, uninstalled gpudevbase
    ini, pkg = f"{LOCAL}/iniconfig-2.0.0.dist-info", f"{LOCAL}/packaging-24.1.dist-info"
    files = {
        f"{ini}/METADATA": metadata("iniconfig", "2.0.0"),
        f"{ini}/RECORD": "iniconfig/__init__.py,sha256=x,1\n../../../bin/ini,,\n",
        f"{ini}/direct_url.json": json.dumps(
            {"url": "file:///src/ini", "dir_info": {"editable": True}}
        ),
        f"{pkg}/METADATA": metadata("packaging", "24.1"),
        f"{pkg}/RECORD": "packaging/__init__.py,,\n",
    }
    entries = diff(
        (ini, A),
        *((p, A) for p in files if p.startswith(ini)),
        (pkg, A),
        (f"{pkg}/METADATA", A),
        (f"{pkg}/RECORD", A),
        (f"{DEBIAN}/packaging-23.0.dist-info", D),
        (f"{LOCAL}/gpudevbase-1.0.dist-info", D),
        (f"{LOCAL}/gpudevbase", D),
    )
    calls: list[str] = []
    derived = package_state.current_state(image_state(), entries, reader(files, calls))
    changes = compare.package_changes(image_state(), derived.result.state)
    (system,) = [p for p in changes.python if p.env.prefix == "/usr"]
    # Then each is what pip did
    assert [(d.name, d.version, d.source) for d in system.added] == [
        ("iniconfig", "2.0.0", "editable")
    ]
    assert [(a.version, b.version) for a, b in system.upgraded] == [("23.0", "24.1")]
    assert [d.name for d in system.removed] == ["gpudevbase"]
    # And the files their RECORDs list are owned (relative to the site folder)
    assert {f"{LOCAL}/iniconfig/__init__.py", "/usr/local/bin/ini"} <= derived.result.owned_files
    # And a new folder's direct_url.json is read only when the diff lists it
    assert f"{pkg}/direct_url.json" not in calls
    assert derived.problems == []


def test_a_new_venv_is_found_from_its_pyvenv_cfg_and_a_deleted_one_is_gone() -> None:
    venv = "/opt/tools"
    dist = f"{venv}/lib/python3.11/site-packages/rich-13.7.dist-info"
    files = {
        f"{venv}/pyvenv.cfg": "home = /usr/bin\ninclude-system-site-packages = false\n"
        "version = 3.11.2\n",
        f"{dist}/METADATA": metadata("rich", "13.7"),
        "/srv/a/b/c/d/pyvenv.cfg": "home = /usr/bin\nversion = 3.11.2\n",
    }
    entries = diff(
        (venv, A),
        (f"{venv}/pyvenv.cfg", A),
        (f"{venv}/bin/python", A),
        (dist, A),
        (f"{dist}/METADATA", A),
        ("/opt/nopython/pyvenv.cfg", A),  # no bin/python: not an environment
        ("/srv/a/b/c/d/pyvenv.cfg", A),  # deeper than the probe looked
        ("/srv/a/b/c/d/bin/python", A),
        ("/opt/old", D),
    )
    state = package_state.current_state(image_state(), entries, reader(files)).result.state
    assert sorted(state.python) == ["/opt/tools", "/usr"]
    tools = state.python["/opt/tools"]
    assert (tools.python, tools.base_prefix, tools.version) == (
        "/opt/tools/bin/python",
        "/usr",
        "3.11",
    )
    assert tools.is_venv
    assert tools.externally_managed
    assert {k: d.version for k, d in tools.dists.items()} == {"rich": "13.7"}
    changes = compare.package_changes(image_state(), state)
    assert "the Python environment /opt/old was deleted (see the files)" in changes.notes


def test_user_sites_belong_to_the_system_interpreter() -> None:
    site = "/home/dev/.local/lib/python3.11/site-packages/tqdm-4.66.dist-info"
    files = {f"{site}/METADATA": metadata("tqdm", "4.66")}
    entries = diff((site, A), (f"{site}/METADATA", A))
    state = package_state.current_state(image_state(), entries, reader(files)).result.state
    assert state.python["/usr"].dists["tqdm"].version == "4.66"
    assert "tqdm" not in state.python["/opt/old"].dists


def test_conda_histories_are_read_when_changed() -> None:
    history = "/opt/conda/conda-meta/history"
    files = {
        history: "==> 2024 <==\n# cmd: conda install numpy\n# update specs: ['numpy']\n",
        "/root/.condarc": "channels:\n  - conda-forge\n",
    }
    entries = diff((history, C), ("/root/.condarc", A))
    state = package_state.current_state(image_state(), entries, reader(files)).result.state
    assert state.conda == {"/opt/conda": model.CondaEnv("/opt/conda", ("numpy",), ("conda-forge",))}


@pytest.mark.parametrize(
    "content",
    [
        "Name: e vil\nVersion: 1\n",
        "Name: ok-name\nVersion: 1.0; rm -rf /\n",
        "Name: ../../etc\nVersion: 1\n",
        "\x00\xff\xfe garbage",
        package_state.Unreadable("not a regular file"),
        "x" * (package_state.METADATA_LIMIT + 1),
    ],
)
def test_hostile_metadata_is_skipped_and_reported_never_raised(content: object) -> None:
    folder = f"{LOCAL}/evil-1.dist-info"
    read = reader({f"{folder}/METADATA": content})  # type: ignore[dict-item]
    derived = package_state.current_state(
        image_state(), diff((folder, A), (f"{folder}/METADATA", A)), read
    )
    assert derived.result.state.python["/usr"].dists == image_state().python["/usr"].dists
    assert derived.problems
    assert derived.problems[0].startswith(folder)


def test_a_hostile_status_file_or_bad_diff_entries_do_not_raise() -> None:
    entries: list[dict[str, object]] = [
        {"Path": package_state.DPKG_STATUS, "Kind": C},
        {"Path": None, "Kind": 1},
        {"Path": "relative/path", "Kind": 1},
        {"Path": "/x", "Kind": 7},
        {"Kind": 1},
    ]
    read = reader(
        {package_state.DPKG_STATUS: "Package: \x00\nStatus: install ok installed\n\n\n::::\n"}
    )
    derived = package_state.current_state(image_state(), entries, read)
    assert derived.result.state.dpkg == {}
    assert derived.problems


def tar_of(*members: tuple[str, bytes | None]) -> io.BytesIO:
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w") as tar:
        for name, data in members:
            info = tarfile.TarInfo(name)
            if data is None:
                info.type = tarfile.SYMTYPE
                info.linkname = "/etc/shadow"
                tar.addfile(info)
            else:
                info.size = len(data)
                tar.addfile(info, io.BytesIO(data))
    buffer.seek(0)
    return buffer


def test_one_regular_file_is_taken_from_an_archive_and_nothing_else() -> None:
    assert package_state.read_single_file(tar_of(("status", b"abc")), "status", 10) == b"abc"
    with pytest.raises(package_state.Unreadable):
        package_state.read_single_file(tar_of(("status", b"abc")), "status", 2)
    with pytest.raises(package_state.Unreadable):
        package_state.read_single_file(tar_of(("status", None)), "status", 10)
    with pytest.raises(package_state.Unreadable):
        package_state.read_single_file(tar_of(("other", b"abc")), "status", 10)
    with pytest.raises(package_state.Unreadable):
        package_state.read_single_file(
            tar_of(("status", b"abc"), ("status", b"more")), "status", 10
        )


RECOMMENDS_STATUS = """Package: dpkg
Status: install ok installed
Architecture: amd64
Version: 1.21.22

Package: cowsay
Status: install ok installed
Architecture: all
Version: 3.03+dfsg2-8
Depends: libtext-charwidth-perl:any, perl:any
Recommends: netbase

Package: perl
Status: install ok installed
Architecture: amd64
Version: 5.36.0-7
Pre-Depends: dpkg (>= 1.17.17)
Depends: perl-base (= 5.36.0-7), libdb | libgdbm6 (>= 1.16)
Recommends: netbase

Package: libtext-charwidth-perl
Status: install ok installed
Architecture: amd64
Version: 0.04-11
Depends: perlapi-5.36.0

Package: perl-base
Status: install ok installed
Architecture: amd64
Version: 5.36.0-7
Provides: perlapi-5.36.0

Package: libgdbm6
Status: install ok installed
Architecture: amd64
Multi-Arch: same
Version: 1.23-3

Package: netbase
Status: install ok installed
Architecture: all
Version: 6.4

Package: old-leftover
Status: deinstall ok config-files
Architecture: all
Version: 1.0
"""


def test_automatic_packages_nothing_depends_on_were_recommended_and_are_rendered() -> None:
    # Given apt installed cowsay from a .deb, with Recommends: perl and its dependencies are
    # automatic and needed (by name, by Provides, through an alternative), netbase only
    # recommended
    auto = frozenset({"perl", "perl-base", "libtext-charwidth-perl", "libgdbm6:amd64", "netbase"})
    assert package_state.unrequired_packages(RECOMMENDS_STATUS, auto) == {"netbase"}
    marks = "".join(f"Package: {p.split(':')[0]}\nAuto-Installed: 1\n\n" for p in auto)
    files = {package_state.DPKG_STATUS: RECOMMENDS_STATUS, package_state.APT_EXTENDED_STATES: marks}
    entries = diff((package_state.DPKG_STATUS, C), (package_state.APT_EXTENDED_STATES, C))
    base = model.PackageState(dpkg={"dpkg": "1.21.22", "perl-base": "5.36.0-7"})
    state = package_state.current_state(base, entries, reader(files)).result.state
    assert state.dpkg_unrequired == {"netbase"}
    # Then the change set installs netbase by name and marks it automatic again
    changes = compare.package_changes(base, state)
    assert changes.apt.added == [("cowsay", "3.03+dfsg2-8")]
    assert changes.apt.recommended == [("netbase", "6.4")]
    lines = "\n".join(dockerfile.change_lines(changes, "box", "env", "ctx", None)[0])
    assert "      cowsay=3.03+dfsg2-8 \\\n      netbase=6.4 \\\n" in lines
    assert " && apt-mark auto netbase >/dev/null \\\n && rm -rf /var/lib/apt/lists/*" in lines
    assert [i.id for i in dockerfile.change_items(changes)] == ["apt:cowsay", "apt:netbase"]
    assert not changes.without({"apt:netbase"}).apt.recommended
    # (a recommended package the base image already had is no change)
    assert not compare.package_changes(
        model.PackageState(dpkg={"netbase": "6.4"}), state
    ).apt.recommended


def test_a_legacy_editable_install_is_an_editable_install_not_an_index_one() -> None:
    # Given `pip install -e` of a setup.py project: an egg-link, no dist-info, no direct_url
    files = {
        f"{LOCAL}/mypkg.egg-link": "/root/mypkg\n.",
        f"{LOCAL}/easy-install.pth": "/root/mypkg\n",
        "/root/mypkg/mypkg.egg-info/PKG-INFO": metadata("mypkg", "0.1"),
        f"{LOCAL}/evil.egg-link": "relative/path\n",
    }
    entries = diff(
        (f"{LOCAL}/mypkg.egg-link", A),
        (f"{LOCAL}/easy-install.pth", A),
        ("/root/mypkg/mypkg.egg-info/PKG-INFO", A),
        (f"{LOCAL}/evil.egg-link", A),
        ("/opt/elsewhere/other.egg-link", A),
    )
    derived = package_state.current_state(image_state(), entries, reader(files))
    # Then it is an editable install from the project's folder, its egg-link not a kept file
    dist = derived.result.state.python["/usr"].dists["mypkg"]
    assert dist == model.PyDist("mypkg", "0.1", "editable", "file:///root/mypkg")
    assert f"{LOCAL}/mypkg.egg-link" in derived.result.owned_files
    changes = compare.package_changes(image_state(), derived.result.state)
    assert [n for n in changes.notes if "mypkg" in n] == [
        "mypkg 0.1 is an editable install from file:///root/mypkg (/usr/bin/python3): a "
        "Dockerfile cannot install it from there; add its source to the build context and "
        "install it in the Dockerfile"
    ]
    lines = "\n".join(dockerfile.change_lines(changes, "box", "env", "ctx", None)[0])
    assert "mypkg" not in lines
    assert derived.problems == [
        f"{LOCAL}/evil.egg-link: not an egg-link naming a project folder, skipped"
    ]


class _Source:
    """An ``ArchiveSource`` of fixed archives (as a container's own layer answers)."""

    name = "box"

    def __init__(self, archives: dict[str, tuple[io.BytesIO, dict[str, object]]]) -> None:
        self.archives = archives

    def get(self, path: str) -> tuple[list[bytes], dict[str, object]] | None:
        found = self.archives.get(path)
        return None if found is None else ([found[0].getvalue()], found[1])


def test_a_file_is_read_from_an_archive_source_as_from_the_engine() -> None:
    source = _Source(
        {
            "/var/log/gpudev/commands.log": (tar_of(("commands.log", b"pip install x\n")), {}),
            "/big": (tar_of(("big", b"x" * 20)), {"size": 20}),
            "/link": (tar_of(("link", None)), {"size": 11}),
        }
    )
    read = package_state.SourceReader(source)
    assert read("/var/log/gpudev/commands.log", 100) == b"pip install x\n"
    assert read("/missing", 100) is None
    with pytest.raises(package_state.Unreadable):
        read("/big", 10)  # over the limit, said before its content is read
    with pytest.raises(package_state.Unreadable):
        read("/link", 100)  # a link the container put there is not followed
