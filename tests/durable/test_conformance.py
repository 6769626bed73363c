"""The public store conformance suite (:mod:`cadence.testing`) on cadence's three stores."""

from __future__ import annotations

import sqlite3
from pathlib import Path
from typing import Any

import pytest

from cadence.store import MemoryStore, SQLiteStore, Store
from cadence.testing import StoreConformance


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
            db.execute("UPDATE cadence_tasks SET spec = '{not json' WHERE task_id = ?", (task_id,))

    def reopen(self, store: Store) -> Store:
        return SQLiteStore(self.path)


class TestPostgresStore(StoreConformance):
    @pytest.fixture(autouse=True)
    def _where(self, pg_dsn: str, pg_prefix: str) -> None:
        self.dsn, self.prefix = pg_dsn, pg_prefix

    def make_store(self) -> Store:
        from cadence.store import PostgresStore

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
