"""What the table-printing benchmarks share: timing a call, and one Markdown row per path.
Standard library only (``bench_gpu_inventory.py`` runs on a machine without Docker)."""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable, Sequence


def timed(func: Callable[[], object], runs: int) -> list[float]:
    """The wall times, in seconds, of ``runs`` calls of ``func`` after one warm-up call."""
    func()
    samples = []
    for _ in range(runs):
        started = time.perf_counter()
        func()
        samples.append(time.perf_counter() - started)
    return samples


def print_table(
    rows: Sequence[tuple[str, list[float]]],
    *,
    runs: int,
    digits: int = 1,
    ratio_digits: int = 2,
    extra: tuple[str, Sequence[str]] | None = None,
) -> None:
    """A Markdown table of each path's median and p90 in ms (``digits`` decimals) and its
    ratio to the first row's median (the floor); ``extra``: one more column, its title and a
    value per row."""
    floor = statistics.median(rows[0][1])
    print(f"{runs} runs each, median and p90 in ms, ratio = median / floor median\n")
    titles = ["path", "median ms", "p90 ms", "ratio", *([extra[0]] if extra else [])]
    print(f"| {' | '.join(titles)} |")
    print(f"|{' --- |' * len(titles)}")
    for index, (name, samples) in enumerate(rows):
        median = statistics.median(samples)
        p90 = statistics.quantiles(samples, n=10)[-1]
        cells = [name, f"{median * 1000:.{digits}f}", f"{p90 * 1000:.{digits}f}"]
        cells.append(f"{median / floor:.{ratio_digits}f}")
        if extra:
            cells.append(extra[1][index])
        print(f"| {' | '.join(cells)} |")
