"""What the real-time runners share: validation, reporting, stats and work in flight.

A driver turns the engine's primitives into real-time execution. Both the
thread :class:`~rota.Runner` and the :class:`~rota.AsyncRunner` claim
due runs from their scheduler (:meth:`Driver._dispatch_due`), execute them
with :meth:`Driver._process` (the clock read as ``started``, the action called
through the scheduler's one call site, the run completed whatever raises) and
:meth:`Driver._complete`, and report each outcome with :meth:`Driver._report`:
stats, log, then ``on_outcome``, outside every lock.

Rules every driver keeps (``docs/design.md`` has the full table):

* A claimed run is always completed and reported exactly once, whatever
  raises on the way (action, policy, clock, executor, ``on_outcome``).
* The clock is read through :meth:`Driver._now`: a reading that raises or is
  not a finite number is logged and replaced by the last good one, and the
  dispatcher retries after :data:`CLOCK_RETRY` seconds.
* A fatal error (a ``BaseException`` that is not an ``Exception``, other than
  asyncio's ``CancelledError``) from an action or a policy is recorded as its
  run's failure, logged at ERROR, and stops the runner: no run is claimed
  after it, and the runner's ``stop()`` re-raises it to its caller.
"""

from __future__ import annotations

import asyncio
import collections
import concurrent.futures
import logging
import threading
from collections.abc import Callable, Hashable
from functools import partial
from typing import Any

from rota._core import validate as _validate
from rota._core.events import Event, EventKind
from rota._core.task import Task, run_at
from rota._core.types import GivenBack, RunOutcome, Time, epoch_shown, recorded_result
from rota._core.validate import time_from
from rota._scheduling.actions import fatal
from rota._scheduling.scheduler import Scheduler

from .stats import Stats, StatsSnapshot

logger = logging.getLogger("rota.runner")
"""Runner life: starts, stops, fatal errors, clock and executor faults."""
runs_logger = logging.getLogger("rota.runs")
"""One line per run: its start at DEBUG, its end at INFO (failures at WARNING)."""

OnOutcome = Callable[[RunOutcome], object]

CLOCK_RETRY = 1.0
"""Real seconds a dispatcher waits before looking again after a clock, a store or a
policy failed it: long enough not to spin, short enough to recover promptly."""

FAULT_LOG_EVERY = 60
"""A dispatcher's look that fails the same way again is logged once in this many
times (about once a minute, at :data:`CLOCK_RETRY`): a store down for an hour logs
about 60 lines, not 3,600. Counted, not timed: a runner reads no time but its
scheduler's clock."""


NO_FAULT = ("", 0)


def is_fatal(error: BaseException | None) -> bool:
    """True for an error that stops a runner: see the module docstring. O(1)."""
    return error is not None and fatal(error) and not isinstance(error, asyncio.CancelledError)


class Turns:
    """Reports of one task's runs made in the order the runs ended, on any threads.

    A run takes its turn (:meth:`take`) before its completion is decided, so
    the run that completion queues (often the task's next) takes a later
    one, and its report waits for this one even when another worker finishes
    it first. A report is made (:meth:`make`) by the thread whose turn is
    first in its task's line; the reports that queued behind it meanwhile are
    made by that thread too, in order. Every turn taken must be made, or
    its task's later reports wait forever. O(1) per turn.
    """

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._lines: dict[Hashable, collections.deque[list[Callable[[], None] | None]]] = {}

    def take(self, key: Hashable) -> list[Callable[[], None] | None]:
        """Queue a turn for ``key``'s next report; the token to :meth:`make` it with."""
        turn: list[Callable[[], None] | None] = [None]
        with self._lock:
            line = self._lines.get(key)
            if line is None:
                line = self._lines[key] = collections.deque()
            line.append(turn)
        return turn

    def make(
        self, key: Hashable, turn: list[Callable[[], None] | None], report: Callable[[], None]
    ) -> None:
        """Make ``turn``'s ``report`` now if its turn has come, else leave it to the
        thread making the report before it. What a report raises is raised once the
        reports queued behind it are made."""
        with self._lock:
            turn[0] = report
            line = self._lines[key]
            if line[0] is not turn:
                return
        error: BaseException | None = None
        while True:
            try:
                report()
            except BaseException as exc:  # the later reports are still made
                error = error or exc
            with self._lock:
                # (the turn refers to its report, which refers to the turn: unlinked,
                # both are freed by reference counting, not by the cyclic collector)
                line.popleft()[0] = None
                if not line:
                    del self._lines[key]
                    break
                after = line[0][0]
                if after is None:  # its run has not ended yet: its thread makes it
                    break
                report = after
        if error is not None:
            raise error


class _Report:
    """The report of one run, once its completion is recorded (:meth:`then`, which
    the scheduler calls): made where the driver delivers it (:meth:`Driver._deliver`),
    in its task's turn (:class:`Turns`). An object, not closures over the run:
    two objects for the cyclic collector to track while a durable completion waits
    for its commit, not a dozen."""

    __slots__ = ("driver", "key", "reported", "took", "turn")

    def __init__(
        self, driver: Driver, key: Hashable, turn: list[Callable[[], None] | None], took: Time
    ) -> None:
        self.driver = driver
        self.key = key
        self.turn = turn
        self.took = took  # how long the action ran, by the runner's clock
        self.reported = False

    def then(self, outcome: RunOutcome) -> None:
        """The run's completion is recorded: deliver its report."""
        self.reported = True
        self.driver._deliver(self.report, outcome)

    def report(self, outcome: RunOutcome) -> None:
        """Report ``outcome`` in the task's turn (here, or by the thread whose report
        comes before it)."""
        self.driver._turns.make(self.key, self.turn, partial(self._reporting, outcome))

    def _reporting(self, outcome: RunOutcome) -> None:
        # Reporting is part of the run, on whichever thread it happens (a durable
        # scheduler reports from its committer thread): a stop() from on_outcome there
        # must not wait for the report it is in.
        driver = self.driver
        inside = driver._is_inside()
        driver._inside.active = True
        try:
            driver._report(outcome, self.took)
        finally:
            driver._inside.active = inside
            driver._finished(was_running=True)


class Driver:
    """Base of the runners: the parts of real-time dispatch that do not depend on
    threads or asyncio. Not public; see :class:`~rota.Runner`."""

    def __init__(
        self,
        scheduler: Scheduler,
        executor: concurrent.futures.Executor | None,
        on_outcome: OnOutcome | None,
    ) -> None:
        if not isinstance(scheduler, Scheduler):
            raise TypeError(f"scheduler must be a rota.Scheduler, got {scheduler!r}")
        if executor is not None and not isinstance(executor, concurrent.futures.Executor):
            raise TypeError(
                f"executor must be a concurrent.futures.Executor or None, got {executor!r}"
            )
        if isinstance(executor, concurrent.futures.ProcessPoolExecutor):
            raise TypeError(
                "executor must run work in this process (e.g. a ThreadPoolExecutor): runs "
                "complete on the worker, so a ProcessPoolExecutor cannot serve; call a process "
                f"pool from inside the action instead, got {executor!r}"
            )
        if on_outcome is not None:
            _validate.callable_("on_outcome", on_outcome)
        self._scheduler = scheduler
        self._table = scheduler.table  # the seam this runner drives
        self._clock = scheduler.clock
        self._executor = executor
        # A pool's size, if it tells (ThreadPoolExecutor does): a scheduler whose
        # claims hold leases is asked for runs in step with the workers (see _room).
        workers = getattr(executor, "_max_workers", None) if self._table.leases else None
        self._workers: int | None = workers if isinstance(workers, int) else None
        self._full = False  # claims held back: the pool has enough runs (see _room)
        self._on_outcome = on_outcome
        self._stats = Stats()
        # Work in flight: claimed runs not yet completed (queued + running).
        # Entered through its Lock, never the Condition: Condition.__enter__ is
        # Python code, and an interrupt just after its acquire would leak the lock.
        self._flight_lock = threading.Lock()
        self._flight = threading.Condition(self._flight_lock)
        self._queued = 0
        self._running = 0
        self._idle_waiters = 0  # threads in _wait_idle: only they need _flight notified
        self._inside = threading.local()  # set while this thread processes one of our runs
        # Claims and the stop flag change under the gate: after stop() no run is claimed.
        self._gate = threading.Lock()
        self._stopping = False
        self._fatal: BaseException | None = None
        self._last_now: Time = 0
        self._retry_soon = False
        self._fault = NO_FAULT  # the last failure of a look, and how many in a row
        self._turns = Turns()

    # -- the clock -------------------------------------------------------

    def _first_reading(self) -> None:
        """Read the clock once at start: a clock broken from the start fails ``start()``."""
        self._last_now = time_from("the clock", self._clock())

    def _now(self) -> Time:
        """The clock's reading; if it raises or returns garbage, the last good one.

        The failure is logged at ERROR with its traceback and flags
        ``_retry_soon`` so that the dispatcher waits :data:`CLOCK_RETRY`
        before trying again. A ``BaseException`` that is not an ``Exception``
        propagates (the caller completes its run with it). O(1).
        """
        try:
            now = time_from("the clock", self._clock())
        except Exception:
            logger.exception("the clock failed; using its last reading, %r", self._last_now)
            self._retry_soon = True
            return self._last_now
        self._last_now = now
        return now

    def _look_failed(self, what: str, error: Exception) -> None:
        """A dispatcher's look at the schedule (``what``: claiming due runs, reading
        the next run's time) raised: a store that cannot be reached, a clock or a
        policy that raises. The dispatcher goes on: it looks again after
        :data:`CLOCK_RETRY` real seconds. Logged at ERROR with the traceback; the
        same failure again once in :data:`FAULT_LOG_EVERY` times. O(1)."""
        self._retry_soon = True
        key = f"{what} failed: {_one_line(error)}"
        last, times = self._fault
        times = times + 1 if key == last else 0
        self._fault = (key, times)
        if times % FAULT_LOG_EVERY == 0:
            logger.error("%s failed (%d times in a row); the dispatcher looks again in %gs",
                         what, times + 1, CLOCK_RETRY, exc_info=error)  # fmt: skip

    def _dispatcher_ended(self, error: BaseException) -> None:
        """The dispatcher ended with ``error`` (a fatal error, or a bug that escaped
        :meth:`_look_failed`): never silently. It is kept as the runner's fatal error,
        so :meth:`stop` and ``run_forever`` raise it (a process exits non-zero)."""
        logger.critical("the dispatcher ended: %s; no run is claimed any more",
                        _one_line(error), exc_info=error)  # fmt: skip
        self._stop_for(error, "the dispatcher ended")

    # -- dispatching -----------------------------------------------------

    def _dispatch_due(self) -> None:
        """Claim every run due now; run it here or hand it to the executor. O(k log n)."""
        table = self._table
        queued = self._executor is not None
        while True:
            with self._gate:
                if self._stopping:
                    return
                # room 0: only runs the scheduler already holds (a finishing run pokes
                # the loop, see _finished)
                task = table.claim(self._now(), queued=queued, room=self._room())
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

    def _poke(self) -> None:
        """Have the dispatcher look for due runs again soon (any thread)."""
        raise NotImplementedError

    def _halt(self) -> None:
        """Stop claiming runs (the runner's own wake-up is the subclass's business)."""
        with self._gate:
            self._stopping = True

    def stats(self) -> StatsSnapshot:
        """Runs by result, runs in progress and queued, and lag percentiles.

        Lag (``started - at``, in clock units) over the recent window is the
        best sign of overload: p99 growing means runs start ever later. O(w log w)
        for a window of w runs.
        """
        with self._flight_lock:
            running, queued = self._running, self._queued
        return self._stats.snapshot(running=running, queued=queued)

    # -- work in flight --------------------------------------------------

    def _claimed(self, *, queued: bool) -> None:
        with self._flight_lock:
            if queued:
                self._queued += 1
            else:
                self._running += 1

    def _started(self) -> None:
        with self._flight_lock:
            self._queued -= 1
            self._running += 1

    def _finished(self, *, was_running: bool) -> None:
        with self._flight_lock:
            if was_running:
                self._running -= 1
            else:
                self._queued -= 1
            if self._idle_waiters:  # (notify_all is Python code: three calls a run)
                self._flight.notify_all()
            full, self._full = self._full, False
        if full:  # maybe room again: let the dispatcher look
            self._poke()

    def _room(self) -> int | None:
        """How many runs a pool whose claims are bounded (see ``Tasks.leases``)
        takes now, else ``None`` (no bound).

        At most one pool's worth waits beyond the busy workers, and claims come in
        chunks: nothing is claimed while more than ``workers`` runs are in flight,
        then up to ``2 * workers`` minus those. So no worker idles while runs are
        due, a claim (one commit) serves a pool's worth of runs, and the rest stay
        claimable by other nodes. When nothing may be claimed, :attr:`_full` holds
        the dispatcher back (no claim, no busy loop) until a run finishes. O(1).
        """
        workers = self._workers
        if workers is None:
            return None
        with self._flight_lock:
            in_flight = self._queued + self._running
            room = 2 * workers - in_flight if in_flight <= workers else 0
            self._full = room <= 0
            return room

    def _in_flight(self) -> int:
        with self._flight_lock:
            return self._queued + self._running

    def _is_inside(self) -> bool:
        """True on a thread that is processing one of this runner's runs."""
        return bool(getattr(self._inside, "active", False))

    def _wait_idle(self, timeout: float | None) -> bool:
        """Wait (real seconds) until no run is in flight."""
        with self._flight_lock:
            self._idle_waiters += 1
            try:
                return self._flight.wait_for(lambda: self._queued + self._running == 0, timeout)
            finally:
                self._idle_waiters -= 1

    def _raise_fatal(self) -> None:
        """Re-raise, once, the fatal error that stopped this runner (for ``stop()``)."""
        error, self._fatal = self._fatal, None
        if error is not None:
            raise error

    # -- executing and reporting -----------------------------------------

    def _process(self, task: Task, *, awaitables: bool = False, linger: bool = False) -> Any:
        """Execute a running run on this thread and complete it, whatever raises.

        Returns ``None``, or the awaitable the action returned when
        ``awaitables`` is true (with its start time: ``(awaitable, started)``;
        the caller completes that run when it ends). ``linger``: this thread
        claims again right after (see :meth:`~rota.Tasks.complete_later`).
        O(1) plus the action.
        """
        self._inside.active = True
        completed = False
        try:
            started = self._now()
            if runs_logger.isEnabledFor(logging.DEBUG):
                runs_logger.debug(
                    "task %r: run at %s starting (lag %s)",
                    task.task_id,
                    self._time_shown(run_at(task)),
                    _seconds(started - run_at(task)),
                )
            result = self._table.call(task, awaitables=awaitables)
            if result is not None and not isinstance(result, BaseException):
                completed = True  # handed back: the caller completes it
                return result, started
            completed = True
            self._complete(task, result, started, linger=linger)
            return None
        except BaseException as exc:  # the clock, or an interrupt between call and completion
            if not completed:
                self._complete(task, exc, self._last_now, linger=linger)
            raise
        finally:
            self._inside.active = False

    def _complete(
        self, task: Task, error: BaseException | None, started: Time, *, linger: bool = False
    ) -> None:
        """Complete a running run, report its outcome, then count it as finished.

        Reported before it stops counting as in flight: a waiting ``stop()``
        returns only once ``on_outcome`` has seen every run. The scheduler
        reports through ``then``, at once in memory; a durable scheduler may
        report a little later, once the completion is committed (group
        commit, :meth:`~rota.Tasks.complete_later`). The report is made where
        :meth:`_deliver` says.
        """
        try:
            finished = self._now()
        except BaseException as exc:  # a clock raising a fatal error: that is the run's end
            error, finished = exc, started
        key = task.task_id
        # (the turn is taken before the completion queues the task's next run)
        report = _Report(self, key, self._turns.take(key), finished - started)
        try:
            self._table.complete_later(task, error, started, finished, report.then, linger=linger)
        except BaseException:
            if not report.reported:
                self._turns.make(key, report.turn, partial(self._finished, was_running=True))
            raise

    def _deliver(self, report: Callable[[RunOutcome], None], outcome: RunOutcome) -> None:
        """Make a finished run's report, ``report(outcome)``: here, on the thread that
        finished it."""
        report(outcome)

    def _never_ran(self, task: Task, future: concurrent.futures.Future[Any] | Any) -> None:
        """Fail the run of a future that ended without running it (cancelled, failed, dropped).

        ``future`` is a ``concurrent.futures`` or an asyncio future. The run
        fails with the future's exception, or ``CancelledError`` (an
        ``Exception``: retried per policy), and is logged at ERROR.
        """
        error = None if future.cancelled() else future.exception()
        if error is None:
            error = concurrent.futures.CancelledError(
                f"run of {task.task_id!r}: executor dropped it"
            )
        logger.error("executor did not run task %r: %r", task.task_id, error)
        self._abandon(task, error)

    def _abandon(self, task: Task, error: BaseException) -> None:
        """Fail a queued run that will never reach a worker, so its task never sticks."""
        if self._table.start(task):
            self._started()
            self._complete(task, error, self._now())
        else:  # cancelled while queued
            self._finished(was_running=False)

    def _time_shown(self, t: Time) -> str:
        """A time for the log: ISO 8601 UTC on an epoch clock, else the number."""
        return epoch_shown(t) if self._scheduler.epoch else repr(t)

    def _report(self, outcome: RunOutcome, took: Time) -> None:
        """Count and log one outcome, stop on a fatal error, then call ``on_outcome``.

        ``took`` is how long the action ran, both ends read from this
        runner's clock: a durable scheduler shifts ``outcome.started`` onto
        its store's clock, so ``outcome`` alone cannot say it.

        The log line (logger ``rota.runs``) names the task, the run's time
        (wall-clock time on an epoch clock), the result, the attempt, how
        long it ran and its lag, and the error's first line: INFO for ``ok``,
        WARNING for a ``retry``, ERROR with the traceback for ``failed`` (for
        good), INFO as ``cancelled`` for a run stopped because its task was
        cancelled (:class:`~rota.RunCancelled`). The record carries them as
        fields too (``job``, ``at``, ``attempt``, ``result``, ``duration``,
        ``lag``, ``error``, ``node``),
        for a formatter that ships them (``rota --log-format json``).
        ``on_outcome``'s exceptions (any ``Exception``) are logged and change
        nothing; a fatal one stops the runner like a fatal action error.
        """
        self._stats.record(outcome)
        error = outcome.error
        shown = recorded_result(outcome.result, error)  # cancelled: someone asked, no alert
        level = (
            logging.ERROR if shown == "failed"
            else logging.WARNING if shown == "retry"
            else logging.INFO
        )  # fmt: skip
        if runs_logger.isEnabledFor(level) and not isinstance(error, GivenBack):
            summary = None if error is None else _one_line(error)
            runs_logger.log(
                level,
                "task %r: run at %s %s (attempt %d) in %s, lag %s%s%s",
                outcome.task_id,
                self._time_shown(outcome.at),
                shown,
                outcome.attempt,
                _seconds(took),
                _seconds(outcome.lag),
                f" (after a jitter of {_seconds(outcome.jitter)})" if outcome.jitter else "",
                "" if summary is None else f": {summary}",
                exc_info=error if level == logging.ERROR else None,
                extra={
                    "job": str(outcome.task_id), "at": outcome.at, "attempt": outcome.attempt,
                    "result": shown, "duration": took, "lag": outcome.lag,
                    "jitter": outcome.jitter,
                    "error": summary, "node": getattr(self._scheduler, "node", None),
                },
            )  # fmt: skip
        if is_fatal(error):
            assert error is not None
            self._stop_for(error, f"task {outcome.task_id!r} raised {error!r}")
        if self._on_outcome is not None:
            try:
                self._on_outcome(outcome)
            except Exception:
                logger.exception("on_outcome raised for %r; ignored", outcome)
            except BaseException as exc:
                self._stop_for(exc, f"on_outcome raised {exc!r}")

    def _started_event(self) -> None:
        logger.info("%s started", type(self).__name__)
        self._table.emit(Event(EventKind.SCHEDULER_STARTED))

    def _stopped_event(self) -> None:
        logger.info("%s stopped", type(self).__name__)
        self._table.emit(Event(EventKind.SCHEDULER_STOPPED))

    def _stop_for(self, error: BaseException, what: str) -> None:
        """A fatal error: log it, keep the first for ``stop()`` to raise, stop claiming."""
        logger.error("%s: the runner stops", what)
        with self._gate:
            if self._fatal is None:
                self._fatal = error
        self._halt()


def _one_line(error: BaseException) -> str:
    """An error as one line: its type and the first line of its message."""
    lines = str(error).strip().splitlines()
    return f"{type(error).__name__}: {lines[0]}" if lines else type(error).__name__


def _seconds(duration: Time) -> str:
    """A duration for the log, in seconds with three decimals."""
    return f"{duration:.3f}s"
