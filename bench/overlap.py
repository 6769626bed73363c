"""Overlap: a task whose runs take longer than its period, under a pool of 4 workers.

One recurring task, a slot every 2.5 ms (400 slots a second), each run taking 10 ms
(a sleep: I/O-bound work, as most scheduled jobs are), driven in real time by a
``Runner`` with a ``ThreadPoolExecutor(4)`` for ``SECONDS`` seconds. Under
``Overlap.BUFFER`` (the default) one run is in flight at a time, so the task
completes at most 100 runs a second and falls behind; under ``Overlap.allow(4)``
four are, and the floor is four threads each sleeping 10 ms in a loop, measured
in the same run. Also measured: the most runs in flight at once, and
``Overlap.SKIP`` (one at a time, the slots due meanwhile skipped and counted).
Each is measured in memory, and durably: a ``DurableScheduler`` on a SQLite file
and, when ``$ROTA_PG_DSN`` names a server, on PostgreSQL (every run's
completion a commit, the task's runs in flight under one lease; PostgreSQL's
tables are left in the server, meant to be a throwaway one).

Usage: ``python bench/overlap.py`` (about 30 seconds), or
``python tests/postgres_server.py -- python bench/overlap.py`` with PostgreSQL;
writes ``bench/results/overlap.md`` and ``overlap.json``.
"""

from __future__ import annotations

import json
import os
import sys
import tempfile
import threading
import time
import uuid
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

from harness import machine

from rota import DurableScheduler, FixedRate, Overlap, Runner, Scheduler, Stats
from rota.store import PostgresStore, SQLiteStore

ROOT = Path(__file__).resolve().parents[1]
SECONDS = 2.0
PERIOD = 0.0025
WORK = 0.010
WORKERS = 4
POLICIES = [("buffer", Overlap.BUFFER), ("skip", Overlap.SKIP), ("allow(4)", Overlap.allow(4))]


def drain(overlap: Overlap, store: str) -> dict[str, float]:
    """Runs completed per second, the most in flight at once, slots skipped, with the
    task in ``store`` (``memory``, ``sqlite``, ``postgres``)."""
    lock = threading.Lock()
    in_flight, most = [0], [0]

    def work(at: float) -> None:
        with lock:
            in_flight[0] += 1
            most[0] = max(most[0], in_flight[0])
        time.sleep(WORK)
        with lock:
            in_flight[0] -= 1

    sched: Scheduler
    with tempfile.TemporaryDirectory() as tmp:
        if store == "memory":
            sched, action = Scheduler(clock=time.monotonic), work
        else:
            prefix = f"ov{uuid.uuid4().hex[:8]}_"
            where = (
                SQLiteStore(Path(tmp) / "overlap.db")
                if store == "sqlite"
                else PostgresStore(os.environ["ROTA_PG_DSN"], prefix=prefix)
            )
            durable = DurableScheduler(where)
            durable.register("work", work)
            sched, action = durable, "work"  # type: ignore[assignment]
        stats = Stats()
        try:
            with Runner(sched, executor=ThreadPoolExecutor(WORKERS), on_outcome=stats.record):
                sched.schedule("t", FixedRate(PERIOD), action, overlap=overlap)
                time.sleep(SECONDS)
                sched.cancel("t")
        finally:
            if isinstance(sched, DurableScheduler):
                sched.store.close()
    snap = stats.snapshot()
    return {"runs_per_s": snap.runs / SECONDS, "most_in_flight": most[0],
            "skipped": snap.skipped}  # fmt: skip


def floor() -> float:
    """Runs per second of WORKERS threads each doing the work in a loop."""
    stop = time.monotonic() + SECONDS
    done = [0] * WORKERS

    def loop(i: int) -> None:
        while time.monotonic() < stop:
            time.sleep(WORK)
            done[i] += 1

    threads = [threading.Thread(target=loop, args=(i,)) for i in range(WORKERS)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    return sum(done) / SECONDS


def main() -> None:
    results: dict[str, Any] = {"seconds": SECONDS, "period": PERIOD, "work": WORK,
                               "workers": WORKERS, "floor_runs_per_s": floor()}  # fmt: skip
    stores = ["memory", "sqlite"] + (["postgres"] if os.environ.get("ROTA_PG_DSN") else [])
    for store in stores:
        for name, overlap in POLICIES:
            results[f"{store} {name}"] = drain(overlap, store)
            print(store, name, results[f"{store} {name}"], file=sys.stderr)
    out = ROOT / "bench" / "results"
    (out / "overlap.json").write_text(json.dumps(results, indent=1) + "\n")
    base = results["floor_runs_per_s"]
    lines = [
        "Command: `python tests/postgres_server.py -- python bench/overlap.py`"
        if "postgres" in stores
        else "Command: `python bench/overlap.py`",
        "",
        f"Machine: {machine()}",
        "",
        f"One task, a slot every {PERIOD * 1000:g} ms, each run {WORK * 1000:g} ms (a sleep), "
        f"a Runner with ThreadPoolExecutor({WORKERS}), {SECONDS:g} s of real time. Floor: "
        f"{WORKERS} threads each running the work in a loop, {base:.0f} runs/s. In a "
        "store, every run's completion is a commit and the task's runs in flight share "
        "one lease (the node holding it claims each next run under it).",
        "",
        "| store | overlap | runs/s | x floor | most in flight | slots skipped |",
        "|---|---|---|---|---|---|",
    ]
    for store in stores:
        for name, _ in POLICIES:
            got = results[f"{store} {name}"]
            lines.append(
                f"| {store} | {name} | {got['runs_per_s']:.0f} | "
                f"{got['runs_per_s'] / base:.2f} | {got['most_in_flight']} | {got['skipped']} |"
            )
    (out / "overlap.md").write_text("\n".join(lines) + "\n")


if __name__ == "__main__":
    main()
