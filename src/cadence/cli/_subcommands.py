"""The command's subcommands: ``plan``, ``run``, ``status``, ``history`` and the
controls, each ``(args) -> exit status``; :class:`CliError` stops one with a status
and a message. The parser that dispatches to them is in ``cadence.cli``."""

from __future__ import annotations

import argparse
import json
import sys
import time
from collections.abc import Iterator
from datetime import datetime, tzinfo
from typing import TYPE_CHECKING, Any

from cadence.cli._jobfile import duration, instant, load, local_zone, zone
from cadence.store import StoreError, open_store

if TYPE_CHECKING:
    from cadence.durable import DurableScheduler, Entry

DEFAULT_STORE = "sqlite:///cadence.db"


class CliError(Exception):
    """Stop the command with an exit status and a message for stderr."""

    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        self.status = status


def _scheduler(url: str) -> Any:
    from cadence.durable import DurableScheduler

    try:
        return DurableScheduler(open_store(url))
    except StoreError:
        raise
    except Exception as exc:  # e.g. sqlite3.OperationalError: unable to open database file
        raise CliError(2, f"--store {url}: {exc}") from None


def _zone(name: str | None) -> tzinfo:
    return local_zone() if name is None else zone(name, "--tz")


def _time(at: float | None, tz: tzinfo) -> str:
    """A time for people: ISO 8601 in ``tz`` with its offset; milliseconds if not whole."""
    if at is None:
        return "-"
    spec = "seconds" if at == int(at) else "milliseconds"
    return datetime.fromtimestamp(at, tz).isoformat(timespec=spec)


def _when(value: str, base: float, what: str) -> float:
    """``now``, ``+DURATION`` (from ``base``) or an ISO 8601 time, as epoch seconds."""
    if value == "now":
        return time.time()
    if value.startswith("+"):
        return base + duration(value[1:], what)
    return instant(value, what, local_zone()).timestamp()


# -- plan ----------------------------------------------------------------------


def _plan_command(args: argparse.Namespace) -> int:
    from cadence.cli._plan import plan

    jobs = load(args.jobfile)
    start = _when(args.start, time.time(), "--from")
    until = _when(args.until, start, "--until")
    if until < start:
        raise CliError(2, f"--until {args.until!r} is before --from {args.start!r}")
    shown = None if args.tz is None else zone(args.tz, "--tz")
    runs, cut = plan(jobs, start, until)
    if args.json:
        print(json.dumps([
            {"job": job.id, "at": at,
             "time": datetime.fromtimestamp(at, shown or job.zone).isoformat()}
            for job, at in runs
        ]))  # fmt: skip
    else:
        for job, at in runs:
            late = "  (late: runs at once)" if at < start else ""
            print(f"{_time(at, shown or job.zone)}  {job.id}{late}")
        sys.stdout.flush()
        window = f"{_time(start, shown or local_zone())} .. {_time(until, shown or local_zone())}"
        print(f"{len(runs)} runs of {len(jobs)} jobs in {window}", file=sys.stderr)
    if cut:
        print(f"cadence: stopped after {len(runs)} runs; narrow the window", file=sys.stderr)
    return 0


# -- run -----------------------------------------------------------------------


def _run(args: argparse.Namespace) -> int:
    from cadence.cli._serve import serve

    jobs = load(args.jobfile)
    grace = duration(args.grace, "--grace")
    if args.workers < 1:
        raise CliError(2, f"--workers must be >= 1, got {args.workers}")
    sched = _scheduler(args.store)
    live = args.live == "yes" or (args.live == "auto" and sys.stderr.isatty())
    return serve(sched, jobs, workers=args.workers, grace=grace, live=live)


# -- status, history, control ---------------------------------------------------


def _status(args: argparse.Namespace) -> int:
    sched = _scheduler(args.store)
    tz = _zone(args.tz)
    entries: list[dict[str, Any]] = []
    for info, latest, unreadable in _listing(sched):
        entries.append({
            "id": info.task_id,
            "status": info.status,
            "paused": info.paused,
            "next": info.next_run_time,
            "last": latest.result if latest else None,
            "last_at": latest.at if latest else None,
            "unreadable": unreadable,
        })  # fmt: skip
    if args.json:
        print(json.dumps(entries))
        return 0
    print(f"{'ID':24} {'STATUS':10} {'NEXT RUN':30} LAST")
    for e in entries:
        status = f"{e['status']}{' (paused)' if e['paused'] else ''}"
        notes = [] if e["last"] is None else [f"{e['last']} ({_time(e['last_at'], tz)})"]
        if e["unreadable"]:
            notes.append(f"cannot be read here: {e['unreadable']}")
        last = "; ".join(notes) or "-"
        print(f"{e['id']:24} {status:10} {_time(e['next'], tz):30} {last}")
    return 0


PAGE = 10_000
"""Rows ``cadence status`` reads per query."""


def _listing(sched: DurableScheduler) -> Iterator[Entry]:
    """Every stored task with its latest outcome, by id: one query per :data:`PAGE`."""
    after = None
    while True:
        page = sched.listing(after=after, limit=PAGE)
        yield from page
        if len(page) < PAGE:
            return
        after = str(page[-1].info.task_id)


def _history(args: argparse.Namespace) -> int:
    sched = _scheduler(args.store)
    if sched.status(args.id) is None:
        raise CliError(1, f"no task {args.id!r} in {args.store}")
    if args.limit < 1:
        raise CliError(2, f"--limit must be >= 1, got {args.limit}")
    outcomes = sched.history(args.id, args.limit)
    if args.json:
        print(json.dumps([
            {"at": o.at, "result": o.result, "attempt": o.attempt, "error": o.error,
             "started": o.started, "slot": o.slot, "finished": o.finished,
             "skipped": o.skipped, "owner": o.owner, "output": o.value}
            for o in outcomes
        ]))  # fmt: skip
        return 0
    tz = _zone(args.tz)
    for o in outcomes:
        took = "" if o.started is None else f" in {o.finished - o.started:.2f}s"
        skipped = f", {o.skipped} skipped before" if o.skipped else ""
        print(f"{_time(o.at, tz)}  {o.result:6} attempt {o.attempt}{took}{skipped}")
        for text in (o.error, o.value):
            if text:
                for line in text.strip().splitlines()[-10:]:
                    print(f"    {line}")
    return 0


def _control(args: argparse.Namespace) -> int:
    sched = _scheduler(args.store)
    if sched.status(args.id) is None:
        raise CliError(1, f"no task {args.id!r} in {args.store}")
    if not getattr(sched, args.operation)(args.id):
        raise CliError(
            1, f"{args.operation} {args.id!r}: does not apply (status {sched.status(args.id)})"
        )
    print(f"{args.operation}: {args.id}", file=sys.stderr)
    return 0
