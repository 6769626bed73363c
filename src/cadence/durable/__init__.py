"""Durable scheduling: :class:`DurableScheduler`, the Scheduler API over a store.

``DurableScheduler(SQLiteStore("jobs.db"))`` keeps every task in a SQLite
file: tasks survive restarts and ``kill -9``, several processes can share
the file, and each slot's run is recorded once. See ``docs/durability.md``.
"""

from ._scheduler import DurableScheduler, GivenBack, LeaseExpired, StoredError

__all__ = ["DurableScheduler", "GivenBack", "LeaseExpired", "StoredError"]
