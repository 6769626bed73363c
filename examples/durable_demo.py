"""Durability, shown: a schedule in a SQLite file survives a SIGKILL mid-run.

``python examples/durable_demo.py`` (what ``make demo`` runs, about ten seconds):

1. declares a task that runs every half second, in a SQLite file;
2. starts a worker process, lets it run, and SIGKILLs it in the middle of a run;
3. waits (slots are missed while nothing runs), then starts a new worker;
4. stops it with SIGTERM and prints every slot: none lost, each completed
   once, the killed run taken over with the same idempotency key.
"""

from __future__ import annotations

import itertools
import os
import signal
import subprocess
import sys
import tempfile
import time
from datetime import UTC, datetime
from pathlib import Path

from rota import DurableScheduler, FixedRate, RunContext, Runner
from rota.store import SQLiteStore

PERIOD = 0.5


def work(*, run: RunContext) -> None:
    """The task: log its start, work for a while, log its end (keyed by the slot)."""
    log = Path(os.environ["DEMO_LOG"])
    with log.open("a") as f:
        f.write(f"start {run.key} pid={os.getpid()} expiries={run.expiries}\n")
    time.sleep(0.3)
    with log.open("a") as f:
        f.write(f"end {run.key}\n")


def scheduler(db: str) -> DurableScheduler:
    s = DurableScheduler(SQLiteStore(db), lease=1.0, poll=0.05)
    s.register("demo.work", work)
    return s


def worker(db: str) -> None:
    """A worker process: run due tasks until SIGTERM."""
    Runner(scheduler(db)).run_forever()


def spawn(db: str, env: dict[str, str]) -> subprocess.Popen[bytes]:
    return subprocess.Popen([sys.executable, __file__, "--worker", db], env=env)


def main() -> None:
    tmp = tempfile.mkdtemp(prefix="rota-demo-")
    db, log = f"{tmp}/jobs.db", Path(tmp) / "runs.log"
    env = {**os.environ, "DEMO_LOG": str(log)}
    s = scheduler(db)
    s.ensure("heartbeat", FixedRate(PERIOD, start=time.time() + PERIOD), "demo.work", args=[])
    print(f"1. declared 'heartbeat' (every {PERIOD} s) in {db}")

    first = spawn(db, env)
    time.sleep(2.0)
    while not log.read_text().splitlines()[-1].startswith("start"):
        time.sleep(0.02)  # wait until a run is in flight
    first.send_signal(signal.SIGKILL)
    first.wait()
    killed = log.read_text().splitlines()[-1].split()[1]
    print(f"2. worker {first.pid} SIGKILLed in the middle of the run {killed}")

    time.sleep(1.5)
    print("3. nothing ran for 1.5 s; starting a new worker")
    second = spawn(db, env)
    time.sleep(3.0)
    second.send_signal(signal.SIGTERM)
    second.wait(30)
    print(f"4. worker {second.pid} stopped by SIGTERM (exit status {second.returncode})")

    history = sorted(s.history("heartbeat", 1000), key=lambda o: o.slot)
    starts = [line.split()[1] for line in log.read_text().splitlines() if line.startswith("start")]
    print()
    print(f"{'slot (UTC)':12}  {'result':6}  {'starts':>6}  {'lag':>6}  ran by")
    for o in history:
        key = f"heartbeat@{o.slot!r}"
        shown = datetime.fromtimestamp(o.slot, UTC).strftime("%H:%M:%S.%f")[:-3]
        lag = f"{(o.started or o.slot) - o.at:.2f}s"
        print(f"{shown:12}  {o.result:6}  {starts.count(key):>6}  {lag:>6}  {o.owner}")
    slots = [o.slot for o in history]
    gaps = [b - a for a, b in itertools.pairwise(slots)]
    assert all(abs(g - PERIOD) < 1e-6 for g in gaps), "a slot was lost"
    assert len(set(slots)) == len(slots), "a slot completed twice"
    assert starts.count(killed) == 2, "the killed run was not taken over"
    print(
        f"\n{len(slots)} consecutive slots, each completed once; the run killed mid-way "
        f"({killed}) started twice, with the same key, and completed once."
    )


if __name__ == "__main__":
    if sys.argv[1:2] == ["--worker"]:
        worker(sys.argv[2])
    else:
        main()
