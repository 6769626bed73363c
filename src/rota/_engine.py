"""The engine: rota's scheduling logic as a pure state machine (sans-I/O).

The engine owns the task table, the run queue and the history of finished
tasks. It takes ``now`` as an argument and never sleeps, starts threads,
reads a clock or calls user code; it is not thread-safe (the
:class:`~rota.Scheduler` serialises calls with one lock). Every driver -
``Scheduler.tick``, the thread :class:`~rota.Runner`, its worker-pool
hand-off and the :class:`~rota.AsyncRunner` - is a short loop around the
same primitives:

* :meth:`Engine.claim` takes the earliest due run off the queue and marks its
  task ``running`` (or ``queued``, for a hand-off to a pool);
* :meth:`Engine.start` moves a ``queued`` run to ``running`` when a worker
  picks it up, or says it was cancelled meanwhile and must not start;
* :meth:`Engine.complete` records a claimed run's result and decides what
  comes next (done, failed, a retry, or the next slot) and returns the
  :class:`~rota.RunOutcome`.

A claimed run is its :class:`Task`: the task has at most one run in flight,
because a task's next run is queued only when its current run completes. That
is also why a fixed-rate task never overlaps itself under any driver. The
exception is asked for by name: a task under ``Overlap.allow(n)`` or
``Overlap.REPLACE`` has runs of its own (:class:`Run`) beside it.

Policies (retry delays, misfire handling, schedules, priorities, pause) live
in a task's :class:`~rota._policy.Plan`; a task with the contract's
defaults has none, and its hot path does not look further. Policy objects are
called under the scheduler's lock and are expected to be quick and pure.
Whatever one does - raise an ``Exception`` or a ``BaseException``, or
return something that is not a finite time - its task fails with a run
outcome that carries the error; nothing is left stuck and no bad time ever
enters the queue.
"""

from __future__ import annotations

from collections import OrderedDict, deque
from collections.abc import Callable, Hashable, Mapping
from typing import Any

from ._policy import Cursor, Plan, RetryPolicy, jitter_offset
from ._queue import Entry, RunQueue
from ._types import (
    FINISHED,
    NO_SKIPS,
    UNFINISHED,
    Action,
    Result,
    RunOutcome,
    Skips,
    Status,
    TaskInfo,
    Time,
)  # fmt: skip
from ._validate import LIMIT, PLAIN, time_from
from .schedules import FixedDelay, Once

HISTORY = 10_000
"""Finished tasks whose status stays queryable; the oldest is forgotten first.
The contract promises at least 10,000."""

SCHEDULED, QUEUED, RUNNING = Status.SCHEDULED, Status.QUEUED, Status.RUNNING
DONE, FAILED, CANCELLED = Status.DONE, Status.FAILED, Status.CANCELLED
OK, RETRY = Result.OK, Result.RETRY

TRANSITIONS: dict[Status, frozenset[Status]] = {
    # done/failed without a run: its schedule ended (or raised) while skipping missed slots
    SCHEDULED: frozenset({QUEUED, RUNNING, CANCELLED, DONE, FAILED}),
    QUEUED: frozenset({RUNNING, CANCELLED}),
    RUNNING: frozenset({DONE, FAILED, SCHEDULED, CANCELLED}),
    DONE: frozenset(),
    FAILED: frozenset(),
    CANCELLED: frozenset(),
}
"""Every allowed status change; :func:`move` refuses any other."""


_new_outcome = tuple.__new__


def _later(previous: Time, value: object, now: Time) -> Time:
    """A cursor's next time: a finite number after ``previous`` or ``now``.

    Schedules move forward: a cursor that repeats a past time, or goes back
    into the past, would run its task forever at one instant. (After
    ``now`` is enough: a fixed delay counts from a clock that may have been
    set back.) Raises ``TypeError``/``ValueError`` otherwise. O(1).
    """
    at = time_from("the schedule's cursor", value)
    if not (at > previous or at > now):
        raise ValueError(
            f"the schedule's cursor returned {at!r}: neither after its previous time "
            f"{previous!r} nor after now, {now!r}"
        )
    return at


def raiser(error: BaseException) -> Action:
    """An action that fails with ``error``: how a run whose policy broke reports it."""

    def broken(at: Time) -> None:
        raise error

    return broken


def run_at(task: Task) -> Time:
    """The time of a task's current run as reported (``outcome.at``, the action's
    argument): its entry's time, or the slot's own time when the entry is jittered
    (the entry then says when it starts). O(1)."""
    plan = task.plan
    if plan is None or plan.nominal is None:
        return task.entry[0]
    return plan.nominal


def move(task: Task, status: Status) -> None:
    """Change ``task``'s status; the only place that does. O(1).

    Raises ``RuntimeError`` (an engine bug, never user error) for a change
    that :data:`TRANSITIONS` does not allow, and changes nothing then.
    """
    if status not in TRANSITIONS[task.status]:
        raise RuntimeError(f"task {task.task_id!r} cannot go from {task.status} to {status}")
    task.status = status


class Task:
    """One task, and the claim a driver holds while its run is in flight.

    ``entry`` is the queue entry of the task's current run: live in the queue
    while ``scheduled``, popped once claimed (it still gives ``at`` and the
    id). A paused ``scheduled`` task is *parked*: its entry is a copy kept
    outside the queue, so it cannot be claimed.
    """

    __slots__ = ("action", "entry", "last", "plan", "status", "value")

    action: Action
    status: Status
    entry: Entry
    plan: Plan | None
    last: RunOutcome | None  # the latest outcome of its runs
    value: object  # what the run in flight returned, until its completion takes it

    @property
    def task_id(self) -> Hashable:
        """The task's id."""
        return self.entry[2]

    @property
    def parked(self) -> bool:
        """Scheduled but paused: its run is held outside the queue."""
        return self.status is SCHEDULED and self.plan is not None and self.plan.paused


class Run(Task):
    """One run of a concurrent task (``Overlap.allow(n)``, ``REPLACE``), claimed beside
    the task itself: its own slot (``entry``), status, retries (its own plan: the
    task's policies as they were when it was claimed) and action (bound to it). The
    task's entry is then its next run. ``replaced``: it is to be stopped (REPLACE)."""

    __slots__ = ("parent", "replaced")

    parent: Task
    replaced: bool


class _Waiting:
    """The table's key of a concurrent task's run waiting for its retry (by identity)."""

    __slots__ = ()


class Engine:
    """Task table + run queue + finished-task history, driven by ``now``.

    ``retry`` is the default retry policy; ``None`` is the contract's
    ``backoff * 2 ** (r - 1)``, computed inline. Costs: :meth:`add`,
    :meth:`cancel`, :meth:`claim` and :meth:`complete` are O(log n) (plus,
    under a misfire policy, O(missed slots)); :meth:`status` is O(1);
    :meth:`next_time` is O(1) amortised.
    """

    __slots__ = (
        "_backoff", "_follow", "_history", "_history_limit", "_queue", "_retry", "_strays",
        "_tasks", "_waiting", "stops",
    )  # fmt: skip

    def __init__(
        self, backoff: Time, retry: RetryPolicy | None = None, *, follow_moves: bool = True
    ) -> None:
        self._backoff = backoff
        self._retry = retry
        # A claim whose misfire policy moved its run goes on to claim in time order
        # (in memory); a store's engine of one task returns instead (see claim)
        self._follow = follow_moves
        self._tasks: dict[Hashable, Task] = {}
        # Finished ids: their final status only. Not the task (it would pin its action),
        # not its last outcome (keeping one per finished task costs ~5 % of every run).
        self._history: OrderedDict[Hashable, Status] = OrderedDict()
        self._history_limit = HISTORY
        # Finished ids the history cannot hold beside another of their hash (comparing
        # them raised): kept by identity, not forgotten. Empty but for such ids.
        self._strays: list[tuple[Hashable, Status]] = []
        self._queue: RunQueue[Task] = RunQueue(self._tasks)
        # Runs of concurrent tasks waiting for a retry sit in the table (and the queue)
        # under a key of their own (_Waiting), so a claim needs no second queue.
        self._waiting = 0
        self.stops: list[Run] = []  # runs REPLACE decided to stop, for the scheduler to signal

    def reset(self) -> None:
        """Forget every task, as a new engine with these settings knows none: a store's
        engine of one task serves the next claim, instead of a new engine (eight
        objects for the cyclic collector to track) being built for each. O(tasks)."""
        self._tasks.clear()
        self._history.clear()
        self._strays.clear()
        self._queue.clear()
        self._waiting = 0
        if self.stops:  # (a list take_stops handed out is the caller's)
            self.stops = []

    # -- queries ---------------------------------------------------------

    def status(self, task_id: Hashable) -> Status | None:
        """The task's status, or ``None`` if unknown or forgotten. O(1); O(n) for an id
        whose ``__eq__`` raises against another of its hash (found by identity)."""
        try:
            task = self._tasks.get(task_id)
            if task is not None:
                return task.status
            found = self._history.get(task_id)
        except Exception:
            task, found = self._by_identity(task_id)
            return task.status if task is not None else found
        if found is None and self._strays:
            return self._by_identity(task_id)[1]
        return found

    def info(self, task_id: Hashable) -> TaskInfo | None:
        """A :class:`TaskInfo` for the task, or ``None`` if unknown or forgotten. O(1)
        (O(n) for an id whose ``__eq__`` raises, as :meth:`status`)."""
        try:
            task = self._tasks.get(task_id)
            finished = None if task is not None else self._history.get(task_id)
        except Exception:
            task, finished = self._by_identity(task_id)
        if task is not None:
            return _info(task)
        if finished is None and self._strays:
            finished = self._by_identity(task_id)[1]
        if finished is None:
            return None
        return task_info(task_id, finished, False, 0, None, 0, 0, None)

    def _by_identity(self, task_id: Hashable) -> tuple[Task | None, Status | None]:
        """The task, or the finished status, of the very object ``task_id``, found
        without comparing ids (an ``__eq__`` that raises). O(n)."""
        for key, task in self._tasks.items():
            if key is task_id:
                return task, None
        for key, status in (*self._history.items(), *self._strays):
            if key is task_id:
                return None, status
        return None, None

    def action_of(self, task_id: Hashable) -> Action | None:
        """An unfinished task's action, or ``None``. O(1)."""
        task = self._tasks.get(task_id)
        return None if task is None else task.action

    def plan_of(self, task_id: Hashable) -> Plan | None:
        """An unfinished task's plan (made on first need), or ``None``. O(1)."""
        task = self._tasks.get(task_id)
        return None if task is None else _plan_of(task)

    def infos(self) -> list[TaskInfo]:
        """A :class:`TaskInfo` for every unfinished task. O(n)."""
        return [_info(task) for task in self._tasks.values() if task.__class__ is not Run]

    def next_time(self) -> Time | None:
        """The time of the earliest live run, or ``None``. O(1) amortised."""
        entry = self._queue.peek()
        return None if entry is None else entry[0]

    def __len__(self) -> int:
        """The number of unfinished tasks. O(1)."""
        return len(self._tasks) - self._waiting

    # -- changes ---------------------------------------------------------

    def add(
        self,
        task_id: Hashable,
        action: Action,
        at: Time,
        plan: Plan | None = None,
        replace: bool = False,
    ) -> bool:
        """Schedule a task whose first run is at ``at``; ``False`` if the id is unfinished.

        A finished task with the same id is replaced; so is an unfinished one
        when ``replace`` (it is cancelled first). (A first run already in the
        past meets the task's misfire policy when it is claimed.) Arguments
        are trusted (the caller validated them). O(log n).
        """
        if task_id in self._tasks:
            if not replace:
                return False
            self.cancel(task_id)
        if task_id in self._history:  # cheaper than pop(task_id, None) when absent
            del self._history[task_id]
        if self._strays:  # the id scheduled again is no longer a finished one
            self._strays = [(key, old) for key, old in self._strays if key is not task_id]
        # Built field by field: a third cheaper than an __init__ call, on the hot path.
        task = Task.__new__(Task)
        task.action = action
        task.status = SCHEDULED
        task.last = task.value = None
        task.plan = plan
        if plan is None:
            task.entry = self._queue.push(at, task_id)
        else:
            plan.slot = at
            if plan.extra:
                task.entry = (at, -1, task_id)  # gives _push_slot the id
                self._push_slot(task, plan, at)
            else:
                task.entry = self._queue.push(at, task_id, plan.priority)
        self._tasks[task_id] = task
        return True

    def adopt(self, task: Task, at: Time) -> None:
        """Take in a task rebuilt from storage, in its status, its run at ``at``. O(log n).

        How a durable store reuses the engine's decisions: it rebuilds one
        task (action, status, plan) from a stored row, adopts it into an
        engine of its own, applies the same operation as in memory
        (:meth:`claim`, :meth:`complete`, :meth:`cancel`, ...) and stores
        what the task became. A ``scheduled`` task is queued (parked if
        paused); a ``queued`` or ``running`` one is a claim held by its
        driver; a finished one is only completed (reported), as a run of a
        task cancelled meanwhile is.
        """
        plan = task.plan
        if task.status is SCHEDULED and not task.parked:
            task.entry = self._queue.push(at, task.entry[2], 0 if plan is None else plan.priority)
        else:
            task.entry = (at, -1, task.entry[2])
        if task.status in UNFINISHED:
            self._tasks[task.entry[2]] = task

    def cancel(self, task_id: Hashable) -> bool:
        """Cancel an unfinished task; ``False`` if unknown or finished. O(1) amortised.

        A running or queued run is not interrupted: its completion will find
        the task cancelled and do nothing but report.
        """
        task = self._tasks.get(task_id)
        if task is None:
            return False
        queued_entry = task.status is SCHEDULED and (task.plan is None or not task.plan.paused)
        if task.plan is not None and task.plan.concurrent:
            queued_entry = task.entry[1] != -1
        self._finish(task, CANCELLED)
        if queued_entry:
            self._queue.discard()
        return True

    def is_paused(self, task_id: Hashable) -> bool:
        """True if the task is unfinished and paused. O(1)."""
        task = self._tasks.get(task_id)
        return task is not None and task.plan is not None and task.plan.paused

    def pause(self, task_id: Hashable) -> bool:
        """Keep a task from running until :meth:`resume`; ``False`` if finished or paused.

        A scheduled task's next run is parked outside the queue. A queued or
        running run goes on; the task is parked when it completes. O(1) amortised.
        """
        task = self._tasks.get(task_id)
        if task is None or self.is_paused(task_id):
            return False
        plan = _plan_of(task)
        plan.extra = True  # a paused task's completion parks its next run
        if plan.concurrent:
            plan.paused = True
            self._sync(task, plan)
            return True
        if task.status is SCHEDULED:  # park it: the queued entry goes stale
            task.entry = (task.entry[0], -1, task.entry[2])
            self._queue.discard()  # after the entry changed: a compaction must see it stale
        plan.paused = True
        return True

    def resume(self, task_id: Hashable) -> bool:
        """Let a paused task run again; ``False`` if it is not paused. O(log n).

        A run parked in the past is due at once; slots of a recurring task
        missed while paused meet its misfire policy when it is claimed.
        """
        task = self._tasks.get(task_id)
        if task is None or task.plan is None or not task.plan.paused:
            return False
        plan = task.plan
        parked = task.parked
        plan.paused = False
        plan.extra = plan.uses_controls()
        if plan.concurrent:
            self._sync(task, plan)
            return True
        if not parked:  # paused while running: it was never parked
            return True
        task.entry = self._queue.push(task.entry[0], task.entry[2], plan.priority)
        return True

    def reschedule(
        self, task_id: Hashable, cursor: Cursor | None, at: Time, schedule: object = None
    ) -> bool:
        """Give an unfinished task a new next run at ``at``, then ``cursor``'s runs.

        The task keeps its id, action, status and policies; its retry count
        resets. A queued or running run goes on, and the new schedule takes
        over when it completes. ``schedule`` (the schedule ``cursor`` was
        started from) is what :meth:`info` shows from now on; ``None`` keeps
        the one shown. ``False`` if the task is unknown or finished.
        O(log n).
        """
        task = self._tasks.get(task_id)
        if task is None:
            return False
        plan = _plan_of(task)
        if schedule is not None:
            plan.schedule = schedule
        plan.cursor = cursor
        plan.slot = at
        plan.backlog = None
        plan.last_delay = None
        if plan.concurrent:  # its entry is its next run, whatever is in flight
            if task.entry[1] != -1:
                self._queue.discard()
            task.entry = (at, -1, task_id)
            plan.ended = None
            self._push_slot(task, plan, at, hold=True)
            self._sync(task, plan)
            return True
        if task.status is not SCHEDULED:  # queued or running: the next run is the new one
            plan.backlog = deque([at])
            plan.rescheduled = True  # and the run in progress is not retried
            return True
        plan.attempt = 0
        parked = plan.paused
        self._push_slot(task, plan, at)
        if not parked:
            self._queue.discard()  # the old entry; after the change, as in pause
        return True

    def trigger(self, task_id: Hashable, now: Time) -> bool:
        """Give a scheduled, unpaused task an extra run at ``now``; its schedule goes on.

        The run it had is due next, then its schedule's: nothing is skipped or
        merged, so each accepted trigger is one run of its own (also when a
        run is due already, or another trigger came just before). ``False``
        if the task is unknown, finished, paused, or has a run queued or in
        flight. O(log n).
        """
        task = self._tasks.get(task_id)
        if task is None or task.status is not SCHEDULED:
            return False
        plan = _plan_of(task)
        if plan.paused:
            return False
        due = run_at(task)
        if plan.schedule is None:  # a one-off with no options: keep showing its own time
            plan.schedule = Once(at=due)
        # The run it had waits in the backlog (jittered again, the same, when queued);
        # the trigger's own run is at now, unjittered, and extra: see Plan.extra_runs.
        plan.backlog = deque([due, *(plan.backlog or ())])
        plan.attempt = 0
        plan.last_delay = None
        plan.nominal = None
        plan.extra_runs += 1
        plan.extra = True
        task.entry = self._queue.push(now, task_id, plan.priority)
        self._queue.discard()  # the old entry, as in reschedule
        return True

    def update(
        self, task_id: Hashable, found: Mapping[str, object], action: Action | None = None
    ) -> bool:
        """Change an unfinished task's options in place: plan attributes ``found``
        (validated by the caller, see :func:`rota._scheduler.changes`) and, if
        given, its ``action`` (new arguments). A run in flight finishes as it began:
        the changes wait for it to end, then apply to the runs after it. A new
        priority re-queues a scheduled run. ``False`` if unknown or finished.
        O(log n).
        """
        task = self._tasks.get(task_id)
        if task is None:
            return False
        if action is not None:
            task.action = action
        if not found:
            return True
        plan = _plan_of(task)
        if found.get("concurrent") and isinstance(plan.schedule, FixedDelay):
            raise ValueError(
                f"overlap needs slots that do not wait for a run to end, not "
                f"{plan.schedule!r} (each of its runs starts a delay after the previous "
                "one finished)"
            )
        if plan.concurrent and "concurrent" in found and plan.inflight:
            raise ValueError(
                f"update() cannot change the overlap of task {task_id!r} from "
                f"{'Overlap.REPLACE' if plan.replace else f'Overlap.allow({plan.limit})'} "
                f"while {plan.inflight} of its runs are in flight: change it once they "
                "have ended, or schedule it again (replace_existing=True)"
            )
        if task.status is not SCHEDULED and not plan.concurrent:
            plan.pending = {**(plan.pending or {}), **found}
            plan.extra = True
            return True
        priority = plan.priority
        _apply(plan, found)
        if plan.concurrent:  # each run in flight keeps the policies it was claimed with
            if plan.priority != priority and task.entry[1] != -1:
                self._queue.discard()
                task.entry = (task.entry[0], -1, task_id)
                self._sync(task, plan)
            return True
        if plan.priority != priority and not task.parked:
            task.entry = self._queue.push(task.entry[0], task_id, plan.priority)
            self._queue.discard()  # the old entry, as in reschedule
        return True

    def backfill(self, task_id: Hashable, slots: list[Time], *, idle_only: bool = False) -> int:
        """Queue extra runs of an unfinished task at ``slots`` (ascending), oldest first,
        ahead of its schedule's runs, which they do not move: its current run waits
        behind them, and a run in flight is followed by them. Extra runs are retried as
        any run, but meet no misfire policy or deadline and do not count toward
        ``max_runs``. ``idle_only`` (``Overlap.SKIP``): nothing is queued while a run
        of the task is in flight. Returns the number of runs queued. O(k + log n).
        """
        task = self._tasks.get(task_id)
        if task is None or not slots:
            return 0
        plan = _plan_of(task)
        queued = set(plan.extras or ())  # a slot already queued is not queued twice
        if plan.extra_runs:
            queued.add(run_at(task))
            queued.update(list(plan.backlog or ())[: plan.extra_runs - 1])
        slots = [slot for slot in slots if slot not in queued]
        if not slots:
            return 0
        if plan.concurrent:
            if idle_only and plan.inflight:
                return 0
            if plan.ended is not None:
                return 0
        elif task.status is not SCHEDULED:
            if idle_only:
                return 0
            plan.extras = [*(plan.extras or ()), *slots]
            plan.extra = True
            return len(slots)
        parked = task.parked or (plan.concurrent and task.entry[1] == -1)
        due = run_at(task)
        plan.backlog = deque([*slots[1:], due, *(plan.backlog or ())])
        plan.attempt = 0
        plan.last_delay = None
        plan.nominal = None
        plan.extra_runs += len(slots)
        plan.extra = True
        if parked:
            task.entry = (slots[0], -1, task_id)
        else:
            task.entry = self._queue.push(slots[0], task_id, plan.priority)
            self._queue.discard()
        return len(slots)

    def claim(self, now: Time, *, queued: bool = False) -> Task | None:
        """Take the earliest run due at ``now`` (``at <= now``), or ``None``.

        Its task becomes ``running``, or ``queued`` when ``queued`` is true
        (then :meth:`start` it when a worker picks it up). The caller must
        eventually pass the task to :meth:`complete` (unless :meth:`start`
        refused it). A late run of a task with a bounded misfire policy is
        decided here (see :meth:`_misfire`); if that queues another run in its
        place, the claim goes on in time order, or, for an engine made with
        ``follow_moves=False``, returns ``None`` at once (a store claims that
        run later, in its order with other tasks' runs). O(log n).
        """
        while True:
            task = self._queue.pop_due(now)
            if task is None:
                return None
            plan = task.plan
            if plan is None or not plan.extra:  # the hot path
                move(task, QUEUED if queued else RUNNING)
                return task
            found = self._claim_controlled(task, plan, now, queued)  # misfire and the rest
            if found is not None:
                return found
            if not self._follow:
                return None

    def _claim_controlled(self, task: Task, plan: Plan, now: Time, queued: bool) -> Task | None:
        """:meth:`claim` of a task with scheduling controls: its misfire policy, then its
        deadline, then, for a concurrent task, a run of its own (:meth:`_run_of`).
        ``None`` if the claimed run was moved, skipped or held instead."""
        if task.__class__ is Run:  # a concurrent task's run, its retry due
            return self._retried(task, queued)
        if (
            plan.misfire is not None
            and not plan.backlog
            and not plan.attempt
            and task.entry[0] < now
            and not self._misfire(task, plan, now)
        ):
            return None
        if plan.overlap_skip and plan.windows and not self._apart(task, plan, now):
            return None
        if plan.deadline is not None and not self._in_time(task, plan, now):
            return None
        if plan.concurrent:
            return self._run_of(task, plan, now, queued)
        if plan.nominal is not None:  # out of the queue: the run is its slot from now on
            task.entry = (plan.nominal, -1, task.entry[2])
            plan.nominal = None
        move(task, QUEUED if queued else RUNNING)
        return task

    def _run_of(self, task: Task, plan: Plan, now: Time, queued: bool) -> Task | None:
        """Claim the due run of a concurrent task as a :class:`Run` of its own, and queue
        the task's next run at once (held while ``limit`` runs are in flight). Under
        REPLACE with a run in flight, the runs in flight are marked to be stopped
        (:attr:`stops`) and the due run waits for them to end instead: ``None``.
        O(log n)."""
        task_id = task.entry[2]
        if plan.flying is None:
            plan.flying = []
        if plan.replace and plan.inflight:
            return self._replace(task, plan, now, queued)
        run = _new_run(task, plan, queued)
        plan.inflight += 1
        plan.flying.append(run)
        if task.status is SCHEDULED:
            move(task, RUNNING)
        try:  # the task's next run, now: the cursor moves on at the claim
            nxt = self._following(plan, now, -LIMIT)
        except BaseException as exc:
            exc.add_note(f"rota: the schedule of task {task_id!r} failed; so did the task")
            run.action = raiser(exc)
            nxt = None
            plan.ended = FAILED
        if nxt is None:
            plan.ended = plan.ended or DONE
            task.entry = (task.entry[0], -1, task_id)
        else:
            self._push_slot(task, plan, nxt, hold=True)
            self._sync(task, plan)
        return run

    def _replace(self, task: Task, plan: Plan, now: Time, queued: bool) -> Task | None:
        """REPLACE, a run due while others are in flight: those running are marked to be
        stopped (:attr:`stops`), those waiting for a retry dropped; the due run waits
        (held) until the stopped ones end, or, if none runs, is claimed at once."""
        assert plan.flying is not None
        for other in list(plan.flying):
            if other.replaced:
                continue
            other.replaced = True
            if other.status is SCHEDULED:  # waiting for a retry: dropped, not stopped
                plan.flying.remove(other)
                plan.inflight -= 1
            else:
                self.stops.append(other)
        task.entry = (task.entry[0], -1, task.entry[2])
        plan.held = plan.inflight > 0
        if plan.held:
            return None
        self._sync(task, plan)
        return self.claim(now, queued=queued) if self._follow else None

    def _end(self, task: Task, plan: Plan) -> None:
        """A claimed run's schedule ended without it running: the task is done, or, with
        runs of its own still in flight, done when the last of them ends."""
        if plan.concurrent and plan.inflight:
            plan.ended = DONE
            task.entry = (task.entry[0], -1, task.entry[2])
        else:
            self._finish(task, DONE)

    def _retried(self, run: Run, queued: bool) -> Run | None:
        """A concurrent task's run whose retry came due leaves the table; ``None`` (it
        is forgotten) if its task finished meanwhile or REPLACE dropped it."""
        del self._tasks[run.entry[2]]
        self._waiting -= 1
        run.entry = (run.entry[0], -1, run.parent.entry[2])
        if run.replaced or run.parent.status in FINISHED:
            return None
        move(run, QUEUED if queued else RUNNING)
        return run

    def _sync(self, task: Task, plan: Plan) -> None:
        """Put a concurrent task's next run in the queue, or take it out, as its state
        says: queued unless paused, ended, held (REPLACE), or ``limit`` runs are in
        flight (REPLACE keeps it queued: it is how a slot due meanwhile is seen)."""
        live = task.entry[1] != -1
        want = (
            not plan.paused
            and plan.ended is None
            and not plan.held
            and (plan.replace or plan.inflight < plan.limit)
        )
        if want and not live:
            task.entry = self._queue.push(task.entry[0], task.entry[2], plan.priority)
        elif live and not want:
            task.entry = (task.entry[0], -1, task.entry[2])
            self._queue.discard()

    def _complete_run(
        self, run: Run, error: BaseException | None, started: Time, value: object
    ) -> RunOutcome:
        """:meth:`complete` of a concurrent task's run: its retry, under the policies it
        was claimed with, waits beside the queue; once its slot is over the task may
        start another run (or end, if its schedule did and none is left). O(log n)."""
        task, own = run.parent, run.plan
        assert own is not None
        at = run_at(run)
        attempt = own.attempt
        skipped = own.skipped
        skipped_by: Skips = NO_SKIPS
        if skipped:
            own.skipped = 0
            skipped_by = _skipped_by(own, skipped)
        alive = task.status not in FINISHED
        retry: tuple[Time, Time] | None = None
        if error is not None and alive and not run.replaced:
            try:
                retry = self._retry_of(own, at, error)
            except BaseException as exc:  # its retry policy failed: the run fails with it
                exc.add_note(f"rota: a policy of task {task.entry[2]!r} failed")
                error = exc
        if retry is not None:
            outcome = self._record(run, at, RETRY, error, attempt, started, skipped_by, value)
            if not attempt:
                own.first_at = at
            own.attempt = attempt + 1
            own.last_delay = retry[1]
            own.nominal = None
            move(run, SCHEDULED)
            key = _Waiting()
            self._tasks[key] = run
            self._waiting += 1
            run.entry = self._queue.push(retry[0], key, own.priority)
            task.last = outcome
            return outcome
        result = OK if error is None else Result.FAILED
        outcome = self._record(run, at, result, error, attempt, started, skipped_by, value)
        move(run, DONE if error is None else FAILED)
        if alive:
            task.last = outcome
            self._landed(run, error is not None)
        elif task.plan is not None and task.plan.flying and run in task.plan.flying:
            task.plan.flying.remove(run)  # (a store keeps the runs of a finished task
            task.plan.inflight -= 1  # until each has ended: then its lease is let go)
        return outcome

    def _landed(self, run: Run, failed: bool) -> None:
        """A run of a live concurrent task is over (completed, or replaced before it
        started): one fewer in flight, so the task may run its next (queued again), or
        end if its schedule did and this was the last (``failed``: how it ended)."""
        task = run.parent
        plan = task.plan
        assert plan is not None
        assert plan.flying is not None
        if run in plan.flying:
            plan.flying.remove(run)
            plan.inflight -= 1
        if plan.inflight == 0:
            plan.held = False
            if plan.ended is not None:
                self._finish(task, FAILED if plan.ended is FAILED or failed else DONE)
                return
            move(task, SCHEDULED)
        self._sync(task, plan)

    def adopt_runs(self, task: Task, runs: list[list[Any]], *, again: bool = False) -> None:
        """Take in the runs of an adopted concurrent ``task`` from their stored states
        (:func:`run_state`), then queue its next run as its state says. With
        ``again`` (its holder's lease expired, or it gave a run back), a run that was
        in flight is due again at its own time, as it was claimed (its attempt is not
        counted): at-least-once, same slot and key. O(len(runs) log n).
        """
        plan = task.plan
        assert plan is not None
        plan.flying = []
        alive = task.status not in FINISHED
        for _slot, at, status, attempt, first_at, last_delay, replaced, skipped, skips in runs:
            run = _new_run(task, plan, False, counted=False)
            own = run.plan
            assert own is not None
            own.attempt, own.first_at, own.last_delay = attempt, first_at, last_delay
            own.skipped, own.skips = skipped, skips
            run.replaced = replaced
            waiting = status == SCHEDULED or again
            if (waiting and not alive) or (again and replaced):
                continue  # never to run: a finished task's retry, a run REPLACE stopped
            plan.flying.append(run)
            plan.inflight += 1
            run.entry = (at, -1, task.entry[2])
            if waiting:
                run.status = SCHEDULED
                key = _Waiting()
                self._tasks[key] = run
                self._waiting += 1
                run.entry = self._queue.push(at, key, own.priority)
            else:  # claimed: whether a worker started it yet, its completion is a run's
                run.status = RUNNING
        if again and plan.held:  # the runs it waited for to stop are gone with their node
            plan.held = any(run.status is not SCHEDULED for run in plan.flying)
        if alive:
            self._sync(task, plan)

    def run_of(self, task: Task, slot: Time) -> Run | None:
        """The run of concurrent ``task`` in flight for ``slot`` (:func:`run_slot`), or
        ``None``. O(runs in flight)."""
        plan = task.plan
        for run in () if plan is None or plan.flying is None else plan.flying:
            if run_slot(run) == slot and run.status is not SCHEDULED:
                assert isinstance(run, Run)
                return run
        return None

    def take_stops(self) -> list[Run]:
        """The runs REPLACE decided to stop since the last call (the scheduler signals
        their drivers). O(1)."""
        stops = self.stops
        if stops:
            self.stops = []
        return stops

    def start(self, task: Task) -> bool:
        """Move a claimed ``queued`` run to ``running``. O(1).

        ``False`` if its task was cancelled while queued, or (a concurrent task's
        run) REPLACE replaced it meanwhile (its slot is counted skipped, ``overlap``):
        the run must not start, and needs no :meth:`complete`.
        """
        if task.status is CANCELLED:
            return False
        if task.__class__ is Run:
            if task.parent.status in FINISHED:
                return False
            if task.replaced:  # REPLACE decided on it before it started: it never runs
                parent = task.parent.plan
                assert parent is not None
                _skip(parent, "overlap", 1)
                self._landed(task, False)
                return False
        move(task, RUNNING)
        return True

    # The hot path of every run, kept in one frame: a helper call costs ~1 % of a run.
    def complete(  # noqa: PLR0915
        self,
        task: Task,
        error: BaseException | None,
        started: Time,
        finished: Time,
        no_skips: Skips = NO_SKIPS,  # a local, not a global, on the hot path
    ) -> RunOutcome:
        """Record the result of a claimed run and queue what comes next. O(log n).

        ``error`` is what the action raised, or ``None``; ``finished`` is the
        time the run completed (a fixed-delay task's next run counts from
        it, and misfire policies judge what was missed by it). An
        ``Exception`` is retried while the slot has retries left; any other
        ``BaseException`` (e.g. ``KeyboardInterrupt``) fails the run without
        retry. A task that was cancelled meanwhile is only reported: ``ok``
        or ``failed``, never ``retry``, and nothing else changes. If a policy
        raises, the task fails with that error.
        """
        entry = task.entry
        value = task.value
        if value is not None:
            task.value = None
        plan = task.plan
        if plan is None:  # the contract's defaults: no retries, one run
            result = OK if error is None else Result.FAILED
            task.last = outcome = _new_outcome(
                RunOutcome,
                (entry[2], entry[0], result, error, 0, started, 0, value, NO_SKIPS, 0),
            )
            if task.status is not CANCELLED:
                self._finish(task, DONE if error is None else FAILED)
            return outcome
        at = entry[0]  # the slot, or the retry's time (a claim unjitters its entry)
        extra = plan.extra  # a task with scheduling controls: every check below is on it
        if extra and task.__class__ is Run:
            return self._complete_run(task, error, started, value)
        attempt = plan.attempt
        skipped = plan.skipped
        skipped_by = no_skips
        if skipped:
            plan.skipped = 0
            skipped_by = _skipped_by(plan, skipped)
        if task.status is CANCELLED:
            result = OK if error is None else Result.FAILED
            return self._record(task, at, result, error, attempt, started, skipped_by, value)
        # Decide first: every policy call and check happens here, before any change,
        # so a policy that raises (anything) or returns garbage changes nothing but
        # the task's end: failed, with the error on this outcome.
        retry: tuple[Time, Time] | None = None
        nxt: Time | None = None
        try:
            if error is None:
                result = OK
            else:
                result = Result.FAILED
                retry = self._retry_of(plan, at, error)
            if retry is None:  # the slot is over: its next run is the backlog's or the schedule's
                backlog, cursor = plan.backlog, plan.cursor
                if backlog:
                    nxt = backlog[0]
                elif cursor is not None:
                    nxt = cursor.next(finished)
                    if nxt is not None:
                        if nxt.__class__ not in PLAIN or not plan.slot < nxt <= LIMIT:
                            nxt = _later(plan.slot, nxt, finished)
                        plan.slot = nxt
                if extra:
                    nxt = self._controlled(plan, nxt, started, finished, not backlog)
        except BaseException as exc:  # a policy failed: the task cannot go on
            exc.add_note(f"rota: a policy of task {entry[2]!r} failed; so did the task")
            outcome = self._record(
                task, at, Result.FAILED, exc, attempt, started, skipped_by, value
            )
            self._finish(task, FAILED)
            return outcome
        # Then change: no user code from here on (see _repair for interrupts).
        if retry is not None:
            if extra and plan.overlap_skip and finished > started:
                _busy(plan, started, finished)
            outcome = self._record(task, at, RETRY, error, attempt, started, skipped_by, value)
            self._queue_retry(task, plan, attempt, retry, at)
            return outcome
        jitter = jitter_offset(entry[2], at, plan.jitter) if plan.jitter and not attempt else 0
        task.last = outcome = _new_outcome(
            RunOutcome,
            (entry[2], at, result, error, attempt, started, skipped, value, skipped_by, jitter),
        )
        if extra:
            nxt = _slot_over(plan, nxt, started, finished, attempt)
        elif attempt or plan.backlog:
            _end_slot(plan)
        if nxt is None:
            self._finish(task, DONE if error is None else FAILED)
        elif extra:  # (a paused task is one: its next run is parked)
            move(task, SCHEDULED)
            self._push_slot(task, plan, nxt)  # parks it if paused
        else:  # the recurring hot path: _requeue, inlined
            new = self._queue.push(nxt, entry[2], plan.priority)
            move(task, SCHEDULED)
            task.entry = new
        return outcome

    def _record(
        self,
        task: Task,
        at: Time,
        result: Result,
        error: BaseException | None,
        attempt: int,
        started: Time,
        skipped_by: Skips,
        value: object,
    ) -> RunOutcome:
        """Make the run's outcome and keep it as the task's last (off the hot path)."""
        skipped = sum(skipped_by.values())
        plan, task_id = task.plan, task.entry[2]
        every = None if plan is None or attempt else plan.jitter
        offset = jitter_offset(task_id, at, every) if every else 0
        outcome: RunOutcome = _new_outcome(
            RunOutcome,
            (task_id, at, result, error, attempt, started, skipped, value, skipped_by, offset),
        )
        task.last = outcome
        return outcome

    def _queue_retry(
        self, task: Task, plan: Plan, attempt: int, retry: tuple[Time, Time], at: Time
    ) -> None:
        """Queue the retry ``(time, delay)`` decided for the failed run at ``at``."""
        if not attempt:
            plan.first_at = at
        plan.attempt = attempt + 1
        plan.last_delay = retry[1]
        if plan.extra:
            plan.nominal = None  # a retry runs at its own time, unjittered
            if plan.pending:
                _apply(plan, plan.pending)
        self._requeue(task, retry[0])

    def _controlled(
        self, plan: Plan, nxt: Time | None, started: Time, finished: Time, stepped: bool
    ) -> Time | None:
        """The next run decided at a completion, under the task's scheduling controls.

        ``max_runs`` reached (by a run of the schedule, not an extra one) or a
        next slot past ``end``: none. Under ``Overlap.SKIP`` the runs of the
        schedule that fell due while the run was in flight, in ``(started,
        finished]``, are skipped and counted (:meth:`_overlapped`; ``stepped``:
        ``nxt`` came from the cursor, not the backlog). Raises what the cursor
        raises (the caller fails the task). O(skipped slots), or what the
        cursor's ``skip`` costs.
        """
        if plan.max_runs is not None and not plan.extra_runs and plan.runs + 1 >= plan.max_runs:
            return None
        if (
            plan.overlap_skip
            and nxt is not None
            and plan.extra_runs < 2  # the next run is one of the schedule's, not an extra
            and started < nxt <= finished
        ):
            nxt = self._overlapped(plan, finished, stepped)
        if nxt is not None and plan.end is not None and nxt > plan.end:
            return None
        return nxt

    def _overlapped(self, plan: Plan, finished: Time, stepped: bool) -> Time | None:
        """Under ``Overlap.SKIP``, skip the next runs that fell due while the run was in
        flight (up to ``finished``): the backlog's (slots the misfire policy chose
        before) and the cursor's, stepped or skipped at once (``Cursor.skip``); count
        them. The first run after ``finished``, or ``None``. Raises what the cursor
        raises."""
        count = 0
        nxt: Time | None = None
        backlog = None if stepped else plan.backlog
        if backlog:
            while backlog and backlog[0] <= finished:
                backlog.popleft()
                count += 1
            if backlog:
                nxt = backlog[0]
            else:
                plan.backlog = None
        else:
            count = 1  # the one the cursor gave
        cursor = plan.cursor
        if nxt is None and cursor is not None:
            skip = getattr(cursor, "skip", None)
            if skip is not None:  # every slot up to finished at once (see Cursor.skip)
                skipped, tail = skip(finished, 1)
                count += skipped
                if tail:
                    plan.slot = tail[-1]
            nxt = cursor.next(finished)
            while nxt is not None and _later(plan.slot, nxt, finished) <= finished:
                plan.slot = nxt
                count += 1
                nxt = cursor.next(finished)
            if nxt is not None:
                plan.slot = nxt
        _skip(plan, "overlap", count)
        return nxt

    def _in_time(self, task: Task, plan: Plan, now: Time) -> bool:
        """Whether a claimed run starts within its task's ``deadline`` of its slot.

        Only a slot's first attempt of a run of the schedule is judged (a retry
        keeps its backoff; an extra run, backfilled or triggered, is not a
        slot that can be late). A run later than that is not started: its
        slot and every later one that is also past its deadline are skipped
        and counted (``deadline``; see :meth:`_skip_from`). Returns False then.
        O(skipped slots), or what the cursor's ``skip`` costs.
        """
        deadline = plan.deadline
        assert deadline is not None
        limit = now - deadline
        if plan.attempt or plan.extra_runs or task.entry[0] >= limit:  # its start: jittered
            return True
        task_id, jitter = task.entry[2], plan.jitter

        def kept(at: Time) -> bool:
            return (at + jitter_offset(task_id, at, jitter) if jitter else at) >= limit

        return self._skip_from(task, plan, now, "deadline", kept, limit)

    def _apart(self, task: Task, plan: Plan, now: Time) -> bool:
        """Under ``Overlap.SKIP``: whether a claimed run's slot fell due while none of the
        task's runs was in flight. One that fell due during one (``Plan.windows``) is
        skipped and counted (``overlap``), with every later one that did too. Only a
        first attempt of a run of the schedule is judged. O(skipped slots)."""
        if plan.attempt or plan.extra_runs or not _overlaps(plan, run_at(task)):
            return True
        return self._skip_from(task, plan, now, "overlap", lambda at: not _overlaps(plan, at))

    def _skip_from(
        self,
        task: Task,
        plan: Plan,
        now: Time,
        reason: str,
        kept: Callable[[Time], bool],
        limit: Time = -LIMIT,
    ) -> bool:
        """Skip the claimed run's slot and the following runs that ``kept`` refuses,
        counted for ``reason``; queue the first it keeps in their place (the task is
        done if its schedule ends first), and return False. A cursor that fails makes
        the claimed run fail with its error (see :meth:`_break`), and True."""
        count = 1
        try:
            while True:
                nxt = self._following(plan, now, limit)
                if nxt is None or kept(nxt):
                    break
                count += 1
        except BaseException as exc:
            self._break(task, exc)
            return True
        _skip(plan, reason, count)
        if nxt is None:
            self._end(task, plan)
            return False
        plan.last_delay = None
        self._push_slot(task, plan, nxt)
        return False

    def _following(self, plan: Plan, now: Time, limit: Time) -> Time | None:
        """The run after a skipped one: the backlog's next, else the cursor's (every
        slot that starts before ``limit`` even unjittered stepped over at once when
        the cursor can ``skip``), within ``end`` and ``max_runs``; ``None`` if the
        schedule ends. Raises what the cursor raises."""
        if plan.max_runs is not None and plan.runs >= plan.max_runs:
            return None
        backlog, cursor = plan.backlog, plan.cursor
        if backlog:
            nxt: Time | None = backlog.popleft()
            if not backlog:
                plan.backlog = None
        elif cursor is None:
            return None
        else:
            skip = getattr(cursor, "skip", None)
            bound = limit - plan.jitter if plan.jitter else limit  # offsets are < jitter
            if skip is not None and plan.slot < bound:
                skipped, tail = skip(bound, 1)
                if skipped and tail[-1] == limit:  # exactly at its deadline: in time
                    skipped -= 1
                    plan.slot = tail[-1]
                    _skip(plan, "deadline", skipped)
                    return limit if plan.end is None or limit <= plan.end else None
                if skipped:
                    plan.slot = tail[-1]
                    _skip(plan, "deadline", skipped)
            nxt = cursor.next(now)
            if nxt is not None:
                nxt = _later(plan.slot, nxt, plan.slot)
                plan.slot = nxt
        if nxt is not None and plan.end is not None and nxt > plan.end:
            return None
        return nxt

    def _push_slot(self, task: Task, plan: Plan, at: Time, *, hold: bool = False) -> None:
        """Make the run at ``at`` the task's next: queued, or parked if it is paused (or
        ``hold``: for :meth:`_sync` to queue); started ``jitter_offset`` after ``at`` if
        the task is jittered (``at`` is then kept as its reported time). The caller
        discards a live entry it replaces. O(log n)."""
        task_id = task.entry[2]
        due = at
        if plan.jitter:
            plan.nominal = at
            due = at + jitter_offset(task_id, at, plan.jitter)
        elif plan.nominal is not None:
            plan.nominal = None
        if plan.paused or hold:
            task.entry = (due, -1, task_id)
        else:
            task.entry = self._queue.push(due, task_id, plan.priority)

    def _retry_of(self, plan: Plan, at: Time, error: BaseException) -> tuple[Time, Time] | None:
        """The retry of a failed run at ``at`` as ``(time, delay)``, or ``None``: no retry.

        Only an ``Exception`` is retried, while the slot has retries left,
        and not by a run whose task was rescheduled meanwhile (the new
        schedule takes over). Changes nothing; raises what the retry policy
        raises, or ``TypeError``/``ValueError`` for a retry time that is not
        a finite number.
        """
        attempt = plan.attempt
        if attempt >= plan.max_retries or not isinstance(error, Exception) or plan.rescheduled:
            return None
        retry_on = plan.retry_on
        if retry_on is not None and not (
            isinstance(error, retry_on) if isinstance(retry_on, type | tuple) else retry_on(error)
        ):
            return None
        delay = self._retry_delay(plan, attempt)
        if delay is None:
            return None
        return time_from("retry: the failed run's time + the delay", at + delay), delay

    def _retry_delay(self, plan: Plan, attempt: int) -> Time | None:
        """The delay before retry ``attempt + 1``, by the task's or the default policy.

        Raises ``TypeError``/``ValueError`` for a policy's delay that is not a
        finite number >= 0 (or ``None``), and ``OverflowError`` for a default
        backoff past float range.
        """
        policy = plan.retry or self._retry
        if policy is None:
            backoff: Time = self._backoff * 2**attempt
            return backoff
        delay = policy.delay(attempt + 1, plan.last_delay)
        if delay is None:
            return None
        if time_from(f"{policy!r}.delay()", delay) < 0:
            raise ValueError(f"{policy!r}.delay() returned {delay!r}, a negative delay")
        return delay

    def _misfire(self, task: Task, plan: Plan, now: Time) -> bool:
        """Decide a late run (``at < now``) of a task with a bounded misfire policy.

        The task is *behind* when a later slot is due too (``<= now``). Then
        of the due slots the latest ``plan.misfire`` run, in order, and the
        rest are skipped (counted in ``plan.skipped``, reported on the next
        run). A task that is merely late, not behind, runs as usual. The
        runs after the first, and the first slot after ``now``, wait in the
        plan's backlog. True if the claimed run itself is to run now; else
        the first chosen run is queued in its place, in (time, seq) order
        with every other run (or the task is finished, if its schedule
        ended), and False. A cursor that fails here turns the claimed run
        into one that fails with its error (see :meth:`_break`): the error
        surfaces on that run's outcome. O(due slots), or what the cursor's
        ``skip`` costs if it has one (built-in schedules: not per slot).
        """
        cursor = plan.cursor
        if cursor is None:  # rescheduled to a one-off: nothing to skip
            return True
        first = run_at(task)
        due: deque[Time] = deque([first], maxlen=plan.misfire)  # maxlen 0 keeps none
        count = 1
        try:
            skip = getattr(cursor, "skip", None)
            if skip is not None:  # jump over the backlog (see Cursor.skip)
                skipped, tail = skip(now, max(plan.misfire or 0, 1))
                if skipped:
                    count += skipped
                    due.extend(tail)
                    plan.slot = tail[-1]
            nxt = cursor.next(now)
            while nxt is not None and _later(plan.slot, nxt, plan.slot) <= now:
                plan.slot = nxt
                count += 1
                due.append(nxt)
                nxt = cursor.next(now)
        except BaseException as exc:
            self._break(task, exc)
            return True
        if nxt is not None:
            plan.slot = nxt
        if count == 1:  # late, not behind
            runs = [first]
        else:
            runs = list(due)
            if count > len(runs):
                _skip(plan, "misfire", count - len(runs))
        if nxt is not None:
            runs.append(nxt)
        if plan.extra:  # no run past the end, nor beyond max_runs
            end = plan.end
            if end is not None:
                runs = [r for r in runs if r <= end]
            if plan.max_runs is not None:
                runs = runs[: max(0, plan.max_runs - plan.runs)]
        if not runs:
            self._end(task, plan)
            return False
        plan.backlog = deque(runs[1:]) or None
        if runs[0] == first:
            return True
        self._push_slot(task, plan, runs[0])
        return False

    def _break(self, task: Task, error: BaseException) -> None:
        """Make a claimed run of a task whose policy failed fail with ``error``.

        The action is not called: the run raises ``error`` in its place, and
        with no schedule or retries left the task ends ``failed``. So the
        error reaches the run's outcome, the log and ``on_outcome`` under
        every driver, and a ``BaseException`` propagates as an action's would.
        """
        error.add_note(f"rota: the schedule of task {task.entry[2]!r} failed; so did the task")
        plan = _plan_of(task)
        plan.cursor = None
        plan.backlog = None
        plan.max_retries = 0
        task.action = raiser(error)

    def _requeue(self, task: Task, at: Time) -> None:
        """Queue the task's next run at ``at`` (parked, if it was paused meanwhile)."""
        plan = task.plan
        if plan is None:
            entry = self._queue.push(at, task.entry[2])
        elif plan.paused:
            entry = (at, -1, task.entry[2])
        else:
            entry = self._queue.push(at, task.entry[2], plan.priority)
        move(task, SCHEDULED)
        task.entry = entry

    def _finish(self, task: Task, status: Status) -> None:
        """Move a task to a final status: out of the table, into the history. O(1).

        An id whose ``__eq__`` raises when a hash collision makes a dict
        compare it cannot stop this: the task is then removed by identity, and
        finished ids colliding with it are forgotten (O(n), only then).
        """
        move(task, status)
        task_id = task.entry[2]
        try:
            del self._tasks[task_id]
        except Exception:
            self._drop_by_identity(task)
        history = self._history
        try:
            history[task_id] = status
        except Exception:
            self._remember_past_collisions(task_id, status)
        if len(history) > self._history_limit:
            history.popitem(last=False)

    def _drop_by_identity(self, task: Task) -> None:
        """Remove ``task`` from the table without comparing ids (their ``__eq__`` raised)."""
        kept = [(key, other) for key, other in self._tasks.items() if other is not task]
        self._tasks.clear()  # in place: the queue holds this dict
        self._tasks.update(kept)

    def _remember_past_collisions(self, task_id: Hashable, status: Status) -> None:
        """Put ``task_id`` in the history; the finished ids it collides with (comparing
        them raised) move to :attr:`_strays`, found by identity, not forgotten
        (bounded as the history is)."""
        collide = hash(task_id)
        kept: list[tuple[Hashable, Status]] = []
        strays: list[tuple[Hashable, Status]] = []
        for key, old in self._history.items():
            (strays if hash(key) == collide else kept).append((key, old))
        self._history.clear()
        self._history.update(kept)
        self._history[task_id] = status
        self._strays = [(key, old) for key, old in self._strays if key is not task_id]
        self._strays = (self._strays + strays)[-self._history_limit :]

    def _repair(self) -> None:
        """Re-establish every invariant after an operation was cut short. O(n log n).

        A ``KeyboardInterrupt`` (or another asynchronous exception) can land
        between two steps of an operation; the scheduler calls this whenever
        anything escapes an engine call, before releasing its lock. Every
        step is ordered so that what is left can be read back: a finished
        task still in the table moves to the history; a scheduled run whose
        entry left the queue (a claim cut short before it marked the task)
        goes back; the stale count is recounted. A task left ``running`` is
        its driver's to complete. For tests, ``_check()`` passes afterwards.
        """
        tasks, history = self._tasks, self._history
        for task_id, task in list(tasks.items()):
            if task.status in FINISHED:
                del tasks[task_id]
                history[task_id] = task.status
            elif task_id in history:
                del history[task_id]
        while len(history) > self._history_limit:
            history.popitem(last=False)
        self._queue._repair([task.entry for task in tasks.values() if _queued(task)])

    def _check(self) -> None:
        """Assert the engine's invariants (and the queue's). O(n); for tests."""
        self._queue._check()
        assert len(self._history) <= self._history_limit
        queued = set(self._queue._heap)
        for task_id, task in self._tasks.items():
            assert task.task_id == task_id
            assert task.status in UNFINISHED, task
            assert task_id not in self._history
            assert (task.entry in queued) == _queued(task), (task_id, task.status)
        for status in self._history.values():
            assert status in FINISHED


def _new_run(task: Task, plan: Plan, queued: bool, *, counted: bool = True) -> Run:
    """A run of a concurrent task's due slot, with a plan of its own: the task's retry
    policies as they are now (it finishes as it began), the skips to report on it; it
    counts toward ``max_runs`` unless it is an extra run (or, ``counted`` false, one
    rebuilt from storage, counted when it was claimed). O(1)."""
    run = Run.__new__(Run)
    run.parent = task
    run.replaced = False
    own = Plan(None, plan.max_retries, plan.retry, None, plan.priority)
    own.retry_on = plan.retry_on
    own.extra = True  # complete() tells a run by it, then by its class
    if counted:
        if plan.skipped:  # reported on this run
            own.skipped, own.skips, plan.skipped, plan.skips = plan.skipped, plan.skips, 0, None
        if plan.extra_runs:
            plan.extra_runs -= 1
        elif plan.max_runs is not None:
            plan.runs += 1
    for_run = getattr(task.action, "for_run", None)
    run.action = task.action if for_run is None else for_run(own)
    run.plan = own
    slot = task.entry[0] if plan.nominal is None else plan.nominal  # not its jittered start
    run.entry = (slot, -1, task.entry[2])
    run.status = QUEUED if queued else RUNNING
    run.last = run.value = None
    return run


def run_slot(run: Task) -> Time:
    """The slot of a concurrent task's run (its idempotency key's): its entry's time,
    or its first attempt's while it is retried. O(1)."""
    own = run.plan
    assert own is not None
    return own.first_at if own.attempt else run.entry[0]


def run_state(run: Task) -> list[Any]:
    """A concurrent task's run as a store keeps it (JSON), for :meth:`Engine.adopt_runs`:
    slot, entry time, status, attempt, first attempt's time, last delay, replaced,
    skips to report. O(1)."""
    own = run.plan
    assert own is not None
    replaced = isinstance(run, Run) and run.replaced
    return [
        run_slot(run), run.entry[0], str(run.status), own.attempt, own.first_at,
        own.last_delay, replaced, own.skipped, own.skips,
    ]  # fmt: skip


def _queued(task: Task) -> bool:
    """Whether the task's entry belongs in the queue: scheduled and not paused, or, for a
    concurrent task (whose entry is its next run beside its runs), not parked."""
    plan = task.plan
    if plan is not None and plan.concurrent:
        return task.entry[1] != -1
    return task.status is SCHEDULED and not task.parked


def _info(task: Task) -> TaskInfo:
    """What is known of an unfinished task."""
    plan = task.plan
    at = task.entry[0]
    if plan is None:
        return task_info(task.entry[2], task.status, False, at, Once(at=at), 0, at, task.last)
    slot = plan.first_at if plan.attempt else at if plan.nominal is None else plan.nominal
    return task_info(
        task.entry[2], task.status, plan.paused, at, plan.schedule, plan.attempt, slot, task.last
    )


def task_info(
    task_id: Hashable,
    status: Status,
    paused: bool,
    due: Time,
    schedule: object,
    attempt: int,
    slot: Time,
    last: RunOutcome | None,
) -> TaskInfo:
    """What :meth:`Scheduler.info` shows of a task, wherever it lives: the one rule.

    ``due`` is its current run's time, ``slot`` that run's slot (they differ
    for a retry), ``schedule`` the schedule it was given (``None``: one this
    process cannot read). A finished task shows only its status; a one-off shows the
    instant of its slot (``Once(at=...)``), not the delay it was given, which
    meant something only when it was scheduled. O(1).
    """
    if status in FINISHED:
        return TaskInfo(task_id, status, False, None, None, 0, None)
    if type(schedule) is Once and schedule.at is None:
        schedule = Once(at=slot)
    nxt = due if status is SCHEDULED and not paused else None
    return TaskInfo(task_id, status, paused, nxt, schedule, attempt, last)


WINDOWS = 64
"""The most in-flight spans of a task kept for ``Overlap.SKIP`` (the latest): a slot
is judged against the runs that were in flight since it fell due."""


def _busy(plan: Plan, started: Time, finished: Time) -> None:
    """Remember that a run of the task was in flight over ``(started, finished]``."""
    windows = plan.windows
    if windows is None:
        windows = plan.windows = deque(maxlen=WINDOWS)
    windows.append((started, finished))


def _overlaps(plan: Plan, at: Time) -> bool:
    """Whether a slot at ``at`` fell due while a run of the task was in flight; spans
    that ended before it are forgotten (slots are judged in time order)."""
    windows = plan.windows
    if not windows:
        return False
    while windows and windows[0][1] < at:
        windows.popleft()
    return any(start < at <= end for start, end in windows)


def _skip(plan: Plan, reason: str, count: int) -> None:
    """Count ``count`` slots skipped for ``reason``, to report on the task's next run."""
    plan.skipped += count
    skips = plan.skips
    if skips is None:
        plan.skips = {reason: count}
    else:
        skips[reason] = skips.get(reason, 0) + count


def _skipped_by(plan: Plan, skipped: int) -> Skips:
    """The skips reported on this run, by reason (taken from the plan)."""
    skips = plan.skips
    plan.skips = None
    return Skips(skips if skips else {"misfire": skipped})


def _slot_over(
    plan: Plan, nxt: Time | None, started: Time, finished: Time, attempt: int
) -> Time | None:
    """A slot's last run completed, under a task with scheduling controls: remember
    when it was in flight (``Overlap.SKIP``), count it toward ``max_runs`` (an extra
    run is not counted: it leaves the extras), apply the changes that waited for it
    (:meth:`Engine.update`), end the slot; the next run: ``nxt``, or the first of the
    extra runs asked for while this one ran."""
    if plan.overlap_skip and finished > started:
        _busy(plan, started, finished)
    if plan.extra_runs:
        plan.extra_runs -= 1
    elif plan.max_runs is not None:
        plan.runs += 1
    if plan.pending:
        _apply(plan, plan.pending)
    if attempt or plan.backlog:
        _end_slot(plan)
    if plan.extras:  # extra runs asked for while this one ran go first
        nxt = _take_extras(plan, nxt)
    return nxt


def _take_extras(plan: Plan, nxt: Time | None) -> Time | None:
    """The first of the extra runs that waited for the run in flight; the rest, then
    ``nxt`` (the schedule's next), wait in the backlog. A schedule that just ended
    (``nxt`` is ``None``) ends the task: its waiting extras are dropped."""
    extras, plan.extras = plan.extras, None
    if nxt is None or not extras:
        return nxt
    plan.backlog = deque([*extras[1:], nxt, *(plan.backlog or ())])
    plan.extra_runs += len(extras)
    plan.nominal = None
    return extras[0]


def _apply(plan: Plan, changes: Mapping[str, object]) -> None:
    """Set plan attributes (validated by the caller); the changes no longer wait."""
    for name, value in changes.items():
        setattr(plan, name, value)
    plan.pending = None
    plan.extra = plan.uses_controls()


def _end_slot(plan: Plan) -> None:
    """A slot's last run completed: reset its retries; its next run leaves the backlog."""
    plan.attempt = 0
    plan.last_delay = None
    if plan.backlog:
        plan.backlog.popleft()
        plan.rescheduled = False


def _plan_of(task: Task) -> Plan:
    """The task's plan, created on first need (pause, reschedule, update, ...); a
    one-off's then keeps showing its own time as its schedule."""
    if task.plan is None:
        task.plan = Plan()
        task.plan.schedule = Once(at=task.entry[0])
    return task.plan
