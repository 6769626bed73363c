"""cadence: a deterministic in-process task scheduler.

One engine drives both tests and production: a :class:`Scheduler` with an
injected clock runs what is due when you call :meth:`Scheduler.tick`, and
:class:`Runner` / :class:`AsyncRunner` drive the same scheduler in real time.
"""

from ._clock import ManualClock
from ._scheduler import Scheduler
from ._types import Result, RunOutcome, Status

__all__ = ["ManualClock", "Result", "RunOutcome", "Scheduler", "Status"]
