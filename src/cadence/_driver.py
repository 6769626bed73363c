"""What the real-time runners share: validation, reporting, stats and work in flight.

A driver turns the engine's primitives into real-time execution. Both the
thread :class:`~cadence.Runner` and the :class:`~cadence.AsyncRunner` claim
due runs from their scheduler, execute them with :meth:`Driver._execute` (the
clock is read as ``started``, the action called through the scheduler's one
call site, the run completed) and report each outcome with
:meth:`Driver._report`: stats, log, then ``on_outcome``, outside every lock.
"""

from __future__ import annotations

import concurrent.futures
import logging
import threading
from collections.abc import Callable
from typing import Any

from . import _validate
from ._engine import Task
from ._scheduler import Scheduler
from ._stats import Stats, StatsSnapshot
from ._types import Result, RunOutcome, Time

logger = logging.getLogger("cadence")

OnOutcome = Callable[[RunOutcome], object]


class Driver:
    """Base of the runners: the parts of real-time dispatch that do not depend on
    threads or asyncio. Not public; see :class:`~cadence.Runner`."""

    def __init__(
        self,
        scheduler: Scheduler,
        executor: concurrent.futures.Executor | None,
        on_outcome: OnOutcome | None,
    ) -> None:
        if not isinstance(scheduler, Scheduler):
            raise TypeError(f"scheduler must be a cadence.Scheduler, got {scheduler!r}")
        if executor is not None and not isinstance(executor, concurrent.futures.Executor):
            raise TypeError(
                f"executor must be a concurrent.futures.Executor or None, got {executor!r}"
            )
        if on_outcome is not None:
            _validate.callable_("on_outcome", on_outcome)
        self._scheduler = scheduler
        self._clock = scheduler.clock
        self._executor = executor
        self._on_outcome = on_outcome
        self._stats = Stats()
        # Work in flight: claimed runs not yet completed (queued + running).
        self._flight = threading.Condition(threading.Lock())
        self._queued = 0
        self._running = 0
        self._inside = threading.local()  # set while this thread runs one of our actions

    _stopping: bool

    def _dispatch_due(self) -> None:
        """Claim every run due now; run it here or hand it to the executor. O(k log n)."""
        clock, scheduler = self._clock, self._scheduler
        queued = self._executor is not None
        while not self._stopping:
            task = scheduler._claim(clock(), queued=queued)
            if task is None:
                return
            self._claimed(queued=queued)
            if queued:
                self._hand_off(task)
            else:
                self._run_here(task)

    def _hand_off(self, task: Task) -> None:
        """Give a claimed (queued) run to the executor."""
        raise NotImplementedError

    def _run_here(self, task: Task) -> None:
        """Execute a claimed run on the calling thread."""
        raise NotImplementedError

    def stats(self) -> StatsSnapshot:
        """Runs by result, runs in progress and queued, and lag percentiles.

        Lag (``started - at``, in clock units) over the recent window is the
        best sign of overload: p99 growing means runs start ever later. O(w log w)
        for a window of w runs.
        """
        with self._flight:
            running, queued = self._running, self._queued
        return self._stats.snapshot(running=running, queued=queued)

    # -- work in flight --------------------------------------------------

    def _claimed(self, *, queued: bool) -> None:
        with self._flight:
            if queued:
                self._queued += 1
            else:
                self._running += 1

    def _started(self) -> None:
        with self._flight:
            self._queued -= 1
            self._running += 1

    def _finished(self, *, was_running: bool) -> None:
        with self._flight:
            if was_running:
                self._running -= 1
            else:
                self._queued -= 1
            self._flight.notify_all()

    def _in_flight(self) -> int:
        with self._flight:
            return self._queued + self._running

    def _wait_idle(self, timeout: float | None) -> bool:
        """Wait (real seconds) until no run is in flight but the caller's own."""
        own = 1 if getattr(self._inside, "active", False) else 0
        with self._flight:
            return self._flight.wait_for(
                lambda: self._queued + self._running <= own, timeout=timeout
            )

    # -- executing and reporting -----------------------------------------

    def _execute(self, task: Task, *, awaitables: bool = False) -> tuple[Any, Time]:
        """Read the clock, call the action; return (what ``_call`` returned, started)."""
        started = self._clock()
        self._inside.active = True
        try:
            return self._scheduler._call(task, awaitables=awaitables), started
        finally:
            self._inside.active = False

    def _complete(self, task: Task, error: BaseException | None, started: Time) -> RunOutcome:
        """Complete a running run, count it as finished, and report its outcome."""
        try:
            outcome = self._scheduler._complete(task, error, started, self._clock())
        finally:
            self._finished(was_running=True)
        self._report(outcome)
        return outcome

    def _abandon(self, task: Task, error: BaseException) -> None:
        """Fail a queued run that will never reach a worker, so its task never sticks."""
        if self._scheduler._start(task):
            self._started()
            self._complete(task, error, self._clock())
        else:  # cancelled while queued
            self._finished(was_running=False)

    def _report(self, outcome: RunOutcome) -> None:
        """Count and log one outcome, then call ``on_outcome`` (its errors are logged)."""
        self._stats.record(outcome)
        if outcome.result is Result.FAILED:
            logger.warning(
                "task %r: run at %r failed (attempt %d)",
                outcome.task_id,
                outcome.at,
                outcome.attempt,
                exc_info=outcome.error,
            )
        elif outcome.result is Result.RETRY:
            logger.info(
                "task %r: run at %r failed (attempt %d), will retry: %r",
                outcome.task_id,
                outcome.at,
                outcome.attempt,
                outcome.error,
            )
        if self._on_outcome is not None:
            try:
                self._on_outcome(outcome)
            except Exception:
                logger.exception("on_outcome raised for %r; ignored", outcome)
