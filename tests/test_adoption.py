"""The conveniences of issue 9, through the public API: calls, introspection,
clocks and datetimes, retry_on, values, listeners, run_forever, registration,
logging."""

from __future__ import annotations

import asyncio
import logging
import os
import signal
import subprocess
import sys
import textwrap
import time
from datetime import UTC, datetime, timedelta, timezone
from typing import Any

import pytest

import rota
from rota import (
    AsyncRunner,
    DurableScheduler,
    Event,
    EventKind,
    FixedRate,
    ManualClock,
    Misfire,
    Once,
    RunContext,
    Runner,
    Scheduler,
    Status,
    TaskInfo,
)
from rota.cron import Cron
from rota.store import MemoryStore
from tests.helpers import Collector, rows

# -- 1. calling existing functions ---------------------------------------------------


def test_args_and_kwargs_call_existing_functions() -> None:
    s = Scheduler(clock=ManualClock(0))
    seen: list[Any] = []

    def report() -> None:
        seen.append("report")

    def send(to: str, *, subject: str) -> str:
        seen.append((to, subject))
        return "sent"

    s.schedule_once("report", 0, report, args=())
    s.schedule_at_fixed_rate("send", 0, 10, send, args=["ops"], kwargs={"subject": "hi"})
    got = s.tick(0)
    assert seen == ["report", ("ops", "hi")]
    assert [o.value for o in got] == [None, "sent"]


def test_the_call_shape_is_checked_when_scheduling() -> None:
    s = Scheduler(clock=ManualClock(0))

    def report() -> None: ...

    with pytest.raises(TypeError, match=r"cannot be called as action\(at\).*args=\(\)"):
        s.schedule_once("a", 0, report)
    with pytest.raises(TypeError, match="cannot be called with args=\\[1, 2\\]"):
        s.schedule("b", FixedRate(5), lambda x: None, args=[1, 2])
    with pytest.raises(TypeError, match="args must be a list or tuple"):
        s.schedule_once("c", 0, report, args="ab")
    with pytest.raises(TypeError, match="kwargs must be a mapping"):
        s.schedule_once("c", 0, report, kwargs={1: 2})  # type: ignore[dict-item]
    assert s.tasks() == []  # nothing was scheduled


def test_action_at_keeps_working_for_functions_methods_and_builtins() -> None:
    s = Scheduler(clock=ManualClock(0))
    seen: list[Any] = []

    class Job:
        def run(self, at: Any) -> None:
            seen.append(("method", at))

    s.schedule_once("f", 0, lambda at: seen.append(("lambda", at)))
    s.schedule_once("m", 0, Job().run)
    s.schedule_once("b", 0, seen.append)
    s.tick(0)
    assert seen == [("lambda", 0), ("method", 0), 0]


def test_an_action_asks_for_the_runs_facts_with_a_keyword_only_run() -> None:
    s = Scheduler(clock=ManualClock(0))
    seen: list[RunContext] = []

    def flaky(*, run: RunContext) -> None:
        seen.append(run)
        if run.attempt < 2:
            raise ConnectionError("down")

    def with_at(at: Any, *, run: RunContext) -> None:
        seen.append(run)

    s.schedule_at_fixed_rate("sync", 10, 60, flaky, max_retries=2, args=())
    s.schedule_once("plain", 5, with_at)
    s.tick(20)
    assert [(r.task_id, r.at, r.slot, r.attempt) for r in seen] == [
        ("plain", 5, 5, 0),
        ("sync", 10, 10, 0),
        ("sync", 11, 10, 1),
        ("sync", 13, 10, 2),
    ]
    assert {r.key for r in seen if r.task_id == "sync"} == {"sync@10"}


# -- 2. seeing what is scheduled -------------------------------------------------------


def test_info_tasks_and_next_run_time_of_one_task() -> None:
    clock = ManualClock(100)
    s = Scheduler(clock=clock)
    s.schedule_once("once", 5, lambda at: None)
    s.schedule("rate", FixedRate(10), lambda at: 42, max_retries=1)
    s.pause("rate")
    info = s.info("once")
    assert info is not None
    assert info == TaskInfo("once", Status.SCHEDULED, False, 105, info.schedule, 0, None)
    assert repr(info.schedule) == "Once(at=105)"
    assert s.next_run_time("once") == 105
    assert s.next_run_time("rate") is None  # paused
    assert s.info("rate").paused  # type: ignore[union-attr]
    assert {i.task_id for i in s.tasks()} == {"once", "rate"}
    s.resume("rate")
    clock.advance(10)
    s.tick(clock())
    rate = s.info("rate")
    assert rate is not None
    assert (rate.next_run_time, rate.last_outcome and rate.last_outcome.value) == (120, 42)
    assert isinstance(rate.schedule, FixedRate)
    done = s.info("once")
    assert done == TaskInfo("once", Status.DONE, False, None, None, 0, None)  # status only
    assert s.info("nope") is None
    assert s.next_run_time() == 120


# -- 3. wall clock and monotonic clock; datetimes ----------------------------------


def test_a_monotonic_scheduler_refuses_what_needs_wall_clock_time() -> None:
    s = Scheduler()  # time.monotonic
    assert s.epoch is False
    with pytest.raises(ValueError, match=r"monotonic: use Scheduler\(clock=time.time\)"):
        s.schedule("cron", Cron("0 3 * * *"), lambda at: None)
    with pytest.raises(ValueError, match="an epoch time"):
        s.schedule("once", Once(at=time.time() + 60), lambda at: None)
    with pytest.raises(ValueError, match="monotonic"):
        s.schedule("dt", Once(at=datetime.now(UTC) + timedelta(minutes=1)), lambda at: None)
    assert s.tasks() == []
    assert s.schedule_once("far", 1e10, lambda at: None)  # a delay is never an instant


def test_datetimes_and_timedeltas_are_accepted_where_times_and_delays_are() -> None:
    start = datetime(2026, 12, 1, tzinfo=UTC)
    clock = ManualClock(start)  # an aware datetime: epoch seconds
    assert clock() == start.timestamp()
    s = Scheduler(clock=clock)
    s.schedule_once("in", timedelta(minutes=1), lambda at: None)
    s.schedule("at", Once(at=start + timedelta(hours=1)), lambda at: None)
    s.schedule("rate", FixedRate(timedelta(hours=2), start=start), lambda at: None)
    clock.advance(timedelta(hours=1))
    got = s.tick(clock())
    assert [o.at_datetime().isoformat() for o in got] == [
        "2026-12-01T00:00:00+00:00",
        "2026-12-01T00:01:00+00:00",
        "2026-12-01T01:00:00+00:00",
    ]
    paris = timezone(timedelta(hours=1))
    assert got[0].started_datetime(paris).isoformat() == "2026-12-01T02:00:00+01:00"
    with pytest.raises(ValueError, match="naive"):
        Once(at=datetime(2026, 12, 1))
    assert Scheduler(clock=time.time).epoch is True


# -- 4. retrying only what is worth retrying -------------------------------------------


def test_retry_on_types_and_predicates() -> None:
    s = Scheduler(clock=ManualClock(0))

    def fails(error: Exception) -> Any:
        def action(at: Any) -> None:
            raise error

        return action

    s.schedule_once("io", 0, fails(ConnectionError()), max_retries=3, retry_on=ConnectionError)
    s.schedule_once("bug", 0, fails(KeyError("x")), max_retries=3, retry_on=(ConnectionError,))
    s.schedule_once(
        "pred",
        0,
        fails(ValueError("retry me")),
        max_retries=1,
        retry_on=lambda e: "retry" in str(e),
    )
    got = s.tick(100)
    assert [(o.task_id, o.result) for o in got if o.task_id == "bug"] == [("bug", "failed")]
    assert len([o for o in got if o.task_id == "io"]) == 4
    assert len([o for o in got if o.task_id == "pred"]) == 2
    assert s.status("bug") is Status.FAILED  # failed, not cancelled
    with pytest.raises(TypeError, match="retry_on must be"):
        s.schedule_once("x", 0, lambda at: None, retry_on="ConnectionError")  # type: ignore[arg-type]


# -- 5. results ---------------------------------------------------------------------


def test_values_under_every_driver() -> None:
    clock = ManualClock(0)
    s = Scheduler(clock=clock)
    s.schedule_once("tick", 0, lambda at: "t")
    assert [o.value for o in s.tick(0)] == ["t"]
    seen = Collector()
    with Runner(s, on_outcome=seen):
        s.schedule_once("runner", 0, lambda at: "r")
        assert [o.value for o in seen.wait_for(1)] == ["r"]

    async def coroutine(at: Any) -> str:
        await asyncio.sleep(0)
        return "a"

    async def main() -> None:
        async with AsyncRunner(s, on_outcome=seen):
            s.schedule_once("async", 0, coroutine)
            for _ in range(100):
                if len(seen.outcomes) == 2:
                    break
                await asyncio.sleep(0)

    asyncio.run(main())
    assert [o.value for o in seen.outcomes] == ["r", "a"]


# -- 6. hooks ------------------------------------------------------------------------


def test_listeners_hear_task_and_run_events_without_a_runner(caplog: Any) -> None:
    s = Scheduler(clock=ManualClock(0))
    heard: list[tuple[str, Any]] = []
    s.add_listener(lambda e: heard.append((e.kind, e.task_id)))
    failures: list[Event] = []
    remove = s.add_listener(failures.append, EventKind.RUN_FAILED, "run_retried")
    s.add_listener(lambda e: 1 / 0, EventKind.TASK_ADDED)  # isolated and logged
    s.schedule_once("a", 0, lambda at: 1 / 0, max_retries=1)
    s.pause("a")
    s.resume("a")
    with caplog.at_level(logging.ERROR, logger="rota.events"):
        s.schedule_once("b", 5, lambda at: None)
    s.tick(1)
    s.cancel("b")
    assert heard == [
        ("task_added", "a"),
        ("task_paused", "a"),
        ("task_resumed", "a"),
        ("task_added", "b"),
        ("run_started", "a"),
        ("run_retried", "a"),
        ("run_started", "a"),
        ("run_failed", "a"),
        ("task_removed", "b"),
    ]
    assert [e.kind for e in failures] == ["run_retried", "run_failed"]
    assert failures[1].outcome is not None
    assert "listener" in caplog.text
    remove()
    s.schedule_once("c", 0, lambda at: 1 / 0)
    s.tick(1)
    assert len(failures) == 2
    with pytest.raises(ValueError, match="kinds must be"):
        s.add_listener(print, "nope")


def test_a_kind_is_heard_while_a_listener_wants_it_and_no_longer() -> None:
    """Events no listener wants are not made; adding and removing listeners keeps
    what is heard exact, skipped slots included, for memory and a store alike."""
    stored = DurableScheduler(MemoryStore(), clock=ManualClock(0))
    stored.register("ok", lambda at: None)
    backends: list[tuple[Scheduler, Any]] = [
        (Scheduler(clock=ManualClock(0)), lambda at: None),
        (stored, "ok"),
    ]
    for s, action in backends:
        starts: list[Event] = []
        outcomes: list[Event] = []
        s.add_listener(outcomes.append, "run_succeeded", "run_skipped")
        s.schedule("r", FixedRate(10, start=0), action, misfire=Misfire.COALESCE)
        s.tick(0)
        stop = s.add_listener(starts.append, "run_started")
        s.tick(35)  # slots 10, 20 skipped; 30 runs
        stop()
        s.tick(40)
        assert [e.at for e in starts] == [30]
        assert [(e.kind, e.at) for e in outcomes] == [
            ("run_succeeded", 0), ("run_skipped", 30), ("run_succeeded", 30),
            ("run_succeeded", 40),
        ]  # fmt: skip


def test_runner_start_and_stop_are_events() -> None:
    s = Scheduler(clock=ManualClock(0))
    kinds: list[str] = []
    s.add_listener(lambda e: kinds.append(e.kind), "scheduler_started", "scheduler_stopped")
    with Runner(s):
        pass
    assert kinds == ["scheduler_started", "scheduler_stopped"]


# -- 7. run_forever ------------------------------------------------------------------

RUN_FOREVER = textwrap.dedent(
    """
    import sys, time
    from rota import Runner, Scheduler
    s = Scheduler()
    def slow(at):
        print("started", flush=True)
        time.sleep(0.3)
        print("finished", flush=True)
    s.schedule_once("slow", 0, slow)
    Runner(s).run_forever()
    print("clean exit", s.status("slow"), flush=True)
    """
)


@pytest.mark.parametrize("signum", [signal.SIGTERM, signal.SIGINT])
def test_run_forever_stops_cleanly_on_sigterm_and_sigint(signum: int) -> None:
    proc = subprocess.Popen(
        [sys.executable, "-c", RUN_FOREVER],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    assert proc.stdout is not None
    assert proc.stdout.readline().strip() == "started"
    os.kill(proc.pid, signum)
    try:
        out, err = proc.communicate(timeout=60)
    finally:
        proc.kill()
    assert proc.returncode == 0, err
    assert out.split("\n")[:2] == ["finished", "clean exit done"]


def test_run_forever_returns_when_stopped_from_an_action() -> None:
    s = Scheduler(clock=ManualClock(0))
    runner = Runner(s)
    s.schedule_once("stop", 0, lambda at: runner.stop())
    runner.run_forever(signals=False)
    assert s.status("stop") is Status.DONE


# -- 8. start-up registration ------------------------------------------------------


def test_the_job_decorator_and_replace_existing() -> None:
    s = Scheduler(clock=ManualClock(0))
    calls: list[str] = []

    @s.job(FixedRate(10))
    def poll(at: Any) -> None:
        calls.append("v1")

    assert poll.__name__ == "poll"  # returned unchanged
    task_id = f"{__name__}.test_the_job_decorator_and_replace_existing.<locals>.poll"
    assert s.status(task_id) is Status.SCHEDULED

    @s.job(FixedRate(10), task_id=task_id)  # declared again: replaced, not ignored
    def poll_v2(at: Any) -> None:
        calls.append("v2")

    s.tick(0)
    assert calls == ["v2"]
    assert not s.schedule_once("x", 0, lambda at: None) or s.schedule_once(
        "x", 0, lambda at: None, replace_existing=True
    )
    assert s.schedule_once("x", 5, lambda at: None, replace_existing=True)
    assert s.next_run_time("x") == 5


# -- 9 and 10: package basics and logging -------------------------------------------


def test_version_and_license() -> None:
    from importlib.metadata import version

    assert rota.__version__ == version("rota")
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    for name in ("LICENSE", "CHANGELOG.md"):
        assert os.path.getsize(os.path.join(root, name)) > 0


def test_runs_are_logged_like_an_operator_log(caplog: Any) -> None:
    start = datetime(2026, 12, 1, 12, tzinfo=UTC).timestamp()
    clock = ManualClock(start)
    s = Scheduler(clock=clock, epoch=True)  # a ManualClock on epoch seconds: say so
    seen = Collector()
    with caplog.at_level(logging.DEBUG, logger="rota"), Runner(s, on_outcome=seen):
        s.schedule_once("report", 0, lambda at: None)
        seen.wait_for(1)
    lines = [r.getMessage() for r in caplog.records if r.name == "rota.runs"]
    assert lines == [
        "task 'report': run at 2026-12-01T12:00:00.000+00:00 starting (lag 0.000s)",
        "task 'report': run at 2026-12-01T12:00:00.000+00:00 ok (attempt 0) in 0.000s, lag 0.000s",
    ]
    assert [r.levelname for r in caplog.records if r.name == "rota.runs"] == ["DEBUG", "INFO"]
    assert rows(seen.outcomes) == [("report", start, "ok", 0)]


def test_the_runs_facts_follow_retries_through_schedule_once() -> None:
    s = Scheduler(clock=ManualClock(0))
    seen: list[tuple[int, Any]] = []

    def flaky(at: Any, *, run: RunContext) -> None:
        seen.append((run.attempt, run.slot))
        if run.attempt == 0:
            raise ConnectionError

    s.schedule_once("t", 5, flaky, max_retries=1)
    s.tick(10)
    assert seen == [(0, 5), (1, 5)]
