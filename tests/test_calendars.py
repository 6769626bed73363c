"""rota.calendars: business days, daily windows and periods as an immutable value, with
the DST rules of a window's edges, the holidays extra, and the value as data."""

from __future__ import annotations

import json
from collections.abc import Callable
from datetime import UTC, date, datetime, time, timedelta
from typing import Any
from zoneinfo import ZoneInfo

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from rota import FixedDelay, FixedRate, ManualClock, Once
from rota._core import codec
from rota.calendars import AnyOf, BusinessDay, Calendar, Window

NY = "America/New_York"


def nyse() -> Calendar:
    return Calendar(
        "nyse",
        tz=NY,
        weekends=(5, 6),
        holidays=[date(2026, 12, 25), date(2027, 1, 1)],
        exclude=[
            Window(time(22, 0), time(6, 0)),
            Window(datetime(2026, 12, 20), datetime(2027, 1, 4)),
        ],
    )


def test_the_specs_example() -> None:
    cal = nyse()
    assert not cal.is_business_day(date(2026, 12, 25))
    assert cal.next_business_day(date(2026, 12, 24)) == date(2026, 12, 28)
    assert cal.previous_business_day(date(2026, 12, 28)) == date(2026, 12, 24)
    assert cal.allows(datetime(2026, 12, 1, 10, 0))  # naive: New York's 10:00
    assert not cal.allows(datetime(2026, 12, 1, 22, 0))  # the daily window opens
    assert not cal.allows(datetime(2026, 12, 2, 5, 59))  # across midnight
    assert cal.allows(datetime(2026, 12, 2, 6, 0))  # half-open: its end is allowed
    assert not cal.allows(datetime(2026, 12, 21, 10, 0))  # the year-end period
    assert cal.allows(datetime(2027, 1, 4, 10, 0))
    assert not cal.allows(datetime(2026, 12, 5, 12, 0))  # a Saturday
    noon = datetime(2026, 12, 1, 17, 0, tzinfo=UTC)  # New York's noon, as epoch seconds
    assert cal.allows(noon.timestamp())
    assert cal.window_at(datetime(2026, 12, 1, 23, 0)) == Window(time(22, 0), time(6, 0))


def test_a_calendar_is_a_value() -> None:
    assert nyse() == nyse()
    assert hash(nyse()) == hash(nyse())
    assert nyse() != Calendar("nyse", tz=NY)
    with pytest.raises(AttributeError):
        nyse().tz = "UTC"
    with pytest.raises(AttributeError):
        Window(time(1), time(2)).start = time(3)
    back = Calendar.from_json(nyse().to_json())
    assert back == nyse()
    assert back.allows(datetime(2026, 12, 1, 10, 0))


@pytest.mark.parametrize(
    ("call", "kind", "words"),
    [
        (lambda: Calendar(""), ValueError, "name must not be empty"),
        (lambda: Calendar(7), TypeError, "name must be a str, got 7"),  # type: ignore[arg-type]
        (lambda: Calendar("x", tz="Mars/Base"), ValueError, "tz 'Mars/Base'"),
        (lambda: Calendar("x", weekends=range(7)), ValueError, "all seven"),
        (lambda: Calendar("x", weekends=(7,)), ValueError, "got 7"),
        (lambda: Calendar("x", weekends="sat"), TypeError, "weekends must be a list"),  # type: ignore[arg-type]
        (lambda: Calendar("x", holidays=["2026-12-25"]), TypeError, "'2026-12-25'"),  # type: ignore[list-item]
        (lambda: Calendar("x", exclude=[(time(1), time(2))]), TypeError, "Window values"),  # type: ignore[list-item]
        (lambda: Window(time(1), time(1)), ValueError, "must not be empty"),
        (lambda: Window(time(1), date(2026, 1, 1)), TypeError, "two times of day"),
        (lambda: Window("01:00", time(2)), TypeError, "window start"),  # type: ignore[arg-type]
        (lambda: Window(date(2026, 2, 1), date(2026, 1, 1)), ValueError, "end after it starts"),
        (
            lambda: Calendar("x", exclude=[Window(time(0), time(12)), Window(time(12), time(0))]),
            ValueError,
            "cover the whole day",
        ),
        (lambda: Calendar("x").is_business_day("2026-01-01"), TypeError, "day must be"),  # type: ignore[arg-type]
        (lambda: Calendar("x").allows("now"), TypeError, "when must be"),  # type: ignore[arg-type]
    ],
)
def test_bad_input_is_refused_by_name(call: object, kind: type, words: str) -> None:
    with pytest.raises(kind, match=words.replace("(", r"\(").replace(")", r"\)")):
        call()  # type: ignore[operator]


def test_a_window_edge_in_a_dst_gap_is_the_gaps_end() -> None:
    """New York skips 02:00-03:00 on 2026-03-08: a window opening at 02:30 opens at
    03:00 EDT (07:00 UTC); Lord Howe skips 02:00-02:30 on 2026-10-04."""
    cal = Calendar("gap", tz=NY, weekends=(), exclude=[Window(time(2, 30), time(4, 0))])
    assert cal.at(date(2026, 3, 8), time(2, 30)) == datetime(2026, 3, 8, 7, 0, tzinfo=UTC)
    assert cal.allows(datetime(2026, 3, 8, 6, 59, tzinfo=UTC))
    assert not cal.allows(datetime(2026, 3, 8, 7, 0, tzinfo=UTC))
    assert cal.allows(datetime(2026, 3, 8, 8, 0, tzinfo=UTC))  # 04:00 EDT
    howe = ZoneInfo("Australia/Lord_Howe")
    lh = Calendar("lh", tz="Australia/Lord_Howe", exclude=[Window(time(2, 15), time(3))])
    assert lh.at(date(2026, 10, 4), time(2, 15)).astimezone(howe).time() == time(2, 30)


def test_a_window_edge_in_a_repeated_hour_is_its_first_occurrence() -> None:
    """New York repeats 01:00-02:00 on 2026-11-01: a window ending at 01:30 ends at
    the first 01:30 (05:30 UTC); the second 01:10 (06:10 UTC) is allowed."""
    cal = Calendar("fold", tz=NY, weekends=(), exclude=[Window(time(0), time(1, 30))])
    assert cal.at(date(2026, 11, 1), time(1, 30)) == datetime(2026, 11, 1, 5, 30, tzinfo=UTC)
    assert not cal.allows(datetime(2026, 11, 1, 5, 29, tzinfo=UTC))
    assert cal.allows(datetime(2026, 11, 1, 5, 30, tzinfo=UTC))
    assert cal.allows(datetime(2026, 11, 1, 6, 10, tzinfo=UTC))
    berlin = Calendar("b", tz="Europe/Berlin", weekends=(), exclude=[Window(time(2, 30), time(5))])
    # 2026-10-25: 02:00-03:00 twice; the window opens at the first 02:30 (00:30 UTC)
    assert not berlin.allows(datetime(2026, 10, 25, 0, 30, tzinfo=UTC))
    assert berlin.allows(datetime(2026, 10, 25, 0, 29, tzinfo=UTC))


def test_holidays_from_the_holidays_package() -> None:
    cal = Calendar.from_holidays("nyse", "US", subdiv="NY", tz=NY)
    assert not cal.is_business_day(date(2026, 11, 26))  # Thanksgiving
    assert cal.is_business_day(date(2026, 11, 27))
    assert not cal.is_business_day(date(2031, 7, 4))  # a year computed when asked
    assert Calendar.from_json(cal.to_json()) == cal
    assert cal != Calendar("nyse", tz=NY)
    with pytest.raises(ValueError, match="no country 'ZZ'"):
        Calendar.from_holidays("x", "ZZ")
    with pytest.raises(ValueError, match="subdivision 'QQ'"):
        Calendar.from_holidays("x", "US", subdiv="QQ")


def test_an_exchanges_holidays_from_the_holidays_package() -> None:
    xnys = Calendar.from_holidays("xnys", "NYSE", tz=NY)
    assert not xnys.is_business_day(date(2027, 3, 26))  # Good Friday: the market's, not NY's
    assert Calendar.from_holidays("nyse", "US", subdiv="NY", tz=NY).is_business_day(
        date(2027, 3, 26)
    )
    assert Calendar.from_json(xnys.to_json()) == xnys


days = st.dates(min_value=date(2000, 1, 1), max_value=date(2100, 1, 1))


@settings(max_examples=200, deadline=None)
@given(
    st.sets(st.integers(0, 6), max_size=6),
    st.lists(days, max_size=40),
    days,
)
def test_next_and_previous_business_days_match_a_day_walk(
    weekends: set[int], holidays: list[date], day: date
) -> None:
    cal = Calendar("c", weekends=weekends, holidays=holidays)

    def oracle(step: int) -> date:
        d = day + timedelta(days=step)
        while d.weekday() in weekends or d in holidays:
            d += timedelta(days=step)
        return d

    assert cal.next_business_day(day) == oracle(1)
    assert cal.previous_business_day(day) == oracle(-1)
    assert cal.is_business_day(day) == (day.weekday() not in weekends and day not in holidays)


minutes = st.integers(0, 24 * 60 - 1)


@settings(max_examples=200, deadline=None)
@given(
    st.sampled_from(["UTC", "Asia/Tokyo", "Asia/Kolkata"]),  # zones without DST
    st.lists(st.tuples(minutes, minutes).filter(lambda w: w[0] != w[1]), max_size=3),
    st.lists(st.tuples(st.integers(0, 30 * 24), st.integers(1, 5 * 24)), max_size=2),
    st.integers(0, 40 * 24 * 60),
)
def test_allows_matches_a_wall_clock_oracle(
    tz: str, daily: list[tuple[int, int]], periods: list[tuple[int, int]], offset: int
) -> None:
    """Without DST a wall clock is an instant: a window holds a time of day in
    ``[start, end)`` (crossing midnight when ``end < start``), a period an instant."""
    origin = datetime(2026, 1, 1)
    windows = [Window(_hm(s), _hm(e)) for s, e in daily]
    windows += [
        Window(origin + timedelta(hours=h), origin + timedelta(hours=h + n)) for h, n in periods
    ]
    try:
        cal = Calendar("c", tz=tz, weekends=(6,), exclude=windows)
    except ValueError:  # the daily windows cover the whole day: refused, rightly
        return
    wall = origin + timedelta(minutes=offset)
    m = wall.hour * 60 + wall.minute
    in_daily = any((s <= m < e) if s < e else (m >= s or m < e) for s, e in daily)
    in_period = any(
        origin + timedelta(hours=h) <= wall < origin + timedelta(hours=h + n) for h, n in periods
    )
    expected = wall.weekday() != 6 and not in_daily and not in_period
    assert cal.allows(wall) == expected
    assert cal.allows(wall.replace(tzinfo=ZoneInfo(tz)).timestamp()) == expected


def _hm(minute: int) -> time:
    return time(minute // 60, minute % 60)


@settings(max_examples=100, deadline=None)
@given(
    st.sampled_from(["UTC", NY, "Europe/Berlin", "Australia/Lord_Howe"]),
    st.sets(st.integers(0, 6), max_size=6),
    st.lists(days, max_size=5),
    st.lists(st.tuples(minutes, minutes).filter(lambda w: w[0] != w[1]), max_size=2),
)
def test_the_value_reads_back_from_its_json(
    tz: str, weekends: set[int], holidays: list[date], daily: list[tuple[int, int]]
) -> None:
    try:
        cal = Calendar("c", tz=tz, weekends=weekends, holidays=holidays,
                       exclude=[Window(_hm(s), _hm(e)) for s, e in daily])  # fmt: skip
    except ValueError:
        return
    back = Calendar.from_json(cal.to_json())
    assert back == cal
    assert hash(back) == hash(cal)
    assert back.to_json() == cal.to_json()


# -- AnyOf and BusinessDay ----------------------------------------------------------


def take(schedule: Any, now: float, n: int) -> list[float]:
    cursor = schedule.start(now)
    found = []
    for _ in range(n):
        at = cursor.next(now)
        if at is None:
            break
        found.append(at)
    return found


@settings(max_examples=150, deadline=None)
@given(
    st.lists(st.tuples(st.integers(1, 50), st.integers(0, 100)), min_size=1, max_size=4),
    st.lists(st.integers(0, 300), max_size=3),
    st.integers(1, 40),
)
def test_any_of_is_the_sorted_union_of_its_members(
    rates: list[tuple[int, int]], ones: list[int], n: int
) -> None:
    """Oracle: every member's times, merged, a time given twice counted once."""
    members: list[Any] = [FixedRate(p, start=s) for p, s in rates]
    members += [Once(at=a) for a in ones]
    union = AnyOf(*members)
    everything = sorted({t for m in members for t in take(m, 0, n + 300)})
    assert take(union, 0, n) == everything[:n]
    # and from its stored state, at every step, it goes on as it would have
    cursor = union.start(0)
    seen = []
    for _ in range(n):
        state = json.loads(json.dumps(cursor.state()))  # type: ignore[attr-defined]
        cursor = union.resume(state)
        at = cursor.next(0)
        if at is None:
            break
        seen.append(at)
    assert seen == everything[:n]


def test_any_of_refuses_what_it_cannot_join() -> None:
    with pytest.raises(ValueError, match="at least one"):
        AnyOf()
    with pytest.raises(ValueError, match="waits for the previous one"):
        AnyOf(FixedRate(5), FixedDelay(5))
    with pytest.raises(TypeError, match="AnyOf takes schedules"):
        AnyOf(FixedRate(5), 5)  # type: ignore[arg-type]


def _business_oracle(cal: Calendar, n: int, at: time, year: int, month: int) -> datetime | None:
    days = [date(year, month, d) for d in range(1, 32) if _valid(year, month, d)]
    business = [d for d in days if d.weekday() not in cal.weekends and d not in cal.holidays]
    index = n - 1 if n > 0 else n
    if not -len(business) <= index < len(business):
        return None
    return datetime.combine(business[index], at, tzinfo=ZoneInfo(cal.tz))


def _valid(year: int, month: int, day: int) -> bool:
    try:
        date(year, month, day)
    except ValueError:
        return False
    return True


@settings(max_examples=100, deadline=None)
@given(
    st.integers(-23, 23).filter(bool),
    st.sampled_from([time(9), time(17, 30), time(0, 0)]),
    st.sets(st.integers(0, 6), max_size=3),
    st.lists(st.dates(min_value=date(2026, 1, 1), max_value=date(2027, 12, 31)), max_size=30),
    st.sampled_from(["UTC", NY, "Europe/Berlin"]),
)
def test_business_day_is_the_nth_business_day_of_each_month(
    n: int, at: time, weekends: set[int], holidays: list[date], tz: str
) -> None:
    """Oracle: each month's business days listed, the n-th picked (months with fewer
    have no slot); times chosen off DST transitions."""
    cal = Calendar("c", tz=tz, weekends=weekends, holidays=holidays)
    schedule = BusinessDay(n, at, cal)
    start = datetime(2026, 1, 1, tzinfo=UTC).timestamp() - 1  # so a slot at 00:00 counts
    expected = [
        slot.timestamp()
        for year in (2026, 2027)
        for month in range(1, 13)
        if (slot := _business_oracle(cal, n, at, year, month)) is not None
        and slot.timestamp() > start
    ]
    got = [
        t
        for t in take(schedule, start, 30)
        if t < datetime(2028, 1, 1, tzinfo=ZoneInfo(tz)).timestamp()  # the months listed
    ]
    assert got == expected
    back = codec.schedule_from(json.loads(json.dumps(schedule.spec())))
    assert take(back, start, 5) == take(schedule, start, 5)


def test_business_day_refuses_bad_input() -> None:
    cal = Calendar("c")
    for n in (0, 24, -24):
        with pytest.raises(ValueError, match="n must be 1 to 23"):
            BusinessDay(n, time(9), cal)
    with pytest.raises(TypeError, match="n must be an int"):
        BusinessDay(1.5, time(9), cal)  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="at must be a naive"):
        BusinessDay(1, "09:00", cal)  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="calendar must be"):
        BusinessDay(1, time(9), None)


def test_the_last_business_day_of_december_2026_at_five() -> None:
    cal = Calendar("nyse", tz=NY, holidays=[date(2026, 12, 25), date(2026, 12, 31)])
    schedule = BusinessDay(-1, time(17), cal)
    (slot,) = take(schedule, datetime(2026, 12, 1, tzinfo=UTC).timestamp(), 1)
    assert datetime.fromtimestamp(slot, ZoneInfo(NY)) == datetime(
        2026, 12, 30, 17, tzinfo=ZoneInfo(NY)
    )


def test_both_schedules_run_on_every_table(make_sched: Callable[..., Any]) -> None:
    """Through a scheduler, in memory and stored: the same runs at the same times,
    with misfire and max_runs as for any schedule."""
    start = datetime(2026, 12, 1, tzinfo=UTC).timestamp()
    clock = ManualClock(start)
    epoch = {"epoch": True} if make_sched.backend == "memory" else {}  # type: ignore[attr-defined]
    sched = make_sched(clock=clock, **epoch)
    cal = Calendar("nyse", tz=NY, holidays=[date(2026, 12, 25), date(2027, 1, 1)])
    union = AnyOf(BusinessDay(1, time(9), cal), BusinessDay(-1, time(17), cal))
    sched.schedule("month", union, noop, max_runs=3)
    ran = []
    for _ in range(6):
        at = sched.next_run_time("month")
        if at is None:
            break
        clock.set(at)
        ran += [o.at for o in sched.tick(at)]
    shown = [datetime.fromtimestamp(t, ZoneInfo(NY)).strftime("%Y-%m-%d %H:%M") for t in ran]
    assert shown == ["2026-12-01 09:00", "2026-12-31 17:00", "2027-01-04 09:00"]
    assert sched.status("month").value == "done"


def noop(at: float) -> None:
    pass
