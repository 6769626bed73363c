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
process and three (each a ``Runner`` on the same store): a downstream job waits
for an upstream of the same slot every 0.2 s; the delay from the upstream's run
ending (before its commit) to the downstream's start, p50 and p99, beside the
ordinary delay from a slot to its run's start (the same nodes, a job without
``after``), and how many dependants started on another node than their upstream.

Usage: ``python bench/dependencies.py`` (about three minutes); writes
``bench/results/dependencies.md`` and ``dependencies.json``.
"""

from __future__ import annotations

import os
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

from harness import Figure, Run, interleave, save, table, timed

from rota import FixedRate, ManualClock, Scheduler, Upstream
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


def elsewhere() -> None:
    """The wake-up jobs' actions as this process knows them: it only schedules them,
    the node processes run them."""


NODE = """
import os, sys, time
from rota import RunContext, Runner
from rota.durable import DurableScheduler
from rota.store import PostgresStore, SQLiteStore
kind, where, out = sys.argv[1:4]
store = SQLiteStore(where) if kind == "sqlite" else PostgresStore(os.environ["ROTA_PG_DSN"],
                                                                    prefix=where)
sched = DurableScheduler(store, poll=0.5)
fd = os.open(out, os.O_WRONLY | os.O_APPEND | os.O_CREAT)
def note(what, slot):  # one write of a short line: whole, whatever the other nodes write
    os.write(fd, f"{what} {slot!r} {time.time()!r} {os.getpid()}\\n".encode())
def up(*, run: RunContext) -> None:
    time.sleep(0.01)  # the upstream runs a little: its dependant waits for it
    note("ended", run.slot)
actions = {"up": up, "down": lambda *, run: note("woke", run.slot),
           "beside": lambda *, run: note("beside", run.slot)}
for name in sys.argv[4].split(","):  # the jobs this node runs (it claims no other)
    sched.register(name, actions[name])
with Runner(sched):
    print("ready", flush=True)
    sys.stdin.readline()  # stop
"""
"""A node of the wake-up measurement: ``python -c NODE sqlite|pg FILE|PREFIX OUT JOBS``
(``JOBS``: ``up,down,beside`` or some of them, the actions it knows), running until
its stdin gives a line; each run appends ``what slot time pid`` to OUT."""


def latency(kind: str, where: str, nodes: list[str], pairs: int = 150) -> dict[str, float]:
    """On one store (``kind`` ``"sqlite"``: ``where`` a file; ``"pg"``: a table prefix)
    shared by node processes (each a ``Runner``; ``nodes``: the jobs each runs, as
    :data:`NODE` takes them): the delay from an
    upstream's run ending (before its commit) to its waiting dependant's start, and
    from a plain job's slot to its run's start (p50 and p99, milliseconds); and the
    share of dependants that started on another node than their upstream."""
    out = Path(tempfile.mkdtemp()) / "runs"
    env = {**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[1] / "src")}
    procs = [
        subprocess.Popen([sys.executable, "-c", NODE, kind, where, str(out), jobs], env=env,
                         stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
        for jobs in nodes
    ]  # fmt: skip
    store: Store = SQLiteStore(where) if kind == "sqlite" else PostgresStore(PG, prefix=where)
    sched = DurableScheduler(store)
    for name in ("up", "down", "beside"):
        sched.register(name, elsewhere)
    try:
        for proc in procs:
            assert proc.stdout is not None
            assert proc.stdout.readline().strip() == "ready"
        first = time.time() + 1
        sched.schedule("down", FixedRate(0.2, start=first), "down", args=(), after="up")
        sched.schedule("up", FixedRate(0.2, start=first), "up", args=())
        sched.schedule("beside", FixedRate(0.2, start=first + 0.1), "beside", args=())
        deadline = time.monotonic() + pairs * 0.2 + 30
        runs: dict[str, dict[float, tuple[float, str]]] = {"ended": {}, "woke": {}, "beside": {}}
        while len(runs["woke"]) < pairs and time.monotonic() < deadline:
            time.sleep(0.2)
            runs = {"ended": {}, "woke": {}, "beside": {}}
            for line in out.read_text().splitlines() if out.exists() else []:
                what, slot, at, pid = line.split()
                runs[what][float(slot)] = (float(at), pid)
        for job in ("down", "up", "beside"):
            sched.cancel(job)
    finally:
        for proc in procs:
            proc.communicate("\n", timeout=60)
        store.close()
    ended, woke = runs["ended"], runs["woke"]
    delays = sorted(1000 * (woke[s][0] - ended[s][0]) for s in woke if s in ended)
    ordinary = sorted(1000 * (at - slot) for slot, (at, _) in runs["beside"].items())
    across = sum(woke[s][1] != ended[s][1] for s in woke if s in ended)

    def pct(values: list[float], q: float) -> float:
        return values[min(len(values) - 1, int(q * len(values)))]

    return {
        "wake p50 ms": pct(delays, 0.5), "wake p99 ms": pct(delays, 0.99),
        "ordinary p50 ms": pct(ordinary, 0.5), "ordinary p99 ms": pct(ordinary, 0.99),
        "pairs": float(len(delays)), "median ms": statistics.median(delays),
        "across": across / len(delays),
    }  # fmt: skip


PG = os.environ.get("ROTA_PG_DSN", "")
"""The PostgreSQL server of the wake-up measurement (``make bench`` starts one)."""


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
    every = "up,down,beside"
    for name, nodes in (
        ("1 node", [every]),
        ("3 nodes", [every] * 3),
        ("3 nodes, down on the other two", ["up", "down,beside", "down,beside"]),
    ):
        file = str(Path(tempfile.mkdtemp()) / "w.db")
        waits[f"SQLite, {name}"] = latency("sqlite", file, nodes)
        if PG:
            prefix = f"bench_deps_{uuid.uuid4().hex[:8]}_"
            waits[f"PostgreSQL, {name}"] = latency("pg", prefix, nodes)  # fmt: skip
    rows = ["| store | pairs | wake-up p50 ms | p99 ms | ordinary p50 ms | p99 ms "
            "| woken on another node |", "|---|---|---|---|---|---|---|"]  # fmt: skip
    for where, w in waits.items():
        rows.append(
            f"| {where} | {w['pairs']:.0f} | {w['wake p50 ms']:.1f} | {w['wake p99 ms']:.1f} "
            f"| {w['ordinary p50 ms']:.1f} | {w['ordinary p99 ms']:.1f} "
            f"| {100 * w['across']:.0f} % |"
        )
    markdown = table(figures, ["none"]) + "\n\nWake-up latency:\n\n" + "\n".join(rows) + "\n"
    save("dependencies", "python bench/dependencies.py", figures, {"wake": waits}, markdown)
    print(markdown)


if __name__ == "__main__":
    main()
