"""Cron schedules: matching, epoch time, and daylight saving time in two zones.

Every test drives a Scheduler with a ManualClock set to epoch seconds around
real transitions: Europe/Berlin (2026-03-29 02:00 -> 03:00, 2026-10-25
03:00 -> 02:00) and America/New_York (2026-03-08 02:00 -> 03:00, 2026-11-01
02:00 -> 01:00). Times are stepped a minute at a time so every run shows up
exactly when it is due.
"""

from __future__ import annotations

from datetime import datetime, timedelta
from zoneinfo import ZoneInfo

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from rota import FixedRate, ManualClock, Misfire, Scheduler
from rota.cron import Cron

BERLIN, NEW_YORK = ZoneInfo("Europe/Berlin"), ZoneInfo("America/New_York")


def epoch(zone: ZoneInfo, year: int, month: int, day: int, hour: int, minute: int) -> int:
    return int(datetime(year, month, day, hour, minute, tzinfo=zone).timestamp())


def local(t: float, zone: ZoneInfo) -> str:
    return datetime.fromtimestamp(t, zone).strftime("%m-%d %H:%M %Z")


def runs(expr: str, zone: ZoneInfo, start: int, hours: int, **kwargs: object) -> list[str]:
    """Schedule the cron task at ``start``, tick minute by minute, return run times."""
    clock = ManualClock(start)
    sched = Scheduler(clock=clock)
    sched.schedule("c", Cron(expr, tz=str(zone)), lambda at: None, **kwargs)  # type: ignore[arg-type]
    seen = []
    for _ in range(hours * 60):
        for outcome in sched.tick(clock.advance(60)):
            assert outcome.started - outcome.at < 60  # on time: due within this minute
            seen.append(local(outcome.at, zone))
    return seen


def test_a_daily_job_in_the_spring_gap_runs_once_at_the_end_of_the_gap() -> None:
    start = epoch(BERLIN, 2026, 3, 28, 12, 0)
    assert runs("30 2 * * *", BERLIN, start, 48) == ["03-29 03:00 CEST", "03-30 02:30 CEST"]
    start = epoch(NEW_YORK, 2026, 3, 7, 12, 0)
    assert runs("30 2 * * *", NEW_YORK, start, 48) == ["03-08 03:00 EDT", "03-09 02:30 EDT"]


def test_a_daily_job_in_the_repeated_hour_runs_once_at_its_first_occurrence() -> None:
    start = epoch(BERLIN, 2026, 10, 24, 12, 0)
    assert runs("30 2 * * *", BERLIN, start, 48) == ["10-25 02:30 CEST", "10-26 02:30 CET"]
    start = epoch(NEW_YORK, 2026, 10, 31, 12, 0)
    assert runs("30 1 * * *", NEW_YORK, start, 48) == ["11-01 01:30 EDT", "11-02 01:30 EST"]


def test_several_matches_inside_one_gap_are_one_run() -> None:
    start = epoch(NEW_YORK, 2026, 3, 8, 1, 0)
    assert runs("*/20 2 * * *", NEW_YORK, start, 3) == ["03-08 03:00 EDT"]


def test_an_hourly_job_across_both_transitions() -> None:
    start = epoch(BERLIN, 2026, 3, 29, 0, 30)
    assert runs("0 * * * *", BERLIN, start, 4) == [
        "03-29 01:00 CET", "03-29 03:00 CEST", "03-29 04:00 CEST", "03-29 05:00 CEST"
    ]  # fmt: skip
    start = epoch(BERLIN, 2026, 10, 25, 0, 30)
    assert runs("0 * * * *", BERLIN, start, 5) == [
        "10-25 01:00 CEST", "10-25 02:00 CEST", "10-25 03:00 CET", "10-25 04:00 CET"
    ]  # fmt: skip


def test_every_run_time_is_an_int_epoch_second_and_increasing() -> None:
    cron = Cron("*/7 * * * *", tz="America/New_York")
    t = epoch(NEW_YORK, 2026, 11, 1, 0, 0)
    previous = t
    for _ in range(100):
        nxt = cron.next_after(previous)
        assert type(nxt) is int
        assert nxt > previous
        previous = nxt


def test_missed_cron_runs_catch_up_or_coalesce() -> None:
    start = epoch(BERLIN, 2026, 6, 1, 12, 0)
    for misfire, expected in [(None, 6), (Misfire.COALESCE, 1)]:
        clock = ManualClock(start)
        sched = Scheduler(clock=clock)
        sched.schedule("c", Cron("*/10 * * * *", tz="Europe/Berlin"), print, misfire=misfire)
        outcomes = sched.tick(clock.advance(3600))  # asleep for an hour
        assert len(outcomes) == expected
        assert local(outcomes[-1].at, BERLIN) == "06-01 13:00 CEST"


def test_bad_cron_arguments() -> None:
    with pytest.raises(ValueError, match="expression '61 \\* \\* \\* \\*' is not valid cron"):
        Cron("61 * * * *")
    with pytest.raises(ValueError, match="tz must be an IANA time zone name, got 'Mars/Base'"):
        Cron("* * * * *", tz="Mars/Base")
    with pytest.raises(TypeError, match="expression must be a str"):
        Cron(5)  # type: ignore[arg-type]


def test_seconds_field() -> None:
    cron = Cron("*/20 * * * * *")
    t = epoch(ZoneInfo("UTC"), 2026, 1, 1, 0, 0)
    assert [cron.next_after(t + i) - t for i in (0, 20, 39)] == [20, 40, 40]
    assert timedelta(seconds=cron.next_after(t) - t) == timedelta(seconds=20)


# -- jumping over a backlog: as many runs as stepping finds, at no cost per run ---

EXPRESSIONS = ["0 * * * *", "*/15 * * * *", "30 2 * * *", "0 9 * * MON-FRI", "0 0 L * *",
               "15 1-3 * * SUN", "0 12 1,15 * *", "*/20 2 * 3,10 *", "0 0 29 2 *"]  # fmt: skip
ZONES = ["UTC", "Europe/Berlin", "America/New_York", "Australia/Lord_Howe"]


def _stepped(cron: Cron, a: int, b: int) -> list[int]:
    """The oracle: the run times in (a, b], one next_after at a time."""
    found, t = [], a
    while (t := cron.next_after(t)) <= b:
        found.append(t)
    return found


@settings(max_examples=60, deadline=None)
@given(
    expression=st.sampled_from(EXPRESSIONS),
    tz=st.sampled_from(ZONES),
    start=st.integers(1_767_225_600, 1_830_297_600),  # 2026-2028
    span=st.integers(0, 40 * 86_400),
    keep=st.integers(0, 5),
)
def test_counting_and_the_last_runs_match_stepping(
    expression: str, tz: str, start: int, span: int, keep: int
) -> None:
    cron = Cron(expression, tz=tz)
    stepped = _stepped(cron, start, start + span)
    assert cron.count_between(start, start + span) == len(stepped)
    assert cron.last_runs(start + span, keep, start) == stepped[max(0, len(stepped) - keep) :]


def test_a_year_behind_a_coalesced_minutely_job_is_one_run_decided_without_stepping(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """``* * * * *`` with COALESCE, a year behind: one run, every other slot skipped
    and counted, and the decision jumps (it stepped 525,600 times: 58 s, past a
    lease)."""
    start = epoch(BERLIN, 2026, 1, 1, 0, 0)
    clock = ManualClock(start)
    sched = Scheduler(clock=clock)
    sched.schedule("c", Cron("* * * * *", tz="Europe/Berlin"), lambda at: None,
                   misfire=Misfire.COALESCE)  # fmt: skip
    steps = 0
    original = Cron.next_after

    def counted(self: Cron, t: float) -> int:
        nonlocal steps
        steps += 1
        return original(self, t)

    monkeypatch.setattr(Cron, "next_after", counted)
    year = epoch(BERLIN, 2027, 1, 1, 0, 0) - start
    [outcome] = sched.tick(clock.advance(year))
    assert outcome.at == start + year
    # every minute but the one that ran, less the 60 that spring-forward folds into
    # 03:00 (02:00-02:59 do not exist; with 03:00 they are one run)
    assert outcome.skipped == year // 60 - 60 - 1
    assert steps < 5_000  # two DST days are stepped (1,440 runs each), no other


def test_fixed_rate_skips_a_backlog_in_one_step() -> None:
    clock = ManualClock(0)
    sched = Scheduler(clock=clock)
    sched.schedule("r", FixedRate(0.1), lambda at: None, misfire=Misfire.bounded(2))
    sched.tick(0)
    outcomes = sched.tick(clock.advance(10**6 + 0.05))  # ten million slots behind
    assert [round(o.at, 6) for o in outcomes] == [999_999.9, 1_000_000.0]
    assert outcomes[0].skipped == 10**7 - 2
