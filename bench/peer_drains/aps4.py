"""APScheduler 4 (pre-release) draining N due schedules from PostgreSQL: runs/s on stdout.

Run by ``bench/durable.py`` in a virtualenv of its own (APScheduler 3, the
other peer, is the same distribution). Usage: ``aps4.py DSN N PROCESSES``:
N date-triggered schedules are stored (for tomorrow, then made due now in
SQL: one added with a past date never fires) in a fresh schema through
``SQLAlchemyDataStore`` (psycopg), then PROCESSES schedulers (its documented
multi-node setup: one data store, the ``PsycopgEventBroker``) process them;
the time until every schedule has fired and every job is released is
measured (a fired schedule is deleted later, by a periodic clean-up).
"""

from __future__ import annotations

import sys
import uuid
from datetime import UTC, datetime, timedelta
from typing import Any

import psycopg
from _timing import timed


def noop() -> None:
    """The job: nothing, so the scheduler and store are measured."""


def _scheduler(dsn: str, schema: str) -> Any:
    from apscheduler import Scheduler
    from apscheduler.datastores.sqlalchemy import SQLAlchemyDataStore
    from apscheduler.eventbrokers.psycopg import PsycopgEventBroker
    from psycopg.conninfo import conninfo_to_dict
    from sqlalchemy import URL

    info = conninfo_to_dict(dsn)
    url = URL.create(
        "postgresql+psycopg", username=info.get("user"), password=info.get("password"),
        host=info.get("host"), port=int(str(info.get("port", 5432))), database=info.get("dbname"),
    )  # fmt: skip
    return Scheduler(SQLAlchemyDataStore(url, schema=schema), PsycopgEventBroker(dsn))


def _node(dsn: str, schema: str, ready: Any, go: Any) -> None:
    with _scheduler(dsn, schema) as scheduler:
        ready.set()
        go.wait()
        scheduler.run_until_stopped()


def main() -> None:
    dsn, n, processes = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
    schema = f"aps4_{uuid.uuid4().hex[:8]}"
    with psycopg.connect(dsn, autocommit=True) as c:
        c.execute(f"CREATE SCHEMA {schema}")
    try:
        from apscheduler.triggers.date import DateTrigger

        with _scheduler(dsn, schema) as seeder:
            later = datetime.now(UTC) + timedelta(days=1)
            for i in range(n):
                seeder.add_schedule(noop, DateTrigger(later), id=f"t{i}", misfire_grace_time=None)
        with psycopg.connect(dsn, autocommit=True) as c:  # all due now (a past date never fires)
            c.execute(f"UPDATE {schema}.schedules SET next_fire_time = now() - interval '1 s'")

        def done(c: psycopg.Connection[Any]) -> bool:  # fired (job made), every job released
            return c.execute(
                f"SELECT (SELECT count(*) FROM {schema}.schedules WHERE next_fire_time "
                f"IS NULL), (SELECT count(*) FROM {schema}.jobs)"
            ).fetchone() == (n, 0)

        elapsed = timed(_node, (dsn, schema), processes, dsn, done)
    finally:
        with psycopg.connect(dsn, autocommit=True) as c:
            c.execute(f"DROP SCHEMA {schema} CASCADE")
    print(n / elapsed)


if __name__ == "__main__":
    main()
