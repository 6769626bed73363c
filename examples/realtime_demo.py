"""A ten-second real-time demonstration of rota's Runner.

- "heartbeat" every 1 s and "metrics" every 2.5 s (fixed rate, no drift);
- "flaky" fails twice, then succeeds: retries with exponential backoff
  (backoff 0.5 s: retries at +0.5 s, then +1 s);
- "report" takes 3 s: it runs in a worker pool and delays nobody;
- "cleanup" runs every 1.5 s and is cancelled after its third run.

Each run is printed as it ends (time, task, result, attempt, when it was
due, and its lag: how late it started), then a
summary with lag percentiles. Run it with `make demo`.
"""

from __future__ import annotations

import concurrent.futures
import threading
import time

from rota import Runner, RunOutcome, Scheduler

DURATION = 10.0


def main() -> None:
    """Run the demonstration for ten seconds, then print the summary."""
    scheduler = Scheduler(clock=time.monotonic, backoff=0.5)
    t0 = time.monotonic()
    print_lock = threading.Lock()
    flaky_calls = 0
    cleanup_runs = 0

    def show(outcome: RunOutcome) -> None:
        error = f"  ({type(outcome.error).__name__}: {outcome.error})" if outcome.error else ""
        with print_lock:
            print(
                f"{time.monotonic() - t0:6.2f}s  {outcome.task_id!s:<9}  {outcome.result!s:<6}"
                f"  attempt {outcome.attempt}  due {outcome.at - t0:5.2f}s"
                f"  lag {1000 * outcome.lag:5.2f} ms{error}"
            )

    def flaky(at: float) -> None:
        nonlocal flaky_calls
        flaky_calls += 1
        if flaky_calls <= 2:
            raise ConnectionError(f"upstream unavailable (call {flaky_calls})")

    def report(at: float) -> None:
        time.sleep(3.0)

    def cleanup(at: float) -> None:
        nonlocal cleanup_runs
        cleanup_runs += 1
        if cleanup_runs == 3:
            scheduler.cancel("cleanup")  # cancelled mid-way, from inside its own run

    with concurrent.futures.ThreadPoolExecutor(max_workers=4) as pool:
        with Runner(scheduler, executor=pool, on_outcome=show) as runner:
            scheduler.schedule_at_fixed_rate("heartbeat", 0.0, 1.0, lambda at: None)
            scheduler.schedule_at_fixed_rate("metrics", 0.5, 2.5, lambda at: None)
            scheduler.schedule_once("flaky", 1.2, flaky, max_retries=3)
            scheduler.schedule_once("report", 2.0, report)
            scheduler.schedule_at_fixed_rate("cleanup", 0.7, 1.5, cleanup)
            time.sleep(DURATION)
            scheduler.cancel("heartbeat")
            scheduler.cancel("metrics")
        stats = runner.stats()

    print()
    print(f"runs: {stats.runs} (ok {stats.ok}, retry {stats.retry}, failed {stats.failed})")
    print(
        "lag:  "
        f"p50 {1000 * (stats.lag_p50 or 0):.2f} ms, "
        f"p99 {1000 * (stats.lag_p99 or 0):.2f} ms, "
        f"max {1000 * (stats.lag_max or 0):.2f} ms"
    )
    for task_id in ("heartbeat", "flaky", "report", "cleanup"):
        print(f"status({task_id!r}) = {scheduler.status(task_id)}")


if __name__ == "__main__":
    main()
