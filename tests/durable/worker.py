"""A worker process for the durable fault tests: a Runner on a SQLite file.

``python -m tests.durable.worker DB`` runs due tasks until SIGTERM (or for
$RUN_FOR seconds); DB is a SQLite file, or ``pg:PREFIX`` for the tables with
that prefix on the PostgreSQL server at $ROTA_PG_DSN. $CLOCK_OFFSET
(seconds) sets the node's clock that far off; $CLOCK_STEP_FILE steps its wall clock
(``time.time``) by the seconds written there. $ACTIONS registers names
(``name=module:function,...``), as a deployed version of an application
would. $READY_FILE is written once its runner started. $LEASE sets the lease
(seconds), $BATCH its claim batch (1), $WORKERS the runner's pool (none); on PostgreSQL,
$FREEZE and $PG_TIMEOUT freeze the node inside a transaction (see
``_postgres``); $KILL_AT makes the process SIGKILL itself at one step of its
first run: ``claimed`` (just after the claim committed),
``completing`` (after the action, before the completion's transaction) or
``committing`` (inside that transaction, before its commit). The action itself
can kill it too (see ``jobs.py``).
"""

from __future__ import annotations

import os
import signal
import sys
import time
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

from rota import DurableScheduler, Runner
from rota.durable import resolve_path
from rota.store import Change, Edit, Known, SQLiteStore, TaskRow


class KillingStore(SQLiteStore):
    """A SQLiteStore that SIGKILLs its process at the step named by $KILL_AT."""

    def __init__(self, path: str, step: str) -> None:
        super().__init__(path)
        self.step = step

    def _die(self, step: str) -> None:
        if self.step == step:
            os.kill(os.getpid(), signal.SIGKILL)

    def claim(self, node: str, now: Any, limit: int, lease: Any, known: Known) -> list[TaskRow]:
        rows = super().claim(node, now, limit, lease, known)
        if rows:
            self._die("claimed")
        return rows

    def modify_many(self, edits: Sequence[Edit]) -> list[Change[Any] | None]:
        if all(edit.fence is None for edit in edits):
            return super().modify_many(edits)
        return super().modify_many(self._completing(edits))  # completions are fenced

    def complete_and_claim(
        self, edits: Sequence[Edit], node: str, now: Any, limit: int, lease: Any, known: Known
    ) -> tuple[list[Change[Any] | None], list[TaskRow]]:
        found = super().complete_and_claim(self._completing(edits), node, now, limit, lease, known)
        if found[1]:
            self._die("claimed")
        return found

    def _completing(self, edits: Sequence[Edit]) -> list[Edit]:
        """Completions about to be committed, which die inside the transaction."""
        self._die("completing")

        def dying(change: Callable[[TaskRow | None], Change[Any]]) -> Any:
            def inside(row: TaskRow | None) -> Change[Any]:
                decided = change(row)
                self._die("committing")
                return decided

            return inside

        # No decision in advance: the change (and the kill) happens inside the transaction.
        return [Edit(e.task_id, dying(e.change), e.fence) for e in edits]


def _postgres(prefix: str) -> Any:
    """A PostgresStore on $ROTA_PG_DSN; $PG_TIMEOUT sets its ``idle_timeout``;
    $FREEZE_AT (one of ``FAULT_POINTS``; $FREEZE=1: ``claim: synced``) makes the
    process SIGSTOP itself there, in the first transaction that reaches it holding
    rows (its row locks held: a frozen VM, a debugger, a long GC pause)."""
    from rota.store import PostgresStore

    point = os.environ.get("FREEZE_AT") or ("claim: synced" if os.environ.get("FREEZE") else "")

    class FreezingStore(PostgresStore):
        frozen = False

        def _at(self, here: str) -> None:
            if here == point and not self.frozen:
                self.frozen = True
                os.kill(os.getpid(), signal.SIGSTOP)

    bound = float(os.environ.get("PG_TIMEOUT", "10"))
    return FreezingStore(
        os.environ["ROTA_PG_DSN"], prefix=prefix, idle_timeout=bound,
    )  # fmt: skip


def _steppable_wall_clock(path: str) -> None:
    """Make this process's wall clock (``time.time``) step by the seconds written in
    ``path`` (read at each call): NTP stepping a drifted VM, a laptop waking. The
    monotonic clock is left alone, as the kernel leaves it."""
    real = time.time

    def stepped() -> float:
        try:
            with open(path) as f:
                return real() + float(f.read() or 0)
        except (OSError, ValueError):
            return real()

    time.time = stepped


def main() -> None:
    target = sys.argv[1]
    if os.environ.get("CLOCK_STEP_FILE"):
        _steppable_wall_clock(os.environ["CLOCK_STEP_FILE"])
    store: Any
    if target.startswith("pg:"):  # PostgreSQL ($ROTA_PG_DSN), tables with this prefix
        store = _postgres(target[3:])
    else:
        store = KillingStore(target, os.environ.get("KILL_AT", ""))
    offset = float(os.environ.get("CLOCK_OFFSET", "0"))  # a node whose clock is off
    sched = DurableScheduler(
        store,
        clock=lambda: time.time() + offset,
        lease=float(os.environ.get("LEASE", "1")),
        poll=0.05,
        batch=int(os.environ.get("BATCH", "1")),
        imports=True,  # it runs what the test process stored
    )
    for entry in filter(None, os.environ.get("ACTIONS", "").split(",")):
        name, path = entry.split("=")
        sched.register(name, resolve_path(path))
    ready = os.environ.get("READY_FILE")
    if ready:  # tell the test the node's runner is up (its start-up is not timed)
        sched.add_listener(lambda event: Path(ready).write_text("up"), "scheduler_started")
    run_for = float(os.environ.get("RUN_FOR", "0"))
    workers = int(os.environ.get("WORKERS", "0"))  # a pool of that many, else none
    runner = Runner(sched, executor=ThreadPoolExecutor(workers) if workers else None)
    if run_for:
        runner.start()
        time.sleep(run_for)
        runner.stop()
    else:
        runner.run_forever()


if __name__ == "__main__":
    main()
