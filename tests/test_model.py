"""Stateful property test: the scheduler against a naive, obviously-correct oracle.

The oracle keeps pending runs in a plain list and scans it for the minimum
(time, seq); it re-states the contract's rules directly. Hypothesis drives
both with the same operations: schedule (one-off and fixed-rate, with a
priority), cancel, pause, resume, clock moves, and ticks with ``now`` going
forward and back; actions fail and cancel themselves by drawn patterns.
Every outcome, status, pause flag and next_run_time must agree, and the
engine's invariants must hold after every step.
"""

from __future__ import annotations

import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from hypothesis import settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, rule

from rota import ManualClock, Scheduler
from rota.store import MemoryStore, SQLiteStore
from tests.helpers import AutoRegistering, check_table, engine_of

IDS = st.sampled_from(["a", "b", "c", 1, 2])
PATTERN = st.lists(st.booleans(), min_size=1, max_size=4)
PRIORITY = st.sampled_from([0, 0, -1, 1])


@dataclass
class Behaviour:
    """How a task's n-th call behaves: fail if fails[n % len], cancel itself likewise."""

    fails: list[bool]
    cancels: list[bool]
    calls: int = 0

    def next(self) -> tuple[bool, bool]:
        n = self.calls
        self.calls += 1
        return self.fails[n % len(self.fails)], self.cancels[n % len(self.cancels)]


@dataclass
class OracleTask:
    status: str
    max_retries: int
    behaviour: Behaviour
    period: int | None = None
    first: int = 0
    slot: int = 0
    attempt: int = 0
    priority: int = 0
    held: tuple[int, int] | None = None  # (at, attempt) of a paused task's next run


@dataclass
class Oracle:
    """The contract, re-stated as directly as possible."""

    backoff: int
    tasks: dict[Any, OracleTask] = field(default_factory=dict)
    pending: list[tuple[int, int, int, Any]] = field(default_factory=list)  # at, prio, seq, id
    seq: int = 0

    def push(self, at: int, task_id: Any) -> None:
        self.pending.append((at, self.tasks[task_id].priority, self.seq, task_id))
        self.seq += 1

    def add(self, task_id: Any, at: int, task: OracleTask) -> bool:
        old = self.tasks.get(task_id)
        if old is not None and old.status in ("scheduled", "running"):
            return False
        self.tasks[task_id] = task
        self.push(at, task_id)
        return True

    def cancel(self, task_id: Any) -> bool:
        task = self.tasks.get(task_id)
        if task is None or task.status not in ("scheduled", "running"):
            return False
        task.status = "cancelled"
        task.held = None
        self.pending = [e for e in self.pending if e[3] != task_id]
        return True

    def pause(self, task_id: Any) -> bool:
        task = self.tasks.get(task_id)
        if task is None or task.status != "scheduled" or task.held is not None:
            return False
        (entry,) = [e for e in self.pending if e[3] == task_id]
        self.pending.remove(entry)
        task.held = (entry[0], 0)
        return True

    def resume(self, task_id: Any) -> bool:
        task = self.tasks.get(task_id)
        if task is None or task.held is None:
            return False
        self.push(task.held[0], task_id)
        task.held = None
        return True

    def next_run_time(self) -> int | None:
        return min(self.pending)[0] if self.pending else None  # held runs are not queued

    def tick(self, now: int) -> list[tuple[Any, int, str, int]]:
        out: list[tuple[Any, int, str, int]] = []
        while True:
            due = [e for e in self.pending if e[0] <= now]
            if not due:
                return out
            entry = min(due)
            self.pending.remove(entry)
            at, _, _, task_id = entry
            task = self.tasks[task_id]
            task.status = "running"
            fails, cancels = task.behaviour.next()
            if cancels:
                self.cancel(task_id)
            attempt = task.attempt
            if task.status == "cancelled":
                out.append((task_id, at, "failed" if fails else "ok", attempt))
                continue
            if fails and attempt < task.max_retries:
                task.attempt += 1
                task.status = "scheduled"
                self.push(at + self.backoff * 2**attempt, task_id)
                out.append((task_id, at, "retry", attempt))
                continue
            out.append((task_id, at, "failed" if fails else "ok", attempt))
            if task.period is None:
                task.status = "failed" if fails else "done"
            else:
                task.attempt = 0
                task.slot += 1
                task.status = "scheduled"
                self.push(task.first + task.slot * task.period, task_id)


class SchedulerVsOracle(RuleBasedStateMachine):
    def __init__(self) -> None:
        super().__init__()
        self.clock = ManualClock(1000)
        self.now = 1000  # the clock as an int, for the oracle
        self.sched = self.make(self.clock)
        self.oracle = Oracle(backoff=3)
        self.behaviours: dict[Any, Behaviour] = {}

    def make(self, clock: ManualClock) -> Scheduler:
        sched = Scheduler(clock=clock, backoff=3)
        engine_of(sched).queue._slack = 1  # compaction happens within a few steps
        return sched

    def key(self, task_id: Any) -> Any:
        """The id the scheduler is given for a generated one."""
        return task_id

    def check(self) -> None:
        check_table(self.sched)

    def _action(self, task_id: Any, behaviour: Behaviour) -> Any:
        sched = self.sched

        def action(at: int) -> None:
            fails, cancels = behaviour.next()
            if cancels:
                sched.cancel(self.key(task_id))
            if fails:
                raise ValueError(f"{task_id} fails at {at}")

        return action

    @rule(task_id=IDS, delay=st.integers(0, 30), retries=st.integers(0, 3),
          fails=PATTERN, cancels=PATTERN, priority=PRIORITY)  # fmt: skip
    def schedule_once(
        self,
        task_id: Any,
        delay: int,
        retries: int,
        fails: list[bool],
        cancels: list[bool],
        priority: int,
    ) -> None:
        real, model = Behaviour(fails, cancels), Behaviour(fails, cancels)
        at = self.now + delay
        task = OracleTask("scheduled", retries, model, priority=priority)
        expected = self.oracle.add(task_id, at, task)
        action = self._action(task_id, real)
        got = self.sched.schedule_once(
            self.key(task_id), delay, action, retries, priority=priority
        )
        assert got == expected

    @rule(task_id=IDS, delay=st.integers(0, 30), period=st.integers(1, 15),
          retries=st.integers(0, 3), fails=PATTERN, cancels=PATTERN,
          priority=PRIORITY)  # fmt: skip
    def schedule_at_fixed_rate(
        self,
        task_id: Any,
        delay: int,
        period: int,
        retries: int,
        fails: list[bool],
        cancels: list[bool],
        priority: int,
    ) -> None:
        real, model = Behaviour(fails, cancels), Behaviour(fails, cancels)
        first = self.now + delay
        task = OracleTask(
            "scheduled", retries, model, period=period, first=first, priority=priority
        )
        expected = self.oracle.add(task_id, first, task)
        action = self._action(task_id, real)
        got = self.sched.schedule_at_fixed_rate(
            self.key(task_id), delay, period, action, retries, priority=priority
        )
        assert got == expected

    @rule(task_id=IDS)
    def cancel(self, task_id: Any) -> None:
        assert self.sched.cancel(self.key(task_id)) == self.oracle.cancel(task_id)

    @rule(task_id=IDS)
    def pause(self, task_id: Any) -> None:
        assert self.sched.pause(self.key(task_id)) == self.oracle.pause(task_id)

    @rule(task_id=IDS)
    def resume(self, task_id: Any) -> None:
        assert self.sched.resume(self.key(task_id)) == self.oracle.resume(task_id)

    @rule(delta=st.integers(0, 20))
    def advance(self, delta: int) -> None:
        self.now += delta
        self.clock.advance(delta)

    @rule(offset=st.integers(-20, 40))
    def tick(self, offset: int) -> None:
        now = self.now + offset
        got = [(o.task_id, o.at, str(o.result), o.attempt) for o in self.sched.tick(now)]
        assert got == [(self.key(t), *rest) for t, *rest in self.oracle.tick(now)]

    @invariant()
    def agree(self) -> None:
        assert self.sched.next_run_time() == self.oracle.next_run_time()
        for task_id, task in self.oracle.tasks.items():
            assert self.sched.status(self.key(task_id)) == task.status, task_id
            assert self.sched.is_paused(self.key(task_id)) == (task.held is not None), task_id
        self.check()


SchedulerVsOracle.TestCase.settings = settings(max_examples=300, stateful_step_count=40,
                                               deadline=None)  # fmt: skip
test_scheduler_matches_oracle = SchedulerVsOracle.TestCase


class DurableVsOracle(SchedulerVsOracle):
    """The same model over the durable path on a MemoryStore (ids as str)."""

    def make(self, clock: ManualClock) -> Scheduler:
        return AutoRegistering(MemoryStore(), clock=clock, backoff=3)

    def key(self, task_id: Any) -> Any:
        return str(task_id)

    def check(self) -> None:
        pass  # the store's rows are checked through every query above


class SQLiteVsOracle(DurableVsOracle):
    """The same model over a SQLite file (one per example, in a directory of its own)."""

    def make(self, clock: ManualClock) -> Scheduler:
        self.where = tempfile.TemporaryDirectory()
        return AutoRegistering(SQLiteStore(Path(self.where.name) / "s.db"), clock=clock, backoff=3)

    def teardown(self) -> None:
        self.sched.store.close()  # type: ignore[attr-defined]
        self.where.cleanup()


DurableVsOracle.TestCase.settings = settings(max_examples=150, stateful_step_count=40,
                                             deadline=None)  # fmt: skip
SQLiteVsOracle.TestCase.settings = settings(max_examples=40, stateful_step_count=30,
                                            deadline=None)  # fmt: skip
test_durable_scheduler_matches_oracle = DurableVsOracle.TestCase
test_sqlite_scheduler_matches_oracle = SQLiteVsOracle.TestCase
