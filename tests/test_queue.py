"""The run queue and the engine's bookkeeping: order, lazy deletion, compaction, history."""

from __future__ import annotations

import gc
import random
import weakref
from collections.abc import Hashable

import pytest

from rota import ManualClock, Scheduler, Status
from rota._core import queue as _queue
from rota._core.queue import Entry, RunQueue
from tests.helpers import check_table, engine_of


class Owner:
    def __init__(self) -> None:
        self.entry: Entry = (0, -1, None)


def make_queue(slack: int = 2) -> tuple[RunQueue[Owner], dict[Hashable, Owner]]:
    owners: dict[Hashable, Owner] = {}
    queue = RunQueue(owners)
    queue._slack = slack
    return queue, owners


def test_pop_due_returns_owners_in_time_then_push_order() -> None:
    queue, owners = make_queue()
    for at, key in [(5, "c"), (1, "a"), (5, "d"), (3, "b"), (5, "e")]:
        owners[key] = Owner()
        owners[key].entry = queue.push(at, key)
        queue._check()
    got = []
    while (owner := queue.pop_due(10)) is not None:
        got.append(owner.entry[2])
        del owners[owner.entry[2]]
        queue._check()
    assert got == ["a", "b", "c", "d", "e"]


def test_pop_due_stops_at_the_first_entry_after_now() -> None:
    queue, owners = make_queue()
    for at, key in [(1, "a"), (2, "b")]:
        owners[key] = Owner()
        owners[key].entry = queue.push(at, key)
    assert queue.pop_due(0) is None
    assert queue.pop_due(1) is owners["a"]
    assert queue.peek() == owners["b"].entry
    assert len(queue) == 1


def test_stale_entries_are_skipped_and_counted() -> None:
    queue, owners = make_queue(slack=100)
    for i in range(10):
        owners[i] = Owner()
        owners[i].entry = queue.push(i, i)
    for i in (0, 1, 5):
        del owners[i]
        queue.discard()
        queue._check()
    assert len(queue) == 7
    assert queue.peek() == owners[2].entry
    queue._check()
    got = []
    while (owner := queue.pop_due(100)) is not None:
        got.append(owner.entry[2])
    assert got == [2, 3, 4, 6, 7, 8, 9]
    assert queue.heap == []
    assert queue._stale == 0


def test_a_replaced_entry_of_the_same_task_is_stale() -> None:
    queue, owners = make_queue(slack=100)
    owners["a"] = Owner()
    owners["a"].entry = queue.push(1, "a")
    owners["a"].entry = queue.push(7, "a")
    queue.discard()
    queue._check()
    assert queue.peek() == (7, 1, "a")


def test_compaction_keeps_garbage_within_live_plus_slack() -> None:
    queue, owners = make_queue(slack=3)
    rng = random.Random(7)
    for i in range(200):
        owners[i] = Owner()
        owners[i].entry = queue.push(rng.random(), i)
    for i in range(0, 200, 2):
        del owners[i]
        queue.discard()
        queue._check()
        assert queue._stale <= len(queue) + 3
    assert len(queue.heap) <= 100 + 100 + 3


def test_popping_live_entries_keeps_garbage_within_live_plus_slack() -> None:
    """Found by the model test: two stale entries and two live ones, the live ones
    run: garbage was left at twice the live count plus the slack (invariant 4 held
    only after discards; a pop lowers the live count too)."""
    queue, owners = make_queue()
    queue._slack = 1
    for i in range(4):
        owners[i] = Owner()
        owners[i].entry = queue.push(10 + i, i)
    for i in (2, 3):  # the later two cancelled: stale, behind the live ones
        del owners[i]
        queue.discard()
    for i in (0, 1):
        assert queue.pop_due(100) is not None
        del owners[i]
        queue._check()


def test_check_catches_a_broken_heap() -> None:
    queue, owners = make_queue()
    for i in range(3):
        owners[i] = Owner()
        owners[i].entry = queue.push(i, i)
    queue.heap.reverse()
    with pytest.raises(AssertionError, match="heap order"):
        queue._check()


def test_schedule_cancel_churn_keeps_the_heap_bounded(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(_queue, "STALE_SLACK", 4)
    sched = Scheduler(clock=ManualClock(0))
    sched.schedule_once("keep", 10**9, lambda at: None)
    for i in range(1000):
        sched.schedule_once(i, 5 + i % 7, lambda at: None)
        assert sched.cancel(i)
        heap = engine_of(sched).queue.heap
        assert len(heap) <= 2 * 1 + 4 + 1
    check_table(sched)
    assert sched.next_run_time() == 10**9


def test_a_stale_entry_pins_no_action() -> None:
    class Action:
        def __call__(self, at: float) -> None:
            pass

    sched = Scheduler(clock=ManualClock(0))
    action = Action()
    ref = weakref.ref(action)
    sched.schedule_once("a", 5, action)
    sched.schedule_once("b", 9, lambda at: None)
    sched.cancel("a")
    del action
    gc.collect()
    assert ref() is None
    assert len(engine_of(sched).queue.heap) == 2  # the stale entry is still there


def test_history_is_bounded_and_forgets_the_oldest_first() -> None:
    sched = Scheduler(clock=ManualClock(0))
    engine_of(sched)._history_limit = 5
    for i in range(20):
        sched.schedule_once(i, 0, lambda at: None)
        if i % 3 == 0:
            sched.cancel(i)
    sched.tick(0)
    assert len(engine_of(sched)._history) == 5
    # Cancels finished first (while scheduling); the tick then finished the rest in order.
    done, gone = Status.DONE, None
    expected = [gone, done, done, gone, done, done, gone, done]
    assert [sched.status(i) for i in range(12, 20)] == expected
    check_table(sched)


def test_compaction_during_pause_and_reschedule_keeps_the_counts_exact(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from rota import FixedRate, Once

    monkeypatch.setattr(_queue, "STALE_SLACK", 0)
    sched = Scheduler(clock=ManualClock(0))
    for i in range(6):
        sched.schedule_once(i, 10 + i, lambda at: None)
    for round_ in range(20):
        task_id = round_ % 6
        sched.pause(task_id)
        check_table(sched)
        sched.resume(task_id)
        check_table(sched)
        sched.reschedule(task_id, Once(at=5 + round_))
        check_table(sched)
        sched.reschedule(task_id, FixedRate(3, start=7))
        check_table(sched)
        sched.cancel(task_id)
        check_table(sched)
        sched.schedule_once(task_id, 10, lambda at: None)
        check_table(sched)
