"""Regression tests for the runners under faults: nothing hangs, nothing is stuck.

Each test names the defect of issue 8 it pins (``#n``). Every wait is bounded
and asserted; runners are stepped with a ManualClock where time matters.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import logging
import math
import threading
import time
from collections.abc import Callable, Iterator
from typing import Any

import pytest

from rota import AsyncRunner, ManualClock, Result, Runner, Scheduler, Status
from rota._scheduling.tasks import LocalTasks
from tests.helpers import Collector, rows

TIMEOUT = 10.0


def ok(at: Any) -> None:
    return None


@pytest.fixture
def pool() -> Iterator[concurrent.futures.ThreadPoolExecutor]:
    executor = concurrent.futures.ThreadPoolExecutor(max_workers=2)
    yield executor
    executor.shutdown(wait=True, cancel_futures=True)


# -- #1: a valid far-future delay under the real clock ---------------------------------


@pytest.mark.parametrize("delay", [1e10, 1e300])
def test_a_far_future_task_does_not_kill_the_dispatcher(delay: float) -> None:
    s = Scheduler()  # time.monotonic: the dispatcher really sleeps
    seen = Collector()
    with Runner(s, on_outcome=seen) as runner:
        s.schedule_once("far", delay, ok)
        time.sleep(0.05)  # the dispatcher goes to sleep for "far"
        assert runner.is_running
        s.schedule_once("soon", 0.01, ok)
        assert rows(seen.wait_for(1))[0][0] == "soon"
        assert runner.is_running
    assert s.status("far") is Status.SCHEDULED


# -- #3: stop() from inside a run never deadlocks on its own worker ---------------------


@pytest.mark.parametrize("where", ["action", "on_outcome"])
def test_stop_from_inside_with_a_pool_of_one_and_two_runs_due(where: str) -> None:
    clock = ManualClock(0)
    s = Scheduler(clock=clock)
    results: list[bool] = []
    called = threading.Event()
    executor = concurrent.futures.ThreadPoolExecutor(max_workers=1)
    runner: Runner

    def b_is_queued() -> None:  # so that the stop below has a run to wait for: b
        deadline = time.monotonic() + TIMEOUT
        while s.status("b") is not Status.QUEUED:
            assert time.monotonic() < deadline
            time.sleep(0.001)

    def stopper(at: Any) -> None:
        if where == "action":
            b_is_queued()
            results.append(runner.stop())
            called.set()

    def on_outcome(outcome: Any) -> None:
        if where == "on_outcome" and outcome.task_id == "a":
            b_is_queued()
            results.append(runner.stop())
            called.set()

    runner = Runner(s, executor=executor, on_outcome=on_outcome)
    s.schedule_once("a", 0, stopper)
    s.schedule_once("b", 0, ok)
    runner.start()
    try:
        assert called.wait(TIMEOUT)
        assert runner.stop(timeout=TIMEOUT) is True
    finally:
        executor.shutdown(wait=False, cancel_futures=True)
    assert results == [False]  # from inside: it does not wait; b was still in flight
    assert (s.status("a"), s.status("b")) == (Status.DONE, Status.DONE)


def test_two_actions_in_a_pool_of_two_both_calling_stop(
    pool: concurrent.futures.ThreadPoolExecutor,
) -> None:
    s = Scheduler(clock=ManualClock(0))
    both = threading.Barrier(3, timeout=TIMEOUT)  # both actions and this test
    results: list[bool] = []
    runner = Runner(s, executor=pool)

    def stopper(at: Any) -> None:
        both.wait()
        results.append(runner.stop())

    s.schedule_once("a", 0, stopper)
    s.schedule_once("b", 0, stopper)
    runner.start()
    both.wait()
    assert runner.stop(timeout=TIMEOUT) is True
    assert len(results) == 2
    assert (s.status("a"), s.status("b")) == (Status.DONE, Status.DONE)


# -- #4: executors whose futures end without running the work --------------------------


class FailingExecutor(concurrent.futures.Executor):
    """Accepts work, then fails its future without running it."""

    def submit(self, fn: Callable[..., Any], /, *args: Any, **kwargs: Any) -> Any:
        future: concurrent.futures.Future[Any] = concurrent.futures.Future()
        future.set_exception(OSError("worker lost"))
        return future


def test_an_executor_failing_a_future_unrun_fails_the_run(caplog: Any) -> None:
    clock = ManualClock(0)
    s = Scheduler(clock=clock)
    seen = Collector()
    s.schedule_once("t", 0, ok, max_retries=1)
    runner = Runner(s, executor=FailingExecutor(), on_outcome=seen)
    with caplog.at_level(logging.ERROR, logger="rota"):
        runner.start()
        seen.wait_for(1)
        clock.advance(1)  # the retry
        got = seen.wait_for(2)
        assert runner.stop(timeout=TIMEOUT) is True  # nothing stuck in flight
    assert [(o.result, type(o.error)) for o in got] == [
        (Result.RETRY, OSError),
        (Result.FAILED, OSError),
    ]
    assert s.status("t") is Status.FAILED
    assert "executor did not run task 't'" in caplog.text


def test_an_async_runner_with_a_failing_executor_fails_the_run() -> None:
    s = Scheduler(clock=ManualClock(0))
    seen = Collector()

    async def main() -> None:
        async with AsyncRunner(s, executor=FailingExecutor(), on_outcome=seen):
            s.schedule_once("t", 0, ok)
            for _ in range(1000):
                if seen.outcomes:
                    break
                await asyncio.sleep(0)

    asyncio.run(main())
    assert [(o.result, type(o.error)) for o in seen.outcomes] == [(Result.FAILED, OSError)]
    assert s.status("t") is Status.FAILED


def test_a_process_pool_is_refused_with_a_clear_message() -> None:
    executor = concurrent.futures.ProcessPoolExecutor(max_workers=1)
    try:
        for runner in (Runner, AsyncRunner):
            with pytest.raises(TypeError, match="ProcessPoolExecutor cannot serve"):
                runner(Scheduler(), executor=executor)
    finally:
        executor.shutdown()


# -- #5 under asyncio: a NaN never reaches the event loop --------------------------------


def test_a_nan_from_a_cursor_does_not_corrupt_the_event_loop() -> None:
    s = Scheduler(clock=ManualClock(0))
    values = iter([0, math.nan])
    ticks: list[int] = []

    class Nan:
        def start(self, now: Any) -> Nan:
            return self

        def next(self, now: Any) -> Any:
            return next(values)

    async def ticker() -> None:
        for i in range(20):
            await asyncio.sleep(0.001)
            ticks.append(i)

    async def main() -> None:
        async with AsyncRunner(s):
            s.schedule("nan", Nan(), ok)
            await asyncio.wait_for(ticker(), TIMEOUT)

    asyncio.run(main())
    assert ticks == list(range(20))
    assert s.status("nan") is Status.FAILED


# -- #7, #8: AsyncRunner exit is bounded, and waits for handed-back coroutines -------------


def test_async_exit_is_bounded_when_a_coroutine_swallows_cancellation() -> None:
    s = Scheduler(clock=ManualClock(0))
    seen = Collector()

    async def stubborn(at: Any) -> None:
        with contextlib.suppress(asyncio.CancelledError):  # swallowed: it goes on
            await asyncio.sleep(3600)
        await asyncio.sleep(5)  # for longer than CANCEL_GRACE

    async def main() -> float:
        runner = AsyncRunner(s, on_outcome=seen, shutdown_timeout=0.05)
        start = time.monotonic()
        async with runner:
            s.schedule_once("stubborn", 0, stubborn)
            await asyncio.sleep(0.01)
        return time.monotonic() - start

    elapsed = asyncio.run(main())
    assert elapsed < 0.05 + 1.0 + 2.0  # shutdown_timeout + CANCEL_GRACE + slack
    assert rows(seen.outcomes) == [("stubborn", 0, "failed", 0)]
    assert isinstance(seen.outcomes[0].error, asyncio.CancelledError)
    assert s.status("stubborn") is Status.FAILED


def test_async_exit_waits_for_a_coroutine_a_worker_handed_back(
    pool: concurrent.futures.ThreadPoolExecutor,
) -> None:
    s = Scheduler(clock=ManualClock(0))
    seen = Collector()
    finished: list[str] = []

    async def slow(at: Any) -> None:
        await asyncio.sleep(0.1)
        finished.append("slow")

    def hands_back(at: Any) -> Any:
        time.sleep(0.05)  # exit begins while the worker still runs the plain part
        return slow(at)

    async def main() -> None:
        async with AsyncRunner(s, executor=pool, on_outcome=seen, shutdown_timeout=TIMEOUT):
            s.schedule_once("t", 0, hands_back)
            await asyncio.sleep(0.01)

    asyncio.run(main())
    assert finished == ["slow"]
    assert rows(seen.outcomes) == [("t", 0, "ok", 0)]


# -- #9: a clock that raises once ----------------------------------------------------------


class FlakyClock:
    """A clock on a ManualClock whose chosen reads by the runner's threads raise."""

    def __init__(self, fail_on: set[int]) -> None:
        self.inner = ManualClock(0)
        self.reads = 0
        self.fail_on = fail_on
        self.on_change = self.inner.on_change

    def __call__(self) -> Any:
        if threading.current_thread() is not threading.main_thread():
            self.reads += 1
            if self.reads in self.fail_on:
                raise OSError(f"clock read {self.reads} failed")
        return self.inner()


@pytest.mark.parametrize("read", range(1, 8))
def test_a_clock_raising_once_neither_kills_the_runner_nor_strands_a_run(
    read: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr("rota._runners.thread.CLOCK_RETRY", 0.01)
    clock = FlakyClock({read})
    s = Scheduler(clock=clock)
    s.schedule_once("a", 0, ok)
    seen = Collector()
    runner = Runner(s, on_outcome=seen)
    runner.start()
    s.schedule_once("b", 0, ok)
    got = seen.wait_for(2)
    assert sorted(str(o.task_id) for o in got) == ["a", "b"]
    assert runner.is_running
    assert runner.stop(timeout=TIMEOUT) is True
    assert (s.status("a"), s.status("b")) == (Status.DONE, Status.DONE)


def test_a_clock_failing_at_start_fails_start() -> None:
    s = Scheduler(clock=lambda: math.nan)
    with pytest.raises(ValueError, match="the clock returned nan"):
        Runner(s).start()


# -- #10: one rule for fatal errors, under every driver ----------------------------------


def exits(at: Any) -> None:
    raise SystemExit(3)


async def interrupts(at: Any) -> None:
    await asyncio.sleep(0)
    raise KeyboardInterrupt


def test_a_fatal_error_in_a_pool_stops_the_runner_and_reaches_stop(
    pool: concurrent.futures.ThreadPoolExecutor,
) -> None:
    s = Scheduler(clock=ManualClock(0))
    seen = Collector()
    runner = Runner(s, executor=pool, on_outcome=seen)
    s.schedule_once("exit", 0, exits, max_retries=3)
    runner.start()
    assert rows(seen.wait_for(1)) == [("exit", 0, "failed", 0)]
    s.schedule_once("later", 0, ok)
    with pytest.raises(SystemExit):
        runner.stop(timeout=TIMEOUT)
    assert s.status("later") is Status.SCHEDULED
    assert not runner.is_running


@pytest.mark.parametrize("action", [exits, interrupts], ids=["plain", "async"])
def test_a_fatal_error_under_asyncio_stops_the_runner_and_reaches_exit(action: Any) -> None:
    s = Scheduler(clock=ManualClock(0))
    seen = Collector()

    async def main() -> None:
        async with AsyncRunner(s, on_outcome=seen) as runner:
            s.schedule_once("fatal", 0, action)
            for _ in range(1000):
                if seen.outcomes:
                    break
                await asyncio.sleep(0)
            assert not runner.is_running
            s.schedule_once("later", 0, ok)
            await asyncio.sleep(0)

    with pytest.raises((SystemExit, KeyboardInterrupt)):
        asyncio.run(main())
    assert rows(seen.outcomes) == [("fatal", 0, "failed", 0)]
    assert s.status("later") is Status.SCHEDULED


# -- #14: no run is claimed after stop(wait=False) has returned ---------------------------


def test_no_claim_after_stop_returns(pool: concurrent.futures.ThreadPoolExecutor) -> None:
    for _ in range(30):
        s = Scheduler(clock=ManualClock(0))
        for i in range(200):
            s.schedule_once(i, 0, ok)
        runner = Runner(s, executor=pool)
        runner.start()
        runner.stop(wait=False)
        claimed = [i for i in range(200) if s.status(i) is not Status.SCHEDULED]
        assert runner.stop(timeout=TIMEOUT) is True
        assert [i for i in range(200) if s.status(i) is not Status.SCHEDULED] == claimed


# -- small ones -------------------------------------------------------------------------


def test_stop_without_waiting_is_true_when_nothing_is_in_flight() -> None:
    runner = Runner(Scheduler(clock=ManualClock(0)))
    runner.start()
    assert runner.stop(wait=False) is True
    assert runner.stop(timeout=TIMEOUT) is True


@pytest.mark.parametrize("bad", [True, math.inf, math.nan, "1"])
def test_bad_shutdown_timeouts_are_refused(bad: Any) -> None:
    with pytest.raises((TypeError, ValueError), match="shutdown_timeout must be"):
        AsyncRunner(Scheduler(), shutdown_timeout=bad)


def test_async_runner_is_not_running_after_its_loop_closed() -> None:
    runner = AsyncRunner(Scheduler(clock=ManualClock(0)))

    async def main() -> None:
        runner.start()

    asyncio.run(main())
    assert not runner.is_running


# -- a dispatcher that ends is never silent ----------------------------------------------


class Bug(BaseException):
    """What no dispatcher catches: a stand-in for a defect that escapes its loop."""


def test_a_dispatcher_that_ends_makes_run_forever_raise(monkeypatch: pytest.MonkeyPatch) -> None:
    """Before: the thread died with "Exception in thread", run_forever returned, and a
    library node exited 0, so a supervisor's Restart=on-failure did nothing."""
    looks = 0

    def broken(self: LocalTasks) -> Any:
        nonlocal looks
        looks += 1
        if looks == 3:
            raise Bug("escaped")
        raise OSError("the store is down")  # an Exception: retried, never fatal

    s = Scheduler(clock=ManualClock(0))
    monkeypatch.setattr(LocalTasks, "wake_time", broken)
    monkeypatch.setattr("rota._runners.thread.CLOCK_RETRY", 0.01)
    with pytest.raises(Bug, match="escaped"):
        Runner(s).run_forever(signals=False)
    assert looks == 3
