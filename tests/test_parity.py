"""The same calls give the same answers in memory and on every store.

Each test here was a difference between ``Scheduler`` and ``DurableScheduler``
(issue 23's list): they ran through one engine but restated rules around it.
``make_sched`` runs each over memory, a MemoryStore, a SQLite file and PostgreSQL.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import pytest

from rota import FixedRate, ManualClock, Once, Result, Runner, Scheduler, Status
from rota.misfire import Misfire

Make = Callable[..., Scheduler]


def test_a_coalesced_run_takes_its_place_in_time_order(make_sched: Make) -> None:
    clock = ManualClock(1000)
    sched = make_sched(clock=clock)
    ran: list[tuple[str, Any]] = []
    sched.schedule("a", FixedRate(10), lambda at: ran.append(("a", at)), misfire=Misfire.COALESCE)
    sched.schedule(
        "k", FixedRate(10), lambda at: ran.append(("k", at)), misfire=Misfire.bounded(2)
    )
    sched.schedule_once("b", 15, lambda at: ran.append(("b", at)))
    clock.advance(60)
    sched.tick(clock())
    assert ran == [("b", 1015), ("k", 1050), ("a", 1060), ("k", 1060)]
    assert sched.next_run_time("a") == 1070


def test_replacing_a_task_from_inside_its_failing_run(
    make_sched: Make, caplog: pytest.LogCaptureFixture
) -> None:
    clock = ManualClock(1000)
    sched = make_sched(clock=clock)

    def act(at: Any) -> None:
        sched.schedule_once("r", 100, noop, replace_existing=True)
        raise RuntimeError("boom")

    sched.schedule("r", Once(0), act, max_retries=2)
    with caplog.at_level(logging.WARNING):
        [outcome] = sched.tick(clock())
    assert (outcome.result, outcome.at) == (Result.FAILED, 1000)
    assert sched.status("r") is Status.SCHEDULED
    assert sched.next_run_time("r") == 1100
    assert not [r for r in caplog.records if r.levelno >= logging.WARNING]


def noop(at: Any) -> None:
    """An action stored by its import path on a durable store."""


def test_a_claimed_run_waiting_for_a_worker_is_queued(make_sched: Make) -> None:
    sched = make_sched()
    gate, started = threading.Event(), threading.Event()

    def block(at: Any) -> None:
        started.set()
        gate.wait(10)

    with ThreadPoolExecutor(1) as pool, Runner(sched, executor=pool):
        sched.schedule_once("first", 0, block)
        assert started.wait(10)
        sched.schedule_once("second", 0, noop)
        # The claim is committed before this node notes the run as held (its triage
        # comes between): another thread may read the store's "running" for that
        # moment; then the run shows queued until the worker is free
        for _ in range(500):
            if sched.status("second") is Status.QUEUED:
                break
            threading.Event().wait(0.01)
        assert sched.status("first") is Status.RUNNING
        assert sched.status("second") is Status.QUEUED
        info = sched.info("second")
        assert info is not None
        assert info.status is Status.QUEUED
        gate.set()


def test_info_shows_a_one_off_by_its_instant(make_sched: Make) -> None:
    clock = ManualClock(1000)
    sched = make_sched(clock=clock)
    sched.schedule_once("plain", 5, noop)
    sched.schedule_once("with-options", 5, noop, priority=1)
    sched.schedule("at", Once(at=1007), noop)
    for task_id, at in [("plain", 1005), ("with-options", 1005), ("at", 1007)]:
        info = sched.info(task_id)
        assert info is not None
        assert repr(info.schedule) == f"Once(at={at})"


def test_info_shows_the_schedule_a_reschedule_gave(make_sched: Make) -> None:
    clock = ManualClock(1000)
    sched = make_sched(clock=clock)
    sched.schedule("f", FixedRate(10), noop)
    assert sched.reschedule("f", FixedRate(30, delay=30))
    info = sched.info("f")
    assert info is not None
    assert repr(info.schedule) == repr(FixedRate(30, delay=30))
    assert info.next_run_time == 1030


def test_a_finished_task_shows_only_its_status(make_sched: Make) -> None:
    clock = ManualClock(1000)
    sched = make_sched(clock=clock)
    sched.schedule("o", FixedRate(10), lambda at: 7)
    sched.tick(clock())
    sched.cancel("o")
    info = sched.info("o")
    assert info is not None
    assert info == info._replace(
        status=Status.CANCELLED, paused=False, next_run_time=None, schedule=None, attempt=0,
        last_outcome=None,
    )  # fmt: skip


@pytest.mark.parametrize("value", [42, "text", {"a": [1, 2.5, None]}, [1, "b"], 1.5, True])
def test_info_gives_the_last_runs_value(make_sched: Make, value: object) -> None:
    clock = ManualClock(1000)
    sched = make_sched(clock=clock)
    sched.schedule("v", FixedRate(10), lambda at: value)
    sched.tick(clock())
    info = sched.info("v")
    assert info is not None
    assert info.last_outcome is not None
    assert info.last_outcome.value == value
    [listed] = sched.tasks()
    assert listed.last_outcome is not None
    assert listed.last_outcome.value == value


def test_trigger_runs_a_task_now_and_its_schedule_goes_on(make_sched: Make) -> None:
    clock = ManualClock(1000)
    sched = make_sched(clock=clock)
    ran: list[Any] = []
    sched.schedule("t", FixedRate(60, delay=60), ran.append)
    sched.schedule_once("one", 100, lambda at: ran.append(("one", at)))
    clock.advance(5)
    assert sched.trigger("t")
    assert sched.trigger("t")  # each accepted trigger is a run of its own
    assert sched.next_run_time("t") == 1005
    sched.tick(clock())
    assert ran == [1005, 1005]
    assert sched.next_run_time("t") == 1060
    assert sched.trigger("one")
    sched.tick(clock())
    assert ran[-1] == ("one", 1005)
    assert sched.next_run_time("one") == 1100  # the one-off still runs at its time
    sched.pause("t")
    assert not sched.trigger("t")
    assert not sched.trigger("missing")
    sched.cancel("one")
    assert not sched.trigger("one")


def test_a_run_in_flight_cannot_be_triggered(make_sched: Make) -> None:
    clock = ManualClock(1000)
    sched = make_sched(clock=clock)
    answers: list[bool] = []
    sched.schedule("t", FixedRate(60), lambda at: answers.append(sched.trigger("t")))
    sched.tick(clock())
    assert answers == [False]


def test_an_id_whose_eq_raises_keeps_its_status() -> None:
    class Hostile:
        def __eq__(self, other: object) -> bool:
            raise RuntimeError("no comparisons")

        __hash__ = object.__hash__

    clock = ManualClock(0)
    sched = Scheduler(clock=clock)
    ids = [Hostile() for _ in range(3)]
    for n, task_id in enumerate(ids):
        sched.schedule(task_id, FixedRate(10), noop, max_retries=1, priority=n)
    sched.tick(0)
    sched.cancel(ids[0])
    sched.pause(ids[1])
    clock.advance(10)
    sched.tick(10)
    assert [sched.status(i) for i in ids] == [Status.CANCELLED, Status.SCHEDULED, Status.SCHEDULED]
    assert sched.is_paused(ids[1])
    assert sched.next_run_time(ids[2]) == 20
