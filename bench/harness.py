"""Timing harness shared by the benchmarks: interleaved repetitions, best and median.

Method: every peer does one untimed warm-up run, then ``REPEATS`` timed
rounds; within a round the peers run one after another (in a rotated order),
so drift in the machine's speed hits all of them alike. Each timed run is
done with the garbage collector paused (as ``timeit`` does) and reports
nanoseconds per operation; we keep the best (least disturbed) and the median.
"""

from __future__ import annotations

import gc
import json
import os
import platform
import statistics
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

REPEATS = 5

Run = Callable[[], tuple[int, int]]
"""One timed run: returns (elapsed ns, operations)."""


@dataclass
class Figure:
    """Best and median ns/op of one peer on one workload."""

    workload: str
    size: int
    peer: str
    samples: list[float] = field(default_factory=list)

    @property
    def best(self) -> float:
        return min(self.samples)

    @property
    def median(self) -> float:
        return statistics.median(self.samples)


def timed(body: Callable[[], int]) -> tuple[int, int]:
    """Run ``body`` (which returns its operation count) with GC paused; (ns, ops)."""
    gc.collect()
    gc.disable()
    try:
        start = time.perf_counter_ns()
        ops = body()
        elapsed = time.perf_counter_ns() - start
    finally:
        gc.enable()
    return elapsed, ops


def interleave(workload: str, size: int, runs: dict[str, Callable[[], Run]]) -> list[Figure]:
    """Measure each peer's run ``REPEATS`` times, interleaved, after one warm-up each.

    ``runs[peer]()`` prepares a fresh run (untimed) and returns it.
    """
    figures = {peer: Figure(workload, size, peer) for peer in runs}
    for prepare in runs.values():
        prepare()()
    peers = list(runs)
    for repeat in range(REPEATS):
        order = peers[repeat % len(peers) :] + peers[: repeat % len(peers)]
        for peer in order:
            elapsed, ops = runs[peer]()()
            figures[peer].samples.append(elapsed / ops)
    return list(figures.values())


def machine() -> dict[str, Any]:
    """A one-line description of where the figures were taken."""
    cpu = platform.processor() or platform.machine()
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    return {
        "python": sys.version.split()[0],
        "implementation": platform.python_implementation(),
        "platform": platform.platform(),
        "cpu": cpu,
        "cores": os.cpu_count(),
    }


def table(figures: Sequence[Figure], baselines: Sequence[str], unit: str = "ns/op") -> str:
    """A markdown table: best and median per peer, and best as a ratio to each baseline."""
    head = ["workload", "size", "peer", f"best {unit}", f"median {unit}"]
    head += [f"x {b}" for b in baselines]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    by_key: dict[tuple[str, int], dict[str, Figure]] = {}
    for fig in figures:
        by_key.setdefault((fig.workload, fig.size), {})[fig.peer] = fig
    for (workload, size), peers in by_key.items():
        for peer, fig in peers.items():
            cells = [workload, f"{size:,}", peer, f"{fig.best:,.0f}", f"{fig.median:,.0f}"]
            for base in baselines:
                ref = peers.get(base)
                cells.append(f"{fig.best / ref.best:.2f}" if ref else "")
            lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)


def save(name: str, command: str, figures: Sequence[Figure], extra: dict[str, Any],
         markdown: str) -> None:  # fmt: skip
    """Write ``bench/results/<name>.json`` and ``.md`` with the machine and command."""
    out = Path(__file__).parent / "results"
    out.mkdir(exist_ok=True)
    info = machine()
    data = {
        "command": command,
        "machine": info,
        "method": __doc__,
        "figures": [
            {
                "workload": f.workload,
                "size": f.size,
                "peer": f.peer,
                "best": f.best,
                "median": f.median,
                "samples": f.samples,
            }
            for f in figures
        ],
        **extra,
    }
    (out / f"{name}.json").write_text(json.dumps(data, indent=1) + "\n")
    header = (
        f"Command: `{command}`\n\n"
        f"Machine: {info['cpu']}, {info['cores']} cores, {info['platform']}, "
        f"{info['implementation']} {info['python']}\n\n"
    )
    (out / f"{name}.md").write_text(header + markdown + "\n")
