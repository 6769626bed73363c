"""The command's subcommands for operating a fleet: the controls by id or by tag, each
stored in the audit log; ``rota prune``; ``rota audit`` (``docs/operations.md``)."""

from __future__ import annotations

import argparse
import getpass
import json
import socket
import sys
import time
from typing import TYPE_CHECKING, Any

from rota.report import audit_entry, local_zone, printable, time_shown
from rota.store import AuditRow, redacted

from ._common import CliError
from ._fleet import Retention

if TYPE_CHECKING:
    from rota.durable import DurableScheduler


def who() -> str:
    """Who acts from the command: ``cli:<user>@<host>``."""
    try:
        user = getpass.getuser()
    except Exception:  # no user name for this uid (a container): its number
        import os

        user = str(os.getuid())
    return f"cli:{user}@{socket.gethostname()}"


def audited(
    sched: DurableScheduler, action: str, job: str | None, note: str | None, applied: bool, by: str
) -> None:
    """Store one control action in the audit log (a failure to is logged, not raised:
    the action itself is done)."""
    import logging

    try:
        sched.store.ledger.audit(AuditRow(time.time(), by, action, job, note, applied))
    except Exception as exc:
        logging.getLogger("rota.audit").error(
            "%s %r by %s not stored in the audit log: %s", action, job, by, redacted(str(exc))
        )


def control(args: argparse.Namespace, sched: Any, why_not: Any) -> int:
    """``rota pause|resume|cancel|trigger ID`` or ``--tag TAG`` (every unfinished job
    with it, one line each); ``--note``. Each action is stored in the audit log.
    Exit 1 if one did not apply (or no job has the tag), 2 for ID and --tag both or
    neither."""
    if (args.id is None) == (args.tag is None):
        raise CliError(2, f"{args.operation}: give a job ID or --tag TAG (one of them)")
    by = who()
    if args.id is not None:
        if sched.status(args.id) is None:
            raise CliError(1, f"no task {args.id!r} in {redacted(args.store)}")
        jobs = [args.id]
    else:
        jobs = sched.store.tagged(args.tag)  # one read of the index of tags
        if not jobs:
            raise CliError(1, f"no unfinished job has the tag {args.tag!r}")
    failed = []
    for job in jobs:
        applied = bool(getattr(sched, args.operation)(job))
        audited(sched, args.operation, job, args.note, applied, by)
        if applied:
            print(f"{args.operation}: {job}", file=sys.stderr if args.id else sys.stdout)
        else:
            failed.append(f"{args.operation} {job!r}: {why_not(sched, args.operation, job)}")
            if args.tag is not None:
                print(
                    f"{args.operation}: {job}: not applied: {why_not(sched, args.operation, job)}"
                )
    if failed and args.id is not None:
        raise CliError(1, failed[0])
    return 1 if failed else 0


def prune(args: argparse.Namespace, sched: Any) -> int:
    """``rota prune``: the retention rule (the store's, as a node published it, or
    ``--keep``/``--keep-runs``) applied once, in batches. Exit 2 with no rule."""
    from ._values import duration

    stored = Retention.from_json(sched.store.ledger.setting("retention")) or Retention()
    keep = duration(args.keep, "--keep") if args.keep else stored.keep
    runs = args.keep_runs if args.keep_runs is not None else stored.keep_runs
    if args.keep_runs is not None and args.keep_runs < 0:
        raise CliError(2, f"--keep-runs must be >= 0, got {args.keep_runs}")
    if keep is None and runs is None:
        print("no retention rule (in the store or as --keep/--keep-runs): everything is kept",
              file=sys.stderr)  # fmt: skip
        return 0
    rule = Retention(keep, runs)
    started = time.monotonic()
    gone = sched.prune(None if keep is None else time.time() - keep, batch=args.batch,
                       keep_runs=runs)  # fmt: skip
    print(f"pruned {gone} rows ({rule}) in {time.monotonic() - started:.2f}s")
    return 0


def retention_footer(sched: Any) -> str:
    """``rota status``'s last line: the retention rule, or that everything is kept."""
    rule = Retention.from_json(sched.store.ledger.setting("retention"))
    if rule is None or (rule.keep is None and rule.keep_runs is None):
        return "retention: no rule set: keep everything"
    return f"retention: {rule}"


def audit(args: argparse.Namespace, sched: Any) -> int:
    """``rota audit [--job ID] [--json] [--limit N]``: the latest control actions,
    newest first."""
    if args.limit < 1:
        raise CliError(2, f"--limit must be >= 1, got {args.limit}")
    rows = sched.store.ledger.audits(args.job, args.limit)
    if args.json:
        print(json.dumps([audit_entry(r) for r in rows]))
        return 0
    tz = local_zone()
    for r in rows:
        note = f"  note: {printable(r.note)}" if r.note else ""
        done = "" if r.applied else "  (not applied)"
        print(f"{time_shown(r.at, tz)}  {printable(r.who):28} {r.action:9} "
              f"{printable(r.job or '-')}{done}{note}")  # fmt: skip
    if not rows:
        print("no control action recorded", file=sys.stderr)
    return 0
