"""Regression tests for the engine and tick under hostile policies, ids and input.

Each test names the defect of issue 8 it pins (``#n``); every one failed
before its fix. No sleeps and no threads: these are deterministic.
"""

from __future__ import annotations

import math
from datetime import datetime
from typing import Any
from zoneinfo import ZoneInfo

import pytest

from rota import (
    Backoff,
    FixedRate,
    ManualClock,
    Misfire,
    Once,
    Result,
    Scheduler,
    Status,
)
from rota.cron import Cron
from rota.schedules import FixedDelay
from tests.helpers import check_table, rows

BAD_TIMES: list[Any] = [math.nan, math.inf, -math.inf, 10**400, "soon", None.__class__]
BAD_IDS = ["nan", "inf", "-inf", "1e400", "str", "type"]
BAD = pytest.mark.parametrize("bad", BAD_TIMES, ids=BAD_IDS)


class Script:
    """A schedule whose cursor returns the given values in turn (then raises IndexError)."""

    def __init__(self, *values: Any) -> None:
        self.values = list(values)

    def start(self, now: Any) -> Script:
        return self

    def next(self, now: Any) -> Any:
        return self.values.pop(0)


class Fixed:
    """A retry policy whose every delay is ``value``."""

    def __init__(self, value: Any) -> None:
        self.value = value

    def delay(self, retry: int, previous: Any) -> Any:
        return self.value


def fail(at: Any) -> None:
    raise ValueError(at)


def ok(at: Any) -> None:
    return None


def serves_others(s: Scheduler, now: float) -> None:
    """The scheduler still runs an unrelated task and keeps its invariants."""
    s.schedule_once("witness", 0, ok)
    assert ("witness", "ok") in [(o.task_id, o.result) for o in s.tick(now)]
    check_table(s)


# -- #5, #6: garbage times from cursors, retry policies and reschedule ------------


@BAD
def test_a_cursor_returning_garbage_later_fails_its_task_with_an_outcome(bad: Any) -> None:
    s = Scheduler(clock=ManualClock(0))
    s.schedule("t", Script(0, bad), ok)
    s.schedule_once("other", 5, ok)
    [outcome, other] = s.tick(10)
    assert (outcome.task_id, outcome.result) == ("t", Result.FAILED)
    assert isinstance(outcome.error, TypeError | ValueError)
    assert "cursor" in str(outcome.error)
    assert other.task_id == "other"
    assert s.status("t") is Status.FAILED
    serves_others(s, 20)


@pytest.mark.parametrize("bad", [*BAD_TIMES, -1], ids=[*BAD_IDS, "negative"])
def test_a_retry_policy_returning_garbage_fails_its_task_with_an_outcome(bad: Any) -> None:
    s = Scheduler(clock=ManualClock(0))
    s.schedule_once("t", 0, fail, max_retries=3, retry=Fixed(bad))
    [outcome] = s.tick(0)
    assert outcome.result is Result.FAILED
    assert isinstance(outcome.error, TypeError | ValueError)
    assert s.status("t") is Status.FAILED
    serves_others(s, 1)


@BAD
def test_reschedule_to_a_garbage_time_is_refused_and_changes_nothing(bad: Any) -> None:
    s = Scheduler(clock=ManualClock(0))
    s.schedule_once("t", 5, ok)
    with pytest.raises((TypeError, ValueError)):
        s.reschedule("t", Script(bad))
    assert s.next_run_time() == 5
    assert rows(s.tick(5)) == [("t", 5, "ok", 0)]
    check_table(s)


def test_a_clock_returning_garbage_is_refused_when_scheduling() -> None:
    s = Scheduler(clock=lambda: math.nan)
    with pytest.raises(ValueError, match="the clock returned nan"):
        s.schedule_once("t", 1, ok)
    with pytest.raises(ValueError, match="the clock returned nan"):
        s.schedule("t", FixedRate(1), ok)
    assert s.next_run_time() is None


# -- #12: a late retry under a bounded misfire policy ----------------------------------


def test_a_late_retry_is_run_not_skipped_and_the_next_slot_starts_at_attempt_0() -> None:
    s = Scheduler(clock=ManualClock(0))
    failures = iter([True])
    s.schedule(
        "t",
        FixedRate(10),
        lambda at: fail(at) if next(failures, False) else None,
        max_retries=1,
        misfire=Misfire.COALESCE,
    )
    assert rows(s.tick(0)) == [("t", 0, "retry", 0)]
    got = s.tick(35)
    assert rows(got) == [("t", 1, "ok", 1), ("t", 30, "ok", 0)]
    assert [o.skipped for o in got] == [0, 2]


# -- #13, #16: a cursor failing during a misfire decision; fatal errors from policies -----


def test_a_cursor_raising_while_skipping_missed_slots_fails_the_run_visibly() -> None:
    s = Scheduler(clock=ManualClock(0))
    s.schedule("t", Script(0, LookupError("cursor broke")), ok, misfire=Misfire.SKIP)
    s.tick(0)  # the run at 0; the cursor then hands back an exception object as a "time"
    s2 = Scheduler(clock=ManualClock(0))
    calls: list[Any] = []

    class Breaks:
        n = 0

        def start(self, now: Any) -> Breaks:
            return self

        def next(self, now: Any) -> Any:
            self.n += 1
            if self.n >= 3:
                raise LookupError("cursor broke")
            return (self.n - 1) * 10

    s2.schedule("t", Breaks(), calls.append, misfire=Misfire.COALESCE)
    assert rows(s2.tick(0)) == [("t", 0, "ok", 0)]
    [outcome] = s2.tick(100)  # behind: stepping over slots raises
    assert (outcome.result, type(outcome.error)) == (Result.FAILED, LookupError)
    assert calls == [0]  # the action was not called for the broken run
    assert s2.status("t") is Status.FAILED
    serves_others(s2, 100)


@pytest.mark.parametrize("where", ["cursor", "retry"])
def test_a_fatal_error_from_a_policy_fails_the_task_and_propagates(where: str) -> None:
    s = Scheduler(clock=ManualClock(0))

    class Interrupting:
        def start(self, now: Any) -> Interrupting:
            self.first = True
            return self

        def next(self, now: Any) -> Any:
            if self.first:
                self.first = False
                return 0
            raise KeyboardInterrupt

        def delay(self, retry: int, previous: Any) -> Any:
            raise KeyboardInterrupt

    if where == "cursor":
        s.schedule("t", Interrupting(), ok)
    else:
        s.schedule_once("t", 0, fail, max_retries=2, retry=Interrupting())
    with pytest.raises(KeyboardInterrupt):
        s.tick(0)
    assert s.status("t") is Status.FAILED
    serves_others(s, 1)


def test_an_awaitable_whose_close_raises_still_completes_its_run() -> None:
    class BadAwaitable:
        def __await__(self) -> Any:
            yield

        def close(self) -> None:
            raise RuntimeError("close broke")

    s = Scheduler(clock=ManualClock(0))
    s.schedule_once("t", 0, lambda at: BadAwaitable())
    [outcome] = s.tick(0)
    assert outcome.result is Result.FAILED
    assert isinstance(outcome.error, RuntimeError)
    assert s.status("t") is Status.FAILED


# -- #15: reschedule from inside a failing run ------------------------------------


def test_reschedule_from_a_failing_run_is_not_retried_the_new_schedule_takes_over() -> None:
    s = Scheduler(clock=ManualClock(0))

    def action(at: Any) -> None:
        if at == 0:
            s.reschedule("t", Once(at=50))
            raise ValueError("failing while rescheduled")

    s.schedule_once("t", 0, action, max_retries=3)
    assert rows(s.tick(10)) == [("t", 0, "failed", 0)]
    assert s.status("t") is Status.SCHEDULED
    assert s.next_run_time() == 50
    assert rows(s.tick(50)) == [("t", 50, "ok", 0)]


# -- #17: task ids whose __eq__ raises on a hash collision -------------------------


class Hostile:
    """An id that hashes like the int 42 and, once armed, refuses to be compared."""

    armed = False

    def __hash__(self) -> int:
        return 42

    def __eq__(self, other: object) -> bool:
        if other is self:
            return True
        if self.armed:
            raise RuntimeError("Hostile cannot be compared")
        return False

    def __repr__(self) -> str:
        return "Hostile()"


def test_a_hostile_id_colliding_in_the_table_stalls_nothing_and_keeps_its_outcome() -> None:
    s = Scheduler(clock=ManualClock(0))
    h = Hostile()
    s.schedule_once(42, 10, ok)  # first in the probe chain: looking up h compares it
    s.schedule_once(h, 0, ok)
    h.armed = True
    [outcome] = s.tick(0)  # claim looks h up, completion deletes it: both compare with 42
    assert (outcome.task_id, outcome.result) == (h, Result.OK)
    assert rows(s.tick(10)) == [(42, 10, "ok", 0)]
    assert s.status(42) is Status.DONE
    check_table(s)


def test_a_hostile_id_colliding_in_the_history_keeps_its_outcome_and_status() -> None:
    s = Scheduler(clock=ManualClock(0))
    h = Hostile()
    s.schedule_once(42, 0, ok)
    s.schedule_once(h, 0, ok)
    h.armed = True
    got = s.tick(0)  # h's completion meets 42 in the history
    assert [o.task_id for o in got] == [42, h]
    assert s.status(h) is Status.DONE
    assert s.status(42) is Status.DONE  # kept by identity beside h (it was forgotten)
    check_table(s)
    serves_others(s, 1)


def test_a_hostile_id_that_ran_keeps_its_status_when_an_id_of_its_hash_finishes() -> None:
    """It ran, then lost its status: 42 finishing later met it in the history, and
    the history forgot the ids it could not compare (the faults suite's last catch)."""
    s = Scheduler(clock=ManualClock(0))
    h = Hostile()
    s.schedule_once(42, 10, ok)
    s.schedule_once(h, 0, ok)
    h.armed = True
    [ran] = s.tick(0)
    assert ran.task_id is h
    assert s.status(h) is Status.DONE  # looking it up meets 42 in the table: by identity
    assert rows(s.tick(10)) == [(42, 10, "ok", 0)]
    assert s.status(h) is Status.DONE
    assert s.status(42) is Status.DONE
    info = s.info(h)
    assert info is not None
    assert info.status is Status.DONE
    check_table(s)


# -- #18: Backoff with a float base -------------------------------------------------


def test_backoff_with_a_float_base_caps_instead_of_overflowing() -> None:
    assert Backoff(0.5, cap=10).delay(1100, None) == 10
    assert Backoff(0.5).delay(1100, None) == math.inf
    s = Scheduler(clock=ManualClock(0))
    s.schedule_once("t", 0, fail, max_retries=2000, retry=Backoff(0.5, cap=10))
    got = s.tick(25_000)
    assert [o.result for o in got[-3:]] == [Result.RETRY, Result.RETRY, Result.FAILED]
    assert len(got) == 2001
    assert got[-1].at - got[-2].at == 10


# -- #19: runs chosen by a misfire policy keep (time, seq) order ------------------------


def test_a_coalesced_run_runs_in_time_order_with_other_tasks() -> None:
    s = Scheduler(clock=ManualClock(0))
    s.schedule("a", FixedRate(10), ok, misfire=Misfire.COALESCE)
    s.schedule("b", FixedRate(10), ok)
    s.tick(0)
    got = s.tick(65)
    assert [o.at for o in got] == sorted(o.at for o in got)
    assert [(o.task_id, o.at) for o in got if o.task_id == "a"] == [("a", 60)]


# -- #11, #20: cron --------------------------------------------------------------------


@pytest.mark.parametrize(
    ("zone", "wall"),
    [
        ("Europe/Berlin", datetime(2026, 10, 25, 2, 30)),
        ("America/New_York", datetime(2026, 11, 1, 1, 30)),
    ],
)
@pytest.mark.parametrize("expression", ["* * * * * *", "*/2 * * * * *", "*/15 * * * *"])
def test_seconds_cron_schedules_in_a_repeated_hour(
    zone: str, wall: datetime, expression: str
) -> None:
    tz = ZoneInfo(zone)
    second_pass = wall.replace(tzinfo=tz, fold=1).timestamp()
    s = Scheduler(clock=ManualClock(second_pass))
    assert s.schedule("c", Cron(expression, tz=zone), ok)
    first = s.next_run_time()
    assert first is not None
    assert first > second_pass
    # the repeated hour ran on its first pass: the next run is where the repetition ends
    assert datetime.fromtimestamp(first, tz).replace(tzinfo=None) == wall.replace(minute=0) + (
        datetime(2000, 1, 1, 1) - datetime(2000, 1, 1)
    )


def test_a_cron_with_no_run_left_raises_value_error() -> None:
    t = datetime(9999, 6, 1).timestamp()
    with pytest.raises(ValueError, match="has no run after"):
        Cron("0 0 1 1 *").next_after(t)
    s = Scheduler(clock=ManualClock(t))
    with pytest.raises(ValueError, match="has no run after"):
        s.schedule("c", Cron("0 0 1 1 *"), ok)
    assert s.status("c") is None


# -- small ones ---------------------------------------------------------------------


def test_priority_none_is_refused_by_every_scheduling_method() -> None:
    s = Scheduler(clock=ManualClock(0))
    with pytest.raises(TypeError, match="priority must be an int, got None"):
        s.schedule_once("t", 0, ok, priority=None)  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="priority must be an int, got None"):
        s.schedule_at_fixed_rate("t", 0, 1, ok, priority=None)  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="priority must be an int, got None"):
        s.schedule("t", FixedDelay(1), ok, priority=None)  # type: ignore[arg-type]
    assert s.status("t") is None


@pytest.mark.parametrize(
    ("make", "name"),
    [
        (ManualClock, "start"),
        (lambda v: ManualClock(0).set(v), "t"),
        (lambda v: Once(at=v), "at"),
        (lambda v: FixedRate(1, start=v), "start"),
        (lambda v: Cron("* * * * *").next_after(v), "t"),
        (lambda v: Scheduler(clock=ManualClock(0)).schedule_once("x", v, ok), "delay"),
        (lambda v: Scheduler(clock=ManualClock(0)).tick(v), "now"),
    ],
)
@pytest.mark.parametrize("huge", [10**400, -(10**400)], ids=["1e400", "-1e400"])
def test_huge_ints_are_refused_with_a_value_error_naming_the_argument(
    make: Any, name: str, huge: int
) -> None:
    with pytest.raises(ValueError, match=f"^{name} must be a finite number"):
        make(huge)


def test_a_delay_that_overflows_the_clock_is_refused() -> None:
    s = Scheduler(clock=ManualClock(1.5e308))
    with pytest.raises(ValueError, match="past the largest time"):
        s.schedule_once("t", 1e308, ok)
    assert s.status("t") is None


def test_ids_are_any_hashable_still() -> None:
    s = Scheduler(clock=ManualClock(0))
    for task_id in [1, "a", (1, "a"), frozenset({1}), None, 1.5]:
        assert s.schedule_once(task_id, 0, ok)
    assert len(s.tick(0)) == 6
