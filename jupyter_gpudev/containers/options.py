"""The options of dev containers, each a trait with its default and help text: those of
``ContainerLookup`` (``c.ContainerLookup.*``, ``lookup.py``: reading) and of ``DevContainers``
(``c.DevContainers.*``, ``lifecycle.py``: the lifecycle, which reads its base's too).

Each is assigned once, on its class, in its class body: so it is that class's own option, as
``--help-all``, the generated configuration file and the configuration reference show it, and
config for the class (or a subclass) sets it. A trait here belongs to that one class: it is
never assigned to a second one.
"""

from __future__ import annotations

from typing import Any

from traitlets import Bool, Enum, Float, Int, List, TraitError, Unicode
from traitlets.utils.descriptions import class_of

from ..environments.model import parse_docker_size
from ..traits import PositiveFloat

# -- ContainerLookup -------------------------------------------------------------------------

STATE_DIR = Unicode(
    help="""Folder of gpudev's persistent state (the GPU lease ledger). Default:
        <Jupyter data dir>/gpudev. The server and the CLI must use the same one."""
).tag(config=True)

MAX_LOG_BYTES = Int(
    16 << 20,
    min=1,
    help="""The most bytes of a container's output one logs request reads (the REST API,
        the panel's Logs tab, ``jupyter gpudev logs`` without --follow); past it the answer says
        where it was cut (1 or more). Ask for the last lines (``tail``) to see the end of a
        longer log.""",
).tag(config=True)

NETWORK = Unicode(
    "gpudev",
    help="""The Docker network dev containers join: a bridge created on first use with
        inter-container traffic disabled, so a container (and its kernels' ports) is reachable
        from the host but not from other containers. Empty: the engine's default bridge.""",
).tag(config=True)

ISOLATE_WEB_APPS = Bool(
    True,
    help="""Serve the web apps of dev containers (/gpudev/proxy/NAME/PORT/) in a sandbox:
        a browser opening one is sent to /gpudev/app/CAPABILITY/..., where its pages run in an
        opaque origin that can read none of Jupyter's cookies nor call Jupyter's API as the
        user. Apps that need their own cookies or browser storage do not work there; off, a
        proxied page runs with all of JupyterLab's rights in the browser (only for apps you
        trust).""",
).tag(config=True)

DOCKER_CLI = Unicode(
    "docker",
    help="""The docker command line (a name on PATH or a path), used for terminals inside
        dev containers: a terminal runs `docker exec -it` in a pseudo-terminal.""",
).tag(config=True)


def _moved(new: str, bounds: str = "") -> str:
    return f"""Deprecated: use c.KubernetesHosts.{new}, which this sets (with a warning){bounds}."""


POD_START_TIMEOUT = PositiveFloat(600.0, help=_moved("start_timeout", "; more than 0")).tag(
    config=True
)
POD_PORT_FORWARD = Enum(("auto", "always", "never"), "auto", help=_moved("port_forward")).tag(
    config=True
)
POD_POLL_INTERVAL = PositiveFloat(1.0, help=_moved("poll_interval", "; more than 0")).tag(
    config=True
)
POD_WATCH = Bool(False, help=_moved("watch")).tag(config=True)

# -- DevContainers ---------------------------------------------------------------------------

LIFECYCLE_TIMEOUT = PositiveFloat(
    1800.0,
    help="""Seconds a start waits for each lifecycle command (postCreateCommand,
        postStartCommand) of an environment (more than 0); one still running then goes on in
        the container, unwatched, and the start reports it. Only a command's last 20 lines
        are kept, whatever it prints.""",
).tag(config=True)

STOP_TIMEOUT = Int(
    5,
    min=0,
    help="""Seconds a container gets to stop after SIGTERM before it is killed (0 or more;
        0: killed at once).""",
).tag(config=True)

RUN_AS_SERVER_USER = Bool(
    True,
    help="""Run containers as the server user's uid:gid so that files written in the
        workspace keep their owner; in the shared service, as the calling user's uid:gid
        with their groups (on its own machine; on an ssh:// host as the SSH user). Off: the
        image's user (often root).""",
).tag(config=True)

PORT_GUARD = Bool(
    True,
    help="""Close the ports of dev containers on this machine's engine (kernels, web apps)
        to every account but this server's (and root's; in the shared service, also each
        container's owner's, whose server connects to their kernels): an iptables chain,
        GPUDEV-PORTS, on the way to the containers' network (c.ContainerLookup.network),
        rewritten at each start, resume, stop and removal. It needs root (or CAP_NET_ADMIN)
        and iptables; without them the server says once that the ports are open to local
        accounts. Off: gpudev leaves the firewall alone.""",
).tag(config=True)

ALLOW_ROOT = Bool(
    False,
    help="""The shared service: let an environment that asks for root ("remoteUser":
        "root") run as the image's user, usually root, instead of as the calling user. Root
        in a dev container can change everything in it (and what a commit pushes), and with
        a mounted folder, write files there as root. Off: such an environment is refused.
        Single-user servers run containers as their own user whatever this says.""",
).tag(config=True)

PUBLISH_PORTS = Bool(
    False,
    help="""Also publish each environment's forwardPorts on the host's loopback address
        (127.0.0.1, a free port): anyone logged in to that machine then reaches them without
        Jupyter's login. Off: they are reached only through the authenticated proxy
        (/gpudev/proxy/NAME/PORT/).""",
).tag(config=True)

RECONCILE_GRACE = Float(
    120.0,
    min=0.0,
    help="""Seconds during which a new lease is never freed by reconciliation even though
        its container is not (yet) listed: a start in flight (lease taken, container being
        created) in this or another process (0 or more; 0: none).""",
).tag(config=True)

LINGER = Float(
    0.0,
    min=0.0,
    help="""Seconds a shared dev container (one that kernels were started in, not one
        dedicated to a kernel) keeps running after its last kernel ends before it is stopped
        (a pod: deleted, unless files outside its workspace changed) and its GPUs released (0
        or more; 0 ends it at once). A pinned container is never ended this way (`jupyter
        gpudev pin NAME`, the panel's Pin button).""",
).tag(config=True)

COMMAND_LOG = Bool(
    True,
    help="""Note the package-manager commands run in each dev container (pip, pip3, apt,
        apt-get, conda, mamba, micromamba, npm, cargo: small wrappers first on its PATH append
        each command line to /var/log/gpudev/commands.log, then run the real program), and
        show the ones since the last commit as comments in its diff. Read as data, never run;
        `python -m pip`, login shells that set PATH anew and environments whose containerEnv
        sets PATH are not noted.""",
).tag(config=True)

KEEP_ALIVE_COMMAND = Unicode(
    "sleep infinity",
    help="The container's main process: it only keeps the container up for kernels.",
).tag(config=True)

SECURITY_OPT = List(
    Unicode(),
    default_value=["no-new-privileges"],
    help="""Docker security options of every dev container (`docker run --security-opt`).
        The default, no-new-privileges, makes setuid programs and file capabilities inside
        the container (sudo, su) give no privileges. An environment cannot change these
        (--security-opt in runArgs is refused). The seccomp profile is seccomp_profile's.""",
).tag(config=True)

SECCOMP_PROFILE = Unicode(
    "gpudev",
    help="""The seccomp profile of dev containers. 'gpudev' (the default): Docker's default
        profile, except that no file may get a setuid or setgid bit (chmod, open, mknod), so
        that root in a container cannot leave a setuid-root program in a host folder it
        mounts (the workspace); packages that ship setuid programs (sudo, ...) then install
        only through the Dockerfile. '': the engine's own default. Otherwise the path of a
        profile (JSON) on the server's machine.""",
).tag(config=True)

CAP_DROP = List(
    Unicode(),
    default_value=["MKNOD", "SETFCAP", "FSETID", "NET_RAW", "SETPCAP", "AUDIT_WRITE"],
    help="""Linux capabilities removed from Docker's default set in every dev container.
        The default keeps what package managers need as root (CHOWN, DAC_OVERRIDE, FOWNER,
        SETUID, SETGID, KILL, ...) and removes device nodes (MKNOD: a device node in the
        workspace would be a device on the host), file capabilities (SETFCAP), keeping
        setuid bits on files it writes (FSETID), raw sockets (NET_RAW), SETPCAP and
        AUDIT_WRITE. An environment adds only the capabilities
        c.EnvironmentManager.allowed_capabilities names (none by default).""",
).tag(config=True)

PIDS_LIMIT = Int(
    4096,
    min=0,
    help="""The most processes (and threads) one dev container may run, against fork
        bombs (0 or more; 0: no limit).""",
).tag(config=True)

MEMORY_LIMIT = Unicode(
    "",
    help="""The most memory one dev container may use, as a Docker size ('64g'); empty:
        no limit. An environment may ask for less (customizations.gpudev.memory), never
        more: the smaller of the two applies.""",
).tag(config=True)

CPU_LIMIT = Float(
    0.0,
    min=0.0,
    help="""The most CPUs' worth of time one dev container may use (4.5; 0 or more; 0: no
        limit). An environment may ask for less (customizations.gpudev.cpus), never more.""",
).tag(config=True)


class _LogSize(Unicode[str, str | bytes]):
    """A Docker size ('10m', '1g') or '': checked as it is set."""

    info_text = "a Docker size like '10m' or '1g', or ''"

    def validate(self, obj: Any, value: Any) -> str:
        text = str(super().validate(obj, value))
        if text.strip():
            try:
                parse_docker_size(text)
            except ValueError as exc:
                raise TraitError(
                    f"The value of the '{self.name}' trait of {class_of(obj)} instance should "
                    f"be {self.info_text}: {exc}"
                ) from None
        return text.strip()


LOG_MAX_SIZE = _LogSize(
    "10m",
    help="""The most bytes of a dev container's output (its main process's, what its
        processes write to /proc/1/fd/1) the engine keeps in one log file, as a Docker size
        ('10m'); the engine keeps log_max_files such files, the oldest dropped. Set only where
        the engine's default logging driver keeps logs in files (json-file, local); another
        driver the administrator chose (journald, syslog, ...) is left alone. Empty: the
        engine's own default (json-file's is no limit at all).""",
).tag(config=True)

LOG_MAX_FILES = Int(
    2,
    min=1,
    help="""How many log files of log_max_size bytes the engine keeps of a dev container's
        output (1 or more).""",
).tag(config=True)

BUILD_TIMEOUT = Float(
    7200.0,
    min=0.0,
    help="""Seconds an image build may take (an environment's Dockerfile, its features, a
        commit's rebuild): past it the build is stopped (the engine cancels it and removes the
        step's container) and the start or commit fails saying so. A build that never ends
        would otherwise hold one of the server's workers, and in the shared service one of
        its user's operations, for good (0 or more; 0: no limit).""",
).tag(config=True)
