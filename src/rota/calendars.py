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
"""

from __future__ import annotations

from collections.abc import Iterable
from datetime import UTC, date, datetime, time, timedelta
from typing import Any
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

DAY = timedelta(days=1)
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
        zone = _zone(tz)
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
        ``country`` (and ``subdiv``), plus ``holidays``. Each year is computed when a
        date of it is first asked about, and kept. Needs the extra ``rota[holidays]``
        (``ImportError`` naming it otherwise); ``ValueError`` for a country or
        subdivision the package does not know."""
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
            return self._local(day).date()
        if isinstance(day, date):
            return day
        raise TypeError(f"day must be a datetime.date, got {day!r}")

    # -- instants ----------------------------------------------------------------

    def allows(self, when: datetime | float) -> bool:
        """Whether the instant ``when`` (an aware datetime, a naive one read in the
        calendar's zone, or epoch seconds) falls on a business day and outside every
        window and period. Raises ``TypeError`` for anything else. O(windows)."""
        local = self._local(when)
        return self.is_business_day(local.date()) and self.window_at(local) is None

    def window_at(self, when: datetime | float) -> Window | None:
        """The window or period of this calendar that ``when`` falls in, else
        ``None``. O(windows)."""
        local = self._local(when)
        instant = local.astimezone(UTC)
        for window in self._daily:
            if self._in_daily(window, local.date(), instant):
                return window
        periods = iter(self._periods)
        for window in self.exclude:
            if window.daily:
                continue
            start, end = next(periods)
            if start <= instant < end:
                return window
        return None

    def _in_daily(self, window: Window, day: date, instant: datetime) -> bool:
        """Whether ``instant`` (on local ``day``) is in a daily window that starts on
        ``day`` or, crossing midnight, on the day before."""
        start, end = window.start, window.end
        assert isinstance(start, time)
        assert isinstance(end, time)
        crosses = end <= start
        for anchor in (day - DAY, day) if crosses else (day,):
            opens = self.at(anchor, start)
            closes = self.at(anchor + DAY if crosses else anchor, end)
            if opens <= instant < closes:
                return True
        return False

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

    def _local(self, when: object) -> datetime:
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


def _zone(tz: object) -> ZoneInfo:
    if not isinstance(tz, str):
        raise TypeError(f"tz must be an IANA zone name (str), got {tz!r}")
    try:
        return ZoneInfo(tz)
    except (ZoneInfoNotFoundError, ValueError):
        raise ValueError(f"tz {tz!r} is not a known IANA time zone") from None


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
        where = f"country {country!r}" + ("" if subdiv is None else f" subdivision {subdiv!r}")
        raise ValueError(f"the holidays package knows no {where}") from None
