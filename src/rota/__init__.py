"""rota: a deterministic in-process task scheduler.

One engine drives both tests and production: a :class:`Scheduler` with an
injected clock runs what is due when you call :meth:`Scheduler.tick`, and
:class:`Runner` / :class:`AsyncRunner` drive the same scheduler in real time.

Policies have a public module each, re-exported here: :mod:`rota.schedules`
(when a task runs), :mod:`rota.retry` (how long a failed run waits),
:mod:`rota.misfire` (what a recurring task does about missed slots),
:mod:`rota.overlap` (what a slot due while a run is in flight does), and
:mod:`rota.cron` (cron expressions; extra ``rota[cron]``).

:class:`DurableScheduler` is the same API over a durable store
(:mod:`rota.store`: SQLite by default): tasks survive restarts and
``kill -9``, and several processes share one schedule.
"""

import importlib as _importlib
import typing as _typing

from rota._core.calls import RunContext
from rota._core.clock import ManualClock
from rota._core.deps import Upstream
from rota._core.events import Event, EventKind
from rota._core.moves import Upcoming
from rota._core.pools import Pool
from rota._core.types import Result, RunCancelled, RunOutcome, Status, TaskInfo
from rota._runners.stats import Stats, StatsSnapshot
from rota._scheduling.scheduler import Scheduler
from rota._scheduling.tasks import Tasks
from rota.misfire import Misfire
from rota.overlap import Overlap
from rota.retry import Backoff, NoRetry, RetryPolicy
from rota.schedules import Cursor, FixedDelay, FixedRate, Once, Schedule

if _typing.TYPE_CHECKING:
    from rota._runners.aio import AsyncRunner
    from rota._runners.thread import Runner
    from rota.durable import DurableScheduler

# The runners pull in threading, logging, concurrent.futures and asyncio, the
# durable scheduler sqlite3: they are imported on first use, so `import rota`
# for tests and tick stays light, and in-memory mode never loads store code.
_LAZY = {
    "Runner": "rota._runners.thread",
    "AsyncRunner": "rota._runners.aio",
    "DurableScheduler": "rota.durable",
}


def __getattr__(name: str) -> _typing.Any:
    if name in _LAZY:
        value = getattr(_importlib.import_module(_LAZY[name], __name__), name)
        globals()[name] = value
        return value
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(_LAZY))


__version__ = "0.2.0"

__all__ = [
    "AsyncRunner",
    "Backoff",
    "Cursor",
    "DurableScheduler",
    "Event",
    "EventKind",
    "FixedDelay",
    "FixedRate",
    "ManualClock",
    "Misfire",
    "NoRetry",
    "Once",
    "Overlap",
    "Pool",
    "Result",
    "RetryPolicy",
    "RunCancelled",
    "RunContext",
    "RunOutcome",
    "Runner",
    "Schedule",
    "Scheduler",
    "Stats",
    "StatsSnapshot",
    "Status",
    "TaskInfo",
    "Tasks",
    "Upcoming",
    "Upstream",
]
