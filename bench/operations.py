"""Operating a fleet: what alerts, pools and tracing cost per run on a busy node, as a
ratio to the same drain without them (``x plain``).

The drain: 1,000 jobs, ticked through a simulated day of hourly slots (24,000 runs),
on a SQLite file (``DurableScheduler.tick``, one commit per run) and, for tracing,
also in memory (``Scheduler.tick``), a run and its decision per op.

- ``alerts``: every job has an alert rule (``after = 3``, ``recovered``); each run's
  outcome goes to the node's :class:`rota.cli._alerts.Fleet` (its thread reads the
  job's streak from the store and swaps it, as ``rota run`` does), and the drain
  waits for the fleet to have judged every run before it stops the clock. Healthy
  jobs (an ok run of a job without a streak is not judged), and jobs whose every run
  fails (each judged: the worst case; its alerts are written, none delivered: their
  destination is another node's).
- ``pools``: every job in one pool (``Pool("warehouse", 10)``): each claim takes a
  place (in memory, the engine's count; on SQLite, the claim leaves out full pools
  and counts the places of the pooled rows it took, in its transaction) and each
  completion frees it. A tick runs one run at a time, so the pool is never full:
  what is measured is the bookkeeping every pooled run pays.
- ``tracing``: ``rota.tracing`` off (the API absent, as without the extra), on with
  no SDK provider (the API's no-op spans) and on with the SDK as a service runs it
  (a ``BatchSpanProcessor``: spans queued, exported by its own thread) and an
  exporter that drops what it is given (the SDK's full cost short of the network).

Retention: the longest transaction of one batch of the rule, over 200,000 recorded
runs, on SQLite and (``ROTA_PG_DSN`` set) PostgreSQL, beside the bound (a tenth of
the default lease).

Usage: ``python bench/operations.py`` (about ten minutes); writes
``bench/results/operations.md`` and ``operations.json``.
"""

from __future__ import annotations

import os
import tempfile
import time
import uuid
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from harness import Figure, Run, interleave, save, table, timed

from rota import FixedRate, ManualClock, Pool, Scheduler, tracing
from rota.cli._alerts import Fleet
from rota.cli._fleet import AlertRule
from rota.cli._jobfile import JobFile
from rota.durable import DurableScheduler
from rota.store import SQLiteStore

HOUR = 3600.0
START = 1_800_000_000.0 - 1_800_000_000.0 % 86400
JOBS = 1000
PG = os.environ.get("ROTA_PG_DSN")


def noop(at: float) -> None:
    """A run that does nothing: what is measured is the scheduling."""


def fail(at: float) -> None:
    """A run that fails: every run of a failing job is judged (its streak moves)."""
    raise RuntimeError("down")


class _Job:
    """What :class:`Fleet.update` reads of a job (its id and alert rule)."""

    def __init__(self, job_id: str, alert: AlertRule | None) -> None:
        self.id = job_id
        self.alert = alert


def drain(
    durable: bool, *, alerts: bool = False, trace: str = "off", fails: bool = False,
    pool: Pool | None = None,
) -> Run:  # fmt: skip
    """A simulated day of hourly ticks over 1,000 jobs (whose runs all fail, with
    ``fails``), with alerts, tracing (``trace``: ``off``, ``noop`` or ``sdk``) or every
    job in ``pool`` as asked."""
    clock = ManualClock(START)
    sched: Scheduler
    if durable:
        store = SQLiteStore(Path(tempfile.mkdtemp()) / "o.db", synchronous="NORMAL")
        sched = DurableScheduler(store, clock=clock, lease=10 * 86400)
        sched.register("noop", fail if fails else noop)
    else:
        sched = Scheduler(clock=clock, epoch=True)
    for k in range(JOBS):
        action: Any = "noop" if durable else noop
        sched.schedule(f"j{k}", FixedRate(HOUR, start=START + HOUR), action, pool=pool)
    fleet = None
    if alerts:
        assert isinstance(sched, DurableScheduler)
        fleet = Fleet(sched)
        # its destination is another node's: alerts are written, none delivered here
        rule = AlertRule(("elsewhere",), after=3, recovered=True)
        jobs: Sequence[Any] = [_Job(f"j{k}", rule) for k in range(JOBS)]
        fleet.update(JobFile(list(jobs), None, {}, []))
        _settled(fleet)

    def body() -> int:
        tracing.ACTIVE = trace != "off"
        done = 0
        try:
            for hour in range(1, 25):
                clock.set(START + hour * HOUR)
                outcomes = sched.tick(START + hour * HOUR)
                done += len(outcomes)
                if fleet is not None:
                    for outcome in outcomes:
                        fleet.outcome(outcome)
            if fleet is not None:
                _settled(fleet)
        finally:
            tracing.ACTIVE = ACTIVE
        return done

    def run() -> tuple[int, int]:
        _provider(trace)
        try:
            return timed(body)
        finally:
            if fleet is not None:
                fleet.close()

    return run


def _settled(fleet: Fleet) -> None:
    """Until the fleet's thread has judged every job it was told of."""
    while True:
        with fleet._lock:
            if not fleet._pending:
                break
        time.sleep(0.001)
    time.sleep(0.01)  # the pass that took the last ones ends


ACTIVE = tracing.ACTIVE
PROVIDERS: dict[str, Any] = {}


def _provider(trace: str) -> None:
    """The tracer provider of a ``trace`` mode (set through the API's proxy, so each
    mode can be switched to in one process)."""
    from opentelemetry import trace as api
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import BatchSpanProcessor, SpanExporter, SpanExportResult

    class Dropped(SpanExporter):
        def export(self, spans: Any) -> SpanExportResult:
            return SpanExportResult.SUCCESS

    if not PROVIDERS:
        sdk = TracerProvider()
        sdk.add_span_processor(BatchSpanProcessor(Dropped()))
        PROVIDERS.update(sdk=sdk, noop=api.NoOpTracerProvider())
        api.set_tracer_provider(_switch())
    _Switch.current = PROVIDERS.get(trace, PROVIDERS["noop"])
    tracing._provider = None  # its next run decides its tracer again: the mode's


def _switch() -> Any:
    """A tracer provider that hands out the current mode's tracers."""
    from opentelemetry import trace as api

    class Switch(api.TracerProvider):
        def get_tracer(self, *args: Any, **kwargs: Any) -> Any:
            return _Switch.current.get_tracer(*args, **kwargs)

    return Switch()


class _Switch:
    current: Any = None


LEASE = 30.0
"""The default lease (``DurableScheduler(lease=30.0)``): no pruning transaction may
hold a tenth of it."""


def pruning(where: str, runs: int = 200_000, tasks: int = 200) -> dict[str, float]:
    """The longest transaction of the retention rule (``keep_runs = 100``, then ``keep``
    leaving 50 runs a job) in batches of :data:`rota.cli._alerts.PRUNE_BATCH`, over
    ``runs`` recorded runs of ``tasks`` jobs, beside a tenth of the default lease."""
    from rota.cli._alerts import PRUNE_BATCH

    per = runs // tasks
    rows = [
        (f"t{t}", START + k, 0, 1, START + k, "ok", None, START + k, START + k, 0)
        for t in range(tasks) for k in range(per)
    ]  # fmt: skip
    insert = ("INSERT INTO {p}outcomes (task_id, slot, attempt, fence, at, result, error, "
              "started, finished, skipped) VALUES ({marks})")  # fmt: skip
    store: Any
    if where == "SQLite":
        store = SQLiteStore(Path(tempfile.mkdtemp()) / "p.db", synchronous="NORMAL")
        store.open()
        with store._write() as db:
            db.executemany(insert.format(p="rota_", marks=", ".join("?" * 10)), rows)
    else:
        import psycopg

        from rota.store import PostgresStore

        assert PG is not None
        prefix = f"bench_prune_{uuid.uuid4().hex[:8]}_"
        store = PostgresStore(PG, prefix=prefix)
        store.open()
        with psycopg.connect(PG, autocommit=True) as db, db.cursor() as cursor:
            cursor.executemany(insert.format(p=prefix, marks=", ".join(["%s"] * 10)), rows)
    longest = {"keep_runs": 0.0, "keep": 0.0}
    steps: dict[str, Callable[[], int]] = {
        "keep_runs": lambda: store.ledger.trim(None, 100, PRUNE_BATCH),
        "keep": lambda: store.prune(START + per - 50, PRUNE_BATCH),
    }
    for rule, step in steps.items():
        while True:
            began = time.perf_counter()
            gone = step()
            longest[rule] = max(longest[rule], time.perf_counter() - began)
            if not gone:
                break
    store.close()
    return {"runs": runs, **{f"{k} longest s": v for k, v in longest.items()},
            "bound s": LEASE / 10}  # fmt: skip


def main() -> None:
    figures: list[Figure] = []
    figures += interleave(
        "alerts, SQLite", 0,
        {"plain": lambda: drain(True), "alerts": lambda: drain(True, alerts=True)},
    )  # fmt: skip
    figures += interleave(
        "alerts, SQLite, every run failing", 0,
        {"plain": lambda: drain(True, fails=True),
         "alerts": lambda: drain(True, alerts=True, fails=True)},
    )  # fmt: skip
    warehouse = Pool("warehouse", 10)
    for durable, where in ((False, "memory"), (True, "SQLite")):
        figures += interleave(
            f"pools, {where}", 0,
            {"plain": lambda d=durable: drain(d),  # type: ignore[misc]
             "pool": lambda d=durable: drain(d, pool=warehouse)},  # type: ignore[misc]
        )  # fmt: skip
    for durable, where in ((False, "memory"), (True, "SQLite")):
        figures += interleave(
            f"tracing, {where}", 0,
            {
                "plain": lambda d=durable: drain(d),  # type: ignore[misc]
                "tracing, no SDK": lambda d=durable: drain(d, trace="noop"),  # type: ignore[misc]
                "tracing, SDK": lambda d=durable: drain(d, trace="sdk"),  # type: ignore[misc]
            },
        )  # fmt: skip
    prunes = {where: pruning(where) for where in ("SQLite", *(["PostgreSQL"] if PG else []))}
    rows = ["| store | runs | longest keep_runs batch s | longest keep batch s | bound s |",
            "|---|---|---|---|---|"]  # fmt: skip
    rows += [
        f"| {where} | {p['runs']:,.0f} | {p['keep_runs longest s']:.3f} "
        f"| {p['keep longest s']:.3f} | {p['bound s']:.1f} |"
        for where, p in prunes.items()
    ]
    markdown = table(figures, ["plain"]) + "\n\nRetention, one batch's transaction:\n\n"
    markdown += "\n".join(rows) + "\n"
    save("operations", "python bench/operations.py", figures, {"prune": prunes}, markdown)
    print(markdown)


if __name__ == "__main__":
    main()
