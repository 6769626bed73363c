"""Shared fixtures: a manual clock that starts at an odd time, and a scheduler on it."""

from __future__ import annotations

import os
import uuid
from collections.abc import Iterator

import pytest

from cadence import ManualClock, Scheduler

START = 1000


@pytest.fixture
def clock() -> ManualClock:
    """A ManualClock at 1000, so code that assumes time starts at zero shows."""
    return ManualClock(START)


@pytest.fixture
def sched(clock: ManualClock) -> Scheduler:
    """A Scheduler on the manual clock, backoff 1."""
    return Scheduler(clock=clock)


@pytest.fixture
def pg_dsn() -> str:
    """The DSN of the PostgreSQL server ``make test`` starts (``tests/postgres_server.py``).

    Missing: a failure in CI (the server is part of the suite there), a skip
    elsewhere, saying how to get one.
    """
    dsn = os.environ.get("CADENCE_PG_DSN")
    if dsn:
        return dsn
    message = (
        "no PostgreSQL: run the suite through `make test` (it starts a throwaway server), "
        "or set CADENCE_PG_DSN"
    )
    if os.environ.get("CI"):
        pytest.fail(message)
    pytest.skip(message)


@pytest.fixture
def pg_prefix(pg_dsn: str) -> Iterator[str]:
    """A table prefix of this test's own in that database; its tables dropped after."""
    import psycopg

    prefix = f"t{uuid.uuid4().hex[:12]}_"
    yield prefix
    with psycopg.connect(pg_dsn, autocommit=True) as db:
        for table in ("tasks", "outcomes", "meta"):
            db.execute(f"DROP TABLE IF EXISTS {prefix}{table}")
        db.execute(f"DROP SEQUENCE IF EXISTS {prefix}seq")
