"""The runners honour every policy: stepped with a ManualClock, no sleeps."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Any

from rota import (
    AsyncRunner,
    FixedDelay,
    FixedRate,
    ManualClock,
    Misfire,
    Runner,
    Scheduler,
    Stats,
)
from tests.helpers import Collector

Make = Callable[..., Scheduler]


def test_runner_orders_same_time_runs_by_priority(make_sched: Make) -> None:
    sched = make_sched(clock=ManualClock(0))
    for name, priority in [("c", 2), ("a", -1), ("b", 0), ("d", 2)]:
        sched.schedule_once(name, 0, lambda at: None, priority=priority)
    seen = Collector()
    with Runner(sched, on_outcome=seen):
        got = seen.wait_for(4)
    assert [o.task_id for o in got] == ["a", "b", "c", "d"]


def test_runner_fixed_delay_counts_from_the_clock_at_completion(make_sched: Make) -> None:
    clock = ManualClock(1000)
    sched = make_sched(clock=clock)
    seen = Collector()

    def three_units_long(at: Any) -> None:
        clock.advance(3)

    with Runner(sched, on_outcome=seen):
        sched.schedule("d", FixedDelay(5), three_units_long)
        (first,) = seen.wait_for(1)
        assert first.at == 1000
        assert sched.next_run_time() == 1008  # finished at 1003, plus 5
        clock.set(1008)
        assert [o.at for o in seen.wait_for(2)] == [1000, 1008]


def test_runner_applies_misfire_policies_and_stats_count_skips(make_sched: Make) -> None:
    clock = ManualClock(0)
    sched = make_sched(clock=clock)
    seen = Collector()
    with Runner(sched, on_outcome=seen) as runner:
        sched.schedule("r", FixedRate(10), lambda at: None, misfire=Misfire.COALESCE)
        seen.wait_for(1)
        clock.set(45)  # 10, 20, 30 and 40 are due at once: run once, for 40
        got = seen.wait_for(2)
        stats = runner.stats()
    assert [(o.at, o.skipped) for o in got] == [(0, 0), (40, 3)]
    assert stats.skipped == 3


def test_runner_pause_and_resume(make_sched: Make) -> None:
    clock = ManualClock(0)
    sched = make_sched(clock=clock)
    seen = Collector()
    with Runner(sched, on_outcome=seen):
        sched.schedule_at_fixed_rate("r", 10, 10, lambda at: None)
        sched.pause("r")
        clock.set(25)
        sched.schedule_once("marker", 0, lambda at: None)
        assert [o.task_id for o in seen.wait_for(1)] == ["marker"]  # "r" did not run
        sched.resume("r")  # wakes the dispatcher: 10 and 20 are due
        got = seen.wait_for(3)
    assert [(o.task_id, o.at) for o in got] == [("marker", 25), ("r", 10), ("r", 20)]


def test_async_runner_fixed_delay_and_coalesce(make_sched: Make) -> None:
    clock = ManualClock(0)
    sched = make_sched(clock=clock)
    outcomes: list[Any] = []

    async def wait_for(n: int) -> None:
        async def reached() -> None:
            while len(outcomes) < n:
                await asyncio.sleep(0)

        await asyncio.wait_for(reached(), 10)

    async def main() -> None:
        async with AsyncRunner(sched, on_outcome=outcomes.append):
            sched.schedule("d", FixedDelay(4), lambda at: None)
            sched.schedule("r", FixedRate(10), lambda at: None, misfire=Misfire.COALESCE)
            await wait_for(2)
            clock.set(35)
            await wait_for(4)

    asyncio.run(main())
    assert [(o.task_id, o.at, o.skipped) for o in outcomes[:4]] == [
        ("d", 0, 0), ("r", 0, 0), ("d", 4, 0), ("r", 30, 2)
    ]  # fmt: skip


def test_stats_from_tick_outcomes(make_sched: Make) -> None:
    sched = make_sched(clock=ManualClock(0))
    stats = Stats()
    sched.schedule("r", FixedRate(10), lambda at: None, misfire=Misfire.SKIP)
    sched.schedule_once("bad", 0, _fail, max_retries=1)
    stats.record_all(sched.tick(0))
    stats.record_all(sched.tick(35))
    stats.record_all(sched.tick(40))
    snap = stats.snapshot()
    assert (snap.ok, snap.retry, snap.failed, snap.skipped, snap.runs) == (2, 1, 1, 3, 4)
    assert snap.lag_max == 34  # the retry due at 1 ran in tick(35)
    assert snap.lag_p50 == 0


def _fail(at: Any) -> None:
    raise ValueError(at)
