"""Pools (``rota.Pool``): at most a pool's size of its tasks' runs in flight at once;
a run due while it is full waits (``queued``, ``waiting_for`` the pool) and the runs
that waited start in slot order as places free. The same suite over memory and every
store (a MemoryStore, SQLite, a real PostgreSQL)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from rota import FixedRate, ManualClock, Once, Overlap, Pool, Scheduler, Status
from rota.durable import DurableScheduler
from tests.helpers import make_store

Make = Callable[..., Any]
START = 1_800_000_000.0


def nothing(at: float) -> None:
    pass


def task_of(run: Any) -> str:
    return str(run.entry[2])


def claim_all(sched: Any, now: float) -> list[Any]:
    runs = []
    while (run := sched.table.claim(now)) is not None:
        runs.append(run)
    return runs


def test_a_full_pool_queues_runs_that_start_in_slot_order(make_sched: Make) -> None:
    clock = ManualClock(START)
    sched = make_sched(clock=clock)
    warehouse = Pool("warehouse", 2)
    for i in (3, 1, 0, 2):  # scheduled out of order: slots decide, not declarations
        sched.schedule(f"load{i}", FixedRate(60, start=START + i), nothing, pool=warehouse)
    sched.schedule("free", FixedRate(60, start=START), nothing)  # in no pool
    clock.advance(10)
    first = claim_all(sched, clock())
    assert sorted(map(task_of, first)) == ["free", "load0", "load1"]
    for i in (2, 3):
        info = sched.info(f"load{i}")
        assert sched.status(f"load{i}") is Status.QUEUED
        assert (info.status, info.waiting_for) == (Status.QUEUED, ("pool:warehouse",))
    assert sched.info("load1").waiting_for == ()
    by_id = {task_of(run): run for run in first}
    sched.table.complete(by_id["load1"], None, clock(), clock())
    [second] = claim_all(sched, clock())
    assert task_of(second) == "load2"  # the earlier slot of the two that waited
    assert sched.status("load3") is Status.QUEUED
    sched.table.complete(by_id["load0"], None, clock(), clock())
    [third] = claim_all(sched, clock())
    assert task_of(third) == "load3"
    assert third.entry[0] == START + 3  # its own slot, as it ran
    for run in (second, third, by_id["free"]):
        outcome = sched.table.complete(run, None, clock(), clock())
        assert outcome.result == "ok"
    assert sched.info("load3").waiting_for == ()
    assert claim_all(sched, clock()) == []


def test_a_pool_is_checked_before_anything_changes(make_sched: Make) -> None:
    sched = make_sched(clock=ManualClock(START))
    with pytest.raises(TypeError, match=r"pool must be a rota\.Pool or None, not 'warehouse'"):
        sched.schedule("a", FixedRate(5), nothing, pool="warehouse")
    with pytest.raises(ValueError, match=r"pool= does not go with Overlap\.allow"):
        sched.schedule("a", FixedRate(5), nothing, pool=Pool("w", 2), overlap=Overlap.allow(2))
    assert sched.tasks() == []
    with pytest.raises(ValueError, match="Pool size must be at least 1, not 0"):
        Pool("w", 0)
    with pytest.raises(TypeError, match="Pool size must be an int, not True"):
        Pool("w", True)
    with pytest.raises(ValueError, match="Pool name must be"):
        Pool("two words", 1)


def test_a_one_off_and_a_retry_take_a_place_too(make_sched: Make) -> None:
    clock = ManualClock(START)
    sched = make_sched(clock=clock)
    one = Pool("one", 1)

    def boom(at: float) -> None:
        raise RuntimeError("down")

    sched.schedule("flaky", Once(at=START), boom, max_retries=1, pool=one)
    sched.schedule_once("later", 0.5, nothing, pool=one)
    clock.advance(1)
    [run] = claim_all(sched, clock())
    assert task_of(run) == "flaky"
    assert sched.status("later") is Status.QUEUED
    outcome = sched.table.complete(run, RuntimeError("down"), clock(), clock())
    assert outcome.result == "retry"
    clock.advance(60)  # the retry is due, after "later": slot order is due order
    [run] = claim_all(sched, clock())
    assert task_of(run) == "later"
    assert sched.status("flaky") is Status.QUEUED
    sched.table.complete(run, None, clock(), clock())
    [run] = claim_all(sched, clock())
    assert task_of(run) == "flaky"


def test_cancelling_or_pausing_a_holder_and_a_waiter(make_sched: Make) -> None:
    clock = ManualClock(START)
    sched = make_sched(clock=clock)
    one = Pool("one", 1)
    for name in ("a", "b", "c"):
        sched.schedule(name, FixedRate(60, start=START), nothing, pool=one)
    [held] = claim_all(sched, clock())
    waiting = [n for n in "abc" if n != task_of(held)]
    sched.pause(waiting[0])
    sched.cancel(task_of(held))  # its run goes on, reported; the place frees at its end
    sched.table.complete(held, None, clock(), clock())
    [run] = claim_all(sched, clock())
    assert task_of(run) == waiting[1]  # the paused one waits on
    sched.table.complete(run, None, clock(), clock())
    assert sched.resume(waiting[0])
    [run] = claim_all(sched, clock())
    assert task_of(run) == waiting[0]


def test_tick_runs_every_pooled_run_one_after_another() -> None:
    clock = ManualClock(START)
    sched = Scheduler(clock=clock, epoch=True)
    ran: list[str] = []
    for i in range(3):
        sched.schedule(f"t{i}", FixedRate(10, start=START), lambda at, i=i: ran.append(f"t{i}"),
                       pool=Pool("p", 1))  # fmt: skip
    sched.tick(clock())
    assert sorted(ran) == ["t0", "t1", "t2"]


@settings(max_examples=80, deadline=None)
@given(
    size=st.integers(1, 3),
    steps=st.lists(
        st.tuples(st.sampled_from(["claim", "end", "tick"]), st.integers(0, 5)),
        min_size=1,
        max_size=60,
    ),
)
def test_a_pool_in_memory_against_its_oracle(size: int, steps: list[tuple[str, int]]) -> None:
    """The oracle of a pool over catch-up fixed-rate tasks: a claim gets nothing when
    ``size`` runs are in flight or none is due, else the run of the earliest slot due
    (of any task not in flight); each task's next slot is its last one's plus its
    period."""
    clock = ManualClock(START)
    sched = Scheduler(clock=clock, epoch=True)
    pool = Pool("p", size)
    period = {f"t{i}": 7.0 + i for i in range(5)}
    slot = {f"t{i}": START + i for i in range(5)}
    for name, every in period.items():
        sched.schedule(name, FixedRate(every, start=slot[name]), nothing, pool=pool)
    flying: list[Any] = []
    for op, k in steps:
        if op == "tick":
            clock.advance(k + 1)
        elif op == "claim":
            busy = {task_of(run) for run in flying}
            due = [slot[t] for t in slot if t not in busy and slot[t] <= clock()]
            run = sched.table.claim(clock())
            if len(flying) == size or not due:
                assert run is None
                continue
            assert run is not None
            assert run.entry[0] == slot[task_of(run)] == min(due)
            flying.append(run)
        elif flying:
            run = flying.pop(k % len(flying))
            sched.table.complete(run, None, clock(), clock())
            slot[task_of(run)] += period[task_of(run)]
        queued = [i for i in sched.tasks() if i.status is Status.QUEUED]
        assert all(i.waiting_for == ("pool:p",) for i in queued)
        assert not queued or len(flying) == size


@pytest.mark.parametrize("kind", ["memory", "sqlite", "postgres"])
def test_one_claim_of_many_rows_takes_no_more_than_the_places(
    kind: str, request: pytest.FixtureRequest, tmp_path: Any
) -> None:
    """A store's claim of a batch: the rows of a pool beyond its places are given back in
    the claim's transaction (``rota.store._pools.settle``), the latest first."""
    clock = ManualClock(START)
    store = make_store(kind, request, tmp_path)
    sched = DurableScheduler(store, clock=clock)
    sched.register("nothing", nothing)
    for i in range(4):
        sched.schedule(f"t{i}", FixedRate(60, start=START + i), "nothing", pool=Pool("p", 2))
    clock.advance(10)
    known = sched._actions.known()
    try:
        rows = store.claim("n1", clock(), 10, 30.0, known)
        assert [row.task_id for row in rows] == ["t0", "t1"]
        assert store.pools() == {"p": (2, 2)}
        assert store.claim("n2", clock(), 10, 30.0, known) == []  # full: none taken
        assert [getattr(store.get(t), "status", None) for t in ("t2", "t3")] == [
            "scheduled", "scheduled"]  # fmt: skip
    finally:
        store.close()
