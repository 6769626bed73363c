"""Hand-off to Celery, RQ, Dramatiq and arq: each slot published once with its key, a
real worker of each queue runs it, and what a re-publish does is what the docs say."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path

import pytest

from rota import FixedRate, ManualClock, Result, RunContext, Runner, Scheduler, handoff
from rota.durable import DurableScheduler
from rota.store import SQLiteStore
from tests.handoff.conftest import ROOT, Worker
from tests.helpers import wait_until

NAMES = {
    "celery": "tests.handoff.apps.report",
    "rq": "tests.handoff.apps.rq_report",
    "dramatiq": "tests.handoff.apps.dramatiq_report",
    "arq": "tests.handoff.apps.arq_report",
}
DEDUPES = {"celery": False, "rq": True, "dramatiq": False, "arq": True}
"""Whether a second publish of a key is refused by the queue (the docs' table)."""


@pytest.mark.parametrize("target", sorted(NAMES))
def test_three_nodes_hand_each_of_1000_slots_to_a_real_worker_once(
    target: str, redis_url: str, pg_dsn: str, pg_prefix: str, tmp_path: Path
) -> None:
    """20 tasks of 50 slots each, due at once, run by 3 node processes on one
    PostgreSQL, one of them SIGKILLed midway: every slot is recorded once and reaches
    the queue's own worker, with its key. Duplicates (Celery, Dramatiq) are only of
    slots the killed node had in flight: taken over and recorded by another node.
    Then 3 keys are published again, as a node killed between publish and commit
    would: arq and RQ refuse them, Celery and Dramatiq deliver them twice."""
    from rota.store import PostgresStore

    store = PostgresStore(pg_dsn, prefix=pg_prefix)
    sched = DurableScheduler(store)
    start = float(int(time.time()) - 50 * 60)  # 50 slots, every minute, all past
    call = handoff.message(target, NAMES[target], broker="tests", args=[7])
    try:
        for i in range(20):
            sched.schedule(f"job{i:02}", FixedRate(60, start=start), handoff.publish,
                           kwargs=call, end=start + 49 * 60)  # fmt: skip
        killed = f":{run_three_nodes_killing_one(sched, pg_prefix, redis_url)}:"
        history = [o for i in range(20) for o in sched.history(f"job{i:02}", 200)]
        recorded = Counter((o.task_id, o.slot) for o in history)
        assert len(recorded) == 1000
        assert set(recorded.values()) == {1}  # each slot recorded once
        assert len({o.owner for o in history}) >= 2  # the nodes shared the work
        survivors = {f"{o.task_id}@{o.slot!r}" for o in history if killed not in (o.owner or "")}
        assert len(survivors) < 1000  # the killed node had recorded runs of its own
    finally:
        store.close()
    again = [("job00", start), ("job07", start + 60), ("job19", start + 49 * 60)]
    handoff.register_broker("tests", redis_url)
    for task_id, at in again:  # a re-publish, with the slot's key
        handoff.publish(**call, run=RunContext(task_id, at, at, 0, 9, 1))
    keys = {f"{task}@{slot!r}" for task, slot in recorded}
    worker = Worker(target, redis_url, tmp_path / "runs.db")
    twice = {f"{task}@{at!r}" for task, at in again}
    try:
        worker.wait_for(1000, timeout=300)
        if not DEDUPES[target]:
            wait_until(lambda: all(worker.keys()[key] > 1 for key in twice), 60)
        time.sleep(1)  # a second message, had the queue taken one, would have run
        ran = worker.keys()
    finally:
        worker.stop()
    assert set(ran) == keys
    duplicated = {key for key, n in ran.items() if n > 1}
    if DEDUPES[target]:
        assert duplicated == set()
    else:
        assert twice <= duplicated
        assert duplicated - twice <= survivors  # in flight on the killed node, taken over


def run_three_nodes_killing_one(sched: DurableScheduler, prefix: str, redis_url: str) -> int:
    """Run the 20 tasks to their end on 3 node processes, SIGKILLing midway one that has
    recorded runs; its pid."""
    env = {**os.environ, "PYTHONPATH": str(ROOT), "ROTA_BROKER_TESTS": redis_url,
           "LEASE": "2"}  # fmt: skip
    nodes = [
        subprocess.Popen(
            [sys.executable, "-m", "tests.durable.worker", f"pg:{prefix}"],
            cwd=ROOT,
            env=env,
            stderr=subprocess.DEVNULL,
        )
        for _ in range(3)
    ]
    try:
        # about 300 runs recorded (the nodes claim the 20 tasks' slots in time order)
        wait_until(lambda: len(sched.history("job00", 200)) >= 15, 300)
        owners = " ".join(o.owner or "" for o in sched.history("job00", 200))
        victim = next(node for node in nodes if f":{node.pid}:" in owners)  # one that ran
        victim.send_signal(signal.SIGKILL)  # runs claimed, maybe published, unrecorded
        wait_until(lambda: all(sched.status(f"job{i:02}") == "done" for i in range(20)), 300)
    finally:
        for node in nodes:
            node.terminate()
        for node in nodes:
            node.wait(30)
    return victim.pid


def test_celery_over_rabbitmq_gets_each_slot_once_with_its_key(
    amqp_url: str, redis_url: str, tmp_path: Path
) -> None:
    """Celery's reference broker: 200 slots (4 tasks of 50, all past) handed off by a
    node on SQLite reach a real Celery worker consuming from RabbitMQ, each once,
    under its key; the broker's password is in no outcome."""
    handoff.register_broker("rabbit", amqp_url)
    sched = DurableScheduler(SQLiteStore(tmp_path / "rabbit.db"))
    start = float(int(time.time()) - 50 * 60)
    call = handoff.message("celery", NAMES["celery"], broker="rabbit", args=[7])
    ids = [f"rabbit{i}" for i in range(4)]
    try:
        for task_id in ids:
            sched.schedule(task_id, FixedRate(60, start=start), handoff.publish, kwargs=call,
                           end=start + 49 * 60)  # fmt: skip
        with Runner(sched):
            wait_until(lambda: all(sched.status(i) == "done" for i in ids), 120)
        history = [o for i in ids for o in sched.history(i, 100)]
    finally:
        sched.store.close()
    assert [o.result for o in history] == [Result.OK] * 200
    assert "guest:guest" not in repr(history)
    worker = Worker("celery", redis_url, tmp_path / "runs.db", broker=amqp_url)
    try:
        worker.wait_for(200, timeout=120)
        time.sleep(1)  # a second message of a key would have run
        ran = worker.keys()
    finally:
        worker.stop()
    assert ran == Counter({f"{o.task_id}@{o.slot!r}": 1 for o in history})


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
    monkeypatch.setenv("ROTA_BROKER_FROM_ENV", "redis://:pw@127.0.0.1:1/0")
    assert handoff.broker_url("from-env") == "redis://:pw@127.0.0.1:1/0"
    with pytest.raises(handoff.HandoffError, match=r"no broker 'nope' here.*ROTA_BROKER_NOPE"):
        handoff.broker_url("nope")
    with pytest.raises(ValueError, match="target must be one of celery, rq, dramatiq, arq"):
        handoff.message("kafka", "x")
    sched = DurableScheduler(SQLiteStore(tmp_path / "c.db"), clock=ManualClock(0))
    try:
        sched.schedule("j", FixedRate(60), handoff.publish,
                       kwargs=handoff.message("rq", "a.b", broker="from-env"))  # fmt: skip
        row = sched.store.get("j")
        assert row is not None
        assert row.action == "rota.handoff:publish"
        assert row.spec["kwargs"]["broker"] == "from-env"
        assert "pw" not in repr(row.spec)
    finally:
        sched.store.close()


FIRST_PUBLISHES = """
import sys, threading
from rota import RunContext, handoff
assert "celery" not in sys.modules  # its first import is the one raced
handoff.register_broker("gone", "redis://127.0.0.1:1/0")
errors, barrier = [], threading.Barrier(8)
def first(i):
    call = handoff.message("celery", "t.name", broker="gone")
    barrier.wait()
    try:
        handoff.publish(**call, run=RunContext(f"k{i}", 0.0, 0.0, 0))
    except handoff.HandoffError as exc:
        errors.append(str(exc))
threads = [threading.Thread(target=first, args=(i,)) for i in range(8)]
for t in threads: t.start()
for t in threads: t.join(60)
print(sum("client library is missing" in e for e in errors), len(errors))
"""


def test_first_publishes_from_a_pool_of_threads_all_find_the_client_library() -> None:
    """Eight pool threads publishing at once in a fresh process, Celery imported by
    none yet: each publish fails on the unreachable broker, not as "client library
    is missing" (Celery replaces its own module while it is imported; unguarded, 6
    of 15 cold starts had threads see it half made). Six processes at once."""
    command = [sys.executable, "-c", FIRST_PUBLISHES]
    procs = [
        subprocess.Popen(command, cwd=ROOT, stdout=subprocess.PIPE, text=True) for _ in range(6)
    ]
    for proc in procs:
        out, _ = proc.communicate(timeout=120)
        assert out.split() == ["0", "8"]
