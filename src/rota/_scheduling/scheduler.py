"""Scheduler: the engine, one lock and an injected clock."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Hashable, Mapping, Sequence
from datetime import datetime, timedelta
from types import FunctionType
from typing import Any, TypedDict, TypeVar, Unpack

from rota._core import validate as _validate
from rota._core.calls import Bound
from rota._core.checks import (
    backfill_overlap,
    changes,
    check_end,
    check_retry,
    make_plan,
    opening,
    task_plan,
    window,
)
from rota._core.deps import downstream_of
from rota._core.engine import Engine
from rota._core.events import EventKind, Listener
from rota._core.moves import UPCOMING_MAX, Upcoming, calendared, kept_calendar, recalendared
from rota._core.policy import Plan, RetryOn, RetryPolicy, Schedule
from rota._core.pools import Pool, admitted_pool
from rota._core.types import RunOutcome, Status, TaskInfo, Time
from rota._core.validate import LIMIT, PLAIN, time_from
from rota._core.waits import admitted_after, check_after
from rota.calendars import Calendar
from rota.misfire import Misfire
from rota.overlap import Overlap
from rota.schedules import FixedRate, Once
from rota.store import OutcomeRow

from .first import first_run
from .reads import Entry
from .tasks import LocalTasks, Tasks

Clock = Callable[[], Time]
T = TypeVar("T")
F = TypeVar("F", bound=Callable[..., Any])

_NEG_LIMIT = -LIMIT
EPOCH_CLOCKS = (time.time,)
MONOTONIC_CLOCKS = (time.monotonic, time.perf_counter)
_UNSET: Any = object()


class TaskOptions(TypedDict, total=False):
    """Keyword options of :meth:`Scheduler.schedule_once`, passed on to ``schedule``."""

    args: Sequence[Any] | None
    kwargs: Mapping[str, Any] | None
    retry: RetryPolicy | None
    retry_on: RetryOn | None
    priority: int
    replace_existing: bool
    deadline: Time | timedelta | None
    jitter: Time | timedelta | None
    calendar: Calendar | None
    on_excluded: str
    after: Any
    pool: Pool | None


_ONCE_OPTIONS = frozenset(TaskOptions.__annotations__)


_JOB_DEFAULTS: dict[str, Any] = {
    "args": None, "kwargs": None, "max_retries": 0, "retry": None, "retry_on": None,
    "misfire": None, "priority": 0, "overlap": None, "deadline": None, "jitter": None,
    "end": None, "max_runs": None, "calendar": None, "on_excluded": "skip", "after": None,
    "pool": None,
}  # fmt: skip
"""What :meth:`Scheduler.job` passes on, as :meth:`Scheduler.schedule` takes it."""
_POLICIES = ("max_retries", "retry", "retry_on", "misfire", "priority")
_CONTROLS = ("overlap", "deadline", "jitter", "end", "max_runs", "after", "pool")


class Scheduler:
    """A thread-safe, deterministic task scheduler.

    ``clock`` is any zero-argument callable returning the current time as an
    int or float, in any unit (the runners take it as seconds); it is read
    only to turn a delay into an absolute time. ``backoff`` (> 0, finite) is
    the base of the retry delay: retry r of a run at ``at`` is queued at
    ``at + backoff * 2 ** (r - 1)``. ``retry`` replaces that default with a
    :mod:`rota.retry` policy (e.g. capped, with jitter) for every task
    that does not bring its own.

    Nothing runs by itself: :meth:`tick` runs what is due at the ``now`` it is
    given (tests call it directly), and a :class:`~rota.Runner` or
    :class:`~rota.AsyncRunner` drives it in real time. The scheduler never
    sleeps, starts no thread and calls actions outside its lock, so an action
    may call any method of the scheduler.

    ``epoch`` says whether the clock reads wall-clock epoch seconds; by
    default it is known for ``time.time`` (yes) and ``time.monotonic`` /
    ``time.perf_counter`` (no), and unknown otherwise. Schedules that name
    instants (cron, datetimes) are refused on a clock known not to be epoch;
    an epoch clock's times are logged as wall-clock times.

    Raises ``TypeError`` for a non-callable ``clock``, a non-number
    ``backoff``, a ``retry`` that is not a retry policy or an ``epoch`` that
    is not a bool or ``None``; ``ValueError`` for a ``backoff`` that is not
    > 0 and finite.
    """

    __slots__ = ("_clock", "_epoch", "_table")

    def __init__(
        self,
        clock: Clock = time.monotonic,
        backoff: Time = 1,
        *,
        retry: RetryPolicy | None = None,
        epoch: bool | None = None,
    ) -> None:
        self._clock = _validate.callable_("clock", clock)
        _validate.positive("backoff", backoff)
        check_retry(retry)
        # Where the tasks live (a durable scheduler puts a StoredTasks here): every
        # method below checks its arguments, then asks the table
        if epoch is not None and not isinstance(epoch, bool):
            raise TypeError(f"epoch must be True, False or None, got {epoch!r}")
        if epoch is None:
            epoch = True if clock in EPOCH_CLOCKS else False if clock in MONOTONIC_CLOCKS else None
        self._epoch = epoch
        self._table: Tasks = LocalTasks(
            Engine(backoff, retry), threading.RLock(), self._clock, epoch, time.time
        )

    def __repr__(self) -> str:
        return f"<Scheduler unfinished={len(self.tasks())} next_run_time={self.next_run_time()!r}>"

    @property
    def table(self) -> Tasks:
        """The table this scheduler keeps its tasks in: the :class:`~rota.Tasks` seam
        that runners drive (claim, start, call, complete, wake-ups). O(1)."""
        return self._table

    @property
    def clock(self) -> Clock:
        """The clock this scheduler reads (and its runners sleep by)."""
        return self._clock

    # -- scheduling ------------------------------------------------------

    def schedule_once(
        self,
        task_id: Hashable,
        delay: Time | timedelta,
        action: Callable[..., object] | str,
        max_retries: int = 0,
        **options: Unpack[TaskOptions],
    ) -> bool:
        """Run ``action`` once at ``at = clock() + delay``.

        The action is called as ``action(at)``; ``delay`` may be a
        ``timedelta``. The keyword ``options`` are :meth:`schedule`'s (but
        ``misfire``): ``args=``/``kwargs=`` to call it as ``action(*args,
        **kwargs)`` instead, ``retry=``, ``retry_on=``, ``priority=``,
        ``replace_existing=``. An action that declares a keyword-only
        parameter ``run`` gets the run's :class:`~rota.RunContext` there.
        The call shape is checked now, against the action's signature. Its
        return value is kept on the run's outcome (``value``).

        A failing run (the action raises an ``Exception``) is retried up to
        ``max_retries`` times with exponential backoff; then the task is
        ``failed``. Returns ``False``, changing nothing, when a task with
        this id is scheduled, queued, running or paused (unless
        ``replace_existing``); a finished task with this id is replaced.

        Complexity: O(log n).

        Raises ``TypeError`` for an unhashable ``task_id``, a non-number
        ``delay``, a non-callable ``action`` or one that cannot be called as
        asked, a non-int ``max_retries``, an unknown option or a bad option
        value; ``ValueError`` for a negative, NaN or infinite ``delay`` or a
        negative ``max_retries``. Nothing changes when it raises.
        """
        table = self._table
        # Beyond the contract's call, or a table that keeps actions by name (a store):
        # one implementation, schedule()
        if options or not table.fast:
            unknown = options.keys() - _ONCE_OPTIONS
            if unknown:
                raise TypeError(
                    f"schedule_once() got unexpected keyword arguments {sorted(unknown)}"
                )
            return self.schedule(
                task_id,
                Once(_validate.delay("delay", delay)),
                action,
                max_retries=max_retries,
                **options,
            )
        # Fast path for the common valid call; the checks below raise with the message.
        if not (
            type(delay) in PLAIN
            and 0 <= delay <= LIMIT  # type: ignore[operator]
            and type(max_retries) is int
            and max_retries >= 0
            and callable(action)
        ):
            delay = _validate.delay("delay", delay)
            _validate.callable_("action", action)
            _validate.count("max_retries", max_retries)
        try:
            hash(task_id)
        except TypeError:
            _validate.hashable("task_id", task_id)
        if type(action) is not FunctionType or action.__code__ is not table.plain_code:
            prepared = table.admit(task_id, action, None, None, None)
            if type(prepared) is Bound:  # it asks for the run's facts: the general path
                return self.schedule(task_id, Once(delay), action, max_retries=max_retries)
            action = prepared
        try:  # a float is finite iff at - at == 0; anything else is checked in _at()
            at = self._clock() + delay  # type: ignore[operator]
        except TypeError:
            at = self._at(delay)  # type: ignore[arg-type]
        if at.__class__ is not float or at - at:
            at = self._at(delay)  # type: ignore[arg-type]
        if max_retries:
            plan = make_plan(None, max_retries, None, None, 0)
            return table.add(task_id, at, action, plan, False)
        return table.add(task_id, at, action, None, False)

    def schedule_at_fixed_rate(
        self,
        task_id: Hashable,
        initial_delay: Time | timedelta,
        period: Time | timedelta,
        action: Callable[..., object] | str,
        max_retries: int = 0,
        *,
        args: Sequence[Any] | None = None,
        kwargs: Mapping[str, Any] | None = None,
        retry: RetryPolicy | None = None,
        retry_on: RetryOn | None = None,
        misfire: Misfire | None = None,
        priority: int = 0,
        replace_existing: bool = False,
        overlap: Overlap | None = None,
        deadline: Time | timedelta | None = None,
        jitter: Time | timedelta | None = None,
        end: Time | datetime | None = None,
        max_runs: int | None = None,
        calendar: Calendar | None = None,
        on_excluded: str = "skip",
        after: Any = None,
        pool: Pool | None = None,
    ) -> bool:
        """Run ``action`` at slots ``first + k * period``, ``first = clock() + initial_delay``.

        Slot k is computed by multiplication, so float periods do not drift.
        A slot whose run fails (after ``max_retries`` retries) is skipped and
        the task goes on with its next slot; slots missed because ``tick``
        jumped ahead or a run took long are caught up, in order, or handled
        as ``misfire`` says (:mod:`rota.misfire`). The task never overlaps
        itself: a slot is queued when the previous one ends. Returns
        ``False``, changing nothing, when the id is unfinished (unless
        ``replace_existing``). The other arguments are as in
        :meth:`schedule_once`; delays may be ``timedelta``.

        Complexity: O(log n) per slot.

        Raises ``TypeError``/``ValueError`` as :meth:`schedule_once`, for a
        ``period`` that is not a number > 0 and finite, and for a ``misfire``
        that is not a :class:`~rota.misfire.Misfire`.
        """
        _validate.hashable("task_id", task_id)
        initial_delay = _validate.delay("initial_delay", initial_delay)
        period = _validate.positive("period", period)
        when = FixedRate(period, delay=initial_delay)
        return self.schedule(
            task_id,
            when,
            action,
            args=args,
            kwargs=kwargs,
            max_retries=max_retries,
            retry=retry,
            retry_on=retry_on,
            misfire=misfire,
            priority=priority,
            replace_existing=replace_existing,
            overlap=overlap,
            deadline=deadline,
            jitter=jitter,
            end=end,
            max_runs=max_runs,
            calendar=calendar,
            on_excluded=on_excluded,
            after=after,
            pool=pool,
        )

    def schedule(
        self,
        task_id: Hashable,
        when: Schedule,
        action: Callable[..., object] | str,
        *,
        args: Sequence[Any] | None = None,
        kwargs: Mapping[str, Any] | None = None,
        max_retries: int = 0,
        retry: RetryPolicy | None = None,
        retry_on: RetryOn | None = None,
        misfire: Misfire | None = None,
        priority: int = 0,
        replace_existing: bool = False,
        overlap: Overlap | None = None,
        deadline: Time | timedelta | None = None,
        jitter: Time | timedelta | None = None,
        end: Time | datetime | None = None,
        max_runs: int | None = None,
        calendar: Calendar | None = None,
        on_excluded: str = "skip",
        after: Any = None,
        pool: Pool | None = None,
    ) -> bool:
        """Run ``action`` when ``when`` says: any :mod:`rota.schedules` schedule.

        ``Once(delay)`` or ``Once(at=t)`` for a one-off task (``at`` is an
        absolute time on the clock, or an aware ``datetime``);
        ``FixedRate(period, start=t)`` for slots from an absolute start;
        ``FixedDelay(delay)``; ``Cron(...)`` (:mod:`rota.cron`); or your
        own. ``misfire`` applies to recurring schedules; the other arguments
        are as in :meth:`schedule_once`. Returns ``False``, changing nothing,
        when the id is unfinished (unless ``replace_existing``).

        The scheduling controls (``docs/policies.md``): ``overlap`` (an
        :class:`~rota.Overlap`: what a slot due while a run is in flight
        does), ``deadline`` (a first attempt that cannot start within it of its
        slot is skipped), ``jitter`` (each slot starts up to that much later, by
        an offset fixed per task and slot), ``end`` (no slot after it) and
        ``max_runs`` (no more slots run); ``deadline`` and ``jitter`` accept a
        ``timedelta``, ``end`` an aware ``datetime`` on an epoch clock.

        ``calendar`` (a :class:`rota.calendars.Calendar`) keeps its slots to business
        time: a slot it excludes is skipped and counted (``on_excluded="skip"``,
        ``skipped_by["calendar"]``), or moved to the next or previous allowed instant
        (``"next"``, ``"previous"``), keeping its slot's key (``docs/policies.md``,
        "Business calendars"). A one-off takes only ``"next"`` or ``"previous"``.

        ``after`` (a task id, a :class:`~rota.Upstream`, or a list of them) makes each
        slot wait until its upstream tasks' runs ended ``ok`` (``docs/policies.md``,
        "Dependencies"): a waiting slot shows in ``info().waiting_for``, and is
        skipped (``skipped_by["upstream"]``) if an upstream slot it needs fails for
        good, or its deadline or its task's next slot comes first. ``ValueError`` for
        a cycle (naming it), or with ``Overlap.allow(n)``/``REPLACE``. ``pool`` (a
        :class:`~rota.Pool`) keeps at most its size of its tasks' runs in flight at
        once, across every node of a store: a run due while it is full waits
        (``queued``, ``info().waiting_for`` the pool) and they start in slot order.

        Schedules that name instants (``Cron``, ``Once(at=datetime)``,
        ``FixedRate(start=datetime)``) need an epoch clock: on a monotonic one
        (the default, ``time.monotonic``) they raise ``ValueError``, as does
        an absolute number more than ten years ahead of a monotonic clock
        (an epoch time given by mistake). Use ``Scheduler(clock=time.time)``
        for cron and interval jobs together.

        Complexity: O(log n) per run (plus O(missed slots) under a bounded
        misfire policy, and whatever the schedule's cursor costs).

        Raises ``TypeError`` for a ``when`` that is not a schedule and for the
        arguments :meth:`schedule_once` rejects; ``ValueError`` for a schedule
        with no run at all, a ``misfire`` given with ``Once``, or the clock
        mismatches above. An exception from the schedule's own
        ``start``/``next`` propagates. Nothing changes when it raises.
        """
        admitted, plan, first = self._admit(
            task_id, calendared(when, calendar, on_excluded), action, args, kwargs,
            (max_retries, retry, retry_on, misfire, priority),
            (overlap, deadline, jitter, end, max_runs, after, pool),
        )  # fmt: skip
        return self._table.add(task_id, first, admitted, plan, replace_existing)

    def _admit(
        self,
        task_id: Hashable,
        when: Schedule,
        action: Any,
        args: Any,
        kwargs: Any,
        policies: tuple[Any, Any, Any, Any, Any],
        control: tuple[Any, Any, Any, Any, Any, Any, Any],
    ) -> tuple[Any, Plan, Time]:
        """Check a new task's arguments (the one sequence, :func:`rota._core.checks.task_plan`,
        then what its table needs) and bind its schedule: its action as the table
        keeps it, its plan and its first run time. ``policies`` is ``(max_retries,
        retry, retry_on, misfire, priority)``, ``control`` ``(overlap, deadline,
        jitter, end, max_runs, after, pool)``. Raises what :meth:`schedule` documents."""
        _validate.hashable("task_id", task_id)
        overlap, deadline, jitter, end, max_runs, after, pool = control
        plan = task_plan(when, *policies, (overlap, deadline, jitter, self._end(end), max_runs))
        plan.after = admitted_after(self._table.edges, task_id, after, plan)
        plan.pool = admitted_pool(task_id, pool, plan)
        admitted = self._table.admit(task_id, action, args, kwargs, plan)
        cursor, first = first_run(when, now := self._table.now(), self._epoch)
        check_end(plan, first)
        plan.cursor = cursor
        plan.window = opening(when, first, now)
        plan.origin = first
        if not plan.extra:  # (a calendar's cursor goes through the controls)
            plan.extra = plan.uses_controls()
        return admitted, plan, first

    def job(
        self,
        when: Schedule,
        *,
        task_id: Hashable | None = None,
        replace_existing: bool = True,
        **options: Any,
    ) -> Callable[[F], F]:
        """Decorate a function to schedule it on ``when``; the function is returned unchanged.

        ``@scheduler.job(FixedRate(60))`` above ``def poll(at): ...`` is
        ``scheduler.schedule("module.poll", FixedRate(60), poll)``: the task id
        defaults to the function's module and qualified name, and
        ``replace_existing`` to ``True``, so declaring the same job again (a
        reloaded module, a second start-up in one process) replaces it
        instead of being ignored. ``options`` are :meth:`schedule`'s. (A
        :class:`~rota.DurableScheduler` declares it as ``ensure`` does, so a
        restart keeps the stored task's place in its schedule; with
        ``replace_existing=False`` it leaves an unfinished task of that id
        alone.)

        Complexity: that of :meth:`schedule`. Raises what it raises, when
        the function is decorated.
        """

        def register(action: F) -> F:
            unknown = options.keys() - _JOB_DEFAULTS.keys()
            if unknown:
                raise TypeError(f"job() got unexpected keyword arguments {sorted(unknown)}")
            name = task_id if task_id is not None else f"{action.__module__}.{action.__qualname__}"
            given = {**_JOB_DEFAULTS, **options}
            admitted, plan, first = self._admit(
                name, calendared(when, given["calendar"], given["on_excluded"]), action,
                given["args"], given["kwargs"],
                tuple(given[k] for k in _POLICIES), tuple(given[k] for k in _CONTROLS),
            )  # fmt: skip
            self._table.add(name, first, admitted, plan, None if replace_existing else False)
            return action

        return register

    def _end(self, end: Time | datetime | None) -> Time | datetime | None:
        """``end`` as given, refused (``ValueError``) as a datetime on a monotonic clock."""
        if isinstance(end, datetime) and self._epoch is False:
            raise ValueError(
                f"end={end!r} is a wall-clock instant, but this scheduler's clock is "
                "monotonic: use Scheduler(clock=time.time), or give end on its clock"
            )
        return end

    def _at(self, delay: Time) -> Time:
        """``clock() + delay``, checked: ``TypeError``/``ValueError`` naming the culprit."""
        at = time_from("the clock", self._clock()) + delay
        if not _NEG_LIMIT <= at <= LIMIT:
            raise ValueError(f"delay {delay!r} puts the run past the largest time, at {at!r}")
        return at

    def pause(self, task_id: Hashable) -> bool:
        """Keep a task from running until :meth:`resume`.

        Its next run is kept but not run; its status stays what it was (a
        paused task is ``scheduled``; see :meth:`is_paused`). A run in
        progress goes on, and the task is held when it completes. ``True`` if
        the task was unfinished and not paused already; ``False`` otherwise.

        Complexity: O(1) amortised.
        """
        return self._table.pause(task_id)

    def is_paused(self, task_id: Hashable) -> bool:
        """True if the task is unfinished and paused (what :meth:`info` says).

        Complexity: O(1) (a store: two reads).
        """
        info = self._table.info(task_id)
        return info is not None and info.paused

    def resume(self, task_id: Hashable) -> bool:
        """Let a paused task run again. ``False`` if it is not paused.

        A one-off task whose time passed while paused runs at once. A
        recurring task's slots missed while paused are handled by its misfire
        policy: caught up in order (the default), or skipped and counted.

        Complexity: O(log n), plus O(missed slots) under a bounded misfire policy.
        """
        return self._table.resume(task_id)

    def reschedule(self, task_id: Hashable, when: Schedule) -> bool:
        """Give an unfinished task a new schedule, keeping its id, action and policies.

        E.g. ``reschedule("poll", FixedRate(30))`` changes a period;
        ``reschedule("report", Once(at=t))`` moves a one-off run. The task's
        status history is kept (it is not finished and re-created) and its
        retry count resets. A run in progress goes on; the new schedule takes
        over when it completes. A paused task stays paused, a task on a calendar
        on it (:func:`~rota._core.moves.kept_calendar`). ``False`` if the task is
        unknown or finished.

        Complexity: O(log n).

        Raises ``TypeError`` for a ``when`` that is not a schedule,
        ``ValueError`` for one with no run at all or a first run time that is
        not a finite number. Nothing changes when it raises.
        """
        info = self._table.info(task_id)
        when = kept_calendar(when, info and info.schedule)
        cursor, first = first_run(when, self._table.now(), self._epoch)
        return self._table.reschedule(task_id, when, cursor, first)

    def trigger(self, task_id: Hashable) -> bool:
        """Run a scheduled task once now, outside its schedule; its schedule goes on after.

        ``False`` if the task is unknown, finished, paused, or has a run queued
        or in flight. The extra run is an ordinary run of the task (retried per
        its policy, with the key of the slot ``now``); afterwards the task's
        next run is the one it had, then its schedule's. Each accepted trigger
        is a run of its own, also when a run is due already (which still runs
        after it) or another trigger came just before.

        Complexity: O(log n). Raises what reading the clock raises.
        """
        return self._table.trigger(task_id)

    def update(self, task_id: Hashable, **options: Any) -> bool:
        """Change options of an unfinished task in place, from its next run on.

        ``options`` are any of ``max_retries``, ``retry``, ``retry_on``,
        ``misfire``, ``overlap``, ``deadline``, ``jitter``, ``priority``,
        ``calendar`` (with ``on_excluded``; ``calendar=None`` takes it away),
        ``args`` and ``kwargs``, as :meth:`schedule` takes them (APScheduler's
        ``modify_job``). A new calendar decides the task's next run again. The
        task keeps its id, schedule, place in it, status and history; a run in
        flight finishes as it began (its retries too are decided by the options
        it started with), and the changes apply to the runs after it.
        ``overlap`` may switch a task to or from ``Overlap.allow(n)``/``REPLACE``
        while none of its runs is in flight (then, or once its run in flight
        ends; a ``ValueError`` while several runs of a concurrent task are).
        ``False`` if the task is unknown or finished.

        Complexity: O(log n). Raises ``TypeError`` for an unknown option and
        what :meth:`schedule` raises for a bad value (with ``args``/``kwargs``:
        arguments the action cannot be called with). Nothing changes when it
        raises.
        """
        found = changes(options)
        if found.get("after"):
            check_after(self._table.edges(), task_id, found["after"])  # type: ignore[arg-type]
        if "calendar" in options or "on_excluded" in options:
            info = self._table.info(task_id)
            found["schedule"] = recalendared(options, info and info.schedule)
            if found["schedule"] is None:
                return False
        return self._table.update(task_id, found, options)

    def backfill(
        self,
        task_id: Hashable,
        start: Time | datetime,
        end: Time | datetime,
        *,
        overlap: Overlap | None = None,
        downstream: bool = False,
    ) -> int:
        """Run each slot of a task's schedule in ``[start, end)`` once, oldest first.

        The runs are extra: they go ahead of the task's own next run, which
        they do not move (it runs after them, then its schedule goes on), and
        a run in flight is followed by them. Each is an ordinary run of its
        slot (``outcome.at`` and the idempotency key are the slot's), retried
        under the task's retry policy; no misfire policy or deadline applies
        to them and they do not count toward ``max_runs``. ``overlap``:
        ``Overlap.BUFFER`` (the default) queues them behind a run in flight;
        ``Overlap.SKIP`` queues nothing while one is in flight. Returns the
        number of slots queued (0 for an unknown or finished task).

        The schedule must have slots: ``FixedRate`` (on the task's own grid,
        slots before its first one included) or one with ``next_after(t)``
        (``Cron``). Complexity: O(k log n) for k slots (at most
        :data:`BACKFILL_MAX`). Raises ``TypeError``/``ValueError`` for
        ``start``/``end`` that are not times (aware datetimes on an epoch
        clock), ``end < start``, a schedule without slots, or a window of
        more than :data:`BACKFILL_MAX` slots.

        ``downstream``: the tasks that wait for it (``after=``, at any depth) are
        backfilled too, in dependency order, each backfilled slot waiting for its
        upstreams' backfilled slots; the count is over all of them.
        """
        low, high = window(self._end(start), self._end(end))
        order = downstream_of(self._table.edges(), task_id) if downstream else [task_id]
        idle = backfill_overlap(overlap)
        return sum(self._table.backfill(each, low, high, idle) for each in order)

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
        return self._table.cancel(task_id)

    def status(self, task_id: Hashable) -> Status | None:
        """The task's :class:`~rota.Status`, or ``None`` for an unknown id.

        Finished tasks stay queryable: at least the 10,000 most recently
        finished are remembered, the oldest forgotten first.

        Complexity: O(1).
        """
        return self._table.status(task_id)

    def next_run_time(self, task_id: Hashable = _UNSET) -> Time | None:
        """The time of the earliest live run, or ``None`` if nothing is queued.

        With ``task_id``: that task's next run time, or ``None`` while a run
        of it is queued or running, while it is paused, once it finished,
        and for an unknown id.

        Complexity: O(1) amortised.
        """
        if task_id is _UNSET:
            return self._table.next_time()
        info = self.info(task_id)
        return None if info is None else info.next_run_time

    def info(self, task_id: Hashable) -> TaskInfo | None:
        """What is known of one task: a :class:`~rota.TaskInfo`, or ``None`` if unknown.

        Unfinished tasks give everything; finished ones (at least the 10,000
        most recent) their final status. Thread-safe.

        Complexity: O(1).
        """
        return self._table.info(task_id)

    def upcoming(self, task_id: Hashable, n: int = 5) -> list[Upcoming]:
        """The task's next ``n`` slots, in slot order, as :class:`~rota.Upcoming`
        values: ``at`` is when the slot runs (``None``: excluded by its calendar, or
        merged into a run that already happened; the moved time for a moved slot),
        ``reason`` what the calendar did (``"weekend"``, ``"holiday"``, ``"window"``,
        ``None``). Excluded slots are listed and count toward ``n``. Decided by the
        task's own rules on a copy of its position: nothing changes. Empty for an
        unknown or finished task; a run in flight is not listed (its slot is
        decided).

        Complexity: O(n) decisions, each as the scheduler makes them. Raises
        ``TypeError`` for an ``n`` that is not an int, ``ValueError`` for one below
        1 or above 1,000.
        """
        _validate.count("n", n)
        if not 1 <= n <= UPCOMING_MAX:
            raise ValueError(f"n must be 1 to {UPCOMING_MAX}, got {n!r}")
        return self._table.upcoming(task_id, n)

    def tasks(self, *, after: str | None = None, limit: int | None = None) -> list[TaskInfo]:
        """A :class:`~rota.TaskInfo` for every unfinished task.

        Complexity: in memory, O(n), in no particular order (a consistent
        snapshot, taken under the lock); a store lists them by id, one query.
        Paged for large tables: up to ``limit`` tasks (all: ``None``) whose
        ids, as text, come after ``after`` (pass the last id of a page,
        ``str(info.task_id)``, to get the next); paged, in memory too, they
        come by id as text, O(n log n). A stored row this process cannot read
        (corrupt JSON, a schedule kind a newer rota wrote) is listed with
        ``schedule`` ``None``: one bad row hides no other.

        Raises ``TypeError`` for an ``after`` that is not a str or ``None``,
        ``TypeError``/``ValueError`` for a ``limit`` that is not an int >= 1 or
        ``None``.
        """
        _validate.page(after, limit)
        return self._table.infos(after, limit)

    def listing(
        self, *, after: str | None = None, limit: int | None = None, unfinished: bool = False
    ) -> list[Entry]:
        """Every task with its latest recorded run, by id as text, paged as :meth:`tasks`
        is: for each an :class:`~rota.durable.Entry`, its :class:`~rota.TaskInfo` (by
        the rule ``info`` follows; only unfinished tasks with ``unfinished``) with the
        latest outcome recorded of it, which a finished task keeps too. What the
        command's ``status``, the dashboard, the HTTP API and the metrics show.

        In a store: every stored task, and why its row cannot be read here if it
        cannot (tasks withdrawn by ``remove`` are not listed); one query, linear in
        the rows returned. In memory: the unfinished tasks and those seen since the
        record of runs began (the first read of it: this method, :meth:`history`,
        or a dashboard or metrics over the scheduler; a run costs nothing extra
        before); O(n log n). Raises as :meth:`tasks` does.
        """
        _validate.page(after, limit)
        return self._table.listing(after, limit, unfinished)

    def history(self, task_id: Hashable, limit: int = 20) -> list[OutcomeRow]:
        """The task's latest ``limit`` recorded runs, newest first (``task_id`` as
        :class:`~rota.store.OutcomeRow` shows it: its ``str``). A store keeps every
        run until pruned (one read); memory keeps the latest
        :data:`~rota._scheduling.reads.KEEP` of each task since the record began
        (see :meth:`listing`). Raises ``TypeError``/``ValueError`` for a ``limit``
        that is not a positive int."""
        _validate.count("limit", limit)
        return self._table.history(str(task_id), limit)

    @property
    def epoch(self) -> bool | None:
        """Whether the clock reads wall-clock epoch seconds (see the ``epoch`` argument)."""
        return self._epoch

    # -- listeners -------------------------------------------------------

    def add_listener(self, listener: Listener, *kinds: EventKind | str) -> Callable[[], None]:
        """Call ``listener(event)`` for each :class:`~rota.Event` of the given kinds.

        No kinds: every kind (:class:`~rota.EventKind`: task added, removed,
        paused, resumed; run started, succeeded, failed, retried, skipped;
        scheduler started, stopped). Listeners work under ``tick`` and under
        every runner; each is called outside every lock, on the thread where
        the event happened, and an ``Exception`` it raises is logged (logger
        ``rota.events``) and changes nothing. Returns a function that
        removes the listener.

        Complexity: O(listeners) per event; nothing when there are none.

        Raises ``TypeError`` for a non-callable listener, ``ValueError`` for
        an unknown kind.
        """
        _validate.callable_("listener", listener)
        try:
            wanted = frozenset(EventKind(kind) for kind in kinds) or frozenset(EventKind)
        except ValueError:
            raise ValueError(
                f"kinds must be rota.EventKind values, got {kinds!r}; one of "
                f"{[str(k) for k in EventKind]}"
            ) from None
        entry = (listener, wanted)
        with self._table.lock:
            self._table.listen((*self._table.listeners, entry))

        def remove() -> None:
            with self._table.lock:
                self._table.listen(tuple(h for h in self._table.listeners if h is not entry))

        return remove

    # -- running ---------------------------------------------------------

    def tick(self, now: Time) -> list[RunOutcome]:
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

        Complexity: O(k log n) for k runs, plus the actions (a durable
        scheduler: one claim and one completion transaction per run).

        Raises ``TypeError`` for a non-number ``now``, ``ValueError`` for NaN
        or infinity.
        """
        return self._table.tick(now)
