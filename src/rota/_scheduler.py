"""Scheduler: the engine, one lock and an injected clock."""

from __future__ import annotations

import inspect
import math
import threading
import time
from collections.abc import Callable, Hashable, Mapping, Sequence
from datetime import datetime, timedelta
from types import FunctionType
from typing import Any, TypedDict, TypeVar, Unpack

from . import _validate
from ._calls import Bound, prepare
from ._engine import Engine
from ._events import Event, EventKind, Listener
from ._policy import Cursor, Plan, RetryOn, RetryPolicy, Schedule
from ._tasks import LocalTasks, Tasks, locked
from ._types import Action, RunOutcome, Status, TaskInfo, Time
from ._validate import LIMIT, PLAIN, time_from
from .misfire import Misfire
from .overlap import Overlap
from .schedules import FixedDelay, FixedRate, Once

Clock = Callable[[], Time]
T = TypeVar("T")
F = TypeVar("F", bound=Callable[..., Any])

_NEG_LIMIT = -LIMIT
EPOCH_CLOCKS = (time.time,)
MONOTONIC_CLOCKS = (time.monotonic, time.perf_counter)
EPOCH_SUSPECT = 10 * 365 * 86_400
"""On a monotonic clock, an absolute time this far ahead is taken for an epoch time
given by mistake (``Once(at=time.time() + 60)``): refused with a clear error."""
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


_ONCE_OPTIONS = frozenset(TaskOptions.__annotations__)

UPDATABLE = (
    "max_retries", "retry", "retry_on", "misfire", "overlap", "deadline", "jitter",
    "priority", "args", "kwargs",
)  # fmt: skip
"""The options :meth:`Scheduler.update` changes in place."""


def _check_retry(retry: object) -> None:
    if retry is not None and not callable(getattr(retry, "delay", None)):
        raise TypeError(f"retry must be a retry policy (with a delay method), got {retry!r}")


def _cursor(when: object, now: Time) -> Cursor:
    """Start a schedule's cursor, checking that ``when`` is a schedule."""
    start = getattr(when, "start", None)
    if not callable(start):
        raise TypeError(f"when must be a schedule (with a start(now) method), got {when!r}")
    cursor = start(now)
    if not callable(getattr(cursor, "next", None)):
        raise TypeError(f"{when!r}.start() must return a cursor with next(now), got {cursor!r}")
    return cursor  # type: ignore[no-any-return]


def make_plan(
    cursor: Cursor | None,
    max_retries: int,
    retry: RetryPolicy | None,
    misfire: Misfire | None,
    priority: int,
    retry_on: RetryOn | None = None,
) -> Plan:
    """Validate the policy arguments and build a task's plan."""
    _check_retry(retry)
    if misfire is not None and not isinstance(misfire, Misfire):
        raise TypeError(f"misfire must be a rota.misfire.Misfire, got {misfire!r}")
    check_priority(priority)
    retry_on = _check_retry_on(retry_on)
    limit = None if misfire is None else misfire.limit
    plan = Plan(cursor, max_retries, retry, limit, priority)
    plan.retry_on = retry_on
    return plan


def controls(
    plan: Plan,
    when: object,
    overlap: Overlap | None,
    deadline: Time | timedelta | None,
    jitter: Time | timedelta | None,
    end: Time | datetime | None,
    max_runs: int | None,
) -> None:
    """Validate the scheduling controls and set them on ``plan`` (docs/policies.md).

    Raises ``TypeError`` for an ``overlap`` that is not an :class:`~rota.Overlap`,
    a non-number ``deadline``/``jitter``/``end`` or a non-int ``max_runs``;
    ``ValueError`` for a negative or non-finite delay, a naive ``end`` datetime, a
    ``max_runs`` below 1, and ``overlap``/``end``/``max_runs`` given with ``Once``.
    """
    if overlap is not None and not isinstance(overlap, Overlap):
        raise TypeError(
            f"overlap must be a rota.Overlap (Overlap.BUFFER, Overlap.SKIP), got {overlap!r}"
        )
    plan.overlap_skip = overlap == Overlap.SKIP
    plan.concurrent = overlap is not None and overlap.concurrent
    plan.limit = 1 if overlap is None else overlap.limit
    plan.replace = overlap == Overlap.REPLACE
    plan.deadline = None if deadline is None else _validate.delay("deadline", deadline)
    plan.jitter = (None if jitter is None else _validate.delay("jitter", jitter)) or None
    plan.end = _validate.optional_time("end", end)
    if max_runs is not None and _validate.count("max_runs", max_runs) < 1:
        raise ValueError(f"max_runs must be >= 1, got {max_runs!r}")
    plan.max_runs = max_runs
    if isinstance(when, Once):
        for name, value in (("overlap", overlap), ("end", end), ("max_runs", max_runs)):
            if value is not None:
                raise ValueError(f"{name} applies to recurring schedules, not {when!r}")
    if plan.concurrent and isinstance(when, FixedDelay):
        raise ValueError(
            f"overlap={overlap!r} needs slots that do not wait for a run to end, not "
            f"{when!r} (each of its runs starts a delay after the previous one finished)"
        )
    plan.extra = plan.uses_controls()


def changes(options: Mapping[str, Any]) -> dict[str, object]:
    """The plan attributes :meth:`Scheduler.update` sets for ``options`` (all but
    ``args``/``kwargs``, which rebind the action), validated as ``schedule`` validates
    them. Raises ``TypeError`` for an unknown option and what ``schedule`` raises."""
    unknown = options.keys() - set(UPDATABLE)
    if unknown:
        raise TypeError(
            f"update() got unexpected keyword arguments {sorted(unknown)}; it changes "
            f"{', '.join(UPDATABLE)}"
        )
    probe = Plan()
    found: dict[str, object] = {}
    if "max_retries" in options:
        found["max_retries"] = _validate.count("max_retries", options["max_retries"])
    if "retry" in options:
        _check_retry(options["retry"])
        found["retry"] = options["retry"]
    if "retry_on" in options:
        found["retry_on"] = _check_retry_on(options["retry_on"])
    if "misfire" in options:
        misfire = options["misfire"]
        if misfire is not None and not isinstance(misfire, Misfire):
            raise TypeError(f"misfire must be a rota.misfire.Misfire, got {misfire!r}")
        found["misfire"] = None if misfire is None else misfire.limit
    if "priority" in options:
        check_priority(options["priority"])
        found["priority"] = options["priority"]
    picked = {k: options.get(k) for k in ("overlap", "deadline", "jitter")}
    controls(probe, None, picked["overlap"], picked["deadline"], picked["jitter"], None, None)
    for name, attribute in (("overlap", "overlap_skip"), ("deadline", "deadline"),
                            ("jitter", "jitter")):  # fmt: skip
        if name in options:
            found[attribute] = getattr(probe, attribute)
    if "overlap" in options:  # the whole policy: one of them, or several runs at once
        found.update({name: getattr(probe, name) for name in OVERLAP_ATTRIBUTES})
    return found


OVERLAP_ATTRIBUTES = ("concurrent", "limit", "replace")
"""The plan attributes an overlap policy sets besides ``overlap_skip``."""


def stoppable_action(action: object) -> object:
    """The user's callable inside a task's stored action (a :class:`Bound` wraps it
    with its arguments), for :func:`check_stoppable`."""
    return action.action if isinstance(action, Bound) else action


BACKFILL_MAX = 100_000
"""The most slots one :meth:`Scheduler.backfill` queues (a larger window: in parts)."""


def window(start: object, end: object) -> tuple[Time, Time]:
    """A backfill's ``[start, end)`` as times; ``TypeError``/``ValueError`` otherwise."""
    low, high = _validate.finite("start", start), _validate.finite("end", end)
    if high < low:
        raise ValueError(f"end must not be before start, got start={low!r}, end={high!r}")
    return low, high


def backfill_overlap(overlap: object) -> bool:
    """Whether a backfill's ``overlap`` queues nothing while a run is in flight.
    ``TypeError`` for a non-Overlap, ``ValueError`` for ``allow(n)``/``REPLACE``."""
    if overlap is not None and not isinstance(overlap, Overlap):
        raise TypeError(
            f"overlap must be a rota.Overlap (Overlap.BUFFER, Overlap.SKIP), got {overlap!r}"
        )
    if overlap is not None and overlap.concurrent:
        raise ValueError(
            f"a backfill's own overlap is Overlap.BUFFER or Overlap.SKIP, not {overlap!r}: "
            "its slots run as the task's runs do, so give the task overlap=Overlap.allow(n) "
            "(update(task_id, overlap=...)) to run them several at once"
        )
    return overlap == Overlap.SKIP


def slots_in(plan: Plan, start: Time, end: Time) -> list[Time]:
    """The slots of a task's schedule in ``[start, end)`` that its live schedule has
    passed (before its current slot, and not waiting in its backlog), ascending.

    ``FixedRate``: ``first + k * period`` on the task's own grid (its cursor's
    ``first``), for every integer k; a schedule with ``next_after(t)`` (``Cron``):
    its instants. Raises ``ValueError`` for any other schedule (no slots to
    name: ``Once``, ``FixedDelay``) and for more than :data:`BACKFILL_MAX` slots.
    O(slots).
    """
    when = plan.schedule
    slots: list[Time] = []
    if isinstance(when, FixedRate):
        first = getattr(plan.cursor, "first", when.start_at)
        if first is None:
            raise ValueError(f"the task's schedule {when!r} has ended: it has no slots left")
        period = when.period
        k = math.ceil((start - first) / period)
        while first + (k - 1) * period >= start:  # float division may round either way
            k -= 1
        while first + k * period < start:
            k += 1
        while (at := first + k * period) < end:
            slots.append(at)
            k += 1
            if len(slots) > BACKFILL_MAX:
                break
    elif callable(getattr(when, "next_after", None)):
        at = when.next_after(start - 1)  # type: ignore[attr-defined]
        while at < end:
            if at >= start:
                slots.append(at)
                if len(slots) > BACKFILL_MAX:
                    break
            at = when.next_after(at)  # type: ignore[attr-defined]
    else:
        raise ValueError(
            f"backfill needs a schedule of slots (FixedRate, Cron, or one with "
            f"next_after(t)), not {when!r}"
        )
    if len(slots) > BACKFILL_MAX:
        raise ValueError(
            f"[{start!r}, {end!r}) holds more than {BACKFILL_MAX} slots of {when!r}: "
            "backfill it in parts"
        )
    # The live schedule runs its current slot and every later one itself.
    live = set(plan.backlog or ())
    return [slot for slot in slots if slot < plan.slot and slot not in live]


def check_stoppable(action: object) -> None:
    """``ValueError`` unless ``action`` can be stopped in the middle of a run, as
    ``Overlap.REPLACE`` needs: an ``async def`` function (its coroutine is cancelled,
    under :class:`~rota.AsyncRunner`), or one marked ``stoppable`` by what stops it
    on ``RUN_REPLACED`` (``rota run``'s commands: their process group). A thread
    cannot be stopped safely."""
    call = getattr(action, "__call__", None)  # noqa: B004 - an async __call__ counts too
    if getattr(action, "stoppable", False) is True:
        return
    if not (inspect.iscoroutinefunction(action) or inspect.iscoroutinefunction(call)):
        raise ValueError(
            f"overlap=Overlap.REPLACE stops the run in flight, and {action!r} cannot be "
            "stopped: give an async def action (run under AsyncRunner: its coroutine is "
            "cancelled), or use Overlap.SKIP / Overlap.BUFFER"
        )


def check_end(plan: Plan, first: Time) -> None:
    """``ValueError`` for an ``end`` before the task's first run: it would never run."""
    if plan.end is not None and first > plan.end:
        raise ValueError(f"end={plan.end!r} is before the task's first run, at {first!r}")


def _check_retry_on(retry_on: object) -> RetryOn | None:
    """``None``, an exception type, a tuple of them, or a predicate ``(error) -> bool``."""
    if retry_on is None or (isinstance(retry_on, type) and issubclass(retry_on, BaseException)):
        return retry_on
    if isinstance(retry_on, tuple) and all(
        isinstance(t, type) and issubclass(t, BaseException) for t in retry_on
    ):
        return retry_on
    if callable(retry_on):
        return retry_on
    raise TypeError(
        "retry_on must be an exception type, a tuple of them, or a function "
        f"(error) -> bool, got {retry_on!r}"
    )


def check_priority(priority: object) -> None:
    if not isinstance(priority, int) or isinstance(priority, bool):
        raise TypeError(f"priority must be an int, got {priority!r} ({type(priority).__name__})")


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

    __slots__ = (
        "_clock", "_engine", "_epoch", "_lock", "_plain_code", "_table",
    )  # fmt: skip

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
        _check_retry(retry)
        self._engine = Engine(backoff, retry)
        # An RLock, taken by the interrupt-safe shape of locked() (rota._tasks).
        self._lock = threading.RLock()
        # Where the tasks live (a durable scheduler puts a StoredTasks here); the
        # listeners and the runners' wake-ups are kept by it
        self._table: Tasks = LocalTasks(self._engine, self._lock)
        self._plain_code: object = None  # the code of the last function checked as action(at)
        if epoch is not None and not isinstance(epoch, bool):
            raise TypeError(f"epoch must be True, False or None, got {epoch!r}")
        if epoch is None:
            epoch = True if clock in EPOCH_CLOCKS else False if clock in MONOTONIC_CLOCKS else None
        self._epoch = epoch

    def __repr__(self) -> str:
        pending, head = self._locked(lambda: (len(self._engine), self._engine.next_time()))
        return f"<Scheduler unfinished={pending} next_run_time={head!r}>"

    def _locked(self, operation: Callable[..., T], *args: Any) -> T:
        """Run an engine operation under the lock, safe against interrupts (see
        :func:`rota._tasks.locked`)."""
        return locked(self._lock, self._engine, operation, *args)

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
        action: Callable[..., object],
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
        if options:  # everything beyond the contract's call: one implementation, schedule()
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
        if type(action) is not FunctionType or action.__code__ is not self._plain_code:
            prepared = self._prepare(action, None, None)
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
            return self._add(task_id, at, action, make_plan(None, max_retries, None, None, 0))
        return self._add(task_id, at, action, None)

    def schedule_at_fixed_rate(
        self,
        task_id: Hashable,
        initial_delay: Time | timedelta,
        period: Time | timedelta,
        action: Callable[..., object],
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
        _validate.callable_("action", action)
        _validate.count("max_retries", max_retries)
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
        )

    def schedule(
        self,
        task_id: Hashable,
        when: Schedule,
        action: Callable[..., object],
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
        _validate.hashable("task_id", task_id)
        _validate.callable_("action", action)
        _validate.count("max_retries", max_retries)
        if isinstance(when, Once) and misfire is not None:
            raise ValueError(f"misfire applies to recurring schedules, not {when!r}")
        plan = make_plan(None, max_retries, retry, misfire, priority, retry_on)
        controls(plan, when, overlap, deadline, jitter, self._end(end), max_runs)
        if plan.replace:
            check_stoppable(action)
        action = self._prepare(action, args, kwargs)
        cursor, first = self._first(when)
        check_end(plan, first)
        plan.cursor = cursor
        plan.schedule = when
        if type(action) is Bound:
            action.bind(task_id, plan)
        return self._add(task_id, first, action, plan, replace_existing)

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
        :class:`~rota.DurableScheduler` declares it with ``ensure`` instead,
        so a restart keeps the stored task's place in its schedule.)

        Complexity: that of :meth:`schedule`. Raises what it raises, when
        the function is decorated.
        """

        def register(action: F) -> F:
            name = task_id if task_id is not None else f"{action.__module__}.{action.__qualname__}"
            self._declare_job(name, when, action, replace_existing, options)
            return action

        return register

    def _declare_job(
        self,
        name: Hashable,
        when: Schedule,
        action: Callable[..., object],
        replace_existing: bool,
        options: dict[str, Any],
    ) -> None:
        """How :meth:`job` declares a decorated function: ``schedule``, replacing."""
        self.schedule(name, when, action, replace_existing=replace_existing, **options)

    def _prepare(self, action: Any, args: Any, kwargs: Any) -> Action:
        """Check the action's call shape (:func:`rota._calls.prepare`).

        Remembers the code of the last plain ``action(at)`` function, so that
        scheduling the same function again costs one identity test; other
        functions hit ``prepare``'s cache (O(1)).
        """
        prepared = prepare(action, args, kwargs)
        if prepared is action and type(action) is FunctionType:
            self._plain_code = action.__code__
        return prepared

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

    def _first(self, when: Schedule, now: Time | None = None) -> tuple[Cursor | None, Time]:
        """Bind ``when`` to a new task: its cursor (``None`` for a one-off) and first run.

        Raises ``TypeError`` for a ``when`` that is not a schedule or a first
        time that is not a number, ``ValueError`` for no first time, one that
        is not finite, or a schedule that needs an epoch clock on a
        monotonic one; what the schedule itself raises propagates.
        """
        if now is None:
            now = time_from("the clock", self._clock())
        if self._epoch is False and getattr(when, "epoch", False):
            raise ValueError(
                f"{when!r} runs at wall-clock instants, but this scheduler's clock is "
                "monotonic: use Scheduler(clock=time.time)"
            )
        if isinstance(when, Once):
            cursor, first = None, time_from(f"{when!r}", when.first(now))
        else:
            cursor = _cursor(when, now)
            nxt = cursor.next(now)
            if nxt is None:
                raise ValueError(f"when has no run time: {when!r}")
            first = time_from(f"{when!r}: the first run time", nxt)
        absolute = (  # Once(at=...) or FixedRate(start=...): a number naming an instant
            getattr(when, "at", None) is not None or getattr(when, "start_at", None) is not None
        )
        if self._epoch is False and absolute and first - now > EPOCH_SUSPECT:
            raise ValueError(
                f"{when!r} first runs at {first!r}, more than ten years after now ({now!r}) on "
                "this monotonic clock: an epoch time? Use Scheduler(clock=time.time) for "
                "wall-clock times"
            )
        return cursor, first

    def _add(
        self,
        task_id: Hashable,
        at: Time,
        action: Callable[..., object],
        plan: Plan | None,
        replace: bool = False,
    ) -> bool:
        lock = self._lock  # the shape of locked(), inlined: a hot path
        try:
            lock.acquire()
            if not self._engine.add(task_id, action, at, plan, replace):
                return False
            head = self._engine.next_time() if self._table.wakeups else None
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
            self._table.wake(head)
        if self._table.listeners:
            self._table.emit(Event(EventKind.TASK_ADDED, task_id, at))
        return True

    def pause(self, task_id: Hashable) -> bool:
        """Keep a task from running until :meth:`resume`.

        Its next run is kept but not run; its status stays what it was (a
        paused task is ``scheduled``; see :meth:`is_paused`). A run in
        progress goes on, and the task is held when it completes. ``True`` if
        the task was unfinished and not paused already; ``False`` otherwise.

        Complexity: O(1) amortised.
        """
        return self._change(self._engine.pause, task_id, event=EventKind.TASK_PAUSED)

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
        return self._change(self._engine.resume, task_id, event=EventKind.TASK_RESUMED)

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
        return self._change(self._engine.reschedule, task_id, cursor, first, when)

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
        now = time_from("the clock", self._clock())
        return self._change(self._engine.trigger, task_id, now)

    def update(self, task_id: Hashable, **options: Any) -> bool:
        """Change options of an unfinished task in place, from its next run on.

        ``options`` are any of ``max_retries``, ``retry``, ``retry_on``,
        ``misfire``, ``overlap``, ``deadline``, ``jitter``, ``priority``,
        ``args`` and ``kwargs``, as :meth:`schedule` takes them (APScheduler's
        ``modify_job``). The task keeps its id, schedule, place in it, status
        and history; a run in flight finishes as it began (its retries too are
        decided by the options it started with), and the changes apply to the
        runs after it. ``overlap`` may switch a task to or from
        ``Overlap.allow(n)``/``REPLACE`` while none of its runs is in flight
        (then, or once its run in flight ends; a ``ValueError`` while several
        runs of a concurrent task are). ``False`` if the task is unknown or
        finished.

        Complexity: O(log n). Raises ``TypeError`` for an unknown option and
        what :meth:`schedule` raises for a bad value (with ``args``/``kwargs``:
        arguments the action cannot be called with). Nothing changes when it
        raises.
        """
        found = changes(options)
        rebind = "args" in options or "kwargs" in options

        def change() -> bool:
            action = None
            current = self._engine.action_of(task_id)
            if found.get("replace") and current is not None:
                check_stoppable(stoppable_action(current))
            if rebind:
                if current is None:
                    return False
                action = self._rebound(task_id, current, options)
            return self._engine.update(task_id, found, action)

        return self._locked(change)

    def _rebound(self, task_id: Hashable, current: Action, options: Mapping[str, Any]) -> Action:
        """The task's action called with the new ``args``/``kwargs`` of ``options``
        (the others as they were), its call shape checked (``TypeError``)."""
        function: Any = current.action if type(current) is Bound else current
        args = options["args"] if "args" in options else getattr(current, "args", None)
        kwargs = options["kwargs"] if "kwargs" in options else getattr(current, "kwargs", None)
        action = prepare(function, args or None, kwargs or None)
        if type(action) is Bound:
            action.bind(task_id, self._engine.plan_of(task_id))
        return action

    def backfill(
        self,
        task_id: Hashable,
        start: Time | datetime,
        end: Time | datetime,
        *,
        overlap: Overlap | None = None,
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
        """
        low, high = window(self._end(start), self._end(end))
        idle_only = backfill_overlap(overlap)

        def queue() -> int:
            plan = self._engine.plan_of(task_id)
            if plan is None:
                return 0
            slots = slots_in(plan, low, high)
            return self._engine.backfill(task_id, slots, idle_only=idle_only)

        queued = self._locked(queue)
        if queued and self._table.wakeups:
            self._table.wake(low)
        return queued

    def _change(
        self, operation: Callable[..., bool], *args: Any, event: EventKind | None = None
    ) -> bool:
        """Run an engine operation under the lock; wake runners if it queued a run.

        ``event`` is emitted (on ``args[0]``, the task id) when it changed something.
        """

        def change() -> tuple[bool, Time | None]:
            return operation(*args), self._engine.next_time() if self._table.wakeups else None

        changed, head = self._locked(change)
        if head is not None:
            self._table.wake(head)
        if changed and event is not None and self._table.listeners:
            self._table.emit(Event(event, args[0]))
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
        lock = self._lock  # the shape of locked(), inlined: a hot path
        try:
            lock.acquire()
            cancelled = self._engine.cancel(task_id)
        except BaseException:
            if lock._is_owned():  # type: ignore[attr-defined]
                self._engine._repair()
            raise
        finally:
            try:
                lock.release()
            except RuntimeError:  # acquire() was cut short: nothing to release
                pass
        if cancelled and self._table.listeners:
            self._table.emit(Event(EventKind.TASK_REMOVED, task_id))
        return cancelled

    def status(self, task_id: Hashable) -> Status | None:
        """The task's :class:`~rota.Status`, or ``None`` for an unknown id.

        Finished tasks stay queryable: at least the 10,000 most recently
        finished are remembered, the oldest forgotten first.

        Complexity: O(1).
        """
        return self._locked(self._engine.status, task_id)

    def next_run_time(self, task_id: Hashable = _UNSET) -> Time | None:
        """The time of the earliest live run, or ``None`` if nothing is queued.

        With ``task_id``: that task's next run time, or ``None`` while a run
        of it is queued or running, while it is paused, once it finished,
        and for an unknown id.

        Complexity: O(1) amortised.
        """
        if task_id is _UNSET:
            return self._locked(self._engine.next_time)
        info = self.info(task_id)
        return None if info is None else info.next_run_time

    def info(self, task_id: Hashable) -> TaskInfo | None:
        """What is known of one task: a :class:`~rota.TaskInfo`, or ``None`` if unknown.

        Unfinished tasks give everything; finished ones (at least the 10,000
        most recent) their final status. Thread-safe.

        Complexity: O(1).
        """
        return self._locked(self._engine.info, task_id)

    def tasks(self) -> list[TaskInfo]:
        """A :class:`~rota.TaskInfo` for every unfinished task, in no particular order.

        A consistent snapshot, taken under the lock. Complexity: O(n).
        """
        return self._locked(self._engine.infos)

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
        with self._lock:
            self._table.listen((*self._table.listeners, entry))

        def remove() -> None:
            with self._lock:
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
