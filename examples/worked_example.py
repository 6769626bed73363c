"""The contract's worked example, driven by a ManualClock and printed as a table.

`once` (one-off, one retry) fails on its first run and succeeds on its second;
`rate` (every 10, no retries) always fails. Both are first due at 0. One
`tick(10)` runs all four runs, in (time, seq) order.

Run it with `make demo`.
"""

from __future__ import annotations

from rota import ManualClock, RunOutcome, Scheduler


def table(outcomes: list[RunOutcome]) -> str:
    """Format outcomes as an aligned text table."""
    rows = [("task", "at", "result", "attempt", "error")]
    rows += [
        (str(o.task_id), str(o.at), o.result, str(o.attempt), repr(o.error) if o.error else "")
        for o in outcomes
    ]
    widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]))]
    lines = ["  ".join(cell.ljust(w) for cell, w in zip(row, widths, strict=True)) for row in rows]
    lines.insert(1, "  ".join("-" * w for w in widths))
    return "\n".join(line.rstrip() for line in lines)


def main() -> None:
    """Schedule the two tasks, tick to 10, and print the runs and statuses."""
    clock = ManualClock(0)
    scheduler = Scheduler(clock=clock, backoff=1)
    calls = 0

    def once(at: int) -> None:
        nonlocal calls
        calls += 1
        if calls == 1:
            raise ConnectionError("flaky dependency")

    def rate(at: int) -> None:
        raise RuntimeError(f"always fails (slot {at})")

    scheduler.schedule_once("once", 0, once, max_retries=1)
    scheduler.schedule_at_fixed_rate("rate", 0, 10, rate)

    clock.set(10)
    print("tick(10) ran:\n")
    print(table(scheduler.tick(10)))
    print()
    for task_id in ("once", "rate"):
        print(f"status({task_id!r}) = {scheduler.status(task_id)}")
    print(f"next_run_time() = {scheduler.next_run_time()}")


if __name__ == "__main__":
    main()
