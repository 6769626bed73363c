"""Large stores: what a claim costs beside rows a node cannot run, and what listing costs.

``python tests/postgres_server.py --durable -- python bench/scale.py`` (``make
bench`` runs it) writes ``bench/results/scale.md`` and ``scale.json``.

1. **Claims beside unknown actions** (issue 22, item 6): a shared store holds
   0, 10^4 or 10^5 due rows of an action only another service registers (that
   service is down: its runs pile up), and 1,000 due rows of the node's own
   action. The figure is the latency of one claim of one run (and of
   ``next_due``) for the node, p50 and p99 over 200 claims. It should be flat
   in the unknown rows.
2. **Listing** (item 14): ``tasks(limit=1000)`` (a page), ``tasks()`` (all) and
   ``rota status --json`` (a process) over 10^4, 10^5 and 10^6 stored tasks,
   each with one outcome. They should be one query each, linear in the rows
   returned.
3. **A year-long misfire backlog** (item 9): the claim that decides a coalesced
   run a year behind, for a fixed-rate and a cron schedule.

Rows are inserted with raw SQL (copies of one row the scheduler wrote), so the
set-up takes seconds, not the hours a scheduler would take to run 10^6 tasks.
"""

from __future__ import annotations

import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "src"))

from rota import DurableScheduler, ManualClock  # noqa: E402
from rota.store import SQLiteStore, Store  # noqa: E402
from rota.store._base import COLUMNS, OUTCOME_COLUMNS, row_values  # noqa: E402

NOW = 1_800_000_000
CLAIMS = 200
RESULTS = ROOT / "bench" / "results"


def _noop(at: object) -> None:
    """The node's own action."""


def _percentile(samples: list[float], q: float) -> float:
    ordered = sorted(samples)
    return ordered[min(len(ordered) - 1, round(q * (len(ordered) - 1)))]


class Target:
    """A store to fill with raw SQL: a SQLite file or PostgreSQL tables."""

    def __init__(self, kind: str) -> None:
        self.kind = kind
        self.dir = tempfile.mkdtemp(prefix="rota-scale-")
        self.prefix = f"scale{os.getpid()}_"
        self.url = ""

    def store(self) -> Store:
        if self.kind == "sqlite":
            return SQLiteStore(Path(self.dir) / "scale.db")
        from rota.store import PostgresStore

        return PostgresStore(os.environ["ROTA_PG_DSN"], prefix=self.prefix, clock="caller")

    def cli_store(self) -> str:
        if self.kind == "sqlite":
            return f"sqlite:///{Path(self.dir) / 'scale.db'}"
        raise NotImplementedError  # rota status takes a URL; see _status_seconds

    @contextmanager
    def raw(self) -> Iterator[Any]:
        """A connection for bulk inserts, committed at the end."""
        if self.kind == "sqlite":
            import sqlite3

            db = sqlite3.connect(Path(self.dir) / "scale.db")
            try:
                yield db
                db.commit()
            finally:
                db.close()
        else:
            import psycopg

            with psycopg.connect(os.environ["ROTA_PG_DSN"]) as pg:
                yield pg

    def mark(self) -> str:
        return "?" if self.kind == "sqlite" else "%s"

    def drop(self) -> None:
        if self.kind == "postgres":
            import psycopg

            with psycopg.connect(os.environ["ROTA_PG_DSN"], autocommit=True) as db:
                for table in ("tasks", "outcomes", "meta"):
                    db.execute(f"DROP TABLE IF EXISTS {self.prefix}{table}")
                db.execute(f"DROP SEQUENCE IF EXISTS {self.prefix}seq")


def _fill(target: Target, sched: DurableScheduler, n: int, action: str, *, outcome: bool,
          start: int, due: int) -> None:  # fmt: skip
    """Insert ``n`` copies of a template row (ids ``{action}-{start + i}``), due at ``due``."""
    store = sched.store
    template = store.get("template")
    assert template is not None
    mark = target.mark()
    p = target.prefix if target.kind == "postgres" else "rota_"
    values = list(row_values(template))
    columns = [c.strip() for c in COLUMNS.split(",")]
    at = {name: i for i, name in enumerate(columns)}
    insert = f"INSERT INTO {p}tasks ({COLUMNS}) VALUES ({','.join([mark] * len(columns))})"
    outcomes = (
        f"INSERT INTO {p}outcomes ({OUTCOME_COLUMNS}) VALUES "
        f"({','.join([mark] * len(OUTCOME_COLUMNS.split(',')))})"
    )
    with target.raw() as db:
        cursor = db.cursor()
        for chunk in range(start, start + n, 10_000):
            rows, done = [], []
            for i in range(chunk, min(chunk + 10_000, start + n)):
                row = list(values)
                row[at["task_id"]] = f"{action}-{i:07d}"
                row[at["action"]] = action
                row[at["due"]] = due
                row[at["seq"]] = i + 10
                rows.append(tuple(row))
                if outcome:
                    done.append((f"{action}-{i:07d}", due - 60, 0, 1, due - 60, "ok", None,
                                 due - 60, due - 59, 0, "bench", None, None))  # fmt: skip
            cursor.executemany(insert, rows)
            if done:
                cursor.executemany(outcomes, done)


def _sched(target: Target) -> DurableScheduler:
    sched = DurableScheduler(target.store(), clock=ManualClock(NOW), imports=True)
    sched.register("mine", _noop)
    sched.schedule_once("template", 3600, "mine")
    return sched


def claims(kind: str, unknown: int) -> dict[str, Any]:
    """Claim latency of a node beside ``unknown`` due rows of another service's action."""
    target = Target(kind)
    try:
        sched = _sched(target)
        _fill(target, sched, unknown, "other.service", outcome=False, start=0, due=NOW - 1000)
        _fill(target, sched, CLAIMS + 50, "mine", outcome=False, start=0, due=NOW - 10)
        store, known = sched.store, sched._actions.known()
        if kind == "postgres":  # fresh statistics, as autovacuum would give a live server
            with target.raw() as db:
                db.execute(f"ANALYZE {target.prefix}tasks")
        took, heads = [], []
        for _ in range(CLAIMS):
            began = time.perf_counter()
            rows = store.claim("bench", NOW, 1, 30, known)
            took.append(time.perf_counter() - began)
            assert [row.action for row in rows] == ["mine"], rows
            began = time.perf_counter()
            store.next_due("bench", known)
            heads.append(time.perf_counter() - began)
        store.close()
        return {
            "store": kind, "unknown": unknown,
            "claim_p50_ms": statistics.median(took) * 1e3,
            "claim_p99_ms": _percentile(took, 0.99) * 1e3,
            "next_due_p50_ms": statistics.median(heads) * 1e3,
        }  # fmt: skip
    finally:
        target.drop()


def listing(kind: str, n: int) -> dict[str, Any]:
    """``tasks`` (a page of 1,000, and all) and ``rota status`` over ``n`` tasks."""
    target = Target(kind)
    try:
        sched = _sched(target)
        _fill(target, sched, n, "mine", outcome=True, start=0, due=NOW + 3600)

        def timed(work: Callable[[], object], repeats: int) -> float:
            best = float("inf")
            for _ in range(repeats):
                began = time.perf_counter()
                work()
                best = min(best, time.perf_counter() - began)
            return best

        page = timed(lambda: sched.tasks(limit=1000), 20)
        every = timed(sched.tasks, 1 if n >= 10**6 else 3)
        status = _status_seconds(target) if kind == "sqlite" else None
        sched.store.close()
        return {"store": kind, "tasks": n, "page_ms": page * 1e3, "all_s": every,
                "status_s": status}  # fmt: skip
    finally:
        target.drop()


def _status_seconds(target: Target) -> float:
    began = time.perf_counter()
    done = subprocess.run(
        [sys.executable, "-m", "rota", "status", "--json", "--store", target.cli_store()],
        capture_output=True, check=True, env={**os.environ, "PYTHONPATH": str(ROOT / "src")},
    )  # fmt: skip
    took = time.perf_counter() - began
    assert done.stdout.startswith(b"[")
    return took


def misfire() -> list[dict[str, Any]]:
    """Issue 22, item 9: a year behind under ``COALESCE``, the claim that decides it."""
    from rota import FixedRate, Misfire
    from rota.cron import Cron

    found = []
    minutely = Cron("* * * * *", tz="Europe/Berlin")
    for name, when in (("fixed rate 60 s", FixedRate(60)), ("cron * * * * *, Berlin", minutely)):
        clock = ManualClock(1_767_225_600)
        sched = DurableScheduler(
            SQLiteStore(Path(tempfile.mkdtemp(prefix="rota-scale-")) / "m.db"), clock=clock
        )
        sched.register("job", _noop)
        sched.schedule("t", when, "job", misfire=Misfire.COALESCE)
        clock.advance(365 * 86_400)
        began = time.perf_counter()
        [outcome] = sched.tick(clock())
        found.append({"schedule": name, "decide_s": time.perf_counter() - began,
                      "skipped": outcome.skipped})  # fmt: skip
        sched.store.close()
    return found


def _table(title: str, header: list[str], rows: list[list[str]]) -> list[str]:
    """A Markdown table under ``title``, as lines."""
    return ["", title, "", f"| {' | '.join(header)} |", "|" + "---|" * len(header),
            *(f"| {' | '.join(row)} |" for row in rows)]  # fmt: skip


def main() -> None:
    kinds = ["sqlite"] + (["postgres"] if os.environ.get("ROTA_PG_DSN") else [])
    sizes = [int(s) for s in os.environ.get("SCALE_SIZES", "10000,100000,1000000").split(",")]
    results: dict[str, list[dict[str, Any]]] = {"claims": [], "listing": [], "misfire": misfire()}
    print(results["misfire"], flush=True)
    for kind in kinds:
        for unknown in (0, 10_000, 100_000):
            results["claims"].append(claims(kind, unknown))
            print(results["claims"][-1], flush=True)
        for n in sizes:
            results["listing"].append(listing(kind, n))
            print(results["listing"][-1], flush=True)
    RESULTS.mkdir(exist_ok=True)
    (RESULTS / "scale.json").write_text(json.dumps(results, indent=1) + "\n")
    lines = ["# Large stores (`bench/scale.py`)"]
    lines += _table(
        f"Claims of one run by a node beside due rows of an action it cannot run ({CLAIMS} "
        "claims; 1,000 due rows of its own):",
        ["store", "unknown due rows", "claim p50 (ms)", "claim p99 (ms)", "next_due p50 (ms)"],
        [[r["store"], f"{r['unknown']:,}", f"{r['claim_p50_ms']:.2f}",
          f"{r['claim_p99_ms']:.2f}", f"{r['next_due_p50_ms']:.2f}"]
         for r in results["claims"]],
    )  # fmt: skip
    lines += _table(
        "Listing stored tasks, each with one outcome (best of several):",
        ["store", "tasks", "`tasks(limit=1000)` (ms)", "`tasks()` (s)",
         "`rota status --json` (s)"],
        [[r["store"], f"{r['tasks']:,}", f"{r['page_ms']:.1f}", f"{r['all_s']:.2f}",
          "-" if r["status_s"] is None else f"{r['status_s']:.2f}"]
         for r in results["listing"]],
    )  # fmt: skip
    lines += _table(
        "A year behind under `COALESCE`: the claim that decides it (one run, the rest "
        "skipped and counted):",
        ["schedule", "decision (s)", "slots skipped"],
        [[r["schedule"], f"{r['decide_s']:.3f}", f"{r['skipped']:,}"]
         for r in results["misfire"]],
    )  # fmt: skip
    (RESULTS / "scale.md").write_text("\n".join(lines) + "\n")
    print("\n".join(lines))


if __name__ == "__main__":
    main()
