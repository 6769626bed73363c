"""The command's subcommands: ``plan``, ``run``, ``status``, ``history`` and the
controls, each ``(args) -> exit status``; :class:`CliError` stops one with a status
and a message. The parser that dispatches to them is in ``rota.cli``."""

from __future__ import annotations

import argparse
import json
import sys
import time
from collections.abc import Iterator
from datetime import UTC, datetime, tzinfo
from pathlib import Path
from typing import TYPE_CHECKING, Any

from rota._core.types import FINISHED, error_shown
from rota.calendars import Calendared
from rota.report import (
    after_shown,
    day_shown,
    decided,
    excluded_shown,
    grace,
    history_entry,
    job_zone,
    lateness,
    local_zone,
    moved_from,
    overdue,
    printable,
    ran_at,
    status_entry,
    time_shown,
    waiting_shown,
)
from rota.store import StoreError, open_store, redacted

from ._common import CliError, bind, file_tokens
from ._jobfile import load, load_file
from ._values import duration, instant, zone

if TYPE_CHECKING:
    from rota.durable import DurableScheduler, Entry

    from ._plan import Planned

DEFAULT_STORE = "sqlite:///rota.db"


def _scheduler(url: str, *, create: bool = False) -> Any:
    """The scheduler over the store ``url`` names. Only ``run`` creates a store: the
    other subcommands refuse one that does not exist (exit 2), so a typo or the wrong
    directory cannot report an empty schedule as if all were well."""
    from rota.durable import DurableScheduler

    try:
        return DurableScheduler(open_store(url, create=create))
    except StoreError as exc:
        raise CliError(2, f"--store {redacted(url)}: {exc}") from None
    except Exception as exc:  # e.g. sqlite3.OperationalError: unable to open database file
        raise CliError(2, f"--store {redacted(url)}: {exc}") from None


def _now(sched: DurableScheduler) -> float:
    """The time a listing is judged at: the store's own (PostgreSQL's), else this host's."""
    own = sched.store.now()
    return time.time() if own is None else own


def _zone(name: str | None) -> tzinfo | None:
    """``--tz``: the zone every time is shown in, or ``None`` (each job's own)."""
    return None if name is None else zone(name, "--tz")


def _when(value: str, base: float, what: str) -> float:
    """``now``, ``+DURATION`` (after ``base``), ``-DURATION`` (before ``base``) or an ISO
    8601 time, as epoch seconds."""
    if value == "now":
        return time.time()
    if value.startswith("+"):
        return base + duration(value[1:], what)
    if value.startswith("-"):
        return base - duration(value[1:], what)
    return instant(value, what, local_zone()).timestamp()


# -- plan ----------------------------------------------------------------------


def _plan_command(args: argparse.Namespace) -> int:
    from ._plan import plan

    jobs = load(args.jobfile, imports=False)  # plan runs no code of the user's
    start = _when(args.start, time.time(), "--from")
    until = _when(args.until, start, "--until")
    if until < start:
        raise CliError(2, f"--until {args.until!r} is before --from {args.start!r}")
    shown = None if args.tz is None else zone(args.tz, "--tz")
    runs, cut = plan(jobs, start, until)
    if args.json:
        print(json.dumps([_planned_json(line, shown) for line in runs]))
    else:
        for line in runs:
            job, at, starts = line.job, line.at, line.starts
            tz = shown or job.zone
            if line.excluded is not None:
                why = excluded_shown(job.when, at, line.excluded)
                print(f"{time_shown(at, tz)}  {job.id}  excluded: {why}")
                continue
            late = "  (late: runs at once)" if at < start else ""
            if job.jitter and starts > at:
                late += f"  (starts {time_shown(starts, tz)}: jitter)"
            print(f"{time_shown(at, tz)}  {job.id}{late}")
            for slot, reason in _moved(line):
                print(f"  moved from {day_shown(slot, tz)} ({reason})")
            if job.after:
                print(f"  after {after_shown(job.after)}")
        sys.stdout.flush()
        zones = {job.zone_name for job in jobs}  # the jobs' one zone, if they share it
        tz = shown or (jobs[0].zone if len(zones) == 1 else local_zone())
        window = f"{time_shown(start, tz)} .. {time_shown(until, tz)}"
        count = sum(line.excluded is None for line in runs)
        print(f"{count} runs of {len(jobs)} jobs in {window}", file=sys.stderr)
    if cut:
        print(f"rota: stopped after {len(runs)} runs; narrow the window", file=sys.stderr)
    return 0


def _moved(line: Planned) -> list[tuple[float, str]]:
    """The slots a planned run was moved from: its own (when moved), then those merged
    into it, each with what excluded it."""
    own = []
    if line.slot is not None and line.slot != line.at:
        own = [(line.slot, str(line.job.when.calendar.excluded_by(line.slot)))]  # type: ignore[attr-defined]
    return own + list(line.merged)


def _planned_json(line: Planned, shown: tzinfo | None) -> dict[str, Any]:
    """A plan's line as ``plan --json`` gives it: ``job``, ``at``, ``time``; ``starts``
    under jitter; ``moved_from`` (the slot) for a moved run, ``merged`` (the slots
    merged into it); ``after`` (``[job, within]`` each: ``within`` ``"slot"``,
    ``"window"`` or seconds) for a job that waits for others; ``excluded`` (the
    reason) for an excluded slot."""
    job = line.job
    entry: dict[str, Any] = {
        "job": job.id, "at": line.at,
        "time": datetime.fromtimestamp(line.at, shown or job.zone).isoformat(),
    }  # fmt: skip
    if line.excluded is not None:
        entry["excluded"] = line.excluded
        return entry
    if job.jitter:
        entry["starts"] = line.starts
    if line.slot is not None and line.slot != line.at:
        entry["moved_from"] = line.slot
    if line.merged:
        entry["merged"] = [slot for slot, _reason in line.merged]
    if job.after:
        entry["after"] = [upstream.to_json() for upstream in job.after]
    return entry


# -- run -----------------------------------------------------------------------


def _run(args: argparse.Namespace) -> int:
    from ._serve import serve

    listen = None if args.web is None else _listen(args.web, "--web", args.token)
    file = load_file(args.jobfile)
    grace = duration(args.grace, "--grace")
    if args.workers < 1:
        raise CliError(2, f"--workers must be >= 1, got {args.workers}")
    sched = _scheduler(args.store, create=True)
    live = args.live == "yes" or (args.live == "auto" and sys.stderr.isatty())
    owner = str(Path(args.jobfile).resolve())
    return serve(sched, file, owner=owner, workers=args.workers, grace=grace, live=live,
                 reload=lambda: load_file(args.jobfile), web=listen, token=args.token)  # fmt: skip


# -- web -----------------------------------------------------------------------


def _listen(value: str, what: str, token: str | None) -> tuple[str, int]:
    """``HOST:PORT`` to serve the dashboard on; refused (exit 2) if the web extra is
    missing, if it is not an address, or if it is not loopback and there is no token."""
    try:
        from rota.web import is_loopback, listen_address
    except ImportError as exc:
        raise CliError(2, f"{what}: the dashboard needs the web extra: "
                          f"pip install 'rota[web]' ({exc})") from None  # fmt: skip
    try:
        host, port = listen_address(value)
    except ValueError as exc:
        raise CliError(2, f"{what}: {exc}") from None
    if token is None and not is_loopback(host):
        raise CliError(2, (
            f"{what} {value}: not a loopback address, and no --token (or ROTA_TOKEN): "
            "anyone who can reach it could pause, trigger and cancel jobs; give a token, "
            "or serve on 127.0.0.1 behind your own proxy"
        ))  # fmt: skip
    return host, port


def _web(args: argparse.Namespace) -> int:
    """``rota web``: the dashboard, API and /metrics for a store, running no jobs."""
    host, port = _listen(args.listen, "--listen", args.token)
    from rota.web import asgi_app

    sched = _scheduler(args.store)
    app = asgi_app(sched, token=args.token, runs=False, tokens=file_tokens())
    server = bind(app, host, port, "--listen")
    server.run()
    return 0


# -- status, history, control ---------------------------------------------------


def _status(args: argparse.Namespace) -> int:
    from ._ops import retention_footer

    sched = _scheduler(args.store)
    listed = [e for e in _listing(sched) if args.tag is None or args.tag in e.tags]
    entries = [status_entry(entry) for entry in listed]
    for entry, e in zip(listed, entries, strict=True):  # what calendars did to next runs
        if isinstance(entry.info.schedule, Calendared) and e["next"] is not None:
            moved = moved_from(decided(sched, entry.info.task_id), e["next"])
            e["moved_from"], e["moved_why"] = moved if moved else (None, None)
    if args.json:
        print(json.dumps(entries))
        return 0
    override = _zone(args.tz)
    now = _now(sched)
    shown = []
    for e in entries:
        tz = job_zone(e["zone"], override)
        status = f"{e['status']}{' (paused)' if e['paused'] else ''}"
        shown.append(waiting_shown(e["waiting_for"], tz) if e["waiting_for"] else status)
    width = max([10, *(len(status) for status in shown)])  # a wait says what for
    print(f"{'ID':24} {'STATUS':{width}} {'NEXT RUN':52} LAST RUN")
    for entry, e, status in zip(listed, entries, shown, strict=True):
        tz = job_zone(e["zone"], override)
        why = lateness(entry.info, now)
        late = "" if why is None else f" ({why})"
        if e.get("moved_from") is not None:
            late += f" (moved from {day_shown(e['moved_from'], tz)}, {e['moved_why']})"
        notes = [] if e["last"] is None else [f"{e['last']} ({time_shown(e['last_started'], tz)})"]
        if e["unreadable"]:
            notes.append(f"cannot be read here: {e['unreadable']}")
        last = "; ".join(notes) or "-"
        print(f"{e['id']:24} {status:{width}} {time_shown(e['next'], tz) + late:52} {last}")
    print(retention_footer(sched))
    return 0


PAGE = 10_000
"""Rows ``rota status`` reads per query."""


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
        raise CliError(1, f"no task {args.id!r} in {redacted(args.store)}")
    if args.limit < 1:
        raise CliError(2, f"--limit must be >= 1, got {args.limit}")
    outcomes = sched.history(args.id, args.limit)
    if args.json:
        print(json.dumps([history_entry(o) for o in outcomes]))
        return 0
    from rota.durable import zone_of

    row = sched.store.get(args.id)
    tz = job_zone(None if row is None else zone_of(row), _zone(args.tz))
    for o in outcomes:
        took = (
            "" if o.started is None
            else f", started {time_shown(o.started, tz)}, took {o.finished - o.started:.2f}s"
        )  # fmt: skip
        skipped = f", {o.skipped} skipped before" if o.skipped else ""
        print(f"{time_shown(o.at, tz)}  {o.result:9} attempt {o.attempt}{took}{skipped}")
        for text in (error_shown(o.error), o.value):
            if text:
                for line in text.strip().splitlines()[-10:]:
                    print(f"    {line}")
    return 0


def _control(args: argparse.Namespace) -> int:
    from ._ops import control

    return control(args, _scheduler(args.store), _why_not)


def _prune(args: argparse.Namespace) -> int:
    from ._ops import prune

    if args.batch < 1:
        raise CliError(2, f"--batch must be >= 1, got {args.batch}")
    return prune(args, _scheduler(args.store))


def _audit(args: argparse.Namespace) -> int:
    from ._ops import audit

    return audit(args, _scheduler(args.store))


def _backfill(args: argparse.Namespace) -> int:
    """``rota backfill ID --from WHEN [--until WHEN]``: queue the task's slots of a
    past window in the store (a running node runs them); exit 1 for an unknown or
    finished task, 2 for a bad window or a schedule without slots."""
    sched = _scheduler(args.store)
    now = time.time()
    start = _when(args.start, now, "--from")
    until = _when(args.until, now, "--until")
    if until < start:
        raise CliError(2, f"--until {args.until!r} is before --from {args.start!r}")
    status = sched.status(args.id)
    if status is None:
        raise CliError(1, f"no task {args.id!r} in {redacted(args.store)}")
    if status in FINISHED:
        raise CliError(1, f"backfill {args.id!r}: it is finished ({status})")
    from ._ops import audited, who

    try:
        queued = sched.backfill(args.id, start, until)
    except ValueError as exc:
        raise CliError(2, f"backfill {args.id!r}: {exc}") from None
    window = " .. ".join(datetime.fromtimestamp(t, UTC).isoformat() for t in (start, until))
    audited(sched, "backfill", args.id, window, queued > 0, who())
    tz = local_zone()
    print(
        f"backfill: {args.id}: {queued} slots queued in {time_shown(start, tz)} .. "
        f"{time_shown(until, tz)} (slots already recorded or still ahead are not)",
        file=sys.stderr,
    )
    return 0


def _why_not(sched: DurableScheduler, operation: str, task_id: str) -> str:
    """What is true of a task that a control command does not apply to."""
    info = sched.info(task_id)
    status = "unknown" if info is None else str(info.status)
    if status == "cancelled" and operation == "resume":
        return (
            "it was cancelled, and a cancelled job does not resume: change its definition "
            "in its job file and reload the file (SIGHUP, or restart rota run), or "
            "schedule it again"
        )
    if status in ("done", "failed", "cancelled"):
        return f"it is finished ({status})"
    if operation == "pause":
        return "it is paused already"
    if operation == "resume":
        return "it is not paused"
    if info is not None and info.paused:  # trigger
        return "it is paused: a paused job is not triggered; resume it first"
    return f"a run of it is {status} now; trigger it once that run ended"


def _check(args: argparse.Namespace) -> int:
    """``rota check``: 0 when every job is healthy, 1 when one's last run failed or
    one is overdue (no node runs it), 2 when the store cannot be read."""
    sched = _scheduler(args.store)
    now = _now(sched)
    problems = []
    try:
        for entry in _listing(sched):
            problem = _problem(sched, entry, now)
            if problem is not None:
                problems.append({"id": str(entry.info.task_id), "problem": problem[0],
                                 "detail": problem[1]})  # fmt: skip
    except StoreError as exc:
        raise CliError(2, f"--store {redacted(args.store)}: {exc}") from None
    if args.json:
        print(json.dumps(problems))
    else:
        for p in problems:
            print(f"{printable(p['id'])}: {p['problem']}: {p['detail']}")
        if not problems:
            print("all jobs healthy", file=sys.stderr)
    return 1 if problems else 0


def _problem(sched: DurableScheduler, entry: Entry, now: float) -> tuple[str, str] | None:
    """``(problem, detail)`` for an unhealthy job, or ``None``: its last run failed for
    good, or its run is overdue past :func:`~rota.report.grace` (no node runs it)."""
    info, last, unreadable, zone_name = entry.info, entry.last, entry.unreadable, entry.zone
    tz = job_zone(zone_name)
    if last is not None and last.result == "failed":
        error = (error_shown(last.error) or "failed").splitlines()
        first = error[0] if error else ""
        return "failed", f"its run at {time_shown(ran_at(last), tz)} failed: {first}"
    status = str(info.status)
    if status in ("done", "failed", "cancelled") or info.paused:
        return None
    if unreadable:
        return "overdue", f"its stored row cannot be read here ({unreadable})"
    if status == "scheduled" and info.next_run_time is not None:
        if overdue(info, now):
            return "overdue", (
                f"its run at {time_shown(info.next_run_time, tz)} is "
                f"{now - info.next_run_time:.0f}s late: no node is running it"
            )
        return None
    row = sched.store.get(str(info.task_id))  # queued or running: is its lease alive?
    if row is not None and row.lease_until is not None:
        late = now - row.lease_until
        if late > grace(info.schedule, row.due):
            return "overdue", (
                f"its run at {time_shown(row.due, tz)} was claimed by {row.owner}, whose lease "
                f"ran out {late:.0f}s ago: no node is running it"
            )
    return None


def _import_crontab(args: argparse.Namespace) -> int:
    """``rota import-crontab FILE``: the equivalent job file, on stdout."""
    from ._crontab import convert

    sys.stdout.write(convert(args.crontab, system=args.system))
    return 0
