"""Environment specs from devcontainer.json files and configuration, without an engine."""

from __future__ import annotations

import json
import os
import re
import threading
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest

from jupyter_gpudev.environments import (
    DeclaredMount,
    EnvironmentManager,
    GPURequirement,
    ImageNotAllowed,
    load_jsonc,
    normalize_image_ref,
    parse_docker_size,
    parse_gpu_memory_mib,
    parse_run_args,
    slugify,
)
from jupyter_gpudev.errors import BadRequest, ConfigError, NotFound

ROOT_FILE = ".devcontainer/devcontainer.json"


@pytest.fixture
def root(tmp_path: Path) -> Path:
    folder = tmp_path / "My Project"
    folder.mkdir()
    return folder


def write(root: Path, relative: str, content: str | dict[str, Any]) -> Path:
    path = root / relative
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(content if isinstance(content, str) else json.dumps(content))
    return path


def sub(name: str) -> str:
    return f".devcontainer/{name}/devcontainer.json"


def errors(listing: Any) -> list[dict[str, str]]:
    return [p for p in listing.problems if p["level"] == "error"]


# -- JSON with comments ------------------------------------------------------------------------


def test_jsonc_comments_trailing_commas_and_strings_that_look_like_comments() -> None:
    # Given devcontainer.json text with both comment styles, trailing commas, and strings that
    # contain comment markers and escaped quotes
    text = """{
        // a line comment
        "image": "registry.example.org//odd:1", /* a block
        comment over two lines */
        "containerEnv": {
            "URL": "http://example.org/a//b",   // the value keeps its slashes
            "GLOB": "/* not a comment */",
            "QUOTE": "say \\"hi\\" // still a string",
            "BACKSLASH": "C:\\\\",
        },
        "forwardPorts": [8888, 6006,],
    }"""
    # When it is read
    data = load_jsonc(text, "x.json")
    # Then the comments and trailing commas are gone and the strings are intact
    assert data == {
        "image": "registry.example.org//odd:1",
        "containerEnv": {
            "URL": "http://example.org/a//b",
            "GLOB": "/* not a comment */",
            "QUOTE": 'say "hi" // still a string',
            "BACKSLASH": "C:\\",
        },
        "forwardPorts": [8888, 6006],
    }


def test_jsonc_errors_name_the_file_line_and_column() -> None:
    with pytest.raises(BadRequest, match=r"^dc\.json: line 3, column 5: ") as caught:
        load_jsonc('{\n  "a": 1\n    "b": 2\n}', "dc.json")
    assert caught.value.details == {"file": "dc.json", "line": 3, "column": 5}


def test_jsonc_positions_count_from_the_original_text_after_a_comment() -> None:
    with pytest.raises(BadRequest, match="line 3, column 4"):
        load_jsonc('{ /* c */\n  "a": 1, // note\n   x }', "f")


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ('{"a": 1 /* open', "line 1, column 9: a /\\* comment is never closed"),
        ("[1,,]", "line 1"),
        ("[,]", "line 1"),
        ('{"a": NaN}', "NaN is not valid JSON"),
    ],
)
def test_jsonc_refuses_what_is_not_json(text: str, message: str) -> None:
    with pytest.raises(BadRequest, match=message):
        load_jsonc(text, "f")


def test_jsonc_accepts_a_byte_order_mark() -> None:
    assert load_jsonc('\ufeff{"a": [1,],}') == {"a": [1]}


# -- small parsers -----------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "slug"),
    [
        ("My GPU Box", "my-gpu-box"),
        ("PyTorch 2.3 (CUDA 12.1)", "pytorch-2.3-cuda-12.1"),
        ("Ünïcode_env", "unicode_env"),
        ("--x..y--", "x-y"),
        ("!!!", ""),
    ],
)
def test_slugify(text: str, slug: str) -> None:
    assert slugify(text) == slug


@pytest.mark.parametrize(
    ("text", "size"),
    [("64m", 64 << 20), ("2g", 2 << 30), ("1gb", 1 << 30), ("1GiB", 1 << 30), ("512", 512)],
)
def test_docker_sizes_are_binary(text: str, size: int) -> None:
    assert parse_docker_size(text) == size


@pytest.mark.parametrize("text", ["", "2x", "-1g", "0", "g"])
def test_bad_docker_sizes(text: str) -> None:
    with pytest.raises(ValueError, match="size"):
        parse_docker_size(text)


@pytest.mark.parametrize(
    ("text", "mib"),
    [("16gb", 15258), ("24GB", 22888), ("8000mb", 7629), ("16GiB", 16384), ("1tb", 953674)],
)
def test_gpu_memory_units_follow_the_gpu_makers(text: str, mib: int) -> None:
    assert parse_gpu_memory_mib(text) == mib


def test_image_refs_are_compared_in_one_spelling() -> None:
    assert normalize_image_ref("docker.io/library/python") == "python:latest"
    assert normalize_image_ref("registry:5000/a/b") == "registry:5000/a/b:latest"
    assert normalize_image_ref("x@sha256:abc") == "x@sha256:abc"


# -- discovery ---------------------------------------------------------------------------------


def test_image_environment_from_the_root_devcontainer(root: Path) -> None:
    # Given a root devcontainer.json with a name, an image and a few run settings
    write(
        root,
        ROOT_FILE,
        {
            "name": "My GPU Box",
            "image": "nvcr.io/nvidia/pytorch:24.01-py3",
            "containerEnv": {"HF_HOME": "${containerWorkspaceFolder}/.hf"},
            "forwardPorts": [6006],
            "postCreateCommand": "pip install -r requirements.txt",
            "postStartCommand": {"tb": ["tensorboard", "--logdir", "runs"], "echo": "echo hi"},
            "remoteUser": "dev",
        },
    )
    # When the environments are listed
    listing = EnvironmentManager().list(root)
    # Then it is there, named after its "name", with the spec's defaults filled in
    env = listing.environments[0]
    assert listing.problems == []
    assert (env.name, env.display_name, env.source) == ("my-gpu-box", "My GPU Box", ROOT_FILE)
    assert env.image_ref() == "nvcr.io/nvidia/pytorch:24.01-py3"
    assert env.build is None
    assert env.workspace_folder == "/workspaces/My Project"
    assert env.container_env == {"HF_HOME": "/workspaces/My Project/.hf"}
    assert env.forward_ports == (6006,)
    assert env.post_create_command == "pip install -r requirements.txt"
    assert env.post_start_command == {"tb": ["tensorboard", "--logdir", "runs"], "echo": "echo hi"}
    assert env.remote_user == "dev"
    assert env.gpu == GPURequirement()
    # And its JSON form is plain JSON
    body = json.loads(json.dumps(env.to_json()))
    assert body["image_ref"] == env.image
    assert body["run_options"]["ulimits"] == []


def test_unnamed_root_devcontainer_is_named_after_the_root_folder(root: Path) -> None:
    write(root, ROOT_FILE, {"image": "python:3.12"})
    assert EnvironmentManager().list(root).names()[0] == "my-project"


def test_subfolders_name_their_environments(root: Path) -> None:
    # Given two sub-folder configurations (one with a display name)
    write(root, sub("cuda12"), {"name": "CUDA 12", "image": "a:1"})
    write(root, sub("CPU Only"), {"image": "b:1"})
    # When listed
    listing = EnvironmentManager().list(root)
    # Then each is named by its folder, sorted, followed by the default
    assert listing.names() == ["cpu-only", "cuda12", "default"]
    assert listing.environments[1].display_name == "CUDA 12"
    assert listing.environments[1].source == ".devcontainer/cuda12/devcontainer.json"


def test_workspace_folder(root: Path) -> None:
    write(
        root, sub("a"), {"image": "x", "workspaceFolder": "/work//${localWorkspaceFolderBasename}/"}
    )
    write(root, sub("b"), {"image": "x", "workspaceFolder": "work"})
    write(root, sub("c"), {"image": "x", "workspaceFolder": "/work/../etc"})
    listing = EnvironmentManager().list(root)
    assert listing.environments[0].workspace_folder == "/work/My Project"
    messages = [p["message"] for p in errors(listing)]
    assert "must be an absolute path" in messages[0]
    assert "must not contain '..'" in messages[1]


def test_build_environment_with_a_deterministic_tag(root: Path) -> None:
    # Given a build from a Dockerfile in .devcontainer with the project as context
    write(root, ".devcontainer/Dockerfile", "FROM python:3.12\n")
    spec = {
        "build": {"dockerfile": "Dockerfile", "context": "..", "args": {"V": "1"}, "target": "dev"}
    }
    write(root, ROOT_FILE, {"name": "trainer", **spec})
    manager = EnvironmentManager()
    # When listed
    env = manager.get("trainer", root)
    # Then the paths are resolved inside the root and the tag is derived from the inputs
    assert env.build is not None
    assert env.build.dockerfile == (root / ".devcontainer/Dockerfile").resolve()
    assert env.build.context == root.resolve()
    assert (env.build.args, env.build.target) == ({"V": "1"}, "dev")
    tag = env.image_ref()
    assert tag.startswith("gpudev-env-trainer:")
    assert len(tag.split(":")[1]) == 12
    assert manager.get("trainer", root).image_ref() == tag
    # And changing the Dockerfile, the args or the target changes the tag
    write(root, ".devcontainer/Dockerfile", "FROM python:3.13\n")
    assert manager.get("trainer", root).image_ref() != tag
    write(root, ".devcontainer/Dockerfile", "FROM python:3.12\n")
    assert replace(env.build, args={"V": "2"}).digest() != env.build.digest()
    assert replace(env.build, target=None).digest() != env.build.digest()


def test_older_dockerfile_form(root: Path) -> None:
    write(root, ".devcontainer/Dockerfile", "FROM x\n")
    write(root, ROOT_FILE, {"dockerFile": "Dockerfile", "context": "..", "image": "ignored"})
    listing = EnvironmentManager().list(root)
    env = listing.environments[0]
    assert env.build is not None
    assert env.build.context == root.resolve()
    assert env.image is None
    assert "'image' is ignored" in listing.problems[0]["message"]


@pytest.mark.parametrize(
    ("build", "message"),
    [
        ({"dockerfile": "Dockerfile", "context": "../../.."}, "'build.context' .* is outside"),
        ({"dockerfile": "Dockerfile", "context": "/"}, "'build.context' .* is outside"),
        ({"dockerfile": "/etc/hostname"}, "'build.dockerfile' .* is outside"),
        ({"dockerfile": "link"}, "'build.dockerfile' .* is outside"),
        ({"dockerfile": "missing"}, "was not found"),
        ({"context": "."}, "'build.dockerfile' is required"),
        ({"dockerfile": "Dockerfile", "args": {"N": 1}}, "'build.args' must map"),
    ],
)
def test_a_build_outside_the_root_is_refused(
    root: Path, tmp_path: Path, build: dict[str, Any], message: str
) -> None:
    # Given a Dockerfile and a link in .devcontainer that points outside the root
    write(root, ".devcontainer/bad/Dockerfile", "FROM x\n")
    (tmp_path / "Dockerfile.outside").write_text("FROM x\n")
    (root / ".devcontainer/bad/link").symlink_to(tmp_path / "Dockerfile.outside")
    write(root, sub("bad"), {"build": build})
    # When listed
    listing = EnvironmentManager().list(root)
    # Then the environment is refused with a message naming the file and the key
    (problem,) = errors(listing)
    assert problem["file"] == ".devcontainer/bad/devcontainer.json"
    assert problem["name"] == "bad"
    assert problem["message"].startswith(".devcontainer/bad/devcontainer.json: ")
    assert re.search(message, problem["message"])
    assert listing.names() == ["default"]


@pytest.mark.parametrize(
    ("spec", "gpu"),
    [
        ({}, GPURequirement()),
        ({"hostRequirements": {"gpu": False}}, GPURequirement()),
        ({"hostRequirements": {"gpu": True}}, GPURequirement("required", 1)),
        ({"hostRequirements": {"gpu": "optional"}}, GPURequirement("optional", 1)),
        ({"hostRequirements": {"gpu": {"cores": 1000}}}, GPURequirement("required", 1)),
        (
            {"hostRequirements": {"gpu": {"count": 2, "memory": "24gb"}}},
            GPURequirement("required", 2, 22888),
        ),
        ({"runArgs": ["--gpus", "all"]}, GPURequirement("required", 1)),
        ({"runArgs": ["--gpus=2"]}, GPURequirement("required", 2)),
        ({"runArgs": ['--gpus="device=0,1"']}, GPURequirement("required", 2)),
        (
            {"hostRequirements": {"gpu": "optional"}, "customizations": {"gpudev": {"gpus": 4}}},
            GPURequirement("optional", 4),
        ),
        (
            {
                "hostRequirements": {"gpu": {"count": 2, "memory": "8gb"}},
                "customizations": {"gpudev": {"gpus": 3, "gpuModel": "A100", "gpuMemory": "40gb"}},
            },
            GPURequirement("required", 3, 38146, "A100"),
        ),
        (
            {"customizations": {"gpudev": {"gpuModel": "H100"}}},
            GPURequirement("required", 1, None, "H100"),
        ),
        (
            {"hostRequirements": {"gpu": True}, "customizations": {"gpudev": {"gpus": 0}}},
            GPURequirement(),
        ),
    ],
)
def test_gpu_requirements(root: Path, spec: dict[str, Any], gpu: GPURequirement) -> None:
    write(root, sub("g"), {"image": "x", **spec})
    listing = EnvironmentManager().list(root)
    assert errors(listing) == []
    assert listing.environments[0].gpu == gpu


def test_customizations_gpudev(root: Path) -> None:
    # Given gpudev's own options, one of them misspelt
    write(
        root,
        sub("g"),
        {
            "image": "x",
            "runArgs": ["--shm-size=64m"],
            "customizations": {
                "vscode": {"extensions": ["ms-python.python"]},
                "gpudev": {"idleTimeout": 900, "shmSize": "2g", "gpu": 2, "host": "cluster"},
            },
        },
    )
    # When listed
    listing = EnvironmentManager().list(root)
    env = listing.environments[0]
    # Then they are applied (shmSize wins over runArgs) and the misspelt one is a warning
    assert env.idle_timeout == 900.0
    assert env.host == "cluster"
    assert env.run_options.shm_size_bytes == 2 << 30
    (warning,) = listing.problems
    assert warning["level"] == "warning"
    assert "customizations.gpudev.gpu is not an option" in warning["message"]


@pytest.mark.parametrize(
    ("spec", "key"),
    [
        ({"hostRequirements": {"gpu": "yes"}}, "'hostRequirements.gpu' must be"),
        ({"hostRequirements": {"gpu": {"memory": 16}}}, "'hostRequirements.gpu.memory'"),
        ({"hostRequirements": {"gpu": {"count": 0}}}, "'hostRequirements.gpu.count'"),
        ({"customizations": {"gpudev": {"gpus": "two"}}}, "'customizations.gpudev.gpus'"),
        ({"customizations": {"gpudev": {"gpus": True}}}, "'customizations.gpudev.gpus'"),
        ({"customizations": {"gpudev": {"gpuMemory": "lots"}}}, "gpuMemory"),
        ({"customizations": {"gpudev": {"gpuModel": 100}}}, "gpuModel"),
        ({"customizations": {"gpudev": {"idleTimeout": -1}}}, "idleTimeout"),
        ({"customizations": {"gpudev": {"host": "../etc"}}}, "'customizations.gpudev.host'"),
        ({"customizations": {"gpudev": {"host": 3}}}, "'customizations.gpudev.host'"),
        ({"customizations": {"gpudev": {"shmSize": "big"}}}, "shmSize"),
        ({"customizations": {"gpudev": []}}, "'customizations.gpudev' must be an object"),
        ({"customizations": {"gpudev": {"gpus": 0, "gpuModel": "A100"}}}, "gpus is 0"),
        ({"containerEnv": {"A": 1}}, "containerEnv.A must be a string"),
        ({"containerEnv": {"A=B": "1"}}, "is not a variable name"),
        ({"containerEnv": {"NVIDIA_VISIBLE_DEVICES": "all"}}, "set by jupyter-gpudev"),
        ({"forwardPorts": [70000]}, "forwardPorts: 70000 is not a port"),
        ({"forwardPorts": 8888}, "'forwardPorts' must be a list"),
        ({"postCreateCommand": 5}, "'postCreateCommand' must be"),
        ({"postStartCommand": {"a": 5}}, "'postStartCommand' must be"),
        ({"remoteUser": ""}, "'remoteUser' must be"),
        ({"image": "not an image"}, "'image' must be an image reference"),
        ({"mounts": "source=/a,target=/b"}, "'mounts' must be a list"),
        (
            {"mounts": ["source=/a,target=/b,type=bind,bind-propagation=shared"]},
            "'bind-propagation'",
        ),
        ({"mounts": [{"source": "/a", "target": "/b", "type": "tmpfs"}]}, "type must be"),
        ({"mounts": [{"source": "/a", "type": "bind"}]}, "needs a target"),
        ({"runArgs": "--init"}, "'runArgs' must be a list of strings"),
        ({"dockerComposeFile": "compose.yml"}, "Docker Compose"),
    ],
)
def test_wrong_types_name_the_file_and_the_key(root: Path, spec: dict[str, Any], key: str) -> None:
    write(root, sub("e"), {"image": "x", **spec})
    with pytest.raises(BadRequest) as caught:
        EnvironmentManager().get("e", root)
    assert ".devcontainer/e/devcontainer.json" in caught.value.message
    assert key in caught.value.message


def test_an_environment_needs_an_image_or_a_build(root: Path) -> None:
    write(root, sub("e"), {"name": "nothing"})
    with pytest.raises(BadRequest, match=r"needs 'image' or 'build\.dockerfile'"):
        EnvironmentManager().get("e", root)


def test_forward_ports_keep_numbers_and_note_the_rest(root: Path) -> None:
    write(root, sub("p"), {"image": "x", "forwardPorts": [8888, "db:5432", 8888, 6006]})
    listing = EnvironmentManager().list(root)
    assert listing.environments[0].forward_ports == (8888, 6006)
    (note,) = listing.problems
    assert note["level"] == "warning"
    assert "'db:5432' is ignored" in note["message"]


def test_declared_mounts_in_both_forms(root: Path) -> None:
    write(
        root,
        sub("m"),
        {
            "image": "x",
            "mounts": [
                "source=${localWorkspaceFolder}/data,target=/data,type=bind,readonly",
                "src=/scratch,dst=/scratch,type=bind,consistency=cached",
                "source=cache,target=/root/.cache",
                {"source": "/models", "target": "/models", "type": "bind", "readonly": True},
                {"source": "pip", "target": "/pip", "type": "volume"},
            ],
        },
    )
    env = EnvironmentManager().get("m", root)
    assert env.mounts == (
        DeclaredMount(f"{root.resolve()}/data", "/data", True, "bind"),
        DeclaredMount("/scratch", "/scratch", False, "bind"),
        DeclaredMount("cache", "/root/.cache", False, "volume"),
        DeclaredMount("/models", "/models", True, "bind"),
        DeclaredMount("pip", "/pip", False, "volume"),
    )


# -- runArgs -----------------------------------------------------------------------------------


def test_allowed_run_args_in_both_forms() -> None:
    options, notes = parse_run_args(
        [
            "--gpus",
            "all",
            "--shm-size=2g",
            "--ipc",
            "host",
            "--ulimit",
            "memlock=-1:-1",
            "--ulimit=stack=67108864",
            "--ulimit=nofile=1024:65536",
            "--init",
        ],
        where="f",
        allow_host_ipc=True,
    )
    assert notes == []
    assert options.gpus == "all"
    assert options.shm_size_bytes == 2 << 30
    assert options.ipc_mode == "host"
    assert options.ulimits == (
        ("memlock", -1, -1),
        ("stack", 67108864, 67108864),
        ("nofile", 1024, 65536),
    )
    assert options.init is True
    assert (options.network_mode, options.pid_mode) == (None, None)


def test_gpu_device_ids_are_noted_as_a_count_only() -> None:
    options, notes = parse_run_args(["--gpus", "device=0,2"], where="f")
    assert options.gpus == "device=0,2"
    assert "only the count (2) is used" in notes[0]


@pytest.mark.parametrize(
    ("args", "named"),
    [
        (["--privileged"], "--privileged"),
        (["--cap-add=SYS_ADMIN"], "--cap-add"),
        (["--cap-add", "SYS_PTRACE"], "--cap-add"),
        (["--device", "/dev/nvidia0"], "--device"),
        (["--security-opt", "seccomp=unconfined"], "--security-opt"),
        (["-v", "/:/host"], "-v"),
        (["-v/:/host"], "-v"),
        (["--volume=/:/host"], "--volume"),
        (["--mount", "type=bind,src=/,dst=/host"], "--mount"),
        (["--userns=host"], "--userns"),
        (["--cgroupns=host"], "--cgroupns"),
        (["--uts=host"], "--uts"),
        (["-u", "0"], "-u"),
        (["--user=root"], "--user"),
        (["--runtime=runc"], "--runtime"),
        (["-e", "A=1"], "use 'containerEnv'"),
        (["--env=A=1"], "use 'containerEnv'"),
        (["-p", "8888:8888"], "use 'forwardPorts'"),
        (["--publish=8888:8888"], "use 'forwardPorts'"),
        (["--cpus=4"], "--cpus is not allowed"),
        (["--name", "x"], "--name is not allowed"),
        (["-it"], "-i is not allowed"),
        (["bash"], "unexpected argument 'bash'"),
        (["--ipc=container:x"], "--ipc=container:x is not allowed"),
        (["--network=bridge"], "only --network=host"),
        (["--ulimit", "rtprio=1"], "'rtprio' is not allowed"),
        (["--ulimit", "nofile=10:5"], "exceeds the hard"),
        (["--ulimit", "nofile"], "NAME=SOFT"),
        (["--gpus", "lots"], "--gpus 'lots' is not understood"),
        (["--gpus"], "--gpus needs a value"),
        (["--shm-size=huge"], "--shm-size"),
        (["--init=maybe"], "--init"),
    ],
)
def test_refused_run_args_are_named(args: list[str], named: str) -> None:
    with pytest.raises(BadRequest) as caught:
        parse_run_args(["--init", *args], where=".devcontainer/devcontainer.json")
    assert named in caught.value.message
    assert caught.value.message.startswith(".devcontainer/devcontainer.json: runArgs: ")


@pytest.mark.parametrize(
    ("arg", "trait", "field"),
    [
        ("--network=host", "allow_host_network", "network_mode"),
        ("--net=host", "allow_host_network", "network_mode"),
        ("--pid=host", "allow_host_pid", "pid_mode"),
        ("--ipc=host", "allow_host_ipc", "ipc_mode"),
    ],
)
def test_host_namespaces_need_the_administrator(
    root: Path, arg: str, trait: str, field: str
) -> None:
    # Given an environment asking for a host namespace
    write(root, sub("h"), {"image": "x", "runArgs": [arg]})
    # When the trait is off, it is refused with a message naming the trait
    with pytest.raises(BadRequest, match=f"c.EnvironmentManager.{trait} = True"):
        EnvironmentManager().get("h", root)
    # And when the administrator turns it on, it is accepted
    env = EnvironmentManager(**{trait: True}).get("h", root)
    assert getattr(env.run_options, field) == "host"


def test_private_and_shareable_ipc_need_no_administrator() -> None:
    for mode in ("private", "shareable"):
        options, _ = parse_run_args([f"--ipc={mode}"], where="f")
        assert options.ipc_mode == mode


# -- memory and CPU limits, sensitive containerEnv ---------------------------------------------


def test_memory_and_cpu_limits_from_customizations(root: Path) -> None:
    # Given environments asking for memory and CPUs in the forms people write
    write(
        root, sub("a"), {"image": "x", "customizations": {"gpudev": {"memory": "16g", "cpus": 4.5}}}
    )
    write(
        root,
        sub("b"),
        {"image": "x", "customizations": {"gpudev": {"memory": 536870912, "cpus": 2}}},
    )
    write(root, sub("c"), {"image": "x"})
    manager = EnvironmentManager()
    # When read, they become bytes and nano-CPUs, without warnings; none asked: none set
    a = manager.get("a", root).run_options
    assert (a.memory_bytes, a.nano_cpus) == (16 << 30, 4_500_000_000)
    b = manager.get("b", root).run_options
    assert (b.memory_bytes, b.nano_cpus) == (512 << 20, 2_000_000_000)
    c = manager.get("c", root).run_options
    assert (c.memory_bytes, c.nano_cpus) == (None, None)
    assert errors(manager.list(root)) == []
    assert not [p for p in manager.list(root).problems if "memory" in p["message"]]


@pytest.mark.parametrize(
    ("custom", "message"),
    [
        ({"memory": "lots"}, "'customizations.gpudev.memory': 'lots' is not a size"),
        ({"memory": "1m"}, "less than Docker's minimum of 6m"),
        ({"memory": True}, "'customizations.gpudev.memory'"),
        ({"memory": -5}, "not a positive size"),
        ({"cpus": 0}, "'customizations.gpudev.cpus' must be a number of CPUs from 0.01"),
        ({"cpus": "4"}, "not '4'"),
        ({"cpus": True}, "'customizations.gpudev.cpus'"),
        ({"cpus": 1e9}, "from 0.01 to 4096"),
    ],
)
def test_bad_memory_and_cpu_limits_are_refused_with_the_key(
    root: Path, custom: dict[str, Any], message: str
) -> None:
    write(root, sub("l"), {"image": "x", "customizations": {"gpudev": custom}})
    with pytest.raises(BadRequest) as caught:
        EnvironmentManager().get("l", root)
    assert message in caught.value.message


@pytest.mark.parametrize(
    "variable",
    [
        "PATH",
        "LD_PRELOAD",
        "LD_LIBRARY_PATH",
        "LD_AUDIT",
        "PYTHONPATH",
        "PYTHONSTARTUP",
        "PYTHONHOME",
        "PYTHONUSERBASE",
        "BASH_ENV",
    ],
)
def test_container_env_that_decides_which_code_loads_needs_the_administrator(
    root: Path, variable: str
) -> None:
    # Given a devcontainer.json setting a variable that decides which code every process loads
    write(root, sub("e"), {"image": "x", "containerEnv": {variable: "/workspace/x"}})
    # When read with the default configuration, it is refused naming the variable and the trait
    with pytest.raises(BadRequest) as caught:
        EnvironmentManager().get("e", root)
    message = caught.value.message
    assert f"containerEnv.{variable} is not allowed" in message
    assert f"c.EnvironmentManager.allowed_env_vars = [{variable!r}]" in message
    # And when the administrator allows it (by name or pattern), it is kept
    for allowed in ([variable], [variable[:2] + "*"]):
        env = EnvironmentManager(allowed_env_vars=allowed).get("e", root)
        assert env.container_env == {variable: "/workspace/x"}


def test_ordinary_container_env_and_the_administrators_environments_are_not_refused(
    root: Path,
) -> None:
    # Given variables that only look alike, and an admin-declared environment setting PATH
    write(
        root,
        sub("ok"),
        {
            "image": "x",
            "containerEnv": {"MY_PATH": "/a", "PYTHONUNBUFFERED": "1", "LDX": "1", "PY": "3"},
        },
    )
    manager = EnvironmentManager(
        environments={"admin": {"image": "x", "containerEnv": {"PATH": "/opt/bin:/usr/bin"}}}
    )
    # When read, they are kept as they are
    assert manager.get("ok", root).container_env["MY_PATH"] == "/a"
    assert manager.get("admin", root).container_env == {"PATH": "/opt/bin:/usr/bin"}


# -- the manager -------------------------------------------------------------------------------


def test_a_broken_file_is_reported_while_the_others_load(root: Path) -> None:
    # Given one good file and two broken ones
    write(root, sub("good"), {"image": "x"})
    write(root, sub("broken"), '{"image": "x",,}')
    write(root, sub("privileged"), {"image": "x", "runArgs": ["--privileged"]})
    manager = EnvironmentManager()
    # When listed
    listing = manager.list(root)
    # Then the good one loads and each broken one is a problem naming its file
    assert listing.names() == ["good", "default"]
    assert [(p["file"], p["name"]) for p in errors(listing)] == [
        (".devcontainer/broken/devcontainer.json", "broken"),
        (".devcontainer/privileged/devcontainer.json", "privileged"),
    ]
    assert "line 1, column 15" in errors(listing)[0]["message"]
    # And asking for a broken one says why, while an unknown one lists the known names
    with pytest.raises(BadRequest, match=r"cannot be used: .*--privileged"):
        manager.get("privileged", root)
    with pytest.raises(NotFound, match="known environments: good, default"):
        manager.get("nope", root)


def test_a_devcontainer_link_out_of_the_root_is_not_read(root: Path, tmp_path: Path) -> None:
    outside = tmp_path / "elsewhere.json"
    outside.write_text('{"image": "x"}')
    (root / ".devcontainer" / "out").mkdir(parents=True)
    (root / ".devcontainer" / "out" / "devcontainer.json").symlink_to(outside)
    (problem,) = EnvironmentManager().list(root).problems
    assert "outside the Jupyter root directory" in problem["message"]


def test_duplicate_names_the_later_one_is_refused(root: Path) -> None:
    # Given a root file named "gpu" and a sub-folder also called gpu
    write(root, ROOT_FILE, {"name": "GPU", "image": "first"})
    write(root, sub("gpu"), {"image": "second"})
    # When listed
    listing = EnvironmentManager().list(root)
    # Then the first keeps the name and the second is a problem
    assert [env.image for env in listing.environments] == ["first", "gpudev-python:bookworm"]
    (problem,) = errors(listing)
    assert problem["file"] == ".devcontainer/gpu/devcontainer.json"
    assert "already used by .devcontainer/devcontainer.json" in problem["message"]


def test_default_environment(root: Path) -> None:
    # Given no devcontainer.json
    manager = EnvironmentManager(default_image="my/kernel:1")
    # Then the default environment is offered, CPU only
    (env,) = manager.list(root).environments
    assert (env.name, env.source, env.image, env.gpu.mode) == (
        "default",
        "default",
        "my/kernel:1",
        "none",
    )
    assert env.workspace_folder == "/workspaces/My Project"
    # And it can be left out
    assert EnvironmentManager(include_default=False).list(root).environments == []
    # And a discovered environment named "default" takes its place
    write(root, sub("default"), {"image": "mine"})
    assert [env.image for env in manager.list(root).environments] == ["mine"]


def test_discovery_can_be_turned_off(root: Path) -> None:
    write(root, ROOT_FILE, {"image": "x"})
    assert EnvironmentManager(discover=False).list(root).names() == ["default"]


def test_admin_declared_environments(root: Path) -> None:
    # Given an administrator's environment and a project one with the same name
    manager = EnvironmentManager(
        environments={
            "pytorch": {"name": "PyTorch", "image": "nvcr.io/nvidia/pytorch:24.01-py3"},
            "shared": {"image": "x", "hostRequirements": {"gpu": True}},
        }
    )
    write(root, sub("shared"), {"image": "project"})
    # When listed
    listing = manager.list(root)
    # Then both are offered, the project's file wins the shared name
    assert listing.names() == ["shared", "pytorch", "default"]
    assert listing.environments[0].image == "project"
    assert listing.environments[1].source == "config"
    assert listing.environments[1].display_name == "PyTorch"
    assert errors(listing)[0]["file"] == "c.EnvironmentManager.environments['shared']"


@pytest.mark.parametrize(
    ("environments", "message"),
    [
        ({"Bad Name": {"image": "x"}}, "an environment name is"),
        ({"a": "x"}, "expected a dict"),
        ({"a": {"image": "x", "runArgs": ["--privileged"]}}, "--privileged"),
        ({"a": {"build": {"dockerfile": "Dockerfile"}}}, "must be an absolute path"),
    ],
)
def test_bad_admin_environments_are_config_errors(
    root: Path, environments: dict[str, Any], message: str
) -> None:
    with pytest.raises(ConfigError, match=message) as caught:
        EnvironmentManager(environments=environments).list(root)
    assert "c.EnvironmentManager.environments[" in caught.value.message


def test_admin_builds_use_absolute_paths(root: Path, tmp_path: Path) -> None:
    (tmp_path / "images").mkdir()
    (tmp_path / "images" / "Dockerfile").write_text("FROM x\n")
    manager = EnvironmentManager(
        environments={"built": {"build": {"dockerfile": str(tmp_path / "images/Dockerfile")}}},
    )
    env = manager.get("built", root)
    assert env.build is not None
    assert env.build.context == (tmp_path / "images").resolve()
    assert manager.is_image_allowed(env.image_ref(), root)


# -- image allow-list --------------------------------------------------------------------------


def test_image_allow_list(root: Path) -> None:
    # Given a discovered image, a discovered build, an admin image and a pattern
    write(root, sub("img"), {"image": "python:3.12"})
    write(root, ".devcontainer/built/Dockerfile", "FROM python:3.12\n")
    write(root, sub("built"), {"build": {"dockerfile": "Dockerfile"}})
    manager = EnvironmentManager(
        environments={"admin": {"image": "registry.example.org/team/cuda:12"}},
        allowed_images=["nvcr.io/nvidia/*"],
    )
    built = manager.get("built", root)
    # Then declared images, the default, built tags and pattern matches are allowed
    for image in (
        "python:3.12",
        "docker.io/library/python:3.12",
        "registry.example.org/team/cuda:12",
        "gpudev-python:bookworm",
        built.image_ref(),
        "nvcr.io/nvidia/pytorch:24.01-py3",
    ):
        assert manager.is_image_allowed(image, root), image
    # And anything else is refused, including a build tag no Dockerfile under the root makes
    for image in ("python:3.11", "evil/miner:latest", "gpudev-env-built:000000000000", ""):
        assert not manager.is_image_allowed(image, root), image
    # And check_image_allowed raises a 403 for an environment whose image was swapped
    env = manager.get("img", root)
    manager.check_image_allowed(env, root)
    manager.check_image_allowed(built)  # the root of the latest listing
    with pytest.raises(ImageNotAllowed) as caught:
        manager.check_image_allowed(replace(env, image="evil/miner:latest"), root)
    assert (caught.value.status, caught.value.code, caught.value.exit_code) == (
        403,
        "image_not_allowed",
        2,
    )
    assert "evil/miner:latest" in caught.value.message


def test_the_default_image_is_declared_only_while_offered(root: Path) -> None:
    assert EnvironmentManager().is_image_allowed("gpudev-python:bookworm", root)
    assert not EnvironmentManager(include_default=False).is_image_allowed(
        "gpudev-python:bookworm", root
    )


def test_a_fifo_named_devcontainer_json_is_refused_at_once(tmp_path: Path) -> None:
    # A user could plant one in their folder: the shared service lists it as its own account,
    # and a blocking open would hang that listing until someone wrote into the pipe.
    folder = tmp_path / ".devcontainer"
    folder.mkdir()
    os.mkfifo(folder / "devcontainer.json")
    done: list[Any] = []
    worker = threading.Thread(
        target=lambda: done.append(EnvironmentManager().list(tmp_path)), daemon=True
    )
    worker.start()
    worker.join(10)
    assert done, "listing the environments hung on a FIFO"
    assert any("not a regular file" in p["message"] for p in done[0].problems), done[0].problems
