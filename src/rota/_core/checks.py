"""Every check of a task's arguments, with its message and exception type: one
module, used by :class:`~rota.Scheduler` whatever table it keeps its tasks in
(:class:`~rota.Tasks`), so that memory and every store refuse the same input the
same way. Also the one rule of which slots a backfill queues."""

from __future__ import annotations

import inspect
import math
from collections.abc import Mapping
from datetime import datetime, timedelta
from typing import Any

from rota.misfire import Misfire
from rota.overlap import Overlap
from rota.schedules import FixedDelay, FixedRate, Once

from . import validate as _validate
from .calls import Bound, prepare
from .deps import upstreams
from .moves import plain
from .policy import Cursor, Plan, RetryOn, RetryPolicy
from .types import Time

UPDATABLE = (
    "max_retries", "retry", "retry_on", "misfire", "overlap", "deadline", "jitter",
    "priority", "calendar", "on_excluded", "args", "kwargs", "after",
)  # fmt: skip
"""The options :meth:`Scheduler.update` changes in place."""


def check_retry(retry: object) -> None:
    """``TypeError`` unless ``retry`` is ``None`` or a retry policy."""
    if retry is not None and not callable(getattr(retry, "delay", None)):
        raise TypeError(f"retry must be a retry policy (with a delay method), got {retry!r}")


def task_plan(
    when: object,
    max_retries: int,
    retry: RetryPolicy | None,
    retry_on: RetryOn | None,
    misfire: Misfire | None,
    priority: int,
    control: tuple[Any, Any, Any, Any, Any],
) -> Plan:
    """Check every policy and control of a new task and build its plan: the one
    sequence of checks ``schedule`` and ``ensure`` make, in every table, so each
    refuses the same input with the same exception and message. ``control`` is
    ``(overlap, deadline, jitter, end, max_runs)``. Types are checked before
    whether an option applies to ``when`` (``misfire=42`` with ``Once`` is a
    ``TypeError``, as it is with a recurring schedule). O(1)."""
    _validate.count("max_retries", max_retries)
    plan = make_plan(None, max_retries, retry, misfire, priority, retry_on)
    if isinstance(plain(when), Once) and misfire is not None:
        raise ValueError(f"misfire applies to recurring schedules, not {when!r}")
    controls(plan, plain(when), *control)
    plan.schedule = when
    return plan


def make_plan(
    cursor: Cursor | None,
    max_retries: int,
    retry: RetryPolicy | None,
    misfire: Misfire | None,
    priority: int,
    retry_on: RetryOn | None = None,
) -> Plan:
    """Validate the policy arguments and build a task's plan."""
    check_retry(retry)
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
    set_overlap(plan, overlap)
    plan.deadline = None if deadline is None else _validate.delay("deadline", deadline)
    plan.jitter = (None if jitter is None else _validate.delay("jitter", jitter)) or None
    plan.end = _validate.optional_time("end", end)
    if max_runs is not None:
        _validate.at_least_one("max_runs", max_runs)
    plan.max_runs = max_runs
    if isinstance(when, Once):
        for name, value in (("overlap", overlap), ("end", end), ("max_runs", max_runs)):
            if value is not None:
                raise ValueError(f"{name} applies to recurring schedules, not {when!r}")
    if plan.concurrent:
        check_concurrent(overlap, when)
    plan.extra = plan.uses_controls()


def check_concurrent(overlap: object, when: object) -> None:
    """``ValueError`` if ``when`` cannot run an ``overlap`` policy that runs a task's
    slots side by side (``Overlap.allow(n)``, ``REPLACE``): ``FixedDelay``, whose each
    run starts a delay after the previous one finished. For ``schedule`` and
    ``update`` alike. O(1)."""
    if isinstance(when, FixedDelay):
        raise ValueError(
            f"overlap={overlap!r} needs slots that do not wait for a run to end, not "
            f"{when!r} (each of its runs starts a delay after the previous one finished)"
        )


def set_overlap(plan: Plan, overlap: Overlap | None) -> None:
    """Set the plan attributes an overlap policy decides (``None``: ``BUFFER``): the one
    mapping from a policy to a plan, for a call's arguments and a stored spec alike
    (:func:`overlap_of` is the way back). O(1)."""
    plan.overlap_skip = overlap == Overlap.SKIP
    plan.concurrent = overlap is not None and overlap.concurrent
    plan.limit = 1 if overlap is None else overlap.limit
    plan.replace = overlap == Overlap.REPLACE


def overlap_of(plan: Plan) -> Overlap:
    """The overlap policy a plan's attributes say (what :func:`set_overlap` set). O(1)."""
    if plan.replace:
        return Overlap.REPLACE
    if plan.concurrent:
        return Overlap.allow(plan.limit)
    return Overlap.SKIP if plan.overlap_skip else Overlap.BUFFER


def overlap_changed(found: Mapping[str, object]) -> Overlap:
    """The overlap policy of an update's plan attributes (what :func:`changes` gives
    for an ``overlap``). O(1)."""
    probe = Plan()
    probe.overlap_skip = bool(found.get("overlap_skip"))
    for name in OVERLAP_ATTRIBUTES:
        setattr(probe, name, found[name])
    return overlap_of(probe)


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
        check_retry(options["retry"])
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
    if "after" in options:
        found["after"] = upstreams(options["after"]) or None
    return found


def updated_call(
    function: Any, found: Mapping[str, object], given: Mapping[str, Any], args: Any, kwargs: Any
) -> tuple[Any, Any, Any] | None:
    """What :meth:`Scheduler.update` checks of a task's action, whatever table keeps it:
    that ``Overlap.REPLACE`` (in ``found``) can stop it, and that it can be called with
    the ``args``/``kwargs`` of ``given`` (the others as they were, ``args``/``kwargs``).
    ``function`` is the task's callable (``None``: one this process does not know, not
    checked). Returns the new ``(args, kwargs, prepared call)``, or ``None`` when
    ``given`` changes neither. Raises ``ValueError``/``TypeError`` as the checks do.
    O(1), the call shape cached."""
    if found.get("replace") and function is not None:
        check_stoppable(function)
    if "args" not in given and "kwargs" not in given:
        return None
    args = given.get("args", args)
    kwargs = given.get("kwargs", kwargs)
    call = None if function is None else prepare(function, args, kwargs)
    return args, kwargs, call


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
    its instants; under a calendar, the schedule's slots the calendar allows (an
    excluded one did not run, or ran moved, under its key). Raises ``ValueError`` for
    any other schedule (no slots to name: ``Once``, ``FixedDelay``) and for more
    than :data:`BACKFILL_MAX` slots. O(slots).
    """
    when = plain(plan.schedule)
    slots = grid(plan, start, end, BACKFILL_MAX + 1)
    if slots is None:
        raise ValueError(
            f"backfill needs a schedule of slots (FixedRate, Cron, or one with "
            f"next_after(t)), not {when!r}"
        )
    if len(slots) > BACKFILL_MAX:
        raise ValueError(
            f"[{start!r}, {end!r}) holds more than {BACKFILL_MAX} slots of {when!r}: "
            "backfill it in parts"
        )
    calendar = getattr(plan.schedule, "calendar", None)
    if calendar is not None:
        slots = [slot for slot in slots if calendar.excluded_by(slot) is None]
    # The live schedule runs its current slot and every later one itself.
    live = set(plan.backlog or ())
    return [slot for slot in slots if slot < plan.slot and slot not in live]


def grid(plan: Plan, start: Time, end: Time, most: int) -> list[Time] | None:
    """The slots of a task's schedule in ``[start, end)``, ascending, at most ``most``
    (``FixedRate``: on the task's own grid; ``Cron``, or any schedule with
    ``next_after(t)``: its instants); ``None`` for a schedule whose slots cannot be
    named (``Once``, ``FixedDelay``). Raises ``ValueError`` for a fixed rate that has
    ended. O(slots)."""
    when, cursor = plain(plan.schedule), getattr(plan.cursor, "inner", plan.cursor)
    slots: list[Time] = []
    if isinstance(when, FixedRate):
        first = getattr(cursor, "first", when.start_at)
        if first is None:
            raise ValueError(f"the task's schedule {when!r} has ended: it has no slots left")
        period = when.period
        k = math.ceil((start - first) / period)
        while first + (k - 1) * period >= start:  # float division may round either way
            k -= 1
        while first + k * period < start:
            k += 1
        while (at := first + k * period) < end and len(slots) < most:
            slots.append(at)
            k += 1
        return slots
    if not callable(getattr(when, "next_after", None)):
        return None
    at = when.next_after(start - 1)  # type: ignore[attr-defined]
    while at < end and len(slots) < most:
        if at >= start:
            slots.append(at)
        at = when.next_after(at)  # type: ignore[attr-defined]
    return slots


def opening(when: object, first: Time, now: Time) -> Time:
    """Where the window of a task's first run begins (docs/policies.md, "The window a
    run covers"): one period before it on a fixed rate, else when it was scheduled
    (``now``; ``first`` if that is earlier). O(1)."""
    when = plain(when)
    if isinstance(when, FixedRate):
        return first - when.period
    return min(now, first)


def slot_windows(plan: Plan, slots: list[Time]) -> dict[Time, Time]:
    """Where each of ``slots`` (ascending, of the task's schedule, as :func:`slots_in`
    gives them) begins its own window: at the slot before it; the first at the
    schedule's slot before it (:func:`latest_slot`), or at itself if none is known.
    O(len(slots)) plus one step back."""
    if not slots:
        return {}
    before = latest_slot(plan, math.nextafter(slots[0], -math.inf))
    return dict(zip(slots, [slots[0] if before is None else before, *slots], strict=False))


def latest_slot(plan: Plan, at: Time) -> Time | None:
    """The latest slot of a task's schedule at or before ``at``: ``FixedRate`` on its
    grid, ``Cron`` its previous instant (looked for up to :data:`BEFORE_MAX` back);
    ``None`` for none, or a schedule whose slots cannot be named. O(1), or a cron's
    step back."""
    when, cursor = plain(plan.schedule), getattr(plan.cursor, "inner", plan.cursor)
    if isinstance(when, FixedRate):
        first = getattr(cursor, "first", when.start_at)
        if first is None:
            return None
        k = math.floor((at - first) / when.period)
        while first + (k + 1) * when.period <= at:  # float division may round either way
            k += 1
        while first + k * when.period > at:
            k -= 1
        return first + k * when.period
    if callable(getattr(when, "last_runs", None)):
        found = when.last_runs(at, 1, at - BEFORE_MAX)  # type: ignore[attr-defined]
        return found[-1] if found else None
    return None


BEFORE_MAX = 9 * 366 * 86400
"""How far back :func:`latest_slot` looks for a cron's previous instant (a cron of 29
February runs every four years, or eight across a century's end)."""


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
    """``TypeError`` unless ``priority`` is an int (a bool is not)."""
    if not isinstance(priority, int) or isinstance(priority, bool):
        raise TypeError(f"priority must be an int, got {priority!r} ({type(priority).__name__})")
