"""cadence: a deterministic in-process task scheduler.

One engine drives both tests and production: a :class:`Scheduler` with an
injected clock runs what is due when you call :meth:`Scheduler.tick`, and
:class:`Runner` / :class:`AsyncRunner` drive the same scheduler in real time.

Policies have a public module each, re-exported here: :mod:`cadence.schedules`
(when a task runs), :mod:`cadence.retry` (how long a failed run waits),
:mod:`cadence.misfire` (what a recurring task does about missed slots), and
:mod:`cadence.cron` (cron expressions; extra ``cadence[cron]``).
"""

from ._async import AsyncRunner
from ._clock import ManualClock
from ._runner import Runner
from ._scheduler import Scheduler
from ._stats import Stats, StatsSnapshot
from ._types import Result, RunOutcome, Status
from .misfire import Misfire
from .retry import Backoff, NoRetry, RetryPolicy
from .schedules import Cursor, FixedDelay, FixedRate, Once, Schedule

__all__ = [
    "AsyncRunner",
    "Backoff",
    "Cursor",
    "FixedDelay",
    "FixedRate",
    "ManualClock",
    "Misfire",
    "NoRetry",
    "Once",
    "Result",
    "RetryPolicy",
    "RunOutcome",
    "Runner",
    "Schedule",
    "Scheduler",
    "Stats",
    "StatsSnapshot",
    "Status",
]
