"""Policies through the public API: retry, misfire, fixed delay, absolute times,
priorities, pause/resume/reschedule, custom schedules."""

from __future__ import annotations

import random
from collections.abc import Callable, Iterator
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from rota import (
    Backoff,
    FixedDelay,
    FixedRate,
    ManualClock,
    Misfire,
    NoRetry,
    Once,
    Result,
    Scheduler,
    Status,
)
from tests.helpers import check_table, failing, recorder, rows

Make = Callable[..., Scheduler]

# -- retry policies -----------------------------------------------------------------


def retry_times(sched: Scheduler, task_id: str = "a", until: int = 10**6) -> list[Any]:
    return [o.at for o in sched.tick(until) if o.task_id == task_id]


def test_default_backoff_policy_is_the_contracts(make_sched: Make) -> None:
    for retry in (None, Backoff(1)):
        sched = make_sched(clock=ManualClock(0), retry=retry)
        sched.schedule_once("a", 0, failing(ValueError()), max_retries=4)
        times = retry_times(sched)
        assert times == [0, 1, 3, 7, 15]
        assert all(type(t) is int for t in times)


def test_cap_bounds_every_delay(make_sched: Make) -> None:
    sched = make_sched(clock=ManualClock(0), retry=Backoff(1, cap=4))
    sched.schedule_once("a", 0, failing(ValueError()), max_retries=5)
    assert retry_times(sched) == [0, 1, 3, 7, 11, 15]


@pytest.mark.parametrize(
    ("jitter", "low", "high"),
    [("full", lambda d: 0, lambda d: d), ("equal", lambda d: d / 2, lambda d: d)],
)
def test_full_and_equal_jitter_stay_in_their_range(jitter: Any, low: Any, high: Any) -> None:
    policy = Backoff(2, cap=20, jitter=jitter, rng=random.Random(5))
    for retry in range(1, 12):
        nominal = min(20, 2 * 2 ** (retry - 1))
        for _ in range(50):
            delay = policy.delay(retry, None)
            assert low(nominal) <= delay <= high(nominal)


def test_decorrelated_jitter_grows_from_the_previous_delay_and_is_capped() -> None:
    policy = Backoff(1, cap=30, jitter="decorrelated", rng=random.Random(9))
    previous = None
    for retry in range(1, 40):
        delay = policy.delay(retry, previous)
        upper = 3 * (1 if previous is None else previous)
        assert 1 <= delay <= min(30, upper)
        previous = delay


def test_seeded_jitter_is_deterministic_and_breaks_lockstep() -> None:
    # in memory only: a store keeps Backoff as data, not its rng
    def run(seed: int) -> list[Any]:
        sched = Scheduler(clock=ManualClock(0))
        policy = Backoff(1, jitter="full", rng=random.Random(seed))
        for i in range(20):
            sched.schedule_once(i, 0, failing(OSError()), max_retries=1, retry=policy)
        return [o.at for o in sched.tick(100) if o.attempt == 1]

    assert run(1) == run(1)
    assert run(1) != run(2)
    assert len(set(run(1))) == 20  # no two tasks retry at the same time


def test_per_task_policy_overrides_the_schedulers(make_sched: Make) -> None:
    sched = make_sched(clock=ManualClock(0), retry=Backoff(10))
    sched.schedule_once("a", 0, failing(ValueError()), max_retries=2)
    sched.schedule_once("b", 0, failing(ValueError()), max_retries=2, retry=Backoff(1))
    outcomes = sched.tick(1000)
    assert [o.at for o in outcomes if o.task_id == "a"] == [0, 10, 30]
    assert [o.at for o in outcomes if o.task_id == "b"] == [0, 1, 3]


def test_no_retry_never_retries(make_sched: Make) -> None:
    sched = make_sched(clock=ManualClock(0))
    sched.schedule_once("a", 0, failing(ValueError()), max_retries=5, retry=NoRetry())
    assert rows(sched.tick(100)) == [("a", 0, "failed", 0)]
    assert sched.status("a") is Status.FAILED


def test_a_raising_retry_policy_fails_the_task_and_never_leaves_it_stuck() -> None:
    # in memory only: a store keeps only the built-in retry policies
    class Broken:
        def delay(self, retry: int, previous: Any) -> Any:
            raise RuntimeError("policy bug")

    sched = Scheduler(clock=ManualClock(0))
    sched.schedule_at_fixed_rate("r", 0, 10, failing(ValueError()), max_retries=1, retry=Broken())
    (outcome,) = sched.tick(100)
    assert outcome.result is Result.FAILED
    assert isinstance(outcome.error, RuntimeError)
    assert sched.status("r") is Status.FAILED
    check_table(sched)


@pytest.mark.parametrize(
    ("make", "exc", "message"),
    [
        (lambda: Backoff(0), ValueError, "base must be a finite number > 0, got 0"),
        (lambda: Backoff(1, cap=-1), ValueError, "cap must be a finite number > 0, got -1"),
        (lambda: Backoff(1, jitter="half"), ValueError, "jitter must be one of"),  # type: ignore[arg-type]
        (lambda: Backoff(1, rng=3), TypeError, "rng must be a random.Random, got 3"),  # type: ignore[arg-type]
        (lambda: Scheduler(retry=3), TypeError, "retry must be a retry policy"),  # type: ignore[arg-type]
        (lambda: Misfire.bounded(-1), ValueError, "k must be >= 0, got -1"),
        (lambda: Misfire.bounded(1.5), TypeError, "k must be an int, got 1.5"),  # type: ignore[arg-type]
        (lambda: FixedRate(0), ValueError, "period must be a finite number > 0, got 0"),
        (lambda: FixedDelay(-1), ValueError, "delay must be a finite number > 0, got -1"),
        (lambda: Once(at=float("nan")), ValueError, "at must be a finite number, got nan"),
        (lambda: Once(3, at=5), ValueError, "give delay or at, not both"),
        (lambda: FixedRate(3, delay=1, start=5), ValueError, "give delay or start, not both"),
    ],
)
def test_bad_policy_arguments_are_refused(make: Any, exc: type[Exception], message: str) -> None:
    with pytest.raises(exc, match=message.replace("(", r"\(").replace(".", r"\.")):
        make()


def test_bad_schedule_arguments_change_nothing(make_sched: Make) -> None:
    sched = make_sched(clock=ManualClock(0))
    with pytest.raises(TypeError, match="when must be a schedule"):
        sched.schedule("a", 5, print)  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="priority must be an int, got 'high'"):
        sched.schedule_once("a", 1, print, priority="high")  # type: ignore[arg-type]
    with pytest.raises(TypeError, match=r"misfire must be a rota\.misfire\.Misfire"):
        sched.schedule_at_fixed_rate("a", 1, 1, print, misfire="skip")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="misfire applies to recurring schedules"):
        sched.schedule("a", Once(1), print, misfire=Misfire.SKIP)
    assert sched.status("a") is None
    assert sched.next_run_time() is None


def test_a_schedule_with_no_run_time_is_refused() -> None:
    sched = Scheduler(clock=ManualClock(0))  # in memory only: a custom schedule
    with pytest.raises(ValueError, match="when has no run time"):
        sched.schedule("a", Times([]), print)
    assert sched.status("a") is None


# -- misfire policies -------------------------------------------------------------


@pytest.mark.parametrize(
    ("misfire", "expected"),
    [
        (None, [(0, 0), (10, 0), (20, 0), (30, 0)]),
        (Misfire.CATCH_UP, [(0, 0), (10, 0), (20, 0), (30, 0)]),
        (Misfire.SKIP, [(0, 0)]),
        (Misfire.COALESCE, [(0, 0), (30, 2)]),
        (Misfire.bounded(2), [(0, 0), (20, 1), (30, 0)]),
    ],
)
def test_misfire_policies_after_a_jump(
    misfire: Misfire | None, expected: list[Any], make_sched: Make
) -> None:
    sched = make_sched(clock=ManualClock(0))
    sched.schedule_at_fixed_rate("r", 0, 10, lambda at: None, misfire=misfire)
    got = sched.tick(9) + sched.tick(35)
    assert [(o.at, o.skipped) for o in got] == expected


def test_skipped_slots_are_reported_on_the_next_run(make_sched: Make) -> None:
    sched = make_sched(clock=ManualClock(0))
    sched.schedule_at_fixed_rate("r", 0, 10, lambda at: None, misfire=Misfire.SKIP)
    sched.tick(9)
    assert sched.tick(35) == []  # 10, 20 and 30 were missed
    assert sched.next_run_time() == 40
    assert [(o.at, o.skipped) for o in sched.tick(40)] == [(40, 3)]


def test_bounded_catch_up_runs_the_latest_k_missed_slots(make_sched: Make) -> None:
    sched = make_sched(clock=ManualClock(0))
    sched.schedule_at_fixed_rate("r", 0, 10, lambda at: None, misfire=Misfire.bounded(2))
    sched.tick(9)
    got = sched.tick(65)
    assert [(o.at, o.skipped) for o in got] == [(50, 4), (60, 0)]
    assert sched.next_run_time() == 70


def test_a_first_slot_in_the_past_obeys_the_misfire_policy(make_sched: Make) -> None:
    sched = make_sched(clock=ManualClock(100))
    sched.schedule("skip", FixedRate(10, start=45), lambda at: None, misfire=Misfire.SKIP)
    sched.schedule("all", FixedRate(10, start=75), lambda at: None)
    assert sched.next_run_time() == 45  # the first slot, until the misfire policy sees it
    got = sched.tick(100)
    assert [o.at for o in got if o.task_id == "all"] == [75, 85, 95]
    assert [o.at for o in got if o.task_id == "skip"] == []
    assert sched.next_run_time() == 105
    assert [(o.at, o.skipped) for o in sched.tick(105) if o.task_id == "skip"] == [(105, 6)]


def misfire_oracle(period: int, offset: int, limit: int | None, nows: list[int]) -> list[Any]:
    """Brute force over slot indices: which slots run, and the skips reported with them.

    When a run's turn comes late with no decision pending and a later slot
    is due too, the task is behind: of the due slots the latest ``limit``
    run, then the first slot after now; the rest are skipped.
    """

    def slot(i: int) -> int:
        return offset + i * period

    queued, skipped = 0, 0
    backlog: list[int] = []
    runs: list[tuple[int, int]] = []
    for now in nows:
        while slot(queued) <= now:
            if limit is not None and not backlog:
                due = [i for i in range(queued, queued + 10_000) if slot(i) <= now]
                keep = due if len(due) == 1 else due[max(0, len(due) - limit) :] if limit else []
                skipped += len(due) - len(keep)
                queued, *backlog = [*keep, due[-1] + 1]
                if slot(queued) > now:
                    break
            runs.append((slot(queued), skipped))
            skipped = 0
            queued = backlog.pop(0) if backlog else queued + 1
    return runs


@pytest.mark.parametrize("limit", [None, 0, 1, 2, 3])
def test_misfire_policies_match_a_brute_force_enumeration(
    limit: int | None, make_sched: Make
) -> None:
    from hypothesis import given, settings
    from hypothesis import strategies as st

    # each example makes a scheduler: on a database store, fewer of them
    examples = 150 if make_sched.backend in ("memory", "durable-memory") else 20  # type: ignore[attr-defined]

    @settings(max_examples=examples, deadline=None)
    @given(
        period=st.integers(1, 9),
        offset=st.integers(0, 20),
        steps=st.lists(st.integers(0, 40), min_size=1, max_size=12),
    )
    def check(period: int, offset: int, steps: list[int]) -> None:
        nows, now = [], 0
        for step in steps:
            now += step
            nows.append(now)
        sched = make_sched(clock=ManualClock(0))
        misfire = None if limit is None else Misfire.bounded(limit)
        sched.schedule_at_fixed_rate("r", offset, period, lambda at: None, misfire=misfire)
        got = [(o.at, o.skipped) for now in nows for o in sched.tick(now)]
        assert got == misfire_oracle(period, offset, limit, nows)
        if make_sched.backend == "memory":  # type: ignore[attr-defined]
            check_table(sched)

    check()


# -- fixed delay, absolute times, priorities -------------------------------------------


def test_fixed_delay_counts_from_when_the_run_finished(make_sched: Make) -> None:
    sched = make_sched(clock=ManualClock(1000))
    sched.schedule("d", FixedDelay(5, initial_delay=2), lambda at: None)
    assert [o.at for o in sched.tick(1002)] == [1002]
    assert sched.next_run_time() == 1007
    assert sched.tick(1006) == []
    assert [o.at for o in sched.tick(1010)] == [1007]  # ran late, at 1010...
    assert sched.next_run_time() == 1015  # ... so the next one is 5 after that


def test_absolute_times(make_sched: Make) -> None:
    sched = make_sched(clock=ManualClock(1000))
    log: list[Any] = []
    sched.schedule("once", Once(at=1234), recorder(log, "once"))
    sched.schedule("rate", FixedRate(100, start=1100), recorder(log, "rate"))
    sched.tick(1350)
    assert log == [("rate", 1100), ("rate", 1200), ("once", 1234), ("rate", 1300)]
    assert sched.status("once") is Status.DONE


def test_priorities_order_same_time_runs_then_scheduling_order(make_sched: Make) -> None:
    sched = make_sched(clock=ManualClock(0))
    log: list[Any] = []
    for name, priority in [("a", 0), ("b", 5), ("c", -1), ("d", 0), ("e", 5), ("f", -1)]:
        sched.schedule_once(name, 3, recorder(log, name), priority=priority)
    sched.schedule_once("early", 1, recorder(log, "early"), priority=99)
    sched.tick(3)
    assert [name for name, _ in log] == ["early", "c", "f", "a", "d", "b", "e"]


def test_priority_persists_across_retries_and_slots(make_sched: Make) -> None:
    sched = make_sched(clock=ManualClock(0), backoff=10)
    sched.schedule_at_fixed_rate("low", 0, 10, lambda at: None)
    sched.schedule_at_fixed_rate("high", 0, 10, lambda at: None, priority=-1)
    sched.schedule_once("retry", 0, failing(ValueError()), max_retries=1, priority=-2)
    order = [o.task_id for o in sched.tick(10) if o.at == 10]
    assert order == ["retry", "high", "low"]


# -- pause, resume, reschedule ------------------------------------------------------


def test_pause_keeps_a_task_from_running_until_resumed(make_sched: Make) -> None:
    clock = ManualClock(0)
    sched = make_sched(clock=clock)
    log: list[Any] = []
    sched.schedule_once("a", 5, recorder(log, "a"))
    sched.schedule_once("b", 7, recorder(log, "b"))
    assert sched.pause("a") is True
    assert sched.pause("a") is False
    assert sched.is_paused("a")
    assert sched.status("a") is Status.SCHEDULED
    assert sched.next_run_time() == 7
    sched.tick(20)
    assert log == [("b", 7)]
    clock.set(30)
    assert sched.resume("a") is True
    assert sched.resume("a") is False
    assert sched.next_run_time() == 5  # overdue: runs at once, reported at its time
    assert rows(sched.tick(30)) == [("a", 5, "ok", 0)]
    check_table(sched)


def test_pause_from_inside_a_run_holds_the_next_slot(make_sched: Make) -> None:
    clock = ManualClock(0)
    sched = make_sched(clock=clock)
    sched.schedule_at_fixed_rate("r", 0, 10, lambda at: sched.pause("r") if at == 10 else None)
    assert [o.at for o in sched.tick(10)] == [0, 10]
    assert sched.is_paused("r")
    assert sched.tick(100) == []
    clock.set(100)
    sched.resume("r")
    assert [o.at for o in sched.tick(100)] == [20, 30, 40, 50, 60, 70, 80, 90, 100]


def test_resume_applies_the_misfire_policy_to_slots_missed_while_paused(make_sched: Make) -> None:
    clock = ManualClock(0)
    sched = make_sched(clock=clock)
    sched.schedule_at_fixed_rate("r", 0, 10, lambda at: None, misfire=Misfire.COALESCE)
    sched.tick(0)
    sched.pause("r")
    clock.set(55)
    sched.resume("r")
    assert [(o.at, o.skipped) for o in sched.tick(55)] == [(50, 4)]
    assert sched.next_run_time() == 60


def test_cancel_and_reschedule_a_paused_task(make_sched: Make) -> None:
    sched = make_sched(clock=ManualClock(0))
    sched.schedule_once("a", 5, lambda at: None)
    sched.schedule_once("b", 5, lambda at: None)
    sched.pause("a")
    sched.pause("b")
    assert sched.cancel("a") is True
    assert sched.status("a") is Status.CANCELLED
    assert sched.reschedule("b", Once(at=9)) is True
    assert sched.is_paused("b")
    sched.resume("b")
    assert rows(sched.tick(9)) == [("b", 9, "ok", 0)]
    assert sched.pause("b") is False  # finished
    check_table(sched)


def test_reschedule_changes_the_period_and_keeps_the_task(make_sched: Make) -> None:
    clock = ManualClock(0)
    sched = make_sched(clock=clock)
    sched.schedule_at_fixed_rate("r", 0, 10, lambda at: None)
    assert [o.at for o in sched.tick(10)] == [0, 10]
    clock.set(12)
    assert sched.reschedule("r", FixedRate(3, delay=3)) is True
    assert sched.status("r") is Status.SCHEDULED
    assert [o.at for o in sched.tick(24)] == [15, 18, 21, 24]
    assert sched.reschedule("nope", Once(1)) is False


def test_reschedule_while_running_takes_over_after_the_run(make_sched: Make) -> None:
    sched = make_sched(clock=ManualClock(0))

    def act(at: int) -> None:
        if at == 0:
            assert sched.reschedule("r", Once(at=50))

    sched.schedule_at_fixed_rate("r", 0, 10, act)
    assert [o.at for o in sched.tick(100)] == [0, 50]
    assert sched.status("r") is Status.DONE


# -- custom schedules -----------------------------------------------------------------


class Times:
    """A custom schedule: run at each of the given times, then stop."""

    def __init__(self, times: list[int]) -> None:
        self.times = times

    def start(self, now: Any) -> Any:
        return TimesCursor(iter(self.times))


class TimesCursor:
    def __init__(self, times: Iterator[int]) -> None:
        self.times = times

    def next(self, now: Any) -> int | None:
        return next(self.times, None)


def test_a_custom_schedule_runs_at_its_times_then_finishes() -> None:
    # in memory only: a store keeps only the built-in schedules
    sched = Scheduler(clock=ManualClock(0))
    sched.schedule("t", Times([3, 4, 9]), lambda at: None)
    assert [o.at for o in sched.tick(100)] == [3, 4, 9]
    assert sched.status("t") is Status.DONE


def test_a_schedule_that_raises_fails_its_task() -> None:
    # in memory only: a store keeps only the built-in schedules
    class Bad:
        def start(self, now: Any) -> Any:
            return self

        def next(self, now: Any) -> Any:
            if now > 0:
                raise ValueError("schedule bug")
            return 1

    sched = Scheduler(clock=ManualClock(0))
    sched.schedule("b", Bad(), lambda at: None)
    (outcome,) = sched.tick(5)
    assert outcome.result is Result.FAILED
    assert isinstance(outcome.error, ValueError)
    assert sched.status("b") is Status.FAILED


@settings(max_examples=200, deadline=None)
@given(
    first=st.integers(-1000, 1000) | st.floats(-1000, 1000),
    period=st.integers(1, 50) | st.floats(0.001, 50),
    ahead=st.integers(0, 2000) | st.floats(0, 2000),
    keep=st.integers(0, 4),
)
def test_fixed_rate_skip_matches_stepping(first: float, period: float, ahead: float,
                                          keep: int) -> None:  # fmt: skip
    """``skip`` (a jump) finds the slots stepping finds: as many, the same last ones,
    and leaves the cursor where stepping would."""
    now = first + ahead
    jumped = FixedRate(period, start=first).start(first)
    walker = FixedRate(period, start=first).start(first)
    assert jumped.next(first) == walker.next(first)  # both at the first slot
    found: list[float] = []
    while (slot := walker.next(now)) is not None and slot <= now:
        found.append(slot)
    stepped = slot
    count, tail = jumped.skip(now, keep)  # type: ignore[attr-defined]
    assert count == len(found)
    assert tail == found[max(0, len(found) - keep) :]
    assert jumped.next(now) == stepped
