"""``rota plan``: a dry run in virtual time through the real engine.

The jobs are scheduled on an in-memory :class:`~rota.Scheduler` whose
clock is a :class:`~rota.ManualClock` set to the window's start (as if
the file were loaded then), and the scheduler is ticked from one next run
time to the next: the runs listed are the ones the engine makes, with its
rules for fixed rates, cron and daylight saving time, misfire and late
one-off runs, and the scheduling controls (a jittered slot is listed at its
slot, with the time it starts; ``end`` and ``max_runs`` end it; a run of the
plan starts on time, so no deadline or overlap skips one). Every run is taken
to succeed (no retries). A job on a calendar lists what its calendar did: the
slots it excluded, and the slots a run was moved from (its own, or those merged
into it), as :meth:`~rota.Scheduler.upcoming` says before each run.
"""

from __future__ import annotations

from typing import Any, NamedTuple

from rota import ManualClock, RunContext, Scheduler, Upcoming
from rota.calendars import Calendared
from rota.report import decided as calendar_slots

from ._jobfile import Job


class Planned(NamedTuple):
    """One line of a plan: a run of ``job`` at ``at`` (starting at ``starts``) for
    ``slot`` (its key's time: another when its calendar moved it), with the slots
    its calendar merged into it (``merged``: ``(slot, reason)``); or, with
    ``excluded`` (the reason), a slot at ``at`` its calendar excluded, which does
    not run."""

    job: Job
    at: float
    starts: float
    slot: float | None = None
    merged: tuple[tuple[float, str], ...] = ()
    excluded: str | None = None


MAX_RUNS = 100_000
"""The most runs one plan lists (a window of years over a per-second job is cut)."""


class _Slots:
    """What a planned run does: nothing but keep its slot (its key's time)."""

    def __init__(self) -> None:
        self.slot: dict[str, float] = {}

    def __call__(self, at: float, *, run: RunContext) -> None:
        self.slot[str(run.task_id)] = run.slot


def _lines(
    job: Job, at: float, starts: float, slot: float, listed: list[Upcoming]
) -> list[Planned]:
    """A calendared job's run and what its calendar did before it."""
    lines: list[Planned] = []
    merged: list[tuple[float, str]] = []
    for u in listed:
        if u.slot >= slot:
            break
        if u.at is None and u.reason is not None:
            lines.append(Planned(job, u.slot, u.slot, excluded=u.reason))
        elif u.reason is not None:
            merged.append((u.slot, u.reason))
    return [*lines, Planned(job, at, starts, slot, tuple(merged))]


def plan(jobs: list[Job], start: float, until: float) -> tuple[list[Planned], bool]:
    """Every run of ``jobs`` starting at or before ``until``, for a load at ``start``, in
    run order.

    Returns the runs as :class:`Planned` lines (``at`` the run's time, ``starts``
    when it starts: later under ``jitter``), with the slots calendars excluded, in
    time order, and whether the list was cut at :data:`MAX_RUNS`. A run whose time
    passed before ``start`` (a one-off ``at`` in the past, the missed slots of an
    ``every`` with an old ``start``) runs at once, as it would when loaded. O(runs log jobs).
    """
    clock = ManualClock(start)
    scheduler = Scheduler(clock=clock, epoch=True)
    by_id = {job.id: job for job in jobs}
    slots = _Slots()
    calendared = [job.id for job in jobs if isinstance(job.when, Calendared)]
    for job in jobs:
        options = job.options()
        del options["args"], options["kwargs"], options["max_retries"], options["retry"]
        del options["overlap"]  # each planned run takes no time: none overlaps another
        del options["after"]  # every upstream is taken to end ok on time (shown: after_shown)
        scheduler.schedule(job.id, job.when, slots, **options)
    runs: list[Planned] = []
    while len(runs) < MAX_RUNS:
        head = scheduler.next_run_time()
        if head is None or head > until:  # and the slots excluded before the next runs
            for job_id in calendared:
                excluded = [u for u in calendar_slots(scheduler, job_id) if u.at is None]
                runs += [Planned(by_id[job_id], u.slot, u.slot, excluded=u.reason)
                         for u in excluded if u.slot <= until and u.reason]  # fmt: skip
            return _ordered(runs), False
        now = max(head, start)
        clock.set(now)
        decided: dict[str, list[Upcoming]] = {}
        for job_id in calendared:
            due = scheduler.next_run_time(job_id)
            if due is not None and due <= now:
                decided[job_id] = calendar_slots(scheduler, job_id)
        for outcome in scheduler.tick(now):
            job_id = str(outcome.task_id)
            job = by_id[job_id]
            if job_id in decided:
                slot = slots.slot[job_id]
                runs += _lines(job, outcome.at, outcome.started, slot, decided[job_id])
            else:
                runs.append(Planned(job, outcome.at, outcome.started))
    return _ordered(runs)[:MAX_RUNS], True


def _ordered(lines: list[Planned]) -> list[Planned]:
    """The lines in time order (a job's excluded slots among the other jobs' runs)."""
    return sorted(lines, key=_time)


def _time(line: Planned) -> Any:
    return line.at
