"""Calendars: what deciding a task's next run costs with a business calendar, against
the same task without one, measured in the same run.

Workloads (each a ratio to the task without a calendar, ``x none``):

- ``next run, daily 09:00``: a cron task's cursor asked for its next run, 730 times
  (two years), with no calendar, and with a calendar of weekends and 0, 10 or 1,000
  holidays (ten a year: a calendar of a century), skipping excluded slots
  (``skip``) or moving them to the next business day (``next``).
- ``tick: a run and its next``: the same through the scheduler, a
  ``Scheduler.tick`` per run (the run, its record, its next decision), a minutely
  task for 10,080 runs (a week), with no calendar and with a calendar of weekends and
  10 holidays.
- ``across a 14-day freeze``: the one decision of a minutely task's next run over a
  14-day excluded period (20,160 slots counted, not visited), against one decision
  of the task without a calendar; its count checked.

Usage: ``python bench/calendars.py`` (about 20 seconds); writes
``bench/results/calendars.md`` and ``calendars.json``.
"""

from __future__ import annotations

from datetime import date, datetime, timedelta
from zoneinfo import ZoneInfo

from harness import Figure, Run, interleave, save, table, timed

from rota import FixedRate, ManualClock, Scheduler
from rota.calendars import Calendar, Calendared, Window
from rota.cron import Cron

TZ = "America/New_York"
START = datetime(2027, 1, 1, tzinfo=ZoneInfo(TZ)).timestamp()
DAYS = 730


def holidays(count: int) -> list[date]:
    """``count`` dates: ten a year from 2027 on, as a holidays calendar has them (1,000
    reach a century ahead; the ones the runs meet are the same 20 for 10 and 1,000)."""
    first = date(2027, 1, 1)
    return [first + timedelta(days=36 * k + 5) for k in range(count)]


def deciding(schedule: object, decisions: int) -> Run:
    """``decisions`` next runs of a cursor started at :data:`START`."""
    cursor = schedule.start(START)  # type: ignore[attr-defined]

    def body() -> int:
        for _ in range(decisions):
            cursor.next(0)
        return decisions

    return lambda: timed(body)


def ticking(calendar: Calendar | None, runs: int) -> Run:
    """``runs`` runs of a minutely task through ``Scheduler.tick``, one tick each."""
    clock = ManualClock(START)
    sched = Scheduler(clock=clock, epoch=True)
    sched.schedule("m", FixedRate(60, start=START + 60), lambda at: None, calendar=calendar)

    def body() -> int:
        done = 0
        while done < runs:
            at = sched.next_run_time("m")
            assert at is not None
            done += len(sched.tick(at))
        return done

    return lambda: timed(body)


def crossing(calendar: Calendar | None) -> Run:
    """The one decision after the last slot before a 14-day freeze."""
    schedule = FixedRate(60, start=START)
    if calendar is not None:
        schedule = Calendared(schedule, calendar)  # type: ignore[assignment]
    cursor = schedule.start(START - 1)
    last = START + 13 * 86400 - 60  # the last slot before the freeze
    while cursor.next(0) < last:  # type: ignore[operator]
        pass

    def body() -> int:
        cursor.next(0)
        return 1

    return lambda: timed(body)


def main() -> None:
    daily = Cron("0 9 * * *", tz=TZ)
    figures: list[Figure] = []
    for mode in ("skip", "next"):
        peers = {"none": lambda: deciding(daily, DAYS)}
        for count in (0, 10, 1000):
            calendar = Calendar("c", tz=TZ, holidays=holidays(count))
            peers[f"{count} holidays"] = (
                lambda c=calendar, m=mode: deciding(Calendared(daily, c, m), DAYS)  # type: ignore[misc]
            )
        figures += interleave(f"next run, daily 09:00 ({mode})", DAYS, peers)
    week = Calendar("c", tz=TZ, holidays=holidays(10))
    figures += interleave(
        "tick: a run and its next (minutely)",
        7 * 1440,
        {"none": lambda: ticking(None, 7 * 1440), "10 holidays": lambda: ticking(week, 7 * 1440)},
    )
    opens = datetime(2027, 1, 14, tzinfo=ZoneInfo(TZ))
    freeze = Calendar(
        "freeze", tz=TZ, weekends=(), exclude=[Window(opens, opens + timedelta(days=14))]
    )
    figures += interleave(
        "across a 14-day freeze (minutely)",
        1,
        {"none": lambda: crossing(None), "freeze": lambda: crossing(freeze)},
    )
    counted = Calendared(FixedRate(60, start=START), freeze).start(START - 1)
    last = START + 13 * 86400 - 60
    while counted.next(0) < last:  # type: ignore[operator]
        pass
    counted.take_excluded()
    after = counted.next(0)
    skipped = counted.take_excluded()
    assert skipped == 20_160, skipped
    assert after == opens.timestamp() + 14 * 86400, after
    markdown = (
        table(figures, ["none"])
        + f"\n\nThe freeze's one decision counted {skipped:,} slots skipped"
        " (`skipped_by['calendar']`), and its run is at the freeze's end.\n"
    )
    save(
        "calendars", "python bench/calendars.py", figures,
        {"freeze_skipped": skipped}, markdown,
    )  # fmt: skip
    print(markdown)


if __name__ == "__main__":
    main()
