"""rota beside its peers, through the same workloads, in one process run.

Peers (installed from PyPI into the bench environment: ``pip install '.[bench]'``):

* ``floor``: a bare ``heapq`` of ``(at, seq, id)`` with a dict of live
  versions and a loop: the cost no heap scheduler in Python can beat;
* ``sched``: stdlib ``sched.scheduler`` with an injected virtual clock;
* ``asyncio``: the event loop's timers (``call_at``, ``TimerHandle.cancel``)
  on a loop whose ``time()`` is virtual (as ``looptime`` does), driven one
  iteration at a time with ``call_soon(stop); run_forever()``;
* ``APScheduler 3``: the in-memory job store and its ``DebugExecutor`` (runs
  jobs inline). It reads ``datetime.now()`` itself, so, as its users do with
  freezegun, ``datetime`` in its scheduler module is patched to a virtual
  clock; a ``BaseScheduler`` subclass with a no-op ``wakeup`` stands in for
  the background thread, and its wake-up routine ``_process_jobs()`` is
  called directly (as APScheduler's own tests drive it);
* ``schedule``: its default scheduler API (``every(...).seconds.do``, one-off
  jobs returning ``CancelJob``), with ``schedule.datetime`` patched to a
  virtual clock, which is what freezegun does for its users' tests;
* ``rota``: ``Scheduler`` on a virtual clock, driven by ``tick``.

Workloads (no-op actions, the same random times for every peer):

* W1 ``schedule+drain``: schedule n one-off tasks at random times, run them all;
* W2 ``schedule+cancel``: with N far-future tasks resident, one round =
  schedule a task and cancel it. O(n) cancels show here;
* W3 ``fixed-rate``: 1,000 tasks of period 100 over 10,000 time units
  (100,000 runs); ``schedule`` is stepped one time unit at a time, as its
  ``run_pending`` loop would be (it never catches up);
* W4 ``anything due?``: one check with N tasks pending and none due;
* memory: traced bytes per pending task.

Method: warm-up, then best and median of ``REPEATS`` timed runs per peer,
peers interleaved (see harness.py). A peer whose single run takes longer
than ``SLOW`` seconds is timed once (marked) and not run at larger sizes;
this is said in the report.

Usage: ``python bench/peers.py [--quick] [--no-save]``.
"""

from __future__ import annotations

import asyncio
import datetime as dt
import functools
import heapq
import itertools
import json
import random
import sched
import sys
import tracemalloc
import types
from collections.abc import Callable
from pathlib import Path
from typing import Any

import harness
from harness import Figure, save, timed

from rota import Scheduler

FAR = 10.0**9
SLOW = 30.0  # seconds: a run slower than this is timed once and not scaled up


def noop(*args: object) -> Any:
    """The action every peer runs."""
    return None


def random_times(n: int, span: float = 1000.0, seed: int = 1) -> list[float]:
    rng = random.Random(seed)
    return [rng.random() * span for _ in range(n)]


class Peer:
    """One scheduler behind the workloads' common interface (absolute virtual times)."""

    name = ""
    how = ""

    def fresh(self) -> None:
        raise NotImplementedError

    def add(self, task_id: int, at: float) -> None:
        raise NotImplementedError

    def cancel(self, task_id: int) -> None:
        raise NotImplementedError

    def drain(self, now: float) -> int:
        raise NotImplementedError

    def idle(self, now: float) -> None:
        self.drain(now)

    def add_rate(self, task_id: int, first: float, period: float) -> None:
        raise NotImplementedError

    def run_rate(self, horizon: float) -> int:
        return self.drain(horizon)


class Floor(Peer):
    name, how = "floor", "bare heapq + dict of versions"

    def fresh(self) -> None:
        self.heap: list[tuple[float, int, int, float]] = []
        self.live: dict[int, int] = {}
        self.seq = itertools.count()

    def add(self, task_id: int, at: float) -> None:
        seq = next(self.seq)
        self.live[task_id] = seq
        heapq.heappush(self.heap, (at, seq, task_id, 0.0))

    def cancel(self, task_id: int) -> None:
        del self.live[task_id]

    def add_rate(self, task_id: int, first: float, period: float) -> None:
        seq = next(self.seq)
        self.live[task_id] = seq
        heapq.heappush(self.heap, (first, seq, task_id, period))

    def drain(self, now: float) -> int:
        heap, live, ran = self.heap, self.live, 0
        while heap and heap[0][0] <= now:
            at, seq, task_id, period = heapq.heappop(heap)
            if live.get(task_id) == seq:
                noop(at)
                ran += 1
                if period:
                    seq = next(self.seq)
                    live[task_id] = seq
                    heapq.heappush(heap, (at + period, seq, task_id, period))
                else:
                    del live[task_id]
        return ran


class Sched(Peer):
    name, how = "sched", "stdlib sched, virtual timefunc"

    def fresh(self) -> None:
        self.now = 0.0
        self.s = sched.scheduler(lambda: self.now, lambda delay: None)
        self.events: dict[int, Any] = {}
        self.ran = 0

    def add(self, task_id: int, at: float) -> None:
        self.events[task_id] = self.s.enterabs(at, 0, self._run)

    def _run(self, *args: object) -> None:
        self.ran += 1

    def cancel(self, task_id: int) -> None:
        self.s.cancel(self.events.pop(task_id))

    def add_rate(self, task_id: int, first: float, period: float) -> None:
        def every(slot: int) -> None:
            self.ran += 1
            self.s.enterabs(first + (slot + 1) * period, 0, every, (slot + 1,))

        self.s.enterabs(first, 0, every, (0,))

    def drain(self, now: float) -> int:
        self.now, self.ran = now, 0
        self.s.run(blocking=False)
        return self.ran


class _VirtualLoop(asyncio.SelectorEventLoop):
    virtual = 0.0

    def time(self) -> float:
        return self.virtual


class Asyncio(Peer):
    name, how = "asyncio", "loop timers, virtual loop.time()"

    def __init__(self) -> None:
        self.loop = _VirtualLoop()

    def fresh(self) -> None:
        self.loop.close()
        self.loop = _VirtualLoop()
        self.handles: dict[int, asyncio.TimerHandle] = {}
        self.ran = 0

    def _run(self) -> None:
        self.ran += 1

    def add(self, task_id: int, at: float) -> None:
        self.handles[task_id] = self.loop.call_at(at, self._run)

    def cancel(self, task_id: int) -> None:
        self.handles.pop(task_id).cancel()

    def add_rate(self, task_id: int, first: float, period: float) -> None:
        loop = self.loop

        def every(slot: int) -> None:
            self.ran += 1
            loop.call_at(first + (slot + 1) * period, every, slot + 1)

        loop.call_at(first, every, 0)

    def drain(self, now: float) -> int:
        loop = self.loop
        loop.virtual, self.ran = now, 0
        scheduled = loop.__dict__["_scheduled"]  # the loop's timer heap
        while scheduled and scheduled[0].when() <= now:
            loop.call_soon(loop.stop)
            loop.run_forever()
        return self.ran

    def idle(self, now: float) -> None:
        self.loop.virtual = now
        self.loop.call_soon(self.loop.stop)
        self.loop.run_forever()


class _VirtualDatetime(dt.datetime):
    """``datetime`` whose ``now()`` is a virtual clock (what freezegun patches in)."""

    virtual = dt.datetime(2000, 1, 1)

    @classmethod
    def now(cls, tz: Any = None) -> Any:
        return cls.virtual if tz is None else cls.virtual.replace(tzinfo=tz)


BASE = dt.datetime(2000, 1, 1)


class APScheduler3(Peer):
    s: Any = None

    name, how = (
        "APScheduler 3",
        "in-memory job store, DebugExecutor (inline); datetime.now() patched to a virtual "
        "clock (as freezegun does); a BaseScheduler with a no-op wakeup, _process_jobs() "
        "called as its thread would (as APScheduler's own tests drive it)",
    )

    def fresh(self) -> None:
        import apscheduler.schedulers.base as aps_base
        from apscheduler.executors.debug import DebugExecutor

        aps_base.datetime = _VirtualDatetime
        _VirtualDatetime.virtual = BASE

        class Manual(aps_base.BaseScheduler):  # type: ignore[misc]
            def wakeup(self) -> None:
                pass

            def shutdown(self, wait: bool = True) -> None:
                super().shutdown(wait)

        if self.s is not None:
            self.s.shutdown(wait=False)
        self.s = Manual(
            executors={"default": DebugExecutor()},
            job_defaults={"misfire_grace_time": None, "coalesce": False, "max_instances": 10**6},
            timezone=dt.UTC,
        )
        self.s.start()
        self.ran = 0

    def _run(self) -> None:
        self.ran += 1

    def _date(self, at: float) -> dt.datetime:
        return (BASE + dt.timedelta(seconds=at)).replace(tzinfo=dt.UTC)

    def add(self, task_id: int, at: float) -> None:
        self.s.add_job(self._run, "date", run_date=self._date(at), id=str(task_id))

    def cancel(self, task_id: int) -> None:
        self.s.remove_job(str(task_id))

    def add_rate(self, task_id: int, first: float, period: float) -> None:
        self.s.add_job(self._run, "interval", seconds=period, start_date=self._date(first),
                       id=str(task_id))  # fmt: skip

    def drain(self, now: float) -> int:
        self.ran = 0
        _VirtualDatetime.virtual = BASE + dt.timedelta(seconds=now)
        self.s._process_jobs()
        return self.ran

    def idle(self, now: float) -> None:
        _VirtualDatetime.virtual = BASE + dt.timedelta(seconds=now)
        self.s._process_jobs()


class Schedule(Peer):
    name, how = "schedule", "datetime.now() patched to a virtual clock (as freezegun does)"

    def fresh(self) -> None:
        import schedule

        self.lib = schedule
        schedule.datetime = types.SimpleNamespace(
            datetime=_VirtualDatetime, timedelta=dt.timedelta, date=dt.date, time=dt.time,
            timezone=dt.timezone,
        )  # fmt: skip
        self.base = dt.datetime(2000, 1, 1)
        _VirtualDatetime.virtual = self.base
        self.s = schedule.Scheduler()
        self.jobs: dict[int, Any] = {}
        self.ran = 0

    def _once(self) -> Any:
        self.ran += 1
        return self.lib.CancelJob

    def _every(self) -> None:
        self.ran += 1

    def add(self, task_id: int, at: float) -> None:
        self.jobs[task_id] = self.s.every(at).seconds.do(self._once)

    def cancel(self, task_id: int) -> None:
        self.s.cancel_job(self.jobs.pop(task_id))

    def add_rate(self, task_id: int, first: float, period: float) -> None:
        self.s.every(period).seconds.do(self._every)

    def drain(self, now: float) -> int:
        self.ran = 0
        _VirtualDatetime.virtual = self.base + dt.timedelta(seconds=now)
        self.s.run_pending()
        return self.ran

    def run_rate(self, horizon: float) -> int:
        ran = 0
        for now in range(int(horizon) + 1):  # its users call run_pending in a loop
            ran += self.drain(now)
        return ran


class Rota(Peer):
    name, how = "rota", "Scheduler on a virtual clock, tick(now)"

    def fresh(self) -> None:
        self.s = Scheduler(clock=lambda: 0.0)

    def add(self, task_id: int, at: float) -> None:
        self.s.schedule_once(task_id, at, noop)

    def cancel(self, task_id: int) -> None:
        self.s.cancel(task_id)

    def add_rate(self, task_id: int, first: float, period: float) -> None:
        self.s.schedule_at_fixed_rate(task_id, first, period, noop)

    def drain(self, now: float) -> int:
        return len(self.s.tick(now))


PEERS: list[type[Peer]] = [Floor, Sched, Asyncio, APScheduler3, Schedule, Rota]


class Bench:
    """Runs the workloads, remembering which peers became too slow to scale."""

    def __init__(self, peers: list[Peer]) -> None:
        self.peers = peers
        self.figures: list[Figure] = []
        self.notes: list[str] = []
        self.too_slow: dict[tuple[str, str], int] = {}

    def per_op(self, peer: str, workload: str, below: int) -> tuple[int, float] | None:
        """The largest size below ``below`` this peer ran ``workload`` at, and its best ns/op."""
        done = [(f.size, f.best) for f in self.figures
                if f.peer == peer and f.workload == workload and f.size < below]  # fmt: skip
        return max(done) if done else None

    def estimate(self, peer: str, workload: str, size: int, ops: int) -> float:
        """Seconds one run would take, if per-op cost grows linearly with size (pessimistic)."""
        seconds = 0.0
        known = self.per_op(peer, workload, size)
        if known:
            seconds += known[1] * size / known[0] * ops / 1e9
        if workload.startswith("W2"):  # filling `size` resident tasks first
            fill = self.per_op(peer, "W1 schedule+drain", 10**9)
            if fill:
                growth = size / fill[0] if peer in LINEAR_INSERT else 1.0
                seconds += fill[1] * growth * size / 1e9
        return seconds

    def measure(
        self, workload: str, size: int, prepare: Callable[[Peer], Callable[[], int]], ops: int
    ) -> None:
        runs: dict[str, Callable[[], harness.Run]] = {}
        for peer in self.peers:
            if (peer.name, workload) in self.too_slow:
                continue
            seconds = self.estimate(peer.name, workload, size, ops)
            if seconds > 2 * SLOW:
                self.notes.append(
                    f"{peer.name}, {workload} at {size:,}: not run; estimated {seconds:,.0f} s "
                    "per run from the smaller size (its per-task cost grows with n)."
                )
                continue
            runs[peer.name] = functools.partial(_prepared, prepare, peer)
        figures = {name: Figure(workload, size, name) for name in runs}
        slow: set[str] = set()
        for name, run in runs.items():  # warm-up, and the slow check
            elapsed, ops = run()()
            if elapsed / 1e9 > SLOW:
                slow.add(name)
                figures[name].samples.append(elapsed / ops)
        names = list(runs)
        for repeat in range(harness.REPEATS):
            order = names[repeat % len(names) :] + names[: repeat % len(names)]
            for name in order:
                if name not in slow:
                    elapsed, ops = runs[name]()()
                    figures[name].samples.append(elapsed / ops)
        for name in slow:
            self.too_slow[name, workload] = size
            self.notes.append(
                f"{name}, {workload} at {size:,}: one run took over {SLOW:.0f} s; timed once, "
                "larger sizes not run."
            )
        self.figures += figures.values()
        print(f"{workload} {size:,} done", file=sys.stderr)


def _prepared(prepare: Callable[[Peer], Callable[[], int]], peer: Peer) -> harness.Run:
    body = prepare(peer)
    return lambda: timed(body)


def w1(n: int) -> Callable[[Peer], Callable[[], int]]:
    times = random_times(n)

    def prepare(peer: Peer) -> Callable[[], int]:
        peer.fresh()

        def body() -> int:
            add = peer.add
            for task_id, at in enumerate(times):
                add(task_id, at + 1.0)
            ran = peer.drain(2000.0)
            assert ran == n, (peer.name, ran)
            return n

        return body

    return prepare


def w2(resident: int, rounds: int) -> Callable[[Peer], Callable[[], int]]:
    times = random_times(resident)
    filled: dict[str, Peer] = {}

    def prepare(peer: Peer) -> Callable[[], int]:
        if peer.name not in filled:  # fill once (untimed), reuse for every repetition
            peer.fresh()
            for task_id, at in enumerate(times):
                peer.add(task_id, FAR + at)
            filled[peer.name] = peer
        n = rounds_for(peer.name, rounds, resident)

        def body() -> int:
            add, cancel = peer.add, peer.cancel
            for _ in range(n):
                add(-1, 5.0)
                cancel(-1)
            return n

        return body

    return prepare


def w3(tasks: int, period: float, horizon: float) -> Callable[[Peer], Callable[[], int]]:
    def prepare(peer: Peer) -> Callable[[], int]:
        peer.fresh()
        peer.horizon = horizon  # type: ignore[attr-defined]
        for task_id in range(tasks):
            peer.add_rate(task_id, 1.0 + task_id * period / tasks, period)

        def body() -> int:
            return peer.run_rate(horizon)

        return body

    return prepare


LINEAR = ("sched", "APScheduler 3", "schedule")  # peers with O(n) cancel or scan
LINEAR_INSERT = ("APScheduler 3",)  # peers with O(n) insert


def rounds_for(peer: str, rounds: int, resident: int) -> int:
    """Fewer rounds for peers whose per-round cost is O(resident)."""
    return max(10, min(rounds, 2 * 10**7 // resident)) if peer in LINEAR else rounds


def w4(resident: int, checks: int) -> Callable[[Peer], Callable[[], int]]:
    times = random_times(resident)

    def prepare(peer: Peer) -> Callable[[], int]:
        peer.fresh()
        for task_id, at in enumerate(times):
            peer.add(task_id, FAR + at)

        n = rounds_for(peer.name, checks, resident)

        def body() -> int:
            idle = peer.idle
            for _ in range(n):
                idle(1.0)
            return n

        return body

    return prepare


def memory(peers: list[Peer], n: int) -> dict[str, float]:
    """Traced bytes per pending task: each peer with what it needs to cancel by id.

    (sched, asyncio and schedule hand back an event/handle/job that the
    caller must keep to cancel it; the adapters keep those in a dict by id,
    as rota keeps its task table.) Ids and times are made before tracing.
    """
    times = [FAR + at for at in random_times(n)]
    ids = list(range(10**6, 10**6 + n))
    result = {}
    for peer in peers:
        peer.fresh()
        tracemalloc.start()
        before = tracemalloc.get_traced_memory()[0]
        for task_id, at in zip(ids, times, strict=True):
            peer.add(task_id, at)
        after = tracemalloc.get_traced_memory()[0]
        tracemalloc.stop()
        result[peer.name] = (after - before) / n
        peer.fresh()
    return result


def plot(figures: list[Figure], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(7, 4.5), dpi=120)
    by_peer: dict[str, list[Figure]] = {}
    for f in figures:
        if f.workload == "W2 schedule+cancel":
            by_peer.setdefault(f.peer, []).append(f)
    for peer, figs in by_peer.items():
        figs.sort(key=lambda f: f.size)
        ax.plot([f.size for f in figs], [f.best for f in figs], marker="o", label=peer)
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xlabel("resident tasks")
    ax.set_ylabel("ns per schedule+cancel round (best of 5)")
    ax.set_title("W2: cancelling with many tasks pending")
    ax.grid(True, which="both", alpha=0.3)
    ax.legend()
    fig.tight_layout()
    fig.savefig(path)


def targets(figures: list[Figure]) -> list[str]:
    """Check the suite's targets; one line each, with the margin."""
    best = {(f.workload, f.size, f.peer): f.best for f in figures}
    lines = []
    for workload in ("W1 schedule+drain", "W2 schedule+cancel", "W4 anything due?"):
        for (w, size, peer), value in sorted(best.items()):
            if w != workload or peer in ("rota", "floor"):
                continue
            ours = best.get((w, size, "rota"))
            if ours is None:
                continue
            ok = ours < value
            lines.append(
                f"{'met' if ok else 'MISSED'}: {w} {size:,}: rota {ours:,.0f} ns vs "
                f"{peer} {value:,.0f} ns ({value / ours:.2f}x)"
            )
    w2 = sorted(
        (s, v) for (w, s, p), v in best.items() if w == "W2 schedule+cancel" and p == "rota"
    )
    if len(w2) >= 2:
        growth = w2[-1][1] / w2[0][1]
        lines.append(
            f"{'met' if growth <= 2 else 'MISSED'}: W2 rota growth {w2[0][0]:,} -> "
            f"{w2[-1][0]:,} resident: {growth:.2f}x (target <= 2x)"
        )
    for workload in ("W1 schedule+drain", "W2 schedule+cancel"):
        for (w, size, peer), value in sorted(best.items()):
            if w == workload and peer == "rota":
                ratio = value / best[(w, size, "floor")]
                lines.append(
                    f"{'met' if ratio <= 3 else 'MISSED'}: {w} {size:,}: rota {ratio:.2f}x "
                    "the floor (target <= 3x)"
                )
    return lines


def main(argv: list[str], only: tuple[str, ...] = (), name: str = "peers") -> None:
    """Run the workloads for every peer (or those named in ``only``); save as ``name``."""
    quick = "--quick" in argv
    peers = [cls() for cls in PEERS if not only or cls.name in only]
    bench = Bench(peers)
    for n in [10**3, 10**4] if quick else [10**3, 10**4, 10**5]:
        bench.measure("W1 schedule+drain", n, w1(n), ops=n)
    for resident in [10**3, 10**4] if quick else [10**3, 10**4, 10**5, 10**6]:
        bench.measure("W2 schedule+cancel", resident, w2(resident, rounds=2000), ops=2000)
    horizon = 1000.0 if quick else 10_000.0
    bench.measure("W3 fixed-rate run", 1000, w3(1000, 100.0, horizon), ops=int(horizon * 10))
    for resident in [10**3, 10**5]:
        bench.measure("W4 anything due?", resident, w4(resident, checks=2000), ops=2000)
    mem = memory(peers, 10**4 if quick else 10**5)

    results = Path(__file__).parent / "results"
    markdown = harness.table(bench.figures, ["floor", "sched"])
    markdown += "\n\n| bytes per pending task | " + " | ".join(mem) + " |\n"
    markdown += "|---|" + "---|" * len(mem) + "\n"
    markdown += "| tracemalloc | " + " | ".join(f"{b:.0f}" for b in mem.values()) + " |\n"
    realtime = results / "realtime.md"
    if realtime.exists() and not only:
        markdown += "\nReal-time lag of the runners (from `bench/realtime.py`):\n\n"
        markdown += realtime.read_text().split("\n\n", 2)[-1]
    markdown += "\n\nHow each peer is driven:\n\n" + "\n".join(
        f"- {p.name}: {p.how}" for p in peers
    )
    if bench.notes:
        markdown += "\n\nNotes:\n\n" + "\n".join(f"- {note}" for note in bench.notes)
    markdown += "\n\nTargets:\n\n" + "\n".join(f"- {line}" for line in targets(bench.figures))
    print(markdown)
    if "--no-save" not in argv and not quick:
        extra = {"bytes_per_pending_task": mem, "notes": bench.notes,
                 "how": {p.name: p.how for p in peers}}  # fmt: skip
        save(name, f"python bench/{name}.py", bench.figures, extra, markdown)
        if not only:
            plot(bench.figures, results / "w2_cancel.png")
            print(json.dumps({"plot": str(results / "w2_cancel.png")}), file=sys.stderr)


if __name__ == "__main__":
    main(sys.argv[1:])
