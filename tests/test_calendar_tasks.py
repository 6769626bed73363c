"""A task on a business calendar (``calendar=``, ``on_excluded=``): the engine's one
decision of skipped, moved and merged slots, on every store, against a slot-walking
oracle, and what ``upcoming`` shows before it happens."""

from __future__ import annotations

import json
import math
import subprocess
import sys
from collections.abc import Iterator
from datetime import date, datetime, time, timedelta
from typing import Any
from zoneinfo import ZoneInfo

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from rota import (
    Backoff,
    FixedDelay,
    FixedRate,
    ManualClock,
    Misfire,
    Once,
    Overlap,
    RunContext,
    Scheduler,
    Upcoming,
)
from rota.calendars import Calendar, Calendared, Window
from rota.cron import Cron
from tests.helpers import WHERE, check_table, make_store, scheduler_on

NY = "America/New_York"
ZONE = ZoneInfo(NY)
NYSE = Calendar("nyse", tz=NY, holidays=[date(2026, 12, 25), date(2027, 1, 1)])


def ny(*parts: int) -> int:
    return int(datetime(*parts, tzinfo=ZONE).timestamp())  # type: ignore[arg-type,misc]


@pytest.fixture(params=WHERE)
def sched(request: pytest.FixtureRequest, tmp_path: Any) -> Iterator[Scheduler]:
    """An epoch scheduler on a manual clock at Monday 2026-12-21 12:00 New York, in
    memory and on every store."""
    clock = ManualClock(ny(2026, 12, 21, 12))
    made, store = scheduler_on(request.param, request, tmp_path, clock)
    yield made
    if store is not None:
        store.close()


class Runs:
    """An action that keeps (at, slot, key) of each run."""

    def __init__(self) -> None:
        self.seen: list[tuple[float, float, str]] = []

    def __call__(self, at: float, *, run: RunContext) -> None:
        self.seen.append((at, run.slot, run.key))


def hourly(sched: Scheduler, until: float) -> list[Any]:
    """Tick every hour from the clock's time to ``until``; the outcomes."""
    now = sched.clock()
    outcomes = []
    while now < until:
        now += 3600
        outcomes += sched.tick(now)
    return outcomes


def test_a_weekend_and_its_monday_are_one_run_with_mondays_key(sched: Scheduler) -> None:
    runs = Runs()
    sched.schedule("settle", Cron("0 9 * * *", tz=NY), runs, calendar=NYSE, on_excluded="next")
    outcomes = hourly(sched, ny(2026, 12, 29, 10))
    assert [(o.at, dict(o.skipped_by)) for o in outcomes] == [
        (ny(2026, 12, 22, 9), {}),
        (ny(2026, 12, 23, 9), {}),
        (ny(2026, 12, 24, 9), {}),
        (ny(2026, 12, 28, 9), {"calendar": 3}),  # Christmas, Saturday, Sunday
        (ny(2026, 12, 29, 9), {}),
    ]
    assert runs.seen[3][1:] == (ny(2026, 12, 28, 9), f"settle@{ny(2026, 12, 28, 9)!r}")
    check_table(sched)


def test_a_moved_run_keeps_its_slot_and_key_and_runs_at_the_moved_time(sched: Scheduler) -> None:
    runs = Runs()
    monthly = Cron("0 9 26 * *", tz=NY)  # Saturday 2026-12-26
    sched.schedule("pay", monthly, runs, calendar=NYSE, on_excluded="next")
    assert sched.next_run_time("pay") == ny(2026, 12, 28, 9)
    (outcome,) = hourly(sched, ny(2026, 12, 29))
    assert outcome.at == ny(2026, 12, 28, 9)
    assert outcome.skipped_by == {}
    assert runs.seen == [
        (ny(2026, 12, 28, 9), ny(2026, 12, 26, 9), f"pay@{ny(2026, 12, 26, 9)!r}")
    ]
    assert sched.upcoming("pay", 2) == [
        Upcoming(ny(2027, 1, 26, 9), ny(2027, 1, 26, 9), None),
        Upcoming(ny(2027, 2, 26, 9), ny(2027, 2, 26, 9), None),
    ]


def test_previous_runs_on_the_business_day_before(sched: Scheduler) -> None:
    runs = Runs()
    sched.schedule("pay", Cron("0 9 26 * *", tz=NY), runs, calendar=NYSE, on_excluded="previous")
    assert sched.upcoming("pay", 1) == [
        Upcoming(ny(2026, 12, 26, 9), ny(2026, 12, 24, 9), "weekend")
    ]
    hourly(sched, ny(2026, 12, 27))
    assert runs.seen == [
        (ny(2026, 12, 24, 9), ny(2026, 12, 26, 9), f"pay@{ny(2026, 12, 26, 9)!r}")
    ]


def test_skip_counts_what_the_calendar_excluded_and_upcoming_lists_it(sched: Scheduler) -> None:
    sched.schedule("d", Cron("0 9 * * *", tz=NY), lambda at: None, calendar=NYSE)
    assert sched.upcoming("d", 5) == [
        Upcoming(ny(2026, 12, 22, 9), ny(2026, 12, 22, 9), None),
        Upcoming(ny(2026, 12, 23, 9), ny(2026, 12, 23, 9), None),
        Upcoming(ny(2026, 12, 24, 9), ny(2026, 12, 24, 9), None),
        Upcoming(ny(2026, 12, 25, 9), None, "holiday"),
        Upcoming(ny(2026, 12, 26, 9), None, "weekend"),
    ]
    assert sched.info("d").last_skipped is None  # type: ignore[union-attr]
    outcomes = hourly(sched, ny(2026, 12, 29))
    assert [dict(o.skipped_by) for o in outcomes] == [{}, {}, {}, {"calendar": 3}]
    assert sched.next_run_time("d") == ny(2026, 12, 29, 9)
    info = sched.info("d")
    assert info is not None
    assert info.last_skipped == (ny(2026, 12, 27, 9), "calendar", "weekend")


def test_a_window_moves_to_its_end_or_its_start(sched: Scheduler) -> None:
    night = Calendar("night", tz=NY, weekends=(), exclude=[Window(time(22), time(6))])
    sched.schedule(
        "late", Cron("30 23 * * *", tz=NY), lambda at: None, calendar=night, on_excluded="next"
    )
    sched.schedule(
        "early",
        Cron("30 23 * * *", tz=NY),
        lambda at: None,
        calendar=night,
        on_excluded="previous",
    )
    assert sched.upcoming("late", 1) == [
        Upcoming(ny(2026, 12, 21, 23, 30), ny(2026, 12, 22, 6), "window")
    ]
    assert sched.upcoming("early", 1) == [
        Upcoming(ny(2026, 12, 21, 23, 30), ny(2026, 12, 21, 22), "window")
    ]


def test_a_fourteen_day_freeze_is_counted_not_visited(sched: Scheduler, monkeypatch: Any) -> None:
    freeze = Calendar(
        "freeze", tz=NY, weekends=(), exclude=[Window(date(2026, 12, 22), date(2027, 1, 5))]
    )
    start = ny(2026, 12, 21, 23, 59)
    sched.schedule("m", FixedRate(60, start=start), lambda at: None, calendar=freeze)
    looked = 0
    excluded_by = Calendar.excluded_by

    def counted(self: Calendar, when: Any) -> str | None:
        nonlocal looked
        looked += 1
        return excluded_by(self, when)

    monkeypatch.setattr(Calendar, "excluded_by", counted)
    assert len(sched.tick(start)) == 1
    assert sched.next_run_time("m") == ny(2027, 1, 5)
    assert looked < 20  # not 20,160
    (after,) = sched.tick(ny(2027, 1, 5))
    assert after.skipped_by == {"calendar": 20_160}


def test_retries_are_not_moved(sched: Scheduler) -> None:
    night = Calendar("night", tz=NY, weekends=(), exclude=[Window(time(22), time(6))])
    calls: list[float] = []

    def flaky(at: float) -> None:
        calls.append(at)
        if len(calls) == 1:
            raise ValueError("first attempt fails")

    sched.schedule("r", Cron("0 21 * * *", tz=NY), flaky, calendar=night, max_retries=1,
                   retry=Backoff(7200))  # fmt: skip
    hourly(sched, ny(2026, 12, 22, 0))
    assert calls == [ny(2026, 12, 21, 21), ny(2026, 12, 21, 23)]  # 23:00 is in the window


def test_a_one_off_moves_only(sched: Scheduler) -> None:
    with pytest.raises(ValueError, match="one-off task takes calendar= only with"):
        sched.schedule_once("o", 5 * 86400, lambda at: None, calendar=NYSE)
    assert sched.status("o") is None
    sched.schedule_once(
        "o", 5 * 86400 - 3 * 3600, lambda at: None, calendar=NYSE, on_excluded="next"
    )
    assert sched.next_run_time("o") == ny(2026, 12, 28, 9)  # from Saturday 09:00


def test_bad_arguments_change_nothing(sched: Scheduler) -> None:
    daily = Cron("0 9 * * *", tz=NY)
    for kwargs, error, words in (
        ({"calendar": "nyse"}, TypeError, "calendar must be a rota.calendars.Calendar"),
        ({"calendar": NYSE, "on_excluded": "later"}, ValueError, "on_excluded must be one of"),
        ({"calendar": NYSE, "on_excluded": 3}, TypeError, "on_excluded must be a str"),
        ({"on_excluded": "next"}, ValueError, "needs a calendar="),
    ):
        with pytest.raises(error, match=words):
            sched.schedule("x", daily, lambda at: None, **kwargs)
    with pytest.raises(ValueError, match="FixedDelay"):
        sched.schedule("x", FixedDelay(60), lambda at: None, calendar=NYSE)
    assert sched.status("x") is None


def test_update_gives_and_takes_a_calendar_from_the_next_run(sched: Scheduler) -> None:
    monthly = Cron("0 9 26 * *", tz=NY)
    sched.schedule("u", monthly, lambda at: None)
    assert sched.next_run_time("u") == ny(2026, 12, 26, 9)
    assert sched.update("u", calendar=NYSE, on_excluded="next")
    assert sched.next_run_time("u") == ny(2026, 12, 28, 9)
    assert sched.info("u").schedule == Calendared(monthly, NYSE, "next")  # type: ignore[union-attr]
    assert sched.update("u", calendar=None)
    assert sched.next_run_time("u") == ny(2026, 12, 26, 9)
    with pytest.raises(TypeError, match="needs calendar= too"):
        sched.update("u", on_excluded="next")
    assert not sched.update("missing", calendar=NYSE)
    check_table(sched)


# -- the rules against a slot-walking oracle ------------------------------------------

ZONES = ("Europe/Berlin", "America/New_York", "Australia/Lord_Howe")
START = datetime(2027, 3, 20, tzinfo=ZoneInfo("UTC")).timestamp()  # DST changes ahead
SPAN = 45 * 86400


@st.composite
def calendars(draw: st.DrawFn) -> Calendar:
    tz = draw(st.sampled_from(ZONES))
    weekends = draw(st.sets(st.integers(0, 6), max_size=3))
    first = date(2027, 3, 20)
    holidays = draw(
        st.sets(st.integers(0, 45).map(lambda d: first + timedelta(days=d)), max_size=8)
    )
    windows = []
    for _ in range(draw(st.integers(0, 2))):
        start, length = draw(st.integers(0, 47)), draw(st.integers(1, 20))
        opens = time(start // 2, 30 * (start % 2))
        closes_at = (start + length) % 48
        windows.append(Window(opens, time(closes_at // 2, 30 * (closes_at % 2))))
    for _ in range(draw(st.integers(0, 2))):
        day, hours = draw(st.integers(0, 45)), draw(st.integers(1, 24 * 6))
        opens_p = datetime.combine(first + timedelta(days=day), time(draw(st.integers(0, 23))))
        windows.append(Window(opens_p, opens_p + timedelta(hours=hours)))
    try:
        return Calendar("c", tz=tz, weekends=weekends, holidays=holidays, exclude=windows)
    except ValueError:  # daily windows covering the day
        return Calendar("c", tz=tz, weekends=weekends, holidays=holidays)


SCHEDULES = st.one_of(
    st.sampled_from([900, 1800, 3600, 5400, 86400]).map(lambda p: FixedRate(p, start=START)),
    st.sampled_from(
        ["0 9 * * *", "30 1,2,3 * * *", "0 */4 * * *", "15 9 1,15 * *", "*/20 8-11 * * 1-5"]
    ).map(lambda e: Cron(e, tz="Europe/Berlin")),
)


def oracle(slots: list[float], calendar: Calendar, mode: str) -> list[tuple[float, float, int]]:
    """The runs ``(slot, at, skipped)`` the rules give, slot by slot: skip excluded
    slots; in ``next``, a slot runs at its moved time unless a later slot runs at or
    before it; in ``previous``, consecutive slots moved to one instant are one run (the
    latest keeps its key), dropped when at or before the previous run."""
    runs: list[tuple[float, float, int]] = []
    count = 0
    if mode == "skip":
        for slot in slots:
            if calendar.excluded_by(slot) is None:
                runs.append((slot, slot, count))
                count = 0
            else:
                count += 1
        return runs
    at = [calendar.moved(slot, mode) for slot in slots]
    if mode == "next":
        later = math.inf
        survives = [False] * len(slots)
        for i in reversed(range(len(slots))):
            survives[i] = at[i] < later
            later = min(later, at[i])
        for i, slot in enumerate(slots):
            if survives[i]:
                runs.append((slot, at[i], count))
                count = 0
            else:
                count += 1
        return runs
    last, i = -math.inf, 0
    while i < len(slots):
        j = i
        while j + 1 < len(slots) and at[j + 1] == at[i]:
            j += 1
        count += j - i
        if at[i] <= last:
            count += 1
        else:
            runs.append((slots[j], at[i], count))
            count, last = 0, at[i]
        i = j + 1
    return runs


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(calendars(), SCHEDULES, st.sampled_from(["skip", "next", "previous"]))
def test_runs_match_a_slot_walking_oracle(calendar: Calendar, schedule: Any, mode: str) -> None:
    cursor = Calendared(schedule, calendar, mode).start(START - 1)
    got = []
    expected = oracle(slots_until(schedule, START + SPAN), calendar, mode)
    refused = ""
    while True:
        try:
            at = cursor.next(0)
        except ValueError as exc:  # every slot excluded for 50 years: none ran here
            refused = str(exc)
            break
        if at is None or at > START + SPAN - 10 * 86400:
            break
        got.append((cursor.slot_of(at) or at, at, cursor.take_excluded()))
    assert got == expected[: len(got)]
    assert not refused or ("excludes every slot" in refused and not expected)


@settings(max_examples=25, deadline=None)
@given(calendars(), SCHEDULES, st.sampled_from(["skip", "next", "previous"]), st.integers(1, 12))
def test_upcoming_says_what_the_runs_do(
    calendar: Calendar, schedule: Any, mode: str, n: int
) -> None:
    sched = Scheduler(clock=ManualClock(START - 1), epoch=True)
    try:
        sched.schedule("t", schedule, lambda at: None, calendar=calendar, on_excluded=mode)
    except ValueError as exc:  # refused before anything changed: no slot it allows
        refused = str(exc)
        assert "excludes every slot" in refused
        assert sched.status("t") is None
        return
    listed = sched.upcoming("t", n)
    raw = schedule.start(START - 1)
    slots = [raw.next(0) for _ in range(n)]
    assert [u.slot for u in listed] == slots
    runs = oracle(slots_until(schedule, slots[-1] + 40 * 86400), calendar, mode)
    for u in listed:
        assert u.reason == calendar.excluded_by(u.slot)
        joins = next((run for run in runs if run[0] >= u.slot), None)  # its run's
        if mode == "skip" and u.reason is not None:
            assert u.at is None
        elif joins is None:  # beyond the oracle's horizon
            assert u.at is None or u.at > slots[-1] + 40 * 86400
        elif mode != "previous" or u.at is not None:
            assert u.at == joins[1]


def slots_until(schedule: Any, end: float) -> list[float]:
    raw = schedule.start(START - 1)
    found = []
    while (slot := raw.next(0)) is not None and slot < end:
        found.append(slot)
    return found


def test_every_store_decides_alike(sched: Scheduler) -> None:
    memory = Scheduler(clock=ManualClock(sched.clock()), epoch=True)
    night = Calendar(
        "night", tz=NY, holidays=[date(2026, 12, 25)], exclude=[Window(time(22), time(6))]
    )
    for target in (sched, memory):
        target.schedule(
            "a", Cron("0 */5 * * *", tz=NY), lambda at: None, calendar=night, on_excluded="next"
        )
        target.schedule("b", FixedRate(7 * 3600, start=ny(2026, 12, 21, 13)), lambda at: None,
                        calendar=night, on_excluded="previous")  # fmt: skip
        target.schedule("c", Once(at=ny(2026, 12, 25, 12)), lambda at: None, calendar=night,
                        on_excluded="next")  # fmt: skip
    assert [sched.upcoming(t, 8) for t in "abc"] == [memory.upcoming(t, 8) for t in "abc"]

    def runs(target: Scheduler) -> list[tuple[Any, ...]]:
        return sorted(
            (str(o.task_id), o.at, dict(o.skipped_by)) for o in hourly(target, ny(2027, 1, 2))
        )

    assert runs(sched) == runs(memory)
    check_table(sched)


def test_status_says_the_next_run_was_moved(tmp_path: Any) -> None:
    from rota.durable import DurableScheduler
    from rota.store import SQLiteStore

    store = SQLiteStore(tmp_path / "s.db")
    sched = DurableScheduler(store, clock=ManualClock(ny(2026, 12, 1)))
    sched.register("f", lambda at: None)
    sched.ensure("pay", Cron("0 9 6 * *", tz=NY), "f", calendar=NYSE, on_excluded="next",
                 zone=NY)  # fmt: skip
    store.close()
    url = f"sqlite:///{tmp_path / 's.db'}"
    status = [sys.executable, "-m", "rota", "status", "--store", url]
    (entry,) = json.loads(subprocess.run([*status, "--json"], capture_output=True, text=True,
                                         timeout=60, check=True).stdout)  # fmt: skip
    assert (entry["next"], entry["moved_from"], entry["moved_why"]) == (
        ny(2026, 12, 7, 9), ny(2026, 12, 6, 9), "weekend",
    )  # fmt: skip
    shown = subprocess.run(status, capture_output=True, text=True, timeout=60, check=True)
    assert "2026-12-07T09:00:00-05:00 (moved from Sun 2026-12-06 09:00, weekend)" in shown.stdout


@pytest.mark.parametrize("kind", ["memory", "sqlite"])
def test_a_declaration_with_another_calendar_decides_the_next_run_again(
    kind: str, tmp_path: Any, request: pytest.FixtureRequest
) -> None:
    """What ``rota run`` does when a job file's calendar changes: ``ensure`` again."""
    from rota.durable import DurableScheduler

    store = make_store(kind, request, tmp_path)
    sched = DurableScheduler(store, clock=ManualClock(ny(2026, 12, 21, 12)))
    sched.register("f", lambda at: None)
    daily = Cron("0 9 * * *", tz=NY)
    plain_days = Calendar("nyse", tz=NY, weekends=())
    assert sched.ensure("d", daily, "f", calendar=plain_days)
    assert not sched.ensure("d", daily, "f", calendar=plain_days)  # the same: unchanged
    assert sched.next_run_time("d") == ny(2026, 12, 22, 9)
    holiday = Calendar("nyse", tz=NY, weekends=(), holidays=[date(2026, 12, 22)])
    assert sched.ensure("d", daily, "f", calendar=holiday)
    assert sched.next_run_time("d") == ny(2026, 12, 23, 9)
    assert sched.ensure("d", daily, "f")  # the calendar taken away
    assert sched.next_run_time("d") == ny(2026, 12, 22, 9)
    check_table(sched)
    store.close()


def test_calendar_skips_are_counted_before_the_misfire_policy(sched: Scheduler) -> None:
    """A week behind a daily task: the weekend and the holiday are the calendar's, the
    allowed slots missed are misfire's; COALESCE runs the latest allowed one."""
    sched.schedule("d", Cron("0 9 * * *", tz=NY), lambda at: None, calendar=NYSE,
                   misfire=Misfire.COALESCE)  # fmt: skip
    (outcome,) = sched.tick(ny(2026, 12, 29, 10))  # 22, 23, 24, (25, 26, 27), 28, 29
    assert outcome.at == ny(2026, 12, 29, 9)
    assert outcome.skipped_by == {"calendar": 3, "misfire": 4}


def test_deadline_and_jitter_count_from_the_moved_time(sched: Scheduler) -> None:
    sched.schedule("j", Cron("0 9 26 * *", tz=NY), lambda at: None, calendar=NYSE,
                   on_excluded="next", jitter=600, deadline=3600)  # fmt: skip
    due = sched.next_run_time("j")
    assert due is not None
    assert ny(2026, 12, 28, 9) <= due < ny(2026, 12, 28, 9, 10)
    (outcome,) = sched.tick(ny(2026, 12, 28, 9, 30))  # late, within the hour
    assert outcome.at == ny(2026, 12, 28, 9)
    assert outcome.skipped_by == {}


def test_backfill_runs_the_slots_the_calendar_allows(sched: Scheduler) -> None:
    runs = Runs()
    clock = sched.clock
    assert isinstance(clock, ManualClock)
    clock.set(ny(2026, 12, 29))
    sched.schedule("d", Cron("0 9 * * *", tz=NY), runs, calendar=NYSE)
    assert sched.backfill("d", ny(2026, 12, 22), ny(2026, 12, 29)) == 4  # not 25, 26, 27
    sched.tick(ny(2026, 12, 29))
    assert [slot for _at, slot, _key in runs.seen] == [
        ny(2026, 12, 22, 9), ny(2026, 12, 23, 9), ny(2026, 12, 24, 9), ny(2026, 12, 28, 9),
    ]  # fmt: skip


def test_a_concurrent_tasks_moved_run_keeps_its_slot(sched: Scheduler) -> None:
    runs = Runs()
    sched.schedule("c", Cron("0 9 26 * *", tz=NY), runs, calendar=NYSE, on_excluded="next",
                   overlap=Overlap.allow(2))  # fmt: skip
    hourly(sched, ny(2026, 12, 29))
    assert runs.seen == [(ny(2026, 12, 28, 9), ny(2026, 12, 26, 9), f"c@{ny(2026, 12, 26, 9)!r}")]
    assert sched.next_run_time("c") == ny(2027, 1, 26, 9)
    check_table(sched)


def test_reschedule_keeps_the_tasks_calendar(sched: Scheduler) -> None:
    sched.schedule("r", Cron("0 9 * * *", tz=NY), lambda at: None, calendar=NYSE,
                   on_excluded="next")  # fmt: skip
    assert sched.reschedule("r", Cron("0 9 26 * *", tz=NY))
    assert sched.next_run_time("r") == ny(2026, 12, 28, 9)  # Saturday's, moved
    info = sched.info("r")
    assert info is not None
    assert isinstance(info.schedule, Calendared)
    assert info.schedule.calendar == NYSE
