"""Hand-off: publishes per second to Redis for each queue, beside its own client.

For each target (Celery, RQ, Dramatiq, arq), on a throwaway Redis:

* **floor**: the queue's own client publishing ``N`` messages in a plain loop
  (what rota's publish calls, with a fresh key each: ``rota.handoff``'s
  per-target function, no scheduler);
* **one node**: ``N`` slots due at once (10 tasks of ``N / 10`` past slots each)
  on a SQLite store, drained by one ``Runner``: publishes per second, and the
  hand-off lag (slot's run start minus the time the drain began: how long the last
  slot waited), p50 and p99, from the outcomes;
* **three nodes** (with ``$ROTA_PG_DSN``: run it under
  ``tests/postgres_server.py``): the same slots on PostgreSQL, drained by three
  node processes (the fault tests' worker: claim batch 1, no pool);
* **three nodes, spread**: the ``N`` slots as the backlogs of ``N / 10`` tasks
  instead of 10, drained by three nodes that claim 32 runs at a time and publish
  on a pool of 4 threads each (what a deployment that hands off many jobs runs).

* **live**: a real-time schedule on one node (100 slots a second for 10 s): the
  hand-off lag from each slot to its message accepted by the broker;
* **Celery beat** (the peer rota replaces), driven in-process: its own
  ``celery.beat.Scheduler`` with ``N`` entries, each due now (beat runs a
  missed entry once, not each slot it missed, so ``N`` due slots are ``N``
  entries), ticked in a loop as ``celery beat`` does, without its sleeps:
  publishes per second and the same lag, from its ``apply_entry``.

Usage: ``python tests/postgres_server.py -- python bench/handoff.py`` (a minute or
two); writes ``bench/results/handoff.md`` and ``handoff.json``.
"""

from __future__ import annotations

import json
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path
from typing import Any

from harness import machine

from rota import FixedRate, RunContext, Runner, handoff
from rota.durable import DurableScheduler
from rota.store import SQLiteStore

ROOT = Path(__file__).resolve().parents[1]
N = int(os.environ.get("HANDOFF_N", "2000"))  # a smaller N for a quick look
NAMES = {"celery": "bench.report", "rq": "bench.report", "dramatiq": "bench_report",
         "arq": "bench_report"}  # fmt: skip


def redis() -> tuple[subprocess.Popen[bytes], str, Path]:
    """A redis-server on a free port, its directory; the URL."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    where = Path(tempfile.mkdtemp(prefix="bench-redis-"))
    binary = shutil.which("redis-server")
    assert binary, "needs Debian's redis-server"
    proc = subprocess.Popen(
        [binary, "--bind", "127.0.0.1", "--port", str(port), "--dir", str(where), "--save", "",
         "--appendonly", "no"], stdout=subprocess.DEVNULL,
    )  # fmt: skip
    for _ in range(100):
        try:
            socket.create_connection(("127.0.0.1", port), timeout=1).close()
            break
        except OSError:
            time.sleep(0.05)
    return proc, f"redis://127.0.0.1:{port}/0", where


def floor(target: str) -> float:
    """Messages per second of the target's own publish in a loop, fresh keys."""
    call = handoff.message(target, NAMES[target], broker="bench")
    handoff.publish(**call, run=RunContext("warm", 0.0, 0.0, 0))
    began = time.perf_counter()
    for k in range(N):
        handoff.publish(**call, run=RunContext(f"floor-{uuid.uuid4().hex}", k, k, 0))
    return N / (time.perf_counter() - began)


def celery_beat(url: str) -> dict[str, Any]:
    """Celery beat's own scheduler publishing ``N`` due entries, ticked in a loop."""
    from datetime import timedelta

    from celery import Celery  # type: ignore[import-untyped]
    from celery.beat import ScheduleEntry, Scheduler  # type: ignore[import-untyped]

    app = Celery("bench", broker=url)
    app.conf.beat_schedule = {
        f"beat{i}": {"task": NAMES["celery"], "schedule": timedelta(hours=1)} for i in range(N)
    }
    beat = Scheduler(app=app, lazy=True)
    beat.setup_schedule()
    past = app.now() - timedelta(hours=2)
    for entry in beat.schedule.values():
        entry.last_run_at = past  # due now
    published: list[float] = []
    apply = beat.apply_entry

    def counted(entry: ScheduleEntry, producer: Any = None) -> None:
        apply(entry, producer=producer)
        published.append(time.time())

    beat.apply_entry = counted
    began = time.time()
    while len(published) < N:
        beat.tick()
    took = time.time() - began
    waits = sorted(t - began for t in published)
    return {"published": N, "per_s": N / took, "lag_p50": waits[N // 2],
            "lag_p99": waits[int(N * 0.99) - 1]}  # fmt: skip


def drain(sched: DurableScheduler, target: str, start: float, tasks: int = 10) -> list[str]:
    """Schedule N past slots (the backlogs of ``tasks`` tasks), all due now; their ids."""
    per = N // tasks
    ids = [f"{target}{i}" for i in range(tasks)]
    for task_id in ids:
        sched.schedule(task_id, FixedRate(1, start=start), handoff.publish,
                       kwargs=handoff.message(target, NAMES[target], broker="bench"),
                       end=start + per - 1)  # fmt: skip
    return ids


def figures(sched: DurableScheduler, ids: list[str], began: float, took: float) -> dict[str, Any]:
    outcomes = [o for task_id in ids for o in sched.history(task_id, N)]
    ok = [o for o in outcomes if o.result == "ok"]
    waits = sorted(float(o.started or 0) - began for o in ok)
    p50, p99 = waits[len(waits) // 2], waits[int(len(waits) * 0.99) - 1]
    return {"published": len(ok), "per_s": len(ok) / took, "lag_p50": p50, "lag_p99": p99}


def one_node(target: str, where: Path) -> dict[str, Any]:
    sched = DurableScheduler(SQLiteStore(where / f"{target}.db"))
    start = float(int(time.time()) - N)
    ids = drain(sched, target, start)
    began = time.time()
    with Runner(sched):
        while not all(sched.status(i) == "done" for i in ids):
            time.sleep(0.01)
    took = time.time() - began
    result = figures(sched, ids, began, took)
    sched.store.close()
    return result


LIVE_TASKS, LIVE_PERIOD, LIVE_SECONDS = 50, 0.5, 10.0
"""The live schedule: 50 tasks, a slot each every 0.5 s (100 slots a second), 10 s."""


def live(target: str, where: Path) -> dict[str, Any]:
    """Hand-off lag on a live schedule, one node (SQLite): from each slot to its message
    accepted by the broker (the run's end: the publish returned), p50 and p99."""
    sched = DurableScheduler(SQLiteStore(where / f"{target}-live.db"))
    start = time.time() + 1
    ids = [f"{target}-live{i}" for i in range(LIVE_TASKS)]
    for i, task_id in enumerate(ids):
        first = start + i * LIVE_PERIOD / LIVE_TASKS  # spread over the period, as cron is not
        sched.schedule(task_id, FixedRate(LIVE_PERIOD, start=first), handoff.publish,
                       kwargs=handoff.message(target, NAMES[target], broker="bench"),
                       end=first + LIVE_SECONDS - LIVE_PERIOD / 2)  # fmt: skip
    with Runner(sched):
        while not all(sched.status(i) == "done" for i in ids):
            time.sleep(0.05)
    ok = [o for i in ids for o in sched.history(i, 1000) if o.result == "ok"]
    lags = sorted(float(o.finished) - float(o.slot) for o in ok)
    sched.store.close()
    return {"published": len(ok), "lag_p50": lags[len(lags) // 2],
            "lag_p99": lags[int(len(lags) * 0.99) - 1]}  # fmt: skip


def three_nodes(target: str, url: str, *, spread: bool = False) -> dict[str, Any] | None:
    dsn = os.environ.get("ROTA_PG_DSN")
    if not dsn:
        return None
    from rota.store import PostgresStore

    prefix = f"b{uuid.uuid4().hex[:8]}_"
    sched = DurableScheduler(PostgresStore(dsn, prefix=prefix))
    env = {**os.environ, "PYTHONPATH": str(ROOT), "ROTA_BROKER_BENCH": url, "LEASE": "5",
           **({"BATCH": "32", "WORKERS": "4"} if spread else {})}  # fmt: skip
    ready = [Path(tempfile.mkdtemp()) / "ready" for _ in range(3)]
    nodes = [
        subprocess.Popen(
            [sys.executable, "-m", "tests.durable.worker", f"pg:{prefix}"],
            cwd=ROOT,
            env={**env, "READY_FILE": str(mark)},
            stderr=subprocess.DEVNULL,
        )
        for mark in ready
    ]
    try:
        while not all(mark.exists() for mark in ready):  # timed from the slots, not start-up
            time.sleep(0.05)
        began = time.time()
        ids = drain(sched, target, float(int(began) - N), N // 10 if spread else 10)
        while not all(sched.status(i) == "done" for i in ids):
            time.sleep(0.01)
        took = time.time() - began
    finally:
        for node in nodes:
            node.terminate()
            node.wait(30)
    result = figures(sched, ids, began, took)
    sched.store.close()
    return result


def main() -> None:
    proc, url, where = redis()
    handoff.register_broker("bench", url)
    results: dict[str, Any] = {"n": N}
    try:
        for target in handoff.TARGETS:
            got = {"floor_per_s": floor(target), "one_node": one_node(target, where),
                   "three_nodes": three_nodes(target, url),
                   "three_spread": three_nodes(target, url, spread=True),
                   "live": live(target, where)}  # fmt: skip
            results[target] = got
            print(target, got, file=sys.stderr)
        results["celery_beat"] = celery_beat(url)
        print("celery beat", results["celery_beat"], file=sys.stderr)
    finally:
        proc.terminate()
        proc.wait(30)
        shutil.rmtree(where, ignore_errors=True)
    (ROOT / "bench" / "results" / "handoff.json").write_text(json.dumps(results, indent=1) + "\n")
    write(results)


def write(results: dict[str, Any]) -> None:
    """``bench/results/handoff.md``'s table, from the figures (``handoff.json``'s)."""
    out = ROOT / "bench" / "results"
    lines = [
        "Command: `python tests/postgres_server.py -- python bench/handoff.py`",
        "",
        f"Machine: {machine()}",
        "",
        f"{results['n']} slots due at once (10 tasks), each published to a local Redis. "
        "Floor: the queue's own client publishing in a loop. Lag: from the start of the "
        "drain to each slot's publish (the last slot's is the whole drain).",
        "",
        "| target | floor msg/s | 1 node (SQLite) msg/s | x floor | lag p50 / p99 s | "
        "3 nodes (PostgreSQL) msg/s | x floor | lag p50 / p99 s | "
        f"3 nodes, {results['n'] // 10} tasks, batch 32, pool 4: msg/s | x floor | "
        "lag p50 / p99 s |",
        "|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for target in handoff.TARGETS:
        got = results[target]
        one, three, base = got["one_node"], got["three_nodes"], got["floor_per_s"]
        row = (
            f"| {target} | {base:.0f} | {one['per_s']:.0f} | {one['per_s'] / base:.2f} | "
            f"{one['lag_p50']:.2f} / {one['lag_p99']:.2f} |"
        )
        for nodes in (three, got["three_spread"]):
            row += (
                " n/a | | |"
                if nodes is None
                else f" {nodes['per_s']:.0f} | {nodes['per_s'] / base:.2f} | "
                f"{nodes['lag_p50']:.2f} / {nodes['lag_p99']:.2f} |"
            )
        lines.append(row)
    beat, base = results["celery_beat"], results["celery"]["floor_per_s"]
    lines.append(
        f"| Celery beat ({results['n']} entries due) | {base:.0f} | {beat['per_s']:.0f} | "
        f"{beat['per_s'] / base:.2f} | {beat['lag_p50']:.2f} / {beat['lag_p99']:.2f} | "
        "one beat only | | | | | |"
    )
    lines += [
        "",
        f"A live schedule, one node (SQLite): {LIVE_TASKS} tasks, a slot each every "
        f"{LIVE_PERIOD:g} s ({LIVE_TASKS / LIVE_PERIOD:.0f} slots a second) for "
        f"{LIVE_SECONDS:g} s. Lag: from each slot to its message accepted by the broker.",
        "",
        "| target | published | lag p50 ms | lag p99 ms |",
        "|---|---|---|---|",
    ]
    for target in handoff.TARGETS:
        got = results[target].get("live")
        if got is not None:
            lines.append(f"| {target} | {got['published']} | {got['lag_p50'] * 1000:.1f} | "
                         f"{got['lag_p99'] * 1000:.1f} |")  # fmt: skip
    (out / "handoff.md").write_text("\n".join(lines) + "\n")


if __name__ == "__main__":
    main()
