"""What ``rota run`` does beside running jobs to operate a fleet: alerts that think in
streaks, and the retention rule (``docs/operations.md``).

Alerts are decided from what the store recorded, not from what this process saw:
a job's streak is its latest runs that ended for good (``ok`` or ``failed``), read
from its history, so a restart or another node counts the same runs. An alert is a
row of the store's outbox (:class:`rota.store.Ledger`) before it is delivered,
under a key that names the run it is about (the N-th failure's, the first ``ok``'s,
the long run's, the overdue run's): deciding it again (a restart, another node,
the sweep at start-up) finds the row there and sends nothing more, and a node that
died between a run's commit and the delivery leaves the row for the next look.

Everything here runs on one thread of its own (``rota-fleet``): a run only adds its
job to a set and wakes it. A delivery is bounded (:data:`TIMEOUT`), tried
:data:`TRIES` times, and logged when it fails for good; nothing here fails or delays
a run.
"""

from __future__ import annotations

import json
import logging
import math
import os
import socket
import threading
import time
import urllib.request
from typing import Any
from urllib.parse import quote

from rota import Event, Result, RunOutcome
from rota.durable import DurableScheduler, GivenBack, RunCancelled
from rota.report import overdue
from rota.store import AlertRow, redacted

from ._fleet import AlertRule, Destination, Retention
from ._jobfile import JobFile
from ._notify import run_hook
from ._ops import audited

log = logging.getLogger("rota.alerts")

TIMEOUT = 5.0
"""Seconds one delivery may take (an HTTP request, a command)."""
TRIES = 3
"""Deliveries tried at most in one round, 0.5 s then 1 s apart."""
RETRY = 2.0
"""Seconds after a round that could not deliver an alert before the next (any node's)."""
GIVE_UP = 3600.0
"""Seconds after which an alert that could not be delivered is given up (logged)."""
LOOK = 15.0
"""Seconds between two looks for overdue jobs (a read of each job with a rule)."""
PRUNE_EVERY = 300.0
"""Seconds between two passes of the retention rule."""
PRUNE_BATCH = 1000
"""Rows one pruning transaction deletes at most (see ``bench/results/operations.md``)."""
TAKE = 20.0
"""Seconds a node holds an alert it is delivering before another node may take it:
longer than a round of :data:`TRIES` (a node that died holding it delays it this long)."""


FEW = 4
"""Recorded runs of each job a pass reads first (a busy job's few since the last)."""
JUDGED = 200
"""Recorded runs read when more than :data:`FEW` ended since the last pass (more than
this: the newest count)."""


def _order(run: Any) -> tuple[float, int, int]:
    """Where a recorded run is in its job's history: as the store orders it."""
    return (float(run.slot), int(run.attempt), int(run.fence))


def node_name() -> str:
    """This process as an alert names it: ``host:pid``."""
    return f"{socket.gethostname()}:{os.getpid()}"


class Fleet:
    """Alerts and retention for the jobs of one job file on one node."""

    def __init__(self, sched: DurableScheduler, url: str | None = None) -> None:
        self._sched = sched
        self._url = url  # the dashboard this node serves, for the alerts' links
        self._node = node_name()
        self._rules: dict[str, AlertRule] = {}
        self._to: dict[str, Destination] = {}
        self._retention: Retention | None = None
        self._lock = threading.Lock()
        self._pending: set[str] = set()
        # each job's streak as this node last stored or read it: an ok run of a job
        # with none is not judged (another node's failures meanwhile are counted by it)
        self._known: dict[str, int] = {}
        self._running: dict[tuple[str, float], float] = {}  # (job, at) -> started (epoch)
        self._wake = threading.Event()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, name="rota-fleet", daemon=True)
        self._thread.start()  # it waits for :meth:`update`

    def update(self, file: JobFile) -> None:
        """The file as now loaded (start-up, reload): its rules; its retention rule and
        tokens published in the store for every process (``rota status``, ``rota
        web``); every job with a rule looked at again (what a node that died left)."""
        ledger = self._sched.store.ledger
        ledger.put_setting(
            "retention", None if file.retention is None else file.retention.to_json()
        )
        ledger.put_setting("access", [token.to_json() for token in file.access] or None)
        with self._lock:
            self._rules = {job.id: job.alert for job in file.jobs if job.alert is not None}
            self._to = dict(file.destinations)
            self._retention = file.retention
            self._pending |= set(self._rules)
        self._wake.set()

    def close(self, timeout: float = 5.0) -> None:
        """Deliver what waits (for at most ``timeout`` seconds), then stop."""
        self._stop.set()
        self._wake.set()
        if self._thread.is_alive():
            self._thread.join(timeout)

    def started(self, event: Event) -> None:
        """A listener for run-started events: the run is timed for ``running_longer``."""
        if str(event.task_id) in self._rules and event.at is not None:
            with self._lock:
                self._running[str(event.task_id), float(event.at)] = time.time()

    def outcome(self, outcome: RunOutcome) -> None:
        """``on_outcome``: the job is looked at again (off this thread)."""
        job = str(outcome.task_id)
        if job not in self._rules:
            return
        with self._lock:
            self._running.pop((job, float(outcome.at)), None)
            if outcome.result is Result.OK and self._known.get(job) == 0:
                return  # no streak to end: nothing to count, nothing to read
            if outcome.result is not Result.RETRY and not isinstance(
                outcome.error, GivenBack | RunCancelled
            ):
                self._pending.add(job)
        self._wake.set()

    # -- the thread ------------------------------------------------------------------

    def _loop(self) -> None:
        self._wake.wait()  # the first update
        # the first look for overdue jobs after one LOOK: the node runs what is due first
        looked, pruned = time.monotonic(), -math.inf
        while True:
            self._wake.clear()
            stopping = self._stop.is_set()
            now = time.monotonic()
            for work, due in (
                (self._judge, True),
                (self._long, True),
                (self._overdue, now - looked >= LOOK),
                (self._deliver, True),
                (self._prune, not stopping and now - pruned >= PRUNE_EVERY),
            ):
                if not due:
                    continue
                try:
                    work()
                except Exception:  # the store is away, a rule cannot be read: next time
                    log.exception("alerts and retention: %s failed; trying again", work.__name__)
            looked = now if now - looked >= LOOK else looked
            pruned = now if now - pruned >= PRUNE_EVERY else pruned
            if stopping:
                return
            self._wake.wait(1.0)

    def _judge(self) -> None:
        """The streak of each job that ended a run since the last pass, moved forward by
        the runs it has not counted yet, and the alerts a crossing calls for (raised
        before the streak is stored: a crash between the two raises them again under
        the same keys, nothing lost, nothing sent twice). A pass costs two reads and
        one write transaction, however many jobs it judges; a streak another node
        moved meanwhile is judged again at the next pass, from what that node stored."""
        with self._lock:
            rules = dict(self._rules)
            jobs, self._pending = sorted(j for j in self._pending if j in rules), set()
        if not jobs:
            return
        store = self._sched.store
        states = store.ledger.settings([f"streak:{job}" for job in jobs])
        recent = store.recent(jobs, FEW)
        changes: list[tuple[str, Any, dict[str, Any]]] = []
        for job in jobs:
            state = states.get(f"streak:{job}")
            last = None if state is None else tuple(state["last"])
            runs = recent.get(job, [])
            if len(runs) == FEW and (last is None or _order(runs[-1]) > last):
                runs = self._sched.history(job, JUDGED)  # more ended than a pass reads
            new = [
                o for o in reversed(runs)
                if o.result in ("ok", "failed") and (last is None or _order(o) > last)
            ]  # fmt: skip
            if new:
                count = self._walk(job, rules[job], 0 if state is None else state["count"], new)
                changes.append((f"streak:{job}", state, {"count": count, "last": _order(new[-1])}))
        swapped = store.ledger.swaps(changes)
        lost = [name for (name, _, _), done in zip(changes, swapped, strict=True) if not done]
        with self._lock:
            for name, _, stored in changes:
                self._known[name.removeprefix("streak:")] = stored["count"]
            for name in lost:
                self._known.pop(name.removeprefix("streak:"), None)
                self._pending.add(name.removeprefix("streak:"))
        if lost:
            self._wake.set()

    def _walk(self, job: str, rule: AlertRule, count: int, runs: list[Any]) -> int:
        """A streak of ``count`` moved through ``runs`` (oldest first), raising the
        alerts each crossing calls for; the streak after them."""
        for run in runs:
            before, count = count, (count + 1 if run.result == "failed" else 0)
            if before < rule.after <= count:
                self._raise(job, "failing", run, count, rule)
            if rule.pause_after is not None and before < rule.pause_after <= count:
                self._raise(job, "paused", run, count, rule)
                self._pause(job, count)
            if count == 0 and rule.recovered and before >= rule.after:
                self._raise(job, "recovered", run, before, rule)
        return count

    def _pause(self, job: str, count: int) -> None:
        """``pause_after``: the job paused, with a note saying why (in the audit log)."""
        note = f"paused by its alert rule: {count} failures in a row"
        if self._sched.pause(job):
            audited(self._sched, "pause", job, note, True, "rota:alert")
            log.warning("job %r %s", job, note)

    def _raise(self, job: str, event: str, run: Any, count: int, rule: AlertRule) -> bool:
        """Put an alert about ``run`` in the outbox; whether it is new."""
        key = f"{job}@{float(run.slot)!r}"
        return self._put(job, event, key, count, run.slot, run.error, rule)

    def _put(
        self, job: str, event: str, key: str, count: int, slot: float | None,
        error: str | None, rule: AlertRule,
    ) -> bool:  # fmt: skip
        lines = (error or "").strip().splitlines()
        body = {
            "job": job, "event": event, "streak": count, "slot": slot, "key": key,
            "error": redacted(lines[-1]) if lines else None, "node": self._node,
            "url": None if self._url is None else f"{self._url}/jobs/{quote(job, safe='')}",
            "to": list(rule.to),
        }  # fmt: skip
        new = self._sched.store.ledger.alert(AlertRow(job, event, key, body, time.time()))
        if new:
            log.info("alert %s for job %r (%s)", event, job, key)
        return new

    def _long(self) -> None:
        """This node's runs running longer than their rule allows (once per run)."""
        now = time.time()
        with self._lock:
            rules = dict(self._rules)
            running = list(self._running.items())
        for (job, at), since in running:
            rule = rules.get(job)
            longer = None if rule is None else rule.running_longer
            if rule is not None and longer is not None and now - since > longer:
                self._put(job, "running_long", f"{job}@{at!r}", 0, at, None, rule)

    def _overdue(self) -> None:
        """Jobs with a rule whose run is overdue (``rota check``'s rule): once per
        episode (the late run's time is its key)."""
        now = time.time()
        with self._lock:
            rules = dict(self._rules)
        for job, rule in rules.items():
            info = self._sched.info(job)
            if info is not None and overdue(info, now):
                key = f"{job}@{float(info.next_run_time or 0)!r}"
                self._put(job, "overdue", key, 0, info.next_run_time, None, rule)

    def _deliver(self) -> None:
        """Each alert waiting in the outbox this node can send: taken (one node at a
        time), sent to each of its destinations, marked sent. One that could not be
        sent waits :data:`RETRY` seconds for the next round (on any node), and is
        given up after :data:`GIVE_UP` (logged)."""
        ledger = self._sched.store.ledger
        for row in ledger.alerts(True, 100):
            with self._lock:
                known = {name: self._to.get(name) for name in row.body.get("to", [])}
            if any(d is None for d in known.values()):
                continue  # another node's file names it: that node sends it
            now = time.time()
            if not ledger.take(row, self._node, now + TAKE, now):
                continue
            if all(_send(d, row) for d in known.values() if d is not None):
                ledger.sent(row, time.time())
            elif now - row.at > GIVE_UP:
                log.error("alert %s of job %r given up after %gs", row.event, row.job, GIVE_UP)
                ledger.sent(row, time.time())
            else:
                ledger.release(row, time.time() + RETRY)

    def _prune(self) -> None:
        """The retention rule, in batches of :data:`PRUNE_BATCH`."""
        with self._lock:
            rule = self._retention
        if rule is None:
            return
        before = None if rule.keep is None else time.time() - rule.keep
        gone = self._sched.prune(before, batch=PRUNE_BATCH, keep_runs=rule.keep_runs)
        if gone:
            log.info("retention (%s): %d rows deleted", rule, gone)


def _send(destination: Destination, row: AlertRow) -> bool:
    """One alert to one destination, tried :data:`TRIES` times; whether it went (a
    failure is logged)."""
    body = {k: v for k, v in row.body.items() if k != "to"}
    for attempt in range(TRIES):
        try:
            if destination.command is not None:
                _run(destination.command, body)
            else:
                assert destination.webhook is not None
                _post(destination.webhook, _slack(body) if destination.format == "slack" else body)
            return True
        except Exception as exc:
            if attempt == TRIES - 1:
                log.error("alert %s of job %r to %r not delivered (%d tries; again in %gs): %s",
                          row.event, row.job, destination.name, TRIES, RETRY,
                          redacted(str(exc)))  # fmt: skip
            else:
                time.sleep(0.5 * 2**attempt)
    return False


def _slack(body: dict[str, Any]) -> dict[str, Any]:
    """A Slack-compatible body (incoming webhooks read ``text``)."""
    what = {
        "failing": f"failed {body['streak']} times in a row",
        "recovered": f"recovered after {body['streak']} failures in a row",
        "running_long": "has a run running longer than its alert rule allows",
        "paused": f"was paused after {body['streak']} failures in a row",
        "overdue": "is overdue: no node is running it",
    }[body["event"]]
    text = f"rota: job `{body['job']}` {what}"
    if body.get("error"):
        text += f": {body['error']}"
    if body.get("url"):
        text += f" <{body['url']}|open>"
    return {"text": text, **body}


def _post(url: str, body: dict[str, Any]) -> None:
    request = urllib.request.Request(
        url, data=json.dumps(body).encode(), method="POST",
        headers={"Content-Type": "application/json", "User-Agent": "rota"},
    )  # fmt: skip
    with urllib.request.urlopen(request, timeout=TIMEOUT) as answer:
        if not 200 <= answer.status < 300:
            raise RuntimeError(f"status {answer.status}")


def _run(command: str | list[str], body: dict[str, Any]) -> None:
    env = {**os.environ, "ROTA_ALERT": json.dumps(body)}
    for name, value in body.items():
        env[f"ROTA_ALERT_{name.upper()}"] = "" if value is None else str(value)
    run_hook(command, env, "the command", TIMEOUT)
