"""Scheduler: the engine, one lock and an injected clock."""

from __future__ import annotations

import inspect
import math
import threading
import time
from collections.abc import Callable, Hashable
from typing import Any

from . import _validate
from ._engine import Engine, Task
from ._types import Action, RunOutcome, Status, Time

Clock = Callable[[], Time]

_PLAIN = frozenset({int, float})
_INF = math.inf


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
    ``at + backoff * 2 ** (r - 1)``.

    Nothing runs by itself: :meth:`tick` runs what is due at the ``now`` it is
    given (tests call it directly), and a :class:`~cadence.Runner` or
    :class:`~cadence.AsyncRunner` drives it in real time. The scheduler never
    sleeps, starts no thread and calls actions outside its lock, so an action
    may call any method of the scheduler.

    Raises ``TypeError`` for a non-callable ``clock`` or a non-number
    ``backoff``, ``ValueError`` for a ``backoff`` that is not > 0 and finite.
    """

    __slots__ = ("_backoff", "_clock", "_engine", "_listeners", "_lock")

    def __init__(self, clock: Clock = time.monotonic, backoff: Time = 1) -> None:
        self._clock = _validate.callable_("clock", clock)
        self._backoff = _validate.positive("backoff", backoff)
        self._engine = Engine(backoff)
        self._lock = threading.Lock()
        self._listeners: tuple[Callable[[Time], object], ...] = ()

    def __repr__(self) -> str:
        with self._lock:
            pending, head = len(self._engine), self._engine.next_time()
        return f"<Scheduler unfinished={pending} next_run_time={head!r}>"

    @property
    def clock(self) -> Clock:
        """The clock this scheduler reads (and its runners sleep by)."""
        return self._clock

    # -- scheduling ------------------------------------------------------

    def schedule_once(
        self, task_id: Hashable, delay: Time, action: Action, max_retries: int = 0
    ) -> bool:
        """Run ``action(at)`` once at ``at = clock() + delay``.

        A failing run (the action raises an ``Exception``) is retried up to
        ``max_retries`` times with exponential backoff; then the task is
        ``failed``. Returns ``False``, changing nothing, when a task with this
        id is scheduled, queued or running; a finished task with this id is
        replaced.

        Complexity: O(log n).

        Raises ``TypeError`` for an unhashable ``task_id``, a non-number
        ``delay``, a non-callable ``action`` or a non-int ``max_retries``;
        ``ValueError`` for a negative, NaN or infinite ``delay`` or a negative
        ``max_retries``. Nothing changes when it raises.
        """
        # Fast path for the common valid call; the checks below raise with the message.
        if not (
            type(delay) in _PLAIN
            and 0 <= delay < _INF
            and type(max_retries) is int
            and max_retries >= 0
            and callable(action)
        ):
            _validate.delay("delay", delay)
            _validate.callable_("action", action)
            _validate.count("max_retries", max_retries)
        try:
            hash(task_id)
        except TypeError:
            _validate.hashable("task_id", task_id)
        return self._add(task_id, self._clock() + delay, action, max_retries, None)

    def schedule_at_fixed_rate(
        self,
        task_id: Hashable,
        initial_delay: Time,
        period: Time,
        action: Action,
        max_retries: int = 0,
    ) -> bool:
        """Run ``action(at)`` at slots ``first + k * period``, ``first = clock() + initial_delay``.

        Slot k is computed by multiplication, so float periods do not drift.
        A slot whose run fails (after ``max_retries`` retries) is skipped and
        the task goes on with its next slot; slots missed because ``tick``
        jumped ahead or a run took long are caught up, in order. The task
        never overlaps itself: a slot is queued when the previous one ends.
        Returns ``False``, changing nothing, when the id is unfinished.

        Complexity: O(log n).

        Raises ``TypeError``/``ValueError`` as :meth:`schedule_once`, and for a
        ``period`` that is not a number > 0 and finite.
        """
        _validate.hashable("task_id", task_id)
        _validate.delay("initial_delay", initial_delay)
        _validate.positive("period", period)
        _validate.callable_("action", action)
        _validate.count("max_retries", max_retries)
        return self._add(task_id, self._clock() + initial_delay, action, max_retries, period)

    def _add(
        self,
        task_id: Hashable,
        at: Time,
        action: Action,
        max_retries: int,
        period: Time | None,
    ) -> bool:
        # Hot path: explicit acquire/release costs half of ``with lock:`` here.
        self._lock.acquire()
        try:
            if not self._engine.add(task_id, at, action, max_retries, period):
                return False
            head = self._engine.next_time() if self._listeners else None
        finally:
            self._lock.release()
        if head is not None:
            self._wake(head)
        return True

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
        self._lock.acquire()  # hot path: explicit acquire/release costs half of ``with``
        try:
            return self._engine.cancel(task_id)
        finally:
            self._lock.release()

    def status(self, task_id: Hashable) -> Status | None:
        """The task's :class:`~cadence.Status`, or ``None`` for an unknown id.

        Finished tasks stay queryable: at least the 10,000 most recently
        finished are remembered, the oldest forgotten first.

        Complexity: O(1).
        """
        with self._lock:
            return self._engine.status(task_id)

    def next_run_time(self) -> Time | None:
        """The time of the earliest live run, or ``None`` if nothing is queued.

        Complexity: O(1) amortised.
        """
        with self._lock:
            return self._engine.next_time()

    # -- running ---------------------------------------------------------

    def tick(self, now: Time) -> list[RunOutcome]:
        """Run every live run due at ``now`` (``at <= now``); return their outcomes.

        Runs go in (time, seq) order, seq being the order runs were queued;
        runs queued during the tick (retries, next slots, tasks scheduled by
        actions) that are due at ``now`` run in the same tick, in that order.
        ``started`` of each outcome is ``now``. Several threads may tick at
        once: each due run executes exactly once.

        An action raising an ``Exception`` fails its run and nothing else. A
        ``BaseException`` that is not an ``Exception`` (``KeyboardInterrupt``)
        is recorded as the run's failure (not retried) and then propagates;
        the next ``tick`` goes on with the rest.

        Complexity: O(k log n) for k runs, plus the actions.

        Raises ``TypeError`` for a non-number ``now``, ``ValueError`` for NaN
        or infinity.
        """
        if type(now) not in _PLAIN or not -_INF < now < _INF:  # fast path first
            _validate.finite("now", now)
        outcomes: list[RunOutcome] = []
        engine, lock = self._engine, self._lock
        lock.acquire()  # hot path: explicit acquire/release costs half of ``with``
        try:
            task = engine.claim(now)
        finally:
            lock.release()
        while task is not None:
            error = self._call(task)
            stop = error is not None and fatal(error)
            lock.acquire()
            try:
                outcomes.append(engine.complete(task, error, now))
                head = engine.next_time() if self._listeners else None
                task = None if stop else engine.claim(now)
            finally:
                lock.release()
            if head is not None:
                self._wake(head)
            if stop:
                raise error
        return outcomes

    def _claim(self, now: Time, *, queued: bool = False) -> Task | None:
        """Claim the earliest run due at ``now`` (for runners)."""
        with self._lock:
            return self._engine.claim(now, queued=queued)

    def _start(self, task: Task) -> bool:
        """Move a queued run to running; ``False`` if it was cancelled (for runners)."""
        with self._lock:
            return self._engine.start(task)

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
        except BaseException as exc:
            if not isinstance(exc, Exception):
                exc.add_note(
                    f"cadence: the run of task {task.task_id!r} at {task.entry[0]!r} "
                    "was recorded as failed"
                )
            return exc
        if result is not None and inspect.isawaitable(result):
            if awaitables:
                return result
            close = getattr(result, "close", None)
            if close is not None:
                close()
            return TypeError(
                f"action of task {task.task_id!r} returned an awaitable "
                f"({type(result).__name__}); run async actions under AsyncRunner"
            )
        return None

    def _complete(self, task: Task, error: BaseException | None, started: Time) -> RunOutcome:
        """Complete a claimed run and wake runners if it queued an earlier run."""
        with self._lock:
            outcome = self._engine.complete(task, error, started)
            head = self._engine.next_time() if self._listeners else None
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
