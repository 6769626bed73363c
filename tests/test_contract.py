"""One test (or a few) per clause of the public contract, through the public API."""

from __future__ import annotations

import math
import threading
from collections.abc import Iterator
from typing import Any

import pytest

from rota import ManualClock, Result, RunOutcome, Scheduler, Status
from tests.helpers import AutoRegistering, engine_of, failing, make_store, recorder, rows, snapshot

IN_MEMORY_ONLY = pytest.mark.parametrize("sched", ["memory"], indirect=True)
"""For clauses a durable store states differently: its ids are str (names in a
database), and it keeps finished tasks until pruned instead of the latest 10,000."""


@pytest.fixture(params=["memory", "durable-memory", "durable-sqlite", "durable-postgres"])
def sched(
    request: pytest.FixtureRequest, clock: ManualClock, tmp_path: Any
) -> Iterator[Scheduler]:
    """The contract holds for the in-memory scheduler and for the durable path
    (a MemoryStore, a real SQLite file, a real PostgreSQL server), each on the
    manual clock."""
    if request.param == "memory":
        yield Scheduler(clock=clock)
        return
    store = make_store(request.param.removeprefix("durable-"), request, tmp_path)
    yield AutoRegistering(store, clock=clock)
    store.close()


# -- Time ----------------------------------------------------------------------


def test_manual_clock_reads_advances_and_sets() -> None:
    clock = ManualClock(5)
    assert clock() == 5
    assert clock.advance(3) == 8
    assert clock() == 8
    clock.set(2)
    assert clock() == 2
    assert ManualClock()() == 0


def test_manual_clock_rejects_negative_advance_and_changes_nothing() -> None:
    clock = ManualClock(5)
    with pytest.raises(ValueError, match=r"delta must be a finite number >= 0, got -1"):
        clock.advance(-1)
    assert clock() == 5
    with pytest.raises(TypeError, match="delta"):
        clock.advance("1")  # type: ignore[arg-type]


def test_int_times_stay_ints_including_retries(sched: Scheduler) -> None:
    sched.schedule_once("a", 3, failing(ValueError()), max_retries=3)
    sched.schedule_at_fixed_rate("r", 1, 7, lambda at: None)
    outcomes = sched.tick(1100)
    assert outcomes
    assert all(type(o.at) is int for o in outcomes)
    assert type(sched.next_run_time()) is int


# -- schedule_once -------------------------------------------------------------


def test_schedule_once_runs_at_clock_plus_delay(sched: Scheduler, clock: ManualClock) -> None:
    log: list[Any] = []
    assert sched.schedule_once("a", 5, recorder(log, "a")) is True
    assert sched.next_run_time() == 1005
    assert sched.tick(1004) == []
    assert sched.status("a") is Status.SCHEDULED
    assert rows(sched.tick(1005)) == [("a", 1005, "ok", 0)]
    assert log == [("a", 1005)]
    assert sched.status("a") is Status.DONE
    assert sched.next_run_time() is None


def test_zero_delay_is_due_now(sched: Scheduler) -> None:
    sched.schedule_once("a", 0, lambda at: None)
    assert rows(sched.tick(1000)) == [("a", 1000, "ok", 0)]


@pytest.mark.parametrize("status", [Status.SCHEDULED, Status.RUNNING])
def test_duplicate_unfinished_id_is_refused_and_changes_nothing(
    sched: Scheduler, status: Status
) -> None:
    log: list[Any] = []
    seen: list[Any] = []

    def first(at: int) -> None:
        seen.append(sched.status("a"))
        seen.append(sched.schedule_once("a", 1, recorder(log, "second")))
        seen.append(sched.schedule_at_fixed_rate("a", 1, 5, recorder(log, "second")))

    sched.schedule_once("a", 0, first)
    if status is Status.SCHEDULED:
        assert sched.schedule_once("a", 1, recorder(log, "second")) is False
        assert sched.schedule_at_fixed_rate("a", 0, 5, recorder(log, "second")) is False
        assert sched.next_run_time() == 1000
    outcomes = sched.tick(1010)
    assert rows(outcomes) == [("a", 1000, "ok", 0)]
    if status is Status.RUNNING:
        assert seen == [Status.RUNNING, False, False]
    assert log == []


def test_finished_id_may_be_scheduled_again(sched: Scheduler) -> None:
    log: list[Any] = []
    sched.schedule_once("a", 0, recorder(log, 1))
    sched.tick(1000)
    assert sched.status("a") is Status.DONE
    assert sched.schedule_once("a", 2, recorder(log, 2)) is True
    assert sched.status("a") is Status.SCHEDULED
    sched.tick(1002)
    assert log == [(1, 1000), (2, 1002)]


def test_failed_and_cancelled_ids_may_be_scheduled_again(sched: Scheduler) -> None:
    sched.schedule_once("f", 0, failing(ValueError()))
    sched.tick(1000)
    assert sched.status("f") is Status.FAILED
    assert sched.schedule_once("f", 0, lambda at: None)
    sched.schedule_once("c", 5, lambda at: None)
    assert sched.cancel("c")
    assert sched.schedule_once("c", 1, lambda at: None)
    assert rows(sched.tick(1001)) == [("f", 1000, "ok", 0), ("c", 1001, "ok", 0)]


def test_cancelled_running_run_never_touches_the_new_task(sched: Scheduler) -> None:
    """The old run is cancelled, the id reused from inside it; the old run then fails."""
    log: list[Any] = []

    def old(at: int) -> None:
        assert sched.cancel("a")
        assert sched.schedule_once("a", 5, recorder(log, "new"), max_retries=0)
        raise ValueError("old run fails after its task was replaced")

    sched.schedule_at_fixed_rate("a", 0, 1, old, max_retries=3)
    outcomes = sched.tick(1000)
    assert rows(outcomes) == [("a", 1000, "failed", 0)]
    assert sched.status("a") is Status.SCHEDULED
    assert sched.next_run_time() == 1005
    assert rows(sched.tick(1010)) == [("a", 1005, "ok", 0)]
    assert log == [("new", 1005)]
    assert sched.status("a") is Status.DONE


def test_cancelled_running_run_from_another_thread_never_touches_the_new_task() -> None:
    clock = ManualClock(0)
    sched = Scheduler(clock=clock)
    started, release = threading.Event(), threading.Event()

    def old(at: int) -> None:
        started.set()
        assert release.wait(10)

    sched.schedule_at_fixed_rate("a", 0, 1, old)
    result: list[list[RunOutcome]] = []
    ticker = threading.Thread(target=lambda: result.append(sched.tick(0)))
    ticker.start()
    assert started.wait(10)
    assert sched.status("a") is Status.RUNNING
    assert sched.cancel("a") is True
    assert sched.status("a") is Status.CANCELLED
    assert sched.cancel("a") is False
    assert sched.schedule_once("a", 3, lambda at: None) is True
    release.set()
    ticker.join(10)
    assert not ticker.is_alive()
    assert rows(result[0]) == [("a", 0, "ok", 0)]
    assert sched.status("a") is Status.SCHEDULED
    assert sched.next_run_time() == 3


BAD_ARGS: list[tuple[str, dict[str, Any], type[Exception], str]] = [
    ("once", {"task_id": []}, TypeError, r"task_id must be hashable, got \[\] \(list\)"),
    ("once", {"delay": -1}, ValueError, r"delay must be a finite number >= 0, got -1"),
    ("once", {"delay": math.nan}, ValueError, r"delay must be a finite number >= 0, got nan"),
    ("once", {"delay": math.inf}, ValueError, r"delay must be a finite number >= 0, got inf"),
    ("once", {"delay": "1"}, TypeError, r"delay must be a number \(int or float\), got '1'"),
    ("once", {"delay": True}, TypeError, r"delay must be a number .*got True \(bool\)"),
    ("once", {"delay": None}, TypeError, r"delay must be a number .*got None"),
    ("once", {"action": 5}, TypeError, r"action must be callable, got 5 \(int\)"),
    ("once", {"max_retries": -1}, ValueError, r"max_retries must be >= 0, got -1"),
    ("once", {"max_retries": 1.5}, TypeError, r"max_retries must be an int, got 1.5"),
    ("once", {"max_retries": False}, TypeError, r"max_retries must be an int, got False"),
    ("rate", {"task_id": {}}, TypeError, r"task_id must be hashable"),
    ("rate", {"initial_delay": -0.5}, ValueError, r"initial_delay must be .* got -0.5"),
    ("rate", {"initial_delay": "x"}, TypeError, r"initial_delay must be a number"),
    ("rate", {"period": 0}, ValueError, r"period must be a finite number > 0, got 0"),
    ("rate", {"period": -2}, ValueError, r"period must be a finite number > 0, got -2"),
    ("rate", {"period": math.nan}, ValueError, r"period must be .* got nan"),
    ("rate", {"period": math.inf}, ValueError, r"period must be .* got inf"),
    ("rate", {"period": False}, TypeError, r"period must be a number .*False"),
    ("rate", {"action": None}, TypeError, r"action must be callable, got None"),
    ("rate", {"max_retries": -3}, ValueError, r"max_retries must be >= 0, got -3"),
]


@IN_MEMORY_ONLY
@pytest.mark.parametrize(("method", "override", "exc", "message"), BAD_ARGS)
def test_bad_arguments_raise_before_anything_changes(
    sched: Scheduler, method: str, override: dict[str, Any], exc: type[Exception], message: str
) -> None:
    sched.schedule_once("existing", 4, lambda at: None)
    before = snapshot(sched, ["existing", "new"])
    if method == "once":
        args: dict[str, Any] = {"task_id": "new", "delay": 1, "action": print, "max_retries": 0}
        call = sched.schedule_once
    else:
        args = {"task_id": "new", "initial_delay": 1, "period": 2, "action": print}
        args["max_retries"] = 0
        call = sched.schedule_at_fixed_rate  # type: ignore[assignment]
    args.update(override)
    with pytest.raises(exc, match=message):
        call(**args)
    assert snapshot(sched, ["existing", "new"]) == before
    assert [o.task_id for o in sched.tick(2000)] == ["existing"]


@pytest.mark.parametrize(
    ("backoff", "exc"), [(0, ValueError), (-1, ValueError), (math.nan, ValueError),
                         (math.inf, ValueError), ("1", TypeError), (True, TypeError)]
)  # fmt: skip
def test_bad_backoff_is_refused(backoff: Any, exc: type[Exception]) -> None:
    with pytest.raises(exc, match="backoff"):
        Scheduler(backoff=backoff)


def test_non_callable_clock_is_refused() -> None:
    with pytest.raises(TypeError, match="clock must be callable"):
        Scheduler(clock=3)  # type: ignore[arg-type]


@pytest.mark.parametrize(("now", "exc"), [("1", TypeError), (math.nan, ValueError)])
def test_bad_tick_time_is_refused(sched: Scheduler, now: Any, exc: type[Exception]) -> None:
    with pytest.raises(exc, match="now"):
        sched.tick(now)


# -- schedule_at_fixed_rate ----------------------------------------------------


def test_fixed_rate_runs_at_first_plus_k_periods(sched: Scheduler) -> None:
    log: list[Any] = []
    sched.schedule_at_fixed_rate("r", 2, 10, recorder(log, "r"))
    for now in range(1000, 1045):
        sched.tick(now)
    assert log == [("r", 1002), ("r", 1012), ("r", 1022), ("r", 1032), ("r", 1042)]
    assert sched.next_run_time() == 1052
    assert sched.status("r") is Status.SCHEDULED


def test_float_period_slots_are_multiplied_not_accumulated() -> None:
    clock = ManualClock(0.3)
    sched = Scheduler(clock=clock)
    seen: list[float] = []
    sched.schedule_at_fixed_rate("r", 0.0, 0.1, seen.append)
    sched.tick(0.3 + 0.1 * 1000)
    assert len(seen) >= 1000
    assert seen[:1001] == [0.3 + k * 0.1 for k in range(1001)]


def test_missed_slots_are_caught_up_in_order_in_one_tick(clock: ManualClock) -> None:
    sched = Scheduler(clock=ManualClock(0))
    log: list[Any] = []
    sched.schedule_at_fixed_rate("r", 0, 10, recorder(log, "r"))
    sched.tick(9)
    assert log == [("r", 0)]
    assert [o.at for o in sched.tick(35)] == [10, 20, 30]
    assert sched.next_run_time() == 40


# -- cancel --------------------------------------------------------------------


def test_cancel_scheduled_task_never_runs(sched: Scheduler) -> None:
    log: list[Any] = []
    sched.schedule_once("a", 1, recorder(log, "a"))
    sched.schedule_at_fixed_rate("r", 1, 1, recorder(log, "r"))
    assert sched.cancel("a") is True
    assert sched.cancel("r") is True
    assert sched.status("a") is Status.CANCELLED
    assert sched.tick(2000) == []
    assert log == []
    assert sched.next_run_time() is None


def test_cancel_unknown_or_finished_returns_false(sched: Scheduler) -> None:
    assert sched.cancel("nope") is False
    sched.schedule_once("a", 0, lambda at: None)
    sched.schedule_once("f", 0, failing(ValueError()))
    sched.tick(1000)
    assert sched.cancel("a") is False
    assert sched.cancel("f") is False
    assert sched.status("a") is Status.DONE
    assert sched.status("f") is Status.FAILED
    sched.schedule_once("c", 0, lambda at: None)
    assert sched.cancel("c") is True
    assert sched.cancel("c") is False


def test_cancel_from_inside_own_action_stops_rescheduling(sched: Scheduler) -> None:
    def act(at: int) -> None:
        assert sched.status("r") is Status.RUNNING
        assert sched.cancel("r") is True
        assert sched.status("r") is Status.CANCELLED

    sched.schedule_at_fixed_rate("r", 0, 1, act, max_retries=2)
    assert rows(sched.tick(1010)) == [("r", 1000, "ok", 0)]
    assert sched.status("r") is Status.CANCELLED
    assert sched.next_run_time() is None


def test_cancelled_running_run_that_raises_is_failed_not_retried(sched: Scheduler) -> None:
    def act(at: int) -> None:
        sched.cancel("a")
        raise ValueError("boom")

    sched.schedule_once("a", 0, act, max_retries=5)
    (outcome,) = sched.tick(1100)
    assert outcome.result is Result.FAILED
    assert isinstance(outcome.error, ValueError)
    assert sched.status("a") is Status.CANCELLED
    assert sched.next_run_time() is None


def test_cancel_a_retrying_task(sched: Scheduler) -> None:
    sched.schedule_once("a", 0, failing(ValueError()), max_retries=3)
    assert rows(sched.tick(1000)) == [("a", 1000, "retry", 0)]
    assert sched.status("a") is Status.SCHEDULED
    assert sched.cancel("a") is True
    assert sched.tick(1100) == []


def test_cancel_one_of_many_same_time_tasks(sched: Scheduler) -> None:
    log: list[Any] = []
    for name in "abcde":
        sched.schedule_once(name, 1, recorder(log, name))
    sched.cancel("c")
    sched.tick(1001)
    assert [name for name, _ in log] == ["a", "b", "d", "e"]


# -- status --------------------------------------------------------------------


def test_status_is_none_for_unknown_ids(sched: Scheduler) -> None:
    assert sched.status("nope") is None


def test_status_is_a_str_enum() -> None:
    assert str(Status.SCHEDULED) == "scheduled"
    assert isinstance(Status.SCHEDULED, str)
    assert [s.value for s in Status] == [
        "scheduled", "queued", "running", "done", "failed", "cancelled"
    ]  # fmt: skip
    assert [r.value for r in Result] == ["ok", "retry", "failed"]


def test_status_while_running_and_after(sched: Scheduler) -> None:
    seen: list[Status | None] = []
    sched.schedule_once("a", 0, lambda at: seen.append(sched.status("a")))
    sched.tick(1000)
    assert seen == [Status.RUNNING]
    assert sched.status("a") is Status.DONE


@IN_MEMORY_ONLY
def test_the_10000_most_recently_finished_tasks_are_remembered(sched: Scheduler) -> None:
    n = 12_000
    for i in range(n):
        sched.schedule_once(i, 0, lambda at: None)
    sched.tick(1000)
    assert sched.status(n - 10_000) is Status.DONE
    assert all(sched.status(i) is Status.DONE for i in range(n - 10_000, n))
    assert sched.status(0) is None


@IN_MEMORY_ONLY
def test_rescheduling_a_finished_id_refreshes_its_place_in_history(sched: Scheduler) -> None:
    engine_of(sched)._history_limit = 3
    for name in "abc":
        sched.schedule_once(name, 0, lambda at: None)
    sched.tick(1000)
    sched.schedule_once("a", 0, lambda at: None)
    sched.tick(1000)
    sched.schedule_once("d", 0, lambda at: None)
    sched.tick(1000)
    assert [sched.status(x) for x in "abcd"] == [Status.DONE, None, Status.DONE, Status.DONE]


# -- tick ----------------------------------------------------------------------


@IN_MEMORY_ONLY
def test_same_instant_runs_go_in_scheduling_order(sched: Scheduler) -> None:
    log: list[Any] = []
    names = ["k", "b", "z", "a", 3, ("t",)]
    for name in names:
        sched.schedule_once(name, 5, recorder(log, name))
    sched.tick(1005)
    assert [name for name, _ in log] == names


def test_runs_go_in_time_then_seq_order(sched: Scheduler) -> None:
    log: list[Any] = []
    sched.schedule_once("late", 9, recorder(log, "late"))
    sched.schedule_once("early", 1, recorder(log, "early"))
    sched.schedule_once("mid", 5, recorder(log, "mid"))
    sched.schedule_once("mid2", 5, recorder(log, "mid2"))
    assert [o.task_id for o in sched.tick(1100)] == ["early", "mid", "mid2", "late"]


def test_runs_queued_during_a_tick_run_in_the_same_tick_in_order(sched: Scheduler) -> None:
    log: list[Any] = []

    def parent(at: int) -> None:
        log.append(("parent", at))
        sched.schedule_once("child_now", 0, recorder(log, "child_now"))
        sched.schedule_once("child_later", 3, recorder(log, "child_later"))
        sched.schedule_once("child_future", 500, recorder(log, "child_future"))

    sched.schedule_once("parent", 0, parent)
    sched.schedule_once("sibling", 0, recorder(log, "sibling"))
    sched.schedule_once("other", 2, recorder(log, "other"))
    outcomes = sched.tick(1003)
    expected = ["parent", "sibling", "child_now", "other", "child_later"]
    assert [o.task_id for o in outcomes] == expected
    assert [name for name, _ in log] == expected
    assert sched.next_run_time() == 1500


def test_actions_may_call_every_method_without_deadlock(sched: Scheduler) -> None:
    seen: list[Any] = []

    def act(at: int) -> None:
        seen.append(sched.status("a"))
        seen.append(sched.next_run_time())
        seen.append(sched.schedule_once("b", 1, lambda at: None))
        seen.append(sched.cancel("b"))
        seen.append(sched.tick(at))  # nested tick: nothing else due
        seen.append(repr(sched))

    sched.schedule_once("a", 0, act)
    sched.tick(1000)
    assert seen[:5] == [Status.RUNNING, None, True, True, []]
    assert "Scheduler" in seen[5]


def test_tick_with_now_going_back_runs_nothing(sched: Scheduler) -> None:
    sched.schedule_once("a", 10, lambda at: None)
    assert sched.tick(1005) == []
    assert sched.tick(0) == []
    assert [o.task_id for o in sched.tick(1010)] == ["a"]


def test_outcome_started_is_now_under_tick(sched: Scheduler) -> None:
    sched.schedule_once("a", 1, lambda at: None)
    (outcome,) = sched.tick(1004)
    assert outcome.started == 1004
    assert outcome.lag == 3


# -- failures and retries ------------------------------------------------------


def test_retry_times_double_from_the_failed_run(sched: Scheduler) -> None:
    sched.schedule_once("a", 0, failing(ValueError("x")), max_retries=3)
    assert rows(sched.tick(2000)) == [
        ("a", 1000, "retry", 0),
        ("a", 1001, "retry", 1),
        ("a", 1003, "retry", 2),
        ("a", 1007, "failed", 3),
    ]
    assert sched.status("a") is Status.FAILED


def test_retry_backoff_base_scales_delays() -> None:
    sched = Scheduler(clock=ManualClock(0), backoff=2.5)
    sched.schedule_once("a", 0, failing(ValueError()), max_retries=2)
    assert [o.at for o in sched.tick(100)] == [0, 2.5, 7.5]


def test_retry_succeeds(sched: Scheduler) -> None:
    calls = [0]

    def flaky(at: int) -> None:
        calls[0] += 1
        if calls[0] < 3:
            raise OSError("flaky")

    sched.schedule_once("a", 0, flaky, max_retries=5)
    assert rows(sched.tick(2000)) == [
        ("a", 1000, "retry", 0),
        ("a", 1001, "retry", 1),
        ("a", 1003, "ok", 2),
    ]
    assert sched.status("a") is Status.DONE


def test_outcome_carries_the_error(sched: Scheduler) -> None:
    error = ValueError("boom")
    sched.schedule_once("a", 0, failing(error))
    (outcome,) = sched.tick(1000)
    assert outcome.error is error
    assert outcome.result is Result.FAILED


def test_recurring_task_failing_slot_is_skipped_and_retry_count_resets(sched: Scheduler) -> None:
    results = iter([ValueError(), ValueError(), None, ValueError(), None, None])

    def act(at: int) -> None:
        error = next(results)
        if error:
            raise error

    sched.schedule_at_fixed_rate("r", 0, 100, act, max_retries=1)
    assert rows(sched.tick(1250)) == [
        ("r", 1000, "retry", 0),
        ("r", 1001, "failed", 1),
        ("r", 1100, "ok", 0),
        ("r", 1200, "retry", 0),
        ("r", 1201, "ok", 1),
    ]
    assert sched.status("r") is Status.SCHEDULED
    assert sched.next_run_time() == 1300


def test_retries_past_later_slots_then_catch_up() -> None:
    sched = Scheduler(clock=ManualClock(0), backoff=8)
    calls: list[int] = []

    def act(at: int) -> None:
        calls.append(at)
        if at in {0, 8}:
            raise ValueError

    sched.schedule_at_fixed_rate("r", 0, 10, act, max_retries=2)
    assert rows(sched.tick(35)) == [
        ("r", 0, "retry", 0),
        ("r", 8, "retry", 1),
        ("r", 24, "ok", 2),
        ("r", 10, "ok", 0),
        ("r", 20, "ok", 0),
        ("r", 30, "ok", 0),
    ]


def test_a_raising_task_does_not_stop_others(sched: Scheduler) -> None:
    log: list[Any] = []
    sched.schedule_once("bad", 0, failing(RuntimeError()))
    sched.schedule_once("good", 0, recorder(log, "good"))
    assert [str(o.result) for o in sched.tick(1000)] == ["failed", "ok"]
    assert log == [("good", 1000)]


@pytest.mark.parametrize("interrupt", [KeyboardInterrupt(), SystemExit(3)])
def test_base_exception_is_recorded_then_propagates(
    sched: Scheduler, interrupt: BaseException
) -> None:
    log: list[Any] = []
    sched.schedule_once("a", 0, recorder(log, "a"))
    sched.schedule_once("boom", 1, failing(interrupt), max_retries=3)
    sched.schedule_once("b", 1, recorder(log, "b"))
    with pytest.raises(type(interrupt)) as info:
        sched.tick(1001)
    assert info.value is interrupt
    assert any("boom" in note for note in getattr(info.value, "__notes__", []))
    assert sched.status("boom") is Status.FAILED
    assert log == [("a", 1000)]
    assert rows(sched.tick(1001)) == [("b", 1001, "ok", 0)]
    assert sched.next_run_time() is None


def test_keyboard_interrupt_in_a_recurring_task_leaves_it_scheduled(sched: Scheduler) -> None:
    sched.schedule_at_fixed_rate("r", 0, 10, failing(KeyboardInterrupt()), max_retries=2)
    with pytest.raises(KeyboardInterrupt):
        sched.tick(1000)
    assert sched.status("r") is Status.SCHEDULED
    assert sched.next_run_time() == 1010


# -- next_run_time --------------------------------------------------------------


def test_next_run_time_tracks_earliest_live_run(sched: Scheduler) -> None:
    assert sched.next_run_time() is None
    sched.schedule_once("b", 20, lambda at: None)
    sched.schedule_once("a", 10, lambda at: None)
    assert sched.next_run_time() == 1010
    sched.cancel("a")
    assert sched.next_run_time() == 1020
    sched.cancel("b")
    assert sched.next_run_time() is None


# -- RunOutcome ------------------------------------------------------------------


def test_run_outcome_is_an_immutable_record(sched: Scheduler) -> None:
    sched.schedule_once("a", 0, lambda at: None)
    (outcome,) = sched.tick(1000)
    assert (outcome.task_id, outcome.at, outcome.result, outcome.error, outcome.attempt) == (
        "a", 1000, Result.OK, None, 0
    )  # fmt: skip
    with pytest.raises(AttributeError):
        outcome.result = Result.FAILED  # type: ignore[misc]
    assert hash(outcome) == hash(RunOutcome("a", 1000, Result.OK, None, 0, 1000))


# -- the worked example ------------------------------------------------------------


def test_worked_example() -> None:
    sched = Scheduler(clock=ManualClock(0), backoff=1)
    calls = [0]

    def once(at: int) -> None:
        calls[0] += 1
        if calls[0] == 1:
            raise RuntimeError("first run fails")

    sched.schedule_once("once", 0, once, max_retries=1)
    sched.schedule_at_fixed_rate("rate", 0, 10, failing(RuntimeError()), max_retries=0)
    assert rows(sched.tick(10)) == [
        ("once", 0, "retry", 0),
        ("rate", 0, "failed", 0),
        ("once", 1, "ok", 1),
        ("rate", 10, "failed", 0),
    ]
    assert sched.status("once") == "done"
    assert sched.status("rate") == "scheduled"
    assert sched.next_run_time() == 20
