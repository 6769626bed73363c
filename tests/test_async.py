"""AsyncRunner: stepped with a ManualClock inside asyncio.run (no sleeps on the clock)."""

from __future__ import annotations

import asyncio
import concurrent.futures
import threading
from collections.abc import Awaitable, Callable
from typing import Any

import pytest

from rota import AsyncRunner, ManualClock, Result, RunCancelled, RunOutcome, Scheduler, Status
from tests.helpers import Collector, rows

TIMEOUT = 10.0


class AsyncCollector(Collector):
    """A Collector a coroutine can wait on, yielding to the loop meanwhile."""

    async def wait_for_async(self, n: int) -> list[RunOutcome]:
        async def reached() -> None:
            while len(self.outcomes) < n:
                await asyncio.sleep(0)  # yield to the loop; the clock is not involved

        await asyncio.wait_for(reached(), TIMEOUT)
        return list(self.outcomes)


def run(main: Callable[[], Awaitable[Any]]) -> Any:
    return asyncio.run(main())  # type: ignore[arg-type]


def test_runs_when_the_manual_clock_moves() -> None:
    clock = ManualClock(1000)
    sched = Scheduler(clock=clock)
    seen = AsyncCollector()

    async def main() -> None:
        async with AsyncRunner(sched, on_outcome=seen) as runner:
            assert runner.is_running
            sched.schedule_once("a", 10, lambda at: None)
            sched.schedule_at_fixed_rate("r", 0, 10, lambda at: None)
            assert rows(await seen.wait_for_async(1)) == [("r", 1000, "ok", 0)]
            clock.advance(10)
            assert rows(await seen.wait_for_async(3)) == [
                ("r", 1000, "ok", 0), ("a", 1010, "ok", 0), ("r", 1010, "ok", 0)
            ]  # fmt: skip
        assert not runner.is_running

    run(main)


def test_a_coroutine_action_is_awaited_and_delays_no_other_task() -> None:
    clock = ManualClock(0)
    sched = Scheduler(clock=clock)
    seen = AsyncCollector()
    gate = asyncio.Event()
    overlap: list[Any] = []
    active = [0]

    async def slow(at: Any) -> None:
        active[0] += 1
        if active[0] > 1:
            overlap.append(at)
        await gate.wait()
        active[0] -= 1

    async def main() -> None:
        async with AsyncRunner(sched, on_outcome=seen):
            sched.schedule_at_fixed_rate("slow", 0, 10, slow)
            sched.schedule_at_fixed_rate("fast", 0, 5, lambda at: None)
            await seen.wait_for_async(1)
            clock.advance(25)
            got = await seen.wait_for_async(6)
            assert [o.task_id for o in got] == ["fast"] * 6
            assert sched.status("slow") is Status.RUNNING
            gate.set()
            got = await seen.wait_for_async(9)
            assert [o.at for o in got if o.task_id == "slow"] == [0, 10, 20]

    run(main)
    assert overlap == []


def test_a_coroutine_failure_is_retried() -> None:
    clock = ManualClock(0)
    sched = Scheduler(clock=clock, backoff=2)
    seen = AsyncCollector()
    calls = [0]

    async def flaky(at: Any) -> None:
        await asyncio.sleep(0)
        calls[0] += 1
        if calls[0] == 1:
            raise ConnectionError("first call fails")

    async def main() -> None:
        async with AsyncRunner(sched, on_outcome=seen):
            sched.schedule_once("a", 0, flaky, max_retries=1)
            await seen.wait_for_async(1)
            clock.advance(2)
            got = await seen.wait_for_async(2)
        assert rows(got) == [("a", 0, "retry", 0), ("a", 2, "ok", 1)]
        assert isinstance(got[0].error, ConnectionError)

    run(main)


def test_scheduling_from_another_thread_wakes_the_loop() -> None:
    sched = Scheduler(clock=ManualClock(0))
    seen = AsyncCollector()

    async def main() -> None:
        async with AsyncRunner(sched, on_outcome=seen):
            sched.schedule_once("far", 3600, lambda at: None)
            await asyncio.sleep(0)
            thread = threading.Thread(target=sched.schedule_once, args=("now", 0, lambda at: None))
            thread.start()
            thread.join(TIMEOUT)
            assert rows(await seen.wait_for_async(1)) == [("now", 0, "ok", 0)]

    run(main)


def test_exit_awaits_runs_then_cancels_them_after_the_timeout() -> None:
    sched = Scheduler(clock=ManualClock(0))
    seen = AsyncCollector()
    finished: list[str] = []

    async def quick(at: Any) -> None:
        await asyncio.sleep(0)
        finished.append("quick")

    async def forever(at: Any) -> None:
        await asyncio.Event().wait()

    async def main() -> None:
        runner = AsyncRunner(sched, on_outcome=seen, shutdown_timeout=0.05)
        async with runner:
            sched.schedule_once("quick", 0, quick)
            sched.schedule_once("forever", 0, forever)
            await asyncio.sleep(0)
        assert finished == ["quick"]
        got = {o.task_id: o for o in seen.outcomes}
        assert got["quick"].result is Result.OK
        assert got["forever"].result is Result.FAILED
        assert isinstance(got["forever"].error, asyncio.CancelledError)
        assert sched.status("forever") is Status.FAILED

    run(main)


class Forever:
    """A coroutine action that waits until cancelled, noting that it cleaned up.
    Module-level (``tests.test_async:FOREVER``), so a durable store can name it."""

    def __init__(self) -> None:
        self.reset()

    def reset(self) -> None:
        """Anew, for a test's loop."""
        self.started = asyncio.Event()
        self.cleaned: list[str] = []

    async def __call__(self, at: Any) -> None:
        self.started.set()
        try:
            await asyncio.Event().wait()
        finally:
            self.cleaned.append("cleaned up")


FOREVER = Forever()


@pytest.mark.parametrize("durable", [False, True], ids=["memory", "durable"])
def test_cancelling_a_task_cancels_its_running_coroutine_and_alerts_nobody(
    durable: bool, caplog: pytest.LogCaptureFixture
) -> None:
    """The coroutine of a cancelled task kept running, then was cancelled at
    shutdown and logged at ERROR as a failure (an alert for a run someone stopped)."""
    FOREVER.reset()
    clock = ManualClock(0)
    sched: Scheduler
    if durable:
        from rota import DurableScheduler
        from rota.store import MemoryStore

        sched = DurableScheduler(MemoryStore(), clock=clock)
    else:
        sched = Scheduler(clock=clock)
    seen = AsyncCollector()

    async def main() -> None:
        async with AsyncRunner(sched, on_outcome=seen, shutdown_timeout=TIMEOUT):
            action: Any = "tests.test_async:FOREVER" if durable else FOREVER
            sched.schedule_once("long", 0, action)
            await asyncio.wait_for(FOREVER.started.wait(), TIMEOUT)
            assert sched.cancel("long")
            [outcome] = await seen.wait_for_async(1)  # before the runner stops
        assert outcome.result is Result.FAILED
        assert isinstance(outcome.error, RunCancelled)
        assert FOREVER.cleaned == ["cleaned up"]
        assert sched.status("long") is Status.CANCELLED

    with caplog.at_level("INFO", logger="rota"):
        run(main)
    runs = [r for r in caplog.records if r.name == "rota.runs"]
    assert [r.levelname for r in runs] == ["INFO"]
    assert " cancelled (attempt 0)" in runs[0].getMessage()
    assert not [r for r in caplog.records if r.levelname == "ERROR"]


def test_plain_actions_run_off_the_loop_with_an_executor() -> None:
    clock = ManualClock(0)
    sched = Scheduler(clock=clock)
    seen = AsyncCollector()
    threads: list[int] = []

    async def main() -> None:
        loop_thread = threading.get_ident()
        with concurrent.futures.ThreadPoolExecutor(2) as pool:
            async with AsyncRunner(sched, executor=pool, on_outcome=seen):
                sched.schedule_once("plain", 0, lambda at: threads.append(threading.get_ident()))
                await seen.wait_for_async(1)
        assert threads
        assert threads[0] != loop_thread

    run(main)


def test_start_needs_a_running_loop_and_happens_once() -> None:
    sched = Scheduler(clock=ManualClock(0))
    runner = AsyncRunner(sched)
    with pytest.raises(RuntimeError):
        runner.start()

    async def main() -> None:
        runner.start()
        with pytest.raises(RuntimeError, match="already started"):
            runner.start()
        assert await runner.stop() is True
        assert await runner.stop() is True

    run(main)


def test_bad_shutdown_timeout_is_refused() -> None:
    with pytest.raises(ValueError, match="shutdown_timeout must be a finite number >= 0, got -1"):
        AsyncRunner(Scheduler(), shutdown_timeout=-1)


def test_tick_refuses_a_coroutine_action_without_leaking_it() -> None:
    sched = Scheduler(clock=ManualClock(0))

    async def co(at: Any) -> None:
        pass

    sched.schedule_once("c", 0, co)
    (outcome,) = sched.tick(0)
    assert outcome.result is Result.FAILED
    assert isinstance(outcome.error, TypeError)
    assert "run async actions under AsyncRunner" in str(outcome.error)
