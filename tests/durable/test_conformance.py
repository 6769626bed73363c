"""The public store conformance suite (:mod:`rota.testing`) on rota's three stores."""

from __future__ import annotations

import sqlite3
from pathlib import Path
from typing import Any

import pytest

from rota.store import MemoryStore, SQLiteStore, Store
from rota.testing import StoreConformance


class TestMemoryStore(StoreConformance):
    def make_store(self) -> Store:
        return MemoryStore()

    def corrupt(self, store: Store, task_id: str) -> None:
        # rows in memory are never JSON: the flag a database store sets on decoding
        store._rows[task_id].unreadable = "corrupt"  # type: ignore[attr-defined]

    def reopen(self, store: Store) -> Store:
        return store  # one process: the same object is the same data


class TestSQLiteStore(StoreConformance):
    @pytest.fixture(autouse=True)
    def _where(self, tmp_path: Path) -> None:
        self.path = tmp_path / "s.db"

    def make_store(self) -> Store:
        return SQLiteStore(self.path)

    def corrupt(self, store: Store, task_id: str) -> None:
        with sqlite3.connect(self.path) as db:
            db.execute("UPDATE rota_tasks SET spec = '{not json' WHERE task_id = ?", (task_id,))

    def reopen(self, store: Store) -> Store:
        return SQLiteStore(self.path)


class TestPostgresStore(StoreConformance):
    @pytest.fixture(autouse=True)
    def _where(self, pg_dsn: str, pg_prefix: str) -> None:
        self.dsn, self.prefix = pg_dsn, pg_prefix

    def make_store(self) -> Store:
        from rota.store import PostgresStore

        return PostgresStore(self.dsn, prefix=self.prefix, clock="caller")

    def corrupt(self, store: Store, task_id: str) -> None:
        import psycopg

        with psycopg.connect(self.dsn, autocommit=True) as db:
            db.execute(
                f"UPDATE {self.prefix}tasks SET spec = '{{not json' WHERE task_id = %s",
                (task_id,),
            )

    def reopen(self, store: Store) -> Any:
        return self.make_store()


def test_the_stores_sql_writes_only_the_statuses_the_transition_table_allows() -> None:
    """Stores change statuses in SQL, outside the engine's ``move()``: what they write
    is the one definition's (``CLAIMED``, ``RELEASED``), allowed by the table, and
    every status their SQL names is a status."""
    import re

    from rota._core.task import TRANSITIONS
    from rota._core.types import CLAIMED, LEASED, RELEASED, Status
    from rota.store import _base

    source = "".join(
        (Path(_base.__file__).parent / name).read_text()
        for name in ("_base.py", "_memory.py", "_sqlite.py", "_postgres.py")
    )
    written = re.findall(r"SET status = '([^']*)'", source)
    assert written, "no status written in SQL: the pattern no longer matches the stores"
    assert set(written) == {"{RUNNING}"}  # the constant, never a literal
    assert _base.RUNNING == CLAIMED
    assert all(CLAIMED in TRANSITIONS[s] for s in (Status.SCHEDULED, Status.QUEUED))
    assert RELEASED in TRANSITIONS[CLAIMED]
    assert {Status.QUEUED, CLAIMED} == LEASED
    named = re.findall(r"status (?:=|!=) '(\w+)'", source)
    assert named, "no status named in SQL: the pattern no longer matches the stores"
    assert {Status(name) for name in named} <= set(Status)
    assert "status IN (" not in source  # lists come from sql_set(), never spelled out
