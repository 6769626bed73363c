"""A hand-off carries the run's trace context to a real worker (Celery, RQ)."""

from __future__ import annotations

from typing import Any

import pytest

from rota import FixedRate, ManualClock, Scheduler


@pytest.mark.parametrize("target", ["celery", "rq"])
def test_a_hand_off_carries_the_runs_context_to_a_real_worker(
    spans: Any, target: str, redis_url: str, tmp_path: Any
) -> None:
    """The message a run publishes carries the run's span as ``traceparent`` (Celery:
    its headers; RQ: the job's meta): the worker's span is the run's child."""
    import sqlite3

    from rota import handoff
    from tests.handoff.conftest import Worker

    handoff.register_broker("traced", redis_url)
    name = {"celery": "tests.handoff.apps.report", "rq": "tests.handoff.apps.rq_report"}[target]
    call = handoff.message(target, name, broker="traced", args=[1])
    clock = ManualClock(1000.0)
    sched = Scheduler(clock=clock, epoch=True)
    sched.schedule("t", FixedRate(10, start=1000.0), handoff.publish, kwargs=call)
    sched.tick(clock())
    [span] = spans.get_finished_spans()
    assert span.attributes["rota.result"] == "ok"
    context = span.get_span_context()
    worker = Worker(target, redis_url, tmp_path / "runs.db")
    try:
        worker.wait_for(1, timeout=60)
    finally:
        worker.stop()
    with sqlite3.connect(tmp_path / "runs.db") as db:
        [(key, parent)] = db.execute("SELECT key, parent FROM traces").fetchall()
    assert key == "t@1000.0"
    assert parent.split("-")[1:3] == [f"{context.trace_id:032x}", f"{context.span_id:016x}"]
