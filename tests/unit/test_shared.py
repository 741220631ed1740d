"""Shared mode's pure parts: who a Hub answer names, each user's folder and view."""

from __future__ import annotations

import asyncio
import http.server
import json
import logging
import os
import pwd
import subprocess
import sys
import threading
import time
from datetime import datetime, timezone
from pathlib import Path
from types import SimpleNamespace
from typing import Any, ClassVar

import pytest
from tornado.web import HTTPError
from traitlets.config import Config, LoggingConfigurable

from jupyter_gpudev.access import Access, Caller
from jupyter_gpudev.containers.limits import UserLimits
from jupyter_gpudev.errors import BadRequest, ConfigError, Forbidden, LimitReached, NotFound
from jupyter_gpudev.kernels.kernelspecs import EnvironmentEntry, SharedEntry, display_name
from jupyter_gpudev.labels import L_LEDGER, L_OWNER
from jupyter_gpudev.shared.authority import Authority, GPUDevService
from jupyter_gpudev.shared.client import KeptConnections
from jupyter_gpudev.shared.identity import HubIdentityProvider, HubUser, request_token
from jupyter_gpudev.shared.kernels import KernelProcesses, ServiceKernel
from jupyter_gpudev.shared.service_api import error_from, info_from
from tests.ports import free_port

ME = pwd.getpwuid(os.getuid()).pw_name


def handler(authorization: str | None) -> Any:
    headers = {"Authorization": authorization} if authorization is not None else {}
    return SimpleNamespace(request=SimpleNamespace(headers=headers))


@pytest.mark.parametrize(
    ("header", "token"),
    [
        ("token abc123", "abc123"),
        ("Token abc123", "abc123"),
        ("Bearer abc123", "abc123"),
        ("  token   abc123 ", "abc123"),
        ("basic abc123", None),
        ("token", None),
        ("token a b", None),
        ("", None),
        (None, None),
    ],
)
def test_the_token_comes_from_the_authorization_header_only(
    header: str | None, token: str | None
) -> None:
    assert request_token(handler(header)) == token


@pytest.mark.parametrize(
    ("model", "expected"),
    [
        ({"kind": "user", "name": "alice", "admin": False}, "alice"),
        ({"name": "alice"}, "alice"),  # older Hubs send no kind
        ({"kind": "service", "name": "gpudev", "admin": True}, None),
        ({"kind": "user", "name": "../etc"}, None),
        ({"kind": "user", "name": "a/b"}, None),
        ({"kind": "user", "name": ""}, None),
        ({"kind": "user", "name": 7}, None),
    ],
)
def test_only_a_user_with_a_usable_name_is_a_caller(model: Any, expected: str | None) -> None:
    user = HubIdentityProvider()._user_from(model)
    assert (None if user is None else user.username) == expected
    # (what the caller's token says of admin rights is never taken)
    assert user is None or not user.admin


USERS_TOKEN, SERVICE_TOKEN = "users-token", "service-token"


class _Hub(http.server.BaseHTTPRequestHandler):
    """A stand-in Hub API: ``/user`` for the caller's token, ``/users/NAME`` and its token
    for the service's (``service-token``); the answers from ``state``."""

    state: ClassVar[dict[str, Any]] = {}

    def do_GET(self) -> None:
        token = self.headers.get("Authorization", "").removeprefix("token ")
        caller, service = token == USERS_TOKEN, token == SERVICE_TOKEN
        state = self.state
        state["asked"] = state.get("asked", 0) + 1
        if self.path == "/hub/api/user" and caller:
            body: Any = {
                "kind": "user",
                "name": "alice",
                "admin": True,
                "scopes": state["scopes"],
                "token_id": "a7",
            }
        elif self.path == "/hub/api/users/alice" and service:
            body = {"kind": "user", "name": "alice", "admin": state["admin"]}
        elif self.path == "/hub/api/users/alice/tokens/a7" and service:
            body = {"id": "a7", "expires_at": state["expires_at"]}
        else:
            self.send_response(403)
            self.send_header("Content-Length", "0")
            self.end_headers()
            return
        data = json.dumps(body).encode()
        self.send_response(200)
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def log_message(self, *args: Any) -> None:
        pass


def hub_provider(**state: Any) -> HubIdentityProvider:
    _Hub.state = {"scopes": ["access:services!service=gpudev"], "admin": False, **state}
    _Hub.state.setdefault("expires_at", None)
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _Hub)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    url = f"http://127.0.0.1:{server.server_address[1]}/hub/api"
    return HubIdentityProvider(api_url=url, api_token=SERVICE_TOKEN, service_name="gpudev")


@pytest.mark.parametrize(
    ("scopes", "accepted"),
    [
        (["access:services!service=gpudev"], True),
        (["access:services"], True),
        (["access:services!service=other"], False),
        (["read:users:name!user=alice", "access:servers!server=bob/"], False),
        ([], False),
    ],
)
def test_only_a_token_scoped_to_the_service_acts_for_its_user(
    scopes: list[str], accepted: bool
) -> None:
    provider = hub_provider(scopes=scopes)
    answer = asyncio.run(provider.user_for_token(USERS_TOKEN))
    if accepted:
        assert isinstance(answer, HubUser)
        assert answer.name == "alice"
    else:
        assert isinstance(answer, str)
        assert "access:services!service=gpudev" in answer


def test_the_admin_flag_is_what_the_hub_tells_the_service() -> None:
    # (the caller's own /user answer says admin: true; the service's read says otherwise)
    answer = asyncio.run(hub_provider(admin=False).user_for_token(USERS_TOKEN))
    assert isinstance(answer, HubUser)
    assert not answer.admin
    answer = asyncio.run(hub_provider(admin=True).user_for_token(USERS_TOKEN))
    assert isinstance(answer, HubUser)
    assert answer.admin


def test_whether_a_user_is_an_administrator_now_is_the_hubs_answer_kept_briefly() -> None:
    # Given the Hub says alice is an administrator
    provider = hub_provider(admin=True)
    provider.cache_seconds = 0.2
    assert asyncio.run(provider.is_admin("alice"))
    # When it demotes her, then the service says so once its answer is older than the cache
    _Hub.state["admin"] = False
    time.sleep(0.3)
    assert not asyncio.run(provider.is_admin("alice"))
    # And a name no user can have is not one (the Hub is not asked)
    asked = _Hub.state["asked"]
    assert not asyncio.run(provider.is_admin("../alice"))
    assert _Hub.state["asked"] == asked


def test_an_answer_is_kept_no_longer_than_the_cache_or_the_tokens_expiry() -> None:
    # Given a token that expires in 0.3 s and a cache of 5 s
    soon = datetime.fromtimestamp(time.time() + 0.3, tz=timezone.utc).isoformat()
    provider = hub_provider(expires_at=soon)
    asyncio.run(provider.user_for_token(USERS_TOKEN))
    asked = _Hub.state["asked"]
    # When it is asked for again before and after its expiry
    asyncio.run(provider.user_for_token(USERS_TOKEN))
    before = _Hub.state["asked"]
    time.sleep(0.4)
    asyncio.run(provider.user_for_token(USERS_TOKEN))
    # Then the Hub was asked again only once it had expired
    assert before == asked
    assert _Hub.state["asked"] > asked


def test_without_a_token_of_its_own_the_service_refuses_everyone() -> None:
    provider = hub_provider()
    provider.api_token = ""
    with pytest.raises(HTTPError) as caught:
        asyncio.run(provider.user_for_token(USERS_TOKEN))
    assert caught.value.status_code == 503


def test_the_service_accepts_no_token_of_its_own() -> None:
    provider = HubIdentityProvider()
    assert provider.token == ""
    assert provider.get_handlers() == []
    assert not provider.login_available


def test_a_users_folder_comes_from_the_template(tmp_path: Path) -> None:
    assert GPUDevService().user_root == "/srv/gpudev/users/{user}"
    service = GPUDevService(user_root=str(tmp_path / "work" / "{user}"))
    service.folders().check()
    assert service.root_of("alice") == tmp_path / "work" / "alice"  # no account needed


@pytest.mark.parametrize("name", ["../x", "a/b", "", ".hidden", "gpudev-service"])
def test_a_name_that_cannot_name_a_folder_is_refused(name: str) -> None:
    # (gpudev-service: the name the service's own view acts as, its kernels' scope)
    with pytest.raises(Forbidden):
        GPUDevService(user_root="/srv/{user}").root_of(name)


def test_a_user_without_an_account_has_no_home_folder() -> None:
    with pytest.raises(Forbidden, match="no account"):
        GPUDevService(user_root="{home}").root_of("no-such-user-gpudev-test")


def test_a_relative_template_is_refused() -> None:
    with pytest.raises(ConfigError, match="absolute"):
        GPUDevService(user_root="projects/{user}").root_of("alice")


def test_the_services_ledger_grants_no_one_its_old_containers() -> None:
    labels = {L_OWNER: "", L_LEDGER: "ledger-1"}
    single = Access(user="alice")
    assert single.may_see(Caller("alice"), labels, "ledger-1")
    shared = Access(user="alice", single_user=False)
    assert not shared.may_see(Caller("alice"), labels, "ledger-1")
    assert shared.may_see(Caller("alice"), {**labels, L_OWNER: "alice"}, "ledger-1")


def authority(tmp_path: Path, **service: Any) -> Authority:
    config = Config()
    config.DevContainers.state_dir = str(tmp_path / "state")
    config.GPUDevService.user_root = str(tmp_path / "users" / "{user}")
    config.Access.admin_users = {"carol"}
    for key, value in service.items():
        config.GPUDevService[key] = value
    parent = LoggingConfigurable(config=config)
    return Authority(tmp_path, parent=parent, log=logging.getLogger("gpudev-test"))


def test_each_users_view_shares_the_engines_and_the_ledger(tmp_path: Path) -> None:
    held = authority(tmp_path)
    alice, bob = held.for_user("alice"), held.for_user("bob")
    assert held.for_user("alice") is alice
    assert alice.host_pool is bob.host_pool is held.host_pool
    assert alice.containers.ledger is bob.containers.ledger is held.service.containers.ledger
    assert alice.containers.server_id == bob.containers.server_id
    assert alice.containers.root_dir == (tmp_path / "users" / "alice").resolve()
    assert alice.containers.access.local() == Caller("alice", admin=False)
    assert not alice.containers.access.single_user
    held.close()


def test_administrators_come_from_the_hub_or_the_configuration(tmp_path: Path) -> None:
    held = authority(tmp_path)
    assert held.for_user("carol").containers.access.local().admin
    assert held.for_user("dave", hub_admin=True).containers.access.local().admin
    assert not held.for_user("dave").containers.access.local().admin
    assert held.service.containers.access.local().admin
    held.close()


def test_the_service_warns_once_at_its_start_when_one_user_may_hold_every_gpu(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    # Given no c.UserLimits.gpus (its default, 0): the service warns when it starts
    with caplog.at_level(logging.WARNING, logger="gpudev-test"):
        held = authority(tmp_path)
        held.for_user("alice")
    warned = [r.getMessage() for r in caplog.records if "c.UserLimits.gpus" in r.getMessage()]
    assert len(warned) == 1, warned
    assert "one user may hold every GPU" in warned[0]
    held.close()
    # And with a limit set, it does not
    caplog.clear()
    config = Config()
    config.DevContainers.state_dir = str(tmp_path / "state2")
    config.GPUDevService.user_root = str(tmp_path / "users2" / "{user}")
    config.UserLimits.gpus = 2
    with caplog.at_level(logging.WARNING, logger="gpudev-test"):
        limited = Authority(
            tmp_path,
            parent=LoggingConfigurable(config=config),
            log=logging.getLogger("gpudev-test"),
        )
    assert not [r for r in caplog.records if "c.UserLimits.gpus" in r.getMessage()]
    limited.close()


def test_a_users_view_protects_that_users_private_folders(tmp_path: Path) -> None:
    held = authority(tmp_path)
    protected = held.for_user(ME).containers.mount_policy.protected_paths
    home = pwd.getpwnam(ME).pw_dir
    assert os.path.join(home, ".ssh") in protected
    assert os.path.join(home, ".local/share/jupyter") in protected
    policy = held.for_user(ME).containers.mount_policy
    with pytest.raises(Exception, match="keep your projects in"):
        policy.check_unprotected(home, "The workspace")
    held.close()


def test_the_docs_show_the_hub_configuration_the_tests_use() -> None:
    # Given the shared-mode page of the documentation (the README links to it)
    root = Path(__file__).resolve().parents[2]
    page = (root / "docs" / "shared-mode.md").read_text()
    # Then it shows examples/jupyterhub_config.py itself, included whole when the docs are built
    include = "```{literalinclude} ../examples/jupyterhub_config.py\n:language: python\n```"
    assert include in page
    assert (root / "examples" / "jupyterhub_config.py").is_file()
    assert "(docs/shared-mode.md)" in (root / "README.md").read_text()


def test_the_picker_reads_the_services_environments_and_shared_containers() -> None:
    env = {"name": "torch", "display_name": "PyTorch", "gpu": {"mode": "required", "count": 2}}
    entry = EnvironmentEntry.from_json(env)
    assert entry == EnvironmentEntry("torch", "PyTorch", "required", 2)
    assert display_name(entry) == "PyTorch (2 GPUs) · gpudev"
    assert EnvironmentEntry.from_json({"name": "x"}) is None
    assert EnvironmentEntry.from_json({**env, "gpu": {"mode": "none", "count": "many"}}) is None
    running = {"name": "box", "environment": "torch", "host": "local", "gpu_uuids": ["GPU-1"]}
    assert SharedEntry.from_json({**running, "state": "running", "kernel_id": None}) == SharedEntry(
        "box", "torch", "local", 1
    )
    # a container made for one kernel, or not running, is not offered
    assert SharedEntry.from_json({**running, "state": "running", "kernel_id": "k1"}) is None
    assert SharedEntry.from_json({**running, "state": "exited", "kernel_id": None}) is None
    assert SharedEntry.from_json("box") is None


@pytest.mark.parametrize(
    "body",
    [
        [],
        {},
        {"kernel_id": "../x", "key": "k"},
        {"kernel_id": "abc", "key": ""},
        {"kernel_id": "abc", "key": "k", "signature_scheme": "none"},
        {"kernel_id": "abc", "key": "k" * 513},
        {"kernel_id": "abc", "key": "k", "gpus": True},
        {"kernel_id": "abc", "key": "k", "gpus": "2"},
        {"kernel_id": "abc", "key": "k", "environment": ["x"]},
        {"kernel_id": "abc", "key": "k", "env": "PATH=/x"},
    ],
)
def test_a_malformed_kernel_launch_is_refused_before_anything_starts(body: Any) -> None:
    processes = KernelProcesses(logging.getLogger("gpudev-test"))
    with pytest.raises(BadRequest):
        asyncio.run(processes.launch(None, "alice", body))  # type: ignore[arg-type]
    assert processes._kernels == {}


def test_another_users_kernel_does_not_exist_for_them() -> None:
    processes = KernelProcesses(logging.getLogger("gpudev-test"))
    processes._kernels[("alice", "abc")] = object()  # type: ignore[assignment]
    with pytest.raises(NotFound):
        asyncio.run(processes.poll("bob", "abc"))
    with pytest.raises(NotFound):
        asyncio.run(processes.signal("bob", "abc", 2))
    with pytest.raises(NotFound):
        asyncio.run(processes.cleanup("bob", "abc", {}))
    with pytest.raises(BadRequest):
        asyncio.run(processes.signal("alice", "abc", 19))  # SIGSTOP: not a client's to send


class Reached(Exception):
    """The launch got past the count (the kernel's own start stands in)."""


def test_a_user_launches_no_more_kernels_than_allowed(monkeypatch: pytest.MonkeyPatch) -> None:
    # Given two kernels allowed to each user, and alice running two (bob one)
    async def started(self: ServiceKernel, **kwargs: Any) -> dict[str, Any]:
        raise Reached(self.kernel_id)

    monkeypatch.setattr(ServiceKernel, "pre_launch", started)
    processes = KernelProcesses(logging.getLogger("gpudev-test"))
    view: Any = SimpleNamespace(
        containers=SimpleNamespace(
            limits=UserLimits(kernels=2), access=SimpleNamespace(single_user=False)
        )
    )

    async def relaunched(**kwargs: Any) -> dict[str, Any]:
        raise Reached("relaunch")

    for owner, kernel_id in (("alice", "a1"), ("alice", "a2"), ("bob", "b1")):
        kernel = SimpleNamespace(use_session=lambda *_: None, pre_launch=relaunched)
        processes._kernels[(owner, kernel_id)] = kernel  # type: ignore[assignment]

    def launch(owner: str, kernel_id: str) -> None:
        body = {"kernel_id": kernel_id, "key": "k"}
        asyncio.run(processes.launch(view, owner, body))

    # When alice launches a third
    with pytest.raises(LimitReached) as caught:
        launch("alice", "a3")
    # Then it is refused with a 409 naming the setting and her kernels, and nothing is kept
    refused = caught.value
    assert (refused.status, refused.code) == (409, "limit_reached")
    assert "2 of 2 kernels" in refused.message
    assert "c.UserLimits.kernels" in refused.message
    assert refused.details["held"] == ["a1", "a2"]
    assert ("alice", "a3") not in processes._kernels
    # And a relaunch (a restart) of one of hers is no new kernel: not refused
    with pytest.raises(Reached, match="relaunch"):
        launch("alice", "a1")
    # And bob, whose kernels are counted apart, launches his second
    with pytest.raises(Reached):
        launch("bob", "b2")
    assert ("bob", "b2") not in processes._kernels  # its failed launch forgotten


def gpudev_cli(tmp_path: Path, *args: str) -> subprocess.CompletedProcess[str]:
    """``jupyter gpudev ARGS`` in client mode, without a Hub token (nothing is reached)."""
    env = {
        "PATH": os.environ.get("PATH", ""),
        "JUPYTER_CONFIG_DIR": str(tmp_path),
        "JUPYTER_CONFIG_PATH": "",
        "GPUDEV_SERVICE_URL": "http://127.0.0.1:9/services/gpudev/",
        "DOCKER_HOST": "unix:///nonexistent.sock",
    }
    return subprocess.run(
        [sys.executable, "-m", "jupyter_gpudev", *args],
        capture_output=True,
        text=True,
        env=env,
        timeout=120,
        check=False,
    )


def test_the_command_line_in_client_mode_needs_the_users_hub_token(tmp_path: Path) -> None:
    done = gpudev_cli(tmp_path, "ls")
    assert done.returncode == 2, done.stderr
    assert "JUPYTERHUB_API_TOKEN" in done.stderr


def test_the_administrators_commands_are_not_run_through_the_service(tmp_path: Path) -> None:
    for command in (["hosts"], ["hosts", "add", "box", "ssh://u@h"], ["image", "bootstrap"]):
        done = gpudev_cli(tmp_path, *command)
        assert done.returncode == 2, done.stderr
        assert "is for its administrators" in done.stderr


def test_the_services_errors_come_back_with_single_user_modes_exit_codes() -> None:
    held = error_from(409, {"error": "no_free_gpu", "message": "held by another user"})
    assert (held.exit_code, held.status, held.message) == (5, 409, "held by another user")
    gone = error_from(404, {"error": "not_found", "message": "No dev container named 'x'"})
    assert isinstance(gone, NotFound)
    assert gone.exit_code == 2
    odd = error_from(502, "<html>")
    assert odd.status == 502
    assert "502" in odd.message
    info = info_from(
        {
            "name": "box",
            "container_id": "c1",
            "host": "local",
            "environment": "default",
            "owner": "alice",
            "image": "img",
            "state": "running",
            "status": "running",
            "created": "2026-11-24T00:00:00Z",
            "gpu_uuids": ["GPU-1"],
            "lease_id": None,
            "ports": {},
            "web_ports": [8000],
            "future_field": 1,
        }
    )
    assert info.gpu_uuids == ("GPU-1",)
    assert info.web_ports == (8000,)


def test_attach_needs_a_service_and_a_token() -> None:
    env = {"PATH": os.environ.get("PATH", "")}
    done = subprocess.run(
        [sys.executable, "-m", "jupyter_gpudev.shared.attach", "http://127.0.0.1:1/", "box"],
        capture_output=True,
        text=True,
        env=env,
        timeout=60,
        check=False,
    )
    assert done.returncode == 2
    assert "JUPYTERHUB_API_TOKEN" in done.stdout


class _Counting(http.server.BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    connections: ClassVar[list[int]] = []

    def setup(self) -> None:
        super().setup()
        self.connections.append(1)

    def do_GET(self) -> None:
        body = json.dumps({"path": self.path}).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        if self.path.endswith("close"):
            self.send_header("Connection", "close")
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args: Any) -> None:
        pass


def test_calls_to_the_service_reuse_one_connection() -> None:
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _Counting)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    base = f"http://127.0.0.1:{server.server_address[1]}"
    kept = KeptConnections(workers=1)

    def get(path: str) -> tuple[int, dict[str, str], bytes]:
        return asyncio.run(kept.request("GET", base + path, {}, None))

    try:
        answers = [get(f"/gpudev/api/{n}") for n in range(5)]
        assert [a[0] for a in answers] == [200] * 5
        assert json.loads(answers[4][2]) == {"path": "/gpudev/api/4"}
        assert len(_Counting.connections) == 1  # five calls, one connection
        get("/then-close")  # the service says it closes: the next call connects again
        get("/after")
        assert len(_Counting.connections) == 2
        with pytest.raises(ConnectionRefusedError):  # nothing listens there
            asyncio.run(kept.request("GET", f"http://127.0.0.1:{free_port()}/x", {}, None))
    finally:
        server.shutdown()
        server.server_close()
        kept.close()
