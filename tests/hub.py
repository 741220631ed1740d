"""A real JupyterHub for the shared-mode tests: ``examples/jupyterhub_config.py`` as is, plus
what a test deployment adds (ports, a password authenticator, real local users, a token for
the tests), with the gpudev service it starts and users' servers spawned as those users.

The users (``USERS``) are real accounts made by ``scripts/setup.sh --test`` (``useradd``), not
in the docker group; the Hub runs as root so that its local-process spawner can become them.
"""

from __future__ import annotations

import json
import os
import pwd
import secrets
import shutil
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager, suppress
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

# Re-exported: test_shared_hub.py imports free_port from here.
from tests.ports import free_port as free_port  # noqa: PLC0414

REPO = Path(__file__).resolve().parents[1]
EXAMPLE = REPO / "examples" / "jupyterhub_config.py"
PROXY = REPO / "node_modules" / ".bin" / "configurable-http-proxy"
#: Two users and an administrator (a Hub admin), real accounts of this machine.
USERS = ("gpudev-alice", "gpudev-bob", "gpudev-admin")
ADMIN = "gpudev-admin"


class HubMissing(Exception):
    """What the shared-mode tests need is not installed (scripts/setup.sh --test does it)."""


def missing() -> str | None:
    """Why a Hub cannot run here, or ``None``."""
    if os.geteuid() != 0:
        return "the Hub must run as root to spawn servers as the test users"
    if shutil.which("jupyterhub", path=str(Path(sys.executable).parent)) is None:
        return "jupyterhub is not installed (pip install -e '.[test]')"
    if not PROXY.exists():
        return f"configurable-http-proxy is not installed ({PROXY}; npm ci)"
    for user in USERS:
        try:
            pwd.getpwnam(user)
        except KeyError:
            return f"the test user {user} does not exist (scripts/setup.sh --test makes it)"
    return None


#: Where the service keeps users' folders (``c.GPUDevService.user_root``'s default).
USERS_ROOT = Path("/srv/gpudev/users")


def user_folder(user: str) -> Path:
    """``user``'s gpudev folder, made as the service makes it (only root writes the folders
    above it; it is the user's, mode 0700) for a test to put files in before the Hub starts."""
    USERS_ROOT.mkdir(mode=0o755, parents=True, exist_ok=True)
    account = pwd.getpwnam(user)
    path = USERS_ROOT / user
    path.mkdir(mode=0o700, exist_ok=True)
    os.chown(path, account.pw_uid, account.pw_gid)
    return path


@dataclass
class Hub:
    """A started Hub: ``url`` (the proxy), ``api`` (the Hub's REST API), an admin ``token``."""

    url: str
    api: str
    token: str
    folder: Path
    log: Path
    tokens: dict[str, str] = field(default_factory=dict)

    def call(
        self, method: str, path: str, body: Any = None, *, token: str | None = None
    ) -> tuple[int, Any]:
        """One request to the Hub's API (``path`` after /hub/api); (status, JSON or text)."""
        return request(method, self.api + path, body, token=token or self.token)

    def token_for(self, user: str) -> str:
        """An API token of ``user`` (made once, through the Hub's API)."""
        if user not in self.tokens:
            status, body = self.call("POST", f"/users/{user}/tokens", {"note": "gpudev tests"})
            assert status == 201, (status, body)
            self.tokens[user] = body["token"]
        return self.tokens[user]

    def start_server(self, user: str, timeout: float = 90.0) -> None:
        """Spawn ``user``'s server (as that account) and wait until it answers."""
        status, body = self.call("POST", f"/users/{user}/server")
        assert status in (201, 202, 400), (status, body)  # 400: already running
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            status, body = self.call("GET", f"/users/{user}")
            server = (body.get("servers") or {}).get("", {}) if isinstance(body, dict) else {}
            if server.get("ready"):
                return
            time.sleep(0.5)
        raise AssertionError(f"{user}'s server did not start: {self.tail()}")

    def as_user(
        self, user: str, method: str, path: str, body: Any = None, **kwargs: Any
    ) -> tuple[int, Any]:
        """A request to ``user``'s own server (``path`` after /user/NAME), with their token."""
        return request(
            method, f"{self.url}/user/{user}{path}", body, token=self.token_for(user), **kwargs
        )

    def tail(self, lines: int = 60) -> str:
        text = self.log.read_text(errors="replace") if self.log.exists() else ""
        return "\n".join(text.splitlines()[-lines:])


def request(
    method: str,
    url: str,
    body: Any = None,
    *,
    token: str | None = None,
    timeout: float = 300.0,
    headers: dict[str, str] | None = None,
) -> tuple[int, Any]:
    data = None if body is None else json.dumps(body).encode()
    req = urllib.request.Request(url, data=data, method=method)  # noqa: S310 (http only)
    if token:
        req.add_header("Authorization", f"token {token}")
    if data is not None:
        req.add_header("Content-Type", "application/json")
    for name, value in (headers or {}).items():
        req.add_header(name, value)
    try:
        with urllib.request.urlopen(req, timeout=timeout) as answer:  # noqa: S310
            status, raw = answer.status, answer.read()
    except urllib.error.HTTPError as err:
        status, raw = err.code, err.read()
    try:
        return status, json.loads(raw) if raw else None
    except ValueError:
        return status, raw.decode(errors="replace")


TEST_CONFIG = """
import os
c = get_config()  # noqa: F821
load_subconfig({example!r})  # noqa: F821 (the README's example, as is)

c.JupyterHub.ip = "127.0.0.1"
c.JupyterHub.port = {port}
c.JupyterHub.hub_port = {hub_port}
c.JupyterHub.db_url = "sqlite:///{folder}/jupyterhub.sqlite"
c.JupyterHub.cookie_secret_file = "{folder}/cookie_secret"
c.ConfigurableHTTPProxy.command = [{proxy!r}]
c.ConfigurableHTTPProxy.api_url = "http://127.0.0.1:{proxy_api}"
c.ConfigurableHTTPProxy.pid_file = "{folder}/proxy.pid"
c.JupyterHub.authenticator_class = "dummy"
c.DummyAuthenticator.password = {password!r}
c.Authenticator.allowed_users = {users!r}
c.Authenticator.admin_users = {{{admin!r}}}
c.Spawner.cmd = [{singleuser!r}]
c.Spawner.default_url = "/lab"
c.Spawner.start_timeout = 90
c.Spawner.http_timeout = 90
# (admin: it demotes and promotes the Hub's administrator; only admins change admins)
c.JupyterHub.services.append({{"name": "gpudev-tests", "api_token": {token!r}, "admin": True}})
c.JupyterHub.load_roles.append(
    {{
        "name": "gpudev-tests",
        "scopes": ["admin:users", "admin:servers", "tokens", "read:users"],
        "services": ["gpudev-tests"],
    }}
)
# The test service's configuration, and the fake GPUs its inventory reads.
c.JupyterHub.services[0]["environment"].update({service_env!r})
"""


@contextmanager
def run_hub(folder: Path, service_config: str, service_env: dict[str, str]) -> Iterator[Hub]:
    """Start a Hub in ``folder`` whose gpudev service reads ``service_config`` (Python) as
    its jupyter_gpudev_serve_config.py; stopped (servers and service too) afterwards."""
    why = missing()
    if why is not None:
        raise HubMissing(why)
    folder.mkdir(parents=True, exist_ok=True)
    os.chmod(folder, 0o755)  # noqa: S103 (the users' servers read nothing here; the Hub does)
    config_dir = folder / "service-config"
    config_dir.mkdir(exist_ok=True)
    (config_dir / "jupyter_gpudev_serve_config.py").write_text(service_config)
    port, hub_port, proxy_api = free_port(), free_port(), free_port()
    token = secrets.token_hex(16)
    env = {"JUPYTER_CONFIG_DIR": str(config_dir), **service_env}
    bindir = Path(sys.executable).parent
    (folder / "jupyterhub_config.py").write_text(
        TEST_CONFIG.format(
            example=str(EXAMPLE),
            port=port,
            hub_port=hub_port,
            proxy_api=proxy_api,
            folder=folder,
            proxy=str(PROXY),
            password=secrets.token_hex(8),
            users=set(USERS),
            admin=ADMIN,
            singleuser=str(bindir / "jupyterhub-singleuser"),
            token=token,
            service_env=env,
        )
    )
    log = folder / "hub.log"
    path = f"{bindir}:{os.environ.get('PATH', '')}"
    with log.open("wb") as out:
        process = subprocess.Popen(
            [str(bindir / "jupyterhub"), "-f", str(folder / "jupyterhub_config.py")],
            cwd=folder,
            stdout=out,
            stderr=subprocess.STDOUT,
            env={**os.environ, "PATH": path},
            start_new_session=True,
        )
    for user in USERS:  # a project folder in each home, as users keep them (not gpudev's)
        account = pwd.getpwnam(user)
        projects = Path(account.pw_dir) / "projects"
        projects.mkdir(exist_ok=True)
        os.chown(projects, account.pw_uid, account.pw_gid)
    hub = Hub(f"http://127.0.0.1:{port}", f"http://127.0.0.1:{port}/hub/api", token, folder, log)
    try:
        deadline = time.monotonic() + 60
        while True:
            if process.poll() is not None:
                raise AssertionError(f"the Hub exited: {hub.tail()}")
            try:
                status, _ = hub.call("GET", "/", token=token)
                if status == 200:
                    break
            except OSError:
                pass
            if time.monotonic() > deadline:
                raise AssertionError(f"the Hub did not answer: {hub.tail()}")
            time.sleep(0.3)
        yield hub
    finally:
        for user in USERS:
            with suppress(OSError):
                hub.call("DELETE", f"/users/{user}/server")
        process.terminate()
        try:
            process.wait(30)
        except subprocess.TimeoutExpired:
            os.killpg(process.pid, 9)
            process.wait()
        _stop_leftovers(folder)


def _stop_leftovers(folder: Path) -> None:
    """The proxy (JupyterHub leaves it running by design), and the gpudev service if the Hub
    did not stop it (a Hub that fails at start leaves its services running): the processes
    whose environment names this Hub's service configuration."""
    pid_file = folder / "proxy.pid"
    if pid_file.exists():
        with suppress(ValueError, ProcessLookupError):
            os.kill(int(pid_file.read_text().strip()), 15)
    marker = f"JUPYTER_CONFIG_DIR={folder / 'service-config'}".encode()
    for environ in Path("/proc").glob("[0-9]*/environ"):
        with suppress(OSError):
            if marker in environ.read_bytes().split(b"\0"):
                os.kill(int(environ.parent.name), 15)
