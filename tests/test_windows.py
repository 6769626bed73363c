"""The window every run covers (``RunContext.window_start``/``window_end``): where it
begins for a first run, a run after skipped or missed slots, a retry, a triggered and
a backfilled run, a run a calendar moved or merged; the same in memory and on every
store, across a restart; against a tiling oracle over random ticks."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from rota import FixedRate, ManualClock, Misfire, Overlap, RunContext, Runner, Scheduler
from rota.calendars import Calendar
from rota.cron import Cron
from rota.durable import DurableScheduler
from rota.retry import Backoff
from rota.store import SQLiteStore
from tests.helpers import WHERE, Collector, scheduler_on

START = 1_000_000.0


@pytest.fixture(params=WHERE)
def sched(request: pytest.FixtureRequest, tmp_path: Any) -> Iterator[Scheduler]:
    """A scheduler on a manual clock at :data:`START`, in memory and on every store."""
    made, store = scheduler_on(request.param, request, tmp_path, ManualClock(START))
    yield made
    if store is not None:
        store.close()


class Windows:
    """An action that keeps ``(slot, window_start, window_end, attempt)`` of each run,
    failing the attempts listed in ``fail`` (by slot)."""

    def __init__(self, fail: int = 0) -> None:
        self.seen: list[tuple[float, float, float, int]] = []
        self.fail = fail

    def __call__(self, at: float, *, run: RunContext) -> None:
        assert run.window_start is not None
        self.seen.append((run.slot, run.window_start, run.window_end, run.attempt))
        if run.attempt < self.fail:
            raise RuntimeError("not yet")

    def windows(self) -> list[tuple[float, float]]:
        return [(start, end) for _, start, end, _ in self.seen]


def ticks(sched: Scheduler, *times: float) -> None:
    for t in times:
        sched.clock.advance(t - sched.clock())  # type: ignore[attr-defined]
        sched.tick(t)


def test_a_fixed_rates_runs_each_cover_the_period_before_their_slot(sched: Scheduler) -> None:
    runs = Windows()
    sched.schedule("r", FixedRate(10), runs)
    ticks(sched, START, START + 10, START + 20)
    assert runs.windows() == [(START - 10, START), (START, START + 10), (START + 10, START + 20)]


def test_a_first_run_covers_from_when_it_was_scheduled(sched: Scheduler) -> None:
    runs = Windows()
    sched.schedule("c", Cron("0 * * * *"), runs)  # START is 13:46:40 UTC
    sched.schedule_once("o", 30, runs)
    ticks(sched, START + 30, START + 3600)
    assert runs.windows() == [(START, START + 30), (START, 1_000_800.0)]


def test_coalesced_slots_are_covered_by_the_run_that_stands_for_them(sched: Scheduler) -> None:
    runs = Windows()
    sched.schedule("c", FixedRate(10), runs, misfire=Misfire.COALESCE)
    ticks(sched, START, START + 45)  # 10, 20, 30, 40 missed: one run, slot 40
    assert runs.windows() == [(START - 10, START), (START, START + 40)]


def test_skipped_slots_are_covered_by_none(sched: Scheduler) -> None:
    runs = Windows()
    sched.schedule("s", FixedRate(10), runs, misfire=Misfire.SKIP)
    sched.schedule("d", FixedRate(10), runs, deadline=5)
    ticks(sched, START, START + 45, START + 50)
    outcomes = [w for w in runs.seen if w[0] == START + 50]
    # SKIP: 10..40 skipped, the run of 50 covers only its period; the deadline's
    # too (40 was in time at 45, so it ran: it covers from 30, skipped)
    assert {(s, e) for _, s, e, _ in outcomes} == {(START + 40, START + 50)}
    deadline_runs = [(s, e) for slot, s, e, _ in runs.seen if slot == START + 40]
    assert deadline_runs == [(START + 30, START + 40)]


def test_every_retry_of_a_slot_covers_the_slots_window(sched: Scheduler) -> None:
    runs = Windows(fail=2)
    sched.schedule("r", FixedRate(100), runs, max_retries=3, retry=Backoff(1, cap=1))
    ticks(sched, START, START + 1, START + 2, START + 100)
    assert [(w[0], w[1], w[3]) for w in runs.seen] == [
        (START, START - 100, 0),
        (START, START - 100, 1),
        (START, START - 100, 2),
        (START + 100, START, 0),
    ]


def test_a_trigger_covers_from_the_latest_slot_to_now_and_the_schedule_goes_on(
    sched: Scheduler,
) -> None:
    runs = Windows()
    sched.schedule("r", FixedRate(10), runs)
    ticks(sched, START)
    ticks(sched, START + 4)
    assert sched.trigger("r")
    ticks(sched, START + 4, START + 10)
    assert runs.windows() == [
        (START - 10, START),
        (START, START + 4),  # the trigger's run
        (START, START + 10),  # the schedule's next covers its own period still
    ]


def test_a_backfilled_slot_covers_its_own_window(sched: Scheduler) -> None:
    runs = Windows()
    sched.schedule("r", FixedRate(10, start=START), runs)
    ticks(sched, START + 30)  # catch-up: 0, 10, 20, 30
    del runs.seen[:]
    sched.clock.advance(5)  # type: ignore[attr-defined]
    assert sched.backfill("r", START - 30, START) == 3
    ticks(sched, START + 35, START + 40)
    assert runs.windows() == [
        (START - 40, START - 30),
        (START - 30, START - 20),
        (START - 20, START - 10),
        (START + 30, START + 40),
    ]


def test_a_run_a_calendar_merges_covers_the_slots_merged_into_it(sched: Scheduler) -> None:
    # weekends excluded; START is Monday 1970-01-12 13:46:40 UTC
    week = Calendar("week", tz="UTC")
    merged, skipped = Windows(), Windows()
    sched.schedule("m", Cron("0 9 * * *"), merged, calendar=week, on_excluded="next")
    sched.schedule("s", Cron("0 9 * * *"), skipped, calendar=week)
    day = 86400.0
    monday_9 = START - (13 * 3600 + 46 * 60 + 40) + 9 * 3600
    for k in range(1, 8):
        ticks(sched, monday_9 + k * day + 1)
    friday, next_monday = monday_9 + 4 * day, monday_9 + 7 * day
    found = [(w[0], w[1]) for w in merged.seen if w[2] == next_monday]
    # Saturday's and Sunday's merged into Monday's run: it covers from Friday
    assert found == [(next_monday, friday)]
    found = [(w[0], w[1]) for w in skipped.seen if w[2] == next_monday]
    assert found == [(next_monday, monday_9 + 6 * day)]  # Sunday's skipped, not covered


def test_windows_carry_on_across_a_restart(tmp_path: Any) -> None:
    """The window is stored with the task: another process over the same file goes on
    where the first left."""
    path = tmp_path / "w.db"
    clock = ManualClock(START)
    runs = Windows()
    store = SQLiteStore(path)
    first = DurableScheduler(store, clock=clock)
    first.register("runs", runs)
    first.schedule("r", FixedRate(10), runs, misfire=Misfire.COALESCE)
    first.tick(START)
    store.close()
    clock.advance(35)
    store = SQLiteStore(path)
    again = DurableScheduler(store, clock=clock)
    again.register("runs", runs)
    again.tick(START + 35)
    store.close()
    assert runs.windows() == [(START - 10, START), (START, START + 30)]


@settings(max_examples=40, deadline=None, suppress_health_check=list(HealthCheck))
@given(
    period=st.sampled_from([1.0, 7.0, 60.0]),
    policy=st.sampled_from([None, Misfire.COALESCE, Misfire.bounded(2), Misfire.SKIP]),
    jumps=st.lists(st.floats(0.0, 200.0), min_size=1, max_size=12),
)
def test_runs_tile_time_or_cover_their_period_whatever_the_ticks(
    period: float, policy: Misfire | None, jumps: list[float]
) -> None:
    """Oracle: under catch-up and ``SKIP`` every run covers exactly its period; under
    coalescing (``COALESCE``, ``bounded(k)``) the runs tile time with no gap and no
    overlap, from one period before the first slot."""
    clock = ManualClock(START)
    sched = Scheduler(clock=clock, epoch=True)
    runs = Windows()
    sched.schedule("r", FixedRate(period), runs, misfire=policy)
    for jump in jumps:
        clock.advance(jump)
        sched.tick(clock())
    if policy is None or policy is Misfire.SKIP:
        assert all(start == end - period for start, end in runs.windows())
    else:
        edges = [START - period] + [end for _, end in runs.windows()]
        assert [start for start, _ in runs.windows()] == edges[:-1]


def test_the_last_skipped_slot_is_known_whatever_skipped_it(sched: Scheduler) -> None:
    """``info().last_skipped``: ``(slot, reason, detail)`` for a misfire, a deadline, an
    overlap's skip as for a calendar's, in memory and on every store."""
    runs = Windows()
    sched.schedule("m", FixedRate(10), runs, misfire=Misfire.COALESCE)
    sched.schedule("s", FixedRate(10), runs, misfire=Misfire.SKIP)
    sched.schedule("d", FixedRate(10), runs, deadline=5)
    sched.schedule("n", FixedRate(10), runs)
    ticks(sched, START)
    assert sched.info("m").last_skipped is None  # type: ignore[union-attr]
    ticks(sched, START + 47)
    assert sched.info("m").last_skipped == (START + 30, "misfire", None)  # type: ignore[union-attr]
    assert sched.info("s").last_skipped == (START + 40, "misfire", None)  # type: ignore[union-attr]
    assert sched.info("d").last_skipped == (START + 40, "deadline", None)  # type: ignore[union-attr]
    assert sched.info("n").last_skipped is None  # type: ignore[union-attr]


def test_an_overlaps_skip_is_the_last_skipped_slot_and_not_covered(sched: Scheduler) -> None:
    clock = sched.clock
    runs = Windows()
    seen = Collector()

    def slow_first(at: float, *, run: RunContext) -> None:
        runs(at, run=run)
        if run.slot == START:
            clock.advance(25)  # type: ignore[attr-defined]  # slots 10 and 20 fall due meanwhile

    with Runner(sched, on_outcome=seen):
        sched.schedule("o", FixedRate(10), slow_first, overlap=Overlap.SKIP)
        seen.wait_for(1)
        clock.set(START + 30)  # type: ignore[attr-defined]
        seen.wait_for(2)
    assert sched.info("o").last_skipped == (START + 20, "overlap", None)  # type: ignore[union-attr]
    assert runs.windows() == [(START - 10, START), (START + 20, START + 30)]
