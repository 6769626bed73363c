"""procrastinate draining N deferred jobs from PostgreSQL: runs/s on stdout.

Usage: ``procrastinate_drain.py DSN N PROCESSES``. A database of its own is
created (procrastinate's schema is global) and its schema applied; N jobs
are deferred in one batch, then PROCESSES worker processes (its documented
multi-worker setup: ``run_worker`` in each, LISTEN/NOTIFY on, one job at a
time, exiting when the queue is empty) run them; the time until every job
has succeeded is measured. Its periodic tasks are deferred from cron
specifications with a minute's resolution, so they cannot be drained this
way; they go through the same job table.
"""

from __future__ import annotations

import sys
import uuid
from typing import Any

import procrastinate
import psycopg
from _timing import timed
from psycopg.conninfo import make_conninfo


def _app(conninfo: str) -> procrastinate.App:
    app = procrastinate.App(connector=procrastinate.PsycopgConnector(conninfo=conninfo))

    @app.task(name="noop")  # type: ignore[untyped-decorator]
    def noop(i: int) -> None:
        """The job: nothing, so the queue and store are measured."""

    return app


def _worker(conninfo: str, ready: Any, go: Any) -> None:
    app = _app(conninfo)
    with app.open():
        ready.set()
        go.wait()
        app.run_worker(wait=False, concurrency=1, install_signal_handlers=False)


def main() -> None:
    dsn, n, processes = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
    name = f"procrastinate_{uuid.uuid4().hex[:8]}"
    with psycopg.connect(dsn, autocommit=True) as c:
        c.execute(f"CREATE DATABASE {name}")
    conninfo = make_conninfo(dsn, dbname=name)
    try:
        app = _app(conninfo)
        with app.open():
            app.schema_manager.apply_schema()
            app.tasks["noop"].batch_defer(*({"i": i} for i in range(n)))

        def done(c: psycopg.Connection[Any]) -> bool:
            found = c.execute(
                "SELECT count(*) FROM procrastinate_jobs WHERE status = 'succeeded'"
            ).fetchone()
            return found is not None and found[0] == n

        elapsed = timed(_worker, (conninfo,), processes, conninfo, done)
    finally:
        with psycopg.connect(dsn, autocommit=True) as c:
            c.execute(f"DROP DATABASE {name} WITH (FORCE)")
    print(n / elapsed)


if __name__ == "__main__":
    main()
