"""Stores written before the project's rename open and run under the new name.

The project was called cadence before its first release: its default tables were
``cadence_tasks``, ``cadence_outcomes`` and ``cadence_meta`` (PostgreSQL: and the
sequence ``cadence_seq``), and a command job's stored action was
``cadence.cli._command:run_command``. ``tests/fixtures/cadence-schema3.db`` and
``cadence-schema3.sql`` (a ``pg_dump``) were written by that code as it last stood
(commit 3e827c2's parent): a fixed-rate task that ran once, a command job due at
1_800_000_030, and a paused one-off task. Opened with the default prefix, each is
renamed (tables, sequence, indexes) and migrated to schema 4 in one transaction,
its import paths rewritten, and then runs as if it had been written today.
"""

from __future__ import annotations

import json
import shutil
import sqlite3
import subprocess
import sys
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from rota import DurableScheduler, ManualClock, Once, Status
from rota.store import PostgresStore, SQLiteStore, StoreError

FIXTURES = Path(__file__).parents[1] / "fixtures"
FORMER = "cadence_"
NOW = 1_800_000_000 + 60


def _old_sqlite(tmp_path: Path, name: str = "cadence-schema3.db") -> Path:
    path = tmp_path / "old.db"
    shutil.copy(FIXTURES / name, path)
    return path


def _sqlite_names(path: Path) -> dict[str, set[str]]:
    db = sqlite3.connect(path)
    try:
        names: dict[str, set[str]] = {"table": set(), "index": set()}
        for kind, name in db.execute("SELECT type, name FROM sqlite_master"):
            names[kind].add(name)
        return names
    finally:
        db.close()


def _runs_as_today(sched: DurableScheduler, clock: ManualClock) -> None:
    """What every renamed store must show: the history kept, the pause kept, the new
    import path stored, and both due tasks run (the command job by the new path)."""
    assert [h.slot for h in sched.history("every-minute")] == [1_800_000_000]
    row = sched.store.get("report")
    assert row is not None
    assert row.action == "rota.cli._command:run_command"
    held = sched.info("held")
    assert held is not None
    assert held.status is Status.SCHEDULED
    assert held.paused
    done = {(o.task_id, o.at, str(o.result), o.value) for o in sched.tick(clock())}
    assert done == {
        ("every-minute", 1_800_000_060, "ok", 5),
        ("report", 1_800_000_030, "ok", "hi\n"),
    }


def test_a_sqlite_store_written_under_the_former_name_is_renamed_and_runs(
    tmp_path: Path,
) -> None:
    path = _old_sqlite(tmp_path)
    clock = ManualClock(NOW)
    sched = DurableScheduler(SQLiteStore(path), clock=clock, imports=True)
    names = _sqlite_names(path)
    assert names["table"] == {"rota_meta", "rota_tasks", "rota_outcomes", "rota_nodes",
                              "rota_waits", "rota_audit", "rota_alerts", "rota_pools",
                              "rota_tags"}  # fmt: skip
    assert {"rota_due_by_action", "rota_owner"} <= names["index"]
    assert not [name for kind in names.values() for name in kind if FORMER in name]
    db = sqlite3.connect(path)
    try:
        version = db.execute("SELECT value FROM rota_meta WHERE key = 'schema_version'")
        assert version.fetchone() == (8,)
        assert db.execute("PRAGMA integrity_check").fetchone() == ("ok",)
    finally:
        db.close()
    _runs_as_today(sched, clock)
    # opened again: current, nothing more to do
    again = DurableScheduler(SQLiteStore(path), clock=clock, imports=True)
    assert [h.slot for h in again.history("report")] == [1_800_000_030]


def _status(url: str) -> list[dict[str, Any]]:
    """``rota status --json`` on ``url``, run as a user would."""
    done = subprocess.run(
        [sys.executable, "-m", "rota", "status", "--json", "--store", url],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    listed: list[dict[str, Any]] = json.loads(done.stdout)
    return listed


def test_the_command_reads_a_former_sqlite_store_without_creating_anything(
    tmp_path: Path,
) -> None:
    """``rota status`` opens stores without creating them (``create=False``): a former
    store is still a store, renamed on the way."""
    path = _old_sqlite(tmp_path)
    listed = {job["id"]: job for job in _status(f"sqlite:///{path}")}
    assert set(listed) == {"every-minute", "report", "held"}
    assert listed["held"]["paused"] is True
    assert "rota_tasks" in _sqlite_names(path)["table"]


def test_the_schema_1_fixture_is_renamed_and_migrated_forward(tmp_path: Path) -> None:
    """``schema1.db`` (cadence before the action index): renamed, then each step on."""
    path = _old_sqlite(tmp_path, "schema1.db")
    clock = ManualClock(NOW)
    sched = DurableScheduler(SQLiteStore(path), clock=clock, imports=True)
    names = _sqlite_names(path)
    assert "rota_due_by_action" in names["index"]
    assert not [name for kind in names.values() for name in kind if FORMER in name]
    done = {(o.task_id, str(o.result)) for o in sched.tick(clock())}
    assert done == {("every-minute", "ok"), ("report", "ok")}


def test_a_store_of_the_new_name_beside_former_tables_leaves_them_alone(
    tmp_path: Path,
) -> None:
    """Only a store with none of its own tables takes the former ones over; another
    prefix never does."""
    path = _old_sqlite(tmp_path)
    DurableScheduler(SQLiteStore(path, prefix="app_"), clock=ManualClock(NOW))
    names = _sqlite_names(path)
    assert {"app_tasks", "cadence_tasks"} <= names["table"]
    assert "rota_tasks" not in names["table"]
    fresh = tmp_path / "fresh.db"
    DurableScheduler(SQLiteStore(fresh), clock=ManualClock(NOW))
    assert not any(FORMER in name for name in _sqlite_names(fresh)["table"])


def test_a_newer_schema_is_still_refused_after_the_rename(tmp_path: Path) -> None:
    path = _old_sqlite(tmp_path)
    SQLiteStore(path).open()
    db = sqlite3.connect(path)
    with db:
        db.execute("UPDATE rota_meta SET value = 9 WHERE key = 'schema_version'")
    db.close()
    with pytest.raises(StoreError, match="schema version 9 is newer"):
        SQLiteStore(path).open()


# -- PostgreSQL ------------------------------------------------------------------


@pytest.fixture
def old_pg(pg_dsn: str) -> Iterator[str]:
    """A database of this test's own holding the fixture's dump; dropped after."""
    import psycopg
    from psycopg.conninfo import make_conninfo

    name = f"old_{uuid.uuid4().hex[:10]}"
    with psycopg.connect(pg_dsn, autocommit=True) as admin:
        admin.execute(f"CREATE DATABASE {name}")
    dsn = make_conninfo(pg_dsn, dbname=name)
    try:
        with psycopg.connect(dsn, autocommit=True) as db:
            db.execute((FIXTURES / "cadence-schema3.sql").read_text())
        yield dsn
    finally:
        with psycopg.connect(pg_dsn, autocommit=True) as admin:
            admin.execute(f"DROP DATABASE IF EXISTS {name} WITH (FORCE)")


def _pg_names(dsn: str) -> set[str]:
    import psycopg

    with psycopg.connect(dsn) as db:
        found = db.execute(
            "SELECT relname FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace "
            "WHERE n.nspname = 'public'"
        )
        return {name for (name,) in found}


def test_a_postgres_store_written_under_the_former_name_is_renamed_and_runs(
    old_pg: str,
) -> None:
    clock = ManualClock(NOW)
    sched = DurableScheduler(PostgresStore(old_pg, clock="caller"), clock=clock, imports=True)
    names = _pg_names(old_pg)
    assert {"rota_meta", "rota_tasks", "rota_outcomes", "rota_seq"} <= names
    assert {"rota_due_by_action", "rota_owner", "rota_tasks_pkey", "rota_outcomes_pkey"} <= names
    assert not [name for name in names if FORMER in name]
    import psycopg

    with psycopg.connect(old_pg) as db:
        version = db.execute("SELECT value FROM rota_meta WHERE key = 'schema_version'")
        assert version.fetchone() == ("8",)
    _runs_as_today(sched, clock)
    # the sequence goes on from where it was: a new task's seq follows the old ones
    sched.schedule("later", Once(at=1_900_000_000), "tests.durable.jobs:noop", args=[1])
    with psycopg.connect(old_pg) as db:
        seqs: Any = dict(db.execute("SELECT task_id, seq FROM rota_tasks").fetchall())
    assert seqs["later"] > max(seq for task, seq in seqs.items() if task != "later")
    sched.store.close()


def test_the_command_reads_a_former_postgres_store(old_pg: str) -> None:
    from psycopg.conninfo import conninfo_to_dict

    parts = conninfo_to_dict(old_pg)
    url = f"postgresql://{parts['user']}@{parts['host']}:{parts['port']}/{parts['dbname']}"
    assert {job["id"] for job in _status(url)} == {
        "every-minute",
        "report",
        "held",
    }
    assert "rota_tasks" in _pg_names(old_pg)
