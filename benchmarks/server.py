"""A real Jupyter server with the extension, for the benchmarks that go through its REST API:
a subprocess on loopback with token authentication, gpudev's state in a folder of the run, GPUs
from the fake inventory, no user configuration."""

from __future__ import annotations

import gc
import inspect
import json
import os
import signal
import socket
import subprocess
import sys
import tracemalloc
from collections import Counter
from pathlib import Path
from typing import IO

ROOT = Path(__file__).resolve().parent.parent
FAKE_SMI = ROOT / "tests" / "fixtures" / "fake-nvidia-smi"
TOKEN = "bench-token"  # noqa: S105 - a throwaway token for a loopback-only server
HEADERS = {"Authorization": f"token {TOKEN}"}


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def start_server(
    root: Path,
    state: Path,
    extra: list[str],
    output: IO[str] | None = None,
    traced: Path | None = None,
) -> tuple[subprocess.Popen[bytes], int]:
    """Start the server on a free port (``extra``: more command-line options); its process and
    port. Its output goes to ``output`` (default: nowhere). With ``traced`` (a folder), under
    tracemalloc, dumping into that folder on each SIGUSR2 (``traced_main``)."""
    port = free_port()
    env = {
        **os.environ,
        "FAKE_NVIDIA_SMI_DIR": str(ROOT / "tests/fixtures/smi/two-a100"),
        "JUPYTER_CONFIG_DIR": str(state / "config"),
    }
    process = subprocess.Popen(
        [
            sys.executable,
            *(
                ["-m", "jupyter_server"]
                if traced is None
                else [__file__, "--traced", str(traced), "--"]
            ),
            f"--port={port}",
            "--ip=127.0.0.1",
            f"--IdentityProvider.token={TOKEN}",
            f"--ServerApp.root_dir={root}",
            "--ServerApp.open_browser=False",
            "--allow-root",
            f"--DevContainers.state_dir={state}",
            "--GPUInventory.backend=nvidia-smi",
            f"--GPUInventory.nvidia_smi_path={FAKE_SMI}",
            *extra,
        ],
        env=env,
        stdout=output if output is not None else subprocess.DEVNULL,
        stderr=subprocess.STDOUT if output is not None else subprocess.DEVNULL,
    )
    return process, port


def stop_server(process: subprocess.Popen[bytes]) -> None:
    """Stop it; killed if it has not stopped within 30 s (said on stderr)."""
    process.terminate()
    try:
        process.wait(30)
    except subprocess.TimeoutExpired:
        print("the server did not stop within 30 s", file=sys.stderr)
        process.kill()
        process.wait(10)


# -- benchmark-only: the server under tracemalloc --------------------------------------------------
# ``python benchmarks/server.py --traced FOLDER -- ARGS``: jupyter_server's own main with ARGS. The
# first SIGUSR2 starts ``tracemalloc.start(TRACE_FRAMES)`` (not at start-up: importing
# jupyter_server traced takes minutes) and writes FOLDER/done-0; each later one collects garbage
# and writes FOLDER/snapshot-N (a tracemalloc snapshot, pickled) and FOLDER/types-N.json (live
# objects by type) and FOLDER/holders-N.log (``holders``: what refers to a few classes'
# oldest instances), N counting from 1, then FOLDER/done-N. Nothing of this is in the extension.

TRACE_FRAMES = 25


def dump_memory(folder: Path, number: int) -> None:
    """Collect garbage, then write snapshot-N, types-N.json and (last) done-N into ``folder``."""
    gc.collect()
    snapshot = tracemalloc.take_snapshot()
    snapshot.dump(str(folder / f"snapshot-{number}"))
    kinds = Counter(type(x).__qualname__ for x in gc.get_objects())
    (folder / f"types-{number}.json").write_text(json.dumps(dict(kinds.most_common())))
    (folder / f"holders-{number}.log").write_text("\n".join(holders(HOLDER_TYPES)) + "\n")
    (folder / f"done-{number}").write_text("")


#: The classes whose live instances ``holders`` counts, and shows what refers to the oldest.
HOLDER_TYPES = (
    "GPUDevProvisioner",
    "ContainerProcesses",
    "ServerKernelManager",
    "ZMQChannelsWebsocketConnection",
    "ZMQStream",
)


def holders(names: tuple[str, ...], depth: int = 6, width: int = 3) -> list[str]:
    """Each class of ``names``: how many live instances, and for the oldest two, what refers
    to them, ``depth`` levels up, ``width`` referrers a level (this dump's own frames and lists
    left out)."""
    everything = gc.get_objects()
    lines: list[str] = []
    for name in names:
        found = [x for x in everything if type(x).__name__ == name]
        lines.append(f"{name}: {len(found)} alive")
        oldest = found[:2]
        for one in oldest:
            lines += _referrers(one, depth, width, "  ", {id(everything), id(found), id(oldest)})
    return lines


def _referrers(obj: object, depth: int, width: int, indent: str, skip: set[int]) -> list[str]:
    lines = [f"{indent}{type(obj).__module__}.{type(obj).__qualname__} {_describe(obj)}"]
    if depth == 0:
        return lines
    seen = skip | {id(obj)}
    shown = 0
    for ref in gc.get_referrers(obj):
        if id(ref) in seen or inspect.isframe(ref) or type(ref).__name__.endswith("iterator"):
            continue
        lines += _referrers(ref, depth - 1, width, indent + "  ", seen)
        shown += 1
        if shown >= width:
            break
    return lines


def _describe(obj: object) -> str:
    """A few words on ``obj``: a dict's keys, a container's length."""
    if isinstance(obj, dict):
        return f"keys {list(obj)[:6]!r}"[:160]
    if isinstance(obj, (list, tuple, set)):
        return f"len {len(obj)}"
    return ""


def traced_main(folder: Path, argv: list[str]) -> None:
    dumps = [0]

    def on_signal(_signum: int, _frame: object) -> None:
        if not tracemalloc.is_tracing():
            tracemalloc.start(TRACE_FRAMES)
            (folder / "done-0").write_text("")
            return
        dumps[0] += 1
        dump_memory(folder, dumps[0])

    signal.signal(signal.SIGUSR2, on_signal)
    from jupyter_server.serverapp import main  # noqa: PLC0415

    sys.argv = ["jupyter-server", *argv]
    main()


if __name__ == "__main__":
    if len(sys.argv) < 4 or sys.argv[1] != "--traced" or sys.argv[3] != "--":
        sys.exit("usage: server.py --traced FOLDER -- JUPYTER-SERVER-ARGS")
    traced_main(Path(sys.argv[2]), sys.argv[4:])
