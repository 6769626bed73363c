"""The tables a :class:`~rota.Scheduler` keeps its tasks in, and the seam runners drive.

A scheduler answers its public API; where its tasks live is its table's
business. :class:`Tasks` names what a runner (``Runner``, ``AsyncRunner``,
``rota run``) asks of a table: claim a due run, start it, call its action,
complete it, wait for the next one. Two tables implement it:
:class:`LocalTasks`, the deterministic engine under a lock (in memory), and
:class:`rota.durable.StoredTasks`, a store shared by any number of processes.
:class:`Tasks` itself holds what both share: the listeners, the runners'
wake-ups, and the one place an action is called.
"""

from __future__ import annotations

import inspect
import threading
from abc import ABC, abstractmethod
from collections.abc import Callable
from typing import Any, TypeVar

from . import _validate
from ._engine import Engine, Task, run_at
from ._events import OUTCOME_KINDS, Event, EventKind, Listener, deliver
from ._types import RunOutcome, Status, Time

T = TypeVar("T")
_RUN_STARTED, _RUN_SKIPPED = EventKind.RUN_STARTED, EventKind.RUN_SKIPPED  # hot paths' constants


def fatal(error: BaseException) -> bool:
    """True for a ``BaseException`` that is not an ``Exception`` (e.g. ``KeyboardInterrupt``).

    Drivers complete the run (as failed, without retry) and then re-raise it.
    """
    return not isinstance(error, Exception)


def locked(lock: Any, engine: Engine, operation: Callable[..., T], *args: Any) -> T:
    """Run an engine operation under ``lock`` (an ``RLock``), safe against interrupts.

    The shape (inlined on the hot paths): ``acquire()`` inside ``try``, and
    in ``finally`` a ``release()`` whose ``RuntimeError`` means an interrupt
    cut ``acquire()`` short (an RLock knows its owner, so nothing is
    released that this thread does not hold). ``acquire(); try:`` leaks
    the lock to an interrupt between the two, and ``with lock:`` costs
    ~1,000 more instructions on CPython 3.11. If anything escapes while
    the lock is held, the engine repairs its invariants before release.
    """
    try:
        lock.acquire()
        return operation(*args)
    except BaseException:
        if lock._is_owned():
            engine._repair()
        raise
    finally:
        try:
            lock.release()
        except RuntimeError:  # acquire() was cut short: nothing to release
            pass


class Tasks(ABC):
    """The table behind a :class:`~rota.Scheduler` (its ``table``): what a runner drives.

    A run goes ``claim`` → ``start`` → ``call`` → ``complete`` (or
    ``complete_later``); a runner sleeps until ``wake_time`` or until a
    callback given to ``subscribe`` is called with an earlier head. Every
    method is thread-safe. ``leases`` says whether a claimed run holds a
    lease in a store: then a runner with a pool claims in step with its
    workers, leaving the rest to other nodes.

    A table implements the abstract methods; this base keeps what every table
    shares: the listeners of events, the runners' wake-ups, and the one place a
    run's action is called. ``lock`` guards the listeners and wake-ups (in
    memory, the engine's lock too).
    """

    __slots__ = ("heard", "listeners", "lock", "wakeups")

    leases = False

    def __init__(self, lock: threading.RLock) -> None:
        self.lock = lock
        self.wakeups: tuple[Callable[[Time], object], ...] = ()  # runners' wake-ups
        self.listeners: tuple[tuple[Listener, frozenset[EventKind]], ...] = ()  # add_listener
        self.heard: frozenset[EventKind] = frozenset()  # the kinds some listener wants

    def listen(self, listeners: tuple[tuple[Listener, frozenset[EventKind]], ...]) -> None:
        """Keep ``listeners``, and the kinds they want: an event no listener wants is
        not even made (a run's start, for a listener of outcomes). Under the lock."""
        self.heard = frozenset().union(*(kinds for _, kinds in listeners))
        self.listeners = listeners

    def emit(self, event: Event) -> None:
        """Deliver ``event`` to the listeners (outside the lock). O(listeners)."""
        deliver(self.listeners, event)

    def emit_outcome(self, outcome: RunOutcome) -> None:
        """Deliver the events one completed run makes, each only if a listener wants
        its kind: the slots skipped just before it first, then its result."""
        heard, task_id, at = self.heard, outcome.task_id, outcome.at
        if outcome.skipped and _RUN_SKIPPED in heard:
            deliver(self.listeners, Event(_RUN_SKIPPED, task_id, at, outcome))
        kind = OUTCOME_KINDS[outcome.result]
        if kind in heard:
            deliver(self.listeners, Event(kind, task_id, at, outcome))

    def replacing(self, stops: list[Any]) -> None:
        """``Overlap.REPLACE`` decided to stop these runs in flight: say so to the runner
        driving them (``RUN_REPLACED``: ``AsyncRunner`` cancels the coroutine, ``rota
        run`` ends the command). O(len(stops))."""
        for run in stops:
            self.emit(Event(EventKind.RUN_REPLACED, run.task_id, run_at(run)))

    def call(self, task: Task, *, awaitables: bool = False) -> Any:
        """Call a claimed run's action, outside the lock; return what happened.

        The one place a task's action is called. Returns ``None`` on success
        or the exception the action raised, for the driver to complete the
        run with; a driver re-raises a ``BaseException`` that is not an
        ``Exception`` after completing (see :func:`fatal`). An action that
        returns an awaitable is returned as it is when ``awaitables`` is true
        (the asyncio runner awaits it); otherwise the awaitable is closed and
        the run fails with ``TypeError``: a plain driver cannot await it.
        """
        at = task.entry[0]  # a claimed run's entry is its slot (or retry time), unjittered
        if _RUN_STARTED in self.heard:
            self.emit(Event(_RUN_STARTED, task.entry[2], at))
        try:
            result = task.action(at)
            if result is None:
                return None
            if not inspect.isawaitable(result):
                task.value = result
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
                    f"rota: the run of task {task.task_id!r} at {at!r} was recorded as failed"
                )
            return exc

    def subscribe(self, callback: Callable[[Time], object]) -> Callable[[], None]:
        """Call ``callback(head)`` when a run is queued while ``head`` is the next time.

        Called outside the lock. Returns a function that unsubscribes.
        """
        with self.lock:
            self.wakeups = (*self.wakeups, callback)

        def unsubscribe() -> None:
            with self.lock:
                self.wakeups = tuple(c for c in self.wakeups if c is not callback)

        return unsubscribe

    def wake(self, head: Time) -> None:
        """Tell every runner that a run is queued at ``head``. O(runners)."""
        for callback in self.wakeups:
            callback(head)

    @abstractmethod
    def claim(self, now: Time, *, queued: bool = False, room: int | None = None) -> Any:
        """The earliest run due at ``now``, claimed (``queued``: not started yet), or
        ``None``; ``room``: what the runner's pool can take soon (``None``: no bound)."""

    @abstractmethod
    def start(self, task: Any) -> bool:
        """Move a queued run to running; ``False`` if it must not start (cancelled)."""

    @abstractmethod
    def complete(
        self, task: Any, error: BaseException | None, started: Time, finished: Time
    ) -> RunOutcome:
        """Complete a claimed run; return its outcome."""

    @abstractmethod
    def complete_later(
        self,
        task: Any,
        error: BaseException | None,
        started: Time,
        finished: Time,
        then: Callable[[RunOutcome], object],
        *,
        linger: bool = False,
    ) -> None:
        """Complete a claimed run and pass its outcome to ``then``, maybe later."""

    @abstractmethod
    def tick(self, now: Time) -> list[RunOutcome]:
        """Run every run due at ``now`` on this thread; return their outcomes."""

    @abstractmethod
    def wake_time(self) -> Time | None:
        """When a runner must next look for due runs (``None``: nothing queued)."""

    @abstractmethod
    def thread_done(self) -> None:
        """A runner's thread is ending (a store closes the connections it opened)."""


class LocalTasks(Tasks):
    """The in-memory table: the deterministic :class:`~rota._engine.Engine` under the
    scheduler's lock. Its hot paths build nothing per run: a claimed run is the
    engine's own task."""

    __slots__ = ("engine",)

    def __init__(self, engine: Engine, lock: threading.RLock) -> None:
        super().__init__(lock)
        self.engine = engine

    def locked(self, operation: Callable[..., T], *args: Any) -> T:
        """Run an engine operation under the lock (see :func:`locked`)."""
        return locked(self.lock, self.engine, operation, *args)

    def wake_time(self) -> Time | None:
        """The earliest live run's time. O(1) amortised."""
        return self.locked(self.engine.next_time)

    def claim(self, now: Time, *, queued: bool = False, room: int | None = None) -> Task | None:
        """Claim the earliest run due at ``now`` (for runners).

        ``room`` (what the runner's pool can take soon, ``None``: no bound)
        matters only where a claimed run holds something (see
        :attr:`leases`); in memory a waiting claimed run costs nothing.
        """

        def claim() -> tuple[Task | None, list[Any]]:
            task = self.engine.claim(now, queued=queued)
            return task, self.engine.take_stops()

        task, stops = self.locked(claim)
        self.replacing(stops)
        return task

    def start(self, task: Task) -> bool:
        """Move a queued run to running; ``False`` if it was cancelled (for runners)."""
        return self.locked(self.engine.start, task)

    def complete(
        self, task: Task, error: BaseException | None, started: Time, finished: Time
    ) -> RunOutcome:
        """Complete a claimed run (for runners), wake them if it queued an earlier run."""

        def complete() -> tuple[RunOutcome, Time | None]:
            outcome = self.engine.complete(task, error, started, finished)
            return outcome, self.engine.next_time() if self.wakeups else None

        outcome, head = self.locked(complete)
        if head is not None:
            self.wake(head)
        if self.listeners:
            self.emit_outcome(outcome)
        return outcome

    def complete_later(
        self,
        task: Task,
        error: BaseException | None,
        started: Time,
        finished: Time,
        then: Callable[[RunOutcome], object],
        *,
        linger: bool = False,
    ) -> None:
        """Complete a claimed run and pass its outcome to ``then`` (for runners).

        In memory, at once. (A durable scheduler may hold the completion
        back to commit it with others, and call ``then`` after the commit;
        ``linger``: the caller claims again soon, and may commit it then.)
        """
        then(self.complete(task, error, started, finished))

    def thread_done(self) -> None:
        """A runner's thread is ending: nothing to do in memory (a durable scheduler
        closes the store connections that thread opened)."""

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
        engine, lock = self.engine, self.lock
        task: Task | None = None
        try:
            try:  # the shape of locked(), inlined: a hot path
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
                error = self.call(task)
                try:
                    lock.acquire()
                    outcome = engine.complete(task, error, now, now)
                    task = None
                    outcomes.append(outcome)
                    stop = outcome[3]
                    if stop is None or not fatal(stop):
                        stop = None
                        task = engine.claim(now)
                    head = engine.next_time() if self.wakeups else None
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
                    self.wake(head)
                if self.listeners:
                    self.emit_outcome(outcome)
                if task is None:
                    if stop is not None:
                        raise stop  # recorded as failed; now it propagates
                    return outcomes
        except BaseException as exc:
            if task is not None and task.status is Status.RUNNING:  # cut short: complete it
                self.complete(task, exc, now, now)
            raise
