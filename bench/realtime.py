"""Real-time benchmark: dispatch lag of rota's runners against asyncio and ``sched``.

Peers, all on ``time.monotonic`` and measured in the same run:

* ``rota Runner``: the dispatcher thread, actions inline;
* ``rota AsyncRunner``: inside an asyncio loop;
* ``asyncio call_at``: the loop's own timers, one ``call_at`` per timer;
* ``sched``: stdlib ``sched.scheduler(time.monotonic, time.sleep).run()``.

Workloads (no-op actions; every timer is scheduled before dispatch starts):

* lag of 1,000 timers at random times over 2 s, and of 10,000 timers/s
  sustained for 3 s (30,000 timers): lag = actual start - scheduled time,
  read with ``time.monotonic()`` inside the action;
* wake-up: while the dispatcher sleeps on a task an hour away, another
  thread schedules a task due now: time from that call to the action's start;
* stop: time for ``stop()`` to return while the dispatcher sleeps.

Each lag workload runs ``REPEATS`` times per peer, interleaved; the table
gives the median over repeats of each percentile.

Usage: ``python bench/realtime.py [--quick] [--no-save]``.
"""

from __future__ import annotations

import asyncio
import random
import sched
import statistics
import sys
import threading
import time
from collections.abc import Callable

from harness import machine, save

from rota import AsyncRunner, Runner, Scheduler
from rota._runners.stats import percentile

REPEATS = 3
LEAD = 0.3  # seconds between scheduling the first timer and its due time
WAIT = 30.0


def spread(n: int, span: float, seed: int) -> list[float]:
    rng = random.Random(seed)
    return sorted(rng.random() * span for _ in range(n))


def rota_timers(offsets: list[float], done: Callable[[], object]) -> tuple[Scheduler, list[float]]:
    """A scheduler with one timer per offset (from LEAD s on); ``done()`` after the last run."""
    s = Scheduler(clock=time.monotonic)
    lags: list[float] = []

    def action(at: float) -> None:
        lags.append(time.monotonic() - at)
        if len(lags) == len(offsets):
            done()

    base = time.monotonic() + LEAD
    for i, offset in enumerate(offsets):
        s.schedule_once(i, base + offset - time.monotonic(), action)
    return s, lags


def rota_runner(offsets: list[float]) -> list[float]:
    finished = threading.Event()
    s, lags = rota_timers(offsets, finished.set)
    with Runner(s):
        assert finished.wait(WAIT)
    return lags


def rota_async(offsets: list[float]) -> list[float]:
    async def main() -> list[float]:
        finished = asyncio.Event()
        s, lags = rota_timers(offsets, finished.set)
        async with AsyncRunner(s):
            await asyncio.wait_for(finished.wait(), WAIT)
        return lags

    return asyncio.run(main())


def asyncio_call_at(offsets: list[float]) -> list[float]:
    lags: list[float] = []
    n = len(offsets)

    async def main() -> None:
        loop = asyncio.get_running_loop()
        done = asyncio.Event()

        def action(when: float) -> None:
            lags.append(time.monotonic() - when)
            if len(lags) == n:
                done.set()

        base = loop.time() + LEAD
        for offset in offsets:
            loop.call_at(base + offset, action, base + offset)
        await asyncio.wait_for(done.wait(), WAIT)

    asyncio.run(main())
    return lags


def stdlib_sched(offsets: list[float]) -> list[float]:
    s = sched.scheduler(time.monotonic, time.sleep)
    lags: list[float] = []

    def action(at: float) -> None:
        lags.append(time.monotonic() - at)

    base = time.monotonic() + LEAD
    for offset in offsets:
        s.enterabs(base + offset, 0, action, (base + offset,))
    s.run()
    return lags


PEERS: dict[str, Callable[[list[float]], list[float]]] = {
    "rota Runner": rota_runner,
    "rota AsyncRunner": rota_async,
    "asyncio call_at": asyncio_call_at,
    "sched": stdlib_sched,
}


def lag_table(name: str, offsets: list[float]) -> dict[str, dict[str, float]]:
    samples: dict[str, list[tuple[float, float, float]]] = {peer: [] for peer in PEERS}
    for repeat in range(REPEATS):
        peers = list(PEERS)
        order = peers[repeat % len(peers) :] + peers[: repeat % len(peers)]
        for peer in order:
            lags = sorted(PEERS[peer](offsets))
            assert len(lags) == len(offsets)
            samples[peer].append((percentile(lags, 50), percentile(lags, 99), lags[-1]))
        print(f"{name}: repeat {repeat + 1} done", file=sys.stderr)
    return {
        peer: {
            "p50_ms": 1000 * statistics.median(s[0] for s in runs),
            "p99_ms": 1000 * statistics.median(s[1] for s in runs),
            "max_ms": 1000 * statistics.median(s[2] for s in runs),
        }
        for peer, runs in samples.items()
    }


def wake_latency(trials: int) -> dict[str, float | None]:
    """ms from scheduling a task due now (other thread) to its start, dispatcher asleep."""
    result: dict[str, float | None] = {}

    latencies = []
    s = Scheduler(clock=time.monotonic)
    s.schedule_once("far", 3600, lambda at: None)
    started = threading.Event()
    with Runner(s):
        for i in range(trials):
            time.sleep(0.02)  # let it fall asleep on the far task
            started.clear()
            t0 = time.monotonic()
            s.schedule_once(i, 0, lambda at: started.set())
            assert started.wait(5)
            latencies.append(time.monotonic() - t0)
    result["rota Runner"] = 1000 * statistics.median(latencies)

    latencies = []
    loop = asyncio.new_event_loop()
    thread = threading.Thread(target=loop.run_forever)
    thread.start()
    loop.call_soon_threadsafe(loop.call_later, 3600, lambda: None)
    for _ in range(trials):
        time.sleep(0.02)
        started.clear()
        t0 = time.monotonic()
        loop.call_soon_threadsafe(started.set)
        assert started.wait(5)
        latencies.append(time.monotonic() - t0)
    loop.call_soon_threadsafe(loop.stop)
    thread.join(5)
    loop.close()
    result["asyncio call_soon_threadsafe"] = 1000 * statistics.median(latencies)

    st = sched.scheduler(time.monotonic, time.sleep)
    st.enter(3600, 0, lambda: None)
    runner = threading.Thread(target=st.run, daemon=True)
    runner.start()
    time.sleep(0.02)
    started.clear()
    st.enter(0, 0, started.set)
    result["sched"] = None if not started.wait(1.0) else 0.0  # run() sleeps on: never woken
    return result


def stop_latency(trials: int) -> dict[str, float]:
    """ms for stop() to return while the dispatcher sleeps on a far task."""
    latencies = []
    for _ in range(trials):
        s = Scheduler(clock=time.monotonic)
        s.schedule_once("far", 3600, lambda at: None)
        runner = Runner(s)
        runner.start()
        time.sleep(0.02)
        t0 = time.monotonic()
        assert runner.stop(timeout=5)
        latencies.append(time.monotonic() - t0)
    rota = 1000 * statistics.median(latencies)

    latencies = []
    for _ in range(trials):
        loop = asyncio.new_event_loop()
        loop.call_later(3600, lambda: None)
        thread = threading.Thread(target=loop.run_forever)
        thread.start()
        time.sleep(0.02)
        t0 = time.monotonic()
        loop.call_soon_threadsafe(loop.stop)
        thread.join(5)
        latencies.append(time.monotonic() - t0)
        loop.close()
    return {"rota Runner.stop()": rota,
            "asyncio loop.stop() + join": 1000 * statistics.median(latencies)}  # fmt: skip


def main(argv: list[str]) -> None:
    quick = "--quick" in argv
    scale = 0.2 if quick else 1.0
    lag = {
        "1,000 timers over 2 s": lag_table("1k/2s", spread(int(1000 * scale), 2.0, 1)),
        "10,000 timers/s for 3 s": lag_table("10k/s", spread(int(30000 * scale), 3.0, 2)),
    }
    wake = wake_latency(20)
    stop = stop_latency(20)

    lines = [
        "| workload | peer | p50 ms | p99 ms | max ms | p99 x asyncio |",
        "|---|---|---|---|---|---|",
    ]
    for workload, peers in lag.items():
        ref = peers["asyncio call_at"]["p99_ms"]
        for peer, f in peers.items():
            lines.append(
                f"| {workload} | {peer} | {f['p50_ms']:.3f} | {f['p99_ms']:.3f} | "
                f"{f['max_ms']:.3f} | {f['p99_ms'] / ref:.2f} |"
            )
    lines += ["", "| wake-up on an earlier task, dispatcher asleep | median ms |", "|---|---|"]
    for peer, ms in wake.items():
        lines.append(f"| {peer} | {'never woken (sleeps on)' if ms is None else f'{ms:.3f}'} |")
    lines += ["", "| stop while idle | median ms |", "|---|---|"]
    lines += [f"| {peer} | {ms:.3f} |" for peer, ms in stop.items()]
    markdown = "\n".join(lines)
    print(markdown)
    print(machine(), file=sys.stderr)
    if "--no-save" not in argv and not quick:
        extra = {"lag": lag, "wake_ms": wake, "stop_ms": stop}
        save("realtime", "python bench/realtime.py", [], extra, markdown)


if __name__ == "__main__":
    main(sys.argv[1:])
