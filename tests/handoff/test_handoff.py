"""Hand-off to Celery, RQ, Dramatiq and arq: each slot published once with its key, a
real worker of each queue runs it, and what a re-publish does is what the docs say."""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from cadence import FixedRate, ManualClock, Result, RunContext, Scheduler, handoff
from cadence.durable import DurableScheduler
from cadence.store import SQLiteStore
from tests.handoff.conftest import Worker

NAMES = {
    "celery": "tests.handoff.apps.report",
    "rq": "tests.handoff.apps.rq_report",
    "dramatiq": "tests.handoff.apps.dramatiq_report",
    "arq": "tests.handoff.apps.arq_report",
}
DEDUPES = {"celery": False, "rq": True, "dramatiq": False, "arq": True}
"""Whether a second publish of a key is refused by the queue (the docs' table)."""
SLOTS = 20


@pytest.mark.parametrize("target", sorted(NAMES))
def test_every_slot_reaches_a_real_worker_once_with_its_key(
    target: str, redis_url: str, tmp_path: Path
) -> None:
    handoff.register_broker("tests", redis_url)
    clock = ManualClock(1_800_000_000)
    sched = DurableScheduler(SQLiteStore(tmp_path / "cadence.db"), clock=clock)
    try:
        sched.schedule(
            "job", FixedRate(60, start=1_800_000_000), handoff.publish, max_retries=2,
            kwargs=handoff.message(target, NAMES[target], broker="tests", args=[7, "a"]),
        )  # fmt: skip
        outcomes = []
        for k in range(SLOTS):
            outcomes += sched.tick(1_800_000_000 + 60 * k)
        assert [o.result for o in outcomes] == [Result.OK] * SLOTS, outcomes[0].error
        keys = {f"job@{1_800_000_000 + 60 * k!r}" for k in range(SLOTS)}
        assert all(str(o.value).startswith(f"{target}:") for o in outcomes)
        assert len(sched.history("job", 100)) == SLOTS  # each slot recorded once
    finally:
        sched.store.close()
    worker = Worker(target, redis_url, tmp_path / "runs.db")
    try:
        ran = worker.wait_for(SLOTS)
    finally:
        worker.stop()
    assert set(ran) == keys
    assert all(n == 1 for n in ran.values())


@pytest.mark.parametrize("target", sorted(NAMES))
def test_a_slot_published_again_with_its_key_is_deduped_where_the_queue_can(
    target: str, redis_url: str, tmp_path: Path
) -> None:
    """A node killed between publish and commit publishes the slot again, with the same
    key, once its lease is taken over: arq and RQ refuse the second message, Celery and
    Dramatiq deliver it (the worker-side recipe in docs/celery-beat.md dedupes it)."""
    handoff.register_broker("tests", redis_url)
    call = handoff.message(target, NAMES[target], broker="tests")
    for at in (1.0, 2.0, 3.0):
        first = handoff.publish(**call, run=RunContext("again", at, at, 0))
        assert handoff.publish(**call, run=RunContext("again", at, at, 0, 2, 1)) == first
    worker = Worker(target, redis_url, tmp_path / "runs.db")
    try:
        ran = worker.settle(3 if DEDUPES[target] else 6)
        if DEDUPES[target]:
            time.sleep(1)  # a second message, had the queue taken one, would have run by now
            ran = worker.keys()
    finally:
        worker.stop()
    assert set(ran) == {"again@1.0", "again@2.0", "again@3.0"}
    assert all(n == (1 if DEDUPES[target] else 2) for n in ran.values()), ran


def test_a_broker_that_cannot_be_reached_fails_the_run_and_hides_its_password(
    tmp_path: Path,
) -> None:
    import socket

    with socket.socket() as s:  # a port nothing listens on
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    handoff.register_broker("gone", f"redis://:hunter2@127.0.0.1:{port}/0")
    sched = Scheduler(clock=ManualClock(0))
    for target in sorted(NAMES):
        sched.schedule(target, FixedRate(60), handoff.publish, max_retries=1,
                       kwargs=handoff.message(target, NAMES[target], broker="gone"))  # fmt: skip
    got = sched.tick(0)
    assert [o.result for o in got] == [Result.RETRY] * 4  # retried under the task's policy
    for outcome in got:
        assert isinstance(outcome.error, handoff.HandoffError)
        assert "hunter2" not in str(outcome.error)
        assert f"redis://:***@127.0.0.1:{port}/0" in str(outcome.error)


def test_a_broker_is_named_never_stored(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("CADENCE_BROKER_FROM_ENV", "redis://:pw@127.0.0.1:1/0")
    assert handoff.broker_url("from-env") == "redis://:pw@127.0.0.1:1/0"
    with pytest.raises(handoff.HandoffError, match=r"no broker 'nope' here.*CADENCE_BROKER_NOPE"):
        handoff.broker_url("nope")
    with pytest.raises(ValueError, match="target must be one of celery, rq, dramatiq, arq"):
        handoff.message("kafka", "x")
    sched = DurableScheduler(SQLiteStore(tmp_path / "c.db"), clock=ManualClock(0))
    try:
        sched.schedule("j", FixedRate(60), handoff.publish,
                       kwargs=handoff.message("rq", "a.b", broker="from-env"))  # fmt: skip
        row = sched.store.get("j")
        assert row is not None
        assert row.action == "cadence.handoff:publish"
        assert row.spec["kwargs"]["broker"] == "from-env"
        assert "pw" not in repr(row.spec)
    finally:
        sched.store.close()
