"""Durable scheduling: :class:`DurableScheduler`, the Scheduler API over a store.

``DurableScheduler(SQLiteStore("jobs.db"))`` keeps every task in a SQLite
file: tasks survive restarts and ``kill -9``, several processes can share
the file, and each slot's run is recorded once. See ``docs/durability.md``.

``json_value`` (what a stored task's arguments may be) and ``resolve_path``
(how a stored ``"module:function"`` action is found) are the two rules of the
stored form that a job file's loader checks before anything is stored.
"""

from rota._core.codec import json_value, resolve_path
from rota._core.types import GivenBack, RunCancelled
from rota._scheduling.reads import Entry

from ._reads import zone_of
from ._rows import StoredError, removed
from ._scheduler import DurableScheduler
from ._tasks import LeaseExpired, StoredTasks

__all__ = [
    "DurableScheduler",
    "Entry",
    "GivenBack",
    "LeaseExpired",
    "RunCancelled",
    "StoredError",
    "StoredTasks",
    "json_value",
    "removed",
    "resolve_path",
    "zone_of",
]
