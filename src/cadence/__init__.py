"""cadence: a deterministic in-process task scheduler.

One engine drives both tests and production: a :class:`Scheduler` with an
injected clock runs what is due when you call :meth:`Scheduler.tick`, and
:class:`Runner` / :class:`AsyncRunner` drive the same scheduler in real time.
"""

from ._async import AsyncRunner
from ._clock import ManualClock
from ._runner import Runner
from ._scheduler import Scheduler
from ._stats import Stats, StatsSnapshot
from ._types import Result, RunOutcome, Status

__all__ = [
    "AsyncRunner",
    "ManualClock",
    "Result",
    "RunOutcome",
    "Runner",
    "Scheduler",
    "Stats",
    "StatsSnapshot",
    "Status",
]
