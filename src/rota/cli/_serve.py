"""``rota run``: load the jobs, run them until SIGTERM/SIGINT, stop within a bound.

On a terminal it shows a live view (with ``rich``, extra ``rota[cli]``):
what runs now, what runs next, the latest failures. Otherwise (systemd,
containers, pipes) it writes plain log lines: one per run.
"""

from __future__ import annotations

import concurrent.futures
import hashlib
import logging
import math
import signal
import threading
import time
from collections.abc import Callable
from datetime import datetime, tzinfo
from types import FrameType
from typing import Any

from rota import EventKind, Runner, RunOutcome, Status
from rota.durable import DurableScheduler, Entry, removed, resolve_path
from rota.report import WAITING, first_line, job_zone, printable, ran_at
from rota.store import StoreError

from . import _command
from ._alerts import Fleet
from ._common import CliError, bind, file_tokens
from ._jobfile import COMMAND, Job, JobFile, cycles
from ._notify import Notifier
from ._secrets import ScrubFormatter
from ._values import JobFileError

log = logging.getLogger("rota.cli")

DIED = 70
"""``rota run``'s exit status when its dispatcher ended by itself (``EX_SOFTWARE``):
non-zero, so ``Restart=on-failure`` and container restarts bring the node back."""


def _told(outcome: RunOutcome, notifier: Notifier, fleet: Fleet) -> None:
    """A run's outcome, for the notifications and the alerts."""
    notifier.outcome(outcome)
    fleet.outcome(outcome)


def _listen(sched: DurableScheduler, notifier: Notifier, fleet: Fleet) -> Callable[[], None]:
    """What ``rota run`` hears of its runs: each start (for the notifier's pings and the
    alerts' timing), and each run ``overlap = "replace"`` replaces (its command is
    ended). Returns the undo."""
    undo = [
        sched.add_listener(notifier.started, EventKind.RUN_STARTED),
        sched.add_listener(fleet.started, EventKind.RUN_STARTED),
        sched.add_listener(
            lambda event: _command.stop_replaced(event.task_id, event.at), EventKind.RUN_REPLACED
        ),
    ]

    def unlisten() -> None:
        for stop in undo:
            stop()

    return unlisten


def serve(
    sched: DurableScheduler,
    file: JobFile,
    *,
    owner: str,
    workers: int,
    grace: float,
    live: bool,
    reload: Callable[[], JobFile] | None = None,
    web: tuple[str, int] | None = None,
    token: str | None = None,
) -> int:
    """Declare the ``file``'s jobs as the file ``owner`` (see :func:`declare`) and run
    until a signal; its alert rules and retention rule kept (:class:`Fleet`).

    ``web``: also serve the dashboard, the API and ``/metrics`` (with this
    node's own run counters) at ``(host, port)``, actions granted by
    ``token``; bound before the jobs are declared (a port in use: exit 2).

    On SIGTERM or SIGINT: no new run is claimed; runs in flight get
    ``grace`` seconds, then their commands' process groups are terminated
    (SIGTERM, then SIGKILL). On SIGHUP: ``reload()`` reads the file again and
    its jobs are declared as at start-up, runs in flight going on; a file that
    no longer loads is logged at ERROR and the jobs run on as they were. A job
    whose stored row cannot be read (see ``rota status``) is logged and left
    as it is; the others run. Returns 0, or :data:`DIED` if the runner's
    dispatcher ended by itself (a fatal error; it is logged CRITICAL), so that a
    supervisor restarts the node. Raises ``CliError`` (exit 2) if a job of the
    file is declared by another file on the store.
    """
    stop, hangup, wake = threading.Event(), threading.Event(), threading.Event()

    def on_signal(signum: int, frame: FrameType | None) -> None:
        (hangup if signum == signal.SIGHUP else stop).set()
        wake.set()

    # First: a signal while the file is being declared is handled as any other
    signals = (signal.SIGTERM, signal.SIGINT, signal.SIGHUP)
    previous = {s: signal.signal(s, on_signal) for s in signals}
    pool = concurrent.futures.ThreadPoolExecutor(workers, thread_name_prefix="rota-job")
    notifier, fleet = Notifier(sched), Fleet(sched, web and f"http://{web[0]}:{web[1]}")
    runner = Runner(sched, executor=pool, on_outcome=lambda o: _told(o, notifier, fleet))
    watch = _Workers(sched, runner, workers)
    unlisten = _listen(sched, notifier, fleet)
    server = None
    try:
        if web is not None:
            server = _dashboard(sched, web, token)
        _load(sched, file, owner, (notifier, fleet), strict=True)
        hangup.clear()  # a reload asked for while loading: what was loaded is the file
        runner.start()
        if server is not None:
            server.start()
        view = _live(sched) if live else None
        try:
            while not stop.is_set() and runner.is_running:  # else: it ended by itself
                wake.wait(0.5)
                wake.clear()
                if hangup.is_set():
                    hangup.clear()
                    _reload(sched, owner, reload, notifier, fleet)
                _command.stop_cancelled(lambda job: _cancelled(sched, job))
                watch.look()
                if view is not None:
                    view.refresh()
        finally:
            if view is not None:
                view.close()
        ended = _stop(runner, grace)
    finally:
        for signum, handler in previous.items():
            signal.signal(signum, handler)
        pool.shutdown(wait=False, cancel_futures=True)
        unlisten()
        notifier.close()
        fleet.close()
        if server is not None:
            server.stop()
    if ended:
        log.critical("stopped: the dispatcher had ended (see above); exit status %d", DIED)
        return DIED
    log.info("stopped")
    return 0


WAIT_WARN_EVERY = 60.0
"""Seconds between two warnings that due runs wait for a worker."""


class _Workers:
    """Says, at WARNING and at most once a :data:`WAIT_WARN_EVERY`, when due runs wait
    because every worker of this node is busy (quick jobs queue behind slow ones:
    raise ``--workers``)."""

    def __init__(self, sched: DurableScheduler, runner: Runner, workers: int) -> None:
        self.sched, self.runner, self.workers = sched, runner, workers
        self.warned = -math.inf

    def look(self) -> None:
        """One look: in memory unless every worker is busy and none waits here, then
        one store read (is a run past its time unclaimed?)."""
        stats = self.runner.stats()
        wall = time.monotonic()
        if stats.running < self.workers or wall - self.warned < WAIT_WARN_EVERY:
            return
        if not stats.queued:  # none claimed ahead: is one due in the store?
            try:
                due, now = self.sched.next_run_time(), self.sched.clock()
            except Exception:  # the store is down: the runner says so
                return
            if due is None or now - due <= WAITING:
                return
        self.warned = wall
        log.warning(
            "due runs wait for a worker: all %d workers are busy, and quick jobs wait "
            "behind slow ones (raise --workers)", self.workers,
        )  # fmt: skip


def _cancelled(sched: DurableScheduler, job: str) -> bool:
    """Whether ``job``'s running command must end: its task was cancelled, not removed
    from its file (a removed job's run in flight finishes). One read."""
    row = sched.store.get(job)
    return row is not None and row.status == Status.CANCELLED and not removed(row)


def _stop(runner: Runner, grace: float) -> bool:
    """Stop ``runner``, giving runs in flight ``grace`` seconds before their commands
    are terminated. Whether it had ended by itself (its fatal error, logged when it
    ended, is what :meth:`Runner.stop` raises)."""
    log.info("stopping: no new runs; waiting up to %gs for runs in flight", grace)
    try:
        if not runner.stop(wait=True, timeout=grace):
            log.warning("runs still in flight after %gs: terminating their commands", grace)
            _command.stop_all()
            runner.stop(wait=True, timeout=_command.KILL_GRACE + 1)
    except BaseException:
        return True
    return False


def _dashboard(sched: DurableScheduler, web: tuple[str, int], token: str | None) -> Any:
    """The node's dashboard, bound (its run counters start now), not yet serving."""
    from rota.web import asgi_app

    return bind(asgi_app(sched, token=token, tokens=file_tokens()), *web, "--web")


def _conflicts(sched: DurableScheduler, jobs: list[Job], owner: str) -> dict[str, str]:
    """The jobs of the file ``owner`` that cannot be declared, each with why: their ids
    belong to another job file, or to a task scheduled through the library. A task
    with no owner and the job's action was stored by ``rota run`` before jobs had
    owners: the file adopts it."""
    found = {}
    for job in jobs:
        row = sched.store.get(job.id)
        if row is None or row.unreadable:  # unreadable: declare() logs it, leaves it alone
            continue
        other, removed = row.spec.get("owner"), bool(row.spec.get("removed"))
        if other == owner or removed:
            continue
        if other is None:
            if row.action not in (job.action, action_name(job, owner)):
                found[job.id] = (
                    f"job {job.id!r}: the store already has a task {job.id!r} scheduled "
                    "otherwise (through the library, or another action): rename the job"
                )
            continue
        found[job.id] = f"job {job.id!r} is declared by another job file, {other}: rename it"
    return found


def action_name(job: Job, owner: str) -> str:
    """The name a job's action is stored and registered under: the file's own, so that
    a node claims the runs of its file's jobs only (another file on the same store has
    other names; a node knows only the names it registered). A command job's is
    ``command@TAG``, a call job's its import path with dots, ``@TAG``; TAG is a hash
    of the file's path."""
    tag = hashlib.sha256(owner.encode()).hexdigest()[:12]
    if job.action == COMMAND:
        return f"command@{tag}"
    return f"{job.action.replace(':', '.')}@{tag}"


def _register(sched: DurableScheduler, job: Job, owner: str) -> str:
    """Register the job's action under :func:`action_name`; that name."""
    name = action_name(job, owner)
    function = _command.run_command if job.action == COMMAND else resolve_path(job.action)
    sched.register(name, function)
    return name


def declare(sched: DurableScheduler, jobs: list[Job], owner: str, *, strict: bool = False) -> None:
    """Make the store hold what the file ``owner`` declares: ``jobs`` added or updated
    (``DurableScheduler.ensure`` with the owner), the file's other jobs removed
    (``DurableScheduler.remove``: cancelled, history kept). Jobs of other files and
    of the library are not touched; a job whose id another owner holds is skipped
    (logged), or, with ``strict`` (start-up), refused: ``CliError`` (exit 2), before
    anything is written. Jobs that stay cancelled (see ``docs/cli.md``) are named
    in a WARNING. Two reads per job, one listing of the unfinished rows."""
    added = 0
    conflicts = _conflicts(sched, jobs, owner)
    if strict and conflicts:
        raise CliError(2, "; ".join(conflicts.values()))
    for problem in conflicts.values():
        log.error("%s; it is not loaded", problem)
    declared = {job.id for job in jobs}
    try:  # the file's after= with every other stored task's: no cycle
        cycles(jobs, {k: v for k, v in sched.table.edges().items() if k not in declared}, owner)
    except JobFileError as exc:
        if strict:
            raise CliError(2, str(exc)) from None
        log.error("%s; the file is not loaded", exc)
        return
    for job in jobs:
        if job.id in conflicts:
            continue
        try:
            name = _register(sched, job, owner)
            added += sched.ensure(
                job.id,
                job.when,
                name,
                owner=owner,
                zone=job.zone_name,
                tags=job.tags or None,
                **job.options(),
            )
        except StoreError as exc:  # its stored row cannot be read: the other jobs still run
            log.error("job %r not loaded, its stored row left as it is: %s", job.id, exc)
        except ValueError as exc:  # e.g. an end before its first run: the others still run
            log.error("job %r not loaded: %s", job.id, exc)
    removed = []
    for row, _ in sched.store.page(unfinished=True):  # owners are in the rows: no read each
        if (
            row.task_id not in declared
            and row.spec.get("owner") == owner
            and sched.remove(row.task_id)
        ):
            removed.append(row.task_id)
    log.info(
        "%d jobs loaded into %s (%d new or changed, %d removed%s)",
        len(jobs), sched.store, added, len(removed),
        f": {', '.join(removed)}" if removed else "",
    )  # fmt: skip
    idle = [job.id for job in jobs if job.id not in conflicts and _cancelled(sched, job.id)]
    if idle:
        log.warning(
            "%d cancelled jobs will not run until their definition in the file changes: %s",
            len(idle), ", ".join(idle),
        )  # fmt: skip


def _reload(
    sched: DurableScheduler,
    owner: str,
    reload: Callable[[], JobFile] | None,
    notifier: Notifier,
    fleet: Fleet,
) -> None:
    """SIGHUP: the file read and declared again; a file that does not load is logged at
    ERROR and changes nothing."""
    if reload is None:
        return
    log.info("SIGHUP: reloading %s", owner)
    try:
        _load(sched, reload(), owner, (notifier, fleet))
    except (JobFileError, StoreError) as exc:
        log.error("reload failed, the jobs run on as they were: %s", exc)


def _load(
    sched: DurableScheduler,
    file: JobFile,
    owner: str,
    told: tuple[Notifier, Fleet],
    *,
    strict: bool = False,
) -> None:
    """The file's jobs declared (:func:`declare`), then its notifications and its rules
    for operating the fleet given to those who keep them."""
    declare(sched, file.jobs, owner, strict=strict)
    told[0].update(file.jobs)
    told[1].update(file)


ROWS = 30
"""Jobs the live view draws at most (the first to run next, those running first): its
cost per refresh is bounded whatever the store holds."""
REFRESH = 1.0
"""Seconds between two refreshes of the live view."""


class _View:
    """The live view: a table redrawn in place, at most every :data:`REFRESH` seconds,
    of at most :data:`ROWS` jobs, by the main thread (never the runs' threads)."""

    def __init__(self, sched: DurableScheduler, live: Any, table: Any) -> None:
        self._sched, self._live, self._table = sched, live, table
        self._drawn = -REFRESH

    def refresh(self) -> None:
        now = time.monotonic()
        if now - self._drawn >= REFRESH:
            self._drawn = now
            self._live.update(self._render(), refresh=True)

    def close(self) -> None:
        """Draw the table a last time (what the node ran until it stopped), then stop."""
        try:
            self._live.update(self._render(), refresh=True)
        finally:
            self._live.stop()

    def _render(self) -> Any:
        entries = self._sched.listing(unfinished=True)
        table = self._table(title=f"rota — {self._sched.store} — {len(entries)} jobs", expand=True)
        for name in ("job", "status", "next run", "last run", "result"):
            table.add_column(name)

        def order(entry: Entry) -> tuple[int, float]:
            info = entry.info
            running = str(info.status) in ("running", "queued")
            nxt = info.next_run_time
            return (0 if running else 1, float("inf") if nxt is None else nxt)

        for entry in sorted(entries, key=order)[:ROWS]:
            info, last, unreadable, zone_name = (
                entry.info,
                entry.last,
                entry.unreadable,
                entry.zone,
            )
            tz = job_zone(zone_name)
            nxt = info.next_run_time
            result = last.result if last else "-"
            if unreadable:
                result += " (its stored row cannot be read here)"
            table.add_row(
                printable(str(info.task_id)),
                info.status + (" (paused)" if info.paused else ""),
                "-" if nxt is None else _clock_time(nxt, tz),
                "-" if not last else _clock_time(ran_at(last), tz),
                result,
            )
        failed = [e for e in entries if e.last is not None and e.last.result == "failed"]
        failed.sort(key=lambda e: e.last.finished if e.last else 0, reverse=True)
        if failed:  # the newest first, each with its error's first line
            shown = [
                (
                    printable(str(e.info.task_id)),
                    first_line(e.last.error if e.last else None, "failed"),
                )
                for e in failed[:3]
            ]
            table.caption = "latest failures: " + "; ".join(f"{i}: {error}" for i, error in shown)
        return table


def _clock_time(at: float, tz: tzinfo) -> str:
    """A time of day for the live view, in the job's zone with its offset."""
    return datetime.fromtimestamp(at, tz).strftime("%H:%M:%S%z")


class _QuietRuns(logging.Filter):
    """Under the live view, a run that went well is in the table: only retries and
    failures are also printed (a line per run, or per line of a command's output,
    would redraw the view each time)."""

    def filter(self, record: logging.LogRecord) -> bool:
        if record.name == "rota.output":  # the commands' output: in rota history
            return False
        return record.name != "rota.runs" or record.levelno >= logging.WARNING


def _live(sched: DurableScheduler) -> _View | None:
    """The live view if ``rich`` is installed; else ``None`` (plain log lines)."""
    try:
        from rich.console import Console
        from rich.live import Live
        from rich.logging import RichHandler
        from rich.table import Table
    except ImportError:
        log.info("no live view: pip install 'rota[cli]' for one; logging runs instead")
        return None
    console = Console(stderr=True)
    root = logging.getLogger()
    handler = RichHandler(console=console, show_path=False)
    handler.setFormatter(ScrubFormatter("%(message)s"))
    handler.addFilter(_QuietRuns())
    root.handlers[:] = [handler]
    live = Live(console=console, auto_refresh=False, transient=False)
    live.start()
    view = _View(sched, live, Table)
    view.refresh()
    return view
