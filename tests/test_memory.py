"""Memory stays bounded under churn (tracemalloc)."""

from __future__ import annotations

import tracemalloc

from rota import ManualClock, Scheduler
from tests.helpers import engine_of


def noop(at: object) -> None:
    """An action that does nothing."""


def test_schedule_cancel_churn_keeps_peak_memory_bounded() -> None:
    sched = Scheduler(clock=ManualClock(0))
    for i in range(1000):  # some resident far-future work
        sched.schedule_once(("resident", i), 10**9, noop)
    tracemalloc.start()
    try:
        base = tracemalloc.get_traced_memory()[0]
        for i in range(300_000):
            sched.schedule_once(i, 50, noop)
            sched.cancel(i)
        current, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    # History keeps 10,000 cancelled ids (~100 B each); the queue holds at most
    # live + STALE_SLACK stale entries. Unbounded growth would be tens of MB.
    assert peak - base < 4_000_000, peak - base
    assert current - base < 4_000_000
    assert len(engine_of(sched).queue.heap) <= 2 * 1000 + 256 + 1


def test_two_hundred_thousand_one_off_tasks_leave_memory_bounded() -> None:
    clock = ManualClock(0)
    sched = Scheduler(clock=clock)
    tracemalloc.start()
    try:
        base = tracemalloc.get_traced_memory()[0]
        for batch in range(200):
            for i in range(1000):
                sched.schedule_once(batch * 1000 + i, 1, noop)
            outcomes = sched.tick(clock.advance(1))
            assert len(outcomes) == 1000
        del outcomes
        current, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert sched.status(199_999) is not None
    assert sched.status(0) is None
    assert len(engine_of(sched)._history) == 10_000
    assert current - base < 4_000_000, current - base
    assert peak - base < 6_000_000, peak - base
