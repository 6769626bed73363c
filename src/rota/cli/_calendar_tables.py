"""A job file's business calendars: its ``[calendars.NAME]`` tables, the calendar a job
names, a ``business_day`` schedule, and a job's slots under its calendar
(``calendar``, ``on_excluded``). Every error names the file, the calendar or job,
and the key (:class:`JobFileError`)."""

from __future__ import annotations

from collections.abc import Callable
from datetime import date, datetime, time
from pathlib import Path
from typing import Any

from rota._core.policy import Schedule
from rota.calendars import ON_EXCLUDED, WEEKDAYS, BusinessDay, Calendar, Calendared, Window

from ._values import JobFileError, iso

CALENDAR_KEYS = frozenset({"tz", "holidays", "dates", "weekends", "exclude"})


def calendar_of(
    raw: dict[str, Any], calendars: dict[str, Calendar], key: Callable[[str], str]
) -> Calendar | None:
    """The calendar a job names (``calendar``), ``None`` if none."""
    if "calendar" not in raw:
        return None
    name = raw["calendar"]
    if name not in calendars:
        declared = ", ".join(sorted(calendars)) or "none"
        raise JobFileError(
            f"{key('calendar')}: {name!r} is not a [calendars.NAME] of this file (it "
            f"declares: {declared})"
        )
    return calendars[name]


def business_day(raw: dict[str, Any], calendar: Calendar, key: Callable[[str], str]) -> Schedule:
    """``business_day = n`` with ``at = "HH:MM"`` (default 09:00), on ``calendar``."""
    n = raw["business_day"]
    at: time = iso(raw.get("at", "09:00"), key("at"), time)
    try:
        return BusinessDay(n, at, calendar)
    except (TypeError, ValueError) as exc:
        raise JobFileError(f"{key('business_day')}: {exc}") from None


def calendar_tables(table: object, path: Path) -> dict[str, Calendar]:
    """The ``[calendars.NAME]`` tables of a job file, each a :class:`Calendar`."""
    if not isinstance(table, dict):
        raise JobFileError(f"{path}: [calendars] must hold [calendars.NAME] tables")
    found = {}
    for name, raw in table.items():
        where = f"{path}: calendar {name!r}"
        if not isinstance(raw, dict):
            raise JobFileError(f"{where}: must be a table ([calendars.{name}])")
        unknown = set(raw) - CALENDAR_KEYS
        if unknown:
            raise JobFileError(f"{where}: unknown keys {sorted(unknown)}")
        found[name] = _calendar(name, raw, where)
    return found


def _calendar(name: str, raw: dict[str, Any], where: str) -> Calendar:
    def key(name: str) -> str:
        return f"{where}: key {name!r}"

    names = raw.get("weekends", ["sat", "sun"])
    if not isinstance(names, list) or not all(n in WEEKDAYS for n in names):
        raise JobFileError(f"{key('weekends')}: {names!r} is not a list of {list(WEEKDAYS)}")
    dates = raw.get("dates", [])
    if not isinstance(dates, list):
        raise JobFileError(f"{key('dates')}: {dates!r} is not a list of dates")
    days: list[date] = [iso(d, key("dates"), date) for d in dates]
    exclude = raw.get("exclude", [])
    if not isinstance(exclude, list):
        raise JobFileError(f"{key('exclude')}: {exclude!r} is not a list of [start, end] pairs")
    try:
        windows = [_window(pair) for pair in exclude]
    except (TypeError, ValueError) as exc:
        raise JobFileError(f"{key('exclude')}: {exc}") from None
    args: dict[str, Any] = {
        "tz": raw.get("tz", "UTC"),
        "weekends": [WEEKDAYS.index(n) for n in names],
        "holidays": days,
        "exclude": windows,
    }
    try:
        if "holidays" in raw:
            code = raw["holidays"]
            if not isinstance(code, str) or not code:
                raise JobFileError(f'{key("holidays")}: {code!r} is not a code like "US-NY"')
            country, _, subdiv = code.partition("-")
            try:
                return Calendar.from_holidays(name, country, subdiv or None, **args)
            except ImportError as exc:
                raise JobFileError(f"{key('holidays')}: {exc}") from None
            except ValueError as exc:
                if "holidays package" in str(exc):
                    raise JobFileError(f"{key('holidays')}: {exc}") from None
                raise
        return Calendar(name, **args)
    except (TypeError, ValueError) as exc:
        if isinstance(exc, JobFileError):
            raise
        raise JobFileError(f"{where}: {exc}") from None


def _window(pair: object) -> Window:
    """``["22:00", "06:00"]`` (every day) or ``["2026-12-20", "2027-01-04"]`` (a period;
    dates or ISO datetimes, read in the calendar's zone)."""
    if not (isinstance(pair, list) and len(pair) == 2 and all(isinstance(p, str) for p in pair)):
        raise TypeError(f"{pair!r} is not a [start, end] pair of strings")
    start, end = pair
    if ":" in start and "-" not in start:
        return Window(time.fromisoformat(start), time.fromisoformat(end))
    return Window(datetime.fromisoformat(start), datetime.fromisoformat(end))


def on_calendar(
    raw: dict[str, Any],
    kind: str,
    when: Schedule,
    calendar: Calendar | None,
    key: Callable[[str], str],
) -> Schedule:
    """A job's schedule ``when`` under the calendar it names (``on_excluded``: ``skip``
    by default, ``next`` for a one-off), or ``when`` itself for none; a calendar that
    allows none of its slots is refused now, not when it runs."""
    if calendar is None:
        if "on_excluded" in raw:
            raise JobFileError(f"{key('on_excluded')}: needs a 'calendar' to apply to")
        return when
    on_excluded = raw.get("on_excluded", "next" if kind == "at" else "skip")
    if on_excluded not in ON_EXCLUDED:
        raise JobFileError(
            f"{key('on_excluded')}: {on_excluded!r} is not one of {', '.join(ON_EXCLUDED)}"
        )
    try:
        calendared = Calendared(when, calendar, on_excluded)
    except ValueError as exc:
        raise JobFileError(f"{key('on_excluded')}: {exc}") from None
    try:
        calendared.start(datetime.now().timestamp()).next(0)
    except ValueError as exc:
        raise JobFileError(f"{key('calendar')}: {exc}") from None
    return calendared
