"""Scheduler: the engine, one lock and an injected clock."""

from __future__ import annotations

import inspect
import threading
import time
from collections.abc import Callable, Hashable
from typing import Any, TypeVar

from . import _validate
from ._engine import Engine, Task
from ._policy import Cursor, Plan, RetryPolicy, Schedule
from ._types import Action, RunOutcome, Status, Time
from ._validate import LIMIT, time_from
from .misfire import Misfire
from .schedules import FixedRate, Once

Clock = Callable[[], Time]
T = TypeVar("T")

_PLAIN = frozenset({int, float})
_NEG_LIMIT = -LIMIT


def _check_retry(retry: object) -> None:
    if retry is not None and not callable(getattr(retry, "delay", None)):
        raise TypeError(f"retry must be a retry policy (with a delay method), got {retry!r}")


def _start(when: object, now: Time) -> Cursor:
    """Start a schedule's cursor, checking that ``when`` is a schedule."""
    start = getattr(when, "start", None)
    if not callable(start):
        raise TypeError(f"when must be a schedule (with a start(now) method), got {when!r}")
    cursor = start(now)
    if not callable(getattr(cursor, "next", None)):
        raise TypeError(f"{when!r}.start() must return a cursor with next(now), got {cursor!r}")
    return cursor  # type: ignore[no-any-return]


def _plan(
    cursor: Cursor | None,
    max_retries: int,
    retry: RetryPolicy | None,
    misfire: Misfire | None,
    priority: int,
) -> Plan:
    """Validate the policy arguments and build a task's plan."""
    _check_retry(retry)
    if misfire is not None and not isinstance(misfire, Misfire):
        raise TypeError(f"misfire must be a cadence.misfire.Misfire, got {misfire!r}")
    _check_priority(priority)
    limit = None if misfire is None else misfire.limit
    return Plan(cursor, max_retries, retry, limit, priority)


def _check_priority(priority: object) -> None:
    if not isinstance(priority, int) or isinstance(priority, bool):
        raise TypeError(f"priority must be an int, got {priority!r} ({type(priority).__name__})")


def fatal(error: BaseException) -> bool:
    """True for a ``BaseException`` that is not an ``Exception`` (e.g. ``KeyboardInterrupt``).

    Drivers complete the run (as failed, without retry) and then re-raise it.
    """
    return not isinstance(error, Exception)


class Scheduler:
    """A thread-safe, deterministic task scheduler.

    ``clock`` is any zero-argument callable returning the current time as an
    int or float, in any unit (the runners take it as seconds); it is read
    only to turn a delay into an absolute time. ``backoff`` (> 0, finite) is
    the base of the retry delay: retry r of a run at ``at`` is queued at
    ``at + backoff * 2 ** (r - 1)``. ``retry`` replaces that default with a
    :mod:`cadence.retry` policy (e.g. capped, with jitter) for every task
    that does not bring its own.

    Nothing runs by itself: :meth:`tick` runs what is due at the ``now`` it is
    given (tests call it directly), and a :class:`~cadence.Runner` or
    :class:`~cadence.AsyncRunner` drives it in real time. The scheduler never
    sleeps, starts no thread and calls actions outside its lock, so an action
    may call any method of the scheduler.

    Raises ``TypeError`` for a non-callable ``clock``, a non-number
    ``backoff`` or a ``retry`` that is not a retry policy, ``ValueError`` for
    a ``backoff`` that is not > 0 and finite.
    """

    __slots__ = ("_clock", "_engine", "_listeners", "_lock")

    def __init__(
        self, clock: Clock = time.monotonic, backoff: Time = 1, *, retry: RetryPolicy | None = None
    ) -> None:
        self._clock = _validate.callable_("clock", clock)
        _validate.positive("backoff", backoff)
        _check_retry(retry)
        self._engine = Engine(backoff, retry)
        # An RLock, taken by the interrupt-safe shape of _locked() (see there).
        self._lock = threading.RLock()
        self._listeners: tuple[Callable[[Time], object], ...] = ()

    def __repr__(self) -> str:
        pending, head = self._locked(lambda: (len(self._engine), self._engine.next_time()))
        return f"<Scheduler unfinished={pending} next_run_time={head!r}>"

    def _locked(self, operation: Callable[..., T], *args: Any) -> T:
        """Run an engine operation under the lock, safe against interrupts.

        The shape (inlined on the hot paths): ``acquire()`` inside ``try``, and
        in ``finally`` a ``release()`` whose ``RuntimeError`` means an interrupt
        cut ``acquire()`` short (an RLock knows its owner, so nothing is
        released that this thread does not hold). ``acquire(); try:`` leaks
        the lock to an interrupt between the two, and ``with lock:`` costs
        ~1,000 more instructions on CPython 3.11. If anything escapes while
        the lock is held, the engine repairs its invariants before release.
        """
        lock = self._lock
        try:
            lock.acquire()
            return operation(*args)
        except BaseException:
            if lock._is_owned():  # type: ignore[attr-defined]
                self._engine._repair()
            raise
        finally:
            try:
                lock.release()
            except RuntimeError:  # acquire() was cut short: nothing to release
                pass

    @property
    def clock(self) -> Clock:
        """The clock this scheduler reads (and its runners sleep by)."""
        return self._clock

    # -- scheduling ------------------------------------------------------

    def schedule_once(
        self,
        task_id: Hashable,
        delay: Time,
        action: Action,
        max_retries: int = 0,
        *,
        retry: RetryPolicy | None = None,
        priority: int = 0,
    ) -> bool:
        """Run ``action(at)`` once at ``at = clock() + delay``.

        A failing run (the action raises an ``Exception``) is retried up to
        ``max_retries`` times, each after the delay of ``retry`` (default: the
        scheduler's, exponential backoff); then the task is ``failed``.
        ``priority`` orders runs due at the same time: lower first (default
        0; then scheduling order). Returns ``False``, changing nothing, when a
        task with this id is scheduled, queued, running or paused; a finished
        task with this id is replaced.

        Complexity: O(log n).

        Raises ``TypeError`` for an unhashable ``task_id``, a non-number
        ``delay``, a non-callable ``action``, a non-int ``max_retries`` or
        ``priority``, or a ``retry`` that is not a retry policy;
        ``ValueError`` for a negative, NaN or infinite ``delay`` or a negative
        ``max_retries``. Nothing changes when it raises.
        """
        # Fast path for the common valid call; the checks below raise with the message.
        if not (
            type(delay) in _PLAIN
            and 0 <= delay <= LIMIT
            and type(max_retries) is int
            and max_retries >= 0
            and type(priority) is int
            and callable(action)
        ):
            _validate.delay("delay", delay)
            _validate.callable_("action", action)
            _validate.count("max_retries", max_retries)
            _check_priority(priority)
        try:
            hash(task_id)
        except TypeError:
            _validate.hashable("task_id", task_id)
        try:  # a float is finite iff at - at == 0; anything else is checked in _at()
            at = self._clock() + delay
        except TypeError:
            at = self._at(delay)
        if at.__class__ is not float or at - at:
            at = self._at(delay)
        if max_retries or retry is not None or priority:
            plan = _plan(None, max_retries, retry, None, priority)
            return self._add(task_id, at, action, plan)
        return self._add(task_id, at, action, None)

    def schedule_at_fixed_rate(
        self,
        task_id: Hashable,
        initial_delay: Time,
        period: Time,
        action: Action,
        max_retries: int = 0,
        *,
        retry: RetryPolicy | None = None,
        misfire: Misfire | None = None,
        priority: int = 0,
    ) -> bool:
        """Run ``action(at)`` at slots ``first + k * period``, ``first = clock() + initial_delay``.

        Slot k is computed by multiplication, so float periods do not drift.
        A slot whose run fails (after ``max_retries`` retries) is skipped and
        the task goes on with its next slot; slots missed because ``tick``
        jumped ahead or a run took long are caught up, in order, or handled
        as ``misfire`` says (:mod:`cadence.misfire`). The task never overlaps
        itself: a slot is queued when the previous one ends. Returns
        ``False``, changing nothing, when the id is unfinished.

        Complexity: O(log n) per slot.

        Raises ``TypeError``/``ValueError`` as :meth:`schedule_once`, for a
        ``period`` that is not a number > 0 and finite, and for a ``misfire``
        that is not a :class:`~cadence.misfire.Misfire`.
        """
        _validate.hashable("task_id", task_id)
        _validate.delay("initial_delay", initial_delay)
        _validate.positive("period", period)
        _validate.callable_("action", action)
        _validate.count("max_retries", max_retries)
        when = FixedRate(period, delay=initial_delay)
        return self._schedule(task_id, when, action, max_retries, retry, misfire, priority)

    def schedule(
        self,
        task_id: Hashable,
        when: Schedule,
        action: Action,
        *,
        max_retries: int = 0,
        retry: RetryPolicy | None = None,
        misfire: Misfire | None = None,
        priority: int = 0,
    ) -> bool:
        """Run ``action(at)`` when ``when`` says: any :mod:`cadence.schedules` schedule.

        ``Once(delay)`` or ``Once(at=t)`` for a one-off task (``at`` is an
        absolute time on the clock); ``FixedRate(period, start=t)`` for slots
        from an absolute start; ``FixedDelay(delay)``; ``Cron(...)``
        (:mod:`cadence.cron`); or your own. ``misfire`` applies to recurring
        schedules; ``max_retries``, ``retry`` and ``priority`` as in
        :meth:`schedule_once`. Returns ``False``, changing nothing, when the
        id is unfinished.

        Complexity: O(log n) per run (plus O(missed slots) under a bounded
        misfire policy, and whatever the schedule's cursor costs).

        Raises ``TypeError`` for a ``when`` that is not a schedule and for the
        arguments :meth:`schedule_once` rejects; ``ValueError`` for a schedule
        with no run at all, or a ``misfire`` given with ``Once``. An exception
        from the schedule's own ``start``/``next`` propagates. Nothing changes
        when it raises.
        """
        _validate.hashable("task_id", task_id)
        _validate.callable_("action", action)
        _validate.count("max_retries", max_retries)
        return self._schedule(task_id, when, action, max_retries, retry, misfire, priority)

    def _schedule(
        self,
        task_id: Hashable,
        when: Schedule,
        action: Action,
        max_retries: int,
        retry: RetryPolicy | None,
        misfire: Misfire | None,
        priority: int,
    ) -> bool:
        if isinstance(when, Once) and misfire is not None:
            raise ValueError(f"misfire applies to recurring schedules, not {when!r}")
        plan = _plan(None, max_retries, retry, misfire, priority)
        cursor, first = self._first(when)
        if cursor is None and not (max_retries or retry is not None or priority):
            return self._add(task_id, first, action, None)
        plan.cursor = cursor
        return self._add(task_id, first, action, plan)

    def _at(self, delay: Time) -> Time:
        """``clock() + delay``, checked: ``TypeError``/``ValueError`` naming the culprit."""
        at = time_from("the clock", self._clock()) + delay
        if not _NEG_LIMIT <= at <= LIMIT:
            raise ValueError(f"delay {delay!r} puts the run past the largest time, at {at!r}")
        return at

    def _first(self, when: Schedule) -> tuple[Cursor | None, Time]:
        """Bind ``when`` to a new task: its cursor (``None`` for a one-off) and first run.

        Raises ``TypeError`` for a ``when`` that is not a schedule or a first
        time that is not a number, ``ValueError`` for no first time or one
        that is not finite; what the schedule itself raises propagates.
        """
        now = time_from("the clock", self._clock())
        if isinstance(when, Once):
            return None, time_from(f"{when!r}", when.first(now))
        cursor = _start(when, now)
        first = cursor.next(now)
        if first is None:
            raise ValueError(f"when has no run time: {when!r}")
        return cursor, time_from(f"{when!r}: the first run time", first)

    def _add(self, task_id: Hashable, at: Time, action: Action, plan: Plan | None) -> bool:
        lock = self._lock  # the shape of _locked(), inlined: a hot path
        try:
            lock.acquire()
            if not self._engine.add(task_id, action, at, plan):
                return False
            head = self._engine.next_time() if self._listeners else None
        except BaseException:
            if lock._is_owned():  # type: ignore[attr-defined]
                self._engine._repair()
            raise
        finally:
            try:
                lock.release()
            except RuntimeError:  # acquire() was cut short: nothing to release
                pass
        if head is not None:
            self._wake(head)
        return True

    def pause(self, task_id: Hashable) -> bool:
        """Keep a task from running until :meth:`resume`.

        Its next run is kept but not run; its status stays what it was (a
        paused task is ``scheduled``; see :meth:`is_paused`). A run in
        progress goes on, and the task is held when it completes. ``True`` if
        the task was unfinished and not paused already; ``False`` otherwise.

        Complexity: O(1) amortised.
        """
        return self._change(self._engine.pause, task_id)

    def is_paused(self, task_id: Hashable) -> bool:
        """True if the task is unfinished and paused.

        Complexity: O(1).
        """
        return self._locked(self._engine.is_paused, task_id)

    def resume(self, task_id: Hashable) -> bool:
        """Let a paused task run again. ``False`` if it is not paused.

        A one-off task whose time passed while paused runs at once. A
        recurring task's slots missed while paused are handled by its misfire
        policy: caught up in order (the default), or skipped and counted.

        Complexity: O(log n), plus O(missed slots) under a bounded misfire policy.
        """
        return self._change(self._engine.resume, task_id)

    def reschedule(self, task_id: Hashable, when: Schedule) -> bool:
        """Give an unfinished task a new schedule, keeping its id, action and policies.

        E.g. ``reschedule("poll", FixedRate(30))`` changes a period;
        ``reschedule("report", Once(at=t))`` moves a one-off run. The task's
        status history is kept (it is not finished and re-created) and its
        retry count resets. A run in progress goes on; the new schedule takes
        over when it completes. A paused task stays paused. ``False`` if the
        task is unknown or finished.

        Complexity: O(log n).

        Raises ``TypeError`` for a ``when`` that is not a schedule,
        ``ValueError`` for one with no run at all or a first run time that is
        not a finite number. Nothing changes when it raises.
        """
        cursor, first = self._first(when)
        return self._change(self._engine.reschedule, task_id, cursor, first)

    def _change(self, operation: Callable[..., bool], *args: Any) -> bool:
        """Run an engine operation under the lock; wake runners if it queued a run."""

        def change() -> tuple[bool, Time | None]:
            return operation(*args), self._engine.next_time() if self._listeners else None

        changed, head = self._locked(change)
        if head is not None:
            self._wake(head)
        return changed

    def cancel(self, task_id: Hashable) -> bool:
        """Cancel a scheduled, queued or running task; it never starts again.

        ``True`` if the task was unfinished and is now ``cancelled``; ``False``
        if the id is unknown or the task already finished. A running action
        is not interrupted (cancellation is cooperative): when it returns, its
        run is reported (``ok`` or ``failed``, never ``retry``) and nothing is
        rescheduled. The id may be scheduled again at once; the old run never
        touches the new task.

        Complexity: O(1) amortised (stale queue entries are compacted lazily).
        """
        lock = self._lock  # the shape of _locked(), inlined: a hot path
        try:
            lock.acquire()
            return self._engine.cancel(task_id)
        except BaseException:
            if lock._is_owned():  # type: ignore[attr-defined]
                self._engine._repair()
            raise
        finally:
            try:
                lock.release()
            except RuntimeError:  # acquire() was cut short: nothing to release
                pass

    def status(self, task_id: Hashable) -> Status | None:
        """The task's :class:`~cadence.Status`, or ``None`` for an unknown id.

        Finished tasks stay queryable: at least the 10,000 most recently
        finished are remembered, the oldest forgotten first.

        Complexity: O(1).
        """
        return self._locked(self._engine.status, task_id)

    def next_run_time(self) -> Time | None:
        """The time of the earliest live run, or ``None`` if nothing is queued.

        Complexity: O(1) amortised.
        """
        return self._locked(self._engine.next_time)

    # -- running ---------------------------------------------------------

    # One frame owns each claimed run from its claim to its completion, so that an
    # interrupt anywhere between the two is seen (design.md, "Interrupts"): hence
    # one long method.
    def tick(self, now: Time) -> list[RunOutcome]:  # noqa: PLR0915
        """Run every live run due at ``now`` (``at <= now``); return their outcomes.

        Runs go in (time, seq) order, seq being the order runs were queued;
        runs queued during the tick (retries, next slots, tasks scheduled by
        actions) that are due at ``now`` run in the same tick, in that order.
        ``started`` of each outcome is ``now``. Several threads may tick at
        once: each due run executes exactly once.

        An action raising an ``Exception`` fails its run and nothing else. A
        ``BaseException`` that is not an ``Exception`` (``KeyboardInterrupt``),
        from the action or from a policy, is recorded as the run's failure
        (not retried) and then propagates; the next ``tick`` goes on with the
        rest. So does an interrupt that lands anywhere between a run's claim
        and its completion: a claimed run is always completed.

        Complexity: O(k log n) for k runs, plus the actions.

        Raises ``TypeError`` for a non-number ``now``, ``ValueError`` for NaN
        or infinity.
        """
        if now.__class__ is not float or now - now:  # a finite float: fast; else checked
            _validate.finite("now", now)
        engine, lock = self._engine, self._lock
        task: Task | None = None
        try:
            try:  # the shape of _locked(), inlined: a hot path
                lock.acquire()
                task = engine.claim(now)
            except BaseException:
                if lock._is_owned():  # type: ignore[attr-defined]
                    engine._repair()
                raise
            finally:
                try:
                    lock.release()
                except RuntimeError:  # acquire() was cut short: nothing to release
                    pass
            if task is None:
                return []
            outcomes: list[RunOutcome] = []
            while True:
                error = self._call(task)
                try:
                    lock.acquire()
                    outcome = engine.complete(task, error, now, now)
                    task = None
                    outcomes.append(outcome)
                    stop = outcome[3]
                    if stop is None or not fatal(stop):
                        stop = None
                        task = engine.claim(now)
                    head = engine.next_time() if self._listeners else None
                except BaseException:
                    if lock._is_owned():  # type: ignore[attr-defined]
                        engine._repair()
                    raise
                finally:
                    try:
                        lock.release()
                    except RuntimeError:  # acquire() was cut short: nothing to release
                        pass
                if head is not None:
                    self._wake(head)
                if task is None:
                    if stop is not None:
                        raise stop  # recorded as failed; now it propagates
                    return outcomes
        except BaseException as exc:
            if task is not None and task.status is Status.RUNNING:  # cut short: complete it
                self._complete(task, exc, now, now)
            raise

    def _claim(self, now: Time, *, queued: bool = False) -> Task | None:
        """Claim the earliest run due at ``now`` (for runners)."""
        return self._locked(lambda: self._engine.claim(now, queued=queued))

    def _start(self, task: Task) -> bool:
        """Move a queued run to running; ``False`` if it was cancelled (for runners)."""
        return self._locked(self._engine.start, task)

    def _call(self, task: Task, *, awaitables: bool = False) -> Any:
        """Call a claimed run's action, outside the lock; return what happened.

        The one place a task's action is called. Returns ``None`` on success
        or the exception the action raised, for the driver to complete the
        run with; a driver re-raises a ``BaseException`` that is not an
        ``Exception`` after completing (see :func:`fatal`). An action that
        returns an awaitable is returned as it is when ``awaitables`` is true
        (the asyncio runner awaits it); otherwise the awaitable is closed and
        the run fails with ``TypeError``: a plain driver cannot await it.
        """
        try:
            result = task.action(task.entry[0])
            if result is None or not inspect.isawaitable(result):
                return None
            if awaitables:
                return result
            error = TypeError(
                f"action of task {task.task_id!r} returned an awaitable "
                f"({type(result).__name__}); run async actions under AsyncRunner"
            )
            close = getattr(result, "close", None)
            if close is not None:
                close()  # no "never awaited" warning; if it raises, that is the error
            return error
        except BaseException as exc:
            if not isinstance(exc, Exception):
                exc.add_note(
                    f"cadence: the run of task {task.task_id!r} at {task.entry[0]!r} "
                    "was recorded as failed"
                )
            return exc

    def _complete(
        self, task: Task, error: BaseException | None, started: Time, finished: Time
    ) -> RunOutcome:
        """Complete a claimed run and wake runners if it queued an earlier run."""
        lock = self._lock  # the shape of _locked(), inlined: a hot path
        try:
            lock.acquire()
            outcome = self._engine.complete(task, error, started, finished)
            head = self._engine.next_time() if self._listeners else None
        except BaseException:
            if lock._is_owned():  # type: ignore[attr-defined]
                self._engine._repair()
            raise
        finally:
            try:
                lock.release()
            except RuntimeError:  # acquire() was cut short: nothing to release
                pass
        if head is not None:
            self._wake(head)
        return outcome

    # -- wake-ups for runners ----------------------------------------------

    def _subscribe(self, callback: Callable[[Time], object]) -> Callable[[], None]:
        """Call ``callback(head)`` when a run is queued while ``head`` is the next time.

        Called outside the lock. Returns a function that unsubscribes.
        """
        with self._lock:
            self._listeners = (*self._listeners, callback)

        def unsubscribe() -> None:
            with self._lock:
                self._listeners = tuple(c for c in self._listeners if c is not callback)

        return unsubscribe

    def _wake(self, head: Time) -> None:
        for callback in self._listeners:
            callback(head)
