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

from ._calls import RunContext
from ._clock import ManualClock
from ._events import Event, EventKind
from ._scheduler import Scheduler
from ._stats import Stats, StatsSnapshot
from ._tasks import Tasks
from ._types import Result, RunCancelled, RunOutcome, Status, TaskInfo
from .misfire import Misfire
from .overlap import Overlap
from .retry import Backoff, NoRetry, RetryPolicy
from .schedules import Cursor, FixedDelay, FixedRate, Once, Schedule

if _typing.TYPE_CHECKING:
    from ._async import AsyncRunner
    from ._runner import Runner
    from .durable import DurableScheduler

# The runners pull in threading, logging, concurrent.futures and asyncio, the
# durable scheduler sqlite3: they are imported on first use, so `import rota`
# for tests and tick stays light, and in-memory mode never loads store code.
_LAZY = {"Runner": "._runner", "AsyncRunner": "._async", "DurableScheduler": ".durable"}


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
]
