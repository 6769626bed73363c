"""A task and its runs: what the engine's table holds, and the one rule of status
changes (:data:`TRANSITIONS`, :func:`move`)."""

from __future__ import annotations

from collections.abc import Hashable
from typing import Any

from rota.schedules import Once

from .policy import Plan
from .queue import Entry
from .types import (
    FINISHED,
    Action,
    Result,
    RunOutcome,
    Status,
    TaskInfo,
    Time,
    slot_time,
)  # fmt: skip
from .validate import time_from

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


def admitted(unfinished: bool, replace: bool | None) -> bool:
    """Whether a task scheduled under an id takes it: a free or finished id always; an
    ``unfinished`` task's only when the call replaces it (``replace``: that task is
    cancelled, its run in flight only reported). The rule of every ``schedule*`` call,
    in memory and on every store. O(1)."""
    return not unfinished or bool(replace)


def deferred(task: Task) -> bool:
    """Whether a change to ``task``'s options waits for its run in flight: a run
    finishes as it began, so the changes apply to the runs after it (a concurrent
    task's apply at once: each run in flight keeps the policies it was claimed with).
    The rule of ``update`` in memory and on every store. O(1)."""
    return task.status is not SCHEDULED and not _plan_of(task).concurrent


def reported(error: BaseException | None) -> Result:
    """The result of a run that is reported and not retried: ``ok``, or ``failed``
    with its ``error``. How a run ends whose task was cancelled (or replaced) while it
    ran, in memory and on every store: never ``retry``. O(1)."""
    return OK if error is None else Result.FAILED


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


def run_slot(run: Task) -> Time:
    """The slot of a concurrent task's run (its idempotency key's): its entry's time,
    or its first attempt's while it is retried. O(1)."""
    own = run.plan
    assert own is not None
    return slot_time(own.attempt, own.first_at, run.entry[0], own.moved)


def run_state(run: Task) -> list[Any]:
    """A concurrent task's run as a store keeps it (JSON), for :meth:`Engine.adopt_runs`:
    slot, entry time, status, attempt, first attempt's time, last delay, replaced,
    skips to report, where its window begins. O(1)."""
    own = run.plan
    assert own is not None
    replaced = isinstance(run, Run) and run.replaced
    return [
        run_slot(run), run.entry[0], str(run.status), own.attempt, own.first_at,
        own.last_delay, replaced, own.skipped, own.skips, own.window,
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
    slot = slot_time(
        plan.attempt, plan.first_at, at if plan.nominal is None else plan.nominal, plan.moved
    )
    due = at if plan.waiting is None else run_at(task)
    return task_info(
        task.entry[2], shown_status(task), plan.paused, due, plan.schedule, plan.attempt,
        slot, task.last, plan.last_skipped, plan.waiting,
    )  # fmt: skip


def waits_for_place(task: Task) -> bool:
    """Whether ``task``'s run waits for a place in its pool (then it shows ``queued``).
    O(1)."""
    plan = task.plan
    return (
        plan is not None
        and plan.pool is not None
        and task.status is SCHEDULED
        and plan.waiting == (plan.pool.waiting,)
    )


def shown_status(task: Task) -> Status:
    """The status ``status()`` and ``info()`` show of an unfinished task: ``queued``
    while its run waits for a place in its pool, else its own. O(1)."""
    return QUEUED if waits_for_place(task) else task.status


def task_info(
    task_id: Hashable,
    status: Status,
    paused: bool,
    due: Time,
    schedule: object,
    attempt: int,
    slot: Time,
    last: RunOutcome | None,
    skipped: tuple[Time, str, str | None] | None = None,
    waiting: tuple[str, ...] | list[str] | None = None,
) -> TaskInfo:
    """What :meth:`Scheduler.info` shows of a task, wherever it lives: the one rule.

    ``due`` is its current run's time, ``slot`` that run's slot (they differ
    for a retry), ``schedule`` the schedule it was given (``None``: one this
    process cannot read). A finished task shows only its status; a one-off shows the
    instant of its slot (``Once(at=...)``), not the delay it was given, which
    meant something only when it was scheduled. ``skipped``: the latest slot it
    skipped (``TaskInfo.last_skipped``); ``waiting``: what its run waits for. O(1).
    """
    if status in FINISHED:
        return TaskInfo(task_id, status, False, None, None, 0, None)
    if type(schedule) is Once and schedule.at is None:
        schedule = Once(at=slot)
    nxt = due if status is SCHEDULED and not paused else None
    return TaskInfo(
        task_id, status, paused, nxt, schedule, attempt, last, skipped, tuple(waiting or ())
    )


def _plan_of(task: Task) -> Plan:
    """The task's plan, created on first need (pause, reschedule, update, ...); a
    one-off's then keeps showing its own time as its schedule."""
    if task.plan is None:
        task.plan = Plan()
        task.plan.schedule = Once(at=task.entry[0])
    return task.plan
