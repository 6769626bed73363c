"""Core benchmark: cadence against stdlib ``sched`` and the raw heap floor, virtual time.

Workloads (no-op actions, the same random times for every peer):

* ``schedule+fire``: schedule n one-off tasks at random times, then run them all.
* ``schedule+cancel``: with n far-future tasks resident, one round = schedule
  a task and cancel it. Here ``sched``'s O(n) cancel shows.
* ``fixed-rate run``: 100 tasks of period 10 over 10,000 time units, drained
  by one call (cadence ``tick``; ``sched`` re-enters each event from its action,
  as its users do; the floor pushes the next slot).
* ``idle tick``: one "anything due?" call with n tasks pending and none due
  (cadence ``tick(now)``; ``sched.run(blocking=False)``; the floor peeks).
* bytes per pending task, by tracemalloc, ids created beforehand.

The floor is a bare ``heapq`` of ``(at, seq, id)`` tuples with a dict of live
versions and a loop: the cost no heap scheduler in Python can beat.

Usage: ``python bench/core.py [--quick] [--no-save]``.
"""

from __future__ import annotations

import heapq
import itertools
import random
import sched
import sys
import tracemalloc
from collections.abc import Callable
from typing import Any

from harness import Figure, Run, interleave, save, table, timed

from cadence import Scheduler

FAR = 10.0**9


def noop(*args: object) -> None:
    """The action every peer runs."""


def random_times(n: int, seed: int = 1) -> list[float]:
    rng = random.Random(seed)
    return [rng.random() * 1000.0 for _ in range(n)]


class Floor:
    """A bare heap of (at, seq, id) with a dict of live versions (lazy deletion)."""

    def __init__(self) -> None:
        self.heap: list[tuple[float, int, int]] = []
        self.live: dict[int, int] = {}
        self.seq = itertools.count()

    def add(self, task_id: int, at: float) -> None:
        seq = next(self.seq)
        self.live[task_id] = seq
        heapq.heappush(self.heap, (at, seq, task_id))

    def cancel(self, task_id: int) -> None:
        del self.live[task_id]

    def drain(self, now: float) -> int:
        heap, live, ran = self.heap, self.live, 0
        while heap and heap[0][0] <= now:
            at, seq, task_id = heapq.heappop(heap)
            if live.get(task_id) == seq:
                del live[task_id]
                noop(at)
                ran += 1
        return ran


class VirtualSched:
    """stdlib ``sched`` on a virtual clock (its own injectable timefunc/delayfunc)."""

    def __init__(self) -> None:
        self.now = 0.0
        self.s = sched.scheduler(lambda: self.now, lambda delay: None)


# -- workloads -------------------------------------------------------------------


def schedule_fire(n: int) -> dict[str, Callable[[], Run]]:
    times = random_times(n)

    def floor() -> Run:
        f = Floor()

        def body() -> int:
            add = f.add
            for task_id, at in enumerate(times):
                add(task_id, at)
            return f.drain(FAR)

        return lambda: timed(body)

    def stdlib() -> Run:
        v = VirtualSched()

        def body() -> int:
            enter = v.s.enter
            for at in times:
                enter(at, 0, noop)
            v.now = FAR
            v.s.run(blocking=False)
            return n

        return lambda: timed(body)

    def cadence() -> Run:
        s = Scheduler(clock=lambda: 0.0)

        def body() -> int:
            schedule = s.schedule_once
            for task_id, at in enumerate(times):
                schedule(task_id, at, noop)
            return len(s.tick(FAR))

        return lambda: timed(body)

    return {"floor": floor, "sched": stdlib, "cadence": cadence}


def schedule_cancel(n: int, rounds: int) -> dict[str, Callable[[], Run]]:
    """Peers are filled once (untimed) and reused by every repetition."""
    times = random_times(n)
    sched_rounds = max(10, min(rounds, 2 * 10**7 // n))

    f = Floor()
    for task_id, at in enumerate(times):
        f.add(task_id, FAR + at)

    def floor() -> Run:
        def body() -> int:
            add, cancel = f.add, f.cancel
            for _ in range(rounds):
                add(-1, 5.0)
                cancel(-1)
            return rounds

        return lambda: timed(body)

    v = VirtualSched()
    for at in times:
        v.s.enter(FAR + at, 0, noop)

    def stdlib() -> Run:
        def body() -> int:
            enter, cancel = v.s.enter, v.s.cancel
            for _ in range(sched_rounds):
                cancel(enter(5.0, 0, noop))
            return sched_rounds

        return lambda: timed(body)

    s = Scheduler(clock=lambda: 0.0)
    for task_id, at in enumerate(times):
        s.schedule_once(task_id, FAR + at, noop)

    def cadence() -> Run:
        def body() -> int:
            schedule, cancel = s.schedule_once, s.cancel
            for _ in range(rounds):
                schedule(-1, 5.0, noop)
                cancel(-1)
            return rounds

        return lambda: timed(body)

    return {"floor": floor, "sched": stdlib, "cadence": cadence}


def fixed_rate(tasks: int, period: int, horizon: int) -> dict[str, Callable[[], Run]]:
    offsets = [i % period for i in range(tasks)]
    runs = sum(len(range(o, horizon + 1, period)) for o in offsets)

    def floor() -> Run:
        heap: list[tuple[int, int, int, int]] = []  # (at, seq, id, slot)
        seq = itertools.count()
        for task_id, first in enumerate(offsets):
            heapq.heappush(heap, (first, next(seq), task_id, 0))

        def body() -> int:
            ran = 0
            while heap and heap[0][0] <= horizon:
                at, _, task_id, slot = heapq.heappop(heap)
                noop(at)
                ran += 1
                first = offsets[task_id]
                heapq.heappush(heap, (first + (slot + 1) * period, next(seq), task_id, slot + 1))
            return ran

        return lambda: timed(body)

    def stdlib() -> Run:
        v = VirtualSched()

        def every(first: int, slot: int) -> None:
            v.s.enterabs(first + (slot + 1) * period, 0, every, (first, slot + 1))

        for first in offsets:
            v.s.enterabs(first, 0, every, (first, 0))

        def body() -> int:
            v.now = horizon
            v.s.run(blocking=False)
            return runs

        return lambda: timed(body)

    def cadence() -> Run:
        s = Scheduler(clock=lambda: 0)
        for task_id, first in enumerate(offsets):
            s.schedule_at_fixed_rate(task_id, first, period, noop)

        def body() -> int:
            return len(s.tick(horizon))

        return lambda: timed(body)

    return {"floor": floor, "sched": stdlib, "cadence": cadence}


def idle_tick(n: int, calls: int) -> dict[str, Callable[[], Run]]:
    times = random_times(n)

    def floor() -> Run:
        f = Floor()
        for task_id, at in enumerate(times):
            f.add(task_id, FAR + at)

        def body() -> int:
            drain = f.drain
            for _ in range(calls):
                drain(1.0)
            return calls

        return lambda: timed(body)

    def stdlib() -> Run:
        v = VirtualSched()
        for at in times:
            v.s.enter(FAR + at, 0, noop)
        v.now = 1.0

        def body() -> int:
            run = v.s.run
            for _ in range(calls):
                run(False)
            return calls

        return lambda: timed(body)

    def cadence() -> Run:
        s = Scheduler(clock=lambda: 0.0)
        for task_id, at in enumerate(times):
            s.schedule_once(task_id, FAR + at, noop)

        def body() -> int:
            tick = s.tick
            for _ in range(calls):
                tick(1.0)
            return calls

        return lambda: timed(body)

    return {"floor": floor, "sched": stdlib, "cadence": cadence}


def bytes_per_task(n: int) -> dict[str, float]:
    """Traced bytes per pending task after scheduling n far-future tasks."""
    times = random_times(n)
    ids = list(range(10**6, 10**6 + n))
    fills: dict[str, Callable[[], Any]] = {}

    def floor() -> Any:
        f = Floor()
        for task_id, at in zip(ids, times, strict=True):
            f.add(task_id, at + 1.0)
        return f

    def stdlib() -> Any:
        v = VirtualSched()
        for at in times:
            v.s.enter(at + 1.0, 0, noop)
        return v

    def cadence() -> Any:
        s = Scheduler(clock=lambda: 0.0)
        for task_id, at in zip(ids, times, strict=True):
            s.schedule_once(task_id, at + 1.0, noop)
        return s

    fills = {"floor": floor, "sched": stdlib, "cadence": cadence}
    result = {}
    for peer, fill in fills.items():
        tracemalloc.start()
        before = tracemalloc.get_traced_memory()[0]
        keep = fill()
        after = tracemalloc.get_traced_memory()[0]
        tracemalloc.stop()
        del keep
        result[peer] = (after - before) / n
    return result


def main(argv: list[str]) -> None:
    quick = "--quick" in argv
    figures: list[Figure] = []
    fire_sizes = [10**3, 10**4] if quick else [10**3, 10**4, 10**5]
    cancel_sizes = [10**3, 10**4] if quick else [10**3, 10**4, 10**5, 10**6]
    for n in fire_sizes:
        figures += interleave("schedule+fire", n, schedule_fire(n))
        print(f"schedule+fire {n} done", file=sys.stderr)
    for n in cancel_sizes:
        figures += interleave("schedule+cancel", n, schedule_cancel(n, rounds=5000))
        print(f"schedule+cancel {n} done", file=sys.stderr)
    horizon = 1000 if quick else 10_000
    figures += interleave("fixed-rate run", 100, fixed_rate(100, 10, horizon))
    for n in [10**3, 10**5]:
        figures += interleave("idle tick", n, idle_tick(n, calls=20_000))
    memory = bytes_per_task(10**4 if quick else 10**5)

    markdown = table(figures, ["floor", "sched"])
    markdown += "\n\n| bytes per pending task | " + " | ".join(memory) + " |\n"
    markdown += "|---|" + "---|" * len(memory) + "\n"
    markdown += "| tracemalloc | " + " | ".join(f"{b:.0f}" for b in memory.values()) + " |"
    print(markdown)
    if "--no-save" not in argv and not quick:
        command = "python bench/core.py"
        save("core", command, figures, {"bytes_per_pending_task": memory}, markdown)


if __name__ == "__main__":
    main(sys.argv[1:])
