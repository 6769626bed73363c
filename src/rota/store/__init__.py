"""Durable stores: where a :class:`~rota.durable.DurableScheduler` keeps tasks.

* :class:`SQLiteStore`: the embedded default, one file, no server (standard
  library); several processes on one host may share it.
* :class:`PostgresStore`: one schedule shared by processes on many hosts
  (extra ``rota[postgres]``: psycopg 3; imported on first use).
* :class:`MemoryStore`: the same protocol in memory (simulations, tests,
  ``memory:``).

:func:`open_store` turns a store URL (``sqlite:///relative.db``,
``sqlite:////absolute.db``, ``postgresql://user@host:port/db``, ``memory:``)
into an opened store. The protocol
a store implements is :class:`Store`; its rows are :class:`TaskRow` and
:class:`OutcomeRow`.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

from rota._core.types import StoreError

from ._base import (
    Change,
    Edit,
    Known,
    Listed,
    NodeRow,
    OutcomeRow,
    Store,
    TaskRow,
    redacted,
)
from ._ledger import AlertRow, AuditRow, Ledger, MemoryLedger
from ._memory import MemoryStore
from ._sqlite import SQLiteStore

if TYPE_CHECKING:
    from ._postgres import PostgresStore


def __getattr__(name: str) -> Any:
    if name == "PostgresStore":  # needs psycopg: imported only when asked for
        return _postgres_module().PostgresStore
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def _postgres_module() -> Any:
    """The module of :class:`PostgresStore`, imported now. Raises ``ImportError``
    naming the extra when psycopg is not installed."""
    try:
        return importlib.import_module("._postgres", __name__)
    except ModuleNotFoundError as exc:
        if exc.name is None or exc.name.partition(".")[0] != "psycopg":
            raise
        raise ImportError(
            "rota.store.PostgresStore needs the postgres extra: pip install 'rota[postgres]'"
        ) from exc


def open_store(url: str, *, create: bool = True) -> Store:
    """Open (creating or migrating the schema) the store a URL names.

    ``sqlite:///path.db`` (relative to the working directory),
    ``sqlite:////abs/path.db``, ``postgresql://...`` (or ``postgres://``; extra
    ``rota[postgres]``) or ``memory:``. Raises ``TypeError`` for a
    non-str and :class:`StoreError` for a URL of no known kind (or what the
    store's ``open`` raises); with ``create`` false, also for a store that does not
    exist yet (a missing SQLite file, no rota tables in the database): nothing is
    created. Messages show the URL :func:`redacted`.
    """
    if not isinstance(url, str):
        raise TypeError(f"url must be a str, got {url!r}")
    store: Store
    if url == "memory:":
        store = MemoryStore()
    elif url.startswith("sqlite:///") and len(url) > len("sqlite:///"):
        store = SQLiteStore(url[len("sqlite:///") :], create=create)
    elif url.startswith(("postgresql://", "postgres://")):
        try:
            postgres = _postgres_module()
        except ImportError as exc:
            raise StoreError(f"store URL {redacted(url)!r}: {exc}") from None
        store = postgres.PostgresStore(url, create=create)
    else:
        raise StoreError(
            f"store URL {redacted(url)!r} is not one of sqlite:///relative/path.db, "
            "sqlite:////absolute/path.db, postgresql://user@host:port/dbname, memory:"
        )
    store.open()
    return store


__all__ = [
    "AlertRow",
    "AuditRow",
    "Change",
    "Edit",
    "Known",
    "Ledger",
    "Listed",
    "MemoryLedger",
    "MemoryStore",
    "NodeRow",
    "OutcomeRow",
    "PostgresStore",
    "SQLiteStore",
    "Store",
    "StoreError",
    "TaskRow",
    "open_store",
    "redacted",
]
