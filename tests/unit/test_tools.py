"""npm -g and cargo install: read as data (package.json, .crates2.json as recorded by npm 9 and
cargo 1.7x), compared, rendered; what they install is theirs, not files to copy.

No Rust toolchain and crates.io index is set up by the test command (a real `cargo install`
compiles for minutes), so cargo is tested on recorded `.crates2.json` data; npm also runs for
real in tests/integration/test_reproducible.py."""

from __future__ import annotations

import json

from jupyter_gpudev.changes import compare, dockerfile, model, packages, probe, tools
from tests.unit.test_packages import diff, reader

A, C, D = packages.ADDED, packages.CHANGED, packages.DELETED
NM = "/usr/local/lib/node_modules"
CRATES2 = json.dumps(
    {
        "installs": {
            "ripgrep 14.1.0 (registry+https://github.com/rust-lang/crates.io-index)": {
                "version_req": None,
                "bins": ["rg"],
                "features": [],
                "all_features": False,
                "no_default_features": False,
                "profile": "release",
                "target": "x86_64-unknown-linux-gnu",
                "rustc": "rustc 1.74.0",
            },
            "mytool 0.1.0 (path+file:///root/mytool)": {"bins": ["mytool"]},
            "bad name; rm -rf / 1.0 (registry+x)": {},
        }
    }
)


def package_json(name: str, version: str, bins: object = None) -> str:
    return json.dumps({"name": name, "version": version, "bin": bins, "dependencies": {}})


def test_global_npm_packages_are_read_from_their_package_json() -> None:
    files = {
        f"{NM}/semver/package.json": package_json("semver", "7.6.3", {"semver": "bin/semver.js"}),
        f"{NM}/@scope/tool/package.json": package_json("@scope/tool", "1.0.0", "cli.js"),
        f"{NM}/evil/package.json": package_json("evil; rm -rf /", "1"),
    }
    entries = diff(
        (NM, A),
        (f"{NM}/semver", A),
        (f"{NM}/semver/package.json", A),
        (f"{NM}/semver/bin/semver.js", A),
        (f"{NM}/@scope/tool/package.json", A),
        (f"{NM}/evil/package.json", A),
        (f"{NM}/old", D),
        ("/usr/local/bin/semver", A),
        ("/usr/local/bin/tool", A),
    )
    image = model.PackageState(npm={"old": "2.0.0", "corepack": "0.20.0"})
    derived = packages.current_state(image, entries, reader(files))
    state = derived.result.state
    assert state.npm == {"semver": "7.6.3", "@scope/tool": "1.0.0", "corepack": "0.20.0"}
    assert {"/usr/local/bin/semver", "/usr/local/bin/tool", f"{NM}/semver/bin/semver.js"} <= (
        derived.result.owned_files
    )
    assert derived.problems == [f"{NM}/evil/package.json: no valid name and version, skipped"]
    changes = compare.package_changes(image, state)
    lines = dockerfile.change_lines(changes, "box", "env", "ctx", None)[0]
    assert lines[1:] == [
        "RUN npm install -g --no-audit --no-fund @scope/tool@1.0.0 semver@7.6.3",
        "RUN npm uninstall -g old",
    ]
    assert [i.id for i in dockerfile.change_items(changes)] == [
        "npm:@scope/tool",
        "npm:semver",
        "npm:old",
    ]
    assert model.check_change_ids(["npm:@scope/tool"]) == ("npm:@scope/tool",)
    assert [n for n, _ in changes.without({"npm:semver"}).tools.npm_added] == ["@scope/tool"]


def test_cargo_installs_are_read_from_crates2_json_and_only_crates_io_is_written() -> None:
    home = "/usr/local/cargo"
    files = {f"{home}/.crates2.json": CRATES2}
    entries = diff(
        (f"{home}/.crates2.json", C),
        (f"{home}/bin/rg", A),
        (f"{home}/registry/cache/x.crate", A),
    )
    derived = packages.current_state(model.PackageState(), entries, reader(files))
    state = derived.result.state
    assert set(state.cargo) == {f"{home}:ripgrep", f"{home}:mytool"}
    assert {f"{home}/bin/rg", f"{home}/registry/cache/x.crate"} <= derived.result.owned_files
    assert derived.problems == [
        f"{home}/.crates2.json: an entry skipped ('bad name; rm -rf / 1.0 (registry+x)')"
    ]
    changes = compare.package_changes(model.PackageState(), state)
    lines = dockerfile.change_lines(changes, "box", "env", "ctx", None)
    assert lines[0][1:] == [
        f"RUN CARGO_HOME={home} cargo install --locked --version 14.1.0 ripgrep"
    ]
    assert any("mytool 0.1.0" in n and "path+file:///root/mytool" in n for n in lines[2])
    # (a crate removed is uninstalled; an excluded one is not)
    gone = compare.package_changes(state, model.PackageState(cargo={}))
    assert [c.name for c in gone.tools.cargo_removed] == ["mytool", "ripgrep"]
    assert not changes.without({"cargo:ripgrep", "cargo:mytool"}).tools


def test_the_image_probe_lists_global_npm_packages_and_crates() -> None:
    text = (
        "@@gpudev dpkg\n@@gpudev npm\n"
        + package_json("npm", "9.2.0")
        + "\n@@gpudev npm\nnot json\n@@gpudev cargo /root/.cargo\n"
        + CRATES2
        + "\n@@gpudev cargo /etc\n{}\n@@gpudev end\n"
    )
    result = probe.parse_probe(text)
    assert result.state.npm == {"npm": "9.2.0"}
    assert set(result.state.cargo) == {"/root/.cargo:ripgrep", "/root/.cargo:mytool"}
    assert "a global npm package without a valid name and version, skipped" in result.problems
    assert model.PackageState.from_json(json.loads(json.dumps(result.state.to_json()))) == (
        result.state
    )
    assert tools.parse_package_json('{"name": "x", "version": 1}') is None
