"""The ``rota`` command: job files, run, plan, status, history and control.

``rota run jobs.toml`` loads a job file into a store (SQLite by default)
and runs due jobs until SIGTERM/SIGINT; ``rota plan jobs.toml`` shows
every run the file would make in a window, in virtual time through the real
engine; ``status``, ``history``, ``pause``, ``resume``, ``cancel``,
``trigger`` and ``backfill`` work on a store that running nodes share. ``docs/cli.md``
documents each; the pinned part (keys, URLs, exit statuses, JSON shapes) is
``../shared/spec/cli.md``. This module is the parser and the entry point;
the subcommands are in ``_subcommands``, the job file in ``_jobfile``, ``run``'s
loop in ``_serve``, a command job's process in ``_command``.

Exit statuses: 0 success; 1 an unknown id or a change that does not apply;
2 bad input (a job file, a store URL, an argument), before anything runs or
is stored.
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import sys
from collections.abc import Callable, Sequence
from datetime import UTC, datetime
from typing import Any

from rota import __version__
from rota.store import StoreError

from ._common import CliError
from ._secrets import ScrubFormatter, hide, scrub
from ._subcommands import (
    DEFAULT_STORE,
    _audit,
    _backfill,
    _check,
    _control,
    _history,
    _import_crontab,
    _plan_command,
    _prune,
    _run,
    _status,
    _web,
)
from ._values import JobFileError

WORKERS = 32
"""``rota run``'s default ``--workers``: a command job's worker thread mostly waits on
its process, so many cost little; with 4, five slow jobs held quick ones back."""


def main(argv: Sequence[str] | None = None) -> int:
    """Run the ``rota`` command with ``argv`` (default: ``sys.argv[1:]``); its exit status."""
    parser = _parser()
    args = parser.parse_args(argv)
    if getattr(args, "store", None):
        hide(args.store)  # before anything can print it
    if getattr(args, "token", None):
        hide(args.token, whole=True)
    _logging(args.log_level, args.log_format)
    try:
        status: int = args.run(args)
    except (CliError, JobFileError, StoreError) as exc:
        status = exc.status if isinstance(exc, CliError) else 2
        print(f"rota: {scrub(str(exc))}", file=sys.stderr)
    except BrokenPipeError:  # `rota plan jobs.toml | head`: the reader left
        sys.stderr.close()
        status = 0
    return status


def _crontab_parser(sub: Any) -> None:
    crontab = sub.add_parser("import-crontab", help="print the job file equivalent to a crontab")
    crontab.add_argument("crontab")
    crontab.add_argument("--system", action="store_true",
                         help="a system crontab (/etc/crontab, /etc/cron.d): a user field "
                         "before each command")  # fmt: skip
    crontab.set_defaults(run=_import_crontab)


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="rota",
        description="Cron that retries, catches up after downtime, never runs a job twice "
        "across processes, and says what it did.",
    )
    parser.add_argument("--version", action="version", version=f"rota {__version__}")
    parser.add_argument("--log-level", default="INFO", type=_level, metavar="LEVEL",
                        help="DEBUG, INFO, WARNING or ERROR (default INFO)")  # fmt: skip
    parser.add_argument("--log-format", choices=["text", "json"], default="text")
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")

    def store_arg(p: argparse.ArgumentParser) -> None:
        p.add_argument("--store", default=DEFAULT_STORE, metavar="URL",
                       help=f"sqlite:///path.db, sqlite:////abs/path.db, "
                            f"postgresql://user@host:port/db or memory: "
                            f"(default {DEFAULT_STORE})")  # fmt: skip

    def token_arg(p: argparse.ArgumentParser) -> None:
        p.add_argument("--token", default=os.environ.get("ROTA_TOKEN") or None,
                       help="the token that grants actions on the dashboard and the API "
                            "(default: $ROTA_TOKEN; needed off loopback)")  # fmt: skip

    run = sub.add_parser("run", help="load a job file into the store and run due jobs")
    run.add_argument("jobfile")
    store_arg(run)
    run.add_argument("--workers", type=int, default=WORKERS,
                     help=f"runs at once (default {WORKERS}: commands mostly wait)")  # fmt: skip
    run.add_argument("--grace", default="30s", help="wait for runs in flight on stop (30s)")
    run.add_argument("--live", choices=["auto", "yes", "no"], default="auto",
                     help="a live view on a terminal (auto: when stderr is one)")  # fmt: skip
    run.add_argument("--web", metavar="HOST:PORT",
                     help="also serve the dashboard, the API and /metrics there")  # fmt: skip
    token_arg(run)
    run.set_defaults(run=_run)

    web = sub.add_parser("web", help="serve the dashboard, the API and /metrics for a store")
    store_arg(web)
    web.add_argument("--listen", default="127.0.0.1:8787", metavar="HOST:PORT",
                     help="where (default 127.0.0.1:8787; port 0: a free one)")  # fmt: skip
    token_arg(web)
    web.set_defaults(run=_web)

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
    status.add_argument("--tag", help="only the jobs with this tag")
    status.set_defaults(run=_status)

    history = sub.add_parser("history", help="a task's recent runs, newest first")
    history.add_argument("id")
    store_arg(history)
    history.add_argument("--json", action="store_true")
    history.add_argument("--limit", type=int, default=20)
    history.add_argument("--tz", help="show times in this zone (default: local)")
    history.set_defaults(run=_history)

    _crontab_parser(sub)

    check = sub.add_parser(
        "check", help="exit 0 if every job is healthy, 1 if one failed or is overdue"
    )
    store_arg(check)
    check.add_argument("--json", action="store_true")
    check.set_defaults(run=_check)

    _controls(sub, store_arg)
    _fleet_parsers(sub, store_arg)
    return parser


def _fleet_parsers(sub: Any, store_arg: Callable[[argparse.ArgumentParser], None]) -> None:
    """``prune`` and ``audit``."""
    prune = sub.add_parser("prune", help="apply the retention rule once, now")
    store_arg(prune)
    prune.add_argument(
        "--keep",
        metavar="DURATION",
        help="delete outcomes older than this (default: the stored rule's)",
    )
    prune.add_argument(
        "--keep-runs",
        type=int,
        metavar="N",
        help="keep at most N runs per job (default: the stored rule's)",
    )
    prune.add_argument("--batch", type=int, default=1000, help="rows per transaction (1000)")
    prune.set_defaults(run=_prune)
    audit = sub.add_parser("audit", help="who did what: the control actions, newest first")
    store_arg(audit)
    audit.add_argument("--job", metavar="ID", help="only the actions on this job")
    audit.add_argument("--json", action="store_true")
    audit.add_argument("--limit", type=int, default=100)
    audit.set_defaults(run=_audit)


def _controls(sub: Any, store_arg: Callable[[argparse.ArgumentParser], None]) -> None:
    """``pause``, ``resume``, ``cancel``, ``trigger``: one parser each, one handler;
    and ``backfill``."""
    for name, text in [
        ("pause", "keep a task from running until resumed"),
        ("resume", "let a paused task run again"),
        ("cancel", "cancel a task (a run in flight finishes)"),
        ("trigger", "run a task once now, outside its schedule"),
    ]:
        control = sub.add_parser(name, help=text)
        control.add_argument("id", nargs="?", help="the job (or give --tag)")
        control.add_argument("--tag", help="every unfinished job with this tag, one line each")
        control.add_argument("--note", help="why: kept in the audit log")
        store_arg(control)
        control.set_defaults(run=_control, operation=name)
    backfill = sub.add_parser(
        "backfill", help="run each slot of a task's schedule in a past window once"
    )
    backfill.add_argument("id")
    backfill.add_argument(
        "--from",
        dest="start",
        required=True,
        metavar="WHEN",
        help="ISO 8601, or -DURATION before now (write --from=-3h): the window's start",
    )
    backfill.add_argument("--until", default="now", metavar="WHEN",
                          help="its end, excluded (default: now)")  # fmt: skip
    store_arg(backfill)
    backfill.set_defaults(run=_backfill)


# -- helpers -------------------------------------------------------------------


LEVELS = ("DEBUG", "INFO", "WARNING", "ERROR")


def _level(value: str) -> str:
    """``--log-level``'s value, any case; a usage error (exit 2) for another."""
    if value.upper() not in LEVELS:
        raise argparse.ArgumentTypeError(f"{value!r} is not one of {', '.join(LEVELS)}")
    return value.upper()


def _logging(level: str, form: str) -> None:
    handler = logging.StreamHandler(sys.stderr)
    if form == "json":
        handler.setFormatter(_JsonFormatter())
    else:
        handler.setFormatter(ScrubFormatter("%(asctime)s %(levelname)s %(name)s: %(message)s"))
    root = logging.getLogger()
    root.handlers[:] = [handler]
    root.setLevel(level)


RUN_FIELDS = (
    "job", "at", "attempt", "result", "duration", "lag", "jitter", "error", "node", "line"
)  # fmt: skip
"""The fields a run's log record carries (``rota.runs``; ``line``: a line of a
command's output), shipped as keys of its JSON object."""


class _JsonFormatter(ScrubFormatter):
    """One JSON object per line, for log shippers: time, level, logger, message, and
    a run's facts (:data:`RUN_FIELDS`) on the records that have them."""

    def format(self, record: logging.LogRecord) -> str:
        entry = {
            "time": datetime.fromtimestamp(record.created, UTC).isoformat(),
            "level": record.levelname,
            "logger": record.name,
            "message": record.getMessage(),
        }
        for name in RUN_FIELDS:  # a run's facts, from the runner's records
            if hasattr(record, name):
                entry[name] = getattr(record, name)
        if record.exc_info and (trace := self.formatException(record.exc_info)):
            entry["traceback"] = trace
        return scrub(json.dumps(entry))
