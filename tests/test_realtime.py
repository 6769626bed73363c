"""A few real-time runner checks on the real clock, with generous bounds.

Everything else about the runners is tested step by step with a ManualClock;
these check that the real sleeping and waking work. Bounds are loose (this
runs on shared CI machines); speed is measured in bench/, not here.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import threading
import time
from typing import Any

import pytest

from rota import AsyncRunner, Runner, Scheduler, Status
from tests.helpers import Collector

pytestmark = pytest.mark.realtime
SLACK = 0.5  # seconds of tolerated lateness


def test_a_50ms_task_starts_on_time() -> None:
    sched = Scheduler()
    seen = Collector()
    with Runner(sched, on_outcome=seen):
        sched.schedule_once("a", 0.05, lambda at: None)
        (outcome,) = seen.wait_for(1)
    assert 0 <= outcome.lag < SLACK
    assert outcome.started >= outcome.at


def test_an_earlier_insert_wakes_a_runner_sleeping_an_hour() -> None:
    sched = Scheduler()
    seen = Collector()
    sched.schedule_once("far", 3600, lambda at: None)
    with Runner(sched, on_outcome=seen):
        time.sleep(0.05)  # let it fall asleep on the far task
        start = time.monotonic()
        sched.schedule_once("soon", 0.01, lambda at: None)
        seen.wait_for(1)
        assert time.monotonic() - start < SLACK
    assert sched.status("far") is Status.SCHEDULED


def test_stop_returns_promptly_while_idle() -> None:
    sched = Scheduler()
    sched.schedule_once("far", 3600, lambda at: None)
    runner = Runner(sched)
    runner.start()
    time.sleep(0.05)
    start = time.monotonic()
    assert runner.stop(timeout=5) is True
    assert time.monotonic() - start < SLACK


def test_stop_from_inside_an_action_on_the_real_clock() -> None:
    sched = Scheduler()
    runner = Runner(sched)
    seen: list[bool] = []
    done = threading.Event()

    def stopper(at: float) -> None:
        seen.append(runner.stop())
        done.set()

    sched.schedule_once("stop", 0.01, stopper)
    runner.start()
    assert done.wait(5)
    assert runner.stop(timeout=5) is True
    assert seen == [True]


def test_a_slow_pool_action_does_not_delay_a_fast_one() -> None:
    sched = Scheduler()
    seen = Collector()
    release = threading.Event()
    pool = concurrent.futures.ThreadPoolExecutor(4)
    with pool, Runner(sched, executor=pool, on_outcome=seen):
        sched.schedule_once("slow", 0, lambda at: release.wait(5))
        sched.schedule_once("fast", 0.05, lambda at: None)
        (fast,) = seen.wait_for(1)
        release.set()
        seen.wait_for(2)
    assert fast.task_id == "fast"
    assert fast.lag < SLACK


def test_a_fixed_rate_task_slower_than_its_period_never_overlaps() -> None:
    sched = Scheduler()
    seen = Collector()
    active = [0]
    overlaps: list[Any] = []
    lock = threading.Lock()

    def slow(at: float) -> None:
        with lock:
            active[0] += 1
            if active[0] > 1:
                overlaps.append(at)
        time.sleep(0.03)  # three periods
        with lock:
            active[0] -= 1

    pool = concurrent.futures.ThreadPoolExecutor(4)
    with pool, Runner(sched, executor=pool, on_outcome=seen):
        sched.schedule_at_fixed_rate("slow", 0, 0.01, slow)
        got = seen.wait_for(5)
        sched.cancel("slow")
    assert overlaps == []
    ats = [o.at for o in got]
    assert ats == sorted(ats)


def test_on_outcome_raising_changes_nothing_on_the_real_clock(
    caplog: pytest.LogCaptureFixture,
) -> None:
    sched = Scheduler()
    calls: list[Any] = []
    done = threading.Event()

    def observer(outcome: Any) -> None:
        calls.append(outcome)
        if len(calls) >= 3:
            done.set()
        raise RuntimeError("observer bug")

    with Runner(sched, on_outcome=observer):
        sched.schedule_at_fixed_rate("r", 0, 0.01, lambda at: None)
        assert done.wait(5)
    assert "on_outcome raised" in caplog.text


def test_async_runner_on_the_real_clock() -> None:
    sched = Scheduler()
    seen = Collector()

    async def co(at: float) -> None:
        await asyncio.sleep(0.01)

    async def main() -> None:
        async with AsyncRunner(sched, on_outcome=seen):
            sched.schedule_once("far", 3600, lambda at: None)
            sched.schedule_once("co", 0.05, co)
            sched.schedule_at_fixed_rate("tick", 0, 0.02, lambda at: None)
            while len(seen.outcomes) < 5:
                await asyncio.sleep(0.01)

    asyncio.run(main())
    lags = [o.lag for o in seen.outcomes]
    assert max(lags) < SLACK
