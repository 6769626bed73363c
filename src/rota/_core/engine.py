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
in a task's :class:`~rota._core.policy.Plan`; a task with the contract's
defaults has none, and its hot path does not look further. Policy objects are
called under the scheduler's lock and are expected to be quick and pure.
Whatever one does - raise an ``Exception`` or a ``BaseException``, or
return something that is not a finite time - its task fails with a run
outcome that carries the error; nothing is left stuck and no bad time ever
enters the queue.
"""

from __future__ import annotations

from collections import OrderedDict, deque
from collections.abc import Hashable

from .controls import (
    Controls,
    _busy,
    _end_slot,
    _skip,
    _skipped_by,
    _slot_over,
    _window_after,
)
from .moves import Upcoming, upcoming
from .policy import Cursor, Plan, RetryPolicy, jitter_offset
from .pools import Pools
from .queue import RunQueue
from .retries import Retries
from .task import (
    CANCELLED,
    DONE,
    FAILED,
    OK,
    QUEUED,
    RETRY,
    RUNNING,
    SCHEDULED,
    Run,
    Task,
    _info,
    _later,
    _plan_of,
    _queued,
    admitted,
    move,
    raiser,
    reported,
    run_at,
    run_slot,
    shown_status,
    task_info,
    waits_for_place,
)
from .types import (
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
    slot_time,
)  # fmt: skip
from .validate import LIMIT, PLAIN
from .waits import ENDS, Results, Waits

HISTORY = 10_000
"""Finished tasks whose status stays queryable; the oldest is forgotten first.
The contract promises at least 10,000."""


_new_outcome = tuple.__new__


class Engine(Controls, Waits, Pools, Retries):
    """Task table + run queue + finished-task history, driven by ``now``.

    ``retry`` is the default retry policy; ``None`` is the contract's
    ``backoff * 2 ** (r - 1)``, computed inline. Costs: :meth:`add`,
    :meth:`cancel`, :meth:`claim` and :meth:`complete` are O(log n) (plus,
    under a misfire policy, O(missed slots)); :meth:`status` is O(1);
    :meth:`next_time` is O(1) amortised.
    """

    # (the table, the queue and the runs of concurrent tasks are Controls' slots)
    __slots__ = (
        "_backoff", "_dependants", "_history", "_history_limit", "_parked", "_places",
        "_results", "_retry", "_strays",
    )  # fmt: skip

    follow_moves = True
    """Whether a claim whose misfire policy moved its run goes on to claim in time order
    (in memory); a store's engine of one task returns instead (see :meth:`claim`)."""

    def __init__(self, backoff: Time, retry: RetryPolicy | None = None) -> None:
        self._backoff = backoff
        self._retry = retry
        self._tasks: dict[Hashable, Task] = {}
        # Finished ids: their final status only. Not the task (it would pin its action),
        # not its last outcome (keeping one per finished task costs ~5 % of every run).
        self._history: OrderedDict[Hashable, Status] = OrderedDict()
        self._history_limit = HISTORY
        # Finished ids the history cannot hold beside another of their hash (comparing
        # them raised): kept by identity, not forgotten. Empty but for such ids.
        self._strays: list[tuple[Hashable, Status]] = []
        self.queue: RunQueue[Task] = RunQueue(self._tasks)
        # Runs of concurrent tasks waiting for a retry sit in the table (and the queue)
        # under a key of their own (_Waiting), so a claim needs no second queue.
        self._waiting = 0
        self.stops: list[Run] = []  # runs REPLACE decided to stop, for the scheduler to signal
        # Upstream ids -> the tasks that wait for them; how their runs ended (see Waits)
        self._dependants: dict[Hashable, set[Hashable]] = {}
        self._results: dict[Hashable, Results] = {}
        # Pools' places held and runs parked for one (see Pools)
        self._places: dict[str, set[Hashable]] = {}
        self._parked: dict[str, set[Hashable]] = {}

    # -- queries ---------------------------------------------------------

    def status(self, task_id: Hashable) -> Status | None:
        """The task's status, or ``None`` if unknown or forgotten. O(1); O(n) for an id
        whose ``__eq__`` raises against another of its hash (found by identity)."""
        try:
            task = self._tasks.get(task_id)
            if task is not None:
                return shown_status(task)
            found = self._history.get(task_id)
        except Exception:
            task, found = self._by_identity(task_id)
            return shown_status(task) if task is not None else found
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

    def upcoming(self, task_id: Hashable, n: int) -> list[Upcoming]:
        """The task's next ``n`` slots, each with when it runs and what its calendar
        did: the one rule for every table (:func:`rota._core.moves.upcoming`, on a
        copy of its cursor). Empty for an unknown or finished task. O(n) decisions."""
        task = self._tasks.get(task_id)
        if task is None:
            return []
        plan = task.plan
        at = run_at(task)
        decided = task.status is SCHEDULED or (plan is not None and plan.concurrent)
        if plan is None:
            return [Upcoming(at, at, None)] if decided and n else []
        slot = slot_time(plan.attempt, plan.first_at, at, plan.moved)
        return upcoming(plan.schedule, plan.cursor, (slot, at) if decided else None, n)

    def infos(self) -> list[TaskInfo]:
        """A :class:`TaskInfo` for every unfinished task. O(n)."""
        return [_info(task) for task in self._tasks.values() if task.__class__ is not Run]

    def next_time(self) -> Time | None:
        """The time of the earliest live run, or ``None``. O(1) amortised."""
        entry = self.queue.peek()
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
            if not admitted(True, replace):
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
            task.entry = self.queue.push(at, task_id)
        else:
            if plan.after:
                self.watch(task_id, plan.after)
            plan.slot = at
            if plan.extra:
                task.entry = (at, -1, task_id)  # gives _push_slot the id
                self._push_slot(task, plan, at)
            else:
                task.entry = self.queue.push(at, task_id, plan.priority)
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
        queued_entry = task.status is SCHEDULED and (task.plan is None or not task.plan.paused)
        if task.plan is not None and task.plan.concurrent:
            queued_entry = task.entry[1] != -1
        self._finish(task, CANCELLED)
        if queued_entry:
            self.queue.discard()
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
            self.queue.discard()  # after the entry changed: a compaction must see it stale
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
        at = task.entry[0]
        if waits_for_place(task):  # its run waited for a place: decided again at its time
            at, plan.waiting = run_at(task), None
        task.entry = self.queue.push(at, task.entry[2], plan.priority)
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
        plan.extra = plan.uses_controls()
        if plan.concurrent:  # its entry is its next run, whatever is in flight
            if task.entry[1] != -1:
                self.queue.discard()
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
            self.queue.discard()  # the old entry; after the change, as in pause
        return True

    def claim(self, now: Time, *, queued: bool = False) -> Task | None:
        """Take the earliest run due at ``now`` (``at <= now``), or ``None``.

        Its task becomes ``running``, or ``queued`` when ``queued`` is true
        (then :meth:`start` it when a worker picks it up). The caller must
        eventually pass the task to :meth:`complete` (unless :meth:`start`
        refused it). A late run of a task with a bounded misfire policy is
        decided here (see :meth:`_misfire`); if that queues another run in its
        place, the claim goes on in time order, or, for an engine made with
        ``follow_moves`` false, returns ``None`` at once (a store claims that
        run later, in its order with other tasks' runs). O(log n).
        """
        while True:
            task = self.queue.pop_due(now)
            if task is None:
                return None
            plan = task.plan
            if plan is None or not plan.extra:  # the hot path
                if plan is not None and plan.pool is not None and not self._take_place(task, plan):
                    continue  # its pool is full: parked (see Pools)
                move(task, QUEUED if queued else RUNNING)
                return task
            found = self._claim_controlled(task, plan, now, queued)  # misfire and the rest
            if found is not None:
                return found
            if not self.follow_moves:
                return None

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
                _skip(parent, "overlap", 1, run_slot(task))
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
            if self._dependants and entry[2] in self._dependants:
                self.upstream_ended(entry[2], entry[0], ENDS[result], started)
            if task.status is not CANCELLED:
                self._finish(task, DONE if error is None else FAILED)
            return outcome
        at = entry[0]  # the slot, or the retry's time (a claim unjitters its entry)
        extra = plan.extra  # a task with scheduling controls: every check below is on it
        if plan.pool is not None:  # its place frees (the claims after decide who)
            self._free_place(task)
        if extra and task.__class__ is Run:
            return self._complete_run(task, error, started, value)
        attempt = plan.attempt
        skipped = plan.skipped
        skipped_by = no_skips
        if skipped:
            plan.skipped = 0
            skipped_by = _skipped_by(plan, skipped)
        if task.status is CANCELLED:
            return self._record(
                task, at, reported(error), error, attempt, started, skipped_by, value
            )
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
                if extra:  # (its window first: skipping slots moves it on)
                    slot = slot_time(attempt, plan.first_at, at, plan.moved)
                    plan.window = _window_after(plan, nxt, slot) if backlog else slot
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
        else:  # the next run's window begins at this one's slot
            plan.window = plan.first_at if attempt else at
            if attempt or plan.backlog:
                _end_slot(plan)
        if nxt is None:
            self._finish(task, DONE if error is None else FAILED)
        elif extra:  # (a paused task is one: its next run is parked)
            move(task, SCHEDULED)
            self._push_slot(task, plan, nxt)  # parks it if paused
        else:  # the recurring hot path: _requeue, inlined
            new = self.queue.push(nxt, entry[2], plan.priority)
            move(task, SCHEDULED)
            task.entry = new
        if self._dependants and entry[2] in self._dependants:  # someone waits for it
            slot = slot_time(attempt, plan.first_at, at, plan.moved)
            self.upstream_ended(entry[2], slot, ENDS[result], started)
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
        keep = plan.misfire or 0
        # the due slots to run, and the latest skipped before them
        due: deque[Time] = deque([first], maxlen=keep + 1)
        count = 1
        try:
            skip = getattr(cursor, "skip", None)
            if skip is not None:  # jump over the backlog (see Cursor.skip)
                skipped, tail = skip(now, keep + 1)
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
        last_due = plan.slot
        if nxt is not None:
            plan.slot = nxt
        if count == 1:  # late, not behind
            runs = [first]
        else:
            runs = list(due)[-keep:] if keep else []
            if count > len(runs):
                _skip(plan, "misfire", count - len(runs), due[0])
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
        if not keep:  # none of the missed slots runs: the next run covers none of them
            plan.window = last_due
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
            entry = self.queue.push(at, task.entry[2])
        elif plan.paused:
            entry = (at, -1, task.entry[2])
        else:
            entry = self.queue.push(at, task.entry[2], plan.priority)
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
        if self._dependants:  # its waits end; the runs waiting for its slots are decided
            self.gone(task_id, task.plan)
        if self._places and task.plan is not None and task.plan.pool is not None:
            self._free_place(task)

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
        self.queue._repair([task.entry for task in tasks.values() if _queued(task)])

    def _check(self) -> None:
        """Assert the engine's invariants (and the queue's). O(n); for tests."""
        self.queue._check()
        assert len(self._history) <= self._history_limit
        queued = set(self.queue.heap)
        for task_id, task in self._tasks.items():
            assert task.task_id == task_id
            assert task.status in UNFINISHED, task
            assert task_id not in self._history
            assert (task.entry in queued) == _queued(task), (task_id, task.status)
        for status in self._history.values():
            assert status in FINISHED
