"""rota.metrics.Collector in a registry of one's own, over an in-memory scheduler
(docs/web.md's block), stepped with tick: the series, their values, the label cap."""

from __future__ import annotations

import math
import re
import threading
from collections import Counter
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st
from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.parser import text_string_to_metric_families

import rota.metrics
from rota import (
    DurableScheduler,
    Event,
    EventKind,
    FixedRate,
    ManualClock,
    Result,
    RunOutcome,
    Scheduler,
)
from rota.store import MemoryStore, StoreError
from tests.web.test_mounting import WEB


def samples(registry: CollectorRegistry) -> dict[tuple[str, tuple[Any, ...]], float]:
    text = generate_latest(registry).decode()
    return {
        (s.name, tuple(sorted(s.labels.items()))): s.value
        for family in text_string_to_metric_families(text)
        for s in family.samples
    }


def test_the_documented_block_registers_the_collector() -> None:
    [block] = [b for b in re.findall(r"```python\n(.*?)```", WEB.read_text(), flags=re.DOTALL)
               if "rota.metrics" in b]  # fmt: skip
    registry = CollectorRegistry()
    scheduler = Scheduler()
    exec(block.replace("from prometheus_client import REGISTRY\n", ""),
         {"REGISTRY": registry, "scheduler": scheduler})  # fmt: skip
    assert ("rota_store_up", ()) in samples(registry)


def test_runs_gauges_and_the_job_label_cap() -> None:
    clock = ManualClock(1_000_000)
    scheduler = Scheduler(clock=clock, epoch=True)
    collector = rota.metrics.Collector(scheduler, max_jobs=2)
    registry = CollectorRegistry()
    registry.register(collector)

    def boom(at: float) -> None:
        raise RuntimeError("boom")

    scheduler.schedule("a", FixedRate(10), lambda at: None)
    scheduler.schedule("b", FixedRate(10), boom)
    scheduler.schedule("c", FixedRate(10), lambda at: None)
    scheduler.tick(clock())
    clock.advance(12)
    scheduler.tick(clock())
    got = samples(registry)
    assert got[("rota_runs_total", (("job", "a"), ("result", "ok")))] == 2
    assert got[("rota_runs_total", (("job", "b"), ("result", "failed")))] == 2
    assert got[("rota_runs_total", (("job", "_other"), ("result", "ok")))] == 2  # c
    assert got[("rota_run_lag_seconds_count", (("job", "a"),))] == 2
    assert got[("rota_run_lag_seconds_sum", (("job", "a"),))] == 2  # 0 and 2 late
    assert got[("rota_next_run_timestamp_seconds", (("job", "a"),))] == 1_000_020
    assert got[("rota_last_success_timestamp_seconds", (("job", "a"),))] == 1_000_012
    assert ("rota_last_success_timestamp_seconds", (("job", "b"),)) not in got
    assert got[("rota_jobs", (("status", "scheduled"),))] == 3  # b fails, goes on
    assert got[("rota_runs_in_flight", ())] == 0
    collector.close()
    clock.advance(10)
    scheduler.tick(clock())
    assert samples(registry)[("rota_runs_total", (("job", "a"), ("result", "ok")))] == 2


def test_runs_from_many_threads_are_each_counted_once_across_folds() -> None:
    """Runs are noted on their threads and tallied in bulk (at a scrape, or once
    ``FOLD`` wait): 4 threads x 1,500 runs cross the fold several times between
    scrapes, and every run is in the counter and both histograms exactly once."""
    clock = ManualClock(1_000_000)
    scheduler = Scheduler(clock=clock, epoch=True)
    collector = rota.metrics.Collector(scheduler)
    registry = CollectorRegistry()
    registry.register(collector)
    runs, threads = 1500, 4
    assert runs * threads > 3 * rota.metrics.FOLD
    for t in range(threads):
        for i in range(runs):
            scheduler.schedule_once(f"t{t}-{i % 10}-{i}", 0, lambda at: None)

    def drain() -> None:
        while scheduler.tick(clock()):
            pass

    workers = [threading.Thread(target=drain) for _ in range(threads)]
    for worker in workers:
        worker.start()
    seen = []
    while any(w.is_alive() for w in workers):  # scrapes while the runs are noted
        seen.append(sum(v for (name, _), v in samples(registry).items()
                        if name == "rota_runs_total"))  # fmt: skip
    for worker in workers:
        worker.join(60)
    got = samples(registry)
    total = runs * threads
    for name in ("rota_runs_total", "rota_run_lag_seconds_count",
                 "rota_run_duration_seconds_count"):  # fmt: skip
        assert sum(v for (n, _), v in got.items() if n == name) == total, name
    assert seen == sorted(seen)  # a counter never goes back
    assert got[("rota_runs_total", (("job", "_other"), ("result", "ok")))] == total - 1000


class _Down(MemoryStore):
    """A store that stopped answering (its server went away) after it was opened."""

    down = False

    def page(self, *args: Any, **kwargs: Any) -> Any:
        if self.down:
            raise StoreError("could not connect to server: Connection refused")
        return super().page(*args, **kwargs)


def test_a_store_that_stops_answering_is_a_503_and_a_gauge_not_a_crash() -> None:
    from starlette.testclient import TestClient

    import rota.web

    store = _Down()
    client = TestClient(rota.web.asgi_app(DurableScheduler(store)))
    assert client.get("/healthz").json() == {"ok": True}
    store.down = True
    answer = client.get("/healthz")
    assert answer.status_code == 503
    assert answer.json() == {"ok": False, "reason": "StoreError: could not connect to server: "
                             "Connection refused"}  # fmt: skip
    scraped = {(s.name, s.value) for f in text_string_to_metric_families(
        client.get("/metrics").text) for s in f.samples}  # fmt: skip
    assert ("rota_store_up", 0.0) in scraped
    assert ("rota_store_errors_total", 1.0) in scraped


@settings(max_examples=60, deadline=None)
@given(
    st.lists(
        st.tuples(
            st.sampled_from(["a", "b", "c", 7]),  # 7: an id that is not a str
            st.sampled_from(list(Result)),
            st.floats(-5, 400, allow_nan=False),  # lag (below 0: a clock step)
            st.one_of(st.none(), st.floats(-5, 4000, allow_nan=False)),  # duration
            st.integers(0, 2),  # slots skipped before the run
        ),
        max_size=60,
    ),
    st.integers(1, 3),
)
def test_run_counters_and_histograms_match_a_plain_count(
    runs: list[tuple[Any, Result, float, float | None, int]], cap: int
) -> None:
    """What a fold makes of any runs is what counting them one by one gives: counts by
    (job, result), bucket counts and sums by job (a value below 0 counted as 0, a run
    whose end time could not be read left out of the durations), the first ``cap`` ids
    a label each and the rest ``_other``."""
    now: list[float | None] = [0.0]

    def clock() -> float:  # a run's end time, or a clock that fails
        if now[0] is None:
            raise RuntimeError("the clock failed")
        return now[0]

    scheduler = Scheduler(clock=clock)
    collector = rota.metrics.Collector(scheduler, max_jobs=cap)
    registry = CollectorRegistry()
    registry.register(collector)
    labels: list[str] = []
    counts: Counter[tuple[str, str]] = Counter()
    buckets: Counter[tuple[str, str, float]] = Counter()  # (family, job, le) -> runs
    sums: dict[tuple[str, str], float] = {}
    skips: Counter[tuple[str, str]] = Counter()
    for task_id, result, lag, took, skipped in runs:
        started = 100.0 + lag
        outcome = RunOutcome(task_id, 100.0, result, None, 0, started, skipped)
        now[0] = None if took is None else started + took
        collector._on_outcome(Event(EventKind.RUN_SUCCEEDED, task_id, 100.0, outcome))
        job = str(task_id)
        if job not in labels and len(labels) < cap:
            labels.append(job)
        job = job if job in labels else "_other"
        counts[job, str(result)] += 1
        if skipped:
            skips[job, "misfire"] += skipped
        for family, given_value, bounds in (
            ("lag", started - 100.0, rota.metrics.LAG_BUCKETS),  # (as floats round)
            (
                "duration",
                None if now[0] is None else now[0] - started,
                rota.metrics.DURATION_BUCKETS,
            ),
        ):
            if given_value is None:
                continue
            value = max(0.0, given_value)
            sums[family, job] = sums.get((family, job), 0.0) + value
            for bound in (*bounds, math.inf):
                if value <= bound:
                    buckets[family, job, bound] += 1
    got = samples(registry)
    runs_total = {
        (dict(k)["job"], dict(k)["result"]): v for (name, k), v in got.items()
        if name == "rota_runs_total"
    }  # fmt: skip
    assert runs_total == dict(counts)
    skipped_total = {
        (dict(k)["job"], dict(k)["reason"]): v for (name, k), v in got.items()
        if name == "rota_slots_skipped_total"
    }  # fmt: skip
    assert skipped_total == dict(skips)
    for family in ("lag", "duration"):
        prefix = f"rota_run_{family}_seconds"
        found = {
            (dict(k)["job"], float(dict(k)["le"])): v for (name, k), v in got.items()
            if name == f"{prefix}_bucket" and v
        }  # fmt: skip
        assert found == {(job, le): n for (f, job, le), n in buckets.items() if f == family}
        for (f, job), total in sums.items():
            if f == family:
                assert math.isclose(got[(f"{prefix}_sum", (("job", job),))], total, abs_tol=1e-6)


def test_calendar_skips_are_counted_by_their_reason() -> None:
    """``rota_slots_skipped_total{reason="calendar"}``: the slots a task's calendar
    excluded, counted on the run after them."""
    from datetime import date, datetime
    from zoneinfo import ZoneInfo

    from rota.calendars import Calendar
    from rota.cron import Cron

    zone = ZoneInfo("America/New_York")
    clock = ManualClock(datetime(2026, 12, 24, 12, tzinfo=zone).timestamp())
    scheduler = Scheduler(clock=clock, epoch=True)
    collector = rota.metrics.Collector(scheduler)
    registry = CollectorRegistry()
    registry.register(collector)
    holiday = Calendar("c", tz="America/New_York", holidays=[date(2026, 12, 25)])
    scheduler.schedule("d", Cron("0 9 * * *", tz="America/New_York"), lambda at: None,
                       calendar=holiday)  # fmt: skip
    scheduler.tick(datetime(2026, 12, 28, 10, tzinfo=zone).timestamp())
    got = samples(registry)
    assert got[("rota_slots_skipped_total", (("job", "d"), ("reason", "calendar")))] == 3
    collector.close()
