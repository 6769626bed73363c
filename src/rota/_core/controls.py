"""The scheduling controls (``docs/policies.md``), as decisions of the engine: overlap
(``SKIP``, ``allow(n)``, ``REPLACE``: a concurrent task's runs of their own),
``deadline``, ``end`` and ``max_runs``, and the slots they skip and count.

:class:`Controls` is the part of :class:`~rota._core.engine.Engine` that decides them;
the engine calls it only for a task whose plan uses a control (``plan.extra``), so
the contract's hot paths never enter this module.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable, Hashable, Mapping

from rota.schedules import Once

from .checks import check_concurrent, overlap_changed
from .moves import recalendar
from .policy import Plan, jitter_offset
from .queue import RunQueue
from .task import (
    Run,
    Task,
    _later,
    _plan_of,
    _Waiting,
    deferred,
    move,
    raiser,
    reported,
    run_at,
)
from .types import (
    FINISHED,
    NO_SKIPS,
    Action,
    Result,
    RunOutcome,
    Skips,
    Status,
    Time,
    slot_time,
)  # fmt: skip
from .validate import LIMIT


class Controls:
    """The engine's decisions for tasks with scheduling controls (a mixin of
    :class:`~rota._core.engine.Engine`, whose fields and decisions it uses: below)."""

    __slots__ = ("_tasks", "_waiting", "queue", "stops")

    # The engine's table, queue and concurrent runs, set by Engine.__init__ (see there)
    _tasks: dict[Hashable, Task]
    queue: RunQueue[Task]
    _waiting: int
    follow_moves: bool
    stops: list[Run]
    # The engine's own decisions these defer to
    claim: Callable[..., Task | None]
    _upstream_holds: Callable[[Task, Plan, Time], bool]
    _take_place: Callable[[Task, Plan], bool]
    rewatch: Callable[[Hashable, Plan, Mapping[str, object]], None]
    _break: Callable[[Task, BaseException], None]
    _finish: Callable[[Task, Status], None]
    _misfire: Callable[[Task, Plan, Time], bool]
    _record: Callable[..., RunOutcome]
    _retry_of: Callable[[Plan, Time, BaseException], tuple[Time, Time] | None]

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
        if plan.deadline is not None and not plan.waiting and not self._in_time(task, plan, now):
            return None  # (a waiting run's deadline is its upstreams': see Waits)
        if plan.after and not plan.attempt and not self._upstream_holds(task, plan, now):
            return None
        if plan.pool is not None and not self._take_place(task, plan):
            return None  # parked until a place frees
        if plan.concurrent:
            return self._run_of(task, plan, now, queued)
        if plan.nominal is not None:  # out of the queue: the run is its slot from now on
            task.entry = (plan.nominal, -1, task.entry[2])
            plan.nominal = None
        move(task, Status.QUEUED if queued else Status.RUNNING)
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
        own_slot = run.plan.moved  # type: ignore[union-attr]
        plan.inflight += 1
        plan.flying.append(run)
        if task.status is Status.SCHEDULED:
            move(task, Status.RUNNING)
        try:  # the task's next run, now: the cursor moves on at the claim
            nxt = self._following(
                plan, now, -LIMIT, run.entry[0] if own_slot is None else own_slot
            )
        except BaseException as exc:
            exc.add_note(f"rota: the schedule of task {task_id!r} failed; so did the task")
            run.action = raiser(exc)
            nxt = None
            plan.ended = Status.FAILED
        if nxt is None:
            plan.ended = plan.ended or Status.DONE
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
            if other.status is Status.SCHEDULED:  # waiting for a retry: dropped, not stopped
                plan.flying.remove(other)
                plan.inflight -= 1
            else:
                self.stops.append(other)
        task.entry = (task.entry[0], -1, task.entry[2])
        plan.held = plan.inflight > 0
        if plan.held:
            return None
        self._sync(task, plan)
        return self.claim(now, queued=queued) if self.follow_moves else None

    def _end(self, task: Task, plan: Plan) -> None:
        """A claimed run's schedule ended without it running: the task is done, or, with
        runs of its own still in flight, done when the last of them ends."""
        if plan.concurrent and plan.inflight:
            plan.ended = Status.DONE
            task.entry = (task.entry[0], -1, task.entry[2])
        else:
            self._finish(task, Status.DONE)

    def _retried(self, run: Run, queued: bool) -> Run | None:
        """A concurrent task's run whose retry came due leaves the table; ``None`` (it
        is forgotten) if its task finished meanwhile or REPLACE dropped it."""
        del self._tasks[run.entry[2]]
        self._waiting -= 1
        run.entry = (run.entry[0], -1, run.parent.entry[2])
        if run.replaced or run.parent.status in FINISHED:
            return None
        move(run, Status.QUEUED if queued else Status.RUNNING)
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
            task.entry = self.queue.push(task.entry[0], task.entry[2], plan.priority)
        elif live and not want:
            task.entry = (task.entry[0], -1, task.entry[2])
            self.queue.discard()

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
            outcome = self._record(
                run, at, Result.RETRY, error, attempt, started, skipped_by, value
            )
            if not attempt:
                own.first_at = at if own.moved is None else own.moved
            own.attempt = attempt + 1
            own.last_delay = retry[1]
            own.nominal = None
            move(run, Status.SCHEDULED)
            key = _Waiting()
            self._tasks[key] = run
            self._waiting += 1
            run.entry = self.queue.push(retry[0], key, own.priority)
            task.last = outcome
            return outcome
        outcome = self._record(
            run, at, reported(error), error, attempt, started, skipped_by, value
        )
        move(run, Status.DONE if error is None else Status.FAILED)
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
                self._finish(
                    task, Status.FAILED if plan.ended is Status.FAILED or failed else Status.DONE
                )
                return
            move(task, Status.SCHEDULED)
        self._sync(task, plan)

    def take_stops(self) -> list[Run]:
        """The runs REPLACE decided to stop since the last call (the scheduler signals
        their drivers). O(1)."""
        stops = self.stops
        if stops:
            self.stops = []
        return stops

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
                plan.window = backlog.popleft()  # skipped: the next run's window begins there
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
                plan.window = plan.slot  # the latest skipped
                plan.slot = nxt
        _skip(plan, "overlap", count, plan.window)
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
        skipped = slot_time(0, None, run_at(task), plan.moved)
        try:
            while True:
                nxt = self._following(plan, now, limit, skipped)
                if nxt is None or kept(nxt):
                    break
                skipped = nxt
                count += 1
        except BaseException as exc:
            self._break(task, exc)
            return True
        _skip(plan, reason, count, skipped if nxt is None else plan.window)
        if nxt is None:
            self._end(task, plan)
            return False
        plan.last_delay = None
        self._push_slot(task, plan, nxt)
        return False

    def _following(self, plan: Plan, now: Time, limit: Time, before: Time) -> Time | None:
        """The run after a skipped or claimed one of slot ``before``: the backlog's next,
        else the cursor's (every slot that starts before ``limit`` even unjittered
        stepped over at once when the cursor can ``skip``), within ``end`` and
        ``max_runs``, its window set (``plan.window``); ``None`` if the schedule ends.
        Raises what the cursor raises."""
        if plan.max_runs is not None and plan.runs >= plan.max_runs:
            return None
        backlog, cursor = plan.backlog, plan.cursor
        if backlog:
            nxt: Time | None = backlog.popleft()
            plan.window = _window_after(plan, nxt, before)
            if not backlog:
                plan.backlog = None
        elif cursor is None:
            return None
        else:
            skip = getattr(cursor, "skip", None)
            bound = limit - plan.jitter if plan.jitter else limit  # offsets are < jitter
            if skip is not None and plan.slot < bound:
                skipped, tail = skip(bound, 2)
                if skipped and tail[-1] == limit:  # exactly at its deadline: in time
                    skipped -= 1
                    plan.window = tail[-2] if len(tail) > 1 else plan.slot
                    plan.slot = tail[-1]
                    _skip(plan, "deadline", skipped, plan.window if skipped else None)
                    return limit if plan.end is None or limit <= plan.end else None
                if skipped:
                    plan.slot = tail[-1]
                    _skip(plan, "deadline", skipped, tail[-1])
            nxt = cursor.next(now)
            if nxt is not None:
                nxt = _later(plan.slot, nxt, plan.slot)
                plan.window = plan.slot
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
        take = getattr(plan.cursor, "take_excluded", None)
        if take is not None:  # a calendar's: the slots it skipped, the slot it moved
            skipped = take()
            if skipped:
                _skip(plan, "calendar", skipped)
                last = plan.cursor.last_skipped  # type: ignore[union-attr]
                plan.last_skipped = None if last is None else (last[0], "calendar", last[1])
            if not plan.extra_runs:
                cursor = plan.cursor
                plan.moved = cursor.slot_of(at)  # type: ignore[union-attr]
                since = cursor.window_of(at)  # type: ignore[union-attr]
                if since is not None:  # the slot before the earliest the run stands for
                    plan.window = since
            else:
                plan.moved = None
        if plan.jitter:
            plan.nominal = at
            due = at + jitter_offset(task_id, at, plan.jitter)
        elif plan.nominal is not None:
            plan.nominal = None
        if plan.paused or hold:
            task.entry = (due, -1, task_id)
        else:
            task.entry = self.queue.push(due, task_id, plan.priority)

    def trigger(self, task_id: Hashable, now: Time) -> bool:
        """Give a scheduled, unpaused task an extra run at ``now``; its schedule goes on.

        The run it had is due next, then its schedule's: nothing is skipped or
        merged, so each accepted trigger is one run of its own (also when a
        run is due already, or another trigger came just before). ``False``
        if the task is unknown, finished, paused, or has a run queued or in
        flight. O(log n).
        """
        task = self._tasks.get(task_id)
        if task is None or task.status is not Status.SCHEDULED:
            return False
        plan = _plan_of(task)
        if plan.paused:
            return False
        due = run_at(task)
        if plan.schedule is None:  # a one-off with no options: keep showing its own time
            plan.schedule = Once(at=due)
        # The trigger's run covers from the latest slot at or before now; the run it
        # had keeps its window, waiting in the backlog.
        slot = due if plan.moved is None else plan.moved
        window = plan.window
        if window is not None:
            plan.ahead = {**(plan.ahead or {}), due: window}
        plan.window = slot if slot <= now else now if window is None else window
        # The run it had waits in the backlog (jittered again, the same, when queued);
        # the trigger's own run is at now, unjittered, and extra: see Plan.extra_runs.
        plan.backlog = deque([due, *(plan.backlog or ())])
        plan.attempt = 0
        plan.last_delay = None
        plan.nominal = plan.moved = None
        plan.extra_runs += 1
        plan.extra = True
        plan.triggered = bool(plan.after)  # a trigger's run does not wait for its upstreams
        plan.waiting = None
        live = task.entry[1] != -1  # (a waiting run's may be parked outside the queue)
        task.entry = self.queue.push(now, task_id, plan.priority)
        if live:
            self.queue.discard()  # the old entry, as in reschedule
        return True

    def update(
        self, task_id: Hashable, found: Mapping[str, object], action: Action | None = None
    ) -> bool:
        """Change an unfinished task's options in place: plan attributes ``found``
        (validated by the caller, see :func:`rota._core.checks.changes`) and, if
        given, its ``action`` (new arguments). A run in flight finishes as it began:
        the changes wait for it to end, then apply to the runs after it. A new
        priority re-queues a scheduled run. ``False`` if unknown or finished.
        O(log n).
        """
        task = self._tasks.get(task_id)
        if task is None:
            return False
        plan = _plan_of(task)
        if "after" in found or "concurrent" in found:  # (refused before anything changes)
            self.rewatch(task_id, plan, found)
        if action is not None:
            task.action = action
        if not found:
            return True
        if found.get("concurrent"):
            check_concurrent(overlap_changed(found), plan.schedule)
        if plan.concurrent and "concurrent" in found and plan.inflight:
            raise ValueError(
                f"update() cannot change the overlap of task {task_id!r} from "
                f"{'Overlap.REPLACE' if plan.replace else f'Overlap.allow({plan.limit})'} "
                f"while {plan.inflight} of its runs are in flight: change it once they "
                "have ended, or schedule it again (replace_existing=True)"
            )
        if deferred(task):
            plan.pending = {**(plan.pending or {}), **found}
            plan.extra = True
            return True
        priority = plan.priority
        _apply(plan, found)
        if "schedule" in found and not plan.extra_runs:
            self._decide_again(task, plan)
        if plan.concurrent:  # each run in flight keeps the policies it was claimed with
            if plan.priority != priority and task.entry[1] != -1:
                self.queue.discard()
                task.entry = (task.entry[0], -1, task_id)
                self._sync(task, plan)
            return True
        if plan.priority != priority and not task.parked:
            task.entry = self.queue.push(task.entry[0], task_id, plan.priority)
            self.queue.discard()  # the old entry, as in reschedule
        return True

    def _decide_again(self, task: Task, plan: Plan) -> None:
        """The task's next run decided again, from its slot, under the calendar it
        was just given (its schedule's next slots too, by :func:`recalendar`)."""
        if plan.concurrent:
            if task.entry[1] == -1:
                return
            raw = task.entry[0] if plan.nominal is None else plan.nominal
        else:
            raw = run_at(task)
        slot = raw if plan.moved is None else plan.moved
        hold = getattr(plan.cursor, "hold", None)
        if hold is not None:
            hold(slot)
        else:
            plan.backlog = deque([slot, *(plan.backlog or ())])
        live = task.entry[1] != -1
        window = plan.window  # the run decided again covers what it did
        plan.slot = -LIMIT  # the run may come earlier than the one it had
        nxt = self._following(plan, slot, -LIMIT, slot)
        if nxt is None:  # (never: a schedule's held slot is decided to a run or skipped
            return  # and counted, and a one-off cannot skip)
        plan.slot = nxt
        if live:
            task.entry = (task.entry[0], -1, task.entry[2])
            self.queue.discard()
        self._push_slot(task, plan, nxt, hold=not live)
        plan.window = window

    def backfill(
        self,
        task_id: Hashable,
        slots: list[Time],
        *,
        idle_only: bool = False,
        windows: Mapping[Time, Time] | None = None,
    ) -> int:
        """Queue extra runs of an unfinished task at ``slots`` (ascending), oldest first,
        ahead of its schedule's runs, which they do not move: its current run waits
        behind them, and a run in flight is followed by them. Extra runs are retried as
        any run, but meet no misfire policy or deadline and do not count toward
        ``max_runs``. Each covers its own slot's window, from where ``windows`` (by
        slot, :func:`~rota._core.checks.slot_windows`) says it begins. ``idle_only``
        (``Overlap.SKIP``): nothing is queued while a run of the task is in flight.
        Returns the number of runs queued. O(k + log n).
        """
        task = self._tasks.get(task_id)
        if task is None or not slots:
            return 0
        plan = _plan_of(task)
        windows = windows or {}
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
        elif task.status is not Status.SCHEDULED:
            if idle_only:
                return 0
            plan.extras = [*(plan.extras or ()), *slots]
            plan.ahead = {
                **(plan.ahead or {}),
                **{slot: windows.get(slot, slot) for slot in slots},
            }
            plan.extra = True
            return len(slots)
        parked = task.parked or (plan.concurrent and task.entry[1] == -1)
        due = run_at(task)
        ahead = {**(plan.ahead or {}), **{slot: windows.get(slot, slot) for slot in slots[1:]}}
        if plan.window is not None:
            ahead[due] = plan.window
        plan.ahead = ahead
        plan.window = windows.get(slots[0], slots[0])
        plan.backlog = deque([*slots[1:], due, *(plan.backlog or ())])
        plan.attempt = 0
        plan.last_delay = None
        plan.nominal = plan.moved = None
        plan.extra_runs += len(slots)
        plan.extra = True
        if parked:
            task.entry = (slots[0], -1, task_id)
        else:
            task.entry = self.queue.push(slots[0], task_id, plan.priority)
            self.queue.discard()
        return len(slots)


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
    own.moved = plan.moved
    own.window = plan.window
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
    run.status = Status.QUEUED if queued else Status.RUNNING
    run.last = run.value = None
    return run


def _overlaps(plan: Plan, at: Time) -> bool:
    """Whether a slot at ``at`` fell due while a run of the task was in flight; spans
    that ended before it are forgotten (slots are judged in time order)."""
    windows = plan.windows
    if not windows:
        return False
    while windows and windows[0][1] < at:
        windows.popleft()
    return any(start < at <= end for start, end in windows)


def _skip(plan: Plan, reason: str, count: int, latest: Time | None = None) -> None:
    """Count ``count`` slots skipped for ``reason``, to report on the task's next run;
    ``latest``, the latest of them, is the task's last skipped slot (``info()``)."""
    if latest is not None:
        plan.last_skipped = (latest, reason, None)
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


WINDOWS = 64
"""The most in-flight spans of a task kept for ``Overlap.SKIP`` (the latest): a slot
is judged against the runs that were in flight since it fell due."""


def _busy(plan: Plan, started: Time, finished: Time) -> None:
    """Remember that a run of the task was in flight over ``(started, finished]``."""
    windows = plan.windows
    if windows is None:
        windows = plan.windows = deque(maxlen=WINDOWS)
    windows.append((started, finished))


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
    ahead = plan.ahead or {}
    if plan.window is not None:
        ahead[nxt] = plan.window
    plan.window = ahead.pop(extras[0], extras[0])
    plan.ahead = ahead
    plan.extra_runs += len(extras)
    plan.nominal = plan.moved = None
    return extras[0]


def _apply(plan: Plan, changes: Mapping[str, object]) -> None:
    """Set plan attributes (validated by the caller; ``schedule``: the task's schedule
    under another calendar, see :func:`~rota._core.moves.recalendar`); the changes no
    longer wait."""
    for name, value in changes.items():
        if name == "schedule":
            recalendar(plan, value)  # type: ignore[arg-type]
        else:
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
    if plan.ahead is not None and not plan.backlog and not plan.extras:
        plan.ahead = None  # (windows of runs a skip dropped)


def _window_after(plan: Plan, at: Time | None, before: Time) -> Time:
    """Where the window of the backlog's run at ``at`` begins, the run after one of
    slot ``before``: where it was put ahead of the schedule (:attr:`Plan.ahead`:
    an extra run, or the run one went ahead of), else at ``before``. O(1)."""
    ahead = plan.ahead
    if ahead is not None and at in ahead:
        return ahead.pop(at)
    return before
