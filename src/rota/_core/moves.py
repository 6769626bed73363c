"""A schedule under a business calendar: which of its slots run, when, and under which
slot's key; what is skipped and counted. The one place these are decided, for every
table: the engine sees only a schedule whose cursor gives run times
(:class:`Calendared`), and asks it for the slot of a moved run and the slots it
counted skipped.

The rules (``docs/policies.md``, "Business calendars"): a slot the calendar excludes
is skipped (``"skip"``), or moved to the next or previous allowed instant
(:meth:`rota.calendars.Calendar.moved`). Runs keep slot order: in ``"next"``, a run
that would start at or after the run of a later slot is merged into it (the later
slot keeps its key; the earlier is counted skipped, ``calendar``); in
``"previous"``, runs at one instant are one (the latest slot keeps its key), and a
run moved to or before the task's last run is dropped and counted.

Cost: a stretch the calendar excludes is crossed at once, by the schedule's
``skip`` (every built-in recurring schedule has one) on a copy of its cursor,
whenever the stretch's slots all end the same way: all skipped (``"skip"``), all
merged into the first slot after the stretch (``"next"``, that slot at the
stretch's end), or all moved to one instant (a stretch of windows and periods on
business days). So a minutely task through a 14-day freeze decides its next run in
O(days and windows crossed), and counts the 20,160 slots exactly. Otherwise (a
slot moved off a weekend or holiday past the stretch's end) each slot is decided:
O(slots on the excluded days), a few for a daily or monthly schedule.
"""

from __future__ import annotations

import math
from collections import deque
from typing import Any, NamedTuple

from .policy import Cursor, Schedule
from .types import Time

ON_EXCLUDED = ("skip", "next", "previous")
"""What a task does with a slot its calendar excludes."""
YEARS = 50
"""How far a calendar may exclude every slot of a schedule before the task fails
(its next run is not found): a calendar that allows none of its slots."""
MOVES_KEPT = 64
"""The most moved runs whose slots a cursor remembers (for their keys): more than a
misfire policy keeps ahead, and retries of a moved run keep its slot themselves."""


CALENDAR = ("excluded_by", "open_from", "moved", "open_days", "window_at", "to_json")
"""What this module asks of a calendar (:class:`rota.calendars.Calendar` has it; that
module is built on this one, so it is asked for by name)."""


class Upcoming(NamedTuple):
    """One of a task's next slots (:meth:`rota.Scheduler.upcoming`): ``slot``, the
    time it belongs to (its key's); ``at``, when it runs (``None``: it does not run,
    excluded or merged into a run that already happened; the moved time for a moved
    slot, or the time of the run it is merged into; the slot otherwise); ``reason``,
    why the calendar moved or excluded it (``"weekend"``, ``"holiday"``,
    ``"window"``), ``None`` for an allowed slot."""

    slot: Time
    at: Time | None
    reason: str | None


class Calendared:
    """``schedule`` under ``calendar``: the slots the calendar excludes are skipped
    (``on_excluded="skip"``) or moved (``"next"``, ``"previous"``). What
    ``schedule(..., calendar=, on_excluded=)`` runs a task on; a schedule like any
    other (it composes with misfire, overlap, deadline, jitter, end, max_runs), stored
    as data with its calendar.

    Raises ``TypeError`` for a ``schedule`` that is not one or a ``calendar`` that is
    not a :class:`rota.calendars.Calendar`; ``ValueError`` for an ``on_excluded`` not
    in :data:`ON_EXCLUDED`, a ``FixedDelay`` (its next slot waits for the run's end:
    nothing to move), or a one-off (``Once``) with ``"skip"`` (it would never run).
    O(1).
    """

    __slots__ = ("calendar", "on_excluded", "schedule")

    schedule: Schedule
    calendar: Any  # a rota.calendars.Calendar (that module is built on this one)
    on_excluded: str
    epoch = True
    """A calendar's days are wall-clock days: a monotonic clock refuses it."""

    def __init__(self, schedule: Schedule, calendar: Any, on_excluded: str = "skip") -> None:
        from rota.schedules import FixedDelay, Once

        if not callable(getattr(schedule, "start", None)):
            raise TypeError(f"schedule must be a schedule (with start()), got {schedule!r}")
        if not all(callable(getattr(calendar, name, None)) for name in CALENDAR):
            raise TypeError(f"calendar must be a rota.calendars.Calendar, got {calendar!r}")
        if on_excluded not in ON_EXCLUDED:
            raise ValueError(
                f"on_excluded must be one of {', '.join(map(repr, ON_EXCLUDED))}, "
                f"got {on_excluded!r}"
            )
        if isinstance(schedule, FixedDelay):
            raise ValueError(
                f"calendar= cannot take {schedule!r}: its next run waits for the previous "
                "one to end, so no slot is known ahead to skip or move"
            )
        if isinstance(schedule, Once) and on_excluded == "skip":
            raise ValueError(
                'a one-off task takes calendar= only with on_excluded="next" or '
                '"previous": skipped, it would never run'
            )
        object.__setattr__(self, "schedule", schedule)
        object.__setattr__(self, "calendar", calendar)
        object.__setattr__(self, "on_excluded", on_excluded)

    def __setattr__(self, name: str, value: object) -> None:
        raise AttributeError("a Calendared schedule is immutable")

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Calendared) and self._key() == other._key()

    def __hash__(self) -> int:
        return hash(self._key())

    def _key(self) -> tuple[Any, ...]:
        """Equal for equal arguments: the schedule by its spec (schedules compare by
        identity), else itself."""
        spec = getattr(self.schedule, "spec", None)
        schedule = repr(spec()) if callable(spec) else self.schedule
        return (schedule, self.calendar, self.on_excluded)

    def __repr__(self) -> str:
        return (
            f"Calendared({self.schedule!r}, calendar={self.calendar.name!r}, "
            f"on_excluded={self.on_excluded!r})"
        )

    def start(self, now: Time) -> CalendarCursor:
        """A cursor over the runs of a task scheduled at ``now``."""
        return CalendarCursor(self, self.schedule.start(now), None)

    def spec(self) -> dict[str, object]:
        """This schedule as JSON-compatible data: the schedule's spec, the calendar's
        and ``on_excluded``. Raises ``TypeError`` for a schedule a store cannot keep."""
        spec = getattr(self.schedule, "spec", None)
        if not callable(spec):
            raise TypeError(f"{self.schedule!r} has no spec(): a store cannot keep it")
        return {"kind": "calendared", "schedule": spec(), "calendar": self.calendar.to_json(),
                "on_excluded": self.on_excluded}  # fmt: skip

    def resume(self, state: object) -> CalendarCursor:
        """A cursor at the position ``state`` (a cursor's ``state()``) describes."""
        if not (isinstance(state, dict) and "inner" in state):
            raise ValueError(f"state must be a calendared cursor's state, got {state!r}")
        inner = self.schedule.resume(state["inner"])  # type: ignore[attr-defined]
        return CalendarCursor(self, inner, state)


class CalendarCursor:
    """The runs of one task under its calendar. ``next`` gives run times, in order;
    :meth:`take_excluded` the slots counted skipped since it was last asked;
    :meth:`slot_of` the slot (key) of a moved run. Lookahead lives in ``_ahead`` (the
    next slot of the schedule, taken but not decided) and ``_stack`` (runs decided
    but not final: a later slot may still merge them, ``[slot, at, merged,
    reason]``)."""

    __slots__ = ("_ahead", "_carry", "_cover", "_ended", "_inner", "_last", "_log", "_mark",
                 "_moves", "_prev", "_stack", "_window", "excluded", "last_skipped",
                 "owner")  # fmt: skip

    def __init__(self, owner: Calendared, inner: Cursor, state: dict[str, Any] | None) -> None:
        self.owner = owner
        self._inner = inner
        self._log: list[Any] | None = None
        state = state or {}
        self._ahead: list[Time] = list(state.get("ahead", ()))
        self._ended: bool = state.get("ended", False)
        # (items stored before windows were kept have four fields: no window known)
        self._stack: list[list[Any]] = [[*item, None][:5] for item in state.get("stack", ())]
        self._carry: int = state.get("carry", 0)
        self._last: Time = state.get("last", -math.inf)
        self._moves: dict[Time, Time] = dict(state.get("moves", ()))
        self.excluded: int = state.get("excluded", 0)
        # Windows (docs/policies.md, "The window a run covers"): the schedule's slot
        # before the next one decided; where the window of the run after slots that
        # merge into it begins; the latest run given and where its window begins.
        self._prev: Time | None = state.get("prev")
        self._cover: Time | None = state.get("cover")
        window = state.get("window")
        self._window: tuple[Time, Time] | None = None if window is None else (window[0], window[1])
        # Where it was when it began deciding its latest run, if that began with an
        # excluded slot: upcoming() decides that run again from there, to list them.
        self._mark: dict[str, Any] | None = state.get("mark")
        skipped = state.get("last_skipped")
        self.last_skipped: tuple[Time, str] | None = (
            None if skipped is None else (skipped[0], skipped[1])
        )

    def state(self) -> dict[str, Any]:
        """Where this cursor is, as JSON-compatible data (only what is set). O(kept)."""
        state: dict[str, Any] = {"inner": self._inner.state()}  # type: ignore[attr-defined]
        for key, value in (
            ("ahead", list(self._ahead)), ("ended", self._ended),
            ("stack", [list(item) for item in self._stack]),
            ("carry", self._carry), ("excluded", self.excluded),
            ("last", None if self._last == -math.inf else self._last),
            ("moves", [[at, slot] for at, slot in self._moves.items()]),
            ("last_skipped", None if self.last_skipped is None else list(self.last_skipped)),
            ("mark", self._mark),
        ):  # fmt: skip
            if value:
                state[key] = value
        for name, kept in (("prev", self._prev), ("cover", self._cover), ("window", self._window)):
            if kept is not None:  # (a time may be 0)
                state[name] = list(kept) if isinstance(kept, tuple) else kept
        return state

    # -- what the engine asks --------------------------------------------------------

    @property
    def inner(self) -> Cursor:
        """The schedule's own cursor, under the calendar's. O(1)."""
        return self._inner

    def hold(self, slot: Time) -> None:
        """Take ``slot`` back, to decide it again first (a run the task had when its
        calendar changed). O(held)."""
        self._ahead.insert(0, slot)

    def take_excluded(self) -> int:
        """The slots counted skipped (``calendar``) since the last call; O(1)."""
        count, self.excluded = self.excluded, 0
        return count

    def slot_of(self, at: Time) -> Time | None:
        """The slot of the run at ``at`` if the calendar moved it there (its key's
        time), else ``None``. O(1)."""
        return self._moves.get(at)

    def window_of(self, at: Time) -> Time | None:
        """Where the window of the run just given at ``at`` begins: the schedule's slot
        before the earliest slot it stands for (merged slots too; a skipped one is
        not covered); ``None`` if that is not known (its first slot). O(1)."""
        window = self._window
        return window[1] if window is not None and window[0] == at else None

    def next(self, now: Time) -> Time | None:
        """The next run's time, ``None`` when the schedule ends. Raises what the
        schedule's cursor raises, and ``ValueError`` when the calendar excludes every
        slot for :data:`YEARS` years. O(days and windows crossed); see the module."""
        self._mark = None
        first = True
        stack = self._stack
        back = self.owner.on_excluded == "previous"
        horizon: Time | None = None
        while True:
            slot = self._peek(now)
            if horizon is None and slot is not None:
                horizon = slot + YEARS * 366 * 86400
            elif slot is not None and slot > horizon and not stack:  # type: ignore[operator]
                raise ValueError(
                    f"calendar {self.owner.calendar.name!r} excludes every slot of "
                    f"{self.owner.schedule!r} for {YEARS} years"
                )
            if stack and (slot is None or (len(stack) > 1 if back else slot > stack[0][1])):
                item = stack.pop(0)
                if item[1] <= self._last:  # moved to or before a run that happened: counted
                    self.excluded += item[2] + 1  # on the run this call gives
                    self.last_skipped = (item[0], item[3] or "calendar")
                    self._note("drop", item)
                    continue
                return self._emit(item)
            if slot is None:
                return None
            decided = self._decide(slot, first)
            first = False
            if decided is None:
                continue
            item = decided
            item[2] += self._carry
            self._carry = 0
            if back:
                if stack and stack[-1][1] == item[1]:  # one instant: one run, the latest slot
                    self._merge(item, stack.pop())
            else:
                while stack and stack[-1][1] >= item[1]:  # it would run after a later slot
                    self._merge(item, stack.pop())
            stack.append(item)

    # -- deciding ------------------------------------------------------------------

    def _peek(self, now: Time) -> Time | None:
        """The schedule's next slot, taken but not decided (kept in ``_ahead``)."""
        ahead = self._ahead
        if not ahead:
            if self._ended:
                return None
            slot = self._inner.next(now)
            if slot is None:
                self._ended = True
                return None
            ahead.append(slot)
        return ahead[0]

    def _decide(self, slot: Time, first: bool) -> list[Any] | None:
        """Take the slot in ``_ahead`` and decide it: a run ``[slot, at, merged,
        reason]`` (``merged``: the slots it stands for beside its own), or ``None``
        when it was skipped and counted. A stretch the calendar excludes is crossed
        at once when its slots all end the same way (see the module). ``first``: the
        first slot a call of :meth:`next` decides (excluded, where it began is kept:
        the mark :func:`upcoming` lists that run's excluded slots from)."""
        calendar, mode = self.owner.calendar, self.owner.on_excluded
        reason = calendar.excluded_by(slot)
        if first and (reason is not None or mode == "previous"):  # (a later slot may
            self._mark = self.state()  # merge into it there)
        del self._ahead[0]
        since = self._prev if self._cover is None else self._cover
        self._cover = None
        if reason is None:
            self._note("slot", slot, None)
            self._prev = slot
            return [slot, slot, 0, None, since]
        end = calendar.open_from(slot)
        if mode == "skip":
            count, last = self._cross(slot, end, reason)
            self._count(count, last, calendar.excluded_by(last))
            self._prev = last
            return None
        moved = calendar.moved(slot, mode)
        if calendar.open_days(slot, end) and (  # windows and periods: all to one instant
            mode == "next" or calendar.moved(math.nextafter(end, -math.inf), mode) == moved
        ):
            count, last = self._cross(slot, end, reason)
            self._prev = last
            return [last, moved, count - 1, calendar.excluded_by(last), since]
        if mode == "next":
            crossed = self._cross_into(slot, end, reason)
            if crossed is not None:  # all merge into the slot at the stretch's end
                count, last = crossed
                self._count(count, last, calendar.excluded_by(last))
                self._prev, self._cover = last, since
                return None
        self._note("slot", slot, reason)
        self._prev = slot
        return [slot, moved, 0, reason, since]

    def _cross(self, slot: Time, end: Time, reason: str) -> tuple[int, Time]:
        """Take the slots after ``slot`` (taken) up to the stretch's ``end``: at once
        by the schedule's ``skip``, else one by one. Returns how many there were with
        ``slot``, and the last."""
        inner = self._inner
        before = self._copy(inner) if self._log is not None else None
        if getattr(inner, "skip", None) is not None and not self._ahead:
            skipped, tail = inner.skip(math.nextafter(end, -math.inf), 1)  # type: ignore[attr-defined]
            count, last = skipped + 1, tail[-1] if skipped else slot
        else:
            count, last = 1, slot
            while True:
                nxt = self._peek(0)
                if nxt is None or nxt >= end:
                    break
                del self._ahead[0]
                count, last = count + 1, nxt
        self._note("stretch", slot, reason, count, before)
        return count, last

    def _cross_into(self, slot: Time, end: Time, reason: str) -> tuple[int, Time] | None:
        """:meth:`_cross` when the schedule's first slot after the stretch is at its
        end (every slot of the stretch then merges into it); else ``None``, nothing
        taken. Looked at on a copy of the schedule's cursor (one that can ``skip``)."""
        inner = self._inner
        if getattr(inner, "skip", None) is None or self._ahead:
            return None
        probe = self._copy(inner)
        probe.skip(math.nextafter(end, -math.inf), 1)  # type: ignore[attr-defined]
        if probe.next(0) != end:
            return None
        return self._cross(slot, end, reason)

    def _copy(self, inner: Cursor) -> Cursor:
        """A cursor at ``inner``'s position (by its state)."""
        return self.owner.schedule.resume(inner.state())  # type: ignore[attr-defined,no-any-return]

    def _count(self, count: int, slot: Time, reason: str | None) -> None:
        """Count ``count`` slots skipped, reported on the run of the next slot decided;
        the latest is ``slot`` (``info().last_skipped``)."""
        self._carry += count
        self.last_skipped = (slot, reason or "calendar")

    def _merge(self, item: list[Any], merged: list[Any]) -> None:
        """The run ``merged`` (and what it stood for) merged into ``item``'s: counted
        on it when it runs."""
        item[2] += merged[2] + 1
        self.last_skipped = (merged[0], merged[3] or "calendar")
        if merged[4] is not None and (item[4] is None or merged[4] < item[4]):
            item[4] = merged[4]  # it covers what the merged run did

    def _emit(self, item: list[Any]) -> Time:
        """Make ``item`` the next run: its merged slots counted, its slot kept when
        moved."""
        slot, at, merged, _reason, since = item
        self._window = None if since is None else (at, since)
        self.excluded += merged
        if slot != at:
            moves = self._moves
            moves[at] = slot
            if len(moves) > MOVES_KEPT:
                del moves[next(iter(moves))]
        self._last = at
        self._note("run", item)
        return at  # type: ignore[no-any-return]

    def _note(self, kind: str, *facts: Any) -> None:
        """Keep what was decided, when :func:`upcoming` asks."""
        if self._log is not None:
            self._log.append((kind, *facts))


UPCOMING_MAX = 1000
"""The most slots :func:`upcoming` lists."""


def upcoming(
    schedule: object, cursor: object, current: tuple[Time, Time] | None, n: int
) -> list[Upcoming]:
    """The next ``n`` slots of a task on ``schedule`` whose cursor is ``cursor`` and
    whose run decided next is ``current``, ``(slot, at)`` (``None``: none is, a run is
    in flight): each with when it runs and what the calendar did (:class:`Upcoming`).
    Decided by the task's own rules, on a copy of its cursor: the task is not
    changed. A schedule whose cursor cannot be copied (no ``state``/``resume``)
    lists the current run only. O(n) decisions (each as :meth:`CalendarCursor.next`)."""
    found = []
    if current is not None:
        slot, at = current
        moved = isinstance(schedule, Calendared) and slot != at
        found.append(Upcoming(slot, at, schedule.calendar.excluded_by(slot) if moved else None))  # type: ignore[attr-defined]
    state = getattr(cursor, "state", None)
    resume = getattr(schedule, "resume", None)
    if isinstance(cursor, CalendarCursor) and cursor._mark is not None and current is not None:
        again = cursor.owner.resume(cursor._mark)  # the current run decided again
        listed = _decided(again, n, current)
        if listed is not None:
            return listed
    if len(found) >= n or cursor is None or not callable(state) or not callable(resume):
        return found[:n]
    copy = resume(state())
    if not isinstance(copy, CalendarCursor):
        while len(found) < n:
            nxt = copy.next(0)
            if nxt is None:
                break
            found.append(Upcoming(nxt, nxt, None))
        return found
    return found + (_decided(copy, n - len(found)) or [])


def _decided(
    cursor: CalendarCursor, n: int, current: tuple[Time, Time] | None = None
) -> list[Upcoming] | None:
    """The next ``n`` slots a calendared cursor decides, read from its log; ``None``
    if ``current`` is given and is not the first run it decides."""
    log: list[Any] = []
    cursor._log = log
    calendar, skip = cursor.owner.calendar, cursor.owner.on_excluded == "skip"
    for item in cursor._stack:  # taken before: decided, not final
        log.append(("slot", item[0], item[3]))
    slots: list[tuple[Time, str | None]] = []
    events: list[tuple[Time, Time | None]] = []  # (key slot, its run's time or None)
    read = calls = 0
    ended = False
    while not (len(slots) >= n and (ended or (events and events[-1][0] >= slots[n - 1][0]))):
        if read == len(log):
            if ended or calls > n + 8:  # each call decides at least one slot of a run
                break
            ended = cursor.next(0) is None
            calls += 1
            continue
        note = log[read]
        read += 1
        kind = note[0]
        if kind == "slot":
            slots.append((note[1], note[2]))
        elif kind == "stretch":
            _, first, why, count, before = note
            slots.append((first, why))
            for _ in range(min(count, n + 1) - 1):
                if before is None:
                    break
                nxt = before.next(0)
                if nxt is None:
                    break
                slots.append((nxt, calendar.excluded_by(nxt)))
        elif kind == "run":
            events.append((note[1][0], note[1][1]))
            if current is not None and len(events) == 1 and events[0] != current:
                return None
        else:  # drop
            events.append((note[1][0], None))
    found = []
    for slot, why in slots[:n]:
        if why is not None and skip:
            found.append(Upcoming(slot, None, why))
            continue
        run = next((event for event in events if event[0] >= slot), None)
        found.append(Upcoming(slot, None if run is None else run[1], why))
    return found


def calendared(when: Schedule, calendar: object, on_excluded: object) -> Schedule:
    """``when`` under ``calendar`` (a :class:`Calendared`), or ``when`` itself for no
    calendar: what ``schedule(..., calendar=, on_excluded=)`` runs a task on. Raises
    what :class:`Calendared` raises, and ``ValueError`` for an ``on_excluded`` other
    than ``"skip"`` without a calendar. O(1)."""
    if calendar is None:
        if on_excluded != "skip":
            raise ValueError(f"on_excluded={on_excluded!r} needs a calendar= to apply to")
        return when
    if not isinstance(on_excluded, str):
        raise TypeError(f"on_excluded must be a str, got {on_excluded!r}")
    return Calendared(when, calendar, on_excluded)


def recalendared(options: dict[str, Any], schedule: object) -> Schedule | None:
    """The schedule a task on ``schedule`` takes from ``update(calendar=...,
    on_excluded=...)`` (``options``), checked first; ``None`` for no task (finished or
    unknown: no schedule). Raises what :func:`calendared` raises, and ``TypeError``
    for an ``on_excluded`` without ``calendar``. O(1)."""
    if "calendar" not in options:
        raise TypeError(
            f"update(on_excluded={options['on_excluded']!r}) needs calendar= too "
            "(the calendar it applies to; calendar=None to take it away)"
        )
    from rota.schedules import FixedRate

    given = (options["calendar"], options.get("on_excluded", "skip"))
    if schedule is None:
        calendared(FixedRate(1), *given)
        return None
    return calendared(plain(schedule), *given)  # type: ignore[arg-type]


def kept_calendar(when: Schedule, current: object) -> Schedule:
    """``when`` under the calendar of a task's ``current`` schedule, as ``reschedule``
    keeps it: ``when`` itself if it has a calendar of its own, if ``current`` has
    none, or if it is a one-off and that calendar skips. O(1)."""
    from rota.schedules import Once

    if isinstance(when, Calendared) or not isinstance(current, Calendared):
        return when
    if isinstance(when, Once) and current.on_excluded == "skip":
        return when
    return Calendared(when, current.calendar, current.on_excluded)


def plain(when: object) -> object:
    """The schedule under a calendar (``when`` itself if it has none). O(1)."""
    return when.schedule if isinstance(when, Calendared) else when


def calendar_spec(when: object) -> dict[str, Any] | None:
    """A task's calendar as its stored spec keeps it (beside its schedule's): ``None``
    for none. O(calendar)."""
    if not isinstance(when, Calendared):
        return None
    return {"calendar": when.calendar.to_json(), "on_excluded": when.on_excluded}


def recalendar(plan: Any, when: Schedule) -> None:
    """Put ``plan``'s task on ``when`` (its schedule under another calendar, or under
    none), from where its cursor is: the slots its cursor took and did not run yet
    are decided again under the new calendar. O(slots held)."""
    cursor = plan.cursor
    held: list[Time] = []
    if isinstance(cursor, CalendarCursor):
        held = [item[0] for item in cursor._stack] + cursor._ahead
        cursor = cursor._inner
    plan.schedule = when
    if cursor is None:  # a one-off: its run is the one held
        if not isinstance(when, Calendared):
            return
        cursor = when.schedule.resume(None)  # type: ignore[attr-defined]
    if isinstance(when, Calendared):
        plan.cursor = CalendarCursor(when, cursor, {"ahead": held})
        return
    plan.cursor = cursor
    if held:  # runs now, before the cursor's next
        plan.backlog = deque([*(plan.backlog or ()), *held])
