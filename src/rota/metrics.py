"""Prometheus metrics for a scheduler (extra ``rota[metrics]``: ``prometheus_client``).

``registry.register(rota.metrics.Collector(scheduler))`` in your own
``prometheus_client`` registry, for an in-memory :class:`~rota.Scheduler` or
a :class:`~rota.DurableScheduler`; ``rota web`` and ``rota run --web``
serve the same at ``/metrics``.

Two kinds of series (``docs/web.md`` lists them all):

- **This process's own runs**, counted as they complete (a listener on the
  scheduler): ``rota_runs_total{job, result}``,
  ``rota_run_duration_seconds{job}``, ``rota_run_lag_seconds{job}``,
  ``rota_slots_skipped_total{job, reason}``. A process that runs nothing
  (``rota web``) has none.
- **The store's state, computed at scrape time** (one listing of the tasks):
  ``rota_next_run_timestamp_seconds{job}``,
  ``rota_last_success_timestamp_seconds{job}``, ``rota_jobs{status}``,
  ``rota_job_paused{job}``, ``rota_runs_in_flight``,
  ``rota_leases{node}``, ``rota_lease_takeovers{job}``,
  ``rota_pool_size{pool}``, ``rota_pool_in_use{pool}``,
  ``rota_store_up`` and ``rota_store_errors_total``.

The label ``job`` is bounded: the first :data:`MAX_JOBS` ids (by id, or in
the order runs reported them) get a series each; the rest are folded into
``job="_other"`` (counters and histograms) or left out (per-job gauges;
``rota_jobs`` still counts every task).
"""

from __future__ import annotations

import bisect
import threading
import time
from collections import deque
from collections.abc import Iterable, Iterator
from typing import Any

from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, HistogramMetricFamily
from prometheus_client.registry import Collector as _PrometheusCollector

from rota import Event, EventKind, Result, RunOutcome, Scheduler, Status
from rota._core.types import recorded_result
from rota.observe import Source, leases_of, source
from rota.store import redacted

MAX_JOBS = 1000
"""Distinct ``job`` label values at most; the others are ``job="_other"``."""

OTHER = "_other"

FOLD = 1024
"""Runs noted at most before they are tallied without waiting for a scrape: bounds
what a process that is never scraped keeps."""

LAG_BUCKETS = (0.001, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 300)
"""Seconds: a run's lag is normally milliseconds; large values mean sleep or failover."""

DURATION_BUCKETS = (0.01, 0.05, 0.1, 0.5, 1, 5, 10, 30, 60, 300, 900, 3600)
"""Seconds, from a no-op to an hour-long job."""

_RESULTS = {result: str(result) for result in Result}
"""Each run result's label value (``str`` of an enum is a Python-level call, per run)."""


class Collector(_PrometheusCollector):
    """The metrics of ``scheduler`` for a ``prometheus_client`` registry.

    ``runs=False`` leaves out the run counters and histograms (a process that
    runs nothing: no listener is added). :meth:`close` removes the listener.
    A run costs one append on its thread (its outcome and end time); the runs
    are tallied in bulk, at a scrape or every :data:`FOLD` runs. A scrape costs
    that tally, one listing of the tasks (a store query per 10,000 on a
    durable store) plus one history read per job whose latest run did not
    succeed, the first time; a store that fails is counted
    (``rota_store_errors_total``, ``rota_store_up 0``), never raised.
    Raises ``TypeError`` for a ``scheduler`` that is not a Scheduler.
    """

    def __init__(
        self, scheduler: Scheduler | Source, *, runs: bool = True, max_jobs: int = MAX_JOBS
    ) -> None:
        self.source: Source = source(scheduler) if isinstance(scheduler, Scheduler) else scheduler
        self._scheduler = getattr(self.source, "scheduler", None)
        self._max_jobs = max_jobs
        self._labels: set[str] = set()
        self._lock = threading.Lock()
        self._store_errors = 0
        self._last_ok: dict[str, float | None] = {}
        self._runs: dict[tuple[str, str], int] = {}  # (job, result) -> runs
        self._skipped: dict[tuple[str, str], int] = {}  # (job, reason) -> slots skipped
        self._durations = _Tallies(DURATION_BUCKETS)
        self._lags = _Tallies(LAG_BUCKETS)
        self._pending: deque[tuple[RunOutcome, float | None]] = deque()
        self._clock = time.time if self._scheduler is None else self._scheduler.clock
        self._unlisten = None
        if runs and self._scheduler is not None:
            self._unlisten = self._scheduler.add_listener(
                self._on_outcome,
                EventKind.RUN_SUCCEEDED, EventKind.RUN_FAILED, EventKind.RUN_RETRIED,
            )  # fmt: skip

    def close(self) -> None:
        """Stop counting runs (the listener is removed). Idempotent."""
        if self._unlisten is not None:
            self._unlisten()
            self._unlisten = None

    def _on_outcome(self, event: Event) -> None:
        """Note one of this process's runs, and when it ended, for :meth:`_fold`. On the
        run's path, so one append: the tallies are made in bulk, at the next scrape or
        by the thread whose append makes :data:`FOLD` waiting."""
        outcome = event.outcome
        if outcome is None:  # (every kind listened to carries one)
            return
        try:
            ended: float | None = float(self._clock())
        except Exception:  # a failing clock costs a duration sample, never the run
            ended = None
        pending = self._pending
        pending.append((outcome, ended))
        if len(pending) >= FOLD:
            self._fold()

    def _fold(self) -> None:
        """Tally the runs noted since the last fold: plain counts under one lock, turned
        into series only when scraped. O(k) for k runs, one pass of few operations
        each (a fold is most of what counting a run costs). A run's ``job`` label is
        its task id, or :data:`OTHER` once :data:`MAX_JOBS` ids have one."""
        pending, labels, cap, runs = self._pending, self._labels, self._max_jobs, self._runs
        durations, lags = self._durations, self._lags
        with self._lock:
            for _ in range(len(pending)):  # appends meanwhile wait for the next fold
                outcome, ended = pending.popleft()
                # (RunOutcome's fields in order: one unpacking, not seven lookups)
                task_id, at, result, error, _, started, skipped, _, _, jitter = outcome
                job = task_id if type(task_id) is str else str(task_id)
                if job not in labels:
                    if len(labels) < cap:
                        labels.add(job)
                    else:
                        job = OTHER
                key = (job, _RESULTS[result] if error is None else recorded_result(result, error))
                runs[key] = runs.get(key, 0) + 1
                if ended is not None:
                    durations.add(job, ended - started)
                lags.add(job, started - at - jitter)  # lag, not the jitter it was given
                if skipped:
                    for reason, count in outcome.skips().items():
                        key = (job, reason)
                        self._skipped[key] = self._skipped.get(key, 0) + count

    def describe(self) -> Iterable[Any]:
        """Nothing: the series are only known at scrape time."""
        return []

    def collect(self) -> Iterator[Any]:
        """The series, this process's runs first, then the store's state."""
        yield from self._own_runs()
        yield from self._store_state()

    def _own_runs(self) -> Iterator[Any]:
        runs = CounterMetricFamily(
            "rota_runs", "Runs of this process, by job and result (ok, retry, failed, "
            "cancelled).", labels=["job", "result"],
        )  # fmt: skip
        skipped = CounterMetricFamily(
            "rota_slots_skipped", "Slots that never ran, by job and reason (misfire, "
            "overlap, deadline, calendar: what skipped them).", labels=["job", "reason"],
        )  # fmt: skip
        self._fold()
        with self._lock:
            for (job, result), count in sorted(self._runs.items()):
                runs.add_metric([job, result], count)
            for (job, reason), count in sorted(self._skipped.items()):
                skipped.add_metric([job, reason], count)
            durations = self._durations.family(
                "rota_run_duration_seconds", "How long this process's runs took."
            )
            lags = self._lags.family(
                "rota_run_lag_seconds",
                "How late this process's runs started (start minus slot).",
            )
        yield from (runs, durations, lags, skipped)

    def _store_state(self) -> Iterator[Any]:
        up = GaugeMetricFamily("rota_store_up", "1 while the store answers, else 0.")
        errors = CounterMetricFamily(
            "rota_store_errors", "Scrapes whose read of the store failed."
        )
        try:
            entries = self.source.entries()
        except Exception:  # any store failure is what this gauge says
            with self._lock:
                self._store_errors += 1
            up.add_metric([], 0)
            errors.add_metric([], self._store_errors)
            yield from (up, errors)
            return
        up.add_metric([], 1)
        errors.add_metric([], self._store_errors)
        yield from (up, errors)
        nxt = GaugeMetricFamily(
            "rota_next_run_timestamp_seconds", "When the job runs next (epoch seconds).",
            labels=["job"],
        )  # fmt: skip
        success = GaugeMetricFamily(
            "rota_last_success_timestamp_seconds",
            "When the job's last successful run finished (epoch seconds).", labels=["job"],
        )  # fmt: skip
        paused = GaugeMetricFamily("rota_job_paused", "1 if paused.", labels=["job"])
        jobs = GaugeMetricFamily(
            "rota_jobs", "Jobs by status (paused ones also as paused).", labels=["status"]
        )
        taken = GaugeMetricFamily(
            "rota_lease_takeovers",
            "Times a run of the job was taken over after its node's lease ran out.",
            labels=["job"],
        )  # fmt: skip
        counts = {str(status): 0 for status in Status} | {"paused": 0}
        in_flight = 0
        for entry in entries:
            info = entry.info
            status = str(info.status)
            counts[status] = counts.get(status, 0) + 1
            counts["paused"] += bool(info.paused)
            in_flight += status in ("running", "queued")
            job = str(info.task_id)
            if len(self._last_ok) >= self._max_jobs and job not in self._last_ok:
                continue  # past the cap: no per-job series
            if info.next_run_time is not None:
                nxt.add_metric([job], float(info.next_run_time))
            paused.add_metric([job], 1.0 if info.paused else 0.0)
            ok = self._last_success(job, entry.last)
            if ok is not None:
                success.add_metric([job], ok)
        for status, count in counts.items():
            jobs.add_metric([status], count)
        flight = GaugeMetricFamily("rota_runs_in_flight", "Runs queued or running now.")
        flight.add_metric([], in_flight)
        holding = GaugeMetricFamily("rota_leases", "Runs each node holds now.", labels=["node"])
        per_node: dict[str, int] = {}
        for lease in leases_of(entries):
            node = redacted(lease.node)
            per_node[node] = per_node.get(node, 0) + 1
            if lease.takeovers:
                taken.add_metric([lease.task_id], lease.takeovers)
        for node, count in sorted(per_node.items()):
            holding.add_metric([node], count)
        yield from (nxt, success, paused, jobs, flight, holding, taken, *self._pools())

    def _pools(self) -> tuple[GaugeMetricFamily, GaugeMetricFamily]:
        """``rota_pool_size{pool}`` and ``rota_pool_in_use{pool}``: every node's places,
        on a store (one read)."""
        size = GaugeMetricFamily(
            "rota_pool_size", "Runs a pool lets run at once.", labels=["pool"]
        )
        used = GaugeMetricFamily(
            "rota_pool_in_use", "Runs of a pool in flight now, on every node.", labels=["pool"]
        )
        for name, (places, held) in self.source.pools().items():
            size.add_metric([name], places)
            used.add_metric([name], held)
        return size, used

    def _last_success(self, job: str, last: Any) -> float | None:
        """When ``job`` last succeeded: its latest run if ok, else what was known, else
        one history read (remembered, so a failing job costs one read, not one per
        scrape)."""
        if last is not None and last.result == "ok":
            self._last_ok[job] = float(last.finished)
        elif job not in self._last_ok:
            history = self.source.history(job, 50)
            found = next((o for o in history if o.result == "ok"), None)
            self._last_ok[job] = None if found is None else float(found.finished)
        return self._last_ok[job]


class _Tallies:
    """One histogram per job, as bucket counts (not cumulative) then a sum: a value
    added is a bisection and two additions (the caller holds the lock)."""

    def __init__(self, bounds: tuple[float, ...]) -> None:
        self.bounds = bounds
        self.jobs: dict[str, list[float]] = {}  # job -> [bucket counts..., +Inf, sum]

    def add(self, job: str, value: float) -> None:
        """Count ``value`` for ``job``; a value below 0 (a clock step) counts as 0."""
        tally = self.jobs.get(job)
        if tally is None:
            tally = self.jobs[job] = [0.0] * (len(self.bounds) + 2)
        if value > 0:
            tally[bisect.bisect_left(self.bounds, value)] += 1  # le: on a bound is in it
            tally[-1] += value
        else:
            tally[0] += 1

    def family(self, name: str, documentation: str) -> HistogramMetricFamily:
        """The histograms, cumulative, as ``prometheus_client`` exposes one."""
        family = HistogramMetricFamily(name, documentation, labels=["job"])
        for job, tally in sorted(self.jobs.items()):
            cumulative, buckets = 0.0, []
            for bound, count in zip((*map(str, self.bounds), "+Inf"), tally[:-1], strict=True):
                cumulative += count
                buckets.append((bound, cumulative))
            family.add_metric([job], buckets, sum_value=tally[-1])
        return family
