"""Hand-off under faults: a node killed between publish and commit, a broker stopped
for 10 s, a broker that accepts connections and never answers."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from rota import (
    Backoff,
    FixedRate,
    ManualClock,
    Once,
    Result,
    Runner,
    RunOutcome,
    Scheduler,
    handoff,
)  # fmt: skip
from rota.durable import DurableScheduler
from rota.store import SQLiteStore
from tests.conftest import unavailable
from tests.handoff.conftest import Worker
from tests.handoff.test_handoff import DEDUPES, NAMES
from tests.helpers import Collector, wait_until

ROOT = Path(__file__).resolve().parents[2]


def node(db: Path, redis_url: str, **env: str) -> subprocess.Popen[bytes]:
    """A durable node (``tests/durable/worker.py``) on ``db`` that knows the broker."""
    return subprocess.Popen(
        [sys.executable, "-m", "tests.durable.worker", str(db)], cwd=ROOT,
        env={**os.environ, "PYTHONPATH": str(ROOT), "ROTA_BROKER_TESTS": redis_url,
             "LEASE": "1", **env},
        stderr=subprocess.DEVNULL,
    )  # fmt: skip


@pytest.mark.parametrize("target", ["celery", "rq"])
def test_a_node_killed_between_publish_and_commit_leaves_a_republish_never_a_loss(
    target: str, redis_url: str, tmp_path: Path
) -> None:
    """The first node publishes, then dies before its completion commits (provoked:
    ``KILL_AT=completing``); the second takes the run over after the lease and
    publishes it again with the same key. One outcome is recorded; the worker runs
    the slot once where the queue dedupes by id (RQ), twice elsewhere (Celery)."""
    db = tmp_path / "rota.db"
    sched = DurableScheduler(SQLiteStore(db))
    try:
        sched.schedule("once", Once(0), handoff.publish,
                       kwargs=handoff.message(target, NAMES[target], broker="tests"))  # fmt: skip
        first = node(db, redis_url, KILL_AT="completing")
        assert first.wait(60) == -9  # killed itself right after its publish
        second = node(db, redis_url)
        try:
            wait_until(
                lambda: sched.status("once") == "done", timeout=180
            )  # generous: a loaded host
        finally:
            second.terminate()
            second.wait(30)
        (recorded,) = sched.history("once")
        key = f"once@{recorded.slot!r}"
    finally:
        sched.store.close()
    worker = Worker(target, redis_url, tmp_path / "runs.db")
    try:
        ran = worker.settle(1 if DEDUPES[target] else 2)
        if DEDUPES[target]:
            time.sleep(1)  # a second message, had the queue taken one, would have run
            ran = worker.keys()
    finally:
        worker.stop()
    assert ran == {key: 1 if DEDUPES[target] else 2}


def test_a_broker_stopped_for_ten_seconds_loses_no_slot(tmp_path: Path) -> None:
    """Publishes fail while the broker is down; the task's retry policy publishes them
    again once it is back: every slot of the outage reaches the worker, once (arq)."""
    binary = _redis_server()
    port = _free_port()
    url = f"redis://127.0.0.1:{port}/0"
    broker = _start_redis(binary, port, tmp_path)
    handoff.register_broker("flaky", url)
    sched = Scheduler(clock=time.time)
    seen = Collector()
    try:
        with Runner(sched, on_outcome=seen):
            sched.schedule(
                "tick", FixedRate(1), handoff.publish, max_retries=30,
                retry=Backoff(0.5, cap=2), kwargs=handoff.message("arq", NAMES["arq"],
                                                                  broker="flaky"),
            )  # fmt: skip
            wait_until(lambda: any(o.result is Result.OK for o in seen.outcomes), 30)
            broker.terminate()
            broker.wait(30)
            time.sleep(10)
            broker = _start_redis(binary, port, tmp_path)
            assert any(o.result is Result.RETRY for o in seen.outcomes), "no publish failed"
            wait_until(lambda: not _unpublished(seen), 180)
            sched.cancel("tick")
        assert not _unpublished(seen)  # every slot published in the end
        receipts = {str(o.value) for o in seen.outcomes if o.result is Result.OK}
        worker = Worker("arq", url, tmp_path / "runs.db")
        try:
            ran = worker.wait_for(len(receipts))
        finally:
            worker.stop()
        assert {f"arq:{key}" for key in ran} == receipts
        assert all(n == 1 for n in ran.values())
    finally:
        broker.terminate()
        broker.wait(30)


def _unpublished(seen: Collector) -> set[str]:
    """The keys of the slots that started (a first attempt) with no publish accepted
    yet (an accepted publish's value is its receipt, ``arq:<key>``)."""
    outcomes = list(seen.outcomes)
    started = {f"arq:tick@{o.at!r}" for o in outcomes if o.attempt == 0}
    return started - {str(o.value) for o in outcomes if o.result is Result.OK}


@pytest.mark.parametrize("target", sorted(NAMES))
def test_a_broker_that_never_answers_fails_the_publish_within_the_bound(
    target: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A server that accepts the connection and then says nothing: the publish gives
    up after ``handoff.TIMEOUT`` and the run is retried under the task's policy."""
    silent = socket.socket()
    silent.bind(("127.0.0.1", 0))
    silent.listen(16)
    accepted: list[socket.socket] = []
    stop = threading.Event()

    def accept() -> None:
        silent.settimeout(0.1)
        while not stop.is_set():
            try:
                accepted.append(silent.accept()[0])
            except OSError:
                continue

    thread = threading.Thread(target=accept, daemon=True)
    thread.start()
    monkeypatch.setattr(handoff, "TIMEOUT", 1.0)
    handoff.register_broker(f"silent-{target}", f"redis://127.0.0.1:{silent.getsockname()[1]}/0")
    sched = Scheduler(clock=ManualClock(0))
    sched.schedule(
        "t",
        FixedRate(60),
        handoff.publish,
        max_retries=1,
        kwargs=handoff.message(target, NAMES[target], broker=f"silent-{target}"),
    )
    got: list[RunOutcome] = []
    try:
        began = time.monotonic()
        ticking = threading.Thread(target=lambda: got.extend(sched.tick(0)), daemon=True)
        ticking.start()
        ticking.join(30)  # bounded even if the publish were not
        took = time.monotonic() - began
        assert not ticking.is_alive(), f"the publish to a silent broker hung ({target})"
        (outcome,) = got
    finally:
        stop.set()
        thread.join(5)
        for conn in accepted:
            conn.close()
        silent.close()
    assert outcome.result is Result.RETRY
    assert isinstance(outcome.error, handoff.HandoffError)
    assert took < 15, took  # bounded (the clients' own retries included), not forever


def _redis_server() -> str:
    from shutil import which

    found = which("redis-server")
    if found is None:
        unavailable("no redis-server: run the suite through make test (it installs Debian's)")
    return found


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _start_redis(binary: str, port: int, where: Path) -> subprocess.Popen[bytes]:
    """A broker that keeps what it accepted across a restart (append-only file), as a
    production Redis does."""
    proc = subprocess.Popen(
        [binary, "--bind", "127.0.0.1", "--port", str(port), "--dir", str(where),
         "--save", "", "--appendonly", "yes", "--appendfsync", "always"],
        stdout=subprocess.DEVNULL,
    )  # fmt: skip
    wait_until(lambda: _answers(port), 30)
    return proc


def _answers(port: int) -> bool:
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=1):
            return True
    except OSError:
        return False
