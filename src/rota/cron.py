"""Cron schedules in an IANA time zone (extra ``rota[cron]``).

``Cron("30 2 * * *", tz="Europe/Berlin")`` runs at 02:30 Berlin time every
day. Expressions are parsed and matched by `cronsim
<https://pypi.org/project/cronsim/>`_ (5 fields, or 6 with seconds first;
``L``, ``W``, ``#`` and names supported); this module only maps the local wall
times it yields to instants, with a defined rule for daylight saving time.

**Time.** A cron task runs on wall-clock epoch time: the scheduler's clock
must return POSIX seconds, as ``time.time`` does (``Scheduler(clock=time.time)``),
or a :class:`~rota.ManualClock` set to epoch seconds in tests. Run times
are whole seconds, returned as ints. A scheduler on ``time.monotonic`` (the
default) is not on epoch time: keep cron tasks on a scheduler of their own.

**Daylight saving time.** Each matching local time runs exactly once:

* a local time that does not exist (spring forward, e.g. 02:30 on the day
  clocks jump from 02:00 to 03:00) runs once at the end of the gap, the
  instant the clocks jump (03:00 new time); several matches inside one gap
  (``*/15 2 * * *``) are that one run;
* a local time that happens twice (fall back, e.g. 02:30 on the day clocks go
  from 03:00 back to 02:00) runs once, at its first occurrence (summer
  time). The repeated hour's times are not run again, so an hourly job has
  one two-hour gap that night.

**Missed runs.** Like every recurring task, a cron task catches up runs it
missed (e.g. while the machine slept) unless given a misfire policy;
``misfire=Misfire.COALESCE`` is what most cron users expect.

Cost: :meth:`Cron.next_after` is O(1) amortised (a few cronsim steps; a
bisection of at most ~20 steps on the rare transition day).
"""

from __future__ import annotations

import bisect
from datetime import date, datetime, time, timedelta, tzinfo
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

try:
    from cronsim import CronSim, CronSimError
except ImportError as exc:  # pragma: no cover - exercised only without the extra
    raise ImportError("rota.cron needs the cron extra: pip install 'rota[cron]'") from exc

from rota._core import validate as _validate
from rota._core.policy import Cursor
from rota._core.types import Time

_MAX_STEPS = 1000  # cronsim matches looked at for one next_after; a fold is skipped in one step
_SECOND = timedelta(seconds=1)
_DAY = timedelta(days=1)


def _local_date(t: Time, zone: tzinfo) -> date:
    return datetime.fromtimestamp(t, zone).date()


def _midnight(day: date, zone: tzinfo) -> int:
    """The epoch second of ``day``'s first local instant (00:00, or the end of a gap)."""
    wall = datetime.combine(day, time(0))
    first = int(wall.replace(tzinfo=zone).timestamp())
    seen = datetime.fromtimestamp(first, zone).replace(tzinfo=None)
    return first if seen >= wall else first + int((wall - seen).total_seconds())


def _offset(t: Time, zone: tzinfo) -> timedelta | None:
    return datetime.fromtimestamp(t, zone).utcoffset()


MACROS = {
    "@yearly": "0 0 1 1 *", "@annually": "0 0 1 1 *", "@monthly": "0 0 1 * *",
    "@weekly": "0 0 * * 0", "@daily": "0 0 * * *", "@midnight": "0 0 * * *",
    "@hourly": "0 * * * *",
}  # fmt: skip
"""Cron's (and supercronic's) shorthands, as the five fields they stand for."""


class Cron:
    """A cron expression evaluated in the IANA time zone ``tz`` (default ``"UTC"``).

    A :class:`~rota.schedules.Schedule`: pass it to
    :meth:`rota.Scheduler.schedule`. The first run is the first match
    after scheduling; each next run is the first match after the previous
    one (so missed runs are seen, and handled by the task's misfire policy).

    ``expression`` may be one of cron's shorthands (:data:`MACROS`: ``@hourly``,
    ``@daily``, ...), kept as the fields it stands for; ``@reboot`` is refused (a
    durable schedule has no reboot: run the command from the service manager).

    Raises ``TypeError`` for a non-str ``expression``, ``ValueError`` for an
    expression cronsim rejects or an unknown time zone.
    """

    __slots__ = ("_fields_of", "expression", "zone")

    epoch = True
    """Cron runs on wall-clock epoch time: a scheduler on a monotonic clock refuses it."""

    def __init__(self, expression: str, tz: str | tzinfo = "UTC") -> None:
        if not isinstance(expression, str):
            raise TypeError(f"expression must be a str, got {expression!r}")
        if expression.strip() == "@reboot":
            raise ValueError(
                "expression '@reboot' has no meaning for a durable schedule (it outlives "
                "reboots): start the command from the service manager (systemd, the "
                "container's entry point) instead"
            )
        expression = MACROS.get(expression.strip().lower(), expression)
        try:
            CronSim(expression, datetime(2000, 1, 1))
        except CronSimError as exc:
            raise ValueError(f"expression {expression!r} is not valid cron: {exc}") from None
        if isinstance(tz, str):
            try:
                zone: tzinfo = ZoneInfo(tz)
            except (ZoneInfoNotFoundError, ValueError):
                raise ValueError(f"tz must be an IANA time zone name, got {tz!r}") from None
        elif isinstance(tz, tzinfo):
            zone = tz
        else:
            raise TypeError(f"tz must be a zone name or a tzinfo, got {tz!r}")
        self.expression = expression
        self.zone = zone
        self._fields_of: tuple[CronSim, list[int]] | None = None

    def __repr__(self) -> str:
        return f"Cron({self.expression!r}, tz={str(self.zone)!r})"

    def start(self, now: Time) -> Cursor:
        """A cursor over the run times after ``now`` (epoch seconds)."""
        return _CronCursor(self, now)

    def spec(self) -> dict[str, object]:
        """This schedule as JSON-compatible data (a durable store keeps it). O(1).

        Raises ``ValueError`` for a zone that is not an IANA zone (a custom
        ``tzinfo`` cannot be stored by name).
        """
        key = getattr(self.zone, "key", None)
        if not isinstance(key, str):
            raise ValueError(
                f"{self!r}: only IANA zones (ZoneInfo) can be stored, not {self.zone!r}"
            )
        return {"kind": "cron", "expression": self.expression, "tz": key}

    def resume(self, state: object) -> Cursor:
        """A cursor at the position ``state`` (a cursor's ``state()``): its last run time."""
        return _CronCursor(self, _validate.finite("state", state))

    def next_after(self, t: Time) -> int:
        """The first run time strictly after epoch time ``t``, by the rules above.

        Raises ``TypeError`` for a ``t`` that is not a number, ``ValueError``
        for one that is not a finite epoch time within ``datetime``'s range,
        and ``ValueError`` when the expression has no match after ``t`` (it
        is valid but never matches, e.g. ``0 0 * 2 MON#5`` after 2044: cronsim
        looks 50 years ahead).
        """
        t = _validate.finite("t", t)
        try:
            local = datetime.fromtimestamp(t, self.zone).replace(tzinfo=None)
        except (OverflowError, OSError, ValueError):
            raise ValueError(f"t must be an epoch time datetime can show, got {t!r}") from None
        matches = CronSim(self.expression, local)
        try:
            for _ in range(_MAX_STEPS):
                wall = next(matches)
                instant = self._instant(wall)
                if instant > t:
                    return instant
                # Not after t: t is in the second pass of a repeated hour, whose
                # times ran on the first. Go on from where the repetition ends.
                end = self._fold_end(wall)
                if end is not None:
                    matches = CronSim(self.expression, end - _SECOND)
        except (StopIteration, OverflowError):  # none in cronsim's 50 years, or past year 9999
            raise ValueError(f"{self!r} has no run after {t!r}") from None
        raise RuntimeError(f"{self!r}: no run after {t!r} within {_MAX_STEPS} matches")

    def count_between(self, a: Time, b: Time) -> int:
        """How many run times lie in ``(a, b]``: as many as :meth:`next_after` would
        give, stepping from ``a``, up to ``b``, without stepping.

        Cost: O(days) for the calendar days in between (each a day match and, on the
        first and the last, a bisection of that day's times), plus a walk of the days
        whose offset changes (daylight saving: two a year), not O(run times): a
        year behind a every-minute job is 365 day steps, not 525,600 runs.
        """
        if b <= a:
            return 0
        fields, total = self._fields(), 0
        day, last_day = _local_date(a, self.zone), _local_date(b, self.zone)
        while day <= last_day:
            runs = self._day(day, a, b, fields)
            total += len(runs) if isinstance(runs, list) else runs[2] - runs[1]
            day += _DAY
        return total

    def last_runs(self, b: Time, keep: int, after: Time) -> list[Time]:
        """The last ``keep`` run times in ``(after, b]``, oldest first. O(keep) cronsim
        steps back from ``b`` (plus the days with no run in between)."""
        found: list[Time] = []
        if keep <= 0 or b <= after:
            return found
        fields = self._fields()
        day = _local_date(b, self.zone)
        while len(found) < keep and _midnight(day + _DAY, self.zone) > after:
            runs = self._day(day, after, b, fields)
            if not isinstance(runs, list):
                start, first, last = runs
                runs = [start + t for t in fields[1][max(first, last - keep) : last]]
            found[:0] = runs[-(keep - len(found)) :] if runs else []
            day -= _DAY
        return found

    def _day(
        self, day: date, a: Time, b: Time, fields: tuple[CronSim, list[int]]
    ) -> list[Time] | tuple[int, int, int]:
        """The run times of local ``day`` that lie in ``(a, b]``: on a day whose offset
        changes (daylight saving), stepped, as a list; on any other, ``(its first
        instant, i, j)``: they are that instant plus ``times[i:j]`` of ``fields``
        (none if the day does not match). O(log times), or the day's runs stepped."""
        sim, times = fields
        zone = self.zone
        start, end = _midnight(day, zone), _midnight(day + _DAY, zone)
        if end - start != 86_400 or _offset(start, zone) != _offset(end - 1, zone):
            return self._runs(max(a, start - 1), min(b, end - 1))
        if day.month not in sim.months or not sim.match_day(day):
            return start, 0, 0
        low, high = max(a, start - 1) - start, min(b, end - 1) - start
        return start, bisect.bisect_right(times, low), bisect.bisect_right(times, high)

    def _fields(self) -> tuple[CronSim, list[int]]:
        """A cronsim of the expression (for its day match and fields, never stepped) and
        the sorted seconds of the day its time fields match; made once per schedule
        (a calendar's cursor counts stretches often)."""
        if self._fields_of is None:
            sim = CronSim(self.expression, datetime(2000, 1, 1))
            times = sorted(
                h * 3600 + m * 60 + sec
                for h in sim.hours
                for m in sim.minutes
                for sec in sim.seconds
            )
            self._fields_of = (sim, times)
        return self._fields_of

    def _runs(self, a: Time, b: Time) -> list[Time]:
        """The run times in ``(a, b]``, stepping (a short stretch)."""
        runs: list[Time] = []
        t = a
        while True:
            try:
                t = self.next_after(t)
            except ValueError:  # no run after t at all
                return runs
            if t > b:
                return runs
            runs.append(t)

    def _fold_end(self, wall: datetime) -> datetime | None:
        """The local wall time at which the repetition holding ``wall`` ends, if it is in one.

        O(log fold length): a bisection for the instant the offset changes.
        """
        zone = self.zone
        first = wall.replace(tzinfo=zone, fold=0)
        low, high = int(first.timestamp()), int(wall.replace(tzinfo=zone, fold=1).timestamp())
        if high <= low:
            return None
        old = first.utcoffset()
        while high - low > 1:
            mid = (low + high) // 2
            if datetime.fromtimestamp(mid, zone).utcoffset() == old:
                low = mid
            else:
                high = mid
        change = datetime.fromtimestamp(high, zone)  # the first instant on the new offset
        new = change.utcoffset()
        assert old is not None
        assert new is not None
        return change.replace(tzinfo=None) + (old - new)

    def _instant(self, wall: datetime) -> int:
        """The epoch second a naive local wall time runs at (gap: its end; fold: the first)."""
        zone = self.zone
        first = int(wall.replace(tzinfo=zone, fold=0).timestamp())
        if datetime.fromtimestamp(first, zone).replace(tzinfo=None) == wall:
            return first  # exists; fold=0 is the first of two occurrences
        # In a gap: the clocks jump somewhere in (low, first]; find that instant.
        low = int(wall.replace(tzinfo=zone, fold=1).timestamp())
        high = first
        while high - low > 1:
            mid = (low + high) // 2
            if datetime.fromtimestamp(mid, zone).replace(tzinfo=None) > wall:
                high = mid
            else:
                low = mid
        return high


class _CronCursor:
    __slots__ = ("_cron", "_last")

    def __init__(self, cron: Cron, now: Time) -> None:
        self._cron = cron
        self._last = now

    def next(self, now: Time) -> int:
        last = self._cron.next_after(self._last)
        self._last = last
        return last

    def skip(self, now: Time, keep: int) -> tuple[int, list[Time]]:
        """Advance past every run time up to ``now``: how many there were, and the
        last ``keep`` of them (see :meth:`rota.schedules.Cursor.skip`). O(days)."""
        count = self._cron.count_between(self._last, now)
        if not count:
            return 0, []
        tail = self._cron.last_runs(now, min(keep, count), self._last)
        self._last = tail[-1]
        return count, tail

    def state(self) -> Time:
        """Where this cursor is, as JSON-compatible data: the last time it gave."""
        return self._last


__all__ = ["Cron"]
