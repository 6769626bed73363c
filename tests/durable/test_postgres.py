"""Many nodes on PostgreSQL: real processes, a real server, faults injected.

Each test runs worker processes (``worker.py``, ``pg:PREFIX``) sharing one
schedule on the server ``make test`` starts, injects a fault, and checks the
effects keyed by (task, slot) and the recorded outcomes: 0 lost, 0 duplicate
completions, duplicate starts only for runs in flight on nodes that lost
their lease.
"""

from __future__ import annotations

import itertools
import os
import random
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from rota import DurableScheduler, FixedRate
from rota.store._pgsql import FAULT_POINTS
from tests.durable.cluster import EFFECT, ROOT, Cluster
from tests.helpers import wait_until


@pytest.fixture
def nodes(pg_dsn: str, pg_prefix: str, tmp_path: Path) -> Iterator[Cluster]:
    from rota.store import PostgresStore

    store = PostgresStore(pg_dsn, prefix=pg_prefix)
    cluster = Cluster(
        tmp_path, f"pg:{pg_prefix}", DurableScheduler(store), {"ROTA_PG_DSN": pg_dsn}
    )
    try:
        yield cluster
    finally:
        cluster.stop_all()
        store.close()


def test_sigkill_of_random_nodes_under_load(nodes: Cluster) -> None:
    ids = [f"t{i:03}" for i in range(120)]
    for i, task_id in enumerate(ids):
        nodes.sched.schedule_once(task_id, 0.3 + i * 0.02, EFFECT, args=[])
    env = {"LEASE": "1", "EFFECT_SLEEP": "0.02"}
    workers = [nodes.spawn(**env) for _ in range(3)]
    rng = random.Random(11)
    deadline = time.monotonic() + 3
    while time.monotonic() < deadline:
        time.sleep(rng.uniform(0.2, 0.6))
        victim = rng.randrange(len(workers))
        nodes.kill(workers[victim])
        workers[victim] = nodes.spawn(**env)
    wait_until(lambda: nodes.done(ids), timeout=30)
    nodes.check(ids)
    assert sum(n - 1 for n in nodes.starts().values()) <= nodes.kills


def test_a_stopped_node_writes_nothing_when_it_wakes(nodes: Cluster) -> None:
    nodes.sched.schedule_once("x", 0, EFFECT, args=[])
    sleeper = nodes.spawn(LEASE="0.5", EFFECT_SLEEP="0.5")
    wait_until(lambda: bool(nodes.starts()), timeout=10)
    sleeper.send_signal(signal.SIGSTOP)  # for three leases
    taker = nodes.spawn(LEASE="0.5")
    wait_until(lambda: nodes.done(["x"]), timeout=10)
    time.sleep(1.5 - 0.5)
    sleeper.send_signal(signal.SIGCONT)
    time.sleep(1.0)  # it ends its action and tries to complete: fenced off
    [outcome] = nodes.sched.history("x")
    assert outcome.owner is not None
    assert str(taker.pid) in outcome.owner
    nodes.check(["x"])


@pytest.mark.parametrize("offset", [3600, -3600])
def test_a_node_whose_clock_is_an_hour_off_runs_nothing_early_and_steals_nothing(
    nodes: Cluster, offset: int
) -> None:
    """Leases and due times are the server's: the skewed node's clock only changes
    when it wakes up."""
    nodes.sched.schedule("r", FixedRate(0.3, delay=1.0), EFFECT, args=[])
    skewed = nodes.spawn(LEASE="1", CLOCK_OFFSET=str(offset))
    honest = nodes.spawn(LEASE="1")
    time.sleep(3.0)
    for proc in (skewed, honest):
        proc.terminate()
        proc.wait(10)
    history = nodes.sched.history("r", 100)
    assert history
    assert all(o.started is not None and o.started >= o.at - 0.01 for o in history)  # none early
    slots = sorted(o.slot for o in history)
    assert all(abs(b - a - 0.3) < 1e-6 for a, b in itertools.pairwise(slots))  # none lost
    assert all(n == 1 for n in nodes.completions().values())
    assert sum(nodes.starts().values()) == len(nodes.completions())  # no stolen lease


def test_an_immediate_server_restart_under_load_loses_nothing(nodes: Cluster) -> None:
    """``pg_ctl restart -m immediate`` (a server crash) while two nodes run: they
    reconnect with backoff; a commit whose outcome was unknown is resolved."""
    bindir, data = os.environ.get("ROTA_PG_BIN"), os.environ.get("ROTA_PG_DATA")
    if not bindir or not data:
        pytest.skip("needs the server tests/postgres_server.py starts (ROTA_PG_BIN)")
    ids = [f"t{i:03}" for i in range(80)]
    for i, task_id in enumerate(ids):
        nodes.sched.schedule_once(task_id, 0.2 + i * 0.03, EFFECT, args=[])
    for _ in range(2):
        nodes.spawn(LEASE="2", EFFECT_SLEEP="0.01")
    time.sleep(1.0)
    log = str(Path(data).parent / "server.log")  # not a pipe: the server outlives pg_ctl
    command = [f"{bindir}/pg_ctl", "-D", data, "-l", log, "-m", "immediate", "-w", "restart"]
    if os.geteuid() == 0:
        command = ["runuser", "-u", "postgres", "--", *command]
    subprocess.run(command, check=True, stdout=subprocess.DEVNULL, timeout=60)
    nodes.sched.store.close()  # this test's own connections died with the server
    wait_until(lambda: nodes.done(ids), timeout=60)
    nodes.check(ids)


def test_all_nodes_down_for_ten_periods_then_restarted(nodes: Cluster) -> None:
    """Misfire policies applied once across nodes (see ``cluster.downtime``)."""
    nodes.downtime()


def test_a_node_killed_mid_backfill_leaves_every_slot_run_once(nodes: Cluster) -> None:
    """See ``cluster.backfill_with_a_kill``."""
    nodes.backfill_with_a_kill()


def test_a_node_killed_with_concurrent_runs_in_flight_leaves_every_slot_run_once(
    nodes: Cluster,
) -> None:
    """See ``cluster.overlap_with_a_kill``."""
    nodes.overlap_with_a_kill()


def test_a_pool_holds_across_nodes_and_a_killed_holder_frees_its_place(nodes: Cluster) -> None:
    """See ``cluster.pool_with_a_kill``."""
    nodes.pool_with_a_kill()


def test_a_rolling_deploy_leaves_a_new_action_to_the_nodes_that_know_it(nodes: Cluster) -> None:
    """See ``cluster.rolling_deploy``."""
    nodes.rolling_deploy()


_DECLARE = """
import os, sys
from rota import DurableScheduler, FixedRate
from rota.store import PostgresStore
store = PostgresStore(os.environ["ROTA_PG_DSN"], prefix=sys.argv[1])
s = DurableScheduler(store)
sys.stdin.readline()  # all four start together
for k in range(5):
    s.ensure(f"job{k}", FixedRate(60), "tests.durable.jobs:effect", args=[])
store.close()
"""


def test_four_processes_declaring_the_same_startup_tasks_make_one_row_each(
    nodes: Cluster,
) -> None:
    """Four worker processes (gunicorn-style) each ``ensure`` the same five tasks at
    once: one row each, nothing replaced."""
    procs = [
        subprocess.Popen([sys.executable, "-c", _DECLARE, nodes.target[3:]], env=nodes.env,
                         cwd=ROOT, stdin=subprocess.PIPE, text=True)
        for _ in range(4)
    ]  # fmt: skip
    time.sleep(1.0)  # connected and waiting
    for proc in procs:
        assert proc.stdin is not None
        proc.stdin.write("\n")
        proc.stdin.close()
    assert [proc.wait(60) for proc in procs] == [0] * 4
    rows = nodes.sched.store.rows()
    assert sorted(r.task_id for r in rows) == [f"job{k}" for k in range(5)]
    assert all(r.version == 0 for r in rows)  # declared once, never rewritten


def test_a_node_cut_off_for_longer_than_its_lease_writes_nothing(
    nodes: Cluster, pg_dsn: str
) -> None:
    """A partition: the node's sessions are terminated and it cannot log in again for
    three leases. Another node takes its run over; the cut-off node's completion, when
    it comes, is rejected (or cannot reach the store): one outcome, the taker's."""
    import psycopg

    role = f"{nodes.target[3:]}node"
    with psycopg.connect(pg_dsn, autocommit=True) as db:
        db.execute(f"CREATE ROLE {role} LOGIN SUPERUSER")
    try:
        nodes.sched.schedule_once("x", 0, EFFECT, args=[])
        cut = nodes.spawn(
            LEASE="0.5", EFFECT_SLEEP="1.0",
            ROTA_PG_DSN=pg_dsn.replace("user=postgres", f"user={role}"),
        )  # fmt: skip
        wait_until(nodes.starts, timeout=10)
        with psycopg.connect(pg_dsn, autocommit=True) as db:
            db.execute(f"ALTER ROLE {role} NOLOGIN")
            db.execute(
                "SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE usename = %s",
                (role,),
            )
        taker = nodes.spawn(LEASE="0.5")
        wait_until(lambda: nodes.done(["x"]), timeout=10)
        time.sleep(1.5)  # the cut-off node ends its action and fails to complete
        with psycopg.connect(pg_dsn, autocommit=True) as db:
            db.execute(f"ALTER ROLE {role} LOGIN")
        time.sleep(1.0)  # connected again: anything it still sends is fenced off
        [outcome] = nodes.sched.history("x")
        assert outcome.owner is not None
        assert str(taker.pid) in outcome.owner
        nodes.check(["x"])
        assert sum(nodes.starts().values()) == 2  # its own start, and the taker's
        assert cut.poll() is None  # it lived through it
    finally:
        nodes.stop_all()
        with psycopg.connect(pg_dsn, autocommit=True) as db:
            db.execute(
                "SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE usename = %s",
                (role,),
            )
            db.execute(f"DROP ROLE IF EXISTS {role}")


def _idle_in_transaction_past(nodes: Cluster, seconds: float) -> bool:
    """Whether the server still has a session idle in a transaction for ``seconds`` (a
    frozen node's, the timeout not having ended it)."""
    import psycopg

    with psycopg.connect(nodes.env["ROTA_PG_DSN"], autocommit=True) as db:
        found = db.execute(
            "SELECT count(*) FROM pg_stat_activity WHERE state = 'idle in transaction' "
            "AND state_change < now() - make_interval(secs => %s)",
            (seconds,),
        ).fetchone()
    return found is not None and found[0] > 0


def _frozen(proc: subprocess.Popen[bytes]) -> bool:
    with open(f"/proc/{proc.pid}/stat") as stat:
        return stat.read().rsplit(")", 1)[1].split()[0] == "T"


@pytest.mark.parametrize("point", FAULT_POINTS)
def test_a_node_frozen_inside_a_transaction_stalls_nobody(nodes: Cluster, point: str) -> None:
    """A node SIGSTOPped at ``point`` of a claim's or a completion's transaction (its
    row locks held): the other node ends the frozen session once its transaction
    outlived a lease (``end_stalled``), then runs every task, the frozen node's
    included, within the lease and a few seconds, at every point, whatever the
    server's own timeouts do (``idle_timeout`` is 60 s here, far past the bound).
    A control command on a locked row answers within ``lock_timeout``. Before, the
    rows often stayed locked until the node woke (4 of 6 trials), and a freeze
    between a pipeline's results and its sync was bounded by nothing."""
    from rota.store import PostgresStore, StoreError

    ids = [f"r{i}" for i in range(10)]
    for task_id in ids:
        nodes.sched.schedule_at_fixed_rate(task_id, 0, 0.2, "tests.durable.jobs:noop")
    env = {"LEASE": "1", "PG_TIMEOUT": "60"}  # the server's own timeout out of the way
    frozen = nodes.spawn(FREEZE_AT=point, **env)
    wait_until(lambda: _frozen(frozen), timeout=20)
    began = time.time()
    nodes.spawn(**env)
    control = DurableScheduler(
        PostgresStore(nodes.env["ROTA_PG_DSN"], prefix=nodes.target[3:], lock_timeout=0.5)
    )
    start = time.monotonic()
    refused = None
    try:
        control.pause("r0")
        control.resume("r0")
    except StoreError as exc:  # locked still: a clear answer, fast
        refused = str(exc)
    finally:
        control.store.close()
    assert time.monotonic() - start < 5
    assert refused is None or "locked" in refused

    def still_locked() -> list[str]:
        return [t for t in ids if not any(o.finished > began
                                          for o in nodes.sched.history(t, 5))]  # fmt: skip

    # lease 1 s: the frozen session is ended 2 s after its transaction began (STALLED),
    # the rows it held leased are taken over a lease after; 10 s is the CI's margin
    wait_until(lambda: not still_locked(), timeout=10)
    assert time.time() - began < 10, (still_locked(), nodes.logs())
    assert _frozen(frozen)
    frozen.send_signal(signal.SIGCONT)
    nodes.stop_all()
    assert all(count == 1 for count in nodes.completions().values())


def test_statements_the_server_cancels_leak_no_connection_and_answer_fast(
    pg_dsn: str, pg_prefix: str
) -> None:
    """A row locked by another session (a frozen node, a DBA's transaction): a control
    command fails within ``lock_timeout`` with a message saying so, and its healthy
    connection is kept. Before, each cancelled statement dropped its connection
    unclosed and retried: backends piled up (4 to 48) and stayed, and the command
    waited through every retry."""
    import psycopg

    from rota.store import PostgresStore, StoreError

    app = f"rota-{pg_prefix}"
    store = PostgresStore(f"{pg_dsn} application_name={app}", prefix=pg_prefix,
                          lock_timeout=0.1)  # fmt: skip
    sched = DurableScheduler(store)
    sched.schedule_once("x", 3600, "tests.durable.jobs:noop")
    with psycopg.connect(pg_dsn, autocommit=True) as watcher, psycopg.connect(pg_dsn) as locker:
        locker.execute(f"SELECT 1 FROM {pg_prefix}tasks WHERE task_id = 'x' FOR UPDATE")
        for _ in range(10):
            start = time.monotonic()
            with pytest.raises(StoreError, match="locked by another session"):
                sched.pause("x")
            assert time.monotonic() - start < 2
        backends = watcher.execute(
            "SELECT count(*) FROM pg_stat_activity WHERE application_name = %s", (app,)
        ).fetchone()
        locker.rollback()
        assert backends is not None
        assert backends[0] <= 2, backends
        assert sched.pause("x")  # the same connection, healthy
    store.close()


def test_a_node_whose_wall_clock_steps_after_it_connected_keeps_the_servers_time(
    nodes: Cluster, tmp_path: Path
) -> None:
    """The node's wall clock steps an hour forward, then an hour back, after it
    connected: it starts no run early, takes no live lease, keeps its own run's lease,
    and runs what is due on time. (Its offset to the server was measured once, on the
    wall clock: forward, it ran a task due an hour later at once; back, its leases
    were written expired and another node started its run again; alone, a task due
    in 2 s did not run within 15 s.)"""
    step = tmp_path / "step"
    step.write_text("0")
    nodes.sched.schedule_once("long", 0, EFFECT, args=[])
    nodes.sched.schedule_once("later", 600, EFFECT, args=[])
    node = nodes.spawn(LEASE="1", EFFECT_SLEEP="4", CLOCK_STEP_FILE=str(step))
    wait_until(lambda: "long" in {key.split("@")[0] for key in nodes.starts()}, timeout=20)
    step.write_text("3600")  # forward, mid-run
    time.sleep(1.5)
    step.write_text("-3600")  # and back, still mid-run
    nodes.spawn(LEASE="1")  # another node, watching for expired leases
    wait_until(lambda: nodes.done(["long"]), timeout=20)
    assert sum(nodes.starts().values()) == 1  # "later" not started early, "long" once
    nodes.sched.schedule_once("soon", 2, EFFECT, args=[])
    nodes.kill(nodes.procs[1])  # alone again, its clock an hour back
    began = time.monotonic()
    wait_until(lambda: nodes.done(["soon"]), timeout=20)
    assert time.monotonic() - began < 8
    assert str(node.pid) in (nodes.sched.history("soon")[0].owner or "")
    assert "later" not in {key.split("@")[0] for key in nodes.starts()}


def test_the_servers_time_never_goes_back_when_it_is_measured_again(
    pg_dsn: str, pg_prefix: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A new measure of the offset (every REMEASURE s, and on each new connection)
    is half a round trip off either way; one whose reply was slow read the server's
    time as earlier than the last reading, and a run that ended after it started
    was logged "in -0.028s". Here the reply of the second measure is 60 ms slow."""
    import rota.store._postgres as module
    from rota.store import PostgresStore

    slow = {"next": False}
    real = time.monotonic

    def monotonic() -> float:
        # the reading taken right after the measure's query comes back 60 ms late
        if slow["next"]:
            slow["next"] = False
            return real() + 0.06
        return real()

    store = PostgresStore(pg_dsn, prefix=pg_prefix)
    try:
        before = store.now()
        assert before is not None
        monkeypatch.setattr(module, "REMEASURE", 0.0)
        monkeypatch.setattr(time, "monotonic", monotonic)  # the module's clock

        def execute(real_execute: Any) -> Any:
            def slow_reply(*args: Any, **kwargs: Any) -> Any:
                cursor = real_execute(*args, **kwargs)
                slow["next"] = True  # the next monotonic() is `after`
                return cursor

            return slow_reply

        db = store._db()
        monkeypatch.setattr(db, "execute", execute(db.execute))
        after = store.now()
        assert after is not None
        assert after >= before
    finally:
        store.close()


def test_a_node_killed_holding_an_upstream_run_on_postgresql(nodes: Cluster) -> None:
    """As on SQLite (``test_processes``): no downstream run before its upstream's, none
    twice, none lost."""
    nodes.upstream_killed()
