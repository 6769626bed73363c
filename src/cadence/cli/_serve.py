"""``cadence run``: load the jobs, run them until SIGTERM/SIGINT, stop within a bound.

On a terminal it shows a live view (with ``rich``, extra ``cadence[cli]``):
what runs now, what runs next, the latest failures. Otherwise (systemd,
containers, pipes) it writes plain log lines: one per run.
"""

from __future__ import annotations

import concurrent.futures
import logging
import signal
import threading
from datetime import datetime
from types import FrameType
from typing import Any

from cadence import Runner
from cadence.cli import _command
from cadence.cli._jobfile import Job, local_zone
from cadence.durable import DurableScheduler
from cadence.store import StoreError

log = logging.getLogger("cadence.cli")


def serve(
    sched: DurableScheduler, jobs: list[Job], *, workers: int, grace: float, live: bool
) -> int:
    """Declare ``jobs`` (idempotently: see ``DurableScheduler.ensure``) and run until a signal.

    On SIGTERM or SIGINT: no new run is claimed; runs in flight get
    ``grace`` seconds, then their commands' process groups are terminated
    (SIGTERM, then SIGKILL). A job whose stored row cannot be read (see
    ``cadence status``) is logged and left as it is; the others run. Returns 0.
    """
    added = 0
    for job in jobs:
        try:
            added += sched.ensure(job.id, job.when, job.action, **job.options())
        except StoreError as exc:  # its stored row cannot be read: the other jobs still run
            log.error("job %r not loaded, its stored row left as it is: %s", job.id, exc)
    log.info("%d jobs loaded into %s (%d new or changed)", len(jobs), sched.store, added)
    stop = threading.Event()

    def on_signal(signum: int, frame: FrameType | None) -> None:
        stop.set()

    previous = {s: signal.signal(s, on_signal) for s in (signal.SIGTERM, signal.SIGINT)}
    pool = concurrent.futures.ThreadPoolExecutor(workers, thread_name_prefix="cadence-job")
    runner = Runner(sched, executor=pool)
    try:
        runner.start()
        view = _live(sched) if live else None
        try:
            while not stop.wait(0.5):
                if view is not None:
                    view.refresh()
        finally:
            if view is not None:
                view.close()
        log.info("stopping: no new runs; waiting up to %gs for runs in flight", grace)
        if not runner.stop(wait=True, timeout=grace):
            log.warning("runs still in flight after %gs: terminating their commands", grace)
            _command.stop_all()
            runner.stop(wait=True, timeout=_command.KILL_GRACE + 1)
    finally:
        for signum, handler in previous.items():
            signal.signal(signum, handler)
        pool.shutdown(wait=False, cancel_futures=True)
    log.info("stopped")
    return 0


class _View:
    """The live view: a table redrawn in place."""

    def __init__(self, sched: DurableScheduler, live: Any, table: Any) -> None:
        self._sched, self._live, self._table = sched, live, table

    def refresh(self) -> None:
        self._live.update(self._render())

    def close(self) -> None:
        self._live.stop()

    def _render(self) -> Any:
        tz = local_zone()
        table = self._table(title=f"cadence — {self._sched.store}", expand=True)
        for name in ("job", "status", "next run", "last run", "result"):
            table.add_column(name)
        failures = []
        for info, last, unreadable in self._sched.listing():
            nxt = info.next_run_time
            result = last.result if last else "-"
            if unreadable:
                result += " (its stored row cannot be read here)"
            if last and last.result != "ok" and last.error:
                failures.append(f"{info.task_id}: {last.error.splitlines()[0]}")
            table.add_row(
                str(info.task_id),
                info.status + (" (paused)" if info.paused else ""),
                "-" if nxt is None else datetime.fromtimestamp(nxt, tz).strftime("%H:%M:%S"),
                "-" if not last else datetime.fromtimestamp(last.at, tz).strftime("%H:%M:%S"),
                result,
            )
        if failures:
            table.caption = "latest failures: " + "; ".join(failures[-3:])
        return table


def _live(sched: DurableScheduler) -> _View | None:
    """The live view if ``rich`` is installed; else ``None`` (plain log lines)."""
    try:
        from rich.console import Console
        from rich.live import Live
        from rich.logging import RichHandler
        from rich.table import Table
    except ImportError:
        log.info("no live view: pip install 'cadence[cli]' for one; logging runs instead")
        return None
    console = Console(stderr=True)
    root = logging.getLogger()
    root.handlers[:] = [RichHandler(console=console, show_path=False)]
    live = Live(console=console, refresh_per_second=2, transient=False)
    live.start()
    view = _View(sched, live, Table)
    view.refresh()
    return view
