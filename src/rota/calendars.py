"""Business calendars: which days are business days, and which stretches of time are
excluded (daily windows, periods), in one IANA time zone.

A :class:`Calendar` is an immutable value: equal when built from equal arguments,
hashable, and stored as data (:meth:`Calendar.to_json`, :meth:`Calendar.from_json`),
never as code. ``Calendar.from_holidays`` takes its holidays from the ``holidays``
package (extra ``rota[holidays]``), computing each year when it is first asked
about, never fetching anything.

Windows are half-open, ``[start, end)``. A daily window's edge that falls in a DST
gap is taken at the gap's end, and in a repeated hour at its first occurrence
(cron's rule).

Two schedules use them: :class:`AnyOf` (several schedules of one task) and
:class:`BusinessDay` (the n-th business day of each month at a local time).
"""

from __future__ import annotations

from collections.abc import Iterable
from datetime import UTC, date, datetime, time, timedelta
from typing import Any
from zoneinfo import ZoneInfo

from rota._core import validate as _validate
from rota._core.moves import ON_EXCLUDED, Calendared, Upcoming
from rota._core.policy import Cursor, Schedule
from rota._core.types import Time
from rota.schedules import FixedDelay

DAY = timedelta(days=1)
_MOVES = 100_000
"""The most days and windows one move crosses before the calendar is taken to allow
nothing near (a guard: a valid calendar allows part of every business day)."""
WEEKDAYS = ("mon", "tue", "wed", "thu", "fri", "sat", "sun")
"""Weekday names as job files spell them, Monday (0) first."""


class Window:
    """A stretch a calendar excludes, half-open ``[start, end)``: two times of day
    (every day; it crosses midnight when ``end`` is earlier than ``start``), or two
    dates or datetimes (one period; a date is its midnight, a naive datetime is read
    in the calendar's zone).

    Raises ``TypeError`` for anything else or for a mix of the two kinds (or a time
    of day with a zone), ``ValueError`` for an empty window (``start == end``) or a
    period that ends before it starts. O(1).
    """

    __slots__ = ("end", "start")

    start: time | datetime
    end: time | datetime

    def __init__(self, start: time | date | datetime, end: time | date | datetime) -> None:
        kinds = (_kind(start, "start"), _kind(end, "end"))
        if kinds[0] != kinds[1]:
            raise TypeError(
                f"a window is two times of day or two dates/datetimes, got {start!r} and {end!r}"
            )
        first, last = _normal(start), _normal(end)
        if isinstance(first, time) and (first.tzinfo is not None or last.tzinfo is not None):
            raise TypeError(
                f"a daily window's times are read in the calendar's zone: give naive "
                f"times, got {start!r} and {end!r}"
            )
        if first == last:
            raise ValueError(f"a window must not be empty, got Window({start!r}, {end!r})")
        if isinstance(first, datetime) and _instant_key(last) < _instant_key(first):
            raise ValueError(f"a period must end after it starts, got {start!r} to {end!r}")
        object.__setattr__(self, "start", first)
        object.__setattr__(self, "end", last)

    def __setattr__(self, name: str, value: object) -> None:
        raise AttributeError("a Window is immutable")

    @property
    def daily(self) -> bool:
        """Whether this window recurs every day (two times of day)."""
        return isinstance(self.start, time) and not isinstance(self.start, datetime)

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Window) and (self.start, self.end) == (other.start, other.end)

    def __hash__(self) -> int:
        return hash((self.start, self.end))

    def __repr__(self) -> str:
        return f"Window({self.start!r}, {self.end!r})"

    def to_json(self) -> list[str]:
        """``[start, end]`` as ISO text (``"22:00:00"``, ``"2026-12-20T00:00:00"``)."""
        return [self.start.isoformat(), self.end.isoformat()]

    @classmethod
    def from_json(cls, value: list[str]) -> Window:
        """The window :meth:`to_json` wrote. Raises ``ValueError`` for bad text."""
        start, end = value
        if "T" in start or "-" in start:
            return cls(datetime.fromisoformat(start), datetime.fromisoformat(end))
        return cls(time.fromisoformat(start), time.fromisoformat(end))


def _kind(value: object, name: str) -> str:
    if isinstance(value, datetime | date):
        return "period"
    if isinstance(value, time):
        return "daily"
    raise TypeError(
        f"window {name} must be a datetime.time (daily) or a date/datetime (a period), "
        f"got {value!r}"
    )


def _normal(value: time | date | datetime) -> time | datetime:
    if isinstance(value, datetime | time):
        return value
    return datetime(value.year, value.month, value.day)


def _instant_key(value: time | datetime) -> datetime:
    """A period's edge comparable with another (naive ones as if UTC: both edges of a
    period are read in one zone)."""
    assert isinstance(value, datetime)
    return value if value.tzinfo is not None else value.replace(tzinfo=UTC)


class Calendar:
    """Business days and excluded stretches, in the zone ``tz`` (an IANA name).

    ``weekends``: the weekdays that are never business days (Monday 0 ... Sunday 6;
    default Saturday and Sunday; ``()`` for none); ``holidays``: dates that are not
    business days; ``exclude``: :class:`Window` values (daily windows and periods).
    A calendar is an immutable value, equal to another built from equal arguments.

    Raises ``TypeError`` for arguments of the wrong type; ``ValueError`` for an
    empty name, an unknown zone, a weekday outside 0-6, every weekday a weekend, or
    daily windows that together cover the whole day. Nothing is built when it
    raises. O(holidays + windows).
    """

    __slots__ = ("_daily", "_key", "_observed", "_periods", "_zone", "exclude",
                 "holidays", "name", "source", "tz", "weekends")  # fmt: skip

    name: str
    tz: str
    weekends: tuple[int, ...]
    holidays: frozenset[date]
    exclude: tuple[Window, ...]
    source: tuple[str, str | None] | None
    _zone: ZoneInfo
    _observed: Any  # the holidays package's calendar, or None
    _daily: tuple[Window, ...]
    _periods: tuple[tuple[datetime, datetime], ...]
    _key: tuple[Any, ...]

    def __init__(
        self,
        name: str,
        *,
        tz: str = "UTC",
        weekends: Iterable[int] = (5, 6),
        holidays: Iterable[date] = (),
        exclude: Iterable[Window] = (),
    ) -> None:
        self._setup(name, tz, weekends, holidays, exclude, None)

    def _setup(
        self,
        name: str,
        tz: str,
        weekends: Iterable[int],
        holidays: Iterable[date],
        exclude: Iterable[Window],
        source: tuple[str, str | None] | None,
    ) -> None:
        if not isinstance(name, str):
            raise TypeError(f"name must be a str, got {name!r}")
        if not name:
            raise ValueError("name must not be empty")
        zone = _validate.zone("tz", tz)
        days = _weekends(weekends)
        dates = frozenset(_holiday(d) for d in _iterable("holidays", holidays))
        windows = tuple(_iterable("exclude", exclude))
        for window in windows:
            if not isinstance(window, Window):
                raise TypeError(f"exclude must hold rota.calendars.Window values, got {window!r}")
        daily = tuple(w for w in windows if w.daily)
        _check_day_open(daily)
        observed = None if source is None else _observed(*source)
        fields: dict[str, Any] = {
            "name": name, "tz": tz, "weekends": days, "holidays": dates, "exclude": windows,
            "source": source, "_zone": zone, "_observed": observed, "_daily": daily,
            "_periods": tuple(
                (_aware(w.start, zone), _aware(w.end, zone)) for w in windows if not w.daily
            ),
            "_key": (name, tz, days, dates, windows, source),
        }  # fmt: skip
        for key, value in fields.items():
            object.__setattr__(self, key, value)

    @classmethod
    def from_holidays(
        cls,
        name: str,
        country: str,
        subdiv: str | None = None,
        *,
        tz: str = "UTC",
        weekends: Iterable[int] = (5, 6),
        holidays: Iterable[date] = (),
        exclude: Iterable[Window] = (),
    ) -> Calendar:
        """A calendar whose holidays are those the ``holidays`` package gives for
        ``country`` (and ``subdiv``), or for the exchange ``country`` names
        (``"NYSE"``, ``"XLON"``: its financial holidays), plus ``holidays``. Each
        year is computed when a date of it is first asked about, and kept. Needs the
        extra ``rota[holidays]`` (``ImportError`` naming it otherwise);
        ``ValueError`` for a country, subdivision or market the package does not
        know."""
        calendar = cls.__new__(cls)
        calendar._setup(name, tz, weekends, holidays, exclude, (country, subdiv))
        return calendar

    def __setattr__(self, name: str, value: object) -> None:
        raise AttributeError("a Calendar is immutable")

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Calendar) and self._key == other._key

    def __hash__(self) -> int:
        return hash(self._key)

    def __repr__(self) -> str:
        source = "" if self.source is None else f", source={self.source!r}"
        return (
            f"Calendar({self.name!r}, tz={self.tz!r}, weekends={self.weekends!r}, "
            f"holidays={len(self.holidays)} dates{source}, exclude={list(self.exclude)!r})"
        )

    # -- days ------------------------------------------------------------------

    def is_business_day(self, day: date) -> bool:
        """Whether ``day`` is a business day: not a weekend, not a holiday (a datetime
        is taken as the date it falls on in the calendar's zone). Raises ``TypeError``
        for anything but a date or datetime. O(1)."""
        day = self._day(day)
        if day.weekday() in self.weekends or day in self.holidays:
            return False
        return self._observed is None or day not in self._observed

    def next_business_day(self, day: date) -> date:
        """The first business day after ``day``. O(days skipped)."""
        day = self._day(day) + DAY
        while not self.is_business_day(day):
            day += DAY
        return day

    def previous_business_day(self, day: date) -> date:
        """The last business day before ``day``. O(days skipped)."""
        day = self._day(day) - DAY
        while not self.is_business_day(day):
            day -= DAY
        return day

    def _day(self, day: object) -> date:
        if isinstance(day, datetime):
            return self.local(day).date()
        if isinstance(day, date):
            return day
        raise TypeError(f"day must be a datetime.date, got {day!r}")

    # -- instants ----------------------------------------------------------------

    def allows(self, when: datetime | float) -> bool:
        """Whether the instant ``when`` (an aware datetime, a naive one read in the
        calendar's zone, or epoch seconds) falls on a business day and outside every
        window and period. Raises ``TypeError`` for anything else. O(windows)."""
        local = self.local(when)
        return self.is_business_day(local.date()) and self.window_at(local) is None

    def window_at(self, when: datetime | float) -> Window | None:
        """The window or period of this calendar that ``when`` falls in, else
        ``None``. O(windows)."""
        found = self._span(self.local(when))
        return None if found is None else found[0]

    def _span(
        self, local: datetime, *, after_start: bool = False
    ) -> tuple[Window, datetime, datetime] | None:
        """The window or period ``local`` falls in, with that instance's edges (UTC);
        ``after_start``: only one it is strictly after the start of (a run moved back
        to a window's start is allowed there). A daily window crossing midnight is
        looked for from the day before too."""
        instant = local.astimezone(UTC)
        day = local.date()
        for window in self._daily:
            start, end = window.start, window.end
            assert isinstance(start, time)
            assert isinstance(end, time)
            crosses = end <= start
            for anchor in (day - DAY, day) if crosses else (day,):
                opens = self.at(anchor, start)
                closes = self.at(anchor + DAY if crosses else anchor, end)
                if (opens < instant if after_start else opens <= instant) and instant < closes:
                    return window, opens, closes
        periods = iter(self._periods)
        for window in self.exclude:
            if window.daily:
                continue
            opens, closes = next(periods)
            if (opens < instant if after_start else opens <= instant) and instant < closes:
                return window, opens, closes
        return None

    def excluded_by(self, when: datetime | float) -> str | None:
        """Why the instant ``when`` is excluded: ``"weekend"``, ``"holiday"`` (by its
        local date), ``"window"`` (a daily window or a period), or ``None`` when the
        calendar allows it. Raises ``TypeError`` as :meth:`local`. O(windows)."""
        local = self.local(when)
        day = local.date()
        if day.weekday() in self.weekends:
            return "weekend"
        if not self.is_business_day(day):
            return "holiday"
        return None if self._span(local) is None else "window"

    def open_from(self, when: float) -> float:
        """The first instant at or after epoch ``when`` that the calendar allows: the
        end of the excluded stretch ``when`` is in, or ``when`` itself. Raises
        ``ValueError`` past a guard of 100,000 days and windows. O(days and windows
        crossed)."""
        for _ in range(_MOVES):
            local = self.local(when)
            day = local.date()
            if not self.is_business_day(day):
                when = self.at(self.next_business_day(day), time(0)).timestamp()
                continue
            span = self._span(local)
            if span is None:
                return when
            when = span[2].timestamp()
        raise ValueError(f"calendar {self.name!r} allows no instant near {when!r}")

    def moved(self, when: float, on_excluded: str) -> float:
        """Where a run excluded at epoch ``when`` goes, for ``on_excluded`` ``"next"``
        or ``"previous"``: excluded by its day, to the same local time on the next
        (previous) business day; by a window or period, to its end (its start, which
        counts as allowed for a run moved there); again until allowed. ``when``
        itself if allowed. Raises ``ValueError`` as :meth:`open_from`. O(days and
        windows crossed)."""
        back = on_excluded == "previous"
        for _ in range(_MOVES):
            local = self.local(when)
            day = local.date()
            if not self.is_business_day(day):
                other = self.previous_business_day(day) if back else self.next_business_day(day)
                when = self.at(other, local.time()).timestamp()
                continue
            span = self._span(local, after_start=back)
            if span is None:
                return when
            when = (span[1] if back else span[2]).timestamp()
        raise ValueError(f"calendar {self.name!r} allows no instant near {when!r}")

    def open_days(self, start: float, end: float) -> bool:
        """Whether every local date from epoch ``start``'s to ``end``'s is a business
        day. O(days)."""
        day, last = self.local(start).date(), self.local(end).date()
        while day <= last:
            if not self.is_business_day(day):
                return False
            day += DAY
        return True

    def at(self, day: date, wall: time) -> datetime:
        """The instant (UTC) of the local time ``wall`` on ``day``: in a DST gap, the
        gap's end; in a repeated hour, its first occurrence. O(1)."""
        first = datetime.combine(day, wall, tzinfo=self._zone)  # fold 0: the first
        instant = first.astimezone(UTC)
        if instant.astimezone(self._zone).replace(tzinfo=None) == first.replace(tzinfo=None):
            return instant
        # In a gap: the instant the clocks jumped, between the two readings of the wall
        low = first.replace(fold=1).astimezone(UTC)
        high = instant
        low, high = min(low, high), max(low, high)
        while high - low > timedelta(seconds=1):
            middle = low + (high - low) / 2
            if middle.astimezone(self._zone).replace(tzinfo=None).time() >= wall:
                high = middle
            else:
                low = middle
        return high.replace(microsecond=0) if high.microsecond else high

    def local(self, when: object) -> datetime:
        """``when`` (an aware or naive datetime, or epoch seconds) as a datetime in the
        calendar's zone. Raises ``TypeError`` for anything else. O(1)."""
        if isinstance(when, datetime):
            if when.tzinfo is None:
                return when.replace(tzinfo=self._zone)
            return when.astimezone(self._zone)
        if isinstance(when, int | float) and not isinstance(when, bool):
            return datetime.fromtimestamp(when, self._zone)
        raise TypeError(f"when must be a datetime or epoch seconds, got {when!r}")

    # -- as data -------------------------------------------------------------------

    def to_json(self) -> dict[str, Any]:
        """This calendar as JSON-compatible data (see :meth:`from_json`). O(size)."""
        return {
            "name": self.name,
            "tz": self.tz,
            "weekends": list(self.weekends),
            "holidays": sorted(d.isoformat() for d in self.holidays),
            "exclude": [w.to_json() for w in self.exclude],
            "source": None if self.source is None else list(self.source),
        }

    @classmethod
    def from_json(cls, value: dict[str, Any]) -> Calendar:
        """The calendar :meth:`to_json` wrote (equal to it). Raises what building it
        raises."""
        args: dict[str, Any] = {
            "tz": value["tz"],
            "weekends": value["weekends"],
            "holidays": [date.fromisoformat(d) for d in value["holidays"]],
            "exclude": [Window.from_json(w) for w in value["exclude"]],
        }
        source = value.get("source")
        if source is not None:
            return cls.from_holidays(value["name"], source[0], source[1], **args)
        return cls(value["name"], **args)


def _iterable(name: str, value: object) -> Iterable[Any]:
    if isinstance(value, str | bytes) or not isinstance(value, Iterable):
        raise TypeError(f"{name} must be a list, tuple or set, got {value!r}")
    return value


def _weekends(weekends: object) -> tuple[int, ...]:
    days = []
    for day in _iterable("weekends", weekends):
        if not isinstance(day, int) or isinstance(day, bool):
            raise TypeError(f"weekends must hold weekday numbers (Monday 0), got {day!r}")
        if not 0 <= day <= 6:
            raise ValueError(f"weekends must hold weekdays 0 (Monday) to 6, got {day!r}")
        days.append(day)
    found = tuple(sorted(set(days)))
    if len(found) == 7:
        raise ValueError("weekends must leave a business day in the week, got all seven")
    return found


def _holiday(day: object) -> date:
    if isinstance(day, datetime) or not isinstance(day, date):
        raise TypeError(f"holidays must hold datetime.date values, got {day!r}")
    return day


def _check_day_open(daily: tuple[Window, ...]) -> None:
    """``ValueError`` if daily windows together cover the whole day."""
    spans: list[tuple[int, int]] = []
    for window in daily:
        start, end = (_seconds(t) for t in (window.start, window.end))
        if start < end:
            spans.append((start, end))
        else:
            spans += [(start, 86_400), (0, end)]
    reach = 0
    for start, end in sorted(spans):
        if start > reach:
            return
        reach = max(reach, end)
    if reach >= 86_400:
        raise ValueError(
            f"daily windows {list(daily)!r} cover the whole day: no time is left to run"
        )


def _seconds(value: object) -> int:
    assert isinstance(value, time)
    return value.hour * 3600 + value.minute * 60 + value.second


def _aware(value: time | datetime, zone: ZoneInfo) -> datetime:
    assert isinstance(value, datetime)
    aware = value if value.tzinfo is not None else value.replace(tzinfo=zone)
    return aware.astimezone(UTC)


def _observed(country: object, subdiv: object) -> Any:
    """The ``holidays`` package's calendar of ``country``/``subdiv`` (years computed
    when first asked about)."""
    if not isinstance(country, str) or not (subdiv is None or isinstance(subdiv, str)):
        raise TypeError(f"country and subdiv must be str, got {country!r} and {subdiv!r}")
    try:
        import holidays
    except ImportError as exc:  # pragma: no cover - exercised only without the extra
        raise ImportError(
            "rota.calendars.Calendar.from_holidays needs the holidays extra: "
            "pip install 'rota[holidays]'"
        ) from exc
    try:
        return holidays.country_holidays(country, subdiv=subdiv)
    except NotImplementedError:
        if subdiv is None and country in holidays.list_supported_financial():
            return holidays.financial_holidays(country)  # an exchange: "NYSE", "XLON"
        where = f"country {country!r}" + ("" if subdiv is None else f" subdivision {subdiv!r}")
        raise ValueError(f"the holidays package knows no {where} (nor market)") from None


# -- schedules -------------------------------------------------------------------


class AnyOf:
    """The union of several schedules of one task (cron, fixed rate, once, your own):
    every time any of them gives, in order; a time given by several is one slot.
    ``AnyOf(Cron("0 9 * * 1-5", tz=...), Cron("0 12 * * 6", tz=...))``.

    Raises ``TypeError`` for a member that is not a schedule, ``ValueError`` for none
    or a ``FixedDelay`` (its runs wait for the previous run's end: a union has no such
    run). O(members) per slot, plus what the members' cursors cost.
    """

    __slots__ = ("epoch", "schedules")

    schedules: tuple[Schedule, ...]
    epoch: bool

    def __init__(self, *schedules: Schedule) -> None:
        if not schedules:
            raise ValueError("AnyOf needs at least one schedule")
        for member in schedules:
            if not callable(getattr(member, "start", None)):
                raise TypeError(f"AnyOf takes schedules (with start()), got {member!r}")
            if isinstance(member, FixedDelay):
                raise ValueError(
                    f"AnyOf cannot take {member!r}: each of its runs waits for the "
                    "previous one to end"
                )
        object.__setattr__(self, "schedules", tuple(schedules))
        object.__setattr__(self, "epoch", any(getattr(m, "epoch", False) for m in schedules))

    def __setattr__(self, name: str, value: object) -> None:
        raise AttributeError("an AnyOf is immutable")

    def __repr__(self) -> str:
        return f"AnyOf({', '.join(repr(m) for m in self.schedules)})"

    def start(self, now: Time) -> Cursor:
        """A cursor over the union of the members' times for a task scheduled at
        ``now``."""
        return _AnyCursor([m.start(now) for m in self.schedules], None)

    def spec(self) -> dict[str, object]:
        """This schedule as JSON-compatible data: its members' specs. Raises
        ``TypeError`` for a member a store cannot keep (no ``spec()``)."""
        specs = []
        for member in self.schedules:
            spec = getattr(member, "spec", None)
            if not callable(spec):
                raise TypeError(f"AnyOf member {member!r} has no spec(): a store cannot keep it")
            specs.append(spec())
        return {"kind": "any_of", "schedules": specs}

    def resume(self, state: object) -> Cursor:
        """A cursor at the position ``state`` (a cursor's ``state()``) describes."""
        if not (isinstance(state, list) and len(state) == len(self.schedules)):
            raise ValueError(f"state must hold one entry per member, got {state!r}")
        cursors = [m.resume(s[0]) for m, s in zip(self.schedules, state, strict=True)]  # type: ignore[attr-defined]
        return _AnyCursor(cursors, [(s[1], s[2]) for s in state])


class _AnyCursor:
    """Each member's cursor and the time it gave that is still to run (``None``: ask
    it again), or that it has ended."""

    __slots__ = ("_cursors", "_ended", "_pending")

    def __init__(self, cursors: list[Cursor], pending: list[tuple[Any, bool]] | None) -> None:
        self._cursors = cursors
        self._pending: list[Time | None] = [None] * len(cursors)
        self._ended = [False] * len(cursors)
        if pending is not None:
            for i, (at, ended) in enumerate(pending):
                self._pending[i], self._ended[i] = at, ended

    def next(self, now: Time) -> Time | None:
        for i, cursor in enumerate(self._cursors):
            if self._pending[i] is None and not self._ended[i]:
                at = cursor.next(now)
                self._pending[i] = at
                self._ended[i] = at is None
        times = [at for at in self._pending if at is not None]
        if not times:
            return None
        first = min(times)
        for i, at in enumerate(self._pending):
            if at is not None and at <= first:  # the same slot from several: one run
                self._pending[i] = None
        return first

    def state(self) -> list[list[Any]]:
        """Where this cursor is: per member, its cursor's state, the time it gave that
        is still to run, and whether it ended."""
        return [
            [cursor.state(), at, ended]  # type: ignore[attr-defined]
            for cursor, at, ended in zip(self._cursors, self._pending, self._ended, strict=True)
        ]


MONTHS = 1200
"""How many months ahead a :class:`BusinessDay` looks for its next slot (a hundred
years) before it ends."""


class BusinessDay:
    """The ``n``-th business day of ``calendar`` each month, at the local time ``at``
    (in the calendar's zone; in a DST gap at the gap's end, in a repeated hour at its
    first occurrence); ``n=-1`` the last business day, ``-2`` the one before. A month
    with fewer business days than ``abs(n)`` has no slot (nothing is skipped).

    Raises ``TypeError`` for an ``n`` that is not an int, an ``at`` that is not a
    naive ``datetime.time`` or a ``calendar`` that is not a :class:`Calendar`;
    ``ValueError`` for ``n == 0`` or ``abs(n) > 23``. O(days of the months crossed)
    per slot.
    """

    __slots__ = ("at", "calendar", "n")

    n: int
    at: time
    calendar: Calendar
    epoch = True
    """Slots are wall-clock instants: a scheduler on a monotonic clock refuses it."""

    def __init__(self, n: int, at: time = time(9, 0), calendar: Calendar | None = None) -> None:
        if not isinstance(n, int) or isinstance(n, bool):
            raise TypeError(f"n must be an int, got {n!r}")
        if n == 0 or abs(n) > 23:
            raise ValueError(f"n must be 1 to 23 or -1 to -23, got {n!r}")
        if not isinstance(at, time) or at.tzinfo is not None:
            raise TypeError(f"at must be a naive datetime.time (the calendar's zone), got {at!r}")
        if not isinstance(calendar, Calendar):
            raise TypeError(f"calendar must be a rota.calendars.Calendar, got {calendar!r}")
        object.__setattr__(self, "n", n)
        object.__setattr__(self, "at", at)
        object.__setattr__(self, "calendar", calendar)

    def __setattr__(self, name: str, value: object) -> None:
        raise AttributeError("a BusinessDay is immutable")

    def __repr__(self) -> str:
        return f"BusinessDay({self.n!r}, at={self.at!r}, calendar={self.calendar.name!r})"

    def day_in(self, year: int, month: int) -> date | None:
        """The month's ``n``-th business day, ``None`` if it has fewer. O(days)."""
        first = date(year, month, 1)
        days = []
        day = first
        while day.month == month:
            if self.calendar.is_business_day(day):
                days.append(day)
            day += DAY
        index = self.n - 1 if self.n > 0 else self.n
        return days[index] if -len(days) <= index < len(days) else None

    def next_after(self, t: Time) -> Time | None:
        """The first slot strictly after epoch time ``t``, ``None`` if none within
        :data:`MONTHS` months. O(days of the months crossed)."""
        local = self.calendar.local(t)
        year, month = local.year, local.month
        for _ in range(MONTHS):
            day = self.day_in(year, month)
            if day is not None:
                slot: Time = self.calendar.at(day, self.at).timestamp()
                if slot > t:
                    return slot
            year, month = (year + 1, 1) if month == 12 else (year, month + 1)
        return None

    def start(self, now: Time) -> Cursor:
        """A cursor over the slots after ``now`` (epoch seconds)."""
        return _BusinessCursor(self, now)

    def spec(self) -> dict[str, object]:
        """This schedule as JSON-compatible data, its calendar with it. O(calendar)."""
        return {"kind": "business_day", "n": self.n, "at": self.at.isoformat(),
                "calendar": self.calendar.to_json()}  # fmt: skip

    def resume(self, state: object) -> Cursor:
        """A cursor at the position ``state`` (its last slot) describes."""
        if not isinstance(state, int | float) or isinstance(state, bool):
            raise ValueError(f"state must be the last slot (epoch seconds), got {state!r}")
        return _BusinessCursor(self, state)


class _BusinessCursor:
    __slots__ = ("_last", "_schedule")

    def __init__(self, schedule: BusinessDay, last: Time) -> None:
        self._schedule = schedule
        self._last = last

    def next(self, now: Time) -> Time | None:
        slot = self._schedule.next_after(self._last)
        if slot is not None:
            self._last = slot
        return slot

    def state(self) -> Time:
        """Where this cursor is: the last slot it gave (or the scheduling time)."""
        return self._last


__all__ = [
    "DAY", "ON_EXCLUDED", "WEEKDAYS", "AnyOf", "BusinessDay", "Calendar", "Calendared",
    "Upcoming", "Window",
]  # fmt: skip
