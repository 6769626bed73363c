"""The scheduling controls (overlap, deadline, jitter, end, max_runs), update,
trigger and backfill: the same rules on memory and on every store."""

from __future__ import annotations

from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from rota import (
    FixedDelay,
    FixedRate,
    ManualClock,
    Misfire,
    Once,
    Overlap,
    Result,
    Runner,
    RunOutcome,
    Scheduler,
    Stats,
    Status,
)
from rota.schedules import jitter_offset
from rota.store import SQLiteStore
from tests.helpers import AutoRegistering, Collector

Make = Callable[..., Scheduler]


def nothing(at: Any) -> None:
    """An action that does nothing."""


def ran(outcomes: list[RunOutcome], task_id: str = "t") -> list[Any]:
    return [o.at for o in outcomes if o.task_id == task_id]


# -- deadline -----------------------------------------------------------------


def test_deadline_skips_every_hopeless_slot_and_the_schedule_goes_on(make_sched: Make) -> None:
    sched = make_sched(clock=ManualClock(0))
    sched.schedule("t", FixedRate(10), nothing, deadline=5)
    sched.tick(0)
    assert sched.tick(17) == []  # slot 10 is 7 late: skipped; slot 20 is not due
    assert sched.next_run_time("t") == 20
    (run,) = sched.tick(44)  # slots 20 and 30 are past their deadline, 40 is in time
    assert (run.at, run.skipped, dict(run.skipped_by)) == (40, 3, {"deadline": 3})
    info = sched.info("t")
    assert info is not None
    assert info.last_outcome is not None
    assert dict(info.last_outcome.skipped_by) == {"deadline": 3}  # as read back, in a store
    (run,) = sched.tick(55)  # exactly at its deadline: still in time
    assert (run.at, run.skipped) == (50, 0)
    assert sched.status("t") is Status.SCHEDULED


def test_deadline_applies_to_the_first_attempt_only(make_sched: Make) -> None:
    sched = make_sched(clock=ManualClock(0))
    calls: list[Any] = []

    def flaky(at: Any) -> None:
        calls.append(at)
        if len(calls) == 1:
            raise ValueError("once")

    sched.schedule("t", FixedRate(100), flaky, deadline=5, max_retries=1, retry=None)
    (first,) = sched.tick(0)
    assert first.result is Result.RETRY
    # the retry is due at 1 (backoff 1); run at 50, far past the deadline: it still runs
    (retry,) = sched.tick(50)
    assert (retry.result, retry.attempt, retry.skipped) == (Result.OK, 1, 0)


def test_a_one_off_past_its_deadline_ends_done_without_running(make_sched: Make) -> None:
    sched = make_sched(clock=ManualClock(0))
    calls: list[Any] = []
    sched.schedule("t", Once(10), calls.append, deadline=timedelta(seconds=5))
    assert sched.tick(20) == []
    assert calls == []
    assert sched.status("t") is Status.DONE


def test_deadline_meets_the_misfire_policy_first(make_sched: Make) -> None:
    sched = make_sched(clock=ManualClock(0))
    sched.schedule("t", FixedRate(10), nothing, deadline=15, misfire=Misfire.bounded(3))
    sched.tick(0)
    # at 100, slots 10..100 are due; bounded(3) keeps 80, 90, 100 (7 skipped by it),
    # and the deadline then skips 80 (20 late); 90 and 100 run
    got = sched.tick(100)
    assert [o.at for o in got] == [90, 100]
    assert dict(got[0].skipped_by) == {"misfire": 7, "deadline": 1}


# -- overlap -----------------------------------------------------------------


@pytest.mark.parametrize(
    ("overlap", "expected"),
    [(Overlap.BUFFER, [0, 10, 20, 30]), (Overlap.SKIP, [0, 30]), (None, [0, 10, 20, 30])],
)
def test_overlap_decides_the_slots_due_while_a_run_is_in_flight(
    make_sched: Make, overlap: Overlap | None, expected: list[int]
) -> None:
    clock = ManualClock(0)
    sched = make_sched(clock=clock)
    seen = Collector()

    def slow_first(at: Any) -> None:
        if at == 0:
            clock.advance(25)  # slots 10 and 20 fall due while it runs

    with Runner(sched, on_outcome=seen):
        sched.schedule("t", FixedRate(10), slow_first, overlap=overlap)
        seen.wait_for(len(expected) - 1)
        clock.set(30)
        got = seen.wait_for(len(expected))
    assert [o.at for o in got] == expected
    if overlap is Overlap.SKIP:
        assert dict(got[-1].skipped_by) == {"overlap": 2}


def test_overlap_skip_leaves_slots_missed_before_the_run_to_the_misfire_policy(
    make_sched: Make,
) -> None:
    sched = make_sched(clock=ManualClock(0))
    sched.schedule("t", FixedRate(10), nothing, overlap=Overlap.SKIP)
    # under tick a run takes no time: nothing overlaps, missed slots are caught up
    assert ran(sched.tick(30)) == [0, 10, 20, 30]


def test_overlap_is_checked() -> None:
    sched = Scheduler(clock=ManualClock(0))
    with pytest.raises(TypeError, match=r"overlap must be a rota\.Overlap"):
        sched.schedule("t", FixedRate(1), nothing, overlap="skip")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="overlap applies to recurring"):
        sched.schedule("t", Once(1), nothing, overlap=Overlap.SKIP)
    with pytest.raises(ValueError, match="overlap must be one of buffer, skip"):
        Overlap.named("sometimes")
    assert Overlap.named("skip") == Overlap.SKIP
    assert sched.status("t") is None


# -- jitter ------------------------------------------------------------------


def test_jitter_delays_each_slot_by_its_own_offset_and_keeps_the_nominal_slot(
    make_sched: Make,
) -> None:
    sched = make_sched(clock=ManualClock(0))
    keys: list[str] = []

    def keyed(at: Any, *, run: Any) -> None:
        keys.append(run.key)

    sched.schedule("t", FixedRate(60, start=600), keyed, jitter=30)
    offset = jitter_offset("t", 600, 30)
    assert 0 <= offset < 30
    assert sched.next_run_time("t") == 600 + offset  # when it starts
    assert sched.tick(600 + offset - 0.001) == []
    (run,) = sched.tick(600 + offset)
    assert run.at == 600  # the slot; started after its offset
    assert run.started == 600 + offset
    assert run.jitter == offset
    assert run.lag == pytest.approx(0, abs=1e-9)  # the jitter it was given is not lag
    assert keys == ["t@600"]
    assert sched.next_run_time("t") == 660 + jitter_offset("t", 660, 30)


def test_the_jitter_offset_is_a_pure_function_of_task_and_slot(tmp_path: Any) -> None:
    path = tmp_path / "j.db"
    first = AutoRegistering(SQLiteStore(path), clock=ManualClock(0))
    first.schedule("t", FixedRate(60, start=600), nothing, jitter=30)
    due = first.next_run_time("t")
    first.store.close()
    again = AutoRegistering(SQLiteStore(path), clock=ManualClock(0))  # a restart
    again.register("auto-0", nothing)
    other = AutoRegistering(SQLiteStore(path), clock=ManualClock(0))  # another node
    other.register("auto-0", nothing)
    try:
        assert again.next_run_time("t") == due == 600 + jitter_offset("t", 600, 30)
        (run,) = other.tick(630)
        assert run.at == 600
        assert again.next_run_time("t") == 660 + jitter_offset("t", 660, 30)
    finally:
        again.store.close()
        other.store.close()


def test_jitter_offsets_fill_the_window_uniformly() -> None:
    # chi-square over 20 bins of 10^4 slots: 19 degrees of freedom, p = 0.001 bound 43.8
    n, bins, jitter = 10_000, 20, 30.0
    counts = [0] * bins
    for k in range(n):
        offset = jitter_offset("fleet-job", 1_700_000_000 + 60 * k, jitter)
        assert 0 <= offset < jitter
        counts[int(offset / jitter * bins)] += 1
    expected = n / bins
    chi2 = sum((c - expected) ** 2 / expected for c in counts)
    assert chi2 < 43.8, (chi2, counts)
    assert jitter_offset("a", 1, 30) != jitter_offset("b", 1, 30)  # per task, too


# -- end and max_runs ----------------------------------------------------------


def test_end_and_max_runs_finish_a_recurring_task(make_sched: Make) -> None:
    sched = make_sched(clock=ManualClock(0))
    sched.schedule("end", FixedRate(10), nothing, end=25)
    sched.schedule("max", FixedRate(10), nothing, max_runs=2)
    assert ran(sched.tick(100), "end") == [0, 10, 20]
    assert sched.status("end") is Status.DONE
    assert sched.status("max") is Status.DONE


def test_max_runs_counts_runs_not_skipped_slots(make_sched: Make) -> None:
    sched = make_sched(clock=ManualClock(0))
    sched.schedule("t", FixedRate(10), nothing, max_runs=2, misfire=Misfire.SKIP)
    sched.tick(0)
    assert sched.tick(35) == []  # 10, 20, 30 skipped by the misfire policy
    assert sched.status("t") is Status.SCHEDULED
    (second,) = sched.tick(40)
    assert second.skipped == 3
    assert sched.status("t") is Status.DONE


def test_end_takes_an_aware_datetime_on_an_epoch_clock(make_sched: Make) -> None:
    start = datetime(2026, 12, 1, tzinfo=UTC)
    sched = make_sched(clock=ManualClock(start.timestamp()))
    sched.schedule("t", FixedRate(3600), nothing, end=start + timedelta(hours=2))
    assert len(sched.tick(start.timestamp() + 86_400)) == 3
    assert sched.status("t") is Status.DONE


def test_end_and_max_runs_are_checked() -> None:
    sched = Scheduler(clock=ManualClock(100))
    with pytest.raises(ValueError, match="end=50 is before the task's first run"):
        sched.schedule("t", FixedRate(10), nothing, end=50)
    with pytest.raises(ValueError, match="max_runs must be >= 1, got 0"):
        sched.schedule("t", FixedRate(10), nothing, max_runs=0)
    with pytest.raises(TypeError, match="max_runs must be an int"):
        sched.schedule("t", FixedRate(10), nothing, max_runs=1.5)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="end applies to recurring"):
        sched.schedule("t", Once(1), nothing, end=200)
    with pytest.raises(ValueError, match="monotonic"):
        Scheduler().schedule("t", FixedRate(10), nothing, end=datetime(2030, 1, 1, tzinfo=UTC))
    with pytest.raises(ValueError, match="deadline must be a finite number >= 0"):
        sched.schedule("t", FixedRate(10), nothing, deadline=-1)
    with pytest.raises(TypeError, match="jitter must be a number"):
        sched.schedule("t", FixedRate(10), nothing, jitter="30s")  # type: ignore[arg-type]
    assert sched.status("t") is None


# -- update ------------------------------------------------------------------


def test_update_changes_options_from_the_next_run_on(make_sched: Make) -> None:
    sched = make_sched(clock=ManualClock(0))
    calls: list[Any] = []

    def fails(label: str, *, run: Any) -> None:
        calls.append((run.at, label))
        raise ValueError("no")

    sched.schedule("t", FixedRate(100), fails, args=["a"])
    (first,) = sched.tick(0)
    assert first.result is Result.FAILED  # no retries
    assert sched.update("t", max_retries=1, args=["b"], priority=3) is True
    got = sched.tick(101)
    assert [(o.at, o.result) for o in got] == [(100, Result.RETRY), (101, Result.FAILED)]
    assert calls[1:] == [(100, "b"), (101, "b")]


def test_a_run_in_flight_finishes_as_it_began(make_sched: Make) -> None:
    sched = make_sched(clock=ManualClock(0))

    def raise_more_retries(at: Any) -> None:
        if at == 0:
            assert sched.update("t", max_retries=2)  # while its own run is in flight
        raise ValueError(at)

    sched.schedule("t", FixedRate(100), raise_more_retries)
    (first,) = sched.tick(0)
    assert first.result is Result.FAILED  # it began with no retries
    assert [o.result for o in sched.tick(100)] == [Result.RETRY]  # the next slot has two


def test_update_is_validated_before_anything_changes(make_sched: Make) -> None:
    sched = make_sched(clock=ManualClock(0))
    sched.schedule("t", FixedRate(10), nothing)
    with pytest.raises(TypeError, match=r"unexpected keyword arguments \['when'\]"):
        sched.update("t", when=FixedRate(5))
    with pytest.raises(TypeError, match="max_retries must be an int"):
        sched.update("t", max_retries="3", priority=1)
    with pytest.raises(TypeError):
        sched.update("t", args=[1, 2, 3])  # nothing(at) takes no more
    assert sched.update("unknown", max_retries=1) is False
    assert ran(sched.tick(0)) == [0]


def test_update_of_a_scheduled_tasks_priority_reorders_its_run(make_sched: Make) -> None:
    sched = make_sched(clock=ManualClock(0))
    sched.schedule_once("a", 5, nothing)
    sched.schedule_once("b", 5, nothing)
    assert sched.update("b", priority=-1)
    assert [o.task_id for o in sched.tick(5)] == ["b", "a"]


# -- trigger -----------------------------------------------------------------


def test_trigger_runs_once_now_and_keeps_the_next_slot(make_sched: Make) -> None:
    clock = ManualClock(5)
    sched = make_sched(clock=clock)
    sched.schedule("t", FixedRate(10, start=10), nothing, max_runs=2)
    assert sched.trigger("t") is True
    assert ran(sched.tick(5)) == [5]
    assert sched.next_run_time("t") == 10
    assert ran(sched.tick(20)) == [10, 20]  # a trigger is not one of the schedule's runs
    assert sched.status("t") is Status.DONE
    assert sched.trigger("t") is False


# -- backfill ------------------------------------------------------------------


def test_backfill_runs_each_slot_of_a_window_once_oldest_first(make_sched: Make) -> None:
    sched = make_sched(clock=ManualClock(1000))
    sched.schedule("t", FixedRate(60, start=1020), nothing, deadline=5)
    assert sched.backfill("t", 800, 1000) == 3  # 840, 900, 960 on the task's own grid
    assert sched.backfill("t", 800, 1000) == 0  # queued already
    assert sched.next_run_time("t") == 840
    got = sched.tick(1000)
    assert [(o.at, o.skipped) for o in got] == [(840, 0), (900, 0), (960, 0)]  # no deadline
    assert sched.next_run_time("t") == 1020  # the live schedule did not move
    assert ran(sched.tick(1020)) == [1020]


def test_backfill_behind_a_run_in_flight_and_under_skip(make_sched: Make) -> None:
    sched = make_sched(clock=ManualClock(0))

    def backfills(at: Any) -> None:
        if at == 100:
            assert sched.backfill("t", 0, 30, overlap=Overlap.SKIP) == 0  # one in flight
            assert sched.backfill("t", 0, 30) == 3

    sched.schedule("t", FixedRate(10, start=100), backfills)
    assert ran(sched.tick(100)) == [100, 0, 10, 20]
    assert sched.next_run_time("t") == 110


def test_backfill_retries_under_the_tasks_policy(make_sched: Make) -> None:
    sched = make_sched(clock=ManualClock(100))
    failed: set[Any] = set()

    def once_each(at: Any, *, run: Any) -> None:
        if run.slot not in failed:
            failed.add(run.slot)
            raise ValueError(at)

    sched.schedule("t", FixedRate(10, start=200), once_each, max_retries=1)
    assert sched.backfill("t", 0, 20) == 2
    got = sched.tick(150)
    assert [(o.at, o.result) for o in got] == [
        (0, Result.RETRY), (1, Result.OK), (10, Result.RETRY), (11, Result.OK),
    ]  # fmt: skip


def test_backfill_is_checked(make_sched: Make) -> None:
    sched = make_sched(clock=ManualClock(0))
    sched.schedule("d", FixedDelay(10), nothing)
    with pytest.raises(ValueError, match="backfill needs a schedule of slots"):
        sched.backfill("d", 0, 100)
    with pytest.raises(ValueError, match="end must not be before start"):
        sched.backfill("d", 100, 0)
    sched.schedule("r", FixedRate(1e-3), nothing)
    with pytest.raises(ValueError, match="more than 100000 slots"):
        sched.backfill("r", -1000, 0)
    assert sched.backfill("unknown", 0, 100) == 0


def test_a_backfill_of_a_task_under_allow_n_runs_n_at_once(make_sched: Make) -> None:
    sched = make_sched(clock=ManualClock(100))
    sched.schedule("c", FixedRate(10), nothing, overlap=Overlap.allow(2))
    with pytest.raises(ValueError, match=r"a backfill's own overlap is Overlap\.BUFFER"):
        sched.backfill("c", 0, 100, overlap=Overlap.allow(3))
    assert sched.backfill("c", 50, 100) == 5  # 50, 60, 70, 80, 90
    runs = [sched.table.claim(100), sched.table.claim(100)]
    assert [run.entry[0] for run in runs if run is not None] == [50, 60]  # two at once
    assert sched.table.claim(100) is None
    for run in runs:
        assert run is not None
        sched.table.complete(run, None, 100, 100)
    assert ran(sched.tick(100), "c") == [70, 80, 90, 100]  # the rest, then the live slot


def test_a_durable_backfill_does_not_run_a_recorded_slot_again(make_sched: Make) -> None:
    """A store knows which slots have a recorded outcome and skips them; memory keeps
    no history of outcomes, so it backfills every slot the live schedule passed."""
    sched = make_sched(clock=ManualClock(0))
    sched.schedule("t", FixedRate(10), nothing, misfire=Misfire.SKIP)
    assert ran(sched.tick(0)) == [0]
    assert ran(sched.tick(25)) == []  # 10 and 20 skipped by the misfire policy
    assert ran(sched.tick(30)) == [30]
    if make_sched.backend == "memory":  # type: ignore[attr-defined]
        assert sched.backfill("t", 0, 100) == 4  # 40 on is the schedule's
        assert ran(sched.tick(30)) == [0, 10, 20, 30]
    else:
        assert sched.backfill("t", 0, 100) == 2  # 0 and 30 ran; 40 on is the schedule's
        assert ran(sched.tick(30)) == [10, 20]


# -- the accounting ---------------------------------------------------------------


@settings(max_examples=40, deadline=None)
@given(
    steps=st.lists(st.integers(0, 40), min_size=1, max_size=12),
    deadline=st.one_of(st.none(), st.integers(0, 25)),
    misfire=st.sampled_from([None, Misfire.SKIP, Misfire.COALESCE, Misfire.bounded(2)]),
    nodes=st.integers(1, 2),
)
def test_every_slot_ran_or_was_skipped_and_counted(
    tmp_path_factory: Any, steps: list[int], deadline: int | None, misfire: Any, nodes: int
) -> None:
    path = tmp_path_factory.mktemp("acc") / "a.db"
    clock = ManualClock(0)
    scheds = [AutoRegistering(SQLiteStore(path), clock=clock) for _ in range(nodes)]
    for node in scheds:
        node.register("auto-0", nothing)  # what the first declares under that name
    memory = Scheduler(clock=clock)
    try:
        for sched in (memory, scheds[0]):
            sched.schedule("t", FixedRate(10), nothing, deadline=deadline, misfire=misfire)
        got: dict[int, list[RunOutcome]] = {0: [], 1: []}
        now = 0
        for i, step in enumerate(steps):
            now += step
            got[0] += memory.tick(now)
            got[1] += scheds[i % nodes].tick(now)
        # skips are reported on the next run: tick once more, at the next slot
        last = memory.next_run_time("t")
        assert isinstance(last, int)
        now = last
        got[0] += memory.tick(now)
        got[1] += scheds[-1].tick(now)
        assert got[0] == got[1]  # every store decides as memory does
        stats = Stats()
        stats.record_all(got[0])
        snap = stats.snapshot()
        assert snap.runs + snap.skipped == now // 10 + 1  # every due slot accounted for
        assert sum(snap.skipped_by.values()) == snap.skipped
        for outcome in got[0]:
            assert deadline is None or outcome.lag <= deadline
    finally:
        for sched in scheds:
            sched.store.close()


@settings(max_examples=40, deadline=None)
@given(
    steps=st.lists(st.tuples(st.integers(0, 30), st.integers(0, 35)), min_size=1, max_size=10),
    overlap=st.sampled_from([Overlap.BUFFER, Overlap.SKIP]),
    deadline=st.one_of(st.none(), st.integers(0, 25)),
    misfire=st.sampled_from([None, Misfire.SKIP, Misfire.COALESCE]),
)
def test_runs_that_take_time_leave_every_slot_accounted_for(
    tmp_path_factory: Any,
    steps: list[tuple[int, int]],
    overlap: Overlap,
    deadline: int | None,
    misfire: Any,
) -> None:
    """Driven as a runner drives it (claim, run for a while, complete), memory and a
    SQLite file decide alike, no run starts on a slot that fell due while the previous
    run was in flight under ``Overlap.SKIP``, and ran + skipped by reason = due."""
    path = tmp_path_factory.mktemp("run") / "r.db"
    scheds = [
        Scheduler(clock=ManualClock(0)),
        AutoRegistering(SQLiteStore(path), clock=ManualClock(0)),
    ]
    try:
        got: list[list[RunOutcome]] = [[], []]
        for sched, outcomes in zip(scheds, got, strict=True):
            sched.schedule("t", FixedRate(10), nothing, overlap=overlap, deadline=deadline,
                           misfire=misfire)  # fmt: skip
            now, spans = 0, []
            for wait, took in [*steps, (0, 0)]:
                now += wait
                task = sched.table.claim(now)
                if task is not None:
                    outcomes.append(sched.table.complete(task, None, now, now + took))
                    spans.append((now, now + took))
                    now += took
            head = sched.next_run_time("t")
            assert head is not None
            outcomes.extend(sched.tick(head))  # the last skips are reported on this run
        assert got[0] == got[1]
        memory = got[0]
        stats = Stats()
        stats.record_all(memory)
        snap = stats.snapshot()
        assert snap.runs + snap.skipped == memory[-1].at // 10 + 1
        if overlap is Overlap.SKIP:
            for (started, finished), later in zip(spans, memory[1:], strict=False):
                assert not started < later.at <= finished
        else:
            assert "overlap" not in snap.skipped_by
    finally:
        scheds[1].store.close()  # type: ignore[attr-defined]


# -- several runs at once: Overlap.allow(n), Overlap.REPLACE --------------------------


def test_allow_n_runs_up_to_n_at_once_each_with_its_own_slot(make_sched: Make) -> None:
    import threading
    from concurrent.futures import ThreadPoolExecutor

    clock = ManualClock(0)
    durable = make_sched.backend != "memory"  # type: ignore[attr-defined]
    # (the clock jumps by more than a lease; the heartbeat renews by the monotonic clock)
    sched = make_sched(clock=clock, **({"lease": 1000} if durable else {}))
    lock, release = threading.Lock(), threading.Event()
    now_running, most = [0], [0]
    started = threading.Semaphore(0)

    def slow(at: Any, *, run: Any) -> str:
        with lock:
            now_running[0] += 1
            most[0] = max(most[0], now_running[0])
        started.release()
        release.wait(10)
        with lock:
            now_running[0] -= 1
        return str(run.key)

    seen = Collector()
    with Runner(sched, executor=ThreadPoolExecutor(8), on_outcome=seen):
        sched.schedule("t", FixedRate(10), slow, overlap=Overlap.allow(3))
        for t in (0, 10, 20):
            clock.set(t)
            assert started.acquire(timeout=10)  # each starts while the others run
        clock.set(50)  # slots 30, 40, 50 are due, but 3 are in flight: they wait
        assert not started.acquire(timeout=0.3)
        assert sched.status("t") is Status.RUNNING
        release.set()
        got = seen.wait_for(6)
    assert most[0] == 3
    assert sorted(o.at for o in got) == [0, 10, 20, 30, 40, 50]
    assert sorted(str(o.value) for o in got) == [f"t@{t}" for t in (0, 10, 20, 30, 40, 50)]


def test_allow_n_retries_a_run_on_its_own(make_sched: Make) -> None:
    sched = make_sched(clock=ManualClock(0))
    failed: set[Any] = set()

    def once_each(at: Any, *, run: Any) -> None:
        if run.slot not in failed:
            failed.add(run.slot)
            raise ValueError(run.slot)

    sched.schedule("t", FixedRate(10), once_each, overlap=Overlap.allow(2), max_retries=1)
    got = [(o.at, o.result, o.attempt) for o in sched.tick(10)]
    assert got == [(0, Result.RETRY, 0), (1, Result.OK, 1), (10, Result.RETRY, 0)]
    # slot 10's retry is in flight (waiting): the task is running, on every store alike
    assert (sched.status("t"), sched.next_run_time("t")) == (Status.RUNNING, None)
    assert [(o.at, o.attempt) for o in sched.tick(11)] == [(11, 1)]  # slot 10's retry


def test_replace_stops_the_coroutine_in_flight_for_the_next_slot(make_sched: Make) -> None:
    import asyncio

    from rota import AsyncRunner, RunCancelled

    async def main() -> list[RunOutcome]:
        clock = ManualClock(0)
        sched = make_sched(clock=clock)
        seen = Collector()
        finalised: list[Any] = []

        async def sync(at: Any) -> None:
            try:
                if at == 0:
                    await asyncio.sleep(100)  # still running when slot 10 falls due
            finally:
                finalised.append(at)

        async with AsyncRunner(sched, on_outcome=seen):
            sched.schedule("t", FixedRate(10), sync, overlap=Overlap.REPLACE)
            while not seen.outcomes and 0 not in finalised:
                await asyncio.sleep(0.01)
                if clock() == 0:
                    await asyncio.sleep(0.05)
                    clock.set(10)
            for _ in range(500):
                if len(seen.outcomes) >= 2:
                    break
                await asyncio.sleep(0.01)
        assert finalised[0] == 0  # its finally ran
        return seen.outcomes

    first, second = asyncio.run(main())[:2]
    assert (first.at, first.result, type(first.error)) == (0, Result.FAILED, RunCancelled)
    assert (second.at, second.result) == (10, Result.OK)


def test_update_switches_a_task_to_and_from_several_runs_at_once(make_sched: Make) -> None:
    sched = make_sched(clock=ManualClock(0))
    sched.schedule("t", FixedRate(10), nothing)
    assert sched.update("t", overlap=Overlap.allow(2))
    runs = [sched.table.claim(10), sched.table.claim(10)]
    assert [run.entry[0] for run in runs if run is not None] == [0, 10]  # two at once
    with pytest.raises(ValueError, match="while 2 of its runs are in flight"):
        sched.update("t", overlap=Overlap.BUFFER)
    for run in runs:
        assert run is not None
        sched.table.complete(run, None, 10, 10)
    assert sched.update("t", overlap=Overlap.BUFFER)  # none in flight now
    run = sched.table.claim(20)
    assert run is not None
    assert sched.table.claim(20) is None  # one at a time again
    sched.table.complete(run, None, 20, 20)
    assert sched.update("t", overlap=Overlap.allow(3))  # and again, from the next run on
    with pytest.raises(ValueError, match="cannot be stopped: give an async def action"):
        sched.update("t", overlap=Overlap.REPLACE)
    sched.schedule("d", FixedDelay(10), nothing)
    with pytest.raises(ValueError, match="needs slots that do not wait"):
        sched.update("d", overlap=Overlap.allow(2))
    assert ran(sched.tick(40)) == [30, 40]  # slots 30 and 40, under allow(3)


def test_an_update_of_a_concurrent_task_with_a_run_in_flight_is_kept(make_sched: Make) -> None:
    sched = make_sched(clock=ManualClock(0))
    sched.schedule("t", FixedRate(10), nothing, overlap=Overlap.allow(2))
    first = sched.table.claim(0)
    assert first is not None
    assert sched.update("t", max_retries=1)  # while the run at 0 is in flight
    sched.table.complete(first, None, 0, 0)
    run = sched.table.claim(10)
    assert run is not None
    assert sched.table.complete(run, ValueError("no"), 10, 10).result is Result.RETRY


def test_replace_is_refused_where_the_run_cannot_be_stopped(tmp_path: Any) -> None:
    sched = Scheduler(clock=ManualClock(0))
    with pytest.raises(ValueError, match="cannot be stopped: give an async def action"):
        sched.schedule("t", FixedRate(10), nothing, overlap=Overlap.REPLACE)
    with pytest.raises(ValueError, match="needs slots that do not wait"):
        sched.schedule("t", FixedDelay(10), nothing, overlap=Overlap.allow(2))
    assert repr(Overlap.allow(4)) == "Overlap.allow(4)"
    assert Overlap.allow(1) is Overlap.BUFFER
    with pytest.raises(ValueError, match="n must be >= 1"):
        Overlap.allow(0)
    durable = AutoRegistering(SQLiteStore(tmp_path / "r.db"), clock=ManualClock(0))
    try:
        with pytest.raises(ValueError, match="cannot be stopped: give an async def action"):
            durable.schedule("t", FixedRate(10), nothing, overlap=Overlap.REPLACE)
        assert durable.status("t") is None
    finally:
        durable.store.close()
    assert sched.status("t") is None


def _drive_concurrent(
    scheds: list[Any], limit: int, ops: list[tuple[str, int]]
) -> list[RunOutcome]:
    """Claim and end runs of task ``t`` on ``scheds`` as ``ops`` say, then drain; each
    run ends on the node that claimed it. Checks the limit at every step."""
    now, flying, outcomes = 0, [], []
    for op, arg in ops:
        if op == "wait":
            now += arg
        elif op == "claim":
            node = scheds[arg % len(scheds)]
            run = node.table.claim(now)
            if run is not None:
                flying.append((node, run))
        elif flying:
            node, run = flying.pop(arg % len(flying))
            error = ValueError("no") if op == "fail" else None
            outcomes.append(node.table.complete(run, error, now, now))
        assert len(flying) <= limit
    while True:  # drain
        for node in scheds:
            while (run := node.table.claim(now)) is not None:
                flying.append((node, run))
                assert len(flying) <= limit
        if not flying:
            return outcomes
        node, run = flying.pop(0)
        outcomes.append(node.table.complete(run, None, now, now))


@settings(max_examples=60, deadline=None)
@given(
    limit=st.integers(2, 4),
    nodes=st.integers(0, 2),
    ops=st.lists(
        st.one_of(
            st.tuples(st.just("wait"), st.integers(1, 25)),
            st.tuples(st.just("claim"), st.integers(0, 1)),
            st.tuples(st.just("end"), st.integers(0, 5)),
            st.tuples(st.just("fail"), st.integers(0, 5)),
        ),
        max_size=40,
    ),
)
def test_allow_n_never_exceeds_its_limit_and_accounts_for_every_slot(
    tmp_path_factory: Any, limit: int, nodes: int, ops: list[tuple[str, int]]
) -> None:
    """A stateful model: runs claimed (by any node) and ended in any order. Never more
    than ``limit`` in flight; every slot's first attempt runs once; once everything
    ends, ran = due. ``nodes`` 0: in memory; else that many nodes on one SQLite file."""
    if nodes:
        path = tmp_path_factory.mktemp("allow") / "a.db"
        clock = ManualClock(0)
        scheds: list[Any] = [
            AutoRegistering(SQLiteStore(path), clock=clock, lease=10**6) for _ in range(nodes)
        ]
        for node in scheds:
            node.register("auto-0", nothing)
    else:
        scheds = [Scheduler(clock=ManualClock(0))]
    try:
        scheds[0].schedule(
            "t", FixedRate(10), nothing, overlap=Overlap.allow(limit), max_retries=1
        )
        outcomes = _drive_concurrent(scheds, limit, ops)
        if nodes == 1:  # one node decides every step as memory does
            memory = Scheduler(clock=ManualClock(0))
            memory.schedule(
                "t", FixedRate(10), nothing, overlap=Overlap.allow(limit), max_retries=1
            )
            oracle = _drive_concurrent([memory], limit, ops)
            assert [(o.at, o.result, o.attempt) for o in outcomes] == [
                (o.at, o.result, o.attempt) for o in oracle
            ]
    finally:
        for sched in scheds if nodes else ():
            sched.store.close()
    now = sum(arg for op, arg in ops if op == "wait")
    first = [o.at for o in outcomes if o.attempt == 0]
    assert len(first) == len(set(first))  # each slot's first attempt once
    slots = {o.at for o in outcomes if o.attempt == 0}
    assert slots == {10 * k for k in range(now // 10 + 1)}  # every due slot ran
    assert all(o.result is not Result.RETRY or o.attempt == 0 for o in outcomes)
