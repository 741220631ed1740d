"""The folder a kernel starts in (``GPUDevProvisioner._folder``): the notebook's folder under
the workspace, mapped into the container; in the shared service ``cwd`` comes from a client,
so nothing outside the workspace is resolved (no link followed there, no loop a 500)."""

from __future__ import annotations

import os
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from jupyter_gpudev.kernels.provisioner import GPUDevProvisioner

LOCAL: Any = SimpleNamespace(spec=SimpleNamespace(is_local=True))


def folder(root: Path, cwd: str, *, shared: bool = True) -> str | None:
    access = SimpleNamespace(single_user=not shared)
    this: Any = SimpleNamespace(_manager=SimpleNamespace(root_dir=root, access=access))
    return GPUDevProvisioner._folder(this, "/workspaces/w", LOCAL, cwd)


def test_a_notebook_folder_under_the_workspace_maps_into_the_container(tmp_path: Path) -> None:
    (tmp_path / "a" / "b").mkdir(parents=True)
    assert folder(tmp_path, str(tmp_path / "a" / "b")) == "/workspaces/w/a/b"
    assert folder(tmp_path, str(tmp_path)) == "/workspaces/w"


def test_a_folder_outside_the_workspace_is_never_resolved(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Given, in the shared service, a client's folder outside the user's (another user's, an
    # automount)
    resolved: list[str] = []
    real = Path.resolve

    def resolve(self: Path, strict: bool = False) -> Path:
        resolved.append(str(self))
        return real(self, strict)

    monkeypatch.setattr(Path, "resolve", resolve)
    root = tmp_path / "work"
    root.mkdir()
    # Then it is not looked at: the kernel starts in the container's folder
    assert folder(root, str(tmp_path / "elsewhere" / "x")) == "/workspaces/w"
    assert folder(root, str(root / ".." / "elsewhere")) == "/workspaces/w"
    assert not [r for r in resolved if "elsewhere" in r]


def test_a_link_loop_in_the_workspace_starts_the_kernel_in_the_containers_folder(
    tmp_path: Path,
) -> None:
    os.symlink("loop", tmp_path / "loop")
    assert folder(tmp_path, str(tmp_path / "loop" / "x")) == "/workspaces/w"


def test_a_single_user_servers_folder_through_a_link_maps_into_the_container(
    tmp_path: Path,
) -> None:
    # Given a server whose root is reached through a link (its own configuration)
    (tmp_path / "real" / "a").mkdir(parents=True)
    os.symlink(tmp_path / "real", tmp_path / "link")
    # Then its notebook folders map as they always did
    assert folder(tmp_path / "real", str(tmp_path / "link" / "a"), shared=False) == (
        "/workspaces/w/a"
    )
