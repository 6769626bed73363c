"""The ``cadence`` command: job files, run, plan, status, history and control.

``cadence run jobs.toml`` loads a job file into a store (SQLite by default)
and runs due jobs until SIGTERM/SIGINT; ``cadence plan jobs.toml`` shows
every run the file would make in a window, in virtual time through the real
engine; ``status``, ``history``, ``pause``, ``resume``, ``cancel`` and
``trigger`` work on a store that running nodes share. ``docs/cli.md``
documents each; the pinned part (keys, URLs, exit statuses, JSON shapes) is
``../shared/spec/cli.md``.

Exit statuses: 0 success; 1 an unknown id or a change that does not apply;
2 bad input (a job file, a store URL, an argument), before anything runs or
is stored.
"""

from __future__ import annotations

import argparse
import json
import logging
import sys
import time
from collections.abc import Iterator, Sequence
from datetime import UTC, datetime, tzinfo
from typing import TYPE_CHECKING, Any

from cadence.cli._jobfile import JobFileError, duration, instant, load, local_zone, zone
from cadence.store import StoreError, open_store

if TYPE_CHECKING:
    from cadence.durable import DurableScheduler, Entry

DEFAULT_STORE = "sqlite:///cadence.db"


class CliError(Exception):
    """Stop the command with an exit status and a message for stderr."""

    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        self.status = status


def main(argv: Sequence[str] | None = None) -> int:
    """Run the ``cadence`` command with ``argv`` (default: ``sys.argv[1:]``); its exit status."""
    parser = _parser()
    args = parser.parse_args(argv)
    _logging(args.log_level, args.log_format)
    try:
        status: int = args.run(args)
    except (CliError, JobFileError, StoreError) as exc:
        status = exc.status if isinstance(exc, CliError) else 2
        print(f"cadence: {exc}", file=sys.stderr)
    except BrokenPipeError:  # `cadence plan jobs.toml | head`: the reader left
        sys.stderr.close()
        status = 0
    return status


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="cadence",
        description="Cron that retries, catches up after downtime, never runs a job twice "
        "across processes, and says what it did.",
    )
    parser.add_argument("--log-level", default="INFO", help="DEBUG, INFO, WARNING, ERROR")
    parser.add_argument("--log-format", choices=["text", "json"], default="text")
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")

    def store_arg(p: argparse.ArgumentParser) -> None:
        p.add_argument("--store", default=DEFAULT_STORE, metavar="URL",
                       help=f"sqlite:///path.db, sqlite:////abs/path.db or memory: "
                            f"(default {DEFAULT_STORE})")  # fmt: skip

    run = sub.add_parser("run", help="load a job file into the store and run due jobs")
    run.add_argument("jobfile")
    store_arg(run)
    run.add_argument("--workers", type=int, default=4, help="runs at once (default 4)")
    run.add_argument("--grace", default="30s", help="wait for runs in flight on stop (30s)")
    run.add_argument("--live", choices=["auto", "yes", "no"], default="auto",
                     help="a live view on a terminal (auto: when stderr is one)")  # fmt: skip
    run.set_defaults(run=_run)

    plan = sub.add_parser("plan", help="every run a job file would make in a window (dry run)")
    plan.add_argument("jobfile")
    plan.add_argument("--from", dest="start", default="now", metavar="WHEN")
    plan.add_argument("--until", default="+24h", metavar="WHEN")
    plan.add_argument("--json", action="store_true")
    plan.add_argument("--tz", help="show times in this zone (default: each job's)")
    plan.set_defaults(run=_plan_command)

    status = sub.add_parser("status", help="every task in the store")
    store_arg(status)
    status.add_argument("--json", action="store_true")
    status.add_argument("--tz", help="show times in this zone (default: local)")
    status.set_defaults(run=_status)

    history = sub.add_parser("history", help="a task's recent runs, newest first")
    history.add_argument("id")
    store_arg(history)
    history.add_argument("--json", action="store_true")
    history.add_argument("--limit", type=int, default=20)
    history.add_argument("--tz", help="show times in this zone (default: local)")
    history.set_defaults(run=_history)

    for name, text in [
        ("pause", "keep a task from running until resumed"),
        ("resume", "let a paused task run again"),
        ("cancel", "cancel a task (a run in flight finishes)"),
        ("trigger", "run a task once now, outside its schedule"),
    ]:
        control = sub.add_parser(name, help=text)
        control.add_argument("id")
        store_arg(control)
        control.set_defaults(run=_control, operation=name)
    return parser


# -- helpers -------------------------------------------------------------------


def _logging(level: str, form: str) -> None:
    handler = logging.StreamHandler(sys.stderr)
    if form == "json":
        handler.setFormatter(_JsonFormatter())
    else:
        handler.setFormatter(logging.Formatter("%(asctime)s %(levelname)s %(name)s: %(message)s"))
    root = logging.getLogger()
    root.handlers[:] = [handler]
    try:
        root.setLevel(level.upper())
    except ValueError:
        raise CliError(2, f"--log-level: unknown level {level!r}") from None


class _JsonFormatter(logging.Formatter):
    """One JSON object per line, for log shippers."""

    def format(self, record: logging.LogRecord) -> str:
        entry = {
            "time": datetime.fromtimestamp(record.created, UTC).isoformat(),
            "level": record.levelname,
            "logger": record.name,
            "message": record.getMessage(),
        }
        if record.exc_info:
            entry["error"] = self.formatException(record.exc_info)
        return json.dumps(entry)


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
