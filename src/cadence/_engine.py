"""The engine: cadence's scheduling logic as a pure state machine (sans-I/O).

The engine owns the task table, the run queue and the history of finished
tasks. It takes ``now`` as an argument and never sleeps, starts threads,
reads a clock or calls user code; it is not thread-safe (the
:class:`~cadence.Scheduler` serialises calls with one lock). Every driver -
``Scheduler.tick``, the thread :class:`~cadence.Runner`, its worker-pool
hand-off and the :class:`~cadence.AsyncRunner` - is a short loop around the
same primitives:

* :meth:`Engine.claim` takes the earliest due run off the queue and marks its
  task ``running`` (or ``queued``, for a hand-off to a pool);
* :meth:`Engine.start` moves a ``queued`` run to ``running`` when a worker
  picks it up, or says it was cancelled meanwhile and must not start;
* :meth:`Engine.complete` records a claimed run's result and decides what
  comes next (done, failed, a retry, or the next slot) and returns the
  :class:`~cadence.RunOutcome`.

A claimed run is its :class:`Task`: the task has at most one run in flight,
because a task's next run is queued only when its current run completes. That
is also why a fixed-rate task never overlaps itself under any driver.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Hashable

from ._queue import Entry, RunQueue
from ._types import Action, Result, RunOutcome, Status, Time

HISTORY = 10_000
"""Finished tasks whose status stays queryable; the oldest is forgotten first.
The contract promises at least 10,000."""

SCHEDULED, QUEUED, RUNNING = Status.SCHEDULED, Status.QUEUED, Status.RUNNING
DONE, FAILED, CANCELLED = Status.DONE, Status.FAILED, Status.CANCELLED
OK, RETRY = Result.OK, Result.RETRY

TRANSITIONS: dict[Status, frozenset[Status]] = {
    SCHEDULED: frozenset({QUEUED, RUNNING, CANCELLED}),
    QUEUED: frozenset({RUNNING, CANCELLED}),
    RUNNING: frozenset({DONE, FAILED, SCHEDULED, CANCELLED}),
    DONE: frozenset(),
    FAILED: frozenset(),
    CANCELLED: frozenset(),
}
"""Every allowed status change; :func:`move` refuses any other."""

FINISHED = frozenset({DONE, FAILED, CANCELLED})

_new_outcome = tuple.__new__


def move(task: Task, status: Status) -> None:
    """Change ``task``'s status; the only place that does. O(1).

    Raises ``RuntimeError`` (an engine bug, never user error) for a change
    that :data:`TRANSITIONS` does not allow, and changes nothing then.
    """
    if status not in TRANSITIONS[task.status]:
        raise RuntimeError(f"task {task.task_id!r} cannot go from {task.status} to {status}")
    task.status = status


class Recurrence:
    """A fixed-rate task's slots: slot k is at ``first + k * period``."""

    __slots__ = ("first", "period", "slot")

    def __init__(self, first: Time, period: Time) -> None:
        self.first = first
        self.period = period
        self.slot = 0

    def next_slot(self) -> Time:
        """Advance to the next slot and return its time (no repeated addition)."""
        self.slot += 1
        return self.first + self.slot * self.period


class Task:
    """One task, and the claim a driver holds while its run is in flight.

    ``entry`` is the queue entry of the task's current run: live in the queue
    while ``scheduled``, popped once claimed (it still gives ``at``).
    """

    __slots__ = ("action", "attempt", "entry", "max_retries", "recurrence", "status", "task_id")

    task_id: Hashable
    action: Action
    status: Status
    entry: Entry
    attempt: int
    max_retries: int
    recurrence: Recurrence | None

    @property
    def at(self) -> Time:
        """The scheduled time of the task's current run."""
        return self.entry[0]


class Engine:
    """Task table + run queue + finished-task history, driven by ``now``.

    Costs: :meth:`add`, :meth:`cancel` and :meth:`claim` are O(log n);
    :meth:`status` is O(1); :meth:`next_time` is O(1) amortised.
    """

    __slots__ = ("_backoff", "_history", "_history_limit", "_queue", "_tasks")

    def __init__(self, backoff: Time) -> None:
        self._backoff = backoff
        self._tasks: dict[Hashable, Task] = {}
        self._history: OrderedDict[Hashable, Status] = OrderedDict()
        self._history_limit = HISTORY
        self._queue: RunQueue[Task] = RunQueue(self._tasks)

    # -- queries ---------------------------------------------------------

    def status(self, task_id: Hashable) -> Status | None:
        """The task's status, or ``None`` if unknown or forgotten. O(1)."""
        task = self._tasks.get(task_id)
        if task is not None:
            return task.status
        return self._history.get(task_id)

    def next_time(self) -> Time | None:
        """The time of the earliest live run, or ``None``. O(1) amortised."""
        entry = self._queue.peek()
        return None if entry is None else entry[0]

    def __len__(self) -> int:
        """The number of unfinished tasks. O(1)."""
        return len(self._tasks)

    # -- changes ---------------------------------------------------------

    def add(
        self,
        task_id: Hashable,
        at: Time,
        action: Action,
        max_retries: int,
        period: Time | None = None,
    ) -> bool:
        """Schedule a task's first run at ``at``; ``False`` if the id is unfinished.

        A finished task with the same id is replaced. Arguments are trusted
        (the caller validated them). O(log n).
        """
        if task_id in self._tasks:
            return False
        self._history.pop(task_id, None)
        # Built field by field: a third cheaper than an __init__ call, on the hot path.
        task = Task.__new__(Task)
        task.task_id = task_id
        task.action = action
        task.status = SCHEDULED
        task.attempt = 0
        task.max_retries = max_retries
        task.recurrence = None if period is None else Recurrence(at, period)
        task.entry = self._queue.push(at, task_id)
        self._tasks[task_id] = task
        return True

    def cancel(self, task_id: Hashable) -> bool:
        """Cancel an unfinished task; ``False`` if unknown or finished. O(1) amortised.

        A running or queued run is not interrupted: its completion will find
        the task cancelled and do nothing but report.
        """
        task = self._tasks.get(task_id)
        if task is None:
            return False
        was_scheduled = task.status is SCHEDULED
        self._finish(task, CANCELLED)
        if was_scheduled:
            self._queue.discard()
        return True

    def claim(self, now: Time, *, queued: bool = False) -> Task | None:
        """Take the earliest run due at ``now`` (``at <= now``), or ``None``.

        Its task becomes ``running``, or ``queued`` when ``queued`` is true
        (then :meth:`start` it when a worker picks it up). The caller must
        eventually pass the task to :meth:`complete` (unless :meth:`start`
        refused it). O(log n).
        """
        task = self._queue.pop_due(now)
        if task is None:
            return None
        move(task, QUEUED if queued else RUNNING)
        return task

    def start(self, task: Task) -> bool:
        """Move a claimed ``queued`` run to ``running``. O(1).

        ``False`` if its task was cancelled while queued: the run must not
        start, and needs no :meth:`complete`.
        """
        if task.status is CANCELLED:
            return False
        move(task, RUNNING)
        return True

    def complete(self, task: Task, error: BaseException | None, started: Time) -> RunOutcome:
        """Record the result of a claimed run and queue what comes next. O(log n).

        ``error`` is what the action raised, or ``None``. An ``Exception`` is
        retried while the slot has retries left; any other ``BaseException``
        (e.g. ``KeyboardInterrupt``) fails the run without retry. A task that
        was cancelled meanwhile is only reported: ``ok`` or ``failed``,
        never ``retry``, and nothing else changes.
        """
        at = task.entry[0]
        attempt = task.attempt
        if error is None:
            result = OK
        elif attempt < task.max_retries and isinstance(error, Exception):
            result = RETRY
        else:
            result = Result.FAILED
        if task.status is not CANCELLED:
            if result is RETRY:
                task.attempt = attempt + 1
                self._requeue(task, at + self._backoff * 2**attempt)
            elif task.recurrence is not None:
                task.attempt = 0
                self._requeue(task, task.recurrence.next_slot())
            else:
                self._finish(task, DONE if result is OK else FAILED)
        else:
            result = OK if error is None else Result.FAILED
        return _new_outcome(RunOutcome, (task.task_id, at, result, error, attempt, started))

    def _requeue(self, task: Task, at: Time) -> None:
        move(task, SCHEDULED)
        task.entry = self._queue.push(at, task.task_id)

    def _finish(self, task: Task, status: Status) -> None:
        move(task, status)
        task_id = task.task_id
        del self._tasks[task_id]
        history = self._history
        history[task_id] = status
        if len(history) > self._history_limit:
            history.popitem(last=False)

    def _check(self) -> None:
        """Assert the engine's invariants (and the queue's). O(n); for tests."""
        self._queue._check()
        assert len(self._history) <= self._history_limit
        queued = set(self._queue._heap)
        for task_id, task in self._tasks.items():
            assert task.task_id == task_id
            assert task.status not in FINISHED, task
            assert task_id not in self._history
            if task.status is SCHEDULED:
                assert task.entry in queued
        for status in self._history.values():
            assert status in FINISHED
