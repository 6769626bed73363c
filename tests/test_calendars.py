"""rota.calendars: business days, daily windows and periods as an immutable value, with
the DST rules of a window's edges, the holidays extra, and the value as data."""

from __future__ import annotations

from datetime import UTC, date, datetime, time, timedelta
from zoneinfo import ZoneInfo

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from rota.calendars import Calendar, Window

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
