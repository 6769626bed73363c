"""Dependencies: what ``after=`` costs a drain, against the same jobs without it, and how
soon a waiting run starts once its upstream's run is recorded.

Workloads, 1,000 jobs each, ticked through a simulated day of hourly slots (each a
ratio to the same jobs without ``after``, ``x none``):

- ``fan-in``: 40 groups of 24 hourly imports and one daily report after the
  imports of its window (``within="window"``: 24 slots read per report);
- ``fan-out``: 10 extracts, each followed by 99 loads of the same slot;
- ``chains``: 100 chains of 10 jobs, each after the one before (same slot).

In memory (``Scheduler.tick``), and on SQLite through ``DurableScheduler.tick``
(one commit per run), a run and its decision per op.

Wake-up latency: on SQLite and, when ``ROTA_PG_DSN`` is set, PostgreSQL, one node
(a ``Runner``): a downstream job waits for an upstream of the same slot every
0.2 s; the delay from the upstream's run ending to the downstream's start, p50 and
p99, beside the runner's ordinary delay from a slot to its run's start (the same
node, a job without ``after``).

Usage: ``python bench/dependencies.py`` (about a minute); writes
``bench/results/dependencies.md`` and ``dependencies.json``.
"""

from __future__ import annotations

import os
import statistics
import tempfile
import threading
import time
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

from harness import Figure, Run, interleave, save, table, timed

from rota import FixedRate, ManualClock, RunContext, Runner, Scheduler, Upstream
from rota.durable import DurableScheduler
from rota.store import PostgresStore, SQLiteStore, Store

HOUR = 3600.0
START = 1_800_000_000.0 - 1_800_000_000.0 % 86400  # a midnight UTC


def noop(at: float) -> None:
    """A run that does nothing: what is measured is the scheduling."""


Shape = list[tuple[str, object, Any]]  # (id, schedule, after)


def fan_in() -> Shape:
    jobs: Shape = []
    for g in range(40):
        jobs += [(f"i{g}.{k}", FixedRate(HOUR, start=START + HOUR), None) for k in range(24)]
        after = [Upstream(f"i{g}.{k}", within="window") for k in range(24)]
        jobs.append((f"r{g}", FixedRate(24 * HOUR, start=START + 24 * HOUR), after))
    return jobs


def fan_out() -> Shape:
    jobs: Shape = []
    for g in range(10):
        jobs.append((f"e{g}", FixedRate(HOUR, start=START + HOUR), None))
        jobs += [(f"l{g}.{k}", FixedRate(HOUR, start=START + HOUR), f"e{g}") for k in range(99)]
    return jobs


def chains() -> Shape:
    jobs: Shape = []
    for c in range(100):
        jobs += [
            (f"c{c}.{k}", FixedRate(HOUR, start=START + HOUR), f"c{c}.{k - 1}" if k else None)
            for k in range(10)
        ]
    return jobs


def draining(shape: Callable[[], Shape], with_after: bool, store: bool) -> Run:
    """A simulated day of hourly ticks over ``shape``'s 1,000 jobs (the runs they make
    count), in memory or on a fresh SQLite file."""
    clock = ManualClock(START)
    folder = tempfile.mkdtemp()
    sched: Scheduler
    if store:
        sched = DurableScheduler(SQLiteStore(Path(folder) / "d.db", synchronous="NORMAL"),
                                 clock=clock, lease=10 * 86400)  # fmt: skip
        sched.register("noop", noop)
    else:
        sched = Scheduler(clock=clock, epoch=True)
    for job_id, when, after in shape():
        sched.schedule(job_id, when, "noop" if store else noop,  # type: ignore[arg-type]
                       after=after if with_after else None)  # fmt: skip

    def body() -> int:
        done = 0
        for hour in range(1, 25):
            clock.set(START + hour * HOUR)
            done += len(sched.tick(START + hour * HOUR))
        return done

    return lambda: timed(body)


def latency(store: Store, pairs: int = 150) -> dict[str, float]:
    """On ``store``, one node: the delay from an upstream's run ending to its
    waiting dependant's start, and from a plain job's slot to its run's start (p50 and
    p99, milliseconds)."""
    ended: dict[float, float] = {}
    woke: dict[float, float] = {}
    plain: list[float] = []
    done = threading.Event()
    sched = DurableScheduler(store, poll=0.5)

    def upstream(*, run: RunContext) -> None:
        time.sleep(0.01)  # the upstream runs a little: its dependant waits for it
        ended[run.slot] = time.time()

    def downstream(*, run: RunContext) -> None:
        woke[run.slot] = time.time()
        if len(woke) >= pairs:
            done.set()

    def beside(*, run: RunContext) -> None:
        plain.append(time.time() - run.slot)

    sched.register("up", upstream)
    sched.register("down", downstream)
    sched.register("beside", beside)
    first = time.time() + 1
    sched.schedule("down", FixedRate(0.2, start=first), "down", args=(), after="up")
    sched.schedule("up", FixedRate(0.2, start=first), "up", args=())
    sched.schedule("beside", FixedRate(0.2, start=first + 0.1), "beside", args=())
    with Runner(sched):
        done.wait(pairs * 0.2 + 30)
    store.close()
    delays = sorted(1000 * (woke[s] - ended[s]) for s in woke if s in ended)
    ordinary = sorted(1000 * d for d in plain)

    def pct(values: list[float], q: float) -> float:
        return values[min(len(values) - 1, int(q * len(values)))]

    return {
        "wake p50 ms": pct(delays, 0.5), "wake p99 ms": pct(delays, 0.99),
        "ordinary p50 ms": pct(ordinary, 0.5), "ordinary p99 ms": pct(ordinary, 0.99),
        "pairs": float(len(delays)), "median ms": statistics.median(delays),
    }  # fmt: skip


def main() -> None:
    figures: list[Figure] = []
    for name, shape in (("fan-in", fan_in), ("fan-out", fan_out), ("chains", chains)):
        for store, where in ((False, "memory"), (True, "SQLite")):
            figures += interleave(
                f"{name}, {where}",
                0,
                {
                    "none": lambda s=shape, d=store: draining(s, False, d),  # type: ignore[misc]
                    "after": lambda s=shape, d=store: draining(s, True, d),  # type: ignore[misc]
                },
            )
    waits: dict[str, dict[str, float]] = {}
    folder = tempfile.mkdtemp()
    waits["SQLite, 1 node"] = latency(SQLiteStore(Path(folder) / "w.db"))
    dsn = os.environ.get("ROTA_PG_DSN")
    if dsn:
        prefix = f"bench_deps_{uuid.uuid4().hex[:8]}_"
        waits["PostgreSQL, 1 node"] = latency(PostgresStore(dsn, prefix=prefix))
    rows = ["| store | pairs | wake-up p50 ms | p99 ms | ordinary p50 ms | p99 ms |",
            "|---|---|---|---|---|---|"]  # fmt: skip
    for where, w in waits.items():
        rows.append(
            f"| {where} | {w['pairs']:.0f} | {w['wake p50 ms']:.1f} | {w['wake p99 ms']:.1f} "
            f"| {w['ordinary p50 ms']:.1f} | {w['ordinary p99 ms']:.1f} |"
        )
    markdown = table(figures, ["none"]) + "\n\nWake-up latency:\n\n" + "\n".join(rows) + "\n"
    save("dependencies", "python bench/dependencies.py", figures, {"wake": waits}, markdown)
    print(markdown)


if __name__ == "__main__":
    main()
