"""Concurrency: many threads scheduling, cancelling and ticking one scheduler.

Seeded and bounded: every join has a timeout and asserts the thread ended.
"""

from __future__ import annotations

import functools
import random
import threading
from collections import Counter
from collections.abc import Callable
from typing import Any

from rota import ManualClock, Scheduler, Status
from tests.helpers import check_table

TIMEOUT = 60


def run_threads(targets: list[Callable[[], object]]) -> None:
    """Start all targets together, join each with a timeout, re-raise the first error."""
    errors: list[BaseException] = []
    barrier = threading.Barrier(len(targets))

    def wrap(target: Callable[[], object]) -> Callable[[], None]:
        def run() -> None:
            try:
                barrier.wait(TIMEOUT)
                target()
            except BaseException as exc:  # reported below
                errors.append(exc)

        return run

    threads = [threading.Thread(target=wrap(t)) for t in targets]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(TIMEOUT)
        assert not thread.is_alive(), "thread did not finish"
    if errors:
        raise errors[0]


def test_schedulers_and_cancellers_race_a_dispatcher() -> None:
    seed = 20261130
    clock = ManualClock(0)
    sched = Scheduler(clock=clock)
    ran: Counter[Any] = Counter()
    ran_lock = threading.Lock()
    cancel_result: dict[Any, bool] = {}
    done = threading.Event()

    def action_for(task_id: Any) -> Callable[[Any], None]:
        def action(at: Any) -> None:
            with ran_lock:
                ran[task_id] += 1

        return action

    def worker(w: int) -> Callable[[], None]:
        rng = random.Random(seed + w)

        def run() -> None:
            ids = [(w, i) for i in range(1200)]
            for task_id in ids:
                assert sched.schedule_once(task_id, rng.randrange(0, 40), action_for(task_id))
                if rng.random() < 0.5:
                    victim = rng.choice(ids[: ids.index(task_id) + 1])
                    if victim not in cancel_result:
                        cancel_result[victim] = sched.cancel(victim)

        return run

    def dispatcher() -> None:
        while not done.is_set():
            sched.tick(clock.advance(1))

    workers = [worker(w) for w in range(8)]

    def all_workers() -> None:
        try:
            run_threads(list(workers))
        finally:
            done.set()

    run_threads([all_workers, dispatcher])
    sched.tick(clock.advance(100))

    assert sched.next_run_time() is None
    for w in range(8):
        for i in range(1200):
            task_id = (w, i)
            if task_id not in cancel_result:
                assert ran[task_id] == 1, (seed, task_id)
                assert sched.status(task_id) is Status.DONE
            elif cancel_result[task_id]:
                assert ran[task_id] <= 1, (seed, task_id)
                assert sched.status(task_id) is Status.CANCELLED
            else:  # cancel came too late: it had already run
                assert ran[task_id] == 1, (seed, task_id)
                assert sched.status(task_id) is Status.DONE
    check_table(sched)


def test_several_threads_ticking_run_each_due_run_exactly_once() -> None:
    clock = ManualClock(0)
    sched = Scheduler(clock=clock, backoff=1)
    ran: Counter[Any] = Counter()
    lock = threading.Lock()
    running: set[Any] = set()
    overlaps: list[Any] = []

    def action_for(task_id: Any, fail_first: bool) -> Callable[[Any], None]:
        def action(at: Any) -> None:
            with lock:
                if task_id in running:
                    overlaps.append(task_id)
                running.add(task_id)
                ran[task_id, at] += 1
            with lock:
                running.discard(task_id)
            if fail_first and ran[task_id, at] == 1 and at % 2 == 0:
                raise ValueError("retry me")

        return action

    for i in range(6000):
        sched.schedule_once(("once", i), i % 97, action_for(("once", i), i % 5 == 0), 1)
    for i in range(40):
        sched.schedule_at_fixed_rate(("rate", i), i % 3, 7, action_for(("rate", i), False))

    def ticker() -> None:
        for now in range(200):
            sched.tick(now)

    run_threads([ticker] * 4)
    assert overlaps == []
    assert all(count == 1 for count in ran.values()), [k for k, c in ran.items() if c > 1][:5]
    for i in range(6000):
        assert sched.status(("once", i)) is Status.DONE
        # a failing first run at an even time was retried once, one unit later
        retried = i % 5 == 0 and (i % 97) % 2 == 0
        assert ran[("once", i), i % 97 + 1] == (1 if retried else 0)
    for i in range(40):
        slots = [at for (task_id, at) in ran if task_id == ("rate", i)]
        assert sorted(slots) == list(range(i % 3, 200, 7))


def append_name(log: list[str], name: str, at: Any) -> None:
    """An action that appends its name."""
    log.append(name)


def test_a_cancel_that_returned_true_before_the_claim_means_never_starts() -> None:
    """The dispatcher is held inside one action while another thread cancels a due task."""
    sched = Scheduler(clock=ManualClock(0))
    inside, release = threading.Event(), threading.Event()
    log: list[str] = []

    def blocker(at: Any) -> None:
        inside.set()
        assert release.wait(TIMEOUT)

    sched.schedule_once("blocker", 0, blocker)
    for name in "abc":
        sched.schedule_once(name, 0, functools.partial(append_name, log, name))
    ticker = threading.Thread(target=sched.tick, args=(0,))
    ticker.start()
    assert inside.wait(TIMEOUT)
    assert sched.cancel("b") is True
    release.set()
    ticker.join(TIMEOUT)
    assert not ticker.is_alive()
    assert log == ["a", "c"]
