"""A Hypothesis state machine that mixes faults into ordinary scheduling.

Steps schedule tasks whose actions succeed, fail, raise a fatal
``BaseException``, cancel or reschedule themselves or return an awaitable;
whose schedules return garbage or raise after a while; whose retry policies
return garbage or raise. Others cancel, pause, resume, reschedule (to garbage
too), move the clock both ways and tick. After every step:

* the engine's invariants hold (``_check()``);
* no task is stuck ``queued`` or ``running`` (nothing is in flight between steps);
* every action call in a tick that returned has exactly one outcome, and every
  outcome is for a call or carries the policy error that replaced it;
* the scheduler still runs an unrelated task (a step).
"""

from __future__ import annotations

import math
from collections import Counter
from typing import Any

from hypothesis import settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, rule

from rota import ManualClock, Misfire, Once, Result, Scheduler, Status
from tests.helpers import check_table

IDS = st.integers(0, 5)
GARBAGE = st.sampled_from([math.nan, math.inf, -1.0, "x", None, 10**400])
ACTIONS = st.sampled_from(["ok", "fail", "fatal", "cancel-self", "reschedule-self", "awaitable"])


class Fatal(BaseException):
    """A fatal error an action or policy may raise."""


class Cursor:
    """Fixed-rate slots for ``good`` calls, then ``bad`` (a value, or an exception to raise)."""

    def __init__(self, first: float, period: float, good: int, bad: Any) -> None:
        self.slot, self.period, self.left, self.bad = first, period, good, bad

    def start(self, now: Any) -> Cursor:
        return self

    def next(self, now: Any) -> Any:
        if self.left == 0:
            if isinstance(self.bad, BaseException):
                raise self.bad
            return self.bad
        self.left -= 1
        at, self.slot = self.slot, self.slot + self.period
        return at


class Retry:
    """A retry policy: a delay of 1 for ``good`` retries, then ``bad``."""

    def __init__(self, good: int, bad: Any) -> None:
        self.left, self.bad = good, bad

    def delay(self, retry: int, previous: Any) -> Any:
        if self.left == 0:
            if isinstance(self.bad, BaseException):
                raise self.bad
            return self.bad
        self.left -= 1
        return 1


class FaultModel(RuleBasedStateMachine):
    def __init__(self) -> None:
        super().__init__()
        self.clock = ManualClock(1000)
        self.s = Scheduler(clock=self.clock)
        self.calls: list[tuple[Any, Any]] = []
        self.witnesses = 0

    def action(self, task_id: Any, kind: str) -> Any:
        def run(at: Any) -> Any:
            self.calls.append((task_id, at))
            if kind == "fail":
                raise ValueError(at)
            if kind == "fatal":
                raise Fatal(at)
            if kind == "cancel-self":
                self.s.cancel(task_id)
            if kind == "reschedule-self":
                self.s.reschedule(task_id, Once(3))
                raise ValueError("failing while rescheduled")
            if kind == "awaitable":
                return _coroutine()
            return None

        return run

    @rule(
        task_id=IDS,
        kind=ACTIONS,
        delay=st.integers(0, 20),
        retries=st.integers(0, 3),
        retry_bad=st.one_of(st.none(), GARBAGE, st.just(Fatal("retry")), st.just(KeyError())),
    )
    def schedule_once(
        self, task_id: int, kind: str, delay: int, retries: int, retry_bad: Any
    ) -> None:
        retry = None if retry_bad is None else Retry(1, retry_bad)
        self.s.schedule_once(task_id, delay, self.action(task_id, kind), retries, retry=retry)

    @rule(
        task_id=IDS,
        kind=ACTIONS,
        period=st.integers(1, 10),
        good=st.integers(1, 6),
        bad=st.one_of(GARBAGE, st.just(Fatal("cursor")), st.just(LookupError("cursor"))),
        misfire=st.sampled_from([None, 0, 1, 2]),
        retries=st.integers(0, 2),
    )
    def schedule_recurring(
        self, task_id: int, kind: str, period: int, good: int, bad: Any, misfire: Any, retries: int
    ) -> None:
        when = Cursor(self.clock() + period, period, good, bad)
        action = self.action(task_id, kind)
        policy = None if misfire is None else Misfire.bounded(misfire)
        self.s.schedule(task_id, when, action, misfire=policy, max_retries=retries)

    @rule(task_id=IDS)
    def cancel(self, task_id: int) -> None:
        self.s.cancel(task_id)

    @rule(task_id=IDS)
    def pause(self, task_id: int) -> None:
        self.s.pause(task_id)

    @rule(task_id=IDS)
    def resume(self, task_id: int) -> None:
        self.s.resume(task_id)

    @rule(task_id=IDS, bad=st.one_of(GARBAGE, st.integers(0, 30)))
    def reschedule(self, task_id: int, bad: Any) -> None:
        before = self.s.next_run_time()
        try:
            self.s.reschedule(task_id, Cursor(bad, 5, 3, None) if bad is not None else Once(1))
        except (TypeError, ValueError):
            assert self.s.next_run_time() == before  # refused: nothing changed

    @rule(delta=st.integers(0, 40))
    def advance(self, delta: int) -> None:
        self.clock.advance(delta)

    @rule(back=st.integers(0, 30))
    def clock_back(self, back: int) -> None:
        self.clock.set(self.clock() - back)

    @rule()
    def tick(self) -> None:
        start = len(self.calls)
        try:
            outcomes = self.s.tick(self.clock())
        except Fatal:
            return  # recorded as failed, then propagated: the invariants check the rest
        unmatched = Counter(self.calls[start:])
        leftovers = []
        for outcome in outcomes:
            key = (outcome.task_id, outcome.at)
            if unmatched[key]:
                unmatched[key] -= 1
            else:
                leftovers.append(outcome)
        assert not +unmatched, f"calls without an outcome: {+unmatched}"
        for outcome in leftovers:  # runs a broken policy replaced: the action was not called
            assert outcome.result is Result.FAILED, outcome
            assert outcome.error is not None, outcome

    @invariant()
    def nothing_stuck(self) -> None:
        check_table(self.s)
        for task_id in range(6):
            assert self.s.status(task_id) not in (Status.QUEUED, Status.RUNNING)

    @rule()
    def witness(self) -> None:
        """An unrelated task still runs (fatal errors of others may stop a tick or two)."""
        self.witnesses += 1
        task_id = ("witness", self.witnesses)
        self.s.schedule_once(task_id, 0, self.action(task_id, "ok"))
        for _ in range(50):
            try:
                self.tick()
            except AssertionError:
                raise
            if self.s.status(task_id) is Status.DONE:
                return
        raise AssertionError(f"{task_id} never ran: {self.s.status(task_id)}")


async def _coroutine() -> None:
    return None


FaultModel.TestCase.settings = settings(max_examples=300, stateful_step_count=40, deadline=None)
test_fault_model = FaultModel.TestCase
