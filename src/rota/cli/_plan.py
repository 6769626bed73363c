"""``rota plan``: a dry run in virtual time through the real engine.

The jobs are scheduled on an in-memory :class:`~rota.Scheduler` whose
clock is a :class:`~rota.ManualClock` set to the window's start (as if
the file were loaded then), and the scheduler is ticked from one next run
time to the next: the runs listed are the ones the engine makes, with its
rules for fixed rates, cron and daylight saving time, misfire and late
one-off runs, and the scheduling controls (a jittered slot is listed at its
slot, with the time it starts; ``end`` and ``max_runs`` end it; a run of the
plan starts on time, so no deadline or overlap skips one). Every run is taken
to succeed (no retries).
"""

from __future__ import annotations

from rota import ManualClock, Scheduler

from ._jobfile import Job

MAX_RUNS = 100_000
"""The most runs one plan lists (a window of years over a per-second job is cut)."""


def _nothing(at: float) -> None:
    """What a planned run does: nothing."""


def plan(
    jobs: list[Job], start: float, until: float
) -> tuple[list[tuple[Job, float, float]], bool]:
    """Every run of ``jobs`` starting at or before ``until``, for a load at ``start``, in
    run order.

    Returns the runs as ``(job, at, starts)`` (``at`` the slot, ``starts`` when it
    starts: later under ``jitter``) and whether the list was cut at
    :data:`MAX_RUNS`. A run whose time passed before ``start`` (a one-off
    ``at`` in the past, the missed slots of an ``every`` with an old
    ``start``) runs at once, as it would when loaded. O(runs log jobs).
    """
    clock = ManualClock(start)
    scheduler = Scheduler(clock=clock, epoch=True)
    by_id = {job.id: job for job in jobs}
    for job in jobs:
        options = job.options()
        del options["args"], options["kwargs"], options["max_retries"], options["retry"]
        del options["overlap"]  # each planned run takes no time: none overlaps another
        scheduler.schedule(job.id, job.when, _nothing, **options)
    runs: list[tuple[Job, float, float]] = []
    while len(runs) < MAX_RUNS:
        head = scheduler.next_run_time()
        if head is None or head > until:
            return runs, False
        now = max(head, start)
        clock.set(now)
        for outcome in scheduler.tick(now):
            runs.append((by_id[str(outcome.task_id)], outcome.at, outcome.started))
    return runs[:MAX_RUNS], True
