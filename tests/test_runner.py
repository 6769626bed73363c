"""Runner: the dispatcher thread, stepped by hand with a ManualClock (no sleeps)."""

from __future__ import annotations

import concurrent.futures
import logging
import threading
from collections.abc import Callable, Iterator
from typing import Any

import pytest

from rota import ManualClock, Result, Runner, RunOutcome, Scheduler, Status
from rota._scheduling.tasks import LocalTasks
from tests.helpers import Collector, rows

TIMEOUT = 10.0


@pytest.fixture
def clock() -> ManualClock:
    return ManualClock(1000)


@pytest.fixture
def sched(clock: ManualClock) -> Scheduler:
    return Scheduler(clock=clock)


@pytest.fixture
def pool() -> Iterator[concurrent.futures.ThreadPoolExecutor]:
    executor = concurrent.futures.ThreadPoolExecutor(max_workers=4)
    yield executor
    executor.shutdown(wait=True, cancel_futures=True)


def test_runs_when_the_clock_reaches_the_time(sched: Scheduler, clock: ManualClock) -> None:
    seen = Collector()
    with Runner(sched, on_outcome=seen) as runner:
        assert runner.is_running
        sched.schedule_once("a", 10, lambda at: None)
        sched.schedule_at_fixed_rate("r", 5, 5, lambda at: None)
        clock.advance(5)
        assert rows(seen.wait_for(1)) == [("r", 1005, "ok", 0)]
        clock.advance(5)
        got = seen.wait_for(3)
    assert rows(got) == [("r", 1005, "ok", 0), ("a", 1010, "ok", 0), ("r", 1010, "ok", 0)]
    assert [o.started for o in got] == [1005, 1010, 1010]
    assert not runner.is_running
    assert sched.status("a") is Status.DONE


def test_an_earlier_task_wakes_the_sleeping_dispatcher(sched: Scheduler) -> None:
    seen = Collector()
    sched.schedule_once("far", 3600, lambda at: None)
    with Runner(sched, on_outcome=seen):
        sched.schedule_once("now", 0, lambda at: None)  # the clock never moves
        assert rows(seen.wait_for(1)) == [("now", 1000, "ok", 0)]
    assert sched.status("far") is Status.SCHEDULED


class Gate:
    """Once ``armed``, the next look at the head pauses after the read (as a store's
    slow read would) until ``gate`` is set."""

    def __init__(self) -> None:
        self.armed = False
        self.looked = threading.Event()
        self.gate = threading.Event()

    def wake_time(self, read: Callable[[LocalTasks], Any], table: LocalTasks) -> Any:
        head = read(table)
        if self.armed:
            self.armed = False
            self.looked.set()
            self.gate.wait(TIMEOUT)
        return head


def test_a_run_scheduled_while_the_dispatcher_reads_the_head_is_not_missed(
    clock: ManualClock, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The dispatcher reads the head without holding its lock; a run scheduled during
    that read (not in what it returns) must still wake it (the clock never moves)."""
    seen = Collector()
    sched = Scheduler(clock=clock)
    gate = Gate()
    read = LocalTasks.wake_time

    def gated(table: LocalTasks) -> Any:
        return gate.wake_time(read, table)

    monkeypatch.setattr(LocalTasks, "wake_time", gated)
    sched.schedule_once("far", 3600, lambda at: None)
    with Runner(sched, on_outcome=seen):
        gate.armed = True
        sched.schedule_once("kick", 0, lambda at: None)  # wakes it; then it looks again
        assert gate.looked.wait(TIMEOUT)  # it has read 3600 and is paused
        sched.schedule_once("late", 0, lambda at: None)
        gate.gate.set()
        assert [o.task_id for o in seen.wait_for(2, timeout=TIMEOUT)] == ["kick", "late"]


def test_a_task_scheduled_from_an_action_runs_in_order(sched: Scheduler) -> None:
    seen = Collector()

    def parent(at: Any) -> None:
        sched.schedule_once("child", 0, lambda at: None)

    with Runner(sched, on_outcome=seen):
        sched.schedule_once("parent", 0, parent)
        assert [o.task_id for o in seen.wait_for(2)] == ["parent", "child"]


def test_start_twice_is_refused_and_stop_is_idempotent(sched: Scheduler) -> None:
    runner = Runner(sched)
    assert not runner.is_running
    assert runner.stop() is True  # never started: nothing to wait for
    with pytest.raises(RuntimeError, match="already started or stopped"):
        runner.start()
    runner = Runner(sched)
    runner.start()
    with pytest.raises(RuntimeError, match="already started"):
        runner.start()
    assert runner.stop(timeout=TIMEOUT) is True
    assert runner.stop() is True
    assert runner.stop(wait=False) is True
    with pytest.raises(RuntimeError, match="already started"):
        runner.start()


def test_bad_arguments_are_refused(sched: Scheduler) -> None:
    with pytest.raises(TypeError, match=r"scheduler must be a rota\.Scheduler"):
        Runner(object())  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="executor must be"):
        Runner(sched, executor=3)  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="on_outcome must be callable"):
        Runner(sched, on_outcome=3)  # type: ignore[arg-type]


def test_stop_from_inside_an_action(sched: Scheduler) -> None:
    seen = Collector()
    runner = Runner(sched, on_outcome=seen)
    results: list[bool] = []
    sched.schedule_once("stopper", 0, lambda at: results.append(runner.stop()))
    sched.schedule_once("later", 1, lambda at: None)
    runner.start()
    assert rows(seen.wait_for(1)) == [("stopper", 1000, "ok", 0)]
    assert runner.stop(timeout=TIMEOUT) is True
    assert results == [True]
    assert sched.status("later") is Status.SCHEDULED  # nothing claimed after stop


def test_stop_waits_for_runs_in_progress_and_is_bounded(
    sched: Scheduler, pool: concurrent.futures.ThreadPoolExecutor
) -> None:
    inside, release = threading.Event(), threading.Event()
    executing = threading.Event()

    def slow(at: Any) -> None:
        executing.set()
        inside.set()
        release.wait(TIMEOUT)
        executing.clear()

    runner = Runner(sched, executor=pool)
    sched.schedule_once("slow", 0, slow)
    runner.start()
    assert inside.wait(TIMEOUT)
    assert runner.stop(timeout=0.05) is False  # bounded: the action is still running
    assert runner.stats().running == 1
    release.set()
    assert runner.stop(timeout=TIMEOUT) is True
    assert not executing.is_set()
    assert sched.status("slow") is Status.DONE


def test_queued_until_a_worker_starts_it_and_cancel_means_never_starts(
    sched: Scheduler,
) -> None:
    one = concurrent.futures.ThreadPoolExecutor(max_workers=1)
    inside, release = threading.Event(), threading.Event()
    log: list[str] = []
    seen = Collector()
    try:
        with Runner(sched, executor=one, on_outcome=seen) as runner:
            sched.schedule_once("blocker", 0, blocking(inside, release))
            assert inside.wait(TIMEOUT)
            sched.schedule_once("victim", 0, lambda at: log.append("victim"))
            sched.schedule_once("next", 0, lambda at: log.append("next"))
            _wait_until(lambda: sched.status("next") is Status.QUEUED)
            assert sched.status("blocker") is Status.RUNNING
            assert sched.status("victim") is Status.QUEUED
            assert runner.stats().queued == 2
            assert sched.cancel("victim") is True
            assert sched.status("victim") is Status.CANCELLED
            release.set()
            got = seen.wait_for(2)
    finally:
        one.shutdown(wait=True)
    assert log == ["next"]
    assert [o.task_id for o in got] == ["blocker", "next"]
    assert runner.stats().queued == 0


def test_a_slow_action_in_a_pool_delays_no_other_task(
    sched: Scheduler, clock: ManualClock, pool: concurrent.futures.ThreadPoolExecutor
) -> None:
    release = threading.Event()
    seen = Collector()
    with Runner(sched, executor=pool, on_outcome=seen):
        sched.schedule_once("slow", 0, lambda at: release.wait(TIMEOUT))
        sched.schedule_at_fixed_rate("fast", 1, 1, lambda at: None)
        for _ in range(3):
            clock.advance(1)
        got = seen.wait_for(3)
        assert [o.task_id for o in got] == ["fast"] * 3
        assert sched.status("slow") is Status.RUNNING
        release.set()
        seen.wait_for(4)


def test_fixed_rate_task_never_overlaps_itself_and_catches_up_in_order(
    sched: Scheduler, clock: ManualClock, pool: concurrent.futures.ThreadPoolExecutor
) -> None:
    inside, release = threading.Event(), threading.Event()
    running = [0]
    overlaps: list[Any] = []
    lock = threading.Lock()

    def act(at: int) -> None:
        with lock:
            running[0] += 1
            if running[0] > 1:
                overlaps.append(at)
        if at == 1000:
            inside.set()
            release.wait(TIMEOUT)
        with lock:
            running[0] -= 1

    seen = Collector()
    with Runner(sched, executor=pool, on_outcome=seen):
        sched.schedule_at_fixed_rate("r", 0, 10, act)
        assert inside.wait(TIMEOUT)
        clock.advance(35)  # slots 1010, 1020, 1030 fall due while 1000 runs
        assert sched.status("r") is Status.RUNNING
        release.set()
        got = seen.wait_for(4)
    assert [o.at for o in got[:4]] == [1000, 1010, 1020, 1030]
    assert overlaps == []


def test_a_tasks_outcomes_are_reported_in_slot_order_under_a_pool(
    sched: Scheduler, clock: ManualClock, pool: concurrent.futures.ThreadPoolExecutor
) -> None:
    # The run a completion queues is the task's next: were the dispatcher woken
    # before the report, another worker could run and report it first.
    seen = Collector()
    other = threading.Event()

    def report(outcome: RunOutcome) -> None:
        if outcome.at == 1000:
            other.wait(0.5)  # a slow on_outcome, waiting (bounded) for a report that must not come
        else:
            other.set()
        seen(outcome)

    with Runner(sched, executor=pool, on_outcome=report):
        sched.schedule_at_fixed_rate("r", 0, 10, lambda at: None)
        clock.advance(25)  # 1010 and 1020 are due by the time 1000 ends
        got = seen.wait_for(3)
    assert [o.at for o in got[:3]] == [1000, 1010, 1020]


def test_an_executor_that_refuses_work_fails_the_run_visibly(
    sched: Scheduler, caplog: pytest.LogCaptureFixture
) -> None:
    dead = concurrent.futures.ThreadPoolExecutor(max_workers=1)
    dead.shutdown()
    seen = Collector()
    with Runner(sched, executor=dead, on_outcome=seen):
        sched.schedule_once("a", 0, lambda at: None, max_retries=1)
        got = seen.wait_for(1)
    assert got[0].result is Result.RETRY  # it failed, and is retried as usual
    assert isinstance(got[0].error, RuntimeError)
    assert "executor refused task 'a'" in caplog.text


def test_runs_dropped_by_a_shut_down_executor_are_failed_not_stuck(sched: Scheduler) -> None:
    one = concurrent.futures.ThreadPoolExecutor(max_workers=1)
    inside, release = threading.Event(), threading.Event()
    seen = Collector()
    runner = Runner(sched, executor=one, on_outcome=seen)
    sched.schedule_once("blocker", 0, blocking(inside, release))
    runner.start()
    assert inside.wait(TIMEOUT)
    sched.schedule_once("queued", 0, lambda at: None)
    _wait_until(lambda: sched.status("queued") is Status.QUEUED)
    one.shutdown(wait=False, cancel_futures=True)
    release.set()
    got = seen.wait_for(2)
    runner.stop(timeout=TIMEOUT)
    dropped = next(o for o in got if o.task_id == "queued")
    assert dropped.result is Result.FAILED
    assert isinstance(dropped.error, concurrent.futures.CancelledError)
    assert sched.status("queued") is Status.FAILED


def test_on_outcome_errors_are_logged_and_change_nothing(
    sched: Scheduler, clock: ManualClock, caplog: pytest.LogCaptureFixture
) -> None:
    calls: list[Any] = []

    def on_outcome(outcome: Any) -> None:
        calls.append(outcome.at)
        raise RuntimeError("observer bug")

    with Runner(sched, on_outcome=on_outcome):
        sched.schedule_at_fixed_rate("r", 0, 1, lambda at: None)
        for _ in range(2):
            clock.advance(1)
        _wait_until(lambda: len(calls) >= 3)
    assert calls[:3] == [1000, 1001, 1002]
    assert "on_outcome raised" in caplog.text
    assert sched.status("r") is Status.SCHEDULED


def test_failed_runs_are_logged_with_their_traceback(
    sched: Scheduler, clock: ManualClock, caplog: pytest.LogCaptureFixture
) -> None:
    def bad(at: Any) -> None:
        raise ValueError("broken task")

    seen = Collector()
    with caplog.at_level(logging.INFO, logger="rota"), Runner(sched, on_outcome=seen):
        sched.schedule_once("bad", 0, bad, max_retries=1)
        seen.wait_for(1)
        clock.advance(1)
        seen.wait_for(2)
    errors = [r for r in caplog.records if r.levelno == logging.ERROR]
    assert len(errors) == 1  # failed for good: ERROR, with the traceback
    assert errors[0].exc_info is not None
    assert "ValueError: broken task" in caplog.text
    [retry] = [r for r in caplog.records if r.levelno == logging.WARNING]
    assert retry.message.startswith("task 'bad': run at 1000 retry")
    assert retry.message.endswith(": ValueError: broken task")  # one line, no traceback
    assert retry.exc_info is None
    assert (retry.job, retry.attempt, retry.result) == ("bad", 0, "retry")  # type: ignore[attr-defined]
    assert {r.name for r in caplog.records} <= {"rota.runs", "rota.runner"}


def test_stats_count_results_and_lag(sched: Scheduler, clock: ManualClock) -> None:
    seen = Collector()
    with Runner(sched, on_outcome=seen) as runner:
        sched.schedule_once("ok", 0, lambda at: None)
        seen.wait_for(1)
        sched.schedule_once("late", 0, lambda at: None)  # due at 1000...
        sched.schedule_once("bad", 5, _raise, max_retries=1)
        clock.advance(10)  # ... the runner may see it at 1000 or 1010
        seen.wait_for(4)
        stats = runner.stats()
    assert (stats.ok, stats.retry, stats.failed, stats.runs) == (2, 1, 1, 4)
    assert (stats.running, stats.queued) == (0, 0)
    assert stats.lag_max is not None
    assert stats.lag_max <= 10


def test_an_interrupting_action_is_recorded_and_stops_the_runner(sched: Scheduler) -> None:
    seen = Collector()
    runner = Runner(sched, on_outcome=seen)
    sched.schedule_once("exit", 0, _exit, max_retries=2)
    sched.schedule_once("later", 0, lambda at: None)
    runner.start()
    got = seen.wait_for(1)
    with pytest.raises(SystemExit):  # stop() hands the fatal error to its caller, once
        runner.stop(timeout=TIMEOUT)
    assert runner.stop(timeout=TIMEOUT) is True
    assert rows(got) == [("exit", 1000, "failed", 0)]
    assert sched.status("exit") is Status.FAILED
    assert sched.status("later") is Status.SCHEDULED  # nothing claimed after the fatal error
    assert not runner.is_running


def blocking(inside: threading.Event, release: threading.Event) -> Any:
    """An action that signals ``inside`` and then waits for ``release`` (bounded)."""

    def action(at: Any) -> None:
        inside.set()
        release.wait(TIMEOUT)

    return action


def _raise(at: Any) -> None:
    raise ValueError(at)


def _exit(at: Any) -> None:
    raise SystemExit(at)


def _wait_until(predicate: Any, timeout: float = TIMEOUT) -> None:
    """Wait on a condition that another thread makes true (bounded)."""
    done = threading.Event()
    deadline = threading.Timer(timeout, done.set)
    deadline.start()
    try:
        while not predicate():
            assert not done.wait(0.001), "condition not reached in time"
    finally:
        deadline.cancel()
