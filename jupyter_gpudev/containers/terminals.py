"""The command line of a terminal inside a dev container (``docker exec`` locally or on a
``tcp://`` engine, ``ssh`` to the host running ``docker exec`` there for ``ssh://``, gpudev's
exec bridge for a pod)."""

from __future__ import annotations

import shlex
import shutil
import sys

from docker.models.containers import Container

from ..engine import Host
from ..errors import EngineError
from .commands import exec_user

SHELL = "if command -v bash >/dev/null 2>&1; then exec bash; else exec sh; fi"


def terminal_argv(host: Host, container: Container, docker_cli: str) -> list[str]:
    """The argv of a shell in ``container`` on ``host``.

    Every element comes from the engine or from configuration, never from a request: the
    container is addressed by its id, its working folder is the one it was created with.
    """
    workdir = str(container.attrs.get("Config", {}).get("WorkingDir") or "/")
    inside = ["exec", "-it", "-e", "TERM=xterm-256color", "-w", workdir]
    user = exec_user(container)  # remoteUser, where the container does not run as the server's
    if user:
        inside += ["-u", user]
    inside.append(str(container.id))
    inside += ["/bin/sh", "-c", SHELL]
    if host.ssh is not None:
        return ssh_terminal(host, inside)
    cli = shutil.which(docker_cli)
    if cli is None:
        raise EngineError(
            f"Terminals in containers need the docker command line ({docker_cli!r} "
            "was not found on PATH; set c.DevContainers.docker_cli)"
        )
    spec = host.spec
    argv = [cli, "--host", spec.url]
    if spec.transport == "tcp" and (spec.tls_verify or spec.tls_ca_cert):
        argv.append("--tlsverify")
        if spec.tls_ca_cert:
            argv += ["--tlscacert", spec.tls_ca_cert]
        if spec.tls_client_cert and spec.tls_client_key:
            argv += ["--tlscert", spec.tls_client_cert, "--tlskey", spec.tls_client_key]
    return [*argv, *inside]


def ssh_terminal(host: Host, inside: list[str]) -> list[str]:
    """``ssh -tt`` to the host running ``docker exec`` there, with the host's own key and
    known_hosts, strictly checked (the same rules as the server's connection). The remote
    command is quoted word by word: the remote side runs it through the user's shell."""
    if host.ssh is None:
        raise EngineError(f"Host {host.name!r} is not an ssh:// host")
    ssh = shutil.which("ssh")
    if ssh is None:
        raise EngineError("Terminals on ssh:// hosts need the ssh command line on PATH")
    target = host.ssh.target
    # -F none: no ~/.ssh/config or ssh_config (a HostName or ProxyCommand there would take
    # the terminal elsewhere than the server's own connection goes).
    argv = [ssh, "-F", "none", "-tt", "-p", str(target.port), "-o", "BatchMode=yes"]
    argv += ["-o", "StrictHostKeyChecking=yes", "-o", "ConnectTimeout=10"]
    if target.known_hosts:
        argv += ["-o", f"UserKnownHostsFile={target.known_hosts}"]
        argv += ["-o", "GlobalKnownHostsFile=/dev/null"]
    if target.identity_file:
        argv += ["-i", target.identity_file, "-o", "IdentitiesOnly=yes"]
    remote = " ".join(shlex.quote(word) for word in ["docker", *inside])
    return [*argv, "-l", target.username, "--", target.hostname, remote]


def pod_terminal_argv(host: Host, pod: str) -> list[str]:
    """The argv of a shell in a pod of a Kubernetes host: gpudev's own bridge
    (``containers/pod_terminal.py``) over the exec websocket, with this Python."""
    module = "jupyter_gpudev.containers.pod_terminal"
    return [sys.executable, "-m", module, "--host", host.name, "--url", host.spec.url, "--pod", pod]
