"""The pure parts of the load benchmark (benchmarks/bench_load.py): percentiles, what is read
of /proc, the footprint table and the short run's settings. The run itself is the benchmark."""

from __future__ import annotations

import os
import sys
import tracemalloc
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "benchmarks"))

import bench_load
from bench_load import Resources


def test_percentiles_are_nearest_rank() -> None:
    samples = [float(n) for n in range(100, 0, -1)]  # 1..100, unsorted
    assert bench_load.percentile(samples, 50) == 50.0
    assert bench_load.percentile(samples, 99) == 99.0
    assert bench_load.percentile(samples, 100) == 100.0
    assert bench_load.percentile([0.3, 0.1, 0.2], 50) == 0.2
    assert bench_load.percentile([7.0], 99) == 7.0
    assert bench_load.percentile([], 50) != bench_load.percentile([], 50)  # nan


def test_status_and_stat_are_read_as_the_kernel_writes_them() -> None:
    status = "Name:\tpython\nVmPeak:\t  200 kB\nVmRSS:\t  123456 kB\nThreads:\t17\n"
    assert bench_load.parse_status(status) == (123456, 17)
    # a command name with spaces and a parenthesis does not shift the fields
    stat = "4242 (jupyter (x) y) S 1 2 3 0 -1 4194560 10 0 0 0 250 150 0 0 20 0 9 0"
    assert bench_load.parse_cpu(stat, 100) == 4.0


def test_this_process_is_measured() -> None:
    # Given this process with one more file open
    before = bench_load.resources(os.getpid())
    with Path(__file__).open():
        during = bench_load.resources(os.getpid())
        kinds = bench_load.fd_kinds(os.getpid())
    # Then its files, threads and memory are counted
    assert during.fds == before.fds + 1
    assert during.threads >= 1
    assert during.rss_kib > 1000
    assert kinds["file"] >= 1
    assert sum(kinds.values()) in (during.fds - 1, during.fds)  # less the listing's own


def test_socket_inodes_and_kinds() -> None:
    tcp = (
        "  sl  local_address rem_address   st tx_queue rx_queue tr tm->when retrnsmt   uid  "
        "timeout inode\n"
        "   0: 0100007F:C65F 00000000:0000 0A 00000000:00000000 00:00000000 00000000     0"
        "        0 6114191 1 000000002ab043d7 100 0 0 10 0\n"
    )
    unix = (
        "Num       RefCount Protocol Flags    Type St Inode Path\n"
        "000000003d33552b: 00000003 00000000 00000000 0001 03 6112926 /var/run/docker.sock\n"
    )
    inet, local = bench_load.socket_inodes(tcp), bench_load.socket_inodes(unix)
    assert (inet, local) == ({"6114191"}, {"6112926"})
    assert bench_load.fd_kind("socket:[6114191]", inet, local) == "tcp"
    assert bench_load.fd_kind("socket:[6112926]", inet, local) == "unix"
    assert bench_load.fd_kind("socket:[1]", inet, local) == "socket"
    assert bench_load.fd_kind("pipe:[77]", inet, local) == "pipe"
    assert bench_load.fd_kind("anon_inode:[eventpoll]", inet, local) == "anon_inode:[eventpoll]"
    assert bench_load.fd_kind("/tmp/x.log", inet, local) == "file"


def test_growth_beyond_five_percent_is_a_finding() -> None:
    idle = Resources(rss_kib=100 * 1024, fds=40, threads=8, cpu_s=0)
    warm = Resources(rss_kib=104 * 1024, fds=40, threads=8, cpu_s=1)
    end = Resources(rss_kib=110 * 1024, fds=39, threads=9, cpu_s=9)
    rows = bench_load.footprint_rows([idle, warm, end], [(1, 2), (0, 2)])
    assert rows == [
        "| RSS (MiB) | 100 | 104 | 110 | +5.8 % **finding** | +10.0 % **finding** |",
        "| open files | 40 | 40 | 39 | -2.5 % | -2.5 % |",
        "| threads | 8 | 8 | 9 | +12.5 % **finding** | +12.5 % **finding** |",
    ]
    assert bench_load.growth(0, 0) == 0.0


def test_latency_row() -> None:
    assert bench_load.latency_row("GET x", [0.010, 0.020, 0.030]) == (
        "| GET x | 3 | 20.0 | 30.0 | 30.0 |"
    )


def test_the_short_run() -> None:
    args = bench_load.arguments(["--quick", "--part", "soak"])
    assert (args.duration, args.users, args.cycles, args.k8s_duration) == (30.0, 10, 10, 20.0)
    assert args.part == ["soak"]
    full = bench_load.arguments([])
    assert (full.duration, full.users, full.starters, full.cycles) == (600.0, 50, 16, 300)
    assert (full.pods, full.gpus, full.rate, full.k8s_duration) == (1000, 500, 200.0, 120.0)


HELD: list[bytes] = []


def hold_some(count: int) -> None:
    """Keep ``count`` new 1 KiB blocks (the growth the comparison is to find)."""
    HELD.extend(bytes([n % 256]) * 1024 for n in range(count))


def test_the_memory_comparison_names_what_grew() -> None:
    # Given two snapshots of this process, 200 blocks of 1 KiB kept between them
    tracemalloc.start(10)
    try:
        first = tracemalloc.take_snapshot()
        hold_some(200)
        last = tracemalloc.take_snapshot()
    finally:
        tracemalloc.stop()
    lines, full = bench_load.compare_memory(first, last, ({"bytes": 5}, {"bytes": 205}), top=3)
    # Then the first growing site is hold_some's line, by traceback and by line
    site = next(x for x in lines if x.startswith("| 1 |"))
    assert "tests/unit/test_bench_load.py" in site
    cells = site.split(" | ")
    assert 200 <= float(cells[1]) <= 240  # KiB more
    assert int(cells[2]) >= 200  # blocks more
    line = next(x for x in lines if x.startswith("| `tests/unit/test_bench_load.py:"))
    assert "+200" in line or float(line.split(" | ")[1]) >= 200
    # And the types that grew, and the full tracebacks of the top
    assert "bytes +200 (205)" in lines[-1]
    assert full[0].startswith("#1: +")
    assert any("hold_some" in x or "HELD.extend" in x for x in full)
    del HELD[:]


def test_where_shows_the_innermost_frame_and_gpudev_s() -> None:
    frames = [
        ("/x/site-packages/json/decoder.py", 353),
        (f"{bench_load.ROOT}/jupyter_gpudev/containers/docker_backend.py", 74),
        ("/x/site-packages/jupyter_client/manager.py", 31),
        ("/usr/lib/python3.11/threading.py", 1002),
    ]
    trace = tracemalloc.Traceback(tuple(frames))  # innermost first, as tracemalloc keeps them
    assert bench_load.where(trace) == (
        "json/decoder.py:353 <- jupyter_gpudev/containers/docker_backend.py:74 "
        "<- jupyter_client/manager.py:31"
    )
