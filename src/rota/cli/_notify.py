"""Failures that reach someone: a job's ``on_failure`` command and its ``ping`` URL.

Both are delivered off the runs' path, by two threads of their own (one for pings,
in the order the runs reported them, one for ``on_failure`` commands), each
delivery bounded in time (:data:`TIMEOUT`), tried :data:`TRIES` times, and logged
when it cannot be made. Nothing a notification does (hang, fail, refuse) delays or
fails a run: the runs only queue work here, and at most :data:`PENDING` deliveries
wait (past that, new ones are dropped, and said so).
"""

from __future__ import annotations

import contextlib
import logging
import os
import queue
import subprocess
import threading
import time
import urllib.request
from collections.abc import Callable, Iterable
from typing import Any

from rota import Event, Result, RunOutcome
from rota.durable import DurableScheduler, GivenBack, RunCancelled

from ._jobfile import Job

log = logging.getLogger("rota.notify")

TIMEOUT = 10.0
"""Seconds one delivery may take (an HTTP request, an ``on_failure`` command)."""
TRIES = 3
"""Deliveries tried at most, 1 s then 2 s apart."""
PENDING = 1000
"""Deliveries that may wait, per kind; more are dropped (logged)."""


class Notifier:
    """Sends the pings and runs the ``on_failure`` commands of the jobs it was given."""

    def __init__(self, sched: DurableScheduler) -> None:
        self._sched = sched
        self._jobs: dict[str, Job] = {}
        self._queues = {kind: queue.Queue[Callable[[], None] | None](PENDING)
                        for kind in ("ping", "on_failure")}  # fmt: skip
        self._threads = [
            threading.Thread(target=self._deliver, args=(q,), name=f"rota-{kind}",
                             daemon=True)
            for kind, q in self._queues.items()
        ]  # fmt: skip
        for thread in self._threads:
            thread.start()

    def update(self, jobs: Iterable[Job]) -> None:
        """The jobs as the file now declares them (at start-up and on each reload)."""
        self._jobs = {job.id: job for job in jobs if job.ping or job.on_failure}

    def started(self, event: Event) -> None:
        """A listener for run-started events: ``GET URL/start``."""
        job = self._jobs.get(str(event.task_id))
        if job is not None and job.ping:
            url = job.ping.rstrip("/") + "/start"
            self._queue("ping", lambda: _get(url))

    def outcome(self, outcome: RunOutcome) -> None:
        """``on_outcome``: ``GET URL`` for a success, ``GET URL/fail`` and the
        ``on_failure`` command for a run that failed for good (not one its node
        gave back, nor one ended because its job was cancelled)."""
        job = self._jobs.get(str(outcome.task_id))
        if job is None or outcome.result is Result.RETRY:
            return
        if isinstance(outcome.error, GivenBack | RunCancelled):
            return
        failed = outcome.result is Result.FAILED
        if job.ping:
            url = job.ping.rstrip("/") + ("/fail" if failed else "")
            self._queue("ping", lambda: _get(url))
        if failed and job.on_failure:
            command = job.on_failure
            self._queue("on_failure", lambda: self._on_failure(command, outcome))

    def close(self, timeout: float = 5.0) -> None:
        """Deliver what waits, for at most ``timeout`` seconds, then stop."""
        for q in self._queues.values():
            with contextlib.suppress(queue.Full):
                q.put_nowait(None)
        deadline = time.monotonic() + timeout
        for thread in self._threads:
            thread.join(max(0.0, deadline - time.monotonic()))

    def _queue(self, kind: str, delivery: Callable[[], None]) -> None:
        try:
            self._queues[kind].put_nowait(delivery)
        except queue.Full:
            log.error("%d %s deliveries wait already: one more dropped", PENDING, kind)

    def _deliver(self, q: queue.Queue[Callable[[], None] | None]) -> None:
        while (delivery := q.get()) is not None:
            for attempt in range(TRIES):
                try:
                    delivery()
                    break
                except Exception as exc:
                    if attempt == TRIES - 1:
                        log.error("a notification could not be delivered (%d tries): %s",
                                  TRIES, exc)  # fmt: skip
                    else:
                        time.sleep(2**attempt)

    def _on_failure(self, command: str | list[str], outcome: RunOutcome) -> None:
        """Run the job's ``on_failure`` with the run's facts and ``ROTA_ERROR``."""
        slot = _slot(self._sched, outcome)
        error = str(outcome.error).strip().splitlines() if outcome.error else []
        env = {
            **os.environ,
            "ROTA_TASK_ID": str(outcome.task_id),
            "ROTA_SLOT": repr(float(slot)),
            "ROTA_ATTEMPT": str(outcome.attempt),
            "ROTA_KEY": f"{outcome.task_id}@{float(slot)!r}",
            "ROTA_ERROR": error[0] if error else "failed",
        }
        run_hook(command, env, f"on_failure of job {outcome.task_id!r}")


def run_hook(
    command: str | list[str], env: dict[str, str], what: str, timeout: float = TIMEOUT
) -> None:
    """Run a notification's command (argv list, or a string for the shell) with ``env``,
    for at most ``timeout`` seconds, its output discarded; ``RuntimeError`` naming
    ``what`` if it exits non-zero (``TimeoutExpired`` if it runs too long)."""
    done = subprocess.run(
        command, shell=isinstance(command, str), env=env, timeout=timeout,
        stdin=subprocess.DEVNULL, capture_output=True, check=False,
    )  # fmt: skip
    if done.returncode != 0:
        raise RuntimeError(f"{what} exited {done.returncode}")


def _slot(sched: DurableScheduler, outcome: RunOutcome) -> Any:
    """The slot of a reported run (its retries have their own times): as recorded."""
    for record in sched.history(str(outcome.task_id), 5):
        if record.at == outcome.at and record.attempt == outcome.attempt:
            return record.slot
    return outcome.at


def _get(url: str) -> None:
    """One ``GET``; an error for a status other than 2xx or no answer in time."""
    with urllib.request.urlopen(url, timeout=TIMEOUT) as answer:
        if not 200 <= answer.status < 300:
            raise RuntimeError(f"GET {url}: status {answer.status}")
