"""Real processes on one SQLite file: SIGKILL, SIGSTOP, restarts, poison pills.

Each test schedules tasks whose action records an effect keyed by its slot
(``jobs.effect``) and a line per start, runs worker processes
(``worker.py``), injects faults, and checks at the end: no slot lost, each
run's completion recorded once, duplicate starts only for runs in flight on
processes that lost their lease.
"""

from __future__ import annotations

import random
import signal
import sqlite3
import time
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path

import pytest

from rota import DurableScheduler, Once, Status
from rota.calendars import Calendar, Window
from rota.store import SQLiteStore
from tests.durable.cluster import EFFECT, Cluster
from tests.helpers import wait_until


@pytest.fixture
def cluster(tmp_path: Path) -> Iterator[Cluster]:
    db = str(tmp_path / "rota.db")
    c = Cluster(tmp_path, db, DurableScheduler(SQLiteStore(db)))
    try:
        yield c
    finally:
        c.stop_all()


def test_sigkill_under_load_loses_nothing_and_runs_each_slot_once(cluster: Cluster) -> None:
    """Four workers, one SIGKILLed (and replaced) every 0.2-0.6 s while 200 runs fall due."""
    ids = [f"t{i:03}" for i in range(200)]
    for i, task_id in enumerate(ids):
        cluster.sched.schedule_once(task_id, 0.5 + i * 0.015, EFFECT, args=[], max_retries=0)
    env = {"LEASE": "1", "EFFECT_SLEEP": "0.02"}
    workers = [cluster.spawn(**env) for _ in range(4)]
    rng = random.Random(7)
    deadline = time.monotonic() + 4
    while time.monotonic() < deadline:
        time.sleep(rng.uniform(0.2, 0.6))
        victim = rng.randrange(len(workers))
        cluster.kill(workers[victim])
        workers[victim] = cluster.spawn(**env)
    wait_until(lambda: cluster.done(ids), timeout=30)
    cluster.check(ids)  # 0 lost, 0 duplicate completions
    assert len(cluster.completions()) == len(ids)
    duplicates = sum(n - 1 for n in cluster.starts().values())
    assert duplicates <= cluster.kills  # only runs in flight on a killed worker start twice


@pytest.mark.parametrize("step", ["claimed", "during", "completing", "committing"])
def test_sigkill_at_each_step_of_a_run(cluster: Cluster, step: str) -> None:
    """Killed after the claim, during the action, after it, or inside the completion's
    transaction: the run is taken over after the lease and its slot completes once."""
    cluster.sched.schedule_once("x", 0, EFFECT, args=[])
    env = {"LEASE": "0.5"}
    if step == "during":
        env |= {"EFFECT_SLEEP": "30"}
    else:
        env |= {"KILL_AT": step}
    victim = cluster.spawn(**env)
    if step == "during":
        wait_until(cluster.starts, timeout=10)
        cluster.kill(victim)
    else:
        assert victim.wait(10) == -signal.SIGKILL
        cluster.kills += 1
    assert cluster.sched.status("x") is Status.RUNNING  # held by a dead process
    cluster.spawn(LEASE="0.5")
    wait_until(lambda: cluster.done(["x"]), timeout=10)
    [outcome] = cluster.sched.history("x")
    assert outcome.result == "ok"
    assert cluster.effect_keys() == {f"x@{outcome.slot!r}"}
    starts = cluster.starts()
    expected = {"claimed": 1, "during": 2, "completing": 2, "committing": 2}[step]
    assert sum(starts.values()) == expected  # a claimed, unstarted run never started twice


def test_a_moved_run_taken_over_from_a_killed_node_keeps_its_slots_key(
    cluster: Cluster,
) -> None:
    """A one-off moved by its calendar to the end of a window, its node SIGKILLed mid-run:
    the node that takes it over runs it under the original slot's key, once."""
    now = time.time()
    hold = Calendar("hold", weekends=(), exclude=[
        Window(datetime.fromtimestamp(now, UTC), datetime.fromtimestamp(now + 2, UTC)),
    ])  # fmt: skip
    slot = now + 0.5
    cluster.sched.schedule("x", Once(at=slot), EFFECT, args=[], calendar=hold, on_excluded="next")
    assert cluster.sched.next_run_time("x") == pytest.approx(now + 2)
    victim = cluster.spawn(LEASE="0.5", EFFECT_SLEEP="30")
    wait_until(cluster.starts, timeout=10)
    cluster.kill(victim)
    cluster.spawn(LEASE="0.5")
    wait_until(lambda: cluster.done(["x"]), timeout=10)
    [outcome] = cluster.sched.history("x")
    assert (outcome.result, outcome.slot) == ("ok", slot)
    assert outcome.at == pytest.approx(now + 2)
    assert cluster.effect_keys() == {f"x@{slot!r}"}
    assert set(cluster.starts()) == {f"x@{slot!r}"}  # both starts under that key


def test_a_stopped_process_writes_nothing_when_it_wakes(cluster: Cluster) -> None:
    """SIGSTOP a worker mid-run for three leases: another takes over; the sleeper's
    completion, when it wakes, is fenced off."""
    cluster.sched.schedule_once("x", 0, EFFECT, args=[])
    sleeper = cluster.spawn(LEASE="0.5", EFFECT_SLEEP="0.5")
    wait_until(cluster.starts, timeout=10)
    sleeper.send_signal(signal.SIGSTOP)
    taker = cluster.spawn(LEASE="0.5")
    wait_until(lambda: cluster.done(["x"]), timeout=10)
    sleeper.send_signal(signal.SIGCONT)
    time.sleep(1.0)  # it finishes its action and tries to complete
    [outcome] = cluster.sched.history("x")
    assert outcome.owner is not None
    assert str(taker.pid) in outcome.owner
    assert sum(cluster.starts().values()) == 2


def test_a_write_lock_held_past_the_lease_takes_no_run_from_a_healthy_node(
    cluster: Cluster,
) -> None:
    """Another process holds SQLite's write lock for 2.5 leases (a long write, a VACUUM,
    a sqlite3 shell) while a node runs a 4 s action: its heartbeat waits for the lock,
    then writes a lease that runs from then; the other node waiting beside it starts
    nothing (the run started twice when the lease ran from before the wait)."""
    cluster.sched.schedule_once("long", 0, EFFECT, args=[])
    cluster.spawn(LEASE="1", EFFECT_SLEEP="4")
    wait_until(cluster.starts, timeout=10)
    cluster.spawn(LEASE="1")
    time.sleep(0.5)  # the second node is up, claiming every poll
    lock = sqlite3.connect(cluster.target, isolation_level=None)
    try:
        lock.execute("BEGIN IMMEDIATE")
        time.sleep(2.5)
        lock.execute("ROLLBACK")
    finally:
        lock.close()
    wait_until(lambda: cluster.done(["long"]), timeout=20)
    assert sum(cluster.starts().values()) == 1, cluster.starts()
    cluster.check(["long"])


def test_a_clock_stepped_back_stretches_no_lease(cluster: Cluster, tmp_path: Path) -> None:
    """Both nodes' wall clocks step back an hour, and the holder is SIGKILLed at once:
    the other node sees the step, gives the leases written before it back their
    length, and takes the run over within about a lease (it waited the hour out:
    leases are times written on the nodes' wall clocks, and heartbeats were paced
    on them too)."""
    step = tmp_path / "step"
    step.write_text("0")
    cluster.sched.schedule_once("x", 0, EFFECT, args=[])
    holder = cluster.spawn(LEASE="3", EFFECT_SLEEP="60", CLOCK_STEP_FILE=str(step))
    wait_until(cluster.starts, timeout=10)
    ready = tmp_path / "ready"
    cluster.spawn(LEASE="3", CLOCK_STEP_FILE=str(step), READY_FILE=str(ready))
    wait_until(ready.exists, timeout=60)  # the second node is up, however slow the host
    time.sleep(1.0)  # and its keeper has read its clock before the step
    step.write_text("-3600")
    cluster.kill(holder)
    began = time.monotonic()
    wait_until(lambda: cluster.done(["x"]), timeout=30)
    assert time.monotonic() - began < 15
    assert sum(cluster.starts().values()) == 2  # the killed holder's, and the taker's


def test_restart_after_ten_periods_of_downtime_applies_misfire_once(cluster: Cluster) -> None:
    """All workers down for ten periods, then two restarted (see ``cluster.downtime``)."""
    cluster.downtime()


def test_a_node_killed_mid_backfill_leaves_every_slot_run_once(cluster: Cluster) -> None:
    """See ``cluster.backfill_with_a_kill``."""
    cluster.backfill_with_a_kill()


def test_a_node_killed_with_concurrent_runs_in_flight_leaves_every_slot_run_once(
    cluster: Cluster,
) -> None:
    """See ``cluster.overlap_with_a_kill``."""
    cluster.overlap_with_a_kill()


def test_a_pool_holds_across_processes_and_a_killed_holder_frees_its_place(
    cluster: Cluster,
) -> None:
    """See ``cluster.pool_with_a_kill``."""
    cluster.pool_with_a_kill()


def test_a_rolling_deploy_leaves_a_new_action_to_the_processes_that_know_it(
    cluster: Cluster,
) -> None:
    """See ``cluster.rolling_deploy``."""
    cluster.rolling_deploy()


def test_a_poison_pill_fails_after_max_expiries_and_the_schedule_goes_on(
    cluster: Cluster,
) -> None:
    """An action that kills its process every time: after three lost leases the run
    fails (LeaseExpired), and the task's next slot is scheduled."""
    cluster.sched.schedule_at_fixed_rate("pill", 0, 3600, "tests.durable.jobs:suicide")
    deadline = time.monotonic() + 30
    while cluster.sched.history("pill") == [] and time.monotonic() < deadline:
        proc = cluster.spawn(LEASE="0.3", RUN_FOR="1.5")
        proc.wait(10)  # it claims, runs the pill, dies; or it fails the run and exits
    [outcome] = cluster.sched.history("pill")
    assert outcome.result == "failed"
    assert "the lease of task 'pill''s run at" in (outcome.error or "")  # no type: rota's own
    assert cluster.sched.status("pill") is Status.SCHEDULED
    assert cluster.sched.next_run_time("pill") == outcome.slot + 3600


def test_a_node_killed_holding_an_upstream_run_leaves_no_downstream_slot_early_twice_or_lost(
    cluster: Cluster,
) -> None:
    cluster.upstream_killed()
