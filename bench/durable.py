"""Durable throughput, failover and start-up: rota on SQLite beside the raw-SQL floor.

Run: ``python bench/durable.py`` (writes ``bench/results/durable.md`` and ``.json``).

* **Throughput**: drain N due runs (fixed-rate tasks due now, with a period so
  long that each runs once), each run's completion durable before the next
  claim's effect is visible. Measured for rota (a ``Runner`` on a
  ``DurableScheduler`` with its defaults: claims of up to 128 runs (a runner
  without a pool claims what it starts within a poll, so here the full 128
  after a first claim of one), one commit per claim, then one per
  completion, or group commit, the default: a batch's completions committed
  with the next claim, or, with a pool of 16 workers, on the scheduler's
  committer thread, those that queue during a commit sharing the next), for
  the raw-SQL floor of the same claim/complete cycle
  (``../shared/bench/durable-floor/``'s shape: no scheduling logic at all),
  for rota's store alone (its transactions, the completions decided up
  front, nothing run: the store's share of a run), and for APScheduler 3
  with ``SQLAlchemyJobStore`` on SQLite (the peer users run today), all on
  one SQLite file in WAL mode, ``synchronous=FULL`` and
  ``NORMAL``; on PostgreSQL beside its floor, APScheduler 4 (pre-release,
  ``SQLAlchemyDataStore``, in a virtualenv of its own) and procrastinate
  (``bench/peer_drains/``), one process and four. Each of rota's drains
  ends by checking its outcomes: every task completed once, none lost, none
  completed twice.
* **Failover**: two worker processes, a lease of 1 s; the one running a task
  is SIGKILLed mid-run; time until the other starts that run.
* **Start-up**: 10^6 stored tasks; time from opening the store to the first
  claim.
"""

from __future__ import annotations

import concurrent.futures
import contextlib
import inspect
import json
import os
import platform
import re
import shutil
import signal
import sqlite3
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from rota import DurableScheduler, FixedRate, Runner  # noqa: E402
from rota.store import Change, Edit, Known, OutcomeRow, SQLiteStore, TaskRow  # noqa: E402

N = int(os.environ.get("N", "5000"))
ROUNDS = int(os.environ.get("ROUNDS", "3"))
NOOP = "tests.durable.jobs:noop"  # the benchmark's action: nothing, so the store is measured
IMPORTS = ("tests.durable.jobs:",)  # what the draining schedulers may import (imports=)
BATCH: int = inspect.signature(DurableScheduler).parameters["batch"].default
"""What a runner without a pool claims at once when runs are this fast (its default batch)."""
FAR = 10**10  # a period after which nothing runs again within the benchmark (year 2286)


def _fresh(directory: str, name: str) -> str:
    path = os.path.join(directory, name)
    for suffix in ("", "-wal", "-shm"):
        if os.path.exists(path + suffix):
            os.remove(path + suffix)
    return path


def rota_drain(directory: str, sync: str, workers: int = 0, group: bool = True) -> float:
    """Runs/s of a Runner draining N due tasks from a SQLite store.

    ``group``: the completions of each claimed batch are committed together
    (else one commit per completion). With ``workers``, the runner hands
    runs to a thread pool of that size (completions arriving together from
    several threads share commits).
    """
    path = _fresh(directory, f"rota-{sync}.db")
    seed(SQLiteStore(path, synchronous="NORMAL"))
    store = SQLiteStore(path, synchronous=sync)  # type: ignore[arg-type]
    rate = drain(DurableScheduler(store, group_commit=group, imports=IMPORTS), workers)
    store.close()
    with contextlib.closing(sqlite3.connect(path)) as db:
        _each_once(db.execute("SELECT count(*), count(DISTINCT task_id) FROM rota_outcomes"))
    return rate


def replay_drain(directory: str, sync: str, group: bool = True) -> float:
    """Runs/s of a replay of rota's own SQL: the statements a Runner with group commit
    (else, ``group`` false, a commit per run) sent while draining N runs (traced on every
    connection, in the order they ran, parameters inlined, transactions included),
    executed again on a copy of the seeded file, one after the other on one connection,
    with no Python between them. What the schema's SQL costs by itself; the ``rota``
    row of the same commit mode beside it is what the scheduler adds."""
    path = _fresh(directory, f"replay-{sync}.db")
    seed(SQLiteStore(path, synchronous="NORMAL"))
    copy = _fresh(directory, f"replay-{sync}-copy.db")
    shutil.copyfile(path, copy)
    traced: list[str] = []
    order = threading.Lock()

    def note(statement: str) -> None:
        with order:
            traced.append(statement)

    connect = sqlite3.connect

    def tracing(*args: Any, **kwargs: Any) -> sqlite3.Connection:
        db: sqlite3.Connection = connect(*args, **kwargs)
        db.set_trace_callback(note)
        return db

    sqlite3.connect = tracing  # type: ignore[assignment]
    try:
        store = SQLiteStore(path, synchronous=sync)  # type: ignore[arg-type]
        drain(DurableScheduler(store, group_commit=group, imports=IMPORTS))
        store.close()
    finally:
        sqlite3.connect = connect
    # SQLite inlines an infinite float as Inf, which it cannot read back: 9e999 is one
    statements = [
        re.sub(r"\bInf\b", "9e999", text) for text in traced if not text.startswith("PRAGMA")
    ]
    db = sqlite3.connect(copy, isolation_level=None)
    db.execute("PRAGMA journal_mode=WAL")
    db.execute(f"PRAGMA synchronous={sync}")
    start = time.perf_counter()
    for text in statements:
        db.execute(text).fetchall()
    elapsed = time.perf_counter() - start
    _each_once(db.execute("SELECT count(*), count(DISTINCT task_id) FROM rota_outcomes"))
    db.close()
    return N / elapsed


def store_drain(directory: str, sync: str, group: bool = True) -> float:
    """Runs/s of the store alone: the transactions of a runner without a pool, the
    completions decided once up front and nothing run. ``group``: claim BATCH and commit
    the previous batch's completions in one ``complete_and_claim``; else a claim per
    BATCH and a ``modify_many`` (one commit) per completion. What the scheduler and runner
    add per run is the rest."""
    path = _fresh(directory, f"store-{sync}.db")
    seed(SQLiteStore(path, synchronous="NORMAL"))
    store = SQLiteStore(path, synchronous=sync)  # type: ignore[arg-type]
    known = Known({NOOP}, ())
    done, edits = 0, list[Edit]()
    start = time.perf_counter()
    while True:
        if group:
            results, rows = store.complete_and_claim(edits, "bench", 1.0, BATCH, 30.0, known)
        else:
            results = [store.modify_many([edit])[0] for edit in edits]
            rows = store.claim("bench", 1.0, BATCH, 30.0, known)
        done += sum(result is not None for result in results)
        if not rows:
            break
        edits = [_completed(row) for row in rows]
    elapsed = time.perf_counter() - start
    store.close()
    assert done == N, done
    return N / elapsed


def _completed(row: TaskRow) -> Edit:
    """The completion of a claimed run, decided in advance: its next slot is FAR away."""
    new = replace(row, status="scheduled", due=FAR, owner=None, lease_until=None)
    outcome = OutcomeRow(row.task_id, row.due, 0, row.fence, row.due, "ok", None, 1.0, 1.0)
    decided = Change(None, row=new, outcome=outcome, requeued=True)
    return Edit(row.task_id, lambda _: decided, row.fence, (row.version, decided))


def _each_once(counted: Any, n: int = N) -> None:
    """Check a drain's outcomes, counted as ``(outcomes, distinct tasks)``: each of the
    ``n`` tasks completed once (no run lost, no completion twice)."""
    assert tuple(counted.fetchone()) == (n, n), f"expected {n} tasks each completed once"


def seed(store: Any, n: int = N) -> None:
    """``n`` tasks due now, each to run once (their next slot is centuries away)."""
    setup = DurableScheduler(store, clock=lambda: 0.0)
    for i in range(n):
        setup.schedule(f"t{i:07}", FixedRate(FAR, start=0), NOOP)
    store.close()


def drain(sched: DurableScheduler, workers: int = 0) -> float:
    """Runs/s of a Runner (a pool of ``workers`` threads, if any) running N due runs."""
    done = threading.Event()
    count = [0]

    def counted(outcome: object) -> None:
        count[0] += 1
        if count[0] == N:
            done.set()

    pool = concurrent.futures.ThreadPoolExecutor(workers) if workers else None
    start = time.perf_counter()
    with Runner(sched, on_outcome=counted, executor=pool):
        done.wait(600)
    elapsed = time.perf_counter() - start
    if pool is not None:
        pool.shutdown()
    assert count[0] == N, count
    return N / elapsed


def floor_drain(directory: str, sync: str, per_row: bool) -> float:
    """Runs/s of the raw-SQL claim/complete cycle (claim 32; commit per run or per batch)."""
    path = _fresh(directory, f"floor-{sync}.db")
    c = sqlite3.connect(path, isolation_level=None)
    c.execute("PRAGMA journal_mode=WAL")
    c.execute(f"PRAGMA synchronous={sync}")
    c.execute(
        "CREATE TABLE runs (id INTEGER PRIMARY KEY, due INTEGER NOT NULL, prio INTEGER NOT NULL "
        "DEFAULT 0, seq INTEGER NOT NULL, state INTEGER NOT NULL DEFAULT 0, owner TEXT, "
        "lease_until INTEGER, fence INTEGER NOT NULL DEFAULT 0, "
        "attempt INTEGER NOT NULL DEFAULT 0)"
    )
    c.execute("CREATE INDEX runs_due ON runs(state, due, prio, seq)")
    c.execute("BEGIN")
    c.executemany("INSERT INTO runs(id, due, seq) VALUES (?, 0, ?)", ((i, i) for i in range(N)))
    c.execute("COMMIT")
    done = 0
    start = time.perf_counter()
    while True:
        c.execute("BEGIN IMMEDIATE")
        rows = c.execute(
            "UPDATE runs SET state=1, owner=?, lease_until=?, fence=fence+1 WHERE id IN ("
            " SELECT id FROM runs WHERE state=0 AND due<=? ORDER BY due, prio, seq LIMIT 32)"
            " RETURNING id, due, fence",
            ("w", 31, 1),
        ).fetchall()
        c.execute("COMMIT")
        if not rows:
            break
        if not per_row:
            c.execute("BEGIN IMMEDIATE")
        for rid, due, fence in rows:
            if per_row:
                c.execute("BEGIN IMMEDIATE")
            done += c.execute(
                "UPDATE runs SET state=0, due=?, owner=NULL, lease_until=NULL, attempt=0"
                " WHERE id=? AND fence=? AND state=1",
                (due + FAR, rid, fence),
            ).rowcount
            if per_row:
                c.execute("COMMIT")
        if not per_row:
            c.execute("COMMIT")
    elapsed = time.perf_counter() - start
    c.close()
    assert done == N
    return N / elapsed


PG = os.environ.get("ROTA_PG_DSN")
"""A PostgreSQL server to measure on too (``make bench`` runs this under
``tests/postgres_server.py``, which starts one)."""


def pg_floor_drain(per_row: bool) -> float:
    """Runs/s of the raw-SQL cycle on PostgreSQL (SKIP LOCKED claim of 32)."""
    import psycopg

    assert PG is not None
    with psycopg.connect(PG, autocommit=True) as c:
        c.execute("DROP TABLE IF EXISTS floor_runs")
        c.execute(
            "CREATE TABLE floor_runs (id bigint PRIMARY KEY, due bigint NOT NULL, prio int NOT "
            "NULL DEFAULT 0, seq bigint NOT NULL, state smallint NOT NULL DEFAULT 0, owner text, "
            "lease_until bigint, fence bigint NOT NULL DEFAULT 0)"
        )
        c.execute("CREATE INDEX floor_due ON floor_runs (due, prio, seq) WHERE state = 0")
        with c.cursor() as cur, cur.copy("COPY floor_runs (id, due, seq) FROM STDIN") as cp:
            for i in range(N):
                cp.write_row((i, 0, i))
        c.execute("VACUUM ANALYZE floor_runs")
        claim = (
            "WITH cand AS MATERIALIZED (SELECT id FROM floor_runs WHERE state = 0 AND "
            "due <= 1 ORDER BY due, prio, seq LIMIT 32 FOR UPDATE SKIP LOCKED) "
            "UPDATE floor_runs r SET state = 1, owner = 'w', lease_until = 31, "
            "fence = r.fence + 1 FROM cand WHERE r.id = cand.id RETURNING r.id, r.due, r.fence"
        )
        complete = (
            "UPDATE floor_runs SET state = 0, due = %s, owner = NULL, lease_until = NULL "
            "WHERE id = %s AND fence = %s AND state = 1"
        )
        done = 0
        start = time.perf_counter()
        # As ../shared/bench/durable-floor/bench_store.py: each statement its own
        # (autocommit) transaction, one round trip; a batch's completions in one.
        while rows := c.execute(claim).fetchall():
            with contextlib.nullcontext() if per_row else c.transaction():
                for rid, due, fence in rows:
                    done += c.execute(complete, (due + FAR, rid, fence)).rowcount
        elapsed = time.perf_counter() - start
        c.execute("DROP TABLE floor_runs")
    assert done == N
    return N / elapsed


def rota_pg_drain(group: bool, workers: int = 0) -> float:
    """Runs/s of a Runner (with a pool of ``workers`` threads, if any) draining N due
    tasks from a PostgresStore."""
    import uuid

    from rota.store import PostgresStore

    assert PG is not None
    prefix = f"bench{uuid.uuid4().hex[:8]}_"
    seed(PostgresStore(PG, prefix=prefix))
    store = PostgresStore(PG, prefix=prefix)
    rate = drain(DurableScheduler(store, group_commit=group, imports=IMPORTS), workers)
    store.close()
    import psycopg

    with psycopg.connect(PG, autocommit=True) as c:
        _each_once(c.execute(f"SELECT count(*), count(DISTINCT task_id) FROM {prefix}outcomes"))
        for table in ("tasks", "outcomes", "meta"):
            c.execute(f"DROP TABLE {prefix}{table}")
        c.execute(f"DROP SEQUENCE {prefix}seq")
    return rate


_WORKER = """
import sys, threading
from rota import DurableScheduler, Runner
from rota.store import PostgresStore
sched = DurableScheduler(PostgresStore(sys.argv[1], prefix=sys.argv[2]), imports=True)
print("ready", flush=True)
sys.stdin.readline()  # go
runner = Runner(sched)
runner.start()
sys.stdin.readline()  # stop
runner.stop()
"""


def rota_pg_processes(processes: int = 4) -> float:
    """Runs/s of ``processes`` runner processes sharing one PostgreSQL schedule, draining
    N runs each (as many as one process drains in the other rows: the start-up of the
    runners, about 0.1 s for four, weighs as much as it does there)."""
    import uuid

    import psycopg

    from rota.store import PostgresStore

    assert PG is not None
    prefix = f"bench{uuid.uuid4().hex[:8]}_"
    total = processes * N
    seed(PostgresStore(PG, prefix=prefix), total)
    env = {**os.environ, "PYTHONPATH": f"{ROOT}:{ROOT / 'src'}"}
    procs = [
        subprocess.Popen([sys.executable, "-c", _WORKER, PG, prefix], stdin=subprocess.PIPE,
                         stdout=subprocess.PIPE, text=True, env=env, cwd=ROOT)
        for _ in range(processes)
    ]  # fmt: skip
    for proc in procs:
        assert proc.stdout is not None
        assert proc.stdout.readline().strip() == "ready"
    with psycopg.connect(PG, autocommit=True) as c:
        start = time.perf_counter()
        for proc in procs:
            assert proc.stdin is not None
            proc.stdin.write("\n")
            proc.stdin.flush()
        count = 0
        while count < total:
            time.sleep(0.01)
            found = c.execute(f"SELECT count(*) FROM {prefix}outcomes").fetchone()
            count = 0 if found is None else found[0]
        elapsed = time.perf_counter() - start
        for proc in procs:
            proc.communicate("\n", timeout=60)
        _each_once(
            c.execute(f"SELECT count(*), count(DISTINCT task_id) FROM {prefix}outcomes"), total
        )
        for table in ("tasks", "outcomes", "meta"):
            c.execute(f"DROP TABLE {prefix}{table}")
        c.execute(f"DROP SEQUENCE {prefix}seq")
    return total / elapsed


PEER_N = min(N, int(os.environ.get("PEER_N", "1000")))
"""Runs drained by each PostgreSQL peer (they are slow: a smaller N keeps the run short)."""

APS4_PYTHON = os.environ.get("APS4_PYTHON", str(ROOT / ".venv-aps4" / "bin" / "python"))
"""A Python with APScheduler 4 installed (``make bench`` makes that virtualenv: it cannot
share one with APScheduler 3)."""


def peer_drain(script: str, python: str, processes: int) -> float | None:
    """Runs/s of a PostgreSQL peer (``bench/peer_drains/SCRIPT.py``) draining PEER_N runs
    with ``processes`` worker processes; ``None`` if ``python`` is missing."""
    if not os.path.exists(python):
        print(f"{script}: {python} not found, not measured", file=sys.stderr)
        return None
    assert PG is not None
    done = subprocess.run(
        [python, str(ROOT / "bench" / "peer_drains" / f"{script}.py"), PG, str(PEER_N),
         str(processes)],
        capture_output=True, text=True, check=True, timeout=1800,
    )  # fmt: skip
    return float(done.stdout.split()[-1])


def _peer(script: str, python: str, processes: int) -> Callable[[str], float | None]:
    return lambda _: peer_drain(script, python, processes)


def apscheduler_drain(directory: str, sync: str) -> float | None:
    """Runs/s of APScheduler 3 (BackgroundScheduler, SQLAlchemyJobStore on SQLite)."""
    try:
        from apscheduler.events import EVENT_JOB_EXECUTED
        from apscheduler.jobstores.sqlalchemy import SQLAlchemyJobStore
        from apscheduler.schedulers.background import BackgroundScheduler
        from sqlalchemy import event
    except ImportError:
        return None
    from datetime import UTC, datetime, timedelta

    path = _fresh(directory, f"aps-{sync}.db")
    store = SQLAlchemyJobStore(url=f"sqlite:///{path}")

    def _pragmas(conn: Any, record: Any) -> None:
        conn.execute("PRAGMA journal_mode=WAL")
        conn.execute(f"PRAGMA synchronous={sync}")

    event.listen(store.engine, "connect", _pragmas)

    done = threading.Event()
    count = [0]
    lock = threading.Lock()

    def executed(event: Any) -> None:
        with lock:
            count[0] += 1
            if count[0] == N:
                done.set()

    sched = BackgroundScheduler(jobstores={"default": store}, timezone=UTC)
    sched.add_listener(executed, EVENT_JOB_EXECUTED)
    sched.start(paused=True)
    past = datetime.now(UTC) - timedelta(seconds=1)
    for i in range(N):
        sched.add_job(_noop, "date", run_date=past, id=f"t{i}", misfire_grace_time=None)
    start = time.perf_counter()
    sched.resume()
    done.wait(600)
    elapsed = time.perf_counter() - start
    assert count[0] == N, count
    sched.shutdown(wait=True)
    return N / elapsed


def _noop() -> None:
    """APScheduler's job: nothing."""


def failover(
    directory: str, target: str, store: Any, lease: float, env: dict[str, str] | None = None,
    kills: int = 12,
) -> list[float]:  # fmt: skip
    """Seconds from SIGKILL of the worker running a task to its start on the other worker.

    Two ``tests/durable/worker.py`` processes on ``target`` (a SQLite file, or
    ``pg:PREFIX``) with a lease of ``lease`` seconds; ``store`` is the same
    schedule, for this process to schedule and cancel the runs.
    """
    effects = os.path.join(directory, "effects.db")
    for suffix in ("", ".starts"):
        if os.path.exists(effects + suffix):
            os.remove(effects + suffix)
    sched = DurableScheduler(store, imports=IMPORTS)
    env = {**os.environ, "EFFECTS_DB": effects, "PYTHONPATH": str(ROOT), "LEASE": str(lease),
           "EFFECT_SLEEP": "30", **(env or {})}  # fmt: skip
    worker = [sys.executable, "-m", "tests.durable.worker", target]
    procs = [subprocess.Popen(worker, cwd=ROOT, env=env, stderr=subprocess.DEVNULL)
             for _ in range(2)]  # fmt: skip
    starts_file = effects + ".starts"
    gaps = []
    try:
        for k in range(kills):
            sched.schedule_once(f"f{k}", 0, "tests.durable.jobs:effect", args=[])
            seen = _wait_starts(starts_file, k, 1)
            pid = int(seen[-1].split()[2])
            victim = next(p for p in procs if p.pid == pid)
            killed = time.time()
            victim.send_signal(signal.SIGKILL)
            victim.wait()
            procs[procs.index(victim)] = subprocess.Popen(
                worker, cwd=ROOT, env=env, stderr=subprocess.DEVNULL
            )
            second = _wait_starts(starts_file, k, 2)
            gaps.append(_last_start_time(starts_file) - killed)
            sched.cancel(f"f{k}")  # and free the worker that took it over (it sleeps)
            taker = next(p for p in procs if p.pid == int(second[-1].split()[2]))
            taker.send_signal(signal.SIGKILL)
            taker.wait()
            procs[procs.index(taker)] = subprocess.Popen(
                worker, cwd=ROOT, env=env, stderr=subprocess.DEVNULL
            )
    finally:
        for p in procs:
            p.kill()
            p.wait()
        store.close()
    return gaps


def _wait_starts(path: str, k: int, n: int) -> list[str]:
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        if os.path.exists(path):
            with open(path) as f:
                lines = [line for line in f if line.startswith(f"f{k}@")]
            if len(lines) >= n:
                return lines
        time.sleep(0.005)
    raise RuntimeError(f"no start {n} of f{k}")


def _last_start_time(path: str) -> float:
    return os.stat(path).st_mtime


def wakeup(make_store: Callable[[], Any], samples: int = 30) -> list[float]:
    """Seconds from another node's schedule call (a run due now) to this node starting it.

    Two schedulers with their own connections: this one's runner sleeps with
    nothing due; the other schedules; the run's start is timed.
    """
    started: list[float] = []
    node = DurableScheduler(make_store(), imports=IMPORTS)

    def wake() -> None:
        started.append(time.time())

    node.register("bench.wake", wake)
    other = DurableScheduler(make_store(), imports=IMPORTS)
    other.register("bench.wake", wake)
    gaps = []
    with Runner(node):
        time.sleep(0.3)  # asleep, nothing due
        for k in range(samples):
            sent = time.time()
            other.schedule_once(f"wake{k}", 0, "bench.wake", args=[])
            deadline = time.monotonic() + 10
            while len(started) <= k and time.monotonic() < deadline:
                time.sleep(0.0005)
            gaps.append(started[k] - sent)
            time.sleep(0.05 + 0.1 * (k % 3) / 3)  # not in step with the poll
    node.store.close()
    other.store.close()
    return gaps


def startup(directory: str, rows: int = 1_000_000) -> float:
    """Seconds from opening a store of ``rows`` tasks to the first claim."""
    path = _fresh(directory, "startup.db")
    seed = DurableScheduler(SQLiteStore(path), clock=lambda: 0.0)
    seed.schedule("seed", FixedRate(FAR, start=10**8), NOOP)
    template = seed.store.get("seed")
    assert template is not None
    seed.store.close()
    db = sqlite3.connect(path)
    db.execute("PRAGMA synchronous=OFF")
    spec, state = json.dumps(template.spec), json.dumps(template.state)
    db.executemany(
        "INSERT INTO rota_tasks (task_id, action, spec, state, status, paused, due, "
        "priority, seq) VALUES (?, ?, ?, ?, 'scheduled', 0, ?, 0, ?)",
        ((f"t{i:07}", template.action, spec, state, 10**8 + i, i) for i in range(rows)),
    )
    db.execute(
        "INSERT INTO rota_tasks (task_id, action, spec, state, status, paused, due, "
        "priority, seq) VALUES ('now', ?, ?, ?, 'scheduled', 0, 1, 0, ?)",
        (template.action, spec, state, rows),
    )
    db.commit()
    db.close()
    start = time.perf_counter()
    sched = DurableScheduler(SQLiteStore(path), imports=IMPORTS)
    head = sched.next_run_time()
    task = sched.table.claim(time.time())
    elapsed = time.perf_counter() - start
    assert head == 1
    assert task is not None
    assert task.task_id == "now"
    return elapsed


def main() -> None:
    results: dict[str, Any] = {"N": N, "rounds": ROUNDS, "peer_N": PEER_N}
    with tempfile.TemporaryDirectory(dir=os.environ.get("BENCH_DIR")) as directory:
        throughput: dict[str, list[float]] = {}
        for _ in range(ROUNDS):
            for sync in ("FULL", "NORMAL"):
                runs: list[tuple[str, Callable[[str], float | None]]] = [
                    ("floor, commit per run", lambda s: floor_drain(directory, s, True)),
                    ("floor, commit per 32", lambda s: floor_drain(directory, s, False)),
                    (
                        "rota's store alone, commit per run",
                        lambda s: store_drain(directory, s, False),
                    ),
                    ("rota's store alone, group commit", lambda s: store_drain(directory, s)),
                    (
                        "replay of rota's SQL, commit per run",
                        lambda s: replay_drain(directory, s, False),
                    ),
                    ("rota, commit per run", lambda s: rota_drain(directory, s, 0, False)),
                    (
                        "rota, commit per run, pool of 16",
                        lambda s: rota_drain(directory, s, 16, False),
                    ),
                    (
                        "replay of rota's SQL, group commit",
                        lambda s: replay_drain(directory, s),
                    ),
                    ("rota, group commit", lambda s: rota_drain(directory, s)),
                    (
                        "rota, group commit, pool of 16",
                        lambda s: rota_drain(directory, s, 16),
                    ),
                    (
                        "APScheduler 3 + SQLAlchemyJobStore",
                        lambda s: apscheduler_drain(directory, s),
                    ),
                ]
                for name, run in runs:
                    value = run(sync)
                    if value is not None:
                        throughput.setdefault(f"{name} | {sync}", []).append(value)
                        print(f"{name} {sync}: {value:,.0f} runs/s", file=sys.stderr)
        if PG:
            for _ in range(ROUNDS):
                pg_runs: list[tuple[str, Callable[[str], float | None]]] = [
                    ("floor, commit per run", lambda _: pg_floor_drain(True)),
                    ("floor, commit per 32", lambda _: pg_floor_drain(False)),
                    ("rota, commit per run", lambda _: rota_pg_drain(False)),
                    ("rota, commit per run, pool of 16", lambda _: rota_pg_drain(False, 16)),
                    ("rota, group commit", lambda _: rota_pg_drain(True)),
                    ("rota, group commit, pool of 16", lambda _: rota_pg_drain(True, 16)),
                    ("rota, group commit, 4 processes", lambda _: rota_pg_processes(4)),
                ]
                for procs, label in ((1, "1 process"), (4, "4 processes")):
                    pg_runs += [
                        (f"APScheduler 4 + SQLAlchemyDataStore, {label}",
                         _peer("aps4", APS4_PYTHON, procs)),
                        (f"procrastinate, {label}",
                         _peer("procrastinate_drain", sys.executable, procs)),
                    ]  # fmt: skip
                for name, run in pg_runs:
                    value = run("PostgreSQL")
                    if value is None:
                        continue
                    throughput.setdefault(f"{name} | PostgreSQL", []).append(value)
                    print(f"{name} PostgreSQL: {value:,.0f} runs/s", file=sys.stderr)
        results["throughput"] = throughput
        wake = {
            "SQLite": wakeup(lambda: SQLiteStore(_fresh(directory, "wake.db")[:-7] + "wake.db"))
        }
        if PG:
            import uuid

            from rota.store import PostgresStore

            prefix = f"wake{uuid.uuid4().hex[:8]}_"
            wake["PostgreSQL"] = wakeup(lambda: PostgresStore(PG, prefix=prefix))
        results["wakeup"] = wake
        print(f"wake-up: {wake}", file=sys.stderr)
        path = _fresh(directory, "failover.db")
        failovers = {"SQLite, lease 1 s": failover(directory, path, SQLiteStore(path), 1)}
        results["failover"] = failovers
        if PG:
            import uuid

            from rota.store import PostgresStore

            for lease in (1, 2):
                prefix = f"fail{uuid.uuid4().hex[:8]}_"
                failovers[f"PostgreSQL, lease {lease} s"] = failover(
                    directory, f"pg:{prefix}", PostgresStore(PG, prefix=prefix), lease,
                    {"ROTA_PG_DSN": PG},
                )  # fmt: skip
        print(f"failover: {results['failover']}", file=sys.stderr)
        results["startup"] = startup(directory)
        print(f"startup: {results['startup']:.3f} s", file=sys.stderr)
    write(results)


def write(results: dict[str, Any]) -> None:
    out = ROOT / "bench" / "results"
    (out / "durable.json").write_text(json.dumps(results, indent=1) + "\n")
    best = {key: max(values) for key, values in results["throughput"].items()}
    lines = [
        "Command: `python bench/durable.py`"
        f" (N = {results['N']:,} runs, best of {results['rounds']} rounds)",
        "",
        f"Machine: {platform.processor() or platform.machine()}, {os.cpu_count()} cores, "
        f"{platform.platform()}, CPython {platform.python_version()}, "
        f"SQLite {sqlite3.sqlite_version}",
        "",
        "| what | store | runs/s (best) | median | x floor per run | x rota per run "
        "| x APScheduler 4 | x procrastinate |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for key, values in results["throughput"].items():
        name, sync = key.split(" | ")
        sync_shown = f"SQLite {sync}" if sync != "PostgreSQL" else sync
        floor = best[f"floor, commit per run | {sync}"]
        mine = best[f"rota, commit per run | {sync}"]
        # each PostgreSQL row beside the peers with as many processes
        label = "4 processes" if "4 processes" in name else "1 process"
        peers = [best.get(f"{peer}, {label} | {sync}") for peer in
                 ("APScheduler 4 + SQLAlchemyDataStore", "procrastinate")]  # fmt: skip
        ratios = " | ".join("" if p is None else f"{max(values) / p:.1f}" for p in peers)
        lines.append(
            f"| {name} | {sync_shown} | {max(values):,.0f} | {statistics.median(values):,.0f} | "
            f"{max(values) / floor:.2f} | {max(values) / mine:.2f} | {ratios} |"
        )
    for sync in ("FULL", "NORMAL"):
        against = [
            f"{mode}, {best[f'rota, {mode} | {sync}'] / best[replay]:.2f}"
            for mode in ("commit per run", "group commit")
            if (replay := f"replay of rota's SQL, {mode} | {sync}") in best
        ]
        if against:
            lines += [
                "",
                f"rota / the replay of its own SQL (best against best), SQLite {sync}: "
                + "; ".join(against)
                + ".",
            ]
    if PG:
        lines += [
            "",
            "PostgreSQL: a server on loopback started by `tests/postgres_server.py --durable` "
            "(fsync on, default settings otherwise); one process unless the row says otherwise "
            f"(four processes drain {4 * results['N']:,} runs, as many each as one does). "
            f"The peers drain {results.get('peer_N', N):,} runs each (`bench/peer_drains/`: "
            "APScheduler 4.0.0a6's date schedules due now, procrastinate's deferred jobs), "
            "with their documented multi-worker setups; each PostgreSQL row's peer ratios "
            "compare with the peer's run with as many processes.",
        ]
    for name, values in results.get("wakeup", {}).items():
        ordered = sorted(values)
        lines += [
            "",
            f"Wake-up of a sleeping node for a run another node schedules due now, {name} "
            f"({len(ordered)} samples): p50 {1000 * statistics.median(ordered):.1f} ms, "
            f"p99 {1000 * ordered[min(len(ordered) - 1, round(0.99 * (len(ordered) - 1)))]:.1f} "
            f"ms.",
        ]
    for name, values in results["failover"].items():
        gaps = sorted(values)
        p99 = gaps[min(len(gaps) - 1, round(0.99 * (len(gaps) - 1)))]
        lines += [
            "",
            f"Failover after SIGKILL of the node running a task, {name} ({len(gaps)} kills): "
            f"p50 {statistics.median(gaps):.2f} s, p99 {p99:.2f} s, max {max(gaps):.2f} s.",
        ]
    lines += [
        "",
        f"Start-up with 10^6 stored tasks (open, next run time, first claim): "
        f"{results['startup']:.3f} s.",
    ]
    (out / "durable.md").write_text("\n".join(lines) + "\n")
    print("\n".join(lines))


REPLAY_MODES = (("group commit", True), ("commit per run", False))
"""The replay bench's commit modes: a Runner's default, and ``group_commit=False``."""


def replay_main() -> None:
    """``python bench/durable.py replay``: rota beside the replay of its own SQL, with
    group commit and with a commit per run, SQLite NORMAL and FULL, ROUNDS alternating
    rounds; writes ``bench/results/replay.md``."""
    rates: dict[str, list[float]] = {}
    with tempfile.TemporaryDirectory(dir=os.environ.get("BENCH_DIR")) as directory:
        for _ in range(ROUNDS):
            for sync in ("NORMAL", "FULL"):
                for mode, group in REPLAY_MODES:
                    replay = replay_drain(directory, sync, group)
                    rates.setdefault(f"replay | {mode} | {sync}", []).append(replay)
                    mine = rota_drain(directory, sync, 0, group)
                    rates.setdefault(f"rota | {mode} | {sync}", []).append(mine)
    lines = [
        f"Command: `python bench/durable.py replay` (N = {N:,} runs, {ROUNDS} rounds, "
        "alternating)",
        "",
        f"Machine: {platform.processor() or platform.machine()}, {os.cpu_count()} cores, "
        f"CPython {platform.python_version()}, SQLite {sqlite3.sqlite_version}",
        "",
        "| SQLite | commits | replay runs/s (median) | rota runs/s (median) "
        "| rota / replay | each round's |",
        "|---|---|---|---|---|---|",
    ]
    for sync in ("NORMAL", "FULL"):
        for mode, _ in REPLAY_MODES:
            floors = rates[f"replay | {mode} | {sync}"]
            ours = rates[f"rota | {mode} | {sync}"]
            # (each round's ratio too: on a shared machine the pace drifts between rounds)
            rounds = ", ".join(f"{m / r:.2f}" for r, m in zip(floors, ours, strict=True))
            floor, median = statistics.median(floors), statistics.median(ours)
            lines.append(
                f"| {sync} | {mode} | {floor:,.0f} | {median:,.0f} | {median / floor:.2f} "
                f"| {rounds} |"
            )
    text = "\n".join(lines) + "\n"
    (ROOT / "bench" / "results" / "replay.md").write_text(text)
    print(text)


if __name__ == "__main__":
    replay_main() if sys.argv[1:] == ["replay"] else main()
